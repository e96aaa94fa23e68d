// GPU test (ctest label `gpu`): every op the CUDA profiler covers runs on
// the device on the inputs of the golden file (braid-cuda-golden: LibTorch's
// CPU outputs for them) and must match; profiled times must be positive and
// finite, a large GEMM must take longer than a small one, and with two or
// more GPUs the NCCL benchmark runs. Without a device every test skips; with
// one, a missing or unreadable golden file fails. The golden file is
// $BRAID_CUDA_GOLDEN, else the one the build wrote next to this binary; the
// NCCL rank program is $BRAID_NCCL_RANK_BINARY, else the build's.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "graph/text_format.h"
#include "gtest/gtest.h"
#include "worker/cuda/cuda_device.h"
#include "worker/cuda/cuda_profiler.h"
#include "worker/cuda/internal/cuda_context.h"
#include "worker/cuda/internal/cuda_ops.h"
#include "worker/cuda/internal/op_golden.h"
#include "worker/cuda/nccl_bench.h"

namespace braid::worker {
namespace {

using cuda_internal::CudaContext;
using cuda_internal::CudaOp;
using cuda_internal::GoldenCase;
using cuda_internal::GoldenTensor;
using ::testing::HasSubstr;

std::string GoldenPath() {
  const char* env = std::getenv("BRAID_CUDA_GOLDEN");
  return env != nullptr && *env != '\0' ? std::string(env) : std::string(BRAID_CUDA_GOLDEN_FILE);
}

// One golden case: op 0 of its graph on the device, on the golden inputs,
// against the golden outputs; then the profiler times it.
class CudaOpGoldenTest : public ::testing::Test {
 public:
  explicit CudaOpGoldenTest(const GoldenCase* c) : c_(c) {}

 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<CudaContext>> c = CudaContext::Create(0);
    if (!c.ok()) GTEST_SKIP() << "no usable CUDA device: " << c.status();
    ctx_ = *std::move(c);
  }
  void TestBody() override;

  const GoldenCase* c_;
  std::unique_ptr<CudaContext> ctx_;
};

void CudaOpGoldenTest::TestBody() {
  const GoldenCase& c = *c_;
  absl::StatusOr<graph::Graph> g = graph::ParseText(c.graph_text);
  ASSERT_TRUE(g.ok()) << g.status();
  absl::StatusOr<CudaOp> op = cuda_internal::MakeCudaOp(*ctx_, *g, 0);
  ASSERT_TRUE(op.ok()) << op.status();
  ASSERT_EQ(op->inputs.size(), c.inputs.size());
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    ASSERT_EQ(op->inputs[i].shape, c.inputs[i].shape) << c.name << " input " << i;
    ASSERT_TRUE(ctx_->Upload(op->inputs[i], c.inputs[i].data.data(),
                             c.inputs[i].data.size() * sizeof(float))
                    .ok());
  }
  if (op->prepare) ASSERT_TRUE(op->prepare().ok());
  ASSERT_TRUE(op->run().ok());
  ASSERT_TRUE(ctx_->Sync("run").ok());
  ASSERT_LE(c.outputs.size(), op->outputs.size());
  for (size_t i = 0; i < c.outputs.size(); ++i) {
    const GoldenTensor& want = c.outputs[i];
    if (!want.defined) continue;
    ASSERT_EQ(op->outputs[i].shape, want.shape) << c.name << " output " << i;
    std::vector<float> got(want.data.size());
    ASSERT_TRUE(ctx_->Download(op->outputs[i], got.data(), got.size() * sizeof(float)).ok());
    double err = 0, scale = 0;
    for (size_t k = 0; k < got.size(); ++k) {
      ASSERT_TRUE(std::isfinite(got[k])) << c.name << " output " << i << " element " << k;
      err = std::max(err, std::abs(static_cast<double>(got[k]) - want.data[k]));
      scale = std::max(scale, std::abs(static_cast<double>(want.data[k])));
    }
    EXPECT_LE(err, c.rtol * std::max(scale, 1.0))
        << c.name << " output " << i << ": max |gpu - cpu| = " << err << ", max |cpu| = " << scale
        << " (" << op->calls << ")";
  }

  ProfileOptions o;
  o.warmup = 2;
  o.repetitions = 5;
  o.max_seconds_per_op = 0.5;
  absl::StatusOr<OpProfile> p = CudaProfiler(o).ProfileOp(*g, 0);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_GT(p->sample.median_s, 0);
  EXPECT_TRUE(std::isfinite(p->sample.median_s));
  EXPECT_GE(p->sample.spread_s, 0);
  EXPECT_EQ(p->sample.repetitions, 5);
  // The same calls (cuDNN's algorithm search may pick another algorithm).
  auto family = [](const std::string& calls) { return calls.substr(0, calls.find("(algo=")); };
  EXPECT_EQ(family(p->aten), family(op->calls));
}

