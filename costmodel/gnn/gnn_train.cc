#include "costmodel/gnn/gnn_train.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <limits>
#include <numeric>
#include <random>

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adam.h>
#include <torch/utils.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "costmodel/gnn/sample_hashes.h"
#include "nlohmann/json.hpp"

namespace braid::costmodel::gnn {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string HpName(const GnnHyperParams& hp) {
  return absl::StrFormat("layers=%d heads=%d width=%d", hp.layers, hp.heads, hp.width);
}

std::vector<const FeatureGraph*> Features(std::span<const LabeledGraph> set,
                                          std::span<const int> order, size_t begin, size_t end) {
  std::vector<const FeatureGraph*> out;
  out.reserve(end - begin);
  for (size_t i = begin; i < end; ++i) out.push_back(&set[order.empty() ? i : order[i]].features);
  return out;
}

torch::Tensor LogTargets(std::span<const LabeledGraph> set, std::span<const int> order,
                         size_t begin, size_t end) {
  torch::Tensor t = torch::empty({static_cast<int64_t>(end - begin)}, torch::kFloat);
  float* p = t.data_ptr<float>();
  for (size_t i = begin; i < end; ++i) {
    p[i - begin] = static_cast<float>(std::log(set[order.empty() ? i : order[i]].seconds));
  }
  return t;
}

struct PointResult {
  GridPoint point;
  GnnNet net{nullptr};
  double untrained_val_loss = 0;
};

PointResult TrainPoint(std::span<const LabeledGraph> train, std::span<const LabeledGraph> val,
                       int vocab_size, const FeatureStats& stats, const GnnHyperParams& hp,
                       const TrainOptions& opt) {
  const Clock::time_point t0 = Clock::now();
  torch::manual_seed(opt.seed);
  std::mt19937_64 rng(opt.seed);
  PointResult r;
  r.point.hp = hp;
  r.net = GnnNet(vocab_size, hp);
  r.untrained_val_loss = LogMse(r.net, val, stats);
  torch::optim::Adam adam(r.net->parameters(), torch::optim::AdamOptions(opt.learning_rate));
  double lr = opt.learning_rate;
  double best = std::numeric_limits<double>::infinity();
  std::vector<torch::Tensor> best_params;
  int since_best = 0;
  std::vector<int> order(train.size());
  std::iota(order.begin(), order.end(), 0);
  const size_t bs = static_cast<size_t>(std::max(1, opt.batch_size));
  for (int epoch = 1; epoch <= opt.max_epochs; ++epoch) {
    const Clock::time_point te = Clock::now();
    // Batches of groups of similar size (little padding), in random order.
    std::shuffle(order.begin(), order.end(), rng);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      return train[a].features.num_nodes < train[b].features.num_nodes;
    });
    std::vector<size_t> starts;
    for (size_t b = 0; b < order.size(); b += bs) starts.push_back(b);
    std::shuffle(starts.begin(), starts.end(), rng);
    r.net->train();
    double sum = 0;
    for (size_t b : starts) {
      const size_t e = std::min(order.size(), b + bs);
      std::vector<const FeatureGraph*> fs = Features(train, order, b, e);
      GnnBatch batch = MakeBatch(fs, stats);
      torch::Tensor target = LogTargets(train, order, b, e);
      adam.zero_grad();
      torch::Tensor pred = r.net->forward(batch) + batch.log_sum;
      torch::Tensor loss = (pred - target).pow(2).mean();
      loss.backward();
      torch::nn::utils::clip_grad_norm_(r.net->parameters(), 5.0);
      adam.step();
      sum += loss.item<double>() * static_cast<double>(e - b);
    }
    const double train_loss = sum / static_cast<double>(order.size());
    const double val_loss = LogMse(r.net, val, stats);
    r.point.epochs = epoch;
    if (val_loss < best * (1 - 1e-4)) {
      best = val_loss;
      since_best = 0;
      r.point.best_epoch = epoch;
      best_params.clear();
      for (const torch::Tensor& p : r.net->parameters()) best_params.push_back(p.detach().clone());
    } else {
      ++since_best;
      // Halve the step after half the patience without progress.
      if (since_best % std::max(1, opt.patience / 2) == 0) {
        lr *= 0.5;
        for (auto& group : adam.param_groups()) {
          static_cast<torch::optim::AdamOptions&>(group.options()).lr(lr);
        }
      }
    }
    if (opt.progress) {
      opt.progress(absl::StrFormat("%s epoch %d: train %.5f val %.5f (best %.5f @ %d) lr %.2g %.1fs",
                                   HpName(hp), epoch, train_loss, val_loss, best,
                                   r.point.best_epoch, lr, Since(te)));
    }
    if (since_best >= opt.patience) break;
  }
  {
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> params = r.net->parameters();
    for (size_t i = 0; i < params.size() && i < best_params.size(); ++i) params[i].copy_(best_params[i]);
  }
  r.net->eval();
  r.point.val_loss = best;
  r.point.train_loss = LogMse(r.net, train, stats);
  r.point.seconds = Since(t0);
  return r;
}

}  // namespace

std::vector<GnnHyperParams> DefaultGrid() {
  std::vector<GnnHyperParams> grid;
  for (int layers : {2, 3}) {
    for (int heads : {2, 4}) {
      for (int width : {32, 64}) grid.push_back({.layers = layers, .heads = heads, .width = width});
    }
  }
  return grid;
}

