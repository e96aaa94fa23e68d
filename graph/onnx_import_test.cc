#include "graph/onnx_import.h"

#include <chrono>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "gmock/gmock.h"
#include "graph/ops.h"
#include "gtest/gtest.h"

namespace braid::graph {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::string DataPath(const std::string& name) { return "tests/data/" + name + ".onnx"; }

Graph MustImport(const std::string& name, std::vector<std::string>* warnings,
                 const OnnxImportOptions& options = {}) {
  absl::StatusOr<Graph> g = ImportOnnxFile(DataPath(name), options, warnings);
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? *std::move(g) : Graph();
}

int CountOps(const Graph& g, std::string_view type) {
  int n = 0;
  for (const Op& op : g.ops()) n += op.type == type;
  return n;
}

int CountRole(const Graph& g, TensorRole role) {
  int n = 0;
  for (const Tensor& t : g.tensors()) n += t.role == role;
  return n;
}

const Op* FindOp(const Graph& g, std::string_view name) {
  for (const Op& op : g.ops()) {
    if (op.name == name) return &op;
  }
  return nullptr;
}

// Torch's eval-mode export folds each BatchNorm that follows a Conv into the
// Conv (C weights + C biases become C conv biases), so the expected counts are
// torchvision's parameter count minus the folded BatchNorm channels, both
// printed by torch for these weight-less models:
//   resnet50           25,557,032 - 26,560 = 25,530,472
//   resnext50_32x4d    25,028,904 - 34,112 = 24,994,792
//   mobilenet_v3_small  2,542,856 -  6,056 =  2,536,800
//   inception_v3       27,161,264 - 3,326,696 (AuxLogits, unused in eval)
//                                 - 17,216 = 23,817,352
//   densenet121         7,978,856 - (64 + 58 * 128) = 7,971,368 (norm0 and each
//                       dense layer's norm2 follow a conv; the rest do not)
// Models without folded BatchNorm match torch exactly: vgg11 132,863,336,
// vit_b_16 86,567,656, resnet18 (training mode keeps BatchNorm) 11,689,512.
// Small models, by hand:
//   TransformerEncoder(d=64, ff=256) layer: in_proj 64*192+192, out_proj
//     64*64+64, linear1 64*256+256, linear2 256*64+64, two LayerNorms 2*128
//     = 49,984; two layers = 99,968.
//   MultiheadAttention(64): 12,288 + 192 + 4,096 + 64 = 16,640.
//   LSTM LM: embedding 1000*64 = 64,000; LSTM layer 0: 4*128*(64+128) + 2*512
//     = 99,328; layer 1: 4*128*(128+128) + 1,024 = 132,096; head 128*1000+1000
//     = 129,000; total 424,424.
//   TinyGpt(vocab 512, ctx 32, d 64): embeddings 32,768 + 2,048; block: 2 LN
//     256 + qkv 12,480 + proj 4,160 + mlp 16,640 + 16,448 = 49,984, two blocks
//     99,968; final LN 128; head 32,768 (no bias); total 167,680.
//   Gpt2 (vocab 512, block 32, n_embd 128, lm_head tied to wte): wte 65,536 +
//     wpe 4,096; block: ln_1 256 + c_attn 49,536 + c_proj 16,512 + ln_2 256 +
//     c_fc 66,048 + mlp c_proj 65,664 = 198,272, two blocks 396,544; ln_f 256;
//     total 466,432.
//   MLP 64-128-10: 8,192 + 128 + 1,280 + 10 = 9,610.
struct ModelCase {
  const char* file;
  int64_t params;
  std::vector<int64_t> input_shape;
};

const ModelCase kModels[] = {
    {"resnet50_opset17", 25530472, {1, 3, 224, 224}},
    {"resnet18_train_opset13", 11689512, {8, 3, 224, 224}},
    {"mobilenet_v3_small_opset16", 2536800, {8, 3, 224, 224}},
    {"vit_b_16_opset14", 86567656, {8, 3, 224, 224}},
    {"densenet121_opset15", 7971368, {8, 3, 224, 224}},
    {"inception_v3_opset13", 23817352, {8, 3, 299, 299}},
    {"resnext50_32x4d_opset15", 24994792, {8, 3, 224, 224}},
    {"vgg11_opset13", 132863336, {8, 3, 224, 224}},
    {"transformer_encoder_opset14", 99968, {16, 8, 64}},
    {"transformer_encoder_train_opset14", 99968, {16, 8, 64}},
    {"multihead_attention_opset13", 16640, {16, 8, 64}},
    {"lstm_lm_opset14", 424424, {12, 8}},
    {"gpt_decoder_opset17", 167680, {8, 32}},
    {"gpt_decoder_train_opset14", 167680, {8, 32}},
    {"gpt2_cattn_train_opset14", 466432, {8, 32}},
    {"mlp_weightless", 9610, {8, 64}},
    {"mlp_with_initializers", 9610, {8, 64}},
};

TEST(OnnxImportTest, ExportedModelsImportWithExactParameterCounts) {
  for (const ModelCase& c : kModels) {
    SCOPED_TRACE(c.file);
    std::vector<std::string> warnings;
    Graph g = MustImport(c.file, &warnings);
    EXPECT_THAT(warnings, IsEmpty());
    EXPECT_TRUE(g.Validate().ok());
    EXPECT_EQ(g.name(), c.file);
    EXPECT_EQ(g.NumParameters(), c.params);
    // Exactly one per-iteration input: the data; every weight was recognized.
    std::vector<std::vector<int64_t>> inputs;
    for (const Tensor& t : g.tensors()) {
      if (t.role == TensorRole::kInput) inputs.push_back(t.shape);
    }
    EXPECT_THAT(inputs, ElementsAre(c.input_shape));
    for (const Op& op : g.ops()) {
      EXPECT_FALSE(op.opaque) << op.name;
      EXPECT_TRUE(IsKnownOpType(op.type)) << op.type;
      // Shape arithmetic is folded away entirely.
      EXPECT_NE(op.type, "Shape");
      EXPECT_NE(op.type, "Constant");
      EXPECT_NE(op.type, "Identity");
    }
    EXPECT_GT(g.TotalFlops(Phase::kForward), 0);
    EXPECT_EQ(g.outputs().size(), 1u);
  }
}

TEST(OnnxImportTest, ResNet50MatchesTheIssueTarget) {
  std::vector<std::string> warnings;
  Graph g = MustImport("resnet50_opset17", &warnings);
  EXPECT_EQ(CountOps(g, "Conv"), 53);
  EXPECT_EQ(CountOps(g, "Gemm"), 1);
  EXPECT_NEAR(static_cast<double>(g.NumParameters()), 25557032.0, 0.01 * 25557032.0);
  for (const Op& op : g.ops()) {
    if (op.type != "Conv") continue;
    ASSERT_EQ(op.inputs.size(), 3u) << op.name;
    EXPECT_EQ(g.tensor(op.inputs[1]).role, TensorRole::kParameter) << op.name;
    EXPECT_EQ(g.tensor(op.inputs[2]).role, TensorRole::kParameter) << op.name;
  }
  const Op* stem = FindOp(g, "/conv1/Conv");
  ASSERT_NE(stem, nullptr);
  EXPECT_EQ(g.tensor(stem->inputs[1]).shape, (std::vector<int64_t>{64, 3, 7, 7}));
  EXPECT_EQ(stem->GetInts("strides"), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(stem->GetInts("pads"), (std::vector<int64_t>{3, 3, 3, 3}));
  EXPECT_EQ(g.tensor(stem->outputs[0]).shape, (std::vector<int64_t>{1, 64, 112, 112}));
  // 2 * out elements * (3*7*7) + bias adds: 2*802816*147 + 802816.
  EXPECT_DOUBLE_EQ(stem->flops, 2.0 * 802816 * 147 + 802816);
  EXPECT_EQ(g.tensor(g.outputs()[0]).shape, (std::vector<int64_t>{1, 1000}));
}

TEST(OnnxImportTest, SymbolicBatchTakesDefaultBatch) {
  std::vector<std::string> warnings;
  OnnxImportOptions options;
  options.default_batch = 8;
  Graph g8 = MustImport("resnet50_opset17", &warnings, options);
  Graph g1 = MustImport("resnet50_opset17", &warnings);
  EXPECT_THAT(warnings, IsEmpty());
  absl::StatusOr<TensorId> in = g8.FindTensor("input");
  ASSERT_TRUE(in.ok());
  EXPECT_EQ(g8.tensor(*in).shape, (std::vector<int64_t>{8, 3, 224, 224}));
  EXPECT_EQ(g8.tensor(g8.outputs()[0]).shape, (std::vector<int64_t>{8, 1000}));
  EXPECT_EQ(g8.NumParameters(), g1.NumParameters());
  EXPECT_NEAR(g8.TotalFlops(Phase::kForward), 8 * g1.TotalFlops(Phase::kForward),
              1e-9 * g8.TotalFlops(Phase::kForward));
}

TEST(OnnxImportTest, InitializerTwinHasSameParameters) {
  std::vector<std::string> warnings;
  Graph a = MustImport("mlp_weightless", &warnings);
  Graph b = MustImport("mlp_with_initializers", &warnings);
  EXPECT_THAT(warnings, IsEmpty());
  EXPECT_EQ(a.NumParameters(), 9610);
  EXPECT_EQ(b.NumParameters(), a.NumParameters());
  ASSERT_EQ(a.num_ops(), b.num_ops());
  for (int i = 0; i < a.num_ops(); ++i) EXPECT_EQ(a.op(i).type, b.op(i).type);
  EXPECT_EQ(CountRole(b, TensorRole::kParameter), 4);
  EXPECT_DOUBLE_EQ(a.TotalFlops(Phase::kForward), b.TotalFlops(Phase::kForward));
}

TEST(OnnxImportTest, TrainingModeKeepsBatchNormAndDropout) {
  std::vector<std::string> warnings;
  Graph r = MustImport("resnet18_train_opset13", &warnings);
  EXPECT_EQ(CountOps(r, "BatchNormalization"), 20);
  // Running mean and variance of 20 BatchNorms are constants, not parameters.
  EXPECT_EQ(CountRole(r, TensorRole::kConstant), 40);
  const Op* bn = FindOp(r, "/bn1/BatchNormalization");
  ASSERT_NE(bn, nullptr);
  ASSERT_EQ(bn->inputs.size(), 5u);
  EXPECT_EQ(r.tensor(bn->inputs[1]).role, TensorRole::kParameter);
  EXPECT_EQ(r.tensor(bn->inputs[3]).role, TensorRole::kConstant);
  EXPECT_EQ(r.tensor(bn->inputs[4]).role, TensorRole::kConstant);
  ASSERT_EQ(bn->outputs.size(), 5u);
  EXPECT_EQ(r.tensor(bn->outputs[1]).shape, (std::vector<int64_t>{64}));

  Graph t = MustImport("transformer_encoder_train_opset14", &warnings);
  Graph e = MustImport("transformer_encoder_opset14", &warnings);
  EXPECT_THAT(warnings, IsEmpty());
  EXPECT_EQ(CountOps(t, "Dropout"), 8);
  EXPECT_EQ(CountOps(e, "Dropout"), 0);
  for (const Op& op : t.ops()) {
    if (op.type != "Dropout") continue;
    EXPECT_EQ(op.inputs.size(), 1u) << op.name;  // ratio and training_mode became attributes
    EXPECT_EQ(op.GetInt("training_mode", 0), 1) << op.name;
    EXPECT_NEAR(op.GetFloat("ratio", 0), 0.1, 1e-6) << op.name;
  }
}

TEST(OnnxImportTest, ShapeArithmeticIsFolded) {
  std::vector<std::string> warnings;
  Graph m = MustImport("multihead_attention_opset13", &warnings);
  // Shape -> Gather -> Add/Div/Mul feed the q/k/v Slices: folded into
  // attributes, which shows as the three equal Slices joined into one Split
  // (graph/canonicalize.h) and static Reshapes.
  EXPECT_EQ(CountOps(m, "Slice"), 0);
  const Op* k = FindOp(m, "/mha/Slice.split");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->inputs.size(), 1u);
  EXPECT_EQ(k->GetInts("split"), (std::vector<int64_t>{64, 64, 64}));
  EXPECT_EQ(k->GetInt("axis", -1), 2);
  EXPECT_EQ(m.tensor(k->outputs[1]).shape, (std::vector<int64_t>{16, 8, 64}));
  const Op* r = FindOp(m, "/mha/Reshape");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->inputs.size(), 1u);
  EXPECT_EQ(r->GetInts("shape"), (std::vector<int64_t>{16, 8, 4, 16}));  // batch 8, 4 heads
  EXPECT_EQ(CountOps(m, "Gather") + CountOps(m, "Mul"), 0);

