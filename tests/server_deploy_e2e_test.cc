// braid-server as deployments run it, with real processes on loopback:
//  - one server per database and per port: a second braid-server on the same
//    SQLite file, or on the same port, refuses to start (exit code != 0,
//    naming the holder) and the first keeps serving; a server killed with -9
//    leaves no lock behind;
//  - TLS with the certificates of deploy/make-tls.sh: `braid --tls-ca`
//    connects, a plaintext client and a client trusting another CA are
//    refused.
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "proto/strategy_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/e2e_util.h"

namespace braid {
namespace {

using ::testing::HasSubstr;

constexpr char kClientToken[] = "deploy-client";
constexpr char kWorkerToken[] = "deploy-worker";
// Generous: the suite runs on loaded machines; every wait ends as soon as its
// condition holds.
constexpr double kStartS = 90;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::unique_ptr<e2e::Process> Server(const std::string& log, int port, const std::string& db,
                                     std::vector<std::string> extra = {}) {
  std::vector<std::string> argv = {BRAID_SERVER_BIN, "--listen", absl::StrCat("127.0.0.1:", port),
                                   "--db", db, "--client-token", kClientToken,
                                   "--worker-token", kWorkerToken};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return std::make_unique<e2e::Process>(argv, log);
}

std::unique_ptr<client::StrategyClient> Client(int port, const std::string& ca_path = "") {
  client::ClientOptions o;
  o.address = absl::StrCat("127.0.0.1:", port);
  o.token = kClientToken;
  o.rpc_timeout_s = 5;
  if (!ca_path.empty()) {
    o.tls = true;
    o.tls_root_certs_pem = ReadFile(ca_path);
  }
  return *client::StrategyClient::Create(o);
}

// Waits until `server` answers ListJobs through `c`; false when it exits or
// the time runs out.
bool WaitUntilServing(e2e::Process& server, client::StrategyClient& c) {
  return e2e::WaitFor([&] { return !server.Alive() || c.ListJobs(1).ok(); }, kStartS) &&
         server.Alive();
}

// Waits for a process that should refuse to start; its exit code, -1 when it
// still runs or was killed by a signal.
int ExitCode(e2e::Process& p) {
  if (!e2e::WaitFor([&] { return !p.Alive(); }, kStartS)) return -1;
  return WIFEXITED(p.exit_status()) ? WEXITSTATUS(p.exit_status()) : -1;
}

TEST(ServerDeployE2eTest, OneServerPerDatabaseAndPort) {
  const std::string dir = e2e::TempDir("deploy_exclusive");
  const std::string db = dir + "/braid.db";
  const int port = e2e::FreePort();
  auto first = Server(dir + "/first.log", port, db);
  std::unique_ptr<client::StrategyClient> c = Client(port);
  ASSERT_TRUE(WaitUntilServing(*first, *c)) << ReadFile(dir + "/first.log");

  // The same database on another port.
  auto same_db = Server(dir + "/same_db.log", e2e::FreePort(), db);
  const int same_db_code = ExitCode(*same_db);
  const std::string same_db_log = ReadFile(dir + "/same_db.log");
  EXPECT_GT(same_db_code, 0) << same_db_log;
  EXPECT_THAT(same_db_log, HasSubstr("is served by another process"));
  EXPECT_THAT(same_db_log, HasSubstr(absl::StrCat("PID ", first->pid())));
  EXPECT_THAT(same_db_log, HasSubstr(db + ".lock"));

  // The same port with another database.
  auto same_port = Server(dir + "/same_port.log", port, dir + "/other.db");
  const int same_port_code = ExitCode(*same_port);
  const std::string same_port_log = ReadFile(dir + "/same_port.log");
  EXPECT_GT(same_port_code, 0) << same_port_log;
  EXPECT_THAT(same_port_log, HasSubstr(absl::StrCat("cannot listen on 127.0.0.1:", port)));

  // The first server still serves, on its port, every connection.
  EXPECT_TRUE(first->Alive());
  for (int i = 0; i < 4; ++i) {
    absl::StatusOr<std::vector<v1::JobStatus>> jobs = Client(port)->ListJobs(1);
    EXPECT_TRUE(jobs.ok()) << jobs.status();
  }

  // A server killed with -9 leaves no lock: the next one starts on the file.
  first->Kill(SIGKILL);
  auto next = Server(dir + "/next.log", port, db);
  c = Client(port);
  EXPECT_TRUE(WaitUntilServing(*next, *c)) << ReadFile(dir + "/next.log");
}

TEST(ServerDeployE2eTest, TlsWithTheMakeTlsCertificates) {
  const std::string dir = e2e::TempDir("deploy_tls");
  const std::string script = std::string(BRAID_SOURCE_DIR) + "/deploy/make-tls.sh";
  e2e::CommandResult made = e2e::RunCommand("bash " + script + " " + dir + "/tls 2>&1");
  ASSERT_EQ(made.exit_code, 0) << made.out;
  e2e::CommandResult other = e2e::RunCommand("bash " + script + " " + dir + "/other 2>&1");
  ASSERT_EQ(other.exit_code, 0) << other.out;
  // The script never overwrites a deployment's key.
  e2e::CommandResult again = e2e::RunCommand("bash " + script + " " + dir + "/tls 2>&1");
  EXPECT_NE(again.exit_code, 0);
  EXPECT_THAT(again.out, HasSubstr("not overwriting"));

  const int port = e2e::FreePort();
  auto server = Server(dir + "/server.log", port, dir + "/braid.db",
                       {"--tls-cert", dir + "/tls/tls.crt", "--tls-key", dir + "/tls/tls.key"});
  std::unique_ptr<client::StrategyClient> tls = Client(port, dir + "/tls/ca.crt");
  ASSERT_TRUE(WaitUntilServing(*server, *tls)) << ReadFile(dir + "/server.log");
  EXPECT_THAT(ReadFile(dir + "/server.log"), HasSubstr(", TLS)"));

  // The CLI with --tls-ca, as a user runs it.
  const std::string cli = absl::StrCat(BRAID_BIN, " jobs --server 127.0.0.1:", port, " --token ",
                                       kClientToken);
  e2e::CommandResult with_ca = e2e::RunCommand(cli + " --tls-ca " + dir + "/tls/ca.crt 2>&1");
  EXPECT_EQ(with_ca.exit_code, 0) << with_ca.out;
  e2e::CommandResult plaintext = e2e::RunCommand(cli + " 2>&1");
  EXPECT_NE(plaintext.exit_code, 0) << plaintext.out;
  e2e::CommandResult wrong_ca = e2e::RunCommand(cli + " --tls-ca " + dir + "/other/ca.crt 2>&1");
  EXPECT_NE(wrong_ca.exit_code, 0) << wrong_ca.out;

  // The same through the client library: only the deployment's CA connects.
  absl::StatusOr<std::vector<v1::JobStatus>> plain = Client(port)->ListJobs(1);
  EXPECT_FALSE(plain.ok());
  EXPECT_EQ(plain.status().code(), absl::StatusCode::kUnavailable) << plain.status();
  absl::StatusOr<std::vector<v1::JobStatus>> foreign = Client(port, dir + "/other/ca.crt")->ListJobs(1);
  EXPECT_FALSE(foreign.ok());
  EXPECT_EQ(foreign.status().code(), absl::StatusCode::kUnavailable) << foreign.status();
  absl::StatusOr<std::vector<v1::JobStatus>> trusted = tls->ListJobs(1);
  EXPECT_TRUE(trusted.ok()) << trusted.status();
  EXPECT_TRUE(server->Alive());
}

}  // namespace
}  // namespace braid
