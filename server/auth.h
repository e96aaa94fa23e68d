// Bearer-token authentication for braid's RPCs: every call carries the
// metadata "authorization: Bearer <token>"; clients (launchers, the CLI) and
// workers have separate tokens, so a leaked worker token cannot submit jobs.
//
//   absl::Status s = CheckBearer(ctx->client_metadata(), client_token);
//   if (!s.ok()) return reactor->Finish(ToGrpcStatus(s)), reactor;
#ifndef BRAID_SERVER_AUTH_H_
#define BRAID_SERVER_AUTH_H_

#include <map>
#include <string_view>

#include "absl/status/status.h"
#include "grpcpp/support/string_ref.h"

namespace braid::server {

// Unauthenticated when the metadata is missing, malformed or names another
// token. The comparison takes the same time for every wrong token of a given
// length.
absl::Status CheckBearer(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata,
                         std::string_view token);

}  // namespace braid::server

#endif  // BRAID_SERVER_AUTH_H_
