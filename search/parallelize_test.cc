#include "search/parallelize.h"

#include <algorithm>
#include <atomic>
#include <array>
#include <map>
#include <set>
#include <cstdio>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"

#include "costmodel/cluster.h"
#include "costmodel/comm_model.h"
#include "costmodel/machine_view.h"
#include "costmodel/op_cost.h"
#include "graph/builder.h"
#include "graph/zoo.h"
#include "search/parallel_strategies.h"

namespace braid::search {
namespace {

using costmodel::Collective;
using graph::DType;
using graph::Graph;
using graph::GraphBuilder;
using graph::OpId;
using graph::TensorId;

costmodel::ClusterSpec TwoDgxNodes() {
  return *costmodel::WithRanks(*costmodel::LoadCluster("dgx-h100"), 16);
}

// --- view-aware collective costs -----------------------------------------

TEST(ViewCollectiveTimeTest, DataGroupAcrossNodesPaysTheNic) {
  const costmodel::ClusterSpec c = TwoDgxNodes();
  const int64_t bytes = 64 << 20;
  // [2, 8] / [8, 1]: data groups {r, r+8} cross the nodes; the 8 ranks of a
  // node share its 8 NICs: 50 GB/s each.
  const double nic = c.network.nics_per_node * c.network.nic_bandwidth / 8;
  const double want = 2.0 * (1.0 / 2.0) * bytes / nic + 2 * c.network.latency_s;
  auto t = ViewCollectiveTime(c, 2, 8, /*part=*/0, Collective::kAllReduce, bytes, 2);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_NEAR(*t, want, want * 1e-9);
  // CommModel's "first 2 ranks" group would be NVLink: ~9x cheaper.
  costmodel::CommModel comm(c);
  EXPECT_GT(*t, 5 * comm.Time(Collective::kAllReduce, bytes, 2));
  // The model group of 8 stays in a node: NVLink.
  const double want8 = 2.0 * 7 / 8 * bytes / c.intra.bandwidth + 2 * 7 * c.intra.latency_s;
  auto t8 = ViewCollectiveTime(c, 2, 8, /*part=*/1, Collective::kAllReduce, bytes, 8);
  ASSERT_TRUE(t8.ok()) << t8.status();
  EXPECT_NEAR(*t8, want8, want8 * 1e-9);
}

TEST(ViewCollectiveTimeTest, SixteenRanksAreHierarchical) {
  const costmodel::ClusterSpec c = TwoDgxNodes();
  const int64_t bytes = 64 << 20;
  const double nic = c.network.nics_per_node * c.network.nic_bandwidth / 8;
  // ReduceScatter + AllGather over the 8 NVLink ranks, AllReduce of 1/8 over
  // the 2 nodes.
  const double intra = 2 * (7.0 / 8 * bytes / c.intra.bandwidth + 7 * c.intra.latency_s);
  const double inter = 2.0 * 0.5 * (bytes / 8.0) / nic + 2 * c.network.latency_s;
  auto t = ViewCollectiveTime(c, 16, 1, /*part=*/0, Collective::kAllReduce, bytes, 16);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_NEAR(*t, intra + inter, (intra + inter) * 1e-6);
}

TEST(ConfigViewTest, ModelInsideDataAcross) {
  EXPECT_EQ(costmodel::MachineViewString(ConfigView(2, 8)), "0:[2,8]/[8,1]");
  EXPECT_EQ(costmodel::MachineViewString(ConfigView(16, 1)), "0:[16]/[1]");
  EXPECT_EQ(costmodel::MachineViewString(ConfigView(1, 16)), "0:[16]/[1]");
}

// --- Megatron on transformer layers ------------------------------------

struct LayerOps {
  OpId q, k, v, scores, ctx, proj, fc1, fc2;
};

struct Gpt {
  Graph g;
  std::vector<LayerOps> layers;
};

// x @ W[in, out] (+ b): returns the MatMul's output through `mm`.
TensorId Dense(GraphBuilder& b, TensorId x, int64_t out, const std::string& name, TensorId* mm) {
  const int64_t in = b.Shape(x).back();
  *mm = b.MatMul(x, b.Param(absl::StrCat(name, ".weight"), {in, out}));
  return b.Add(*mm, b.Param(absl::StrCat(name, ".bias"), {out}));
}

// Pre-LN GPT layers, f16, spelled as exporters emit attention (Reshape,
// Transpose, batched MatMul over [B, heads, S, S], Softmax, Gelu MLP).
Gpt BuildGpt(int layers, int64_t batch, int64_t seq, int64_t hidden, int64_t heads,
             DType dtype = DType::kF16) {
  GraphBuilder b("gpt", dtype);
  const int64_t dh = hidden / heads;
  TensorId x = b.Input("x", {batch, seq, hidden}, dtype);
  std::vector<std::array<TensorId, 8>> mms;
  for (int l = 0; l < layers; ++l) {
    auto s = b.NameScope(absl::StrCat("layer", l));
    std::array<TensorId, 8> m{};
    TensorId h = b.LayerNorm(x);
    TensorId q = Dense(b, h, hidden, absl::StrCat("l", l, ".q"), &m[0]);
    TensorId k = Dense(b, h, hidden, absl::StrCat("l", l, ".k"), &m[1]);
    TensorId v = Dense(b, h, hidden, absl::StrCat("l", l, ".v"), &m[2]);
    q = b.Transpose(b.Reshape(q, {batch, seq, heads, dh}), {0, 2, 1, 3});
    k = b.Transpose(b.Reshape(k, {batch, seq, heads, dh}), {0, 2, 3, 1});
    v = b.Transpose(b.Reshape(v, {batch, seq, heads, dh}), {0, 2, 1, 3});
    m[3] = b.MatMul(q, k);
    TensorId p = b.Softmax(b.Scale(m[3], 1.0 / std::sqrt(static_cast<double>(dh))), -1);
    m[4] = b.MatMul(p, v);
    TensorId o = b.Reshape(b.Transpose(m[4], {0, 2, 1, 3}), {batch, seq, hidden});
    x = b.Add(x, Dense(b, o, hidden, absl::StrCat("l", l, ".proj"), &m[5]));
    h = b.LayerNorm(x);
    h = b.Gelu(Dense(b, h, 4 * hidden, absl::StrCat("l", l, ".fc1"), &m[6]));
    x = b.Add(x, Dense(b, h, hidden, absl::StrCat("l", l, ".fc2"), &m[7]));
    mms.push_back(m);
  }
  b.MarkOutput(x);
  Gpt out;
  absl::StatusOr<Graph> g = std::move(b).Build();
  CHECK(g.ok()) << g.status();
  out.g = *std::move(g);
  for (const auto& m : mms) {
    auto p = [&](TensorId t) { return out.g.tensor(t).producer; };
    out.layers.push_back({p(m[0]), p(m[1]), p(m[2]), p(m[3]), p(m[4]), p(m[5]), p(m[6]), p(m[7])});
  }
  return out;
}

void Print(const Graph& g, const ParallelizeResult& r, const char* title) {
  std::printf("== %s: %.3f ms\n", title, r.time_s * 1e3);
  for (const OpParallelization& o : r.ops) {
    std::printf("  %-28s %-22s %-12s D=%-2d M=%-2d %-16s compute %.3f ms sync %.3f ms\n",
                o.name.c_str(), ParallelConfigString(o.config).c_str(),
                ConfigKindName(g, o.op, o.config).c_str(), o.data_degree, o.model_degree,
                costmodel::MachineViewString(o.view).c_str(), o.compute_s * 1e3,
                o.grad_sync_s * 1e3);
  }
}

const OpParallelization& Chosen(const ParallelizeResult& r, OpId op) {
  for (const OpParallelization& o : r.ops)
    if (o.op == op) return o;
  ADD_FAILURE() << "op " << op << " not in the result";
  static OpParallelization none;
  return none;
}

// GPT-3 6.7B-like layers on two DGX H100 nodes: hidden 4096, 32 heads of
// 128, 16 sequences of 1024 (T = 16384 tokens per iteration). The DP runs
// unrestricted, and once per data degree D (the same D on every op) so that
// the alternatives can be compared.
struct MegatronRun {
  costmodel::ClusterSpec cluster = TwoDgxNodes();
  Gpt gpt = BuildGpt(/*layers=*/2, /*batch=*/16, /*seq=*/1024, /*hidden=*/4096, /*heads=*/32);
  absl::StatusOr<ParallelizeResult> best;
  std::map<int, absl::StatusOr<ParallelizeResult>> by_data_degree;  // D -> result
};

const MegatronRun& Megatron() {
  static const MegatronRun* run = [] {
    auto* r = new MegatronRun;
    costmodel::ClusterCostModel cm(r->cluster, nullptr, nullptr, costmodel::CommModel(r->cluster));
    r->best = ParallelizeForward(r->gpt.g, r->cluster, cm);
    if (r->best.ok()) Print(r->gpt.g, *r->best, "unrestricted");
    for (int d : {1, 2, 4, 8, 16}) {
      ParallelizeOptions o;
      o.filter = [d](const Graph&, OpId, const ParallelConfig& cfg) {
        return !cfg.output_degrees.empty() && cfg.output_degrees[0] == d;
      };
      auto rd = ParallelizeForward(r->gpt.g, r->cluster, cm, o);
      if (rd.ok()) {
        std::printf("best with data degree %2d on every op: %.3f ms\n", d, rd->time_s * 1e3);
        if (d == 2) Print(r->gpt.g, *rd, "data degree 2 (one replica per node)");
      }
      r->by_data_degree.emplace(d, std::move(rd));
    }
    return r;
  }();
  return *run;
}

// Megatron's per-op configurations at data degree D, model degree 16/D.
// `proj_row`: the attention output projection too is row-parallel (else it
// is checked separately).
void ExpectMegatronConfigs(const Gpt& m, const ParallelizeResult& r, int d,
                           bool proj_row = true) {
  const int md = 16 / d;
  for (const OpParallelization& o : r.ops) {
    EXPECT_EQ(o.data_degree, d) << o.name;
    EXPECT_EQ(o.model_degree, md) << o.name;
    EXPECT_EQ(o.view, ConfigView(d, md)) << o.name;
  }
  for (const LayerOps& l : m.layers) {
    // QKV and the first MLP MatMul: column-parallel (weight columns split).
    for (OpId col : {l.q, l.k, l.v, l.fc1}) {
      const OpParallelization& o = Chosen(r, col);
      EXPECT_EQ(o.config.output_degrees, (std::vector<int>{d, 1, md})) << o.name;
      EXPECT_EQ(o.config.reduction_degree, 1) << o.name;
    }
    // Output projection and the second MLP MatMul: row-parallel.
    for (OpId row : {l.proj, l.fc2}) {
      if (row == l.proj && !proj_row) continue;
      const OpParallelization& o = Chosen(r, row);
      EXPECT_EQ(o.config.output_degrees, (std::vector<int>{d, 1, 1})) << o.name;
      EXPECT_EQ(o.config.reduction_degree, md) << o.name;
    }
    // Attention's batched MatMuls over [B, heads, S, S]: head-parallel.
    for (OpId head : {l.scores, l.ctx}) {
      const OpParallelization& o = Chosen(r, head);
      EXPECT_EQ(o.config.output_degrees, (std::vector<int>{d, md, 1, 1})) << o.name;
      EXPECT_EQ(o.config.reduction_degree, 1) << o.name;
    }
  }
}

// Unity Figure 10 / Megatron-LM: with one data-parallel replica per node
// (D = 2, the only thing fixed), the DP picks column-parallel QKV and first
// MLP MatMuls, head-parallel attention and a row-parallel second MLP MatMul
// over the node's 8 GPUs, and that strategy beats pure data parallelism over
// 16 and pure model parallelism over 16.
//
// The attention output projection differs from Megatron, as Unity (§8.2)
// reports for "some matrix multiplications": its input arrives head-split
// (= H/8), and an AllToAll to a sequence split (1/8 of the tensor per rank)
// plus a replicated weight (gradient AllReduce over 16) costs less than the
// ReduceScatter of the full-size partial sums a row split produces. The
// row-parallel projection is checked to cost a little more.
TEST(ParallelizeTest, FindsMegatronWithOneReplicaPerNode) {
  const MegatronRun& run = Megatron();
  const auto& r2 = run.by_data_degree.at(2);
  ASSERT_TRUE(r2.ok()) << r2.status();
  ExpectMegatronConfigs(run.gpt, *r2, 2, /*proj_row=*/false);
  for (const LayerOps& l : run.gpt.layers) {
    const OpParallelization& o = Chosen(*r2, l.proj);
    EXPECT_EQ(o.config.output_degrees, (std::vector<int>{2, 8, 1})) << o.name;  // sequence
    EXPECT_EQ(o.config.reduction_degree, 1) << o.name;
  }
  // Megatron's row-parallel projection, everything else free.
  std::vector<OpId> projs;
  for (const LayerOps& l : run.gpt.layers) projs.push_back(l.proj);
  ParallelizeOptions o;
  o.filter = [&projs](const Graph&, OpId op, const ParallelConfig& cfg) {
    if (cfg.output_degrees.empty() || cfg.output_degrees[0] != 2) return false;
    if (std::find(projs.begin(), projs.end(), op) != projs.end())
      return cfg.reduction_degree == 8;
    return true;
  };
  costmodel::ClusterCostModel cm(run.cluster, nullptr, nullptr, costmodel::CommModel(run.cluster));
  absl::StatusOr<ParallelizeResult> megatron = ParallelizeForward(run.gpt.g, run.cluster, cm, o);
  ASSERT_TRUE(megatron.ok()) << megatron.status();
  std::printf("Megatron exactly (row-parallel projection): %.3f ms\n", megatron->time_s * 1e3);
  ExpectMegatronConfigs(run.gpt, *megatron, 2);
  EXPECT_GT(megatron->time_s, r2->time_s);
  EXPECT_LT(megatron->time_s, r2->time_s * 1.05);
  EXPECT_EQ(costmodel::MachineViewString(ConfigView(2, 8)), "0:[2,8]/[8,1]");
  const auto& pure_data = run.by_data_degree.at(16);
  const auto& pure_model = run.by_data_degree.at(1);
  ASSERT_TRUE(pure_data.ok() && pure_model.ok());
  EXPECT_LT(r2->time_s, pure_data->time_s);
  EXPECT_LT(r2->time_s, pure_model->time_s);
}

// Unrestricted, the same cost model prefers D = 4 x M = 4 here: the
// cross-node gradient traffic of a hybrid is the same for every D > 1 (each
// node exchanges a whole replica's gradients), so moving from M = 8 to M = 4
// trades intra-node activation collectives (3TH vs 7TH bytes-ish per layer)
// for an intra-node gradient stage (6H^2): M = 4 wins for T > 1.5H. Megatron
// picks M = 8 for memory; these 2 small layers fit at any degree, so the
// memory check keeps D = 4 (MemoryPicksMegatron below is the case where it
// does not). The structure is still Megatron's, model part inside a node,
// data across nodes.
TEST(ParallelizeTest, UnrestrictedPicksMegatronStructureAtFourByFour) {
  const MegatronRun& run = Megatron();
  ASSERT_TRUE(run.best.ok()) << run.best.status();
  for (const auto& [d, rd] : run.by_data_degree) {
    ASSERT_TRUE(rd.ok()) << rd.status();
    EXPECT_LE(run.best->time_s, rd->time_s * (1 + 1e-9)) << "D=" << d;
  }
  // At M = 4 the row-parallel projection's ReduceScatter is small enough.
  ExpectMegatronConfigs(run.gpt, *run.best, 4, /*proj_row=*/true);
  EXPECT_LT(run.best->time_s, run.by_data_degree.at(2)->time_s);
  // The memory check's per-data-degree runs are the filtered runs above, and
  // every one of them fits (SGD momentum, 2 layers of hidden 4096).
  ASSERT_EQ(run.best->candidates.size(), 5u);
  for (const DataDegreeCandidate& c : run.best->candidates) {
    ASSERT_TRUE(c.has_plan) << c.data_degree;
    EXPECT_TRUE(c.status.ok()) << c.status;
    EXPECT_NEAR(c.time_s, run.by_data_degree.at(c.data_degree)->time_s, 1e-12);
    EXPECT_LE(c.memory.total_bytes, run.cluster.device.memory_bytes);
  }
  EXPECT_EQ(run.best->memory, run.best->Candidate(4)->memory);
}

// --- per-device memory as a constraint ---------------------------------

// GPT-3 175B's layer width (hidden H = 12288, 96 heads of 128), 24 layers
// (a quarter of GPT-3 175B: 24 * 12 H^2 = 43.5e9 weights), f16, Adam, on two
// DGX H100 nodes (80 GiB = 85899345920 bytes per GPU). 64 sequences of 512
// (T = 32768 tokens, enough for D = 2 to beat pure model parallelism over
// both nodes) in 8 micro-batches of gradient accumulation, one in flight, so
// that the activations (all kept: no rematerialization) stay small and the
// weights decide.
//
// Per layer the weights are Q, K, V, proj (H x H each), fc1 (H x 4H) and fc2
// (4H x H): 12 H^2 = 1811939328 parameters, 2 bytes each, plus 17 H = 208896
// small ones (biases 4H + 4H + H, two LayerNorms' scale and bias 4H). With
// all six weights split over the model degree M, per device
//   P_M = 24 * 12 H^2 * 2 / M = 86973087744 / M bytes of weights,
// and gradients = params, Adam moments = 2 x params (parallel_memory.h), so
// params + grads + moments = 4 P_M (+ 4 x at most 24 * 17H * 2 = 10027008
// bytes of biases and LayerNorm parameters):
//   M = 4 (D = 4): 4 P_4 = 86973087744 > 85899345920: over on the weights
//                  alone, whatever the activations;
//   M = 2, 1 (D = 8, 16): 4 P = 173946175488, 347892350976: over;
//   M = 8 (D = 2): 4 P_8 = 43486543872. The DP keeps the output projection's
//                  weight replicated over the node here (see below), which
//                  adds 24 * H^2 * 2 * 7/8 = 6341787648 bytes of params:
//                  params = 17213423616 (+ small), 4 x = 68853694464, plus
//                  ~10.9e9 bytes of activations: fits;
//   M = 16 (D = 1): fits too, but model parallelism across the two nodes is
//                  slower.
// So the memory check rules out Unity's D = 4 x M = 4 (faster by ~3%) and
// the pass returns Megatron's D = 2 x M = 8.
struct MemoryRun {
  costmodel::ClusterSpec cluster = TwoDgxNodes();
  Gpt gpt = BuildGpt(/*layers=*/24, /*batch=*/64, /*seq=*/512, /*hidden=*/12288, /*heads=*/96);
  absl::StatusOr<ParallelizeResult> best;
};

const MemoryRun& MemoryConstrained() {
  static const MemoryRun* run = [] {
    auto* r = new MemoryRun;
    costmodel::ClusterCostModel cm(r->cluster, nullptr, nullptr, costmodel::CommModel(r->cluster));
    ParallelizeOptions o;
    o.optimizer = graph::Optimizer::kAdam;
    o.memory.micro_batches = 8;
    o.memory.in_flight_micro_batches = 1;
    r->best = ParallelizeForward(r->gpt.g, r->cluster, cm, o);
    if (r->best.ok()) {
      std::printf("memory-constrained (Adam, 24 x H 12288 f16) candidates:\n%s",
                  CandidateTableString(*r->best).c_str());
    }
    return r;
  }();
  return *run;
}

TEST(ParallelizeMemoryTest, MemoryPicksMegatron) {
  const MemoryRun& run = MemoryConstrained();
  ASSERT_TRUE(run.best.ok()) << run.best.status();
  const int64_t cap = run.cluster.device.memory_bytes;
  ASSERT_EQ(cap, int64_t{85899345920});
  const int64_t h = 12288, layers = 24, f16 = 2;
  const int64_t small = layers * 17 * h * f16;  // biases + LayerNorm, unsplit
  EXPECT_EQ(4 * layers * 12 * h * h * f16 / 4, int64_t{86973087744});  // 4 P_4
  EXPECT_EQ(4 * layers * 12 * h * h * f16 / 8, int64_t{43486543872});  // 4 P_8
  ASSERT_EQ(run.best->candidates.size(), 5u);
  for (const DataDegreeCandidate& c : run.best->candidates) {
    SCOPED_TRACE(absl::StrCat("D=", c.data_degree));
    ASSERT_TRUE(c.has_plan) << c.status;
    const int64_t p = layers * 12 * h * h * f16 / c.model_degree;  // P_M
    // The six weights as the plan splits them: a MatMul x[.., in] @ W[in,
    // out] holds 1 / (reduction degree * last output degree) of W.
    ParallelizeResult plan{.time_s = c.time_s, .ops = c.ops};
    int64_t weights = 0;
    for (const LayerOps& l : run.gpt.layers) {
      for (OpId mm : {l.q, l.k, l.v, l.proj, l.fc1, l.fc2}) {
        const OpParallelization& o = Chosen(plan, mm);
        const int64_t bytes = (mm == l.fc1 || mm == l.fc2 ? 4 : 1) * h * h * f16;
        weights += bytes / (o.config.reduction_degree * o.config.output_degrees.back());
      }
    }
    EXPECT_GE(weights, p);
    EXPECT_GE(c.memory.parameter_bytes, weights);
    EXPECT_LE(c.memory.parameter_bytes, weights + small);
    EXPECT_EQ(c.memory.gradient_bytes, c.memory.parameter_bytes);
    EXPECT_EQ(c.memory.optimizer_bytes, 2 * c.memory.parameter_bytes);
    EXPECT_EQ(c.memory.total_bytes, c.memory.parameter_bytes + c.memory.gradient_bytes +
                                        c.memory.optimizer_bytes + c.memory.activation_bytes +
                                        c.memory.constant_bytes);
    const bool fits = c.data_degree <= 2;  // M >= 8
    EXPECT_EQ(c.status.ok(), fits) << c.status;
    if (!fits) {
      // Parameters, gradients and moments alone are over the capacity.
      EXPECT_GT(4 * c.memory.parameter_bytes, cap);
      EXPECT_EQ(c.status.code(), absl::StatusCode::kResourceExhausted);
      EXPECT_THAT(std::string(c.status.message()), ::testing::HasSubstr("85899345920 bytes"));
    }
    if (c.data_degree == 4) EXPECT_EQ(weights, p);  // everything split, row projection
    if (c.data_degree == 2) {
      EXPECT_EQ(weights, int64_t{17213423616});  // P_8 + replicated projections
      EXPECT_LE(c.memory.total_bytes, cap);
    }
  }
  // Unity's pick without memory, D = 4 x M = 4, is the fastest but does not
  // fit; D = 2 x M = 8 beats D = 1 x M = 16.
  const DataDegreeCandidate* d1 = run.best->Candidate(1);
  const DataDegreeCandidate* d2 = run.best->Candidate(2);
  const DataDegreeCandidate* d4 = run.best->Candidate(4);
  ASSERT_TRUE(d1 && d2 && d4);
  EXPECT_LT(d4->time_s, d2->time_s);
  EXPECT_LT(d2->time_s, d1->time_s);
  // The pass returns Megatron's strategy.
  EXPECT_EQ(run.best->time_s, d2->time_s);
  EXPECT_EQ(run.best->memory, d2->memory);
  Print(run.gpt.g, *run.best, "memory-constrained pick");
  ExpectMegatronConfigs(run.gpt, *run.best, 2, /*proj_row=*/false);
  // The output projection, as in FindsMegatronWithOneReplicaPerNode, takes
  // the AllToAll to a sequence split with a replicated weight rather than
  // Megatron's row split (the DP minimizes time; memory is only checked per
  // plan, and this plan fits).
  for (const LayerOps& l : run.gpt.layers) {
    const OpParallelization& o = Chosen(*run.best, l.proj);
    EXPECT_EQ(o.config.output_degrees, (std::vector<int>{2, 8, 1})) << o.name;
    EXPECT_EQ(o.config.reduction_degree, 1) << o.name;
  }
}

// A device smaller than any plan: ResourceExhausted naming the smallest plan
// and the capacity. Without the check the same plan comes back.
TEST(ParallelizeMemoryTest, NothingFitsIsResourceExhausted) {
  costmodel::ClusterSpec c = TwoDgxNodes();
  c.device.memory_bytes = 1 << 20;
  costmodel::ClusterCostModel cm(c, nullptr, nullptr, costmodel::CommModel(c));
  Gpt m = BuildGpt(1, 16, 64, 256, 4);
  ParallelizeOptions o;
  o.optimizer = graph::Optimizer::kAdam;
  absl::StatusOr<ParallelizeResult> r = ParallelizeForward(m.g, c, cm, o);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
  EXPECT_THAT(r.status().message(), ::testing::HasSubstr("no data degree fits"));
  EXPECT_THAT(r.status().message(), ::testing::HasSubstr("has 1048576 bytes"));
  std::printf("%s\n", std::string(r.status().message()).c_str());
  o.check_memory = false;
  absl::StatusOr<ParallelizeResult> unchecked = ParallelizeForward(m.g, c, cm, o);
  ASSERT_TRUE(unchecked.ok()) << unchecked.status();
  EXPECT_TRUE(unchecked->candidates.empty());
  EXPECT_GT(unchecked->memory.total_bytes, 1 << 20);
}

// An op parallel_config.h cannot split (Expand) gets the opaque data
// fallback; the MatMuls around it still choose freely.
TEST(ParallelizeTest, UnsupportedOpsFallBackToDataParallel) {
  const costmodel::ClusterSpec c = TwoDgxNodes();
  costmodel::ClusterCostModel cm(c, nullptr, nullptr, costmodel::CommModel(c));
  GraphBuilder b("opaque", DType::kF16);
  TensorId x = b.Input("x", {64, 1024}, DType::kF16);
  TensorId h = b.MatMul(x, b.Param("w", {1024, 1024}));
  TensorId s = b.Expand(h, {64, 1024});
  b.MarkOutput(b.Mul(h, s));
  Graph g = *std::move(b).Build();
  absl::StatusOr<ParallelizeResult> r = ParallelizeForward(g, c, cm);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->ops.size(), 3u);
  const OpParallelization& red = r->ops[1];
  EXPECT_TRUE(red.opaque);
  EXPECT_EQ(red.data_degree, 16);
  EXPECT_FALSE(r->ops[0].opaque);
  EXPECT_GT(r->time_s, 0);
}

// An LSTM's dim 0 is the sequence (ONNX X [seq, batch, in]): splitting it
// would cut the recurrence. It runs replicated, every input and output a
// copy on each device, its weights' gradients all-reduced over all of them.
TEST(ParallelizeTest, LstmRunsReplicatedWithEveryOutput) {
  const costmodel::ClusterSpec c = TwoDgxNodes();
  costmodel::ClusterCostModel cm(c, nullptr, nullptr, costmodel::CommModel(c));
  GraphBuilder b("lstm");
  TensorId x = b.Input("x", {16, 32, 64});  // 16 divides the degree: a row split would fit
  std::vector<TensorId> outs =
      b.Custom("lstm", "LSTM", {x, b.Param("w", {1, 512, 64}), b.Param("r", {1, 512, 128})},
               {{16, 1, 32, 128}, {1, 32, 128}, {1, 32, 128}}, {{"hidden_size", int64_t{128}}});
  b.MarkOutput(b.Relu(outs[0]));
  Graph g = *std::move(b).Build();
  absl::StatusOr<ParallelizeResult> r = ParallelizeForward(g, c, cm);
  ASSERT_TRUE(r.ok()) << r.status();
  const OpParallelization* lstm = nullptr;
  for (const OpParallelization& o : r->ops)
    if (g.op(o.op).kind == graph::OpKind::kLSTM) lstm = &o;
  ASSERT_NE(lstm, nullptr);
  EXPECT_TRUE(lstm->opaque);
  EXPECT_EQ(lstm->config.replica_degree, 16);
  EXPECT_EQ(lstm->data_degree, 1);
  ASSERT_EQ(lstm->layouts.outputs.size(), 3u);
  for (const graph::ParallelTensorShape& s : lstm->layouts.outputs)
    EXPECT_EQ(s.replica_degree, 16) << graph::ParallelShapeString(s);
  for (const graph::ParallelTensorShape& s : lstm->layouts.inputs)
    EXPECT_EQ(s.replica_degree, 16) << graph::ParallelShapeString(s);
  EXPECT_GT(lstm->grad_sync_s, 0);
}

// Opaque ops split rows only where their kind keeps dim 0 apart: an Expand
// of lower rank broadcasts its input right-aligned, so it runs replicated;
// one of equal rank splits rows (UnsupportedOpsFallBackToDataParallel).
TEST(ParallelizeTest, OpaqueRowSplitOnlyWhereExact) {
  const costmodel::ClusterSpec c = TwoDgxNodes();
  costmodel::ClusterCostModel cm(c, nullptr, nullptr, costmodel::CommModel(c));
  GraphBuilder b("expand");
  TensorId v = b.Relu(b.Input("v", {32}));
  TensorId e = b.Expand(v, {32, 32});
  b.MarkOutput(b.Relu(e));
  Graph g = *std::move(b).Build();
  absl::StatusOr<ParallelizeResult> r = ParallelizeForward(g, c, cm);
  ASSERT_TRUE(r.ok()) << r.status();
  const OpParallelization* ex = r->Find(g.op(g.tensor(e).producer).name);
  ASSERT_NE(ex, nullptr);
  EXPECT_TRUE(ex->opaque);
  EXPECT_EQ(ex->config.replica_degree, 16);
  EXPECT_EQ(ex->layouts.inputs[0].replica_degree, 16);
}

// A 3x3 Conv's H splits and an embedding table's row splits are never
// candidates; the result names both kinds with their op counts.
TEST(ParallelizeTest, DroppedConfigKindsAreListed) {
  const costmodel::ClusterSpec c = *costmodel::WithRanks(*costmodel::LoadCluster("dgx-h100"), 4);
  costmodel::ClusterCostModel cm(c, nullptr, nullptr, costmodel::CommModel(c));
  GraphBuilder b("dropped");
  TensorId x = b.Input("x", {8, 16, 8, 8});
  TensorId y = b.Conv(b.Conv(x, 16, 3, 1, 1), 16, 3, 1, 1);
  TensorId p = b.Conv(y, 16, 1, 1, 0);  // 1x1: its H split is exact
  b.MarkOutput(p);
  b.MarkOutput(b.Embedding(b.Input("ids", {8, 4}, DType::kI64), 1000, 64));
  Graph g = *std::move(b).Build();
  ParallelizeOptions o;
  o.check_memory = false;
  absl::StatusOr<ParallelizeResult> r = ParallelizeForward(g, c, cm, o);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->dropped.size(), 2u);
  EXPECT_EQ(r->dropped[0].op_kind, "Conv");
  EXPECT_EQ(r->dropped[0].config_kind, "spatial");
  EXPECT_EQ(r->dropped[0].ops, 2);
  EXPECT_EQ(r->dropped[1].op_kind, "Gather");
  EXPECT_EQ(r->dropped[1].config_kind, "row");
  EXPECT_EQ(r->dropped[1].ops, 1);
  for (const OpParallelization& op : r->ops) {
    if (g.op(op.op).kind == graph::OpKind::kGather) EXPECT_EQ(op.config.reduction_degree, 1);
  }
  // The memory-checked run lists the same.
  absl::StatusOr<ParallelizeResult> checked = ParallelizeForward(g, c, cm);
  ASSERT_TRUE(checked.ok()) << checked.status();
  EXPECT_EQ(checked->dropped.size(), 2u);
}

