// Predicted iteration time of the parallel training that parallel_train.h
// executes, from braid's own parallelization pass and measured costs.
//
// The forward graph (ParallelTrainForwardGraph) is the model as PyTorch
// exports it: per Linear MatMul(x, W[in, out]) + Add(bias) (+ Relu); per
// transformer block LayerNorm, Q/K/V Linears, Reshape/Transpose into heads,
// MatMul(Q, Kᵀ), Scale, Softmax, MatMul(P, V), Transpose/Reshape back, the
// output Linear, residual Add, LayerNorm, W1, Relu, W2, residual Add.
//
// ExecutedConfigs gives every op the search::ParallelConfig the ranks really
// run: Linears per the spec (data: out[D, 1]; column: out[.., M]; row:
// reduction M), attention head-parallel (dim 1 of [B, H, S, *]) under
// Megatron, and everything else following its input; an op whose input the
// ranks hold replicated in the model group (after a row layer's all-reduce:
// bias, residual, LayerNorm, loss) runs replicated (replica_degree M). A row
// layer feeding a row layer reduce-scatters on features: its bias Add and
// ReLU run out[D, M] (the layout transition is priced as the ReduceScatter,
// its backward as the AllGather); with loss_rows_split the last row layer's
// bias Add runs out[D*M, 1] (ReduceScatter by rows; backward AllGather plus
// the bias gradient's AllReduce over the model group) and the loss reads
// rows split over both groups. A stage with stage_relu_first starts with
// that ReLU (its own graph's first op, priced in that stage).
// ForcedStrategy turns that into ParallelizeOptions: the filter keeps exactly
// the executed config of every op whose config the DP can express (Unity's
// candidates never replicate a computation, so the replicated ops keep their
// candidates and the DP picks).
//
// PredictParallelTraining runs ParallelizeForward with it, checks that the DP
// chose the executed configs, and prices one step of what the ranks run:
//  - compute: per op the cost model's time of its shard (OpTimeUnderConfig;
//    measured when the profile store has the shard's key) plus its backward,
//    a measured profile under op type "<type>.backward" (ProfileExecutedOps
//    writes both, timing the LibTorch calls parallel_train.cc makes) or,
//    without one, backward_factor x forward (the DP's assumption, a prior);
//  - communication: every layout transition of the executed plan, forward
//    (producer's output -> consumer's input, LayoutTransition/TransitionComm)
//    and backward (the consumers' input gradients, summed locally where their
//    layouts agree, -> the producer's output layout; an input gradient is a
//    partial sum over the ranks that replicate the input but not the op),
//    each collective at CostModel::CollectiveTime (measured once `braid
//    profile comm` / RunCollectiveBench has fitted that collective and group);
//  - per step: the loss (its input brought to the loss's layout) and the
//    update: one flat all-reduce of every gradient over the data group plus
//    the pack / average / SGD kernels, measured (op types kLossOp, kUpdateOp).
// Each part says whether its costs were measured or priors.
//
// Pipelines (pipeline_stages > 1): every stage is priced as above at the
// micro-batch's rows (its own graph and plan), giving per-micro-batch
// forward and backward times; search::SimulatePipeline runs them through the
// spec's schedule (1F1B or GPipe) with the stage-to-stage transfer priced as
// a 2-rank Broadcast of the boundary activation (the very call the ranks
// make: parallel_train.cc PeerLink); the slowest stage's gradient
// sync, update and micro-batch accumulations follow.
//
//   ParallelTrainSpec s = ...;  // data_degree 1, model_degree 2: Megatron
//   ClusterSpec c = *WithRanks(*LoadCluster("cpu-local"), 2);
//   ClusterCostModel cm(c, store.get(), nullptr, *CommModelFromStore(c, store.get()));
//   RETURN_IF_ERROR(ProfileExecutedOps(s, c, *store));  // LibTorch, this thread
//   absl::StatusOr<ParallelPrediction> p = PredictParallelTraining(s, c, cm, {.store = store.get()});
//   p->step_s;  p->compute.s;  p->compute.source;  p->comm.s;  p->dp_time_s;
#ifndef BRAID_WORKER_PARALLEL_PREDICT_H_
#define BRAID_WORKER_PARALLEL_PREDICT_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "costmodel/cluster.h"
#include "costmodel/cost_model.h"
#include "costmodel/profile_store.h"
#include "graph/graph.h"
#include "search/parallel_config.h"
#include "search/parallelize.h"
#include "worker/parallel_train.h"

