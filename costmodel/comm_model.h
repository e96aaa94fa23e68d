// The communication model (DisCo §4.2): the time of a collective is linear in
// its buffer size, T = C*x + D, per (collective, group size). Until a
// (collective, group size) has measurements, C and D come from an alpha-beta
// prior on the cluster's links; a least-squares fit of worker benchmarks
// (CommSample in costmodel/profile_store.h) replaces the prior for it.
//
//   CommModel m(*LoadCluster("disco-a"));
//   double t = m.Time(Collective::kAllReduce, 64 << 20, 12);   // prior
//   absl::Status s = m.Fit(samples);                             // measured
//   double slow = ComputeSlowdownDuringComm(spec);               // CPU contention
//
// Conventions. `bytes` is the buffer size as nccl-tests counts it: the whole
// tensor for AllReduce and Broadcast, the gathered (output) buffer for
// AllGather, the input buffer for ReduceScatter, the per-rank send buffer for
// AllToAll, the message for SendRecv. A group of n ranks is the first n ranks
// of the cluster (nodes filled in order), which is how data-parallel groups
// and intra-node tensor-parallel groups are laid out.
//
// Priors (B = per-direction bandwidth of the slowest link the group spans,
// a = its latency; ring algorithms, nccl-tests bus-bandwidth factors):
//   AllReduce      2(n-1)/n * x/B + 2(n-1) a
//   AllGather,
//   ReduceScatter  (n-1)/n * x/B + (n-1) a
//   Broadcast      x/B + (n-1) a                (pipelined chain)
//   AllToAll       (n-1)/n * x/B + (n-1) a
//   SendRecv       x/B + a
// A group spanning N nodes with L ranks per node is hierarchical: intra-node
// reduce-scatter, N-node allreduce of 1/L of the data per rank over all of a
// node's NICs (L concurrent rings share nics*nic_bandwidth, so the inter stage
// moves 2(N-1)/N * x / (nics*nic_bw)), intra-node all-gather. AllGather and
// ReduceScatter are the matching two-stage halves; Broadcast is bound by the
// slower of node network and intra link; AllToAll sends (n-L)/n of each
// rank's buffer off-node, L ranks sharing the NICs. Group size 1 costs 0.
#ifndef BRAID_COSTMODEL_COMM_MODEL_H_
#define BRAID_COSTMODEL_COMM_MODEL_H_

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "costmodel/cluster.h"
#include "costmodel/cost_model.h"
#include "costmodel/profile_store.h"

namespace braid::costmodel {

// Parses CollectiveName(); InvalidArgument for an unknown name.
absl::StatusOr<Collective> ParseCollective(std::string_view name);
// Every name of a list (the rank programs' --collectives), failing on the first unknown one.
absl::StatusOr<std::vector<Collective>> ParseCollectives(const std::vector<std::string>& names);

// T = seconds_per_byte * bytes + overhead_s.
struct LinearCost {
  double seconds_per_byte = 0;  // C
  double overhead_s = 0;        // D
  double At(int64_t bytes) const { return seconds_per_byte * static_cast<double>(bytes) + overhead_s; }
};

// Least-squares fit of T = C*x + D to (bytes, seconds) points, weighted by
// 1/T^2 (relative error: timing noise scales with the time). Needs at least
// two distinct sizes; a negative intercept is clamped to 0 (C refitted through
// the origin). InvalidArgument when the data cannot give C > 0.
absl::StatusOr<LinearCost> FitLinear(std::span<const std::pair<double, double>> points);

class CommModel {
 public:
  explicit CommModel(ClusterSpec spec) : spec_(std::move(spec)) {}

  // Seconds for one collective; 0 for group_size <= 1. group_size larger
  // than the cluster's ranks is costed as if the cluster had that many ranks
  // laid out the same way (nodes of devices_per_node).
  double Time(Collective c, int64_t bytes, int group_size) const;
  // The coefficients in use (fitted if available, else the prior).
  LinearCost Coefficients(Collective c, int group_size) const;
  LinearCost Prior(Collective c, int group_size) const;
  std::optional<LinearCost> Fitted(Collective c, int group_size) const;

  // Fits every (collective, group size) with samples; those replace the
  // prior. Samples with unknown collective names or group sizes < 2 are
  // InvalidArgument (nothing is changed then). Sizes whose times do not grow
  // with size (FitLinear fails) are InvalidArgument too, unless `notes` is
  // given: then that (collective, group size) keeps the prior's per-byte
  // term with the measured latency (the mean of each sample's time beyond
  // it), and a note says so. In-step clocks of small collectives (`braid run
  // --profile`) are often flat or noisy in size; a plan is still priced.
  absl::Status Fit(std::span<const CommSample> samples, std::vector<std::string>* notes = nullptr);

  const ClusterSpec& spec() const { return spec_; }

 private:
  ClusterSpec spec_;
  std::map<std::pair<Collective, int>, LinearCost> fitted_;
};

// The profile-store key comm samples of this cluster are stored under
// (ProfileStore::PutComm/GetComm device_kind): "<cluster name>:<device kind>".
std::string CommProfileKey(const ClusterSpec& spec);

// A CommModel with every (collective, group size) the store has samples for
// fitted. `store` may be null (priors only).
absl::StatusOr<CommModel> CommModelFromStore(const ClusterSpec& spec, const ProfileStore* store);

// Compute slowdown while a collective runs on a CPU cluster (1.0 on GPUs).
// Fair time sharing of the node's cores: during a collective every rank
// demands threads_per_rank compute threads plus comm_threads_per_rank Gloo
// threads; the slowdown is
//   max(1, ranks_per_node*(threads+comm_threads)/cores)
//     / max(1, ranks_per_node*threads/cores).
// cpu-local with 2 cores, 2 ranks of 1 thread and one busy Gloo thread each
// (ProcessGroupGloo runs one collective on one of its worker threads):
// 4 threads on 2 cores -> 2.0. Calibration (issue measurements, PyTorch DDP,
// 2 ranks x 1 thread): TransformerEncoder 200 ms with allreduce after backward
// vs 144 ms overlapped. The collectives slow down as well while compute runs
// (CommSlowdownDuringCompute, the same sharing seen from Gloo's threads), so
// on cpu-local overlap gains only where a collective waits rather than
// computes. The 8x1024 MLP got slower when overlapped (117 vs 94 ms): GEMM and
// Gloo's reductions also share memory bandwidth and caches, which processor
// sharing does not model, so the simulator under-predicts that loss.
double ComputeSlowdownDuringComm(const ClusterSpec& spec);

// The other side of the same core sharing: how much slower a collective's
// threads run while the compute threads run too, processor sharing again
// (ranks * (threads + comm threads) runnable on `cores`, against ranks * comm
// threads when only collectives run). 1.0 on GPU clusters.
double CommSlowdownDuringCompute(const ClusterSpec& spec);

}  // namespace braid::costmodel

#endif  // BRAID_COSTMODEL_COMM_MODEL_H_
