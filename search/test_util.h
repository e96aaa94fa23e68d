// Test fixtures for search/: a fake cost model with fixed times per op type
// and small hand-built training graphs that follow graph/training.h's
// conventions (forward ops, backward ops, one kGradient per parameter, an
// "AllReduce" (group_size) right after each gradient producing
// "<param>.grad.reduced", update ops at the end).
//
//   FakeCostModel cm;
//   cm.type_s["MatMul"] = 4e-3;
//   TinyTraining t = MakeTinyTraining();
#ifndef BRAID_SEARCH_TEST_UTIL_H_
#define BRAID_SEARCH_TEST_UTIL_H_

#include <map>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "costmodel/cost_model.h"
#include "graph/builder.h"
#include "graph/graph.h"

namespace braid::search::testing {

// Single op: type_s[type] (default_s when absent). Fused kernel of k >= 2
// ops: fused_scale * sum of the members' times. AllReduce: T = latency +
// bytes * per_byte (DisCo's linear model T = Cx + D).
class FakeCostModel : public costmodel::CostModel {
 public:
  std::map<std::string, double> type_s;
  double default_s = 1e-3;
  double fused_scale = 0.5;
  double comm_latency_s = 1e-3;
  double comm_s_per_byte = 1e-5;
  double slowdown = 1.0;
  double pack_s_per_byte = 0;  // BucketPackTime; 0: collectives read in place
  int compute_calls = 0;

