#include "costmodel/op_cost.h"

#include <map>
#include <tuple>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace braid::costmodel {
namespace {

using graph::DType;
using graph::Graph;
using graph::OpId;
using graph::TensorRole;

class FakeStore : public ProfileStore {
 public:
  absl::Status Put(const ProfileKey& k, const ProfileSample& s) override {
    profiles_[{k.device_kind, k.op_type, k.signature}] = s;
    ++generation_;
    return absl::OkStatus();
  }
  std::optional<ProfileSample> Get(const ProfileKey& k) const override {
    ++gets_;
    auto it = profiles_.find({k.device_kind, k.op_type, k.signature});
    if (it == profiles_.end()) return std::nullopt;
    return it->second;
  }
  absl::Status PutComm(const std::string& kind, const CommSample& s) override {
    comm_[kind].push_back(s);
    ++generation_;
    return absl::OkStatus();
  }
  std::vector<CommSample> GetComm(const std::string& kind) const override {
    auto it = comm_.find(kind);
    return it == comm_.end() ? std::vector<CommSample>{} : it->second;
  }
  int64_t Generation() const override { return generation_; }
  int gets() const { return gets_; }

 private:
  std::map<std::tuple<std::string, std::string, std::string>, ProfileSample> profiles_;
  std::map<std::string, std::vector<CommSample>> comm_;
  int64_t generation_ = 0;
  mutable int gets_ = 0;
};

class FakeEstimator : public FusedOpEstimator {
 public:
  std::optional<double> Estimate(const Graph&, std::span<const OpId> ops) override {
    if (ops.size() == 2) return 1.23e-3;
    return std::nullopt;
  }
  std::string Version() const override { return "fake-1"; }
};

// A span over one op (std::span has no constructor from a braced scalar).
std::span<const OpId> One(const OpId& op) { return {&op, 1}; }

// 1 TFLOP/s f32, 4 TFLOP/s f16, 100 GB/s, 10 us launch.
ClusterSpec TestCluster() {
  ClusterSpec c;
  c.name = "test";
  c.device = {.kind = "test-dev", .peak_flops_f32 = 1e12, .peak_flops_f16 = 4e12,
              .memory_bandwidth = 1e11, .memory_bytes = int64_t{1} << 34,
              .launch_overhead_s = 1e-5};
  c.intra = {.kind = IntraLinkKind::kPcie, .bandwidth = 1e10, .latency_s = 1e-6};
  c.network = {.nic_bandwidth = 1e10, .nics_per_node = 1, .latency_s = 1e-6};
  EXPECT_TRUE(ValidateCluster(c).ok());
  return c;
}

// out = relu(x @ w) + b, then an AllReduce of a gradient; 1000x1000 f32
// tensors (4e6 bytes each). Annotations are set by hand.
struct Fixture {
  Graph g{"mlp"};
  OpId mm, relu, add, ar;
  graph::TensorId x, w, y, z, b, out, grad, reduced;

