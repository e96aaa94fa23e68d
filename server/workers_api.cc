#include "server/workers_api.h"

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/bounded_json.h"
#include "base/status_macros.h"
#include "base/text.h"
#include "nlohmann/json.hpp"

namespace braid::server {

namespace v1 = braid::v1;

namespace {

void AddShapes(const nlohmann::json& arr,
               google::protobuf::RepeatedPtrField<v1::TensorShapeProto>* out) {
  for (const nlohmann::json& t : arr) {
    v1::TensorShapeProto* s = out->Add();
    s->set_dtype(t.at(0).get<std::string>());
    for (const nlohmann::json& d : t.at(1)) s->add_dims(d.get<int64_t>());
  }
}

}  // namespace

// Request text travels as bytes (workers.proto): each field is checked by
// name, so that bad bytes are INVALID_ARGUMENT, not a request the RPC layer
// cannot parse.
absl::StatusOr<v1::RegisterResponse> WorkersApi::Register(const v1::RegisterRequest& req) {
  RETURN_IF_ERROR(base::CheckTextField("name", req.name(), 256));
  RETURN_IF_ERROR(base::CheckTextField("device_kind", req.device_kind(), 256));
  ASSIGN_OR_RETURN(WorkerRecord w, tasks_->Register(req.name(), req.device_kind(), req.slots()));
  v1::RegisterResponse out;
  out.set_worker_id(w.id);
  out.set_heartbeat_interval_s(tasks_->options().heartbeat_interval_s);
  return out;
}

absl::StatusOr<v1::HeartbeatResponse> WorkersApi::Heartbeat(const v1::HeartbeatRequest& req) {
  RETURN_IF_ERROR(base::CheckTextField("worker_id", req.worker_id(), 128));
  RETURN_IF_ERROR(tasks_->Heartbeat(req.worker_id()));
  v1::HeartbeatResponse out;
  out.set_server_time_unix_s(NowUnixSeconds());
  return out;
}

absl::StatusOr<v1::LeaseTasksResponse> WorkersApi::LeaseTasks(const v1::LeaseTasksRequest& req) {
  RETURN_IF_ERROR(base::CheckTextField("worker_id", req.worker_id(), 128));
  ASSIGN_OR_RETURN(std::vector<TaskRecord> leased,
                   tasks_->Lease(req.worker_id(), req.max_tasks(), req.lease_s()));
  v1::LeaseTasksResponse out;
  for (const TaskRecord& t : leased) {
    v1::ProfilingTask* p = out.add_tasks();
    p->set_task_id(t.id);
    p->set_lease_id(t.lease_id);
    p->set_lease_deadline_unix_s(t.lease_deadline_unix_s);
    p->set_device_kind(t.device_kind);
    p->set_op_type(t.op_type);
    p->set_signature(t.signature);
    p->set_op_graph_text(t.op_graph_text);
    nlohmann::json shapes = base::ParseBoundedJsonOrDiscarded(t.shapes_json, base::kPlanJsonLimits);
    try {
      AddShapes(shapes.at("inputs"), p->mutable_inputs());
      AddShapes(shapes.at("outputs"), p->mutable_outputs());
    } catch (const nlohmann::json::exception& e) {
      return absl::DataLossError(absl::StrCat("task ", t.id, ": stored shapes: ", e.what()));
    }
  }
  return out;
}

absl::StatusOr<v1::ReportResultResponse> WorkersApi::ReportResult(
    const v1::ReportResultRequest& req) {
  RETURN_IF_ERROR(base::CheckTextField("worker_id", req.worker_id(), 128));
  RETURN_IF_ERROR(base::CheckTextField("task_id", req.task_id(), 128));
  RETURN_IF_ERROR(base::CheckTextField("lease_id", req.lease_id(), 128));
  std::optional<costmodel::ProfileSample> sample;
  std::string error;
  switch (req.outcome_case()) {
    case v1::ReportResultRequest::kResult:
      sample = costmodel::ProfileSample{req.result().median_s(), req.result().spread_s(),
                                        req.result().repetitions()};
      break;
    case v1::ReportResultRequest::kError:
      if (req.error().empty()) return absl::InvalidArgumentError("error: empty message");
      RETURN_IF_ERROR(base::CheckTextField("error", req.error(), 64 << 10));
      error = req.error();
      break;
    default:
      return absl::InvalidArgumentError("outcome: set result or error");
  }
  ASSIGN_OR_RETURN(bool dup,
                   tasks_->Report(req.worker_id(), req.task_id(), req.lease_id(), sample, error));
  v1::ReportResultResponse out;
  out.set_duplicate(dup);
  return out;
}

}  // namespace braid::server
