#include "client/parallel_spec_graph.h"

#include <algorithm>
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
#include "base/status_macros.h"
#include "graph/builder.h"
#include "graph/parallel_shape.h"
#include "worker/op_clock.h"
#include "worker/parallel_pipeline.h"
#include "search/parallel_config.h"

namespace braid::client {

// The trainer's names (worker/parallel_train.h, parallel_pipeline.h, op_clock.h).
namespace internal = ::braid::worker::internal;
using worker::BlockClockName;
using worker::kReluFirstClock;
using worker::MlpClockName;
using worker::ValidateParallelTrainSpec;
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

}  // namespace

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

}  // namespace braid::client
