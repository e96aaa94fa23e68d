// The activator's closed rendezvous end to end, with real `braid-worker
// activate` processes on loopback (worker/activator.h,
// worker/rendezvous_store.h): a foreign process that joins without the key,
// or replays an honest rank's recorded proof, is refused and receives no
// plan byte while the honest ranks activate; a peer's refusal reason is
// printed escaped; a rank that never joins is named within --timeout-s; and
// plans too large for the world or the machine are refused naming why.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/digest.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/e2e_util.h"

namespace braid {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using Clock = std::chrono::steady_clock;

constexpr char kSecret[] = "braid-rendezvous-test-secret-0123456789";
constexpr char kModel[] = "tests/data/mlp_with_initializers.onnx";
constexpr size_t kHelloBytes = 5 + 32;             // "BRDZ1" + the server's nonce
constexpr size_t kClaimBytes = 4 + 32 + 64;        // rank, client nonce, proof (hex)
constexpr char kServing[] = "serves the rendezvous on";

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteAll(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// Blocking socket reads with a receive timeout: a foreign process's view.
int Dial(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  timeval tv{20, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  return fd;
}

std::string ReadUpTo(int fd, size_t n) {
  std::string out;
  char buf[4096];
  while (out.size() < n) {
    const ssize_t r = recv(fd, buf, std::min(sizeof(buf), n - out.size()), 0);
    if (r <= 0) break;
    out.append(buf, static_cast<size_t>(r));
  }
  return out;
}

std::string ReadToEnd(int fd) { return ReadUpTo(fd, size_t{1} << 20); }

void Send(int fd, const std::string& bytes) {
  ASSERT_EQ(send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), static_cast<ssize_t>(bytes.size()));
}

class RendezvousE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = e2e::TempDir("rendezvous");
    secret_ = dir_ + "/secret";
    WriteAll(secret_, absl::StrCat(kSecret, "\n"));
    port_ = e2e::FreePort();
  }

  // A signed tensor-parallel (overlap) plan for 2 ranks: no model to build.
  std::string OverlapPlan(const std::string& name, int64_t rows, int64_t d_model, int64_t blocks) {
    const nlohmann::json plan = {
        {"format", "braid.plan.v1"},
        {"overlap_training",
         {{"model", "mlp"}, {"rows", rows}, {"d_model", d_model}, {"d_ff", 2 * d_model},
          {"heads", 4}, {"seq", 8}, {"blocks", blocks}, {"ranks", 2}, {"lr", 0.05}, {"seed", 3},
          {"methods", {"looped", "none", "looped", "none"}},
          {"predicted_step_s", 0.001}}}};
    return Sign(name, plan.dump(1) + "\n");
  }

  std::string Sign(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    WriteAll(path, text);
    WriteAll(path + ".hmac", HmacSha256Hex(kSecret, text) + "\n");
    return path;
  }

  std::unique_ptr<e2e::Process> StartRank(int rank, const std::string& plan, double timeout_s,
                                          const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv = {BRAID_WORKER_BIN, "activate", "--rank", absl::StrCat(rank),
                                     "--world-size", "2", "--rendezvous",
                                     absl::StrCat("127.0.0.1:", port_), "--timeout-s",
                                     absl::StrCat(timeout_s), "--plan", plan, "--secret-file",
                                     secret_, "--warmup", "1", "--iterations", "2"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return std::make_unique<e2e::Process>(argv, Log(rank));
  }

  std::string Log(int rank) const { return absl::StrCat(dir_, "/rank", rank, ".log"); }

  // Waits for `p` to exit; its exit code (-1: killed or still running).
  static int Finish(e2e::Process& p, double seconds = 120) {
    EXPECT_TRUE(e2e::WaitFor([&] { return !p.Alive(); }, seconds)) << "a rank did not finish";
    return WIFEXITED(p.exit_status()) ? WEXITSTATUS(p.exit_status()) : -1;
  }

  bool WaitForLog(int rank, const std::string& text, double seconds = 60) {
    return e2e::WaitFor([&] { return ReadAll(Log(rank)).find(text) != std::string::npos; }, seconds);
  }

  std::string dir_, secret_;
  int port_ = 0;
};

// One honest rank's proof, recorded by a process posing as rank 0, is
// worthless later; a joiner without the key gets nothing but a nonce and a
// refusal; the honest ranks then activate as before.
TEST_F(RendezvousE2eTest, ForeignAndReplayedJoinersAreRefusedAndLearnNothing) {
  const std::string plan = OverlapPlan("overlap.json", 16, 8, 1);

  // Record: the test serves the port first and hands rank 1 a nonce.
  std::string recorded;
  {
    const int listener = socket(AF_INET, SOCK_STREAM, 0);
    const int one = 1;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port_));
    ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    ASSERT_EQ(listen(listener, 4), 0);
    std::unique_ptr<e2e::Process> honest = StartRank(1, plan, 30);
    const int fd = accept(listener, nullptr, nullptr);
    ASSERT_GE(fd, 0);
    timeval tv{30, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    Send(fd, "BRDZ1" + std::string(32, 'n'));
    recorded = ReadUpTo(fd, kClaimBytes);
    ASSERT_EQ(recorded.size(), kClaimBytes);
    Send(fd, std::string(1, '\0'));  // refused: this "rank 0" cannot check it anyway
    close(fd);
    close(listener);
    EXPECT_EQ(Finish(*honest), 1);
    EXPECT_THAT(ReadAll(Log(1)), HasSubstr("refused this rank's key proof"));
  }

