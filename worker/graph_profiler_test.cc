#include "worker/graph_profiler.h"

#include <filesystem>
#include <set>
#include <string>
#include <utility>

#include "glog/logging.h"
#include "graph/builder.h"
#include "graph/training.h"
#include "gtest/gtest.h"
#include "worker/cpu_profiler.h"

namespace braid::worker {
namespace {

// x[8,16] -> Linear(32) -> Relu -> Linear(32) -> Relu -> Linear(4): the two
// Relu share a key only if their shapes agree (they do: [8,32]).
graph::Graph MlpTraining() {
  graph::GraphBuilder b("mlp3");
  graph::TensorId x = b.Input("x", {8, 16});
  b.MarkOutput(b.Linear(b.Relu(b.Linear(b.Relu(b.Linear(x, 32)), 32)), 4));
  absl::StatusOr<graph::Graph> fwd = std::move(b).Build();
  CHECK(fwd.ok()) << fwd.status();
  graph::TrainingOptions o;
  o.ranks = 2;
  absl::StatusOr<graph::Graph> g = graph::BuildTrainingGraph(*fwd, o);
  CHECK(g.ok()) << g.status();
  return *std::move(g);
}

class GraphProfilerTest : public ::testing::Test {
 protected:
  std::string Path() const {
    return ::testing::TempDir() + "/graph_profiler_test_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".db";
  }
  void SetUp() override { std::filesystem::remove(Path()); }
};

TEST_F(GraphProfilerTest, StoresEveryComputeKeyFromTheRanksTimings) {
  graph::Graph g = MlpTraining();
  absl::StatusOr<std::unique_ptr<costmodel::ProfileStore>> store =
      costmodel::ProfileStore::Open(Path());
  ASSERT_TRUE(store.ok()) << store.status();
  GraphProfileOptions o;
  o.ranks = 2;
  o.warmup = 1;
  o.iterations = 3;
  o.rank_binary = BRAID_TRAIN_RANK_BINARY;
  o.timeout_s = 60;
  absl::StatusOr<GraphProfileReport> r = ProfileGraphInGraph(g, **store, o);
  ASSERT_TRUE(r.ok()) << r.status();

  std::set<std::pair<std::string, std::string>> keys;
  int compute = 0, collectives = 0;
  for (graph::OpId id = 0; id < g.num_ops(); ++id) {
    if (g.op(id).type == "AllReduce") {
      ++collectives;
      continue;
    }
    ++compute;
    keys.insert({g.op(id).type, costmodel::OpSignature(g, id)});
  }
  ASSERT_LT(static_cast<int>(keys.size()), compute);  // some keys repeat
  EXPECT_EQ(r->ops_timed, compute);
  EXPECT_EQ(r->communication, collectives);
  EXPECT_EQ(r->keys_stored, static_cast<int>(keys.size()));
  // Every op, from the slowest rank, in the typical iterations: of 3, those
  // between the quartiles of the totals, i.e. at least the median one.
  EXPECT_GE(r->samples, int64_t{compute});
  EXPECT_LE(r->samples, int64_t{compute} * 3);
  EXPECT_EQ(r->samples % compute, 0);
  for (const auto& [type, sig] : keys) {
    std::optional<costmodel::ProfileSample> s = (*store)->Get({CpuDeviceKind(), type, sig});
    ASSERT_TRUE(s.has_value()) << type;
    EXPECT_GT(s->median_s, 0) << type;
    EXPECT_GT(s->repetitions, 0) << type;
  }
  EXPECT_GT(r->iteration_s, 0);
  // The per-op clocks sit inside the iteration's.
  EXPECT_LT(r->sum_of_medians_s, r->iteration_s * 1.5);
  EXPECT_GT(r->sum_of_means_s, 0);
  // Every gradient packed once per iteration: 16*32+32 + 32*32+32 + 32*4+4 f32.
  EXPECT_EQ(r->pack_bytes, (16 * 32 + 32 + 32 * 32 + 32 + 32 * 4 + 4) * 4);
  EXPECT_GT(r->pack_s, 0);
  std::optional<costmodel::ProfileSample> pack =
      (*store)->Get({CpuDeviceKind(), costmodel::kBucketPackOp, costmodel::kPerByteSignature});
  ASSERT_TRUE(pack.has_value());
  EXPECT_NEAR(pack->median_s * static_cast<double>(r->pack_bytes), r->pack_s, 1e-12);
}

TEST_F(GraphProfilerTest, RejectsBadOptions) {
  graph::Graph g = MlpTraining();
  absl::StatusOr<std::unique_ptr<costmodel::ProfileStore>> store =
      costmodel::ProfileStore::Open(Path());
  ASSERT_TRUE(store.ok());
  GraphProfileOptions o;
  o.iterations = 0;
  EXPECT_EQ(ProfileGraphInGraph(g, **store, o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace braid::worker
