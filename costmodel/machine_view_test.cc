#include "costmodel/machine_view.h"

#include <chrono>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "costmodel/internal/test_clusters.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace braid::costmodel {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

using testing::TwoByFour;  // costmodel/internal/test_clusters.h

// The same with NVLink islands of 2 GPUs; 20 GB/s, 3 us between islands.
ClusterSpec TwoByFourIslands() {
  ClusterSpec c = TwoByFour();
  c.intra = {.kind = IntraLinkKind::kNvlinkIslands, .bandwidth = 100e9, .latency_s = 1e-6,
             .island_size = 2, .cross_island_bandwidth = 20e9, .cross_island_latency_s = 3e-6};
  EXPECT_TRUE(ValidateCluster(c).ok());
  return c;
}

TEST(MachineViewTest, DevicesAreRowMajor) {
  const ClusterSpec c = TwoByFour();
  EXPECT_THAT(*ViewDevices({0, {2, 4}, {4, 1}}, c), ElementsAre(0, 1, 2, 3, 4, 5, 6, 7));
  EXPECT_THAT(*ViewDevices({0, {4, 2}, {1, 4}}, c), ElementsAre(0, 4, 1, 5, 2, 6, 3, 7));
  EXPECT_THAT(*ViewDevices({1, {2, 2}, {4, 2}}, c), ElementsAre(1, 3, 5, 7));
  EXPECT_THAT(*ViewDevices({0, {2, 2, 2}, {4, 2, 1}}, c), ElementsAre(0, 1, 2, 3, 4, 5, 6, 7));
  EXPECT_THAT(*ViewDevices({5, {1}, {1}}, c), ElementsAre(5));
  EXPECT_EQ(NumViewDevices({0, {2, 2, 2}, {4, 2, 1}}), 8);
  EXPECT_EQ(MachineViewString({1, {2, 2}, {4, 2}}), "1:[2,2]/[4,2]");
}

