// The parallelization pass: per-op parallel configurations of a forward graph
// chosen jointly with Unity's machine-mapping DP (search/machine_mapping.h),
// costed on the links each collective's group really uses.
//
// Every forward op becomes a leaf of the DP with its candidate configs
// (search/parallel_config.h) at total degree = all devices. A tensor read by
// several ops also gets a fan-out leaf right after its producer, whose
// choices are the input layouts its readers may need: the producer pays one
// transition to it and each reader one from it, so the AllGather feeding Q,
// K and V is paid once (Unity's PCG has one Combine/Replicate there). The
// series decomposition is a left-deep chain in topological order: the split
// before leaf k carries every tensor leaf k reads from earlier leaves (so a
// residual is moved exactly once, at its consumer). Leaves stay live until
// their last reader, and the DP enumerates the live leaves' placements, so
// the candidates are kept small (ParallelizeOptions::max_model_dims). The
// chain is solved as a frontier DP (one state per combination of the live
// leaves' configs, movement costs tabulated per edge and config pair): the
// same minimum FindOptimalMachineMapping finds on that series tree, where
// every op spans all devices, without copying each prefix's placements
// through every combination (BERT-Large at 24 devices: about 1 s instead of
// over 10 minutes; ResNeXt-50 at 48: see BENCHMARKS.md).
//
// Parallel splits (Unity §5.2) for independent strands (IndependentStrands:
// chains fed only by graph inputs and their own weights, meeting at one op,
// such as DLRM's embedding bags): each block is also solved as one DP node
// whose choices are "side by side on groups of q devices" (each strand's
// own chain DP at degree q on the group's links; strands dealt to the
// degree / q groups longest first; the busiest group's time), and whose
// edge to the sink is one AllToAll over all the devices moving every
// strand's output to the sink's layout (RedistributeTime). Both solutions
// are kept per run (ParallelizeOptions::parallel_strands) and the faster
// wins; a side-by-side plan's strand ops carry first_device / num_devices
// and the result its StrandPlacement. Unity's other case, a parallel split
// of branches reading one activation (Inception's), is not taken: the
// input would have to move to each group first, and every op of those
// graphs stays on all the devices.
//
// Degrees -> devices. A config's data degree D (output dim 0, the batch) and
// model degree M (everything else: other output dims, the contraction split)
// map onto the 2-D view {start 0, dims [D, M], strides [M, 1]}: model groups
// are consecutive ranks (inside a node when M divides the node width), data
// groups are strided across nodes. For costing, a view dim that straddles
// node boundaries is cut into an inter-node part and an intra-node part (the
// "physical" sub-dims). A collective runs on the sub-dims of the part it
// acts on: Partition/Combine of tensor dim 0 -> the data part, any other
// dim or the replica dim -> the model part, both -> all; a weight gradient's
// AllReduce -> the data part. Each sub-dim is priced with ViewDimensionLink +
// RingCost; a group over several sub-dims is hierarchical (ReduceScatter
// inner-first, AllReduce/AllGather outer, ...), as NCCL does across nodes.
// CommModel's "first d ranks" groups are not used across nodes: a 2-rank
// data group across nodes costs NIC bandwidth, not NVLink. On a single node
// every group of n ranks is laid out as the first n, so where the cost
// model's CommModel has a fit of a (collective, group size) -- measured on
// these ranks by `braid profile comm` or a parallel measurement -- the DP
// prices that collective with the fit instead of the link priors.
//
// Costs (seconds per training iteration):
//   OpCost       = (1 + backward_factor) * forward shard time   [backward ~ 2x
//                  forward: the input and the weight gradient each cost about
//                  one forward GEMM]
//                + weight-gradient AllReduce over the data group
//   MovementCost = (1 + backward_comm_factor) * transition time   [the adjoint
//                  parallel ops of a transition move the same bytes:
//                  AllGather <-> ReduceScatter, AllReduce <-> AllReduce]
// Ops whose kind parallel_config.h cannot split, or with no split at this
// degree (BERT's [512, 1024] position table at 24 devices), get one opaque
// config: split on dim 0 of the outputs and of the activation inputs whose
// dim 0 is theirs, when the degree divides it and the kind computes rows
// independently with dim 0 untouched by its attributes (elementwise, Expand
// of equal rank, Slice/Squeeze/Reduce* off dim 0, ...), their compute time
// divided by the degree; otherwise replicated (every input and output
// copied, the whole op on every device: exact for any op, LSTM/GRU/RNN
// whose dim 0 is the sequence, unknown ops, multi-output ops without
// configs), the parameters' gradients all-reduced over every device.
// Configs that cannot run exactly (search/parallel_config.h InexactConfig)
// are never candidates; ParallelizeResult::dropped lists their kinds.
//
// Memory (ParallelizeOptions::check_memory, on by default): Unity's search
// leaves per-device memory out; this pass runs the DP once per data degree d
// dividing the degree (all ops at D = d, M = degree/d), prices each plan's
// PerDeviceMemory (search/parallel_memory.h) with options.optimizer, drops
// the plans over DeviceSpec::memory_bytes and returns the fastest that fits;
// ParallelizeResult::candidates is the table (time, memory, why dropped).
// The DP itself minimizes time only: memory is checked per plan, not per op.
//
//   ClusterSpec c = *WithRanks(*LoadCluster("dgx-h100"), 16);
//   ClusterCostModel cm(c, nullptr, nullptr, CommModel(c));
//   absl::StatusOr<ParallelizeResult> r = ParallelizeForward(g, c, cm);
//   r->time_s;  r->ops[i].config;  r->ops[i].data_degree;  r->ops[i].view;
#ifndef BRAID_SEARCH_PARALLELIZE_H_
#define BRAID_SEARCH_PARALLELIZE_H_

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "costmodel/cluster.h"
#include "costmodel/cost_model.h"
#include "costmodel/machine_view.h"
#include "graph/graph.h"
#include "graph/training.h"
#include "search/parallel_config.h"
#include "search/parallel_memory.h"
#include "search/stop_token.h"

