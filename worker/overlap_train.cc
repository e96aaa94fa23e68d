#include "worker/overlap_train.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/bounded_json.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"
#include "worker/collective_matmul_ops.h"
#include "worker/runtime/gloo_group.h"
#include "worker/rank_processes.h"

namespace braid::worker {
namespace {

using Pg = c10d::ProcessGroupGloo;

constexpr double kLnEps = 1e-5;

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

bool IsTransformer(const OverlapTrainSpec& s) { return s.model == OverlapModel::kTransformer; }

// The full initial weights, OverlapParams' order: uniform in +-1/sqrt(in)
// from one CPU generator seeded with spec.seed.
std::vector<at::Tensor> InitParams(const OverlapTrainSpec& s) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(s.seed);
  std::vector<at::Tensor> out;
  for (const OverlapParam& p : OverlapParams(s)) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(p.rows));
    out.push_back((at::rand({p.rows, p.cols}, gen, at::kFloat) * 2 - 1) * bound);
  }
  return out;
}

// Step `step`'s full inputs and targets, [rows, d] each.
std::pair<at::Tensor, at::Tensor> MakeBatch(const OverlapTrainSpec& s, int step) {
  at::Generator gen =
      at::make_generator<at::CPUGeneratorImpl>(s.seed * 1000003ULL + 7919ULL * (step + 1));
  at::Tensor x = at::randn({s.rows, s.d_model}, gen, at::kFloat);
  at::Tensor t = at::randn({s.rows, s.d_model}, gen, at::kFloat);
  return {x, t};
}

// LayerNorm over the last dim without affine parameters; keeps x-hat and
// 1/sigma for the backward.
struct LnOut {
  at::Tensor y, rstd;
};
LnOut LayerNormFwd(const at::Tensor& x) {
  at::Tensor mean = x.mean(-1, true);
  at::Tensor xc = x - mean;
  at::Tensor var = (xc * xc).mean(-1, true);
  at::Tensor rstd = at::rsqrt(var + kLnEps);
  return {xc * rstd, rstd};
}
// dx = rstd * (dy - mean(dy) - y * mean(dy * y)).
at::Tensor LayerNormBwd(const at::Tensor& dy, const LnOut& ln) {
  return ln.rstd * (dy - dy.mean(-1, true) - ln.y * (dy * ln.y).mean(-1, true));
}

// Attention of the heads a rank holds on all rows: q, k, v [rows, dl] ->
// [B, h, S, dh].
at::Tensor Heads(const at::Tensor& t, int64_t seq, int64_t heads_local) {
  const int64_t rows = t.size(0), dl = t.size(1);
  return t.reshape({rows / seq, seq, heads_local, dl / heads_local}).permute({0, 2, 1, 3});
}
at::Tensor Unheads(const at::Tensor& t) {  // [B, h, S, dh] -> [rows, h * dh]
  const int64_t b = t.size(0), h = t.size(1), s = t.size(2), dh = t.size(3);
  return t.permute({0, 2, 1, 3}).reshape({b * s, h * dh});
}

// One rank's model: its weight shards (transformer blocks keep Wqkv_r as one
// [d, 3 d / n] parameter) and the per-pair methods of one variant.
class RankModel {
 public:
  RankModel(const OverlapTrainSpec& s, Pg* pg, int rank, std::vector<DecomposeMethod> methods)
      : s_(s), pg_(pg), rank_(rank), n_(s.ranks), methods_(std::move(methods)) {
    const std::vector<at::Tensor> full = InitParams(s);
    const std::vector<OverlapParam> ps = OverlapParams(s);
    for (size_t i = 0; i < ps.size(); ++i) {
      const int64_t len = (ps[i].shard_dim == 0 ? ps[i].rows : ps[i].cols) / n_;
      shards_.push_back(full[i].narrow(ps[i].shard_dim, rank * len, len).contiguous());
    }
    if (IsTransformer(s)) {  // per block wq, wk, wv, wo, w1, w2 -> wqkv, wo, w1, w2
      std::vector<at::Tensor> w;
      for (int b = 0; b < s.blocks; ++b) {
        const at::Tensor* p = &shards_[6 * b];
        w.push_back(at::cat({p[0], p[1], p[2]}, 1).contiguous());
        w.push_back(p[3]);
        w.push_back(p[4]);
        w.push_back(p[5]);
      }
      shards_ = std::move(w);
    }
  }