// A Split whose producer is column-parallel takes the segmented layout:
// the fused QKV reaches q, k and v without a collective.
TEST(ParallelizeTest, FusedQkvSplitIsSegmented) {
  const costmodel::ClusterSpec c = *costmodel::WithRanks(*costmodel::LoadCluster("dgx-h100"), 8);
  costmodel::ClusterCostModel cm(c, nullptr, nullptr, costmodel::CommModel(c));
  GraphBuilder b("qkv", DType::kF16);
  TensorId x = b.Input("x", {8, 512, 1024}, DType::kF16);
  TensorId h = b.MatMul(x, b.Param("w", {1024, 3072}));
  std::vector<TensorId> qkv =
      b.Custom("split", "Split", {h}, {{8, 512, 1024}, {8, 512, 1024}, {8, 512, 1024}},
               {{"axis", int64_t{2}}, {"split", std::vector<int64_t>{1024, 1024, 1024}}});
  for (size_t k = 0; k < qkv.size(); ++k)
    b.MarkOutput(b.MatMul(qkv[k], b.Param(absl::StrCat("o", k), {1024, 1024})));
  Graph g = *std::move(b).Build();
  ParallelizeOptions o;
  o.check_memory = false;
  o.filter = [](const Graph& g, OpId op, const ParallelConfig& c) {
    if (c.output_degrees[0] != 1) return false;
    if (g.op(op).kind != graph::OpKind::kMatMul) return true;
    return ConfigKindName(g, op, c) == (g.tensor(g.op(op).inputs[0]).role == graph::TensorRole::kInput ? "column"
                                                                                  : "row");
  };
  absl::StatusOr<ParallelizeResult> r = ParallelizeForward(g, c, cm, o);
  ASSERT_TRUE(r.ok()) << r.status();
  const OpParallelization* split = nullptr;
  for (const OpParallelization& p : r->ops)
    if (g.op(p.op).kind == graph::OpKind::kSplit) split = &p;
  ASSERT_NE(split, nullptr);
  EXPECT_EQ(ConfigKindName(g, split->op, split->config), "segmented");
  ASSERT_EQ(split->layouts.outputs.size(), 3u);
  for (const graph::ParallelTensorShape& s : split->layouts.outputs)
    EXPECT_EQ(graph::ParallelShapeString(s), "f16[8,512,1024/8]");
}

