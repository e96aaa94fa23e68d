// CliMain: the command line both executables share (client/cli.h), and the
// stand-ins through which `braid` hands LibTorch commands to braid-torch.
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/command_line.h"
#include "client/cli.h"
#include "costmodel/cluster.h"
#include "costmodel/gnn_store.h"
#include "glog/logging.h"
#include "search/parallel_plan.h"

namespace braid::client {
namespace {

std::string TorchBinaryPath() {
  if (const char* p = std::getenv("BRAID_TORCH_BIN"); p != nullptr && *p != '\0') return p;
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "braid-torch";
  return (self.parent_path() / "braid-torch").string();
}

// A command of braid-torch as `braid` knows it: its name and description
// for the help, and every argument after it passed through unparsed (its
// --help included), so braid-torch parses, documents and rejects them.
// Returns it: with BRAID_PARSE_ONLY it still hands over, and braid-torch
// parses (base/command_line.h).
const CLI::App* AddStandIn(CLI::App& parent, const std::string& name, const std::string& about,
                           CommandResult& result, const CliContext& ctx) {
  CLI::App* c = parent.add_subcommand(name, about);
  c->set_help_flag();
  c->allow_extras();
  c->prefix_command();
  c->callback([&result, ctx] { result.exit_code = RunInTorchBinary(ctx); });
  return c;
}

// The build tree `braid` runs from (<build>/bin/braid beside
// <build>/CMakeCache.txt), as the user would type it: relative to the
// working directory when below it. Empty for an installed braid.
std::string BuildTreeOfSelf() {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  const std::filesystem::path build = self.parent_path().parent_path();
  if (!std::filesystem::is_regular_file(build / "CMakeCache.txt", ec)) return "";
  const std::filesystem::path rel = std::filesystem::relative(build, ec);
  if (!ec && !rel.empty() && *rel.begin() != "..") return rel.string();
  return build.string();
}

}  // namespace

bool EmbeddedSearchNeedsTorch(const costmodel::ClusterSpec& cluster) {
  if (cluster.IsCpu() || cluster.device.kind == costmodel::LocalCpuDeviceKind()) return true;
  return costmodel::GnnCheckpointPathFor(cluster.device.kind).has_value();
}

int RunInTorchBinary(const CliContext& ctx) {
  const std::string path = TorchBinaryPath();
  std::cout.flush();
  std::cerr.flush();
  // argv[0] stays: braid-torch's help and usage lines name `braid`.
  execv(path.c_str(), ctx.argv);
  const int err = errno;
  // Beside braid in a build tree: a build of the target braid alone.
  const char* env = std::getenv("BRAID_TORCH_BIN");
  if (err == ENOENT && (env == nullptr || *env == '\0')) {
    if (const std::string build = BuildTreeOfSelf(); !build.empty()) {
      std::cerr << "braid: braid-torch is not built: cmake --build " << build
                << " --target braid-torch (this command needs the LibTorch half of the CLI)\n";
      return 1;
    }
  }
  std::cerr << "braid: cannot start " << path << " (" << std::strerror(err)
            << "): this command needs braid-torch, the LibTorch half of the CLI, installed beside "
               "braid (or named by BRAID_TORCH_BIN)\n";
  return 1;
}

int CliMain(int argc, char** argv, const TorchCommands* torch) {
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  FLAGS_minloglevel = 1;  // warnings and above
  CLI::App app{"braid: joint fusion, parallelization and overlap planner for distributed training"};
  app.require_subcommand(1);
  CommandResult result;
  CliContext ctx{argc, argv, torch != nullptr ? torch->embedded_worker : nullptr};
  RegisterGraphCommands(app, result);
  RegisterSimulateCommand(app, result);
  RegisterPlanCommands(app, result, ctx);
  RegisterBenchCommands(app, result);
  std::vector<const CLI::App*> stand_ins;
  if (torch != nullptr) {
    torch->register_profile(app, result);
    torch->register_run(app, result);
    torch->register_gnn(app, result);
  } else {
    stand_ins.push_back(AddStandIn(app, "profile", kProfileAbout, result, ctx));
    stand_ins.push_back(AddStandIn(app, "run", kRunAbout, result, ctx));
    stand_ins.push_back(AddStandIn(app, "gnn", kGnnAbout, result, ctx));
  }
  RegisterServiceCommands(app, result, ctx);  // after plan and bench: extends them
  CLI::App& bench = *app.get_subcommand("bench");
  if (torch != nullptr) {
    torch->register_service_bench(bench, result);
  } else {
    stand_ins.push_back(AddStandIn(bench, "service", kBenchServiceAbout, result, ctx));
  }
  // A stand-in's exit code (braid-torch could not be started) counts in
  // parse-only mode too.
  if (std::optional<int> done = base::ParseCommandLine(app, argc, argv, stand_ins);
      done.has_value() && *done != 0) {
    return *done;
  }
  return result.exit_code;
}

}  // namespace braid::client
