#include "client/embedded_worker.h"

#include <unistd.h>

#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "worker/worker_agent.h"

namespace braid::client {
namespace {

class CpuWorker final : public EmbeddedWorker {
 public:
  CpuWorker(std::shared_ptr<grpc::Channel> channel, worker::WorkerAgentOptions o)
      : agent_(std::move(channel), std::move(o)), thread_([this] { agent_.Run().IgnoreError(); }) {}
  ~CpuWorker() override {
    agent_.Stop();
    thread_.join();
  }

 private:
  worker::WorkerAgent agent_;
  std::thread thread_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<EmbeddedWorker>> StartEmbeddedCpuWorker(
    std::shared_ptr<grpc::Channel> channel, const std::string& token) {
  worker::WorkerAgentOptions o;
  o.token = token;
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  o.name = absl::StrCat(host, " (embedded)");
  o.idle_poll_s = 0.2;
  return std::make_unique<CpuWorker>(std::move(channel), std::move(o));
}

}  // namespace braid::client
