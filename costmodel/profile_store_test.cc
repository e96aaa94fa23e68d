#include "costmodel/profile_store.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "base/sqlite.h"
#include "gmock/gmock.h"
#include "graph/text_format.h"
#include "gtest/gtest.h"

namespace braid::costmodel {
namespace {

namespace sql = base::sql;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class ProfileStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("profile_store_test_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Path() const { return (dir_ / "profiles.db").string(); }
  std::filesystem::path dir_;
};

MATCHER_P4(CommIs, collective, group, bytes, seconds, "") {
  return arg.collective == collective && arg.group_size == group && arg.bytes == bytes &&
         arg.seconds == seconds;
}

TEST_F(ProfileStoreTest, RoundTripsOpAndCommProfiles) {
  auto store = ProfileStore::Open(Path());
  ASSERT_TRUE(store.ok()) << store.status();
  ProfileKey key{"cpu-1t", "Conv", "in(f32[1,3,8,8])"};
  EXPECT_FALSE((*store)->Get(key).has_value());
  ASSERT_TRUE((*store)->Put(key, {.median_s = 1.25e-3, .spread_s = 2e-5, .repetitions = 9}).ok());
  std::optional<ProfileSample> s = (*store)->Get(key);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->median_s, 1.25e-3);
  EXPECT_EQ(s->spread_s, 2e-5);
  EXPECT_EQ(s->repetitions, 9);
  // Keys differ in every field.
  EXPECT_FALSE((*store)->Get({"cpu-4t", "Conv", key.signature}).has_value());
  EXPECT_FALSE((*store)->Get({"cpu-1t", "MatMul", key.signature}).has_value());
  EXPECT_FALSE((*store)->Get({"cpu-1t", "Conv", "other"}).has_value());
  // Put replaces.
  ASSERT_TRUE((*store)->Put(key, {.median_s = 2e-3, .spread_s = 0, .repetitions = 3}).ok());
  EXPECT_EQ((*store)->Get(key)->median_s, 2e-3);

  ASSERT_TRUE((*store)->PutComm("cpu-1t", {"AllReduce", 2, 4096, 3.5e-5}).ok());
  ASSERT_TRUE((*store)->PutComm("cpu-1t", {"AllGather", 2, 65536, 1e-4}).ok());
  ASSERT_TRUE((*store)->PutComm("cpu-1t", {"AllReduce", 2, 1024, 2e-5}).ok());
  ASSERT_TRUE((*store)->PutComm("cpu-1t", {"AllReduce", 2, 4096, 3e-5}).ok());  // replaces
  ASSERT_TRUE((*store)->PutComm("gpu", {"AllReduce", 8, 4096, 1e-6}).ok());
  EXPECT_THAT((*store)->GetComm("cpu-1t"),
              ElementsAre(CommIs("AllGather", 2, 65536, 1e-4), CommIs("AllReduce", 2, 1024, 2e-5),
                          CommIs("AllReduce", 2, 4096, 3e-5)));
  EXPECT_TRUE((*store)->GetComm("none").empty());
}

TEST_F(ProfileStoreTest, RejectsBadSamples) {
  auto store = ProfileStore::Open(Path());
  ASSERT_TRUE(store.ok());
  absl::Status s = (*store)->Put({"cpu-1t", "Relu", "x"}, {.median_s = -1, .repetitions = 1});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("Relu"));
  EXPECT_EQ((*store)->Put({"", "Relu", "x"}, {.median_s = 1, .repetitions = 1}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*store)->PutComm("cpu-1t", {"AllReduce", 0, 4, 1.0}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*store)->Generation(), 0);
}

TEST_F(ProfileStoreTest, FileIsInWalModeWithSchemaVersion2) {
  ASSERT_TRUE(ProfileStore::Open(Path()).ok());
  auto db = sql::Database::Open(Path(), {.wal = false});
  ASSERT_TRUE(db.ok());
  // WAL is persistent in the file: a plain connection sees it.
  EXPECT_EQ(*db->JournalMode(), "wal");
  EXPECT_EQ(*sql::SchemaVersion(*db), 2);
  auto tables = db->Prepare("SELECT group_concat(name) FROM (SELECT name FROM sqlite_master"
                            " WHERE type='table' ORDER BY name)");
  ASSERT_TRUE(*tables->Step());
  EXPECT_EQ(tables->ColumnText(0),
            "comm_profiles,gnn_meta,gnn_predictions,gnn_samples,meta,op_profiles,schema_version");
}