  // The LSTM's zero initial states (Constant -> Expand to Shape-derived dims)
  // become constant tensors; no shape ops remain.
  Graph l = MustImport("lstm_lm_opset14", &warnings);
  EXPECT_EQ(l.num_ops(), 7);  // Gather, 2 x (LSTM, Squeeze), MatMul, Add
  const Op* lstm = FindOp(l, "/lstm/LSTM");
  ASSERT_NE(lstm, nullptr);
  ASSERT_EQ(lstm->inputs.size(), 6u);  // X, W, R, B, initial_h, initial_c
  EXPECT_EQ(l.tensor(lstm->inputs[4]).role, TensorRole::kConstant);
  EXPECT_EQ(l.tensor(lstm->inputs[4]).shape, (std::vector<int64_t>{1, 8, 128}));
  EXPECT_EQ(l.tensor(lstm->outputs[0]).shape, (std::vector<int64_t>{12, 1, 8, 128}));

  // The causal mask (Trilu of ones, == 0) folds to a bool [32,32] constant.
  Graph gpt = MustImport("gpt_decoder_opset17", &warnings);
  EXPECT_THAT(warnings, IsEmpty());
  EXPECT_EQ(CountOps(gpt, "Trilu") + CountOps(gpt, "Equal") + CountOps(gpt, "Cast"), 0);
  EXPECT_EQ(CountOps(gpt, "LayerNormalization"), 5);
  int wheres = 0;
  for (const Op& op : gpt.ops()) {
    if (op.type != "Where") continue;
    ++wheres;
    const Tensor& mask = gpt.tensor(op.inputs[0]);
    EXPECT_EQ(mask.role, TensorRole::kConstant);
    EXPECT_EQ(mask.dtype, DType::kBool);
    EXPECT_EQ(mask.shape, (std::vector<int64_t>{32, 32}));
  }
  EXPECT_EQ(wheres, 2);
}

