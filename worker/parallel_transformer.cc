#include "worker/parallel_transformer.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <map>
#include <string>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "worker/op_clock.h"

namespace braid::worker::internal {
namespace {

using Kind = LayerParallel::Kind;
constexpr int kParamsPerBlock = 8;  // ln1, q, k, v, o, ln2, w1, w2
enum Param { kLn1 = 0, kQ = 1, kK = 2, kV = 3, kO = 4, kLn2 = 5, kW1 = 6, kW2 = 7 };
constexpr double kNormEps = 1e-5;  // nn.LayerNorm's

// [rows..., features] -> [rows, features], for weight gradients.
at::Tensor Flat(const at::Tensor& t) { return t.reshape({-1, t.size(-1)}); }

}  // namespace

FullLayerWeights ToFull(const at::Tensor& w, const at::Tensor& b) {
  FullLayerWeights f;
  at::Tensor wc = w.contiguous();
  at::Tensor bc = b.contiguous();
  f.out_features = wc.size(0);
  f.in_features = wc.size(1);
  f.weight.assign(wc.data_ptr<float>(), wc.data_ptr<float>() + wc.numel());
  f.bias.assign(bc.data_ptr<float>(), bc.data_ptr<float>() + bc.numel());
  return f;
}

void AverageAndStep(Collectives& data, const std::vector<at::Tensor>& gw,
                    const std::vector<at::Tensor>& gb, double lr, std::vector<at::Tensor>& w,
                    std::vector<at::Tensor>& b) {
  OpClock& clk = RankClock();
  clk.Lap(kCommClock);
  std::vector<at::Tensor> flat;
  for (size_t k = 0; k < w.size(); ++k) {
    flat.push_back(gw[k].reshape(-1));
    flat.push_back(gb[k].reshape(-1));
  }
  at::Tensor buf = at::cat(flat);
  clk.Lap(kUpdateClock);
  data.AllReduceSum(buf);
  clk.Lap(kCommClock);
  buf.div_(static_cast<double>(data.size()));
  int64_t off = 0;
  for (size_t k = 0; k < w.size(); ++k) {
    w[k].sub_(buf.narrow(0, off, w[k].numel()).view_as(w[k]), lr);
    off += w[k].numel();
    b[k].sub_(buf.narrow(0, off, b[k].numel()).view_as(b[k]), lr);
    off += b[k].numel();
  }
  clk.Lap(kUpdateClock);
}

void Accumulate(std::vector<at::Tensor>& acc, const std::vector<at::Tensor>& g) {
  for (size_t k = 0; k < g.size(); ++k) {
    if (!acc[k].defined()) {
      acc[k] = g[k];
    } else {
      acc[k].add_(g[k]);
    }
  }
}

std::vector<FullLayerWeights> GatherFullWeights(Collectives& model, const std::vector<at::Tensor>& w,
                                                const std::vector<at::Tensor>& b,
                                                const std::vector<LayerParallel::Kind>& kinds) {
  std::vector<FullLayerWeights> out;
  for (size_t i = 0; i < w.size(); ++i) {
    at::Tensor wi = w[i], bi = b[i];
    if (kinds[i] == LayerParallel::kColumn) {
      wi = model.AllGather(wi, 0);
      bi = model.AllGather(bi, 0);
    } else if (kinds[i] == LayerParallel::kRow) {
      wi = model.AllGather(wi, 1);
    }
    out.push_back(ToFull(wi, bi));
  }
  return out;
}

namespace {

// LayerNorm over the last dim with gain `gamma` ([d, 1], as FullLayerWeights
// stores it) and bias `beta`; keeps the normalized input and 1/σ for backward.
at::Tensor NormForward(const at::Tensor& x, const at::Tensor& gamma, const at::Tensor& beta,
                       at::Tensor& xhat, at::Tensor& rstd) {
  const at::Tensor centered = x - x.mean(-1, /*keepdim=*/true);
  rstd = (centered.pow(2).mean(-1, /*keepdim=*/true) + kNormEps).rsqrt();
  xhat = centered * rstd;
  return xhat * gamma.view(-1) + beta;
}

// The input gradient of NormForward; sets its parameters' gradients.
at::Tensor NormBackward(const at::Tensor& g, const at::Tensor& gamma, const at::Tensor& xhat,
                        const at::Tensor& rstd, at::Tensor& ggamma, at::Tensor& gbeta) {
  ggamma = Flat(g * xhat).sum(0).view({-1, 1});
  gbeta = Flat(g).sum(0);
  const at::Tensor gxhat = g * gamma.view(-1);
  return rstd * (gxhat - gxhat.mean(-1, /*keepdim=*/true) -
                 xhat * (gxhat * xhat).mean(-1, /*keepdim=*/true));
}

// The activations one block's backward reads; heads are [batch, heads, seq,
// d_head]; a1/a2 are the normalized inputs of attention and of the MLP.
struct BlockCache {
  at::Tensor xhat1, rstd1, a1, q, k, v, p, c, xhat2, rstd2, a2, u, r;
};

// The Megatron kinds of blocks [begin, end)'s parameters.
std::vector<Kind> StageKinds(const ParallelTrainSpec& s, int begin, int end) {
  const std::vector<Kind> all = TransformerLinearKinds(s);
  return {all.begin() + begin * kParamsPerBlock, all.begin() + end * kParamsPerBlock};
}

class TransformerTrainer final : public ShardTrainer {
 public:
  TransformerTrainer(const ParallelTrainSpec& s,
                     std::vector<std::pair<at::Tensor, at::Tensor>> full, Collectives& model,
                     Collectives& data, int block_begin, int block_end)
      : s_(s),
        t_(*s.transformer),
        kinds_(StageKinds(s, block_begin, block_end)),
        model_(model),
        data_(data),
        begin_(block_begin),
        end_(block_end) {
    const int64_t m = model_.rank(), mm = model_.size();
    local_heads_ = t_.heads / mm;
    d_head_ = t_.d_model / t_.heads;
    for (size_t i = 0; i < kinds_.size(); ++i) {
      auto [w, b] = full[begin_ * kParamsPerBlock + i];
      if (kinds_[i] == LayerParallel::kColumn) {
        const int64_t n = w.size(0) / mm;
        w = w.narrow(0, m * n, n);
        b = b.narrow(0, m * n, n);
      } else if (kinds_[i] == LayerParallel::kRow) {
        const int64_t n = w.size(1) / mm;
        w = w.narrow(1, m * n, n);
      }
      w_.push_back(w.contiguous().clone());
      b_.push_back(b.contiguous().clone());
    }
    gw_.resize(w_.size());
    gb_.resize(b_.size());
    for (int blk = begin_; blk < end_; ++blk) names_.push_back(MakeNames(blk - begin_));
  }