TEST(MachineViewTest, InvalidViewsNameTheRule) {
  const ClusterSpec c = TwoByFour();
  struct Case {
    MachineView v;
    const char* message;
  };
  for (const Case& k : std::initializer_list<Case>{
           {{6, {4}, {1}}, "device 8 is outside the cluster's 8 ranks"},
           {{0, {2, 2}, {1, 1}}, "device 1 is used twice"},
           {{0, {2, 2}, {1}}, "2 dims but 1 strides"},
           {{0, {}, {}}, "needs 1 to 3 dims, has 0"},
           {{0, {2, 2, 2, 1}, {4, 2, 1, 1}}, "needs 1 to 3 dims, has 4"},
           {{-1, {2}, {1}}, "start is negative"},
           {{0, {0}, {1}}, "dim 0 has size 0"},
           {{0, {2}, {0}}, "dim 0 has stride 0"},
           {{0, {4, 4}, {1, 4}}, "needs 16 devices, the cluster has 8"},
           // The last device would wrap an int.
           {{0, {2}, {2147483647}}, "outside the cluster"},
       }) {
    absl::Status s = ValidateMachineView(k.v, c);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << MachineViewString(k.v);
    EXPECT_THAT(s.message(), HasSubstr(k.message)) << MachineViewString(k.v);
    EXPECT_EQ(ViewDevices(k.v, c).status().code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(MachineViewTest, EnumeratesEveryViewByTheRules) {
  const ClusterSpec c = TwoByFour();
  // 4 devices, strides in {1, 2, 4}. 1-D: stride 1 from starts 0..4, stride 2
  // from 0..1 (7). 2-D [2,2], distinct strides: (1,2),(2,1) from 0..4,
  // (1,4),(4,1) from 0..2, (2,4),(4,2) from 0..1 (20).
  absl::StatusOr<std::vector<MachineView>> views = EnumerateMachineViews(c, 4);
  ASSERT_TRUE(views.ok()) << views.status();
  EXPECT_EQ(views->size(), 27u);
  EXPECT_EQ(views->front(), (MachineView{0, {4}, {1}}));
  EXPECT_EQ(views->back(), (MachineView{1, {2, 2}, {4, 2}}));
  EXPECT_THAT(*views, Contains(MachineView{2, {2, 2}, {4, 1}}));
  for (const MachineView& v : *views) EXPECT_TRUE(ValidateMachineView(v, c).ok());
  // 1-D only: the first 7.
  EXPECT_EQ(EnumerateMachineViews(c, 4, /*max_dims=*/1)->size(), 7u);
  // 2 devices: stride 1 (7 starts), 2 (6), 4 (4).
  EXPECT_EQ(EnumerateMachineViews(c, 2)->size(), 17u);
  // 1 device: one view per rank.
  EXPECT_EQ(EnumerateMachineViews(c, 1)->size(), 8u);
  // 8 devices: the 3-D view of the whole cluster is among them.
  views = EnumerateMachineViews(c, 8);
  ASSERT_TRUE(views.ok());
  EXPECT_THAT(*views, Contains(MachineView{0, {2, 4}, {4, 1}}));
  EXPECT_THAT(*views, Contains(MachineView{0, {2, 2, 2}, {1, 4, 2}}));
  for (const MachineView& v : *views) EXPECT_EQ(NumViewDevices(v), 8);
}

TEST(MachineViewTest, EnumerationErrors) {
  const ClusterSpec c = TwoByFour();
  EXPECT_EQ(EnumerateMachineViews(c, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EnumerateMachineViews(c, 9).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EnumerateMachineViews(c, 4, 4).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EnumerateMachineViews(c, 4, 3, /*max_views=*/26).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(MachineViewTest, DimensionLinks) {
  const ClusterSpec c = TwoByFour();
  const MachineView hybrid = {0, {2, 4}, {4, 1}};
  // Dim 0 pairs GPU i of node 0 with GPU i of node 1; the 4 GPUs of a node
  // share its one 10 GB/s NIC.
  ViewDimLink l0 = *ViewDimensionLink(hybrid, c, 0);
  EXPECT_EQ(l0.level, LinkLevel::kInterNode);
  EXPECT_DOUBLE_EQ(l0.bandwidth, 2.5e9);
  EXPECT_DOUBLE_EQ(l0.latency_s, 5e-6);
  ViewDimLink l1 = *ViewDimensionLink(hybrid, c, 1);
  EXPECT_EQ(l1.level, LinkLevel::kIntraNode);
  EXPECT_DOUBLE_EQ(l1.bandwidth, 100e9);
  EXPECT_DOUBLE_EQ(l1.latency_s, 1e-6);
  // One GPU per node: the whole NIC.
  ViewDimLink pair = *ViewDimensionLink({2, {2}, {4}}, c, 0);
  EXPECT_EQ(pair.level, LinkLevel::kInterNode);
  EXPECT_DOUBLE_EQ(pair.bandwidth, 10e9);
  // Within node 1.
  EXPECT_EQ(ViewDimensionLink({4, {4}, {1}}, c, 0)->level, LinkLevel::kIntraNode);
  // Devices 2..5 straddle the node boundary.
  EXPECT_EQ(ViewDimensionLink({2, {4}, {1}}, c, 0)->level, LinkLevel::kInterNode);
  EXPECT_DOUBLE_EQ(ViewDimensionLink({2, {4}, {1}}, c, 0)->bandwidth, 5e9);
  EXPECT_EQ(ViewDimensionLink(hybrid, c, 2).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ViewDimensionLink({0, {1}, {1}}, c, 0).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(LinkLevelName(LinkLevel::kCrossIsland), "cross_island");
}

TEST(MachineViewTest, IslandLinks) {
  const ClusterSpec c = TwoByFourIslands();
  EXPECT_EQ(ViewDimensionLink({0, {2}, {1}}, c, 0)->level, LinkLevel::kIntraNode);
  // Devices 1 and 2 are in different islands of node 0.
  ViewDimLink l = *ViewDimensionLink({1, {2}, {1}}, c, 0);
  EXPECT_EQ(l.level, LinkLevel::kCrossIsland);
  EXPECT_DOUBLE_EQ(l.bandwidth, 20e9);
  EXPECT_DOUBLE_EQ(l.latency_s, 3e-6);
  // [2,2]/[2,1] on node 0: dim 0 pairs across islands, dim 1 within one.
  EXPECT_EQ(ViewDimensionLink({0, {2, 2}, {2, 1}}, c, 0)->level, LinkLevel::kCrossIsland);
  EXPECT_EQ(ViewDimensionLink({0, {2, 2}, {2, 1}}, c, 1)->level, LinkLevel::kIntraNode);
}

TEST(MachineViewTest, RingCostOnAViewDimensionMatchesTheCommModelWithinANode) {
  const ClusterSpec c = TwoByFour();
  const CommModel m(c);
  const ViewDimLink intra = *ViewDimensionLink({0, {2, 4}, {4, 1}}, c, 1);
  for (Collective col : {Collective::kAllReduce, Collective::kAllGather,
                         Collective::kReduceScatter, Collective::kBroadcast}) {
    // Within a node the comm model's group is exactly this ring.
    EXPECT_NEAR(RingCost(col, 4, intra).At(1 << 20), m.Time(col, 1 << 20, 4), 1e-15)
        << CollectiveName(col);
  }
  // Across nodes on the 2.5 GB/s NIC share: 2*(1/2)*1 MB/2.5e9 + 2*5 us.
  const ViewDimLink inter = *ViewDimensionLink({0, {2, 4}, {4, 1}}, c, 0);
  EXPECT_NEAR(RingCost(Collective::kAllReduce, 2, inter).At(1000000), 4.1e-4, 1e-15);
  EXPECT_EQ(RingCost(Collective::kAllReduce, 1, inter).At(1000000), 0.0);
}


// The answers by listing every device, as views were once costed: the
// arithmetic must agree with them on every view.
struct Listed {
  bool valid = true;
  std::vector<ViewDimLink> links;  // per dim of size > 1
};
Listed ByListing(const MachineView& v, const ClusterSpec& c) {
  Listed out;
  std::vector<int64_t> devs = {v.start};
  for (size_t k = 0; k < v.dims.size(); ++k) {
    std::vector<int64_t> next;
    for (int64_t b : devs)
      for (int i = 0; i < v.dims[k]; ++i) next.push_back(b + int64_t{i} * v.strides[k]);
    devs = std::move(next);
  }
  std::set<int64_t> seen;
  for (int64_t d : devs) out.valid = out.valid && d < c.num_ranks && seen.insert(d).second;
  if (!out.valid) return out;
  const int p = c.devices_per_node;
  std::map<int64_t, int> on_node;
  int most = 0;
  for (int64_t d : devs) most = std::max(most, ++on_node[d / p]);
  for (size_t dim = 0; dim < v.dims.size(); ++dim) {
    if (v.dims[dim] == 1) continue;
    int64_t inner = 1;
    for (size_t k = dim + 1; k < v.dims.size(); ++k) inner *= v.dims[k];
    bool node = false, island = false;
    for (size_t t = 0; t < devs.size(); ++t) {
      const int64_t first = devs[t - (static_cast<int64_t>(t) / inner % v.dims[dim]) * inner];
      node = node || devs[t] / p != first / p;
      if (c.intra.kind == IntraLinkKind::kNvlinkIslands)
        island = island || (devs[t] % p) / c.intra.island_size !=
                               (first % p) / c.intra.island_size;
    }
    if (node) {
      out.links.push_back({LinkLevel::kInterNode,
                           c.network.nics_per_node * c.network.nic_bandwidth / most,
                           c.network.latency_s});
    } else if (island) {
      out.links.push_back({LinkLevel::kCrossIsland,
                           std::min(c.intra.bandwidth, c.intra.cross_island_bandwidth),
                           std::max(c.intra.latency_s, c.intra.cross_island_latency_s)});
    } else {
      out.links.push_back({LinkLevel::kIntraNode, c.intra.bandwidth, c.intra.latency_s});
    }
  }
  return out;
}

void ExpectSameAsListing(const MachineView& v, const ClusterSpec& c) {
  const Listed want = ByListing(v, c);
  EXPECT_EQ(ValidateMachineView(v, c).ok(), want.valid) << MachineViewString(v);
  if (!want.valid) return;
  size_t i = 0;
  for (size_t dim = 0; dim < v.dims.size(); ++dim) {
    if (v.dims[dim] == 1) continue;
    absl::StatusOr<ViewDimLink> l = ViewDimensionLink(v, c, static_cast<int>(dim));
    ASSERT_TRUE(l.ok()) << l.status();
    EXPECT_EQ(l->level, want.links[i].level) << MachineViewString(v) << " dim " << dim;
    EXPECT_DOUBLE_EQ(l->bandwidth, want.links[i].bandwidth) << MachineViewString(v) << " dim " << dim;
    EXPECT_DOUBLE_EQ(l->latency_s, want.links[i].latency_s);
    ++i;
  }
}

TEST(MachineViewTest, ArithmeticAgreesWithListingTheDevices) {
  ClusterSpec islands = TwoByFourIslands();
  ClusterSpec partial = TwoByFour();  // 3 nodes of 4, 10 ranks in use
  partial.num_nodes = 3;
  partial.num_ranks = 10;
  ClusterSpec sixes = TwoByFour();  // 4 nodes of 6, islands of 3
  sixes.num_nodes = 4;
  sixes.devices_per_node = 6;
  sixes.num_ranks = 24;
  sixes.intra = islands.intra;
  sixes.intra.island_size = 3;
  for (const ClusterSpec& c : {TwoByFour(), islands, partial, sixes}) {
    ASSERT_TRUE(ValidateCluster(c).ok());
    // Every view by the enumeration's rules, and every start/dims/strides
    // within small bounds (invalid ones included).
    for (int n = 1; n <= c.num_ranks; ++n) {
      absl::StatusOr<std::vector<MachineView>> views = EnumerateMachineViews(c, n);
      if (!views.ok()) continue;
      for (const MachineView& v : *views) ExpectSameAsListing(v, c);
    }
    std::mt19937 rng(7);
    for (int trial = 0; trial < 3000; ++trial) {
      const int dims = 1 + static_cast<int>(rng() % 3);
      MachineView v{static_cast<int>(rng() % c.num_ranks), {}, {}};
      for (int k = 0; k < dims; ++k) {
        v.dims.push_back(1 + static_cast<int>(rng() % 5));
        v.strides.push_back(1 + static_cast<int>(rng() % 9));
      }
      ExpectSameAsListing(v, c);
    }
  }
}

TEST(MachineViewTest, ViewsOfAMillionRanksAreAnsweredWithoutListingThem) {
  ClusterSpec c = TwoByFour();
  c.num_nodes = 1 << 17;
  c.devices_per_node = 8;
  c.num_ranks = 1 << 20;
  ASSERT_TRUE(ValidateCluster(c).ok());
  const auto start = std::chrono::steady_clock::now();
  for (int rep = 0; rep < 1000; ++rep) {
    // [2^17, 8] / [8, 1]: data across nodes, model inside one.
    const MachineView v{0, {1 << 17, 8}, {8, 1}};
    ASSERT_TRUE(ValidateMachineView(v, c).ok());
    ViewDimLink l0 = *ViewDimensionLink(v, c, 0);
    EXPECT_EQ(l0.level, LinkLevel::kInterNode);
    EXPECT_DOUBLE_EQ(l0.bandwidth, c.network.nics_per_node * c.network.nic_bandwidth / 8);
    EXPECT_EQ(ViewDimensionLink(v, c, 1)->level, LinkLevel::kIntraNode);
    // The same devices, model dim outermost; and one twice.
    EXPECT_EQ(ViewDimensionLink({0, {8, 1 << 17}, {1, 8}}, c, 0)->level, LinkLevel::kIntraNode);
    EXPECT_THAT(ValidateMachineView({0, {1 << 10, 1 << 9, 2}, {1 << 10, 1, 1 << 8}}, c)
                    .message(),
                HasSubstr("is used twice"));
  }
  // Listing 2^20 devices into a set took ~0.2 s per question.
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5.0);
}

}  // namespace
}  // namespace braid::costmodel