TEST(OnnxImportTest, EmbeddingsAndDecomposedLayerNormAreParameters) {
  std::vector<std::string> warnings;
  Graph g = MustImport("gpt_decoder_train_opset14", &warnings);
  for (const char* name : {"tok.weight", "pos.weight", "blocks.0.ln1.weight", "blocks.0.ln1.bias",
                           "blocks.1.attn.qkv.weight", "head.weight"}) {
    absl::StatusOr<TensorId> t = g.FindTensor(name);
    ASSERT_TRUE(t.ok()) << name;
    EXPECT_EQ(g.tensor(*t).role, TensorRole::kParameter) << name;
  }
  Graph v = MustImport("vit_b_16_opset14", &warnings);
  for (const char* name : {"class_token", "encoder.pos_embedding"}) {
    absl::StatusOr<TensorId> t = v.FindTensor(name);
    ASSERT_TRUE(t.ok()) << name;
    EXPECT_EQ(v.tensor(*t).role, TensorRole::kParameter) << name;
  }
  EXPECT_THAT(warnings, IsEmpty());
}

// The nanoGPT-style export: each block's fused c_attn MatMul [8,32,128] x
// [128,384] is split into q, k, v on the last axis, the causal mask folds to a
// constant, dropout sits on the embeddings, attention weights and both
// residual branches, and the tied lm_head reads the token embedding's weight.
TEST(OnnxImportTest, Gpt2FusedCAttnSplitsIntoQkvAndTiesTheHead) {
  std::vector<std::string> warnings;
  Graph g = MustImport("gpt2_cattn_train_opset14", &warnings);
  EXPECT_THAT(warnings, IsEmpty());
  EXPECT_EQ(CountOps(g, "Split"), 2);
  EXPECT_EQ(CountOps(g, "Dropout"), 7);
  EXPECT_EQ(CountOps(g, "Trilu") + CountOps(g, "Equal") + CountOps(g, "Cast"), 0);
  for (const char* block : {"/h.0", "/h.1"}) {
    SCOPED_TRACE(block);
    const std::string b(block);
    const Op* c_attn = FindOp(g, b + "/attn/c_attn/MatMul");
    ASSERT_NE(c_attn, nullptr);
    EXPECT_EQ(g.tensor(c_attn->outputs[0]).shape, (std::vector<int64_t>{8, 32, 384}));
    const Op* split = FindOp(g, b + "/attn/Split");
    ASSERT_NE(split, nullptr);
    ASSERT_EQ(split->inputs.size(), 1u);  // the split sizes became an attribute
    EXPECT_EQ(split->GetInt("axis", -1), 2);
    EXPECT_EQ(split->GetInts("split"), (std::vector<int64_t>{128, 128, 128}));
    ASSERT_EQ(split->outputs.size(), 3u);
    for (TensorId out : split->outputs) {
      EXPECT_EQ(g.tensor(out).shape, (std::vector<int64_t>{8, 32, 128}));
    }
    const Op* where = FindOp(g, b + "/attn/Where");
    ASSERT_NE(where, nullptr);
    EXPECT_EQ(g.tensor(where->inputs[0]).role, TensorRole::kConstant);
    EXPECT_EQ(g.tensor(where->inputs[0]).shape, (std::vector<int64_t>{32, 32}));
    EXPECT_EQ(g.tensor(where->outputs[0]).shape, (std::vector<int64_t>{8, 4, 32, 32}));
  }
  for (const Op& op : g.ops()) {
    if (op.type != "Dropout") continue;
    EXPECT_EQ(op.GetInt("training_mode", 0), 1) << op.name;
    EXPECT_NEAR(op.GetFloat("ratio", 0), 0.1, 1e-6) << op.name;
  }
  absl::StatusOr<TensorId> wte = g.FindTensor("transformer.wte.weight");
  ASSERT_TRUE(wte.ok());
  EXPECT_EQ(g.tensor(*wte).role, TensorRole::kParameter);
  std::vector<std::string> readers;
  for (const Op& op : g.ops()) {
    for (TensorId in : op.inputs) {
      if (in == *wte) readers.push_back(op.name);
    }
  }
  EXPECT_THAT(readers, ElementsAre("/wte/Gather", "/lm_head/Transpose"));
  EXPECT_EQ(g.tensor(g.outputs()[0]).shape, (std::vector<int64_t>{8, 32, 512}));
}