TEST(ParallelizeTest, DegreeOutOfRangeIsInvalid) {
  const costmodel::ClusterSpec c = TwoDgxNodes();
  costmodel::ClusterCostModel cm(c, nullptr, nullptr, costmodel::CommModel(c));
  Gpt m = BuildGpt(1, 16, 64, 256, 4);
  ParallelizeOptions o;
  o.degree = 32;
  EXPECT_EQ(ParallelizeForward(m.g, c, cm, o).status().code(),
            absl::StatusCode::kInvalidArgument);
}


// --- the frontier DP against the generic machine-mapping solver ------------

// A small CNN with a two-branch block (Inception-like) and a residual
// (ResNet-like), then a classifier.
Graph BranchyCnn() {
  GraphBuilder b("cnn");
  TensorId x = b.Input("x", {32, 16, 16, 16});
  x = b.Relu(b.BatchNorm(b.Conv(x, 32, 3, 1, 1, 1, false), 1e-5));
  TensorId l = b.Relu(b.Conv(x, 32, 1, 1, 0, 1, false));
  TensorId r = b.Relu(b.Conv(b.Conv(x, 16, 1, 1, 0, 1, false), 32, 3, 1, 1, 4, false));
  x = b.Concat({l, r}, 1);
  x = b.Add(b.Conv(x, 64, 1, 1, 0, 1, false), b.Conv(x, 64, 3, 1, 1, 1, false));
  x = b.Flatten(b.GlobalAveragePool(b.MaxPool(x, 2, 2, 0)), 1);
  b.MarkOutput(b.Linear(x, 64));
  return *std::move(b).Build();
}

