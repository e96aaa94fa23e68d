#include "worker/parallel_train.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/bounded_json.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"
#include "worker/runtime/gloo_group.h"
#include "worker/op_clock.h"
#include "worker/parallel_pipeline.h"
#include "worker/parallel_transformer.h"
#include "worker/rank_processes.h"

namespace braid::worker {
namespace {

using Kind = LayerParallel::Kind;
using internal::Accumulate;
using internal::AverageAndStep;
using internal::GatherFullWeights;
using internal::ToFull;

// Where each layer's input must be gathered (a partitioned activation read by
// a layer that needs it replicated), which row layers reduce-scatter their
// output (into a row layer) instead of all-reducing it, whether each stage's
// output is gathered (before the next stage or the loss), and the stages'
// layer bounds.
struct LayerPlan {
  std::vector<bool> gather_input;    // per layer
  // per layer: a row layer reading a replicated input takes its own slice
  // of the features (a free partition); backward all-gathers the slices'
  // gradients into the whole input gradient.
  std::vector<bool> slice_input;
  std::vector<bool> scatter_output;  // per layer: a row layer feeding a row layer
  std::vector<bool> gather_output;   // per pipeline stage
  std::vector<int> bounds;           // internal::StageBounds
};

// The checks every model shares: degrees, ranks, batch, micro-batches, steps
// and lr.
absl::Status ValidateRun(const ParallelTrainSpec& s) {
  auto bad = [](auto... parts) {
    return absl::InvalidArgumentError(absl::StrCat("parallel train: ", parts...));
  };
  if (s.batch <= 0 || s.steps < 1 || s.ranks < 1 || s.data_degree < 1 || s.model_degree < 1) {
    return bad("batch, steps, ranks and degrees must be positive");
  }
  if (s.pipeline_stages < 1) {
    return bad("pipeline_stages ", s.pipeline_stages, " must be at least 1");
  }
  if (s.micro_batches < 1) return bad("micro_batches ", s.micro_batches, " must be at least 1");
  if (!(s.lr > 0) || !std::isfinite(s.lr)) return bad("lr ", s.lr, " is not a positive number");
  if (s.ranks != s.data_degree * s.model_degree * s.pipeline_stages) {
    return bad(s.ranks, " ranks != data_degree ", s.data_degree, " x model_degree ",
               s.model_degree, " x pipeline_stages ", s.pipeline_stages);
  }
  if (s.batch % s.data_degree != 0) {
    return bad("batch ", s.batch, " does not divide over data_degree ", s.data_degree);
  }
  const int64_t replica = s.batch / s.data_degree;
  if (replica % s.micro_batches != 0) {
    return bad("micro_batches ", s.micro_batches, " does not divide the per-data-replica batch ",
               replica, " (batch ", s.batch, " / data_degree ", s.data_degree, ")");
  }
  return absl::OkStatus();
}

absl::StatusOr<LayerPlan> PlanLayers(const ParallelTrainSpec& s) {
  auto bad = [](auto... parts) {
    return absl::InvalidArgumentError(absl::StrCat("parallel train: ", parts...));
  };
  if (s.transformer.has_value()) return bad("PlanLayers on a transformer spec");
  if (s.layers.empty()) return bad("no layers");
  if (s.widths.size() != s.layers.size() + 1) {
    return bad(s.widths.size(), " widths for ", s.layers.size(), " layers (need layers + 1)");
  }
  for (size_t i = 0; i < s.widths.size(); ++i) {
    if (s.widths[i] <= 0) return bad("width ", i, " is ", s.widths[i]);
  }
  RETURN_IF_ERROR(ValidateRun(s));
  LayerPlan plan;
  ASSIGN_OR_RETURN(plan.bounds, internal::StageBounds(s, static_cast<int>(s.layers.size())));
  plan.scatter_output.assign(s.layers.size(), false);
  plan.slice_input.assign(s.layers.size(), false);
  bool partitioned = false;  // the activation entering layer i
  int stage = 0;
  for (size_t i = 0; i < s.layers.size(); ++i) {
    if (static_cast<int>(i) == plan.bounds[stage + 1]) {
      // A stage boundary: the activation sent on is replicated (gathered).
      plan.gather_output.push_back(partitioned);
      partitioned = false;
      ++stage;
    }
    const Kind k = s.layers[i].kind;
    const std::string name =
        absl::StrCat("layer ", i, " (", std::string(LayerParallelName(k)), ")");
    switch (k) {
      case LayerParallel::kData:
        plan.gather_input.push_back(partitioned);
        partitioned = false;
        break;
      case LayerParallel::kColumn:
        if (s.widths[i + 1] % s.model_degree != 0) {
          return bad(name, ": ", s.widths[i + 1],
                     " output features do not divide over model_degree ", s.model_degree);
        }
        plan.gather_input.push_back(partitioned);
        partitioned = true;
        break;
      case LayerParallel::kRow: {
        if (!partitioned && s.widths[i] % s.model_degree != 0) {
          return bad(name, ": its replicated input's ", s.widths[i],
                     " features do not divide over model_degree ", s.model_degree);
        }
        plan.slice_input[i] = !partitioned;
        plan.gather_input.push_back(false);
        // Into a row layer of the same stage: reduce-scatter on features.
        const bool scatter = i + 1 < s.layers.size() &&
                             static_cast<int>(i) + 1 < plan.bounds[stage + 1] &&
                             s.layers[i + 1].kind == LayerParallel::kRow;
        if (scatter && s.widths[i + 1] % s.model_degree != 0) {
          return bad(name, ": ", s.widths[i + 1],
                     " output features do not divide over model_degree ", s.model_degree,
                     " (its output is reduce-scattered into the next row layer)");
        }
        plan.scatter_output[i] = scatter;
        partitioned = scatter;
        break;
      }
      default:
        return bad(name, ": unknown parallel kind ", static_cast<int>(k));
    }
  }
  plan.gather_output.push_back(partitioned);
  if (s.loss_rows_split) {
    const int64_t rows = s.batch / s.data_degree / s.micro_batches;
    if (s.layers.back().kind != LayerParallel::kRow || s.model_degree < 2) {
      return bad("loss_rows_split needs a last row layer and model_degree > 1 (layer ",
                 s.layers.size() - 1, " is ",
                 std::string(LayerParallelName(s.layers.back().kind)), ", model_degree ",
                 s.model_degree, ")");
    }
    if (rows % s.model_degree != 0) {
      return bad("loss_rows_split: the micro-batch's ", rows,
                 " rows per data replica do not divide over model_degree ", s.model_degree);
    }
  }
  return plan;
}

// The full parameters, identical wherever they are made (nn.Linear's uniform
// init from one CPU generator seeded with spec.seed).
std::vector<std::pair<at::Tensor, at::Tensor>> InitFull(const ParallelTrainSpec& s) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(s.seed);
  std::vector<std::pair<at::Tensor, at::Tensor>> p;
  for (size_t i = 0; i < s.layers.size(); ++i) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(s.widths[i]));
    at::Tensor w = (at::rand({s.widths[i + 1], s.widths[i]}, gen, at::kFloat) * 2 - 1) * bound;
    at::Tensor b = (at::rand({s.widths[i + 1]}, gen, at::kFloat) * 2 - 1) * bound;
    p.emplace_back(w, b);
  }
  return p;
}

