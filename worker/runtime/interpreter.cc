#include "worker/runtime/interpreter.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace braid::runtime {
namespace {

using graph::OpId;
using graph::OpKind;
using graph::TensorId;

bool IsUpdate(const graph::Op& op) {
  return graph::CategoryOf(op.kind) == graph::OpCategory::kUpdate;
}

// The input an update op's output k replaces: output 0 the parameter
// (input 0), output k >= 1 state input k + 1.
int ReplacedInput(int k) { return k == 0 ? 0 : k + 1; }

int64_t Numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// Calls f(full offset, piece offset) for every element of the piece of
// shape `piece` starting at `start` in a row-major tensor of shape `full`.
template <typename F>
void ForEachPieceElement(const std::vector<int64_t>& full, const std::vector<int64_t>& piece,
                         const std::vector<int64_t>& start, F f) {
  const size_t r = full.size();
  std::vector<int64_t> stride(r, 1);
  for (int d = static_cast<int>(r) - 2; d >= 0; --d) stride[d] = stride[d + 1] * full[d + 1];
  std::vector<int64_t> idx(r, 0);
  const int64_t n = Numel(piece);
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = 0;
    for (size_t d = 0; d < r; ++d) off += (start[d] + idx[d]) * stride[d];
    f(off, i);
    for (int d = static_cast<int>(r) - 1; d >= 0; --d) {
      if (++idx[d] < piece[d]) break;
      idx[d] = 0;
    }
  }
}

// One member's share of a bucket's AllReduce: the first Wait of any member
// waits for the bucket and cuts its buffer into every member's gradient.
class BucketShare final : public Pending {
 public:
  struct Shared {
    std::unique_ptr<Pending> flat;
    Backend* backend = nullptr;
    std::vector<std::vector<int64_t>> shapes;
    std::optional<absl::StatusOr<std::vector<Value>>> parts;
  };
  BucketShare(std::shared_ptr<Shared> s, size_t k) : s_(std::move(s)), k_(k) {}
  absl::StatusOr<Value> Wait() override {
    if (!s_->parts) {
      absl::StatusOr<Value> flat = s_->flat->Wait();
      if (!flat.ok()) {
        s_->parts = flat.status();
      } else {
        s_->parts = s_->backend->Unflatten(*flat, s_->shapes);
      }
    }
    if (!s_->parts->ok()) return s_->parts->status();
    return (**s_->parts)[k_];
  }

 private:
  std::shared_ptr<Shared> s_;
  size_t k_;
};

}  // namespace

absl::StatusOr<std::map<TensorId, Value>> Backend::RunGroup(
    const graph::Graph& g, const std::vector<OpId>& members, const std::map<TensorId, Value>& inputs,
    const RankContext& ctx, bool* fused) {
  *fused = false;
  std::map<TensorId, Value> held = inputs;
  std::map<TensorId, Value> out;
  for (OpId m : members) {
    const graph::Op& op = g.op(m);
    std::vector<Value> ins;
    for (TensorId t : op.inputs) {
      auto it = held.find(t);
      if (it == held.end()) return absl::InternalError(absl::StrCat("op ", op.name, ": input missing"));
      ins.push_back(it->second);
    }
    absl::StatusOr<std::vector<Value>> r = Run(g, op, ins, ctx);
    if (!r.ok()) {
      return absl::Status(r.status().code(),
                          absl::StrCat("op ", op.name, " (", op.type, "): ", r.status().message()));
    }
    if (r->size() != op.outputs.size()) return absl::InternalError(absl::StrCat("op ", op.name, ": outputs"));
    for (size_t k = 0; k < r->size(); ++k) {
      held[op.outputs[k]] = (*r)[k];
      out[op.outputs[k]] = (*r)[k];
    }
  }
  return out;
}

HostTensor NarrowHost(const HostTensor& full, const std::vector<int>& mesh,
                      const std::vector<int>& coord, const std::vector<std::vector<int>>& dim_axes,
                      const std::vector<int64_t>& segments) {
  const graph::PieceBox box = graph::PieceBoxOf(full.shape, mesh, coord, dim_axes, segments);
  HostTensor out;
  out.shape = full.shape;
  for (size_t d = 0; d < out.shape.size() && d < dim_axes.size(); ++d)
    out.shape[d] /= graph::PieceCount(mesh, dim_axes[d]);
  out.data.resize(Numel(out.shape));
  ForEachPieceElement(box.full, box.piece, box.start,
                      [&](int64_t off, int64_t i) { out.data[i] = full.data[off]; });
  return out;
}

