// braid-cuda-rank: one rank of a program (graph/program.h) on the runtime's
// CUDA backend and NCCL, one GPU per rank.
//
//   braid-cuda-rank --program prog.json --rank 0 --id-dir /tmp/ids --steps 5 \
//       --out rank0.json [--device D] [--no-dropout]
//
// --program takes a program file ({"program": ...} or the program itself) or
// a golden file of braid-runtime-golden (braid-runtime-golden/1): a world-1
// run of a golden file also compares its losses and parameters with the
// file's (relative 1e-4) and fails when they differ. Every rank passes the
// same --id-dir (NCCL unique ids are exchanged through it). --device
// defaults to the rank modulo the devices there are. Writes
// (braid-cuda-rank-result/1): {"format", "rank", "world", "device", "row",
// "program_fingerprint", "steps": [{"step", "loss", "seconds"}],
// "ops_by_path", "unfused_groups"[, "golden": {"ok", "max_loss_rel",
// "max_param_rel", "failures", "first_differing_tensors"}]}.
// Exit status 0 on success, 1 on failure (the error on stderr).
#include <fstream>
#include <iostream>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "graph/program.h"
#include "nlohmann/json.hpp"
#include "worker/cuda/cuda_backend.h"
#include "worker/cuda/cuda_device.h"
#include "worker/runtime/golden.h"
#include "worker/runtime/interpreter.h"

namespace braid::runtime {
namespace {

struct Args {
  std::string program, id_dir, out;
  int rank = 0, steps = 3, device = -1;
  bool no_dropout = false;
  double timeout_s = 300;
};

absl::Status Run(const Args& a) {
  std::ifstream in(a.program);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", a.program));
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(a.program, ": not JSON"));
  const bool golden = j.is_object() && j.value("format", "") == "braid-runtime-golden/1";
  graph::Program p;
  if (golden) {
    ASSIGN_OR_RETURN(p, GoldenProgram(j));
  } else {
    ASSIGN_OR_RETURN(p, graph::ProgramFromJson(j.contains("program") ? j["program"] : j));
  }
  ASSIGN_OR_RETURN(int devices, worker::CudaDeviceCount());
  if (devices < 1) return absl::FailedPreconditionError("no CUDA device");
  const int device = a.device >= 0 ? a.device : a.rank % devices;
  const bool dropout = golden ? j.value("dropout", false) : !a.no_dropout;
  ASSIGN_OR_RETURN(std::unique_ptr<CudaBackend> backend,
                   CudaBackend::Create({.device = device, .dropout = dropout}));
  ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
                   MakeNcclCommunicator(p, a.rank, *backend, a.id_dir, a.timeout_s));
  Interpreter it(p, a.rank, *backend, *comm);
  RETURN_IF_ERROR(it.Init());
  const int steps = golden ? static_cast<int>(j.at("losses").size()) : a.steps;
  nlohmann::json out = {{"format", "braid-cuda-rank-result/1"},
                        {"rank", a.rank},
                        {"world", p.World()},
                        {"device", backend->DeviceName()},
                        {"row", p.row},
                        {"program_fingerprint", p.program_fingerprint}};
  std::vector<double> losses;
  std::vector<nlohmann::json> step0;
  absl::Status observed;
  StepOptions first;
  if (golden) {
    first.observe = [&](graph::TensorId t, const Value& v) {
      absl::StatusOr<HostTensor> h = backend->ToHost(v);
      if (!h.ok()) return observed.Update(h.status());
      step0.push_back(TensorStats(p.graph.tensor(t).name, *h));
    };
  }
  for (int s = 0; s < steps; ++s) {
    ASSIGN_OR_RETURN(StepResult r, it.Step(s, s == 0 ? first : StepOptions{}));
    RETURN_IF_ERROR(observed);
    losses.push_back(r.loss);
    out["steps"].push_back({{"step", s}, {"loss", r.loss}, {"seconds", r.seconds}});
    std::cerr << "braid-cuda-rank " << a.rank << ": step " << s << " loss " << r.loss << " ("
              << r.seconds << " s)\n";
  }
  out["ops_by_path"] = backend->OpsByPath();
  out["unfused_groups"] = backend->UnfusedWhy();
  absl::Status verdict;
  if (golden) {
    if (p.World() != 1) return absl::InvalidArgumentError("a golden file's program is world-1");
    ASSIGN_OR_RETURN(auto params, it.GatherParameters());
    const GoldenReport r = CompareWithGolden(j, losses, params, step0, 1e-4);
    out["golden"] = {{"ok", r.ok},
                     {"max_loss_rel", r.max_loss_rel},
                     {"max_param_rel", r.max_param_rel},
                     {"failures", r.failures},
                     {"first_differing_tensors", r.first_differing_tensors}};
    if (!r.ok) verdict = absl::DataLossError(absl::StrCat("the GPU run differs from the golden CPU run: ",
                                                          r.failures.front()));
  }
  if (!a.out.empty()) {
    std::ofstream f(a.out);
    f << out.dump(1) << "\n";
    if (!f.good()) return absl::InternalError(absl::StrCat("cannot write ", a.out));
  } else {
    std::cout << out.dump(1) << "\n";
  }
  return verdict;
}

}  // namespace
}  // namespace braid::runtime

int main(int argc, char** argv) {
  braid::runtime::Args a;
  CLI::App app{"One rank of a program on the runtime's CUDA backend and NCCL"};
  app.add_option("--program", a.program, "program file, or a braid-runtime-golden file")->required();
  app.add_option("--rank", a.rank, "this rank")->check(CLI::Range(0, 65535));
  app.add_option("--id-dir", a.id_dir, "directory every rank sees, for NCCL's unique ids")->required();
  app.add_option("--steps", a.steps, "training steps (a golden file: its own)")->check(CLI::Range(1, 100000));
  app.add_option("--device", a.device, "CUDA device (default: rank modulo the devices)");
  app.add_option("--out", a.out, "result JSON (default: stdout)");
  app.add_option("--timeout-s", a.timeout_s, "how long to wait for the other ranks")->check(CLI::Range(1.0, 86400.0));
  app.add_flag("--no-dropout", a.no_dropout, "Dropout is the identity");
  CLI11_PARSE(app, argc, argv);
  absl::Status s = braid::runtime::Run(a);
  if (!s.ok()) {
    std::cerr << "braid-cuda-rank: " << s << "\n";
    return 1;
  }
  return 0;
}