  costmodel::OpTime ComputeTime(const graph::Graph& g, std::span<const graph::OpId> ops) override {
    ++compute_calls;
    double sum = 0;
    for (graph::OpId o : ops) {
      auto it = type_s.find(g.op(o).type);
      sum += it == type_s.end() ? default_s : it->second;
    }
    return {ops.size() >= 2 ? fused_scale * sum : sum, costmodel::TimeSource::kMeasured};
  }
  double CollectiveTime(costmodel::Collective, int64_t bytes, int) override {
    return comm_latency_s + comm_s_per_byte * static_cast<double>(bytes);
  }
  double ComputeSlowdownDuringComm() const override { return slowdown; }
  double BucketPackTime(int64_t bytes) const override {
    return pack_s_per_byte * static_cast<double>(bytes);
  }
  std::string Generation() const override { return "fake"; }
};

// Adds "<p>.grad.allreduce" (AllReduce) after `grad` and returns the reduced tensor.
inline graph::TensorId AddAllReduce(graph::Graph& g, graph::TensorId param, graph::TensorId grad,
                                    int ranks) {
  const std::string p = g.tensor(param).name;  // a copy: AddTensor reallocates
  graph::TensorId red = g.AddTensor(p + ".grad.reduced", g.tensor(grad).shape,
                                    g.tensor(grad).dtype, graph::TensorRole::kActivation);
  g.AddOp(p + ".grad.allreduce", "AllReduce", {grad}, {red},
          {{"group_size", static_cast<int64_t>(ranks)}}, graph::Phase::kCommunication);
  return red;
}

inline graph::TensorId AddGradient(graph::Graph& g, graph::TensorId param) {
  graph::TensorId t = g.AddTensor(g.tensor(param).name + ".grad", g.tensor(param).shape,
                                  g.tensor(param).dtype, graph::TensorRole::kGradient);
  g.mutable_tensor(t).grad_of = param;
  return t;
}

inline void AddUpdate(graph::Graph& g, graph::TensorId param, graph::TensorId reduced) {
  const std::string p = g.tensor(param).name;  // a copy: AddTensor reallocates
  graph::TensorId m = g.AddTensor(p + ".momentum", g.tensor(param).shape, g.tensor(param).dtype,
                                  graph::TensorRole::kOptimizerState);
  graph::TensorId pn = g.AddTensor(p + ".new", g.tensor(param).shape, g.tensor(param).dtype,
                                   graph::TensorRole::kActivation);
  graph::TensorId mn = g.AddTensor(p + ".momentum.new", g.tensor(param).shape,
                                   g.tensor(param).dtype, graph::TensorRole::kActivation);
  g.AddOp(p + ".update", "SgdMomentumUpdate", {param, reduced, m}, {pn, mn}, {},
          graph::Phase::kUpdate);
}

// y = relu(x @ w + b); backward of relu, bias and weight gradients.
//   mm, add, relu (fwd) -> relu_grad -> b_grad (ReduceSum), w_grad (MatMul)
//   -> b.grad.allreduce, w.grad.allreduce -> b.update, w.update
struct TinyTraining {
  graph::Graph g{"tiny"};
  graph::OpId mm, add, relu, relu_grad, b_grad, w_grad, ar_b, ar_w, upd_b, upd_w;
  graph::TensorId w, b, w_grad_t, b_grad_t;
};

inline TinyTraining MakeTinyTraining(int ranks = 4) {
  using graph::DType;
  using graph::Phase;
  using graph::TensorRole;
  TinyTraining t;
  graph::Graph& g = t.g;
  graph::TensorId x = g.AddTensor("x", {4, 8}, DType::kF32, TensorRole::kInput);
  t.w = g.AddTensor("w", {8, 8}, DType::kF32, TensorRole::kParameter);
  t.b = g.AddTensor("b", {8}, DType::kF32, TensorRole::kParameter);
  graph::TensorId h0 = g.AddTensor("h0", {4, 8}, DType::kF32, TensorRole::kActivation);
  graph::TensorId h = g.AddTensor("h", {4, 8}, DType::kF32, TensorRole::kActivation);
  graph::TensorId y = g.AddTensor("y", {4, 8}, DType::kF32, TensorRole::kActivation);
  t.mm = g.AddOp("mm", "MatMul", {x, t.w}, {h0});
  t.add = g.AddOp("add", "Add", {h0, t.b}, {h});
  t.relu = g.AddOp("relu", "Relu", {h}, {y});
  g.AddOutput(y);
  graph::TensorId dh = g.AddTensor("dh", {4, 8}, DType::kF32, TensorRole::kActivation);
  t.relu_grad = g.AddOp("relu_grad", "ReluGrad", {y, h}, {dh}, {}, Phase::kBackward);
  t.b_grad_t = AddGradient(g, t.b);
  t.b_grad = g.AddOp("b_grad", "ReduceSum", {dh}, {t.b_grad_t}, {}, Phase::kBackward);
  graph::TensorId b_red = AddAllReduce(g, t.b, t.b_grad_t, ranks);
  t.ar_b = g.num_ops() - 1;
  t.w_grad_t = AddGradient(g, t.w);
  t.w_grad = g.AddOp("w_grad", "MatMul", {x, dh}, {t.w_grad_t}, {}, Phase::kBackward);
  graph::TensorId w_red = AddAllReduce(g, t.w, t.w_grad_t, ranks);
  t.ar_w = g.num_ops() - 1;
  AddUpdate(g, t.b, b_red);
  t.upd_b = g.num_ops() - 1;
  AddUpdate(g, t.w, w_red);
  t.upd_w = g.num_ops() - 1;
  return t;
}

// An L-layer MLP training graph (hand-built): per layer fwd MatMul, Add(bias),
// Relu; bwd ReluGrad, ReduceSum (bias grad), MatMul (weight grad), MatMul
// (input grad, except layer 0); AllReduce per gradient; SGD updates last.
inline graph::Graph MakeMlpTraining(int layers, int64_t width, int64_t batch, int ranks = 8) {
  using graph::DType;
  using graph::Phase;
  using graph::TensorId;
  using graph::TensorRole;
  graph::Graph g("mlp");
  TensorId x = g.AddTensor("x", {batch, width}, DType::kF32, TensorRole::kInput);
  std::vector<TensorId> ws, bs, hs, ys = {x};
  for (int l = 0; l < layers; ++l) {
    const std::string p = absl::StrCat("l", l);
    ws.push_back(g.AddTensor(p + ".w", {width, width}, DType::kF32, TensorRole::kParameter));
    bs.push_back(g.AddTensor(p + ".b", {width}, DType::kF32, TensorRole::kParameter));
    TensorId h0 = g.AddTensor(p + ".h0", {batch, width}, DType::kF32, TensorRole::kActivation);
    TensorId h = g.AddTensor(p + ".h", {batch, width}, DType::kF32, TensorRole::kActivation);
    TensorId y = g.AddTensor(p + ".y", {batch, width}, DType::kF32, TensorRole::kActivation);
    g.AddOp(p + ".mm", "MatMul", {ys.back(), ws.back()}, {h0});
    g.AddOp(p + ".add", "Add", {h0, bs.back()}, {h});
    g.AddOp(p + ".relu", "Relu", {h}, {y});
    hs.push_back(h);
    ys.push_back(y);
  }
  g.AddOutput(ys.back());
  TensorId dy = ys.back();  // stands in for the loss gradient
  std::vector<std::pair<TensorId, TensorId>> reduced;  // (param, reduced)
  for (int l = layers - 1; l >= 0; --l) {
    const std::string p = absl::StrCat("l", l);
    TensorId dh = g.AddTensor(p + ".dh", {batch, width}, DType::kF32, TensorRole::kActivation);
    g.AddOp(p + ".relu_grad", "ReluGrad", {dy, hs[l]}, {dh}, {}, Phase::kBackward);
    TensorId gb = AddGradient(g, bs[l]);
    g.AddOp(p + ".b_grad", "ReduceSum", {dh}, {gb}, {}, Phase::kBackward);
    reduced.emplace_back(bs[l], AddAllReduce(g, bs[l], gb, ranks));
    TensorId gw = AddGradient(g, ws[l]);
    g.AddOp(p + ".w_grad", "MatMul", {ys[l], dh}, {gw}, {}, Phase::kBackward);
    reduced.emplace_back(ws[l], AddAllReduce(g, ws[l], gw, ranks));
    if (l > 0) {
      TensorId dx = g.AddTensor(p + ".dx", {batch, width}, DType::kF32, TensorRole::kActivation);
      g.AddOp(p + ".dx", "MatMul", {dh, ws[l]}, {dx}, {}, Phase::kBackward);
      dy = dx;
    }
  }
  for (const auto& [param, red] : reduced) AddUpdate(g, param, red);
  return g;
}

// DLRM-like forward graph: two embedding lookups stacked as rows, a shared
// projection (matmul_concat_rows applies), and two heads on the same
// features whose outputs are concatenated (matmul_concat_weight_cols).
inline graph::Graph DlrmLike() {
  graph::GraphBuilder b("dlrm_like");
  graph::TensorId e0 = b.Embedding(b.Input("idx0", {2048}, graph::DType::kI64), 100000, 128);
  graph::TensorId e1 = b.Embedding(b.Input("idx1", {2048}, graph::DType::kI64), 100000, 128);
  graph::TensorId h = b.Relu(b.MatMul(b.Concat({e0, e1}, 0), b.Param("proj", {128, 512})));
  graph::TensorId y1 = b.MatMul(h, b.Param("head1", {512, 256}));
  graph::TensorId y2 = b.MatMul(h, b.Param("head2", {512, 256}));
  b.MarkOutput(b.MatMul(b.Concat({y1, y2}, 1), b.Param("top", {512, 1})));
  return *std::move(b).Build();
}

}  // namespace braid::search::testing

// Search tests name the graph IR's types unqualified.
namespace braid::search {
using graph::DType;
using graph::Graph;
using graph::OpId;
using graph::TensorId;
using graph::TensorRole;
using testing::FakeCostModel;
using testing::MakeTinyTraining;
using testing::TinyTraining;
}  // namespace braid::search

#endif  // BRAID_SEARCH_TEST_UTIL_H_