  // One training step on this rank's rows x_r, t_r; returns the global loss.
  double Step(const at::Tensor& x, const at::Tensor& t) {
    pair_ = 0;
    pair_s_ = 0;
    caches_.clear();
    at::Tensor a = x;
    for (int b = 0; b < s_.blocks; ++b) a = IsTransformer(s_) ? TfFwd(b, a) : MlpFwd(b, a);
    at::Tensor diff = a - t;
    const double denom = static_cast<double>(s_.rows * s_.d_model);
    std::vector<at::Tensor> sse{(diff * diff).sum().to(at::kDouble).reshape({1})};
    pg_->allreduce(sse)->wait();
    at::Tensor g = diff * (2.0 / denom);
    grads_.assign(shards_.size(), at::Tensor());
    for (int b = s_.blocks - 1; b >= 0; --b) g = IsTransformer(s_) ? TfBwd(b, g) : MlpBwd(b, g);
    for (size_t i = 0; i < shards_.size(); ++i) shards_[i].sub_(grads_[i], s_.lr);
    return sse[0].item<double>() / denom;
  }

  // Seconds the last step spent inside its pairs (collective + GEMM).
  double pair_seconds() const { return pair_s_; }

  // The shards in OverlapParams' order, flattened.
  std::vector<at::Tensor> ParamShards() const {
    if (!IsTransformer(s_)) return shards_;
    std::vector<at::Tensor> out;
    const int64_t dl = s_.d_model / n_;
    for (int b = 0; b < s_.blocks; ++b) {
      const at::Tensor& qkv = shards_[4 * b];
      for (int j = 0; j < 3; ++j) out.push_back(qkv.narrow(1, j * dl, dl).contiguous());
      for (int j = 1; j < 4; ++j) out.push_back(shards_[4 * b + j]);
    }
    return out;
  }

 private:
  DecomposeMethod Next() { return methods_.at(pair_++); }
  at::Tensor Ag(const at::Tensor& x, const at::Tensor& w, at::Tensor* gathered) {
    const auto t0 = std::chrono::steady_clock::now();
    at::Tensor out = cmm::AllGatherMatMul(*pg_, rank_, n_, x, w, Next(), gathered);
    pair_s_ += SecondsSince(t0);
    return out;
  }
  at::Tensor Rs(const at::Tensor& x, const at::Tensor& w) {
    const auto t0 = std::chrono::steady_clock::now();
    at::Tensor out = cmm::MatMulReduceScatter(*pg_, rank_, n_, x, w, Next());
    pair_s_ += SecondsSince(t0);
    return out;
  }

  struct Cache {
    at::Tensor xg, h, z;  // MLP (or the transformer's MLP half)
    LnOut ln1, ln2;
    at::Tensor ln1g, q, k, v, p, o;
  };

  at::Tensor MlpFwd(int b, const at::Tensor& x) {
    Cache c;
    c.h = Ag(x, shards_[2 * b], &c.xg);
    c.z = at::relu(c.h);
    at::Tensor y = Rs(c.z, shards_[2 * b + 1]);
    caches_.push_back(std::move(c));
    return x + y;
  }

  at::Tensor MlpBwd(int b, const at::Tensor& dout) {
    Cache& c = caches_[b];
    const at::Tensor& w1 = shards_[2 * b];
    const at::Tensor& w2 = shards_[2 * b + 1];
    at::Tensor doutg;
    at::Tensor dz = Ag(dout, w2.t(), &doutg);  // [m, f/n]
    grads_[2 * b + 1] = at::mm(c.z.t(), doutg);
    at::Tensor dh = dz * (c.h > 0);
    grads_[2 * b] = at::mm(c.xg.t(), dh);
    return dout + Rs(dh, w1.t());
  }

  at::Tensor TfFwd(int b, const at::Tensor& x) {
    Cache c;
    const at::Tensor* w = &shards_[4 * b];
    const int64_t dl = s_.d_model / n_, hl = s_.heads / n_;
    c.ln1 = LayerNormFwd(x);
    at::Tensor qkv = Ag(c.ln1.y, w[0], &c.ln1g);  // [m, 3 dl]
    c.q = Heads(qkv.narrow(1, 0, dl), s_.seq, hl);
    c.k = Heads(qkv.narrow(1, dl, dl), s_.seq, hl);
    c.v = Heads(qkv.narrow(1, 2 * dl, dl), s_.seq, hl);
    const double scale = 1.0 / std::sqrt(static_cast<double>(s_.d_model / s_.heads));
    c.p = at::softmax(at::matmul(c.q, c.k.transpose(-2, -1)) * scale, -1);
    c.o = Unheads(at::matmul(c.p, c.v)).contiguous();  // [m, dl]
    at::Tensor h = x + Rs(c.o, w[1]);
    c.ln2 = LayerNormFwd(h);
    c.h = Ag(c.ln2.y, w[2], &c.xg);
    c.z = at::relu(c.h);
    at::Tensor out = h + Rs(c.z, w[3]);
    caches_.push_back(std::move(c));
    return out;
  }

