#include "costmodel/gnn/gnn_model.h"

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "xxhash.h"

namespace braid::costmodel::gnn {
namespace {

constexpr char kVersionKey[] = "braid_format_version";
constexpr char kMetaKey[] = "braid_meta";
// Groups up to this size mix neighbour embeddings by broadcasting (GatLayer).
constexpr int64_t kBroadcastMaxNodes = 8;
// Predict's sub-batch size (see there).
constexpr size_t kInferenceChunk = 512;
// Masked-out attention logits and max-pool entries.
constexpr double kNegative = -1e9;

nlohmann::json InfoToJson(const CheckpointInfo& i) {
  nlohmann::json j;
  j["feature_schema"] = i.feature_schema;
  j["device_kind"] = i.device_kind;
  j["vocabulary"] = i.vocabulary;
  j["stats"] = {{"node_mean", i.stats.node_mean},
                {"node_std", i.stats.node_std},
                {"group_mean", i.stats.group_mean},
                {"group_std", i.stats.group_std}};
  j["hyper_parameters"] = {{"layers", i.hp.layers},
                           {"heads", i.hp.heads},
                           {"width", i.hp.width},
                           {"type_embedding", i.hp.type_embedding}};
  j["split"] = i.split;
  j["holdout"] = i.holdout;
  j["seed"] = i.seed;
  j["train_samples"] = i.train_samples;
  j["val_samples"] = i.val_samples;
  j["epochs"] = i.epochs;
  j["train_loss"] = i.train_loss;
  j["val_loss"] = i.val_loss;
  j["grid"] = i.grid_json.empty() ? nlohmann::json::array() : nlohmann::json::parse(i.grid_json);
  return j;
}

CheckpointInfo InfoFromJson(const nlohmann::json& j) {
  CheckpointInfo i;
  i.feature_schema = j.at("feature_schema").get<std::string>();
  i.device_kind = j.at("device_kind").get<std::string>();
  i.vocabulary = j.at("vocabulary").get<std::vector<std::string>>();
  const nlohmann::json& s = j.at("stats");
  i.stats.node_mean = s.at("node_mean").get<std::vector<float>>();
  i.stats.node_std = s.at("node_std").get<std::vector<float>>();
  i.stats.group_mean = s.at("group_mean").get<std::vector<float>>();
  i.stats.group_std = s.at("group_std").get<std::vector<float>>();
  const nlohmann::json& hp = j.at("hyper_parameters");
  i.hp.layers = hp.at("layers").get<int>();
  i.hp.heads = hp.at("heads").get<int>();
  i.hp.width = hp.at("width").get<int>();
  i.hp.type_embedding = hp.at("type_embedding").get<int>();
  i.split = j.at("split").get<std::string>();
  i.holdout = j.at("holdout").get<std::string>();
  i.seed = j.at("seed").get<uint64_t>();
  i.train_samples = j.at("train_samples").get<int64_t>();
  i.val_samples = j.at("val_samples").get<int64_t>();
  i.epochs = j.at("epochs").get<int>();
  i.train_loss = j.at("train_loss").get<double>();
  i.val_loss = j.at("val_loss").get<double>();
  i.grid_json = j.at("grid").dump();
  return i;
}

}  // namespace

absl::Status ValidateHyperParams(const GnnHyperParams& hp) {
  if (hp.layers < 1 || hp.heads < 1 || hp.width < hp.heads || hp.width % hp.heads != 0 ||
      hp.type_embedding < 1 || hp.layers > 16 || hp.width > 4096) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "hyper-parameters: layers %d, heads %d, width %d, type embedding %d: need layers in "
        "1..16, width a multiple of heads (<= 4096), embedding >= 1",
        hp.layers, hp.heads, hp.width, hp.type_embedding));
  }
  return absl::OkStatus();
}

void UseOneThread() {
  at::set_num_threads(1);
  using SetFn = void (*)(int);
  if (auto f = reinterpret_cast<SetFn>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) f(1);
}

