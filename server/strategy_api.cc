#include "server/strategy_api.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "base/bounded_json.h"
#include "base/status_macros.h"
#include "base/text.h"
#include "graph/model_source.h"
#include "graph/text_format.h"
#include "graph/zoo.h"
#include "nlohmann/json.hpp"
#include "proto/plan_digest.h"
#include "search/parallel_plan.h"
#include "server/cluster_convert.h"
#include "server/plan_proto.h"

namespace braid::server {

namespace v1 = braid::v1;

namespace {

absl::Status Field(std::string_view field, const absl::Status& s) {
  // Bad content is the caller's input: report it as InvalidArgument.
  absl::StatusCode code = s.code() == absl::StatusCode::kNotFound ? absl::StatusCode::kInvalidArgument
                                                                  : s.code();
  return absl::Status(code, absl::StrCat(std::string(field), ": ", s.message()));
}

absl::StatusOr<JobOptions> ParseOptions(const v1::SearchOptions& o) {
  JobOptions out;
  if (o.has_alpha()) {
    if (!(o.alpha() >= 1 && o.alpha() <= kMaxAlpha)) {
      return absl::InvalidArgumentError(
          absl::StrCat("options.alpha must be in [1, ", kMaxAlpha, "], got ", o.alpha()));
    }
    out.alpha = o.alpha();
  }
  if (o.has_beta()) {
    if (o.beta() < 1 || o.beta() > kMaxBeta) {
      return absl::InvalidArgumentError(
          absl::StrCat("options.beta must be in [1, ", kMaxBeta, "], got ", o.beta()));
    }
    out.beta = o.beta();
  }
  if (o.has_seed()) out.seed = o.seed();
  if (o.has_budget_s()) {
    if (!(o.budget_s() > 0) || o.budget_s() > kMaxBudgetS) {
      return absl::InvalidArgumentError(absl::StrCat("options.budget_s must be in (0, ",
                                                     kMaxBudgetS, "], got ", o.budget_s()));
    }
    out.budget_s = o.budget_s();
  }
  if (o.has_ranks()) {
    if (o.ranks() < 1) {
      return absl::InvalidArgumentError(absl::StrCat("options.ranks must be >= 1, got ", o.ranks()));
    }
    out.ranks = o.ranks();
  }
  if (o.has_patience()) {
    if (o.patience() < 1 || o.patience() > kMaxPatience) {
      return absl::InvalidArgumentError(
          absl::StrCat("options.patience must be in [1, ", kMaxPatience, "], got ", o.patience()));
    }
    out.patience = o.patience();
  }
  if (o.has_batch()) {
    if (o.batch() < 1) {
      return absl::InvalidArgumentError(absl::StrCat("options.batch must be >= 1, got ", o.batch()));
    }
    out.batch = o.batch();
  }
  if (o.has_op_fusion()) out.op_fusion = o.op_fusion();
  if (o.has_parallel()) out.parallel = o.parallel();
  if (o.has_no_pipeline()) out.no_pipeline = o.no_pipeline();
  if (o.has_sync_batch_norm()) out.sync_batch_norm = o.sync_batch_norm();
  if (o.has_strategy_row()) {
    const std::string& row = o.strategy_row();
    if (row.size() > kMaxStrategyRowBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("options.strategy_row: longer than ", kMaxStrategyRowBytes, " bytes"));
    }
    if (!base::IsValidUtf8(row)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "options.strategy_row: not valid UTF-8 ('", base::EscapeForDisplay(row), "')"));
    }
    if (absl::Status s = search::CheckStrategyRowName(row); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("options.strategy_row: ", s.message()));
    }
    if (search::IsPipelineRowName(row)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "options.strategy_row: '", row, "' is a pipeline row; the service serves data- and "
          "tensor-parallel plans (one per-device training graph) and plans no pipelines"));
    }
    out.strategy_row = row;
  }
  if (!out.parallel && (!out.strategy_row.empty() || out.no_pipeline)) {
    return absl::InvalidArgumentError(absl::StrCat(
        out.no_pipeline ? "options.no_pipeline" : "options.strategy_row",
        " chooses among the strategy rows of a parallel plan: set options.parallel"));
  }
  if (!out.parallel && out.sync_batch_norm) {
    return absl::InvalidArgumentError(
        "options.sync_batch_norm shapes the per-device program of a parallel plan: set "
        "options.parallel");
  }
  return out;
}

