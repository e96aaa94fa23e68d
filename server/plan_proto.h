// A stored plan (PlanRecord: plan JSON with names, search/plan.h) as the wire
// braid.v1.Plan that GetPlan serves and whose PlanDigest
// (proto/plan_digest.h) training ranks verify and report against.
//
//   absl::StatusOr<braid::v1::Plan> p = PlanRecordToProto(record, job.graph_fingerprint,
//                                                         job.cluster_fingerprint);
//   std::string digest = braid::PlanDigest(*p);
#ifndef BRAID_SERVER_PLAN_PROTO_H_
#define BRAID_SERVER_PLAN_PROTO_H_

#include <string>

#include "absl/status/statusor.h"
#include "braid/v1/plan.pb.h"
#include "server/store.h"

namespace braid::server {

// DataLoss when the stored plan (or its DDP buckets, or its parallel
// section's) JSON is malformed. A parallel plan's section fills
// Plan.parallel.
absl::StatusOr<braid::v1::Plan> PlanRecordToProto(const PlanRecord& record,
                                                  const std::string& graph_fingerprint,
                                                  const std::string& cluster_fingerprint);

// A parallel plan's section (store.h) as the wire ParallelPlan: seconds from
// the stored JSON's milliseconds, and its per-device program
// (StoredProgramToProto) or why it has none. DataLoss when the JSON is
// malformed.
absl::StatusOr<braid::v1::ParallelPlan> ParallelSectionToProto(const ParallelSection& section);

// A stored program (ParallelSection::program_json) as the wire
// DeviceProgram, its header taken from the program and its JSON the
// canonical text: parsed within base::kPlanJsonLimits and checked by
// graph::ProgramFromJson. DataLoss naming the fault when the text is not a
// valid program, has no program_fingerprint, or its content does not match
// that fingerprint (changed after planning).
absl::StatusOr<braid::v1::DeviceProgram> StoredProgramToProto(const std::string& text);

}  // namespace braid::server

#endif  // BRAID_SERVER_PLAN_PROTO_H_
