// Stable graph fingerprints: equal for graphs that differ only in tensor and op
// names or in the order their nodes were listed; different when any op type,
// attribute, shape, dtype, role or edge differs. The plan cache keys on it.
//
//   uint64_t fp = Fingerprint(g);
//   std::string hex = FingerprintHex(g);  // "9f3c...", 16 hex digits
#ifndef BRAID_GRAPH_FINGERPRINT_H_
#define BRAID_GRAPH_FINGERPRINT_H_

#include <cstdint>
#include <string>

#include "graph/graph.h"

namespace braid::graph {

// Fails only for cyclic graphs (no topological order).
absl::StatusOr<uint64_t> Fingerprint(const Graph& g);
absl::StatusOr<std::string> FingerprintHex(const Graph& g);

}  // namespace braid::graph

#endif  // BRAID_GRAPH_FINGERPRINT_H_
