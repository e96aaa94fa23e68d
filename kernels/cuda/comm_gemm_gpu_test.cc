// comm_gemm on GPUs (ctest label `gpu`): every fused kernel and every looped
// method, both patterns, against the host reference (comm_gemm_reference.h)
// at 2 ranks, and 4 when the machine has them. max |out - ref| / max |ref|
// must stay below 1e-4 (fp32 accumulation against a double reference).
// Skips with "needs at least 2 CUDA devices (found N)" elsewhere.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "gtest/gtest.h"
#include "kernels/cuda/comm_gemm.h"
#include "kernels/cuda/comm_gemm_reference.h"
#include "kernels/cuda/cuda_status.h"

namespace braid::kernels::cuda {
namespace {

int DeviceCount() {
  const absl::StatusOr<int> n = CudaDeviceCount();
  return n.ok() ? *n : 0;
}

class CommGemmGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const int n = DeviceCount();
    if (n < 2) GTEST_SKIP() << "needs at least 2 CUDA devices (found " << n << ")";
  }
};

std::vector<float> Random(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

// One device allocation freed on its own device.
struct DevVec {
  int device = 0;
  float* p = nullptr;
  size_t n = 0;
  DevVec() = default;
  DevVec(const DevVec&) = delete;
  DevVec(DevVec&& o) noexcept : device(o.device), p(std::exchange(o.p, nullptr)), n(o.n) {}
  ~DevVec() {
    if (p != nullptr) {
      cudaSetDevice(device);
      cudaFree(p);
    }
  }
};

absl::StatusOr<DevVec> Upload(int device, const std::vector<float>& v) {
  DevVec d;
  d.device = device;
  d.n = v.size();
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device), "cudaSetDevice"));
  RETURN_IF_ERROR(
      CudaStatus(cudaMalloc(reinterpret_cast<void**>(&d.p), v.size() * sizeof(float)), "cudaMalloc"));
  RETURN_IF_ERROR(CudaStatus(cudaMemcpy(d.p, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice),
                             "cudaMemcpy H2D"));
  return d;
}

