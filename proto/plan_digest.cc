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
