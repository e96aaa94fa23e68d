#include "base/sqlite.h"

#include <filesystem>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace braid::base::sql {
namespace {

using ::testing::HasSubstr;

class SqliteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("sqlite_test_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Path() const { return (dir_ / "t.db").string(); }
  std::filesystem::path dir_;
};

TEST_F(SqliteTest, OpensInWalModeAndRoundTripsValues) {
  absl::StatusOr<Database> db = Database::Open(Path());
  ASSERT_TRUE(db.ok()) << db.status();
  EXPECT_EQ(*db->JournalMode(), "wal");
  ASSERT_TRUE(db->Execute("CREATE TABLE t(i INTEGER, d REAL, s TEXT)").ok());
  absl::StatusOr<Statement> ins = db->Prepare("INSERT INTO t VALUES(?, ?, ?)");
  ASSERT_TRUE(ins.ok()) << ins.status();
  ins->BindInt64(1, int64_t{1} << 40);
  ins->BindDouble(2, 0.1 + 0.2);
  ins->BindText(3, std::string("a\0b", 3));
  ASSERT_TRUE(ins->Run().ok());
  ins->Reset();
  ins->BindInt64(1, -7);
  ins->BindNull(2);
  ins->BindText(3, "x");
  ASSERT_TRUE(ins->Run().ok());
  EXPECT_EQ(db->Changes(), 1);
  EXPECT_EQ(db->LastInsertRowId(), 2);

  absl::StatusOr<Statement> sel = db->Prepare("SELECT i, d, s FROM t ORDER BY rowid");
  ASSERT_TRUE(sel.ok());
  ASSERT_TRUE(*sel->Step());
  EXPECT_EQ(sel->ColumnInt64(0), int64_t{1} << 40);
  EXPECT_EQ(sel->ColumnDouble(1), 0.1 + 0.2);
  EXPECT_EQ(sel->ColumnText(2), std::string("a\0b", 3));
  ASSERT_TRUE(*sel->Step());
  EXPECT_EQ(sel->ColumnInt64(0), -7);
  EXPECT_TRUE(sel->ColumnIsNull(1));
  EXPECT_FALSE(*sel->Step());
}

TEST_F(SqliteTest, ErrorsCarryTheSqlAndCode) {
  absl::StatusOr<Database> db = Database::Open(Path());
  ASSERT_TRUE(db.ok());
  absl::StatusOr<Statement> bad = db->Prepare("SELEKT 1");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("SELEKT 1"));
  ASSERT_TRUE(db->Execute("CREATE TABLE u(k INTEGER PRIMARY KEY)").ok());
  ASSERT_TRUE(db->Execute("INSERT INTO u VALUES(1)").ok());
  absl::Status dup = db->Execute("INSERT INTO u VALUES(1)");
  EXPECT_EQ(dup.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(dup.message()), HasSubstr("UNIQUE constraint failed"));
  // A bind to a parameter that does not exist surfaces at Step().
  absl::StatusOr<Statement> st = db->Prepare("SELECT ?");
  ASSERT_TRUE(st.ok());
  st->BindInt64(2, 1);
  EXPECT_EQ(st->Step().status().code(), absl::StatusCode::kInvalidArgument);
  auto missing = Database::Open((dir_ / "nope" / "x.db").string());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

TEST_F(SqliteTest, TransactionRollsBackWhenNotCommitted) {
  absl::StatusOr<Database> db = Database::Open(Path());
  ASSERT_TRUE(db.ok());
  ASSERT_TRUE(db->Execute("CREATE TABLE t(a INTEGER)").ok());
  {
    Transaction txn(*db);
    ASSERT_TRUE(txn.Begin().ok());
    ASSERT_TRUE(db->Execute("INSERT INTO t VALUES(1)").ok());
  }
  {
    Transaction txn(*db);
    ASSERT_TRUE(txn.Begin().ok());
    ASSERT_TRUE(db->Execute("INSERT INTO t VALUES(2)").ok());
    ASSERT_TRUE(txn.Commit().ok());
  }
  absl::StatusOr<Statement> sel = db->Prepare("SELECT group_concat(a) FROM t");
  ASSERT_TRUE(*sel->Step());
  EXPECT_EQ(sel->ColumnText(0), "2");
}

constexpr Migration kV1[] = {{1, "CREATE TABLE a(x INTEGER); INSERT INTO a VALUES(10);"}};
constexpr Migration kV2[] = {{1, "CREATE TABLE a(x INTEGER); INSERT INTO a VALUES(10);"},
                             {2, "ALTER TABLE a ADD COLUMN y INTEGER DEFAULT 5;"}};

TEST_F(SqliteTest, MigratesStepByStepAndOnlyOnce) {
  {
    absl::StatusOr<Database> db = Database::Open(Path());
    ASSERT_TRUE(db.ok());
    EXPECT_EQ(*SchemaVersion(*db), 0);
    ASSERT_TRUE(Migrate(*db, kV1).ok());
    EXPECT_EQ(*SchemaVersion(*db), 1);
    // Re-running is a no-op: the INSERT of migration 1 does not run again.
    ASSERT_TRUE(Migrate(*db, kV1).ok());
  }
  absl::StatusOr<Database> db = Database::Open(Path());
  ASSERT_TRUE(db.ok());
  ASSERT_TRUE(Migrate(*db, kV2).ok());
  EXPECT_EQ(*SchemaVersion(*db), 2);
  absl::StatusOr<Statement> sel = db->Prepare("SELECT COUNT(*), SUM(x), SUM(y) FROM a");
  ASSERT_TRUE(*sel->Step());
  EXPECT_EQ(sel->ColumnInt64(0), 1);
  EXPECT_EQ(sel->ColumnInt64(1), 10);
  EXPECT_EQ(sel->ColumnInt64(2), 5);
  // An older build refuses a newer file.
  absl::Status older = Migrate(*db, kV1);
  EXPECT_EQ(older.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(older.message()), HasSubstr("schema version 2"));
}

TEST_F(SqliteTest, FailedMigrationLeavesTheOldVersion) {
  absl::StatusOr<Database> db = Database::Open(Path());
  ASSERT_TRUE(db.ok());
  ASSERT_TRUE(Migrate(*db, kV1).ok());
  constexpr Migration kBroken[] = {kV1[0], {2, "CREATE TABLE b(x); NOT SQL;"}};
  absl::Status s = Migrate(*db, kBroken);
  EXPECT_THAT(std::string(s.message()), HasSubstr("migration 2"));
  EXPECT_EQ(*SchemaVersion(*db), 1);
  // Table b was rolled back with the failed migration.
  EXPECT_FALSE(db->Prepare("SELECT * FROM b").ok());
  constexpr Migration kGap[] = {{1, ""}, {3, ""}};
  EXPECT_EQ(Migrate(*db, kGap).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace braid::base::sql
