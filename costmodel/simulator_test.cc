#include "costmodel/simulator.h"

#include <chrono>
#include <cmath>
#include <iostream>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace braid::costmodel {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr double kMs = 1e-3;
constexpr double kTol = 1e-12;

TEST(SimulatorTest, SerialChain) {
  SimGraph g;
  int a = g.AddCompute("a", 0, 1 * kMs);
  int b = g.AddCompute("b", 0, 2 * kMs, {a});
  g.AddCompute("c", 0, 3 * kMs, {b});
  SimResult r = Simulate(g);
  EXPECT_NEAR(r.iteration_s, 6 * kMs, kTol);
  EXPECT_NEAR(r.compute_s, 6 * kMs, kTol);
  EXPECT_EQ(r.comm_s, 0);
  EXPECT_NEAR(r.overlap_ratio, 1.0, 1e-9);
  EXPECT_THAT(r.start_s, ElementsAre(0, 1 * kMs, 3 * kMs));
  EXPECT_THAT(r.critical_path, ElementsAre(0, 1, 2));
  EXPECT_EQ(r.unfinished_tasks, 0);
}

TEST(SimulatorTest, ReadyQueueIsFifoInReadinessOrder) {
  // a and d are ready at 0 (index order); b and c become ready when a ends,
  // behind d.
  SimGraph g;
  int a = g.AddCompute("a", 0, 1 * kMs);
  int b = g.AddCompute("b", 0, 1 * kMs, {a});
  int c = g.AddCompute("c", 0, 1 * kMs, {a});
  int d = g.AddCompute("d", 0, 1 * kMs);
  SimResult r = Simulate(g);
  EXPECT_NEAR(r.start_s[d], 1 * kMs, kTol);
  EXPECT_NEAR(r.start_s[b], 2 * kMs, kTol);
  EXPECT_NEAR(r.start_s[c], 3 * kMs, kTol);
  EXPECT_NEAR(r.iteration_s, 4 * kMs, kTol);
  // c waited in the queue: its predecessor on the path is b, the stream's
  // previous task.
  EXPECT_THAT(r.critical_path, ElementsAre(a, d, b, c));
}

TEST(SimulatorTest, CommunicationOverlapsCompute) {
  // b1 (2 ms) -> b2 (3 ms); AllReduce of b1's gradient (4 ms) runs 2..6 while
  // b2 runs 2..5.
  SimGraph g;
  int b1 = g.AddCompute("b1", 0, 2 * kMs);
  int b2 = g.AddCompute("b2", 0, 3 * kMs, {b1});
  int ar = g.AddComm("ar1", 0, 4 * kMs, {b1});
  SimResult r = Simulate(g);
  EXPECT_NEAR(r.start_s[b2], 2 * kMs, kTol);
  EXPECT_NEAR(r.start_s[ar], 2 * kMs, kTol);
  EXPECT_NEAR(r.iteration_s, 6 * kMs, kTol);
  EXPECT_NEAR(r.compute_s, 5 * kMs, kTol);
  EXPECT_NEAR(r.comm_s, 4 * kMs, kTol);
  EXPECT_NEAR(r.overlap_ratio, 9.0 / 6.0, 1e-9);
  EXPECT_THAT(r.critical_path, ElementsAre(b1, ar));
}

TEST(SimulatorTest, TwoCollectivesContendForOneChannel) {
  // a 0..1, b 1..2; c1 (3 ms, after a) 1..4; c2 (2 ms, after b) must wait for
  // the channel: 4..6.
  SimGraph g;
  int a = g.AddCompute("a", 0, 1 * kMs);
  int b = g.AddCompute("b", 0, 1 * kMs, {a});
  int c1 = g.AddComm("c1", 0, 3 * kMs, {a});
  int c2 = g.AddComm("c2", 0, 2 * kMs, {b});
  SimResult r = Simulate(g);
  EXPECT_NEAR(r.start_s[c1], 1 * kMs, kTol);
  EXPECT_NEAR(r.start_s[c2], 4 * kMs, kTol);
  EXPECT_NEAR(r.iteration_s, 6 * kMs, kTol);
  EXPECT_THAT(r.critical_path, ElementsAre(a, c1, c2));

  // Issued in the other order, c1 waits for c2 (which waits for b): c2
  // 2..4, c1 4..7.
  g.comm_order = {c2, c1};
  r = Simulate(g);
  EXPECT_NEAR(r.start_s[c2], 2 * kMs, kTol);
  EXPECT_NEAR(r.start_s[c1], 4 * kMs, kTol);
  EXPECT_NEAR(r.iteration_s, 7 * kMs, kTol);
  EXPECT_THAT(r.critical_path, ElementsAre(a, b, c2, c1));

  // Two channels: no contention.
  g.comm_order.clear();
  g.num_channels = 2;
  g.tasks[c2].resource = 1;
  r = Simulate(g);
  EXPECT_NEAR(r.start_s[c2], 2 * kMs, kTol);
  EXPECT_NEAR(r.iteration_s, 4 * kMs, kTol);
}

