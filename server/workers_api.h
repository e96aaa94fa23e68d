// The Workers service's logic as a plain C++ class over TaskQueue: request
// validation (InvalidArgument naming the field) and proto conversion.
//
//   WorkersApi api(&tasks);
//   absl::StatusOr<braid::v1::LeaseTasksResponse> r = api.LeaseTasks(request);
#ifndef BRAID_SERVER_WORKERS_API_H_
#define BRAID_SERVER_WORKERS_API_H_

#include "absl/status/statusor.h"
#include "braid/v1/workers.pb.h"
#include "server/task_queue.h"

namespace braid::server {

class WorkersApi {
 public:
  explicit WorkersApi(TaskQueue* tasks) : tasks_(tasks) {}

  absl::StatusOr<braid::v1::RegisterResponse> Register(const braid::v1::RegisterRequest& req);
  absl::StatusOr<braid::v1::HeartbeatResponse> Heartbeat(const braid::v1::HeartbeatRequest& req);
  absl::StatusOr<braid::v1::LeaseTasksResponse> LeaseTasks(const braid::v1::LeaseTasksRequest& req);
  absl::StatusOr<braid::v1::ReportResultResponse> ReportResult(
      const braid::v1::ReportResultRequest& req);

 private:
  TaskQueue* tasks_;
};

}  // namespace braid::server

#endif  // BRAID_SERVER_WORKERS_API_H_
