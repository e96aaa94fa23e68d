// Source generation and NVRTC compilation of the fused elementwise kernels,
// on any machine: NVRTC needs no GPU. Running them is gpu_test.cc's job.
#include "kernels/cuda/ew_kernel.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/ew_codegen.h"
#include "kernels/cuda/internal/test_programs.h"
#include "kernels/cuda/timing.h"

namespace braid::kernels::cuda {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

EwProgram ReductionProgram() {
  EwProgram p;  // y = relu(x + bias) * scale; sum over rows, mean over cols, max of all
  p.shape = {64, 1000};
  p.inputs = {{64, 1000}, {1000}, {64, 1}};
  p.instrs = {{EwCode::kAdd, 0, 1}, {EwCode::kRelu, 3}, {EwCode::kMul, 4, 2}};
  p.outputs = {{5}, {5, ReduceKind::kSum, {0}}, {5, ReduceKind::kMean, {1}}, {5, ReduceKind::kMax, {0, 1}}};
  return p;
}

TEST(EwCodegenTest, EveryCodeHasAFormulaAndAppearsInTheSource) {
  const EwProgram p = internal::AllCodesProgram({4, 8});
  absl::StatusOr<std::string> src = GenerateEwSource(p);
  ASSERT_TRUE(src.ok()) << src.status();
  for (int c = 0; c < static_cast<int>(EwCode::kCount); ++c) {
    const EwCode code = static_cast<EwCode>(c);
    EXPECT_FALSE(EwCudaFormula(code).empty()) << EwName(code);
    EXPECT_THAT(*src, HasSubstr(absl::StrCat("  // ", std::string(EwName(code)), "\n"))) << EwName(code);
  }
  EXPECT_THAT(*src,
              HasSubstr(absl::StrCat("extern \"C\" __global__ void __launch_bounds__(256) ", kEwKernelName)));
  // No reductions: no init/finalize kernels.
  EXPECT_THAT(*src, Not(HasSubstr(kEwInitKernelName)));
  EXPECT_THAT(*src, Not(HasSubstr(kEwFinalizeKernelName)));
}

TEST(EwCodegenTest, ParametersAreExactFloatBits) {
  EwProgram p;
  p.shape = {16};
  p.inputs = {{16}};
  p.instrs = {{EwCode::kClip, 0, -1, -1, -0.75f, 1.25f}};
  p.outputs = {{1}};
  absl::StatusOr<std::string> src = GenerateEwSource(p);
  ASSERT_TRUE(src.ok()) << src.status();
  EXPECT_THAT(*src, HasSubstr("const float p0 = __uint_as_float(0xbf400000u);"));  // -0.75
  EXPECT_THAT(*src, HasSubstr("const float p1 = __uint_as_float(0x3fa00000u);"));  // 1.25
}

TEST(EwCodegenTest, MergesDimsAndIndexesBroadcastInputsByStride) {
  EwProgram p;
  p.shape = {2, 3, 1, 4};
  p.inputs = {{2, 3, 1, 4}, {4}, {2, 1, 1, 1}};
  p.instrs = {{EwCode::kAdd, 0, 1}, {EwCode::kMul, 3, 2}};
  p.outputs = {{4}};
  absl::StatusOr<std::string> src = GenerateEwSource(p);
  ASSERT_TRUE(src.ok()) << src.status();
  // Merged space: [2, 3, 4] (the size-1 dim dropped; no two neighbours share
  // a pattern): the dense input reads at i, the others by coordinate.
  EXPECT_THAT(*src, HasSubstr("const float r0 = in0[i];"));
  EXPECT_THAT(*src, HasSubstr("const float r1 = in1[c2];"));
  EXPECT_THAT(*src, HasSubstr("const float r2 = in2[c0];"));
  EXPECT_THAT(*src, HasSubstr("out0[i] = r4;"));
  EXPECT_THAT(*src, HasSubstr("typedef int braid_idx;"));

  // Same broadcast pattern on dims 0 and 1: merged into one of size 6.
  p.inputs = {{2, 3, 1, 4}, {4}, {4}};
  src = GenerateEwSource(p);
  ASSERT_TRUE(src.ok()) << src.status();
  // Only the inner coordinate is read: the outer one is not computed.
  EXPECT_THAT(*src, HasSubstr("const braid_idx c1 = rem % 4;\n"));
  EXPECT_THAT(*src, Not(HasSubstr("c0")));
  EXPECT_THAT(*src, HasSubstr("const float r2 = in2[c1];"));
}

TEST(EwCodegenTest, ReductionsGetInitAndFinalizeKernels) {
  absl::StatusOr<std::string> src = GenerateEwSource(ReductionProgram());
  ASSERT_TRUE(src.ok()) << src.status();
  EXPECT_THAT(*src, HasSubstr(kEwInitKernelName));
  EXPECT_THAT(*src, HasSubstr(kEwFinalizeKernelName));
  EXPECT_THAT(*src, HasSubstr("braid_reduce_sum(out1, o1, v1, active);"));
  EXPECT_THAT(*src, HasSubstr("braid_reduce_sum(out2, o2, v2, active);"));
  EXPECT_THAT(*src, HasSubstr("braid_reduce_max(out3, o3, v3, active);"));
  EXPECT_THAT(*src, HasSubstr("o1 = c1;"));  // column sums: indexed by the column
  EXPECT_THAT(*src, HasSubstr("o2 = c0;"));  // row means: by the row
  EXPECT_THAT(*src, HasSubstr("o3 = 0;"));   // a full reduction: one element
  EXPECT_THAT(*src, HasSubstr("out3[j] = __uint_as_float(0xff800000u);"));            // max starts at -inf
  EXPECT_THAT(*src, HasSubstr("out2[j] = out2[j] / __uint_as_float(0x447a0000u);"));  // mean / 1000
}

TEST(EwCodegenTest, WideIndicesPastTwoToThe30Points) {
  EwProgram p;
  p.shape = {int64_t{1} << 31};
  p.inputs = {{1}};
  p.instrs = {{EwCode::kExp, 0}};
  p.outputs = {{1}};
  absl::StatusOr<std::string> src = GenerateEwSource(p);
  ASSERT_TRUE(src.ok()) << src.status();
  EXPECT_THAT(*src, HasSubstr("typedef long long braid_idx;"));
  EXPECT_THAT(*src, HasSubstr("const float r0 = in0[0];"));
}

TEST(EwCodegenTest, InvalidProgramIsInvalidArgument) {
  EwProgram p;
  p.shape = {8};
  p.inputs = {{8}};
  p.instrs = {{EwCode::kAdd, 0, 3}};  // register 3 is not an earlier one
  p.outputs = {{1}};
  EXPECT_EQ(GenerateEwSource(p).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CudaEwKernel::Compile(p, 8, 0).status().code(), absl::StatusCode::kInvalidArgument);

  p.instrs = {{EwCode::kAdd, 0, 0}};
  p.outputs = {{1, ReduceKind::kSum, {1}}};  // axis out of range
  EXPECT_EQ(CudaEwKernel::Compile(p, 9, 0).status().code(), absl::StatusCode::kInvalidArgument);
  p.outputs = {};
  EXPECT_EQ(CudaEwKernel::Compile(p, 9, 0).status().code(), absl::StatusCode::kInvalidArgument);
  p.outputs = {{1}};
  p.inputs = {{3}};  // does not broadcast to [8]
  EXPECT_EQ(TimeEwKernel(p, 10).status().code(), absl::StatusCode::kInvalidArgument);
}

class EwNvrtcTest : public ::testing::TestWithParam<int> {};

TEST_P(EwNvrtcTest, CompilesEveryCodeAndReductionsToCubin) {
  const int major = GetParam();
  for (const EwProgram& p :
       {internal::AllCodesProgram({4, 8}), internal::AllCodesProgram({3, 5, 7}), ReductionProgram()}) {
    absl::StatusOr<std::shared_ptr<const CudaEwKernel>> k = CudaEwKernel::Compile(p, major, 0);
    ASSERT_TRUE(k.ok()) << k.status();
    EXPECT_EQ((*k)->target(), absl::StrCat("sm_", major, "0"));
    EXPECT_FALSE((*k)->is_ptx());
    EXPECT_GT((*k)->image_size(), 1000u);
    EXPECT_EQ((*k)->points(), [&] {
      int64_t n = 1;
      for (int64_t d : p.shape) n *= d;
      return n;
    }());
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, EwNvrtcTest, ::testing::Values(8, 9),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return absl::StrCat("sm_", i.param, "0");
                         });

TEST(EwNvrtcTest, CachesBySignatureAndArch) {
  const EwProgram p = ReductionProgram();
  absl::StatusOr<std::shared_ptr<const CudaEwKernel>> a = CudaEwKernel::Compile(p, 8, 0);
  ASSERT_TRUE(a.ok()) << a.status();
  const size_t size = CudaEwKernelCacheSize();
  absl::StatusOr<std::shared_ptr<const CudaEwKernel>> b = CudaEwKernel::Compile(p, 8, 0);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(a->get(), b->get());
  EXPECT_EQ(CudaEwKernelCacheSize(), size);
  absl::StatusOr<std::shared_ptr<const CudaEwKernel>> c = CudaEwKernel::Compile(p, 9, 0);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_NE(a->get(), c->get());
  EXPECT_EQ(CudaEwKernelCacheSize(), size + 1);
}

TEST(EwNvrtcTest, ArchitecturesOutsideNvrtcsList) {
  const EwProgram p = ReductionProgram();
  // Older than NVRTC 13 targets (Volta).
  EXPECT_EQ(CudaEwKernel::Compile(p, 7, 0).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(CudaEwKernel::Compile(p, 0, 0).status().code(), absl::StatusCode::kInvalidArgument);
  // A future architecture: PTX of the newest one NVRTC knows, for the driver.
  absl::StatusOr<std::shared_ptr<const CudaEwKernel>> k = CudaEwKernel::Compile(p, 99, 9);
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_TRUE((*k)->is_ptx());
  EXPECT_THAT((*k)->target(), HasSubstr("compute_"));
}

TEST(EwKernelRunTest, ChecksPointersAndAnswersFailedPreconditionWithoutDevice) {
  const EwProgram p = ReductionProgram();
  absl::StatusOr<std::shared_ptr<const CudaEwKernel>> k = CudaEwKernel::Compile(p, 8, 0);
  ASSERT_TRUE(k.ok()) << k.status();
  float dummy = 0;
  const float* ins[] = {&dummy, &dummy, &dummy};
  float* outs[] = {&dummy, &dummy, &dummy, &dummy};
  EXPECT_EQ((*k)->Run(absl::MakeSpan(ins, 2), outs, nullptr).code(), absl::StatusCode::kInvalidArgument);
  const float* null_ins[] = {&dummy, nullptr, &dummy};
  EXPECT_EQ((*k)->Run(null_ins, outs, nullptr).code(), absl::StatusCode::kInvalidArgument);
  if (CudaDeviceCount().ok()) return;  // with a GPU, gpu_test.cc runs kernels on real buffers
  const absl::Status s = (*k)->Run(ins, outs, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr("no CUDA device"));
  const absl::StatusOr<double> t = TimeEwKernel(p, 10);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kFailedPrecondition) << t.status();
  EXPECT_THAT(t.status().message(), HasSubstr("no CUDA device"));
  EXPECT_EQ(CudaEwKernel::CompileForCurrentDevice(p).status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace braid::kernels::cuda