absl::StatusOr<std::vector<float>> Download(const DevVec& d) {
  std::vector<float> v(d.n);
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(d.device), "cudaSetDevice"));
  RETURN_IF_ERROR(
      CudaStatus(cudaMemcpy(v.data(), d.p, d.n * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy D2H"));
  return v;
}

// The shards of one random problem on the group's devices, the host
// reference, and outputs pre-filled with a sentinel (a missed element shows).
struct Problem {
  CommPattern pattern;
  CommGemmShape shape;
  int n = 2;
  std::vector<DevVec> x, w, out;
  std::vector<std::vector<float>> want;

  static absl::StatusOr<Problem> Make(CommPattern p, const CommGemmShape& s, int n, uint32_t seed) {
    Problem pr;
    pr.pattern = p;
    pr.shape = s;
    pr.n = n;
    const std::vector<float> x = Random(s.m * s.k, seed), w = Random(s.k * s.nout, seed + 1);
    const auto xs = ShardX(p, s, n, x), ws = ShardW(p, s, n, w);
    ASSIGN_OR_RETURN(pr.want, ReferenceCommGemm(p, s, n, xs, ws));
    for (int r = 0; r < n; ++r) {
      ASSIGN_OR_RETURN(DevVec dx, Upload(r, xs[r]));
      ASSIGN_OR_RETURN(DevVec dw, Upload(r, ws[r]));
      pr.x.push_back(std::move(dx));
      pr.w.push_back(std::move(dw));
    }
    RETURN_IF_ERROR(pr.Reset());
    return pr;
  }
  absl::Status Reset() {
    out.clear();
    for (int r = 0; r < n; ++r) {
      ASSIGN_OR_RETURN(DevVec d, Upload(r, std::vector<float>(want[r].size(), 12345.0f)));
      out.push_back(std::move(d));
    }
    return absl::OkStatus();
  }
  std::vector<const float*> xp() const {
    std::vector<const float*> v;
    for (const DevVec& d : x) v.push_back(d.p);
    return v;
  }
  std::vector<const float*> wp() const {
    std::vector<const float*> v;
    for (const DevVec& d : w) v.push_back(d.p);
    return v;
  }
  std::vector<float*> outp() const {
    std::vector<float*> v;
    for (const DevVec& d : out) v.push_back(d.p);
    return v;
  }
  // max |got - want| / max |want| over all ranks.
  absl::StatusOr<double> MaxRelDiff() const {
    double diff = 0, scale = 0;
    for (int r = 0; r < n; ++r) {
      ASSIGN_OR_RETURN(std::vector<float> got, Download(out[r]));
      for (size_t i = 0; i < got.size(); ++i) {
        diff = std::max(diff, std::fabs(double{got[i]} - want[r][i]));
        scale = std::max(scale, std::fabs(double{want[r][i]}));
      }
    }
    return diff / std::max(scale, 1e-30);
  }
};

std::vector<int> RankCounts() {
  std::vector<int> ns = {2};
  if (DeviceCount() >= 4) ns.push_back(4);
  return ns;
}

TEST_F(CommGemmGpuTest, FusedKernelsMatchTheReference) {
  struct Case {
    CommPattern p;
    CommGemmShape s;
    FusedCommGemmParams params;
  };
  // Partial column tiles (nout / n not a multiple of tile_n) and, for RS,
  // k / n not a multiple of 16 exercise the guards.
  const Case cases[] = {
      {CommPattern::kAllGatherMatMul, {512, 96, 200}, {64, 64, 1, 10}},
      {CommPattern::kAllGatherMatMul, {512, 128, 256}, {32, 128, 2, 10}},
      {CommPattern::kMatMulReduceScatter, {512, 200, 136}, {64, 64, 1, 10}},
      {CommPattern::kMatMulReduceScatter, {256, 64, 300}, {32, 128, 1, 10}},
      {CommPattern::kMatMulReduceScatter, {1024, 256, 256}, {128, 32, 1, 10}},
  };
  for (int n : RankCounts()) {
    absl::StatusOr<std::unique_ptr<CommGemmGroup>> g = CommGemmGroup::Create(n);
    ASSERT_TRUE(g.ok()) << g.status();
    uint32_t seed = 10;
    for (const Case& c : cases) {
      SCOPED_TRACE(absl::StrCat("fused ", std::string(CommPatternName(c.p)), " n=", n, " m=", c.s.m, " k=",
                                c.s.k, " nout=", c.s.nout, " tile ", c.params.tile_m, "x", c.params.tile_n));
      ASSERT_TRUE(CanImplementFusedCommGemm(c.p, c.s, n, c.params).ok());
      absl::StatusOr<Problem> pr = Problem::Make(c.p, c.s, n, seed += 2);
      ASSERT_TRUE(pr.ok()) << pr.status();
      // Twice: the second run reuses workspaces, tile tables and (AG)
      // signals that still hold the first run's epoch.
      for (int rep = 0; rep < 2; ++rep) {
        ASSERT_TRUE(pr->Reset().ok());
        absl::Status st = (*g)->RunFused(c.p, c.s, c.params, pr->xp(), pr->wp(), pr->outp());
        ASSERT_TRUE(st.ok()) << st;
        absl::StatusOr<double> d = pr->MaxRelDiff();
        ASSERT_TRUE(d.ok()) << d.status();
        EXPECT_LT(*d, 1e-4) << "run " << rep;
      }
    }
  }
}

TEST_F(CommGemmGpuTest, LoopedMethodsMatchTheReference) {
  const CommGemmShape shapes[] = {{512, 96, 200}, {256, 200, 136}, {12, 8, 20}};
  for (int n : RankCounts()) {
    absl::StatusOr<std::unique_ptr<CommGemmGroup>> g = CommGemmGroup::Create(n);
    ASSERT_TRUE(g.ok()) << g.status();
    uint32_t seed = 100;
    for (CommPattern p : {CommPattern::kAllGatherMatMul, CommPattern::kMatMulReduceScatter}) {
      for (const CommGemmShape& s : shapes) {
        if (s.m % n != 0 || s.nout % n != 0 || s.k % n != 0) continue;
        absl::StatusOr<Problem> pr = Problem::Make(p, s, n, seed += 2);
        ASSERT_TRUE(pr.ok()) << pr.status();
        for (LoopedMethod m :
             {LoopedMethod::kLooped, LoopedMethod::kUnrolled, LoopedMethod::kBidirectional}) {
          SCOPED_TRACE(absl::StrCat(std::string(LoopedMethodName(m)), " ", std::string(CommPatternName(p)),
                                    " n=", n, " m=", s.m, " k=", s.k, " nout=", s.nout));
          ASSERT_TRUE(pr->Reset().ok());
          absl::Status st = (*g)->RunLooped(p, m, s, pr->xp(), pr->wp(), pr->outp());
          ASSERT_TRUE(st.ok()) << st;
          absl::StatusOr<double> d = pr->MaxRelDiff();
          ASSERT_TRUE(d.ok()) << d.status();
          EXPECT_LT(*d, 1e-4);
        }
      }
    }
  }
}

TEST_F(CommGemmGpuTest, RejectsBadShapesAndPointers) {
  absl::StatusOr<std::unique_ptr<CommGemmGroup>> g = CommGemmGroup::Create(2);
  ASSERT_TRUE(g.ok()) << g.status();
  std::vector<const float*> x(2, nullptr), w(2, nullptr);
  std::vector<float*> out(2, nullptr);
  absl::Status st = (*g)->RunFused(CommPattern::kMatMulReduceScatter, {200, 64, 64}, {}, x, w, out);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(st.message()).find("tile_m"), std::string::npos) << st;
  st = (*g)->RunLooped(CommPattern::kAllGatherMatMul, LoopedMethod::kLooped, {4, 4, 4}, x, w, out);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(st.message()).find("x[0] is null"), std::string::npos) << st;
}

}  // namespace
}  // namespace braid::kernels::cuda