// The initial full parameters of the spec's model.
std::vector<std::pair<at::Tensor, at::Tensor>> InitModel(const ParallelTrainSpec& s) {
  return s.transformer.has_value() ? internal::InitTransformer(s) : InitFull(s);
}

size_t NumLinears(const ParallelTrainSpec& s) {
  return s.transformer.has_value() ? internal::TransformerLinearKinds(s).size() : s.layers.size();
}

// The layers pipeline stages cut between: Linear layers or blocks.
int NumStageLayers(const ParallelTrainSpec& s) {
  return s.transformer.has_value() ? s.transformer->blocks : static_cast<int>(s.layers.size());
}

// The global batch of one step: inputs [batch, widths[0]], targets [batch,
// widths.back()]; for a transformer both [batch, seq, d_model].
std::pair<at::Tensor, at::Tensor> MakeBatch(const ParallelTrainSpec& s, int step) {
  at::Generator gen =
      at::make_generator<at::CPUGeneratorImpl>(s.seed * 1000003ULL + 7919ULL * (step + 1));
  if (s.transformer.has_value()) {
    const TransformerShape& t = *s.transformer;
    at::Tensor x = at::randn({s.batch, t.seq, t.d_model}, gen, at::kFloat);
    at::Tensor y = at::randn({s.batch, t.seq, t.d_model}, gen, at::kFloat);
    return {x, y};
  }
  at::Tensor x = at::randn({s.batch, s.widths.front()}, gen, at::kFloat);
  at::Tensor t = at::randn({s.batch, s.widths.back()}, gen, at::kFloat);
  return {x, t};
}


absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("parallel train: cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

nlohmann::json SpecToJson(const ParallelTrainSpec& s) {
  nlohmann::json j;
  j["widths"] = s.widths;
  j["batch"] = s.batch;
  std::vector<int> kinds;
  for (const LayerParallel& l : s.layers) kinds.push_back(static_cast<int>(l.kind));
  j["layers"] = kinds;
  j["ranks"] = s.ranks;
  j["data_degree"] = s.data_degree;
  j["model_degree"] = s.model_degree;
  j["steps"] = s.steps;
  j["lr"] = s.lr;
  j["seed"] = s.seed;
  j["pipeline_stages"] = s.pipeline_stages;
  j["stage_begin"] = s.stage_begin;
  j["stage_relu_first"] = s.stage_relu_first;
  j["loss_rows_split"] = s.loss_rows_split;
  j["micro_batches"] = s.micro_batches;
  j["schedule"] = static_cast<int>(s.schedule);
  if (s.transformer.has_value()) {
    const TransformerShape& t = *s.transformer;
    j["transformer"] = {{"d_model", t.d_model}, {"heads", t.heads}, {"seq", t.seq},
                        {"d_ff", t.d_ff},       {"blocks", t.blocks}};
  }
  return j;
}

ParallelTrainSpec SpecFromJson(const nlohmann::json& j) {
  ParallelTrainSpec s;
  s.widths = j.at("widths").get<std::vector<int64_t>>();
  s.batch = j.at("batch").get<int64_t>();
  for (int k : j.at("layers").get<std::vector<int>>()) s.layers.push_back({static_cast<Kind>(k)});
  s.ranks = j.at("ranks").get<int>();
  s.data_degree = j.at("data_degree").get<int>();
  s.model_degree = j.at("model_degree").get<int>();
  s.steps = j.at("steps").get<int>();
  s.lr = j.at("lr").get<double>();
  s.seed = j.at("seed").get<uint64_t>();
  s.pipeline_stages = j.at("pipeline_stages").get<int>();
  s.stage_begin = j.at("stage_begin").get<std::vector<int>>();
  s.stage_relu_first = j.value("stage_relu_first", std::vector<bool>{});
  s.loss_rows_split = j.value("loss_rows_split", false);
  s.micro_batches = j.at("micro_batches").get<int>();
  s.schedule = static_cast<ParallelTrainSpec::PipelineSchedule>(j.at("schedule").get<int>());
  if (j.contains("transformer")) {
    const nlohmann::json& t = j.at("transformer");
    s.transformer = TransformerShape{.d_model = t.at("d_model").get<int64_t>(),
                                     .heads = t.at("heads").get<int64_t>(),
                                     .seq = t.at("seq").get<int64_t>(),
                                     .d_ff = t.at("d_ff").get<int64_t>(),
                                     .blocks = t.at("blocks").get<int>()};
  }
  return s;
}

// A group of this rank's (model or data); a group of one communicates nothing.
class Group final : public internal::Collectives {
 public:
  // poll: wait for collectives by polling (WaitCollective: a rank bound to
  // its own core) rather than blocking.
  Group(c10::intrusive_ptr<c10d::ProcessGroupGloo> pg, int rank, int size, bool poll)
      : pg_(std::move(pg)), rank_(rank), size_(size), poll_(poll) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void AllReduceSum(at::Tensor& t) override {
    if (size_ == 1) return;
    std::vector<at::Tensor> v{t};
    WaitCollective(pg_->allreduce(v), poll_);
  }
  // Concatenates every member's `t` along `dim` (in member order).
  at::Tensor AllGather(const at::Tensor& t, int64_t dim) override {
    if (size_ == 1) return t;
    std::vector<at::Tensor> in{t.contiguous()};
    std::vector<std::vector<at::Tensor>> out(1);
    for (int i = 0; i < size_; ++i) out[0].push_back(at::empty_like(in[0]));
    WaitCollective(pg_->allgather(out, in), poll_);
    return at::cat(out[0], dim);
  }
  // The sum over the members of `t`, of which this member keeps block
  // rank() of size(t, dim) / size() along `dim` (GlooReduceScatter: an
  // all-to-all and a local sum).
  at::Tensor ReduceScatterSum(const at::Tensor& t, int64_t dim) {
    if (size_ == 1) return t;
    return GlooReduceScatter(*pg_, t, dim, poll_);
  }

 private:
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg_;
  int rank_;
  int size_;
  bool poll_;
};

// Activations and activation gradients to and from the ranks at the same
// data/model position of the neighbouring pipeline stages. Each neighbour
// pair has two 2-rank groups, one per direction (stage s is member 0, stage
// s + 1 member 1), and a transfer is a Gloo broadcast from the sender: a
// collective, so a bound rank polls for it (WaitCollective) where c10d's
// Gloo send/recv could only block (gloo_group.h WaitPolling), and the very
// call the collective benchmark times as a 2-rank Broadcast. Each group
// carries one direction's micro-batches in increasing order on both of its
// members, which is the order every schedule (parallel_pipeline.h) sends
// and receives them in, so the broadcasts pair up. Groups are made pair by
// pair in stage order, so their rendezvous cannot wait in a cycle.
class PeerLink final : public internal::StageLink {
 public:
  PeerLink(const c10::intrusive_ptr<c10d::Store>& store, int stage, int stages, int local,
           bool poll)
      : stage_(stage), poll_(poll) {
    for (int pair = std::max(0, stage - 1); pair <= stage && pair + 1 < stages; ++pair) {
      const int member = stage - pair;  // 0: the pair's lower stage
      for (const char* dir : {"fwd", "bwd"}) {
        auto ps = c10::make_intrusive<c10d::PrefixStore>(absl::StrCat(dir, pair, "_", local), store);
        (pair < stage ? below_ : above_)[dir[0] == 'b'] = MakeGlooGroup(ps, member, 2, "127.0.0.1");
      }
    }
  }

  // Forward activations go up (stage + 1), input gradients down (stage - 1).
  void Send(const at::Tensor& t, int to_stage, int) override {
    const bool up = to_stage == stage_ + 1;
    std::vector<at::Tensor> v{t.contiguous()};
    c10d::BroadcastOptions o;
    o.rootRank = up ? 0 : 1;
    pending_.push_back((up ? above_ : below_)[up ? 0 : 1]->broadcast(v, o));
  }
  void Recv(at::Tensor& t, int from_stage, int) override {
    const bool from_below = from_stage == stage_ - 1;
    std::vector<at::Tensor> v{t};
    c10d::BroadcastOptions o;
    o.rootRank = from_below ? 0 : 1;
    WaitCollective((from_below ? below_ : above_)[from_below ? 0 : 1]->broadcast(v, o), poll_);
  }
  void WaitSends() override {
    for (auto& w : pending_) WaitCollective(w, poll_);  // a work keeps its tensor alive
    pending_.clear();
  }

 private:
  const int stage_;
  const bool poll_;
  // [0]: forward activations, [1]: input gradients; below_ with stage - 1,
  // above_ with stage + 1.
  c10::intrusive_ptr<c10d::ProcessGroupGloo> below_[2], above_[2];
  std::vector<c10::intrusive_ptr<c10d::Work>> pending_;
};

// One rank's shards of its stage's Linear layers and their explicit
// forward/backward.
class RankTrainer final : public internal::ShardTrainer {
 public:
  RankTrainer(const ParallelTrainSpec& s, LayerPlan plan, int stage, Group& model, Group& data)
      : s_(s),
        plan_(std::move(plan)),
        begin_(plan_.bounds[stage]),
        end_(plan_.bounds[stage + 1]),
        gather_output_(plan_.gather_output[stage]),
        relu_first_(internal::StageStartsWithRelu(s, stage)),
        relu_last_(end_ < static_cast<int>(s.layers.size()) &&
                   !internal::StageStartsWithRelu(s, stage + 1)),
        rows_split_(s.loss_rows_split && end_ == static_cast<int>(s.layers.size())),
        model_(model),
        data_(data) {
    const int64_t m = model_.rank();
    const int64_t mm = model_.size();
    auto full = InitFull(s_);
    for (int i = begin_; i < end_; ++i) {
      auto [w, b] = full[i];
      switch (s_.layers[i].kind) {
        case LayerParallel::kColumn: {
          const int64_t n = w.size(0) / mm;
          w = w.narrow(0, m * n, n);
          b = b.narrow(0, m * n, n);
          break;
        }
        case LayerParallel::kRow: {
          const int64_t n = w.size(1) / mm;
          w = w.narrow(1, m * n, n);
          if (plan_.scatter_output[i]) {  // the bias follows the scattered output
            const int64_t o = w.size(0) / mm;
            b = b.narrow(0, m * o, o);
          }
          break;
        }
        default:
          break;
      }
      w_.push_back(w.contiguous().clone());
      b_.push_back(b.contiguous().clone());
    }
    gw_.resize(w_.size());
    gb_.resize(b_.size());
    for (int l = 0; l < end_ - begin_; ++l) {  // clock names number the stage's layers
      const std::string b = kBackwardClock;
      names_.push_back({MlpClockName(l, "matmul"), MlpClockName(l, "bias"), MlpClockName(l, "relu"),
                        MlpClockName(l, "matmul" + b), MlpClockName(l, "bias" + b),
                        MlpClockName(l, "relu" + b)});
    }
  }

  at::Tensor Forward(int micro, const at::Tensor& x) override {
    OpClock& clk = RankClock();
    Cache& c = cache_[micro];
    at::Tensor a = x;
    if (relu_first_) {  // the previous stage's last Linear's ReLU
      c.x = x;
      a = at::relu(x);
      clk.Lap(kReluFirstClock);
    }
    for (int i = begin_; i < end_; ++i) {
      const LayerClocks& n = names_[i - begin_];
      if (plan_.gather_input[i]) {
        a = model_.AllGather(a, 1);
        clk.Lap(kCommClock);
      }
      if (plan_.slice_input[i]) {
        a = Slice(a, 1);
        clk.Lap(kExecutorClock);
      }
      c.in.push_back(a);
      at::Tensor zi = at::matmul(a, W(i).t());
      clk.Lap(n.matmul);
      if (s_.layers[i].kind == LayerParallel::kRow) {
        if (plan_.scatter_output[i]) {
          zi = model_.ReduceScatterSum(zi, 1);  // into the next row layer
        } else if (rows_split_ && i + 1 == end_) {
          zi = model_.ReduceScatterSum(zi, 0);  // this rank's rows, into the loss
        } else {
          model_.AllReduceSum(zi);  // g
        }
        clk.Lap(kCommClock);
      }
      zi.add_(B(i));
      clk.Lap(n.bias);
      c.z.push_back(zi);
      if (ReluAfter(i)) {  // ReLU between layers, also across stages
        a = at::relu(zi);
        clk.Lap(n.relu);
      } else {
        a = zi;
      }
    }
    if (gather_output_) {
      a = model_.AllGather(a, 1);
      clk.Lap(kCommClock);
    }
    return a;
  }

  at::Tensor Backward(int micro, const at::Tensor& grad, bool input_grad) override {
    OpClock& clk = RankClock();
    auto it = cache_.find(micro);
    TORCH_CHECK(it != cache_.end(), "MLP stage: backward of micro-batch ", micro,
                " before its forward");
    const Cache& c = it->second;
    at::Tensor g = grad;
    if (gather_output_) {
      g = Slice(grad, 1);
      clk.Lap(kExecutorClock);
    }
    std::vector<at::Tensor> gw(w_.size()), gb(b_.size());
    for (int k = end_; k-- > begin_;) {
      const int l = k - begin_;
      const LayerClocks& n = names_[l];
      if (ReluAfter(k)) {
        g = g * (c.z[l] > 0);
        clk.Lap(n.relu_backward);
      }
      gb[l] = g.sum(0);
      clk.Lap(n.bias_backward);
      // The reduce-scatter's adjoint: every rank needs the whole output
      // gradient for its slice of the weight and its input gradient.
      if (plan_.scatter_output[k]) {
        g = model_.AllGather(g, 1);
        clk.Lap(kCommClock);
      }
      if (rows_split_ && k + 1 == end_) {
        model_.AllReduceSum(gb[l]);  // each rank's bias saw only its rows
        g = model_.AllGather(g, 0);
        clk.Lap(kCommClock);
      }
      gw[l] = at::matmul(g.t(), c.in[l]);
      clk.Lap(n.matmul_backward);
      if (k == begin_ && !input_grad) {
        g = at::Tensor();
        break;
      }
      at::Tensor ga = at::matmul(g, W(k));
      clk.Lap(n.matmul_backward);
      if (s_.layers[k].kind == LayerParallel::kColumn) {
        model_.AllReduceSum(ga);  // f backward
        clk.Lap(kCommClock);
      }
      if (plan_.gather_input[k]) {
        ga = Slice(ga, 1);
        clk.Lap(kExecutorClock);
      }
      if (plan_.slice_input[k]) {
        ga = model_.AllGather(ga, 1);  // the slice's adjoint
        clk.Lap(kCommClock);
      }
      g = ga;
    }
    if (relu_first_ && g.defined()) {
      g = g * (c.x > 0);
      clk.Lap(std::string(kReluFirstClock) + kBackwardClock);
    }
    cache_.erase(it);
    clk.Lap(kExecutorClock);
    Accumulate(gw_, gw);
    Accumulate(gb_, gb);
    clk.Lap(kAccumulateClock);
    return g;
  }

  void Update() override {
    AverageAndStep(data_, gw_, gb_, s_.lr, w_, b_);
    gw_.assign(w_.size(), at::Tensor());
    gb_.assign(b_.size(), at::Tensor());
  }

  // The full parameters of the stage's layers (rank 0 writes them).
  std::vector<FullLayerWeights> GatherFull() override {
    std::vector<LayerParallel::Kind> kinds;
    std::vector<at::Tensor> b = b_;
    for (int i = begin_; i < end_; ++i) {
      kinds.push_back(s_.layers[i].kind);
      if (plan_.scatter_output[i]) b[i - begin_] = model_.AllGather(b[i - begin_], 0);
    }
    return GatherFullWeights(model_, w_, b, kinds);
  }

 private:
  // What one micro-batch's backward reads, per layer of the stage (and the
  // stage's input when it starts with a ReLU).
  struct Cache {
    std::vector<at::Tensor> in, z;
    at::Tensor x;
  };

  // Whether layer i's output goes through a ReLU in this stage: between
  // layers, except the last layer's of a stage whose next stage starts with
  // it.
  bool ReluAfter(int i) const { return i + 1 < end_ || (i + 1 == end_ && relu_last_); }

  at::Tensor& W(int layer) { return w_[layer - begin_]; }
  at::Tensor& B(int layer) { return b_[layer - begin_]; }

  at::Tensor Slice(const at::Tensor& full, int64_t dim) const {
    const int64_t n = full.size(dim) / model_.size();
    return full.narrow(dim, model_.rank() * n, n).contiguous();
  }

  const ParallelTrainSpec& s_;
  LayerPlan plan_;
  const int begin_, end_;  // the stage's layers
  const bool gather_output_;
  const bool relu_first_, relu_last_;
  const bool rows_split_;  // the last layer's output is split by rows (loss_rows_split)
  Group& model_;
  Group& data_;
  std::vector<at::Tensor> w_, b_;    // the stage's layers' shards
  std::vector<at::Tensor> gw_, gb_;  // accumulated over the step's micro-batches
  std::map<int, Cache> cache_;       // per micro-batch in flight
  // Per layer of the stage, its ops' clock names (op_clock.h), forward and
  // backward: made once, not on every step.
  struct LayerClocks {
    std::string matmul, bias, relu, matmul_backward, bias_backward, relu_backward;
  };
  std::vector<LayerClocks> names_;
};

// Every stage's full parameters on rank 0 (in layer order): stage s's first
// rank, which holds them after GatherFull, sends them flat; other ranks
// return theirs (only rank 0's are written).
std::vector<FullLayerWeights> GatherToRankZero(const ParallelTrainSpec& s,
                                               const std::vector<int>& bounds, int stage,
                                               int local, std::vector<FullLayerWeights> mine,
                                               c10d::ProcessGroupGloo& world) {
  const int p = s.pipeline_stages;
  if (p == 1 || local != 0) return mine;
  constexpr int kWeightsTag = 1 << 20;  // apart from the micro-batches' tags
  const int stage_ranks = s.data_degree * s.model_degree;
  if (stage > 0) {
    std::vector<at::Tensor> flat;
    for (const FullLayerWeights& l : mine) {
      flat.push_back(at::from_blob(const_cast<float*>(l.weight.data()),
                                   {static_cast<int64_t>(l.weight.size())}, at::kFloat));
      flat.push_back(at::from_blob(const_cast<float*>(l.bias.data()),
                                   {static_cast<int64_t>(l.bias.size())}, at::kFloat));
    }
    std::vector<at::Tensor> v{at::cat(flat)};
    world.send(v, 0, kWeightsTag)->wait();
    return mine;
  }
  // Rank 0: the other stages' parameters, shaped as the initial ones.
  const auto init = InitModel(s);
  const size_t per_layer = NumLinears(s) / NumStageLayers(s);  // parameter pairs per layer
  for (int st = 1; st < p; ++st) {
    const size_t lo = bounds[st] * per_layer, hi = bounds[st + 1] * per_layer;
    int64_t total = 0;
    for (size_t i = lo; i < hi; ++i) total += init[i].first.numel() + init[i].second.numel();
    std::vector<at::Tensor> v{at::empty({total}, at::kFloat)};
    world.recv(v, st * stage_ranks, kWeightsTag)->wait();
    int64_t off = 0;
    for (size_t i = lo; i < hi; ++i) {
      const at::Tensor& w0 = init[i].first;
      const at::Tensor& b0 = init[i].second;
      const at::Tensor w = v[0].narrow(0, off, w0.numel()).view(w0.sizes());
      off += w0.numel();
      const at::Tensor b = v[0].narrow(0, off, b0.numel());
      off += b0.numel();
      mine.push_back(ToFull(w, b));
    }
  }
  return mine;
}

void SetUpRank() {
  at::set_num_threads(1);
  using SetFn = void (*)(int);
  if (auto f = reinterpret_cast<SetFn>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) f(1);
}

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

absl::Status WriteWeights(const std::string& path, const std::vector<FullLayerWeights>& ws) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return absl::InternalError(absl::StrCat("parallel rank: cannot write ", path));
  for (size_t i = 0; i < ws.size(); ++i) {
    std::fprintf(f, "layer %zu %lld %lld\n", i, static_cast<long long>(ws[i].out_features),
                 static_cast<long long>(ws[i].in_features));
    for (float v : ws[i].weight) std::fprintf(f, "%.9g ", v);  // %.9g round-trips a float
    std::fprintf(f, "\n");
    for (float v : ws[i].bias) std::fprintf(f, "%.9g ", v);
    std::fprintf(f, "\n");
  }
  const bool ok = std::fclose(f) == 0;
  if (!ok) return absl::InternalError(absl::StrCat("parallel rank: write ", path));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<FullLayerWeights>> ReadWeights(const std::string& path, size_t layers) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  std::istringstream in(text);
  std::vector<FullLayerWeights> ws(layers);
  for (size_t i = 0; i < layers; ++i) {
    std::string tag;
    size_t idx = 0;
    FullLayerWeights& w = ws[i];
    if (!(in >> tag >> idx >> w.out_features >> w.in_features) || tag != "layer" || idx != i) {
      return absl::InternalError(absl::StrCat("parallel train: bad weights file at layer ", i));
    }
    w.weight.resize(w.out_features * w.in_features);
    w.bias.resize(w.out_features);
    for (float& v : w.weight) in >> v;
    for (float& v : w.bias) in >> v;
    if (!in) return absl::InternalError(absl::StrCat("parallel train: short weights of layer ", i));
  }
  return ws;
}

}  // namespace