TEST(ParallelizeSolverTest, FrontierDpMatchesTheMachineMappingSolver) {
  const costmodel::ClusterSpec c = TwoDgxNodes();
  costmodel::ClusterCostModel cm(c, nullptr, nullptr, costmodel::CommModel(c));
  const Gpt gpt = BuildGpt(1, 16, 64, 256, 4);
  const Graph cnn = BranchyCnn();
  for (const Graph* g : {&gpt.g, &cnn}) {
    for (int degree : {4, 16}) {
      SCOPED_TRACE(absl::StrCat(g->name(), " at ", degree));
      ParallelizeOptions o;
      o.degree = degree;
      o.check_memory = false;
      absl::StatusOr<ParallelizeResult> fast = ParallelizeForward(*g, c, cm, o);
      o.reference_solver = true;
      absl::StatusOr<ParallelizeResult> ref = ParallelizeForward(*g, c, cm, o);
      ASSERT_TRUE(fast.ok()) << fast.status();
      ASSERT_TRUE(ref.ok()) << ref.status();
      EXPECT_NEAR(fast->time_s, ref->time_s, ref->time_s * 1e-12);
      ASSERT_EQ(fast->ops.size(), ref->ops.size());
      // The plan's own costs add up to the DP's minimum.
      double op_costs = 0;
      for (const OpParallelization& op : fast->ops) {
        EXPECT_FALSE(op.opaque) << op.name;  // Conv, BN, pooling, Concat, Flatten have configs
        op_costs += op.compute_s + op.grad_sync_s;
      }
      EXPECT_LE(op_costs, fast->time_s * (1 + 1e-12));
    }
  }
}

