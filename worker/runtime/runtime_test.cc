// The runtime on one rank: mesh arithmetic, program and checkpoint files,
// and world-1 training runs (an MLP with SGD, a transformer layer with Adam)
// checked against LibTorch autograd (an
// independent reference: ATen's own autodiff of the same model, not braid's
// training graph and kernels).
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "gmock/gmock.h"
#include "graph/builder.h"
#include "graph/onnx_import.h"
#include "graph/program.h"
#include "graph/training.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "worker/runtime/checkpoint.h"
#include "worker/runtime/cpu_backend.h"
#include "worker/runtime/golden.h"
#include "worker/runtime/interpreter.h"
#include "worker/runtime/values.h"

namespace braid::runtime {
namespace {

using graph::Graph;
using graph::GraphBuilder;
using graph::TensorId;

TEST(MeshTest, CoordinatesGroupsAndPieces) {
  const std::vector<int> mesh = {2, 3};
  EXPECT_EQ(graph::MeshCoordinate(mesh, 4), (std::vector<int>{1, 1}));
  EXPECT_EQ(graph::GroupRanks(mesh, 4, {1}), (std::vector<int>{3, 4, 5}));
  EXPECT_EQ(graph::GroupRanks(mesh, 4, {0}), (std::vector<int>{1, 4}));
  EXPECT_EQ(graph::GroupRanks(mesh, 4, {0, 1}), (std::vector<int>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(graph::PieceIndex(mesh, {1, 2}, {0, 1}), 5);
  EXPECT_EQ(graph::PieceIndex(mesh, {1, 2}, {1, 0}), 5 - 5 + 2 * 2 + 1);
  HostTensor full{{4, 3}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}};
  HostTensor piece = NarrowHost(full, {2}, {1}, {{0}, {}});
  EXPECT_EQ(piece.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(piece.data, (std::vector<float>{6, 7, 8, 9, 10, 11}));
}

// The world-1 program of an MLP: its training graph with every load at full
// shape.
graph::Program WorldOne(const Graph& forward, graph::Optimizer opt) {
  graph::TrainingOptions t;
  t.optimizer = opt;
  graph::Program p;
  p.model = forward.name();
  p.seed = 7;
  p.graph = *graph::BuildTrainingGraph(forward, t);
  for (const graph::Tensor& x : p.graph.tensors()) {
    if (x.producer != graph::kNoId) continue;
    graph::LoadSpec l;
    l.source = x.name;
    l.full_shape = x.shape;
    l.dim_axes.assign(x.shape.size(), {});
    if (!x.value.empty()) {
      l.init = graph::InitKind::kValue;  // a constant the model states
      l.values = x.value;
    } else if (x.role == graph::TensorRole::kParameter) {
      l.init = graph::InitKind::kUniform;
      l.bound = 0.3;
    } else if (x.role == graph::TensorRole::kOptimizerState) {
      l.init = graph::InitKind::kZeros;
    } else if (x.name.ends_with(".grad_seed")) {
      l.init = graph::InitKind::kFill;
      l.value = 1;
    } else if (x.dtype == graph::DType::kI64) {
      l.init = graph::InitKind::kIntegers;
      l.high = 16;
      l.per_step = true;
    } else {
      l.init = graph::InitKind::kNormal;
      l.per_step = true;
    }
    p.loads[x.name] = l;
  }
  p.program_fingerprint = graph::ComputeProgramFingerprint(p);
  return p;
}

Graph Mlp() {
  GraphBuilder b("mlp");
  TensorId x = b.Input("x", {8, 12});
  x = b.Relu(b.Linear(x, 20));
  b.MarkOutput(b.Linear(x, 16));
  return *std::move(b).Build();
}

class OneRank : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("braid-runtime-test-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

torch::Tensor Torch(const HostTensor& h) {
  return torch::from_blob(const_cast<float*>(h.data.data()), h.shape).clone();
}

// Step `step`'s batch as the runtime draws it: the input "x" and the labels.
std::pair<torch::Tensor, torch::Tensor> Batch(CpuBackend& backend, const graph::Program& p,
                                              int step) {
  RankContext ctx{0, {}, &p, step};
  auto load = [&](const std::string& name) {
    const graph::Tensor& t = p.graph.tensor(*p.graph.FindTensor(name));
    absl::StatusOr<Value> v = backend.Load(t, p.loads.at(name), ctx);
    EXPECT_TRUE(v.ok()) << v.status();
    return Torch(*backend.ToHost(v.value()));
  };
  return {load("x"), load("labels").to(torch::kLong)};
}

TEST_F(OneRank, SgdTrainingMatchesLibTorchAutograd) {
  const graph::Program p = WorldOne(Mlp(), graph::Optimizer::kSgdMomentum);
  CpuBackend backend;
  auto comm = MakeGlooCommunicator(p, 0, (dir_ / "store").string(), "127.0.0.1", 60);
  ASSERT_TRUE(comm.ok()) << comm.status();
  Interpreter it(p, 0, backend, **comm);
  ASSERT_TRUE(it.Init().ok());
  auto init = it.GatherParameters();
  ASSERT_TRUE(init.ok()) << init.status();
  // The reference: the same parameters and batches through ATen autograd.
  std::map<std::string, torch::Tensor> w, buf;
  for (const auto& [name, h] : *init) {
    if (name.ends_with(".momentum")) continue;
    w[name] = Torch(h).requires_grad_(true);
  }
  ASSERT_EQ(w.size(), 4u);
  // The two layers' weights and biases, told apart by shape.
  std::string w1, b1, w2, b2;
  for (const auto& [n, t] : w) {
    const std::vector<int64_t> s = t.sizes().vec();
    if (s == std::vector<int64_t>{20, 12}) w1 = n;
    if (s == std::vector<int64_t>{20}) b1 = n;
    if (s == std::vector<int64_t>{16, 20}) w2 = n;
    if (s == std::vector<int64_t>{16}) b2 = n;
  }
  ASSERT_FALSE(w1.empty() || b1.empty() || w2.empty() || b2.empty());
  constexpr int kSteps = 4;
  std::vector<double> losses;
  for (int s = 0; s < kSteps; ++s) {
    auto [x, labels] = Batch(backend, p, s);
    torch::Tensor h = torch::relu(torch::addmm(w[b1], x, w[w1].t()));
    torch::Tensor y = torch::addmm(w[b2], h, w[w2].t());
    torch::Tensor loss = torch::nn::functional::cross_entropy(y, labels);
    for (auto& [n, t] : w) t.mutable_grad() = torch::Tensor();
    loss.backward();
    torch::NoGradGuard ng;
    for (auto& [n, t] : w) {
      buf[n] = buf.count(n) ? buf[n] * 0.9 + t.grad() : t.grad().clone();
      t.sub_(buf[n] * 0.01);
    }
    absl::StatusOr<StepResult> r = it.Step(s);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_NEAR(r->loss, loss.item<double>(), 1e-5 * std::abs(loss.item<double>()));
    losses.push_back(r->loss);
    EXPECT_GT(r->peak_bytes, 0);
  }
  EXPECT_NE(losses.front(), losses.back());
  auto got = it.GatherParameters();
  ASSERT_TRUE(got.ok());
  for (const auto& [n, t] : w) {
    torch::Tensor g = Torch(got->at(n));
    const double rel = (g - t.detach()).norm().item<double>() / t.detach().norm().item<double>();
    EXPECT_LT(rel, 1e-5) << n;
  }
}

// A pre-LN transformer layer (attention spelled as exporters spell it, GELU
// FFN) with a classifier head over every position.
Graph TransformerLayer() {
  constexpr int64_t kBatch = 4, kSeq = 6, kHidden = 16, kHeads = 2, kDh = kHidden / kHeads;
  GraphBuilder b("layer");
  TensorId x = b.Input("x", {kBatch, kSeq, kHidden});
  TensorId h = b.LayerNorm(x);
  auto heads = [&](TensorId t, std::vector<int64_t> perm) {
    return b.Transpose(b.Reshape(t, {kBatch, kSeq, kHeads, kDh}), std::move(perm));
  };
  TensorId q = heads(b.Linear(h, kHidden), {0, 2, 1, 3});
  TensorId k = heads(b.Linear(h, kHidden), {0, 2, 3, 1});
  TensorId v = heads(b.Linear(h, kHidden), {0, 2, 1, 3});
  TensorId p = b.Softmax(b.Scale(b.MatMul(q, k), 1.0 / std::sqrt(static_cast<double>(kDh))), -1);
  TensorId o = b.Reshape(b.Transpose(b.MatMul(p, v), {0, 2, 1, 3}), {kBatch, kSeq, kHidden});
  x = b.Add(x, b.Linear(o, kHidden));
  x = b.Add(x, b.Linear(b.Gelu(b.Linear(b.LayerNorm(x), 4 * kHidden)), kHidden));
  // 16 classes: WorldOne draws labels in [0, 16).
  b.MarkOutput(b.Linear(b.Reshape(x, {kBatch * kSeq, kHidden}), 16));
  return *std::move(b).Build();
}

// The transformer layer's world-1 training through braid's training graph
// and CPU kernels against the same model written in LibTorch and trained by
// its autograd: same parameters, same batches, Adam.
TEST_F(OneRank, TransformerTrainingMatchesLibTorchAutograd) {
  const Graph forward = TransformerLayer();
  const graph::Program p = WorldOne(forward, graph::Optimizer::kAdam);
  CpuBackend backend;
  auto comm = MakeGlooCommunicator(p, 0, (dir_ / "store").string(), "127.0.0.1", 60);
  ASSERT_TRUE(comm.ok()) << comm.status();
  Interpreter it(p, 0, backend, **comm);
  ASSERT_TRUE(it.Init().ok());
  auto init = it.GatherParameters();
  ASSERT_TRUE(init.ok()) << init.status();
  // The parameters in the order the builder made them.
  std::vector<torch::Tensor> w;
  std::vector<std::string> names;
  for (const graph::Tensor& t : forward.tensors()) {
    if (t.role != graph::TensorRole::kParameter) continue;
    names.push_back(t.name);
    w.push_back(Torch(init->at(t.name)).requires_grad_(true));
  }
  // ln1 (2), q k v (2 each), out proj (2), ln2 (2), ffn (2 + 2), head (2).
  ASSERT_EQ(w.size(), 18u);
  torch::optim::Adam adam(w, torch::optim::AdamOptions(1e-3));
  // braid's Adam: the training graph's defaults (graph/training.h).
  constexpr int64_t kBatch = 4, kSeq = 6, kHidden = 16, kHeads = 2, kDh = kHidden / kHeads;
  auto linear = [&](const torch::Tensor& x, int i) { return torch::matmul(x, w[i]) + w[i + 1]; };
  auto heads = [&](const torch::Tensor& t) { return t.reshape({kBatch, kSeq, kHeads, kDh}); };
  constexpr int kSteps = 4;
  std::vector<double> losses;
  for (int s = 0; s < kSteps; ++s) {
    auto [x, labels] = Batch(backend, p, s);
    torch::Tensor h = torch::layer_norm(x, {kHidden}, w[0], w[1]);
    torch::Tensor q = heads(linear(h, 2)).permute({0, 2, 1, 3});
    torch::Tensor k = heads(linear(h, 4)).permute({0, 2, 3, 1});
    torch::Tensor v = heads(linear(h, 6)).permute({0, 2, 1, 3});
    torch::Tensor a = torch::softmax(torch::matmul(q, k) / std::sqrt(static_cast<double>(kDh)), -1);
    torch::Tensor o = torch::matmul(a, v).permute({0, 2, 1, 3}).reshape({kBatch, kSeq, kHidden});
    x = x + linear(o, 8);
    x = x + linear(torch::gelu(linear(torch::layer_norm(x, {kHidden}, w[10], w[11]), 12)), 14);
    torch::Tensor y = torch::addmm(w[17], x.reshape({kBatch * kSeq, kHidden}), w[16].t());
    torch::Tensor loss = torch::nn::functional::cross_entropy(y, labels);
    adam.zero_grad();
    loss.backward();
    adam.step();
    absl::StatusOr<StepResult> r = it.Step(s);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_NEAR(r->loss, loss.item<double>(), 1e-5 * std::abs(loss.item<double>())) << "step " << s;
    losses.push_back(r->loss);
  }
  EXPECT_NE(losses.front(), losses.back());
  auto got = it.GatherParameters();
  ASSERT_TRUE(got.ok());
  for (size_t i = 0; i < w.size(); ++i) {
    const torch::Tensor want = w[i].detach();
    torch::Tensor g = Torch(got->at(names[i]));
    if (i == 5) {
      // The key bias: softmax is shift-invariant along the keys, so its
      // gradient is zero up to rounding, which Adam's normalisation turns
      // into steps of up to lr each. Both sides may move it by at most that.
      EXPECT_LE((g - want).abs().max().item<double>(), 2 * kSteps * 1e-3) << names[i];
      continue;
    }
    const double rel = (g - want).norm().item<double>() / std::max(want.norm().item<double>(), 1e-6);
    EXPECT_LT(rel, 1e-5) << names[i];
  }
}

// PyTorch's nn.TransformerEncoder as exported (packed q/k/v Slices, batch
// and heads merged in one dim) and as the importer restates it
// (graph/canonicalize.h) train alike: same losses, same parameters, with
// attention dropout on (masks keyed by element index, which the rewrite
// keeps).
TEST_F(OneRank, CanonicalizedExportTrainsLikeTheExportedGraph) {
  graph::OnnxImportOptions o;
  o.isolate = false;
  std::vector<std::string> warnings;
  const std::string path = "tests/data/transformer_encoder_train_opset14.onnx";
  absl::StatusOr<Graph> canonical = graph::ImportOnnxFile(path, o, &warnings);
  o.canonicalize = false;
  absl::StatusOr<Graph> exported = graph::ImportOnnxFile(path, o, &warnings);
  ASSERT_TRUE(canonical.ok()) << canonical.status();
  ASSERT_TRUE(exported.ok()) << exported.status();
  int slices = 0, splits = 0;
  for (const graph::Op& op : exported->ops()) slices += op.type == "Slice";
  for (const graph::Op& op : canonical->ops()) splits += op.type == "Split";
  ASSERT_GT(slices, 0);
  ASSERT_EQ(splits * 3, slices);
  auto train = [&](const Graph& g, const std::string& store, std::vector<double>& losses) {
    const graph::Program p = WorldOne(g, graph::Optimizer::kAdam);
    CpuBackend backend;
    auto comm = MakeGlooCommunicator(p, 0, (dir_ / store).string(), "127.0.0.1", 60);
    EXPECT_TRUE(comm.ok()) << comm.status();
    Interpreter it(p, 0, backend, **comm);
    EXPECT_TRUE(it.Init().ok());
    for (int s = 0; s < 3; ++s) {
      absl::StatusOr<StepResult> r = it.Step(s);
      EXPECT_TRUE(r.ok()) << r.status();
      losses.push_back(r.ok() ? r->loss : 0);
    }
    return *it.GatherParameters();
  };
  std::vector<double> lc, le;
  const auto pc = train(*canonical, "canonical", lc);
  const auto pe = train(*exported, "exported", le);
  for (size_t s = 0; s < lc.size(); ++s) EXPECT_NEAR(lc[s], le[s], 1e-6 * std::abs(le[s])) << "step " << s;
  EXPECT_NE(lc.front(), lc.back());
  ASSERT_EQ(pc.size(), pe.size());
  for (const auto& [name, want] : pe) {
    const torch::Tensor w = Torch(want), got = Torch(pc.at(name));
    EXPECT_LE((got - w).abs().max().item<double>(), 1e-6) << name;
  }
}

TEST_F(OneRank, CheckpointRoundTripsAndResumesExactly) {
  const graph::Program p = WorldOne(Mlp(), graph::Optimizer::kAdam);
  CpuBackend backend;
  auto comm = MakeGlooCommunicator(p, 0, (dir_ / "store").string(), "127.0.0.1", 60);
  ASSERT_TRUE(comm.ok()) << comm.status();
  // Four steps straight...
  Interpreter a(p, 0, backend, **comm);
  ASSERT_TRUE(a.Init().ok());
  for (int s = 0; s < 4; ++s) ASSERT_TRUE(a.Step(s).ok());
  Checkpoint straight{"m", p.program_fingerprint, 4, *a.GatherParameters()};
  // ...and two, a checkpoint, two more from it.
  Interpreter b(p, 0, backend, **comm);
  ASSERT_TRUE(b.Init().ok());
  for (int s = 0; s < 2; ++s) ASSERT_TRUE(b.Step(s).ok());
  const std::string path = (dir_ / "ck.bin").string();
  ASSERT_TRUE(WriteCheckpoint(path, {"m", p.program_fingerprint, 2, *b.GatherParameters()}).ok());
  absl::StatusOr<Checkpoint> back = ReadCheckpoint(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->steps, 2);
  Interpreter c(p, 0, backend, **comm);
  ASSERT_TRUE(c.Init().ok());
  ASSERT_TRUE(c.LoadParameters(back->tensors).ok());
  for (int s = 2; s < 4; ++s) ASSERT_TRUE(c.Step(s).ok());
  Checkpoint resumed{"m", p.program_fingerprint, 4, *c.GatherParameters()};
  CheckpointDiff d = CompareCheckpoints(resumed, straight);
  EXPECT_THAT(d.mismatched, ::testing::IsEmpty());
  EXPECT_EQ(d.max_rel_error, 0) << d.worst;
  // A shape that is not the program's is refused.
  std::map<std::string, HostTensor> wrong = back->tensors;
  wrong.begin()->second.shape.push_back(1);
  EXPECT_FALSE(c.LoadParameters(wrong).ok());
  // A damaged file is refused, not read past its end.
  std::string bytes;
  {
    std::ifstream f(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(f), {});
  }
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() - 5);
  EXPECT_FALSE(ReadCheckpoint(path).ok());
  std::ofstream(path, std::ios::binary | std::ios::trunc) << "BRAIDCK1" << std::string(8, '\xff');
  EXPECT_FALSE(ReadCheckpoint(path).ok());
}

// Runs `op` (inputs held as `in`) on rank `coord` of `p`'s mesh.
std::vector<HostTensor> RunOp(CpuBackend& backend, const graph::Program& p, const graph::Op& op,
                              const std::vector<HostTensor>& in, std::vector<int> coord) {
  RankContext ctx{.rank = 0, .coord = std::move(coord), .program = &p, .step = 3};
  std::vector<Value> vs;
  for (const HostTensor& h : in) vs.push_back(*backend.FromHost(h, graph::DType::kF32));
  absl::StatusOr<std::vector<Value>> out = backend.Run(p.graph, op, vs, ctx);
  EXPECT_TRUE(out.ok()) << out.status();
  std::vector<HostTensor> host;
  if (out.ok())
    for (const Value& v : *out) host.push_back(*backend.ToHost(v));
  return host;
}

// One Dropout op over x [rows, cols]; `mesh` and the attrs say how the rows
// are split.
graph::Program DropoutProgram(std::vector<int> mesh, int64_t rows, int64_t cols,
                              const graph::Attrs& extra) {
  graph::Program p;
  p.model = "dropout";
  p.mesh = std::move(mesh);
  p.seed = 11;
  TensorId x = p.graph.AddTensor("x", {rows, cols}, graph::DType::kF32, graph::TensorRole::kInput);
  TensorId y = p.graph.AddTensor("y", {rows, cols}, graph::DType::kF32, graph::TensorRole::kActivation);
  TensorId m = p.graph.AddTensor("mask", {rows, cols}, graph::DType::kBool, graph::TensorRole::kActivation);
  graph::Attrs a = extra;
  a["ratio"] = 0.25;
  p.graph.AddOp("drop", "Dropout", {x}, {y, m}, a, graph::Phase::kForward);
  return p;
}

TEST(CpuBackendTest, DropoutMasksAreKeyedByTheElementsIndexInTheFullTensor) {
  CpuBackend backend;
  constexpr int64_t kRows = 64, kCols = 96;
  const graph::Program whole = DropoutProgram({}, kRows, kCols, {});
  const HostTensor ones{{kRows, kCols}, std::vector<float>(kRows * kCols, 1.0f)};
  const HostTensor mask = RunOp(backend, whole, whole.graph.op(0), {ones}, {}).at(1);
  // The keep rate is 1 - ratio.
  double kept = 0;
  for (float v : mask.data) kept += v;
  EXPECT_NEAR(kept / static_cast<double>(mask.data.size()), 0.75, 0.02);
  // Rows split over axis 1 of a 2x2 mesh, columns over axis 0: each rank's
  // mask is its piece of the whole mask.
  const graph::Program split = DropoutProgram(
      {2, 2}, kRows / 2, kCols / 2,
      {{"global_shape", std::vector<int64_t>{kRows, kCols}},
       {"piece_axes", std::vector<int64_t>{1, -1, 0, -1}}});
  const HostTensor half{{kRows / 2, kCols / 2}, std::vector<float>(kRows * kCols / 4, 1.0f)};
  for (int c0 = 0; c0 < 2; ++c0) {
    for (int c1 = 0; c1 < 2; ++c1) {
      const std::vector<HostTensor> out = RunOp(backend, split, split.graph.op(0), {half}, {c0, c1});
      ASSERT_EQ(out.size(), 2u);
      const HostTensor want = NarrowHost(mask, {2, 2}, {c0, c1}, {{1}, {0}});
      EXPECT_EQ(out[1].data, want.data) << "rank at (" << c0 << ", " << c1 << ")";
      for (size_t i = 0; i < out[0].data.size(); ++i)
        ASSERT_FLOAT_EQ(out[0].data[i], want.data[i] / 0.75f);
    }
  }
  // Another step draws another mask.
  RankContext other{.rank = 0, .coord = {}, .program = &whole, .step = 4};
  Value in = *backend.FromHost(ones, graph::DType::kF32);
  const HostTensor next = *backend.ToHost((*backend.Run(whole.graph, whole.graph.op(0), {in}, other))[1]);
  EXPECT_NE(next.data, mask.data);
  // A piece that does not tile the stated full shape is refused.
  const graph::Program wrong = DropoutProgram(
      {2}, kRows / 2, kCols, {{"global_shape", std::vector<int64_t>{kRows, kCols + 1}},
                              {"piece_axes", std::vector<int64_t>{0, -1, -1}}});
  RankContext r0{.rank = 0, .coord = {0}, .program = &wrong, .step = 0};
  Value h = *backend.FromHost(HostTensor{{kRows / 2, kCols}, std::vector<float>(kRows * kCols / 2, 1.0f)},
                              graph::DType::kF32);
  absl::StatusOr<std::vector<Value>> bad = backend.Run(wrong.graph, wrong.graph.op(0), {h}, r0);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), ::testing::HasSubstr("global_shape"));
}

TEST(CpuBackendTest, Float64HoldsWhatFloat32Rounds) {
  // (1 + 1e-8) - 1: zero in float32, 1e-8 in float64.
  graph::Program p;
  p.model = "widen";
  TensorId a = p.graph.AddTensor("a", {}, graph::DType::kF32, graph::TensorRole::kConstant);
  TensorId b = p.graph.AddTensor("b", {}, graph::DType::kF32, graph::TensorRole::kConstant);
  TensorId s = p.graph.AddTensor("s", {}, graph::DType::kF32, graph::TensorRole::kActivation);
  TensorId d = p.graph.AddTensor("d", {}, graph::DType::kF32, graph::TensorRole::kActivation);
  p.graph.AddOp("add", "Add", {a, b}, {s}, {}, graph::Phase::kForward);
  p.graph.AddOp("sub", "Sub", {s, a}, {d}, {}, graph::Phase::kForward);
  graph::LoadSpec one{.source = "a", .init = graph::InitKind::kValue};
  one.values = {1.0};
  graph::LoadSpec tiny{.source = "b", .init = graph::InitKind::kValue};
  tiny.values = {1e-8};
  auto run = [&](bool wide) {
    CpuBackend backend({.float64 = wide});
    RankContext ctx{.program = &p};
    Value va = *backend.Load(p.graph.tensor(a), one, ctx);
    Value vb = *backend.Load(p.graph.tensor(b), tiny, ctx);
    Value vs = (*backend.Run(p.graph, p.graph.op(0), {va, vb}, ctx))[0];
    Value vd = (*backend.Run(p.graph, p.graph.op(1), {vs, va}, ctx))[0];
    return backend.ToHost(vd)->data.at(0);
  };
  EXPECT_EQ(run(false), 0.0f);
  EXPECT_FLOAT_EQ(run(true), 1e-8f);
}

TEST(ProgramTest, BadProgramsAreRefusedWithTheirCause) {
  graph::Program p = WorldOne(Mlp(), graph::Optimizer::kSgdMomentum);
  nlohmann::json j = graph::ProgramToJson(p);
  ASSERT_TRUE(graph::ProgramFromJson(j).ok());
  nlohmann::json no_format = j;
  no_format["format"] = "braid-program/0";
  EXPECT_THAT(std::string(graph::ProgramFromJson(no_format).status().message()),
              ::testing::HasSubstr("format"));
  nlohmann::json tampered = j;
  tampered["seed"] = 8;
  EXPECT_THAT(std::string(graph::ProgramFromJson(tampered).status().message()),
              ::testing::HasSubstr("fingerprint"));
  graph::Program q = p;
  q.mesh = {0};
  EXPECT_FALSE(graph::ValidateProgram(q).ok());
  q = p;
  q.loads.erase("x");
  EXPECT_THAT(std::string(graph::ValidateProgram(q).message()), ::testing::HasSubstr("no load spec"));
  q = p;
  q.loads["x"].dim_axes[0] = {0};  // an axis of an empty mesh
  EXPECT_THAT(std::string(graph::ValidateProgram(q).message()), ::testing::HasSubstr("out of range"));
  q = p;
  q.mesh = std::vector<int>(graph::Program::kMaxMeshAxes + 1, 1);
  EXPECT_FALSE(graph::ValidateProgram(q).ok());
  // Segments: one per dim, each dividing its dim into splittable parts.
  q = p;
  q.loads["x"].segments = {5, 1};  // x is [8, 12]
  EXPECT_THAT(std::string(graph::ValidateProgram(q).message()), ::testing::HasSubstr("segments"));
  q.loads["x"].segments = {2};
  EXPECT_THAT(std::string(graph::ValidateProgram(q).message()), ::testing::HasSubstr("one entry per dim"));
  q.loads["x"].segments = {4, 3};
  EXPECT_TRUE(graph::ValidateProgram(q).ok());
  nlohmann::json seg = graph::ProgramToJson(q);
  seg["loads"]["x"]["segments"] = {4};
  seg["program_fingerprint"] = "";
  EXPECT_FALSE(graph::ProgramFromJson(seg).ok());
}

// A bucket starts where its last member comes; a member whose output is
// read there or earlier (here: the other member) would wait for itself.
TEST(ProgramTest, ABucketReadBeforeItStartsIsRefused) {
  graph::Program p;
  p.mesh = {2};
  graph::Graph& g = p.graph;
  const TensorId x = g.AddTensor("x", {4}, graph::DType::kF32, graph::TensorRole::kInput);
  const TensorId y = g.AddTensor("y", {4}, graph::DType::kF32, graph::TensorRole::kActivation);
  const TensorId z = g.AddTensor("z", {4}, graph::DType::kF32, graph::TensorRole::kActivation);
  const graph::Attrs sum = {{"mesh_axes", std::vector<int64_t>{0}}, {"reduce", std::string("sum")}};
  g.AddOp("a1", "AllReduce", {x}, {y}, sum, graph::Phase::kCommunication);
  g.AddOp("a2", "AllReduce", {y}, {z}, sum, graph::Phase::kCommunication);
  g.AddOutput(z);
  p.loads["x"] = {.source = "x", .full_shape = {4}, .dim_axes = {{}}};
  ASSERT_TRUE(graph::ValidateProgram(p).ok()) << graph::ValidateProgram(p);
  p.buckets = {{"a1", "a2"}};
  EXPECT_THAT(std::string(graph::ValidateProgram(p).message()), ::testing::HasSubstr("before bucket 0 starts"));
  p.buckets = {{}};
  EXPECT_THAT(std::string(graph::ValidateProgram(p).message()), ::testing::HasSubstr("empty"));
}

TEST(MeshTest, SegmentedPiecesHoldTheirShareOfEverySegment) {
  // [2, 6] in 3 segments of 2 columns along dim 1, split over a mesh of 2:
  // rank r holds column r of every segment, {2s + r : s = 0, 1, 2}.
  HostTensor full{{2, 6}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}};
  HostTensor r0 = NarrowHost(full, {2}, {0}, {{}, {0}}, {1, 3});
  HostTensor r1 = NarrowHost(full, {2}, {1}, {{}, {0}}, {1, 3});
  EXPECT_EQ(r0.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(r0.data, (std::vector<float>{0, 2, 4, 6, 8, 10}));
  EXPECT_EQ(r1.data, (std::vector<float>{1, 3, 5, 7, 9, 11}));
  // Without segments: contiguous halves.
  EXPECT_EQ(NarrowHost(full, {2}, {1}, {{}, {0}}).data, (std::vector<float>{3, 4, 5, 9, 10, 11}));
}

// The runtime's own generator: the same numbers on every call (and so in
// every process and backend), with their distributions, and bounds.
TEST(ValuesTest, GeneratedValuesAreReproducibleAndDistributedAsStated) {
  graph::LoadSpec spec;
  spec.source = "w";
  spec.full_shape = {400, 250};
  const uint64_t key = SeedOf(7, "w", -1);
  absl::StatusOr<HostTensor> a = FullValue(spec, key), b = FullValue(spec, key);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->data, b->data);
  EXPECT_NE(FullValue(spec, SeedOf(7, "w", 0))->data, a->data);  // another step, another draw
  double mean = 0, var = 0;
  for (float v : a->data) mean += v;
  mean /= a->data.size();
  for (float v : a->data) var += (v - mean) * (v - mean);
  var /= a->data.size();
  EXPECT_NEAR(mean, 0, 0.02);
  EXPECT_NEAR(var, 1, 0.03);
  spec.init = graph::InitKind::kUniform;
  spec.bound = 0.5;
  const HostTensor uniform = *FullValue(spec, key);
  for (float v : uniform.data) {
    ASSERT_GE(v, -0.5f);
    ASSERT_LT(v, 0.5f);
  }
  spec.init = graph::InitKind::kIntegers;
  spec.high = 10;
  std::set<float> seen;
  const HostTensor integers = *FullValue(spec, key);
  for (float v : integers.data) seen.insert(v);
  EXPECT_EQ(seen, (std::set<float>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  spec.init = graph::InitKind::kValue;
  spec.values = {1, 2};
  EXPECT_EQ(FullValue(spec, key).status().code(), absl::StatusCode::kInvalidArgument);
  spec.init = graph::InitKind::kNormal;
  spec.full_shape = {1 << 16, 1 << 16};
  EXPECT_EQ(FullValue(spec, key).status().code(), absl::StatusCode::kInvalidArgument);
  spec.full_shape = {-1};
  EXPECT_EQ(FullValue(spec, key).status().code(), absl::StatusCode::kInvalidArgument);
}

// A rank's Dropout mask is its piece of the full tensor's mask.
TEST(ValuesTest, KeepMaskOfAPieceIsThePieceOfTheFullMask) {
  graph::Program p;
  p.seed = 3;
  p.mesh = {2};
  graph::Op op;
  op.name = "drop";
  op.type = "Dropout";
  op.attrs["global_shape"] = std::vector<int64_t>{6, 8};
  op.attrs["piece_axes"] = std::vector<int64_t>{-1, 0, -1};  // dim 1 split over axis 0
  RankContext whole{0, {}, &p, 4};
  graph::Program one = p;
  one.mesh = {};
  whole.program = &one;
  graph::Op full_op = op;
  full_op.attrs.erase("global_shape");
  full_op.attrs.erase("piece_axes");
  absl::StatusOr<std::vector<uint8_t>> full = KeepMask(full_op, "drop", {6, 8}, 0.25, whole);
  ASSERT_TRUE(full.ok()) << full.status();
  int kept = 0;
  for (uint8_t k : *full) kept += k;
  EXPECT_GT(kept, 24);
  EXPECT_LT(kept, 48);
  RankContext r1{1, {1}, &p, 4};
  absl::StatusOr<std::vector<uint8_t>> piece = KeepMask(op, "drop", {6, 4}, 0.25, r1);
  ASSERT_TRUE(piece.ok()) << piece.status();
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 4; ++j) EXPECT_EQ((*piece)[i * 4 + j], (*full)[i * 8 + 4 + j]) << i << "," << j;
  EXPECT_FALSE(KeepMask(op, "drop", {6, 3}, 0.25, r1).ok());  // not a piece of [6, 8]
}

// A golden file's comparison: the same run passes; a loss or a parameter off
// by more than the tolerance fails and says which; non-finite statistics
// (JSON null) are compared without throwing.
TEST_F(OneRank, GoldenComparisonNamesWhatDiffers) {
  const graph::Program p = WorldOne(Mlp(), graph::Optimizer::kSgdMomentum);
  CpuBackend backend;
  auto comm = MakeGlooCommunicator(p, 0, (dir_ / "store").string(), "127.0.0.1", 60);
  ASSERT_TRUE(comm.ok()) << comm.status();
  Interpreter it(p, 0, backend, **comm);
  ASSERT_TRUE(it.Init().ok());
  std::vector<double> losses;
  std::vector<nlohmann::json> step0;
  StepOptions first;
  first.observe = [&](TensorId t, const Value& v) {
    step0.push_back(TensorStats(p.graph.tensor(t).name, *backend.ToHost(v)));
  };
  for (int s = 0; s < 2; ++s) losses.push_back(it.Step(s, s == 0 ? first : StepOptions{})->loss);
  auto params = it.GatherParameters();
  ASSERT_TRUE(params.ok());
  ASSERT_FALSE(step0.empty());
  nlohmann::json golden = {{"format", "braid-runtime-golden/1"}, {"program", graph::ProgramToJson(p)},
                           {"losses", losses}, {"parameters", nlohmann::json::array()},
                           {"step0_tensors", step0}};
  for (const auto& [name, h] : *params) golden["parameters"].push_back(TensorStats(name, h));
  ASSERT_TRUE(GoldenProgram(golden).ok());
  GoldenReport same = CompareWithGolden(golden, losses, *params, step0, 1e-4);
  EXPECT_TRUE(same.ok) << ::testing::PrintToString(same.failures);
  EXPECT_TRUE(same.first_differing_tensors.empty());

  nlohmann::json off = golden;
  off["losses"][1] = losses[1] * 1.01;
  off["parameters"][0]["l2"] = nullptr;  // a non-finite l2
  off["step0_tensors"][1]["l2"] = step0[1]["l2"].get<double>() * 2;
  GoldenReport r = CompareWithGolden(off, losses, *params, step0, 1e-4);
  EXPECT_FALSE(r.ok);
  ASSERT_EQ(r.failures.size(), 2u);
  EXPECT_THAT(r.failures[0], ::testing::HasSubstr("step 1 loss"));
  EXPECT_THAT(r.failures[1], ::testing::HasSubstr("parameter " + off["parameters"][0]["name"].get<std::string>()));
  ASSERT_EQ(r.first_differing_tensors.size(), 1u);
  EXPECT_THAT(r.first_differing_tensors[0], ::testing::HasSubstr(step0[1]["name"].get<std::string>()));
  EXPECT_FALSE(GoldenProgram(nlohmann::json{{"format", "other"}}).ok());
}

}  // namespace
}  // namespace braid::runtime
