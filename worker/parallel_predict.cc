#include "worker/parallel_predict.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/stats.h"
#include "base/status_macros.h"
#include "costmodel/comm_model.h"
#include "costmodel/op_cost.h"
#include "graph/builder.h"
#include "graph/parallel_shape.h"
#include "search/parallel_config.h"
#include "search/pipeline_schedule.h"
#include "worker/op_clock.h"
#include "worker/parallel_pipeline.h"

namespace braid::worker {
namespace {

using graph::Graph;
using graph::GraphBuilder;
using graph::OpId;
using graph::OpKind;
using graph::ParallelTensorShape;
using graph::TensorId;
using graph::TensorRole;
using search::ParallelConfig;

absl::Status Bad(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("parallel predict: ", what));
}

bool IsSource(const Graph& g, TensorId t) {
  const TensorRole r = g.tensor(t).role;
  return r == TensorRole::kParameter || r == TensorRole::kConstant;
}

// x @ W[in, out] + b, the MatMul's id through `mm`.
TensorId Dense(GraphBuilder& b, TensorId x, int64_t out, const std::string& name, TensorId* mm) {
  const int64_t in = b.Shape(x).back();
  *mm = b.MatMul(x, b.Param(absl::StrCat(name, ".weight"), {in, out}));
  return b.Add(*mm, b.Param(absl::StrCat(name, ".bias"), {out}));
}

// The ops' clock names, recorded by the tensor each op produces while the
// graph is built (the builder's tensor ids are the graph's).
using ClockNames = std::vector<std::pair<TensorId, std::string>>;

// What one pipeline stage (the whole model without a pipeline) runs per
// micro-batch: `spec` holds the stage's layers at the micro-batch's rows
// (times the data degree), no pipeline.
struct Stage {
  ParallelTrainSpec spec;
  // The ranks compute the gradient of the stage's input: always in the
  // transformer (its backward returns block 0's too), in the MLP when a
  // stage before it needs it.
  bool input_grad = false;
  bool relu_last = false;  // the MLP stage's last layer is followed by a ReLU
  bool loss = true;        // the last stage computes the MSE
};

absl::StatusOr<std::vector<Stage>> Stages(const ParallelTrainSpec& spec) {
  RETURN_IF_ERROR(ValidateParallelTrainSpec(spec));
  const bool tf = spec.transformer.has_value();
  const int p = spec.pipeline_stages;
  if (p <= 1) return std::vector<Stage>{{spec, tf, false, true}};
  const int layers = tf ? spec.transformer->blocks : static_cast<int>(spec.layers.size());
  ASSIGN_OR_RETURN(std::vector<int> bounds, internal::StageBounds(spec, layers));
  std::vector<Stage> out;
  for (int st = 0; st < p; ++st) {
    Stage s{spec, tf || st > 0,
            !tf && bounds[st + 1] < layers && !internal::StageStartsWithRelu(spec, st + 1),
            st == p - 1};
    ParallelTrainSpec& x = s.spec;
    x.pipeline_stages = 1;
    x.stage_begin.clear();
    // The stage's own model starts with the ReLU it runs first, if any.
    x.stage_relu_first.clear();
    if (internal::StageStartsWithRelu(spec, st)) x.stage_relu_first = {true};
    x.loss_rows_split = spec.loss_rows_split && st == p - 1;
    x.micro_batches = 1;
    x.ranks = spec.data_degree * spec.model_degree;
    x.batch = spec.batch / spec.micro_batches;
    if (tf) {
      x.transformer->blocks = bounds[st + 1] - bounds[st];
    } else {
      x.widths.assign(spec.widths.begin() + bounds[st], spec.widths.begin() + bounds[st + 1] + 1);
      x.layers.assign(spec.layers.begin() + bounds[st], spec.layers.begin() + bounds[st + 1]);
    }
    out.push_back(std::move(s));
  }
  return out;
}

absl::StatusOr<Stage> OnlyStage(const ParallelTrainSpec& spec) {
  if (spec.pipeline_stages > 1) {
    return absl::UnimplementedError(
        "parallel predict: a pipeline has one forward graph per stage, not one");
  }
  ASSIGN_OR_RETURN(std::vector<Stage> st, Stages(spec));
  return st[0];
}

// The graph and the parallel kind of each Linear's MatMul (by output tensor),
// and the row MatMuls whose partial output is reduce-scattered on features
// into the next row layer (parallel_train.h).
struct ModelGraph {
  Graph g;
  std::map<TensorId, LayerParallel::Kind> linear_kind;
  std::set<TensorId> scattered;
  // The last row MatMul whose output is reduce-scattered by rows into the
  // loss (loss_rows_split).
  std::set<TensorId> rows_split;
  bool input_grad = false;
  // Per op, the name braid-parallel-rank clocks it under (worker/op_clock.h).
  std::map<OpId, std::string> clock;
};

absl::StatusOr<ModelGraph> BuildModel(const Stage& stage) {
  const ParallelTrainSpec& spec = stage.spec;
  RETURN_IF_ERROR(ValidateParallelTrainSpec(spec));
  ModelGraph m;
  m.input_grad = stage.input_grad;
  std::map<TensorId, LayerParallel::Kind> kinds;
  ClockNames names;
  if (!spec.transformer.has_value()) {
    GraphBuilder b("parallel_mlp");
    TensorId x = b.Input("x", {spec.batch, spec.widths.front()});
    if (internal::StageStartsWithRelu(spec, 0)) {  // a stage's leading ReLU
      x = b.Relu(x);
      names.push_back({x, kReluFirstClock});
    }
    for (size_t i = 0; i < spec.layers.size(); ++i) {
      TensorId mm = graph::kNoId;
      x = Dense(b, x, spec.widths[i + 1], absl::StrCat("l", i), &mm);
      const int l = static_cast<int>(i);
      names.push_back({mm, MlpClockName(l, "matmul")});
      names.push_back({x, MlpClockName(l, "bias")});
      kinds[mm] = spec.layers[i].kind;
      if (spec.layers[i].kind == LayerParallel::kRow && i + 1 < spec.layers.size() &&
          spec.layers[i + 1].kind == LayerParallel::kRow) {
        m.scattered.insert(mm);
      }
      if (spec.loss_rows_split && i + 1 == spec.layers.size()) m.rows_split.insert(mm);
      if (i + 1 < spec.layers.size() || stage.relu_last) {
        x = b.Relu(x);
        names.push_back({x, MlpClockName(l, "relu")});
      }
    }
    b.MarkOutput(x);
    ASSIGN_OR_RETURN(m.g, std::move(b).Build());
  } else {
    const TransformerShape& t = *spec.transformer;
    const int64_t B = spec.batch, S = t.seq, d = t.d_model, H = t.heads, dh = d / H;
    // The ranks' Megatron plan on the model group (all data when it is 1).
    const bool mp = spec.model_degree > 1;
    const LayerParallel::Kind col = mp ? LayerParallel::kColumn : LayerParallel::kData;
    const LayerParallel::Kind row = mp ? LayerParallel::kRow : LayerParallel::kData;
    GraphBuilder b("parallel_transformer");
    TensorId x = b.Input("x", {B, S, d});
    for (int blk = 0; blk < t.blocks; ++blk) {
      auto scope = b.NameScope(absl::StrCat("block", blk));
      // Names each op by the tensor it produces (ForwardBlock's clock laps).
      auto named = [&](TensorId id, const char* role) {
        names.push_back({id, BlockClockName(blk, role)});
        return id;
      };
      TensorId mq, mk, mv, mo, m1, m2;
      TensorId a1 = named(b.LayerNorm(x), "ln1");
      TensorId q = named(Dense(b, a1, d, "q", &mq), "q.bias");
      TensorId k = named(Dense(b, a1, d, "k", &mk), "k.bias");
      TensorId v = named(Dense(b, a1, d, "v", &mv), "v.bias");
      named(mq, "q");
      named(mk, "k");
      named(mv, "v");
      q = named(b.Transpose(named(b.Reshape(q, {B, S, H, dh}), "q.reshape"), {0, 2, 1, 3}),
                "q.transpose");
      k = named(b.Transpose(named(b.Reshape(k, {B, S, H, dh}), "k.reshape"), {0, 2, 3, 1}),
                "k.transpose");
      v = named(b.Transpose(named(b.Reshape(v, {B, S, H, dh}), "v.reshape"), {0, 2, 1, 3}),
                "v.transpose");
      TensorId p = named(b.Softmax(named(b.Scale(named(b.MatMul(q, k), "qk"), 1.0 / std::sqrt(static_cast<double>(dh))), "scale"), -1),
                         "softmax");
      TensorId c = named(
          b.Reshape(named(b.Transpose(named(b.MatMul(p, v), "pv"), {0, 2, 1, 3}), "merge.transpose"),
                    {B, S, d}),
          "merge.reshape");
      TensorId h = named(b.Add(x, named(Dense(b, c, d, "o", &mo), "o.bias")), "res1");
      named(mo, "o");
      TensorId a2 = named(b.LayerNorm(h), "ln2");
      TensorId u = named(b.Relu(named(Dense(b, a2, t.d_ff, "w1", &m1), "w1.bias")), "relu");
      named(m1, "w1");
      x = named(b.Add(h, named(Dense(b, u, d, "w2", &m2), "w2.bias")), "res2");
      named(m2, "w2");
      kinds[mq] = kinds[mk] = kinds[mv] = kinds[m1] = col;
      kinds[mo] = kinds[m2] = row;
    }
    b.MarkOutput(x);
    ASSIGN_OR_RETURN(m.g, std::move(b).Build());
  }
  m.linear_kind = std::move(kinds);
  for (const auto& [t, name] : names) {
    const OpId op = m.g.tensor(t).producer;
    if (op == graph::kNoId || !m.clock.emplace(op, name).second) {
      return absl::InternalError(absl::StrCat("parallel predict: clock name ", name,
                                              " is not one op's"));
    }
  }
  if (m.clock.size() != static_cast<size_t>(m.g.num_ops())) {
    return absl::InternalError(absl::StrCat("parallel predict: ", m.clock.size(), " of ",
                                            m.g.num_ops(), " ops have clock names"));
  }
  return m;
}

// Where the ranks hold a tensor: its layout and whether it is partial sums.
struct Held {
  ParallelTensorShape shape;
  bool partial = false;
};

// The output dim that input dim `k` of a Reshape from `in` to `out` lands
// on: the first output dim of the run with the same leading element count.
absl::StatusOr<int> ReshapeDim(const std::vector<int64_t>& in, const std::vector<int64_t>& out,
                               int k) {
  int64_t before = 1;
  for (int i = 0; i < k; ++i) before *= in[i];
  int64_t acc = 1;
  for (int j = 0; j < static_cast<int>(out.size()); ++j) {
    if (acc == before && out[j] % in[k] == 0) return j;
    if (acc == before && in[k] % out[j] == 0) return j;
    acc *= out[j];
  }
  return Bad(absl::StrCat("reshape: input dim ", k, " has no output dim"));
}

// The model-split dim of a layout (-1: replicated in the model group).
int ModelDim(const ParallelTensorShape& s) {
  for (int i = 1; i < s.num_dims(); ++i)
    if (s.dims[i].degree > 1) return i;
  return -1;
}

struct Executed {
  std::map<OpId, ParallelConfig> configs;
  std::map<OpId, search::OpLayouts> layouts;
  std::map<TensorId, Held> held;
};

absl::StatusOr<Executed> Execute(const ParallelTrainSpec& spec, const ModelGraph& m) {
  const Graph& g = m.g;
  const int D = spec.data_degree, M = spec.model_degree, R = spec.ranks;
  Executed e;
  for (TensorId t = 0; t < g.num_tensors(); ++t) {
    if (g.tensor(t).role != TensorRole::kInput) continue;
    Held h{graph::UnpartitionedShape(g.tensor(t).shape, g.tensor(t).dtype), false};
    h.shape.dims[0].degree = D;
    h.shape.replica_degree = M;
    e.held[t] = h;
  }
  ASSIGN_OR_RETURN(std::vector<OpId> order, g.TopologicalOrder());
  for (OpId id : order) {
    const graph::Op& o = g.op(id);
    const TensorId out = o.outputs[0];
    const int rank = static_cast<int>(g.tensor(out).shape.size());
    ParallelConfig c;
    c.output_degrees.assign(rank, 1);
    c.output_degrees[0] = D;
    if (auto it = m.linear_kind.find(out); it != m.linear_kind.end()) {
      switch (it->second) {
        case LayerParallel::kData:
          c.replica_degree = M;
          break;
        case LayerParallel::kColumn:
          c.output_degrees[rank - 1] = M;
          break;
        case LayerParallel::kRow:
          c.reduction_degree = M;
          break;
      }
    } else {
      // Follows its first activation input: a model split carries over to
      // the matching output dim; a replicated or partial-sum input (reduced
      // first) makes the op replicated in the model group.
      const TensorId in = o.inputs[0];
      auto hit = e.held.find(in);
      if (hit == e.held.end()) return Bad(absl::StrCat("op ", o.name, ": input not placed"));
      // A reduce-scattered row output arrives split on its last (feature) dim.
      const int k = m.scattered.count(in)  ? static_cast<int>(g.tensor(in).shape.size()) - 1
                    : hit->second.partial ? -1
                                          : ModelDim(hit->second.shape);
      if (m.rows_split.count(in)) {
        c.output_degrees[0] = D * M;  // each model rank's rows
      } else if (M > 1 && k < 0) {
        c.replica_degree = M;
      } else if (M > 1) {
        int j = k;
        if (o.kind == OpKind::kTranspose) {
          const std::vector<int64_t> perm = o.GetInts("perm");
          j = static_cast<int>(std::find(perm.begin(), perm.end(), k) - perm.begin());
        } else if (o.kind == OpKind::kReshape) {
          ASSIGN_OR_RETURN(j, ReshapeDim(g.tensor(in).shape, g.tensor(out).shape, k));
        }
        if (j <= 0 || j >= rank) return Bad(absl::StrCat("op ", o.name, ": cannot follow dim ", k));
        c.output_degrees[j] = M;
      }
    }
    if (c.TotalDegree() != R) {
      return absl::InternalError(absl::StrCat("parallel predict: op ", o.name, " config ",
                                              search::ParallelConfigString(c), " degree ",
                                              c.TotalDegree(), " != ranks ", R));
    }
    ASSIGN_OR_RETURN(search::OpLayouts l, search::ConfigLayouts(g, id, c));
    e.held[out] = Held{l.output, l.output_partial_sums};
    e.configs[id] = c;
    e.layouts[id] = std::move(l);
  }
  return e;
}

// The layout the loss reads the model's output in: rows split over the data
// group, replicated in the model group (copies); with loss_rows_split rows
// split over data and model groups.
ParallelTensorShape LossLayout(const ParallelTrainSpec& spec, const Graph& g, TensorId y) {
  ParallelTensorShape s = graph::UnpartitionedShape(g.tensor(y).shape, g.tensor(y).dtype);
  s.dims[0].degree = spec.data_degree;
  s.replica_degree = spec.model_degree;
  if (spec.loss_rows_split) {
    s.dims[0].degree = spec.data_degree * spec.model_degree;
    s.replica_degree = 1;
  }
  return s;
}

// Whether the ranks compute the gradient of `t` (an op input): always for
// activations; for the graph input per Stage::input_grad.
bool NeedsGrad(bool input_grad, const Graph& g, TensorId t) {
  if (IsSource(g, t)) return false;
  return g.tensor(t).producer != graph::kNoId || input_grad;
}

absl::Status AddSteps(const search::Transition& tr, const std::string& what,
                      std::vector<PlannedCollective>& out) {
  ASSIGN_OR_RETURN(std::vector<costmodel::CollectiveStep> steps, search::TransitionComm(tr));
  for (const costmodel::CollectiveStep& s : steps) {
    if (s.group_size <= 1) continue;
    out.push_back({s.collective, s.bytes, s.group_size, what});
  }
  return absl::OkStatus();
}

int64_t Numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t v : s) n *= v;
  return n;
}