TEST(SimulatorTest, FusedTensorAllReduceWaitsForItsLastMember) {
  // Gradients of b1 and b3 fused into one 2 ms AllReduce: it starts when b3
  // ends at 3 ms.
  SimGraph g;
  int b1 = g.AddCompute("b1", 0, 1 * kMs);
  int b2 = g.AddCompute("b2", 0, 1 * kMs, {b1});
  int b3 = g.AddCompute("b3", 0, 1 * kMs, {b2});
  int ar = g.AddComm("ar(b1,b3)", 0, 2 * kMs, {b1, b3});
  SimResult r = Simulate(g);
  EXPECT_NEAR(r.start_s[ar], 3 * kMs, kTol);
  EXPECT_NEAR(r.iteration_s, 5 * kMs, kTol);
  EXPECT_THAT(r.critical_path, ElementsAre(b1, b2, b3, ar));
}

TEST(SimulatorTest, ComputeSlowsDownWhileCommRuns) {
  // Slowdown 2 on device 0. a 0..1; comm c (2 ms) 1..3; b (4 ms of work)
  // starts at 1 at half speed: 1 ms of work by 3, the remaining 3 ms at full
  // speed: ends at 6 (5 without contention).
  SimGraph g;
  int a = g.AddCompute("a", 0, 1 * kMs);
  int b = g.AddCompute("b", 0, 4 * kMs, {a});
  int c = g.AddComm("c", 0, 2 * kMs, {a}, /*device=*/0);
  g.compute_slowdown = {2.0};
  SimResult r = Simulate(g);
  EXPECT_NEAR(r.end_s[c], 3 * kMs, kTol);
  EXPECT_NEAR(r.end_s[b], 6 * kMs, kTol);
  EXPECT_NEAR(r.compute_s, 6 * kMs, kTol);  // wall-clock busy time
  g.compute_slowdown = {1.0};
  EXPECT_NEAR(Simulate(g).end_s[b], 5 * kMs, kTol);
}

TEST(SimulatorTest, CommAndComputeShareTheCores) {
  // Both slowdowns 2 on device 0 (CPU ranks). a 0..1; from 1, comm c (2 ms
  // of work) and b (4 ms of work) both run at half speed: c ends at 5; b has
  // done 2 ms of work by then and does the other 2 ms at full speed: ends at 7.
  SimGraph g;
  int a = g.AddCompute("a", 0, 1 * kMs);
  int b = g.AddCompute("b", 0, 4 * kMs, {a});
  int c = g.AddComm("c", 0, 2 * kMs, {a}, /*device=*/0);
  g.compute_slowdown = {2.0};
  g.comm_slowdown = {2.0};
  SimResult r = Simulate(g);
  EXPECT_NEAR(r.end_s[c], 5 * kMs, kTol);
  EXPECT_NEAR(r.end_s[b], 7 * kMs, kTol);
  EXPECT_NEAR(r.comm_s, 4 * kMs, kTol);  // wall-clock busy time
  // Compute ends mid-collective: b (1 ms of work) ends at 3; c did 1 ms of
  // its 4 ms by then and the rest at full speed: ends at 6.
  g.tasks[b].duration_s = 1 * kMs;
  g.tasks[c].duration_s = 4 * kMs;
  r = Simulate(g);
  EXPECT_NEAR(r.end_s[b], 3 * kMs, kTol);
  EXPECT_NEAR(r.end_s[c], 6 * kMs, kTol);
  // A collective with nothing to compute beside it runs at full speed.
  SimGraph alone;
  int x = alone.AddCompute("x", 0, 1 * kMs);
  int y = alone.AddComm("y", 0, 2 * kMs, {x}, /*device=*/0);
  alone.comm_slowdown = {2.0};
  EXPECT_NEAR(Simulate(alone).end_s[y], 3 * kMs, kTol);
}