std::string_view LayerParallelName(LayerParallel::Kind kind) {
  switch (kind) {
    case LayerParallel::kData:
      return "data";
    case LayerParallel::kColumn:
      return "column";
    case LayerParallel::kRow:
      return "row";
  }
  return "unknown";
}

absl::Status ValidateParallelTrainSpec(const ParallelTrainSpec& spec) {
  if (spec.transformer.has_value()) {
    if (spec.loss_rows_split) {
      return absl::InvalidArgumentError(
          "parallel train: loss_rows_split is for the MLP (a transformer's blocks end replicated)");
    }
    RETURN_IF_ERROR(ValidateRun(spec));
    RETURN_IF_ERROR(internal::ValidateTransformerSpec(spec));
    return internal::StageBounds(spec, spec.transformer->blocks).status();
  }
  return PlanLayers(spec).status();
}

absl::StatusOr<ParallelTrainResult> RunSingleProcessReference(const ParallelTrainSpec& spec) {
  RETURN_IF_ERROR(ValidateParallelTrainSpec(spec));
  ParallelTrainResult r;
  try {
    std::vector<at::Tensor> w, b;
    for (auto& [wi, bi] : InitModel(spec)) {
      w.push_back(wi.requires_grad_(true));
      b.push_back(bi.requires_grad_(true));
    }
    const size_t n = w.size();
    for (int step = 0; step < spec.steps; ++step) {
      auto [x, t] = MakeBatch(spec, step);
      const auto t0 = std::chrono::steady_clock::now();
      at::Tensor a = x;
      if (spec.transformer.has_value()) {
        a = internal::TransformerForward(spec, w, b, x);
      } else {
        if (internal::StageStartsWithRelu(spec, 0)) a = at::relu(a);  // see stage_relu_first
        for (size_t i = 0; i < n; ++i) {
          a = at::linear(a, w[i], b[i]);
          if (i + 1 < n) a = at::relu(a);
        }
      }
      at::Tensor loss = at::mse_loss(a, t);
      loss.backward();
      for (size_t i = 0; i < n; ++i) {  // fresh leaves: the update is not recorded
        w[i] = (w[i].detach() - spec.lr * w[i].grad()).requires_grad_(true);
        b[i] = (b[i].detach() - spec.lr * b[i].grad()).requires_grad_(true);
      }
      r.step_s.push_back(SecondsSince(t0));
      r.loss.push_back(loss.item<double>());
    }
    for (size_t i = 0; i < n; ++i) r.weights.push_back(ToFull(w[i].detach(), b[i].detach()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("parallel train reference: ", e.what()));
  }
  return r;
}

absl::Status RunParallelRank(const ParallelRankConfig& config) {
  if (config.world < 1 || config.rank < 0 || config.rank >= config.world) {
    return absl::InvalidArgumentError(
        absl::StrCat("parallel rank: rank ", config.rank, " of world ", config.world));
  }
  if (config.pin_cores) RETURN_IF_ERROR(PinToCore(config.rank, "parallel"));
  SetUpRank();
  ASSIGN_OR_RETURN(std::string text, ReadFile(config.spec_path));
  absl::StatusOr<nlohmann::json> parsed = base::ParseBoundedJson(text, base::kPlanJsonLimits);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(config.spec_path, ": ", parsed.status().message()));
  }
  nlohmann::json j = *std::move(parsed);
  ParallelTrainSpec spec;
  try {
    spec = SpecFromJson(j);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(config.spec_path, ": ", e.what()));
  }
  RETURN_IF_ERROR(ValidateParallelTrainSpec(spec));
  if (spec.ranks != config.world) {
    return absl::InvalidArgumentError(
        absl::StrCat("parallel rank: spec has ", spec.ranks, " ranks, world ", config.world));
  }
  // Stage-major ranks (parallel_train.h): within a stage, model groups are
  // contiguous.
  const int mdeg = spec.model_degree, ddeg = spec.data_degree, pdeg = spec.pipeline_stages;
  const int stage_ranks = mdeg * ddeg;
  const int stage = config.rank / stage_ranks, local = config.rank % stage_ranks;
  const int mi = local % mdeg, di = local / mdeg;
  ASSIGN_OR_RETURN(const std::vector<int> bounds,
                   internal::StageBounds(spec, NumStageLayers(spec)));
  std::vector<double> times, losses;
  struct Clocked {
    int step;
    std::string name;
    double s;
  };
  std::vector<Clocked> clocks;  // per step, the op clocks' totals (op_clocks)
  std::vector<FullLayerWeights> weights;
  try {
    auto store = c10::make_intrusive<c10d::FileStore>(config.store_path, config.world);
    auto world = MakeGlooGroup(store, config.rank, config.world, "127.0.0.1");
    // Sub-groups: every rank makes its model group, then its data group (both
    // inside its stage), each a ProcessGroupGloo on its own key prefix of the
    // one store.
    c10::intrusive_ptr<c10d::ProcessGroupGloo> model_pg, data_pg;
    if (mdeg > 1) {
      auto ps =
          c10::make_intrusive<c10d::PrefixStore>(absl::StrCat("model", stage, "_", di), store);
      model_pg = MakeGlooGroup(ps, mi, mdeg, "127.0.0.1");
    }
    if (ddeg > 1) {
      auto ps = c10::make_intrusive<c10d::PrefixStore>(absl::StrCat("data", stage, "_", mi), store);
      data_pg = MakeGlooGroup(ps, di, ddeg, "127.0.0.1");
    }
    const bool poll = config.pin_cores && config.poll;
    Group model(model_pg, mi, mdeg, poll), data(data_pg, di, ddeg, poll);
    PeerLink link(store, stage, pdeg, local, poll);
    std::unique_ptr<internal::ShardTrainer> trainer;
    if (spec.transformer.has_value()) {
      trainer = internal::MakeTransformerTrainer(spec, InitModel(spec), model, data, bounds[stage],
                                                 bounds[stage + 1]);
    } else {
      ASSIGN_OR_RETURN(LayerPlan plan, PlanLayers(spec));
      trainer = std::make_unique<RankTrainer>(spec, std::move(plan), stage, model, data);
    }
    const int64_t rows = spec.batch / ddeg;
    OpClock& clk = RankClock();
    clk.Enable(config.op_clocks);
    for (int step = 0; step < spec.steps; ++step) {
      auto [x, t] = MakeBatch(spec, step);
      const at::Tensor xr = x.narrow(0, di * rows, rows), tr = t.narrow(0, di * rows, rows);
      // Bound ranks poll here too: a rank blocked in the barrier may wake
      // up late and start its step behind the others.
      WaitCollective(world->barrier(), poll);
      const auto t0 = std::chrono::steady_clock::now();
      clk.Mark();
      const double local_loss =
          internal::RunPipelineStep(spec, stage, bounds, *trainer, link, xr, tr, mi);
      times.push_back(SecondsSince(t0));
      for (auto& [name, sec] : clk.Take()) clocks.push_back({step, name, sec});
      if (stage == pdeg - 1) {
        // The global loss: the mean of the data groups' means (equal shards).
        at::Tensor l = at::full({1}, local_loss, at::kDouble);
        data.AllReduceSum(l);
        double loss = l.item<double>() / ddeg;
        if (spec.loss_rows_split && !spec.transformer.has_value()) {
          // Each model rank's loss covers its rows: the mean over the group.
          at::Tensor lm = at::full({1}, loss, at::kDouble);
          model.AllReduceSum(lm);
          loss = lm.item<double>() / mdeg;
        }
        losses.push_back(loss);
      } else {
        losses.push_back(0);  // only the last stage computes the loss
      }
    }
    weights = GatherToRankZero(spec, bounds, stage, local, trainer->GatherFull(), *world);
    world->barrier()->wait();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("parallel rank ", config.rank, ": ", e.what()));
  }
  std::ofstream out(config.output_path);
  out.precision(17);
  for (size_t i = 0; i < times.size(); ++i)
    out << "step " << i << ' ' << times[i] << ' ' << losses[i] << '\n';
  for (const Clocked& c : clocks) out << "clock " << c.step << ' ' << c.name << ' ' << c.s << '\n';
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("parallel rank: write ", config.output_path));
  if (config.rank == 0) RETURN_IF_ERROR(WriteWeights(config.weights_path, weights));
  return absl::OkStatus();
}

