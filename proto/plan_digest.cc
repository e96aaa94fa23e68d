#include "proto/plan_digest.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "base/bounded_json.h"
#include "base/digest.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"

namespace braid {

std::string SerializeDeterministic(const google::protobuf::MessageLite& m) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream raw(&out);
    google::protobuf::io::CodedOutputStream coded(&raw);
    coded.SetSerializationDeterministic(true);
    m.SerializeToCodedStream(&coded);
  }  // the CodedOutputStream flushes into `out` when destroyed
  return out;
}

std::string PlanDigest(const braid::v1::Plan& plan) {
  braid::v1::Plan identity = plan;
  identity.clear_predicted_iteration_s();
  identity.clear_predicted_compute_s();
  identity.clear_predicted_comm_s();
  identity.clear_cost_generation();
  if (identity.has_parallel()) {
    // A parallel plan's cost figures (the DP's estimates, the other
    // strategies' simulated times) are no part of what the ranks run.
    braid::v1::ParallelPlan* par = identity.mutable_parallel();
    par->clear_dp_iteration_s();
    par->clear_strategies();
    for (braid::v1::OpParallelConfig& op : *par->mutable_ops()) {
      op.clear_compute_s();
      op.clear_grad_sync_s();
    }
    // An overlap's method and tile are what the ranks run; its times are not.
    for (braid::v1::OverlapChoice& o : *par->mutable_overlaps()) {
      o.clear_gemm_s();
      o.clear_none_s();
      o.clear_chosen_s();
      o.clear_efficiency();
      o.clear_gemm_source();
      o.clear_comm_source();
      o.clear_candidates();
    }
    // The program's fingerprint is the SHA-256 of its JSON's content: the
    // header stands for the text (CheckDeviceProgram binds the two).
    if (par->has_program()) par->mutable_program()->clear_json();
  }
  return Sha256Hex(SerializeDeterministic(identity));
}

absl::StatusOr<std::string> PlanDigestOfSerialized(std::string_view bytes) {
  braid::v1::Plan plan;
  if (!plan.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::InvalidArgumentError("plan bytes do not parse as a braid.v1.Plan");
  }
  if (plan.has_parallel() && plan.parallel().has_program()) {
    if (absl::Status s = CheckDeviceProgram(plan.parallel().program()); !s.ok()) return s;
  }
  return PlanDigest(plan);
}

absl::Status CheckDeviceProgram(const braid::v1::DeviceProgram& program) {
  auto bad = [](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("plan.parallel.program: ", what));
  };
  absl::StatusOr<nlohmann::json> j = base::ParseBoundedJson(program.json(), base::kPlanJsonLimits);
  if (!j.ok()) return bad(std::string(j.status().message()));
  if (!j->is_object()) return bad("json is not a JSON object");
  auto text = [&](const char* key) -> std::string {
    const auto it = j->find(key);
    return it != j->end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  if (text("program_fingerprint") != program.program_fingerprint()) {
    return bad(absl::StrCat("the JSON's program_fingerprint ", text("program_fingerprint"),
                            " is not the header's ", program.program_fingerprint()));
  }
  if (text("format") != program.format()) return bad("the JSON's format is not the header's");
  if (text("row") != program.row()) return bad("the JSON's row is not the header's");
  if (text("model_fingerprint") != program.model_fingerprint()) {
    return bad("the JSON's model_fingerprint is not the header's");
  }
  const std::vector<int> mesh(program.mesh().begin(), program.mesh().end());
  const auto m = j->find("mesh");
  if (m == j->end() || !m->is_array() || *m != nlohmann::json(mesh)) {
    return bad("the JSON's mesh is not the header's");
  }
  nlohmann::json content = *j;
  content.erase("program_fingerprint");
  if (!DigestsEqual(Sha256Hex(content.dump()), program.program_fingerprint())) {
    return bad(absl::StrCat("the JSON does not match program_fingerprint ",
                            program.program_fingerprint(), " (changed after planning)"));
  }
  return absl::OkStatus();
}

}  // namespace braid