// Every collective of one step of the executed plan.
absl::StatusOr<std::vector<PlannedCollective>> Collectives(const Stage& st, const ModelGraph& m,
                                                           const Executed& e) {
  const ParallelTrainSpec& spec = st.spec;
  const Graph& g = m.g;
  const bool input_grad = m.input_grad;
  std::vector<PlannedCollective> out;
  for (int ti = 0; ti < g.num_tensors(); ++ti) {
    const TensorId t = ti;
    const graph::Tensor& x = g.tensor(t);
    if (x.producer == graph::kNoId) continue;  // inputs arrive in place; params: grad sync
    const Held& from = e.held.at(t);
    // Forward: one transition per distinct layout the readers need.
    std::vector<ParallelTensorShape> wants;
    // Backward: the readers' input gradients, summed where layout and kind agree.
    std::vector<std::pair<ParallelTensorShape, bool>> grads;
    for (OpId c : x.consumers) {
      const graph::Op& co = g.op(c);
      const search::OpLayouts& l = e.layouts.at(c);
      const ParallelConfig& cc = e.configs.at(c);
      for (size_t i = 0; i < co.inputs.size(); ++i) {
        if (co.inputs[i] != t) continue;
        if (std::find(wants.begin(), wants.end(), l.inputs[i]) == wants.end())
          wants.push_back(l.inputs[i]);
        const bool partial = l.inputs[i].replica_degree > cc.replica_degree;
        std::pair<ParallelTensorShape, bool> gl{l.inputs[i], partial};
        if (std::find(grads.begin(), grads.end(), gl) == grads.end()) grads.push_back(gl);
      }
    }
    const bool is_output =
        std::find(g.outputs().begin(), g.outputs().end(), t) != g.outputs().end();
    if (is_output) {
      ParallelTensorShape want = LossLayout(spec, g, t);
      if (std::find(wants.begin(), wants.end(), want) == wants.end()) wants.push_back(want);
      std::pair<ParallelTensorShape, bool> gl{want, false};
      if (std::find(grads.begin(), grads.end(), gl) == grads.end()) grads.push_back(gl);
    }
    const search::ReplicaKind kind =
        from.partial ? search::ReplicaKind::kPartialSums : search::ReplicaKind::kCopies;
    for (const ParallelTensorShape& w : wants) {
      ASSIGN_OR_RETURN(search::Transition tr, search::LayoutTransition(from.shape, w, kind));
      RETURN_IF_ERROR(AddSteps(tr, absl::StrCat("fwd ", x.name), out));
    }
    if (!NeedsGrad(input_grad, g, t)) continue;
    // The producer needs its output's gradient as copies of its output layout.
    for (const auto& [gs, partial] : grads) {
      ASSIGN_OR_RETURN(search::Transition tr,
                       search::LayoutTransition(gs, from.shape,
                                                partial ? search::ReplicaKind::kPartialSums
                                                        : search::ReplicaKind::kCopies));
      RETURN_IF_ERROR(AddSteps(tr, absl::StrCat("bwd ", x.name), out));
    }
  }
  // loss_rows_split: the bias after the rows' reduce-scatter is replicated
  // in the model group but each rank's gradient covers its rows only.
  for (TensorId t : m.rows_split) {
    if (spec.model_degree <= 1) continue;
    for (OpId c : g.tensor(t).consumers) {
      for (TensorId in : g.op(c).inputs) {
        if (g.tensor(in).role != TensorRole::kParameter) continue;
        out.push_back({costmodel::Collective::kAllReduce, Numel(g.tensor(in).shape) * 4,
                       spec.model_degree, absl::StrCat("bwd ", g.tensor(in).name)});
      }
    }
  }
  return out;
}

