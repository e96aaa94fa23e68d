// How every braid program reads its command line (CLI11), and its
// parse-only mode. With BRAID_PARSE_ONLY=1 in the environment a program
// parses its arguments as usual -- an unknown flag or subcommand, a missing
// required option or a value its validators refuse still fails with exit
// code 2 -- and then exits 0 without doing anything: no file read or
// written, no process started, nothing printed. The benchmark document's
// checker (tests/benchmarks_commands_test.py) runs every command that
// BENCHMARKS.md names this way, so a renamed or removed flag fails CI
// instead of leaving a recorded figure that no command reproduces.
//
//   int main(int argc, char** argv) {
//     CLI::App app{"braid-foo: what it measures"};
//     app.add_option("--model", model)->required();
//     if (std::optional<int> done = braid::base::ParseCommandLine(app, argc, argv)) return *done;
//     return Run(model);  // not reached with BRAID_PARSE_ONLY=1
//   }
#ifndef BRAID_BASE_COMMAND_LINE_H_
#define BRAID_BASE_COMMAND_LINE_H_

#include <optional>
#include <vector>

#include "CLI/CLI.hpp"

namespace braid::base {

// The environment variable that turns parse-only mode on.
inline constexpr char kParseOnlyEnv[] = "BRAID_PARSE_ONLY";

// True when $BRAID_PARSE_ONLY is set to anything but "" or "0".
bool ParseOnlyRequested();

// Parses argv into `app`. Returns std::nullopt when the program goes on to
// run the command; otherwise the exit code to return at once:
//   - 0 after --help (CLI11 printed it);
//   - 2 for a command line CLI11 refused (it printed why);
//   - 0 in parse-only mode once the command line was accepted.
//
// In parse-only mode the final callback of `app` and of every subcommand --
// where CLI11 programs run their command -- is removed before parsing, so
// nothing runs; parse-complete callbacks, which validate, still do. The
// exceptions are `hand_offs`: subcommands that pass their arguments on
// unparsed to another braid program (which parses them in parse-only mode
// itself), such as `braid`'s stand-ins for braid-torch's commands; their
// callbacks run.
//
// BRAID_PARSE_ONLY=@FILE parses many command lines in one process (the
// benchmark document's checker uses it: a program that links LibTorch takes
// about a second to start). FILE holds the command lines without the
// program's name, one argument per line, a blank line after each; every one
// is parsed in turn (CLI::App::clear between them) and stdout gets one line
// per command line, "N ok" or "N error: WHY" (N counting from 1). The exit
// code is 0 when all parsed, else 2. Hand-offs do not run in this mode: give
// each command line to the program that parses it (braid-torch, for the
// commands `braid` hands over).
std::optional<int> ParseCommandLine(CLI::App& app, int argc, char** argv,
                                    const std::vector<const CLI::App*>& hand_offs = {});

}  // namespace braid::base

#endif  // BRAID_BASE_COMMAND_LINE_H_