  at::Tensor TfBwd(int b, const at::Tensor& dout) {
    Cache& c = caches_[b];
    const at::Tensor* w = &shards_[4 * b];
    at::Tensor* g = &grads_[4 * b];
    // MLP half.
    at::Tensor doutg;
    at::Tensor dz = Ag(dout, w[3].t(), &doutg);
    g[3] = at::mm(c.z.t(), doutg);
    at::Tensor da = dz * (c.h > 0);
    g[2] = at::mm(c.xg.t(), da);
    at::Tensor dh = dout + LayerNormBwd(Rs(da, w[2].t()), c.ln2);
    // Attention half.
    at::Tensor dhg;
    at::Tensor dO = Ag(dh, w[1].t(), &dhg);  // [m, dl]
    g[1] = at::mm(c.o.t(), dhg);
    const int64_t hl = s_.heads / n_;
    const double scale = 1.0 / std::sqrt(static_cast<double>(s_.d_model / s_.heads));
    at::Tensor dO4 = Heads(dO, s_.seq, hl);
    at::Tensor dP = at::matmul(dO4, c.v.transpose(-2, -1));
    at::Tensor dV = at::matmul(c.p.transpose(-2, -1), dO4);
    at::Tensor dS = c.p * (dP - (dP * c.p).sum(-1, true)) * scale;
    at::Tensor dQ = at::matmul(dS, c.k);
    at::Tensor dK = at::matmul(dS.transpose(-2, -1), c.q);
    at::Tensor dqkv = at::cat({Unheads(dQ), Unheads(dK), Unheads(dV)}, 1);  // [m, 3 dl]
    g[0] = at::mm(c.ln1g.t(), dqkv);
    return dh + LayerNormBwd(Rs(dqkv, w[0].t()), c.ln1);
  }

  const OverlapTrainSpec& s_;
  Pg* pg_;
  int rank_, n_;
  std::vector<DecomposeMethod> methods_;
  size_t pair_ = 0;
  double pair_s_ = 0;  // this step's seconds inside the pairs
  std::vector<at::Tensor> shards_, grads_;
  std::vector<Cache> caches_;
};

nlohmann::json SpecToJson(const OverlapTrainSpec& s) {
  nlohmann::json j;
  j["model"] = std::string(OverlapModelName(s.model));
  j["rows"] = s.rows;
  j["d_model"] = s.d_model;
  j["d_ff"] = s.d_ff;
  j["heads"] = s.heads;
  j["seq"] = s.seq;
  j["blocks"] = s.blocks;
  j["ranks"] = s.ranks;
  j["steps"] = s.steps;
  j["rounds"] = s.rounds;
  j["lr"] = s.lr;
  j["seed"] = s.seed;
  j["pin_cores"] = s.pin_cores;
  nlohmann::json vs = nlohmann::json::array();
  for (const auto& v : s.variants) {
    std::vector<std::string> names;
    for (DecomposeMethod m : v) names.push_back(std::string(DecomposeMethodName(m)));
    vs.push_back(names);
  }
  j["variants"] = vs;
  return j;
}

absl::StatusOr<OverlapTrainSpec> SpecFromJson(const nlohmann::json& j) {
  OverlapTrainSpec s;
  try {
    ASSIGN_OR_RETURN(s.model, ParseOverlapModel(j.at("model").get<std::string>()));
    s.rows = j.at("rows").get<int64_t>();
    s.d_model = j.at("d_model").get<int64_t>();
    s.d_ff = j.at("d_ff").get<int64_t>();
    s.heads = j.at("heads").get<int64_t>();
    s.seq = j.at("seq").get<int64_t>();
    s.blocks = j.at("blocks").get<int>();
    s.ranks = j.at("ranks").get<int>();
    s.steps = j.at("steps").get<int>();
    s.rounds = j.at("rounds").get<int>();
    s.lr = j.at("lr").get<double>();
    s.seed = j.at("seed").get<uint64_t>();
    s.pin_cores = j.at("pin_cores").get<bool>();
    s.variants.clear();
    for (const auto& v : j.at("variants")) {
      std::vector<DecomposeMethod> ms;
      for (const auto& name : v) {
        ASSIGN_OR_RETURN(DecomposeMethod m, ParseDecomposeMethod(name.get<std::string>()));
        ms.push_back(m);
      }
      s.variants.push_back(std::move(ms));
    }
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("overlap train spec: ", e.what()));
  }
  return s;
}