TEST(SimulatorTest, SlowdownStartsAndEndsMidTask) {
  // x (4 ms) on device 0 from 0; comm y (2 ms, device 0's buffer) starts at 1
  // after z on device 1. x: 1 ms of work in 0..1, 1 ms in 1..3 at half
  // speed, 2 ms in 3..5.
  SimGraph g;
  g.num_devices = 2;
  g.compute_slowdown = {2.0, 1.0};
  int x = g.AddCompute("x", 0, 4 * kMs);
  int z = g.AddCompute("z", 1, 1 * kMs);
  int y = g.AddComm("y", 0, 2 * kMs, {z}, /*device=*/0);
  SimResult r = Simulate(g);
  EXPECT_NEAR(r.start_s[y], 1 * kMs, kTol);
  EXPECT_NEAR(r.end_s[x], 5 * kMs, kTol);
  EXPECT_NEAR(r.iteration_s, 5 * kMs, kTol);
  // A comm task on device 1 does not slow device 0.
  g.tasks[y].device = 1;
  EXPECT_NEAR(Simulate(g).end_s[x], 4 * kMs, kTol);
}

TEST(SimulatorTest, MemoryPeak) {
  // Device 0: 100 resident + 1000 persistent. a (10 B, freed after c),
  // b (20 B, freed after c), c (5 B, freed at its end), in a chain.
  SimGraph g;
  g.resident_bytes = {100};
  int p = g.AddCompute("param", 0, 0);
  g.tasks[p].alloc_bytes = 1000;
  g.tasks[p].persistent = true;
  int a = g.AddCompute("a", 0, 1 * kMs);
  int b = g.AddCompute("b", 0, 1 * kMs, {a});
  int c = g.AddCompute("c", 0, 1 * kMs, {b});
  g.tasks[a].alloc_bytes = 10;
  g.tasks[a].release_after = {c};
  g.tasks[b].alloc_bytes = 20;
  g.tasks[b].release_after = {c};
  g.tasks[c].alloc_bytes = 5;
  EXPECT_THAT(Simulate(g).peak_memory_bytes, ElementsAre(1135));
  // b freed at its own end: peak is 1130 while b runs.
  g.tasks[b].release_after.clear();
  EXPECT_THAT(Simulate(g).peak_memory_bytes, ElementsAre(1130));
}

TEST(SimulatorTest, BusyTimesAreWhatTheFullyOverlappedBoundBuildsOn) {
  // search::FullyOverlappedBound is max(compute_s, comm_s): 4 ms here, while
  // the dependencies make the iteration 7 ms.
  SimGraph g;
  g.num_channels = 2;
  int a = g.AddCompute("a", 0, 1 * kMs);
  int b = g.AddCompute("b", 0, 2 * kMs, {a});
  g.AddComm("c0", 0, 4 * kMs, {b});
  g.AddComm("c1", 1, 1 * kMs, {a});
  SimResult r = Simulate(g);
  EXPECT_NEAR(r.compute_s, 3 * kMs, kTol);
  EXPECT_NEAR(r.comm_s, 4 * kMs, kTol);
  EXPECT_NEAR(r.iteration_s, 7 * kMs, kTol);
}

TEST(SimulatorTest, ChromeTraceIsValidJsonWithOneEventPerTask) {
  SimGraph g;
  int a = g.AddCompute("a", 0, 1 * kMs);
  g.tasks[a].op_ids = {3, 4};
  g.AddCompute("b", 0, 2 * kMs, {a});
  g.AddComm("ar \"x\"", 0, 4 * kMs, {a});
  SimResult r = Simulate(g);
  nlohmann::json j = nlohmann::json::parse(ChromeTrace(g, r));
  int complete = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "X") {
      ++complete;
      if (e["name"] == "b") {
        EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 1000.0);
        EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 2000.0);
      }
      if (e["name"] == "a") EXPECT_EQ(e["args"]["op_ids"], nlohmann::json({3, 4}));
    }
  }
  EXPECT_EQ(complete, 3);
}