TEST(OnnxImportTest, UnknownOpIsKeptOpaqueWithOneWarning) {
  std::vector<std::string> warnings;
  Graph g = MustImport("custom_op", &warnings);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0],
            "unknown op type 'com.example.FancyOp' (node 'fancy'): kept as an opaque op");
  const Op* op = FindOp(g, "fancy");
  ASSERT_NE(op, nullptr);
  EXPECT_TRUE(op->opaque);
  EXPECT_EQ(op->type, "com.example.FancyOp");
  EXPECT_DOUBLE_EQ(op->GetFloat("alpha", 0), 0.5);
  ASSERT_EQ(op->outputs.size(), 1u);
  EXPECT_EQ(g.tensor(op->outputs[0]).shape, (std::vector<int64_t>{2, 8}));
  EXPECT_EQ(op->flops, 0);
  EXPECT_EQ(op->bytes_read, 64);
  EXPECT_EQ(g.num_ops(), 3);
  EXPECT_TRUE(g.Validate().ok());
}

struct BadCase {
  std::string file;
  absl::StatusCode code;
  std::vector<std::string> message_parts;
};

TEST(OnnxImportTest, MalformedFilesGiveNamedErrors) {
  const BadCase cases[] = {
      {"tests/data/missing.onnx", absl::StatusCode::kNotFound,
       {"tests/data/missing.onnx: no such file"}},
      {DataPath("truncated"), absl::StatusCode::kInvalidArgument,
       {"tests/data/truncated.onnx: not a valid ONNX ModelProto (", "truncated or corrupt"}},
      {DataPath("random_bytes"), absl::StatusCode::kInvalidArgument,
       {"tests/data/random_bytes.onnx: not a valid ONNX ModelProto ("}},
      {DataPath("cycle"), absl::StatusCode::kInvalidArgument,
       {"tests/data/cycle.onnx: ", "cycle", "node 'add_loop'"}},
      {DataPath("opset5"), absl::StatusCode::kInvalidArgument,
       {"tests/data/opset5.onnx: unsupported opset 5"}},
      {DataPath("sequence_input"), absl::StatusCode::kInvalidArgument,
       {"tests/data/sequence_input.onnx: ", "graph input 'xs'", "non-tensor type (sequence)"}},
      {"tests/data", absl::StatusCode::kInvalidArgument, {"tests/data: is a directory"}},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.file);
    std::vector<std::string> warnings;
    absl::StatusOr<Graph> g = ImportOnnxFile(c.file, {}, &warnings);
    ASSERT_FALSE(g.ok());
    EXPECT_EQ(g.status().code(), c.code) << g.status();
    for (const std::string& part : c.message_parts) {
      EXPECT_THAT(std::string(g.status().message()), HasSubstr(part));
    }
  }
}

