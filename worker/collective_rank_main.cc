// braid-collective-rank: one rank of the collective benchmark. Started by
// RunCollectiveBench (worker/collective_bench.h), not by hand.
#include "worker/collective_bench.h"
#include "worker/collective_rank_cli.h"

int main(int argc, char** argv) {
  braid::worker::RankConfig config;
  return braid::worker::CollectiveRankMain(
      argc, argv, "One rank of braid's Gloo collective benchmark",
      "AllReduce, AllGather, Broadcast, AllToAll, ReduceScatter", config,
      [&](CLI::App& app) {
        app.add_option("--store", config.store_path, "c10d FileStore path")->required();
        app.add_flag("--pin-cores", config.pin_cores,
                     "bind this rank to core rank mod cores");
        app.add_flag("--poll", config.poll,
                     "with --pin-cores: poll for each collective and barrier instead of blocking");
      },
      braid::worker::RunCollectiveRank);
}