TEST(SimulatorTest, DeadlockAndValidation) {
  SimGraph g;
  int a = g.AddCompute("a", 0, 1 * kMs);
  int c1 = g.AddComm("c1", 0, 1 * kMs, {a});
  int c2 = g.AddComm("c2", 0, 1 * kMs, {c1});
  EXPECT_TRUE(ValidateSimGraph(g).ok());
  g.comm_order = {c2, c1};  // c2 is issued first but needs c1
  SimResult r = Simulate(g);
  EXPECT_EQ(r.unfinished_tasks, 2);
  EXPECT_TRUE(std::isinf(r.iteration_s));
  absl::Status s = ValidateSimGraph(g);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("comm_order deadlock"));

  SimGraph cyc;
  int x = cyc.AddCompute("x", 0, 1 * kMs);
  int y = cyc.AddCompute("y", 0, 1 * kMs, {x});
  cyc.tasks[x].deps = {y};
  EXPECT_THAT(std::string(ValidateSimGraph(cyc).message()), HasSubstr("dependency cycle"));
  cyc.tasks[x].deps = {7};
  EXPECT_THAT(std::string(ValidateSimGraph(cyc).message()),
              HasSubstr("task 0 (x): invalid dependency 7"));
}

// A random DAG with ties (durations on a 0.25 ms grid), several devices and
// channels, slowdowns and memory.
// With `shuffled_order`, comm_order lists every comm task in a random order
// (often deadlocking: the incremental result must match that too).
SimGraph RandomGraph(int n, uint32_t seed, int devices = 3, int channels = 2,
                     bool shuffled_order = false, bool comm_slowdown = false) {
  std::mt19937 rng(seed);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  SimGraph g;
  g.num_devices = devices;
  g.num_channels = channels;
  for (int d = 0; d < devices; ++d) g.compute_slowdown.push_back(1.0 + 0.5 * uni(0, 2));
  g.resident_bytes.assign(devices, 1000);
  for (int i = 0; i < n; ++i) {
    std::vector<int> deps;
    if (i > 0) {
      int k = uni(0, 3);
      for (int j = 0; j < k; ++j) deps.push_back(uni(std::max(0, i - 30), i - 1));
    }
    double dur = 0.25 * kMs * uni(0, 8);
    int t = uni(0, 9) < 2 && channels > 0
                ? g.AddComm("comm", uni(0, channels - 1), dur, deps, uni(0, devices - 1))
                : g.AddCompute("op", uni(0, devices - 1), dur, deps);
    SimTask& task = g.tasks[t];
    task.alloc_bytes = uni(0, 100);
    task.persistent = uni(0, 19) == 0;
    if (uni(0, 1)) task.release_after.push_back(std::min(n - 1, i + uni(0, 10)));
  }
  if (shuffled_order) {
    for (int i = 0; i < n; ++i) {
      if (g.tasks[i].kind == TaskKind::kComm) g.comm_order.push_back(i);
    }
    // Local shuffles only, so that most runs do not deadlock early.
    for (size_t i = 1; i < g.comm_order.size(); ++i) {
      if (uni(0, 3) == 0) std::swap(g.comm_order[i - 1], g.comm_order[i]);
    }
  }
  // Comm slowdowns from a generator of their own, so the graphs above are
  // the same as before comm slowdowns existed.
  std::mt19937 rng2(seed ^ 0x5bd1e995u);
  for (int d = 0; comm_slowdown && d < devices; ++d) {
    g.comm_slowdown.push_back(1.0 + 0.5 * std::uniform_int_distribution<int>(0, 2)(rng2));
  }
  return g;
}

void ExpectSameResult(const SimResult& a, const SimResult& b) {
  EXPECT_EQ(a.iteration_s, b.iteration_s);
  EXPECT_EQ(a.compute_s, b.compute_s);
  EXPECT_EQ(a.comm_s, b.comm_s);
  EXPECT_EQ(a.overlap_ratio, b.overlap_ratio);
  EXPECT_EQ(a.peak_memory_bytes, b.peak_memory_bytes);
  EXPECT_EQ(a.critical_path, b.critical_path);
  EXPECT_EQ(a.start_s, b.start_s);
  EXPECT_EQ(a.end_s, b.end_s);
  EXPECT_EQ(a.unfinished_tasks, b.unfinished_tasks);
}

