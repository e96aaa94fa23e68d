#include "client/parallel_plan_exec.h"

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"
#include "graph/fingerprint.h"
#include "client/parallel_spec_graph.h"

namespace braid::client {
namespace {

using graph::Graph;
using graph::OpId;
using graph::OpKind;
using graph::TensorId;
using graph::TensorRole;
using search::ParallelConfig;

constexpr char kExecutorModels[] =
    "the parallel executor runs an MLP (MatMul(x, W[in, out]) + Add(bias), Relu between "
    "layers) or pre-LN transformer blocks exactly as ParallelTrainForwardGraph builds them; "
    "write one with `braid-parallel-model --model mlp|transformer --write-model FILE` and "
    "plan that file";

absl::Status NotExecutable(const Graph& g, const std::string& why) {
  return absl::UnimplementedError(
      absl::StrCat("model ", g.name(), " ", why, ": ", kExecutorModels));
}

bool IsParam(const Graph& g, TensorId t) { return g.tensor(t).role == TensorRole::kParameter; }

// A Linear's MatMul: x @ W with W a 2-D parameter.
bool IsLinearMatMul(const Graph& g, const graph::Op& o) {
  return o.type == "MatMul" && o.inputs.size() == 2 && IsParam(g, o.inputs[1]) &&
         g.tensor(o.inputs[1]).shape.size() == 2;
}

// "out[2,1] red2 (data split over 2, reduction split over 2)": the config
// and Unity's names of what it splits.
std::string Describe(const ParallelConfig& c) {
  std::vector<std::string> parts;
  const int r = static_cast<int>(c.output_degrees.size());
  for (int j = 0; j < r; ++j) {
    const int d = c.output_degrees[j];
    if (d == 1) continue;
    const char* what = j == 0 ? "data" : j == r - 1 ? "last-dim (column)" : "inner-dim";
    parts.push_back(absl::StrCat(what, " split over ", d));
  }
  if (c.reduction_degree > 1) parts.push_back(absl::StrCat("reduction split over ", c.reduction_degree));
  if (c.replica_degree > 1) parts.push_back(absl::StrCat("replicated ", c.replica_degree, "x"));
  if (parts.empty()) parts.push_back("not split");
  return absl::StrCat(search::ParallelConfigString(c), " (", absl::StrJoin(parts, ", "), ")");
}

std::string OpWhat(const graph::Op& o) { return absl::StrCat("op ", o.name, " (", o.type, ")"); }

// One op of the plan's "ops" list.
struct PlannedOp {
  ParallelConfig config;
  int data_degree = 1;
};

absl::StatusOr<std::map<std::string, PlannedOp>> ReadOps(const nlohmann::json& ops,
                                                         const std::string& where) {
  if (!ops.is_array()) {
    return absl::InvalidArgumentError(absl::StrCat("parallel plan: ", where, " has no \"ops\" list"));
  }
  std::map<std::string, PlannedOp> out;
  for (const nlohmann::json& o : ops) {
    if (!o.is_object() || !o.contains("op") || !o["op"].is_string() || !o.contains("config") ||
        !o["config"].is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("parallel plan: ", where, ": an op without \"op\" and \"config\": ", o.dump()));
    }
    PlannedOp p;
    ASSIGN_OR_RETURN(p.config, ParseParallelConfig(o["config"].get<std::string>()));
    p.data_degree = o.value("data_degree", p.config.output_degrees.empty() ? 1 : p.config.output_degrees[0]);
    out[o["op"].get<std::string>()] = std::move(p);
  }
  return out;
}

// The topological positions of the graph's ops and its ops by name.
struct Positions {
  std::vector<OpId> order;
  std::map<OpId, int> pos;
  std::map<std::string, OpId> by_name;
};

absl::StatusOr<Positions> MakePositions(const Graph& g) {
  Positions p;
  ASSIGN_OR_RETURN(p.order, g.TopologicalOrder());
  for (int i = 0; i < static_cast<int>(p.order.size()); ++i) p.pos[p.order[i]] = i;
  for (OpId id = 0; id < g.num_ops(); ++id) p.by_name[g.op(id).name] = id;
  return p;
}

// Topological position of each layer's first op: the MLP's Linear MatMuls,
// the transformer's blocks (every op of block b precedes block b + 1's: they
// all feed its output, which every op of the next block reads).
absl::StatusOr<std::vector<int>> LayerStarts(const ParallelTrainSpec& model, const Graph& g,
                                             const Positions& p) {
  std::vector<int> starts;
  if (model.transformer.has_value()) {
    const int blocks = model.transformer->blocks;
    const int per = g.num_ops() / blocks;
    for (int b = 0; b < blocks; ++b) starts.push_back(b * per);
    for (int s : starts) {
      if (g.op(p.order[s]).kind != OpKind::kLayerNormalization) {
        return absl::InternalError(absl::StrCat("parallel plan: block start ", s, " is ",
                                                OpWhat(g.op(p.order[s])), ", not a LayerNorm"));
      }
    }
  } else {
    for (int i = 0; i < static_cast<int>(p.order.size()); ++i)
      if (IsLinearMatMul(g, g.op(p.order[i]))) starts.push_back(i);
  }
  return starts;
}

// The Linear layer kind an MLP MatMul's planned config is, at D x M.
absl::StatusOr<LayerParallel::Kind> LinearKind(const graph::Op& o, const ParallelConfig& c, int D,
                                               int M) {
  if (c.replica_degree == 1 && c.output_degrees.size() == 2 && c.output_degrees[0] == D) {
    if (c.output_degrees[1] == M && c.reduction_degree == 1)
      return M == 1 ? LayerParallel::kData : LayerParallel::kColumn;
    if (M > 1 && c.output_degrees[1] == 1 && c.reduction_degree == M) return LayerParallel::kRow;
  }
  const std::string runs =
      M == 1 ? absl::StrCat("data-parallel Linear layers out[", D, ",1]")
             : absl::StrCat("column out[", D, ",", M, "] or row out[", D, ",1] red", M,
                            " Linear layers (a data layer would run replicated in the model group)");
  return absl::FailedPreconditionError(absl::StrCat(
      OpWhat(o), ": planned ", Describe(c), "; the plan's data x model degree is ", D, " x ", M,
      " and the executor runs data, column or row-parallel Linear layers at that one degree for "
      "the whole model: ",
      runs));
}

// Compares one op's planned config with the one the ranks run.
absl::Status Check(const graph::Op& o, const ParallelConfig& planned, const ParallelConfig& runs,
                   PlannedSpec& out) {
  if (planned == runs) {
    ++out.verified_ops;
    return absl::OkStatus();
  }
  if (runs.replica_degree > 1 && planned.TotalDegree() == runs.TotalDegree()) {
    out.replicated.push_back(
        absl::StrCat(o.name, " (", o.type, "): planned ", Describe(planned), ", runs ", Describe(runs)));
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(
      absl::StrCat(OpWhat(o), ": planned ", Describe(planned), "; the executor runs ", Describe(runs)));
}

// Per plan op (by name) its config; every op of [begin, end) of the order
// must be there.
absl::Status RequireAll(const Graph& g, const Positions& p, int begin, int end,
                        const std::map<std::string, PlannedOp>& ops, const std::string& where) {
  for (int i = begin; i < end; ++i) {
    const graph::Op& o = g.op(p.order[i]);
    if (!ops.count(o.name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("parallel plan: ", where, " has no config for ", OpWhat(o)));
    }
  }
  return absl::OkStatus();
}

// D and M of ops [begin, end) on `devices` devices: D the data degree of
// the Linears' MatMuls (the ops the executor parallelizes; every other op
// follows them or runs replicated), which must agree; M = devices / D.
absl::StatusOr<std::pair<int, int>> Degrees(const Graph& g, const Positions& p, int begin, int end,
                                            const std::map<std::string, PlannedOp>& ops,
                                            int devices, const std::string& where) {
  const graph::Op* first = nullptr;
  int D = 0;
  for (int i = begin; i < end; ++i) {
    const graph::Op& o = g.op(p.order[i]);
    if (!IsLinearMatMul(g, o)) continue;
    const int d = ops.at(o.name).data_degree;
    if (first == nullptr) {
      first = &o;
      D = d;
    } else if (d != D) {
      return absl::FailedPreconditionError(absl::StrCat(
          where, " mixes data degrees: ", OpWhat(*first), " at ", D, ", ", OpWhat(o), " at ", d,
          "; the executor runs every Linear at one data degree (data groups x model groups)"));
    }
  }
  if (first == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("parallel plan: ", where, " has no Linear"));
  }
  if (D < 1 || devices % D != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        where, ": data degree ", D, " of ", OpWhat(*first), " does not divide its ", devices,
        " devices"));
  }
  return std::pair<int, int>{D, devices / D};
}

