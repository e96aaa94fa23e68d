#include "graph/zoo.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "graph/model_source.h"
#include "graph/ops.h"
#include "graph/training.h"
#include "gtest/gtest.h"

namespace braid::graph {
namespace {

using ::testing::HasSubstr;

std::map<std::string, int> OpCounts(const Graph& g) {
  std::map<std::string, int> counts;
  for (const Op& op : g.ops()) ++counts[op.type];
  return counts;
}

// Multiply-accumulates per sample of the Conv, MatMul and Gemm ops (bias adds
// excluded), the unit torchvision's "GFLOPS" column uses.
double MacsPerSample(const Graph& g, int64_t batch) {
  double macs = 0;
  for (const Op& op : g.ops()) {
    if (op.type != "Conv" && op.type != "MatMul" && op.type != "Gemm") continue;
    double f = op.flops;
    if (op.inputs.size() >= 3) f -= g.tensor(op.outputs[0]).NumElements();
    macs += f / 2;
  }
  return macs / static_cast<double>(batch);
}

Graph Build(const std::string& name, int batch = 0, ZooSize size = ZooSize::kPublished) {
  absl::StatusOr<Graph> g = BuildZooModel(name, batch, size);
  EXPECT_TRUE(g.ok()) << name << ": " << g.status();
  return g.ok() ? *std::move(g) : Graph();
}

Graph Sample(const std::string& name, int batch = 0) {
  return Build(name, batch, ZooSize::kSample);
}

std::vector<int64_t> ShapeOf(const Graph& g, const std::string& tensor) {
  absl::StatusOr<TensorId> id = g.FindTensor(tensor);
  EXPECT_TRUE(id.ok()) << tensor;
  return id.ok() ? g.tensor(*id).shape : std::vector<int64_t>{};
}

TEST(ZooTest, EveryModelBuildsFastValidatesAndUsesKnownOps) {
  ASSERT_EQ(ZooModels().size(), 11u);
  for (const ZooEntry& e : ZooModels()) {
    SCOPED_TRACE(e.name);
    EXPECT_GT(e.default_batch, 0);
    EXPECT_FALSE(e.description.empty());
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<Graph> g = BuildZooModel(e.name);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_LT(seconds, 1.0);
    EXPECT_EQ(g->name(), e.name);
    EXPECT_TRUE(g->Validate().ok());
    EXPECT_FALSE(g->outputs().empty());
    EXPECT_GT(g->TotalFlops(Phase::kForward), 0);
    for (const Op& op : g->ops()) {
      EXPECT_TRUE(IsKnownOpType(op.type)) << op.type;
      EXPECT_EQ(op.phase, Phase::kForward);
    }
    for (const Tensor& t : g->tensors()) {
      if (t.role == TensorRole::kParameter) {
        EXPECT_FALSE(t.consumers.empty()) << "unused parameter " << t.name;
      }
    }
  }
}

TEST(ZooTest, UnknownNameListsKnownModels) {
  absl::StatusOr<Graph> g = BuildZooModel("alexnet");
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(g.status().message()), HasSubstr("alexnet"));
  EXPECT_THAT(std::string(g.status().message()), HasSubstr("resnet50, transformer"));
  EXPECT_THAT(std::string(g.status().message()), HasSubstr("gpt3_layers"));
}

TEST(ZooTest, BatchOverride) {
  Graph g = Build("resnet50", 8);
  EXPECT_EQ(g.tensor(*g.FindTensor("image")).shape, (std::vector<int64_t>{8, 3, 224, 224}));
  EXPECT_EQ(g.tensor(g.outputs()[0]).shape, (std::vector<int64_t>{8, 1000}));
  Graph d = Build("resnet50");
  EXPECT_EQ(d.tensor(*d.FindTensor("image")).shape[0], 64);
  EXPECT_EQ(BuildZooModel("mlp", 1 << 30).status().code(), absl::StatusCode::kInvalidArgument);
}

// Published counts: torchvision's model tables (VGG19 143,667,240; ResNet-50
// 25,557,032; ResNeXt-50 32x4d 25,028,904; Inception-v3 27,161,264 of which
// the aux classifier is 768*128 + 256 + 128*768*25 + 1536 + 768*1000 + 1000 =
// 3,326,696).
TEST(ZooTest, VisionParameterCountsMatchTorchvision) {
  EXPECT_EQ(Build("vgg19", 1).NumParameters(), 143667240);
  EXPECT_EQ(Build("resnet50", 1).NumParameters(), 25557032);
  EXPECT_EQ(Build("resnext50", 1).NumParameters(), 25028904);
  EXPECT_EQ(Build("inception_v3", 1).NumParameters(), 27161264 - 3326696);
}

TEST(ZooTest, LanguageModelParameterCounts) {
  // Transformer base: per encoder layer 4*(512*512+512) + (512*2048+2048) +
  // (2048*512+512) + 2*1024 = 3,152,384; per decoder layer one more attention
  // and LayerNorm = 4,204,032; shared embedding 37000*512.
  const int64_t transformer = 6 * 3152384 + 6 * 4204032 + 37000 * 512;
  EXPECT_EQ(transformer, 63082496);
  EXPECT_EQ(Build("transformer", 1).NumParameters(), transformer);
  EXPECT_NEAR(static_cast<double>(transformer), 65e6, 0.03 * 65e6);  // paper: "65M"

  // RNNLM: embedding 10000*1500, two LSTMs 2*(4*1500*1500)+8*1500 each,
  // decoder 1500*10000+10000.
  EXPECT_EQ(Build("rnnlm", 1).NumParameters(),
            int64_t{15000000} + 2 * int64_t{18012000} + int64_t{15010000});

  // BERT-Large: embeddings 30522*1024 + 512*1024 + 2*1024 + 2048 = 31,782,912;
  // per layer 4*(1024^2+1024) + (1024*4096+4096) + (4096*1024+1024) + 2*2048 =
  // 12,596,224; pooler 1,049,600; MLM head 1,049,600 + 2048 + 30522 (decoder
  // tied); NSP 2050.
  const int64_t bert_model = 31782912 + 24 * int64_t{12596224} + 1049600;
  EXPECT_EQ(bert_model, 335141888);
  const int64_t bert = bert_model + 1049600 + 2048 + 30522 + 2050;
  EXPECT_EQ(Build("bert_large", 1).NumParameters(), bert);
  EXPECT_NEAR(static_cast<double>(bert), 335e6, 0.02 * 335e6);

  // Reformer: per layer 3*1024^2 (shared QK, V, out; no bias) + 2*2048 +
  // 8,393,728 (FFN) = 11,543,552; embedding 256*1024; axial 128*256 + 128*768;
  // final LayerNorm 2048; head 1024*256 + 256.
  EXPECT_EQ(Build("reformer", 1).NumParameters(),
            6 * int64_t{11543552} + 262144 + 131072 + 2048 + 262400);

  // GPT-3 layers: 4*(12288^2+12288) + (12288*49152+49152) + (49152*12288+12288)
  // + 2*2*12288 = 1,812,099,072 per layer.
  EXPECT_EQ(Build("gpt3_layers", 1).NumParameters(), 4 * int64_t{1812099072});
}

TEST(ZooTest, MlpAndDlrmParameterCounts) {
  EXPECT_EQ(Build("mlp", 1).NumParameters(), 16 * (int64_t{8192} * 8192 + 8192));
  // 8 tables of 1M x 64; bottom 512*512+512 + 512*64+64; top 100*1024+1024 +
  // 2*(1024*1024+1024) + 1024+1.
  EXPECT_EQ(Build("dlrm", 1).NumParameters(),
            8 * int64_t{64000000} + 262656 + 32832 + 103424 + 2 * 1049600 + 1025);
}

TEST(ZooTest, ResNet50OpCountsAndShapes) {
  Graph g = Build("resnet50", 2);
  std::map<std::string, int> c = OpCounts(g);
  EXPECT_EQ(c["Conv"], 53);  // stem + 16 blocks x 3 + 4 downsample
  EXPECT_EQ(c["BatchNormalization"], 53);
  EXPECT_EQ(c["Relu"], 49);
  EXPECT_EQ(c["Add"], 16);
  EXPECT_EQ(c["MaxPool"], 1);
  EXPECT_EQ(c["GlobalAveragePool"], 1);
  EXPECT_EQ(c["Gemm"], 1);
  EXPECT_TRUE(g.FindTensor("layer1.0.downsample.conv1.weight").ok());
  EXPECT_EQ(g.tensor(*g.FindTensor("layer4.2.relu3")).shape, (std::vector<int64_t>{2, 2048, 7, 7}));
  // torchvision lists 4.09 GFLOPS (multiply-accumulates) per image.
  EXPECT_NEAR(MacsPerSample(g, 2), 4.09e9, 0.02 * 4.09e9);
}

TEST(ZooTest, ResNeXtUsesGroupedConvs) {
  Graph g = Build("resnext50", 1);
  int grouped = 0;
  for (const Op& op : g.ops()) {
    if (op.type == "Conv" && op.GetInt("group", 1) == 32) ++grouped;
  }
  EXPECT_EQ(OpCounts(g)["Conv"], 53);
  EXPECT_EQ(grouped, 16);
  EXPECT_NEAR(MacsPerSample(g, 1), 4.23e9, 0.02 * 4.23e9);  // torchvision: 4.23
}

TEST(ZooTest, VggAndInceptionOpCounts) {
  Graph v = Build("vgg19", 1);
  std::map<std::string, int> c = OpCounts(v);
  EXPECT_EQ(c["Conv"], 16);
  EXPECT_EQ(c["MaxPool"], 5);
  EXPECT_EQ(c["Gemm"], 3);
  EXPECT_EQ(c["Relu"], 18);
  EXPECT_NEAR(MacsPerSample(v, 1), 19.63e9, 0.02 * 19.63e9);  // torchvision: 19.63

  Graph i = Build("inception_v3", 1);
  c = OpCounts(i);
  // stem 5 + 3 x InceptionA 7 + B 4 + 4 x C 10 + D 6 + 2 x E 9.
  EXPECT_EQ(c["Conv"], 94);
  EXPECT_EQ(c["BatchNormalization"], 94);
  EXPECT_EQ(c["Concat"], 11 + 4);  // one per block + two inside each E block
  EXPECT_EQ(i.tensor(*i.FindTensor("Mixed_7c.concat3")).shape,
            (std::vector<int64_t>{1, 2048, 8, 8}));
  EXPECT_NEAR(MacsPerSample(i, 1), 5.71e9, 0.02 * 5.71e9);  // torchvision: 5.71
}

TEST(ZooTest, AttentionModelOpCounts) {
  std::map<std::string, int> t = OpCounts(Build("transformer", 2));
  EXPECT_EQ(t["Softmax"], 18);  // 6 encoder self + 6 decoder self + 6 cross
  EXPECT_EQ(t["LayerNormalization"], 30);
  EXPECT_EQ(t["MatMul"], 6 * 8 + 6 * 14);  // per attention 4 projections + 2 products
  EXPECT_EQ(t["Gemm"], 1);                 // tied output projection
  EXPECT_EQ(t["Gather"], 2);               // one table, two lookups

  Graph bert = Build("bert_large", 2);
  std::map<std::string, int> b = OpCounts(bert);
  EXPECT_EQ(b["Softmax"], 24);
  EXPECT_EQ(b["LayerNormalization"], 1 + 48 + 1);
  EXPECT_EQ(b["MatMul"], 24 * 8 + 1);
  EXPECT_EQ(b["Gemm"], 3);  // pooler, NSP, tied MLM decoder
  ASSERT_EQ(bert.outputs().size(), 2u);
  EXPECT_EQ(bert.tensor(bert.outputs()[0]).shape, (std::vector<int64_t>{256, 30522}));
  EXPECT_EQ(bert.tensor(bert.outputs()[1]).shape, (std::vector<int64_t>{2, 2}));

  Graph gpt = Build("gpt3_layers");
  std::map<std::string, int> p = OpCounts(gpt);
  EXPECT_EQ(p["Softmax"], 4);
  EXPECT_EQ(p["LayerNormalization"], 8);
  EXPECT_EQ(p["MatMul"], 4 * 8);
  EXPECT_EQ(gpt.tensor(gpt.outputs()[0]).shape, (std::vector<int64_t>{1, 2048, 12288}));

  Graph r = Build("reformer");
  std::map<std::string, int> rc = OpCounts(r);
  EXPECT_EQ(rc["Softmax"], 6);
  EXPECT_EQ(rc["MatMul"], 6 * 7);
  // Chunked attention scores: [B, heads, 16384/64 chunks, 64, 64].
  EXPECT_EQ(r.tensor(*r.FindTensor("layer0.attn.softmax1")).shape,
            (std::vector<int64_t>{1, 8, 256, 64, 64}));
}

TEST(ZooTest, RecurrentMlpAndDlrmStructure) {
  Graph rnn = Build("rnnlm", 4);
  std::map<std::string, int> r = OpCounts(rnn);
  EXPECT_EQ(r["LSTM"], 2);
  EXPECT_EQ(r["Gemm"], 1);
  EXPECT_EQ(rnn.tensor(rnn.outputs()[0]).shape, (std::vector<int64_t>{35 * 4, 10000}));

  std::map<std::string, int> m = OpCounts(Build("mlp", 2));
  EXPECT_EQ(m["Gemm"], 16);
  EXPECT_EQ(m["Relu"], 15);

  Graph d = Build("dlrm", 2);
  std::map<std::string, int> dc = OpCounts(d);
  EXPECT_EQ(dc["Gather"], 9);  // 8 tables + the interaction's triangle
  EXPECT_EQ(dc["ReduceSum"], 8);
  EXPECT_EQ(dc["Gemm"], 6);
  EXPECT_EQ(d.tensor(*d.FindTensor("interaction.concat2")).shape, (std::vector<int64_t>{2, 100}));
  EXPECT_EQ(d.tensor(d.outputs()[0]).shape, (std::vector<int64_t>{2, 1}));
}

// ---- ZooSize::kSample ------------------------------------------------------

TEST(ZooSampleTest, EveryModelBuildsAtSampleSize) {
  for (const ZooEntry& e : ZooModels()) {
    SCOPED_TRACE(e.name);
    EXPECT_GT(e.sample_batch, 0);
    EXPECT_THAT(e.sample_description, ::testing::StartsWith("sample: "));
    absl::StatusOr<Graph> g = BuildZooModel(e.name, 0, ZooSize::kSample);
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_EQ(g->name(), e.name);
    EXPECT_TRUE(g->Validate().ok());
    EXPECT_FALSE(g->outputs().empty());
    for (const Tensor& t : g->tensors()) {
      if (t.role == TensorRole::kParameter) {
        EXPECT_FALSE(t.consumers.empty()) << "unused parameter " << t.name;
      }
    }
    // Far smaller than the published model, per sample as well as in all.
    Graph published = Build(e.name, e.sample_batch);
    EXPECT_LT(g->NumParameters() * 10, published.NumParameters());
    EXPECT_LT(g->TotalFlops(Phase::kForward) * 10, published.TotalFlops(Phase::kForward));
  }
}

// Same layers, op for op: the sample differs in shapes only.
TEST(ZooSampleTest, SameOpsAsPublished) {
  for (const ZooEntry& e : ZooModels()) {
    SCOPED_TRACE(e.name);
    Graph sample = Sample(e.name);
    Graph published = Build(e.name);
    EXPECT_EQ(OpCounts(sample), OpCounts(published));
    ASSERT_EQ(sample.ops().size(), published.ops().size());
    for (size_t i = 0; i < sample.ops().size(); ++i) {
      const Op& s = sample.ops()[i];
      const Op& p = published.ops()[i];
      ASSERT_EQ(s.type, p.type) << "op " << i << " " << s.name;
      EXPECT_EQ(s.name, p.name);
      EXPECT_EQ(s.inputs.size(), p.inputs.size()) << s.name;
    }
  }
}

// Every op of every sample training graph runs in a few ms on one core: at most
// 100 MFLOP (the sizes aim at ~50) and no input or output over 4 MiB (~2 MB).
TEST(ZooSampleTest, TrainingGraphOpsAreSmall) {
  constexpr double kMaxFlops = 100e6;
  constexpr int64_t kMaxBytes = int64_t{4} << 20;
  for (const ZooEntry& e : ZooModels()) {
    SCOPED_TRACE(e.name);
    Graph fwd = Sample(e.name);
    absl::StatusOr<Graph> train = BuildTrainingGraph(fwd, {.ranks = 2});
    ASSERT_TRUE(train.ok()) << train.status();
    EXPECT_GT(train->ops().size(), 2 * fwd.ops().size());
    for (const Op& op : train->ops()) {
      EXPECT_LE(op.flops, kMaxFlops) << op.name << " (" << op.type << ")";
      for (const std::vector<TensorId>* ids : {&op.inputs, &op.outputs}) {
        for (TensorId id : *ids) {
          if (id == kNoId) continue;
          const Tensor& t = train->tensor(id);
          EXPECT_LE(t.Bytes(), kMaxBytes) << op.name << " (" << op.type << "): " << t.name;
        }
      }
    }
  }
}

TEST(ZooSampleTest, SampleShapes) {
  Graph r = Sample("resnet50");
  EXPECT_EQ(ShapeOf(r, "image"), (std::vector<int64_t>{8, 3, 64, 64}));
  EXPECT_EQ(ShapeOf(r, "layer4.2.relu3"), (std::vector<int64_t>{8, 512, 2, 2}));
  EXPECT_EQ(r.tensor(r.outputs()[0]).shape, (std::vector<int64_t>{8, 200}));
  EXPECT_EQ(ShapeOf(Sample("resnet50", 3), "image"), (std::vector<int64_t>{3, 3, 64, 64}));

  Graph x = Sample("resnext50");
  int grouped = 0;
  for (const Op& op : x.ops()) {
    if (op.type == "Conv" && op.GetInt("group", 1) == 32) ++grouped;
  }
  EXPECT_EQ(grouped, 16);
  EXPECT_EQ(ShapeOf(x, "layer4.2.relu3"), (std::vector<int64_t>{8, 512, 2, 2}));

  Graph i = Sample("inception_v3");
  EXPECT_EQ(ShapeOf(i, "image"), (std::vector<int64_t>{8, 3, 75, 75}));
  EXPECT_EQ(ShapeOf(i, "Mixed_7c.concat3"), (std::vector<int64_t>{8, 512, 1, 1}));

  Graph v = Sample("vgg19");
  EXPECT_EQ(v.tensor(v.outputs()[0]).shape, (std::vector<int64_t>{8, 100}));

  Graph bert = Sample("bert_large");
  EXPECT_EQ(bert.tensor(bert.outputs()[0]).shape, (std::vector<int64_t>{64, 1500}));
  EXPECT_EQ(bert.tensor(bert.outputs()[1]).shape, (std::vector<int64_t>{2, 2}));

  Graph t = Sample("transformer");
  EXPECT_EQ(t.tensor(t.outputs()[0]).shape, (std::vector<int64_t>{4 * 32, 1000}));

  // Chunked attention scores: [B, heads, 144/16 chunks, 16, 16].
  EXPECT_EQ(ShapeOf(Sample("reformer"), "layer0.attn.softmax1"),
            (std::vector<int64_t>{2, 8, 9, 16, 16}));

  Graph gpt = Sample("gpt3_layers");
  EXPECT_EQ(gpt.tensor(gpt.outputs()[0]).shape, (std::vector<int64_t>{2, 32, 256}));

  Graph rnn = Sample("rnnlm");
  EXPECT_EQ(rnn.tensor(rnn.outputs()[0]).shape, (std::vector<int64_t>{20 * 2, 2000}));

  Graph m = Sample("mlp");
  EXPECT_EQ(m.tensor(m.outputs()[0]).shape, (std::vector<int64_t>{32, 640}));

  Graph d = Sample("dlrm");
  EXPECT_EQ(ShapeOf(d, "interaction.concat2"), (std::vector<int64_t>{128, 16 + 36}));
  EXPECT_EQ(ShapeOf(d, "emb0.indices"), (std::vector<int64_t>{128, 20}));
}

// ---- zoo: model sources ----------------------------------------------------

TEST(ZooSourceTest, ParsesNameBatchAndSize) {
  absl::StatusOr<ZooSource> s = ParseZooSource("zoo:resnet50");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->name, "resnet50");
  EXPECT_EQ(s->batch, 0);
  EXPECT_EQ(s->size, ZooSize::kPublished);