TEST(IncrementalSimulatorTest, EqualsFullSimulationOnRandomChanges) {
  for (uint32_t seed = 1; seed <= 30; ++seed) {
    SimGraph g = RandomGraph(300, seed, 3, 2, /*shuffled_order=*/seed > 20,
                             /*comm_slowdown=*/seed % 2 == 0);
    IncrementalSimulator inc(g);
    ExpectSameResult(inc.result(), Simulate(g));
    std::mt19937 rng(seed * 7919);
    auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    for (int round = 0; round < 15; ++round) {
      std::vector<int> changed;
      int k = uni(1, 3);
      for (int j = 0; j < k; ++j) {
        int i = uni(0, 299);
        SimTask& t = g.tasks[i];
        switch (uni(0, 5)) {
          case 0:
          case 1: t.duration_s = 0.25 * kMs * uni(0, 8); break;
          case 2:
            if (i > 0) t.deps = {uni(std::max(0, i - 30), i - 1)};
            break;
          case 3: t.alloc_bytes = uni(0, 500); break;
          case 4:
            if (t.kind == TaskKind::kCompute) t.resource = uni(0, g.num_devices - 1);
            break;
          case 5: t.release_after = {std::min(299, i + uni(0, 20))}; break;
        }
        changed.push_back(i);
      }
      SCOPED_TRACE(testing::Message() << "seed " << seed << " round " << round);
      ExpectSameResult(inc.Resimulate(g, changed), Simulate(g));
      if (::testing::Test::HasFailure()) return;
    }
    // The diffing overload finds the change itself.
    g.tasks[150].duration_s += 1 * kMs;
    ExpectSameResult(inc.Resimulate(g), Simulate(g));
    // Incompatible change: a new task -> full run, still exact.
    g.AddCompute("extra", 0, 1 * kMs, {299});
    ExpectSameResult(inc.Resimulate(g), Simulate(g));
  }
}

TEST(IncrementalSimulatorTest, LateChangeReplaysFewSteps) {
  SimGraph g = RandomGraph(5000, 42, 4, 2);
  IncrementalSimulator inc(g);
  // The task that starts last among those starting before 95% of the run.
  const SimResult& base = inc.result();
  int late = -1;
  for (int i = 0; i < 5000; ++i) {
    if (base.start_s[i] < 0.95 * base.iteration_s &&
        (late < 0 || base.start_s[i] > base.start_s[late])) {
      late = i;
    }
  }
  g.tasks[late].duration_s += 0.5 * kMs;
  SimResult r = inc.Resimulate(g, {late});
  ExpectSameResult(r, Simulate(g));
  EXPECT_LT(inc.replayed_steps(), inc.total_steps() / 10);
}

// The data-parallel shape the lowering produces (search/lowering.cc): one
// compute stream, one channel; a forward chain, a backward chain, one
// AllReduce per backward op (issued in production order) and one optimizer
// update per AllReduce; activations freed by their backward op. Durations are
// arbitrary reals or, with `grid`, multiples of 0.25 ms (many exact ties).
SimGraph DataParallelGraph(int layers, double slowdown, uint32_t seed, bool grid) {
  std::mt19937 rng(seed);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto dur = [&](double scale) {
    return grid ? 0.25 * kMs * uni(1, 8) * scale
                : std::uniform_real_distribution<double>(0.05, 3.0)(rng) * kMs * scale;
  };
  SimGraph g;
  g.compute_slowdown = {slowdown};
  g.resident_bytes = {1 << 20};
  int params = g.AddCompute("params", 0, 0);
  g.tasks[params].alloc_bytes = 4096;
  g.tasks[params].persistent = true;
  std::vector<int> fwd(layers), bwd(layers), ar(layers);
  for (int l = 0; l < layers; ++l) {
    fwd[l] = g.AddCompute("fwd", 0, dur(1), l > 0 ? std::vector<int>{fwd[l - 1]} : std::vector<int>{});
    g.tasks[fwd[l]].alloc_bytes = uni(1, 1000);
  }
  int prev = g.AddCompute("loss", 0, dur(0.2), {fwd[layers - 1]});
  for (int l = layers - 1; l >= 0; --l) {
    bwd[l] = g.AddCompute("bwd", 0, dur(2), {prev});
    prev = bwd[l];
    g.tasks[fwd[l]].release_after = {bwd[l]};
    // Gradients: larger on some layers, so that the channel falls behind.
    ar[l] = g.AddComm("allreduce", 0, dur(uni(0, 3) == 0 ? 4 : 0.5), {bwd[l]}, 0);
    g.tasks[bwd[l]].alloc_bytes = uni(1, 1000);
    g.tasks[bwd[l]].release_after = {ar[l]};
    g.comm_order.push_back(ar[l]);
  }
  for (int l = 0; l < layers; ++l) g.AddCompute("update", 0, dur(0.1), {ar[l]});
  return g;
}

