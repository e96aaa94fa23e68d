// The model zoo registry, and its small non-CNN, non-attention models (an LSTM
// language model, a deep MLP and DLRM). The CNNs live in zoo_vision.cc, the
// attention models in zoo_attention.cc.
//
// Default per-rank batches follow DisCo's rule (a batch that fills one GPU)
// where a paper gives none; each description says where its number comes from.
// Each model has its published ZooDims and its sample ZooDims here, next to
// the descriptions that state them.
#include "graph/zoo.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/builder.h"
#include "graph/internal/zoo.h"

namespace braid::graph {
namespace {

using zoo_internal::BuildBertLarge;
using zoo_internal::BuildGpt3Layers;
using zoo_internal::BuildInceptionV3;
using zoo_internal::BuildReformer;
using zoo_internal::BuildResNet50;
using zoo_internal::BuildResNeXt50;
using zoo_internal::BuildTransformerBase;
using zoo_internal::BuildVgg19;
using zoo_internal::ZooDims;

// Larger batches overflow no shape, but no GPU holds them either.
constexpr int64_t kMaxBatch = int64_t{1} << 20;

// Zaremba et al. 2014, "large" LSTM LM (the RNNLM DisCo trains): 2 layers of
// 1500 units, vocabulary 10000 (PTB), 35 unrolled steps, dropout 0.65, untied
// input and output embeddings: 66,034,000 parameters (the paper's "66M").
// Time-major tokens [35, B]; logits [35*B, 10000].
absl::StatusOr<Graph> BuildRnnLm(int64_t batch, const ZooDims& dims) {
  constexpr int64_t layers = 2;
  constexpr double drop = 0.65;
  const int64_t vocab = dims.vocab, hidden = dims.width, seq = dims.seq;
  GraphBuilder b("rnnlm");
  TensorId tokens = b.Input("tokens", {seq, batch}, DType::kI64);
  TensorId x = b.Dropout(b.Embedding(tokens, vocab, hidden), drop);
  for (int64_t i = 0; i < layers; ++i) {
    auto s = b.NameScope(absl::StrCat("rnn", i));
    // ONNX Y is [seq, num_directions=1, batch, H]; drop the direction axis.
    x = b.Dropout(b.Reshape(b.LSTM(x, hidden), {seq, batch, hidden}), drop);
  }
  auto s = b.NameScope("decoder");
  b.MarkOutput(b.Linear(b.Reshape(x, {seq * batch, hidden}), vocab));
  return std::move(b).Build();
}

// Unity's MLP benchmark: 16 dense layers of width 8192 (with biases, ReLU
// between them); input [B, 8192], output [B, 8192]. 1,073,872,896 parameters.
absl::StatusOr<Graph> BuildMlp(int64_t batch, const ZooDims& dims) {
  constexpr int64_t layers = 16;
  const int64_t width = dims.width;
  GraphBuilder b("mlp");
  TensorId x = b.Input("x", {batch, width});
  for (int64_t i = 0; i < layers; ++i) {
    x = b.Linear(x, width);
    if (i + 1 < layers) x = b.Relu(x);
  }
  b.MarkOutput(x);
  return std::move(b).Build();
}

// DLRM (Naumov et al. 2019) in the configuration of facebookresearch/dlrm's
// bench/dlrm_s_benchmark.sh: 512 dense features, bottom MLP 512-512-64, eight
// tables of 1,000,000 x 64 with 100 indices per lookup (sum-pooled: Gather +
// ReduceSum = EmbeddingBag), dot interaction over the 9 feature vectors (the
// 36 strictly-lower-triangle entries, concatenated after the bottom MLP
// output: 100 features), top MLP 100-1024-1024-1024-1. Logits [B, 1]; the final
// sigmoid belongs to the loss. The benchmark draws 1..100 indices per lookup
// at random; the graph uses the fixed maximum of 100. 514,499,137 parameters.
absl::StatusOr<Graph> BuildDlrm(int64_t batch, const ZooDims& dims) {
  constexpr int64_t tables = 8;
  constexpr int64_t features = tables + 1, pairs = features * (features - 1) / 2;
  const int64_t dense = dims.dense, dim = dims.embed, rows = dims.rows, lookups = dims.lookups;
  GraphBuilder b("dlrm");
  TensorId x = b.Input("dense_features", {batch, dense});
  {
    auto s = b.NameScope("bot_mlp");
    x = b.Relu(b.Linear(b.Relu(b.Linear(x, dims.bottom)), dim));
  }
  std::vector<TensorId> vectors = {b.Reshape(x, {batch, 1, dim})};
  for (int64_t t = 0; t < tables; ++t) {
    auto s = b.NameScope(absl::StrCat("emb", t));
    TensorId idx = b.Input("indices", {batch, lookups}, DType::kI64);
    TensorId bag = b.ReduceSum(b.Embedding(idx, rows, dim), {1}, false);  // [B, dim]
    vectors.push_back(b.Reshape(bag, {batch, 1, dim}));
  }
  TensorId r;
  {
    auto s = b.NameScope("interaction");
    TensorId t = b.Concat(vectors, 1);                    // [B, 9, dim]
    TensorId z = b.MatMul(t, b.Transpose(t, {0, 2, 1}));  // [B, 9, 9]
    // Flat indices of the strictly lower triangle of the [9, 9] products.
    std::vector<double> tril;
    for (int64_t i = 0; i < features; ++i)
      for (int64_t j = 0; j < i; ++j) tril.push_back(static_cast<double>(i * features + j));
    TensorId lower = b.Constant("tril_indices", {pairs}, DType::kI64, std::move(tril));
    TensorId zflat = b.Gather(b.Reshape(z, {batch, features * features}), lower, 1);
    r = b.Concat({x, zflat}, 1);  // [B, dim + 36]
  }
  auto s = b.NameScope("top_mlp");
  for (int i = 0; i < 3; ++i) r = b.Relu(b.Linear(r, dims.fc));
  b.MarkOutput(b.Linear(r, 1));
  return std::move(b).Build();
}

struct Model {
  ZooEntry entry;
  absl::StatusOr<Graph> (*build)(int64_t batch, const ZooDims& dims);
  ZooDims published;
  ZooDims sample;
};

// The sample sizes divide channels by 4, d_model / hidden / ffn by 4 to 8
// (head_dim >= 8), cut sequences to 20-144 tokens and tables to 1000-2000
// rows, picked so that the largest op of each sample's training graph is at
// most ~50 MFLOP and its largest tensor at most ~2 MB at the sample batch,
// with widths that differ between models.
const std::vector<Model>& Models() {
  static const auto* models = new std::vector<Model>{
      {{"vgg19",
        "VGG19 (torchvision), 224x224, 143,667,240 params (published 143.7M); batch 64 chosen "
        "to fill a GPU",
        64, 8,
        "sample: 32x32 (CIFAR), channels /4 (16..128), classifier 512, 100 classes; batch 8"},
       BuildVgg19,
       {.image = 224, .channel_div = 1, .classes = 1000, .fc = 4096},
       {.image = 32, .channel_div = 4, .classes = 100, .fc = 512}},
      {{"resnet50",
        "ResNet-50 v1.5 (torchvision), 224x224, 25,557,032 params (published 25.6M); batch 64", 64,
        8,
        "sample: 64x64, channels /4 (stem 16, planes 16..128, outputs 64..512), 200 classes; "
        "batch 8"},
       BuildResNet50,
       {.image = 224, .channel_div = 1, .classes = 1000},
       {.image = 64, .channel_div = 4, .classes = 200}},
      {{"transformer",
        "Transformer base (Vaswani et al.): 6+6 layers, d_model 512, 8 heads, d_ff 2048, one "
        "shared 37000-token embedding (encoder, decoder, softmax) counted once, seq 128: "
        "63,082,496 params (published ~65M); batch 32 x 128 = 4096 tokens (fairseq max-tokens)",
        32, 4,
        "sample: 6+6 layers, d_model 128, 8 heads of 16, d_ff 512, shared vocab 1000, seq 32; "
        "batch 4"},
       BuildTransformerBase,
       {.width = 512, .heads = 8, .ffn = 2048, .seq = 128, .vocab = 37000},
       {.width = 128, .heads = 8, .ffn = 512, .seq = 32, .vocab = 1000}},
      {{"rnnlm",
        "2-layer LSTM LM (Zaremba et al. large): vocab 10000, hidden 1500, 35 steps, untied "
        "embeddings: 66,034,000 params (published 66M); batch 64 chosen (paper: 20)",
        64, 2, "sample: 2 LSTM layers, hidden 192, vocab 2000, 20 steps; batch 2"},
       BuildRnnLm,
       {.width = 1500, .seq = 35, .vocab = 10000},
       {.width = 192, .seq = 20, .vocab = 2000}},
      {{"bert_large",
        "BERT-Large pretraining (HF BertForPreTraining): 24 layers, hidden 1024, 16 heads, ffn "
        "4096, vocab 30522, seq 128, MLM head at every position + NSP: 336,226,108 params "
        "(published 335M/340M); batch 16 chosen",
        16, 2,
        "sample: 24 layers, hidden 256, 16 heads of 16, ffn 1024, vocab 1500, 128 positions, "
        "seq 32; batch 2"},
       BuildBertLarge,
       {.width = 1024, .heads = 16, .ffn = 4096, .seq = 128, .vocab = 30522, .positions = 512},
       {.width = 256, .heads = 16, .ffn = 1024, .seq = 32, .vocab = 1500, .positions = 128}},
      {{"reformer",
        "Reformer-style LM: 6 layers, d_model 1024, 8 heads, d_ff 4096, vocab 256, seq 16384; "
        "LSH attention approximated by causal attention within chunks of 64 with shared QK, "
        "reversible layers by ordinary residual layers: 69,918,976 params; batch 1",
        1, 2,
        "sample: 6 layers, d_model 128, 8 heads of 16, d_ff 512, vocab 256, seq 144 (12x12 "
        "axial) in 9 chunks of 16; batch 2"},
       BuildReformer,
       {.width = 1024, .heads = 8, .ffn = 4096, .seq = 16384, .vocab = 256, .chunk = 64},
       {.width = 128, .heads = 8, .ffn = 512, .seq = 144, .vocab = 256, .chunk = 16}},
      {{"resnext50",
        "ResNeXt-50 32x4d (torchvision), 224x224, 25,028,904 params (published 25.0M); batch 64 "
        "(Unity)",
        64, 8,
        "sample: 48x48 (stages at 12, 6, 3, 2), channels /4 (stem 16, grouped widths 32..256 "
        "in 32 groups, outputs 64..512), 100 classes; batch 8"},
       BuildResNeXt50,
       {.image = 224, .channel_div = 1, .classes = 1000},
       {.image = 48, .channel_div = 4, .classes = 100}},
      {{"inception_v3",
        "Inception-v3 (torchvision) at 299x299 WITHOUT the aux classifier: 23,834,568 params "
        "(published 23.8M; 27.2M with aux); batch 64 (Unity)",
        64, 8,
        "sample: 75x75 (the smallest valid input), channels /4 (8..112, 512 at the end), "
        "200 classes; batch 8"},
       BuildInceptionV3,
       {.image = 299, .channel_div = 1, .classes = 1000},
       {.image = 75, .channel_div = 4, .classes = 200}},
      {{"mlp", "MLP: 16 dense layers x 8192 wide (Unity): 1,073,872,896 params; batch 256 (Unity)",
        256, 32, "sample: 16 dense layers x 640 wide; batch 32"},
       BuildMlp,
       {.width = 8192},
       {.width = 640}},
      {{"dlrm",
        "DLRM, dlrm_s_benchmark.sh config: 8 tables 1M x 64, 100 lookups each, bottom MLP "
        "512-512-64, top MLP 100-1024-1024-1024-1, dot interaction: 514,499,137 params; batch "
        "2048 (the script's mini-batch)",
        2048, 128,
        "sample: 8 tables 1000 x 16, 20 lookups each, bottom MLP 128-128-16, top MLP "
        "52-256-256-256-1; batch 128"},
       BuildDlrm,
       {.fc = 1024, .dense = 512, .bottom = 512, .embed = 64, .rows = 1000000, .lookups = 100},
       {.fc = 256, .dense = 128, .bottom = 128, .embed = 16, .rows = 1000, .lookups = 20}},
      {{"gpt3_layers",
        "4 decoder layers of GPT-3 175B: hidden 12288, 96 heads, d_ff 49152, seq 2048, pre-LN, "
        "causal: 7,248,396,288 params (1,812,099,072 per layer); batch 1 (Megatron micro-batch)",
        1, 2, "sample: 4 decoder layers, hidden 256, 32 heads of 8, d_ff 1024, seq 32; batch 2"},
       BuildGpt3Layers,
       {.width = 12288, .heads = 96, .ffn = 4 * 12288, .seq = 2048},
       {.width = 256, .heads = 32, .ffn = 1024, .seq = 32}},
  };
  return *models;
}

}  // namespace

const std::vector<ZooEntry>& ZooModels() {
  static const auto* entries = [] {
    auto* v = new std::vector<ZooEntry>;
    for (const Model& m : Models()) v->push_back(m.entry);
    return v;
  }();
  return *entries;
}

absl::StatusOr<Graph> BuildZooModel(std::string_view name, int batch, ZooSize size,
                                    int width_pct) {
  const bool sample = size == ZooSize::kSample;
  for (const Model& m : Models()) {
    if (m.entry.name != name) continue;
    if (batch > kMaxBatch) {
      return absl::InvalidArgumentError(
          absl::StrCat("batch ", batch, " for zoo model '", m.entry.name, "' exceeds ", kMaxBatch));
    }
    if (batch <= 0) batch = sample ? m.entry.sample_batch : m.entry.default_batch;
    if (width_pct == 100) return m.build(batch, sample ? m.sample : m.published);
    if (!sample) {
      return absl::InvalidArgumentError(
          absl::StrCat("zoo model '", m.entry.name, "': a width of ", width_pct,
                       "% is for the sample size only (zoo:NAME@sample@wPCT)"));
    }
    ZooDims d = m.sample;
    auto bad = [&](const std::string& why) {
      return absl::InvalidArgumentError(absl::StrCat("zoo model '", m.entry.name, "' at ",
                                                     width_pct, "% width: ", why));
    };
    if (width_pct < 25 || width_pct > 400) return bad("the width must be 25% to 400%");
    auto scale = [&](int64_t& v, const char* what) -> absl::Status {
      if (v == 0) return absl::OkStatus();
      if (v * width_pct % 100 != 0) {
        return bad(absl::StrCat(what, " ", v, " does not scale to a whole number"));
      }
      v = v * width_pct / 100;
      if (d.heads > 0 && (what == std::string_view("width")) && v % d.heads != 0) {
        return bad(absl::StrCat("width ", v, " is not a multiple of the ", d.heads, " heads"));
      }
      return absl::OkStatus();
    };
    if (d.image > 0) {  // vision: channels are the published ones / channel_div
      if (d.channel_div * 100 % width_pct != 0) {
        return bad("vision models scale channels by 50, 100, 200 or 400%");
      }
      d.channel_div = d.channel_div * 100 / width_pct;
      // ResNeXt's 32 groups need at least one channel each (zoo_vision.cc).
      if (m.entry.name == "resnext50" && d.channel_div > 4) {
        return bad("ResNeXt-50's 32 groups need channels / 4 at most");
      }
    }
    if (absl::Status s = scale(d.width, "width"); !s.ok()) return s;
    if (absl::Status s = scale(d.ffn, "ffn"); !s.ok()) return s;
    if (absl::Status s = scale(d.fc, "fc"); !s.ok()) return s;
    if (absl::Status s = scale(d.bottom, "bottom"); !s.ok()) return s;
    return m.build(batch, d);
  }
  std::vector<std::string> names;
  for (const Model& m : Models()) names.push_back(m.entry.name);
  return absl::NotFoundError(absl::StrCat("unknown zoo model '", std::string(name),
                                          "'; known: ", absl::StrJoin(names, ", ")));
}

}  // namespace braid::graph
