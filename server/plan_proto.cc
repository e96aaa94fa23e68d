#include "server/plan_proto.h"

#include "absl/strings/str_cat.h"
#include "base/bounded_json.h"
#include "graph/program.h"
#include "nlohmann/json.hpp"

namespace braid::server {

namespace v1 = braid::v1;

absl::StatusOr<v1::DeviceProgram> StoredProgramToProto(const std::string& text) {
  auto lost = [](const std::string& why) {
    return absl::DataLossError(absl::StrCat("stored per-device program: ", why));
  };
  absl::StatusOr<nlohmann::json> j = base::ParseBoundedJson(text, base::kPlanJsonLimits);
  if (!j.ok()) return lost(std::string(j.status().message()));
  absl::StatusOr<graph::Program> p = graph::ProgramFromJson(*j);
  if (!p.ok()) return lost(std::string(p.status().message()));
  if (p->program_fingerprint.empty()) return lost("it has no program_fingerprint");
  v1::DeviceProgram out;
  out.set_format(std::string(graph::kProgramFormat));
  out.set_row(p->row);
  for (int axis : p->mesh) out.add_mesh(axis);
  out.set_model_fingerprint(p->model_fingerprint);
  out.set_program_fingerprint(p->program_fingerprint);
  out.set_json(graph::ProgramToJson(*p).dump());
  return out;
}

absl::StatusOr<v1::Plan> PlanRecordToProto(const PlanRecord& record,
                                           const std::string& graph_fingerprint,
                                           const std::string& cluster_fingerprint) {
  nlohmann::json j = base::ParseBoundedJsonOrDiscarded(record.plan_json, base::kPlanJsonLimits);
  if (!j.is_object() || !j.contains("groups") || !j.contains("buckets")) {
    return absl::DataLossError("stored plan JSON is malformed");
  }
  nlohmann::json ddp = nlohmann::json::array();
  if (!record.ddp_buckets_json.empty()) {
    ddp = base::ParseBoundedJsonOrDiscarded(record.ddp_buckets_json, base::kPlanJsonLimits);
    if (!ddp.is_array()) return absl::DataLossError("stored DDP buckets JSON is malformed");
  }
  v1::Plan p;
  p.set_graph_fingerprint(graph_fingerprint);
  p.set_cluster_fingerprint(cluster_fingerprint);
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
    for (const nlohmann::json& b : ddp) {
      v1::Bucket* bucket = p.add_ddp_buckets();
      for (const nlohmann::json& grad : b) bucket->add_gradients(grad.get<std::string>());
    }
  } catch (const nlohmann::json::exception& e) {
    return absl::DataLossError(absl::StrCat("stored plan JSON: ", e.what()));
  }
  p.set_predicted_iteration_s(record.predicted_s);
  if (record.compute_s >= 0) p.set_predicted_compute_s(record.compute_s);
  if (record.comm_s >= 0) p.set_predicted_comm_s(record.comm_s);
  p.set_cost_generation(record.generation);
  if (record.parallel.has_value()) {
    absl::StatusOr<v1::ParallelPlan> par = ParallelSectionToProto(*record.parallel);
    if (!par.ok()) return par.status();
    *p.mutable_parallel() = *std::move(par);
  }
  return p;
}

