// The model zoo: benchmark models built natively at their published sizes, or
// at a small sample size with the same layers whose every op runs in a few ms
// on one CPU core (training samples for the kernel-time predictor).
//
//   absl::StatusOr<Graph> g = BuildZooModel("resnet50");
//   absl::StatusOr<Graph> s = BuildZooModel("resnet50", 0, ZooSize::kSample);
//   for (const ZooEntry& e : ZooModels()) ...
#ifndef BRAID_GRAPH_ZOO_H_
#define BRAID_GRAPH_ZOO_H_

#include <string>
#include <string_view>
#include <vector>

#include "graph/graph.h"

namespace braid::graph {

// kPublished: the paper's / torchvision's widths and lengths. kSample: the
// same layers, op for op, with widths, lengths, vocabularies and tables cut
// down (images 32-75, d_model 128-256, seq 20-144, <= 2000-row tables) so
// that no op is over ~50 MFLOP or ~2 MB at the sample batch.
enum class ZooSize { kPublished, kSample };

struct ZooEntry {
  std::string name;                // "resnet50"
  std::string description;         // one line, says what is approximated (published size)
  int default_batch;               // per-rank batch size (published size)
  int sample_batch = 0;            // default batch at ZooSize::kSample
  std::string sample_description;  // one line: the sample size's dims
};

const std::vector<ZooEntry>& ZooModels();

// batch <= 0 means the model's default at that size (default_batch or
// sample_batch). NotFound for an unknown name, listing the known ones.
// `width_pct` (kSample only) scales the sample's widths -- conv channels,
// d_model, hidden and feed-forward widths, classifier and MLP widths -- to
// that percentage, so the same layers come at several widths (the fused-op
// estimator's samples): 50, 100, 200 or 400 for vision models (channels are
// whole divisions of the published ones), any value giving whole widths
// that the head count divides for the others. InvalidArgument otherwise.
absl::StatusOr<Graph> BuildZooModel(std::string_view name, int batch = 0,
                                    ZooSize size = ZooSize::kPublished, int width_pct = 100);

}  // namespace braid::graph

#endif  // BRAID_GRAPH_ZOO_H_
