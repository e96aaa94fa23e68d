// Attention models of the zoo: Transformer base, BERT-Large, a Reformer-style
// LM and a slice of GPT-3 175B decoder layers. Attention is spelled out as
// ONNX exporters emit it (Linear, Reshape, Transpose, MatMul, scale Mul,
// mask Add, Softmax, Dropout, MatMul, Transpose, Reshape, Linear), so the
// search sees the same ops it sees in an imported model. Widths and lengths
// come from ZooDims (the published ones at ZooSize::kPublished); the comments
// give the published values.
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "graph/builder.h"
#include "graph/internal/zoo.h"

namespace braid::graph::zoo_internal {
namespace {

struct AttentionSpec {
  int64_t heads = 1;
  bool bias = true;       // projections have biases
  double dropout = 0;     // on the attention probabilities; 0: none
  TensorId mask = kNoId;  // additive mask [Sq, Skv] (kConstant), or none
};

// An additive causal mask [n, n]: 0 on and below the diagonal, -1e9 above it
// (a finite stand-in for -inf that a plan file's JSON can carry).
std::vector<double> CausalMaskValues(int64_t n) {
  std::vector<double> v(static_cast<size_t>(n * n), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = i + 1; j < n; ++j) v[static_cast<size_t>(i * n + j)] = -1e9;
  return v;
}

// The sinusoidal position encoding [seq, d] of Vaswani et al. (section 3.5).
std::vector<double> SinusoidValues(int64_t seq, int64_t d) {
  std::vector<double> v(static_cast<size_t>(seq * d));
  for (int64_t p = 0; p < seq; ++p) {
    for (int64_t i = 0; i < d; ++i) {
      const double angle =
          static_cast<double>(p) / std::pow(10000.0, static_cast<double>(2 * (i / 2)) / d);
      v[static_cast<size_t>(p * d + i)] = i % 2 == 0 ? std::sin(angle) : std::cos(angle);
    }
  }
  return v;
}

std::vector<double> Iota(int64_t n) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<double>(i);
  return v;
}

// Multi-head attention of q_in [B, Sq, D] over kv_in [B, Skv, D].
TensorId MultiHeadAttention(GraphBuilder& b, TensorId q_in, TensorId kv_in,
                            const AttentionSpec& spec) {
  if (!b.status().ok()) return kNoId;
  auto s = b.NameScope("attn");
  const int64_t batch = b.Shape(q_in)[0], sq = b.Shape(q_in)[1], d = b.Shape(q_in)[2];
  const int64_t skv = b.Shape(kv_in)[1];
  const int64_t h = spec.heads, dh = d / spec.heads;
  TensorId q = b.Linear(q_in, d, spec.bias);
  TensorId k = b.Linear(kv_in, d, spec.bias);
  TensorId v = b.Linear(kv_in, d, spec.bias);
  q = b.Transpose(b.Reshape(q, {batch, sq, h, dh}), {0, 2, 1, 3});   // [B,H,Sq,dh]
  k = b.Transpose(b.Reshape(k, {batch, skv, h, dh}), {0, 2, 3, 1});  // [B,H,dh,Skv]
  v = b.Transpose(b.Reshape(v, {batch, skv, h, dh}), {0, 2, 1, 3});  // [B,H,Skv,dh]
  TensorId scores = b.Scale(b.MatMul(q, k), 1.0 / std::sqrt(static_cast<double>(dh)));
  if (spec.mask != kNoId) scores = b.Add(scores, spec.mask);
  TensorId p = b.Softmax(scores, -1);
  if (spec.dropout > 0) p = b.Dropout(p, spec.dropout);
  TensorId o = b.Transpose(b.MatMul(p, v), {0, 2, 1, 3});  // [B,Sq,H,dh]
  return b.Linear(b.Reshape(o, {batch, sq, d}), d, spec.bias);
}

TensorId FeedForward(GraphBuilder& b, TensorId x, int64_t d_ff, bool gelu, double dropout) {
  auto s = b.NameScope("ffn");
  const int64_t d = b.status().ok() ? b.Shape(x).back() : 0;
  TensorId h = b.Linear(x, d_ff);
  h = gelu ? b.Gelu(h) : b.Relu(h);
  if (dropout > 0) h = b.Dropout(h, dropout);
  return b.Linear(h, d);
}

// Post-LN residual: LayerNorm(x + Dropout(y)) (Transformer, BERT).
TensorId AddNorm(GraphBuilder& b, TensorId x, TensorId y, double dropout, double eps) {
  if (dropout > 0) y = b.Dropout(y, dropout);
  return b.LayerNorm(b.Add(x, y), eps);
}

// Transformer base (Vaswani et al. 2017, Table 3): N=6, d_model 512, d_ff 2048,
// 8 heads, dropout 0.1, post-LN, sinusoidal positions (a kConstant, no
// parameters). Embeddings: ONE table of the shared ~37000-token BPE vocabulary
// (37000 used) serves the encoder input, the decoder input and the pre-softmax
// projection (the paper's weight sharing, section 3.4), so it counts once:
// 37000*512 = 18,944,000 of the 63,082,496 parameters; the output projection
// has no bias. Published: vocab 37000, seq 128.

}  // namespace