Interpreter::Interpreter(const graph::Program& program, int rank, Backend& backend,
                         Communicator& comm)
    : p_(program), rank_(rank), backend_(backend), comm_(comm) {
  ctx_.rank = rank;
  ctx_.coord = graph::MeshCoordinate(program.mesh, rank);
  ctx_.program = &program;
}

absl::Status Interpreter::Init() {
  const graph::Graph& g = p_.graph;
  if (rank_ < 0 || rank_ >= p_.World()) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank_, " is outside the program's world of ", p_.World()));
  }
  ASSIGN_OR_RETURN(nodes_, graph::ScheduleNodes(p_));
  order_.clear();
  for (const std::vector<OpId>& node : nodes_) order_.insert(order_.end(), node.begin(), node.end());
  readers_.assign(g.num_tensors(), 0);
  for (const graph::Op& op : g.ops())
    for (TensorId t : op.inputs) ++readers_[t];
  if (!g.outputs().empty()) loss_ = g.outputs()[0];
  if (loss_ == graph::kNoId || !g.tensor(loss_).shape.empty()) {
    return absl::InvalidArgumentError("the program's first output is not a scalar loss");
  }
  for (OpId id : order_) {
    const graph::Op& op = g.op(id);
    if (graph::CategoryOf(op.kind) != graph::OpCategory::kCollective) continue;
    const std::vector<int64_t> a64 = op.GetInts("mesh_axes");
    groups_[id] = graph::GroupRanks(p_.mesh, rank_, std::vector<int>(a64.begin(), a64.end()));
  }
  // Buckets (validated with the program: graph::ValidateBuckets).
  std::map<std::string, OpId, std::less<>> by_name;
  for (OpId id = 0; id < g.num_ops(); ++id) by_name[g.op(id).name] = id;
  std::vector<int> pos(g.num_ops());
  for (size_t i = 0; i < order_.size(); ++i) pos[order_[i]] = static_cast<int>(i);
  buckets_.clear();
  bucket_start_.clear();
  bucket_of_.clear();
  for (const std::vector<std::string>& names : p_.buckets) {
    std::vector<OpId> ids;
    OpId start = graph::kNoId;
    for (const std::string& n : names) {
      auto it = by_name.find(n);
      if (it == by_name.end() || g.op(it->second).kind != OpKind::kAllReduce) {
        return absl::InvalidArgumentError(absl::StrCat("bucket member ", n, " is not an AllReduce"));
      }
      ids.push_back(it->second);
      bucket_of_[it->second] = static_cast<int>(buckets_.size());
      if (start == graph::kNoId || pos[it->second] > pos[start]) start = it->second;
    }
    buckets_.push_back(std::move(ids));
    bucket_start_.push_back(start);
  }
  for (TensorId t = 0; t < g.num_tensors(); ++t) {
    const graph::Tensor& x = g.tensor(t);
    if (x.producer != graph::kNoId) continue;
    const graph::LoadSpec& spec = p_.loads.at(x.name);
    if (spec.per_step) continue;
    ASSIGN_OR_RETURN(Value v, backend_.Load(x, spec, ctx_));
    persistent_[t] = std::move(v);
  }
  return absl::OkStatus();
}

