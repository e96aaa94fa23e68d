// braid-rank: one rank of a program (graph/program.h) on the CPU backend.
//
//   braid-rank --program prog.json --rank 0 --store /tmp/s/store --steps 5 \
//       --out /tmp/s/rank0.json [--checkpoint-out ck.bin] [--resume ck.bin] [--no-dropout] [--float64]
//       [--clock-ops [--warmup K]] [--pin-cores]
//
// Every rank of the program's world runs it with the same --program and
// --store (a c10d FileStore path). One LibTorch and one BLAS thread. Each
// rank writes its result (braid-rank-result/1):
//   {"format", "rank", "world", "row", "model_fingerprint",
//    "program_fingerprint", "dropout", "steps": [{"step", "loss", "seconds",
//    "collectives", "groups_fused", "groups_unfused"}], "unfused_groups",
//    "peak_bytes"[, "clocked_steps", "op_seconds": [{"op", "type", "median_s",
//    "min_s"}]]}
// where "loss" is the step's global loss (the mean of the ranks' losses),
// "collectives" the collectives this rank started (a gradient bucket, graph::
// Program::buckets, once), "groups_fused"/"groups_unfused" the program's
// fusion groups run as one fused kernel / op by op, "unfused_groups" why each
// group that ran op by op did (by its first op), and "peak_bytes" the most
// program tensor bytes this rank held at once.
// --clock-ops (time mode) also clocks every op of every step after the first
// --warmup steps (interpreter.h StepResult::op_seconds: a compute op's kernel
// time, a collective's exposed time on this rank) and reports each op's
// median and least over the clocked steps, in program order. With
// --checkpoint-out, rank 0 writes the full parameters and optimizer state
// after the last step (worker/runtime/checkpoint.h); --resume starts from
// such a file (its model fingerprint must be the program's).
// Exit status 0 on success; on failure the error on stderr and status 1.
#include <ATen/Parallel.h>
#include <dlfcn.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <optional>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "base/bounded_json.h"
#include "base/command_line.h"
#include "base/status_macros.h"
#include "graph/program.h"
#include "nlohmann/json.hpp"
#include "worker/rank_processes.h"
#include "worker/timing.h"
#include "worker/runtime/checkpoint.h"
#include "worker/runtime/cpu_backend.h"
#include "worker/runtime/interpreter.h"

