#include "server/strategy_api.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/text.h"
#include "graph/model_source.h"
#include "graph/text_format.h"
#include "graph/zoo.h"
#include "nlohmann/json.hpp"
#include "server/cluster_convert.h"

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
  return out;
}

absl::Status RequireJobId(const std::string& id) {
  if (id.empty()) return absl::InvalidArgumentError("job_id must be set");
  if (id.size() > 128) return absl::InvalidArgumentError("job_id: longer than 128 bytes");
  return absl::OkStatus();
}

// Plan JSON (search/plan.h format) to the wire Plan.
absl::StatusOr<v1::Plan> PlanJsonToProto(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object() || !j.contains("groups") || !j.contains("buckets")) {
    return absl::DataLossError("stored plan JSON is malformed");
  }
  v1::Plan p;
  try {
    for (const nlohmann::json& g : j.at("groups")) {
      v1::FusionGroup* fg = p.add_fusion_groups();
      for (const nlohmann::json& op : g.at("ops")) fg->add_ops(op.get<std::string>());
      for (const nlohmann::json& op : g.at("duplicated")) fg->add_duplicated(op.get<std::string>());
    }
    for (const nlohmann::json& b : j.at("buckets")) {
      v1::Bucket* bucket = p.add_buckets();
      for (const nlohmann::json& grad : b) bucket->add_gradients(grad.get<std::string>());
    }
  } catch (const nlohmann::json::exception& e) {
    return absl::DataLossError(absl::StrCat("stored plan JSON: ", e.what()));
  }
  return p;
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
  return s;
}

absl::StatusOr<v1::GetPlanResponse> PlanToProto(const JobRecord& job, const JobPlan& plan) {
  v1::GetPlanResponse out;
  out.set_job_id(job.id);
  out.set_plan_json(plan.record.plan_json);
  ASSIGN_OR_RETURN(v1::Plan p, PlanJsonToProto(plan.record.plan_json));
  *out.mutable_plan() = std::move(p);
  out.mutable_plan()->set_graph_fingerprint(job.graph_fingerprint);
  out.mutable_plan()->set_cluster_fingerprint(job.cluster_fingerprint);
  out.mutable_plan()->set_predicted_iteration_s(plan.record.predicted_s);
  out.mutable_plan()->set_cost_generation(plan.record.generation);
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
  return out;
}

absl::StatusOr<v1::SubmitGraphResponse> StrategyApi::SubmitGraph(const v1::SubmitGraphRequest& req) {
  ASSIGN_OR_RETURN(SubmitRequest parsed, ParseSubmitRequest(req));
  ASSIGN_OR_RETURN(JobRecord job, jobs_->Submit(std::move(parsed)));
  v1::SubmitGraphResponse out;
  out.set_job_id(job.id);
  *out.mutable_status() = JobStatusToProto(job);
  return out;
}

absl::StatusOr<v1::JobStatus> StrategyApi::GetJob(const v1::GetJobRequest& req) {
  RETURN_IF_ERROR(RequireJobId(req.job_id()));
  ASSIGN_OR_RETURN(JobRecord job, jobs_->Get(req.job_id()));
  return JobStatusToProto(job);
}

absl::StatusOr<v1::GetPlanResponse> StrategyApi::GetPlan(const v1::GetPlanRequest& req) {
  RETURN_IF_ERROR(RequireJobId(req.job_id()));
  {
    std::lock_guard<std::mutex> lock(memo_mu_);
    auto it = memo_.find(req.job_id());
    if (it != memo_.end()) return it->second;
  }
  ASSIGN_OR_RETURN(JobRecord job, jobs_->Get(req.job_id()));
  ASSIGN_OR_RETURN(JobPlan plan, jobs_->GetPlan(req.job_id()));
  ASSIGN_OR_RETURN(v1::GetPlanResponse out, PlanToProto(job, plan));
  std::lock_guard<std::mutex> lock(memo_mu_);
  if (memo_.emplace(req.job_id(), out).second) {
    memo_order_.push_back(req.job_id());
    if (memo_order_.size() > kPlanMemo) {
      memo_.erase(memo_order_.front());
      memo_order_.pop_front();
    }
  }
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