// Ids travel as bytes (strategy.proto): printable ASCII the server issued.
absl::Status RequireId(const char* field, const std::string& id) {
  if (id.empty()) return absl::InvalidArgumentError(absl::StrCat(field, " must be set"));
  if (id.size() > 128) return absl::InvalidArgumentError(absl::StrCat(field, ": longer than 128 bytes"));
  for (char c : id) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.' &&
        c != ':') {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": '", base::EscapeForDisplay(id.substr(0, 80)),
          "' is not an id this server issued (letters, digits, '-', '_', '.', ':')"));
    }
  }
  return absl::OkStatus();
}

absl::Status RequireJobId(const std::string& id) { return RequireId("job_id", id); }

absl::Status RequireCredential(const std::string& c) {
  if (c.empty()) {
    return absl::UnauthenticatedError(
        "report_credential must be set: the job's SubmitGraphResponse.report_credential "
        "(BRAID_REPORT_CREDENTIAL for braid-worker activate and braid.torch)");
  }
  if (c.size() != 64 || c.find_first_not_of("0123456789abcdef") != std::string::npos) {
    return absl::InvalidArgumentError("report_credential: expected 64 lowercase hex digits");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SubmitRequest> ParseSubmitRequest(const v1::SubmitGraphRequest& req) {
  SubmitRequest out;
  if (req.name().size() > kMaxNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat("name: longer than ", kMaxNameBytes, " bytes"));
  }
  // Text fields travel as bytes (strategy.proto): checked here, by name.
  for (const auto& [field, text] : {std::pair<const char*, const std::string*>{"name", &req.name()},
                                    {"graph_text", &req.graph_text()},
                                    {"zoo_model", &req.zoo_model()},
                                    {"cluster_preset", &req.cluster_preset()},
                                    {"cluster_spec.name", &req.cluster_spec().name()},
                                    {"cluster_spec.device.kind", &req.cluster_spec().device().kind()}}) {
    if (!base::IsValidUtf8(*text)) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": not valid UTF-8 ('", base::EscapeForDisplay(text->substr(0, 80)), "')"));
    }
  }
  out.name = req.name();
  ASSIGN_OR_RETURN(JobOptions options, ParseOptions(req.options()));
  out.options = options;

  switch (req.cluster_case()) {
    case v1::SubmitGraphRequest::kClusterSpec: {
      ASSIGN_OR_RETURN(costmodel::ClusterSpec c, ClusterFromProto(req.cluster_spec()));
      out.cluster = std::move(c);
      break;
    }
    case v1::SubmitGraphRequest::kClusterPreset: {
      if (req.cluster_preset().empty()) {
        return absl::InvalidArgumentError("cluster_preset: empty preset name");
      }
      absl::StatusOr<costmodel::ClusterSpec> c = costmodel::ClusterPreset(req.cluster_preset());
      if (!c.ok()) return Field("cluster_preset", c.status());
      out.cluster = *std::move(c);
      break;
    }
    default:
      return absl::InvalidArgumentError("cluster: set cluster_spec or cluster_preset");
  }

  std::vector<std::string> warnings;
  graph::LoadOptions load;
  load.batch = out.options.batch;
  switch (req.model_case()) {
    case v1::SubmitGraphRequest::kOnnx: {
      if (req.onnx().empty()) return absl::InvalidArgumentError("onnx: empty model");
      absl::StatusOr<graph::Graph> g = graph::LoadModelBytes(req.onnx(), "onnx", load, &warnings);
      if (!g.ok()) return Field("onnx", g.status());
      out.forward = *std::move(g);
      break;
    }
    case v1::SubmitGraphRequest::kGraphText: {
      if (req.graph_text().empty()) return absl::InvalidArgumentError("graph_text: empty model");
      if (out.options.batch != 0) {
        return absl::InvalidArgumentError(
            "options.batch: not supported with graph_text (its shapes are fixed)");
      }
      absl::StatusOr<graph::Graph> g = graph::ParseText(req.graph_text());
      if (!g.ok()) return Field("graph_text", g.status());
      out.forward = *std::move(g);
      break;
    }
    case v1::SubmitGraphRequest::kZooModel: {
      if (req.zoo_model().empty()) return absl::InvalidArgumentError("zoo_model: empty model name");
      // "NAME", "NAME@BATCH" or "NAME@sample" (graph/model_source.h).
      absl::StatusOr<graph::ZooSource> src =
          graph::ParseZooSource(absl::StrCat("zoo:", req.zoo_model()));
      if (!src.ok()) return Field("zoo_model", src.status());
      if (src->batch != 0 && out.options.batch != 0 && src->batch != out.options.batch) {
        return absl::InvalidArgumentError(absl::StrCat(
            "zoo_model: batch ", src->batch, " in the name and options.batch ", out.options.batch,
            " disagree"));
      }
      absl::StatusOr<graph::Graph> g = graph::BuildZooModel(
          src->name, src->batch != 0 ? src->batch : out.options.batch, src->size, src->width_pct);
      if (!g.ok()) return Field("zoo_model", g.status());
      out.forward = *std::move(g);
      break;
    }
    default:
      return absl::InvalidArgumentError("model: set onnx, graph_text or zoo_model");
  }
  // A parallel job plans the whole model, at the global batch: the per-rank
  // batch (options.batch, else the model's) times the ranks, as `braid plan
  // --parallel` does. A graph_text model's shapes are fixed: they are taken
  // as the global batch.
  if (out.options.parallel && req.model_case() != v1::SubmitGraphRequest::kGraphText) {
    const int64_t per_rank = graph::ModelBatch(out.forward);
    const int64_t ranks = out.options.ranks > 0 ? out.options.ranks : out.cluster.num_ranks;
    const int64_t global = per_rank * ranks;
    if (per_rank > 0 && ranks > 1 && global <= (int64_t{1} << 30)) {
      absl::StatusOr<graph::Graph> g;
      if (req.model_case() == v1::SubmitGraphRequest::kZooModel) {
        absl::StatusOr<graph::ZooSource> src =
            graph::ParseZooSource(absl::StrCat("zoo:", req.zoo_model()));
        if (!src.ok()) return Field("zoo_model", src.status());
        g = graph::BuildZooModel(src->name, static_cast<int>(global), src->size, src->width_pct);
      } else {
        graph::LoadOptions global_load = load;
        global_load.batch = static_cast<int>(global);
        g = graph::LoadModelBytes(req.onnx(), "onnx", global_load, &warnings);
      }
      if (!g.ok()) return Field(req.model_case() == v1::SubmitGraphRequest::kZooModel ? "zoo_model" : "onnx", g.status());
      out.forward = *std::move(g);
    }
  }
  if (out.forward.num_ops() > kMaxForwardOps) {
    return absl::InvalidArgumentError(absl::StrCat("model: ", out.forward.num_ops(),
                                                   " forward ops, more than the limit of ",
                                                   kMaxForwardOps));
  }
  return out;
}