absl::StatusOr<v1::ParallelPlan> ParallelSectionToProto(const ParallelSection& section) {
  nlohmann::json j = base::ParseBoundedJsonOrDiscarded(section.json, base::kPlanJsonLimits);
  if (!j.is_object()) return absl::DataLossError("stored parallel plan JSON is malformed");
  v1::ParallelPlan p;
  try {
    p.set_strategy(j.at("strategy").get<std::string>());
    p.set_description(j.value("description", ""));
    p.set_degree(j.at("degree").get<int>());
    p.set_data_degree(section.data_degree);
    p.set_model_degree(section.model_degree);
    for (const nlohmann::json& o : j.at("ops")) {
      v1::OpParallelConfig* c = p.add_ops();
      c->set_op(o.at("op").get<std::string>());
      c->set_config(o.at("config").get<std::string>());
      c->set_kind(o.at("kind").get<std::string>());
      c->set_data_degree(o.at("data_degree").get<int>());
      c->set_model_degree(o.at("model_degree").get<int>());
      c->set_machine_view(o.at("machine_view").get<std::string>());
      c->set_compute_s(o.at("compute_ms").get<double>() / 1e3);
      c->set_grad_sync_s(o.at("grad_sync_ms").get<double>() / 1e3);
      if (o.contains("devices")) {
        const int first = o["devices"].at(0).get<int>(), end = o["devices"].at(1).get<int>();
        c->set_first_device(first);
        c->set_num_devices(end - first);
      }
    }
    for (const nlohmann::json& b : j.value("strand_blocks", nlohmann::json::array())) {
      v1::StrandBlock* s = p.add_strand_blocks();
      s->set_sink(b.at("sink").get<std::string>());
      s->set_strands(b.at("strands").get<int>());
      s->set_devices_per_strand(b.at("devices_per_strand").get<int>());
      s->set_groups(b.at("groups").get<int>());
      s->set_strands_per_group(b.at("strands_per_group").get<int>());
      s->set_busiest_group_s(b.at("busiest_group_ms").get<double>() / 1e3);
      s->set_alltoall_s(b.at("alltoall_ms").get<double>() / 1e3);
    }
    p.set_dp_iteration_s(j.at("dp_iteration_ms").get<double>() / 1e3);
    p.set_memory_per_device_bytes(j.at("memory_per_device_bytes").get<int64_t>());
    p.set_device_memory_bytes(j.at("device_memory_bytes").get<int64_t>());
    p.set_forward_collectives(j.at("forward_collectives").get<int>());
    for (const nlohmann::json& r : j.value("strategies", nlohmann::json::array())) {
      v1::StrategyTime* t = p.add_strategies();
      t->set_strategy(r.at("strategy").get<std::string>());
      t->set_iteration_s(r.value("iteration_ms", 0.0) / 1e3);
      t->set_status(r.value("status", ""));
      t->set_data_degree(r.value("data_degree", 0));
      t->set_model_degree(r.value("model_degree", 0));
      t->set_program_s(r.value("program_ms", 0.0) / 1e3);
      if (r.contains("program_sources") && r["program_sources"].is_object())
        t->set_program_measured_share(r["program_sources"].value("measured", 0.0));
      t->set_no_program(r.value("no_program", ""));
    }
    p.set_chosen_by(j.value("chosen_by", ""));
    for (const nlohmann::json& o : j.value("overlap", nlohmann::json::array())) {
      v1::OverlapChoice* c = p.add_overlaps();
      c->set_pattern(o.at("pattern").get<std::string>());
      c->set_collective_op(o.at("collective").get<std::string>());
      for (const nlohmann::json& m : o.at("matmuls")) c->add_matmul_ops(m.get<std::string>());
      c->set_phase(o.value("phase", ""));
      c->set_m(o.at("m").get<int64_t>());
      c->set_k(o.at("k").get<int64_t>());
      c->set_n(o.at("n").get<int64_t>());
      c->set_ranks(o.at("ranks").get<int>());
      c->set_method(o.at("method").get<std::string>());
      c->set_steps(o.value("steps", 0));
      c->set_tile_rows(o.value("tile_rows", int64_t{0}));
      c->set_gemm_s(o.at("gemm_ms").get<double>() / 1e3);
      c->set_none_s(o.at("none_ms").get<double>() / 1e3);
      c->set_chosen_s(o.at("chosen_ms").get<double>() / 1e3);
      c->set_efficiency(o.value("efficiency", 0.0));
      c->set_gemm_source(o.value("gemm_source", ""));
      c->set_comm_source(o.value("comm_source", ""));
      for (const nlohmann::json& t : o.value("candidates", nlohmann::json::array())) {
        v1::OverlapCandidate* cand = c->add_candidates();
        cand->set_method(t.at("method").get<std::string>());
        cand->set_tile_rows(t.value("tile_rows", int64_t{0}));
        cand->set_time_s(t.at("time_ms").get<double>() / 1e3);
      }
    }
    const nlohmann::json groups = j.value("grad_group", nlohmann::json::object());
    for (const auto& [param, group] : groups.items()) {
      (*p.mutable_grad_group())[param] = group.get<int>();
    }
    const nlohmann::json devices = j.value("grad_devices", nlohmann::json::object());
    for (const auto& [param, n] : devices.items()) {
      (*p.mutable_grad_devices())[param] = n.get<int>();
    }
  } catch (const nlohmann::json::exception& e) {
    return absl::DataLossError(absl::StrCat("stored parallel plan JSON: ", e.what()));
  }
  p.set_device_graph_text(section.forward_text);
  if (!section.program_json.empty()) {
    absl::StatusOr<v1::DeviceProgram> program = StoredProgramToProto(section.program_json);
    if (!program.ok()) return program.status();
    *p.mutable_program() = *std::move(program);
  }
  p.set_program_error(section.program_error);
  return p;
}

}  // namespace braid::server