GnnBatch MakeBatch(std::span<const FeatureGraph* const> graphs, const FeatureStats& stats) {
  const int64_t b = static_cast<int64_t>(graphs.size());
  int64_t n = 1;
  for (const FeatureGraph* f : graphs) n = std::max<int64_t>(n, f->num_nodes);
  GnnBatch out;
  out.types = torch::zeros({b, n}, torch::kLong);
  out.nodes = torch::zeros({b, n, kNodeFeatures}, torch::kFloat);
  out.adj = torch::zeros({b, n, n}, torch::kBool);
  out.node_mask = torch::zeros({b, n}, torch::kBool);
  out.group = torch::empty({b, kGroupFeatures}, torch::kFloat);
  out.log_sum = torch::empty({b}, torch::kFloat);
  int64_t* types = out.types.data_ptr<int64_t>();
  float* nodes = out.nodes.data_ptr<float>();
  bool* adj = out.adj.data_ptr<bool>();
  bool* mask = out.node_mask.data_ptr<bool>();
  float* group = out.group.data_ptr<float>();
  float* log_sum = out.log_sum.data_ptr<float>();
  float node_inv[kNodeFeatures], group_inv[kGroupFeatures];
  for (int k = 0; k < kNodeFeatures; ++k) node_inv[k] = 1.0f / stats.node_std[k];
  for (int k = 0; k < kGroupFeatures; ++k) group_inv[k] = 1.0f / stats.group_std[k];
  for (int64_t g = 0; g < b; ++g) {
    const FeatureGraph& f = *graphs[g];
    const int m = f.num_nodes;
    for (int i = 0; i < m; ++i) {
      types[g * n + i] = f.type_ids[i];
      mask[g * n + i] = true;
      const float* src = f.nodes.data() + static_cast<size_t>(i) * kNodeFeatures;
      float* dst = nodes + (g * n + i) * kNodeFeatures;
      for (int k = 0; k < kNodeFeatures; ++k) dst[k] = (src[k] - stats.node_mean[k]) * node_inv[k];
      for (int j = 0; j < m; ++j) adj[(g * n + i) * n + j] = f.adj[static_cast<size_t>(i) * m + j] != 0;
    }
    for (int64_t i = m; i < n; ++i) adj[(g * n + i) * n + i] = true;  // padding attends to itself
    for (int k = 0; k < kGroupFeatures; ++k) {
      group[g * kGroupFeatures + k] = (f.group[k] - stats.group_mean[k]) * group_inv[k];
    }
    log_sum[g] = static_cast<float>(f.log_sum_member_s);
  }
  return out;
}

GatLayerImpl::GatLayerImpl(int in, int heads, int head_dim)
    : heads_(heads), head_dim_(head_dim), residual_(in == heads * head_dim) {
  proj_ = register_module("proj", torch::nn::Linear(torch::nn::LinearOptions(in, heads * head_dim).bias(false)));
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  att_src_ = register_parameter("att_src", torch::randn({heads, head_dim}) * scale);
  att_dst_ = register_parameter("att_dst", torch::randn({heads, head_dim}) * scale);
  bias_ = register_parameter("bias", torch::zeros({heads * head_dim}));
}

torch::Tensor GatLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& adj) {
  const int64_t b = x.size(0), n = x.size(1);
  // [B, K, N, D]: each head's projection of every member.
  torch::Tensor h = proj_->forward(x).view({b, n, heads_, head_dim_}).transpose(1, 2);
  torch::Tensor src = (h * att_src_.view({1, heads_, 1, head_dim_})).sum(-1);  // [B, K, N]
  torch::Tensor dst = (h * att_dst_.view({1, heads_, 1, head_dim_})).sum(-1);
  // gamma_ij of eq. 1: how much member i attends to neighbour j (itself included).
  torch::Tensor e = at::leaky_relu(src.unsqueeze(-1) + dst.unsqueeze(-2), 0.2);
  e = e.masked_fill(adj.unsqueeze(1).logical_not(), kNegative);
  torch::Tensor alpha = at::softmax(e, -1);
  // sum_j alpha_ij h_j. For a few members a broadcast multiply and sum
  // beats B*K tiny batched GEMMs (one BLAS call each); for many, its
  // [B, K, N, N, D] temporary costs more than the GEMMs.
  torch::Tensor mixed = n <= kBroadcastMaxNodes ? (alpha.unsqueeze(-1) * h.unsqueeze(2)).sum(3)
                                                : alpha.matmul(h);
  torch::Tensor out = mixed.transpose(1, 2).reshape({b, n, heads_ * head_dim_}) + bias_;
  out = at::elu(out);
  return residual_ ? out + x : out;
}

GnnNetImpl::GnnNetImpl(int vocab_size, const GnnHyperParams& hp) {
  embed_ = register_module("embed", torch::nn::Embedding(vocab_size, hp.type_embedding));
  int in = kNodeFeatures + hp.type_embedding;
  for (int l = 0; l < hp.layers; ++l) {
    gat_.push_back(register_module(absl::StrCat("gat", l), GatLayer(in, hp.heads, hp.width / hp.heads)));
    in = hp.width;
  }
  pool_ = register_module("pool", torch::nn::Linear(2 * hp.width, hp.width));
  fc1_ = register_module("fc1", torch::nn::Linear(hp.width + kGroupFeatures, hp.width));
  fc2_ = register_module("fc2", torch::nn::Linear(hp.width, std::max(1, hp.width / 2)));
  fc3_ = register_module("fc3", torch::nn::Linear(std::max(1, hp.width / 2), 1));
}

torch::Tensor GnnNetImpl::forward(const GnnBatch& b) {
  torch::Tensor x = torch::cat({b.nodes, embed_->forward(b.types)}, -1);
  for (GatLayer& layer : gat_) x = layer->forward(x, b.adj);
  // Eq. 2: the fused-op embedding from all members (mean and max pooling).
  torch::Tensor m = b.node_mask.unsqueeze(-1);
  torch::Tensor mf = m.to(torch::kFloat);
  torch::Tensor mean = (x * mf).sum(1) / mf.sum(1).clamp_min(1.0);
  torch::Tensor max = x.masked_fill(m.logical_not(), kNegative).amax(1);
  torch::Tensor y = at::relu(pool_->forward(torch::cat({mean, max}, -1)));
  torch::Tensor h = at::relu(fc1_->forward(torch::cat({y, b.group}, -1)));
  h = at::relu(fc2_->forward(h));
  return fc3_->forward(h).squeeze(-1);
}