absl::StatusOr<std::string> ReadText(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat("overlap train: cannot read ", path));
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// One step of `model` on this rank's rows of step `step`'s batch, timed
// from a barrier (so every rank starts together); returns the loss.
double TimedStep(const OverlapTrainSpec& s, Pg& pg, int rank, int step, RankModel& model,
                 double* seconds) {
  const int64_t rows = s.rows / s.ranks;
  auto [x, t] = MakeBatch(s, step);
  const at::Tensor xr = x.narrow(0, rank * rows, rows).contiguous();
  const at::Tensor tr = t.narrow(0, rank * rows, rows).contiguous();
  pg.barrier()->wait();
  const auto t0 = std::chrono::steady_clock::now();
  const double loss = model.Step(xr, tr);
  *seconds = SecondsSince(t0);
  return loss;
}

std::string WeightsPath(const std::string& out, size_t v) { return absl::StrCat(out, ".v", v, ".bin"); }

}  // namespace

std::string_view OverlapModelName(OverlapModel m) {
  return m == OverlapModel::kMlp ? "mlp" : "transformer";
}

absl::StatusOr<OverlapModel> ParseOverlapModel(std::string_view name) {
  if (name == "mlp") return OverlapModel::kMlp;
  if (name == "transformer") return OverlapModel::kTransformer;
  return absl::InvalidArgumentError(
      absl::StrCat("overlap train: unknown model '", std::string(name), "' (mlp, transformer)"));
}

std::vector<OverlapPair> OverlapPairs(const OverlapTrainSpec& s) {
  using P = CollectivePattern;
  const int64_t m = s.rows, d = s.d_model, f = s.d_ff;
  std::vector<OverlapPair> fwd, bwd;
  for (int b = 0; b < s.blocks; ++b) {
    const std::string p = absl::StrCat("b", b, ".");
    if (IsTransformer(s)) {
      fwd.push_back({p + "qkv.ag", P::kAllGatherMatMul, false, m, d, 3 * d});
      fwd.push_back({p + "o.rs", P::kMatMulReduceScatter, false, m, d, d});
    }
    fwd.push_back({p + "fc1.ag", P::kAllGatherMatMul, false, m, d, f});
    fwd.push_back({p + "fc2.rs", P::kMatMulReduceScatter, false, m, f, d});
  }
  for (int b = s.blocks - 1; b >= 0; --b) {
    const std::string p = absl::StrCat("b", b, ".");
    bwd.push_back({p + "fc2.grad.ag", P::kAllGatherMatMul, true, m, d, f});
    bwd.push_back({p + "fc1.grad.rs", P::kMatMulReduceScatter, true, m, f, d});
    if (IsTransformer(s)) {
      bwd.push_back({p + "o.grad.ag", P::kAllGatherMatMul, true, m, d, d});
      bwd.push_back({p + "qkv.grad.rs", P::kMatMulReduceScatter, true, m, 3 * d, d});
    }
  }
  fwd.insert(fwd.end(), bwd.begin(), bwd.end());
  return fwd;
}

std::vector<OverlapParam> OverlapParams(const OverlapTrainSpec& s) {
  std::vector<OverlapParam> out;
  const int64_t d = s.d_model, f = s.d_ff;
  for (int b = 0; b < s.blocks; ++b) {
    const std::string p = absl::StrCat("b", b, ".");
    if (IsTransformer(s)) {
      out.push_back({p + "wq", d, d, 1});
      out.push_back({p + "wk", d, d, 1});
      out.push_back({p + "wv", d, d, 1});
      out.push_back({p + "wo", d, d, 0});
    }
    out.push_back({p + "w1", d, f, 1});
    out.push_back({p + "w2", f, d, 0});
  }
  return out;
}

std::vector<DecomposeMethod> ExpandMethods(const OverlapTrainSpec& s, size_t variant) {
  const std::vector<DecomposeMethod>& v = s.variants.at(variant);
  const size_t pairs = OverlapPairs(s).size();
  if (v.size() == 1) return std::vector<DecomposeMethod>(pairs, v[0]);
  return v;
}

