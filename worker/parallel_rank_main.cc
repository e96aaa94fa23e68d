// braid-parallel-rank: one rank of the data-/tensor-/pipeline-parallel MLP
// or transformer training (stage-major ranks: see parallel_train.h).
// Started by RunParallelTraining (worker/parallel_train.h), not by hand.
#include <iostream>
#include <optional>
#include <string>

#include "CLI/CLI.hpp"
#include "base/command_line.h"
#include "worker/parallel_train.h"

int main(int argc, char** argv) {
  braid::worker::ParallelRankConfig config;
  CLI::App app{"One rank of braid's data-/tensor-/pipeline-parallel training"};
  app.add_option("--store", config.store_path, "c10d FileStore path")->required();
  app.add_option("--spec", config.spec_path, "training spec JSON")->required();
  app.add_option("--out", config.output_path, "per-step result file")->required();
  app.add_option("--weights", config.weights_path, "final full weights (rank 0 writes)")
      ->required();
  app.add_option("--rank", config.rank)->required();
  app.add_option("--world", config.world)->required();
  app.add_flag("--pin-cores", config.pin_cores, "bind this rank to core rank mod cores");
  app.add_flag("--poll", config.poll, "with --pin-cores: poll for collectives instead of blocking");
  app.add_flag("--op-clocks", config.op_clocks,
               "clock every op inside the steps and report the totals per step");
  if (std::optional<int> done = braid::base::ParseCommandLine(app, argc, argv)) return *done;
  absl::Status s = braid::worker::RunParallelRank(config);
  if (!s.ok()) {
    std::cerr << s << "\n";
    return 1;
  }
  return 0;
}
