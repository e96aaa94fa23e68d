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
#include <memory>
#include <sstream>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"
#include "worker/gloo_group.h"
#include "worker/parallel_transformer.h"
#include "worker/rank_processes.h"

namespace braid::worker {
namespace {

using Kind = LayerParallel::Kind;
using internal::AverageAndStep;
using internal::GatherFullWeights;
using internal::ToFull;

// Where each layer's input must be gathered (a partitioned activation read by
// a layer that needs it replicated) and whether the output is, before the loss.
struct LayerPlan {
  std::vector<bool> gather_input;
  bool gather_output = false;
};

// The checks every model shares: degrees, ranks, batch, steps and lr.
absl::Status ValidateRun(const ParallelTrainSpec& s) {
  auto bad = [](auto... parts) {
    return absl::InvalidArgumentError(absl::StrCat("parallel train: ", parts...));
  };
  if (s.batch <= 0 || s.steps < 1 || s.ranks < 1 || s.data_degree < 1 || s.model_degree < 1) {
    return bad("batch, steps, ranks and degrees must be positive");
  }
  if (!(s.lr > 0) || !std::isfinite(s.lr)) return bad("lr ", s.lr, " is not a positive number");
  if (s.ranks != s.data_degree * s.model_degree) {
    return bad(s.ranks, " ranks != data_degree ", s.data_degree, " x model_degree ",
               s.model_degree);
  }
  if (s.batch % s.data_degree != 0) {
    return bad("batch ", s.batch, " does not divide over data_degree ", s.data_degree);
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
  bool partitioned = false;  // the activation entering layer i
  for (size_t i = 0; i < s.layers.size(); ++i) {
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
      case LayerParallel::kRow:
        if (!partitioned) {
          return bad(name,
                     ": its input is not partitioned on the feature dim "
                     "(a row layer must follow a column layer)");
        }
        plan.gather_input.push_back(false);
        partitioned = false;
        break;
      default:
        return bad(name, ": unknown parallel kind ", static_cast<int>(k));
    }
  }
  plan.gather_output = partitioned;
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
  Group(c10::intrusive_ptr<c10d::ProcessGroupGloo> pg, int rank, int size)
      : pg_(std::move(pg)), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void AllReduceSum(at::Tensor& t) override {
    if (size_ == 1) return;
    std::vector<at::Tensor> v{t};
    pg_->allreduce(v)->wait();
  }
  // Concatenates every member's `t` along `dim` (in member order).
  at::Tensor AllGather(const at::Tensor& t, int64_t dim) override {
    if (size_ == 1) return t;
    std::vector<at::Tensor> in{t.contiguous()};
    std::vector<std::vector<at::Tensor>> out(1);
    for (int i = 0; i < size_; ++i) out[0].push_back(at::empty_like(in[0]));
    pg_->allgather(out, in)->wait();
    return at::cat(out[0], dim);
  }

 private:
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg_;
  int rank_;
  int size_;
};

// One rank's shards and its explicit forward/backward.
class RankTrainer final : public internal::ShardTrainer {
 public:
  RankTrainer(const ParallelTrainSpec& s, LayerPlan plan, Group& model, Group& data)
      : s_(s), plan_(std::move(plan)), model_(model), data_(data) {
    const int64_t m = model_.rank();
    const int64_t mm = model_.size();
    auto full = InitFull(s_);
    for (size_t i = 0; i < s_.layers.size(); ++i) {
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
          break;
        }
        default:
          break;
      }
      w_.push_back(w.contiguous().clone());
      b_.push_back(b.contiguous().clone());
    }
  }

  // One step on this rank's rows of the batch; returns the local mean loss.
  double Step(const at::Tensor& x_full, const at::Tensor& t_full) override {
    const size_t n = s_.layers.size();
    const int64_t rows = s_.batch / data_.size();
    at::Tensor a = x_full.narrow(0, data_.rank() * rows, rows);
    const at::Tensor t = t_full.narrow(0, data_.rank() * rows, rows);
    std::vector<at::Tensor> in(n), z(n);
    for (size_t i = 0; i < n; ++i) {
      if (plan_.gather_input[i]) a = model_.AllGather(a, 1);
      in[i] = a;
      at::Tensor zi = at::matmul(a, w_[i].t());
      if (s_.layers[i].kind == LayerParallel::kRow) model_.AllReduceSum(zi);  // g
      zi.add_(b_[i]);
      z[i] = zi;
      a = i + 1 < n ? at::relu(zi) : zi;
    }
    if (plan_.gather_output) a = model_.AllGather(a, 1);
    const at::Tensor diff = a - t;
    const double loss = diff.pow(2).mean().item<double>();
    at::Tensor g = diff * (2.0 / static_cast<double>(diff.numel()));
    if (plan_.gather_output) g = Slice(g, 1);

    std::vector<at::Tensor> gw(n), gb(n);
    for (size_t k = n; k-- > 0;) {
      if (k + 1 < n) g = g * (z[k] > 0);
      gw[k] = at::matmul(g.t(), in[k]);
      gb[k] = g.sum(0);
      if (k == 0) break;
      at::Tensor ga = at::matmul(g, w_[k]);
      if (s_.layers[k].kind == LayerParallel::kColumn) model_.AllReduceSum(ga);  // f backward
      if (plan_.gather_input[k]) ga = Slice(ga, 1);
      g = ga;
    }
    AverageAndStep(data_, gw, gb, s_.lr, w_, b_);
    return loss;
  }