// --- strands side by side (Unity's parallel split) ----------------------

// Two input-fed strands (x_s [rows, k] -> Linear -> Relu) meeting at an Add.
Graph TwoStrands(int64_t rows, int64_t k, int64_t n) {
  GraphBuilder b("two_strands");
  TensorId y0 = b.Relu(b.Linear(b.Input("x0", {rows, k}), n));
  TensorId y1 = b.Relu(b.Linear(b.Input("x1", {rows, k}), n));
  b.MarkOutput(b.Add(y0, y1));
  return *std::move(b).Build();
}

TEST(IndependentStrandsTest, FindsDlrmsEmbeddingBagsAndNothingInChains) {
  absl::StatusOr<Graph> dlrm = graph::BuildZooModel("dlrm", 0, graph::ZooSize::kSample);
  ASSERT_TRUE(dlrm.ok()) << dlrm.status();
  std::vector<StrandBlock> blocks = IndependentStrands(*dlrm);
  ASSERT_EQ(blocks.size(), 1u);
  EXPECT_EQ(dlrm->op(blocks[0].sink).kind, graph::OpKind::kConcat);
  // The bottom MLP's output is read twice (the interaction and the top
  // MLP's Concat): not a strand. The eight bags are.
  ASSERT_EQ(blocks[0].strands.size(), 8u);
  for (const std::vector<OpId>& st : blocks[0].strands) {
    ASSERT_EQ(st.size(), 3u);
    EXPECT_EQ(dlrm->op(st[0]).kind, graph::OpKind::kGather);
    EXPECT_EQ(dlrm->op(st[1]).kind, graph::OpKind::kReduceSum);
    EXPECT_EQ(dlrm->op(st[2]).kind, graph::OpKind::kReshape);
  }
  for (const char* m : {"mlp", "transformer", "resnet50"}) {
    absl::StatusOr<Graph> g = graph::BuildZooModel(m, 0, graph::ZooSize::kSample);
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_TRUE(IndependentStrands(*g).empty()) << m;
  }
  EXPECT_EQ(IndependentStrands(TwoStrands(64, 32, 32)).size(), 1u);
  // Strands sharing a weight are not independent.
  GraphBuilder b("tied");
  TensorId w = b.Param("w", {32, 32});
  TensorId y0 = b.MatMul(b.Input("x0", {64, 32}), w);
  TensorId y1 = b.MatMul(b.Input("x1", {64, 32}), w);
  b.MarkOutput(b.Add(y0, y1));
  EXPECT_TRUE(IndependentStrands(*std::move(b).Build()).empty());
}

