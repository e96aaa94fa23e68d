#include "client/job_plan_file.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/bounded_json.h"
#include "proto/plan_digest.h"

namespace braid::client {

namespace v1 = braid::v1;

namespace {

double Ms(double s) { return s * 1e3; }

nlohmann::json OverlapsJson(const v1::ParallelPlan& p) {
  nlohmann::json out = nlohmann::json::array();
  for (const v1::OverlapChoice& o : p.overlaps()) {
    nlohmann::json cands = nlohmann::json::array();
    for (const v1::OverlapCandidate& c : o.candidates()) {
      nlohmann::json e = {{"method", c.method()}, {"time_ms", Ms(c.time_s())}};
      if (c.tile_rows() > 0) e["tile_rows"] = c.tile_rows();
      cands.push_back(std::move(e));
    }
    out.push_back({{"pattern", o.pattern()},
                   {"collective", o.collective_op()},
                   {"matmuls", std::vector<std::string>(o.matmul_ops().begin(),
                                                        o.matmul_ops().end())},
                   {"phase", o.phase()},
                   {"m", o.m()},
                   {"k", o.k()},
                   {"n", o.n()},
                   {"ranks", o.ranks()},
                   {"method", o.method()},
                   {"steps", o.steps()},
                   {"tile_rows", o.tile_rows()},
                   {"gemm_ms", Ms(o.gemm_s())},
                   {"none_ms", Ms(o.none_s())},
                   {"chosen_ms", Ms(o.chosen_s())},
                   {"gain_ms", Ms(o.none_s() - o.chosen_s())},
                   {"efficiency", o.efficiency()},
                   {"gemm_source", o.gemm_source()},
                   {"comm_source", o.comm_source()},
                   {"candidates", std::move(cands)}});
  }
  return out;
}

// The wire ParallelPlan as search::ParallelPlanJson (plus "strategies",
// "chosen_by", "grad_group" and "grad_devices") writes it: the inverse of
// the server's ParallelSectionToProto.
nlohmann::json ParallelJson(const v1::ParallelPlan& p) {
  nlohmann::json ops = nlohmann::json::array();
  for (const v1::OpParallelConfig& o : p.ops()) {
    nlohmann::json e = {{"op", o.op()},
                        {"config", o.config()},
                        {"kind", o.kind()},
                        {"data_degree", o.data_degree()},
                        {"model_degree", o.model_degree()},
                        {"machine_view", o.machine_view()},
                        {"compute_ms", Ms(o.compute_s())},
                        {"grad_sync_ms", Ms(o.grad_sync_s())}};
    if (o.num_devices() > 0) {
      e["devices"] = nlohmann::json::array({o.first_device(), o.first_device() + o.num_devices()});
    }
    ops.push_back(std::move(e));
  }
  nlohmann::json j = {{"strategy", p.strategy()},
                      {"description", p.description()},
                      {"degree", p.degree()},
                      {"data_degree", p.data_degree()},
                      {"model_degree", p.model_degree()},
                      {"dp_iteration_ms", Ms(p.dp_iteration_s())},
                      {"memory_per_device_bytes", p.memory_per_device_bytes()},
                      {"device_memory_bytes", p.device_memory_bytes()},
                      {"forward_collectives", p.forward_collectives()},
                      {"ops", std::move(ops)}};
  if (p.strand_blocks_size() > 0) j["strand_blocks"] = StrandBlocksJson(p);
  if (p.overlaps_size() > 0) j["overlap"] = OverlapsJson(p);
  nlohmann::json rows = nlohmann::json::array();
  for (const v1::StrategyTime& t : p.strategies()) {
    nlohmann::json e = {{"strategy", t.strategy()}, {"status", t.status()}};
    if (t.status() == "ok") {
      e["iteration_ms"] = Ms(t.iteration_s());
      e["data_degree"] = t.data_degree();
      e["model_degree"] = t.model_degree();
    }
    if (t.program_s() > 0) {
      e["program_ms"] = Ms(t.program_s());
      e["program_measured_share"] = t.program_measured_share();
    } else if (!t.no_program().empty()) {
      e["no_program"] = t.no_program();
    }
    rows.push_back(std::move(e));
  }
  j["strategies"] = std::move(rows);
  if (!p.chosen_by().empty()) j["chosen_by"] = p.chosen_by();
  nlohmann::json groups = nlohmann::json::object();
  for (const auto& [param, group] : p.grad_group()) groups[param] = group;
  j["grad_group"] = std::move(groups);
  if (!p.grad_devices().empty()) {
    nlohmann::json devices = nlohmann::json::object();
    for (const auto& [param, n] : p.grad_devices()) devices[param] = n;
    j["grad_devices"] = std::move(devices);
  }
  return j;
}

}  // namespace

nlohmann::json StrandBlocksJson(const v1::ParallelPlan& p) {
  nlohmann::json blocks = nlohmann::json::array();
  for (const v1::StrandBlock& b : p.strand_blocks()) {
    blocks.push_back({{"sink", b.sink()},
                      {"strands", b.strands()},
                      {"devices_per_strand", b.devices_per_strand()},
                      {"groups", b.groups()},
                      {"strands_per_group", b.strands_per_group()},
                      {"busiest_group_ms", Ms(b.busiest_group_s())},
                      {"alltoall_ms", Ms(b.alltoall_s())}});
  }
  return blocks;
}

absl::StatusOr<nlohmann::json> JobPlanFile(const v1::GetPlanResponse& r) {
  absl::StatusOr<nlohmann::json> file =
      base::ParseBoundedJson(r.plan_json(), base::kPlanJsonLimits);
  if (!file.ok()) return absl::DataLossError(absl::StrCat("plan_json: ", file.status().message()));
  if (!file->is_object()) return absl::DataLossError("plan_json is not a JSON object");
  const v1::Plan& plan = r.plan();
  (*file)["graph_fingerprint"] = plan.graph_fingerprint();
  (*file)["cluster_fingerprint"] = plan.cluster_fingerprint();
  (*file)["predicted_iteration_s"] = plan.predicted_iteration_s();
  (*file)["predicted_by"] = "simulator";
  (*file)["job"] = r.job_id();
  (*file)["plan_sha256"] = r.plan_sha256();
  if (!plan.has_parallel()) return file;
  const v1::ParallelPlan& par = plan.parallel();
  (*file)["ranks"] = par.degree();
  (*file)["parallel"] = ParallelJson(par);
  if (par.has_program()) {
    if (absl::Status s = CheckDeviceProgram(par.program()); !s.ok()) {
      return absl::DataLossError(std::string(s.message()));
    }
    absl::StatusOr<nlohmann::json> program =
        base::ParseBoundedJson(par.program().json(), base::kPlanJsonLimits);
    if (!program.ok()) return absl::DataLossError(std::string(program.status().message()));
    (*file)["program"] = *std::move(program);
  } else if (!par.program_error().empty()) {
    (*file)["program_error"] = par.program_error();
  }
  return file;
}

}  // namespace braid::client
