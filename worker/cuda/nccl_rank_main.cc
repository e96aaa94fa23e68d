// braid-nccl-rank: one rank of the NCCL collective benchmark. Started by
// RunNcclBench (worker/cuda/nccl_bench.h), not by hand.
#include <iostream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "costmodel/comm_model.h"
#include "worker/cuda/nccl_bench.h"

int main(int argc, char** argv) {
  braid::worker::NcclRankConfig config;
  std::vector<std::string> collectives;
  CLI::App app{"One rank of braid's NCCL collective benchmark"};
  app.add_option("--id-file", config.id_path, "ncclUniqueId file (rank 0 writes it)")->required();
  app.add_option("--out", config.output_path, "result file")->required();
  app.add_option("--rank", config.rank)->required();
  app.add_option("--world", config.world)->required();
  app.add_option("--device", config.device, "CUDA device ordinal")->required();
  app.add_option("--collectives", collectives,
                 "AllReduce, AllGather, ReduceScatter, Broadcast, AllToAll")
      ->required()
      ->delimiter(',');
  app.add_option("--sizes", config.sizes, "bytes")->required()->delimiter(',');
  app.add_option("--warmup", config.warmup);
  app.add_option("--repetitions", config.repetitions);
  CLI11_PARSE(app, argc, argv);
  auto parsed = braid::costmodel::ParseCollectives(collectives);
  if (!parsed.ok()) {
    std::cerr << parsed.status() << "\n";
    return 2;
  }
  config.collectives = *std::move(parsed);
  absl::Status s = braid::worker::RunNcclRank(config);
  if (!s.ok()) {
    std::cerr << s << "\n";
    return 1;
  }
  return 0;
}
