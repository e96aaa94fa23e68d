// The cost model the search codes against. Implementations: the real one
// (profile store -> fused-op estimator -> analytic roofline, plus the fitted
// communication model) in costmodel/op_cost.h and costmodel/comm_model.h, and
// fakes in tests.
//
//   OpTime t = cost_model.ComputeTime(g, {op});        // one op
//   OpTime f = cost_model.ComputeTime(g, {a, b, c});   // a fused kernel
//   double c = cost_model.CollectiveTime(Collective::kAllReduce, bytes, ranks);
#ifndef BRAID_COSTMODEL_COST_MODEL_H_
#define BRAID_COSTMODEL_COST_MODEL_H_

#include <cstdint>
#include <span>
#include <vector>
#include <string_view>

#include "costmodel/fusion_backend.h"
#include "graph/graph.h"

namespace braid::costmodel {

enum class Collective : uint8_t { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kAllToAll, kSendRecv };
std::string_view CollectiveName(Collective c);

// Where a kernel time came from; plans report the share of predicted compute
// time from each (`cost_sources`).
enum class TimeSource : uint8_t {
  kMeasured,           // that exact kernel (op, or fused group) profiled on the device kind
  kGnn,                // the fused-op estimator (FusedOpEstimator, DisCo §4.3)
  kCorrectedRoofline,  // a fused group's members' measurements, corrected by the
                       // roofline's account of what fusing saves
  kPrior,              // pure roofline from datasheet peaks (and alpha-beta for links)
};
std::string_view TimeSourceName(TimeSource s);  // "measured", "gnn", "corrected_roofline", "prior"

struct OpTime {
  double seconds = 0;
  TimeSource source = TimeSource::kPrior;
};

class CostModel {
 public:
  virtual ~CostModel() = default;

  // Time of one kernel computing `ops` of `g` on one device. A single op is a
  // plain kernel; several ops are one fused kernel (a connected subgraph):
  // intermediate tensors stay on chip and one launch overhead is paid.
  virtual OpTime ComputeTime(const graph::Graph& g, std::span<const graph::OpId> ops) = 0;
  // Convenience for one op: cm.ComputeTime(g, op). Implementations that
  // override the span form add `using CostModel::ComputeTime;` to keep it.
  OpTime ComputeTime(const graph::Graph& g, graph::OpId op) {
    return ComputeTime(g, std::span<const graph::OpId>(&op, 1));
  }

  // Time of one collective over `bytes` (per-rank buffer size) in a group of
  // `group_size` ranks of the cluster.
  virtual double CollectiveTime(Collective c, int64_t bytes, int group_size) = 0;
  // The same collective when its group is among `devices` ranks only (a
  // strand's devices, in a parallel plan running strands side by side on
  // groups of devices), not all of them. Default: CollectiveTime.
  virtual double CollectiveTimeOnDevices(Collective c, int64_t bytes, int group_size,
                                         int devices) {
    (void)devices;
    return CollectiveTime(c, bytes, group_size);
  }

  // Slowdown of compute while a collective runs on the same device (CPU
  // clusters: Gloo threads take cores). 1.0 on GPUs.
  virtual double ComputeSlowdownDuringComm() const { return 1.0; }
  // Slowdown of a collective while its device computes (CPU clusters:
  // reductions and copies share the cores with compute). 1.0 on GPUs.
  virtual double CommSlowdownDuringCompute() const { return 1.0; }
  // Compute-stream time to copy a bucket's gradients (`bytes` in all) into
  // the flat buffer its collective reduces, or 0 where the collective reads
  // the gradients in place. CPU clusters: braid's executor packs every bucket
  // for Gloo (as DDP does), a memory-bound copy on the rank's one thread.
  virtual double BucketPackTime(int64_t bytes) const { return 0.0; }
  // The runtime's own time per compute node beside its kernel (dispatch,
  // bookkeeping, frees), which the simulator adds to every compute task; 0
  // unless measured (CPU clusters: kRuntimeNodeOp in the profile store).
  virtual double NodeOverheadSeconds() const { return 0.0; }

  // The fusion backend of the device the costs are for: which groups may be
  // fused at all (search/validity.h). Null: no backend rules, only the
  // structural ones (test fakes).
  virtual const FusionBackend* fusion_backend() const { return nullptr; }

  // The fused groups a search step is about to cost, at once: a model with a
  // fused-op estimator predicts the unmeasured ones in one batched inference
  // so that the ComputeTime calls that follow hit its cache. Optional;
  // callers skip gathering the groups when PrefetchesFused() is false.
  virtual bool PrefetchesFused() const { return false; }
  virtual void PrefetchFused(const graph::Graph& g,
                             std::span<const std::vector<graph::OpId>> groups) {
    (void)g;
    (void)groups;
  }

  // Identifies what the costs were computed with (profile-store and estimator
  // generation); plans made under another generation must be re-costed.
  virtual std::string Generation() const = 0;
};

}  // namespace braid::costmodel

#endif  // BRAID_COSTMODEL_COST_MODEL_H_
