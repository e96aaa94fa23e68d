// braid-torch: the `braid` command line with the commands that link LibTorch
// (profile, run, bench service, the embedded submit's CPU worker). `braid`
// replaces itself with this program for those commands (client/cli.h).
#include "client/cli.h"
#include "client/embedded_worker.h"
#include "costmodel/gnn/provider.h"

int main(int argc, char** argv) {
  // Cost models get the GNN fused-op estimator where one is trained for the
  // cluster's device kind.
  braid::costmodel::gnn::InstallGnnEstimatorProvider();
  braid::client::TorchCommands torch;
  torch.register_profile = braid::client::RegisterProfileCommands;
  torch.register_run = braid::client::RegisterRunCommand;
  torch.register_service_bench = braid::client::RegisterServiceBench;
  // `braid gnn` with train/eval (cli_gnn.cc) and sample (cli_gnn_sample.cc).
  torch.register_gnn = [](CLI::App& app, braid::client::CommandResult& result) {
    CLI::App* gnn = braid::client::RegisterGnnCommands(app, result);
    braid::client::RegisterGnnSampleCommand(*gnn, result);
    return gnn;
  };
  torch.embedded_worker = braid::client::StartEmbeddedCpuWorker;
  return braid::client::CliMain(argc, argv, &torch);
}