  std::unique_ptr<e2e::Process> rank0 = StartRank(0, plan, 60);
  ASSERT_TRUE(WaitForLog(0, kServing)) << ReadAll(Log(0));

  // The recorded claim, replayed against rank 0's fresh nonce.
  int fd = Dial(port_);
  std::string got = ReadUpTo(fd, kHelloBytes);
  ASSERT_EQ(got.substr(0, 5), "BRDZ1");
  EXPECT_NE(got.substr(5), std::string(32, 'n'));
  Send(fd, recorded);
  EXPECT_EQ(ReadToEnd(fd), std::string(1, '\0'));  // the refusal, then the end
  close(fd);

  // A stranger without the key, claiming rank 1.
  fd = Dial(port_);
  got = ReadUpTo(fd, kHelloBytes);
  ASSERT_EQ(got.size(), kHelloBytes);
  std::string claim = {1, 0, 0, 0};
  claim += std::string(32, 'x') + HmacSha256Hex("a guessed secret of some length", "rank 1");
  Send(fd, claim);
  got += ReadToEnd(fd);
  close(fd);
  EXPECT_EQ(got.size(), kHelloBytes + 1);
  EXPECT_EQ(got.back(), '\0');
  EXPECT_THAT(got, Not(HasSubstr("overlap_training")));

  // The honest rank 1 still joins; both train the plan.
  std::unique_ptr<e2e::Process> rank1 = StartRank(1, plan, 60);
  EXPECT_EQ(Finish(*rank0), 0) << ReadAll(Log(0));
  EXPECT_EQ(Finish(*rank1), 0) << ReadAll(Log(1));
  const std::string out = ReadAll(Log(0));
  EXPECT_THAT(out, HasSubstr("verified on every rank: HMAC-SHA256"));
  EXPECT_THAT(out, HasSubstr("claiming rank 1 failed the key challenge"));
}

TEST_F(RendezvousE2eTest, ARankThatNeverJoinsIsNamedWithinTheTimeout) {
  const std::string plan = OverlapPlan("overlap.json", 16, 8, 1);
  constexpr double kTimeout = 6;
  std::unique_ptr<e2e::Process> rank0 = StartRank(0, plan, kTimeout);
  ASSERT_TRUE(WaitForLog(0, kServing)) << ReadAll(Log(0));
  const Clock::time_point serving = Clock::now();
  EXPECT_EQ(Finish(*rank0), 1);
  const double waited = std::chrono::duration<double>(Clock::now() - serving).count();
  EXPECT_LE(waited, 1.2 * kTimeout);
  EXPECT_THAT(ReadAll(Log(0)),
              HasSubstr(absl::StrCat("rank 1 of 2 did not join the rendezvous at 127.0.0.1:", port_)));
}

TEST_F(RendezvousE2eTest, ANonLoopbackRendezvousWithoutAKeyIsRefused) {
  e2e::Process rank0({BRAID_WORKER_BIN, "activate", "--rank", "0", "--world-size", "2",
                      "--rendezvous", absl::StrCat("10.255.255.1:", port_), "--job", "job-x",
                      "--server", "127.0.0.1:1", "--model", kModel},
                     Log(0));
  EXPECT_EQ(Finish(rank0), 2) << ReadAll(Log(0));
  EXPECT_THAT(ReadAll(Log(0)), HasSubstr("is not a loopback address and the ranks share no key"));
}

