#include "worker/collective_bench.h"

#include <filesystem>
#include <string>

#include "costmodel/cluster.h"
#include "costmodel/comm_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace braid::worker {
namespace {

using ::testing::HasSubstr;
using costmodel::Collective;

CollectiveBenchOptions TwoRanksTwoSizes() {
  CollectiveBenchOptions o;
  o.ranks = 2;
  o.sizes = {4 << 10, 64 << 10};
  o.collectives = {Collective::kAllReduce, Collective::kAllGather, Collective::kBroadcast};
  o.warmup = 1;
  o.repetitions = 5;
  o.rank_binary = BRAID_COLLECTIVE_RANK_BINARY;
  o.timeout_s = 60;
  return o;
}

TEST(CollectiveBenchTest, TwoRanksWriteTwoSamplesPerCollective) {
  std::filesystem::path db = std::filesystem::path(::testing::TempDir()) / "collective_bench.db";
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(db.string() + suffix);
  auto store = costmodel::ProfileStore::Open(db.string());
  ASSERT_TRUE(store.ok()) << store.status();

  absl::StatusOr<std::vector<CollectiveMeasurement>> m =
      RunCollectiveBench(TwoRanksTwoSizes(), store->get());
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->size(), 6u);
  // The default key is the cpu-local preset's, which names this machine's CPU.
  const std::string key = costmodel::CommProfileKey(*costmodel::ClusterPreset("cpu-local"));
  EXPECT_EQ(key, "cpu-local:" + costmodel::LocalCpuDeviceKind());
  EXPECT_EQ(TwoRanksTwoSizes().device_kind, key);
  std::vector<costmodel::CommSample> stored = (*store)->GetComm(key);
  ASSERT_EQ(stored.size(), 6u);
  // GetComm orders by collective name, then group size, then bytes.
  const char* names[] = {"AllGather", "AllGather", "AllReduce", "AllReduce", "Broadcast",
                         "Broadcast"};
  const int64_t bytes[] = {4096, 65536, 4096, 65536, 4096, 65536};
  for (size_t i = 0; i < stored.size(); ++i) {
    EXPECT_EQ(stored[i].collective, names[i]);
    EXPECT_EQ(stored[i].group_size, 2);
    EXPECT_EQ(stored[i].bytes, bytes[i]);
    EXPECT_GT(stored[i].seconds, 0);
    EXPECT_LT(stored[i].seconds, 1.0);  // loopback: microseconds to milliseconds
  }
  EXPECT_EQ((*m)[0].sample.collective, "AllReduce");
  EXPECT_EQ((*m)[0].sample.bytes, 4096);
  EXPECT_GE((*m)[0].spread_s, 0);
  EXPECT_EQ((*store)->Generation(), 6);
}

TEST(CollectiveBenchTest, RejectsBadOptionsAndMissingProgram) {
  CollectiveBenchOptions o = TwoRanksTwoSizes();
  o.sizes = {4098};
  absl::StatusOr<std::vector<CollectiveMeasurement>> m = RunCollectiveBench(o, nullptr);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("size 4098"));
  o = TwoRanksTwoSizes();
  o.ranks = 1;
  EXPECT_EQ(RunCollectiveBench(o, nullptr).status().code(), absl::StatusCode::kInvalidArgument);
  o = TwoRanksTwoSizes();
  o.rank_binary = "/nonexistent/braid-collective-rank";
  m = RunCollectiveBench(o, nullptr);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("/nonexistent/braid-collective-rank"));
}

TEST(CollectiveBenchTest, SendRecvIsNotACollectiveTheBenchRuns) {
  CollectiveBenchOptions o = TwoRanksTwoSizes();
  o.collectives = {Collective::kSendRecv};
  absl::StatusOr<std::vector<CollectiveMeasurement>> m = RunCollectiveBench(o, nullptr);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("SendRecv is not available"));
}

// Gloo has no reduce_scatter: the bench times braid's (an all-to-all and a
// local sum, as the parallel ranks run it), bound and polling as those ranks,
// and stores means when asked.
TEST(CollectiveBenchTest, ReduceScatterIsBraidsAllToAllAndSum) {
  CollectiveBenchOptions o = TwoRanksTwoSizes();
  o.collectives = {Collective::kReduceScatter};
  o.pin_cores = true;
  o.store_mean = true;
  absl::StatusOr<std::vector<CollectiveMeasurement>> m = RunCollectiveBench(o, nullptr);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->size(), 2u);
  for (const CollectiveMeasurement& x : *m) {
    EXPECT_EQ(x.sample.collective, "ReduceScatter");
    EXPECT_EQ(x.sample.group_size, 2);
    EXPECT_GT(x.sample.seconds, 0);
    EXPECT_LT(x.sample.seconds, 1.0);
  }
}

}  // namespace
}  // namespace braid::worker
