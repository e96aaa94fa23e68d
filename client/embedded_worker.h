// The in-process CPU profiling worker of the embedded strategy service
// (client/service_session.h), behind a factory: the worker links LibTorch,
// and only braid-torch (client/cli.h) links it, so the light `braid` can
// hold a ServiceArgs without loading LibTorch.
//
//   ServiceArgs a;
//   a.start_worker = StartEmbeddedCpuWorker;  // braid-torch only
//   OpenService(a);  // the embedded server leases profiling tasks to it
#ifndef BRAID_CLIENT_EMBEDDED_WORKER_H_
#define BRAID_CLIENT_EMBEDDED_WORKER_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace grpc {
class Channel;
}  // namespace grpc

namespace braid::client {

// A running worker; destroying it stops the worker and waits for it (the
// task being measured is reported first).
class EmbeddedWorker {
 public:
  virtual ~EmbeddedWorker() = default;
};

// Starts a worker on `channel` (the embedded server's in-process channel)
// with the Workers bearer token `token`.
using EmbeddedWorkerFactory = std::function<absl::StatusOr<std::unique_ptr<EmbeddedWorker>>(
    std::shared_ptr<grpc::Channel> channel, const std::string& token)>;

// The CPU profiling worker (worker/worker_agent.h), named "<host> (embedded)".
// Defined in braid_cli_torch, which links LibTorch.
absl::StatusOr<std::unique_ptr<EmbeddedWorker>> StartEmbeddedCpuWorker(
    std::shared_ptr<grpc::Channel> channel, const std::string& token);

}  // namespace braid::client

#endif  // BRAID_CLIENT_EMBEDDED_WORKER_H_
