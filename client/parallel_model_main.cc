// braid-parallel-model: writes the forward graph of a model the hand-written
// parallel trainer (braid-parallel-rank, worker/parallel_train.h) runs, in
// braid's text format at the global batch, for `braid plan FILE --parallel`
// to plan and `braid run FILE --plan P` to run a pipeline plan of it on
// braid-parallel-rank (client/parallel_plan_exec.h). Data- and
// tensor-parallel plans of any model run on braid-rank and need no such file.
//
//   braid-parallel-model --model mlp --write-model mlp.txt
//   braid-parallel-model --model transformer --batch 8 --write-model tf.txt
#include <cstdio>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "graph/text_format.h"
#include "client/parallel_spec_graph.h"

namespace {

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "braid-parallel-model: %s\n", std::string(s.message()).c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = "mlp", out;
  int64_t batch = 0;
  int ranks = 2;
  CLI::App app{"Write the forward graph of a model braid-parallel-rank trains (pipeline plans)"};
  app.add_option("--model", model, "mlp (4 Linears of width 1024) or transformer (2 pre-LN blocks, d 256)")
      ->check(CLI::IsMember({"mlp", "transformer"}));
  app.add_option("--batch", batch, "global batch (default: MLP 256, transformer 8)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--ranks", ranks, "ranks the plans will use (the graph does not depend on it)")
      ->check(CLI::Range(1, 64));
  app.add_option("--write-model", out, "the text graph's path")->required();
  CLI11_PARSE(app, argc, argv);
  braid::worker::ParallelTrainSpec s;
  s.ranks = ranks;
  s.data_degree = ranks;
  if (model == "mlp") {
    s.widths = {1024, 1024, 1024, 1024, 1024};
    s.batch = batch > 0 ? batch : 256;
    s.layers.assign(4, {braid::worker::LayerParallel::kData});
  } else {
    s.batch = batch > 0 ? batch : 8;
    s.transformer = braid::worker::TransformerShape{
        .d_model = 256, .heads = 4, .seq = 64, .d_ff = 1024, .blocks = 2};
  }
  absl::StatusOr<braid::graph::Graph> g = braid::client::ParallelTrainForwardGraph(s);
  if (!g.ok()) return Fail(g.status());
  std::FILE* f = std::fopen(out.c_str(), "w");
  if (f == nullptr) return Fail(absl::NotFoundError(absl::StrCat(out, ": cannot write")));
  const std::string text = braid::graph::ToText(*g);
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !ok) return Fail(absl::InternalError(absl::StrCat(out, ": write failed")));
  std::printf("wrote %s: %s, %d ops, global batch %lld\n", out.c_str(), g->name().c_str(),
              g->num_ops(), static_cast<long long>(s.batch));
  return 0;
}