  at::Tensor Forward(int micro, const at::Tensor& x) override {
    std::vector<BlockCache>& cache = cache_[micro];
    cache.resize(end_ - begin_);
    at::Tensor a = x.contiguous();
    for (int blk = begin_; blk < end_; ++blk) a = ForwardBlock(blk, a, cache[blk - begin_]);
    return a;
  }

  at::Tensor Backward(int micro, const at::Tensor& grad, bool input_grad) override {
    auto it = cache_.find(micro);
    TORCH_CHECK(it != cache_.end(), "transformer stage: backward of micro-batch ", micro,
                " before its forward");
    std::vector<at::Tensor> gw(w_.size()), gb(b_.size());
    at::Tensor g = grad;
    for (int blk = end_; blk-- > begin_;) {
      g = BackwardBlock(blk, g, it->second[blk - begin_], gw, gb);
    }
    OpClock& clk = RankClock();
    cache_.erase(it);
    clk.Lap(kExecutorClock);
    Accumulate(gw_, gw);
    Accumulate(gb_, gb);
    clk.Lap(kAccumulateClock);
    return input_grad ? g : at::Tensor();
  }

  void Update() override {
    AverageAndStep(data_, gw_, gb_, s_.lr, w_, b_);
    gw_.assign(w_.size(), at::Tensor());
    gb_.assign(b_.size(), at::Tensor());
  }

