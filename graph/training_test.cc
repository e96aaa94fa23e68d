#include "graph/training.h"

#include <algorithm>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "graph/ops.h"
#include "gtest/gtest.h"

namespace braid::graph {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr DType kF = DType::kF32;

// Terse fixture construction over the Graph API.
class Fixture {
 public:
  explicit Fixture(std::string name) : g(std::move(name)) {}
  TensorId In(const std::string& n, std::vector<int64_t> s, DType d = kF) {
    return g.AddTensor(n, std::move(s), d, TensorRole::kInput);
  }
  TensorId Param(const std::string& n, std::vector<int64_t> s) {
    return g.AddTensor(n, std::move(s), kF, TensorRole::kParameter);
  }
  TensorId Const(const std::string& n, std::vector<int64_t> s) {
    return g.AddTensor(n, std::move(s), kF, TensorRole::kConstant);
  }
  // Adds op `name` with one activation output named `name`.out.
  TensorId Op1(const std::string& name, const std::string& type, std::vector<TensorId> in,
               std::vector<int64_t> out_shape, Attrs attrs = {}) {
    TensorId y = g.AddTensor(name + ".out", std::move(out_shape), kF, TensorRole::kActivation);
    g.AddOp(name, type, std::move(in), {y}, std::move(attrs));
    return y;
  }
  Graph g;
};

std::vector<int64_t> V(std::initializer_list<int64_t> v) { return v; }

const Op* FindOp(const Graph& g, const std::string& name) {
  for (const Op& op : g.ops()) {
    if (op.name == name) return &op;
  }
  return nullptr;
}

std::vector<const Op*> OpsOfType(const Graph& g, const std::string& type, Phase phase) {
  std::vector<const Op*> out;
  for (const Op& op : g.ops()) {
    if (op.type == type && op.phase == phase) out.push_back(&op);
  }
  return out;
}

double BackwardFlopsOf(const Graph& g, const std::string& fwd_op, const std::string& type) {
  double f = 0;
  for (const Op& op : g.ops()) {
    if (op.phase == Phase::kBackward && op.type == type &&
        op.name.rfind(fwd_op + ".grad", 0) == 0) {
      f += op.flops;
    }
  }
  return f;
}

// The training-graph invariants every model must satisfy. Returns the
// parameter names in gradient-production order.
std::vector<std::string> CheckInvariants(const Graph& t, int ranks, Optimizer opt) {
  EXPECT_TRUE(t.Validate().ok()) << t.Validate();
  std::vector<TensorId> params;
  for (TensorId i = 0; i < t.num_tensors(); ++i) {
    if (t.tensor(i).role == TensorRole::kParameter) params.push_back(i);
  }
  // Exactly one gradient per parameter, named and shaped after it.
  for (TensorId p : params) {
    int grads = 0;
    for (const Tensor& ten : t.tensors()) {
      if (ten.role != TensorRole::kGradient || ten.grad_of != p) continue;
      ++grads;
      EXPECT_EQ(ten.name, t.tensor(p).name + ".grad");
      EXPECT_EQ(ten.shape, t.tensor(p).shape);
      EXPECT_EQ(ten.dtype, t.tensor(p).dtype);
    }
    EXPECT_EQ(grads, 1) << t.tensor(p).name;
  }
  // One AllReduce per gradient, right after the op producing it (only other
  // AllReduces in between), in production order.
  std::vector<std::string> order;
  OpId last_producer = -1;
  int allreduces = 0;
  for (OpId i = 0; i < t.num_ops(); ++i) {
    const Op& op = t.op(i);
    if (op.type != "AllReduce") continue;
    ++allreduces;
    EXPECT_EQ(op.phase, Phase::kCommunication);
    EXPECT_EQ(op.GetInt("group_size", -1), ranks);
    EXPECT_EQ(op.inputs.size(), 1u);
    const Tensor& grad = t.tensor(op.inputs[0]);
    EXPECT_EQ(grad.role, TensorRole::kGradient) << op.name;
    const std::string param = t.tensor(grad.grad_of).name;
    EXPECT_EQ(t.tensor(op.outputs[0]).name, param + ".grad.reduced");
    EXPECT_EQ(t.tensor(op.outputs[0]).role, TensorRole::kActivation);
    EXPECT_GE(grad.producer, last_producer);
    for (OpId between = grad.producer + 1; between < i; ++between) {
      EXPECT_EQ(t.op(between).type, "AllReduce")
          << "between " << param << "'s grad and its AllReduce";
    }
    last_producer = grad.producer;
    order.push_back(param);
  }
  EXPECT_EQ(allreduces, static_cast<int>(params.size()));
  // One update per parameter, in gradient order, after everything else.
  const std::string update = opt == Optimizer::kAdam ? "AdamUpdate" : "SgdMomentumUpdate";
  std::vector<std::string> updated;
  for (const Op& op : t.ops()) {
    if (op.phase != Phase::kUpdate) continue;
    EXPECT_EQ(op.type, update);
    const std::string p = t.tensor(op.inputs[0]).name;
    updated.push_back(p);
    EXPECT_EQ(t.tensor(op.inputs[1]).name, p + ".grad.reduced");
    if (opt == Optimizer::kAdam) {
      EXPECT_EQ(op.inputs.size(), 4u);
      if (op.inputs.size() != 4) continue;
      EXPECT_EQ(t.tensor(op.inputs[2]).name, p + ".adam_m");
      EXPECT_EQ(t.tensor(op.inputs[3]).role, TensorRole::kOptimizerState);
      EXPECT_EQ(op.outputs.size(), 3u);
    } else {
      EXPECT_EQ(op.inputs.size(), 3u);
      if (op.inputs.size() != 3) continue;
      EXPECT_EQ(t.tensor(op.inputs[2]).name, p + ".momentum");
      EXPECT_EQ(t.tensor(op.inputs[2]).role, TensorRole::kOptimizerState);
      EXPECT_EQ(op.outputs.size(), 2u);
    }
    EXPECT_EQ(t.tensor(op.outputs[0]).name, p + ".new");
  }
  EXPECT_EQ(updated, order);
  // Every backward op is named after a forward op.
  for (const Op& op : t.ops()) {
    if (op.phase != Phase::kBackward) continue;
    bool named = false;
    for (const Op& fwd : t.ops()) {
      named = named || (fwd.phase == Phase::kForward && op.name.rfind(fwd.name + ".grad", 0) == 0);
    }
    EXPECT_TRUE(named) << op.name;
  }
  return order;
}

// x[8,16] -> MatMul W1[16,32] -> Add b1 -> Relu -> MatMul W2[32,32] -> Relu
//   -> Gemm(W3[10,32], b3, transB) -> logits [8,10]
Graph Mlp() {
  Fixture f("mlp");
  TensorId x = f.In("x", {8, 16});
  TensorId w1 = f.Param("w1", {16, 32});
  TensorId b1 = f.Param("b1", {32});
  TensorId w2 = f.Param("w2", {32, 32});
  TensorId w3 = f.Param("w3", {10, 32});
  TensorId b3 = f.Param("b3", {10});
  TensorId h = f.Op1("fc1", "MatMul", {x, w1}, {8, 32});
  h = f.Op1("fc1_bias", "Add", {h, b1}, {8, 32});
  h = f.Op1("relu1", "Relu", {h}, {8, 32});
  h = f.Op1("fc2", "MatMul", {h, w2}, {8, 32});
  h = f.Op1("relu2", "Relu", {h}, {8, 32});
  TensorId y = f.Op1("fc3", "Gemm", {h, w3, b3}, {8, 10}, {{"transB", int64_t{1}}});
  f.g.AddOutput(y);
  AnnotateCosts(f.g);
  return f.g;
}

// A tensor read by many ops: every contribution to its gradient is summed
// (each accumulation Add feeds the next, and the last feeds the producer's
// backward), at every fan-out size, so the builder's tables grow at many
// different points of the accumulation.
TEST(TrainingTest, ManyReadersGradientsAreAllSummed) {
  for (int case_no = 0; case_no < 240; ++case_no) {
    const int readers = 1 + case_no / 2;
    Fixture f("fanout");
    // An unread constant in every other case shifts where the tables grow
    // by one tensor (each reader adds one).
    if (case_no % 2 == 1) f.Const("unread", V({1}));
    TensorId x = f.In("x", V({8, 4}));
    TensorId w = f.Param("w", V({4, 4}));
    TensorId h = f.Op1("mm", "MatMul", {x, w}, V({8, 4}));
    // Readers joined by one Concat: backward makes about three tensors per
    // reader where forward made one, so the tables grow during backward.
    std::vector<TensorId> parts = {h};
    for (int k = 0; k < readers; ++k) parts.push_back(f.Op1("relu" + std::to_string(k), "Relu", {h}, V({8, 4})));
    f.g.AddOutput(f.Op1("cat", "Concat", parts, V({8 * (readers + 1), 4}), {{"axis", int64_t{0}}}));
    absl::StatusOr<Graph> t = BuildTrainingGraph(f.g, {});
    ASSERT_TRUE(t.ok()) << t.status();
    int accums = 0;
    for (const Op& op : t->ops()) {
      if (op.name.find(".grad.accum") == std::string::npos) continue;
      if (t->tensor(op.outputs[0]).name.rfind("mm.out.grad.sum", 0) != 0) continue;
      ++accums;
      EXPECT_FALSE(t->tensor(op.outputs[0]).consumers.empty())
          << readers << " readers: " << op.name << "'s sum is dropped";
    }
    // h's gradient: the Concat's share plus one per Relu.
    EXPECT_EQ(accums, readers);
  }
}

TEST(TrainingTest, MlpGradientsAllReducesAndUpdates) {
  Graph fwd = Mlp();
  for (Optimizer opt : {Optimizer::kSgdMomentum, Optimizer::kAdam}) {
    TrainingOptions opts;
    opts.ranks = 4;
    opts.optimizer = opt;
    absl::StatusOr<Graph> t = BuildTrainingGraph(fwd, opts);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_THAT(CheckInvariants(*t, 4, opt), ElementsAre("w3", "b3", "w2", "b1", "w1"));
  }
}

TEST(TrainingTest, MlpForwardCopyLossAndBackwardShape) {
  Graph fwd = Mlp();
  absl::StatusOr<Graph> t = BuildTrainingGraph(fwd, {});
  ASSERT_TRUE(t.ok()) << t.status();
  // Forward copied first, unchanged.
  for (OpId i = 0; i < fwd.num_ops(); ++i) {
    EXPECT_EQ(t->op(i).name, fwd.op(i).name);
    EXPECT_EQ(t->op(i).phase, Phase::kForward);
  }
  for (TensorId i = 0; i < fwd.num_tensors(); ++i) EXPECT_EQ(t->tensor(i).name, fwd.tensor(i).name);
  // Cross-entropy loss on the [8,10] logits with i64 labels [8].
  const Op* loss = FindOp(*t, "loss");
  ASSERT_NE(loss, nullptr);
  EXPECT_EQ(loss->type, "SoftmaxCrossEntropyLoss");
  EXPECT_EQ(t->tensor(loss->inputs[1]).dtype, DType::kI64);
  EXPECT_EQ(t->tensor(loss->inputs[1]).shape, V({8}));
  EXPECT_EQ(t->tensor(loss->inputs[1]).role, TensorRole::kInput);
  const Tensor& l = t->tensor(loss->outputs[0]);
  EXPECT_EQ(l.name, "loss");
  EXPECT_TRUE(l.shape.empty());
  EXPECT_EQ(t->outputs()[0], loss->outputs[0]);

  // fc1's data input needs no gradient: one MatMul (dW = x^T dY), 1x forward.
  const double fc1 = 2.0 * 8 * 16 * 32;
  EXPECT_DOUBLE_EQ(FindOp(*t, "fc1")->flops, fc1);
  ASSERT_EQ(BackwardFlopsOf(*t, "fc1", "MatMul"), fc1);
  // fc2 and fc3: two MatMuls, exactly twice the forward matmul FLOPs.
  EXPECT_DOUBLE_EQ(BackwardFlopsOf(*t, "fc2", "MatMul"), 2 * FindOp(*t, "fc2")->flops);
  EXPECT_DOUBLE_EQ(BackwardFlopsOf(*t, "fc3", "MatMul"), 2 * (2.0 * 8 * 32 * 10));
  const Op* dw1 = FindOp(*t, "fc1.grad.in1");
  ASSERT_NE(dw1, nullptr);
  EXPECT_EQ(dw1->GetInt("transA", 0), 1);
  EXPECT_EQ(t->tensor(dw1->outputs[0]).name, "w1.grad");
  // The bias gradient sums the batch axis.
  const Op* db1 = FindOp(*t, "fc1_bias.grad.in1.reduce");
  ASSERT_NE(db1, nullptr);
  EXPECT_EQ(db1->type, "ReduceSum");
  EXPECT_EQ(db1->GetInts("axes"), V({0}));
  // ReluGrad reads the upstream gradient and the forward output.
  const Op* rg = FindOp(*t, "relu1.grad");
  ASSERT_NE(rg, nullptr);
  EXPECT_EQ(rg->type, "ReluGrad");
  EXPECT_EQ(rg->inputs[1], FindOp(*t, "relu1")->outputs[0]);
  EXPECT_DOUBLE_EQ(rg->flops, 2 * 8 * 32);
  // Every op is costed.
  EXPECT_GT(t->TotalFlops(Phase::kBackward), t->TotalFlops(Phase::kForward));
  for (const Op& op : t->ops()) EXPECT_GT(op.bytes_written, 0) << op.name;
}

// x[2,3,8,8] -> conv1(W[4,3,3,3], pad 1) -> BN -> Relu -> conv2(W[4,4,3,3]+b, pad 1)
//   -> MaxPool 2x2 -> Flatten -> Gemm(W[10,64], b, transB) -> [2,10]
Graph Cnn() {
  Fixture f("cnn");
  TensorId x = f.In("x", {2, 3, 8, 8});
  Attrs conv = {{"kernel_shape", V({3, 3})},
                {"pads", V({1, 1, 1, 1})},
                {"strides", V({1, 1})},
                {"group", int64_t{1}}};
  TensorId w1 = f.Param("conv1.weight", {4, 3, 3, 3});
  TensorId h = f.Op1("conv1", "Conv", {x, w1}, {2, 4, 8, 8}, conv);
  TensorId s = f.Param("bn.weight", {4});
  TensorId b = f.Param("bn.bias", {4});
  TensorId m = f.Const("bn.running_mean", {4});
  TensorId v = f.Const("bn.running_var", {4});
  h = f.Op1("bn", "BatchNormalization", {h, s, b, m, v}, {2, 4, 8, 8});
  h = f.Op1("relu", "Relu", {h}, {2, 4, 8, 8});
  TensorId w2 = f.Param("conv2.weight", {4, 4, 3, 3});
  TensorId b2 = f.Param("conv2.bias", {4});
  h = f.Op1("conv2", "Conv", {h, w2, b2}, {2, 4, 8, 8}, conv);
  h = f.Op1("pool", "MaxPool", {h}, {2, 4, 4, 4},
            {{"kernel_shape", V({2, 2})}, {"strides", V({2, 2})}});
  h = f.Op1("flatten", "Flatten", {h}, {2, 64});
  TensorId fw = f.Param("fc.weight", {10, 64});
  TensorId fb = f.Param("fc.bias", {10});
  TensorId y = f.Op1("fc", "Gemm", {h, fw, fb}, {2, 10}, {{"transB", int64_t{1}}});
  f.g.AddOutput(y);
  return f.g;
}

TEST(TrainingTest, CnnConvGradsBatchNormAndPool) {
  for (Optimizer opt : {Optimizer::kSgdMomentum, Optimizer::kAdam}) {
    TrainingOptions opts;
    opts.ranks = 2;
    opts.optimizer = opt;
    absl::StatusOr<Graph> t = BuildTrainingGraph(Cnn(), opts);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_THAT(CheckInvariants(*t, 2, opt),
                ElementsAre("fc.weight", "fc.bias", "conv2.weight", "conv2.bias", "bn.weight",
                            "bn.bias", "conv1.weight"));
    // conv1's input is data: only the filter gradient.
    const double conv1 = 2.0 * 2 * 4 * 8 * 8 * 3 * 3 * 3;  // 27648
    EXPECT_DOUBLE_EQ(FindOp(*t, "conv1")->flops, conv1);
    EXPECT_EQ(FindOp(*t, "conv1.grad.data"), nullptr);
    EXPECT_DOUBLE_EQ(BackwardFlopsOf(*t, "conv1", "ConvGradFilter"), conv1);
    // conv2: data + filter gradients, each equal to the forward conv (no bias).
    const double conv2 = 2.0 * 2 * 4 * 8 * 8 * 4 * 3 * 3;
    EXPECT_DOUBLE_EQ(FindOp(*t, "conv2")->flops, conv2 + 2 * 4 * 8 * 8);
    EXPECT_DOUBLE_EQ(FindOp(*t, "conv2.grad.data")->flops, conv2);
    EXPECT_DOUBLE_EQ(FindOp(*t, "conv2.grad.filter")->flops, conv2);
    EXPECT_EQ(FindOp(*t, "conv2.grad.data")->GetInts("pads"), V({1, 1, 1, 1}));
    const Op* bias = FindOp(*t, "conv2.grad.bias");
    ASSERT_NE(bias, nullptr);
    EXPECT_EQ(bias->GetInts("axes"), V({0, 2, 3}));
    // BatchNormalizationGrad: dX, dScale, dBias; running statistics untouched.
    const Op* bn = FindOp(*t, "bn.grad");
    ASSERT_NE(bn, nullptr);
    EXPECT_EQ(bn->type, "BatchNormalizationGrad");
    EXPECT_EQ(bn->GetInts("grad_inputs"), V({0, 1, 2}));
    EXPECT_EQ(t->tensor(bn->outputs[1]).name, "bn.weight.grad");
    EXPECT_EQ(t->tensor(bn->outputs[2]).name, "bn.bias.grad");
    EXPECT_EQ(FindOp(*t, "pool.grad")->type, "MaxPoolGrad");
    const Op* flat = FindOp(*t, "flatten.grad");
    EXPECT_EQ(flat->type, "Reshape");
    EXPECT_EQ(flat->GetInts("shape"), V({2, 4, 4, 4}));
  }
}

// tokens i64 [5,2] -> Gather(emb[20,3]) -> LSTM(H=4) -> Y_h [1,2,4] -> Reshape [2,4]
//   -> Gemm(W[6,4], b, transB) -> [2,6]
Graph EmbeddingLstm() {
  Fixture f("lstm");
  TensorId tok = f.In("tokens", {5, 2}, DType::kI64);
  TensorId emb = f.Param("emb", {20, 3});
  TensorId x = f.Op1("embed", "Gather", {emb, tok}, {5, 2, 3}, {{"axis", int64_t{0}}});
  TensorId w = f.Param("lstm.W", {1, 16, 3});
  TensorId r = f.Param("lstm.R", {1, 16, 4});
  TensorId b = f.Param("lstm.B", {1, 32});
  TensorId y = f.g.AddTensor("lstm.Y", {5, 1, 2, 4}, kF, TensorRole::kActivation);
  TensorId yh = f.g.AddTensor("lstm.Y_h", {1, 2, 4}, kF, TensorRole::kActivation);
  f.g.AddOp("lstm", "LSTM", {x, w, r, b}, {y, yh}, {{"hidden_size", int64_t{4}}});
  TensorId h = f.Op1("squeeze", "Reshape", {yh}, {2, 4}, {{"shape", V({2, 4})}});
  TensorId fw = f.Param("fc.weight", {6, 4});
  TensorId fb = f.Param("fc.bias", {6});
  TensorId out = f.Op1("fc", "Gemm", {h, fw, fb}, {2, 6}, {{"transB", int64_t{1}}});
  f.g.AddOutput(out);
  return f.g;
}

TEST(TrainingTest, EmbeddingLstm) {
  for (Optimizer opt : {Optimizer::kSgdMomentum, Optimizer::kAdam}) {
    TrainingOptions opts;
    opts.optimizer = opt;
    absl::StatusOr<Graph> t = BuildTrainingGraph(EmbeddingLstm(), opts);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_THAT(CheckInvariants(*t, 1, opt),
                ElementsAre("fc.weight", "fc.bias", "lstm.W", "lstm.R", "lstm.B", "emb"));
    const Op* lg = FindOp(*t, "lstm.grad");
    ASSERT_NE(lg, nullptr);
    EXPECT_EQ(lg->type, "LSTMGrad");
    EXPECT_EQ(lg->GetInts("grad_inputs"), V({0, 1, 2, 3}));
    EXPECT_EQ(lg->GetInts("grad_outputs"), V({1}));  // only Y_h reaches the loss
    // LSTM: 10 rows * (2*(3+4)*16 + 32*4); its gradient twice that.
    EXPECT_DOUBLE_EQ(FindOp(*t, "lstm")->flops, 10 * 352);
    EXPECT_DOUBLE_EQ(lg->flops, 2 * 10 * 352);
    const Op* gg = FindOp(*t, "embed.grad");
    ASSERT_NE(gg, nullptr);
    EXPECT_EQ(gg->type, "GatherGrad");
    EXPECT_EQ(t->tensor(gg->outputs[0]).name, "emb.grad");
    EXPECT_EQ(t->tensor(gg->inputs[1]).name, "tokens");
    EXPECT_DOUBLE_EQ(gg->flops, 5 * 2 * 3);
  }
}

// One attention head pair over x [2,4,8]: q,k,v projections, heads split by
// Reshape+Transpose, softmax(q k^T) v, merged back, output projection.
Graph Attention() {
  Fixture f("attn");
  TensorId x = f.In("x", {2, 4, 8});
  auto heads = [&](const std::string& n, TensorId w, std::vector<int64_t> perm,
                   std::vector<int64_t> shape) {
    TensorId p = f.Op1(n, "MatMul", {x, w}, {2, 4, 8});
    p = f.Op1(n + "_split", "Reshape", {p}, {2, 4, 2, 4}, {{"shape", V({2, 4, 2, 4})}});
    return f.Op1(n + "_heads", "Transpose", {p}, std::move(shape), {{"perm", perm}});
  };
  TensorId q = heads("q", f.Param("wq", {8, 8}), {0, 2, 1, 3}, {2, 2, 4, 4});
  TensorId kt = heads("k", f.Param("wk", {8, 8}), {0, 2, 3, 1}, {2, 2, 4, 4});
  TensorId v = heads("v", f.Param("wv", {8, 8}), {0, 2, 1, 3}, {2, 2, 4, 4});
  TensorId s = f.Op1("scores", "MatMul", {q, kt}, {2, 2, 4, 4});
  TensorId p = f.Op1("softmax", "Softmax", {s}, {2, 2, 4, 4}, {{"axis", int64_t{-1}}});
  TensorId c = f.Op1("context", "MatMul", {p, v}, {2, 2, 4, 4});
  c = f.Op1("merge", "Transpose", {c}, {2, 4, 2, 4}, {{"perm", V({0, 2, 1, 3})}});
  c = f.Op1("merge_reshape", "Reshape", {c}, {2, 4, 8}, {{"shape", V({2, 4, 8})}});
  TensorId out = f.Op1("proj", "MatMul", {c, f.Param("wo", {8, 8})}, {2, 4, 8});
  f.g.AddOutput(out);
  return f.g;
}

TEST(TrainingTest, AttentionBlock) {
  for (Optimizer opt : {Optimizer::kSgdMomentum, Optimizer::kAdam}) {
    TrainingOptions opts;
    opts.ranks = 8;
    opts.optimizer = opt;
    absl::StatusOr<Graph> t = BuildTrainingGraph(Attention(), opts);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_THAT(CheckInvariants(*t, 8, opt), ElementsAre("wo", "wv", "wk", "wq"));
    // A rank-3 output gets token-level cross entropy with labels [batch, seq].
    const Op* loss = FindOp(*t, "loss");
    ASSERT_NE(loss, nullptr);
    EXPECT_EQ(t->tensor(loss->inputs[0]).shape, V({8, 8}));
    ASSERT_TRUE(t->FindTensor("labels").ok());
    EXPECT_EQ(t->tensor(*t->FindTensor("labels")).shape, V({2, 4}));
    // Projections fold [2,4,8] into [8,8] rows: dW is one MatMul of forward FLOPs.
    const double proj = 2.0 * 2 * 4 * 8 * 8;
    EXPECT_DOUBLE_EQ(FindOp(*t, "q")->flops, proj);
    EXPECT_DOUBLE_EQ(BackwardFlopsOf(*t, "q", "MatMul"), proj);
    EXPECT_DOUBLE_EQ(BackwardFlopsOf(*t, "proj", "MatMul"), 2 * proj);
    const double bmm = 2.0 * 2 * 2 * 4 * 4 * 4;
    EXPECT_DOUBLE_EQ(FindOp(*t, "scores")->flops, bmm);
    EXPECT_DOUBLE_EQ(BackwardFlopsOf(*t, "scores", "MatMul"), 2 * bmm);
    EXPECT_DOUBLE_EQ(BackwardFlopsOf(*t, "context", "MatMul"), 2 * bmm);
    // Softmax, transposes and reshapes invert.
    const Op* sg = FindOp(*t, "softmax.grad");
    ASSERT_NE(sg, nullptr);
    EXPECT_EQ(sg->type, "SoftmaxGrad");
    EXPECT_EQ(sg->inputs[1], FindOp(*t, "softmax")->outputs[0]);
    EXPECT_EQ(FindOp(*t, "k_heads.grad")->GetInts("perm"), V({0, 3, 1, 2}));
    EXPECT_EQ(FindOp(*t, "merge.grad")->GetInts("perm"), V({0, 2, 1, 3}));
    EXPECT_EQ(FindOp(*t, "merge_reshape.grad")->type, "Reshape");
  }
}

TEST(TrainingTest, TiedWeightIsSummedThenReducedOnce) {
  Fixture f("tied");
  TensorId x = f.In("x", {4, 6});
  TensorId w = f.Param("w", {6, 6});
  TensorId h = f.Op1("mm1", "MatMul", {x, w}, {4, 6});
  h = f.Op1("tanh", "Tanh", {h}, {4, 6});
  TensorId y = f.Op1("mm2", "MatMul", {h, w}, {4, 6});
  f.g.AddOutput(y);
  absl::StatusOr<Graph> t = BuildTrainingGraph(f.g, {});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT(CheckInvariants(*t, 1, Optimizer::kSgdMomentum), ElementsAre("w"));
  const Tensor& g = t->tensor(*t->FindTensor("w.grad"));
  EXPECT_EQ(t->op(g.producer).type, "Add");
  EXPECT_EQ(t->op(g.producer).name, "mm1.grad.accum");
}

TEST(TrainingTest, MeanSquaredLossForOtherOutputsAndExistingScalarLoss) {
  Fixture f("conv_out");
  TensorId x = f.In("x", {1, 2, 4, 4});
  TensorId w = f.Param("w", {2, 2, 1, 1});
  TensorId y = f.Op1("conv", "Conv", {x, w}, {1, 2, 4, 4}, {{"kernel_shape", V({1, 1})}});
  f.g.AddOutput(y);
  absl::StatusOr<Graph> t = BuildTrainingGraph(f.g, {});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(FindOp(*t, "loss.mean")->type, "ReduceMean");
  EXPECT_EQ(t->tensor(*t->FindTensor("target")).shape, V({1, 2, 4, 4}));
  EXPECT_EQ(t->tensor(t->outputs()[0]).name, "loss");
  CheckInvariants(*t, 1, Optimizer::kSgdMomentum);

  // A graph ending in a scalar gets no extra loss.
  Fixture sc("scalar");
  TensorId sx = sc.In("x", {1, 2, 4, 4});
  TensorId sw = sc.Param("w", {2, 2, 1, 1});
  TensorId sy = sc.Op1("conv", "Conv", {sx, sw}, {1, 2, 4, 4}, {{"kernel_shape", V({1, 1})}});
  TensorId l = sc.g.AddTensor("l", {}, kF, TensorRole::kActivation);
  sc.g.AddOp("mean", "ReduceMean", {sy}, {l}, {{"keepdims", int64_t{0}}});
  sc.g.AddOutput(l);
  const Graph& scalar = sc.g;
  absl::StatusOr<Graph> t2 = BuildTrainingGraph(scalar, {});
  ASSERT_TRUE(t2.ok()) << t2.status();
  EXPECT_FALSE(t2->FindTensor("loss").ok());
  EXPECT_EQ(t2->outputs(), std::vector<TensorId>{l});
  CheckInvariants(*t2, 1, Optimizer::kSgdMomentum);
}

// A chain through most rules: LayerNorm, Dropout with mask, Gelu, Split with an
// unused piece, Slice, Pad, Expand, Div, Pow, Where, Cast, Tile, Concat with a
// data input, Transpose, Unsqueeze, GlobalAveragePool, Flatten, LogSoftmax.
TEST(TrainingTest, BroadOpCoverage) {
  Fixture f("coverage");
  TensorId x = f.In("x", {2, 4, 6});
  TensorId h = f.Op1("mm", "MatMul", {x, f.Param("w", {6, 6})}, {2, 4, 6});
  h = f.Op1("ln", "LayerNormalization", {h, f.Param("ln.weight", {6}), f.Param("ln.bias", {6})},
            {2, 4, 6}, {{"axis", int64_t{-1}}});
  TensorId mask = f.g.AddTensor("drop.mask", {2, 4, 6}, DType::kBool, TensorRole::kActivation);
  TensorId dropped = f.g.AddTensor("drop.out", {2, 4, 6}, kF, TensorRole::kActivation);
  f.g.AddOp("drop", "Dropout", {h}, {dropped, mask});
  h = f.Op1("gelu", "Gelu", {dropped}, {2, 4, 6});
  TensorId unused = f.g.AddTensor("split.a", {2, 4, 2}, kF, TensorRole::kActivation);
  TensorId used = f.g.AddTensor("split.b", {2, 4, 4}, kF, TensorRole::kActivation);
  f.g.AddOp("split", "Split", {h}, {unused, used}, {{"axis", int64_t{2}}, {"split", V({2, 4})}});
  h = f.Op1("slice", "Slice", {used}, {2, 4, 3},
            {{"starts", V({1})}, {"ends", V({4})}, {"axes", V({2})}});
  h = f.Op1("pad", "Pad", {h}, {2, 4, 4}, {{"pads", V({0, 0, 1, 0, 0, 0})}});
  TensorId e = f.Op1("expand", "Expand", {f.Param("scale", {1, 1, 4})}, {2, 4, 4},
                     {{"shape", V({2, 4, 4})}});
  h = f.Op1("div", "Div", {h, e}, {2, 4, 4});
  h = f.Op1("pow", "Pow", {h, f.Const("two", {})}, {2, 4, 4});
  TensorId cond = f.In("cond", {2, 4, 4}, DType::kBool);
  h = f.Op1("where", "Where", {cond, h, f.Const("zero", {})}, {2, 4, 4});
  TensorId half = f.g.AddTensor("half", {2, 4, 4}, DType::kF16, TensorRole::kActivation);
  f.g.AddOp("to_half", "Cast", {h}, {half}, {{"to", int64_t{10}}});
  h = f.Op1("to_float", "Cast", {half}, {2, 4, 4}, {{"to", int64_t{1}}});
  h = f.Op1("tile", "Tile", {h}, {2, 4, 8});
  h = f.Op1("concat", "Concat", {x, h}, {2, 4, 14}, {{"axis", int64_t{-1}}});
  h = f.Op1("transpose", "Transpose", {h}, {2, 14, 4}, {{"perm", V({0, 2, 1})}});
  h = f.Op1("unsqueeze", "Unsqueeze", {h}, {2, 14, 4, 1}, {{"axes", V({3})}});
  h = f.Op1("gap", "GlobalAveragePool", {h}, {2, 14, 1, 1});
  h = f.Op1("flatten", "Flatten", {h}, {2, 14});
  h = f.Op1("logsoftmax", "LogSoftmax", {h}, {2, 14}, {{"axis", int64_t{1}}});
  f.g.AddOutput(h);
  absl::StatusOr<Graph> t = BuildTrainingGraph(f.g, {});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT(CheckInvariants(*t, 1, Optimizer::kSgdMomentum),
              ElementsAre("scale", "ln.weight", "ln.bias", "w"));
  // Concat: x needs no gradient, so only the second piece is sliced out.
  const Op* cs = FindOp(*t, "concat.grad.in1");
  ASSERT_NE(cs, nullptr);
  EXPECT_EQ(cs->type, "Slice");
  EXPECT_EQ(cs->GetInts("starts"), V({6}));
  EXPECT_EQ(cs->GetInts("ends"), V({14}));
  EXPECT_EQ(cs->GetInts("axes"), V({2}));
  EXPECT_EQ(FindOp(*t, "concat.grad.in0"), nullptr);
  // Casts go back to f16 then f32.
  EXPECT_EQ(FindOp(*t, "to_float.grad")->GetInt("to", 0), 10);
  EXPECT_EQ(FindOp(*t, "to_half.grad")->GetInt("to", 0), 1);
  // Slice <-> Pad with the exact pads and bounds.
  EXPECT_EQ(FindOp(*t, "pad.grad")->type, "Slice");
  EXPECT_EQ(FindOp(*t, "pad.grad")->GetInts("starts"), V({0, 0, 1}));
  EXPECT_EQ(FindOp(*t, "slice.grad")->type, "Pad");
  EXPECT_EQ(FindOp(*t, "slice.grad")->GetInts("pads"), V({0, 0, 1, 0, 0, 0}));
  // The unused split piece is zero-filled before the Concat.
  EXPECT_EQ(FindOp(*t, "split.grad.zeros")->type, "ConstantOfShape");
  EXPECT_EQ(FindOp(*t, "split.grad")->type, "Concat");
  // Expand of [1,1,4] to [2,4,4]: sum over the first two axes, keepdims.
  const Op* red = FindOp(*t, "expand.grad.reduce");
  ASSERT_NE(red, nullptr);
  EXPECT_EQ(red->GetInts("axes"), V({0, 1}));
  EXPECT_EQ(red->GetInt("keepdims", -1), 1);
  // Div's divisor gradient, Dropout with its mask, LayerNorm's three outputs.
  EXPECT_EQ(FindOp(*t, "div.grad.in1")->type, "DivGrad");
  EXPECT_EQ(FindOp(*t, "drop.grad")->inputs[1], mask);
  EXPECT_EQ(FindOp(*t, "ln.grad")->GetInts("grad_inputs"), V({0, 1, 2}));
  EXPECT_EQ(FindOp(*t, "where.grad.in1")->type, "WhereGrad");
  EXPECT_EQ(FindOp(*t, "pow.grad.in0")->type, "PowGrad");
  EXPECT_EQ(FindOp(*t, "tile.grad")->type, "TileGrad");
  EXPECT_EQ(FindOp(*t, "gap.grad")->type, "GlobalAveragePoolGrad");
  EXPECT_EQ(FindOp(*t, "logsoftmax.grad")->type, "LogSoftmaxGrad");
  for (const Op& op : t->ops()) {
    EXPECT_TRUE(IsKnownOpType(op.type)) << op.name << " " << op.type;
  }
}

TEST(TrainingTest, EinsumGradientsAndRefusal) {
  Fixture f("einsum");
  TensorId x = f.In("x", {2, 3, 4});
  TensorId y = f.Op1("ein", "Einsum", {x, f.Param("w", {4, 5})}, {2, 3, 5},
                     {{"equation", std::string("bij,jk->bik")}});
  f.g.AddOutput(y);
  absl::StatusOr<Graph> t = BuildTrainingGraph(f.g, {});
  ASSERT_TRUE(t.ok()) << t.status();
  const Op* dw = FindOp(*t, "ein.grad.in1");
  ASSERT_NE(dw, nullptr);
  EXPECT_EQ(dw->GetString("equation", ""), "bik,bij->jk");
  EXPECT_DOUBLE_EQ(dw->flops, FindOp(*t, "ein")->flops);

  Fixture tr("trace");
  TensorId w = tr.Param("w", {3, 3});
  TensorId d = tr.Op1("diag", "Einsum", {w}, {3}, {{"equation", std::string("ii->i")}});
  tr.g.AddOutput(d);
  absl::StatusOr<Graph> t2 = BuildTrainingGraph(tr.g, {});
  ASSERT_FALSE(t2.ok());
  EXPECT_THAT(std::string(t2.status().message()), HasSubstr("Einsum 'diag'"));
}

TEST(TrainingTest, OpWithoutBackwardRuleIsNamed) {
  Fixture f("bad");
  TensorId x = f.In("x", {4, 6});
  TensorId w = f.Param("w", {6, 6});
  TensorId h = f.Op1("mm", "MatMul", {x, w}, {4, 6});
  h = f.Op1("mystery", "FrobnicateOp", {h}, {4, 6});
  f.g.AddOutput(h);
  absl::StatusOr<Graph> t = BuildTrainingGraph(f.g, {});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("'mystery'"));
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("FrobnicateOp"));

  // A known op type without a rule (DepthToSpace) is refused the same way.
  Fixture d("d2s");
  TensorId dx = d.In("x", {1, 4, 2, 2});
  TensorId dw = d.Param("w", {4, 4, 1, 1});
  TensorId dh = d.Op1("conv", "Conv", {dx, dw}, {1, 4, 2, 2});
  dh = d.Op1("d2s", "DepthToSpace", {dh}, {1, 1, 4, 4}, {{"blocksize", int64_t{2}}});
  d.g.AddOutput(dh);
  absl::StatusOr<Graph> t2 = BuildTrainingGraph(d.g, {});
  ASSERT_FALSE(t2.ok());
  EXPECT_THAT(std::string(t2.status().message()), HasSubstr("'d2s' (type DepthToSpace)"));
}

