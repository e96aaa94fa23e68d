// A service job's plan as a plan file: what `braid plan get JOB -o FILE`
// writes, in the shape `braid plan MODEL --parallel -o FILE` writes, so that
// the commands that read plan files (`braid run MODEL --plan FILE`, its
// `--check`, `braid-worker activate --plan`) take either.
//
// The file is the plan's groups and buckets (GetPlanResponse.plan_json,
// search/plan.h PlanToJson) with, at the top level, "graph_fingerprint",
// "cluster_fingerprint", "ranks", "predicted_iteration_s", "predicted_by",
// "job" and "plan_sha256"; for a parallel plan "parallel" (the section as
// search::ParallelPlanJson writes it, milliseconds and all, from the wire
// ParallelPlan) and "program" (the per-device program's JSON object) or
// "program_error".
//
//   absl::StatusOr<v1::GetPlanResponse> r = api->GetPlan(job);
//   absl::StatusOr<nlohmann::json> file = JobPlanFile(*r);
//   RETURN_IF_ERROR(WritePlanFile(path, file->dump(1) + "\n"));
#ifndef BRAID_CLIENT_JOB_PLAN_FILE_H_
#define BRAID_CLIENT_JOB_PLAN_FILE_H_

#include "absl/status/statusor.h"
#include "braid/v1/strategy.pb.h"
#include "nlohmann/json.hpp"

namespace braid::client {

// DataLoss when plan_json is not a plan object (bounded by
// base::kPlanJsonLimits) or the program's JSON does not match the
// fingerprint the plan digest covers (proto/plan_digest.h
// CheckDeviceProgram).
absl::StatusOr<nlohmann::json> JobPlanFile(const braid::v1::GetPlanResponse& response);

// A parallel plan's strand blocks as plan files (search::ParallelPlanJson)
// write them, times in milliseconds.
nlohmann::json StrandBlocksJson(const braid::v1::ParallelPlan& p);

}  // namespace braid::client

#endif  // BRAID_CLIENT_JOB_PLAN_FILE_H_