namespace {

// Upper bounds of a spec's fields: far above what the CPU trainer runs in
// reasonable time, far below what overflows a size or a loop.
struct FieldLimit {
  const char* name;
  int64_t value, max;
};

// About the bytes one rank holds at its peak, from the spec alone: the full
// initial weights (every rank draws them, then keeps its shards), per
// variant its shards and their gradients, one step's activations (what a
// block keeps for its backward pass and the gathered rows) and the batch.
double PeakBytesPerRank(const OverlapTrainSpec& s) {
  const double n = s.ranks, m = s.rows, d = s.d_model, f = s.d_ff, b = s.blocks;
  const bool tf = s.model == OverlapModel::kTransformer;
  const double full = b * ((tf ? 4 * d * d : 0) + 2 * d * f);
  const double per_row = tf ? 7 * d + 3 * d / n + 2 * f / n + 2.0 * s.seq * s.heads / n
                            : 3 * d + 2 * f / n;
  const double floats = full + static_cast<double>(s.variants.size()) * 2 * full / n +
                        b * m * per_row + 2 * m * d;
  return 4 * floats;
}

double PhysicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0;
}

}  // namespace

absl::Status ValidateOverlapTrainSpec(const OverlapTrainSpec& s) {
  auto bad = [](auto... parts) {
    return absl::InvalidArgumentError(absl::StrCat("overlap train: ", parts...));
  };
  if (s.rows < 1 || s.d_model < 1 || s.d_ff < 1 || s.blocks < 1) {
    return bad("rows, d_model, d_ff and blocks must be positive (rows=", s.rows, " d_model=",
               s.d_model, " d_ff=", s.d_ff, " blocks=", s.blocks, ")");
  }
  // Each field first, so a refusal names it before anything is sized by it
  // (a spec may come from a signed plan file: still input).
  for (const FieldLimit& l :
       {FieldLimit{"rows", s.rows, int64_t{1} << 24}, FieldLimit{"d_model", s.d_model, 65536},
        FieldLimit{"d_ff", s.d_ff, 262144}, FieldLimit{"heads", s.heads, 4096},
        FieldLimit{"seq", s.seq, int64_t{1} << 24}, FieldLimit{"blocks", s.blocks, 1024},
        FieldLimit{"ranks", s.ranks, 4096}, FieldLimit{"steps", s.steps, 1000000},
        FieldLimit{"rounds", s.rounds, 1000000},
        FieldLimit{"variants", static_cast<int64_t>(s.variants.size()), 64}}) {
    if (l.value > l.max) return bad(l.name, "=", l.value, " is over the limit ", l.max);
  }
  if (int64_t{s.steps} * s.rounds > 1000000) {
    return bad("steps=", s.steps, " x rounds=", s.rounds, " is over 1000000 steps");
  }
  if (s.ranks < 2) return bad("ranks=", s.ranks, " (tensor parallelism needs >= 2)");
  if (s.steps < 1 || s.rounds < 1) return bad("steps=", s.steps, " rounds=", s.rounds);
  if (!(s.lr > 0) || !std::isfinite(s.lr)) return bad("lr ", s.lr, " is not a positive number");
  if (s.rows % s.ranks != 0) return bad("rows=", s.rows, " is not a multiple of ranks=", s.ranks);
  if (s.d_model % s.ranks != 0 || s.d_ff % s.ranks != 0) {
    return bad("d_model=", s.d_model, " and d_ff=", s.d_ff, " must be multiples of ranks=",
               s.ranks);
  }
  if (IsTransformer(s)) {
    if (s.heads < 1 || s.heads % s.ranks != 0) {
      return bad("heads=", s.heads, " is not a positive multiple of ranks=", s.ranks);
    }
    if (s.d_model % s.heads != 0) return bad("d_model=", s.d_model, " does not divide over heads=", s.heads);
    if (s.seq < 1 || s.rows % s.seq != 0) return bad("rows=", s.rows, " is not a multiple of seq=", s.seq);
  }
  if (s.variants.empty()) return bad("no variants");
  // The ranks' bytes together, bounded by half of this machine's memory: the
  // CPU trainer's ranks share a host (braid-overlap-rank's always do), and a
  // refusal now beats minutes of allocation and swapping.
  const double peak = PeakBytesPerRank(s), machine = PhysicalMemoryBytes();
  if (machine > 0 && peak * s.ranks > machine / 2) {
    return bad("the spec needs about ", static_cast<int64_t>(peak / (1 << 20)),
               " MiB per rank (rows=", s.rows, " d_model=", s.d_model, " d_ff=", s.d_ff,
               " blocks=", s.blocks, " x ", s.variants.size(), " variants), ", s.ranks,
               " ranks together over half of this machine's ",
               static_cast<int64_t>(machine / (1 << 20)), " MiB");
  }
  const std::vector<OverlapPair> pairs = OverlapPairs(s);
  for (size_t v = 0; v < s.variants.size(); ++v) {
    if (s.variants[v].size() != 1 && s.variants[v].size() != pairs.size()) {
      return bad("variant ", v, " lists ", s.variants[v].size(), " methods for ", pairs.size(),
                 " pairs (give one, or one per pair)");
    }
    const std::vector<DecomposeMethod> ms = ExpandMethods(s, v);
    for (size_t i = 0; i < pairs.size(); ++i) {
      const OverlapPair& p = pairs[i];
      absl::Status st = CanDecompose(p.pattern, ms[i], p.m, p.k, p.nout, s.ranks);
      if (!st.ok()) {
        return bad("variant ", v, ", pair '", p.name, "' (m=", p.m, " k=", p.k, " nout=", p.nout,
                   "): ", std::string(st.message()));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status RunOverlapRank(const OverlapRankConfig& config) {
  ASSIGN_OR_RETURN(std::string text, ReadText(config.spec_path));
  absl::StatusOr<nlohmann::json> parsed = base::ParseBoundedJson(text, base::kPlanJsonLimits);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("overlap rank: spec: ", parsed.status().message()));
  }
  nlohmann::json j = *std::move(parsed);
  ASSIGN_OR_RETURN(OverlapTrainSpec s, SpecFromJson(j));
  RETURN_IF_ERROR(ValidateOverlapTrainSpec(s));
  if (s.ranks != config.world || config.rank < 0 || config.rank >= config.world) {
    return absl::InvalidArgumentError(absl::StrCat("overlap rank: rank ", config.rank, " of world ",
                                                   config.world, ", spec ranks ", s.ranks));
  }
  if (s.pin_cores) RETURN_IF_ERROR(PinToCore(config.rank, "overlap"));

  at::set_num_threads(1);
  using SetFn = void (*)(int);
  if (auto f = reinterpret_cast<SetFn>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) f(1);
  std::ofstream out(config.output_path);
  out.precision(17);
  try {
    auto store = c10::make_intrusive<c10d::FileStore>(config.store_path, config.world);
    auto pg = MakeGlooGroup(store, config.rank, config.world, "127.0.0.1");
    std::vector<RankModel> models;
    models.reserve(s.variants.size());
    for (size_t v = 0; v < s.variants.size(); ++v) {
      models.emplace_back(s, pg.get(), config.rank, ExpandMethods(s, v));
    }
    for (int round = 0; round < s.rounds; ++round) {
      for (size_t v = 0; v < models.size(); ++v) {
        for (int i = 0; i < s.steps; ++i) {
          const int step = round * s.steps + i;
          double secs = 0;
          const double loss = TimedStep(s, *pg, config.rank, step, models[v], &secs);
          out << v << ' ' << step << ' ' << secs << ' ' << loss << ' '
              << models[v].pair_seconds() << '\n';
        }
      }
    }
    pg->barrier()->wait();
    for (size_t v = 0; v < models.size(); ++v) {
      const std::string path = WeightsPath(config.output_path, v);
      FILE* f = std::fopen(path.c_str(), "wb");
      if (f == nullptr) return absl::InternalError(absl::StrCat("overlap rank: cannot write ", path));
      bool ok = true;
      for (const at::Tensor& w : models[v].ParamShards()) {
        at::Tensor c = w.contiguous();
        ok = ok && std::fwrite(c.data_ptr<float>(), sizeof(float), c.numel(), f) ==
                       static_cast<size_t>(c.numel());
      }
      if (std::fclose(f) != 0 || !ok) {
        return absl::InternalError(absl::StrCat("overlap rank: write ", path));
      }
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("overlap rank ", config.rank, ": ", e.what()));
  }
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("overlap rank: write ", config.output_path));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<OverlapVariantResult>> TrainOverlapOnGroup(
    const OverlapTrainSpec& spec, Pg& pg, int rank, int warmup, int iterations) {
  RETURN_IF_ERROR(ValidateOverlapTrainSpec(spec));
  if (rank < 0 || rank >= spec.ranks || pg.getSize() != spec.ranks || warmup < 0 ||
      iterations < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "overlap train on group: rank ", rank, " of a group of ", pg.getSize(), ", spec ranks ",
        spec.ranks, ", warmup ", warmup, ", iterations ", iterations));
  }
  std::vector<OverlapVariantResult> out(spec.variants.size());
  try {
    std::vector<RankModel> models;
    models.reserve(spec.variants.size());
    for (size_t v = 0; v < spec.variants.size(); ++v) {
      models.emplace_back(spec, &pg, rank, ExpandMethods(spec, v));
      out[v].methods = ExpandMethods(spec, v);
    }
    for (int step = 0; step < warmup + iterations; ++step) {
      for (size_t v = 0; v < models.size(); ++v) {
        double secs = 0;
        const double loss = TimedStep(spec, pg, rank, step, models[v], &secs);
        if (step < warmup) continue;
        out[v].loss.push_back(loss);
        out[v].step_s.push_back(secs);
        out[v].pair_s.push_back(models[v].pair_seconds());
      }
    }
    // The slowest rank's times, on every rank: one allreduce per variant.
    for (OverlapVariantResult& r : out) {
      std::vector<double> both = r.step_s;
      both.insert(both.end(), r.pair_s.begin(), r.pair_s.end());
      std::vector<at::Tensor> io = {at::tensor(both, at::kDouble)};
      c10d::AllreduceOptions opts;
      opts.reduceOp = c10d::ReduceOp::MAX;
      pg.allreduce(io, opts)->wait();
      const double* m = io[0].data_ptr<double>();
      r.step_s.assign(m, m + iterations);
      r.pair_s.assign(m + iterations, m + 2 * iterations);
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("overlap train on group, rank ", rank, ": ", e.what()));
  }
  return out;
}