// Sets the kinds of the MLP Linears in [begin, end) from their planned
// configs; appends "op kind" per Linear to `names` (for messages).
absl::Status FillLinearKinds(const Graph& g, const Positions& p,
                             const std::map<std::string, PlannedOp>& ops, int begin, int end,
                             int D, int M, ParallelTrainSpec& spec,
                             std::vector<std::string>& names) {
  if (spec.transformer.has_value()) return absl::OkStatus();
  int layer = 0;
  for (int i = 0; i < static_cast<int>(p.order.size()); ++i) {
    const graph::Op& o = g.op(p.order[i]);
    if (!IsLinearMatMul(g, o)) continue;
    if (i >= begin && i < end) {
      ASSIGN_OR_RETURN(LayerParallel::Kind k, LinearKind(o, ops.at(o.name).config, D, M));
      spec.layers[layer].kind = k;
      names.push_back(absl::StrCat(o.name, " ", std::string(LayerParallelName(k))));
    }
    ++layer;
  }
  return absl::OkStatus();
}

// braid's plan for an MLP whose last Linear is a row layer may split the
// bias Add after it by rows over data and model groups (out[D*M, 1]: the
// partial output reduce-scattered by rows): the ranks then run
// loss_rows_split (parallel_train.h), when the micro-batch's rows divide
// over the model group; otherwise that Add runs replicated (listed).
void SetLossRowsSplit(const Graph& g, const Positions& p,
                      const std::map<std::string, PlannedOp>& ops, ParallelTrainSpec& spec) {
  const int M = spec.model_degree;
  if (spec.transformer.has_value() || M < 2 || spec.layers.empty() ||
      spec.layers.back().kind != LayerParallel::kRow) {
    return;
  }
  if ((spec.batch / spec.data_degree / spec.micro_batches) % M != 0) return;
  const graph::Op* last = nullptr;
  for (OpId id : p.order)
    if (IsLinearMatMul(g, g.op(id))) last = &g.op(id);
  if (last == nullptr) return;
  const std::vector<OpId>& consumers = g.tensor(last->outputs[0]).consumers;
  if (consumers.size() != 1) return;
  auto it = ops.find(g.op(consumers[0]).name);
  if (it == ops.end()) return;
  const ParallelConfig& c = it->second.config;
  ParallelConfig want;
  want.output_degrees.assign(c.output_degrees.size(), 1);
  if (want.output_degrees.empty()) return;
  want.output_degrees[0] = spec.data_degree * M;
  spec.loss_rows_split = c == want;
}