// The rank's parameter pieces, in op order (each parameter once).
absl::StatusOr<std::vector<std::vector<int64_t>>> ParamPieces(const Graph& g, const Executed& e) {
  std::vector<std::vector<int64_t>> out;
  std::set<TensorId> seen;
  ASSIGN_OR_RETURN(std::vector<OpId> order, g.TopologicalOrder());
  for (OpId id : order) {
    const graph::Op& o = g.op(id);
    for (size_t i = 0; i < o.inputs.size(); ++i) {
      if (g.tensor(o.inputs[i]).role != TensorRole::kParameter) continue;
      if (!seen.insert(o.inputs[i]).second) continue;
      ASSIGN_OR_RETURN(std::vector<int64_t> p, graph::PieceShape(e.layouts.at(id).inputs[i]));
      out.push_back(std::move(p));
    }
  }
  return out;
}

// The flat gradient all-reduce of AverageAndStep over the data group.
absl::StatusOr<std::vector<PlannedCollective>> GradSync(const ParallelTrainSpec& spec,
                                                        const Graph& g, const Executed& e) {
  if (spec.data_degree <= 1) return std::vector<PlannedCollective>{};
  ASSIGN_OR_RETURN(auto pieces, ParamPieces(g, e));
  int64_t elems = 0;
  for (const auto& p : pieces) elems += Numel(p);
  return std::vector<PlannedCollective>{
      {costmodel::Collective::kAllReduce, elems * 4, spec.data_degree, "grad sync"}};
}

// Profile-store signatures of the parts ProfileExecutedOps measures.
std::string LossSignature(const std::vector<int64_t>& shape) {
  return absl::StrCat("f32[", absl::StrJoin(shape, ","), "]");
}
std::string UpdateSignature(const std::vector<std::vector<int64_t>>& pieces) {
  std::vector<std::string> s;
  for (const auto& p : pieces) s.push_back(absl::StrCat("[", absl::StrJoin(p, ","), "]"));
  return absl::StrCat("sgd f32 ", absl::StrJoin(s, ","));
}

std::string AccumulateSignature(const std::vector<std::vector<int64_t>>& pieces) {
  return absl::StrCat("accumulate ", UpdateSignature(pieces));
}

