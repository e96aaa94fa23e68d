#include "costmodel/cost_check.h"

#include <cmath>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/text.h"
#include "costmodel/op_cost.h"

namespace braid::costmodel {
namespace {

bool Plausible(double s) { return PlausibleSeconds(s); }

// A pair of op types the backend refused this many times is not tried
// again: a large graph repeats the same unfusable edge thousands of times.
constexpr int kTriesPerKind = 4;

// One producer/consumer pair per distinct pair of op types that the
// backend can run as one kernel, in graph order, at most
// kMaxFusedPairsChecked of them.
std::vector<std::vector<graph::OpId>> FusablePairs(const graph::Graph& g,
                                                   const FusionBackend& backend) {
  std::vector<std::vector<graph::OpId>> out;
  // Per pair of types: CanImplement calls so far, or -1 once one was taken.
  std::map<std::pair<std::string_view, std::string_view>, int> tried;
  for (graph::OpId p = 0; p < g.num_ops(); ++p) {
    const graph::Op& producer = g.op(p);
    if (IsCommunicationOp(producer)) continue;
    for (graph::TensorId t : producer.outputs) {
      for (graph::OpId c : g.tensor(t).consumers) {
        if (c == p || c == graph::kNoId || IsCommunicationOp(g.op(c))) continue;
        int& n = tried[{producer.type, g.op(c).type}];
        if (n < 0 || n >= kTriesPerKind) continue;
        ++n;
        std::vector<graph::OpId> pair = {p, c};
        if (!backend.CanImplement(g, pair).ok()) continue;
        n = -1;
        out.push_back(std::move(pair));
        if (static_cast<int>(out.size()) >= kMaxFusedPairsChecked) return out;
      }
    }
  }
  return out;
}

absl::Status CheckFusedPairs(const graph::Graph& g, CostModel& cm) {
  const FusionBackend* backend = cm.fusion_backend();
  if (backend == nullptr) return absl::OkStatus();
  const std::vector<std::vector<graph::OpId>> pairs = FusablePairs(g, *backend);
  if (pairs.empty()) return absl::OkStatus();
  if (cm.PrefetchesFused()) cm.PrefetchFused(g, pairs);
  for (const std::vector<graph::OpId>& pair : pairs) {
    const double s = cm.ComputeTime(g, pair).seconds;
    if (!Plausible(s)) {
      const graph::Op& a = g.op(pair[0]);
      const graph::Op& b = g.op(pair[1]);
      return absl::InvalidArgumentError(absl::StrCat(
          "the fused kernel of ops '", base::EscapeForDisplay(a.name), "' (", a.type, ") and '",
          base::EscapeForDisplay(b.name), "' (", b.type, ") is predicted to take ", s,
          " s on this cluster, outside [0, ", kMaxPredictedSeconds,
          "] s: the cost model's fused-kernel times are out of the range braid plans for"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

bool PlausibleSeconds(double s) { return std::isfinite(s) && s >= 0 && s <= kMaxPredictedSeconds; }

absl::Status CheckCostsFinite(const graph::Graph& g, CostModel& cm, int group_size) {
  int64_t grad_bytes = 0;
  for (graph::OpId i = 0; i < g.num_ops(); ++i) {
    const graph::Op& op = g.op(i);
    if (op.phase == graph::Phase::kCommunication) {
      for (graph::TensorId t : op.inputs) grad_bytes += g.tensor(t).Bytes();
      continue;
    }
    const double s = cm.ComputeTime(g, i).seconds;
    if (!Plausible(s)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "op '", op.name, "' (", op.type, ") is predicted to take ", s,
          " s on this cluster, outside [0, ", kMaxPredictedSeconds,
          "] s: the model or the cluster spec is out of the range braid plans for"));
    }
  }
  if (absl::Status s = CheckFusedPairs(g, cm); !s.ok()) return s;
  if (group_size > 1) {
    const double s = cm.CollectiveTime(Collective::kAllReduce, grad_bytes, group_size);
    if (!Plausible(s)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "an AllReduce of all ", grad_bytes, " gradient bytes over ", group_size,
          " ranks is predicted to take ", s, " s, outside [0, ", kMaxPredictedSeconds, "] s"));
    }
  }
  for (double v : {cm.ComputeSlowdownDuringComm(), cm.CommSlowdownDuringCompute()}) {
    if (!std::isfinite(v) || v <= 0 || v > 1e6) {
      return absl::InvalidArgumentError(
          absl::StrCat("the cluster's compute/communication slowdown is ", v, ", outside (0, 1e6]"));
    }
  }
  return absl::OkStatus();
}

}  // namespace braid::costmodel