  explicit Fixture(DType dt = DType::kF32) {
    x = g.AddTensor("x", {1000, 1000}, dt, TensorRole::kInput);
    w = g.AddTensor("w", {1000, 1000}, dt, TensorRole::kParameter);
    y = g.AddTensor("y", {1000, 1000}, dt, TensorRole::kActivation);
    z = g.AddTensor("z", {1000, 1000}, dt, TensorRole::kActivation);
    b = g.AddTensor("b", {1000, 1000}, dt, TensorRole::kInput);
    out = g.AddTensor("out", {1000, 1000}, dt, TensorRole::kActivation);
    grad = g.AddTensor("grad", {1000, 1000}, dt, TensorRole::kGradient);
    reduced = g.AddTensor("reduced", {1000, 1000}, dt, TensorRole::kActivation);
    mm = g.AddOp("mm", "MatMul", {x, w}, {y});
    relu = g.AddOp("relu", "Relu", {y}, {z});
    add = g.AddOp("add", "Add", {z, b}, {out});
    ar = g.AddOp("ar", "AllReduce", {grad}, {reduced}, {{"group_size", int64_t{4}}},
                 graph::Phase::kCommunication);
    g.AddOutput(out);
    Set(mm, 2e9, 8e6, 4e6);
    Set(relu, 1e6, 4e6, 4e6);
    Set(add, 1e6, 8e6, 4e6);
  }
  void Set(OpId id, double flops, int64_t r, int64_t wr) {
    g.mutable_op(id).flops = flops;
    g.mutable_op(id).bytes_read = r;
    g.mutable_op(id).bytes_written = wr;
  }
};

TEST(OpCostTest, RooflineSingleOps) {
  Fixture f;
  ClusterCostModel m(TestCluster(), nullptr, nullptr, CommModel(TestCluster()));
  // MatMul: 2e9 / (1e12 * 0.7) = 2.857 ms > 12e6 B / (1e11 * 0.8) = 0.15 ms.
  OpTime t = m.ComputeTime(f.g, One(f.mm));
  EXPECT_EQ(t.source, TimeSource::kPrior);
  EXPECT_NEAR(t.seconds, 2e9 / 0.7e12 + 1e-5, 1e-12);
  // Relu is bandwidth bound: 8e6 B / 0.8e11 B/s = 0.1 ms.
  EXPECT_NEAR(m.ComputeTime(f.g, One(f.relu)).seconds, 1e-4 + 1e-5, 1e-12);
  // Communication is not compute.
  EXPECT_EQ(m.ComputeTime(f.g, One(f.ar)).seconds, 0);
}

TEST(OpCostTest, HalfPrecisionMatMulUsesTensorPeak) {
  Fixture f(DType::kF16);
  f.Set(f.mm, 7e9, 2e8, 2e8);
  ClusterCostModel m(TestCluster(), nullptr, nullptr, CommModel(TestCluster()));
  // 7e9 / (4e12 * 0.7) = 2.5 ms < 4e8 / 0.8e11 = 5 ms.
  EXPECT_NEAR(m.ComputeTime(f.g, One(f.mm)).seconds, 5e-3 + 1e-5, 1e-12);
}

TEST(OpCostTest, FusedGroupCountsOnlyBoundaryBytesAndOneLaunch) {
  Fixture f;
  ClusterCostModel m(TestCluster(), nullptr, nullptr, CommModel(TestCluster()));
  // Boundary: x, w, b in; out (a graph output) out: 16e6 B -> 0.2 ms. FLOPs:
  // 2e9/0.7e12 + 1e6/1e12 + 1e6/1e12 -> compute bound.
  std::vector<OpId> all = {f.mm, f.relu, f.add};
  OpTime t = m.ComputeTime(f.g, all);
  EXPECT_EQ(t.source, TimeSource::kPrior);
  EXPECT_NEAR(t.seconds, 2e9 / 0.7e12 + 2e-6 + 1e-5, 1e-12);
  // relu + add: z stays on chip: in y, b; out: 12e6 B -> 0.15 ms (bandwidth
  // bound), one launch.
  std::vector<OpId> tail = {f.relu, f.add};
  EXPECT_NEAR(m.RooflineTime(f.g, tail), 12e6 / 0.8e11 + 1e-5, 1e-12);
  // If z is also consumed outside the group it must be written: +4e6 B.
  graph::TensorId z2 = f.g.AddTensor("z2", {1000, 1000}, DType::kF32, TensorRole::kActivation);
  f.g.AddOp("other", "Relu", {f.z}, {z2});
  EXPECT_NEAR(m.RooflineTime(f.g, tail), 16e6 / 0.8e11 + 1e-5, 1e-12);
}

TEST(OpCostTest, SourcesInOrderProfileFusedProfileEstimatorCorrectedPrior) {
  Fixture f;
  FakeStore store;
  FakeEstimator est;
  ASSERT_TRUE(
      store.Put({"test-dev", "Relu", OpSignature(f.g, f.relu)}, {.median_s = 7e-5}).ok());
  ClusterCostModel m(TestCluster(), &store, &est, CommModel(TestCluster()));
  OpTime relu = m.ComputeTime(f.g, One(f.relu));
  EXPECT_EQ(relu.source, TimeSource::kMeasured);
  EXPECT_DOUBLE_EQ(relu.seconds, 7e-5);
  EXPECT_EQ(m.ComputeTime(f.g, One(f.mm)).source, TimeSource::kPrior);
  std::vector<OpId> pair = {f.relu, f.add};
  OpTime fused = m.ComputeTime(f.g, pair);
  EXPECT_EQ(fused.source, TimeSource::kGnn);
  EXPECT_DOUBLE_EQ(fused.seconds, 1.23e-3);
  // A profile of that exact fused kernel comes first, in any member order.
  ASSERT_TRUE(
      store.Put({"test-dev", kFusedOp, FusedSignature(f.g, pair)}, {.median_s = 5e-5}).ok());
  std::vector<OpId> reversed = {f.add, f.relu};
  EXPECT_EQ(m.ComputeTime(f.g, reversed).source, TimeSource::kMeasured);
  EXPECT_DOUBLE_EQ(m.ComputeTime(f.g, reversed).seconds, 5e-5);
  // Without an estimator: members' profiles make a corrected roofline, no
  // profile at all a prior.
  ClusterCostModel no_est(TestCluster(), &store, nullptr, CommModel(TestCluster()));
  std::vector<OpId> triple = {f.mm, f.relu, f.add};
  EXPECT_EQ(no_est.ComputeTime(f.g, triple).source, TimeSource::kCorrectedRoofline);
  ClusterCostModel bare(TestCluster(), nullptr, nullptr, CommModel(TestCluster()));
  EXPECT_EQ(bare.ComputeTime(f.g, triple).source, TimeSource::kPrior);
  EXPECT_DOUBLE_EQ(bare.ComputeTime(f.g, triple).seconds, bare.RooflineTime(f.g, triple));
  // A profile on another device kind does not apply.
  ASSERT_TRUE(store.Put({"other-dev", "Add", OpSignature(f.g, f.add)}, {.median_s = 1}).ok());
  EXPECT_EQ(m.ComputeTime(f.g, One(f.add)).source, TimeSource::kPrior);
}

TEST(OpCostTest, FusedSignatureIsPlaceIndependentAndSeesEscapes) {
  Fixture f;
  std::vector<OpId> pair = {f.relu, f.add};
  const std::string sig = FusedSignature(f.g, pair);
  // The same two ops built elsewhere (other names, other ids) share it.
  Graph h("other");
  graph::TensorId y = h.AddTensor("yy", {1000, 1000}, DType::kF32, TensorRole::kActivation);
  graph::TensorId b = h.AddTensor("bb", {1000, 1000}, DType::kF32, TensorRole::kInput);
  graph::TensorId z = h.AddTensor("zz", {1000, 1000}, DType::kF32, TensorRole::kActivation);
  graph::TensorId o = h.AddTensor("oo", {1000, 1000}, DType::kF32, TensorRole::kActivation);
  OpId r = h.AddOp("r", "Relu", {y}, {z});
  OpId a = h.AddOp("a", "Add", {z, b}, {o});
  h.AddOutput(o);
  std::vector<OpId> hp = {a, r};
  EXPECT_EQ(FusedSignature(h, hp), sig);
  // If the intermediate is also read outside, the kernel must write it.
  graph::TensorId z2 = f.g.AddTensor("z2", {1000, 1000}, DType::kF32, TensorRole::kActivation);
  f.g.AddOp("other", "Relu", {f.z}, {z2});
  EXPECT_NE(FusedSignature(f.g, pair), sig);
}

TEST(OpCostTest, OneOpOverload) {
  Fixture f;
  ClusterCostModel m(TestCluster(), nullptr, nullptr, CommModel(TestCluster()));
  EXPECT_NEAR(m.ComputeTime(f.g, f.relu).seconds, 1e-4 + 1e-5, 1e-12);
  CostModel& base = m;
  EXPECT_NEAR(base.ComputeTime(f.g, f.mm).seconds, 2e9 / 0.7e12 + 1e-5, 1e-12);
}

TEST(OpCostTest, LibraryOps) {
  Fixture f;
  EXPECT_TRUE(IsLibraryOp(f.g.op(f.mm)));
  EXPECT_FALSE(IsLibraryOp(f.g.op(f.relu)));
  EXPECT_FALSE(IsLibraryOp(f.g.op(f.ar)));
  graph::TensorId k = f.g.AddTensor("k", {8, 8, 3, 3}, DType::kF32, TensorRole::kParameter);
  graph::TensorId c = f.g.AddTensor("c", {1000, 8}, DType::kF32, TensorRole::kActivation);
  EXPECT_TRUE(IsLibraryOp(f.g.op(f.g.AddOp("conv", "Conv", {f.x, k}, {c}))));
  EXPECT_TRUE(IsLibraryOp(f.g.op(f.g.AddOp("cgf", "ConvGradFilter", {f.x, c}, {k}))));
}

// Corrected roofline: T = max(R(group), T_L, sum of member times - what
// fusing saves), op_cost.h. Fixture: 100 GB/s * 0.8, 10 us launches.
TEST(OpCostTest, CorrectedRooflineFromMemberProfiles) {
  Fixture f;
  FakeStore store;
  ASSERT_TRUE(store.Put({"test-dev", "MatMul", OpSignature(f.g, f.mm)}, {.median_s = 4e-3}).ok());
  ClusterCostModel m(TestCluster(), &store, nullptr, CommModel(TestCluster()));
  // Members: mm 4 ms (measured), relu R = 4e6+4e6 B / 8e10 + 10 us = 110 us,
  // add R = 12e6 B / 8e10 + 10 us = 160 us: 4.27 ms unfused. Saved: y and z
  // are neither written nor re-read (2 * 8e6 B = 200 us) and two launches
  // (20 us): 4.05 ms, above T_L = 4 ms and R(group) = 2.869 ms.
  std::vector<OpId> all = {f.mm, f.relu, f.add};
  OpTime t = m.ComputeTime(f.g, all);
  EXPECT_EQ(t.source, TimeSource::kCorrectedRoofline);
  EXPECT_NEAR(t.seconds, 4.05e-3, 1e-12);
  // A fast epilogue cannot make the library call faster than measured:
  // {mm, relu} with relu measured at 50 us: 4.05 - 0.11 = 3.94 ms < T_L.
  ASSERT_TRUE(store.Put({"test-dev", "Relu", OpSignature(f.g, f.relu)}, {.median_s = 5e-5}).ok());
  std::vector<OpId> pair = {f.mm, f.relu};
  EXPECT_NEAR(m.ComputeTime(f.g, pair).seconds, 4e-3, 1e-12);
  // Never below what the fused kernel must still move, at the bandwidth the
  // members reached, capped at ten times the datasheet's (a cache): relu +
  // add both measured at 11 us (1 us past the launch) moving 20e6 B: sum
  // 22 us - savings < R = 12e6 B / (10 * 8e10) + 10 us = 25 us.
  ASSERT_TRUE(store.Put({"test-dev", "Relu", OpSignature(f.g, f.relu)}, {.median_s = 11e-6}).ok());
  ASSERT_TRUE(store.Put({"test-dev", "Add", OpSignature(f.g, f.add)}, {.median_s = 11e-6}).ok());
  std::vector<OpId> tail = {f.relu, f.add};
  EXPECT_NEAR(m.ComputeTime(f.g, tail).seconds, 12e6 / (10 * 0.8e11) + 1e-5, 1e-12);
  EXPECT_NEAR(m.RooflineTime(f.g, tail), 12e6 / 0.8e11 + 1e-5, 1e-12);
  // Members in cache: relu + add at 60 us each (50 us past the launch)
  // moving 20e6 B reach 2e11 B/s (2.5x the datasheet's): R = 12e6 / 2e11 +
  // 10 us = 70 us, not below the 120 us unfused minus what fusing saves at
  // that bandwidth.
  ASSERT_TRUE(store.Put({"test-dev", "Relu", OpSignature(f.g, f.relu)}, {.median_s = 60e-6}).ok());
  ASSERT_TRUE(store.Put({"test-dev", "Add", OpSignature(f.g, f.add)}, {.median_s = 60e-6}).ok());
  const double member_bw = 20e6 / (2 * 50e-6);
  EXPECT_NEAR(m.ComputeTime(f.g, tail).seconds, 12e6 / member_bw + 1e-5, 1e-12);
}

TEST(OpCostTest, CoverageGenerationAndCache) {
  Fixture f;
  FakeStore store;
  FakeEstimator est;
  ClusterCostModel m(TestCluster(), &store, &est, CommModel(TestCluster()));
  ProfileCoverage c = m.CountProfiled(f.g);
  EXPECT_EQ(c.measured, 0);
  EXPECT_EQ(c.estimated, 3);  // the AllReduce is not counted
  EXPECT_EQ(m.Generation(), "braid-0.1.0/profiles-0/estimator-fake-1");
  // Repeated lookups hit the cache, a new profile (new generation) refreshes it.
  int gets = store.gets();
  m.CountProfiled(f.g);
  EXPECT_EQ(store.gets(), gets);
  ASSERT_TRUE(store.Put({"test-dev", "MatMul", OpSignature(f.g, f.mm)}, {.median_s = 1e-3}).ok());
  c = m.CountProfiled(f.g);
  EXPECT_EQ(c.measured, 1);
  EXPECT_EQ(c.estimated, 2);
  EXPECT_EQ(m.Generation(), "braid-0.1.0/profiles-1/estimator-fake-1");
  ClusterCostModel bare(TestCluster(), nullptr, nullptr, CommModel(TestCluster()));
  EXPECT_EQ(bare.Generation(), "braid-0.1.0/profiles-none/estimator-none");
}

TEST(OpCostTest, BucketPackUsesTheMeasuredRateOnCpuClusters) {
  ClusterSpec cpu = *WithRanks(*ClusterPreset("cpu-local"), 1);
  FakeStore store;
  ClusterCostModel prior(cpu, &store, nullptr, CommModel(cpu));
  EXPECT_NEAR(prior.BucketPackTime(1'000'000), 2e6 / cpu.device.memory_bandwidth, 1e-15);
  ASSERT_TRUE(store.Put({cpu.device.kind, kBucketPackOp, kPerByteSignature},
                        {.median_s = 4e-10, .repetitions = 8}).ok());
  ClusterCostModel measured(cpu, &store, nullptr, CommModel(cpu));
  EXPECT_NEAR(measured.BucketPackTime(1'000'000), 4e-4, 1e-15);
  EXPECT_DOUBLE_EQ(measured.BucketPackTime(0), 0.0);
}

TEST(OpCostTest, CollectivesComeFromTheFittedCommModel) {
  ClusterSpec spec = *WithRanks(*ClusterPreset("disco-a"), 4);
  FakeStore store;
  for (int64_t bytes : {int64_t{1} << 20, int64_t{1} << 24}) {
    ASSERT_TRUE(store.PutComm(CommProfileKey(spec),
                              {"AllReduce", 4, bytes, 1e-9 * bytes + 1e-4}).ok());
  }
  absl::StatusOr<CommModel> comm = CommModelFromStore(spec, &store);
  ASSERT_TRUE(comm.ok()) << comm.status();
  ClusterCostModel m(spec, &store, nullptr, *comm);
  EXPECT_NEAR(m.CollectiveTime(Collective::kAllReduce, 1 << 22, 4), 1e-9 * (1 << 22) + 1e-4,
              1e-12);
  EXPECT_NEAR(m.CollectiveTime(Collective::kAllGather, 1 << 22, 4),
              CommModel(spec).Prior(Collective::kAllGather, 4).At(1 << 22), 1e-15);
  EXPECT_DOUBLE_EQ(m.ComputeSlowdownDuringComm(), 1.0);
  ClusterSpec cpu = *ClusterPreset("cpu-local");
  cpu.cpu.cores_per_node = 2;
  cpu = *WithRanks(cpu, 2);
  ClusterCostModel on_cpu(cpu, nullptr, nullptr, CommModel(cpu));
  EXPECT_DOUBLE_EQ(on_cpu.ComputeSlowdownDuringComm(), 2.0);
  EXPECT_DOUBLE_EQ(on_cpu.CommSlowdownDuringCompute(), 2.0);
  // Packing a bucket reads and writes its bytes once: 2 * 17 MB / 17 GB/s.
  EXPECT_NEAR(on_cpu.BucketPackTime(17'000'000), 2e-3, 1e-12);
  EXPECT_DOUBLE_EQ(m.CommSlowdownDuringCompute(), 1.0);
  EXPECT_DOUBLE_EQ(m.BucketPackTime(1 << 30), 0.0);  // NCCL reads in place
}

}  // namespace
}  // namespace braid::costmodel