namespace braid::worker {

// Profile-store op types of the parts ProfileExecutedOps measures besides the
// graph's ops (signature: the shapes, see parallel_predict.cc).
inline constexpr char kBackwardSuffix[] = ".backward";
inline constexpr char kLossOp[] = "ParallelTrain.Loss";
inline constexpr char kUpdateOp[] = "ParallelTrain.Update";
inline constexpr char kAccumulateOp[] = "ParallelTrain.Accumulate";  // per extra micro-batch
// The ranks' timing noise, as ProfileExecutedOps measures it on its kernels:
// median_s holds the variance a rank's compute time gains per second of
// compute (s²/s). Signature kNoiseSignature.
inline constexpr char kNoiseOp[] = "ParallelTrain.Noise";
inline constexpr char kNoiseSignature[] = "variance_per_second";

// The forward graph braid's pass sees for the spec's model (global shapes,
// batch = spec.batch). InvalidArgument for an invalid spec; Unimplemented for
// a pipeline (one graph per stage, built inside PredictParallelTraining).
absl::StatusOr<graph::Graph> ParallelTrainForwardGraph(const ParallelTrainSpec& spec);

// The config every forward op of `g` (ParallelTrainForwardGraph(spec)) runs
// under on the ranks, at total degree spec.ranks.
absl::StatusOr<std::map<graph::OpId, search::ParallelConfig>> ExecutedConfigs(
    const ParallelTrainSpec& spec, const graph::Graph& g);

// ParallelizeOptions whose filter forces ExecutedConfigs (see the top);
// degree = data_degree x model_degree, memory not checked. The options hold a copy of the
// configs; `g` must be the graph they are used with.
absl::StatusOr<search::ParallelizeOptions> ForcedStrategy(const ParallelTrainSpec& spec,
                                                          const graph::Graph& g);

// One part of a prediction: seconds and where its costs came from.
struct PredictedPart {
  double s = 0;
  double measured_s = 0;  // the share costed from measurements
  // "measured", "prior" or "mixed (x% measured)".
  std::string source() const;
};

struct ParallelPrediction {
  double step_s = 0;  // compute + comm + grad_sync + step + skew
  PredictedPart compute;  // forward + backward kernels
  PredictedPart forward;  // of which forward
  PredictedPart comm;     // activation / gradient collectives (not the gradient sync)
  PredictedPart grad_sync;  // the data group's flat gradient all-reduce
  PredictedPart step;     // loss and update kernels
  // Waiting at the synchronizing collectives for the slowest rank: a step
  // waits at every collective of its ranks for the last to arrive, so it
  // takes the maximum of the ranks' compute between two collectives, not
  // the mean a sum of kernel means gives. With a rank's compute noise of
  // variance kappa per second (kNoiseOp) and the stage's compute C spread
  // over its n synchronizing collectives (model-group collectives and the
  // gradient all-reduce), each of G ranks: n x E[max of G standard normals]
  // x sqrt(kappa C / n) = e_G sqrt(kappa C n). 0 without a noise profile and
  // for pipelines (their schedule couples stages by their transfers).
  PredictedPart skew;
  double dp_time_s = 0;   // ParallelizeForward's own cost of the forced plan
  search::ParallelizeResult plan;  // the DP's plan (forced)
  // Ops the ranks run replicated in the model group, which the DP (no
  // replica candidates) placed as it liked; they are priced as run.
  int replicated_ops = 0;
  std::vector<std::string> notes;  // expressible ops the DP placed otherwise
};

struct PredictOptions {
  // Backward kernel profiles (op type "<type>.backward") and the per-step
  // parts; null: backward = backward_factor x forward, no per-step part.
  const costmodel::ProfileStore* store = nullptr;
  // Device kind of those profiles; empty: the cluster's device kind.
  std::string device_kind;
  double backward_factor = 2.0;
};

// InvalidArgument for an invalid spec or spec.ranks != cluster.num_ranks;
// errors of ParallelizeForward.
absl::StatusOr<ParallelPrediction> PredictParallelTraining(const ParallelTrainSpec& spec,
                                                           const costmodel::ClusterSpec& cluster,
                                                           costmodel::CostModel& cm,
                                                           const PredictOptions& options = {});

// Times, on this thread with LibTorch (one intra-op thread), the kernels the
// ranks run for every op shard of the executed plan (forward and backward),
// the loss and the update, and writes them to `store` under `device_kind`
// (empty: the cluster's). Overwrites earlier values of the same keys.
// The mean over `passes` passes over every kernel of `repetitions` samples
// each (the store's median_s field holds it, as for the in-graph profiler). On cpu-local the ranks compute side by side, so callers should run
// a second process on the other core meanwhile (braid-parallel-measure
// does): a kernel beside another ran about 2x slower than alone there.
struct ExecutedProfileOptions {
  std::string device_kind;
  int warmup = 2;
  int passes = 5;
  int repetitions = 4;
};
absl::Status ProfileExecutedOps(const ParallelTrainSpec& spec,
                                const costmodel::ClusterSpec& cluster,
                                costmodel::ProfileStore& store,
                                const ExecutedProfileOptions& options = {});

// The profile-store keys ProfileExecutedOps writes and PredictParallelTraining
// reads besides the forward shards' own (which are the cost model's keys):
// per op of the graph, in topological order, its forward and backward key;
// then the loss, the update, the accumulation (micro-batches > 1) and the
// noise (kNoiseOp). `part`: "forward", "backward", "loss", "update",
// "accumulate", "noise".
struct ExecutedKey {
  costmodel::ProfileKey key;
  std::string part;
  graph::OpId op = graph::kNoId;  // kNoId for loss and update
};
absl::StatusOr<std::vector<ExecutedKey>> ExecutedProfileKeys(const ParallelTrainSpec& spec,
                                                             const std::string& device_kind);

// Whether `store` lacks any of ExecutedProfileKeys(spec, device_kind): the
// spec's kernels still need profiling.
absl::StatusOr<bool> LacksExecutedProfiles(const ParallelTrainSpec& spec,
                                           const std::string& device_kind,
                                           const costmodel::ProfileStore& store);

// Op times clocked inside real training steps of `spec` (RunParallelTraining
// with ParallelTrainOptions::op_clocks; `step_clocks` holds the timed steps'
// ParallelTrainResult::op_clocks), as profile samples under the keys
// PredictParallelTraining reads (ExecutedProfileKeys): an op's forward or
// backward per call (its step total over micro_batches), the loss per
// micro-batch, the update per step, the accumulation per extra micro-batch;
// a key several ops share (Q, K and V; equal blocks or layers) gets their
// mean. Written into a costmodel::OverlayProfileStore over the profiled
// store, they price the plan with op costs where the ops really ran
// (reading what their producers just wrote, beside the other ranks), the
// collectives staying the benchmark's.
struct InGraphTimes {
  std::vector<std::pair<costmodel::ProfileKey, costmodel::ProfileSample>> samples;
  // Per step, the busiest stage's clocked time: every op's, the loss's and the
  // update's, and of that the executor's own work that no graph op accounts
  // for (op_clock.h kExecutorClock: slicing a replicated activation, freeing
  // a micro-batch's activations). The prediction does not include it.
  double clocked_s = 0;
  double executor_s = 0;
  // Keys of ops whose clock never ran in the steps (they keep the profiled
  // store's time), by op name.
  std::vector<std::string> unclocked;
};
absl::StatusOr<InGraphTimes> InGraphOpTimes(
    const ParallelTrainSpec& spec, const std::vector<std::map<std::string, double>>& step_clocks,
    const std::string& device_kind);
// Writes every sample of `t` to `store` (an overlay to price with, or the
// profile store to keep them).
absl::Status PutInGraphTimes(const InGraphTimes& t, costmodel::ProfileStore& store);

// The collective calls (collective, bytes, group) one step of the executed
// plan makes, as PredictParallelTraining costs them (for the comm benchmark's
// sizes and for tests).
struct PlannedCollective {
  costmodel::Collective collective;
  int64_t bytes = 0;
  int group_size = 0;
  std::string what;  // "fwd <tensor>", "bwd <tensor>", "loss", "grad sync"
};
absl::StatusOr<std::vector<PlannedCollective>> PlannedCollectives(const ParallelTrainSpec& spec);

}  // namespace braid::worker

#endif  // BRAID_WORKER_PARALLEL_PREDICT_H_