// Without a device: skipped. With one and no readable golden file: failed.
class GoldenFileMissingTest : public ::testing::Test {
 public:
  explicit GoldenFileMissingTest(absl::Status why) : why_(std::move(why)) {}
  void TestBody() override {
    if (!FindCudaDevice(0).ok()) GTEST_SKIP() << "no usable CUDA device";
    FAIL() << why_ << " (write it with braid-cuda-golden --out FILE, name it in BRAID_CUDA_GOLDEN)";
  }

 private:
  absl::Status why_;
};

// One test per golden case, registered before main runs.
[[maybe_unused]] const bool kRegistered = [] {
  static const absl::StatusOr<std::vector<GoldenCase>>* golden =
      new absl::StatusOr<std::vector<GoldenCase>>(cuda_internal::ReadGoldenFile(GoldenPath()));
  if (!golden->ok() || (*golden)->empty()) {
    const absl::Status why =
        golden->ok() ? absl::InvalidArgumentError(GoldenPath() + " holds no case") : golden->status();
    ::testing::RegisterTest("CudaOpGolden", "GoldenFileReadable", nullptr, nullptr, __FILE__,
                            __LINE__, [why]() -> ::testing::Test* {
                              return new GoldenFileMissingTest(why);
                            });
    return true;
  }
  for (const GoldenCase& c : **golden) {
    ::testing::RegisterTest("CudaOpGolden", c.name.c_str(), nullptr, nullptr, __FILE__, __LINE__,
                            [&c]() -> ::testing::Test* { return new CudaOpGoldenTest(&c); });
  }
  return true;
}();

std::string Graph(const std::string& body) { return "graph \"t\"\n" + body; }

class CudaProfilerGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<CudaDeviceInfo> d = FindCudaDevice(0);
    if (!d.ok()) GTEST_SKIP() << "no usable CUDA device: " << d.status();
    device_ = *d;
  }
  CudaDeviceInfo device_;
};