// The spec's own checks (sizes that divide, ...), in the plan's terms.
absl::Status Validate(const ParallelTrainSpec& spec, const std::vector<std::string>& linears) {
  if (absl::Status s = ValidateParallelTrainSpec(spec); !s.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the plan (", spec.data_degree, " x ", spec.model_degree,
        linears.empty() ? std::string() : absl::StrCat("; Linears ", absl::StrJoin(linears, ", ")),
        ") maps to a spec the executor refuses: ", s.message()));
  }
  return absl::OkStatus();
}

// Verifies ops [begin, end) of `g` (positions) against the executed configs
// of `local` (the stage's own spec, or the whole spec without a pipeline).
// A non-last MLP stage ends with the Relu after its last Linear, which the
// stage's own graph lacks: the Relu follows its input, so it runs the config
// of the op before it.
absl::Status VerifyRange(const Graph& g, const Positions& p, int begin, int end,
                         const ParallelTrainSpec& local,
                         const std::map<std::string, PlannedOp>& ops, PlannedSpec& out) {
  ASSIGN_OR_RETURN(Graph lg, ParallelTrainForwardGraph(local));
  ASSIGN_OR_RETURN(auto executed, ExecutedConfigs(local, lg));
  ASSIGN_OR_RETURN(std::vector<OpId> lorder, lg.TopologicalOrder());
  const int n = static_cast<int>(lorder.size());
  for (int i = begin; i < end; ++i) {
    const graph::Op& o = g.op(p.order[i]);
    int k = i - begin;
    if (k == n && o.kind == OpKind::kRelu && !local.transformer.has_value()) k = n - 1;
    // Same op type and output shape (dim 0 aside: a stage runs at the
    // micro-batch's rows) as the executor's op at that position.
    auto same = [&](const graph::Op& e) {
      std::vector<int64_t> a = g.tensor(o.outputs[0]).shape, b = lg.tensor(e.outputs[0]).shape;
      if (a.empty() || b.empty()) return a == b && e.type == o.type;
      a[0] = b[0] = 0;
      return a == b && e.type == o.type;
    };
    if (k >= n || (k == i - begin && !same(lg.op(lorder[k])))) {
      return absl::InternalError(absl::StrCat("parallel plan: ", OpWhat(o),
                                              " has no counterpart in the executor's graph"));
    }
    RETURN_IF_ERROR(Check(o, ops.at(o.name).config, executed.at(lorder[k]), out));
  }
  return absl::OkStatus();
}

