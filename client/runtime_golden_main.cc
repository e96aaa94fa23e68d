// braid-runtime-golden: world-1 training of models on the runtime's CPU
// backend, written as golden files that the CUDA backend's GPU test (and the
// GPU kit, deploy/gpu-kit.sh) trains again on a GPU and compares with.
//
//   braid-runtime-golden --model zoo:mlp@sample --steps 3 --out mlp.json
//       [--optimizer adam] [--plan plan.json] [--list-ops]
//
// The file (braid-runtime-golden/1): {"format", "model", "steps",
// "optimizer", "dropout", "program" (the world-1 program, graph::
// ProgramToJson), "losses" (per step), "parameters" (after the last step)
// and "step0_tensors" (every tensor step 0's ops made, in the order they
// were made), each as worker/runtime/golden.h's TensorStats}. Dropout is the identity in these runs,
// which are about the kernels, not the masks. One LibTorch thread. With
// --plan (a `braid plan --json` file of the same model) the program holds
// the plan's fusion groups (those without recomputed ops) and its gradient
// buckets (a world-1 program has none: its AllReduces span no mesh axis).
// --list-ops prints the program's op types with their counts instead.
#include <ATen/Parallel.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "graph/model_source.h"
#include "graph/program.h"
#include "nlohmann/json.hpp"
#include "search/program_lowering.h"
#include "worker/runtime/cpu_backend.h"
#include "worker/runtime/golden.h"
#include "worker/runtime/interpreter.h"

namespace braid {
namespace {

struct Args {
  std::string model, out, plan, optimizer = "sgd";
  int steps = 3;
  bool list_ops = false;
};

absl::StatusOr<nlohmann::json> Golden(const Args& a) {
  std::vector<std::string> warnings;
  ASSIGN_OR_RETURN(graph::Graph forward, graph::LoadModel(a.model, graph::LoadOptions{}, &warnings));
  search::LoweringOptions lo;
  lo.optimizer = a.optimizer == "adam" ? graph::Optimizer::kAdam : graph::Optimizer::kSgdMomentum;
  if (!a.plan.empty()) {
    // A `braid plan --json` file's fusion groups (those without recomputed
    // ops) and gradient buckets, by name.
    std::ifstream f(a.plan);
    nlohmann::json j = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(a.plan, ": not a plan JSON file"));
    }
    const nlohmann::json& plan = j.contains("plan") ? j["plan"] : j;
    if (!plan.contains("groups") || !plan["groups"].is_array() || !plan.contains("buckets") ||
        !plan["buckets"].is_array()) {
      return absl::InvalidArgumentError(absl::StrCat(a.plan, ": no groups and buckets"));
    }
    for (const nlohmann::json& grp : plan["groups"]) {
      if (!grp.is_object() || !grp.value("duplicated", nlohmann::json::array()).empty()) continue;
      lo.fusion_groups.push_back(grp.value("ops", std::vector<std::string>{}));
    }
    for (const nlohmann::json& b : plan["buckets"]) lo.gradient_buckets.push_back(b.get<std::vector<std::string>>());
  }
  ASSIGN_OR_RETURN(graph::Program p, search::LowerWorldOne(forward, lo));
  if (a.list_ops) {
    std::map<std::string, int> count;
    for (const graph::Op& op : p.graph.ops()) ++count[op.type];
    for (const auto& [t, n] : count) std::cout << t << " " << n << "\n";
    return nlohmann::json();
  }
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / absl::StrCat("braid-golden-", ::getpid());
  std::filesystem::create_directories(dir);
  runtime::CpuBackend backend({.dropout = false});
  ASSIGN_OR_RETURN(std::unique_ptr<runtime::Communicator> comm,
                   runtime::MakeGlooCommunicator(p, 0, (dir / "store").string(), "127.0.0.1", 60));
  runtime::Interpreter it(p, 0, backend, *comm);
  RETURN_IF_ERROR(it.Init());
  nlohmann::json losses = nlohmann::json::array();
  nlohmann::json tensors = nlohmann::json::array();
  absl::Status observed;
  runtime::StepOptions first;
  first.observe = [&](graph::TensorId t, const runtime::Value& v) {
    absl::StatusOr<runtime::HostTensor> h = backend.ToHost(v);
    if (!h.ok()) {
      observed.Update(h.status());
      return;
    }
    tensors.push_back(runtime::TensorStats(p.graph.tensor(t).name, *h));
  };
  for (int s = 0; s < a.steps; ++s) {
    ASSIGN_OR_RETURN(runtime::StepResult r, it.Step(s, s == 0 ? first : runtime::StepOptions{}));
    RETURN_IF_ERROR(observed);
    losses.push_back(r.loss);
  }
  ASSIGN_OR_RETURN(auto params, it.GatherParameters());
  std::filesystem::remove_all(dir);
  nlohmann::json pj = nlohmann::json::array();
  for (const auto& [name, h] : params) pj.push_back(runtime::TensorStats(name, h));
  return nlohmann::json{{"format", "braid-runtime-golden/1"}, {"model", a.model},
                        {"steps", a.steps},   {"optimizer", a.optimizer},
                        {"dropout", false},   {"program", graph::ProgramToJson(p)},
                        {"plan", a.plan},
                        {"losses", losses},   {"parameters", pj},
                        {"step0_tensors", tensors}};
}

}  // namespace
}  // namespace braid

int main(int argc, char** argv) {
  at::set_num_threads(1);
  braid::Args a;
  CLI::App app{"World-1 training on the runtime's CPU backend, as golden files for its CUDA backend"};
  app.add_option("--model", a.model, "model.onnx, a braid text graph, or zoo:NAME")->required();
  app.add_option("--steps", a.steps, "training steps")->check(CLI::Range(1, 100));
  app.add_option("--optimizer", a.optimizer, "sgd or adam")->check(CLI::IsMember({"sgd", "adam"}));
  app.add_option("--out", a.out, "the golden file to write");
  app.add_option("--plan", a.plan,
                 "a `braid plan --json` file: the program runs its fusion groups and gradient buckets");
  app.add_flag("--list-ops", a.list_ops, "print the program's op types and counts");
  CLI11_PARSE(app, argc, argv);
  if (!a.list_ops && a.out.empty()) {
    std::cerr << "braid-runtime-golden: --out is required\n";
    return 2;
  }
  absl::StatusOr<nlohmann::json> j = braid::Golden(a);
  if (!j.ok()) {
    std::cerr << "braid-runtime-golden: " << j.status() << "\n";
    return 1;
  }
  if (a.list_ops) return 0;
  std::ofstream f(a.out);
  f << j->dump() << "\n";
  if (!f.good()) {
    std::cerr << "braid-runtime-golden: cannot write " << a.out << "\n";
    return 1;
  }
  std::cerr << "braid-runtime-golden: " << a.model << ", " << a.steps << " steps, losses "
            << (*j)["losses"].dump() << " -> " << a.out << "\n";
  return 0;
}
