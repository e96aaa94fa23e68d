#include "worker/worker_agent.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "glog/logging.h"
#include "graph/text_format.h"
#include "grpcpp/client_context.h"
#include "worker/device_profile.h"
#ifdef BRAID_HAVE_CUDA
#include "worker/cuda/cuda_device.h"
#include "worker/cuda/cuda_profiler.h"
#endif

namespace braid::worker {

namespace v1 = braid::v1;

namespace {

absl::Status FromGrpc(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(static_cast<int>(s.error_code())),
                      s.error_message());
}

std::string HostName() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "braid-worker";
  return buf;
}

std::string ShapeText(const std::vector<int64_t>& dims, std::string_view dtype) {
  return absl::StrCat(std::string(dtype), "[", absl::StrJoin(dims, ","), "]");
}

absl::Status CheckShapes(const graph::Graph& g, const std::vector<graph::TensorId>& ids,
                         const google::protobuf::RepeatedPtrField<v1::TensorShapeProto>& want,
                         std::string_view field) {
  if (static_cast<int>(ids.size()) != want.size()) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(field), ": task lists ", want.size(),
                                                   ", op_graph_text has ", ids.size()));
  }
  for (int i = 0; i < want.size(); ++i) {
    const graph::Tensor& t = g.tensor(ids[i]);
    const std::vector<int64_t> dims(want[i].dims().begin(), want[i].dims().end());
    if (t.shape != dims || graph::DTypeName(t.dtype) != want[i].dtype()) {
      return absl::InvalidArgumentError(absl::StrCat(
          std::string(field), "[", i, "]: task says ", ShapeText(dims, want[i].dtype()),
          ", op_graph_text has ", ShapeText(t.shape, graph::DTypeName(t.dtype))));
    }
  }
  return absl::OkStatus();
}

// The measurer of the chosen device's profiler, shared by the closure.
OpMeasurer ProfilerFor([[maybe_unused]] const DeviceChoice& d, const ProfileOptions& options) {
  auto sample = [](const absl::StatusOr<OpProfile>& p) -> absl::StatusOr<costmodel::ProfileSample> {
    RETURN_IF_ERROR(p.status());
    return p->sample;
  };
#ifdef BRAID_HAVE_CUDA
  if (d.cuda) {
    auto profiler = std::make_shared<CudaProfiler>(options, d.ordinal);
    return [profiler, sample](const graph::Graph& g, graph::OpId op) {
      return sample(profiler->ProfileOp(g, op));
    };
  }
#endif
  auto profiler = std::make_shared<CpuProfiler>(options);
  return [profiler, sample](const graph::Graph& g, graph::OpId op) {
    return sample(profiler->ProfileOp(g, op));
  };
}

// Fused-op tasks: the CPU fused executor's kernel timed like single ops.
FusedMeasurer FusedProfilerFor([[maybe_unused]] const DeviceChoice& d, const ProfileOptions& options) {
#ifdef BRAID_HAVE_CUDA
  if (d.cuda) {
    auto profiler = std::make_shared<CudaProfiler>(options, d.ordinal);
    return [profiler](const graph::Graph& g) -> absl::StatusOr<costmodel::ProfileSample> {
      std::vector<graph::OpId> ops(g.num_ops());
      for (graph::OpId o = 0; o < g.num_ops(); ++o) ops[o] = o;
      ASSIGN_OR_RETURN(OpProfile p, profiler->ProfileFused(g, ops));
      return p.sample;
    };
  }
#endif
  auto profiler = std::make_shared<CpuProfiler>(options);
  return [profiler](const graph::Graph& g) -> absl::StatusOr<costmodel::ProfileSample> {
    std::vector<graph::OpId> ops(g.num_ops());
    for (graph::OpId o = 0; o < g.num_ops(); ++o) ops[o] = o;
    ASSIGN_OR_RETURN(OpProfile p, profiler->ProfileFused(g, ops));
    return p.sample;
  };
}

}  // namespace

absl::StatusOr<std::string> DeviceKindFor(const std::string& device) {
  ASSIGN_OR_RETURN(DeviceChoice d, ResolveDevice(device));
  return d.kind;
}

