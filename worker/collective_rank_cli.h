// The command line every collective-benchmark rank program shares
// (braid-collective-rank over Gloo, braid-nccl-rank over NCCL): the options
// for output, rank, world, collectives, sizes, warm-up and repetitions, the
// parse of the collective names, and the exit codes (2: bad arguments, 1:
// the rank failed). Each program adds its transport's options.
//
//   int main(int argc, char** argv) {
//     braid::worker::RankConfig config;
//     return braid::worker::CollectiveRankMain(
//         argc, argv, "One rank of braid's Gloo collective benchmark", "AllReduce, ...", config,
//         [&](CLI::App& app) { app.add_option("--store", config.store_path)->required(); },
//         braid::worker::RunCollectiveRank);
//   }
#ifndef BRAID_WORKER_COLLECTIVE_RANK_CLI_H_
#define BRAID_WORKER_COLLECTIVE_RANK_CLI_H_

#include <functional>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "base/command_line.h"
#include "costmodel/comm_model.h"

namespace braid::worker {

template <typename Config>
int CollectiveRankMain(int argc, char** argv, const std::string& title,
                       const std::string& collectives_help, Config& config,
                       const std::function<void(CLI::App&)>& add_transport_options,
                       absl::Status (*run)(const Config&)) {
  std::vector<std::string> collectives;
  CLI::App app{title};
  add_transport_options(app);
  app.add_option("--out", config.output_path, "result file")->required();
  app.add_option("--rank", config.rank)->required();
  app.add_option("--world", config.world)->required();
  app.add_option("--collectives", collectives, collectives_help)->required()->delimiter(',');
  app.add_option("--sizes", config.sizes, "bytes")->required()->delimiter(',');
  app.add_option("--warmup", config.warmup);
  app.add_option("--repetitions", config.repetitions);
  if (std::optional<int> done = braid::base::ParseCommandLine(app, argc, argv)) return *done;
  auto parsed = costmodel::ParseCollectives(collectives);
  if (!parsed.ok()) {
    std::cerr << parsed.status() << "\n";
    return 2;
  }
  config.collectives = *std::move(parsed);
  if (absl::Status s = run(config); !s.ok()) {
    std::cerr << s << "\n";
    return 1;
  }
  return 0;
}

}  // namespace braid::worker

#endif  // BRAID_WORKER_COLLECTIVE_RANK_CLI_H_