namespace braid::search {

struct ParallelizeOptions {
  // Total degree of every op; 0: all ranks of the cluster.
  int degree = 0;
  // Backward compute time as a multiple of forward.
  double backward_factor = 2.0;
  // Backward communication of a layout transition as a multiple of forward.
  double backward_comm_factor = 1.0;
  // Most output/contraction dims besides dim 0 that may carry a degree
  // (1: the model part sits on one dim, as in Megatron). Keeps the DP's
  // boundary enumeration small; 0: no limit.
  int max_model_dims = 1;
  // Optional restriction of the candidates (e.g. pure data parallelism for a
  // baseline): a config is kept when it returns true.
  std::function<bool(const graph::Graph&, graph::OpId, const ParallelConfig&)> filter;
  // An op none of whose configs passes `filter` runs as ops without configs
  // do (replicated, or split on dim 0 where that is exact) instead of
  // leaving the run without a plan: the data-parallel row runs an op without
  // a batch dim (a position embedding) on every device, as DDP does.
  bool filtered_fallback = false;
  // Most DP states (combinations of live configs) one step may hold;
  // ResourceExhausted beyond.
  int64_t max_boundary_choices = 1 << 22;
  // Bound on the DP's frontier: the product of the candidate counts of the
  // nodes live across one split of the left-deep chain (every combination
  // is a memo entry of the prefix). Above it the run stops before the DP
  // with ResourceExhausted naming the op where the frontier peaks (a
  // branchy graph such as Inception with every data degree allowed). 0: no
  // bound.
  double max_frontier_states = 0;
  // Solve the chain with the generic FindOptimalMachineMapping instead of
  // the frontier DP: the same minimum, far slower on long chains; kept as
  // the reference the frontier DP is tested against.
  bool reference_solver = false;
  // Optimizer whose state counts towards the per-device memory.
  graph::Optimizer optimizer = graph::Optimizer::kSgdMomentum;
  // Per-device memory as a constraint (Unity leaves it out): the DP runs once
  // per data degree d dividing the degree (every op at data degree d, model
  // degree degree/d; opaque ops keep their fallback), each plan's
  // PerDeviceMemory is checked against the cluster's device memory
  // (CheckFitsDevice), and the fastest plan that fits is returned.
  // false: one unrestricted DP run, memory only reported.
  bool check_memory = true;
  // Unity's parallel graph split (§5.2) for independent strands
  // (IndependentStrands): besides running every strand on all the devices
  // one after the other, the DP may run them side by side, each on a
  // disjoint group of q devices (several strands to a group when there are
  // more strands than groups), and move their outputs to the layout of the
  // op they meet at in one AllToAll; it keeps the faster. Neo's table-wise
  // placement of DLRM's embedding tables is q = 1. Off for plans a
  // per-device graph must express (one program for every device: pipeline
  // stages, the executor's specs).
  bool parallel_strands = true;
  // The q tried; empty: every q < degree dividing the degree that keeps a
  // group inside a node or on whole nodes (q divides the node width or the
  // node width divides q).
  std::vector<int> strand_devices;
  // Passed to PerDeviceMemory: e.g. gradient accumulation over
  // `micro_batches` micro-batches, `in_flight_micro_batches` of whose
  // activations are held at once (the costs above are per iteration, i.e.
  // for the whole batch, and the gradient sync happens once either way).
  MemoryOptions memory;
  // Polled while candidates are built and in the DP's loops. Once it fires
  // a run returns StopToken::ToStatus (Cancelled or DeadlineExceeded); with
  // check_memory, ParallelizeForward returns the fastest fitting plan of the
  // data degrees finished before it (`candidates` lists only those), or the
  // stop status when none had.
  StopToken stop;
};

// The chosen parallelization of one op.
struct OpParallelization {
  graph::OpId op = graph::kNoId;
  std::string name;
  ParallelConfig config;
  bool opaque = false;       // no parallel_config.h support: the data fallback
  int data_degree = 1;       // D: degree of output dim 0
  int model_degree = 1;      // M: the rest
  costmodel::MachineView view;  // [D, M] / [M, 1] (1-D when D or M is 1), from first_device
  // The devices the op runs on: all of the degree (num_devices 0), or, for
  // an op of a strand placed side by side with others, num_devices of them
  // from first_device (its config's degrees are over those).
  int first_device = 0;
  int num_devices = 0;
  double compute_s = 0;      // forward + backward shard time
  double grad_sync_s = 0;    // weight-gradient AllReduce over the data group
  OpLayouts layouts;         // the layouts `config` (or the opaque fallback) implies
};

// Strands of a forward graph that may run side by side: chains of ops fed
// only by graph inputs, parameters and constants (no activation reaches them
// from the rest of the graph, so each group of devices loads its strands'
// inputs itself), every op's single output read by the next op only, the
// last one's read only by `sink`, where they meet (DLRM's embedding bags,
// Gather -> ReduceSum -> Reshape, meeting at the interaction Concat). Blocks
// have at least two strands; ops in topological order.
struct StrandBlock {
  graph::OpId sink = graph::kNoId;
  std::vector<std::vector<graph::OpId>> strands;
};
std::vector<StrandBlock> IndependentStrands(const graph::Graph& forward);

// A block of strands the plan runs side by side.
struct StrandPlacement {
  std::string sink;          // the op the strands meet at
  int strands = 0;
  int devices_per_strand = 0;  // q
  int groups = 0;            // degree / q groups of devices
  int per_group = 0;         // most strands one group runs, one after another
  // The busiest group: its strands' forward + backward shard time and their
  // weight-gradient AllReduces (inside the group).
  double compute_s = 0;
  double grad_sync_s = 0;
  // The AllToAll bringing every strand's output to the sink's layout over
  // all the devices, forward and backward, and its forward part.
  double redistribute_s = 0;
  double redistribute_forward_s = 0;
};

// One data degree tried under ParallelizeOptions::check_memory.
struct DataDegreeCandidate {
  int data_degree = 1;
  int model_degree = 1;
  // OK: the plan fits and is eligible. Otherwise why it was dropped:
  // ResourceExhausted from CheckFitsDevice (over the device memory), NotFound
  // (some op has no config at this data degree), or the DP's error.
  absl::Status status;
  bool has_plan = false;  // the DP found a plan (time_s, memory, ops valid)
  double time_s = 0;
  DeviceMemory memory;
  std::vector<OpParallelization> ops;  // the plan, in topological order
  std::vector<StrandPlacement> strand_blocks;
};

// One kind of config the pass did not offer because no per-device program
// executes it exactly (InexactConfig, search/parallel_config.h): e.g. Conv
// "spatial" (halo rows), Gather "row" (vocabulary-parallel lookups).
struct DroppedConfigKind {
  std::string op_kind;      // the op type, "Conv"
  std::string config_kind;  // "spatial"
  int ops = 0;              // forward ops that lost at least one such config
  std::string why;
};

struct ParallelizeResult {
  double time_s = 0;  // the DP's cost: compute + sync + movement
  std::vector<OpParallelization> ops;  // in topological order
  // Blocks of strands the plan runs side by side (their ops have
  // num_devices > 0); empty when every op spans all the devices.
  std::vector<StrandPlacement> strand_blocks;
  // Per-device memory of the plan (opaque ops counted unsplit); zero when
  // PerDeviceMemory could not lay the graph out and check_memory is false.
  DeviceMemory memory;
  // check_memory: every data degree tried, ascending (the table); empty
  // otherwise.
  std::vector<DataDegreeCandidate> candidates;
  // Configs left out at the pass's degree, one entry per (op kind, config
  // kind), ordered by op kind then config kind.
  std::vector<DroppedConfigKind> dropped;
  const OpParallelization* Find(std::string_view op_name) const;
  const DataDegreeCandidate* Candidate(int data_degree) const;
};

// Per-device memory of a plan (PerDeviceMemory with options.optimizer and
// options.memory): the ops on all devices, plus the strands of the busiest
// group of each side-by-side block (a device holds only its group's
// strands). Opaque ops count unsplit.
absl::StatusOr<DeviceMemory> PlanDeviceMemory(const graph::Graph& forward,
                                              const std::vector<OpParallelization>& ops,
                                              const ParallelizeOptions& options);

// "D=2 M=8  12.345 ms  params ... = N bytes  fits" lines, one per candidate.
std::string CandidateTableString(const ParallelizeResult& r);

// InvalidArgument for a degree outside [1, num_ranks] or an invalid cluster;
// NotFound when some op has no config left at that degree (after `filter`);
// other errors as FindOptimalMachineMapping's.
absl::StatusOr<ParallelizeResult> ParallelizeForward(const graph::Graph& forward,
                                                     const costmodel::ClusterSpec& cluster,
                                                     costmodel::CostModel& cm,
                                                     const ParallelizeOptions& options = {});

// The layout the loss reads a graph output in: whole rows (every dim but 0
// unsplit, no partial sums), dim 0 split over all the output's devices
// where that divides its size, else as the output splits it; copies on the
// rest. The DP charges the move there (forward and backward) to the op
// producing the output; the per-device graph inserts it.
graph::ParallelTensorShape LossInputLayout(const graph::ParallelTensorShape& output);

// Seconds of one collective step of a layout transition on the [d, m] view
// of `cluster`: the step runs on the part of the view (data, model, both)
// its parallel ops act on, priced as the pass prices movement (without the
// backward factor). `step` is one of TransitionComm(transition).
absl::StatusOr<double> ViewTransitionStepTime(const costmodel::ClusterSpec& cluster, int d, int m,
                                              const Transition& transition,
                                              const costmodel::CollectiveStep& step);

// The canonical view of a config with data degree `d` and model degree `m`
// (see the top of the file).
costmodel::MachineView ConfigView(int d, int m);

// Seconds for one collective of `bytes` over a group of `group_size` ranks
// that spans the given part of the [d, m] view on `cluster`: part 0 = data,
// 1 = model, 2 = both. Exposed for tests.
absl::StatusOr<double> ViewCollectiveTime(const costmodel::ClusterSpec& cluster, int d, int m,
                                          int part, costmodel::Collective c, int64_t bytes,
                                          int group_size);

}  // namespace braid::search

#endif  // BRAID_SEARCH_PARALLELIZE_H_