TEST(TrainingTest, OpaqueOpsOffTheParameterPathAndUnusedParametersAreAllowed) {
  Fixture f("opaque_ok");
  TensorId x = f.In("x", {4, 6});
  TensorId pre = f.Op1("preprocess", "FrobnicateOp", {x}, {4, 6});
  f.g.mutable_op(0).opaque = true;
  TensorId w = f.Param("w", {6, 3});
  TensorId unused = f.Param("unused.weight", {6, 6});
  TensorId y = f.Op1("mm", "MatMul", {pre, w}, {4, 3});
  f.Op1("dead", "MatMul", {x, unused}, {4, 6});  // reaches no output
  f.g.AddOutput(y);
  absl::StatusOr<Graph> t = BuildTrainingGraph(f.g, {});
  ASSERT_TRUE(t.ok()) << t.status();
  // The dead branch does not reach the loss: its weight is not trained.
  EXPECT_EQ(t->tensor(unused).role, TensorRole::kConstant);
  EXPECT_THAT(CheckInvariants(*t, 1, Optimizer::kSgdMomentum), ElementsAre("w"));
  EXPECT_TRUE(t->FindTensor("preprocess.grad").status().code() == absl::StatusCode::kNotFound);
}

TEST(TrainingTest, EveryOutputGetsALossAndTheLossesAreSummed) {
  Fixture f("two_heads");
  TensorId x = f.In("x", {4, 6});
  TensorId w = f.Param("w", {6, 3});
  TensorId aux_w = f.Param("aux.weight", {6, 5});
  TensorId y = f.Op1("mm", "MatMul", {x, w}, {4, 3});
  TensorId aux = f.Op1("aux", "MatMul", {x, aux_w}, {4, 5});
  f.g.AddOutput(y);
  f.g.AddOutput(aux);
  absl::StatusOr<Graph> t = BuildTrainingGraph(f.g, {});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->tensor(aux_w).role, TensorRole::kParameter);
  EXPECT_THAT(CheckInvariants(*t, 1, Optimizer::kSgdMomentum), ElementsAre("aux.weight", "w"));
  auto loss = t->FindTensor("loss");
  ASSERT_TRUE(loss.ok());
  EXPECT_EQ(t->op(t->tensor(*loss).producer).type, "Add");
  EXPECT_EQ(t->outputs()[0], *loss);
  EXPECT_TRUE(t->FindTensor("loss.0").ok());
  EXPECT_TRUE(t->FindTensor("loss.1").ok());
}

TEST(TrainingTest, RejectsInvalidForwardGraphAndRanks) {
  Graph g("broken");
  TensorId a = g.AddTensor("a", {2}, kF, TensorRole::kActivation);  // no producer
  g.AddOutput(a);
  absl::StatusOr<Graph> t = BuildTrainingGraph(g, {});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("'a'"));
  TrainingOptions opts;
  opts.ranks = 0;
  EXPECT_EQ(BuildTrainingGraph(Mlp(), opts).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace braid::graph