v1::JobPhase JobPhaseToProto(JobPhase p) {
  switch (p) {
    case JobPhase::kQueued: return v1::JOB_PHASE_QUEUED;
    case JobPhase::kImporting: return v1::JOB_PHASE_IMPORTING;
    case JobPhase::kProfiling: return v1::JOB_PHASE_PROFILING;
    case JobPhase::kSearching: return v1::JOB_PHASE_SEARCHING;
    case JobPhase::kDone: return v1::JOB_PHASE_DONE;
    case JobPhase::kFailed: return v1::JOB_PHASE_FAILED;
    case JobPhase::kCancelled: return v1::JOB_PHASE_CANCELLED;
  }
  return v1::JOB_PHASE_UNSPECIFIED;
}

v1::JobStatus JobStatusToProto(const JobRecord& r) {
  v1::JobStatus s;
  s.set_job_id(r.id);
  s.set_name(r.name);
  s.set_phase(JobPhaseToProto(r.phase));
  s.set_best_cost_s(r.best_cost_s);
  s.set_candidates_evaluated(r.candidates);
  s.set_elapsed_s(r.elapsed_s);
  s.set_eta_s(IsFinal(r.phase) ? 0 : std::max(0.0, r.options.budget_s - r.elapsed_s));
  s.set_error(r.error);
  s.set_from_cache(r.from_cache);
  s.set_graph_fingerprint(r.graph_fingerprint);
  s.set_cluster_fingerprint(r.cluster_fingerprint);
  s.set_created_unix_s(r.created_unix_s);
  s.set_resumed(r.resumed);
  s.set_predicted_iteration_s(r.measured_predicted_s);
  s.set_measured_iteration_s(r.measured_s);
  s.set_measured_baseline_s(r.measured_baseline_s);
  s.set_rolled_back(r.rolled_back);
  s.set_rollback_reason(RollbackReasonFor(r.id, r.rollback_job, r.rollback_reason));
  return s;
}