absl::StatusOr<OverlapTrainResult> RunOverlapTraining(const OverlapTrainSpec& spec,
                                                      const OverlapTrainOptions& options) {
  RETURN_IF_ERROR(ValidateOverlapTrainSpec(spec));
  ASSIGN_OR_RETURN(std::string binary, FindRankProgram(options.rank_binary, "braid-overlap-rank",
                                                       "BRAID_OVERLAP_RANK", "overlap train"));
  ASSIGN_OR_RETURN(RankDir dir, RankDir::Create("braid-ovl"));
  const std::string spec_path = dir.path() + "/spec.json";
  {
    std::ofstream f(spec_path);
    f << SpecToJson(spec).dump();
    if (!f) return absl::InternalError(absl::StrCat("overlap train: write ", spec_path));
  }
  std::vector<std::vector<std::string>> argv;
  for (int r = 0; r < spec.ranks; ++r) {
    argv.push_back({binary, "--store", dir.path() + "/store", "--spec", spec_path, "--out",
                    absl::StrCat(dir.path(), "/rank", r, ".txt"), "--rank", absl::StrCat(r),
                    "--world", absl::StrCat(spec.ranks)});
  }
  RETURN_IF_ERROR(RunRanks(argv, dir, options.timeout_s, "overlap train"));

  const int total = spec.rounds * spec.steps;
  OverlapTrainResult res;
  for (size_t v = 0; v < spec.variants.size(); ++v) {
    OverlapVariantResult vr;
    vr.methods = ExpandMethods(spec, v);
    vr.loss.assign(total, 0.0);
    vr.step_s.assign(total, 0.0);
    vr.pair_s.assign(total, 0.0);
    res.variants.push_back(std::move(vr));
  }
  for (int r = 0; r < spec.ranks; ++r) {
    const std::string path = absl::StrCat(dir.path(), "/rank", r, ".txt");
    ASSIGN_OR_RETURN(std::string text, ReadText(path));
    std::istringstream in(text);
    size_t v = 0;
    int step = 0, lines = 0;
    double secs = 0, loss = 0, pair_secs = 0;
    while (in >> v >> step >> secs >> loss >> pair_secs) {
      if (v >= res.variants.size() || step < 0 || step >= total) {
        return absl::InternalError(absl::StrCat("overlap train: ", path, ": bad line for variant ",
                                                v, " step ", step));
      }
      OverlapVariantResult& vr = res.variants[v];
      vr.step_s[step] = std::max(vr.step_s[step], secs);
      vr.pair_s[step] = std::max(vr.pair_s[step], pair_secs);
      if (r == 0) vr.loss[step] = loss;
      ++lines;
    }
    if (lines != total * static_cast<int>(spec.variants.size())) {
      return absl::InternalError(absl::StrCat("overlap train: rank ", r, " reported ", lines,
                                              " steps, expected ",
                                              total * spec.variants.size()));
    }
  }
  // The full weights from every rank's shards.
  const std::vector<OverlapParam> params = OverlapParams(spec);
  try {
    for (size_t v = 0; v < spec.variants.size(); ++v) {
      std::vector<at::Tensor> full;
      for (const OverlapParam& p : params) full.push_back(at::empty({p.rows, p.cols}, at::kFloat));
      for (int r = 0; r < spec.ranks; ++r) {
        const std::string path = WeightsPath(absl::StrCat(dir.path(), "/rank", r, ".txt"), v);
        FILE* f = std::fopen(path.c_str(), "rb");
        if (f == nullptr) return absl::InternalError(absl::StrCat("overlap train: cannot read ", path));
        bool ok = true;
        for (size_t i = 0; i < params.size(); ++i) {
          const OverlapParam& p = params[i];
          const int64_t len = (p.shard_dim == 0 ? p.rows : p.cols) / spec.ranks;
          at::Tensor shard = at::empty(p.shard_dim == 0 ? std::vector<int64_t>{len, p.cols}
                                                        : std::vector<int64_t>{p.rows, len},
                                       at::kFloat);
          ok = ok && std::fread(shard.data_ptr<float>(), sizeof(float), shard.numel(), f) ==
                         static_cast<size_t>(shard.numel());
          full[i].narrow(p.shard_dim, r * len, len).copy_(shard);
        }
        std::fclose(f);
        if (!ok) return absl::InternalError(absl::StrCat("overlap train: ", path, " is short"));
      }
      for (const at::Tensor& t : full) {
        res.variants[v].weights.emplace_back(t.data_ptr<float>(), t.data_ptr<float>() + t.numel());
      }
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("overlap train: ", e.what()));
  }
  return res;
}