// A stage with its graph, executed plan and per-part keys.
struct StagePlan {
  Stage stage;
  ModelGraph m;
  Executed e;
  std::vector<int64_t> loss_shape;  // the boundary / loss activation's piece
  std::vector<std::vector<int64_t>> params;
};

// ParallelizeOptions forcing the executed configs (see ForcedStrategy).
search::ParallelizeOptions ForcedOptions(const ParallelTrainSpec& spec,
                                         std::map<OpId, ParallelConfig> configs) {
  search::ParallelizeOptions o;
  o.degree = spec.data_degree * spec.model_degree;
  o.check_memory = false;
  o.max_model_dims = 0;
  o.parallel_strands = false;  // the executor's specs put every op on every rank
  o.filter = [configs = std::move(configs)](const Graph&, OpId op, const ParallelConfig& c) {
    auto it = configs.find(op);
    if (it == configs.end() || it->second.replica_degree > 1) return true;  // not expressible
    return c == it->second;
  };
  return o;
}

absl::StatusOr<std::vector<StagePlan>> PlanStages(const ParallelTrainSpec& spec) {
  ASSIGN_OR_RETURN(std::vector<Stage> stages, Stages(spec));
  std::vector<StagePlan> out;
  for (Stage& st : stages) {
    StagePlan sp;
    ASSIGN_OR_RETURN(sp.m, BuildModel(st));
    ASSIGN_OR_RETURN(sp.e, Execute(st.spec, sp.m));
    ASSIGN_OR_RETURN(sp.loss_shape,
                     graph::PieceShape(LossLayout(st.spec, sp.m.g, sp.m.g.outputs()[0])));
    ASSIGN_OR_RETURN(sp.params, ParamPieces(sp.m.g, sp.e));
    sp.stage = std::move(st);
    out.push_back(std::move(sp));
  }
  return out;
}

}  // namespace

namespace internal {

// Shared with the profiler half at the end of this file: the backward key's
// signature of an op's shard: the shard's OpSignature and which inputs get a
// gradient.
std::string BackwardSignature(bool input_grad, bool transformer, const Graph& g, OpId op,
                              const Graph& shard) {
  std::string needs;
  for (TensorId t : g.op(op).inputs) absl::StrAppend(&needs, NeedsGrad(input_grad, g, t) ? "1" : "0");
  return absl::StrCat(costmodel::OpSignature(shard, 0), " grads=", needs,
                      transformer ? " transformer" : " mlp");
}

}  // namespace internal

std::string PredictedPart::source() const {
  if (s <= 0) return "none";
  const double f = measured_s / s;
  if (f >= 1 - 1e-12) return "measured";
  if (f <= 1e-12) return "prior";
  return absl::StrFormat("mixed (%.0f%% measured)", 100 * f);
}

absl::StatusOr<Graph> ParallelTrainForwardGraph(const ParallelTrainSpec& spec) {
  ASSIGN_OR_RETURN(Stage st, OnlyStage(spec));
  ASSIGN_OR_RETURN(ModelGraph m, BuildModel(st));
  return std::move(m.g);
}

absl::StatusOr<std::map<OpId, ParallelConfig>> ExecutedConfigs(const ParallelTrainSpec& spec,
                                                               const Graph& g) {
  ASSIGN_OR_RETURN(Stage st, OnlyStage(spec));
  ASSIGN_OR_RETURN(ModelGraph m, BuildModel(st));
  if (m.g.num_ops() != g.num_ops()) return Bad("graph is not ParallelTrainForwardGraph(spec)");
  ASSIGN_OR_RETURN(Executed e, Execute(spec, m));
  return e.configs;
}

absl::StatusOr<search::ParallelizeOptions> ForcedStrategy(const ParallelTrainSpec& spec,
                                                          const Graph& g) {
  ASSIGN_OR_RETURN(auto configs, ExecutedConfigs(spec, g));
  return ForcedOptions(spec, std::move(configs));
}

absl::StatusOr<std::vector<PlannedCollective>> PlannedCollectives(const ParallelTrainSpec& spec) {
  ASSIGN_OR_RETURN(std::vector<StagePlan> stages, PlanStages(spec));
  std::vector<PlannedCollective> out;
  for (const StagePlan& sp : stages) {
    ASSIGN_OR_RETURN(std::vector<PlannedCollective> c, Collectives(sp.stage, sp.m, sp.e));
    ASSIGN_OR_RETURN(std::vector<PlannedCollective> sync, GradSync(sp.stage.spec, sp.m.g, sp.e));
    out.insert(out.end(), c.begin(), c.end());
    out.insert(out.end(), sync.begin(), sync.end());
  }
  if (stages.size() > 1) {  // per micro-batch and boundary, each way
    out.push_back({costmodel::Collective::kBroadcast, Numel(stages[0].loss_shape) * 4, 2,
                   "stage transfer"});
  }
  return out;
}