absl::StatusOr<v1::GetPlanResponse> PlanToProto(const JobRecord& job, const JobPlan& plan) {
  v1::GetPlanResponse out;
  out.set_job_id(job.id);
  out.set_plan_json(plan.record.plan_json);
  ASSIGN_OR_RETURN(v1::Plan p,
                   PlanRecordToProto(plan.record, job.graph_fingerprint, job.cluster_fingerprint));
  out.set_plan_sha256(PlanDigest(p));
  *out.mutable_plan() = std::move(p);
  out.set_rolled_back(plan.record.rolled_back);
  out.set_rollback_reason(
      RollbackReasonFor(job.id, plan.record.rollback_job, plan.record.rollback_reason));
  nlohmann::json b = nlohmann::json::parse(plan.record.baselines_json, nullptr, false);
  if (!b.is_array()) return absl::DataLossError("stored baselines JSON is malformed");
  for (const nlohmann::json& e : b) {
    v1::BaselineEntry* entry = out.add_baselines();
    entry->set_name(e.value("name", ""));
    entry->set_iteration_s(e.value("iteration_s", 0.0));
    entry->set_compute_s(e.value("compute_s", 0.0));
    entry->set_comm_s(e.value("comm_s", 0.0));
    entry->set_overlap_ratio(e.value("overlap_ratio", 0.0));
  }
  out.set_fo_bound_s(plan.record.fo_bound_s);
  out.set_origin(plan.record.origin);
  out.set_from_cache(plan.from_cache);
  out.set_recosted(plan.recosted);
  if (!plan.record.cost_sources_json.empty()) {
    const nlohmann::json c = base::ParseBoundedJsonOrDiscarded(plan.record.cost_sources_json);
    if (c.is_object()) {
      v1::CostSources* s = out.mutable_cost_sources();
      s->set_measured(c.value("measured", 0.0));
      s->set_gnn(c.value("gnn", 0.0));
      s->set_corrected_roofline(c.value("corrected_roofline", 0.0));
      s->set_prior(c.value("prior", 0.0));
    }
  }
  return out;
}

void SetCalibration(double calibration, v1::GetPlanResponse* r) {
  r->set_calibration(calibration);
  r->set_calibrated_iteration_s(calibration > 0 ? calibration * r->plan().predicted_iteration_s()
                                                : 0);
}