// Each strand on its own device, the Add data parallel over both: the
// move to the Add is one AllToAll in which each device sends its strand's
// other half (rows x n / 2 floats) and receives as much, forward and
// backward, on the node's link.
TEST(ParallelizeStrandsTest, SideBySideMovesTheOutputsInOneAllToAll) {
  const costmodel::ClusterSpec c = *costmodel::WithRanks(*costmodel::LoadCluster("dgx-h100"), 2);
  costmodel::ClusterCostModel cm(c, nullptr, nullptr, costmodel::CommModel(c));
  // Large weights, small activations: replicating the weights (their
  // gradients all-reduced) or splitting them costs more than keeping each
  // whole on one device.
  const int64_t rows = 64, k = 4096, n = 4096;
  const Graph g = TwoStrands(rows, k, n);
  ParallelizeOptions o;
  o.check_memory = false;
  o.filter = [](const Graph& gr, OpId op, const ParallelConfig& cfg) {
    return gr.op(op).kind != graph::OpKind::kAdd || cfg.output_degrees[0] == 2;
  };
  absl::StatusOr<ParallelizeResult> r = ParallelizeForward(g, c, cm, o);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->strand_blocks.size(), 1u);
  const StrandPlacement& b = r->strand_blocks[0];
  EXPECT_EQ(b.devices_per_strand, 1);
  EXPECT_EQ(b.groups, 2);
  EXPECT_EQ(b.per_group, 1);
  const double half = rows * n * 4 / 2.0;
  const double want = 2 * (half / c.intra.bandwidth + c.intra.latency_s);
  EXPECT_NEAR(b.redistribute_s, want, want * 1e-9);
  std::set<int> devices;
  for (const OpParallelization& op : r->ops)
    if (op.num_devices > 0) devices.insert(op.first_device);
  EXPECT_THAT(devices, ::testing::ElementsAre(0, 1));
  // Faster than every op on both devices, which the DP also solved.
  o.parallel_strands = false;
  absl::StatusOr<ParallelizeResult> all = ParallelizeForward(g, c, cm, o);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_TRUE(all->strand_blocks.empty());
  EXPECT_LT(r->time_s, all->time_s);
  // The plan's cost: the busiest group, the AllToAll, the Add.
  double add = 0;
  for (const OpParallelization& op : r->ops)
    if (op.num_devices == 0) add += op.compute_s + op.grad_sync_s;
  EXPECT_NEAR(r->time_s, b.compute_s + b.grad_sync_s + b.redistribute_s + add, r->time_s * 1e-9);
}

