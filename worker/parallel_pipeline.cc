#include "worker/parallel_pipeline.h"

#include <algorithm>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "costmodel/pipeline_order.h"
#include "worker/op_clock.h"

namespace braid::worker::internal {
namespace {

using Schedule = ParallelTrainSpec::PipelineSchedule;

// Tags of micro-batch j's activation (forward) and its gradient (backward).
int ForwardTag(int micro) { return 2 * micro; }
int BackwardTag(int micro) { return 2 * micro + 1; }

// The shape of `rows` rows of the activation entering layer `layer` (MLP
// Linear layer or transformer block; `layer` == the layer count: the output).
std::vector<int64_t> BoundaryShape(const ParallelTrainSpec& s, int layer, int64_t rows) {
  if (s.transformer.has_value()) return {rows, s.transformer->seq, s.transformer->d_model};
  return {rows, s.widths[layer]};
}

}  // namespace

std::vector<PipelineOp> StageOrder(int stage, int stages, int micro_batches, Schedule schedule) {
  std::vector<PipelineOp> out;
  for (const costmodel::MicroStep& st :
       costmodel::PipelineStageOrder(stage, stages, micro_batches, schedule == Schedule::kGpipe))
    out.push_back({st.forward, st.micro});
  return out;
}

absl::StatusOr<std::vector<int>> StageBounds(const ParallelTrainSpec& s, int layers) {
  auto bad = [](auto... parts) {
    return absl::InvalidArgumentError(absl::StrCat("parallel train: ", parts...));
  };
  const int p = s.pipeline_stages;
  if (p < 1) return bad("pipeline_stages ", p, " must be at least 1");
  if (p > layers) {
    return bad("pipeline_stages ", p, " exceed the ", layers,
               s.transformer.has_value() ? " blocks" : " layers", " (a stage would be empty)");
  }
  if (s.micro_batches < 1) return bad("micro_batches ", s.micro_batches, " must be at least 1");
  if (s.schedule != Schedule::kGpipe && s.schedule != Schedule::k1F1B) {
    return bad("schedule ", static_cast<int>(s.schedule), " is not kGpipe (0) or k1F1B (1)");
  }
  std::vector<int> bounds;
  if (s.stage_begin.empty()) {
    for (int st = 0; st < p; ++st) bounds.push_back(st * (layers / p) + std::min(st, layers % p));
  } else {
    const size_t n = s.stage_begin.size();
    if (n != static_cast<size_t>(p) && n != static_cast<size_t>(p) + 1) {
      return bad("stage_begin has ", n, " entries for pipeline_stages ", p, " (need ", p,
                 ", or ", p + 1, " ending at ", layers, ")");
    }
    if (n == static_cast<size_t>(p) + 1 && s.stage_begin.back() != layers) {
      return bad("stage_begin's last entry ", s.stage_begin.back(), " is not the layer count ",
                 layers);
    }
    bounds.assign(s.stage_begin.begin(), s.stage_begin.begin() + p);
    if (bounds[0] != 0) return bad("stage_begin[0] is ", bounds[0], ", must be 0");
    for (int st = 0; st < p; ++st) {
      if (bounds[st] < 0 || bounds[st] >= layers) {
        return bad("stage_begin[", st, "] ", bounds[st], " is out of range [0, ", layers, ")");
      }
      if (st > 0 && bounds[st] <= bounds[st - 1]) {
        return bad("stage_begin is not increasing: stage ", st - 1, " would be empty (stage_begin[",
                   st - 1, "] ", bounds[st - 1], ", stage_begin[", st, "] ", bounds[st], ")");
      }
    }
  }
  if (!s.stage_relu_first.empty()) {
    if (s.stage_relu_first.size() != static_cast<size_t>(p)) {
      return bad("stage_relu_first has ", s.stage_relu_first.size(),
                 " entries for pipeline_stages ", p, " (need ", p, " or none)");
    }
    if (s.transformer.has_value() &&
        std::find(s.stage_relu_first.begin(), s.stage_relu_first.end(), true) !=
            s.stage_relu_first.end()) {
      return bad("stage_relu_first is set for a transformer (its stages are whole blocks)");
    }
  }
  bounds.push_back(layers);
  return bounds;
}

bool StageStartsWithRelu(const ParallelTrainSpec& s, int stage) {
  return stage >= 0 && stage < static_cast<int>(s.stage_relu_first.size()) &&
         s.stage_relu_first[stage];
}

double RunPipelineStep(const ParallelTrainSpec& s, int stage, const std::vector<int>& bounds,
                       ShardTrainer& trainer, StageLink& link, const at::Tensor& x,
                       const at::Tensor& t, int model_rank) {
  const int p = s.pipeline_stages, m = s.micro_batches;
  const bool first = stage == 0, last = stage == p - 1;
  const int64_t rows = s.batch / s.data_degree / m;
  double loss = 0;
  std::map<int, at::Tensor> out_grad;  // the last stage's loss gradients, until their backward
  OpClock& clk = RankClock();
  for (const PipelineOp& op : StageOrder(stage, p, m, s.schedule)) {
    const int j = op.micro;
    if (op.forward) {
      at::Tensor in;
      if (first) {
        in = x.narrow(0, j * rows, rows);
      } else {
        in = at::empty(BoundaryShape(s, bounds[stage], rows), at::kFloat);
        link.Recv(in, stage - 1, ForwardTag(j));
      }
      clk.Lap(kCommClock);  // the receive (or send) before it
      at::Tensor out = trainer.Forward(j, in);
      if (last) {
        // The mean over the data replica's rows: each micro-batch's mean
        // loss counts 1/m, and so does its gradient.
        // loss_rows_split: this model rank's rows of the micro-batch.
        const bool split = s.loss_rows_split && !s.transformer.has_value();
        const int64_t mine = split ? rows / s.model_degree : rows;
        const at::Tensor diff =
            out - t.narrow(0, j * rows + (split ? model_rank * mine : 0), mine);
        loss += diff.pow(2).mean().item<double>() / m;
        const double numel = static_cast<double>(diff.numel()) * (rows / mine);  // the micro-batch's
        out_grad[j] = diff * (2.0 / (numel * m));
        clk.Lap(kLossClock);
      } else {
        link.Send(out, stage + 1, ForwardTag(j));
      }
    } else {
      at::Tensor g;
      if (last) {
        auto it = out_grad.find(j);
        g = it->second;
        out_grad.erase(it);
      } else {
        g = at::empty(BoundaryShape(s, bounds[stage + 1], rows), at::kFloat);
        link.Recv(g, stage + 1, BackwardTag(j));
      }
      clk.Lap(kCommClock);
      at::Tensor in_grad = trainer.Backward(j, g, /*input_grad=*/!first);
      if (!first) link.Send(in_grad, stage - 1, BackwardTag(j));
    }
  }
  link.WaitSends();
  trainer.Update();
  return last ? loss : 0;
}

}  // namespace braid::worker::internal
