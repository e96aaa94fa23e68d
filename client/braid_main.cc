// The braid command line. See client/cli.h for the command families.
#include "CLI/CLI.hpp"
#include "client/cli.h"
#include "glog/logging.h"

int main(int argc, char** argv) {
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  FLAGS_minloglevel = 1;  // warnings and above
  CLI::App app{"braid: joint fusion, parallelization and overlap planner for distributed training"};
  app.require_subcommand(1);
  braid::client::CommandResult result;
  braid::client::RegisterGraphCommands(app, result);
  braid::client::RegisterSimulateCommand(app, result);
  braid::client::RegisterPlanCommands(app, result);
  braid::client::RegisterBenchCommands(app, result);
  braid::client::RegisterProfileCommands(app, result);
  braid::client::RegisterRunCommand(app, result);
  braid::client::RegisterServiceCommands(app, result);  // after plan and bench: extends them
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  return result.exit_code;
}