absl::StatusOr<MeasurementReport> ParseMeasurementRequest(const v1::ReportMeasurementRequest& req) {
  RETURN_IF_ERROR(RequireJobId(req.job_id()));
  if (req.world_size() < 1 || req.world_size() > kMaxWorldSize) {
    return absl::InvalidArgumentError(absl::StrCat("world_size must be in [1, ", kMaxWorldSize,
                                                   "], got ", req.world_size()));
  }
  if (req.rank() < 0 || req.rank() >= req.world_size()) {
    return absl::InvalidArgumentError(absl::StrCat("rank must be in [0, world_size = ",
                                                   req.world_size(), "), got ", req.rank()));
  }
  if (req.plan_iteration_s_size() < 1 || req.plan_iteration_s_size() > kMaxReportedIterations) {
    return absl::InvalidArgumentError(absl::StrCat("plan_iteration_s: between 1 and ",
                                                   kMaxReportedIterations, " times, got ",
                                                   req.plan_iteration_s_size()));
  }
  if (req.baseline_iteration_s_size() != 0 &&
      req.baseline_iteration_s_size() != req.plan_iteration_s_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "baseline_iteration_s: ", req.baseline_iteration_s_size(),
        " times, expected none or one per plan iteration (", req.plan_iteration_s_size(), ")"));
  }
  for (const auto& [field, times] :
       {std::pair<const char*, const google::protobuf::RepeatedField<double>*>{
            "plan_iteration_s", &req.plan_iteration_s()},
        {"baseline_iteration_s", &req.baseline_iteration_s()}}) {
    for (int i = 0; i < times->size(); ++i) {
      const double t = times->Get(i);
      if (!std::isfinite(t) || !(t >= kMinIterationS) || t > kMaxIterationS) {
        return absl::InvalidArgumentError(absl::StrCat(field, "[", i, "]: must be finite and in [",
                                                       kMinIterationS, ", ", kMaxIterationS,
                                                       "] seconds, got ", t));
      }
    }
  }
  RETURN_IF_ERROR(base::CheckTextField("source", req.source(), kMaxSourceBytes));
  RETURN_IF_ERROR(RequireCredential(req.report_credential()));
  RETURN_IF_ERROR(RequireId("attempt_id", req.attempt_id()));
  MeasurementReport out;
  out.plan_sha256 = absl::AsciiStrToLower(req.plan_sha256());
  if (!out.plan_sha256.empty() &&
      (out.plan_sha256.size() != 64 ||
       out.plan_sha256.find_first_not_of("0123456789abcdef") != std::string::npos)) {
    return absl::InvalidArgumentError(
        absl::StrCat("plan_sha256: expected 64 hex digits (GetPlanResponse.plan_sha256), got '",
                     base::EscapeForDisplay(req.plan_sha256().substr(0, 80)), "'"));
  }
  out.job_id = req.job_id();
  out.rank = req.rank();
  out.world_size = req.world_size();
  out.plan_s.assign(req.plan_iteration_s().begin(), req.plan_iteration_s().end());
  out.baseline_s.assign(req.baseline_iteration_s().begin(), req.baseline_iteration_s().end());
  out.source = req.source();
  out.credential = req.report_credential();
  out.attempt_id = req.attempt_id();
  return out;
}

absl::StatusOr<RunRequest> ParseStartRunRequest(const v1::StartRunRequest& req) {
  RETURN_IF_ERROR(RequireJobId(req.job_id()));
  RETURN_IF_ERROR(RequireCredential(req.report_credential()));
  if (req.world_size() < 1 || req.world_size() > kMaxWorldSize) {
    return absl::InvalidArgumentError(absl::StrCat("world_size must be in [1, ", kMaxWorldSize,
                                                   "], got ", req.world_size()));
  }
  RETURN_IF_ERROR(base::CheckTextField("source", req.source(), kMaxSourceBytes));
  RunRequest out;
  out.job_id = req.job_id();
  out.credential = req.report_credential();
  out.world_size = req.world_size();
  out.source = req.source();
  return out;
}

v1::RollbackEntry RollbackToProto(const RollbackRecord& r) {
  v1::RollbackEntry e;
  e.set_rollback_id(r.id);
  e.set_job_id(r.job_id);
  e.set_scope(r.scope);
  e.set_plan_key(r.shared_key);
  e.set_replaced_sha256(r.replaced_sha256);
  e.set_reason(r.reason);
  e.set_actor(r.actor);
  e.set_created_unix_s(r.created_unix_s);
  e.set_restored_unix_s(r.restored_unix_s);
  e.set_restored_by(r.restored_by);
  return e;
}

