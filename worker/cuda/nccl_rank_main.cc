// braid-nccl-rank: one rank of the NCCL collective benchmark. Started by
// RunNcclBench (worker/cuda/nccl_bench.h), not by hand.
#include "worker/collective_rank_cli.h"
#include "worker/cuda/nccl_bench.h"

int main(int argc, char** argv) {
  braid::worker::NcclRankConfig config;
  return braid::worker::CollectiveRankMain(
      argc, argv, "One rank of braid's NCCL collective benchmark",
      "AllReduce, AllGather, ReduceScatter, Broadcast, AllToAll", config,
      [&](CLI::App& app) {
        app.add_option("--id-file", config.id_path, "ncclUniqueId file (rank 0 writes it)")
            ->required();
        app.add_option("--device", config.device, "CUDA device ordinal")->required();
      },
      braid::worker::RunNcclRank);
}