  std::vector<FullLayerWeights> GatherFull() override {
    return GatherFullWeights(model_, w_, b_, kinds_);
  }

 private:
  // Block `blk`'s (a global block index) parameter `l`.
  const at::Tensor& W(int blk, Param l) const { return w_[(blk - begin_) * kParamsPerBlock + l]; }
  const at::Tensor& B(int blk, Param l) const { return b_[(blk - begin_) * kParamsPerBlock + l]; }

  // The clock names of block `blk`'s ops (op_clock.h; blocks numbered
  // within the stage, as the stage's graph in parallel_spec_graph.cc numbers
  // them), forward and backward.
  struct Names {
    std::map<std::string, std::string> f, b;
    const std::string& F(const std::string& role) const { return f.at(role); }
    const std::string& B(const std::string& role) const { return b.at(role); }
    // The all-reduces: after the row-parallel o and w2, and of the column
    // layers' input gradients (w1; q, k and v together).
    std::string comm_o, comm_w2, comm_w1, comm_qkv;
  };
  static Names MakeNames(int block) {
    Names n;
    for (const char* role :
         {"ln1", "q", "q.bias", "q.reshape", "q.transpose", "k", "k.bias", "k.reshape",
          "k.transpose", "v", "v.bias", "v.reshape", "v.transpose", "qk", "scale", "softmax", "pv",
          "merge.transpose", "merge.reshape", "o", "o.bias", "res1", "ln2", "w1", "w1.bias", "relu",
          "w2", "w2.bias", "res2"}) {
      n.f[role] = BlockClockName(block, role);
      n.b[role] = n.f[role] + kBackwardClock;
    }
    const std::string c = std::string(kCommClock) + ".block" + std::to_string(block);
    n.comm_o = c + ".o";
    n.comm_w2 = c + ".w2";
    n.comm_w1 = c + ".w1.backward";
    n.comm_qkv = c + ".qkv.backward";
    return n;
  }

  at::Tensor ForwardBlock(int blk, const at::Tensor& x, BlockCache& c) {
    OpClock& clk = RankClock();
    const Names& n = names_[blk - begin_];
    c.a1 = NormForward(x, W(blk, kLn1), B(blk, kLn1), c.xhat1, c.rstd1);
    clk.Lap(n.F("ln1"));
    // A Q/K/V projection and its split into heads: [b, s, h*dh] -> [b, h, s, dh].
    auto project = [&](Param l, const std::string& r) {
      at::Tensor z = at::matmul(c.a1, W(blk, l).t());
      clk.Lap(n.F(r));
      z = z + B(blk, l);
      clk.Lap(n.F(r + ".bias"));
      z = z.view({z.size(0), z.size(1), local_heads_, d_head_});
      clk.Lap(n.F(r + ".reshape"));
      z = z.permute({0, 2, 1, 3});
      clk.Lap(n.F(r + ".transpose"));
      return z;
    };
    c.q = project(kQ, "q");
    c.k = project(kK, "k");
    c.v = project(kV, "v");
    const double scale = 1.0 / std::sqrt(static_cast<double>(d_head_));
    at::Tensor s = at::matmul(c.q, c.k.transpose(-2, -1));
    clk.Lap(n.F("qk"));
    s = s * scale;
    clk.Lap(n.F("scale"));
    c.p = at::softmax(s, -1);
    clk.Lap(n.F("softmax"));
    at::Tensor pv = at::matmul(c.p, c.v);
    clk.Lap(n.F("pv"));
    pv = pv.permute({0, 2, 1, 3});
    clk.Lap(n.F("merge.transpose"));
    c.c = pv.reshape({pv.size(0), pv.size(1), local_heads_ * d_head_});
    clk.Lap(n.F("merge.reshape"));
    at::Tensor z = at::matmul(c.c, W(blk, kO).t()).contiguous();
    clk.Lap(n.F("o"));
    model_.AllReduceSum(z);  // g: the row-parallel output projection
    clk.Lap(n.comm_o);
    z = z + B(blk, kO);
    clk.Lap(n.F("o.bias"));
    const at::Tensor h = x + z;
    clk.Lap(n.F("res1"));
    c.a2 = NormForward(h, W(blk, kLn2), B(blk, kLn2), c.xhat2, c.rstd2);
    clk.Lap(n.F("ln2"));
    c.u = at::matmul(c.a2, W(blk, kW1).t());
    clk.Lap(n.F("w1"));
    c.u = c.u + B(blk, kW1);
    clk.Lap(n.F("w1.bias"));
    c.r = at::relu(c.u);
    clk.Lap(n.F("relu"));
    at::Tensor y = at::matmul(c.r, W(blk, kW2).t()).contiguous();
    clk.Lap(n.F("w2"));
    model_.AllReduceSum(y);  // g
    clk.Lap(n.comm_w2);
    y = y + B(blk, kW2);
    clk.Lap(n.F("w2.bias"));
    at::Tensor out = h + y;
    clk.Lap(n.F("res2"));
    return out;
  }

