// The `braid` command line: each command family registers its CLI11
// subcommands here; CliMain() wires them together.
//
// Two executables serve it. `braid` (braid_main.cc) links no LibTorch and no
// CUDA library, so `braid --help`, `braid status` or `braid graph stats`
// start in milliseconds and run on hosts without the CUDA runtime. The
// commands that profile, execute or run the in-process CPU worker -- `profile`,
// `run`, `bench service` and the embedded `submit` -- live in `braid-torch`
// (braid_torch_main.cc, installed beside `braid`); `braid` lists them in its
// help like any other command and, once it has parsed one, replaces itself
// with braid-torch on the same arguments (RunInTorchBinary), so users never
// type the second name.
//
// Exit codes: 0 success, 2 bad input (missing or corrupt model, impossible
// cluster, bad flag values) with one line on stderr naming what is wrong,
// 1 anything else.
#ifndef BRAID_CLIENT_CLI_H_
#define BRAID_CLIENT_CLI_H_

#include <functional>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "client/embedded_worker.h"
#include "costmodel/cluster.h"
#include "costmodel/cost_model.h"
#include "costmodel/profile_store.h"
#include "search/parallel_plan.h"

namespace braid::client {

// Where a command's result goes: the exit code and the one-line error.
struct CommandResult {
  int exit_code = 0;
};

// Prints "braid: <message>" to stderr and maps the status to an exit code:
// InvalidArgument/NotFound/OutOfRange/FailedPrecondition -> 2, others -> 1.
int ReportError(const absl::Status& s);

// Writes `text` to `path` (truncating). InvalidArgument when it cannot be
// opened, Internal when the write fails.
absl::Status WriteFile(const std::string& path, const std::string& text);

// Writes a plan file and, when the ranks' plan secret is configured
// ($BRAID_PLAN_SECRET_FILE or $BRAID_PLAN_SECRET), its HMAC-SHA256 tag beside
// it as `<path>.hmac`: what `braid-worker activate --plan` verifies on every
// rank (worker/activator.h). `braid plan MODEL -o` and `braid plan get JOB -o`.
absl::Status WritePlanFile(const std::string& path, const std::string& text);

// How this process was started, and whether it can run the in-process CPU
// worker itself (braid-torch) or must hand such commands to braid-torch.
struct CliContext {
  int argc = 0;
  char** argv = nullptr;
  // Set in braid-torch; empty in `braid`.
  EmbeddedWorkerFactory embedded_worker;
};

// Replaces this process with braid-torch -- $BRAID_TORCH_BIN, else the file
// braid-torch in the directory of /proc/self/exe -- on the same argv. Returns
// only when that fails: prints one line naming the path and returns 1. In a
// build tree (bin/ beside CMakeCache.txt) without braid-torch, the line says
// it is not built and gives the command that builds it.
int RunInTorchBinary(const CliContext& ctx);

// Whether an embedded search on `cluster` uses what only braid-torch holds:
// the in-process CPU worker (it measures ops of this machine's CPU kind, so a
// CPU cluster's), a trained GNN fused-op estimator for the cluster's device
// kind (costmodel::GnnCheckpointPathFor). Otherwise -- a GPU cluster
// without a checkpoint, such as disco-a -- `braid` plans the same as
// braid-torch: from profiles and priors.
bool EmbeddedSearchNeedsTorch(const costmodel::ClusterSpec& cluster);

// The commands that link LibTorch (and, built with CUDA, the CUDA profiler).
// braid-torch passes them to CliMain; `braid` passes none and registers
// stand-ins that hand the whole command line to braid-torch.
struct TorchCommands {
  void (*register_profile)(CLI::App& app, CommandResult& result) = nullptr;
  void (*register_run)(CLI::App& app, CommandResult& result) = nullptr;
  void (*register_service_bench)(CLI::App& bench, CommandResult& result) = nullptr;
  // Creates `braid gnn` with train and eval; returns it (sample joins it).
  CLI::App* (*register_gnn)(CLI::App& app, CommandResult& result) = nullptr;
  EmbeddedWorkerFactory embedded_worker;
};

// The descriptions of those commands, shared by the stand-ins.
inline constexpr char kProfileAbout[] = "Measure op and collective times on this machine";
inline constexpr char kRunAbout[] =
    "Measure real training iterations on this machine and compare with the simulator";
inline constexpr char kBenchServiceAbout[] =
    "GetPlan latency and submit-to-plan time over loopback TCP with local workers";
inline constexpr char kGnnAbout[] =
    "The fused-op estimator (DisCo's GNN): sample and measure fused ops, train, evaluate";

// The whole command line: every command registered, argv parsed, the exit
// code returned. `torch` is null in `braid`.
int CliMain(int argc, char** argv, const TorchCommands* torch);

void RegisterGraphCommands(CLI::App& app, CommandResult& result);
void RegisterSimulateCommand(CLI::App& app, CommandResult& result);
void RegisterPlanCommands(CLI::App& app, CommandResult& result, const CliContext& ctx);
void RegisterBenchCommands(CLI::App& app, CommandResult& result);
// After plan and bench: extends `braid plan` with get and explain.
void RegisterServiceCommands(CLI::App& app, CommandResult& result, const CliContext& ctx);
// braid-torch only (cli_profile.cc, cli_run.cc, cli_service_bench.cc).
void RegisterProfileCommands(CLI::App& app, CommandResult& result);
void RegisterRunCommand(CLI::App& app, CommandResult& result);
void RegisterServiceBench(CLI::App& bench, CommandResult& result);
// braid-torch only: `braid gnn sample` (cli_gnn_sample.cc), registered on
// the `gnn` command by the fused-op estimator's commands (cli_gnn.cc).
void RegisterGnnSampleCommand(CLI::App& gnn, CommandResult& result);
// braid-torch only: `braid gnn` with `train` and `eval` (cli_gnn.cc).
CLI::App* RegisterGnnCommands(CLI::App& app, CommandResult& result);

}  // namespace braid::client

#endif  // BRAID_CLIENT_CLI_H_