namespace braid::runtime {
namespace {

struct Args {
  std::string program, store, out, checkpoint_out, resume;
  int rank = 0;
  int steps = 1;
  bool no_dropout = false;
  bool float64 = false;
  bool clock_ops = false;
  bool pin_cores = false;
  int warmup = 1;
  double timeout_s = 300;
};

void SetBlasThreads(int n) {
  using SetFn = void (*)(int);
  if (auto f = reinterpret_cast<SetFn>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) f(n);
}

absl::Status Run(const Args& a) {
  if (a.pin_cores) RETURN_IF_ERROR(worker::PinToCore(a.rank, "braid-rank"));
  at::set_num_threads(1);
  SetBlasThreads(1);
  // The CPU executor's steady state (worker/timing.h): freed tensors stay in
  // the process, so a step's fresh outputs (updates, activations) do not
  // page-fault their memory in again every step.
  if (!worker::KeepFreedMemory()) std::cerr << "braid-rank: mallopt refused; allocations page-fault\n";
  ASSIGN_OR_RETURN(nlohmann::json j, base::ReadBoundedJsonFile(a.program, base::kPlanJsonLimits));
  // A plan file holds its program under "program".
  if (j.contains("program") && j["program"].is_object()) j = j["program"];
  ASSIGN_OR_RETURN(graph::Program p, graph::ProgramFromJson(j));
  const int world = p.World();
  if (a.clock_ops && a.warmup >= a.steps) {
    return absl::InvalidArgumentError(absl::StrCat("--clock-ops: --steps ", a.steps,
                                                   " leaves nothing to clock after --warmup ", a.warmup));
  }
  if (a.rank < 0 || a.rank >= world) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rank ", a.rank, " is outside the program's world of ", world));
  }
  CpuBackend backend({.dropout = !a.no_dropout, .float64 = a.float64});
  ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
                   MakeGlooCommunicator(p, a.rank, a.store, "127.0.0.1", a.timeout_s));
  Interpreter it(p, a.rank, backend, *comm);
  RETURN_IF_ERROR(it.Init());
  int first_step = 0;
  if (!a.resume.empty()) {
    ASSIGN_OR_RETURN(Checkpoint ck, ReadCheckpoint(a.resume));
    if (ck.model_fingerprint != p.model_fingerprint) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint ", a.resume, " is of model ", ck.model_fingerprint, ", the program's is ",
          p.model_fingerprint));
    }
    RETURN_IF_ERROR(it.LoadParameters(ck.tensors));
    first_step = ck.steps;
  }
  nlohmann::json steps = nlohmann::json::array();
  int64_t peak = 0;
  std::vector<std::vector<double>> clocked;  // per clocked step, per op
  for (int s = first_step; s < first_step + a.steps; ++s) {
    const bool clock = a.clock_ops && s - first_step >= a.warmup;
    ASSIGN_OR_RETURN(StepResult r, it.Step(s, {.clock_ops = clock}));
    if (clock) clocked.push_back(std::move(r.op_seconds));
    ASSIGN_OR_RETURN(std::vector<HostTensor> losses,
                     comm->AllGatherHost(HostTensor{{1}, {static_cast<float>(r.loss)}}));
    double sum = 0;
    for (const HostTensor& l : losses) sum += l.data[0];
    // Each rank's loss is the mean over its rows; a data shard's rows sit on
    // world / d ranks alike, so the mean of the ranks' losses is the mean
    // over the global batch.
    steps.push_back({{"step", s}, {"loss", sum / world}, {"seconds", r.seconds},
                     {"collectives", r.collectives}, {"groups_fused", r.groups_fused},
                     {"groups_unfused", r.groups_unfused}});
    peak = std::max(peak, r.peak_bytes);
  }
  if (!a.checkpoint_out.empty()) {
    ASSIGN_OR_RETURN(auto tensors, it.GatherParameters());
    if (a.rank == 0) {
      Checkpoint ck{p.model_fingerprint, p.program_fingerprint, first_step + a.steps, std::move(tensors)};
      RETURN_IF_ERROR(WriteCheckpoint(a.checkpoint_out, ck));
    }
  }
  if (!a.out.empty()) {
    nlohmann::json out = {{"format", "braid-rank-result/1"},
                          {"rank", a.rank},
                          {"world", world},
                          {"row", p.row},
                          {"model_fingerprint", p.model_fingerprint},
                          {"program_fingerprint", p.program_fingerprint},
                          {"dropout", !a.no_dropout},
                          {"float64", a.float64},
                          {"steps", steps},
                          {"peak_bytes", peak},
                          {"unfused_groups", backend.UnfusedWhy()}};
    if (a.clock_ops) {
      nlohmann::json ops = nlohmann::json::array();
      const graph::Graph& g = p.graph;
      ASSIGN_OR_RETURN(std::vector<graph::OpId> order, g.TopologicalOrder());
      for (graph::OpId id : order) {
        if (clocked.empty()) break;
        std::vector<double> t;
        for (const std::vector<double>& c : clocked) t.push_back(c.at(id));
        std::sort(t.begin(), t.end());
        const size_t n = t.size();
        const double median = n % 2 == 1 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
        ops.push_back({{"op", g.op(id).name}, {"type", g.op(id).type}, {"median_s", median},
                       {"min_s", t.front()}});
      }
      out["clocked_steps"] = clocked.size();
      out["op_seconds"] = std::move(ops);
    }
    std::ofstream f(a.out);
    f << out.dump(1) << "\n";
    if (!f) return absl::PermissionDeniedError(absl::StrCat("cannot write ", a.out));
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace braid::runtime

int main(int argc, char** argv) {
  braid::runtime::Args a;
  CLI::App app{"braid-rank: one rank of a per-device program on the CPU backend"};
  app.add_option("--program", a.program, "program JSON, or a plan file holding one")->required();
  app.add_option("--rank", a.rank, "this rank")->required()->check(CLI::NonNegativeNumber);
  app.add_option("--store", a.store, "c10d FileStore path, the same for every rank")->required();
  app.add_option("--steps", a.steps, "training steps")->check(CLI::Range(1, 1000000));
  app.add_option("--out", a.out, "write this rank's result JSON here");
  app.add_option("--checkpoint-out", a.checkpoint_out, "rank 0 writes a checkpoint here at the end");
  app.add_option("--resume", a.resume, "start from this checkpoint");
  app.add_flag("--no-dropout", a.no_dropout, "Dropout is the identity");
  app.add_flag("--pin-cores", a.pin_cores, "bind this rank to core rank mod cores");
  app.add_flag("--float64", a.float64,
               "Hold and compute float32 tensors in float64 (telling rounding from errors)");
  app.add_flag("--clock-ops", a.clock_ops,
               "time mode: clock every op of the steps after --warmup and report them");
  app.add_option("--warmup", a.warmup, "--clock-ops: steps not clocked first")
      ->check(CLI::Range(0, 1000000));
  app.add_option("--timeout-s", a.timeout_s, "how long a collective waits for the others")
      ->check(CLI::Range(1.0, 86400.0));
  if (std::optional<int> done = braid::base::ParseCommandLine(app, argc, argv)) return *done;
  if (absl::Status s = braid::runtime::Run(a); !s.ok()) {
    std::cerr << "braid-rank " << a.rank << ": " << s << "\n";
    return 1;
  }
  return 0;
}