  // Sets the block's weight gradients in gw/gb (indexed as w_); returns the
  // gradient of its input.
  at::Tensor BackwardBlock(int blk, const at::Tensor& gy, const BlockCache& c,
                           std::vector<at::Tensor>& gw, std::vector<at::Tensor>& gb) {
    OpClock& clk = RankClock();
    const Names& n = names_[blk - begin_];
    const int base = (blk - begin_) * kParamsPerBlock;
    // MLP: y = h + W2 relu(W1 LN2(h) + b1) + b2.
    gw[base + kW2] = Flat(gy).t().mm(Flat(c.r));
    clk.Lap(n.B("w2"));
    gb[base + kW2] = Flat(gy).sum(0);
    clk.Lap(n.B("w2.bias"));
    at::Tensor gu = at::matmul(gy, W(blk, kW2));
    clk.Lap(n.B("w2"));
    gu = gu * (c.u > 0);
    clk.Lap(n.B("relu"));
    gw[base + kW1] = Flat(gu).t().mm(Flat(c.a2));
    clk.Lap(n.B("w1"));
    gb[base + kW1] = Flat(gu).sum(0);
    clk.Lap(n.B("w1.bias"));
    at::Tensor ga2 = at::matmul(gu, W(blk, kW1)).contiguous();
    clk.Lap(n.B("w1"));
    model_.AllReduceSum(ga2);  // f backward: the column layer's input gradient
    clk.Lap(n.comm_w1);
    const at::Tensor gn2 = NormBackward(ga2, W(blk, kLn2), c.xhat2, c.rstd2, gw[base + kLn2],
                                        gb[base + kLn2]);
    clk.Lap(n.B("ln2"));
    const at::Tensor gh = gy + gn2;  // h feeds the residual and LN2
    clk.Lap(n.B("res2"));

    // Attention: h = x + Wo concat(P V) + bo, P = softmax(Q Kᵀ · scale), Q
    // (K, V) = Wq LN1(x) + bq.
    gw[base + kO] = Flat(gh).t().mm(Flat(c.c));
    clk.Lap(n.B("o"));
    gb[base + kO] = Flat(gh).sum(0);
    clk.Lap(n.B("o.bias"));
    at::Tensor go = at::matmul(gh, W(blk, kO));
    clk.Lap(n.B("o"));
    go = go.view({go.size(0), go.size(1), local_heads_, d_head_});
    clk.Lap(n.B("merge.reshape"));
    go = go.permute({0, 2, 1, 3});
    clk.Lap(n.B("merge.transpose"));
    const at::Tensor gp = at::matmul(go, c.v.transpose(-2, -1));
    clk.Lap(n.B("pv"));
    // A head gradient [b, h, s, dh] back to [b, s, h*dh] (the split's adjoint).
    auto merge = [&](const at::Tensor& g, const std::string& r) {
      at::Tensor t = g.permute({0, 2, 1, 3});
      clk.Lap(n.B(r + ".transpose"));
      t = t.reshape({t.size(0), t.size(1), local_heads_ * d_head_});
      clk.Lap(n.B(r + ".reshape"));
      return t;
    };
    at::Tensor gv = at::matmul(c.p.transpose(-2, -1), go);
    clk.Lap(n.B("pv"));
    gv = merge(gv, "v");
    const double scale = 1.0 / std::sqrt(static_cast<double>(d_head_));
    at::Tensor gs = c.p * (gp - (gp * c.p).sum(-1, /*keepdim=*/true));
    clk.Lap(n.B("softmax"));
    gs = gs * scale;
    clk.Lap(n.B("scale"));
    at::Tensor gq = at::matmul(gs, c.k);
    clk.Lap(n.B("qk"));
    gq = merge(gq, "q");
    at::Tensor gk = at::matmul(gs.transpose(-2, -1), c.q);
    clk.Lap(n.B("qk"));
    gk = merge(gk, "k");
    at::Tensor ga1 = at::zeros_like(c.a1);
    for (auto [l, g, r] : {std::tuple<Param, const at::Tensor*, const char*>{kQ, &gq, "q"},
                           {kK, &gk, "k"},
                           {kV, &gv, "v"}}) {
      gw[base + l] = Flat(*g).t().mm(Flat(c.a1));
      clk.Lap(n.B(r));
      gb[base + l] = Flat(*g).sum(0);
      clk.Lap(n.B(std::string(r) + ".bias"));
      ga1.add_(at::matmul(*g, W(blk, l)));
      clk.Lap(n.B(r));
    }
    model_.AllReduceSum(ga1);  // f backward, once for Q, K and V together
    clk.Lap(n.comm_qkv);
    const at::Tensor gn1 = NormBackward(ga1, W(blk, kLn1), c.xhat1, c.rstd1, gw[base + kLn1],
                                        gb[base + kLn1]);
    clk.Lap(n.B("ln1"));
    at::Tensor gx = gh + gn1;  // x feeds the residual and LN1
    clk.Lap(n.B("res1"));
    return gx;
  }

