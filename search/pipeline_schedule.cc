#include "search/pipeline_schedule.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "costmodel/pipeline_order.h"

namespace braid::search {
namespace {

using Step = costmodel::MicroStep;

// Stage s's order of forwards and backwards.
std::vector<Step> StageOrder(int s, int p, int m, PipelineOrder order) {
  return costmodel::PipelineStageOrder(s, p, m, order == PipelineOrder::kGPipe);
}

}  // namespace

absl::StatusOr<PipelineTiming> SimulatePipeline(const std::vector<PipelineStage>& stages,
                                                int micro_batches, double transfer_s,
                                                PipelineOrder order) {
  const int p = static_cast<int>(stages.size());
  const int m = micro_batches;
  if (p == 0) return absl::InvalidArgumentError("pipeline: no stages");
  if (m < 1) return absl::InvalidArgumentError(absl::StrCat("pipeline: ", m, " micro-batches"));
  if (transfer_s < 0) return absl::InvalidArgumentError("pipeline: negative transfer time");
  for (int s = 0; s < p; ++s) {
    if (stages[s].forward_s < 0 || stages[s].backward_s < 0 || stages[s].activation_bytes < 0) {
      return absl::InvalidArgumentError(absl::StrCat("pipeline: stage ", s, " has a negative time or size"));
    }
  }
  constexpr double kUnset = -1;
  std::vector<std::vector<double>> fwd_done(p, std::vector<double>(m, kUnset));
  std::vector<std::vector<double>> bwd_done(p, std::vector<double>(m, kUnset));
  std::vector<std::vector<Step>> seq(p);
  for (int s = 0; s < p; ++s) seq[s] = StageOrder(s, p, m, order);
  std::vector<size_t> next(p, 0);
  std::vector<double> free_at(p, 0);
  std::vector<int> in_flight(p, 0);
  PipelineTiming t;
  t.peak_in_flight.assign(p, 0);
  // List scheduling: each stage runs its order; a step starts once its stage
  // is free and its input from the neighbouring stage has arrived. Every
  // pass schedules at least one step (the orders are deadlock-free).
  size_t left = static_cast<size_t>(2) * p * m;
  while (left > 0) {
    bool progressed = false;
    for (int s = 0; s < p; ++s) {
      while (next[s] < seq[s].size()) {
        const Step& st = seq[s][next[s]];
        double ready = 0;
        if (st.forward && s > 0) {
          if (fwd_done[s - 1][st.micro] == kUnset) break;
          ready = fwd_done[s - 1][st.micro] + transfer_s;
        } else if (!st.forward && s < p - 1) {
          if (bwd_done[s + 1][st.micro] == kUnset) break;
          ready = bwd_done[s + 1][st.micro] + transfer_s;
        }
        const double start = std::max(free_at[s], ready);
        const double dur = st.forward ? stages[s].forward_s : stages[s].backward_s;
        free_at[s] = start + dur;
        (st.forward ? fwd_done : bwd_done)[s][st.micro] = free_at[s];
        in_flight[s] += st.forward ? 1 : -1;
        t.peak_in_flight[s] = std::max(t.peak_in_flight[s], in_flight[s]);
        ++next[s];
        --left;
        progressed = true;
      }
    }
    if (!progressed) return absl::InternalError("pipeline: the stage orders deadlock");
  }
  for (int s = 0; s < p; ++s) {
    t.iteration_s = std::max(t.iteration_s, free_at[s]);
    t.busy_s = std::max(t.busy_s, m * (stages[s].forward_s + stages[s].backward_s));
    t.peak_activation_bytes.push_back(t.peak_in_flight[s] * stages[s].activation_bytes);
  }
  t.bubble_fraction = t.iteration_s > 0 ? 1 - t.busy_s / t.iteration_s : 0;
  return t;
}

}  // namespace braid::search