absl::Status SaveCheckpoint(const std::string& path, GnnNet& net, const CheckpointInfo& info) {
  std::string bytes;
  try {
    torch::serialize::OutputArchive ar;
    ar.write(kVersionKey, c10::IValue(static_cast<int64_t>(info.format_version)));
    ar.write(kMetaKey, c10::IValue(InfoToJson(info).dump()));
    net->save(ar);
    // Through a writer, not save_to(path): LibTorch names the archive's root
    // after the file, and equal weights should give equal bytes (the
    // checkpoint id) whatever the file is called.
    ar.save_to([&bytes](const void* data, size_t n) {
      bytes.append(static_cast<const char*>(data), n);
      return n;
    });
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("saving checkpoint ", path, ": ", e.what()));
  }
  // Replaced at once: a server loading the file never sees half of it.
  const std::string tmp = absl::StrCat(path, ".tmp");
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out.flush()) return absl::InternalError(absl::StrCat("saving checkpoint ", path, ": cannot write ", tmp));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return absl::InternalError(absl::StrCat("saving checkpoint ", path, ": ", ec.message()));
  return absl::OkStatus();
}

absl::StatusOr<LoadedCheckpoint> LoadCheckpoint(const std::string& path,
                                                const std::string& device_kind) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("checkpoint ", path, ": cannot open it"));
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  LoadedCheckpoint c;
  c.id = absl::StrFormat("%016x", XXH64(bytes.data(), bytes.size(), 0));
  torch::serialize::InputArchive ar;
  nlohmann::json meta;
  try {
    ar.load_from(bytes.data(), bytes.size());
    c10::IValue v;
    if (!ar.try_read(kVersionKey, v) || !v.isInt()) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint ", path, ": not a braid GNN checkpoint (no ", kVersionKey, ")"));
    }
    const int64_t version = v.toInt();
    if (version != kCheckpointFormatVersion) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint ", path, " has format version ", version, "; this braid reads version ",
          kCheckpointFormatVersion, " (train it again: braid gnn train)"));
    }
    ar.read(kMetaKey, v);
    meta = nlohmann::json::parse(v.toStringRef());
    c.info = InfoFromJson(meta);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint ", path, ": not a readable braid GNN checkpoint: ", e.what()));
  }
  c.info.format_version = kCheckpointFormatVersion;
  if (c.info.feature_schema != kFeatureSchema) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint ", path, " was trained with feature schema '", c.info.feature_schema,
        "'; this braid extracts '", kFeatureSchema, "' (train it again: braid gnn train)"));
  }
  if (c.info.device_kind != device_kind) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint ", path, " was trained for device kind '", c.info.device_kind,
                     "'; this cluster's is '", device_kind, "'"));
  }
  if (absl::Status s = ValidateHyperParams(c.info.hp); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint ", path, ": ", s.message()));
  }
  const size_t nf = kNodeFeatures, gf = kGroupFeatures;
  if (c.info.stats.node_mean.size() != nf || c.info.stats.node_std.size() != nf ||
      c.info.stats.group_mean.size() != gf || c.info.stats.group_std.size() != gf) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint ", path, ": normalisation stats do not match the feature schema"));
  }
  try {
    c.net = GnnNet(static_cast<int>(c.info.vocabulary.size()) + 1, c.info.hp);
    c.net->load(ar);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint ", path, ": weights do not fit the recorded network: ", e.what()));
  }
  c.net->eval();
  return c;
}

std::vector<double> Predict(GnnNet& net, std::span<const FeatureGraph* const> graphs,
                            const FeatureStats& stats) {
  std::vector<double> out(graphs.size());
  if (graphs.empty()) return out;
  c10::InferenceMode guard;
  // Groups of similar size together (less padding), in sub-batches small
  // enough that the attention's [B, K, N, N, D] temporaries stay in cache.
  std::vector<size_t> order(graphs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return graphs[a]->num_nodes < graphs[b]->num_nodes; });
  std::vector<const FeatureGraph*> chunk;
  for (size_t begin = 0; begin < order.size(); begin += kInferenceChunk) {
    const size_t end = std::min(order.size(), begin + kInferenceChunk);
    chunk.clear();
    for (size_t i = begin; i < end; ++i) chunk.push_back(graphs[order[i]]);
    GnnBatch b = MakeBatch(chunk, stats);
    torch::Tensor log_s = (net->forward(b) + b.log_sum).contiguous();
    const float* p = log_s.data_ptr<float>();
    for (size_t i = begin; i < end; ++i) out[order[i]] = std::exp(static_cast<double>(p[i - begin]));
  }
  return out;
}

}  // namespace braid::costmodel::gnn