  const ParallelTrainSpec& s_;
  const TransformerShape t_;
  const std::vector<Kind> kinds_;
  Collectives& model_;
  Collectives& data_;
  const int begin_, end_;  // this stage's blocks
  int64_t local_heads_ = 0, d_head_ = 0;
  std::vector<at::Tensor> w_, b_;
  std::vector<at::Tensor> gw_, gb_;            // accumulated over the step's micro-batches
  std::map<int, std::vector<BlockCache>> cache_;  // per micro-batch in flight
  std::vector<Names> names_;                      // per block of the stage
};

}  // namespace

absl::Status ValidateTransformerSpec(const ParallelTrainSpec& s) {
  auto bad = [](auto... parts) {
    return absl::InvalidArgumentError(absl::StrCat("parallel train: transformer ", parts...));
  };
  const TransformerShape& t = *s.transformer;
  if (!s.layers.empty() || !s.widths.empty()) {
    return bad("spec must leave widths and layers empty (they describe the MLP)");
  }
  if (t.d_model <= 0 || t.heads <= 0 || t.seq <= 0 || t.d_ff <= 0 || t.blocks <= 0) {
    return bad("d_model, heads, seq, d_ff and blocks must be positive");
  }
  if (t.d_model % t.heads != 0) {
    return bad("d_model ", t.d_model, " does not divide over heads ", t.heads);
  }
  if (t.heads % s.model_degree != 0) {
    return bad("heads ", t.heads, " do not divide over model_degree ", s.model_degree);
  }
  if (t.d_ff % s.model_degree != 0) {
    return bad("d_ff ", t.d_ff, " does not divide over model_degree ", s.model_degree);
  }
  return absl::OkStatus();
}

std::vector<LayerParallel::Kind> TransformerLinearKinds(const ParallelTrainSpec& s) {
  std::vector<Kind> kinds;
  for (int blk = 0; blk < s.transformer->blocks; ++blk) {
    kinds.insert(kinds.end(),
                 {LayerParallel::kData, LayerParallel::kColumn, LayerParallel::kColumn,
                  LayerParallel::kColumn, LayerParallel::kRow, LayerParallel::kData,
                  LayerParallel::kColumn, LayerParallel::kRow});
  }
  return kinds;
}

std::vector<std::pair<at::Tensor, at::Tensor>> InitTransformer(const ParallelTrainSpec& s) {
  const TransformerShape& t = *s.transformer;
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(s.seed);
  std::vector<std::pair<at::Tensor, at::Tensor>> p;
  auto linear = [&](int64_t in, int64_t out) {  // nn.Linear's uniform init
    const double bound = 1.0 / std::sqrt(static_cast<double>(in));
    at::Tensor w = (at::rand({out, in}, gen, at::kFloat) * 2 - 1) * bound;
    at::Tensor b = (at::rand({out}, gen, at::kFloat) * 2 - 1) * bound;
    p.emplace_back(w, b);
  };
  auto norm = [&] {  // nn.LayerNorm's init: gain 1, bias 0
    p.emplace_back(at::ones({t.d_model, 1}, at::kFloat), at::zeros({t.d_model}, at::kFloat));
  };
  for (int blk = 0; blk < t.blocks; ++blk) {
    norm();
    for (int i = 0; i < 4; ++i) linear(t.d_model, t.d_model);  // q, k, v, o
    norm();
    linear(t.d_model, t.d_ff);
    linear(t.d_ff, t.d_model);
  }
  return p;
}

at::Tensor TransformerForward(const ParallelTrainSpec& s, const std::vector<at::Tensor>& w,
                              const std::vector<at::Tensor>& b, const at::Tensor& x) {
  const TransformerShape& t = *s.transformer;
  const int64_t dh = t.d_model / t.heads;
  const int64_t batch = x.size(0), seq = x.size(1);
  auto split = [&](const at::Tensor& a) {
    return a.view({batch, seq, t.heads, dh}).permute({0, 2, 1, 3});
  };
  at::Tensor a = x;
  for (int blk = 0; blk < t.blocks; ++blk) {
    const int i = blk * kParamsPerBlock;
    const at::Tensor a1 =
        at::layer_norm(a, {t.d_model}, w[i + kLn1].view(-1), b[i + kLn1], kNormEps);
    const at::Tensor q = split(at::linear(a1, w[i + kQ], b[i + kQ]));
    const at::Tensor k = split(at::linear(a1, w[i + kK], b[i + kK]));
    const at::Tensor v = split(at::linear(a1, w[i + kV], b[i + kV]));
    const at::Tensor p =
        at::softmax(at::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(dh)), -1);
    const at::Tensor c = at::matmul(p, v).permute({0, 2, 1, 3}).reshape({batch, seq, t.d_model});
    const at::Tensor h = a + at::linear(c, w[i + kO], b[i + kO]);
    const at::Tensor a2 =
        at::layer_norm(h, {t.d_model}, w[i + kLn2].view(-1), b[i + kLn2], kNormEps);
    a = h + at::linear(at::relu(at::linear(a2, w[i + kW1], b[i + kW1])), w[i + kW2], b[i + kW2]);
  }
  return a;
}

std::unique_ptr<ShardTrainer> MakeTransformerTrainer(
    const ParallelTrainSpec& spec, std::vector<std::pair<at::Tensor, at::Tensor>> full,
    Collectives& model, Collectives& data, int block_begin, int block_end) {
  return std::make_unique<TransformerTrainer>(spec, std::move(full), model, data, block_begin,
                                              block_end);
}

}  // namespace braid::worker::internal
