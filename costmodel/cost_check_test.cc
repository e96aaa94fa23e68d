#include "costmodel/cost_check.h"

#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "costmodel/op_cost.h"
#include "costmodel/profile_store.h"
#include "gmock/gmock.h"
#include "graph/text_format.h"
#include "gtest/gtest.h"

namespace braid::costmodel {
namespace {

using ::testing::HasSubstr;
using graph::OpId;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// Two identical MatMul+Relu layers, then an Add: the CPU backend fuses
// MatMul+Relu (a oneDNN post-op) and Relu+MatMul not at all.
constexpr char kGraph[] = R"(graph "g"
tensor x f32[8,16] input
tensor w1 f32[16,16] parameter
tensor y1 f32[8,16] activation
tensor z1 f32[8,16] activation
tensor w2 f32[16,16] parameter
tensor y2 f32[8,16] activation
tensor z2 f32[8,16] activation
tensor out f32[8,16] activation
op mm1 MatMul (x, w1) -> (y1) flops=4096.0
op relu1 Relu (y1) -> (z1) flops=128.0
op mm2 MatMul (z1, w2) -> (y2) flops=4096.0
op relu2 Relu (y2) -> (z2) flops=128.0
op add Add (z2, z1) -> (out) flops=128.0
output out
)";

ClusterSpec TestCluster() {
  ClusterSpec c;
  c.name = "test";
  c.device = {.kind = "test-dev", .peak_flops_f32 = 1e11, .peak_flops_f16 = 4e11,
              .memory_bandwidth = 2e10, .memory_bytes = int64_t{1} << 34,
              .launch_overhead_s = 2e-6};
  c.intra = {.kind = IntraLinkKind::kPcie, .bandwidth = 1e10, .latency_s = 1e-6};
  c.network = {.nic_bandwidth = 1e10, .nics_per_node = 1, .latency_s = 1e-6};
  return c;
}

// Single ops take 1 ms; a fused group `fused_s`. Records what it was asked.
class FakeCostModel : public CostModel {
 public:
  explicit FakeCostModel(double fused_s) : fused_s_(fused_s) {}
  using CostModel::ComputeTime;
  OpTime ComputeTime(const graph::Graph&, std::span<const OpId> ops) override {
    if (ops.size() == 1) return {1e-3, TimeSource::kMeasured};
    asked.emplace_back(ops.begin(), ops.end());
    return {fused_s_, TimeSource::kGnn};
  }
  double CollectiveTime(Collective, int64_t, int) override { return 1e-3; }
  const FusionBackend* fusion_backend() const override { return &CpuFusionBackend(); }
  bool PrefetchesFused() const override { return true; }
  void PrefetchFused(const graph::Graph&, std::span<const std::vector<OpId>> groups) override {
    prefetched.emplace_back(groups.begin(), groups.end());
  }
  std::string Generation() const override { return "fake"; }

  std::vector<std::vector<OpId>> asked;
  std::vector<std::vector<std::vector<OpId>>> prefetched;

 private:
  double fused_s_;
};

TEST(CostCheckTest, FusedPairsAreCheckedOncePerKindInOneBatch) {
  graph::Graph g = *graph::ParseText(kGraph);
  FakeCostModel cm(2e-3);
  EXPECT_TRUE(CheckCostsFinite(g, cm, 1).ok());
  // mm1+relu1 (MatMul, Relu) and relu1+... : relu1 feeds mm2 (no fused form)
  // and add (Relu, Add); mm2+relu2 repeats (MatMul, Relu); relu2+add repeats.
  const std::vector<std::vector<OpId>> want = {{0, 1}, {1, 4}};
  EXPECT_EQ(cm.asked, want);
  ASSERT_EQ(cm.prefetched.size(), 1u);
  EXPECT_EQ(cm.prefetched[0], want);
}

TEST(CostCheckTest, AFusedPairOutOfRangeFailsTheCheckNamingBothOps) {
  graph::Graph g = *graph::ParseText(kGraph);
  for (double bad : {kNaN, kInf, -1.0, 2 * kMaxPredictedSeconds}) {
    FakeCostModel cm(bad);
    absl::Status s = CheckCostsFinite(g, cm, 1);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(s.message()),
                HasSubstr("the fused kernel of ops 'mm1' (MatMul) and 'relu1' (Relu) is predicted"))
        << bad;
  }
}

