// The plan braid chooses is the plan that runs: a `braid plan --parallel`
// plan file's "parallel" section (search::ParallelPlanJson) turned into the
// ParallelTrainSpec that braid-parallel-rank executes (parallel_train.h),
// and checked op by op against what the ranks would really run.
//
// The executor trains two model families, so the plan's model must be one of
// them, op for op: an MLP (MatMul(x, W[in, out]) + Add(bias), ReLU between
// layers) or a stack of pre-LN transformer blocks, exactly as
// ParallelTrainForwardGraph builds them (braid-parallel-model
// --write-model FILE writes that graph in braid's text format for `braid
// plan FILE --parallel`). ExecutableModel recognizes the family and its
// sizes from the graph and proves it by fingerprint.
//
// ParallelSpecFromPlan then maps the plan onto the spec:
//  - degrees: the plan's data degree D and model degree M = degree / D (per
//    stage for a pipeline: every stage must use the same D x M);
//  - MLP Linears: each MatMul's planned config out[D, M] is a column layer,
//    out[D, 1] red M a row layer, out[D, 1] with M = 1 a data layer; any
//    other config (a data split at another degree than the plan's D, a
//    reduction split without M, ...) is refused, naming the op. A row layer
//    followed by a row layer reduce-scatters its output on features (its
//    bias Add and ReLU out[D, M], as braid plans them); a last row layer
//    whose bias Add is planned out[D*M, 1] (rows split over both groups)
//    sets loss_rows_split (parallel_train.h);
//  - transformers: Megatron on the model group (the executor's only tensor
//    plan for them), data parallelism over D;
//  - pipelines: stage_begin from each stage's first op, which must start a
//    Linear layer (MLP) or a block (transformer), or (MLP) be the ReLU right
//    before a Linear's MatMul, i.e. the cut falls between the previous
//    Linear's bias Add and its ReLU: stage_relu_first[s] is then set and the
//    stage_begin entry is the Linear after that ReLU; micro-batches and the
//    1F1B / GPipe schedule from the plan.
// and VERIFIES: ExecutedConfigs (parallel_spec_graph.h) of the spec (per stage
// for a pipeline: the stage's own spec, starting with its ReLU where
// stage_relu_first says so) must equal the plan's config for every op. The one
// allowed difference is an op the ranks run replicated in the model group
// (after a row layer's all-reduce: bias, ReLU, residual, LayerNorm), which
// Unity's config space cannot express (its candidates never replicate a
// computation, see parallel_spec_graph.h ForcedStrategy): those are listed in
// `replicated`, with both configs, never hidden. Overlap decompositions of
// tensor-parallel collectives (the plan's "overlap", search/overlap_plan.h)
// are a known limit of these ranks: they run the plain collective, and each
// such entry is listed in `not_executed` (overlapped tensor-parallel
// training runs on worker/overlap_train.h's ranks and through the
// activator). Everything else that differs is FailedPrecondition naming the
// op, its type, its planned config and what the executor runs; a model or
// plan shape the executor has no counterpart for is Unimplemented.
//
//   ASSIGN_OR_RETURN(graph::Graph g, graph::LoadModel("mlp.txt", {}, &warnings));
//   nlohmann::json plan = nlohmann::json::parse(std::ifstream("plan.json"));
//   ASSIGN_OR_RETURN(PlannedSpec p, ParallelSpecFromPlan(g, plan["parallel"], 2));
//   p.spec.steps = 10;
//   absl::StatusOr<ParallelTrainResult> r = RunParallelTraining(p.spec, {});
#ifndef BRAID_CLIENT_PARALLEL_PLAN_EXEC_H_
#define BRAID_CLIENT_PARALLEL_PLAN_EXEC_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "costmodel/cluster.h"
#include "graph/graph.h"
#include "nlohmann/json.hpp"
#include "search/parallel_config.h"
#include "client/parallel_spec_graph.h"
#include "worker/parallel_train.h"

namespace braid::client {

// The model family and sizes of `global_forward` when it is
// ParallelTrainForwardGraph of some spec (same fingerprint: op types,
// attributes, shapes, edges): that spec with every Linear data-parallel,
// one rank, batch = the graph's batch, steps 1, lr 1e-3, seed 11.
// Unimplemented otherwise, saying what the executor runs.
absl::StatusOr<ParallelTrainSpec> ExecutableModel(const graph::Graph& global_forward);

// "out[1,8]", "out[2,1] red2", "out[1,1] rep2" (search::ParallelConfigString)
// back to the config; InvalidArgument naming the text otherwise.
absl::StatusOr<search::ParallelConfig> ParseParallelConfig(const std::string& text);

struct PlannedSpec {
  ParallelTrainSpec spec;  // steps, lr and seed as ExecutableModel sets them
  std::string strategy;    // the plan's row ("data_parallel", "braid", "pipeline:2", ...)
  int verified_ops = 0;    // ops whose planned config the ranks run exactly
  // Ops the ranks run replicated in the model group where the plan split
  // them: "op (type): planned X, runs Y".
  std::vector<std::string> replicated;
  // Overlap decompositions the plan chose ("overlap" entries whose method is
  // not none): "collective (pattern): planned method, runs none".
  std::vector<std::string> not_executed;
};

// See the file comment. `parallel_section` is the plan file's "parallel"
// object; `ranks` must equal its degree (InvalidArgument otherwise).
absl::StatusOr<PlannedSpec> ParallelSpecFromPlan(const graph::Graph& global_forward,
                                                 const nlohmann::json& parallel_section,
                                                 int ranks);

// What the ranks run for `p`: "D x M[, S stages x B micro-batches][, layer
// kinds][, N ops replicated]".
std::string PlannedSpecSummary(const PlannedSpec& p);

}  // namespace braid::client

#endif  // BRAID_CLIENT_PARALLEL_PLAN_EXEC_H_
