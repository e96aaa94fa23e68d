// braid-train-rank: one rank of the timing executor. Started by
// RunTrainingBench (worker/executor.h), not by hand.
#include <iostream>
#include <optional>
#include <string>

#include "CLI/CLI.hpp"
#include "base/command_line.h"
#include "worker/executor.h"

int main(int argc, char** argv) {
  braid::worker::TrainRankConfig config;
  CLI::App app{"One rank of braid's timing executor"};
  app.add_option("--store", config.store_path, "c10d FileStore path")->required();
  app.add_option("--graph", config.graph_path, "training graph, braid text format")->required();
  app.add_option("--strategies", config.strategies_path, "strategies JSON")->required();
  app.add_option("--out", config.output_path, "result file")->required();
  app.add_option("--rank", config.rank)->required();
  app.add_option("--world", config.world)->required();
  if (std::optional<int> done = braid::base::ParseCommandLine(app, argc, argv)) return *done;
  absl::Status s = braid::worker::RunTrainRank(config);
  if (!s.ok()) {
    std::cerr << s << "\n";
    return 1;
  }
  return 0;
}