TEST(CostCheckTest, PlausibleSeconds) {
  EXPECT_TRUE(PlausibleSeconds(0));
  EXPECT_TRUE(PlausibleSeconds(1e-9));
  EXPECT_TRUE(PlausibleSeconds(kMaxPredictedSeconds));
  EXPECT_FALSE(PlausibleSeconds(-1e-12));
  EXPECT_FALSE(PlausibleSeconds(kNaN));
  EXPECT_FALSE(PlausibleSeconds(kInf));
  EXPECT_FALSE(PlausibleSeconds(2 * kMaxPredictedSeconds));
}

// An estimator that answers every group with one fixed value.
class FixedEstimator : public FusedOpEstimator {
 public:
  explicit FixedEstimator(double s) : s_(s) {}
  std::optional<double> Estimate(const graph::Graph&, std::span<const OpId>) override {
    return s_;
  }
  std::string Version() const override { return "fixed"; }

 private:
  double s_;
};

// Whatever an estimator answers, the production cost model hands on only a
// usable time: a bad estimate is replaced by the corrected roofline, and the
// whole graph then passes the check.
TEST(CostCheckTest, ClusterCostModelReplacesUnusableEstimatesWithTheRoofline) {
  graph::Graph g = *graph::ParseText(kGraph);
  const std::vector<OpId> pair = {0, 1};
  for (double bad : {kNaN, kInf, -kInf, -1.0, 0.0, 2 * kMaxPredictedSeconds}) {
    FixedEstimator est(bad);
    ClusterCostModel m(TestCluster(), nullptr, &est, CommModel(TestCluster()));
    const OpTime t = m.ComputeTime(g, pair);
    EXPECT_NE(t.source, TimeSource::kGnn) << bad;
    EXPECT_EQ(t.seconds, m.CorrectedRoofline(g, pair).seconds) << bad;
    const absl::Status check = CheckCostsFinite(g, m, 2);
    EXPECT_TRUE(check.ok()) << bad << ": " << check;
  }
  FixedEstimator good(3e-6);
  ClusterCostModel m(TestCluster(), nullptr, &good, CommModel(TestCluster()));
  EXPECT_EQ(m.ComputeTime(g, pair).source, TimeSource::kGnn);
  EXPECT_EQ(m.ComputeTime(g, pair).seconds, 3e-6);
}

// Fused profiles only; single ops have none.
class FusedOnlyStore : public ProfileStore {
 public:
  absl::Status Put(const ProfileKey& k, const ProfileSample& s) override {
    profiles_[k.op_type + "\n" + k.signature] = s;
    ++generation_;
    return absl::OkStatus();
  }
  std::optional<ProfileSample> Get(const ProfileKey& k) const override {
    auto it = profiles_.find(k.op_type + "\n" + k.signature);
    if (it == profiles_.end()) return std::nullopt;
    return it->second;
  }
  absl::Status PutComm(const std::string&, const CommSample&) override { return absl::OkStatus(); }
  std::vector<CommSample> GetComm(const std::string&) const override { return {}; }
  int64_t Generation() const override { return generation_; }

 private:
  std::map<std::string, ProfileSample> profiles_;
  int64_t generation_ = 0;
};

TEST(CostCheckTest, AStoredFusedProfileOutOfRangeIsNotUsed) {
  graph::Graph g = *graph::ParseText(kGraph);
  const std::vector<OpId> pair = {0, 1};
  FusedOnlyStore store;
  ASSERT_TRUE(store.Put({"test-dev", kFusedOp, FusedSignature(g, pair)},
                        {.median_s = kInf, .spread_s = 0, .repetitions = 3})
                  .ok());
  ClusterCostModel m(TestCluster(), &store, nullptr, CommModel(TestCluster()));
  const OpTime t = m.ComputeTime(g, pair);
  EXPECT_NE(t.source, TimeSource::kMeasured);
  EXPECT_TRUE(std::isfinite(t.seconds));
  EXPECT_TRUE(CheckCostsFinite(g, m, 1).ok());
  ASSERT_TRUE(store.Put({"test-dev", kFusedOp, FusedSignature(g, pair)},
                        {.median_s = 4e-6, .spread_s = 0, .repetitions = 3})
                  .ok());
  EXPECT_EQ(m.ComputeTime(g, pair).source, TimeSource::kMeasured);
}

}  // namespace
}  // namespace braid::costmodel