TEST(IncrementalSimulatorTest, ConvergesRightAfterAChangeInAChain) {
  // a..e, 1 ms each but e (3 ms), in a chain. c becomes 2 ms: the replay
  // runs c's start and end (2 steps), then the state is the recorded one
  // shifted by 1 ms. (e keeps the longest duration, and so the tick size.)
  SimGraph g;
  int prev = -1;
  for (int i = 0; i < 5; ++i) {
    prev = g.AddCompute("t", 0, (i == 4 ? 3 : 1) * kMs,
                        prev < 0 ? std::vector<int>{} : std::vector<int>{prev});
  }
  IncrementalSimulator inc(g);
  EXPECT_EQ(inc.total_steps(), 7);  // 5 finishes, the start, the final empty step
  g.tasks[2].duration_s = 2 * kMs;
  SimResult r = inc.Resimulate(g, {2});
  EXPECT_EQ(inc.replayed_steps(), 2);
  EXPECT_EQ(inc.total_steps(), 7);
  EXPECT_THAT(r.start_s, ElementsAre(0, 1 * kMs, 2 * kMs, 4 * kMs, 5 * kMs));
  EXPECT_THAT(r.end_s, ElementsAre(1 * kMs, 2 * kMs, 4 * kMs, 5 * kMs, 8 * kMs));
  EXPECT_EQ(r.iteration_s, 8 * kMs);
  EXPECT_EQ(r.compute_s, 8 * kMs);
  EXPECT_THAT(r.critical_path, ElementsAre(0, 1, 2, 3, 4));
  ExpectSameResult(r, Simulate(g));
  // And back: shifted by -1 ms.
  g.tasks[2].duration_s = 1 * kMs;
  r = inc.Resimulate(g, {2});
  EXPECT_EQ(inc.replayed_steps(), 2);
  EXPECT_EQ(r.iteration_s, 7 * kMs);
  ExpectSameResult(r, Simulate(g));
}

TEST(IncrementalSimulatorTest, EqualsFullSimulationOnDataParallelDurationChanges) {
  int forward_changes = 0;
  double replayed_share = 0;
  int rounds_total = 0;
  for (double slowdown : {1.0, 1.6}) {
    for (bool grid : {false, true}) {
      for (uint32_t seed = 1; seed <= 3; ++seed) {
        const int layers = 60;
        SimGraph g = DataParallelGraph(layers, slowdown, seed, grid);
        // CPU ranks: the collectives slow down too (seed 3 of the slowed runs).
        if (slowdown != 1.0 && seed == 3) g.comm_slowdown = {slowdown};
        IncrementalSimulator inc(g);
        ExpectSameResult(inc.result(), Simulate(g));
        std::mt19937 rng(seed * 31 + grid);
        const int n = static_cast<int>(g.tasks.size());
        for (int round = 0; round < 40; ++round) {
          const int i = std::uniform_int_distribution<int>(1, n - 1)(rng);
          const double f = std::uniform_real_distribution<double>(0.5, 2.0)(rng);
          g.tasks[i].duration_s = grid ? 0.25 * kMs * std::round(g.tasks[i].duration_s * f / (0.25 * kMs))
                                       : g.tasks[i].duration_s * f;
          SCOPED_TRACE(testing::Message() << "slowdown " << slowdown << " grid " << grid << " seed "
                                          << seed << " round " << round << " task " << i);
          SimResult r = inc.Resimulate(g, {i});
          ExpectSameResult(r, Simulate(g));
          if (::testing::Test::HasFailure()) return;
          replayed_share += static_cast<double>(inc.replayed_steps()) / inc.total_steps();
          ++rounds_total;
          // Nothing else runs during the forward pass: a change there has
          // converged once the changed task has finished.
          if (i >= 2 && i <= layers) {
            ++forward_changes;
            EXPECT_LE(inc.replayed_steps(), 2);
          }
        }
      }
    }
  }
  EXPECT_GT(forward_changes, 50);
  // Changes in the backward pass replay until the channel catches up.
  std::cout << "mean replayed share: " << replayed_share / rounds_total << std::endl;
  EXPECT_LT(replayed_share / rounds_total, 0.25);
}

