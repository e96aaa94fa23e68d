// Tests of profiling-task creation, leasing with deadlines (expired leases
// are re-queued) and idempotent result reports, with a fake clock.
#include "server/task_queue.h"

#include <cmath>
#include <limits>

#include <string>

#include "gmock/gmock.h"
#include "graph/text_format.h"
#include "gtest/gtest.h"
#include "tests/profiling_graph.h"

namespace braid::server {
namespace {

using ::testing::HasSubstr;

constexpr const char* kGraph = testing_graphs::kTwoProfilingKeys;

struct Fixture {
  Fixture() {
    store = *Store::Open(":memory:");
    profiles = *costmodel::ProfileStore::Open(":memory:");
    TaskQueueOptions o;
    o.clock = [this] { return now; };
    o.worker_timeout_s = 30;
    o.max_attempts = 2;
    queue = std::make_unique<TaskQueue>(store.get(), profiles.get(), o);
  }
  double now = 1000;
  std::unique_ptr<Store> store;
  std::unique_ptr<costmodel::ProfileStore> profiles;
  std::unique_ptr<TaskQueue> queue;
};

TEST(TaskQueueTest, TasksOnlyForMissingComputeKeys) {
  Fixture f;
  graph::Graph g = *graph::ParseText(kGraph);
  ASSERT_TRUE(f.profiles->Put({"cpu-1t", "Add", costmodel::OpSignature(g, 2)},
                              {.median_s = 1e-6, .spread_s = 0, .repetitions = 3})
                  .ok());
  EXPECT_EQ(*f.queue->CreateTasksForMisses(g, "cpu-1t"), 1);  // Relu only
  EXPECT_EQ(*f.queue->CreateTasksForMisses(g, "cpu-1t"), 0);  // already queued
  WorkerRecord w = *f.queue->Register("host-a", "cpu-1t", 1);
  std::vector<TaskRecord> leased = *f.queue->Lease(w.id, 8, 10);
  ASSERT_EQ(leased.size(), 1u);
  EXPECT_EQ(leased[0].op_type, "Relu");
  EXPECT_EQ(leased[0].shapes_json, R"({"inputs":[["f32",[4,8]]],"outputs":[["f32",[4,8]]]})");
  // The op alone parses back as a graph a worker can run.
  absl::StatusOr<graph::Graph> single = graph::ParseText(leased[0].op_graph_text);
  ASSERT_TRUE(single.ok()) << single.status();
  EXPECT_EQ(single->num_ops(), 1);
  EXPECT_EQ(costmodel::OpSignature(*single, 0), leased[0].signature);
}

// Fused-op tasks: one per distinct group missing from the store; the task's
// subgraph has the group's fused signature, so a worker's result is stored
// under the key the cost model looks up.
TEST(TaskQueueTest, FusedTasksCarryTheGroupAsASubgraphWithItsSignature) {
  Fixture f;
  graph::Graph g = *graph::ParseText(kGraph);
  const std::vector<graph::OpId> group = {0, 2};  // r1 -> add (r2 outside)
  const std::string sig = costmodel::FusedSignature(g, group);
  graph::Graph sub = FusedGroupGraph(g, group);
  std::vector<graph::OpId> all = {0, 1};
  EXPECT_EQ(costmodel::FusedSignature(sub, all), sig);
  EXPECT_EQ(*f.queue->CreateFusedTasks(g, {group, {2, 0}, {1}}, "cpu-1t"), 1);
  EXPECT_EQ(*f.queue->CreateFusedTasks(g, {group}, "cpu-1t"), 0);  // already queued
  const std::vector<graph::OpId> other = {1, 2};
  ASSERT_TRUE(f.profiles->Put({"cpu-1t", costmodel::kFusedOp, costmodel::FusedSignature(g, other)},
                              {.median_s = 1e-6, .spread_s = 0, .repetitions = 3})
                  .ok());
  EXPECT_EQ(*f.queue->CreateFusedTasks(g, {{1, 2}}, "cpu-1t"), 0);  // measured already
  WorkerRecord w = *f.queue->Register("host-a", "cpu-1t", 1);
  std::vector<TaskRecord> leased = *f.queue->Lease(w.id, 8, 10);
  ASSERT_EQ(leased.size(), 1u);
  EXPECT_EQ(leased[0].op_type, costmodel::kFusedOp);
  EXPECT_EQ(leased[0].signature, sig);
  absl::StatusOr<graph::Graph> parsed = graph::ParseText(leased[0].op_graph_text);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(costmodel::FusedSignature(*parsed, all), sig);
}

TEST(TaskQueueTest, LiveWorkersDependOnHeartbeats) {
  Fixture f;
  EXPECT_FALSE(f.queue->HasLiveWorker("cpu-1t"));
  WorkerRecord w = *f.queue->Register("host-a", "cpu-1t", 1);
  EXPECT_TRUE(f.queue->HasLiveWorker("cpu-1t"));
  EXPECT_FALSE(f.queue->HasLiveWorker("cuda:X"));
  f.now += 31;
  EXPECT_FALSE(f.queue->HasLiveWorker("cpu-1t"));
  ASSERT_TRUE(f.queue->Heartbeat(w.id).ok());
  EXPECT_TRUE(f.queue->HasLiveWorker("cpu-1t"));
  EXPECT_EQ(f.queue->Heartbeat("worker-nope").code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(f.queue->Register("h", "", 1).status().message()),
              HasSubstr("device_kind"));
  EXPECT_THAT(std::string(f.queue->Register("h", "cpu-1t", 0).status().message()),
              HasSubstr("slots"));
}

TEST(TaskQueueTest, ExpiredLeaseIsRequeuedAndOnlyTheLeaseHolderReports) {
  Fixture f;
  graph::Graph g = *graph::ParseText(kGraph);
  ASSERT_EQ(*f.queue->CreateTasksForMisses(g, "cpu-1t"), 2);
  WorkerRecord a = *f.queue->Register("a", "cpu-1t", 1);
  WorkerRecord b = *f.queue->Register("b", "cpu-1t", 1);
  std::vector<TaskRecord> la = *f.queue->Lease(a.id, 1, 10);  // deadline 1010
  ASSERT_EQ(la.size(), 1u);
  EXPECT_EQ(la[0].lease_deadline_unix_s, 1010);
  f.now = 1005;
  std::vector<TaskRecord> lb = *f.queue->Lease(b.id, 5, 10);
  ASSERT_EQ(lb.size(), 1u);  // only the other task: a's lease still holds
  EXPECT_NE(lb[0].id, la[0].id);
  f.now = 1011;  // a's lease expired
  std::vector<TaskRecord> lb2 = *f.queue->Lease(b.id, 5, 10);
  ASSERT_EQ(lb2.size(), 1u);
  EXPECT_EQ(lb2[0].id, la[0].id);
  EXPECT_NE(lb2[0].lease_id, la[0].lease_id);
  EXPECT_EQ(lb2[0].attempts, 2);

  // a's failure report under its stale lease changes nothing.
  EXPECT_FALSE(*f.queue->Report(a.id, la[0].id, la[0].lease_id, std::nullopt, "oom"));
  EXPECT_EQ(f.store->GetTask(la[0].id)->state, TaskState::kLeased);
  // a's late result under its stale lease is refused: the task belongs to
  // b's lease now, and the profile store stays empty.
  costmodel::ProfileSample s{.median_s = 2e-6, .spread_s = 1e-7, .repetitions = 5};
  absl::StatusOr<bool> stale = f.queue->Report(a.id, la[0].id, la[0].lease_id, s, "");
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(f.store->GetTask(la[0].id)->state, TaskState::kLeased);
  EXPECT_FALSE(f.profiles->Get({"cpu-1t", la[0].op_type, la[0].signature}).has_value());
  // a cannot use b's lease id either.
  EXPECT_EQ(f.queue->Report(a.id, lb2[0].id, lb2[0].lease_id, s, "").status().code(),
            absl::StatusCode::kFailedPrecondition);
  // Out-of-range results are refused before anything is stored.
  for (double bad : {std::numeric_limits<double>::infinity(), std::nan(""), 0.0, -1.0, 1e9}) {
    costmodel::ProfileSample poison{.median_s = bad, .spread_s = 0, .repetitions = 5};
    EXPECT_EQ(f.queue->Report(b.id, lb2[0].id, lb2[0].lease_id, poison, "").status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
  costmodel::ProfileSample bad_spread{.median_s = 1e-6, .spread_s = INFINITY, .repetitions = 5};
  EXPECT_EQ(f.queue->Report(b.id, lb2[0].id, lb2[0].lease_id, bad_spread, "").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(f.profiles->Get({"cpu-1t", la[0].op_type, la[0].signature}).has_value());
  // b, the current holder, finishes it.
  EXPECT_FALSE(*f.queue->Report(b.id, lb2[0].id, lb2[0].lease_id, s, ""));
  EXPECT_EQ(f.store->GetTask(la[0].id)->state, TaskState::kDone);
  std::optional<costmodel::ProfileSample> got =
      f.profiles->Get({"cpu-1t", la[0].op_type, la[0].signature});
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->median_s, 2e-6);
  // A second report of the finished task is a duplicate: acknowledged,
  // nothing changes.
  costmodel::ProfileSample other{.median_s = 9e-6, .spread_s = 0, .repetitions = 5};
  EXPECT_TRUE(*f.queue->Report(b.id, lb2[0].id, lb2[0].lease_id, other, ""));
  EXPECT_EQ(f.profiles->Get({"cpu-1t", la[0].op_type, la[0].signature})->median_s, 2e-6);

  // Failures under the current lease: re-queued, then failed after
  // max_attempts (2) leases.
  EXPECT_FALSE(*f.queue->Report(b.id, lb[0].id, lb[0].lease_id, std::nullopt, "unsupported"));
  EXPECT_EQ(f.store->GetTask(lb[0].id)->state, TaskState::kQueued);
  std::vector<TaskRecord> again = *f.queue->Lease(b.id, 5, 10);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_FALSE(*f.queue->Report(b.id, again[0].id, again[0].lease_id, std::nullopt, "unsupported"));
  EXPECT_EQ(f.store->GetTask(lb[0].id)->state, TaskState::kFailed);
  EXPECT_EQ(f.store->GetTask(lb[0].id)->error, "unsupported");
}

TEST(TaskQueueTest, RestartRequeuesEveryLease) {
  Fixture f;
  graph::Graph g = *graph::ParseText(kGraph);
  ASSERT_EQ(*f.queue->CreateTasksForMisses(g, "cpu-1t"), 2);
  WorkerRecord a = *f.queue->Register("a", "cpu-1t", 1);
  ASSERT_EQ(f.queue->Lease(a.id, 5, 600)->size(), 2u);
  EXPECT_EQ(*f.queue->RequeueAllLeased(), 2);
  EXPECT_EQ(*f.store->CountTasks(TaskState::kQueued), 2);
}

}  // namespace
}  // namespace braid::server