  // The full parameters, assembled in every model group (rank 0 writes them).
  std::vector<FullLayerWeights> GatherFull() override {
    std::vector<LayerParallel::Kind> kinds;
    for (const LayerParallel& l : s_.layers) kinds.push_back(l.kind);
    return GatherFullWeights(model_, w_, b_, kinds);
  }

 private:
  at::Tensor Slice(const at::Tensor& full, int64_t dim) const {
    const int64_t n = full.size(dim) / model_.size();
    return full.narrow(dim, model_.rank() * n, n).contiguous();
  }

  const ParallelTrainSpec& s_;
  LayerPlan plan_;
  Group& model_;
  Group& data_;
  std::vector<at::Tensor> w_, b_;
};

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
    RETURN_IF_ERROR(ValidateRun(spec));
    return internal::ValidateTransformerSpec(spec);
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
  SetUpRank();
  ASSIGN_OR_RETURN(std::string text, ReadFile(config.spec_path));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded())
    return absl::InvalidArgumentError(absl::StrCat(config.spec_path, ": not JSON"));
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
  const int mdeg = spec.model_degree, ddeg = spec.data_degree;
  const int mi = config.rank % mdeg, di = config.rank / mdeg;
  std::vector<double> times, losses;
  std::vector<FullLayerWeights> weights;
  try {
    auto store = c10::make_intrusive<c10d::FileStore>(config.store_path, config.world);
    auto world = MakeGlooGroup(store, config.rank, config.world, "127.0.0.1");
    // Sub-groups: every rank makes its model group, then its data group, each
    // a ProcessGroupGloo on its own key prefix of the one store.
    c10::intrusive_ptr<c10d::ProcessGroupGloo> model_pg, data_pg;
    if (mdeg > 1) {
      auto ps = c10::make_intrusive<c10d::PrefixStore>(absl::StrCat("model", di), store);
      model_pg = MakeGlooGroup(ps, mi, mdeg, "127.0.0.1");
    }
    if (ddeg > 1) {
      auto ps = c10::make_intrusive<c10d::PrefixStore>(absl::StrCat("data", mi), store);
      data_pg = MakeGlooGroup(ps, di, ddeg, "127.0.0.1");
    }
    Group model(model_pg, mi, mdeg), data(data_pg, di, ddeg);
    std::unique_ptr<internal::ShardTrainer> trainer;
    if (spec.transformer.has_value()) {
      trainer = internal::MakeTransformerTrainer(spec, InitModel(spec), model, data);
    } else {
      ASSIGN_OR_RETURN(LayerPlan plan, PlanLayers(spec));
      trainer = std::make_unique<RankTrainer>(spec, std::move(plan), model, data);
    }
    for (int step = 0; step < spec.steps; ++step) {
      auto [x, t] = MakeBatch(spec, step);
      world->barrier()->wait();
      const auto t0 = std::chrono::steady_clock::now();
      const double local = trainer->Step(x, t);
      times.push_back(SecondsSince(t0));
      // The global loss: the mean of the data groups' means (equal shards).
      at::Tensor l = at::full({1}, local, at::kDouble);
      data.AllReduceSum(l);
      losses.push_back(l.item<double>() / ddeg);
    }
    weights = trainer->GatherFull();
    world->barrier()->wait();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("parallel rank ", config.rank, ": ", e.what()));
  }
  std::ofstream out(config.output_path);
  out.precision(17);
  for (size_t i = 0; i < times.size(); ++i)
    out << "step " << i << ' ' << times[i] << ' ' << losses[i] << '\n';
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
  }
  RETURN_IF_ERROR(RunRanks(argv, dir, options.timeout_s, "parallel train"));

  ParallelTrainResult res;
  res.step_s.assign(spec.steps, 0.0);
  for (int r = 0; r < spec.ranks; ++r) {
    ASSIGN_OR_RETURN(std::string text, ReadFile(absl::StrCat(dir.path(), "/rank", r, ".txt")));
    std::istringstream in(text);
    std::string tag;
    int i = 0;
    double sec = 0, loss = 0;
    int lines = 0;
    while (in >> tag >> i >> sec >> loss) {
      if (tag != "step" || i != lines || i >= spec.steps) {
        return absl::InternalError(absl::StrCat("parallel train: rank ", r, " bad line ", lines));
      }
      res.step_s[i] = std::max(res.step_s[i], sec);  // a step ends when its slowest rank does
      if (r == 0) res.loss.push_back(loss);
      ++lines;
    }
    if (lines != spec.steps) {
      return absl::InternalError(absl::StrCat("parallel train: rank ", r, " reported ", lines,
                                              " steps, expected ", spec.steps));
    }
  }
  ASSIGN_OR_RETURN(res.weights, ReadWeights(weights_path, NumLinears(spec)));
  return res;
}

}  // namespace braid::worker
