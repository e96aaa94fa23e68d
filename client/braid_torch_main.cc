// braid-torch: the `braid` command line with the commands that link LibTorch
// (profile, run, bench service, the embedded submit's CPU worker). `braid`
// replaces itself with this program for those commands (client/cli.h).
#include "client/cli.h"
#include "client/embedded_worker.h"

int main(int argc, char** argv) {
  braid::client::TorchCommands torch;
  torch.register_profile = braid::client::RegisterProfileCommands;
  torch.register_run = braid::client::RegisterRunCommand;
  torch.register_service_bench = braid::client::RegisterServiceBench;
  torch.embedded_worker = braid::client::StartEmbeddedCpuWorker;
  return braid::client::CliMain(argc, argv, &torch);
}