TEST_F(ProfileStoreTest, MigratesAnEmptyFileAndReopensWithData) {
  // An existing zero-byte file (as `touch` leaves) is a valid empty database.
  { std::ofstream touch(Path()); }
  ASSERT_EQ(std::filesystem::file_size(Path()), 0u);
  {
    auto store = ProfileStore::Open(Path());
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->Put({"cpu-1t", "Relu", "s"}, {.median_s = 1e-6, .repetitions = 5}).ok());
    EXPECT_EQ((*store)->Generation(), 1);
  }
  auto again = ProfileStore::Open(Path());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->Get({"cpu-1t", "Relu", "s"})->median_s, 1e-6);
  EXPECT_EQ((*again)->Generation(), 1);
  auto db = sql::Database::Open(Path());
  auto count = db->Prepare("SELECT COUNT(*) FROM schema_version");
  ASSERT_TRUE(*count->Step());
  EXPECT_EQ(count->ColumnInt64(0), 2);  // migrations 1 and 2 ran once each

  // A file from a newer schema is refused rather than misread.
  ASSERT_TRUE(db->Execute("INSERT INTO schema_version VALUES(3, 0)").ok());
  auto newer = ProfileStore::Open(Path());
  EXPECT_EQ(newer.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(ProfileStoreTest, GenerationCountsEveryWriteAcrossConnections) {
  auto a = ProfileStore::Open(Path());
  auto b = ProfileStore::Open(Path());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ((*a)->Generation(), 0);
  ASSERT_TRUE((*a)->Put({"cpu-1t", "Relu", "s"}, {.median_s = 1e-6, .repetitions = 5}).ok());
  EXPECT_EQ((*a)->Generation(), 1);
  ASSERT_TRUE((*a)->Put({"cpu-1t", "Relu", "s"}, {.median_s = 2e-6, .repetitions = 5}).ok());
  EXPECT_EQ((*a)->Generation(), 2);
  ASSERT_TRUE((*b)->PutComm("cpu-1t", {"AllReduce", 2, 8, 1e-5}).ok());
  EXPECT_EQ((*a)->Generation(), 3);  // b's write is visible through a
  EXPECT_EQ((*b)->Get({"cpu-1t", "Relu", "s"})->median_s, 2e-6);
}

TEST_F(ProfileStoreTest, ConcurrentPutsAllLand) {
  auto store = ProfileStore::Open(Path());
  ASSERT_TRUE(store.ok());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i) {
        ProfileKey k{"cpu-1t", "Add", std::to_string(t * 100 + i)};
        EXPECT_TRUE((*store)->Put(k, {.median_s = 1.0 * i, .repetitions = 1}).ok());
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ((*store)->Generation(), 100);
  EXPECT_EQ((*store)->Get({"cpu-1t", "Add", "324"})->median_s, 24.0);
}

constexpr char kMatMuls[] = R"(graph "g"
tensor a f32[32,64] input
tensor w f32[64,16] parameter
tensor y f32[32,16] activation
tensor b f32[32,64] input
tensor v f32[64,16] parameter
tensor z f32[32,16] activation
tensor z2 f32[32,16] activation
tensor c f32[8,64] input
tensor u f32[8,16] activation
tensor h f16[32,64] input
tensor hz f16[32,16] activation
tensor hw f16[64,16] parameter
op first MatMul (a, w) -> (y) {transB=0}
op renamed_second MatMul (b, v) -> (z) {transB=0}
op smaller MatMul (c, w) -> (u) {transB=0}
op other_attr MatMul (b, v) -> (z2) {transB=1}
op half MatMul (h, hw) -> (hz) {transB=0}
)";

TEST(OpSignatureTest, EqualForRenamedOpsAndDifferentForShapesDtypesAttrs) {
  auto g = graph::ParseText(kMatMuls);
  ASSERT_TRUE(g.ok()) << g.status();
  std::string first = OpSignature(*g, 0);
  EXPECT_EQ(first, "in(f32[32,64],f32[64,16])out(f32[32,16]){transB=0}");
  EXPECT_EQ(OpSignature(*g, 1), first);
  EXPECT_NE(OpSignature(*g, 2), first);
  EXPECT_EQ(OpSignature(*g, 2), "in(f32[8,64],f32[64,16])out(f32[8,16]){transB=0}");
  EXPECT_EQ(OpSignature(*g, 3), "in(f32[32,64],f32[64,16])out(f32[32,16]){transB=1}");
  EXPECT_EQ(OpSignature(*g, 4), "in(f16[32,64],f16[64,16])out(f16[32,16]){transB=0}");
}

TEST(OpSignatureTest, AttributesAreSortedAndExact) {
  graph::Graph g("attrs");
  auto x = g.AddTensor("x", {1, 2}, graph::DType::kF32, graph::TensorRole::kInput);
  auto y = g.AddTensor("y", {1, 2}, graph::DType::kF32, graph::TensorRole::kActivation);
  graph::OpId op = g.AddOp("n", "LeakyRelu", {x}, {y},
                           {{"zeta", std::string("q\"x")},
                            {"alpha", 0.1},
                            {"pads", std::vector<int64_t>{0, 1}},
                            {"scales", std::vector<double>{0.5}}});
  EXPECT_EQ(OpSignature(g, op),
            "in(f32[1,2])out(f32[1,2]){alpha=0.10000000000000001;pads=[0,1];scales=[0.5];"
            "zeta=\"q\\\"x\"}");
}

}  // namespace
}  // namespace braid::costmodel
