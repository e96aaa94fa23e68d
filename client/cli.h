// The `braid` command line: each command family registers its CLI11
// subcommands here; braid_main.cc only wires them together.
//
// Exit codes: 0 success, 2 bad input (missing or corrupt model, impossible
// cluster, bad flag values) with one line on stderr naming what is wrong,
// 1 anything else.
#ifndef BRAID_CLIENT_CLI_H_
#define BRAID_CLIENT_CLI_H_

#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"

namespace braid::client {

// Where a command's result goes: the exit code and the one-line error.
struct CommandResult {
  int exit_code = 0;
};

// Prints "braid: <message>" to stderr and maps the status to an exit code:
// InvalidArgument/NotFound/OutOfRange/FailedPrecondition -> 2, others -> 1.
int ReportError(const absl::Status& s);

void RegisterGraphCommands(CLI::App& app, CommandResult& result);
void RegisterSimulateCommand(CLI::App& app, CommandResult& result);
void RegisterPlanCommands(CLI::App& app, CommandResult& result);
void RegisterProfileCommands(CLI::App& app, CommandResult& result);
void RegisterBenchCommands(CLI::App& app, CommandResult& result);
void RegisterRunCommand(CLI::App& app, CommandResult& result);
void RegisterServiceCommands(CLI::App& app, CommandResult& result);

}  // namespace braid::client

#endif  // BRAID_CLIENT_CLI_H_
