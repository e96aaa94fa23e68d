#include "worker/worker_agent.h"

#include <chrono>
#include <thread>

#include "glog/logging.h"
#include "gmock/gmock.h"
#include "graph/text_format.h"
#include "gtest/gtest.h"
#include "tests/profiling_graph.h"
#include "server/server.h"

namespace braid::worker {
namespace {

using ::testing::HasSubstr;

constexpr const char* kGraph = testing_graphs::kTwoProfilingKeys;

std::unique_ptr<server::BraidServer> StartInMemory() {
  server::ServerOptions o;
  o.listen = "";
  o.db_path = ":memory:";
  o.client_token = "client";
  o.worker_token = "worker";
  absl::StatusOr<std::unique_ptr<server::BraidServer>> s = server::StartServer(o);
  CHECK(s.ok()) << s.status();
  return *std::move(s);
}

bool WaitFor(const std::function<bool()>& pred, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return pred();
}

braid::v1::ProfilingTask TaskFor(const graph::Graph& g, graph::OpId op) {
  graph::Graph single = server::SingleOpGraph(g, op);
  braid::v1::ProfilingTask t;
  t.set_task_id("task-1");
  t.set_op_type(single.op(0).type);
  t.set_signature(costmodel::OpSignature(single, 0));
  t.set_op_graph_text(graph::ToText(single));
  for (graph::TensorId id : single.op(0).inputs) {
    auto* s = t.add_inputs();
    s->set_dtype("f32");
    for (int64_t d : single.tensor(id).shape) s->add_dims(d);
  }
  for (graph::TensorId id : single.op(0).outputs) {
    auto* s = t.add_outputs();
    s->set_dtype("f32");
    for (int64_t d : single.tensor(id).shape) s->add_dims(d);
  }
  return t;
}

TEST(WorkerAgentTest, DeviceKinds) {
  EXPECT_EQ(*DeviceKindFor("cpu"), CpuDeviceKind());
  absl::StatusOr<std::string> cuda = DeviceKindFor("cuda");
  if (cuda.ok()) {  // a GPU machine with the CUDA backend built
    EXPECT_THAT(*cuda, ::testing::StartsWith("cuda:"));
  } else {  // no backend in this build, or no usable device: says which
    EXPECT_EQ(cuda.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(cuda.status().message()), HasSubstr("--device: 'cuda'"));
  }
  EXPECT_EQ(DeviceKindFor("tpu").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(WorkerAgentTest, TaskGraphChecksTheTaskAgainstItsGraph) {
  graph::Graph g = *graph::ParseText(kGraph);
  braid::v1::ProfilingTask t = TaskFor(g, 2);  // add
  absl::StatusOr<graph::Graph> ok = TaskGraph(t);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->op(0).type, "Add");
  EXPECT_EQ(ok->op(0).inputs.size(), 2u);

  braid::v1::ProfilingTask bad_type = t;
  bad_type.set_op_type("Mul");
  EXPECT_THAT(std::string(TaskGraph(bad_type).status().message()),
              HasSubstr("op_type: task says Mul, op_graph_text has Add"));
  braid::v1::ProfilingTask bad_shape = t;
  bad_shape.mutable_inputs(1)->set_dims(0, 5);
  EXPECT_THAT(std::string(TaskGraph(bad_shape).status().message()),
              HasSubstr("inputs[1]: task says f32[5,8], op_graph_text has f32[4,8]"));
  braid::v1::ProfilingTask bad_sig = t;
  bad_sig.set_signature("nonsense");
  EXPECT_THAT(std::string(TaskGraph(bad_sig).status().message()),
              HasSubstr("signature: task says 'nonsense'"));
  braid::v1::ProfilingTask bad_text = t;
  bad_text.set_op_graph_text("not a graph");
  EXPECT_EQ(TaskGraph(bad_text).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(WorkerAgentTest, MeasuresLeasedTasksAndStoresThem) {
  std::unique_ptr<server::BraidServer> srv = StartInMemory();
  graph::Graph g = *graph::ParseText(kGraph);
  ASSERT_EQ(*srv->tasks().CreateTasksForMisses(g, CpuDeviceKind()), 2);

  WorkerAgentOptions o;
  o.token = "worker";
  o.idle_poll_s = 0.01;
  o.slots = 4;
  int calls = 0;
  o.measurer = [&](const graph::Graph& single, graph::OpId op) -> absl::StatusOr<costmodel::ProfileSample> {
    ++calls;
    if (single.op(op).type == "Add") return costmodel::ProfileSample{2.5e-6, 1e-7, 11};
    return costmodel::ProfileSample{1.25e-6, 5e-8, 11};
  };
  WorkerAgent agent(srv->InProcessChannel(), o);
  std::thread t([&] { EXPECT_TRUE(agent.Run().ok()); });
  const costmodel::ProfileKey relu{CpuDeviceKind(), "Relu", costmodel::OpSignature(g, 0)};
  const costmodel::ProfileKey add{CpuDeviceKind(), "Add", costmodel::OpSignature(g, 2)};
  EXPECT_TRUE(WaitFor([&] { return srv->profiles().Get(relu) && srv->profiles().Get(add); }, 5));
  agent.Stop();
  t.join();
  EXPECT_EQ(srv->profiles().Get(relu)->median_s, 1.25e-6);
  EXPECT_EQ(srv->profiles().Get(add)->median_s, 2.5e-6);
  EXPECT_EQ(srv->profiles().Get(add)->repetitions, 11);
  const WorkerAgentStats st = agent.stats();
  EXPECT_EQ(st.registrations, 1);
  EXPECT_EQ(st.leased, 2);
  EXPECT_EQ(st.reported_ok, 2);
  EXPECT_EQ(st.duplicates, 0);
  EXPECT_EQ(calls, 2);
  EXPECT_TRUE(srv->tasks().HasLiveWorker(CpuDeviceKind()));
}

// A fused-op task is timed by the real CPU fused executor (no fake
// measurer) and lands in the store under the group's fused signature.
TEST(WorkerAgentTest, MeasuresFusedTasksWithTheCpuFusedExecutor) {
  std::unique_ptr<server::BraidServer> srv = StartInMemory();
  graph::Graph g = *graph::ParseText(kGraph);
  const std::vector<graph::OpId> group = {0, 2};  // Relu -> Add
  ASSERT_EQ(*srv->tasks().CreateFusedTasks(g, {group}, CpuDeviceKind()), 1);
  WorkerAgentOptions o;
  o.token = "worker";
  o.idle_poll_s = 0.01;
  o.profile.repetitions = 3;
  o.measurer = [](const graph::Graph&, graph::OpId) -> absl::StatusOr<costmodel::ProfileSample> {
    return absl::InternalError("single-op measurer used for a fused task");
  };
  WorkerAgent agent(srv->InProcessChannel(), o);
  std::thread t([&] { EXPECT_TRUE(agent.Run().ok()); });
  const costmodel::ProfileKey key{CpuDeviceKind(), costmodel::kFusedOp,
                                  costmodel::FusedSignature(g, group)};
  EXPECT_TRUE(WaitFor([&] { return srv->profiles().Get(key).has_value(); }, 20));
  agent.Stop();
  t.join();
  ASSERT_TRUE(srv->profiles().Get(key).has_value());
  EXPECT_GT(srv->profiles().Get(key)->median_s, 0);
  EXPECT_LT(srv->profiles().Get(key)->median_s, 0.1);
  EXPECT_EQ(agent.stats().reported_ok, 1);
}

TEST(WorkerAgentTest, FailedMeasurementIsReportedAsAnError) {
  std::unique_ptr<server::BraidServer> srv = StartInMemory();
  graph::Graph g = *graph::ParseText(kGraph);
  ASSERT_EQ(*srv->tasks().CreateTasksForMisses(g, CpuDeviceKind()), 2);
  WorkerAgentOptions o;
  o.token = "worker";
  o.idle_poll_s = 0.01;
  o.slots = 2;
  o.measurer = [](const graph::Graph&, graph::OpId) -> absl::StatusOr<costmodel::ProfileSample> {
    return absl::UnimplementedError("no kernel");
  };
  WorkerAgent agent(srv->InProcessChannel(), o);
  std::thread t([&] { agent.Run().IgnoreError(); });
  EXPECT_TRUE(WaitFor([&] { return agent.stats().reported_error >= 2; }, 5));
  agent.Stop();
  t.join();
  EXPECT_EQ(agent.stats().reported_ok, 0);
}

TEST(WorkerAgentTest, WrongTokenRetriesWithBackoffAndStops) {
  std::unique_ptr<server::BraidServer> srv = StartInMemory();
  WorkerAgentOptions o;
  o.token = "client";  // the Strategy token is not a worker token
  o.backoff_initial_s = 0.01;
  o.backoff_max_s = 0.02;
  WorkerAgent agent(srv->InProcessChannel(), o);
  std::thread t([&] { EXPECT_TRUE(agent.Run().ok()); });
  EXPECT_TRUE(WaitFor([&] { return agent.stats().rpc_failures >= 3; }, 5));
  agent.Stop();
  t.join();
  EXPECT_EQ(agent.stats().registrations, 0);
  EXPECT_FALSE(srv->tasks().HasLiveWorker(CpuDeviceKind()));
}

TEST(WorkerAgentTest, BadOptionsAreInvalidArgument) {
  std::unique_ptr<server::BraidServer> srv = StartInMemory();
  WorkerAgentOptions o;
  WorkerAgent no_token(srv->InProcessChannel(), o);
  EXPECT_THAT(std::string(no_token.Run().message()), HasSubstr("--token"));
  o.token = "worker";
  o.device = "tpu";
  WorkerAgent tpu(srv->InProcessChannel(), o);
  EXPECT_EQ(tpu.Run().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace braid::worker