absl::StatusOr<Graph> BuildTransformerBase(int64_t batch, const ZooDims& dims) {
  constexpr int64_t layers = 6;
  constexpr double drop = 0.1, eps = 1e-5;
  const int64_t d = dims.width, heads = dims.heads, d_ff = dims.ffn, seq = dims.seq,
                vocab = dims.vocab;
  GraphBuilder b("transformer");
  TensorId src = b.Input("src_tokens", {batch, seq}, DType::kI64);
  TensorId tgt = b.Input("tgt_tokens", {batch, seq}, DType::kI64);
  TensorId pos = b.Constant("positional_encoding", {seq, d}, DType::kF32, SinusoidValues(seq, d));
  TensorId mask = b.Constant("causal_mask", {seq, seq}, DType::kF32, CausalMaskValues(seq));
  TensorId table = kNoId;
  TensorId x;
  {
    auto s = b.NameScope("encoder");
    // Embeddings are multiplied by sqrt(d_model) before adding positions.
    x = b.Dropout(b.Add(b.Scale(b.Embedding(src, vocab, d, &table), std::sqrt(static_cast<double>(d))), pos), drop);
    for (int64_t i = 0; i < layers; ++i) {
      auto l = b.NameScope(absl::StrCat("layer", i));
      x = AddNorm(b, x, MultiHeadAttention(b, x, x, {heads, true, drop, kNoId}), drop, eps);
      x = AddNorm(b, x, FeedForward(b, x, d_ff, false, 0), drop, eps);
    }
  }
  TensorId memory = x;
  TensorId y;
  {
    auto s = b.NameScope("decoder");
    y = b.Dropout(b.Add(b.Scale(b.Gather(table, tgt), std::sqrt(static_cast<double>(d))), pos), drop);
    for (int64_t i = 0; i < layers; ++i) {
      auto l = b.NameScope(absl::StrCat("layer", i));
      y = AddNorm(b, y, MultiHeadAttention(b, y, y, {heads, true, drop, mask}), drop, eps);
      {
        auto c = b.NameScope("cross");
        y = AddNorm(b, y, MultiHeadAttention(b, y, memory, {heads, true, drop, kNoId}), drop, eps);
      }
      y = AddNorm(b, y, FeedForward(b, y, d_ff, false, 0), drop, eps);
    }
  }
  auto s = b.NameScope("output");
  // Tied pre-softmax projection: logits = y W_emb^T, [B*S, V].
  b.MarkOutput(b.Gemm(b.Reshape(y, {batch * seq, d}), table, kNoId, false, true));
  return std::move(b).Build();
}

