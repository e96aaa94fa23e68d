// Per-device memory of a parallelized forward graph: what one device holds
// during a training iteration when every forward op runs under its
// ParallelConfig (search/parallel_config.h). Unity's search leaves memory out
// (papers/unity-joint-algebraic-parallelization.txt); braid does not: a plan
// whose per-device total exceeds DeviceSpec::memory_bytes of the cluster is
// refused (CheckFitsDevice).
//
// What is counted, per device, from the layouts ConfigLayouts gives:
//  - parameters: each kParameter tensor's piece under its consumer's config
//    (a weight replicated over the data degree counts in full, a column or
//    row shard 1/model-degree). A parameter read by several ops (tied
//    weights) counts its largest piece once.
//  - gradients: one per parameter, the same size as its piece (the gradient
//    has the weight's layout; AllReduce works in place).
//  - optimizer state: per parameter piece, 1x for SGD momentum (the momentum
//    buffer), 2x for Adam (first and second moments), in the parameter's
//    dtype (mixed-precision master copies are not modelled).
//  - activations: training keeps the forward values the backward pass reads,
//    which braid approximates by keeping all of them (no rematerialization):
//    every op's output piece under the producer's config and every graph
//    input's piece under its consumers' configs. When a consumer's input
//    layout differs from the producer's output layout (a transition such as an
//    AllGather makes a second copy), that copy counts too; layouts that differ
//    only in the replica degree are the same piece on a device and count once.
//  - constants (kConstant): their piece, held all iteration, no gradient.
//
// The sum over ops assumes one device holds a piece of every op, which is the
// case when every op is spread over the same devices (Unity's leaf configs on
// one machine view). For a pipeline stage pass the stage's ops in
// MemoryOptions::ops and its micro-batch schedule in micro_batches /
// in_flight_micro_batches.
//
//   std::map<graph::OpId, ParallelConfig> cfgs = {{mm1, col}, {gelu, col}, {mm2, row}};
//   absl::StatusOr<DeviceMemory> m =
//       PerDeviceMemory(g, cfgs, graph::Optimizer::kAdam, {});
//   absl::Status fits = CheckFitsDevice(*m, cluster);  // ResourceExhausted if not
#ifndef BRAID_SEARCH_PARALLEL_MEMORY_H_
#define BRAID_SEARCH_PARALLEL_MEMORY_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "costmodel/cluster.h"
#include "graph/graph.h"
#include "graph/training.h"
#include "search/parallel_config.h"

namespace braid::search {

// Bytes one device holds, by kind. total_bytes is the sum of the others.
struct DeviceMemory {
  int64_t parameter_bytes = 0;
  int64_t gradient_bytes = 0;
  int64_t optimizer_bytes = 0;
  int64_t activation_bytes = 0;
  int64_t constant_bytes = 0;
  int64_t total_bytes = 0;

  bool operator==(const DeviceMemory&) const = default;
};

// "params 8192 + grads 8192 + optimizer 16384 + activations 32768 +
// constants 0 = 65536 bytes".
std::string DeviceMemoryString(const DeviceMemory& m);

struct MemoryOptions {
  // Which forward ops live on the device (a pipeline stage); empty: all ops.
  // Only their outputs, parameters, constants and graph inputs count.
  std::vector<graph::OpId> ops;
  // Micro-batching hook. The configs describe the whole batch; a stage that
  // splits it into `micro_batches` keeps the activations of
  // `in_flight_micro_batches` of them at once (GPipe: all of them; 1F1B: at
  // most the number of stages), i.e. activations scale by in_flight /
  // micro_batches (rounded up). 1 <= in_flight_micro_batches <= micro_batches.
  int micro_batches = 1;
  int in_flight_micro_batches = 1;
};

// Memory of one device when the ops of `forward` run under `configs`. An op
// absent from `configs` runs unsplit (degree 1: every tensor in full on the
// device), a conservative bound. InvalidArgument for an op id out of range,
// a config that does not fit its op (the message names the op), a graph with
// op kinds ConfigLayouts cannot lay out under a given config, or bad
// micro-batch options.
absl::StatusOr<DeviceMemory> PerDeviceMemory(const graph::Graph& forward,
                                             const std::map<graph::OpId, ParallelConfig>& configs,
                                             graph::Optimizer optimizer,
                                             const MemoryOptions& options = {});

// OK when `memory.total_bytes` fits the device memory of `cluster`
// (DeviceSpec::memory_bytes; a capacity <= 0 means unknown and always fits).
// Otherwise ResourceExhausted naming the total, the capacity, the device kind
// and the largest component, e.g. "plan needs 65536 bytes per device but
// device 'cuda:X' has 40000 bytes; largest: activations 32768 bytes (params
// 8192 + ...)".
absl::Status CheckFitsDevice(const DeviceMemory& memory, const costmodel::ClusterSpec& cluster);

}  // namespace braid::search

#endif  // BRAID_SEARCH_PARALLEL_MEMORY_H_