absl::StatusOr<graph::Graph> TaskGraph(const v1::ProfilingTask& task) {
  absl::StatusOr<graph::Graph> g = graph::ParseText(task.op_graph_text());
  if (!g.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("op_graph_text: ", std::string(g.status().message())));
  }
  if (g->num_ops() < 1) return absl::InvalidArgumentError("op_graph_text: no op");
  if (task.op_type() == costmodel::kFusedOp) {
    // A fused-op task: the subgraph of the group, every op a member.
    std::vector<graph::OpId> ops(g->num_ops());
    for (graph::OpId o = 0; o < g->num_ops(); ++o) ops[o] = o;
    const std::string sig = costmodel::FusedSignature(*g, ops);
    if (sig != task.signature()) {
      return absl::InvalidArgumentError(
          "signature: the task's fused signature does not match its op_graph_text");
    }
    return g;
  }
  const graph::Op& op = g->op(0);
  if (op.type != task.op_type()) {
    return absl::InvalidArgumentError(absl::StrCat("op_type: task says ", task.op_type(),
                                                   ", op_graph_text has ", op.type));
  }
  RETURN_IF_ERROR(CheckShapes(*g, op.inputs, task.inputs(), "inputs"));
  RETURN_IF_ERROR(CheckShapes(*g, op.outputs, task.outputs(), "outputs"));
  const std::string sig = costmodel::OpSignature(*g, 0);
  if (sig != task.signature()) {
    return absl::InvalidArgumentError(absl::StrCat("signature: task says '", task.signature(),
                                                   "', op_graph_text gives '", sig, "'"));
  }
  return g;
}

WorkerAgent::WorkerAgent(std::shared_ptr<grpc::Channel> channel, WorkerAgentOptions options)
    : channel_(std::move(channel)),
      stub_(v1::Workers::NewStub(channel_)),
      options_(std::move(options)) {
  if (options_.name.empty()) options_.name = HostName();
}

void WorkerAgent::Prepare(grpc::ClientContext* ctx) const {
  ctx->AddMetadata("authorization", "Bearer " + options_.token);
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::milliseconds(static_cast<int64_t>(options_.rpc_timeout_s * 1e3)));
}

bool WorkerAgent::SleepFor(double seconds) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return stop_; });
  return !stop_;
}

void WorkerAgent::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
}

WorkerAgentStats WorkerAgent::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

std::string WorkerAgent::worker_id() const {
  std::lock_guard<std::mutex> lock(mu_);
  return worker_id_;
}

absl::Status WorkerAgent::Register() {
  v1::RegisterRequest req;
  req.set_name(options_.name);
  req.set_device_kind(device_kind_);
  req.set_slots(options_.slots);
  v1::RegisterResponse resp;
  grpc::ClientContext ctx;
  Prepare(&ctx);
  RETURN_IF_ERROR(FromGrpc(stub_->Register(&ctx, req, &resp)));
  std::lock_guard<std::mutex> lock(mu_);
  worker_id_ = resp.worker_id();
  if (resp.heartbeat_interval_s() > 0) heartbeat_interval_s_ = resp.heartbeat_interval_s();
  ++stats_.registrations;
  LOG(INFO) << "registered as " << worker_id_ << " (" << device_kind_ << ", heartbeat every "
            << heartbeat_interval_s_ << " s)";
  return absl::OkStatus();
}

absl::Status WorkerAgent::Heartbeat() {
  v1::HeartbeatRequest req;
  req.set_worker_id(worker_id());
  if (req.worker_id().empty()) return absl::OkStatus();  // not registered yet
  v1::HeartbeatResponse resp;
  grpc::ClientContext ctx;
  Prepare(&ctx);
  absl::Status s = FromGrpc(stub_->Heartbeat(&ctx, req, &resp));
  std::lock_guard<std::mutex> lock(mu_);
  if (s.ok()) {
    ++stats_.heartbeats;
  } else if (s.code() == absl::StatusCode::kNotFound && worker_id_ == req.worker_id()) {
    worker_id_.clear();  // the server forgot us: the main loop registers again
  }
  return s;
}

absl::Status WorkerAgent::Report(const v1::ProfilingTask& task,
                                 const absl::StatusOr<costmodel::ProfileSample>& result) {
  v1::ReportResultRequest req;
  req.set_worker_id(worker_id());
  req.set_task_id(task.task_id());
  req.set_lease_id(task.lease_id());
  if (result.ok()) {
    req.mutable_result()->set_median_s(result->median_s);
    req.mutable_result()->set_spread_s(result->spread_s);
    req.mutable_result()->set_repetitions(result->repetitions);
  } else {
    req.set_error(result.status().ToString());
  }
  // A report is worth retrying: the measurement is the expensive part.
  double backoff = options_.backoff_initial_s;
  while (true) {
    v1::ReportResultResponse resp;
    grpc::ClientContext ctx;
    Prepare(&ctx);
    absl::Status s = FromGrpc(stub_->ReportResult(&ctx, req, &resp));
    if (s.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      ++(result.ok() ? stats_.reported_ok : stats_.reported_error);
      stats_.duplicates += resp.duplicate();
      return s;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.rpc_failures;
    }
    if (s.code() != absl::StatusCode::kUnavailable &&
        s.code() != absl::StatusCode::kDeadlineExceeded) {
      return s;  // the server rejected it; the lease will expire and requeue
    }
    LOG(WARNING) << "report of " << task.task_id() << " failed (" << s << "); retrying in "
                 << backoff << " s";
    if (!SleepFor(backoff)) return absl::CancelledError("stopping");
    backoff = std::min(backoff * 2, options_.backoff_max_s);
  }
}

