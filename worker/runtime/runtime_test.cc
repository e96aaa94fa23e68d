// The runtime on one rank: mesh arithmetic, program and checkpoint files,
// and a world-1 training run checked against LibTorch autograd (an
// independent reference: ATen's own autodiff of the same model, not braid's
// training graph and kernels).
#include <torch/torch.h>

#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "graph/builder.h"
#include "graph/program.h"
#include "graph/training.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "worker/runtime/checkpoint.h"
#include "worker/runtime/cpu_backend.h"
#include "worker/runtime/interpreter.h"

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
    if (x.role == graph::TensorRole::kParameter) {
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
  auto tensor = [](const HostTensor& h) {
    return torch::from_blob(const_cast<float*>(h.data.data()), h.shape).clone();
  };
  std::map<std::string, torch::Tensor> w, buf;
  for (const auto& [name, h] : *init) {
    if (name.ends_with(".momentum")) continue;
    w[name] = tensor(h).requires_grad_(true);
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
    RankContext ctx{0, {}, &p, s};
    const graph::Tensor& xt = p.graph.tensor(*p.graph.FindTensor("x"));
    const graph::Tensor& lt = p.graph.tensor(*p.graph.FindTensor("labels"));
    auto xv = backend.Load(xt, p.loads.at("x"), ctx);
    auto lv = backend.Load(lt, p.loads.at("labels"), ctx);
    ASSERT_TRUE(xv.ok() && lv.ok());
    torch::Tensor x = tensor(*backend.ToHost(*xv));
    torch::Tensor labels = tensor(*backend.ToHost(*lv)).to(torch::kLong);
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
    torch::Tensor g = tensor(got->at(n));
    const double rel = (g - t.detach()).norm().item<double>() / t.detach().norm().item<double>();
    EXPECT_LT(rel, 1e-5) << n;
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
}

}  // namespace
}  // namespace braid::runtime