// A signed plan is still input: sizes the world or the machine cannot hold
// are refused by every rank, quickly, naming the field.
TEST_F(RendezvousE2eTest, OverlapPlansTooLargeForTheMachineAreRefusedNamingTheField) {
  struct Case {
    std::string name;
    int64_t rows, d_model, blocks;
    std::string expect;
  };
  for (const Case& c : {Case{"blocks.json", 16, 8, 1000000000, "blocks=1000000000 is over the limit 1024"},
                        Case{"bytes.json", int64_t{1} << 24, 65536, 1, "MiB per rank"}}) {
    const std::string plan = OverlapPlan(c.name, c.rows, c.d_model, c.blocks);
    const Clock::time_point start = Clock::now();
    std::unique_ptr<e2e::Process> r0 = StartRank(0, plan, 60), r1 = StartRank(1, plan, 60);
    EXPECT_EQ(Finish(*r0), 1) << c.name;
    EXPECT_EQ(Finish(*r1), 1) << c.name;
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 30) << c.name;
    for (int r = 0; r < 2; ++r) {
      EXPECT_THAT(ReadAll(Log(r)), HasSubstr("rank 0 refused the plan")) << c.name;
      EXPECT_THAT(ReadAll(Log(r)), HasSubstr(c.expect)) << c.name << ": " << ReadAll(Log(r));
    }
  }
}

// Data-parallel plans: `braid plan` writes one for the model (signed), then
// the test changes and re-signs it.
class DataParallelRendezvousTest : public RendezvousE2eTest {
 protected:
  static void SetUpTestSuite() {
    const std::string dir = e2e::TempDir("rendezvous_dp");
    WriteAll(dir + "/secret", kSecret);
    plan_text_ = new std::string();
    const e2e::CommandResult r = e2e::RunCommand(absl::StrCat(
        "BRAID_PLAN_SECRET_FILE=", dir, "/secret ", BRAID_BIN, " plan ", kModel,
        " --cluster cpu-local --ranks 2 --db none --budget-s 2 -o ", dir, "/plan.json 2>&1"));
    ASSERT_EQ(r.exit_code, 0) << r.out;
    *plan_text_ = ReadAll(dir + "/plan.json");
  }
  static void TearDownTestSuite() { delete plan_text_; }
  static std::string* plan_text_;
};
std::string* DataParallelRendezvousTest::plan_text_ = nullptr;

// Rank 1's model path carries terminal escapes; its refusal reason travels
// to rank 0, which prints it escaped.
TEST_F(DataParallelRendezvousTest, APeersReasonIsPrintedEscaped) {
  const std::string plan = Sign("plan.json", *plan_text_);
  const std::string evil = "tests/data/\x1b[2J\x1b]0;owned\x07.onnx";
  std::unique_ptr<e2e::Process> r0 = StartRank(0, plan, 60, {"--model", kModel});
  std::unique_ptr<e2e::Process> r1 = StartRank(1, plan, 60, {"--model", evil});
  EXPECT_EQ(Finish(*r0), 1);
  EXPECT_EQ(Finish(*r1), 1);
  const std::string out = ReadAll(Log(0));
  EXPECT_THAT(out, HasSubstr("rank 1 refused the plan"));
  EXPECT_THAT(out, HasSubstr("tests/data/\\x1b[2J\\x1b]0;owned\\x07.onnx"));
  EXPECT_EQ(out.find('\x1b'), std::string::npos) << "a raw escape reached rank 0's output";
  EXPECT_EQ(out.find('\x07'), std::string::npos);
}

TEST_F(DataParallelRendezvousTest, MoreBucketsThanTheGraphHasGradientsAreRefused) {
  nlohmann::json j = nlohmann::json::parse(*plan_text_);
  nlohmann::json buckets = nlohmann::json::array();
  for (int i = 0; i < 100000; ++i) buckets.push_back({"g"});
  j["buckets"] = buckets;
  const std::string plan = Sign("many.json", j.dump() + "\n");
  std::unique_ptr<e2e::Process> r0 = StartRank(0, plan, 60, {"--model", kModel});
  std::unique_ptr<e2e::Process> r1 = StartRank(1, plan, 60, {"--model", kModel});
  EXPECT_EQ(Finish(*r0), 1);
  EXPECT_EQ(Finish(*r1), 1);
  for (int r = 0; r < 2; ++r) {
    EXPECT_THAT(ReadAll(Log(r)), HasSubstr("rank 0 refused the plan: plan buckets: 100000 buckets of "
                                           "100000 gradients in all, but this rank's graph has "))
        << ReadAll(Log(r));
  }
}

}  // namespace
}  // namespace braid
