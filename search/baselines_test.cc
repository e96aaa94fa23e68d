#include "search/baselines.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "search/test_util.h"
#include "search/validity.h"

namespace braid::search {
namespace {

using ::testing::ElementsAre;

TEST(DdpBucketAssignmentTest, MatchesTorchDistributed) {
  // Gradient sizes (f32 elements) in gradient-ready order. Expected buckets
  // produced once with python3-torch 1.13.1 (Debian):
  //   /usr/bin/python3 -c "import torch, torch.distributed as dist;
  //     sizes=[1024,153600,153600,524288,2621440,5242880,256,7864320,1310720,
  //            2097152,4194304,1];
  //     ts=[torch.empty(n,dtype=torch.float32) for n in sizes];
  //     print(dist._compute_bucket_assignment_by_size(ts,
  //         [dist._DEFAULT_FIRST_BUCKET_BYTES, 25*1024*1024], [],
  //         list(range(len(ts)))))"
  // -> ([[0, 1, 2], [3, 4, 5], [6, 7], [8, 9, 10], [11]],
  //     [1048576, 26214400, 26214400, 26214400, 26214400])
  // (the same without tensor_indices).
  const std::vector<int64_t> elems = {1024,    153600,  153600,  524288,  2621440, 5242880,
                                      256,     7864320, 1310720, 2097152, 4194304, 1};
  std::vector<int64_t> bytes;
  for (int64_t e : elems) bytes.push_back(4 * e);
  const std::vector<int> dtypes(bytes.size(), 0);
  const int64_t limits[] = {1024 * 1024, 25LL * 1024 * 1024};
  EXPECT_THAT(DdpBucketAssignment(bytes, dtypes, limits),
              ElementsAre(ElementsAre(0, 1, 2), ElementsAre(3, 4, 5), ElementsAre(6, 7),
                          ElementsAre(8, 9, 10), ElementsAre(11)));
}

TEST(DdpBucketAssignmentTest, SeparatesDtypes) {
  const std::vector<int64_t> bytes = {600, 600, 600, 600};
  const std::vector<int> dtypes = {0, 1, 0, 1};
  const int64_t limits[] = {1000, 5000};
  // Key 0 closes [0, 2] at 1200 >= 1000, key 1 closes [1, 3] right after.
  EXPECT_THAT(DdpBucketAssignment(bytes, dtypes, limits),
              ElementsAre(ElementsAre(0, 2), ElementsAre(1, 3)));
}

TEST(HorovodBucketsTest, GroupsByOneMsCycleUpToThreshold) {
  const std::vector<double> ready = {0.2e-3, 0.9e-3, 1.0e-3, 1.5e-3, 3.2e-3, 3.9e-3};
  const std::vector<int64_t> bytes = {10, 20, 30, 40, 50, 5};
  const std::vector<int> dtypes(ready.size(), 0);
  // Cycle 1 (ticks at 1 ms) handles 0, 1, 2: 10 + 20 fit in 55, 30 does not
  // and starts the next buffer. Cycle 2: 3. Cycle 4: 4 and 5 (55 <= 55).
  EXPECT_THAT(HorovodBuckets(ready, bytes, dtypes, 55, 1e-3),
              ElementsAre(ElementsAre(0, 1), ElementsAre(2), ElementsAre(3), ElementsAre(4, 5)));
}

TEST(HorovodBucketsTest, ReadyOrderWithinACycle) {
  const std::vector<double> ready = {0.7e-3, 0.1e-3, 0.4e-3};
  const std::vector<int64_t> bytes = {1, 1, 1};
  const std::vector<int> dtypes = {0, 0, 0};
  EXPECT_THAT(HorovodBuckets(ready, bytes, dtypes, 128 << 20, 1e-3),
              ElementsAre(ElementsAre(1, 2, 0)));
}

TEST(CombineAllReducesTest, BytesAndCountThresholds) {
  const std::vector<int64_t> bytes = {10, 20, 30, 5};
  EXPECT_THAT(CombineAllReduces(bytes, 35, 256),
              ElementsAre(ElementsAre(0, 1), ElementsAre(2, 3)));
  const std::vector<int64_t> ones = {1, 1, 1};
  EXPECT_THAT(CombineAllReduces(ones, 100, 2), ElementsAre(ElementsAre(0, 1), ElementsAre(2)));
  const std::vector<int64_t> big = {100, 1};
  EXPECT_THAT(CombineAllReduces(big, 30, 256), ElementsAre(ElementsAre(0), ElementsAre(1)));
}

// x -> mm (MatMul) -> add (+b) -> relu -> {mm2 (MatMul), red (ReduceSum)}
TEST(XlaOpFusionTest, FusionsOfTheFirstPassAreNeverDuplicated) {
  Graph g("xla");
  TensorId x = g.AddTensor("x", {4, 8}, DType::kF32, TensorRole::kInput);
  TensorId w = g.AddTensor("w", {8, 8}, DType::kF32, TensorRole::kParameter);
  TensorId b = g.AddTensor("b", {8}, DType::kF32, TensorRole::kParameter);
  TensorId w2 = g.AddTensor("w2", {8, 8}, DType::kF32, TensorRole::kParameter);
  TensorId h0 = g.AddTensor("h0", {4, 8}, DType::kF32, TensorRole::kActivation);
  TensorId h = g.AddTensor("h", {4, 8}, DType::kF32, TensorRole::kActivation);
  TensorId y = g.AddTensor("y", {4, 8}, DType::kF32, TensorRole::kActivation);
  TensorId z = g.AddTensor("z", {4, 8}, DType::kF32, TensorRole::kActivation);
  TensorId s = g.AddTensor("s", {8}, DType::kF32, TensorRole::kActivation);
  OpId mm = g.AddOp("mm", "MatMul", {x, w}, {h0});
  OpId add = g.AddOp("add", "Add", {h0, b}, {h});
  OpId relu = g.AddOp("relu", "Relu", {h}, {y});
  g.AddOp("mm2", "MatMul", {y, w2}, {z});
  OpId red = g.AddOp("red", "ReduceSum", {y}, {s});
  g.AddOutput(z);
  g.AddOutput(s);
  (void)mm;
  // First pass (no duplication): red cannot take relu (two users); relu
  // takes add, its only user's producer: a loop fusion {add, relu} feeding
  // mm2 (a cuBLAS call, never fused). Second pass: relu is now a fusion,
  // which GPU fusion never duplicates ("the producer is a fusion"): red
  // stays alone and reads y.
  Plan p;
  p.groups = XlaOpFusionGroups(g, BaselineConfig{});
  p = Canonicalize(p);
  ASSERT_EQ(p.groups.size(), 1u);
  EXPECT_THAT(p.groups[0].ops, ElementsAre(add, relu));
  EXPECT_TRUE(p.groups[0].duplicated.empty());
  EXPECT_TRUE(ValidatePlan(g, p).ok()) << ValidatePlan(g, p);
  (void)red;
}

// x -> a -> {r1 (ReduceSum), r2 (ReduceMean)}: a standalone cheap producer
// with two users is duplicated in the second pass; an expensive one is not.
TEST(XlaOpFusionTest, SecondPassDuplicatesOnlyCheapStandaloneProducers) {
  for (const std::string type : {"Relu", "Exp"}) {
    Graph g("fan");
    TensorId x = g.AddTensor("x", {4, 8}, DType::kF32, TensorRole::kInput);
    TensorId ta = g.AddTensor("ta", {4, 8}, DType::kF32, TensorRole::kActivation);
    TensorId s1 = g.AddTensor("s1", {8}, DType::kF32, TensorRole::kActivation);
    TensorId s2 = g.AddTensor("s2", {8}, DType::kF32, TensorRole::kActivation);
    OpId a = g.AddOp("a", type, {x}, {ta});
    OpId r1 = g.AddOp("r1", "ReduceSum", {ta}, {s1});
    OpId r2 = g.AddOp("r2", "ReduceMean", {ta}, {s2});
    g.AddOutput(s1);
    g.AddOutput(s2);
    Plan p;
    p.groups = XlaOpFusionGroups(g, BaselineConfig{});
    p = Canonicalize(p);
    if (type == "Exp") {
      EXPECT_TRUE(p.groups.empty());  // "expensive producer would be duplicated"
      continue;
    }
    // r2 (visited first) gets a copy; then r1 is a's only user left and
    // takes it as its own member (the original would be dead).
    ASSERT_EQ(p.groups.size(), 2u);
    EXPECT_THAT(p.groups[0].ops, ElementsAre(a, r1));
    EXPECT_TRUE(p.groups[0].duplicated.empty());
    EXPECT_THAT(p.groups[1].ops, ElementsAre(a, r2));
    EXPECT_THAT(p.groups[1].duplicated, ElementsAre(a));
    EXPECT_TRUE(ValidatePlan(g, p).ok()) << ValidatePlan(g, p);
  }
}

TEST(XlaOpFusionTest, OperandLimitStopsFusion) {
  Graph g("wide");
  std::vector<TensorId> ins;
  for (int i = 0; i < 3; ++i) {
    ins.push_back(g.AddTensor("in" + std::to_string(i), {4}, DType::kF32, TensorRole::kInput));
  }
  TensorId t1 = g.AddTensor("t1", {4}, DType::kF32, TensorRole::kActivation);
  TensorId t2 = g.AddTensor("t2", {4}, DType::kF32, TensorRole::kActivation);
  g.AddOp("add1", "Add", {ins[0], ins[1]}, {t1});
  g.AddOp("add2", "Add", {t1, ins[2]}, {t2});
  g.AddOutput(t2);
  BaselineConfig cfg;
  EXPECT_EQ(XlaOpFusionGroups(g, cfg).size(), 1u);  // 3 inputs + 1 output
  cfg.xla_max_operands_and_outputs_per_fusion = 3;
  EXPECT_TRUE(XlaOpFusionGroups(g, cfg).empty());
}

TEST(RunBaselinesTest, AllBaselinesValidAndFoBoundsThem) {
  Graph g = testing::MakeMlpTraining(4, 512, 32);
  FakeCostModel cm;
  cm.type_s = {{"MatMul", 2e-3}, {"SgdMomentumUpdate", 0.2e-3}};
  cm.default_s = 0.3e-3;
  cm.comm_s_per_byte = 2e-9;
  cm.comm_latency_s = 0.5e-3;
  absl::StatusOr<BaselineResults> r = RunBaselines(g, cm);
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<std::string> names;
  for (const EvaluatedPlan& b : r->baselines) {
    names.push_back(b.name);
    EXPECT_TRUE(ValidatePlan(g, b.plan).ok()) << b.name << ": " << ValidatePlan(g, b.plan);
    EXPECT_GE(b.sim.iteration_s, r->fo_bound_s) << b.name;
  }
  EXPECT_THAT(names, ElementsAre("no_fusion", "xla_op_fusion", "allreduce_combiner",
                                 "jax_default", "horovod", "ddp"));
  // 8 gradients of 1 MiB (w) and 2 KiB (b), ready as b3, w3, b2, w2, ...:
  // the combiner (30 MiB) makes one bucket; DDP closes its first bucket at
  // >= 1 MiB, i.e. {b3, w3}, and the other six stay under 25 MiB.
  EXPECT_EQ(r->Find("allreduce_combiner")->plan.buckets.size(), 1u);
  EXPECT_EQ(r->Find("no_fusion")->plan.buckets.size(), 8u);
  const Plan& ddp = r->Find("ddp")->plan;
  ASSERT_EQ(ddp.buckets.size(), 2u);
  ASSERT_EQ(ddp.buckets[0].grads.size(), 2u);
  EXPECT_EQ(g.tensor(ddp.buckets[0].grads[0]).name, "l3.b.grad");
  EXPECT_EQ(g.tensor(ddp.buckets[0].grads[1]).name, "l3.w.grad");
  EXPECT_EQ(ddp.buckets[1].grads.size(), 6u);
  EXPECT_TRUE(r->Find("ddp")->plan.groups.empty());
  EXPECT_FALSE(r->Find("xla_op_fusion")->plan.groups.empty());
}

}  // namespace
}  // namespace braid::search