TEST_F(CudaProfilerGpuTest, DeviceDiscovery) {
  EXPECT_FALSE(device_.name.empty());
  EXPECT_EQ(device_.kind, "cuda:" + device_.name);
  EXPECT_GT(device_.sm_count, 0);
  EXPECT_GT(device_.total_memory_bytes, int64_t{1} << 30);
  EXPECT_GE(device_.compute_major, 7);
  EXPECT_EQ(*CudaProfiler().DeviceKind(), device_.kind);
  absl::StatusOr<int> n = CudaDeviceCount();
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(FindCudaDevice(*n).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(CudaProfilerGpuTest, BiggerGemmTakesLonger) {
  absl::StatusOr<graph::Graph> g = graph::ParseText(Graph(R"(tensor a f32[64,64] input
tensor b f32[64,64] input
tensor y f32[64,64] activation
tensor c f32[2048,2048] input
tensor d f32[2048,2048] input
tensor z f32[2048,2048] activation
op small MatMul (a, b) -> (y)
op big MatMul (c, d) -> (z)
)"));
  ASSERT_TRUE(g.ok()) << g.status();
  CudaProfiler profiler;
  absl::StatusOr<OpProfile> small = profiler.ProfileOp(*g, 0);
  absl::StatusOr<OpProfile> big = profiler.ProfileOp(*g, 1);
  ASSERT_TRUE(small.ok()) << small.status();
  ASSERT_TRUE(big.ok()) << big.status();
  // 32768x the FLOPs; a launch-bound small GEMM still takes a few us.
  EXPECT_GT(big->sample.median_s, 4 * small->sample.median_s)
      << "small " << small->sample.median_s << " s, big " << big->sample.median_s << " s";
}

// A fused elementwise group runs as one NVRTC kernel, cheaper than its two
// members' kernels and their intermediate write and read.
TEST_F(CudaProfilerGpuTest, FusedElementwiseGroupIsTimedAsOneKernel) {
  absl::StatusOr<graph::Graph> g = graph::ParseText(Graph(R"(tensor x f32[4096,1024] input
tensor b f32[1024] parameter
tensor y f32[4096,1024] activation
tensor z f32[4096,1024] activation
op add Add (x, b) -> (y)
op relu Relu (y) -> (z)
output z
)"));
  ASSERT_TRUE(g.ok()) << g.status();
  CudaProfiler profiler;
  const std::vector<graph::OpId> group = {0, 1};
  absl::StatusOr<OpProfile> fused = profiler.ProfileFused(*g, group);
  ASSERT_TRUE(fused.ok()) << fused.status();
  absl::StatusOr<OpProfile> add = profiler.ProfileOp(*g, 0);
  absl::StatusOr<OpProfile> relu = profiler.ProfileOp(*g, 1);
  ASSERT_TRUE(add.ok() && relu.ok());
  EXPECT_GT(fused->sample.median_s, 0);
  EXPECT_LT(fused->sample.median_s, add->sample.median_s + relu->sample.median_s);
}

// MatMul + bias + ReLU is one cublasLtMatmul with the RELU_BIAS epilogue.
TEST_F(CudaProfilerGpuTest, FusedGemmEpilogueIsTimedAsOneCublasLtCall) {
  absl::StatusOr<graph::Graph> g = graph::ParseText(Graph(R"(tensor x f32[512,1024] input
tensor w f32[1024,1024] parameter
tensor b f32[1024] parameter
tensor y f32[512,1024] activation
tensor yb f32[512,1024] activation
tensor z f32[512,1024] activation
op mm MatMul (x, w) -> (y)
op bias Add (y, b) -> (yb)
op relu Relu (yb) -> (z)
output z
)"));
  ASSERT_TRUE(g.ok()) << g.status();
  CudaProfiler profiler;
  const std::vector<graph::OpId> group = {0, 1, 2};
  absl::StatusOr<OpProfile> fused = profiler.ProfileFused(*g, group);
  ASSERT_TRUE(fused.ok()) << fused.status();
  EXPECT_GT(fused->sample.median_s, 0);
  EXPECT_NE(fused->aten.find("cublasLtMatmul"), std::string::npos);
}

TEST_F(CudaProfilerGpuTest, RejectsWhatItCannotMap) {
  absl::StatusOr<graph::Graph> g = graph::ParseText(Graph(R"(tensor x f32[2,3,8,8] input
tensor w f32[4,3,3,3] input
tensor c f32[2,4,8,8] activation
tensor q f32[2,3,8,8] activation
op conv Conv (x, w) -> (c)
op odd FrobnicateGrad (x) -> (q)
)"));
  ASSERT_TRUE(g.ok()) << g.status();
  CudaProfiler profiler;
  // Without pads cuDNN gives [2,4,6,6], not the declared [2,4,8,8].
  absl::StatusOr<OpProfile> conv = profiler.ProfileOp(*g, 0);
  EXPECT_EQ(conv.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(conv.status().message()),
              HasSubstr("cuDNN computes [2,4,6,6] but the graph's output 'c' is [2,4,8,8]"));
  absl::StatusOr<OpProfile> odd = profiler.ProfileOp(*g, 1);
  EXPECT_EQ(odd.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(odd.status().message()), HasSubstr("FrobnicateGrad"));
}

TEST_F(CudaProfilerGpuTest, ProfileGraphStoresUnderTheDeviceKind) {
  absl::StatusOr<graph::Graph> g = graph::ParseText(Graph(R"(tensor a f32[32,64] input
tensor b f32[64,16] input
tensor y f32[32,16] activation
tensor y2 f32[32,16] activation
tensor r f32[32,16] activation
tensor q f32[32,16] activation
op mm MatMul (a, b) -> (y)
op mm2 MatMul (a, b) -> (y2)
op relu Relu (y) -> (r)
op odd FrobnicateGrad (y) -> (q)
)"));
  ASSERT_TRUE(g.ok()) << g.status();
  std::filesystem::path db = std::filesystem::path(::testing::TempDir()) / "cuda_gpu_profile.db";
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(db.string() + suffix);
  auto store = costmodel::ProfileStore::Open(db.string());
  ASSERT_TRUE(store.ok()) << store.status();
  ProfileOptions o;
  o.repetitions = 3;
  absl::StatusOr<ProfileGraphReport> r = ProfileGraphCuda(*g, **store, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->profiled, 2);  // MatMul once (mm2 has mm's signature), Relu
  EXPECT_EQ(r->unsupported, 1);
  EXPECT_EQ(r->failed, 0);
  EXPECT_EQ((*store)->Generation(), 2);
  std::optional<costmodel::ProfileSample> s =
      (*store)->Get({device_.kind, "MatMul", costmodel::OpSignature(*g, 0)});
  ASSERT_TRUE(s.has_value());
  EXPECT_GT(s->median_s, 0);
  EXPECT_EQ(s->repetitions, 3);
  absl::StatusOr<ProfileGraphReport> again = ProfileGraphCuda(*g, **store, o);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->skipped, 2);
  EXPECT_EQ(again->profiled, 0);
}

// Dropout keeps about 1 - ratio of the elements, scaled by 1 / (1 - ratio);
// its mask says which; the backward pass drops the same elements from the
// mask or, without one, from the seed alone.
TEST_F(CudaProfilerGpuTest, DropoutForwardAndBackwardAgree) {
  absl::StatusOr<graph::Graph> g = graph::ParseText(Graph(R"(tensor x f32[64,1024] input
tensor y f32[64,1024] activation
tensor mask bool[64,1024] activation
tensor dy f32[64,1024] input
tensor dxm f32[64,1024] activation
tensor dxs f32[64,1024] activation
op drop Dropout (x) -> (y, mask) {ratio=0.25, seed=7}
op gm DropoutGrad (dy, mask) -> (dxm) {ratio=0.25, seed=7} phase=backward
op gs DropoutGrad (dy) -> (dxs) {ratio=0.25, seed=7} phase=backward
)"));
  ASSERT_TRUE(g.ok()) << g.status();
  absl::StatusOr<std::unique_ptr<CudaContext>> ctx = CudaContext::Create(0);
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  const int64_t n = 64 * 1024;
  const std::vector<float> ones(n, 1.0f);
  absl::StatusOr<CudaOp> fwd = cuda_internal::MakeCudaOp(**ctx, *g, 0);
  ASSERT_TRUE(fwd.ok()) << fwd.status();
  ASSERT_TRUE((*ctx)->Upload(fwd->inputs[0], ones.data(), n * sizeof(float)).ok());
  ASSERT_TRUE(fwd->run().ok());
  std::vector<float> y(n);
  std::vector<uint8_t> mask(n);
  ASSERT_TRUE((*ctx)->Download(fwd->outputs[0], y.data(), n * sizeof(float)).ok());
  ASSERT_TRUE((*ctx)->Download(fwd->outputs[1], mask.data(), n).ok());
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_TRUE(y[i] == 0.0f || std::abs(y[i] - 4.0f / 3.0f) < 1e-6) << i << ": " << y[i];
    ASSERT_EQ(mask[i] != 0, y[i] != 0.0f) << i;
    kept += mask[i];
  }
  EXPECT_NEAR(static_cast<double>(kept) / n, 0.75, 0.01);
  for (graph::OpId op : {1, 2}) {
    absl::StatusOr<CudaOp> bwd = cuda_internal::MakeCudaOp(**ctx, *g, op);
    ASSERT_TRUE(bwd.ok()) << bwd.status();
    ASSERT_TRUE((*ctx)->Upload(bwd->inputs[0], ones.data(), n * sizeof(float)).ok());
    if (op == 1) ASSERT_TRUE((*ctx)->Upload(bwd->inputs[1], mask.data(), n).ok());
    ASSERT_TRUE(bwd->run().ok());
    std::vector<float> dx(n);
    ASSERT_TRUE((*ctx)->Download(bwd->outputs[0], dx.data(), n * sizeof(float)).ok());
    EXPECT_EQ(dx, y) << bwd->calls;
  }
}

TEST_F(CudaProfilerGpuTest, NcclBenchOnTwoGpus) {
  absl::StatusOr<int> n = CudaDeviceCount();
  ASSERT_TRUE(n.ok());
  if (*n < 2) GTEST_SKIP() << "the NCCL benchmark needs 2 GPUs; this machine has " << *n;
  NcclBenchOptions o;
  o.ranks = 2;
  o.sizes = {64 << 10, 4 << 20};
  o.warmup = 2;
  o.repetitions = 5;
  const char* rank_binary = std::getenv("BRAID_NCCL_RANK_BINARY");
  o.rank_binary = rank_binary != nullptr && *rank_binary != '\0' ? rank_binary : BRAID_NCCL_RANK_BINARY;
  o.timeout_s = 120;
  std::filesystem::path db = std::filesystem::path(::testing::TempDir()) / "cuda_gpu_nccl.db";
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(db.string() + suffix);
  auto store = costmodel::ProfileStore::Open(db.string());
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<std::vector<CollectiveMeasurement>> m = RunNcclBench(o, store->get());
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->size(), 8u);  // 4 collectives x 2 sizes
  for (const CollectiveMeasurement& x : *m) {
    EXPECT_EQ(x.sample.group_size, 2);
    EXPECT_GT(x.sample.seconds, 0) << x.sample.collective;
    EXPECT_LT(x.sample.seconds, 1.0) << x.sample.collective;
  }
  EXPECT_EQ((*store)->GetComm("gpu-local:" + device_.kind).size(), 8u);
}

}  // namespace
}  // namespace braid::worker