  s = ParseZooSource("zoo:resnet50@sample");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->name, "resnet50");
  EXPECT_EQ(s->batch, 0);
  EXPECT_EQ(s->size, ZooSize::kSample);

  for (const char* src : {"zoo:bert_large@sample@4", "zoo:bert_large@4@sample"}) {
    s = ParseZooSource(src);
    ASSERT_TRUE(s.ok()) << src << ": " << s.status();
    EXPECT_EQ(s->name, "bert_large");
    EXPECT_EQ(s->batch, 4);
    EXPECT_EQ(s->size, ZooSize::kSample);
  }
  s = ParseZooSource("zoo:mlp@16");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->batch, 16);
  EXPECT_EQ(s->size, ZooSize::kPublished);

  s = ParseZooSource("zoo:transformer@sample@w200");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->width_pct, 200);
  EXPECT_EQ(s->size, ZooSize::kSample);
  EXPECT_FALSE(ParseZooSource("zoo:transformer@w200").ok());  // a width needs @sample
  EXPECT_FALSE(ParseZooSource("zoo:transformer@sample@w0").ok());

  EXPECT_TRUE(IsZooSource("zoo:mlp@sample"));
  EXPECT_FALSE(IsZooSource("model.onnx"));
  for (const char* bad :
       {"zoo:mlp@0", "zoo:mlp@-2", "zoo:mlp@big", "zoo:mlp@", "zoo:mlp@sample@sample",
        "zoo:mlp@2@3", "zoo:@sample", "zoo:mlp@SAMPLE", "mlp@sample"}) {
    s = ParseZooSource(bad);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(s.status().message()), HasSubstr(bad));
  }
}

