#include "search/parallelize.h"

#include <algorithm>
#include <array>
#include <map>
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
Gpt BuildGpt(int layers, int64_t batch, int64_t seq, int64_t hidden, int64_t heads) {
  GraphBuilder b("gpt", DType::kF16);
  const int64_t dh = hidden / heads;
  TensorId x = b.Input("x", {batch, seq, hidden}, DType::kF16);
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
    TensorId p = b.Softmax(b.Scale(m[3]), -1);
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
// picks M = 8 for memory, which this pass does not model. The structure is
// still Megatron's, model part inside a node, data across nodes.
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
}

// An op parallel_config.h cannot split (ReduceSum) gets the opaque data
// fallback; the MatMuls around it still choose freely.
TEST(ParallelizeTest, UnsupportedOpsFallBackToDataParallel) {
  const costmodel::ClusterSpec c = TwoDgxNodes();
  costmodel::ClusterCostModel cm(c, nullptr, nullptr, costmodel::CommModel(c));
  GraphBuilder b("opaque", DType::kF16);
  TensorId x = b.Input("x", {64, 1024}, DType::kF16);
  TensorId h = b.MatMul(x, b.Param("w", {1024, 1024}));
  TensorId s = b.ReduceSum(h, {1}, /*keepdims=*/true);
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

TEST(ParallelizeTest, DegreeOutOfRangeIsInvalid) {
  const costmodel::ClusterSpec c = TwoDgxNodes();
  costmodel::ClusterCostModel cm(c, nullptr, nullptr, costmodel::CommModel(c));
  Gpt m = BuildGpt(1, 16, 64, 256, 4);
  ParallelizeOptions o;
  o.degree = 32;
  EXPECT_EQ(ParallelizeForward(m.g, c, cm, o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace braid::search