TEST(ParallelizeStrandsTest, FrontierDpMatchesTheReferenceSolverWithStrandBlocks) {
  const costmodel::ClusterSpec c = TwoDgxNodes();
  costmodel::ClusterCostModel cm(c, nullptr, nullptr, costmodel::CommModel(c));
  absl::StatusOr<Graph> dlrm = graph::BuildZooModel("dlrm", 0, graph::ZooSize::kSample);
  ASSERT_TRUE(dlrm.ok()) << dlrm.status();
  for (int degree : {4, 16}) {
    SCOPED_TRACE(degree);
    ParallelizeOptions o;
    o.degree = degree;
    o.check_memory = false;
    absl::StatusOr<ParallelizeResult> fast = ParallelizeForward(*dlrm, c, cm, o);
    o.reference_solver = true;
    absl::StatusOr<ParallelizeResult> ref = ParallelizeForward(*dlrm, c, cm, o);
    ASSERT_TRUE(fast.ok()) << fast.status();
    ASSERT_TRUE(ref.ok()) << ref.status();
    EXPECT_NEAR(fast->time_s, ref->time_s, ref->time_s * 1e-12);
    EXPECT_EQ(fast->strand_blocks.size(), ref->strand_blocks.size());
  }
}

TEST(ParallelizeSolverTest, FrontierBoundIsResourceExhausted) {
  const costmodel::ClusterSpec c = TwoDgxNodes();
  costmodel::ClusterCostModel cm(c, nullptr, nullptr, costmodel::CommModel(c));
  ParallelizeOptions o;
  o.check_memory = false;
  o.max_frontier_states = 10;
  absl::StatusOr<ParallelizeResult> r = ParallelizeForward(BranchyCnn(), c, cm, o);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
  EXPECT_THAT(std::string(r.status().message()), ::testing::HasSubstr("frontier peaks at"));
}

