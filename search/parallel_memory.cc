#include "search/parallel_memory.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "graph/parallel_shape.h"

namespace braid::search {
namespace {

using graph::Graph;
using graph::OpId;
using graph::ParallelTensorShape;
using graph::TensorId;
using graph::TensorRole;

// Every layout one op gives its tensors: inputs in order, then outputs.
struct OpTensorLayouts {
  std::vector<ParallelTensorShape> inputs;
  std::vector<ParallelTensorShape> outputs;
};

absl::StatusOr<OpTensorLayouts> LayoutsOf(const Graph& g, OpId op,
                                          const std::map<OpId, ParallelConfig>& configs) {
  const graph::Op& o = g.op(op);
  OpTensorLayouts l;
  auto it = configs.find(op);
  if (it == configs.end()) {
    // Unsplit: every tensor whole on the device.
    for (TensorId t : o.inputs) {
      l.inputs.push_back(graph::UnpartitionedShape(g.tensor(t).shape, g.tensor(t).dtype));
    }
    for (TensorId t : o.outputs) {
      l.outputs.push_back(graph::UnpartitionedShape(g.tensor(t).shape, g.tensor(t).dtype));
    }
    return l;
  }
  absl::StatusOr<OpLayouts> cl = ConfigLayouts(g, op, it->second);
  if (!cl.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("op '", o.name, "' under config ",
                                              ParallelConfigString(it->second), ": ",
                                              cl.status().message()));
  }
  l.inputs = std::move(cl->inputs);
  l.outputs = std::move(cl->outputs);
  if (l.inputs.size() != o.inputs.size()) {
    return absl::InternalError(absl::StrCat("ConfigLayouts gave ", l.inputs.size(),
                                            " input layouts for op '", o.name, "' with ",
                                            o.inputs.size(), " inputs"));
  }
  return l;
}

// The same piece on a device: dims and dtype equal (the replica degree only
// says how many devices hold it).
bool SamePiece(const ParallelTensorShape& a, const ParallelTensorShape& b) {
  return a.dims == b.dims && a.dtype == b.dtype;
}

absl::StatusOr<int64_t> AddChecked(int64_t a, int64_t b) {
  if (b > std::numeric_limits<int64_t>::max() - a) {
    return absl::InvalidArgumentError("per-device memory overflows int64");
  }
  return a + b;
}

int OptimizerStatesPerParameter(graph::Optimizer opt) {
  switch (opt) {
    case graph::Optimizer::kSgdMomentum:
      return 1;
    case graph::Optimizer::kAdam:
      return 2;
  }
  return 0;
}

}  // namespace

std::string DeviceMemoryString(const DeviceMemory& m) {
  return absl::StrCat("params ", m.parameter_bytes, " + grads ", m.gradient_bytes,
                      " + optimizer ", m.optimizer_bytes, " + activations ", m.activation_bytes,
                      " + constants ", m.constant_bytes, " = ", m.total_bytes, " bytes");
}