double LogMse(GnnNet& net, std::span<const LabeledGraph> set, const FeatureStats& stats) {
  if (set.empty()) return 0;
  c10::InferenceMode guard;
  const bool was_training = net->is_training();
  net->eval();
  // Chunks of groups of similar size: little padding.
  std::vector<int> order(set.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return set[a].features.num_nodes < set[b].features.num_nodes;
  });
  double sum = 0;
  constexpr size_t kChunk = 512;
  for (size_t b = 0; b < set.size(); b += kChunk) {
    const size_t e = std::min(set.size(), b + kChunk);
    std::vector<const FeatureGraph*> fs = Features(set, order, b, e);
    GnnBatch batch = MakeBatch(fs, stats);
    torch::Tensor pred = net->forward(batch) + batch.log_sum;
    sum += (pred - LogTargets(set, order, b, e)).pow(2).sum().item<double>();
  }
  if (was_training) net->train();
  return sum / static_cast<double>(set.size());
}

absl::StatusOr<TrainedGnn> TrainGnn(std::span<const LabeledGraph> train,
                                    std::span<const LabeledGraph> val, int vocab_size,
                                    const TrainOptions& options) {
  if (train.empty() || val.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("training needs samples in both sets: train ",
                                                   train.size(), ", validation ", val.size()));
  }
  if (options.grid.empty()) return absl::InvalidArgumentError("training: empty hyper-parameter grid");
  for (const LabeledGraph& l : train) {
    if (!(l.seconds > 0) || !std::isfinite(l.seconds)) {
      return absl::InvalidArgumentError(absl::StrCat("training: a sample has time ", l.seconds));
    }
  }
  for (const GnnHyperParams& hp : options.grid) {
    if (absl::Status s = ValidateHyperParams(hp); !s.ok()) return s;
  }
  UseOneThread();
  const Clock::time_point t0 = Clock::now();
  std::vector<FeatureGraph> train_features;
  train_features.reserve(train.size());
  for (const LabeledGraph& l : train) train_features.push_back(l.features);
  TrainedGnn out;
  out.stats = ComputeStats(train_features);
  try {
    double best = std::numeric_limits<double>::infinity();
    for (const GnnHyperParams& hp : options.grid) {
      PointResult r = TrainPoint(train, val, vocab_size, out.stats, hp, options);
      out.grid.push_back(r.point);
      if (r.point.val_loss < best) {
        best = r.point.val_loss;
        out.net = r.net;
        out.hp = hp;
        out.train_loss = r.point.train_loss;
        out.val_loss = r.point.val_loss;
        out.untrained_val_loss = r.untrained_val_loss;
        out.epochs = r.point.epochs;
      }
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("training: ", e.what()));
  }
  out.seconds = Since(t0);
  return out;
}

OpVocabulary VocabularyOf(std::span<const GnnExample> examples, std::span<const int> indices) {
  std::vector<std::string> types;
  for (int i : indices) {
    for (const graph::Op& op : examples[i].graph.ops()) types.push_back(op.type);
  }
  return OpVocabulary::Build(std::move(types));
}

std::vector<LabeledGraph> Featurize(std::span<const GnnExample> examples,
                                    std::span<const int> indices, const ClusterSpec& cluster,
                                    const OpVocabulary& vocab) {
  ClusterCostModel roofline(cluster, nullptr, nullptr, CommModel(cluster));
  std::vector<LabeledGraph> out;
  out.reserve(indices.size());
  for (int i : indices) {
    const GnnExample& e = examples[i];
    const graph::Graph& g = e.graph;
    std::vector<graph::OpId> ops(g.num_ops());
    std::iota(ops.begin(), ops.end(), 0);
    std::vector<MemberTime> times;
    times.reserve(ops.size());
    for (graph::OpId id : ops) {
      const std::optional<ProfileSample>& m =
          id < static_cast<int>(e.members.size()) ? e.members[id] : std::nullopt;
      if (m.has_value()) {
        times.push_back({m->median_s, true});
      } else {
        times.push_back({roofline.ComputeTime(g, std::span<const graph::OpId>(&id, 1)).seconds, false});
      }
    }
    out.push_back({ExtractFeatures(g, ops, times, vocab), e.fused.median_s});
  }
  return out;
}

absl::StatusOr<GnnTrainRun> TrainFromExamples(std::span<const GnnExample> examples,
                                              const ClusterSpec& cluster, Split split,
                                              const std::string& holdout,
                                              const TrainOptions& options) {
  GnnTrainRun run;
  run.sets = SplitExamples(examples, split, holdout);
  const OpVocabulary vocab = VocabularyOf(examples, run.sets.train);
  std::vector<LabeledGraph> train = Featurize(examples, run.sets.train, cluster, vocab);
  std::vector<LabeledGraph> val = Featurize(examples, run.sets.val, cluster, vocab);
  ASSIGN_OR_RETURN(run.model, TrainGnn(train, val, vocab.size(), options));
  CheckpointInfo& info = run.info;
  info.device_kind = cluster.device.kind;
  info.vocabulary = vocab.names();
  info.stats = run.model.stats;
  info.hp = run.model.hp;
  info.split = std::string(SplitName(split));
  info.holdout = split == Split::kB ? holdout : "";
  info.seed = options.seed;
  info.train_samples = static_cast<int64_t>(train.size());
  info.val_samples = static_cast<int64_t>(val.size());
  info.epochs = run.model.epochs;
  info.train_loss = run.model.train_loss;
  info.val_loss = run.model.val_loss;
  nlohmann::json grid = nlohmann::json::array();
  for (const GridPoint& p : run.model.grid) {
    grid.push_back({{"layers", p.hp.layers},
                    {"heads", p.hp.heads},
                    {"width", p.hp.width},
                    {"train_loss", p.train_loss},
                    {"val_loss", p.val_loss},
                    {"best_epoch", p.best_epoch},
                    {"epochs", p.epochs}});
  }
  info.grid_json = grid.dump();
  info.sample_hashes = RecordSampleHashes(examples, run.sets, cluster.device.kind);
  return run;
}

}  // namespace braid::costmodel::gnn
