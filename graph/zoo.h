// The model zoo: benchmark models built natively at their published sizes.
//
//   absl::StatusOr<Graph> g = BuildZooModel("resnet50");
//   for (const ZooEntry& e : ZooModels()) ...
#ifndef BRAID_GRAPH_ZOO_H_
#define BRAID_GRAPH_ZOO_H_

#include <string>
#include <vector>

#include "graph/graph.h"

namespace braid::graph {

struct ZooEntry {
  std::string name;         // "resnet50"
  std::string description;  // one line, says what is approximated
  int default_batch;        // per-rank batch size
};

const std::vector<ZooEntry>& ZooModels();

// batch <= 0 means the model's default. NotFound for an unknown name, listing
// the known ones.
absl::StatusOr<Graph> BuildZooModel(std::string_view name, int batch = 0);

}  // namespace braid::graph

#endif  // BRAID_GRAPH_ZOO_H_