namespace {

// One stage's per-micro-batch forward and backward, and its per-step parts.
struct StageCost {
  PredictedPart forward, backward, comm_fwd, comm_bwd, grad_sync, step;
  int syncs = 0;              // synchronizing collectives per micro-batch (and the step's sync)
  std::optional<double> noise_s2_per_s;  // kNoiseOp, when profiled
  ParallelPrediction dp;  // plan, dp_time_s, notes (single-stage fields)
};

absl::StatusOr<StageCost> CostStage(const StagePlan& sp, const costmodel::ClusterSpec& cluster,
                                    costmodel::CostModel& cm, const PredictOptions& options,
                                    int micro_batches) {
  const Stage& st = sp.stage;
  const Graph& g = sp.m.g;
  const Executed& e = sp.e;
  StageCost out;
  auto add = [](PredictedPart& part, double s, bool measured) {
    part.s += s;
    if (measured) part.measured_s += s;
  };
  search::ParallelizeOptions opts = ForcedOptions(st.spec, e.configs);
  opts.backward_factor = options.backward_factor;
  ASSIGN_OR_RETURN(out.dp.plan, search::ParallelizeForward(g, cluster, cm, opts));
  out.dp.dp_time_s = out.dp.plan.time_s;
  for (const search::OpParallelization& o : out.dp.plan.ops) {
    const ParallelConfig& want = e.configs.at(o.op);
    if (want.replica_degree > 1) {
      ++out.dp.replicated_ops;
    } else if (!(o.config == want)) {
      out.dp.notes.push_back(absl::StrCat(o.name, ": DP ", search::ParallelConfigString(o.config),
                                          ", ranks run ", search::ParallelConfigString(want)));
    }
  }
  const std::string kind =
      options.device_kind.empty() ? cluster.device.kind : options.device_kind;
  ASSIGN_OR_RETURN(std::vector<OpId> order, g.TopologicalOrder());
  for (OpId id : order) {
    const ParallelConfig& c = e.configs.at(id);
    ASSIGN_OR_RETURN(costmodel::OpTime f, search::OpTimeUnderConfig(cm, g, id, c));
    add(out.forward, f.seconds, f.source == costmodel::TimeSource::kMeasured);
    std::optional<costmodel::ProfileSample> b;
    if (options.store != nullptr) {
      ASSIGN_OR_RETURN(Graph shard, search::ShardGraph(g, id, c));
      b = options.store->Get({kind, absl::StrCat(g.op(id).type, kBackwardSuffix),
                              internal::BackwardSignature(st.input_grad,
                                                          st.spec.transformer.has_value(), g, id,
                                                          shard)});
    }
    if (b.has_value()) {
      add(out.backward, b->median_s, true);
    } else {
      add(out.backward, options.backward_factor * f.seconds, false);
    }
  }
  const auto* ccm = dynamic_cast<const costmodel::ClusterCostModel*>(&cm);
  auto comm_time = [&](const PlannedCollective& c, PredictedPart& part) {
    const double s = cm.CollectiveTime(c.collective, c.bytes, c.group_size);
    add(part, s, ccm != nullptr && ccm->comm().Fitted(c.collective, c.group_size).has_value());
  };
  ASSIGN_OR_RETURN(std::vector<PlannedCollective> colls, Collectives(st, sp.m, e));
  for (const PlannedCollective& c : colls)
    comm_time(c, c.what.rfind("fwd", 0) == 0 ? out.comm_fwd : out.comm_bwd);
  ASSIGN_OR_RETURN(std::vector<PlannedCollective> sync, GradSync(st.spec, g, e));
  for (const PlannedCollective& c : sync) comm_time(c, out.grad_sync);
  for (const auto& c : colls) out.syncs += c.group_size > 1 ? 1 : 0;
  for (const auto& c : sync) out.syncs += c.group_size > 1 ? 1 : 0;
  if (options.store != nullptr) {
    std::optional<costmodel::ProfileSample> n = options.store->Get({kind, kNoiseOp, kNoiseSignature});
    if (n.has_value()) out.noise_s2_per_s = n->median_s;
  }
  if (options.store != nullptr) {
    bool missing = false;
    auto get = [&](const std::string& type, const std::string& sig, double times) {
      std::optional<costmodel::ProfileSample> x = options.store->Get({kind, type, sig});
      if (x.has_value()) {
        add(out.step, times * x->median_s, true);
      } else {
        missing = true;
      }
    };
    if (st.loss) get(kLossOp, LossSignature(sp.loss_shape), micro_batches);
    get(kUpdateOp, UpdateSignature(sp.params), 1);
    if (micro_batches > 1) get(kAccumulateOp, AccumulateSignature(sp.params), micro_batches - 1);
    if (missing) out.dp.notes.push_back("loss/update kernels not profiled (ProfileExecutedOps): left out");
  }
  return out;
}

// E[max of n independent standard normals] (0 for n = 1; 0.564 for 2, 1.029
// for 4): the integral of x n phi(x) Phi(x)^(n-1), by Simpson's rule.
double ExpectedMaxOfNormals(int n) {
  if (n <= 1) return 0;
  constexpr int kSteps = 4000;
  constexpr double kLo = -10, kHi = 10, kH = (kHi - kLo) / kSteps;
  double sum = 0;
  for (int i = 0; i <= kSteps; ++i) {
    const double x = kLo + i * kH;
    const double pdf = std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
    const double cdf = 0.5 * std::erfc(-x / std::sqrt(2.0));
    const double f = x * n * pdf * std::pow(cdf, n - 1);
    sum += f * (i == 0 || i == kSteps ? 1 : (i % 2 == 1 ? 4 : 2));
  }
  return sum * kH / 3;
}

void AddPart(PredictedPart& to, const PredictedPart& from, double times = 1) {
  to.s += times * from.s;
  to.measured_s += times * from.measured_s;
}

}  // namespace

absl::StatusOr<ParallelPrediction> PredictParallelTraining(const ParallelTrainSpec& spec,
                                                           const costmodel::ClusterSpec& cluster,
                                                           costmodel::CostModel& cm,
                                                           const PredictOptions& options) {
  ASSIGN_OR_RETURN(std::vector<StagePlan> stages, PlanStages(spec));
  if (spec.ranks != cluster.num_ranks) {
    return Bad(absl::StrCat("spec has ", spec.ranks, " ranks, cluster ", cluster.num_ranks));
  }
  // Each stage's plan is costed on the cluster of its own ranks.
  ASSIGN_OR_RETURN(costmodel::ClusterSpec stage_cluster,
                   costmodel::WithRanks(cluster, spec.data_degree * spec.model_degree));
  const int m = spec.micro_batches;
  std::vector<StageCost> costs;
  for (const StagePlan& sp : stages) {
    ASSIGN_OR_RETURN(StageCost c, CostStage(sp, stage_cluster, cm, options, m));
    costs.push_back(std::move(c));
  }
  ParallelPrediction p;
  if (costs.size() == 1) {
    const StageCost& c = costs[0];
    p = c.dp;
    AddPart(p.forward, c.forward);
    AddPart(p.compute, c.forward);
    AddPart(p.compute, c.backward);
    AddPart(p.comm, c.comm_fwd);
    AddPart(p.comm, c.comm_bwd);
    AddPart(p.grad_sync, c.grad_sync);
    AddPart(p.step, c.step);
    if (c.noise_s2_per_s.has_value() && c.syncs > 0) {
      const double busy = p.compute.s + p.step.s;  // what runs between the collectives
      const double w = ExpectedMaxOfNormals(spec.data_degree * spec.model_degree) *
                       std::sqrt(*c.noise_s2_per_s * busy * c.syncs);
      p.skew = {w, w};
    }
    p.step_s = p.compute.s + p.comm.s + p.grad_sync.s + p.step.s + p.skew.s;
    return p;
  }
  // A pipeline: the stages' micro-batch times through the schedule search
  // models (search/pipeline_schedule.h), then the slowest stage's update.
  std::vector<search::PipelineStage> ps;
  double busy = 0, busy_measured = 0, after = 0;
  for (const StageCost& c : costs) {
    ps.push_back({.forward_s = c.forward.s + c.comm_fwd.s, .backward_s = c.backward.s + c.comm_bwd.s});
    const double b = m * (c.forward.s + c.comm_fwd.s + c.backward.s + c.comm_bwd.s);
    if (b > busy) {
      busy = b;
      busy_measured = m * (c.forward.measured_s + c.comm_fwd.measured_s + c.backward.measured_s +
                           c.comm_bwd.measured_s);
    }
    if (c.grad_sync.s + c.step.s > after) {
      after = c.grad_sync.s + c.step.s;
      p.grad_sync = c.grad_sync;
      p.step = c.step;
    }
    AddPart(p.forward, c.forward, m);
    p.replicated_ops += c.dp.replicated_ops;
    p.dp_time_s += c.dp.dp_time_s;
    p.notes.insert(p.notes.end(), c.dp.notes.begin(), c.dp.notes.end());
  }
  // Activations cross each stage boundary replicated in the model group, as
  // a Gloo broadcast on a 2-rank group from the sender (parallel_train.cc
  // PeerLink): priced as the benchmark's 2-rank Broadcast.
  const int64_t boundary = Numel(stages[0].loss_shape) * 4;
  const double transfer = cm.CollectiveTime(costmodel::Collective::kBroadcast, boundary, 2);
  const auto* ccm = dynamic_cast<const costmodel::ClusterCostModel*>(&cm);
  const bool transfer_measured =
      ccm != nullptr && ccm->comm().Fitted(costmodel::Collective::kBroadcast, 2).has_value();
  ASSIGN_OR_RETURN(search::PipelineTiming t,
                   search::SimulatePipeline(ps, m, transfer,
                                            spec.schedule == ParallelTrainSpec::PipelineSchedule::kGpipe
                                                ? search::PipelineOrder::kGPipe
                                                : search::PipelineOrder::k1F1B));
  p.compute = {busy, busy_measured};
  p.comm = {t.iteration_s - busy, transfer_measured ? t.iteration_s - busy : 0};
  p.notes.push_back(absl::StrFormat(
      "pipeline: %zu stages x %d micro-batches, bubble %.0f%%, transfer %.3f ms each (%s)",
      costs.size(), m, 100 * t.bubble_fraction, 1e3 * transfer,
      transfer_measured ? "measured" : "prior: no 2-rank Broadcast fit"));
  p.step_s = t.iteration_s + after;
  return p;
}