absl::StatusOr<v1::SubmitGraphResponse> StrategyApi::SubmitGraph(const v1::SubmitGraphRequest& req) {
  ASSIGN_OR_RETURN(SubmitRequest parsed, ParseSubmitRequest(req));
  ASSIGN_OR_RETURN(JobRecord job, jobs_->Submit(std::move(parsed)));
  v1::SubmitGraphResponse out;
  out.set_job_id(job.id);
  *out.mutable_status() = JobStatusToProto(job);
  out.set_report_credential(job.report_credential);
  return out;
}

absl::StatusOr<v1::JobStatus> StrategyApi::GetJob(const v1::GetJobRequest& req) {
  RETURN_IF_ERROR(RequireJobId(req.job_id()));
  ASSIGN_OR_RETURN(JobRecord job, jobs_->Get(req.job_id()));
  return JobStatusToProto(job);
}

namespace {

v1::GetPlanResponse DigestOnly(const v1::GetPlanResponse& full) {
  v1::GetPlanResponse out;
  out.set_job_id(full.job_id());
  out.set_plan_sha256(full.plan_sha256());
  out.set_rolled_back(full.rolled_back());
  out.set_rollback_reason(full.rollback_reason());
  return out;
}

}  // namespace

absl::StatusOr<v1::GetPlanResponse> StrategyApi::GetPlan(const v1::GetPlanRequest& req) {
  RETURN_IF_ERROR(RequireJobId(req.job_id()));
  // Read before the plan: a report stored while this response is built
  // leaves a memo entry that the next call sees as stale.
  const int64_t feedback = jobs_->FeedbackVersion();
  {
    std::lock_guard<std::mutex> lock(memo_mu_);
    if (memo_feedback_ != feedback) {
      // A report may have rolled plans back or moved calibrations.
      memo_.clear();
      memo_order_.clear();
      memo_feedback_ = feedback;
    }
    auto it = memo_.find(req.job_id());
    if (it != memo_.end()) return req.digest_only() ? DigestOnly(it->second) : it->second;
  }
  ASSIGN_OR_RETURN(JobRecord job, jobs_->Get(req.job_id()));
  ASSIGN_OR_RETURN(JobPlan plan, jobs_->GetPlan(req.job_id()));
  ASSIGN_OR_RETURN(v1::GetPlanResponse out, PlanToProto(job, plan));
  ASSIGN_OR_RETURN(double calibration, jobs_->Calibration(job));
  SetCalibration(calibration, &out);
  std::lock_guard<std::mutex> lock(memo_mu_);
  if (memo_feedback_ == feedback && memo_.emplace(req.job_id(), out).second) {
    memo_order_.push_back(req.job_id());
    if (memo_order_.size() > kPlanMemo) {
      memo_.erase(memo_order_.front());
      memo_order_.pop_front();
    }
  }
  return req.digest_only() ? DigestOnly(out) : out;
}

absl::StatusOr<v1::ReportMeasurementResponse> StrategyApi::ReportMeasurement(
    const v1::ReportMeasurementRequest& req, const std::string& peer) {
  ASSIGN_OR_RETURN(MeasurementReport report, ParseMeasurementRequest(req));
  report.peer = peer;
  ASSIGN_OR_RETURN(MeasurementOutcome o, jobs_->ReportMeasurement(report));
  v1::ReportMeasurementResponse out;
  out.set_ranks_reported(o.ranks_reported);
  out.set_measured_iteration_s(o.measured_s);
  out.set_baseline_iteration_s(o.baseline_s);
  out.set_predicted_iteration_s(o.predicted_s);
  out.set_rolled_back(o.rolled_back);
  out.set_rollback_reason(o.rollback_reason);
  out.set_calibration(o.calibration);
  return out;
}

absl::StatusOr<v1::StartRunResponse> StrategyApi::StartRun(const v1::StartRunRequest& req,
                                                           const std::string& peer) {
  ASSIGN_OR_RETURN(RunRequest run, ParseStartRunRequest(req));
  run.peer = peer;
  ASSIGN_OR_RETURN(StartedRun started, jobs_->feedback().StartRun(run));
  v1::StartRunResponse out;
  out.set_attempt_id(started.attempt_id);
  out.set_world_size(started.world_size);
  out.set_plan_sha256(started.plan_sha256);
  return out;
}