absl::Status WorkerAgent::LeaseAndRun(int* got) {
  *got = 0;
  v1::LeaseTasksRequest req;
  req.set_worker_id(worker_id());
  req.set_max_tasks(options_.max_tasks > 0 ? options_.max_tasks : options_.slots);
  req.set_lease_s(options_.lease_s);
  v1::LeaseTasksResponse resp;
  {
    grpc::ClientContext ctx;
    Prepare(&ctx);
    RETURN_IF_ERROR(FromGrpc(stub_->LeaseTasks(&ctx, req, &resp)));
  }
  *got = resp.tasks_size();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.leased += resp.tasks_size();
  }
  for (const v1::ProfilingTask& task : resp.tasks()) {
    absl::StatusOr<costmodel::ProfileSample> result;
    absl::StatusOr<graph::Graph> g = TaskGraph(task);
    if (!g.ok()) {
      result = g.status();
    } else {
      result = task.op_type() == costmodel::kFusedOp ? measure_fused_(*g) : measure_(*g, 0);
    }
    VLOG(1) << "task " << task.task_id() << " " << task.op_type() << ": "
            << (result.ok() ? absl::StrCat(result->median_s * 1e6, " us")
                            : result.status().ToString());
    if (absl::Status s = Report(task, result); !s.ok()) {
      if (s.code() == absl::StatusCode::kCancelled) return absl::OkStatus();
      LOG(WARNING) << "report of task " << task.task_id() << " rejected: " << s;
    }
  }
  return absl::OkStatus();
}

absl::Status WorkerAgent::Run() {
  if (options_.token.empty()) return absl::InvalidArgumentError("--token: must be set");
  if (options_.slots < 1) return absl::InvalidArgumentError("--slots: must be >= 1");
  if (!(options_.lease_s > 0)) return absl::InvalidArgumentError("--lease-s: must be > 0");
  ASSIGN_OR_RETURN(DeviceChoice device, ResolveDevice(options_.device));
  device_kind_ = device.kind;
  if (!measure_) {
    measure_ = options_.measurer ? options_.measurer : ProfilerFor(device, options_.profile);
  }
  if (!measure_fused_) {
    measure_fused_ = options_.fused_measurer ? options_.fused_measurer
                                             : FusedProfilerFor(device, options_.profile);
  }

  std::thread heartbeats([this] {
    while (true) {
      double interval;
      {
        std::lock_guard<std::mutex> lock(mu_);
        interval = heartbeat_interval_s_;
      }
      if (!SleepFor(interval / 2)) return;
      if (absl::Status s = Heartbeat(); !s.ok()) {
        std::lock_guard<std::mutex> lock(mu_);
        ++stats_.rpc_failures;
        VLOG(1) << "heartbeat failed: " << s;
      }
    }
  });

  double backoff = options_.backoff_initial_s;
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) break;
    }
    absl::Status s;
    int got = 0;
    if (worker_id().empty()) {
      s = Register();
    } else {
      s = LeaseAndRun(&got);
      if (s.code() == absl::StatusCode::kNotFound) {
        std::lock_guard<std::mutex> lock(mu_);
        worker_id_.clear();  // unknown worker: register again at once
        continue;
      }
    }
    if (!s.ok()) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++stats_.rpc_failures;
      }
      if (s.code() == absl::StatusCode::kUnauthenticated ||
          s.code() == absl::StatusCode::kInvalidArgument) {
        LOG(ERROR) << "server rejected the worker: " << s << "; retrying in " << backoff << " s";
      } else {
        LOG(WARNING) << "server call failed: " << s << "; retrying in " << backoff << " s";
      }
      if (!SleepFor(backoff)) break;
      backoff = std::min(backoff * 2, options_.backoff_max_s);
      continue;
    }
    backoff = options_.backoff_initial_s;
    if (got == 0 && !SleepFor(options_.idle_poll_s)) break;
  }
  heartbeats.join();
  return absl::OkStatus();
}

}  // namespace braid::worker