absl::StatusOr<OverlapVariantResult> RunOverlapReference(const OverlapTrainSpec& spec) {
  RETURN_IF_ERROR(ValidateOverlapTrainSpec(spec));
  OverlapVariantResult r;
  try {
    std::vector<at::Tensor> w = InitParams(spec);
    for (at::Tensor& t : w) t.requires_grad_(true);
    const int64_t d = spec.d_model, heads = spec.heads;
    const double scale = IsTransformer(spec) ? 1.0 / std::sqrt(static_cast<double>(d / heads)) : 1;
    for (int step = 0; step < spec.rounds * spec.steps; ++step) {
      auto [x, t] = MakeBatch(spec, step);
      const auto t0 = std::chrono::steady_clock::now();
      at::Tensor a = x;
      for (int b = 0; b < spec.blocks; ++b) {
        if (!IsTransformer(spec)) {
          a = a + at::mm(at::relu(at::mm(a, w[2 * b])), w[2 * b + 1]);
          continue;
        }
        const at::Tensor* p = &w[6 * b];
        at::Tensor ln1 = at::layer_norm(a, {d}, {}, {}, kLnEps);
        at::Tensor q = Heads(at::mm(ln1, p[0]), spec.seq, heads);
        at::Tensor k = Heads(at::mm(ln1, p[1]), spec.seq, heads);
        at::Tensor v = Heads(at::mm(ln1, p[2]), spec.seq, heads);
        at::Tensor att = at::softmax(at::matmul(q, k.transpose(-2, -1)) * scale, -1);
        at::Tensor h = a + at::mm(Unheads(at::matmul(att, v)), p[3]);
        at::Tensor ln2 = at::layer_norm(h, {d}, {}, {}, kLnEps);
        a = h + at::mm(at::relu(at::mm(ln2, p[4])), p[5]);
      }
      at::Tensor loss = at::mse_loss(a, t);
      loss.backward();
      for (at::Tensor& p : w) p = (p.detach() - spec.lr * p.grad()).requires_grad_(true);
      r.step_s.push_back(SecondsSince(t0));
      r.loss.push_back(loss.item<double>());
    }
    for (const at::Tensor& p : w) {
      at::Tensor c = p.detach().contiguous();
      r.weights.emplace_back(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("overlap reference: ", e.what()));
  }
  return r;
}

}  // namespace braid::worker
