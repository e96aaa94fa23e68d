#include "costmodel/cost_check.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace braid::costmodel {
namespace {

bool Plausible(double s) { return std::isfinite(s) && s >= 0 && s <= kMaxPredictedSeconds; }

}  // namespace

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
