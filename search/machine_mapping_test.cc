#include "search/machine_mapping.h"

#include <cmath>
#include <functional>
#include <ostream>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "costmodel/cluster.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace braid::costmodel {
void PrintTo(const MachineView& v, std::ostream* os) { *os << MachineViewString(v); }
}  // namespace braid::costmodel

namespace braid::search {
namespace {

using costmodel::MachineView;
using ::testing::HasSubstr;

constexpr double kInf = std::numeric_limits<double>::infinity();

// A cost model whose numbers the test picks: functions of (op, config, view)
// and of the two placements of a moved tensor. Counts its calls.
class FakeCostModel : public MachineMappingCostModel {
 public:
  using OpFn = std::function<double(const MappedOp&, const OpConfig&, const MachineView&)>;
  using MoveFn = std::function<double(const BoundaryTensor&, const MappedOp&, const OpPlacement&,
                                      const MappedOp&, const OpPlacement&)>;
  FakeCostModel(OpFn op, MoveFn move) : op_(std::move(op)), move_(std::move(move)) {}

  absl::StatusOr<double> OpCost(const MappedOp& op, const OpConfig& config,
                                const MachineView& view) override {
    ++op_calls;
    return op_(op, config, view);
  }
  absl::StatusOr<double> MovementCost(const BoundaryTensor& t, const MappedOp& producer,
                                      const OpPlacement& pp, const MappedOp& consumer,
                                      const OpPlacement& cp) override {
    ++move_calls;
    return move_(t, producer, pp, consumer, cp);
  }

  int op_calls = 0;
  int move_calls = 0;

