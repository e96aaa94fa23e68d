// braid-overlap-rank: one rank of the overlapped tensor-parallel training
// (worker/overlap_train.h). Started by RunOverlapTraining, not by hand.
#include <iostream>
#include <optional>
#include <string>

#include "CLI/CLI.hpp"
#include "base/command_line.h"
#include "worker/overlap_train.h"

int main(int argc, char** argv) {
  braid::worker::OverlapRankConfig config;
  CLI::App app{"One rank of braid's overlapped tensor-parallel training"};
  app.add_option("--store", config.store_path, "c10d FileStore path")->required();
  app.add_option("--spec", config.spec_path, "the spec (JSON, written by the driver)")->required();
  app.add_option("--out", config.output_path, "step times and losses (weights next to it)")
      ->required();
  app.add_option("--rank", config.rank)->required();
  app.add_option("--world", config.world)->required();
  if (std::optional<int> done = braid::base::ParseCommandLine(app, argc, argv)) return *done;
  absl::Status s = braid::worker::RunOverlapRank(config);
  if (!s.ok()) {
    std::cerr << s << "\n";
    return 1;
  }
  return 0;
}