absl::StatusOr<PlannedSpec> FromPipeline(const Graph& g, const nlohmann::json& par,
                                         const ParallelTrainSpec& model, const Positions& p,
                                         int ranks) {
  const nlohmann::json& stages = par["stage_plan"];
  const int S = par.value("stages", 0);
  if (!stages.is_array() || S < 2 || static_cast<int>(stages.size()) != S) {
    return absl::InvalidArgumentError(
        "parallel plan: a pipeline needs \"stages\" >= 2 and one \"stage_plan\" entry per stage");
  }
  if (ranks % S != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("parallel plan: ", S, " stages do not divide ", ranks, " ranks"));
  }
  const int devices = ranks / S;
  ASSIGN_OR_RETURN(std::vector<int> starts, LayerStarts(model, g, p));
  PlannedSpec out;
  out.spec = model;
  ParallelTrainSpec& spec = out.spec;
  spec.ranks = ranks;
  spec.pipeline_stages = S;
  spec.micro_batches = par.value("micro_batches", 1);
  const std::string schedule = par.value("schedule", std::string("1F1B"));
  if (schedule == "1F1B") {
    spec.schedule = ParallelTrainSpec::PipelineSchedule::k1F1B;
  } else if (schedule == "GPipe") {
    spec.schedule = ParallelTrainSpec::PipelineSchedule::kGpipe;
  } else {
    return absl::UnimplementedError(absl::StrCat(
        "parallel plan: pipeline schedule '", schedule, "': the executor runs 1F1B and GPipe"));
  }
  // Stage bounds in topological positions and layers.
  std::vector<int> begin_pos;
  std::vector<std::map<std::string, PlannedOp>> stage_ops;
  int D = 0, M = 0;
  for (int k = 0; k < S; ++k) {
    const nlohmann::json& st = stages[k];
    const std::string first = st.value("first_op", std::string());
    auto it = p.by_name.find(first);
    if (it == p.by_name.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("parallel plan: stage ", k, " starts at op '", first, "', which the model lacks"));
    }
    const int pos = p.pos.at(it->second);
    auto layer = std::find(starts.begin(), starts.end(), pos);
    // An MLP stage may start with the ReLU ending the previous Linear (the
    // cut between its bias Add and the ReLU): the next Linear starts right
    // after it.
    bool relu_first = false;
    if (layer == starts.end() && !model.transformer && k > 0 &&
        g.op(it->second).kind == OpKind::kRelu) {
      layer = std::find(starts.begin(), starts.end(), pos + 1);
      relu_first = layer != starts.end();
    }
    if (layer == starts.end()) {
      return absl::UnimplementedError(absl::StrCat(
          "parallel plan: stage ", k, " starts at ", OpWhat(g.op(it->second)),
          ", inside a ", model.transformer ? "transformer block" : "Linear layer",
          "; the executor cuts stages only between ",
          model.transformer ? "blocks"
                            : "Linear layers (before a MatMul, or before the ReLU after a "
                              "Linear's bias Add)"));
    }
    spec.stage_begin.push_back(static_cast<int>(layer - starts.begin()));
    spec.stage_relu_first.push_back(relu_first);
    begin_pos.push_back(pos);
    ASSIGN_OR_RETURN(auto ops, ReadOps(st.value("ops", nlohmann::json()), absl::StrCat("stage ", k)));
    stage_ops.push_back(std::move(ops));
  }
  if (begin_pos[0] != 0) {
    return absl::InvalidArgumentError("parallel plan: stage 0 does not start at the model's first op");
  }
  const std::vector<bool> relu_first = spec.stage_relu_first;
  if (std::find(relu_first.begin(), relu_first.end(), true) == relu_first.end())
    spec.stage_relu_first.clear();  // no stage starts with a ReLU
  begin_pos.push_back(static_cast<int>(p.order.size()));
  for (int k = 0; k < S; ++k) {
    if (begin_pos[k + 1] <= begin_pos[k]) {
      return absl::InvalidArgumentError(
          absl::StrCat("parallel plan: stage ", k + 1, " does not start after stage ", k));
    }
    const std::string where = absl::StrCat("stage ", k);
    RETURN_IF_ERROR(RequireAll(g, p, begin_pos[k], begin_pos[k + 1], stage_ops[k], where));
    ASSIGN_OR_RETURN(auto dm, Degrees(g, p, begin_pos[k], begin_pos[k + 1], stage_ops[k], devices,
                                      absl::StrCat("the plan's ", where)));
    const auto [d, m] = dm;
    if (k == 0) {
      D = d;
      M = m;
    } else if (d != D || m != M) {
      return absl::UnimplementedError(absl::StrCat(
          "parallel plan: stage ", k, " runs at data x model degree ", d, " x ", m, ", stage 0 at ",
          D, " x ", M, "; the executor runs every stage at one data x model degree"));
    }
  }
  spec.data_degree = D;
  spec.model_degree = M;
  std::vector<std::string> linears;
  for (int k = 0; k < S; ++k) {
    const std::string where = absl::StrCat("stage ", k);
    // An op of the stage's list outside the stage's range is a plan that cut
    // elsewhere than its first ops say.
    for (const auto& [name, po] : stage_ops[k]) {
      auto it = p.by_name.find(name);
      const int pos = it == p.by_name.end() ? -1 : p.pos.at(it->second);
      if (pos < begin_pos[k] || pos >= begin_pos[k + 1]) {
        return absl::InvalidArgumentError(
            absl::StrCat("parallel plan: ", where, " lists op '", name, "', which is not in it"));
      }
    }
    RETURN_IF_ERROR(
        FillLinearKinds(g, p, stage_ops[k], begin_pos[k], begin_pos[k + 1], D, M, spec, linears));
  }
  SetLossRowsSplit(g, p, stage_ops[S - 1], spec);
  RETURN_IF_ERROR(Validate(spec, linears));
  // Each stage as the ranks run it: its layers at the micro-batch's rows
  // (what the plan's stage DP saw), on D x M ranks.
  const int layers = model.transformer ? model.transformer->blocks : static_cast<int>(model.layers.size());
  for (int k = 0; k < S; ++k) {
    ParallelTrainSpec local = spec;
    local.pipeline_stages = 1;
    local.stage_begin.clear();
    // The stage's own model starts with the ReLU the stage runs first.
    local.stage_relu_first.clear();
    if (relu_first[k]) local.stage_relu_first = {true};
    local.micro_batches = 1;
    local.loss_rows_split = spec.loss_rows_split && k == S - 1;
    local.ranks = D * M;
    local.batch = spec.batch / spec.micro_batches;
    const int lb = spec.stage_begin[k], le = k + 1 < S ? spec.stage_begin[k + 1] : layers;
    if (local.transformer) {
      local.transformer->blocks = le - lb;
    } else {
      local.widths.assign(spec.widths.begin() + lb, spec.widths.begin() + le + 1);
      local.layers.assign(spec.layers.begin() + lb, spec.layers.begin() + le);
    }
    RETURN_IF_ERROR(VerifyRange(g, p, begin_pos[k], begin_pos[k + 1], local, stage_ops[k], out));
  }
  return out;
}

}  // namespace