 private:
  OpFn op_;
  MoveFn move_;
};

// Cost by config name, the same on every view.
FakeCostModel::OpFn ByName(std::map<std::pair<int, std::string>, double> table) {
  return [table](const MappedOp& op, const OpConfig& c, const MachineView&) {
    auto it = table.find({op.id, c.name});
    return it == table.end() ? kInf : it->second;
  };
}

// Movement: free when producer and consumer use the same config name and
// view, else `cost`.
FakeCostModel::MoveFn MoveUnlessSame(double cost) {
  return [cost](const BoundaryTensor&, const MappedOp& p, const OpPlacement& pp,
                const MappedOp& c, const OpPlacement& cp) {
    bool same = p.configs[pp.config].name == c.configs[cp.config].name && pp.view == cp.view;
    return same ? 0.0 : cost;
  };
}

MachineView View1D(int start, int n) { return {.start = start, .dims = {n}, .strides = {1}}; }

TEST(MachineMappingTest, SingleOpPicksCheapestConfig) {
  MachineMappingProblem p;
  p.ops = {{.id = 7, .name = "mm", .configs = {{"a", 1}, {"b", 2}, {"c", 4}}}};
  p.root = p.AddLeaf(7);
  p.resources.num_devices = 4;
  FakeCostModel m(ByName({{{7, "a"}, 10}, {{7, "b"}, 6}, {{7, "c"}, 7}}), MoveUnlessSame(0));
  absl::StatusOr<MachineMappingResult> r = FindOptimalMachineMapping(p, m);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_DOUBLE_EQ(r->cost, 6);
  ASSERT_EQ(r->placements.size(), 1u);
  EXPECT_EQ(r->placements.at(7).config, 1);
  EXPECT_EQ(r->placements.at(7).view, View1D(0, 2));  // first of the equal-cost views
  // Candidates: "a" on 4 offsets, "b" on 3, "c" on 1.
  EXPECT_EQ(m.op_calls, 8);
}

TEST(MachineMappingTest, ViewDependentCostPicksCheapestView) {
  MachineMappingProblem p;
  p.ops = {{.id = 0, .name = "mm", .configs = {{"a", 2}}}};
  p.root = p.AddLeaf(0);
  p.resources.num_devices = 4;
  FakeCostModel m([](const MappedOp&, const OpConfig&,
                     const MachineView& v) { return 10.0 - v.start; },  // start 2 is cheapest
                  MoveUnlessSame(0));
  absl::StatusOr<MachineMappingResult> r = FindOptimalMachineMapping(p, m);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_DOUBLE_EQ(r->cost, 8);
  EXPECT_EQ(r->placements.at(0).view, View1D(2, 2));
}

MachineMappingProblem Chain() {
  MachineMappingProblem p;
  p.ops = {{.id = 0, .name = "p", .configs = {{"a", 1}, {"b", 1}}},
           {.id = 1, .name = "c", .configs = {{"a", 1}, {"b", 1}}}};
  int a = p.AddLeaf(0), b = p.AddLeaf(1);
  p.root = p.AddSeries(a, b, {{.producer_op = 0, .consumer_op = 1, .bytes = 100}});
  p.resources.num_devices = 1;
  return p;
}

TEST(MachineMappingTest, ChainPaysMovementWhenConfigsDiffer) {
  // (a,a) = 1+5 = 6, (b,b) = 5+1 = 6, (a,b) = 1+1+3 = 5.
  FakeCostModel m(ByName({{{0, "a"}, 1}, {{0, "b"}, 5}, {{1, "a"}, 5}, {{1, "b"}, 1}}),
                  MoveUnlessSame(3));
  absl::StatusOr<MachineMappingResult> r = FindOptimalMachineMapping(Chain(), m);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_DOUBLE_EQ(r->cost, 5);
  EXPECT_EQ(r->placements.at(0).config, 0);
  EXPECT_EQ(r->placements.at(1).config, 1);
  EXPECT_EQ(m.move_calls, 4);  // every boundary pair priced once
}

TEST(MachineMappingTest, ChainAvoidsMovementWhenConfigsEqual) {
  // Same op costs, expensive movement: (a,a) = 6 beats (a,b) = 1+1+10.
  FakeCostModel m(ByName({{{0, "a"}, 1}, {{0, "b"}, 5}, {{1, "a"}, 5}, {{1, "b"}, 1}}),
                  MoveUnlessSame(10));
  absl::StatusOr<MachineMappingResult> r = FindOptimalMachineMapping(Chain(), m);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_DOUBLE_EQ(r->cost, 6);
  EXPECT_EQ(r->placements.at(0).config, r->placements.at(1).config);
}

TEST(MachineMappingTest, ChainMovementSeesViews) {
  // Both ops must use config "a" on 1 of 2 devices; op 0 is cheap on device 0,
  // op 1 on device 1; moving costs 4, so staying on one device (2+3 or 3+2)
  // ties with moving (2+4+2 = 8 loses).
  MachineMappingProblem p;
  p.ops = {{.id = 0, .configs = {{"a", 1}}}, {.id = 1, .configs = {{"a", 1}}}};
  int a = p.AddLeaf(0), b = p.AddLeaf(1);
  p.root = p.AddSeries(a, b, {{.producer_op = 0, .consumer_op = 1}});
  p.resources.num_devices = 2;
  FakeCostModel m(
      [](const MappedOp& op, const OpConfig&, const MachineView& v) {
        return v.start == op.id ? 2.0 : 3.0;
      },
      MoveUnlessSame(4));
  absl::StatusOr<MachineMappingResult> r = FindOptimalMachineMapping(p, m);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_DOUBLE_EQ(r->cost, 5);
  EXPECT_EQ(r->placements.at(0).view, r->placements.at(1).view);
}

MachineMappingProblem TwoBranches() {
  MachineMappingProblem p;
  p.ops = {{.id = 0, .configs = {{"x", 2}, {"y", 4}}}, {.id = 1, .configs = {{"x", 2}, {"y", 4}}}};
  int a = p.AddLeaf(0), b = p.AddLeaf(1);
  p.root = p.AddParallel(a, b);
  p.resources.num_devices = 4;
  return p;
}

TEST(MachineMappingTest, BranchesOnDisjointHalvesWhenCheaper) {
  // Halves: max(10, 10) = 10; sequential on all 4: 6 + 6 = 12.
  FakeCostModel m(ByName({{{0, "x"}, 10}, {{0, "y"}, 6}, {{1, "x"}, 10}, {{1, "y"}, 6}}),
                  MoveUnlessSame(0));
  absl::StatusOr<MachineMappingResult> r = FindOptimalMachineMapping(TwoBranches(), m);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_DOUBLE_EQ(r->cost, 10);
  EXPECT_EQ(r->placements.at(0).config, 0);
  EXPECT_EQ(r->placements.at(1).config, 0);
  EXPECT_EQ(r->placements.at(0).view, View1D(0, 2));
  EXPECT_EQ(r->placements.at(1).view, View1D(2, 2));
}

TEST(MachineMappingTest, BranchesSequentialWhenCheaper) {
  // Halves: max(10, 10) = 10; sequential on all 4: 4 + 4 = 8.
  FakeCostModel m(ByName({{{0, "x"}, 10}, {{0, "y"}, 4}, {{1, "x"}, 10}, {{1, "y"}, 4}}),
                  MoveUnlessSame(0));
  absl::StatusOr<MachineMappingResult> r = FindOptimalMachineMapping(TwoBranches(), m);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_DOUBLE_EQ(r->cost, 8);
  EXPECT_EQ(r->placements.at(0).view, View1D(0, 4));
  EXPECT_EQ(r->placements.at(1).view, View1D(0, 4));
}

TEST(MachineMappingTest, UnevenSplitUsed) {
  // Op 0 only runs on 3 devices, op 1 on 1: a 1+3 cut runs them at once
  // (cuts are tried from the smallest lower part, left side below first, then
  // above; the first of equal costs wins).
  MachineMappingProblem p;
  p.ops = {{.id = 0, .configs = {{"t3", 3}}}, {.id = 1, .configs = {{"t1", 1}}}};
  int a = p.AddLeaf(0), b = p.AddLeaf(1);
  p.root = p.AddParallel(a, b);
  p.resources.num_devices = 4;
  FakeCostModel m(ByName({{{0, "t3"}, 7}, {{1, "t1"}, 5}}), MoveUnlessSame(0));
  absl::StatusOr<MachineMappingResult> r = FindOptimalMachineMapping(p, m);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_DOUBLE_EQ(r->cost, 7);
  EXPECT_EQ(r->placements.at(0).view, View1D(1, 3));
  EXPECT_EQ(r->placements.at(1).view, View1D(0, 1));
}

TEST(MachineMappingTest, CacheIsHitWithinAndAcrossCalls) {
  FakeCostModel m(ByName({{{0, "a"}, 1}, {{0, "b"}, 5}, {{1, "a"}, 5}, {{1, "b"}, 1}}),
                  MoveUnlessSame(3));
  MachineMappingCache cache;
  MachineMappingProblem chain = Chain();
  absl::StatusOr<MachineMappingResult> r = FindOptimalMachineMapping(chain, m, &cache);
  ASSERT_TRUE(r.ok()) << r.status();
  // Boundary combos (p, c) in order (a,a) (b,a) (a,b) (b,b): each side is
  // solved for 2 fixed placements, so 4 of the 8 sub-solves hit.
  EXPECT_EQ(cache.misses(), 5);
  EXPECT_EQ(cache.hits(), 4);
  EXPECT_EQ(m.op_calls, 4);

  // Same problem again: the root is a hit, nothing is recomputed.
  r = FindOptimalMachineMapping(chain, m, &cache);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_DOUBLE_EQ(r->cost, 5);
  EXPECT_EQ(cache.hits(), 5);
  EXPECT_EQ(cache.misses(), 5);
  EXPECT_EQ(m.op_calls, 4);

  // A larger problem containing the chain: Parallel(chain, op 2) on 1 device.
  MachineMappingProblem bigger = chain;
  bigger.ops.push_back({.id = 2, .configs = {{"a", 1}}});
  int leaf = bigger.AddLeaf(2);
  bigger.root = bigger.AddParallel(chain.root, leaf);
  FakeCostModel m2(ByName({{{0, "a"}, 1}, {{0, "b"}, 5}, {{1, "a"}, 5}, {{1, "b"}, 1},
                           {{2, "a"}, 2}}),
                   MoveUnlessSame(3));
  r = FindOptimalMachineMapping(bigger, m2, &cache);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_DOUBLE_EQ(r->cost, 7);  // 1 device: sequential 5 + 2
  EXPECT_EQ(cache.hits(), 6);    // the chain's subresult
  EXPECT_EQ(m2.op_calls, 1);     // only op 2 was costed
}

TEST(MachineMappingTest, NoConfigFitsIsNotFound) {
  MachineMappingProblem p;
  p.ops = {{.id = 0, .configs = {{"big", 8}}}};
  p.root = p.AddLeaf(0);
  p.resources.num_devices = 4;
  FakeCostModel m(ByName({{{0, "big"}, 1}}), MoveUnlessSame(0));
  absl::StatusOr<MachineMappingResult> r = FindOptimalMachineMapping(p, m);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(r.status().message(), HasSubstr("no feasible mapping"));
  EXPECT_EQ(m.op_calls, 0);
}

TEST(MachineMappingTest, CostModelRulingAllOutIsNotFound) {
  MachineMappingProblem p = Chain();
  FakeCostModel m(ByName({{{0, "a"}, 1}}), MoveUnlessSame(0));  // op 1 never runs
  EXPECT_EQ(FindOptimalMachineMapping(p, m).status().code(), absl::StatusCode::kNotFound);
}

TEST(MachineMappingTest, MalformedProblemsAreInvalidArgument) {
  FakeCostModel m(ByName({}), MoveUnlessSame(0));
  MachineMappingProblem wrong_side = Chain();
  wrong_side.nodes[wrong_side.root].crossing = {{.producer_op = 1, .consumer_op = 0}};
  EXPECT_EQ(FindOptimalMachineMapping(wrong_side, m).status().code(),
            absl::StatusCode::kInvalidArgument);
  MachineMappingProblem reused = Chain();
  reused.root = reused.AddParallel(0, 0);
  EXPECT_EQ(FindOptimalMachineMapping(reused, m).status().code(),
            absl::StatusCode::kInvalidArgument);
  MachineMappingProblem no_root;
  EXPECT_EQ(FindOptimalMachineMapping(no_root, m).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(MachineMappingTest, ClusterViewsStayInsideRange) {
  absl::StatusOr<costmodel::ClusterSpec> base = costmodel::LoadCluster("dgx-h100");
  ASSERT_TRUE(base.ok()) << base.status();
  absl::StatusOr<costmodel::ClusterSpec> spec = costmodel::WithRanks(*base, 8);
  ASSERT_TRUE(spec.ok()) << spec.status();
  MachineResources res{.num_devices = 8, .cluster = *spec};
  absl::StatusOr<std::vector<MachineView>> all = CandidateViews(res, {"t4", 4}, 0, 8);
  absl::StatusOr<std::vector<MachineView>> upper = CandidateViews(res, {"t4", 4}, 4, 4);
  ASSERT_TRUE(all.ok() && upper.ok());
  EXPECT_GT(all->size(), upper->size());
  ASSERT_FALSE(upper->empty());
  for (const MachineView& v : *upper) {
    absl::StatusOr<std::vector<int>> devs = costmodel::ViewDevices(v, *spec);
    ASSERT_TRUE(devs.ok());
    for (int d : *devs) EXPECT_GE(d, 4) << costmodel::MachineViewString(v);
  }
}

// ---- brute force ----------------------------------------------------------

uint64_t Mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  h *= 0xbf58476d1ce4e5b9ULL;
  return h ^ (h >> 31);
}

uint64_t ViewHash(const MachineView& v) {
  uint64_t h = Mix(17, v.start);
  for (int d : v.dims) h = Mix(h, d);
  for (int s : v.strides) h = Mix(h, 100 + s);
  return h;
}

int BuildRandom(MachineMappingProblem& p, std::vector<int> ops, std::mt19937& rng) {
  if (ops.size() == 1) return p.AddLeaf(ops[0]);
  int cut = std::uniform_int_distribution<int>(1, static_cast<int>(ops.size()) - 1)(rng);
  std::vector<int> lo(ops.begin(), ops.begin() + cut), hi(ops.begin() + cut, ops.end());
  int l = BuildRandom(p, lo, rng), r = BuildRandom(p, hi, rng);
  if (rng() % 2 == 0) return p.AddParallel(l, r);
  std::vector<BoundaryTensor> crossing;
  int n = 1 + static_cast<int>(rng() % 2);
  for (int i = 0; i < n; ++i)
    crossing.push_back({.producer_op = lo[rng() % lo.size()],
                        .consumer_op = hi[rng() % hi.size()],
                        .bytes = 1 + static_cast<int64_t>(rng() % 8)});
  return p.AddSeries(l, r, std::move(crossing));
}

double BruteForce(const MachineMappingProblem& p, MachineMappingCostModel& m) {
  std::vector<std::vector<OpPlacement>> choices;
  for (const MappedOp& op : p.ops) {
    std::vector<OpPlacement> c;
    for (int i = 0; i < static_cast<int>(op.configs.size()); ++i) {
      absl::StatusOr<std::vector<MachineView>> views =
          CandidateViews(p.resources, op.configs[i], 0, p.resources.num_devices);
      EXPECT_TRUE(views.ok()) << views.status();
      if (!views.ok()) return kInf;
      for (const MachineView& v : *views) c.push_back({.config = i, .view = v});
    }
    choices.push_back(std::move(c));
  }
  double best = kInf;
  std::vector<size_t> idx(p.ops.size(), 0);
  while (true) {
    std::map<int, OpPlacement> pl;
    for (size_t i = 0; i < p.ops.size(); ++i) {
      if (choices[i].empty()) return kInf;
      pl[p.ops[i].id] = choices[i][idx[i]];
    }
    absl::StatusOr<double> c = EvaluateMachineMapping(p, m, pl);
    EXPECT_TRUE(c.ok()) << c.status();
    if (c.ok() && *c < best) best = *c;
    size_t i = 0;
    for (; i < idx.size() && ++idx[i] == choices[i].size(); ++i) idx[i] = 0;
    if (i == idx.size()) break;
  }
  return best;
}

// Returns whether the random problem had a feasible mapping.
bool CheckAgainstBruteForce(int seed, const MachineResources& resources) {
  std::mt19937 rng(seed);
  MachineMappingProblem p;
  p.resources = resources;
  int num_ops = std::uniform_int_distribution<int>(3, 5)(rng);
  const std::vector<std::string> names = {"dp", "tp", "sp"};
  const std::vector<int> sizes = {1, 2, 4};
  std::vector<int> ids;
  for (int i = 0; i < num_ops; ++i) {
    MappedOp op{.id = 10 + i, .name = "op" + std::to_string(i)};
    int nc = std::uniform_int_distribution<int>(2, 3)(rng);
    for (int c = 0; c < nc; ++c)
      op.configs.push_back({names[rng() % names.size()] + std::to_string(c), sizes[rng() % sizes.size()]});
    for (OpConfig& c : op.configs) c.name.pop_back();  // names may repeat across ops
    p.ops.push_back(op);
    ids.push_back(op.id);
  }
  p.root = BuildRandom(p, ids, rng);
  const uint64_t s = seed;
  FakeCostModel m(
      [s](const MappedOp& op, const OpConfig& c, const MachineView& v) {
        uint64_t h = Mix(Mix(Mix(s, op.id), std::hash<std::string>{}(c.name) + c.num_devices), ViewHash(v));
        if (h % 13 == 0) return kInf;  // sometimes it does not fit
        return static_cast<double>(1 + h % 40);
      },
      [s](const BoundaryTensor& t, const MappedOp& p, const OpPlacement& pp, const MappedOp& c,
          const OpPlacement& cp) {
        if (p.configs[pp.config].name == c.configs[cp.config].name && pp.view == cp.view) return 0.0;
        uint64_t h = Mix(Mix(s, ViewHash(pp.view)), ViewHash(cp.view));
        return static_cast<double>(t.bytes * (1 + h % 5));
      });
  double expected = BruteForce(p, m);
  absl::StatusOr<MachineMappingResult> r = FindOptimalMachineMapping(p, m);
  if (std::isinf(expected)) {
    EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound) << "seed " << seed;
    return false;
  }
  EXPECT_TRUE(r.ok()) << "seed " << seed << ": " << r.status();
  if (!r.ok()) return true;
  EXPECT_DOUBLE_EQ(r->cost, expected) << "seed " << seed;
  // The returned placements achieve the returned cost.
  absl::StatusOr<double> again = EvaluateMachineMapping(p, m, r->placements);
  EXPECT_TRUE(again.ok()) << again.status();
  if (again.ok()) EXPECT_DOUBLE_EQ(*again, r->cost) << "seed " << seed;
  return true;
}

TEST(MachineMappingTest, AgreesWithBruteForce1D) {
  int feasible = 0;
  for (int seed = 0; seed < 50; ++seed) feasible += CheckAgainstBruteForce(seed, {.num_devices = 4});
  EXPECT_GE(feasible, 40);  // the comparison is mostly about real optima
}

TEST(MachineMappingTest, AgreesWithBruteForceOnClusterViews) {
  absl::StatusOr<costmodel::ClusterSpec> base = costmodel::LoadCluster("dgx-h100");
  ASSERT_TRUE(base.ok()) << base.status();
  costmodel::ClusterSpec spec = *base;  // 2 nodes x 2 devices: views with strides
  spec.num_nodes = 2;
  spec.devices_per_node = 2;
  spec.num_ranks = 4;
  ASSERT_TRUE(costmodel::ValidateCluster(spec).ok()) << costmodel::ValidateCluster(spec);
  int feasible = 0;
  for (int seed = 100; seed < 120; ++seed)
    feasible += CheckAgainstBruteForce(seed, {.num_devices = 4, .cluster = spec});
  EXPECT_GE(feasible, 15);
}

}  // namespace
}  // namespace braid::search
