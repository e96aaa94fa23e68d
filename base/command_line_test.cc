#include "base/command_line.h"

#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace braid::base {
namespace {

// argv for CLI11 from a list of words (argv[0] first).
class Argv {
 public:
  explicit Argv(std::vector<std::string> words) : words_(std::move(words)) {
    for (std::string& w : words_) ptrs_.push_back(w.data());
  }
  int argc() const { return static_cast<int>(ptrs_.size()); }
  char** argv() { return ptrs_.data(); }

 private:
  std::vector<std::string> words_;
  std::vector<char*> ptrs_;
};

// A program with a `run` subcommand (required --model, optional --reps) and
// a `pass` subcommand that hands its arguments on unparsed, as `braid`'s
// stand-ins for braid-torch do.
struct Program {
  CLI::App app{"test program"};
  CLI::App* run = nullptr;
  CLI::App* pass = nullptr;
  std::string model;
  int reps = 1;
  int ran = 0;
  int passed = 0;

  Program() {
    app.require_subcommand(1);
    run = app.add_subcommand("run", "runs");
    run->add_option("--model", model)->required();
    run->add_option("--reps", reps)->check(CLI::Range(1, 100));
    run->callback([this] { ++ran; });
    pass = app.add_subcommand("pass", "hands over");
    pass->allow_extras();
    pass->prefix_command();
    pass->callback([this] { ++passed; });
  }
  std::optional<int> Parse(std::vector<std::string> words) {
    words.insert(words.begin(), "prog");
    Argv a(std::move(words));
    return ParseCommandLine(app, a.argc(), a.argv(), {pass});
  }
};

class CommandLineTest : public ::testing::Test {
 protected:
  void TearDown() override { unsetenv(kParseOnlyEnv); }
  static void ParseOnly(const char* value) { setenv(kParseOnlyEnv, value, 1); }
};

TEST_F(CommandLineTest, WithoutTheVariableTheCommandRuns) {
  Program p;
  EXPECT_EQ(p.Parse({"run", "--model", "m", "--reps", "3"}), std::nullopt);
  EXPECT_EQ(p.ran, 1);
  EXPECT_EQ(p.reps, 3);
  EXPECT_FALSE(ParseOnlyRequested());
}

TEST_F(CommandLineTest, ParseOnlyAcceptsTheCommandLineAndRunsNothing) {
  ParseOnly("1");
  Program p;
  EXPECT_EQ(p.Parse({"run", "--model", "m", "--reps", "3"}), std::optional<int>(0));
  EXPECT_EQ(p.ran, 0);
  EXPECT_EQ(p.model, "m");  // parsed, not run
}

TEST_F(CommandLineTest, ParseOnlyStillRefusesWhatTheParserRefuses) {
  ParseOnly("1");
  for (const std::vector<std::string>& words : std::vector<std::vector<std::string>>{
           {"run", "--model", "m", "--bogus-flag"},  // unknown flag
           {"run"},                                  // required option missing
           {"run", "--model", "m", "--reps", "0"},   // validator
           {"run", "--model", "m", "--reps", "x"},   // not a number
           {"nosuchcommand"},                        // unknown subcommand
           {}}) {                                    // no subcommand
    Program p;
    EXPECT_EQ(p.Parse(words), std::optional<int>(2)) << ::testing::PrintToString(words);
    EXPECT_EQ(p.ran, 0);
  }
}

TEST_F(CommandLineTest, HelpExitsZeroInEitherMode) {
  Program p;
  EXPECT_EQ(p.Parse({"--help"}), std::optional<int>(0));
  ParseOnly("1");
  Program q;
  EXPECT_EQ(q.Parse({"run", "--help"}), std::optional<int>(0));
  EXPECT_EQ(q.ran, 0);
}

TEST_F(CommandLineTest, HandOffsStillRunSoTheNextProgramParses) {
  ParseOnly("1");
  Program p;
  EXPECT_EQ(p.Parse({"pass", "--anything", "goes"}), std::optional<int>(0));
  EXPECT_EQ(p.passed, 1);
  EXPECT_EQ(p.ran, 0);
}

TEST_F(CommandLineTest, ParseCompleteValidationStillRuns) {
  ParseOnly("1");
  Program p;
  p.run->parse_complete_callback([&p] {
    if (p.model == "forbidden") throw CLI::ValidationError("--model", "forbidden");
  });
  EXPECT_EQ(p.Parse({"run", "--model", "forbidden"}), std::optional<int>(2));
  Program q;
  EXPECT_EQ(q.Parse({"run", "--model", "fine"}), std::optional<int>(0));
}

// The CLI's commands keep their options' variables alive in the callback
// (a captured shared_ptr): parse-only mode must not destroy the callback
// before the parse writes to them.
TEST_F(CommandLineTest, ParseOnlyKeepsWhatACallbackOwnsAliveThroughTheParse) {
  ParseOnly("1");
  CLI::App app{"test program"};
  auto owned = std::make_shared<std::string>();
  const std::weak_ptr<std::string> watch = owned;
  app.add_option("--model", *owned)->check([watch](const std::string&) {
    return watch.expired() ? std::string("destroyed before the parse") : std::string();
  });
  app.callback([owned] {});
  owned.reset();  // the callback holds the last reference
  Argv a({"prog", "--model", "m"});
  EXPECT_EQ(ParseCommandLine(app, a.argc(), a.argv()), std::optional<int>(0));
}

// BRAID_PARSE_ONLY=@FILE: one process parses many command lines and says
// which it refused.
TEST_F(CommandLineTest, ParseOnlyFromAFileParsesEveryCommandLine) {
  const std::string path = ::testing::TempDir() + "/parse_only_lines.txt";
  std::ofstream(path) << "run\n--model\nm\n\n"               // 1 ok
                      << "run\n--model\nm\n--bogus-flag\n\n"  // 2 unknown flag
                      << "run\n\n"                             // 3 --model missing
                      << "pass\n--anything\n\n"               // 4 ok, not handed over
                      << "run\n--help\n\n"                    // 5 ok
                      << "run\n--model\nm\n--reps\n7\n";     // 6 ok, no blank line at the end
  setenv(kParseOnlyEnv, ("@" + path).c_str(), 1);
  Program p;
  ::testing::internal::CaptureStdout();
  const std::optional<int> rc = p.Parse({});
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, std::optional<int>(2));
  EXPECT_EQ(p.ran, 0);
  EXPECT_EQ(p.passed, 0);
  EXPECT_EQ(p.reps, 7);
  EXPECT_THAT(out, ::testing::MatchesRegex("1 ok\n2 error: [^\n]*bogus-flag[^\n]*\n3 error: "
                                          "[^\n]*model[^\n]*\n4 ok\n5 ok\n6 ok\n"));
  std::ofstream(path) << "run\n--model\nm\n\n";
  Program q;
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(q.Parse({}), std::optional<int>(0));
  EXPECT_EQ(::testing::internal::GetCapturedStdout(), "1 ok\n");
  setenv(kParseOnlyEnv, "@/nonexistent/lines.txt", 1);
  Program r;
  EXPECT_EQ(r.Parse({}), std::optional<int>(2));
}

TEST_F(CommandLineTest, ZeroOrEmptyTurnsItOff) {
  for (const char* off : {"0", ""}) {
    ParseOnly(off);
    EXPECT_FALSE(ParseOnlyRequested()) << "'" << off << "'";
    Program p;
    EXPECT_EQ(p.Parse({"run", "--model", "m"}), std::nullopt);
    EXPECT_EQ(p.ran, 1);
  }
  ParseOnly("yes");
  EXPECT_TRUE(ParseOnlyRequested());
}

}  // namespace
}  // namespace braid::base