absl::StatusOr<ParallelConfig> ParseParallelConfig(const std::string& text) {
  auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrCat(
        "parallel config '", text, "': expected out[d0,d1,...] optionally followed by redN and repN"));
  };
  std::vector<std::string> parts = absl::StrSplit(text, ' ', absl::SkipEmpty());
  if (parts.empty()) return bad();
  absl::string_view out = parts[0];
  if (!absl::ConsumePrefix(&out, "out[") || !absl::ConsumeSuffix(&out, "]")) return bad();
  ParallelConfig c;
  for (absl::string_view d : absl::StrSplit(out, ',')) {
    int v = 0;
    if (!absl::SimpleAtoi(d, &v) || v < 1) return bad();
    c.output_degrees.push_back(v);
  }
  for (size_t i = 1; i < parts.size(); ++i) {
    absl::string_view s = parts[i];
    int* field = absl::ConsumePrefix(&s, "red")   ? &c.reduction_degree
                 : absl::ConsumePrefix(&s, "rep") ? &c.replica_degree
                                                  : nullptr;
    if (field == nullptr || !absl::SimpleAtoi(s, field) || *field < 1) return bad();
  }
  return c;
}

absl::StatusOr<ParallelTrainSpec> ExecutableModel(const Graph& g) {
  std::vector<TensorId> inputs;
  for (TensorId t = 0; t < g.num_tensors(); ++t)
    if (g.tensor(t).role == TensorRole::kInput) inputs.push_back(t);
  if (inputs.size() != 1) return NotExecutable(g, absl::StrCat("has ", inputs.size(), " inputs"));
  const std::vector<int64_t>& x = g.tensor(inputs[0]).shape;
  ParallelTrainSpec s;
  s.steps = 1;
  s.lr = 1e-3;
  s.seed = 11;
  ASSIGN_OR_RETURN(std::vector<OpId> order, g.TopologicalOrder());
  if (x.size() == 2) {
    s.batch = x[0];
    s.widths = {x[1]};
    for (OpId id : order) {
      const graph::Op& o = g.op(id);
      if (!IsLinearMatMul(g, o)) continue;
      s.widths.push_back(g.tensor(o.inputs[1]).shape[1]);
      s.layers.push_back({LayerParallel::kData});
    }
    if (s.layers.empty()) return NotExecutable(g, "has a 2-D input but no MatMul with a weight");
  } else if (x.size() == 3) {
    s.batch = x[0];
    TransformerShape t{.d_model = x[2], .seq = x[1]};
    int norms = 0;
    for (OpId id : order) {
      const graph::Op& o = g.op(id);
      norms += o.kind == OpKind::kLayerNormalization;
      const std::vector<int64_t>& out = g.tensor(o.outputs[0]).shape;
      if (o.kind == OpKind::kReshape && out.size() == 4 && t.heads == 0) t.heads = out[2];
      if (IsLinearMatMul(g, o) && t.d_ff == 0 && g.tensor(o.inputs[1]).shape[1] != t.d_model)
        t.d_ff = g.tensor(o.inputs[1]).shape[1];
    }
    if (t.d_ff == 0) t.d_ff = t.d_model;
    t.blocks = norms / 2;
    if (t.blocks == 0 || t.heads == 0) {
      return NotExecutable(g, "has a 3-D input but no LayerNorm pair or head reshape");
    }
    s.transformer = t;
  } else {
    return NotExecutable(g, absl::StrCat("has a ", x.size(), "-D input"));
  }
  absl::StatusOr<Graph> built = ParallelTrainForwardGraph(s);
  if (!built.ok()) {
    return NotExecutable(g, absl::StrCat("does not give a valid executor spec (",
                                         built.status().message(), ")"));
  }
  ASSIGN_OR_RETURN(std::string want, graph::FingerprintHex(*built));
  ASSIGN_OR_RETURN(std::string have, graph::FingerprintHex(g));
  if (want != have) {
    return NotExecutable(
        g, absl::StrCat("differs from the executor's ",
                        s.transformer ? "transformer" : "MLP", " of the same sizes (fingerprint ",
                        have, ", the executor's ", want, ")"));
  }
  return s;
}