absl::StatusOr<StepResult> Interpreter::Step(int step, StepOptions options) {
  const graph::Graph& g = p_.graph;
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  std::vector<double> clocks;
  if (options.clock_ops) clocks.assign(g.num_ops(), 0.0);
  std::map<TensorId, OpId> started_by;  // pending collective output -> its op
  auto since = [](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  ctx_.step = step;
  std::vector<Value> values(g.num_tensors());
  std::map<TensorId, std::unique_ptr<Pending>> pending;
  std::vector<int> left = readers_;
  int64_t live = 0, peak = 0;
  auto add = [&](TensorId t, Value v) {
    live += v ? v->bytes() : 0;
    peak = std::max(peak, live);
    values[t] = std::move(v);
  };
  for (const auto& [t, v] : persistent_) add(t, v);
  for (TensorId t = 0; t < g.num_tensors(); ++t) {
    const graph::Tensor& x = g.tensor(t);
    if (x.producer != graph::kNoId || persistent_.contains(t)) continue;
    ASSIGN_OR_RETURN(Value v, backend_.Load(x, p_.loads.at(x.name), ctx_));
    add(t, std::move(v));
  }
  std::map<TensorId, Value> next_persistent;
  StepResult result;
  // Per bucket: its members' inputs as they are reached.
  std::vector<std::vector<Value>> bucket_inputs(buckets_.size());
  for (size_t b = 0; b < buckets_.size(); ++b) bucket_inputs[b].resize(buckets_[b].size());
  // The value of tensor t for a reader: waits for a collective in flight.
  auto ready = [&](TensorId t, const std::string& reader) -> absl::StatusOr<Value> {
    if (auto it = pending.find(t); it != pending.end()) {
      const auto w0 = Clock::now();
      absl::StatusOr<Value> v = it->second->Wait();
      if (options.clock_ops) clocks[started_by.at(t)] += since(w0);
      if (!v.ok()) {
        return absl::Status(v.status().code(), absl::StrCat("collective producing ", g.tensor(t).name,
                                                             ": ", v.status().message()));
      }
      pending.erase(it);
      add(t, *std::move(v));
    }
    if (!values[t]) {
      return absl::InternalError(absl::StrCat(reader, " reads ", g.tensor(t).name,
                                              ", which holds no value"));
    }
    return values[t];
  };
  auto release = [&](const graph::Op& op) {
    // Free what no later op reads (persistent tensors stay held by persistent_).
    for (TensorId t : op.inputs) {
      if (--left[t] == 0 && t != loss_) {
        if (values[t]) live -= values[t]->bytes();
        values[t].reset();
      }
    }
  };
  for (const std::vector<OpId>& node : nodes_) {
    if (node.size() > 1) {
      // A fusion group: its inputs from outside, one backend call, the
      // tensors read outside it.
      std::set<TensorId> made;
      for (OpId m : node)
        for (TensorId t : g.op(m).outputs) made.insert(t);
      std::map<TensorId, Value> inputs;
      for (OpId m : node) {
        for (TensorId t : g.op(m).inputs) {
          if (made.contains(t) || inputs.contains(t)) continue;
          ASSIGN_OR_RETURN(inputs[t], ready(t, absl::StrCat("group of op ", g.op(m).name)));
        }
      }
      const auto o0 = Clock::now();
      bool fused = false;
      absl::StatusOr<std::map<TensorId, Value>> outs = backend_.RunGroup(g, node, inputs, ctx_, &fused);
      if (options.clock_ops) clocks[node.back()] += since(o0);
      if (!outs.ok()) {
        return absl::Status(outs.status().code(), absl::StrCat("group of op ", g.op(node[0]).name,
                                                               ": ", outs.status().message()));
      }
      ++(fused ? result.groups_fused : result.groups_unfused);
      inputs.clear();
      for (TensorId t : made) {
        const bool read_outside = t == loss_ || std::any_of(
            g.tensor(t).consumers.begin(), g.tensor(t).consumers.end(),
            [&](OpId c) { return std::find(node.begin(), node.end(), c) == node.end(); });
        auto it = outs->find(t);
        if (it != outs->end()) {
          if (options.observe) options.observe(t, it->second);
          add(t, it->second);
        } else if (read_outside) {
          return absl::InternalError(absl::StrCat("group of op ", g.op(node[0]).name,
                                                  " did not make ", g.tensor(t).name));
        }
      }
      for (OpId m : node) release(g.op(m));
      continue;
    }
    const OpId id = node[0];
    const graph::Op& op = g.op(id);
    std::vector<Value> ins;
    ins.reserve(op.inputs.size());
    for (TensorId t : op.inputs) {
      ASSIGN_OR_RETURN(Value v, ready(t, absl::StrCat("op ", op.name)));
      ins.push_back(std::move(v));
    }
    const auto o0 = Clock::now();
    if (auto b = bucket_of_.find(id); b != bucket_of_.end()) {
      // A bucket member: held until the bucket's last member, which starts
      // one AllReduce of all of them.
      const std::vector<OpId>& members = buckets_[b->second];
      std::vector<Value>& held = bucket_inputs[b->second];
      held[std::find(members.begin(), members.end(), id) - members.begin()] = ins[0];
      if (id == bucket_start_[b->second]) {
        auto shared = std::make_shared<BucketShare::Shared>();
        shared->backend = &backend_;
        for (OpId m : members) shared->shapes.push_back(g.tensor(g.op(m).inputs[0]).shape);
        ASSIGN_OR_RETURN(Value flat, backend_.Flatten(held));
        held.clear();
        ASSIGN_OR_RETURN(shared->flat, comm_.Start(op, groups_.at(id), flat));
        ++result.collectives;
        for (size_t k = 0; k < members.size(); ++k) {
          const TensorId out = g.op(members[k]).outputs[0];
          pending[out] = std::make_unique<BucketShare>(shared, k);
          started_by[out] = id;
        }
      }
      if (options.clock_ops) clocks[id] += since(o0);
    } else if (graph::CategoryOf(op.kind) == graph::OpCategory::kCollective) {
      ASSIGN_OR_RETURN(std::unique_ptr<Pending> w, comm_.Start(op, groups_.at(id), ins[0]));
      pending[op.outputs[0]] = std::move(w);
      started_by[op.outputs[0]] = id;
      ++result.collectives;
      if (options.clock_ops) clocks[id] += since(o0);
    } else {
      absl::StatusOr<std::vector<Value>> outs = backend_.Run(g, op, ins, ctx_);
      if (options.clock_ops) clocks[id] += since(o0);
      if (!outs.ok()) {
        return absl::Status(outs.status().code(), absl::StrCat("op ", op.name, " (", op.type, "): ",
                                                               outs.status().message()));
      }
      if (outs->size() != op.outputs.size()) {
        return absl::InternalError(absl::StrCat("op ", op.name, " made ", outs->size(),
                                                " outputs, the graph has ", op.outputs.size()));
      }
      for (size_t k = 0; k < outs->size(); ++k) {
        if (options.observe) options.observe(op.outputs[k], (*outs)[k]);
        add(op.outputs[k], (*outs)[k]);
      }
      if (IsUpdate(op)) {
        for (size_t k = 0; k < op.outputs.size(); ++k) {
          const int in = ReplacedInput(static_cast<int>(k));
          if (in < static_cast<int>(op.inputs.size())) next_persistent[op.inputs[in]] = (*outs)[k];
        }
      }
    }
    ins.clear();
    release(op);
  }
  for (auto& [t, w] : pending) {
    const auto w0 = Clock::now();
    ASSIGN_OR_RETURN(Value v, w->Wait());
    if (options.clock_ops) clocks[started_by.at(t)] += since(w0);
    add(t, std::move(v));
  }
  if (!values[loss_]) return absl::InternalError("the step made no loss");
  ASSIGN_OR_RETURN(HostTensor l, backend_.ToHost(values[loss_]));
  if (l.data.size() != 1) return absl::InternalError("the loss is not a scalar");
  result.loss = l.data[0];
  for (auto& [t, v] : next_persistent) persistent_[t] = std::move(v);
  result.peak_bytes = peak;
  result.op_seconds = std::move(clocks);
  result.seconds = since(t0);
  return result;
}

absl::StatusOr<std::map<std::string, HostTensor>> Interpreter::GatherParameters() {
  const graph::Graph& g = p_.graph;
  std::map<std::string, HostTensor> out;
  for (const auto& [t, v] : persistent_) {
    const graph::Tensor& x = g.tensor(t);
    if (x.role != graph::TensorRole::kParameter && x.role != graph::TensorRole::kOptimizerState)
      continue;
    const graph::LoadSpec& spec = p_.loads.at(x.name);
    ASSIGN_OR_RETURN(HostTensor mine, backend_.ToHost(v));
    ASSIGN_OR_RETURN(std::vector<HostTensor> all, comm_.AllGatherHost(mine));
    HostTensor full;
    full.shape = spec.full_shape;
    full.data.assign(Numel(full.shape), 0.f);
    for (int rank = 0; rank < static_cast<int>(all.size()); ++rank) {
      const graph::PieceBox box = graph::PieceBoxOf(
          spec.full_shape, p_.mesh, graph::MeshCoordinate(p_.mesh, rank), spec.dim_axes, spec.segments);
      const HostTensor& piece = all[rank];
      ForEachPieceElement(box.full, box.piece, box.start,
                          [&](int64_t off, int64_t i) { full.data[off] = piece.data[i]; });
    }
    out[spec.source] = std::move(full);
  }
  return out;
}

absl::Status Interpreter::LoadParameters(const std::map<std::string, HostTensor>& full) {
  const graph::Graph& g = p_.graph;
  for (auto& [t, v] : persistent_) {
    const graph::Tensor& x = g.tensor(t);
    const graph::LoadSpec& spec = p_.loads.at(x.name);
    auto it = full.find(spec.source);
    if (it == full.end()) continue;
    if (it->second.shape != spec.full_shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint tensor ", spec.source, " has shape ", graph::ShapeString(it->second.shape),
          ", the program's is ", graph::ShapeString(spec.full_shape)));
    }
    HostTensor piece = NarrowHost(it->second, p_.mesh, ctx_.coord, spec.dim_axes, spec.segments);
    ASSIGN_OR_RETURN(v, backend_.FromHost(piece, x.dtype));
  }
  return absl::OkStatus();
}

}  // namespace braid::runtime