absl::StatusOr<DeviceMemory> PerDeviceMemory(const Graph& forward,
                                             const std::map<OpId, ParallelConfig>& configs,
                                             graph::Optimizer optimizer,
                                             const MemoryOptions& options) {
  if (options.micro_batches < 1 || options.in_flight_micro_batches < 1 ||
      options.in_flight_micro_batches > options.micro_batches) {
    return absl::InvalidArgumentError(
        absl::StrCat("need 1 <= in_flight_micro_batches (", options.in_flight_micro_batches,
                     ") <= micro_batches (", options.micro_batches, ")"));
  }
  for (const auto& [op, c] : configs) {
    if (op < 0 || op >= forward.num_ops()) {
      return absl::InvalidArgumentError(absl::StrCat("config for op id ", op, " but graph '",
                                                forward.name(), "' has ", forward.num_ops(),
                                                " ops"));
    }
  }
  std::vector<OpId> ops = options.ops;
  if (ops.empty()) {
    for (OpId o = 0; o < forward.num_ops(); ++o) ops.push_back(o);
  }
  std::sort(ops.begin(), ops.end());
  ops.erase(std::unique(ops.begin(), ops.end()), ops.end());

  // Every piece of each tensor some op on the device reads or writes.
  std::map<TensorId, std::vector<ParallelTensorShape>> pieces;
  for (OpId op : ops) {
    if (op < 0 || op >= forward.num_ops()) {
      return absl::InvalidArgumentError(absl::StrCat("MemoryOptions::ops names op id ", op,
                                                " but graph '", forward.name(), "' has ",
                                                forward.num_ops(), " ops"));
    }
    absl::StatusOr<OpTensorLayouts> l = LayoutsOf(forward, op, configs);
    if (!l.ok()) return l.status();
    const graph::Op& o = forward.op(op);
    for (size_t i = 0; i < o.inputs.size(); ++i) pieces[o.inputs[i]].push_back(l->inputs[i]);
    for (size_t i = 0; i < o.outputs.size(); ++i) pieces[o.outputs[i]].push_back(l->outputs[i]);
  }

  DeviceMemory m;
  int64_t activations = 0;
  for (const auto& [t, shapes] : pieces) {
    const graph::Tensor& tensor = forward.tensor(t);
    if (tensor.role == TensorRole::kParameter || tensor.role == TensorRole::kConstant) {
      // One piece held all iteration: the largest any reader needs.
      int64_t biggest = 0;
      for (const ParallelTensorShape& s : shapes) {
        absl::StatusOr<int64_t> b = graph::PieceBytes(s);
        if (!b.ok()) return b.status();
        biggest = std::max(biggest, *b);
      }
      int64_t& field =
          tensor.role == TensorRole::kParameter ? m.parameter_bytes : m.constant_bytes;
      absl::StatusOr<int64_t> sum = AddChecked(field, biggest);
      if (!sum.ok()) return sum.status();
      field = *sum;
      continue;
    }
    // Activations and graph inputs: every distinct piece is a buffer kept for
    // the backward pass.
    std::vector<const ParallelTensorShape*> distinct;
    for (const ParallelTensorShape& s : shapes) {
      bool seen = false;
      for (const ParallelTensorShape* d : distinct) seen = seen || SamePiece(*d, s);
      if (seen) continue;
      distinct.push_back(&s);
      absl::StatusOr<int64_t> b = graph::PieceBytes(s);
      if (!b.ok()) return b.status();
      absl::StatusOr<int64_t> sum = AddChecked(activations, *b);
      if (!sum.ok()) return sum.status();
      activations = *sum;
    }
  }

  m.gradient_bytes = m.parameter_bytes;
  const int states = OptimizerStatesPerParameter(optimizer);
  if (m.parameter_bytes > std::numeric_limits<int64_t>::max() / std::max(states, 1)) {
    return absl::InvalidArgumentError("per-device optimizer state overflows int64");
  }
  m.optimizer_bytes = states * m.parameter_bytes;
  // ceil(activations * in_flight / micro_batches) without overflow.
  const __int128 scaled =
      (static_cast<__int128>(activations) * options.in_flight_micro_batches +
       options.micro_batches - 1) /
      options.micro_batches;
  m.activation_bytes = static_cast<int64_t>(scaled);  // <= activations

  int64_t total = 0;
  for (int64_t part : {m.parameter_bytes, m.gradient_bytes, m.optimizer_bytes,
                       m.activation_bytes, m.constant_bytes}) {
    absl::StatusOr<int64_t> sum = AddChecked(total, part);
    if (!sum.ok()) return sum.status();
    total = *sum;
  }
  m.total_bytes = total;
  return m;
}

absl::Status CheckFitsDevice(const DeviceMemory& memory, const costmodel::ClusterSpec& cluster) {
  const int64_t capacity = cluster.device.memory_bytes;
  if (capacity <= 0 || memory.total_bytes <= capacity) return absl::OkStatus();
  const std::pair<const char*, int64_t> parts[] = {
      {"parameters", memory.parameter_bytes},   {"gradients", memory.gradient_bytes},
      {"optimizer state", memory.optimizer_bytes}, {"activations", memory.activation_bytes},
      {"constants", memory.constant_bytes},
  };
  const auto* largest = &parts[0];
  for (const auto& p : parts) {
    if (p.second > largest->second) largest = &p;
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      "plan needs ", memory.total_bytes, " bytes per device but device '", cluster.device.kind,
      "' of cluster '", cluster.name, "' has ", capacity, " bytes; largest: ", largest->first,
      " ", largest->second, " bytes (", DeviceMemoryString(memory), ")"));
}

}  // namespace braid::search