TEST(OnnxImportTest, SizeLimitAndOptionsAreChecked) {
  OnnxImportOptions small;
  small.max_model_bytes = 1000;
  absl::StatusOr<Graph> g = ImportOnnxFile(DataPath("resnet50_opset17"), small, nullptr);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(g.status().message()),
              HasSubstr("resnet50_opset17.onnx: model is 26299 bytes, larger than "
                        "max_model_bytes (1000)"));

  absl::StatusOr<Graph> b = ImportOnnxBytes(std::string(2000, 'x'), small, nullptr);
  ASSERT_FALSE(b.ok());
  EXPECT_THAT(std::string(b.status().message()), HasSubstr("max_model_bytes (1000)"));

  absl::StatusOr<Graph> empty = ImportOnnxBytes("", {}, nullptr);
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(empty.status().message()),
              HasSubstr("<onnx bytes>: not a valid ONNX ModelProto (no graph)"));

  OnnxImportOptions zero;
  zero.default_batch = 0;
  absl::StatusOr<Graph> z = ImportOnnxFile(DataPath("mlp_weightless"), zero, nullptr);
  ASSERT_FALSE(z.ok());
  EXPECT_THAT(std::string(z.status().message()), HasSubstr("default_batch must be >= 1"));
}

TEST(OnnxImportTest, BytesAndFileImportsAgree) {
  std::ifstream f(DataPath("gpt_decoder_opset17"), std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  std::vector<std::string> warnings;
  absl::StatusOr<Graph> g = ImportOnnxBytes(ss.str(), {}, &warnings);
  ASSERT_TRUE(g.ok()) << g.status();
  Graph h = MustImport("gpt_decoder_opset17", &warnings);
  EXPECT_EQ(g->num_ops(), h.num_ops());
  EXPECT_EQ(g->NumParameters(), h.NumParameters());
  EXPECT_DOUBLE_EQ(g->TotalFlops(Phase::kForward), h.TotalFlops(Phase::kForward));
}

// Corrupted bytes of real models must give a Status, never a crash; whatever
// still imports must be a valid graph.
TEST(OnnxImportTest, CorruptedModelsNeverCrash) {
  std::mt19937 rng(20240611);
  int imported = 0, rejected = 0;
  for (const char* name : {"custom_op", "mlp_with_initializers", "multihead_attention_opset13",
                           "lstm_lm_opset14"}) {
    std::ifstream f(DataPath(name), std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string original = ss.str();
    for (int trial = 0; trial < 150; ++trial) {
      std::string bytes = original;
      const int flips = 1 + static_cast<int>(rng() % 6);
      for (int i = 0; i < flips; ++i) bytes[rng() % bytes.size()] = static_cast<char>(rng());
      if (trial % 5 == 0) bytes.resize(rng() % bytes.size());
      std::vector<std::string> warnings;
      absl::StatusOr<Graph> g = ImportOnnxBytes(bytes, {}, &warnings);
      if (g.ok()) {
        ++imported;
        EXPECT_TRUE(g->Validate().ok());
      } else {
        ++rejected;
        EXPECT_THAT(std::string(g.status().message()), HasSubstr("<onnx bytes>: "));
      }
    }
  }
  EXPECT_EQ(imported + rejected, 600);
  EXPECT_GT(rejected, 0);
}

// chain1000.onnx: 250 x (MatMul 32x32, Add bias, Relu, Mul by a scalar
// initializer) = 1,000 nodes, 500 weight inputs and a symbolic batch.
TEST(OnnxImportTest, ThousandNodeGraphImportsFast) {
  std::vector<std::string> warnings;
  const auto start = std::chrono::steady_clock::now();
  Graph g = MustImport("chain1000", &warnings);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(g.num_ops(), 1000);
  EXPECT_EQ(g.NumParameters(), 250 * (32 * 32 + 32));
  absl::StatusOr<TensorId> half = g.FindTensor("half");
  ASSERT_TRUE(half.ok());
  EXPECT_EQ(g.tensor(*half).role, TensorRole::kConstant);  // a scalar initializer
  EXPECT_LT(seconds, 1.0);
  RecordProperty("import_seconds", std::to_string(seconds));
}

}  // namespace
}  // namespace braid::graph