// ---------------------------------------------------------------------------
// The profiler half (LibTorch; defined at the end of this file).

namespace internal {
absl::Status ProfileExecuted(const ParallelTrainSpec& spec, bool input_grad, const Graph& g,
                             const std::map<OpId, ParallelConfig>& configs,
                             const std::vector<ExecutedKey>& keys,
                             const std::vector<int64_t>& loss_shape,
                             const std::vector<std::vector<int64_t>>& params,
                             costmodel::ProfileStore& store, const ExecutedProfileOptions& options);
}  // namespace internal

namespace {

absl::StatusOr<std::vector<ExecutedKey>> StageKeys(const StagePlan& sp, int micro_batches,
                                                   const std::string& device_kind) {
  const Graph& g = sp.m.g;
  std::vector<ExecutedKey> out;
  ASSIGN_OR_RETURN(std::vector<OpId> order, g.TopologicalOrder());
  for (OpId id : order) {
    ASSIGN_OR_RETURN(Graph shard, search::ShardGraph(g, id, sp.e.configs.at(id)));
    const std::string& type = g.op(id).type;
    out.push_back({{device_kind, type, costmodel::OpSignature(shard, 0)}, "forward", id});
    out.push_back({{device_kind, absl::StrCat(type, kBackwardSuffix),
                    internal::BackwardSignature(sp.stage.input_grad,
                                                sp.stage.spec.transformer.has_value(), g, id,
                                                shard)},
                   "backward",
                   id});
  }
  if (sp.stage.loss) {
    out.push_back({{device_kind, kLossOp, LossSignature(sp.loss_shape)}, "loss", graph::kNoId});
  }
  out.push_back({{device_kind, kUpdateOp, UpdateSignature(sp.params)}, "update", graph::kNoId});
  out.push_back({{device_kind, kNoiseOp, kNoiseSignature}, "noise", graph::kNoId});
  if (micro_batches > 1) {
    out.push_back({{device_kind, kAccumulateOp, AccumulateSignature(sp.params)}, "accumulate",
                   graph::kNoId});
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<ExecutedKey>> ExecutedProfileKeys(const ParallelTrainSpec& spec,
                                                             const std::string& device_kind) {
  ASSIGN_OR_RETURN(std::vector<StagePlan> stages, PlanStages(spec));
  std::vector<ExecutedKey> out;
  for (const StagePlan& sp : stages) {
    ASSIGN_OR_RETURN(std::vector<ExecutedKey> k, StageKeys(sp, spec.micro_batches, device_kind));
    out.insert(out.end(), k.begin(), k.end());
  }
  return out;
}

absl::StatusOr<bool> LacksExecutedProfiles(const ParallelTrainSpec& spec,
                                           const std::string& device_kind,
                                           const costmodel::ProfileStore& store) {
  ASSIGN_OR_RETURN(std::vector<ExecutedKey> keys, ExecutedProfileKeys(spec, device_kind));
  for (const ExecutedKey& k : keys)
    if (!store.Get(k.key).has_value()) return true;
  return false;
}

absl::Status PutInGraphTimes(const InGraphTimes& t, costmodel::ProfileStore& store) {
  for (const auto& [key, sample] : t.samples) RETURN_IF_ERROR(store.Put(key, sample));
  return absl::OkStatus();
}

absl::StatusOr<InGraphTimes> InGraphOpTimes(
    const ParallelTrainSpec& spec, const std::vector<std::map<std::string, double>>& step_clocks,
    const std::string& device_kind) {
  if (step_clocks.empty()) {
    return Bad("in-graph op times: no clocked steps (train with ParallelTrainOptions::op_clocks)");
  }
  ASSIGN_OR_RETURN(std::vector<StagePlan> stages, PlanStages(spec));
  const int m = spec.micro_batches;
  const double steps = static_cast<double>(step_clocks.size());
  // Per key: the per-call values of every op (and step) that maps to it.
  std::map<std::tuple<std::string, std::string, std::string>,
           std::pair<costmodel::ProfileKey, std::vector<double>>>
      per_key;
  InGraphTimes out;
  for (size_t st = 0; st < stages.size(); ++st) {
    const StagePlan& sp = stages[st];
    const std::string prefix = absl::StrCat("s", st, "/");
    double stage_total = 0, stage_executor = 0;
    for (const auto& clocks : step_clocks) {
      for (const auto& [name, sec] : clocks) {
        if (name.rfind(prefix, 0) != 0 || IsCommClock(name.substr(prefix.size()))) continue;
        stage_total += sec / steps;
        if (name == prefix + kExecutorClock) stage_executor += sec / steps;
      }
    }
    if (stage_total > out.clocked_s) {
      out.clocked_s = stage_total;
      out.executor_s = stage_executor;
    }
    ASSIGN_OR_RETURN(std::vector<ExecutedKey> keys, StageKeys(sp, m, device_kind));
    for (const ExecutedKey& k : keys) {
      std::string name;
      double calls = m;  // per step
      if (k.op != graph::kNoId) {
        name = sp.m.clock.at(k.op);
        if (k.part == "backward") name += kBackwardClock;
      } else if (k.part == "loss") {
        name = kLossClock;
      } else if (k.part == "update") {
        name = kUpdateClock;
        calls = 1;
      } else if (k.part == "accumulate") {
        name = kAccumulateClock;
        calls = m - 1;  // the first micro-batch's gradients are kept, not added
      } else {
        continue;
      }
      name = prefix + name;
      std::vector<double> values;
      for (const auto& clocks : step_clocks) {
        auto it = clocks.find(name);
        if (it != clocks.end()) values.push_back(it->second / calls);
      }
      if (values.empty()) {
        out.unclocked.push_back(name);
        continue;
      }
      auto& e = per_key[{k.key.device_kind, k.key.op_type, k.key.signature}];
      e.first = k.key;
      e.second.insert(e.second.end(), values.begin(), values.end());
    }
  }
  for (auto& [id, e] : per_key) {
    double mean = 0;
    for (double x : e.second) mean += x / static_cast<double>(e.second.size());
    const TimingSummary t = Summarize(e.second);
    out.samples.push_back(
        {e.first, {.median_s = mean, .spread_s = t.iqr_s, .repetitions = t.count}});
  }
  return out;
}

absl::Status ProfileExecutedOps(const ParallelTrainSpec& spec,
                                const costmodel::ClusterSpec& cluster,
                                costmodel::ProfileStore& store,
                                const ExecutedProfileOptions& options) {
  ASSIGN_OR_RETURN(std::vector<StagePlan> stages, PlanStages(spec));
  const std::string kind = options.device_kind.empty() ? cluster.device.kind : options.device_kind;
  for (const StagePlan& sp : stages) {
    ASSIGN_OR_RETURN(std::vector<ExecutedKey> keys, StageKeys(sp, spec.micro_batches, kind));
    RETURN_IF_ERROR(internal::ProfileExecuted(sp.stage.spec, sp.stage.input_grad, sp.m.g,
                                              sp.e.configs, keys, sp.loss_shape, sp.params, store,
                                              options));
  }
  return absl::OkStatus();
}

}  // namespace braid::worker

// ---------------------------------------------------------------------------
// The profiler half: the LibTorch calls of parallel_train.cc and
// parallel_transformer.cc, per op shard, timed on this thread.

namespace braid::worker::internal {
namespace {

constexpr double kMinSampleS = 200e-6;  // shorter kernels run several times per sample

// Appends `reps` samples of `f` (seconds per run; kernels shorter than
// kMinSampleS run several times per sample) after `warmup` untimed runs.
int Sample(const std::function<void()>& f, int warmup, int reps, std::vector<double>& out) {
  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  for (int i = 0; i < warmup; ++i) f();
  Clock::time_point t0 = Clock::now();
  f();
  const double one = since(t0);
  const int inner =
      one >= kMinSampleS ? 1 : static_cast<int>(std::ceil(kMinSampleS / std::max(one, 1e-8)));
  for (int r = 0; r < reps; ++r) {
    t0 = Clock::now();
    for (int i = 0; i < inner; ++i) f();
    out.push_back(since(t0) / inner);
  }
  return inner;
}

at::Tensor Randn(const std::vector<int64_t>& shape) { return at::randn(shape, at::kFloat); }
at::Tensor Flat(const at::Tensor& t) { return t.reshape({-1, t.size(-1)}); }

// LayerNorm as parallel_transformer.cc runs it (NormForward / NormBackward).
at::Tensor NormForward(const at::Tensor& x, const at::Tensor& gamma, const at::Tensor& beta,
                       at::Tensor& xhat, at::Tensor& rstd) {
  const at::Tensor centered = x - x.mean(-1, true);
  rstd = (centered.pow(2).mean(-1, true) + 1e-5).rsqrt();
  xhat = centered * rstd;
  return xhat * gamma.view(-1) + beta;
}
at::Tensor NormBackward(const at::Tensor& g, const at::Tensor& gamma, const at::Tensor& xhat,
                        const at::Tensor& rstd) {
  at::Tensor ggamma = Flat(g * xhat).sum(0).view({-1, 1});
  at::Tensor gbeta = Flat(g).sum(0);
  const at::Tensor gxhat = g * gamma.view(-1);
  return rstd * (gxhat - gxhat.mean(-1, true) - xhat * (gxhat * xhat).mean(-1, true));
}

// An input of a shard as the ranks hold it: a permuted view where the graph
// has a Transpose producing it (the trainer's Split/transpose are views).
at::Tensor ShardInput(const Graph& g, const std::map<OpId, ParallelConfig>& configs, OpId op,
                      int i, const Graph& shard) {
  const std::vector<int64_t>& shape = shard.tensor(shard.op(0).inputs[i]).shape;
  const OpId prod = g.tensor(g.op(op).inputs[i]).producer;
  if (prod != graph::kNoId && g.op(prod).kind == OpKind::kTranspose) {
    absl::StatusOr<Graph> ps = search::ShardGraph(g, prod, configs.at(prod));
    if (ps.ok()) {
      const std::vector<int64_t> perm = g.op(prod).GetInts("perm");
      return Randn(ps->tensor(ps->op(0).inputs[0]).shape).permute(perm);
    }
  }
  return Randn(shape);
}

struct Kernels {
  std::function<void()> forward, backward;
};

absl::StatusOr<Kernels> MakeKernels(const ParallelTrainSpec& spec, bool input_grad, const Graph& g,
                                    const std::map<OpId, ParallelConfig>& configs, OpId op,
                                    const Graph& shard) {
  const graph::Op& o = g.op(op);
  const graph::Op& so = shard.op(0);
  auto in_shape = [&](int i) { return shard.tensor(so.inputs[i]).shape; };
  const std::vector<int64_t> out_shape = shard.tensor(so.outputs[0]).shape;
  const bool mlp = !spec.transformer.has_value();
  Kernels k;
  switch (o.kind) {
    case OpKind::kMatMul: {
      if (IsSource(g, o.inputs[1])) {  // a Linear: W[in, out] held as w[out, in]
        at::Tensor x = Randn(in_shape(0));
        const std::vector<int64_t> ws = in_shape(1);
        at::Tensor w = Randn({ws[1], ws[0]});
        at::Tensor gy = Randn(out_shape);
        const bool ga = NeedsGrad(input_grad, g, o.inputs[0]);
        k.forward = [=] { at::Tensor z = at::matmul(x, w.t()); };
        k.backward = [=] {
          at::Tensor gw = mlp ? at::matmul(gy.t(), x) : Flat(gy).t().mm(Flat(x));
          if (ga) at::Tensor gx = at::matmul(gy, w);
        };
      } else {  // attention: both operands activations (views as the trainer has them)
        at::Tensor a = ShardInput(g, configs, op, 0, shard);
        at::Tensor b = ShardInput(g, configs, op, 1, shard);
        at::Tensor gy = Randn(out_shape);
        k.forward = [=] { at::Tensor z = at::matmul(a, b); };
        k.backward = [=] {
          at::Tensor ga = at::matmul(gy, b.transpose(-2, -1));
          at::Tensor gb = at::matmul(a.transpose(-2, -1), gy);
        };
      }
      return k;
    }
    case OpKind::kAdd: {
      at::Tensor a = Randn(in_shape(0));
      at::Tensor b = Randn(in_shape(1));
      at::Tensor gy = Randn(out_shape);
      if (IsSource(g, o.inputs[1])) {  // bias
        if (mlp) {
          k.forward = [=]() mutable { a.add_(b); };
        } else {
          k.forward = [=] { at::Tensor z = a + b; };
        }
        k.backward = [=] { at::Tensor gb = Flat(gy).sum(0); };
      } else {  // residual: the gradients of both branches are summed
        k.forward = [=] { at::Tensor z = a + b; };
        k.backward = [=] { at::Tensor s = gy + b; };
      }
      return k;
    }
    case OpKind::kRelu: {
      at::Tensor z = Randn(in_shape(0));
      at::Tensor gy = Randn(out_shape);
      k.forward = [=] { at::Tensor r = at::relu(z); };
      k.backward = [=] { at::Tensor gz = gy * (z > 0); };
      return k;
    }
    case OpKind::kMul: {  // Scale: by a constant
      at::Tensor x = Randn(in_shape(0));
      at::Tensor gy = Randn(out_shape);
      k.forward = [=] { at::Tensor z = x * 0.125; };
      k.backward = [=] { at::Tensor gx = gy * 0.125; };
      return k;
    }
    case OpKind::kSoftmax: {
      at::Tensor x = Randn(in_shape(0));
      at::Tensor p = at::softmax(x, -1);
      at::Tensor gy = Randn(out_shape);
      k.forward = [=] { at::Tensor z = at::softmax(x, -1); };
      k.backward = [=] { at::Tensor gs = p * (gy - (gy * p).sum(-1, true)); };
      return k;
    }
    case OpKind::kLayerNormalization: {
      at::Tensor x = Randn(in_shape(0));
      const int64_t d = in_shape(1)[0];
      at::Tensor gamma = at::ones({d, 1}), beta = at::zeros({d});
      at::Tensor xhat, rstd;
      NormForward(x, gamma, beta, xhat, rstd);
      at::Tensor gy = Randn(out_shape);
      k.forward = [=] {
        at::Tensor xh, rs;
        NormForward(x, gamma, beta, xh, rs);
      };
      k.backward = [=] { at::Tensor gx = NormBackward(gy, gamma, xhat, rstd); };
      return k;
    }
    case OpKind::kTranspose: {  // views both ways
      at::Tensor x = Randn(in_shape(0));
      at::Tensor gy = Randn(out_shape);
      const std::vector<int64_t> perm = o.GetInts("perm");
      std::vector<int64_t> inv(perm.size());
      for (size_t j = 0; j < perm.size(); ++j) inv[perm[j]] = static_cast<int64_t>(j);
      k.forward = [=] { at::Tensor z = x.permute(perm); };
      k.backward = [=] { at::Tensor z = gy.permute(inv); };
      return k;
    }
    case OpKind::kReshape: {
      // After a Transpose (Merge): the forward copies, the backward is a view.
      // Before one (Split): the forward is a view, the backward's Merge copies.
      const std::vector<int64_t> ins = in_shape(0);
      at::Tensor x = ShardInput(g, configs, op, 0, shard);
      const bool merge = !x.is_contiguous();
      at::Tensor gy = Randn(out_shape);
      k.forward = [=] { at::Tensor z = x.reshape(out_shape); };
      if (merge || ins.size() != 4) {
        k.backward = [=] { at::Tensor z = gy.view(ins); };
      } else {  // gradient [b, h, s, dh] -> permute -> reshape: a copy
        at::Tensor gh = Randn({ins[0], ins[2], ins[1], ins[3]});
        k.backward = [=] { at::Tensor z = gh.permute({0, 2, 1, 3}).reshape(out_shape); };
      }
      return k;
    }
    default:
      return absl::UnimplementedError(
          absl::StrCat("parallel predict: no executor kernels for op ", o.name, " (", o.type, ")"));
  }
}

void OneThread() {
  at::set_num_threads(1);
  using SetFn = void (*)(int);
  if (auto f = reinterpret_cast<SetFn>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) f(1);
}

}  // namespace

absl::Status ProfileExecuted(const ParallelTrainSpec& spec, bool input_grad, const Graph& g,
                             const std::map<OpId, ParallelConfig>& configs,
                             const std::vector<ExecutedKey>& keys,
                             const std::vector<int64_t>& loss_shape,
                             const std::vector<std::vector<int64_t>>& params,
                             costmodel::ProfileStore& store, const ExecutedProfileOptions& options) {
  OneThread();
  std::set<std::pair<std::string, std::string>> done;
  const ExecutedKey* loss_key = nullptr;
  const ExecutedKey* update_key = nullptr;
  const ExecutedKey* accumulate_key = nullptr;
  const ExecutedKey* noise_key = nullptr;
  try {
    // Every kernel to time, once per distinct key.
    std::vector<std::pair<const ExecutedKey*, std::function<void()>>> jobs;
    for (const ExecutedKey& k : keys) {
      if (k.part == "loss") loss_key = &k;
      if (k.part == "update") update_key = &k;
      if (k.part == "accumulate") accumulate_key = &k;
      if (k.part == "noise") noise_key = &k;
      if (k.op == graph::kNoId) continue;
      if (!done.insert({k.key.op_type, k.key.signature}).second) continue;
      ASSIGN_OR_RETURN(Graph shard, search::ShardGraph(g, k.op, configs.at(k.op)));
      ASSIGN_OR_RETURN(Kernels kern, MakeKernels(spec, input_grad, g, configs, k.op, shard));
      jobs.push_back({&k, k.part == "forward" ? kern.forward : kern.backward});
    }
    if (update_key == nullptr) return absl::InternalError("parallel predict profile: no update key");
    if (loss_key != nullptr) {  // the loss: MSE, its value read back, its gradient
      at::Tensor a = Randn(loss_shape), t = Randn(loss_shape);
      jobs.push_back({loss_key, [=] {
                        const at::Tensor diff = a - t;
                        volatile double loss = diff.pow(2).mean().item<double>();
                        (void)loss;
                        at::Tensor gr = diff * (2.0 / static_cast<double>(diff.numel()));
                      }});
    }
    std::vector<at::Tensor> w, gw;
    for (const auto& p : params) {
      w.push_back(Randn(p));
      gw.push_back(Randn(p));
    }
    const double dd = spec.data_degree;
    jobs.push_back({update_key, [=]() mutable {  // AverageAndStep without its all-reduce
                      std::vector<at::Tensor> flat;
                      for (const at::Tensor& x : gw) flat.push_back(x.reshape(-1));
                      at::Tensor buf = at::cat(flat);
                      buf.div_(dd);
                      int64_t off = 0;
                      for (at::Tensor& x : w) {
                        x.sub_(buf.narrow(0, off, x.numel()).view_as(x), 1e-9);
                        off += x.numel();
                      }
                    }});
    if (accumulate_key != nullptr) {  // Accumulate: one micro-batch's gradients added
      std::vector<at::Tensor> acc = w;
      jobs.push_back({accumulate_key, [=]() mutable {
                        for (size_t i = 0; i < acc.size(); ++i) acc[i].add_(gw[i]);
                      }});
    }
    // Passes over all kernels, so that a burst of other load on the machine
    // lands on a few samples of many kernels rather than on all of one's.
    std::vector<std::vector<double>> samples(jobs.size());
    std::vector<int> inner(jobs.size(), 1);
    for (int pass = 0; pass < options.passes; ++pass) {
      for (size_t j = 0; j < jobs.size(); ++j) {
        inner[j] =
            Sample(jobs[j].second, pass == 0 ? options.warmup : 1, options.repetitions, samples[j]);
      }
    }
    // The noise: every sample is a stretch of inner x t seconds of this
    // rank's compute; pooled over the kernels, the variance of a stretch's
    // length per second of it (stalls such as a lost scheduler tick add
    // variance in proportion to the time they can strike in).
    if (noise_key != nullptr) {
      double var = 0, len = 0;
      for (size_t j = 0; j < jobs.size(); ++j) {
        const std::vector<double>& x = samples[j];
        if (x.size() < 2) continue;
        double m = 0, v = 0;
        for (double t : x) m += t / static_cast<double>(x.size());
        for (double t : x) v += (t - m) * (t - m) / static_cast<double>(x.size() - 1);
        var += static_cast<double>(inner[j]) * inner[j] * v * x.size();
        len += static_cast<double>(inner[j]) * m * x.size();
      }
      if (len > 0) {
        RETURN_IF_ERROR(store.Put(noise_key->key, {.median_s = var / len, .repetitions = 1}));
      }
    }
    // Stored: the mean, as the in-graph profiler does (graph_profiler.h): a
    // step is a sum of kernel times, and a sum follows the means. On the
    // shared 2-core machine a kernel's samples are bimodal (some lose a
    // 4 ms scheduler tick to another process), and a median would pick a
    // mode rather than weigh them.
    for (size_t j = 0; j < jobs.size(); ++j) {
      const TimingSummary t = Summarize(samples[j]);
      double mean = 0;
      for (double x : samples[j]) mean += x / static_cast<double>(samples[j].size());
      RETURN_IF_ERROR(store.Put(jobs[j].first->key,
                                {.median_s = mean, .spread_s = t.iqr_s, .repetitions = t.count}));
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("parallel predict profile: ", e.what()));
  }
  return absl::OkStatus();
}

}  // namespace braid::worker::internal