absl::StatusOr<ParallelTrainResult> RunParallelTraining(const ParallelTrainSpec& spec,
                                                        const ParallelTrainOptions& options) {
  RETURN_IF_ERROR(ValidateParallelTrainSpec(spec));
  ASSIGN_OR_RETURN(std::string binary, FindRankProgram(options.rank_binary, "braid-parallel-rank",
                                                       "BRAID_PARALLEL_RANK", "parallel train"));
  ASSIGN_OR_RETURN(RankDir dir, RankDir::Create("braid-ptrain"));
  const std::string spec_path = dir.path() + "/spec.json";
  const std::string weights_path = dir.path() + "/weights.txt";
  {
    std::ofstream f(spec_path);
    f << SpecToJson(spec).dump();
    if (!f) return absl::InternalError(absl::StrCat("parallel train: cannot write ", spec_path));
  }
  std::vector<std::vector<std::string>> argv;
  for (int r = 0; r < spec.ranks; ++r) {
    argv.push_back({binary, "--store", dir.path() + "/store", "--spec", spec_path, "--out",
                    absl::StrCat(dir.path(), "/rank", r, ".txt"), "--weights", weights_path,
                    "--rank", absl::StrCat(r), "--world", absl::StrCat(spec.ranks)});
    if (options.pin_cores) argv.back().push_back("--pin-cores");
    if (options.pin_cores && options.poll) argv.back().push_back("--poll");
    if (options.op_clocks) argv.back().push_back("--op-clocks");
  }
  RETURN_IF_ERROR(RunRanks(argv, dir, options.timeout_s, "parallel train"));

  ParallelTrainResult res;
  res.step_s.assign(spec.steps, 0.0);
  // The last stage's ranks compute the loss: take the first one's.
  const int loss_rank = (spec.pipeline_stages - 1) * spec.data_degree * spec.model_degree;
  // Op clocks: per step and "s<stage>/<name>", the sum over the stage's
  // ranks and how many ranks reported it.
  if (options.op_clocks) {
    res.rank_clocked.assign(spec.steps,
                            std::vector<ParallelTrainResult::RankClocked>(spec.ranks));
  }
  std::vector<std::map<std::string, std::pair<double, int>>> clocks(spec.steps);
  const int stage_ranks = spec.data_degree * spec.model_degree;
  for (int r = 0; r < spec.ranks; ++r) {
    ASSIGN_OR_RETURN(std::string text, ReadFile(absl::StrCat(dir.path(), "/rank", r, ".txt")));
    std::istringstream in(text);
    std::string line;
    int lines = 0;
    while (std::getline(in, line)) {
      std::istringstream ls(line);
      std::string tag;
      int i = 0;
      ls >> tag >> i;
      if (tag == "clock") {
        std::string name;
        double sec = 0;
        if (!(ls >> name >> sec) || i < 0 || i >= spec.steps) {
          return absl::InternalError(absl::StrCat("parallel train: rank ", r, " bad clock line '",
                                                  line, "'"));
        }
        auto& [sum, n] = clocks[i][absl::StrCat("s", r / stage_ranks, "/", name)];
        sum += sec;
        ++n;
        if (options.op_clocks) {
          (IsCommClock(name) ? res.rank_clocked[i][r].comm_s : res.rank_clocked[i][r].compute_s) +=
              sec;
        }
        continue;
      }
      double sec = 0, loss = 0;
      if (tag != "step" || !(ls >> sec >> loss) || i != lines || i >= spec.steps) {
        return absl::InternalError(absl::StrCat("parallel train: rank ", r, " bad line ", lines));
      }
      res.step_s[i] = std::max(res.step_s[i], sec);  // a step ends when its slowest rank does
      if (r == loss_rank) res.loss.push_back(loss);
      ++lines;
    }
    if (lines != spec.steps) {
      return absl::InternalError(absl::StrCat("parallel train: rank ", r, " reported ", lines,
                                              " steps, expected ", spec.steps));
    }
  }
  if (options.op_clocks) {
    res.op_clocks.resize(spec.steps);
    for (int i = 0; i < spec.steps; ++i)
      for (const auto& [name, sn] : clocks[i]) res.op_clocks[i][name] = sn.first / sn.second;
  }
  ASSIGN_OR_RETURN(res.weights, ReadWeights(weights_path, NumLinears(spec)));
  return res;
}

}  // namespace braid::worker
