// JSON view of a graph for tools and the status API: every op with its id,
// type, phase, inputs and outputs (names and shapes), FLOPs and bytes.
//
//   nlohmann::json j = GraphToJson(g);
#ifndef BRAID_GRAPH_GRAPH_JSON_H_
#define BRAID_GRAPH_GRAPH_JSON_H_

#include "graph/graph.h"
#include "nlohmann/json.hpp"

namespace braid::graph {

nlohmann::json GraphToJson(const Graph& g);

// Summary statistics, as `braid graph stats` prints them.
struct GraphStats {
  int ops = 0;
  std::map<std::string, int> op_types;
  int64_t parameters = 0;
  int gradients = 0;           // one per parameter tensor
  int64_t gradient_bytes = 0;  // bytes of all gradients (= parameter bytes)
  double forward_flops = 0;    // one forward pass at the graph's batch
};
GraphStats ComputeStats(const Graph& g);
nlohmann::json StatsToJson(const GraphStats& s);

}  // namespace braid::graph

#endif  // BRAID_GRAPH_GRAPH_JSON_H_