TEST(IncrementalSimulatorTest, ChangingTheTimeResolutionFallsBackToAFullRun) {
  SimGraph g = DataParallelGraph(20, 1.6, 5, false);
  IncrementalSimulator inc(g);
  // The longest task 100 times longer: a coarser tick (sim_engine.h).
  int longest = 0;
  for (int i = 0; i < static_cast<int>(g.tasks.size()); ++i) {
    if (g.tasks[i].duration_s > g.tasks[longest].duration_s) longest = i;
  }
  g.tasks[longest].duration_s *= 100;
  ExpectSameResult(inc.Resimulate(g, {longest}), Simulate(g));
  EXPECT_EQ(inc.replayed_steps(), inc.total_steps());
  g.tasks[longest].duration_s /= 100;
  ExpectSameResult(inc.Resimulate(g, {longest}), Simulate(g));
  g.tasks[3].duration_s *= 1.5;
  ExpectSameResult(inc.Resimulate(g, {3}), Simulate(g));
  EXPECT_LT(inc.replayed_steps(), inc.total_steps() / 2);
}

TEST(SimulatorTest, TimesAreExactSumsRoundedOnce) {
  // A single addition is IEEE's correctly rounded sum.
  SimGraph g;
  int a = g.AddCompute("a", 0, 0.1);
  g.AddCompute("b", 0, 0.2, {a});
  EXPECT_EQ(Simulate(g).iteration_s, 0.1 + 0.2);
  // A chain's makespan is the exact sum of its (tick-rounded) durations, as is
  // its compute busy time: equal, not merely close.
  std::mt19937 rng(3);
  SimGraph chain;
  int prev = -1;
  for (int i = 0; i < 1000; ++i) {
    double d = std::uniform_real_distribution<double>(1e-6, 1e-2)(rng);
    prev = chain.AddCompute("t", 0, d, prev < 0 ? std::vector<int>{} : std::vector<int>{prev});
  }
  SimResult r = Simulate(chain);
  EXPECT_EQ(r.compute_s, r.iteration_s);
  double naive = 0;
  for (const SimTask& t : chain.tasks) naive += t.duration_s;
  EXPECT_NEAR(r.iteration_s, naive, 1e-15 * 1000);
}

TEST(SimulatorPerfTest, FiveThousandTasks) {
  SimGraph g = RandomGraph(5000, 7, 4, 2);
  auto t0 = std::chrono::steady_clock::now();
  const int reps = 50;
  double sink = 0;
  for (int i = 0; i < reps; ++i) sink += Simulate(g).iteration_s;
  double full = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;

  IncrementalSimulator inc(g);
  const SimResult& base = inc.result();
  int late = -1;
  for (int i = 0; i < 5000; ++i) {
    if (base.start_s[i] < 0.9 * base.iteration_s &&
        (late < 0 || base.start_s[i] > base.start_s[late])) {
      late = i;
    }
  }
  t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) {
    g.tasks[late].duration_s = (i % 2 ? 1.0 : 0.5) * kMs;
    sink += inc.Resimulate(g, {late}).iteration_s;
  }
  double incr = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
  std::cout << "full simulation of 5000 tasks: " << full * 1e3 << " ms ("
            << 5000 / full / 1e6 << " M tasks/s); incremental after a change at 90% of the "
            << "iteration: " << incr * 1e3 << " ms (" << full / incr << "x)" << std::endl;
  EXPECT_GT(sink, 0);
  EXPECT_LT(full, 0.05);  // generous: the target is < 5 ms on an idle core
}

}  // namespace
}  // namespace braid::costmodel