TEST(ZooSourceTest, LoadModelBuildsTheSampleSize) {
  absl::StatusOr<Graph> g = LoadModel("zoo:resnet50@sample", {}, nullptr);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(ShapeOf(*g, "image"), (std::vector<int64_t>{8, 3, 64, 64}));

  // LoadOptions::batch applies unless the source names a batch.
  g = LoadModel("zoo:resnet50@sample", {.batch = 2}, nullptr);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(ShapeOf(*g, "image"), (std::vector<int64_t>{2, 3, 64, 64}));
  g = LoadModel("zoo:resnet50@sample@3", {.batch = 2}, nullptr);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(ShapeOf(*g, "image"), (std::vector<int64_t>{3, 3, 64, 64}));

  // The published size as before.
  g = LoadModel("zoo:resnet50@2", {}, nullptr);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(ShapeOf(*g, "image"), (std::vector<int64_t>{2, 3, 224, 224}));
  g = LoadModel("zoo:resnet50", {}, nullptr);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(ShapeOf(*g, "image")[2], 224);

  EXPECT_EQ(LoadModel("zoo:alexnet@sample", {}, nullptr).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(LoadModel("zoo:resnet50@tiny", {}, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace braid::graph

namespace braid::graph {
namespace {

// The sample size at other widths: the same ops, wider or narrower tensors.
TEST(ZooSampleTest, WidthScalesTheSampleSize) {
  for (const char* name : {"transformer", "bert_large", "vgg19", "resnet50", "mlp"}) {
    absl::StatusOr<Graph> base = BuildZooModel(name, 2, ZooSize::kSample);
    ASSERT_TRUE(base.ok()) << name << ": " << base.status();
    for (int pct : {50, 200}) {
      absl::StatusOr<Graph> g = BuildZooModel(name, 2, ZooSize::kSample, pct);
      ASSERT_TRUE(g.ok()) << name << " " << pct << ": " << g.status();
      ASSERT_EQ(g->num_ops(), base->num_ops()) << name;
      EXPECT_EQ(pct > 100, g->NumParameters() > base->NumParameters()) << name << " " << pct;
    }
  }
  EXPECT_FALSE(BuildZooModel("resnet50", 2, ZooSize::kPublished, 200).ok());
  EXPECT_FALSE(BuildZooModel("vgg19", 2, ZooSize::kSample, 150).ok());
  EXPECT_FALSE(BuildZooModel("resnext50", 2, ZooSize::kSample, 50).ok());  // < 1 channel a group
}

}  // namespace
}  // namespace braid::graph