// BERT-Large (Devlin et al. 2019) as HuggingFace's BertForPreTraining builds
// it, at sequence length 128 (pretraining phase 1): word + position (512) +
// token-type embeddings and LayerNorm, 24 post-LN layers (1024 hidden, 16
// heads, 4096 GELU FFN), the tanh pooler, the MLM head (dense + GELU +
// LayerNorm, decoder tied to the word embeddings plus its own bias) and the NSP
// head: 336,226,108 parameters (BertModel alone: 335,141,888). The MLM head is
// applied at every position, as HuggingFace does (the original TF code gathers
// the <= 20 masked positions first). Outputs: MLM logits [B*S, 30522] and NSP
// logits [B, 2].
absl::StatusOr<Graph> BuildBertLarge(int64_t batch, const ZooDims& dims) {
  constexpr int64_t layers = 24;
  const int64_t d = dims.width, heads = dims.heads, d_ff = dims.ffn, vocab = dims.vocab,
                max_pos = dims.positions, seq = dims.seq;
  constexpr double drop = 0.1, eps = 1e-12;
  GraphBuilder b("bert_large");
  TensorId ids = b.Input("input_ids", {batch, seq}, DType::kI64);
  TensorId types = b.Input("token_type_ids", {batch, seq}, DType::kI64);
  TensorId word_table = kNoId;
  TensorId x;
  {
    auto s = b.NameScope("embeddings");
    TensorId positions = b.Constant("position_ids", {seq}, DType::kI64, Iota(seq));
    TensorId w = b.Embedding(ids, vocab, d, &word_table);
    TensorId p = b.Embedding(positions, max_pos, d);  // [S, D], broadcast over the batch
    TensorId t = b.Embedding(types, 2, d);
    x = b.Dropout(b.LayerNorm(b.Add(b.Add(w, p), t), eps), drop);
  }
  for (int64_t i = 0; i < layers; ++i) {
    auto l = b.NameScope(absl::StrCat("encoder.layer", i));
    x = AddNorm(b, x, MultiHeadAttention(b, x, x, {heads, true, drop, kNoId}), drop, eps);
    x = AddNorm(b, x, FeedForward(b, x, d_ff, true, 0), drop, eps);
  }
  TensorId pooled;
  {
    auto s = b.NameScope("pooler");
    TensorId cls = b.Constant("cls_index", {}, DType::kI64, {0.0});
    pooled = b.Tanh(b.Linear(b.Gather(x, cls, 1), d));  // first token, [B, D]
  }
  TensorId mlm;
  {
    auto s = b.NameScope("cls.predictions");
    TensorId h = b.LayerNorm(b.Gelu(b.Linear(x, d)), eps);
    TensorId bias = b.Param("bias", {vocab});
    mlm = b.Gemm(b.Reshape(h, {batch * seq, d}), word_table, bias, false, true);
  }
  TensorId nsp;
  {
    auto s = b.NameScope("cls.seq_relationship");
    nsp = b.Linear(pooled, 2);
  }
  b.MarkOutput(mlm);
  b.MarkOutput(nsp);
  return std::move(b).Build();
}

