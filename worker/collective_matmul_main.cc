// braid-collective-matmul-rank: one rank of the decomposed collective matmul
// measurement (worker/collective_matmul.h). Started by RunCollectiveMatMul,
// not by hand.
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_split.h"
#include "base/command_line.h"
#include "worker/collective_matmul.h"

int main(int argc, char** argv) {
  braid::worker::CollectiveMatMulRankConfig config;
  std::string pattern = "allgather_matmul", methods = "none";
  CLI::App app{"One rank of braid's decomposed collective matmul measurement"};
  app.add_option("--store", config.store_path, "c10d FileStore path")->required();
  app.add_option("--out", config.output_path, "times file (out_r next to it)")->required();
  app.add_option("--rank", config.rank)->required();
  app.add_option("--world", config.world)->required();
  app.add_option("--pattern", pattern, "allgather_matmul or matmul_reducescatter");
  app.add_option("--methods", methods, "comma-separated: none,looped,unrolled,bidirectional");
  app.add_option("--m", config.spec.m);
  app.add_option("--k", config.spec.k);
  app.add_option("--nout", config.spec.nout);
  app.add_option("--reps", config.spec.repetitions);
  app.add_option("--warmup", config.spec.warmup);
  app.add_option("--seed", config.spec.seed);
  app.add_flag("--parts", config.spec.parts, "also time the overlap model's primitives");
  app.add_flag("--pin-cores", config.spec.pin_cores, "pin rank r to core r mod cores");
  if (std::optional<int> done = braid::base::ParseCommandLine(app, argc, argv)) return *done;
  auto p = braid::worker::ParseCollectivePattern(pattern);
  if (!p.ok()) {
    std::cerr << p.status() << "\n";
    return 1;
  }
  config.spec.pattern = *p;
  config.spec.methods.clear();
  const std::vector<std::string> names = absl::StrSplit(methods, ',');
  for (const std::string& name : names) {
    auto m = braid::worker::ParseDecomposeMethod(name);
    if (!m.ok()) {
      std::cerr << m.status() << "\n";
      return 1;
    }
    config.spec.methods.push_back(*m);
  }
  config.spec.ranks = config.world;
  absl::Status s = braid::worker::RunCollectiveMatMulRank(config);
  if (!s.ok()) {
    std::cerr << s << "\n";
    return 1;
  }
  return 0;
}