namespace {

absl::StatusOr<PlannedSpec> SpecFromPlan(const Graph& g, const nlohmann::json& par, int ranks) {
  if (!par.is_object()) return absl::InvalidArgumentError("parallel plan: \"parallel\" is not an object");
  const int degree = par.value("degree", 0);
  if (degree != ranks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "parallel plan: planned for ", degree, " devices, asked to run on ", ranks, " ranks"));
  }
  if (par.contains("substitutions")) {
    return absl::UnimplementedError(absl::StrCat(
        "parallel plan ", par.value("strategy", std::string("?")),
        " rewrote the graph (", par["substitutions"].dump(),
        "); the executor runs the submitted model, not a rewritten one"));
  }
  if (par.contains("strand_blocks")) {
    return absl::UnimplementedError(absl::StrCat(
        "parallel plan ", par.value("strategy", std::string("?")),
        " runs strands side by side on groups of devices (", par["strand_blocks"].dump(),
        "); the ranks run one program on every rank"));
  }
  ASSIGN_OR_RETURN(ParallelTrainSpec model, ExecutableModel(g));
  ASSIGN_OR_RETURN(Positions p, MakePositions(g));
  PlannedSpec out;
  if (par.contains("stage_plan")) {
    ASSIGN_OR_RETURN(out, FromPipeline(g, par, model, p, ranks));
  } else {
    ASSIGN_OR_RETURN(auto ops, ReadOps(par.value("ops", nlohmann::json()), "the plan"));
    RETURN_IF_ERROR(RequireAll(g, p, 0, g.num_ops(), ops, "the plan"));
    ASSIGN_OR_RETURN(auto dm, Degrees(g, p, 0, g.num_ops(), ops, ranks, "the plan"));
    const auto [D, M] = dm;
    out.spec = model;
    out.spec.ranks = ranks;
    out.spec.data_degree = D;
    out.spec.model_degree = M;
    std::vector<std::string> linears;
    RETURN_IF_ERROR(FillLinearKinds(g, p, ops, 0, g.num_ops(), D, M, out.spec, linears));
    SetLossRowsSplit(g, p, ops, out.spec);
    RETURN_IF_ERROR(Validate(out.spec, linears));
    RETURN_IF_ERROR(VerifyRange(g, p, 0, g.num_ops(), out.spec, ops, out));
  }
  if (par.contains("overlap") && par["overlap"].is_array()) {
    for (const nlohmann::json& o : par["overlap"]) {
      const std::string method = o.value("method", std::string("none"));
      if (method == "none") continue;
      out.not_executed.push_back(absl::StrCat(
          o.value("collective", std::string("?")), " (", o.value("pattern", std::string("?")),
          "): planned overlap method ", method, ", the ranks run the plain collective"));
    }
  }
  out.strategy = par.value("strategy", std::string());
  return out;
}

}  // namespace

