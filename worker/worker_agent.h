// The profiling worker agent behind `braid-worker` (and the in-process worker
// of the embedded `braid` CLI): registers with braid-server's Workers
// service, keeps a heartbeat, leases profiling tasks with a deadline, measures
// each op with the CPU profiler (or, with --device cuda, the CUDA profiler of
// worker/cuda/cuda_profiler.h) and reports the result. When the server is
// unreachable it retries with exponential backoff; when the server forgot the
// worker (NOT_FOUND after a restart on a new database) it registers again.
//
//   WorkerAgentOptions o;
//   o.token = "worker-secret";
//   WorkerAgent agent(grpc::CreateChannel("braid:50051", creds), o);
//   std::thread t([&] { agent.Run(); });   // returns after Stop()
//   ...
//   agent.Stop();
//   t.join();
//
// A task carries its op as a one-op braid text graph (op 0) plus the op type,
// signature and shapes; the agent rebuilds the graph, checks that type,
// signature and shapes agree with the task (so the measurement is stored
// under the key the server asked for), and measures op 0.
#ifndef BRAID_WORKER_WORKER_AGENT_H_
#define BRAID_WORKER_WORKER_AGENT_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "braid/v1/workers.grpc.pb.h"
#include "costmodel/profile_store.h"
#include "graph/graph.h"
#include "grpcpp/channel.h"
#include "worker/cpu_profiler.h"

namespace braid::worker {

// Measures op `op` of `g`; the default is the device's profiler's ProfileOp.
using OpMeasurer =
    std::function<absl::StatusOr<costmodel::ProfileSample>(const graph::Graph& g, graph::OpId op)>;

// Measures the fused kernel of all ops of `g` (a fused-op task's subgraph).
using FusedMeasurer = std::function<absl::StatusOr<costmodel::ProfileSample>(const graph::Graph& g)>;

struct WorkerAgentOptions {
  std::string token;        // Workers bearer token (required)
  std::string name;         // shown to operators; default: the host name
  // "cpu" (device kind "cpu-1t:<isa>:<CPU model>", CpuDeviceKind()), "cuda"
  // or "cuda:N" (GPU N, device kind
  // "cuda:<name>"; builds with the CUDA toolkit only), "auto" (GPU 0 when
  // there is one, else cpu).
  std::string device = "cpu";
  int slots = 1;            // tasks measured at once (sequentially per lease batch)
  int max_tasks = 0;        // tasks per LeaseTasks call; 0 = slots
  double lease_s = 60;      // requested lease length
  double idle_poll_s = 0.5;  // wait after an empty lease
  double backoff_initial_s = 0.2;
  double backoff_max_s = 10;
  double rpc_timeout_s = 10;
  ProfileOptions profile;
  OpMeasurer measurer;  // empty: the device's profiler with `profile`
  FusedMeasurer fused_measurer;  // empty: the device's fused-op profiler
};

struct WorkerAgentStats {
  int64_t registrations = 0;
  int64_t heartbeats = 0;
  int64_t leased = 0;
  int64_t reported_ok = 0;
  int64_t reported_error = 0;
  int64_t duplicates = 0;
  int64_t rpc_failures = 0;
};

// The profile-store device kind --device measures for: "cpu" ->
// CpuDeviceKind() ("cpu-1t:<isa>:<CPU model>"); "cuda"/"cuda:N" -> "cuda:" +
// the GPU's name; "auto" -> the GPU 0's kind when there is a usable GPU, else
// CpuDeviceKind(). InvalidArgument naming --device for
// an unknown value, for "cuda" in a build without the CUDA backend, and for
// "cuda" on a machine without a usable GPU (the message carries the CUDA
// runtime's reason).
absl::StatusOr<std::string> DeviceKindFor(const std::string& device);

// Rebuilds the task's one-op graph and checks it against the task's op type,
// signature and shapes. InvalidArgument naming the mismatching field.
absl::StatusOr<graph::Graph> TaskGraph(const braid::v1::ProfilingTask& task);

class WorkerAgent {
 public:
  WorkerAgent(std::shared_ptr<grpc::Channel> channel, WorkerAgentOptions options);
  WorkerAgent(const WorkerAgent&) = delete;
  WorkerAgent& operator=(const WorkerAgent&) = delete;

  // Runs until Stop(). InvalidArgument for bad options (unknown device,
  // empty token); otherwise OK once stopped (server errors are retried).
  absl::Status Run();
  // Thread-safe; wakes Run() from any wait. The task being measured finishes
  // and is reported first.
  void Stop();

  WorkerAgentStats stats() const;
  std::string worker_id() const;

 private:
  void Prepare(grpc::ClientContext* ctx) const;
  absl::Status Register();
  absl::Status Heartbeat();
  // One lease round; sets *got to the number of tasks leased.
  absl::Status LeaseAndRun(int* got);
  absl::Status Report(const braid::v1::ProfilingTask& task,
                      const absl::StatusOr<costmodel::ProfileSample>& result);
  // Sleeps up to `seconds` or until Stop(); false when stopping.
  bool SleepFor(double seconds);

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<braid::v1::Workers::Stub> stub_;
  WorkerAgentOptions options_;
  std::string device_kind_;
  OpMeasurer measure_;  // options_.measurer, or the device's profiler
  FusedMeasurer measure_fused_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::string worker_id_;
  double heartbeat_interval_s_ = 10;
  WorkerAgentStats stats_;
};

}  // namespace braid::worker

#endif  // BRAID_WORKER_WORKER_AGENT_H_
