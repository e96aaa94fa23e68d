// The identity of a braid.v1.Plan that training ranks and the server agree
// on: the SHA-256 of what the ranks enact -- graph and cluster fingerprints,
// fusion groups, buckets, the DDP-bucket baseline's buckets -- serialized
// deterministically. The cost figures (predicted_iteration_s,
// predicted_compute_s, predicted_comm_s, cost_generation) are left out: the
// server re-costs a cached plan when the cost model changes, and a plan that
// is re-costed (or fetched from a rank's local plan cache before that) is
// still the same plan, with the same measurements.
//
// A parallel plan's per-device program (ParallelPlan.program) is covered
// by its header -- row, mesh, model and program fingerprints -- not by its
// JSON text: program_fingerprint is the SHA-256 of that JSON's content, so
// the digest binds the program as long as the JSON is checked against the
// fingerprint (CheckDeviceProgram), which PlanDigestOfSerialized does.
//
// GetPlanResponse.plan_sha256 and ReportMeasurementRequest.plan_sha256 are
// PlanDigest(plan). A rank that received a plan's bytes from another rank
// checks them with PlanDigestOfSerialized (parse, check the program, then
// digest), not with a hash of the raw bytes.
//
//   std::string d = braid::PlanDigest(response.plan());   // 64 lowercase hex
//   absl::StatusOr<std::string> got = braid::PlanDigestOfSerialized(bytes);
//   if (!got.ok() || !braid::DigestsEqual(*got, response.plan_sha256())) { /* refuse */ }
#ifndef BRAID_PROTO_PLAN_DIGEST_H_
#define BRAID_PROTO_PLAN_DIGEST_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "braid/v1/plan.pb.h"
#include "google/protobuf/message_lite.h"

namespace braid {

// A message's bytes with deterministic serialization (map entries sorted;
// fields in field-number order), the same on every rank for equal messages.
std::string SerializeDeterministic(const google::protobuf::MessageLite& m);

// SHA-256 (hex) of `plan` without its cost figures, serialized
// deterministically.
std::string PlanDigest(const braid::v1::Plan& plan);

// PlanDigest of a serialized braid.v1.Plan; InvalidArgument when the bytes
// do not parse as one, or when its per-device program fails
// CheckDeviceProgram.
absl::StatusOr<std::string> PlanDigestOfSerialized(std::string_view bytes);

// OK when `program.json` is a JSON object (within base::kPlanJsonLimits)
// whose content hashes to program.program_fingerprint (SHA-256 of the
// canonical dump without the "program_fingerprint" key, as
// graph::ComputeProgramFingerprint) and whose format, row, mesh and
// fingerprints are the header's; InvalidArgument naming the first
// mismatch otherwise. The program's own validity (ops, loads, bounds) is
// graph::ProgramFromJson's to check, where it is run.
absl::Status CheckDeviceProgram(const braid::v1::DeviceProgram& program);

}  // namespace braid

#endif  // BRAID_PROTO_PLAN_DIGEST_H_
