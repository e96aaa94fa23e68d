// The one place where absl::Status becomes grpc::Status (CONVENTIONS.md:
// convert only at the edges). The canonical codes are numbered the same in
// both, so the code is carried over unchanged.
//
//   return reactor->Finish(ToGrpcStatus(manager.Cancel(id).status())), reactor;
#ifndef BRAID_SERVER_STATUS_UTIL_H_
#define BRAID_SERVER_STATUS_UTIL_H_

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace braid::server {

grpc::Status ToGrpcStatus(const absl::Status& s);

}  // namespace braid::server

#endif  // BRAID_SERVER_STATUS_UTIL_H_
