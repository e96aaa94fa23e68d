// Golden files of world-1 runtime training (braid-runtime-golden writes them
// from the CPU backend) and their comparison with another backend's run of
// the same program: per-step losses, final parameters, and every tensor step
// 0 made, each summarised as {"name", "shape", "sum", "l2", "nonfinite"}
// (sum and l2 over the finite elements). LibTorch-free.
//
//   nlohmann::json golden = nlohmann::json::parse(file);
//   ASSIGN_OR_RETURN(graph::Program p, GoldenProgram(golden));
//   ... train p on the backend, collect losses, parameters, step-0 tensors ...
//   GoldenReport r = CompareWithGolden(golden, losses, params, step0, 1e-4);
#ifndef BRAID_WORKER_RUNTIME_GOLDEN_H_
#define BRAID_WORKER_RUNTIME_GOLDEN_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/program.h"
#include "nlohmann/json.hpp"
#include "worker/runtime/interpreter.h"

namespace braid::runtime {

nlohmann::json TensorStats(const std::string& name, const HostTensor& h);

// The file's program; InvalidArgument for another format or a bad program.
absl::StatusOr<graph::Program> GoldenProgram(const nlohmann::json& golden);

struct GoldenReport {
  bool ok = true;
  double max_loss_rel = 0;    // over steps
  double max_param_rel = 0;   // of parameters' l2
  std::vector<std::string> failures;  // losses and parameters beyond tolerance
  // Step-0 tensors whose l2 differs by more than 1e-3 relative, in the order
  // they were made (where a wrong kernel first shows): diagnostics.
  std::vector<std::string> first_differing_tensors;
};

// `losses` per step, `params` after the last step, `step0` the (name, stats)
// of step 0's tensors as made. A loss or a parameter's l2 off by more than
// `tolerance` relative fails.
GoldenReport CompareWithGolden(const nlohmann::json& golden, const std::vector<double>& losses,
                               const std::map<std::string, HostTensor>& params,
                               const std::vector<nlohmann::json>& step0, double tolerance);

}  // namespace braid::runtime

#endif  // BRAID_WORKER_RUNTIME_GOLDEN_H_
