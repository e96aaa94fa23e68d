// The model zoo registry, and its small non-CNN, non-attention models (an LSTM
// language model, a deep MLP and DLRM). The CNNs live in zoo_vision.cc, the
// attention models in zoo_attention.cc.
//
// Default per-rank batches follow DisCo's rule (a batch that fills one GPU)
// where a paper gives none; each description says where its number comes from.
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

// Larger batches overflow no shape, but no GPU holds them either.
constexpr int64_t kMaxBatch = int64_t{1} << 20;

// Zaremba et al. 2014, "large" LSTM LM (the RNNLM DisCo trains): 2 layers of
// 1500 units, vocabulary 10000 (PTB), 35 unrolled steps, dropout 0.65, untied
// input and output embeddings: 66,034,000 parameters (the paper's "66M").
// Time-major tokens [35, B]; logits [35*B, 10000].
absl::StatusOr<Graph> BuildRnnLm(int64_t batch) {
  constexpr int64_t vocab = 10000, hidden = 1500, seq = 35, layers = 2;
  constexpr double drop = 0.65;
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
absl::StatusOr<Graph> BuildMlp(int64_t batch) {
  constexpr int64_t width = 8192, layers = 16;
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
absl::StatusOr<Graph> BuildDlrm(int64_t batch) {
  constexpr int64_t dense = 512, dim = 64, tables = 8, rows = 1000000, lookups = 100;
  constexpr int64_t features = tables + 1, pairs = features * (features - 1) / 2;
  GraphBuilder b("dlrm");
  TensorId x = b.Input("dense_features", {batch, dense});
  {
    auto s = b.NameScope("bot_mlp");
    x = b.Relu(b.Linear(b.Relu(b.Linear(x, 512)), dim));
  }
  std::vector<TensorId> vectors = {b.Reshape(x, {batch, 1, dim})};
  for (int64_t t = 0; t < tables; ++t) {
    auto s = b.NameScope(absl::StrCat("emb", t));
    TensorId idx = b.Input("indices", {batch, lookups}, DType::kI64);
    TensorId bag = b.ReduceSum(b.Embedding(idx, rows, dim), {1}, false);  // [B, 64]
    vectors.push_back(b.Reshape(bag, {batch, 1, dim}));
  }
  TensorId r;
  {
    auto s = b.NameScope("interaction");
    TensorId t = b.Concat(vectors, 1);                    // [B, 9, 64]
    TensorId z = b.MatMul(t, b.Transpose(t, {0, 2, 1}));  // [B, 9, 9]
    TensorId lower = b.Constant("tril_indices", {pairs}, DType::kI64);
    TensorId zflat = b.Gather(b.Reshape(z, {batch, features * features}), lower, 1);
    r = b.Concat({x, zflat}, 1);  // [B, 100]
  }
  auto s = b.NameScope("top_mlp");
  for (int i = 0; i < 3; ++i) r = b.Relu(b.Linear(r, 1024));
  b.MarkOutput(b.Linear(r, 1));
  return std::move(b).Build();
}

struct Model {
  ZooEntry entry;
  absl::StatusOr<Graph> (*build)(int64_t batch);
};

const std::vector<Model>& Models() {
  static const auto* models = new std::vector<Model>{
      {{"vgg19",
        "VGG19 (torchvision), 224x224, 143,667,240 params (published 143.7M); batch 64 chosen "
        "to fill a GPU",
        64},
       BuildVgg19},
      {{"resnet50",
        "ResNet-50 v1.5 (torchvision), 224x224, 25,557,032 params (published 25.6M); batch 64", 64},
       BuildResNet50},
      {{"transformer",
        "Transformer base (Vaswani et al.): 6+6 layers, d_model 512, 8 heads, d_ff 2048, one "
        "shared 37000-token embedding (encoder, decoder, softmax) counted once, seq 128: "
        "63,082,496 params (published ~65M); batch 32 x 128 = 4096 tokens (fairseq max-tokens)",
        32},
       BuildTransformerBase},
      {{"rnnlm",
        "2-layer LSTM LM (Zaremba et al. large): vocab 10000, hidden 1500, 35 steps, untied "
        "embeddings: 66,034,000 params (published 66M); batch 64 chosen (paper: 20)",
        64},
       BuildRnnLm},
      {{"bert_large",
        "BERT-Large pretraining (HF BertForPreTraining): 24 layers, hidden 1024, 16 heads, ffn "
        "4096, vocab 30522, seq 128, MLM head at every position + NSP: 336,226,108 params "
        "(published 335M/340M); batch 16 chosen",
        16},
       BuildBertLarge},
      {{"reformer",
        "Reformer-style LM: 6 layers, d_model 1024, 8 heads, d_ff 4096, vocab 256, seq 16384; "
        "LSH attention approximated by causal attention within chunks of 64 with shared QK, "
        "reversible layers by ordinary residual layers: 69,918,976 params; batch 1",
        1},
       BuildReformer},
      {{"resnext50",
        "ResNeXt-50 32x4d (torchvision), 224x224, 25,028,904 params (published 25.0M); batch 64 "
        "(Unity)",
        64},
       BuildResNeXt50},
      {{"inception_v3",
        "Inception-v3 (torchvision) at 299x299 WITHOUT the aux classifier: 23,834,568 params "
        "(published 23.8M; 27.2M with aux); batch 64 (Unity)",
        64},
       BuildInceptionV3},
      {{"mlp", "MLP: 16 dense layers x 8192 wide (Unity): 1,073,872,896 params; batch 256 (Unity)",
        256},
       BuildMlp},
      {{"dlrm",
        "DLRM, dlrm_s_benchmark.sh config: 8 tables 1M x 64, 100 lookups each, bottom MLP "
        "512-512-64, top MLP 100-1024-1024-1024-1, dot interaction: 514,499,137 params; batch "
        "2048 (the script's mini-batch)",
        2048},
       BuildDlrm},
      {{"gpt3_layers",
        "4 decoder layers of GPT-3 175B: hidden 12288, 96 heads, d_ff 49152, seq 2048, pre-LN, "
        "causal: 7,248,396,288 params (1,812,099,072 per layer); batch 1 (Megatron micro-batch)",
        1},
       BuildGpt3Layers},
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

absl::StatusOr<Graph> BuildZooModel(std::string_view name, int batch) {
  for (const Model& m : Models()) {
    if (m.entry.name != name) continue;
    if (batch > kMaxBatch) {
      return absl::InvalidArgumentError(
          absl::StrCat("batch ", batch, " for zoo model '", m.entry.name, "' exceeds ", kMaxBatch));
    }
    return m.build(batch <= 0 ? m.entry.default_batch : batch);
  }
  std::vector<std::string> names;
  for (const Model& m : Models()) names.push_back(m.entry.name);
  return absl::NotFoundError(absl::StrCat("unknown zoo model '", std::string(name),
                                          "'; known: ", absl::StrJoin(names, ", ")));
}

}  // namespace braid::graph