absl::StatusOr<PlannedSpec> ParallelSpecFromPlan(const Graph& global_forward,
                                                 const nlohmann::json& parallel_section,
                                                 int ranks) {
  try {
    return SpecFromPlan(global_forward, parallel_section, ranks);
  } catch (const nlohmann::json::exception& e) {  // a field of the wrong JSON type
    return absl::InvalidArgumentError(absl::StrCat("parallel plan: malformed: ", e.what()));
  }
}

std::string PlannedSpecSummary(const PlannedSpec& p) {
  std::vector<std::string> kinds;
  for (const LayerParallel& l : p.spec.layers) kinds.push_back(std::string(LayerParallelName(l.kind)));
  return absl::StrCat(
      p.spec.data_degree, " x ", p.spec.model_degree,
      p.spec.pipeline_stages > 1 ? absl::StrCat(", ", p.spec.pipeline_stages, " stages x ",
                                                p.spec.micro_batches, " micro-batches")
                                 : std::string(),
      kinds.empty() ? std::string() : absl::StrCat(", ", absl::StrJoin(kinds, ",")),
      p.spec.loss_rows_split ? ", rows split into the loss" : "",
      p.replicated.empty() ? std::string() : absl::StrCat(", ", p.replicated.size(), " ops replicated"));
}

}  // namespace braid::client
