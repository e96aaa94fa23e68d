// One server per database file and per port, in-process: StartServer holds
// "<db>.lock" for the server's life and binds its port without SO_REUSEPORT.
// (tests/server_deploy_e2e_test.cc checks the same with braid-server
// processes.)
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/server.h"

namespace braid::server {
namespace {

using ::testing::HasSubstr;

ServerOptions Options(const std::string& db, const std::string& listen = "") {
  ServerOptions o;
  o.listen = listen;
  o.db_path = db;
  o.client_token = "client";
  o.worker_token = "worker";
  o.shutdown_grace_s = 0.1;
  return o;
}

std::string TempDb(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/server_instance_" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir + "/braid.db";
}

TEST(ServerInstanceTest, ASecondServerOnTheSameDatabaseIsRefusedUntilTheFirstStops) {
  const std::string db = TempDb("db");
  absl::StatusOr<std::unique_ptr<BraidServer>> first = StartServer(Options(db));
  ASSERT_TRUE(first.ok()) << first.status();

  absl::StatusOr<std::unique_ptr<BraidServer>> second = StartServer(Options(db));
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(second.status().message()),
              HasSubstr(absl::StrCat("is served by another process (PID ", getpid())));
  EXPECT_THAT(std::string(second.status().message()), HasSubstr(db + ".lock"));
  // The refused server changed nothing: the first one still has its store.
  EXPECT_TRUE((*first)->store().ListJobs(10).ok());

  first->reset();
  absl::StatusOr<std::unique_ptr<BraidServer>> third = StartServer(Options(db));
  EXPECT_TRUE(third.ok()) << third.status();
}

TEST(ServerInstanceTest, InMemoryStoresNeverConflict) {
  absl::StatusOr<std::unique_ptr<BraidServer>> a = StartServer(Options(":memory:"));
  absl::StatusOr<std::unique_ptr<BraidServer>> b = StartServer(Options(":memory:"));
  EXPECT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(b.ok()) << b.status();
}

TEST(ServerInstanceTest, ASecondServerOnTheSamePortIsRefused) {
  absl::StatusOr<std::unique_ptr<BraidServer>> first =
      StartServer(Options(TempDb("port_a"), "127.0.0.1:0"));
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string listen = absl::StrCat("127.0.0.1:", (*first)->port());
  absl::StatusOr<std::unique_ptr<BraidServer>> second =
      StartServer(Options(TempDb("port_b"), listen));
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("cannot listen on " + listen));
}

TEST(ServerInstanceTest, ASecondServerOnTheSameHttpPortIsRefused) {
  ServerOptions a = Options(TempDb("http_a"));
  a.http_listen = "127.0.0.1:0";
  absl::StatusOr<std::unique_ptr<BraidServer>> first = StartServer(a);
  ASSERT_TRUE(first.ok()) << first.status();
  ServerOptions b = Options(TempDb("http_b"));
  b.http_listen = absl::StrCat("127.0.0.1:", (*first)->http_port());
  absl::StatusOr<std::unique_ptr<BraidServer>> second = StartServer(b);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("--http-listen: cannot listen"));
}

}  // namespace
}  // namespace braid::server