absl::StatusOr<v1::ListRollbacksResponse> StrategyApi::ListRollbacks(
    const v1::ListRollbacksRequest& req) {
  if (!req.job_id().empty()) RETURN_IF_ERROR(RequireJobId(req.job_id()));
  if (req.limit() < 0 || req.limit() > 1000) {
    return absl::InvalidArgumentError(absl::StrCat("limit must be in [0, 1000], got ", req.limit()));
  }
  const int limit = req.limit() == 0 ? 100 : req.limit();
  ASSIGN_OR_RETURN(std::vector<RollbackRecord> rollbacks,
                   jobs_->feedback().Rollbacks(req.job_id(), limit));
  ASSIGN_OR_RETURN(std::vector<AuditEntry> audit, jobs_->feedback().Audit(req.job_id(), limit));
  v1::ListRollbacksResponse out;
  for (const RollbackRecord& r : rollbacks) *out.add_rollbacks() = RollbackToProto(r);
  for (const AuditEntry& a : audit) {
    v1::AuditEntry* e = out.add_audit();
    e->set_at_unix_s(a.at_unix_s);
    e->set_actor(a.actor);
    e->set_action(a.action);
    e->set_job_id(a.job_id);
    e->set_detail(a.detail);
  }
  return out;
}

absl::StatusOr<v1::RollbackActionResponse> StrategyApi::RestorePlan(
    const v1::RestorePlanRequest& req, const std::string& actor) {
  RETURN_IF_ERROR(RequireJobId(req.job_id()));
  RETURN_IF_ERROR(base::CheckTextField("reason", req.reason(), 1024));
  ASSIGN_OR_RETURN(std::vector<RollbackRecord> changed,
                   jobs_->feedback().Restore(req.job_id(), actor, req.reason()));
  v1::RollbackActionResponse out;
  for (const RollbackRecord& r : changed) *out.add_changed() = RollbackToProto(r);
  ASSIGN_OR_RETURN(JobRecord job, jobs_->Get(req.job_id()));
  *out.mutable_status() = JobStatusToProto(job);
  return out;
}

absl::StatusOr<v1::RollbackActionResponse> StrategyApi::ConfirmRollback(
    const v1::ConfirmRollbackRequest& req, const std::string& actor) {
  RETURN_IF_ERROR(RequireJobId(req.job_id()));
  RETURN_IF_ERROR(base::CheckTextField("reason", req.reason(), 1024));
  ASSIGN_OR_RETURN(std::vector<RollbackRecord> changed,
                   jobs_->feedback().Confirm(req.job_id(), actor, req.reason()));
  v1::RollbackActionResponse out;
  for (const RollbackRecord& r : changed) *out.add_changed() = RollbackToProto(r);
  ASSIGN_OR_RETURN(JobRecord job, jobs_->Get(req.job_id()));
  *out.mutable_status() = JobStatusToProto(job);
  return out;
}

absl::StatusOr<v1::JobStatus> StrategyApi::CancelJob(const v1::CancelJobRequest& req) {
  RETURN_IF_ERROR(RequireJobId(req.job_id()));
  ASSIGN_OR_RETURN(JobRecord job, jobs_->Cancel(req.job_id()));
  return JobStatusToProto(job);
}

absl::StatusOr<v1::ListJobsResponse> StrategyApi::ListJobs(const v1::ListJobsRequest& req) {
  if (req.limit() < 0 || req.limit() > 1000) {
    return absl::InvalidArgumentError(absl::StrCat("limit must be in [0, 1000], got ", req.limit()));
  }
  ASSIGN_OR_RETURN(std::vector<JobRecord> jobs, jobs_->List(req.limit() == 0 ? 100 : req.limit()));
  v1::ListJobsResponse out;
  for (const JobRecord& j : jobs) *out.add_jobs() = JobStatusToProto(j);
  return out;
}

}  // namespace braid::server