// An op with candidate kinds but no split dividing the degree (a [3, 60]
// table looked up by 3 positions at degree 16) runs opaque, replicated.
TEST(ParallelizeSolverTest, NoSplitAtThisDegreeRunsOpaque) {
  const costmodel::ClusterSpec c = TwoDgxNodes();
  costmodel::ClusterCostModel cm(c, nullptr, nullptr, costmodel::CommModel(c));
  GraphBuilder b("pos");
  TensorId e = b.Embedding(b.Constant("pos", {3}, DType::kI64), 3, 60);
  b.MarkOutput(b.Add(b.Input("x", {16, 3, 60}), e));
  Graph g = *std::move(b).Build();
  const OpId op = g.tensor(e).producer;
  ASSERT_TRUE(CandidateConfigs(g, op, 16)->empty());
  absl::StatusOr<ParallelizeResult> r = ParallelizeForward(g, c, cm);
  ASSERT_TRUE(r.ok()) << r.status();
  const OpParallelization* gather = r->Find(g.op(op).name);
  ASSERT_NE(gather, nullptr);
  EXPECT_TRUE(gather->opaque);
  EXPECT_EQ(gather->config.replica_degree, 16);
}

}  // namespace
}  // namespace braid::search

namespace braid::search {
namespace {

// On a single-node cluster the DP prices a collective from the cost model's
// fit where it has one (measured on those ranks) rather than from the link
// priors; on several nodes the fit (over the first n ranks) says nothing
// about how a group is laid out, and the priors stay.
TEST(ParallelizeTest, MeasuredCollectivesReplaceTheLinkPriorsOnOneNode) {
  auto mlp = [] {
    graph::GraphBuilder b("mlp2", graph::DType::kF32);
    graph::TensorId x = b.Input("x", {256, 1024});
    x = b.MatMul(x, b.Param("w1", {1024, 1024}));
    x = b.MatMul(b.Relu(x), b.Param("w2", {1024, 1024}));
    b.MarkOutput(x);
    return *std::move(b).Build();
  };
  const graph::Graph g = mlp();
  // Every collective measured at a second or more, far above any prior.
  std::vector<costmodel::CommSample> slow;
  for (const char* c : {"AllReduce", "AllGather", "ReduceScatter", "Broadcast", "AllToAll"}) {
    for (int n : {2, 4}) {
      slow.push_back({c, n, 1 << 20, 1.0});
      slow.push_back({c, n, 4 << 20, 2.0});
    }
  }
  auto dp_time = [&](const costmodel::ClusterSpec& c, bool fitted) {
    costmodel::CommModel comm(c);
    if (fitted) EXPECT_TRUE(comm.Fit(slow).ok());
    costmodel::ClusterCostModel cm(c, nullptr, nullptr, comm);
    ParallelizeOptions o;
    o.check_memory = false;
    absl::StatusOr<ParallelizeResult> r = ParallelizeForward(g, c, cm, o);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->time_s : -1;
  };
  const costmodel::ClusterSpec one = *costmodel::WithRanks(*costmodel::ClusterPreset("cpu-local"), 2);
  ASSERT_LE(one.num_ranks, one.devices_per_node);
  EXPECT_LT(dp_time(one, false), 0.5);
  EXPECT_GE(dp_time(one, true), 1.0);  // any 2-way plan makes a collective
  const costmodel::ClusterSpec two = TwoDgxNodes();
  ASSERT_GT(two.num_ranks, two.devices_per_node);
  EXPECT_NEAR(dp_time(two, true), dp_time(two, false), 1e-12);
}


// --- stopping -------------------------------------------------------------

Graph StopMlp() {
  GraphBuilder b("stop_mlp");
  TensorId x = b.Input("x", {64, 1024});
  for (int i = 0; i < 4; ++i) x = b.Relu(b.Linear(x, 1024, /*bias=*/false));
  b.MarkOutput(x);
  return *std::move(b).Build();
}

TEST(ParallelizeStopTest, ExpiredTokenEndsTheRunWithDeadlineExceeded) {
  const costmodel::ClusterSpec c = TwoDgxNodes();
  costmodel::ClusterCostModel cm(c, nullptr, nullptr, costmodel::CommModel(c));
  ParallelizeOptions o;
  o.stop.SetBudget(0);
  absl::StatusOr<ParallelizeResult> r = ParallelizeForward(StopMlp(), c, cm, o);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
  o.check_memory = false;
  EXPECT_EQ(ParallelizeForward(StopMlp(), c, cm, o).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  // A raised flag: Cancelled.
  std::atomic<bool> cancel{true};
  ParallelizeOptions k;
  k.stop.AddFlag(&cancel);
  EXPECT_EQ(ParallelizeForward(StopMlp(), c, cm, k).status().code(), absl::StatusCode::kCancelled);
}

TEST(ParallelizeStopTest, StrategyTableKeepsDataParallelPastTheBudget) {
  const costmodel::ClusterSpec c = TwoDgxNodes();
  costmodel::ClusterCostModel cm(c, nullptr, nullptr, costmodel::CommModel(c));
  StrategyTableOptions o;
  o.base.stop.SetBudget(0);
  absl::StatusOr<std::vector<StrategyRow>> rows = ParallelStrategyTable(StopMlp(), c, cm, o);
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_GE(rows->size(), 2u);
  // The same plan as without a budget.
  StrategyTableOptions free;
  const std::vector<StrategyRow> want = *ParallelStrategyTable(StopMlp(), c, cm, free);
  EXPECT_EQ(rows->front().name, "data_parallel");
  EXPECT_TRUE(rows->front().has_plan);
  EXPECT_TRUE(rows->front().status.ok()) << rows->front().status;
  EXPECT_DOUBLE_EQ(rows->front().result.time_s, want.front().result.time_s);
  for (size_t i = 1; i < rows->size(); ++i) {
    EXPECT_FALSE((*rows)[i].has_plan) << (*rows)[i].name;
    EXPECT_EQ((*rows)[i].status.code(), absl::StatusCode::kDeadlineExceeded) << (*rows)[i].name;
  }
}

}  // namespace
}  // namespace braid::search
