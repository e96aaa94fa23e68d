#include "worker/executor.h"

#include <ATen/ATen.h>

#include <cmath>

#include <algorithm>
#include <string>
#include <vector>

#include "glog/logging.h"
#include "gmock/gmock.h"
#include "graph/builder.h"
#include "graph/model_source.h"
#include "graph/training.h"
#include "gtest/gtest.h"
#include "worker/internal/allreduce_check.h"

namespace braid::worker {
namespace {

using ::testing::HasSubstr;
using graph::TensorId;

// x[8,16] -> Linear(32) -> Relu -> Linear(4): gradients of W1[32,16], b1[32],
// W2[4,32], b2[4] = 676 f32 elements.
graph::Graph TinyMlpTraining() {
  graph::GraphBuilder b("tiny_mlp");
  TensorId x = b.Input("x", {8, 16});
  b.MarkOutput(b.Linear(b.Relu(b.Linear(x, 32)), 4));
  absl::StatusOr<graph::Graph> fwd = std::move(b).Build();
  CHECK(fwd.ok()) << fwd.status();
  graph::TrainingOptions o;
  o.ranks = 2;
  absl::StatusOr<graph::Graph> g = graph::BuildTrainingGraph(*fwd, o);
  CHECK(g.ok()) << g.status();
  return *std::move(g);
}

std::vector<TensorId> Gradients(const graph::Graph& g) {
  std::vector<TensorId> out;
  for (TensorId t = 0; t < g.num_tensors(); ++t) {
    if (g.tensor(t).role == graph::TensorRole::kGradient) out.push_back(t);
  }
  return out;
}

TEST(ExecutorTest, ThreeStrategiesRunAndReduceEveryGradientOnce) {
  graph::Graph g = TinyMlpTraining();
  std::vector<TensorId> grads = Gradients(g);
  ASSERT_EQ(grads.size(), 4u);
  int64_t elems = 0;
  for (TensorId t : grads) elems += g.tensor(t).NumElements();
  ASSERT_EQ(elems, 676);
  std::vector<ExecStrategy> s(3);
  s[0] = {.name = "after_backward", .buckets = {grads}, .after_backward = true};
  s[1] = {.name = "two", .buckets = {{grads[0], grads[1]}, {grads[2], grads[3]}}};
  s[2] = {.name = "each", .buckets = {{grads[3]}, {grads[2]}, {grads[1]}, {grads[0]}}};
  TrainBenchOptions o;
  o.ranks = 2;
  o.warmup = 1;
  o.iterations = 2;
  o.rank_binary = BRAID_TRAIN_RANK_BINARY;
  o.timeout_s = 60;
  absl::StatusOr<std::vector<StrategyMeasurement>> m = RunTrainingBench(g, s, o);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->size(), 3u);
  const int64_t buckets[] = {1, 2, 4};
  for (int i = 0; i < 3; ++i) {
    const StrategyMeasurement& r = (*m)[i];
    EXPECT_EQ(r.name, s[i].name);
    ASSERT_EQ(r.iteration_s.size(), 2u);
    for (double t : r.iteration_s) EXPECT_GT(t, 0);
    EXPECT_GT(r.median_s, 0);
    ASSERT_EQ(r.cpu_s.size(), 2u);
    EXPECT_GT(r.median_cpu_s, 0);
    const ExecBookkeeping& b = r.bookkeeping;
    // Summed over 2 timed iterations x 2 ranks.
    EXPECT_EQ(b.allreduces_started, buckets[i] * 4) << r.name;
    EXPECT_EQ(b.waits, buckets[i] * 4) << r.name;
    EXPECT_EQ(b.gradients_reduced, 4 * 4) << r.name;
    EXPECT_EQ(b.gradients_not_once, 0) << r.name;
    EXPECT_EQ(b.updates_before_wait, 0) << r.name;
    EXPECT_EQ(b.bytes_copied, 676 * 4 * 4) << r.name;
    // The warm-up iteration checks every bucket on both ranks.
    EXPECT_EQ(b.buckets_verified, buckets[i] * 2) << r.name;
    EXPECT_EQ(b.verify_failures, 0) << r.name;
  }
}

// The allreduce check compares NaN with NaN: identical buffers full of NaN
// sum to NaN at the same places, which is the correct result; the plain
// at::allclose called it wrong.
TEST(ExecutorTest, AllreduceCheckAcceptsNanWhereEveryRankHasIt) {
  const at::Tensor own = at::tensor({1.0f, NAN, 3.0f, NAN});
  const at::Tensor summed = own * 2;  // what a correct allreduce of 2 equal buffers gives
  const at::Tensor expected = own * 2;
  EXPECT_FALSE(at::allclose(summed, expected, 1e-4, 1e-3));  // the check that was wrong
  EXPECT_TRUE(internal::AllreduceSumMatches(summed, expected));
  EXPECT_FALSE(internal::AllreduceSumMatches(at::tensor({2.0f, NAN, 7.0f, NAN}), expected));
  EXPECT_FALSE(internal::AllreduceSumMatches(at::tensor({NAN, NAN, 6.0f, NAN}), expected));
}

// The ONNX transformer encoder (LayerNorm decomposed into Pow, ReduceMean,
// Sqrt) on 2 ranks: its random stand-in constants make NaN gradients, and
// every allreduce of them is still checked correct.
TEST(ExecutorTest, NanGradientsOfAnOnnxEncoderReduceCorrectly) {
  std::vector<std::string> warnings;
  absl::StatusOr<graph::Graph> fwd =
      graph::LoadModel("tests/data/transformer_encoder_opset14.onnx", {}, &warnings);
  ASSERT_TRUE(fwd.ok()) << fwd.status();
  graph::TrainingOptions to;
  to.ranks = 2;
  absl::StatusOr<graph::Graph> g = graph::BuildTrainingGraph(*fwd, to);
  ASSERT_TRUE(g.ok()) << g.status();
  std::vector<ExecStrategy> s(1);
  s[0] = {.name = "after_backward", .buckets = {Gradients(*g)}, .after_backward = true};
  TrainBenchOptions o;
  o.ranks = 2;
  o.warmup = 1;
  o.iterations = 1;
  o.rank_binary = BRAID_TRAIN_RANK_BINARY;
  o.timeout_s = 120;
  absl::StatusOr<std::vector<StrategyMeasurement>> m = RunTrainingBench(*g, s, o);
  ASSERT_TRUE(m.ok()) << m.status();
  const ExecBookkeeping& b = (*m)[0].bookkeeping;
  EXPECT_EQ(b.buckets_verified, 2);
  EXPECT_EQ(b.verify_failures, 0);
}

TEST(ExecutorTest, CollectiveProbeTimesEverySizeOnEveryRank) {
  graph::Graph g = TinyMlpTraining();
  ExecStrategy probe{.name = "probe"};
  probe.probe_allreduce_bytes = {4096, 65536};
  TrainBenchOptions o;
  o.ranks = 2;
  o.warmup = 1;
  o.iterations = 3;
  o.rank_binary = BRAID_TRAIN_RANK_BINARY;
  o.timeout_s = 60;
  absl::StatusOr<std::vector<StrategyMeasurement>> m = RunTrainingBench(g, {probe}, o);
  ASSERT_TRUE(m.ok()) << m.status();
  const StrategyMeasurement& r = m->front();
  ASSERT_EQ(r.probe_s.size(), 2u);
  for (const auto& [bytes, ts] : r.probe_s) {
    EXPECT_TRUE(bytes == 4096 || bytes == 65536);
    ASSERT_EQ(ts.size(), 6u);  // 3 iterations x 2 ranks
    for (double t : ts) EXPECT_GT(t, 0);
  }
  EXPECT_EQ(r.bookkeeping.allreduces_started, 0);  // no training ops, no buckets
  probe.probe_allreduce_bytes = {6};
  EXPECT_EQ(ValidateStrategy(g, probe).code(), absl::StatusCode::kOk);  // sizes are checked by the run
  EXPECT_EQ(RunTrainingBench(g, {probe}, o).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ExecutorTest, RejectsAGradientInTwoBuckets) {
  graph::Graph g = TinyMlpTraining();
  std::vector<TensorId> grads = Gradients(g);
  ExecStrategy s{.name = "dup", .buckets = {grads, {grads[0]}}};
  absl::Status st = ValidateStrategy(g, s);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("is in two buckets"));
}

TEST(ExecutorTest, RejectsAMissingGradient) {
  graph::Graph g = TinyMlpTraining();
  std::vector<TensorId> grads = Gradients(g);
  ExecStrategy s{.name = "short", .buckets = {{grads[0], grads[1], grads[2]}}};
  absl::Status st = ValidateStrategy(g, s);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("'" + g.tensor(grads[3]).name + "' is in no bucket"));
}

TEST(ExecutorTest, RejectsAnOrderThatRunsAConsumerFirst) {
  graph::Graph g = TinyMlpTraining();
  ExecStrategy s{.name = "reversed", .buckets = {Gradients(g)}};
  absl::StatusOr<std::vector<graph::OpId>> topo = g.TopologicalOrder();
  ASSERT_TRUE(topo.ok());
  for (graph::OpId id : *topo) {
    if (g.op(id).type != "AllReduce") s.order.push_back(id);
  }
  EXPECT_TRUE(ValidateStrategy(g, s).ok());
  std::reverse(s.order.begin(), s.order.end());
  absl::Status st = ValidateStrategy(g, s);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("order runs"));
  s.order.pop_back();
  EXPECT_THAT(std::string(ValidateStrategy(g, s).message()), HasSubstr("non-collective ops"));
}

}  // namespace
}  // namespace braid::worker
