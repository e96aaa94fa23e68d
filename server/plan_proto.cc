#include "server/plan_proto.h"

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace braid::server {

namespace v1 = braid::v1;

absl::StatusOr<v1::Plan> PlanRecordToProto(const PlanRecord& record,
                                           const std::string& graph_fingerprint,
                                           const std::string& cluster_fingerprint) {
  nlohmann::json j = nlohmann::json::parse(record.plan_json, nullptr, false);
  if (!j.is_object() || !j.contains("groups") || !j.contains("buckets")) {
    return absl::DataLossError("stored plan JSON is malformed");
  }
  nlohmann::json ddp = nlohmann::json::array();
  if (!record.ddp_buckets_json.empty()) {
    ddp = nlohmann::json::parse(record.ddp_buckets_json, nullptr, false);
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
  return p;
}

}  // namespace braid::server
