#include "proto/plan_digest.h"

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
  }
  return Sha256Hex(SerializeDeterministic(identity));
}

absl::StatusOr<std::string> PlanDigestOfSerialized(std::string_view bytes) {
  braid::v1::Plan plan;
  if (!plan.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::InvalidArgumentError("plan bytes do not parse as a braid.v1.Plan");
  }
  return PlanDigest(plan);
}

}  // namespace braid