// A Reformer-style byte-level LM (Kitaev et al. 2020): 6 pre-LN layers, d_model
// 1024, 8 heads, d_ff 4096, vocabulary 256, sequence 16384 (= 128 x 128 for the
// axial position embeddings, 128x1x256 and 1x128x768). Approximations, so
// the graph has ordinary static ops:
//  - LSH attention -> chunked local attention with shared query/key
//    projections: the sequence is cut into chunks of 64 (the paper's bucket
//    size) and each position attends causally within its chunk; no hashing,
//    sorting, key normalisation or attention to the previous chunk.
//  - reversible residual layers -> ordinary residual layers (same parameters
//    and FLOPs; activations are stored instead of recomputed).
//  - no chunked feed-forward.
// Attention projections have no bias (as in Trax); 69,918,976 parameters.
// At other sizes seq is a square (axial x axial) and the axial embeddings are
// d/4 and 3d/4 wide.
absl::StatusOr<Graph> BuildReformer(int64_t batch, const ZooDims& dims) {
  constexpr int64_t layers = 6;
  constexpr double drop = 0.1, eps = 1e-5;
  const int64_t d = dims.width, heads = dims.heads, dh = d / heads, d_ff = dims.ffn,
                vocab = dims.vocab, seq = dims.seq, chunk = dims.chunk, chunks = seq / chunk;
  int64_t axial = 1;
  while (axial * axial < seq) ++axial;
  if (axial * axial != seq || chunks * chunk != seq) {
    return absl::InvalidArgumentError(
        absl::StrCat("reformer: seq ", seq, " must be a square and a multiple of chunk ", chunk));
  }
  const int64_t d0 = d / 4, d1 = d - d0;  // 256 and 768
  GraphBuilder b("reformer");
  TensorId tokens = b.Input("tokens", {batch, seq}, DType::kI64);
  TensorId mask = b.Constant("chunk_causal_mask", {chunk, chunk}, DType::kF32, CausalMaskValues(chunk));
  TensorId x;
  {
    auto s = b.NameScope("embed");
    TensorId e = b.Embedding(tokens, vocab, d);
    TensorId a0 = b.Expand(b.Param("axial_pos0", {axial, 1, d0}), {axial, axial, d0});
    TensorId a1 = b.Expand(b.Param("axial_pos1", {1, axial, d1}), {axial, axial, d1});
    TensorId pos = b.Reshape(b.Concat({a0, a1}, 2), {seq, d});
    x = b.Dropout(b.Add(e, pos), drop);
  }
  for (int64_t i = 0; i < layers; ++i) {
    auto l = b.NameScope(absl::StrCat("layer", i));
    TensorId h = b.LayerNorm(x, eps);
    {
      auto s = b.NameScope("attn");
      TensorId qk = b.Reshape(b.Linear(h, d, false), {batch, chunks, chunk, heads, dh});
      TensorId v = b.Reshape(b.Linear(h, d, false), {batch, chunks, chunk, heads, dh});
      TensorId q = b.Transpose(qk, {0, 3, 1, 2, 4});  // [B,H,n,c,dh]
      TensorId k = b.Transpose(qk, {0, 3, 1, 4, 2});  // [B,H,n,dh,c]
      v = b.Transpose(v, {0, 3, 1, 2, 4});
      TensorId p = b.Softmax(b.Add(b.Scale(b.MatMul(q, k), 1.0 / std::sqrt(static_cast<double>(dh))), mask), -1);  // [B,H,n,c,c]
      TensorId o = b.Transpose(b.MatMul(p, v), {0, 2, 3, 1, 4});         // [B,n,c,H,dh]
      h = b.Linear(b.Reshape(o, {batch, seq, d}), d, false);
    }
    x = b.Add(x, b.Dropout(h, drop));
    x = b.Add(x, b.Dropout(FeedForward(b, b.LayerNorm(x, eps), d_ff, true, drop), drop));
  }
  auto s = b.NameScope("head");
  x = b.LayerNorm(x, eps);
  b.MarkOutput(b.Linear(b.Reshape(x, {batch * seq, d}), vocab));
  return std::move(b).Build();
}

// Four decoder layers of GPT-3 175B (Brown et al. 2020, Table 2.1: d_model
// 12288, 96 heads of 128, d_ff 4 x d_model, context 2048): pre-LN, causal
// attention, GELU FFN, as Megatron-LM builds them. Input and output are the
// hidden states [B, 2048, 12288]; no embeddings or final LayerNorm (those sit
// outside a slice of layers). 1,812,099,072 parameters per layer; the full
// model's 96 layers plus embeddings make the 175B.
absl::StatusOr<Graph> BuildGpt3Layers(int64_t batch, const ZooDims& dims) {
  constexpr int64_t layers = 4;
  constexpr double drop = 0.1, eps = 1e-5;
  const int64_t d = dims.width, heads = dims.heads, d_ff = dims.ffn, seq = dims.seq;
  GraphBuilder b("gpt3_layers");
  TensorId x = b.Input("hidden_states", {batch, seq, d});
  TensorId mask = b.Constant("causal_mask", {seq, seq}, DType::kF32, CausalMaskValues(seq));
  for (int64_t i = 0; i < layers; ++i) {
    auto l = b.NameScope(absl::StrCat("layer", i));
    TensorId h = b.LayerNorm(x, eps);
    TensorId a = MultiHeadAttention(b, h, h, {heads, true, drop, mask});
    x = b.Add(x, b.Dropout(a, drop));
    x = b.Add(x, b.Dropout(FeedForward(b, b.LayerNorm(x, eps), d_ff, true, 0), drop));
  }
  b.MarkOutput(x);
  return std::move(b).Build();
}

}  // namespace braid::graph::zoo_internal
