#include "costmodel/gnn/gnn_model.h"

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <filesystem>
#include <fstream>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/bounded_json.h"
#include "base/text.h"
#include "costmodel/cost_check.h"
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

}  // namespace

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
    absl::StatusOr<std::string> meta = CheckpointInfoToJson(info);
    if (!meta.ok()) {
      return absl::InternalError(absl::StrCat("saving checkpoint ", path, ": ", meta.status().message()));
    }
    ar.write(kMetaKey, c10::IValue(*std::move(meta)));
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

namespace {

// The largest network ValidateHyperParams admits (16 layers of width 4096)
// has about 2^28 weights: a checkpoint larger than this is not one.
constexpr size_t kMaxCheckpointBytes = size_t{2} << 30;

std::string WhatOf(const std::exception& e) {
  // c10::Error's what() carries a C++ backtrace; the message alone suffices.
  if (const auto* c = dynamic_cast<const c10::Error*>(&e)) return c->what_without_backtrace();
  return e.what();
}

absl::Status CheckWeightsFinite(GnnNet& net) {
  for (const auto& p : net->named_parameters(/*recurse=*/true)) {
    const torch::Tensor bad = torch::isfinite(p.value()).logical_not();
    if (const int64_t n = bad.sum().item<int64_t>(); n > 0) {
      return absl::InvalidArgumentError(absl::StrCat("weight tensor '", p.key(), "' holds ", n,
                                                     " non-finite values"));
    }
  }
  for (const auto& b : net->named_buffers(/*recurse=*/true)) {
    const torch::Tensor bad = torch::isfinite(b.value()).logical_not();
    if (const int64_t n = bad.sum().item<int64_t>(); n > 0) {
      return absl::InvalidArgumentError(absl::StrCat("buffer '", b.key(), "' holds ", n,
                                                     " non-finite values"));
    }
  }
  return absl::OkStatus();
}

// Fused groups as the checkpoint's training set describes them: chains of
// 2, 3 and 5 members (each a different op type of the vocabulary, "unknown"
// included) whose node and group features sit at the training mean and one
// standard deviation either side of it.
std::vector<FeatureGraph> ProbeGroups(const CheckpointInfo& info) {
  const FeatureStats& st = info.stats;
  const int vocab = static_cast<int>(info.vocabulary.size()) + 1;
  std::vector<FeatureGraph> out;
  int next_type = 0;
  for (const float shift : {0.0f, -1.0f, 1.0f}) {
    for (const int n : {2, 3, 5}) {
      FeatureGraph f;
      f.num_nodes = n;
      f.nodes.resize(static_cast<size_t>(n) * kNodeFeatures);
      f.adj.assign(static_cast<size_t>(n) * n, 0);
      for (int i = 0; i < n; ++i) {
        f.type_ids.push_back(next_type++ % vocab);
        for (int k = 0; k < kNodeFeatures; ++k) {
          f.nodes[static_cast<size_t>(i) * kNodeFeatures + k] = st.node_mean[k] + shift * st.node_std[k];
        }
        f.adj[static_cast<size_t>(i) * n + i] = 1;
        if (i + 1 < n) f.adj[static_cast<size_t>(i) * n + i + 1] = f.adj[static_cast<size_t>(i + 1) * n + i] = 1;
      }
      for (int k = 0; k < kGroupFeatures; ++k) f.group[k] = st.group_mean[k] + shift * st.group_std[k];
      f.log_sum_member_s = f.group[0];  // group feature 0: log(sum of member seconds)
      out.push_back(std::move(f));
    }
  }
  return out;
}

// The network's predictions for ProbeGroups: each must be a time braid can
// plan with (finite, positive, at most kMaxPredictedSeconds).
absl::Status ProbeNetwork(GnnNet& net, const CheckpointInfo& info) {
  const std::vector<FeatureGraph> probes = ProbeGroups(info);
  std::vector<const FeatureGraph*> ptrs;
  for (const FeatureGraph& f : probes) ptrs.push_back(&f);
  const std::vector<double> s = Predict(net, ptrs, info.stats);
  for (size_t i = 0; i < s.size(); ++i) {
    if (!(std::isfinite(s[i]) && s[i] > 0 && s[i] <= kMaxPredictedSeconds)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the network predicts ", s[i], " s for a probe group of ", probes[i].num_nodes,
          " ops near the training set's features, outside (0, ", kMaxPredictedSeconds, "] s"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<LoadedCheckpoint> LoadFromBytes(const std::string& path, const std::string& bytes,
                                               const std::string& device_kind) {
  LoadedCheckpoint c;
  c.path = path;
  c.id = absl::StrFormat("%016x", XXH64(bytes.data(), bytes.size(), 0));
  torch::serialize::InputArchive ar;
  std::string meta;
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
    if (!ar.try_read(kMetaKey, v) || !v.isString()) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint ", path, ": not a braid GNN checkpoint (no ", kMetaKey, ")"));
    }
    meta = v.toStringRef();
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint ", path, ": not a readable braid GNN checkpoint: ", WhatOf(e)));
  }
  absl::StatusOr<CheckpointInfo> info = CheckpointInfoFromJson(meta);
  if (!info.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint ", path, ": ", info.status().message()));
  }
  c.info = *std::move(info);
  c.info.format_version = kCheckpointFormatVersion;
  if (c.info.feature_schema != kFeatureSchema) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint ", path, " was trained with feature schema '",
        base::EscapeForDisplay(c.info.feature_schema), "'; this braid extracts '", kFeatureSchema,
        "' (train it again: braid gnn train)"));
  }
  if (c.info.device_kind != device_kind) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint ", path, " was trained for device kind '",
        base::EscapeForDisplay(c.info.device_kind), "'; this cluster's is '", device_kind, "'"));
  }
  if (absl::Status s = ValidateCheckpointInfo(c.info); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint ", path, ": ", s.message()));
  }
  // The network is built from the metadata before its weights are read: a
  // small file must not make it allocate gigabytes.
  const int64_t weights = ParameterCount(c.info);
  if (weights > static_cast<int64_t>(bytes.size() / sizeof(float))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint ", path, ": its metadata describes a network of ", weights,
        " weights, more than its ", bytes.size(), " bytes can hold"));
  }
  try {
    c.net = GnnNet(static_cast<int>(c.info.vocabulary.size()) + 1, c.info.hp);
    c.net->load(ar);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint ", path, ": weights do not fit the recorded network: ", WhatOf(e)));
  }
  c.net->eval();
  if (absl::Status s = CheckWeightsFinite(c.net); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint ", path, ": ", s.message()));
  }
  if (absl::Status s = ProbeNetwork(c.net, c.info); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint ", path, ": ", s.message()));
  }
  return c;
}

}  // namespace

absl::StatusOr<LoadedCheckpoint> LoadCheckpoint(const std::string& path,
                                                const std::string& device_kind) {
  absl::StatusOr<std::string> bytes = base::ReadBoundedFile(path, kMaxCheckpointBytes);
  if (!bytes.ok()) {
    return absl::Status(bytes.status().code(),
                        absl::StrCat("checkpoint ", bytes.status().message()));
  }
  // Whatever LibTorch throws (c10::Error, std::ios failures, bad_alloc) ends
  // here as a status: a checkpoint is input, and a server must survive it.
  try {
    return LoadFromBytes(path, *bytes, device_kind);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint ", path, ": not a usable braid GNN checkpoint: ", WhatOf(e)));
  } catch (...) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint ", path, ": not a usable braid GNN checkpoint"));
  }
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
