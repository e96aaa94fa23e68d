// Runs everywhere (no `gpu` label): status conversion, the shape arithmetic
// behind the cuBLAS/cuDNN calls, and what the CUDA backend answers on a
// machine without a GPU or driver (this project's build machines and CI).
#include <filesystem>
#include <string>

#include "gmock/gmock.h"
#include "graph/text_format.h"
#include "gtest/gtest.h"
#include "worker/cuda/cuda_device.h"
#include "worker/cuda/cuda_profiler.h"
#include "worker/cuda/cuda_status.h"
#include "worker/cuda/internal/op_geometry.h"
#include "worker/cuda/nccl_bench.h"

namespace braid::worker {
namespace {

using cuda_internal::BinaryPlan;
using cuda_internal::GemmPlan;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(CudaStatusTest, RuntimeErrorsKeepTheirReasonAndPickACode) {
  EXPECT_TRUE(CudaStatus(cudaSuccess, "x").ok());
  absl::Status oom = CudaStatus(cudaErrorMemoryAllocation, "cudaMalloc 64 bytes");
  EXPECT_EQ(oom.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(std::string(oom.message()),
            "cudaMalloc 64 bytes: cudaErrorMemoryAllocation: out of memory");
  EXPECT_EQ(CudaStatus(cudaErrorInsufficientDriver, "init").code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(CudaStatus(cudaErrorNoDevice, "init").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(CudaStatus(cudaErrorInvalidValue, "memcpy").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CudaStatus(cudaErrorIllegalAddress, "kernel").code(), absl::StatusCode::kInternal);
}

TEST(CudaStatusTest, LibraryErrors) {
  EXPECT_TRUE(CublasStatus(CUBLAS_STATUS_SUCCESS, "x").ok());
  absl::Status b = CublasStatus(CUBLAS_STATUS_NOT_SUPPORTED, "cublasGemmEx");
  EXPECT_EQ(b.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(b.message()), HasSubstr("cublasGemmEx: CUBLAS_STATUS_NOT_SUPPORTED"));
  EXPECT_EQ(CublasStatusCode(CUBLAS_STATUS_ALLOC_FAILED), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(CublasStatusCode(CUBLAS_STATUS_INVALID_VALUE), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CublasStatusCode(CUBLAS_STATUS_EXECUTION_FAILED), absl::StatusCode::kInternal);

  EXPECT_TRUE(CudnnStatus(CUDNN_STATUS_SUCCESS, "x").ok());
  absl::Status d = CudnnStatus(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "cudnnOpTensor");
  EXPECT_EQ(d.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(d.message()), HasSubstr("cudnnOpTensor: cudnnStatus 2002: "));
  EXPECT_THAT(std::string(d.message()),
              HasSubstr(cudnnGetErrorString(CUDNN_STATUS_BAD_PARAM_NULL_POINTER)));
  EXPECT_EQ(CudnnStatusCode(CUDNN_STATUS_NOT_SUPPORTED_SHAPE), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(CudnnStatusCode(CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(CudnnStatusCode(CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(CudnnStatusCode(CUDNN_STATUS_EXECUTION_FAILED), absl::StatusCode::kInternal);

  EXPECT_TRUE(NcclStatus(ncclSuccess, "x").ok());
  absl::Status n = NcclStatus(ncclInvalidArgument, "ncclAllReduce");
  EXPECT_EQ(n.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(n.message()), HasSubstr(ncclGetErrorString(ncclInvalidArgument)));
  EXPECT_EQ(NcclStatusCode(ncclRemoteError), absl::StatusCode::kUnavailable);
  EXPECT_EQ(NcclStatusCode(ncclInvalidUsage), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(NcclStatusCode(ncclUnhandledCudaError), absl::StatusCode::kInternal);
}

TEST(OpGeometryTest, MatMulFoldsABatchedLhsIntoRows) {
  absl::StatusOr<GemmPlan> p = cuda_internal::PlanMatMul({8, 128, 64}, {64, 32}, false, false);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->m, 8 * 128);
  EXPECT_EQ(p->n, 32);
  EXPECT_EQ(p->k, 64);
  EXPECT_EQ(p->batch, 1);
  EXPECT_EQ(p->lda, 64);
  EXPECT_EQ(p->ldb, 32);
  EXPECT_THAT(p->out_shape, ElementsAre(8, 128, 32));
}

TEST(OpGeometryTest, MatMulBatchesTransposesAndBroadcasts) {
  // The backward dB = A^T dY of a batched A cannot fold: strided batches.
  absl::StatusOr<GemmPlan> t = cuda_internal::PlanMatMul({4, 16, 8}, {4, 16, 32}, true, false);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->m, 8);
  EXPECT_EQ(t->k, 16);
  EXPECT_EQ(t->n, 32);
  EXPECT_EQ(t->batch, 4);
  EXPECT_EQ(t->stride_a, 8 * 16);
  EXPECT_EQ(t->stride_b, 16 * 32);
  EXPECT_EQ(t->stride_c, 8 * 32);
  EXPECT_EQ(t->lda, 8);
  EXPECT_THAT(t->out_shape, ElementsAre(4, 8, 32));
  // transB: B is [N, K] in memory.
  absl::StatusOr<GemmPlan> tb = cuda_internal::PlanMatMul({16, 64}, {32, 64}, false, true);
  ASSERT_TRUE(tb.ok());
  EXPECT_EQ(tb->n, 32);
  EXPECT_EQ(tb->ldb, 64);
  // A shared 2-D A against batched B.
  absl::StatusOr<GemmPlan> sa = cuda_internal::PlanMatMul({16, 64}, {3, 64, 8}, false, false);
  ASSERT_TRUE(sa.ok());
  EXPECT_EQ(sa->batch, 3);
  EXPECT_EQ(sa->stride_a, 0);
  EXPECT_THAT(sa->out_shape, ElementsAre(3, 16, 8));
  // Vectors are promoted and their unit dims dropped, as numpy does.
  absl::StatusOr<GemmPlan> mv = cuda_internal::PlanMatMul({16, 64}, {64}, false, false);
  ASSERT_TRUE(mv.ok());
  EXPECT_EQ(mv->n, 1);
  EXPECT_THAT(mv->out_shape, ElementsAre(16));
}

TEST(OpGeometryTest, MatMulRejects) {
  absl::StatusOr<GemmPlan> k = cuda_internal::PlanMatMul({16, 64}, {63, 8}, false, false);
  EXPECT_EQ(k.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(k.status().message()), HasSubstr("gives K=64"));
  absl::StatusOr<GemmPlan> partial =
      cuda_internal::PlanMatMul({2, 1, 4, 8}, {1, 3, 8, 4}, false, false);
  EXPECT_EQ(partial.status().code(), absl::StatusCode::kUnimplemented);
}

TEST(OpGeometryTest, BinaryBroadcastMergesDims) {
  // A per-channel bias: [N,C,H,W] + [C,1,1] -> full [2, 3, 20] with B [1, 3, 1].
  absl::StatusOr<BinaryPlan> p = cuda_internal::PlanBinary({2, 3, 4, 5}, {3, 1, 1}, {2, 3, 4, 5});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(p->swapped);
  EXPECT_THAT(p->c_dims, ElementsAre(1, 2, 3, 20));
  EXPECT_THAT(p->b_dims, ElementsAre(1, 1, 3, 1));
  absl::StatusOr<BinaryPlan> s = cuda_internal::PlanBinary({8}, {4, 8}, {4, 8});
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->swapped);
  EXPECT_THAT(s->c_dims, ElementsAre(1, 1, 4, 8));
  EXPECT_THAT(s->b_dims, ElementsAre(1, 1, 1, 8));
  absl::StatusOr<BinaryPlan> same = cuda_internal::PlanBinary({4, 8}, {4, 8}, {4, 8});
  ASSERT_TRUE(same.ok());
  EXPECT_THAT(same->c_dims, ElementsAre(1, 1, 1, 32));
  EXPECT_EQ(cuda_internal::PlanBinary({4, 1}, {1, 8}, {4, 8}).status().code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_EQ(cuda_internal::PlanBinary({4, 3}, {4, 8}, {4, 8}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cuda_internal::PlanBinary({4, 8}, {4, 8}, {4, 9}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(OpGeometryTest, ReducePlansAndAxes) {
  absl::StatusOr<cuda_internal::ReducePlan> p =
      cuda_internal::PlanReduce({2, 3, 4, 5}, {2, 1, 1, 5}, 8);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->full_dims, ElementsAre(1, 2, 12, 5));
  EXPECT_THAT(p->reduced_dims, ElementsAre(1, 2, 1, 5));
  EXPECT_EQ(cuda_internal::PlanReduce({2, 3}, {2, 2}, 8).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Alternating kept/reduced dims beyond the limit.
  EXPECT_EQ(cuda_internal::PlanReduce({2, 3, 2, 3, 2, 3}, {2, 1, 2, 1, 2, 1}, 5).status().code(),
            absl::StatusCode::kUnimplemented);

  graph::Op op;
  EXPECT_THAT(cuda_internal::ReduceAxes(op, {2, 3, 4}, {2, 4}), ElementsAre(1));
  EXPECT_THAT(cuda_internal::ReduceAxes(op, {2, 3, 4}, {2, 1, 4}), ElementsAre(1));
  EXPECT_THAT(cuda_internal::ReduceAxes(op, {2, 3, 4}, {}), ElementsAre(0, 1, 2));
  op.attrs["axes"] = std::vector<int64_t>{-1};
  EXPECT_THAT(cuda_internal::ReduceAxes(op, {2, 3, 4}, {2, 3}), ElementsAre(2));
}

TEST(OpGeometryTest, SamePaddingAndSymmetry) {
  graph::Op op;
  op.attrs["auto_pad"] = std::string("SAME_UPPER");
  // 7 -> 4 with a 3-wide window at stride 2 pads 2 (1 each side); 8 -> 4
  // pads 1, at the end for SAME_UPPER.
  EXPECT_THAT(cuda_internal::ResolvePads(op, {7}, {4}, {3}, {2}, {1}), ElementsAre(1, 1));
  EXPECT_THAT(cuda_internal::ResolvePads(op, {8}, {4}, {3}, {2}, {1}), ElementsAre(0, 1));
  EXPECT_FALSE(cuda_internal::SymmetricPads({0, 1}).has_value());
  EXPECT_THAT(*cuda_internal::SymmetricPads({1, 2, 1, 2}), ElementsAre(1, 2));
}

// The rest is what a GPU-less machine answers; with a GPU the gpu-labelled
// test covers the same calls for real.
bool HasGpu() { return FindCudaDevice(0).ok(); }

TEST(CudaNoDeviceTest, DiscoveryFailsWithTheRuntimesReason) {
  if (HasGpu()) GTEST_SKIP() << "a GPU is present; cuda_gpu_test covers discovery";
  absl::StatusOr<CudaDeviceInfo> d = FindCudaDevice(0);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(d.status().message()), HasSubstr("cuda: no usable device: cudaError"));
  EXPECT_EQ(CudaDeviceCount().status().code(), absl::StatusCode::kFailedPrecondition);
}

constexpr char kOps[] = R"(graph "ops"
tensor a f32[16,32] input
tensor m f32[32,8] parameter
tensor mm f32[16,8] activation
tensor r f32[16,8] activation
op matmul MatMul (a, m) -> (mm)
op relu Relu (mm) -> (r)
)";

TEST(CudaNoDeviceTest, ProfilerAnswersFailedPreconditionNotACrash) {
  if (HasGpu()) GTEST_SKIP() << "a GPU is present; cuda_gpu_test profiles for real";
  absl::StatusOr<graph::Graph> g = graph::ParseText(kOps);
  ASSERT_TRUE(g.ok()) << g.status();
  CudaProfiler profiler;
  for (graph::OpId id : {0, 1}) {
    absl::StatusOr<OpProfile> p = profiler.ProfileOp(*g, id);
    EXPECT_EQ(p.status().code(), absl::StatusCode::kFailedPrecondition) << p.status();
    EXPECT_THAT(std::string(p.status().message()),
                HasSubstr("cuda profiler: cuda: no usable device"));
  }
  EXPECT_EQ(profiler.DeviceKind().status().code(), absl::StatusCode::kFailedPrecondition);
  // Bad op ids are the caller's error, device or not.
  EXPECT_EQ(profiler.ProfileOp(*g, 7).status().code(), absl::StatusCode::kInvalidArgument);

  std::filesystem::path db = std::filesystem::path(::testing::TempDir()) / "cuda_no_device.db";
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(db.string() + suffix);
  auto store = costmodel::ProfileStore::Open(db.string());
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<ProfileGraphReport> r = ProfileGraphCuda(*g, **store);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*store)->Generation(), 0);  // nothing written
}

// Fused groups: an elementwise group becomes an NVRTC program, a GEMM with
// its epilogue a cuBLASLt call (both need the device); a convolution with
// its epilogue is refused up front, device or not.
TEST(CudaNoDeviceTest, FusedGroupsNeedTheDeviceOrAreUnimplemented) {
  if (HasGpu()) GTEST_SKIP() << "a GPU is present";
  absl::StatusOr<graph::Graph> g = graph::ParseText(R"(graph "ew"
tensor x f32[16,8] input
tensor b f32[8] parameter
tensor y f32[16,8] activation
tensor z f32[16,8] activation
op add Add (x, b) -> (y)
op relu Relu (y) -> (z)
output z
)");
  ASSERT_TRUE(g.ok()) << g.status();
  CudaProfiler profiler;
  const std::vector<graph::OpId> ew = {0, 1};
  EXPECT_EQ(profiler.ProfileFused(*g, ew).status().code(), absl::StatusCode::kFailedPrecondition);
  // MatMul + ReLU is cublasLtMatmul with the RELU epilogue: it needs the device.
  absl::StatusOr<graph::Graph> mm = graph::ParseText(kOps);
  ASSERT_TRUE(mm.ok());
  const std::vector<graph::OpId> gemm = {0, 1};
  EXPECT_EQ(profiler.ProfileFused(*mm, gemm).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // A convolution with its epilogue has no braid CUDA kernel yet.
  absl::StatusOr<graph::Graph> conv = graph::ParseText(R"(graph "conv"
tensor x f32[2,4,8,8] input
tensor w f32[4,4,3,3] parameter
tensor c f32[2,4,8,8] activation
tensor r f32[2,4,8,8] activation
op conv Conv (x, w) -> (c) {pads=[1,1,1,1]}
op relu Relu (c) -> (r)
output r
)");
  ASSERT_TRUE(conv.ok()) << conv.status();
  absl::StatusOr<OpProfile> p = profiler.ProfileFused(*conv, gemm);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kUnimplemented) << p.status();
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("cuDNN"));
}

TEST(CudaProfilerTest, SupportsTheCoveredTypes) {
  for (const char* t : {"MatMul",
                        "Gemm",
                        "Conv",
                        "ConvGradData",
                        "ConvGradFilter",
                        "Relu",
                        "ReluGrad",
                        "Gelu",
                        "GeluGrad",
                        "Add",
                        "Sub",
                        "Mul",
                        "Sigmoid",
                        "Tanh",
                        "Softmax",
                        "SoftmaxGrad",
                        "BatchNormalization",
                        "BatchNormalizationGrad",
                        "MaxPool",
                        "MaxPoolGrad",
                        "AveragePool",
                        "AveragePoolGrad",
                        "ReduceSum",
                        "ReduceMean",
                        "LayerNormalization",
                        "LayerNormalizationGrad",
                        "GlobalAveragePool",
                        "Transpose",
                        "Concat",
                        "Split",
                        "Dropout",
                        "DropoutGrad",
                        "SgdMomentumUpdate",
                        "AdamUpdate"}) {
    EXPECT_TRUE(CudaProfiler::Supports(t)) << t;
  }
  // Views: nothing to launch on a contiguous tensor.
  EXPECT_FALSE(CudaProfiler::Supports("Reshape"));
  EXPECT_FALSE(CudaProfiler::Supports("FrobnicateGrad"));
  EXPECT_FALSE(CudaProfiler::Supports("AllReduce"));
  EXPECT_FALSE(CudaProfiler::Supports("LSTM"));
}

TEST(NcclBenchTest, MoreRanksThanDevicesFailsBeforeSpawning) {
  absl::StatusOr<int> n = CudaDeviceCount();
  NcclBenchOptions o;
  o.ranks = n.ok() ? *n + 1 : 2;
  o.sizes = {4096 * o.ranks};
  o.rank_binary = "/nonexistent/braid-nccl-rank";  // never reached
  absl::StatusOr<std::vector<CollectiveMeasurement>> m = RunNcclBench(o, nullptr);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kFailedPrecondition) << m.status();
  if (n.ok()) {
    EXPECT_THAT(std::string(m.status().message()),
                HasSubstr(absl::StrCat("this machine has ", *n)));
  } else {
    EXPECT_THAT(std::string(m.status().message()),
                HasSubstr("ranks need as many GPUs; cuda: no usable device"));
  }
}

TEST(NcclBenchTest, RejectsBadOptionsFirst) {
  NcclBenchOptions o;
  o.ranks = 1;
  EXPECT_EQ(RunNcclBench(o, nullptr).status().code(), absl::StatusCode::kInvalidArgument);
  o.ranks = 2;
  o.sizes = {4100};
  absl::StatusOr<std::vector<CollectiveMeasurement>> m = RunNcclBench(o, nullptr);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(m.status().message()),
              HasSubstr("size 4100 is not a positive multiple of 4 * ranks = 8"));
  o.sizes = {4096};
  o.collectives = {costmodel::Collective::kSendRecv};
  EXPECT_THAT(std::string(RunNcclBench(o, nullptr).status().message()), HasSubstr("SendRecv"));
  EXPECT_THAT(std::string(RunNcclBench(o, nullptr).status().message()), Not(HasSubstr("GPUs")));
}

}  // namespace
}  // namespace braid::worker
