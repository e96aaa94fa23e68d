// `braid graph stats` and `braid graph export`.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/text.h"
#include "client/cli.h"
#include "graph/graph_json.h"
#include "graph/model_source.h"
#include "graph/text_format.h"
#include "graph/training.h"

namespace braid::client {

absl::Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::InvalidArgumentError(absl::StrCat(path, ": cannot open for writing"));
  out << text;
  if (!out) return absl::InternalError(absl::StrCat(path, ": write failed"));
  return absl::OkStatus();
}

int ReportError(const absl::Status& s) {
  // Messages quote user and server text: escaped for the terminal.
  std::cerr << "braid: " << base::EscapeForDisplay(std::string(s.message())) << "\n";
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kUnimplemented:
      return 2;
    default:
      return 1;
  }
}

namespace {

struct StatsArgs {
  std::string model;
  int batch = 0;
  bool json = false;
};

struct ExportArgs {
  std::string model;
  int batch = 0;
  bool training = false;
  int ranks = 1;
  std::string optimizer = "sgd";
  std::string format = "json";
};

void PrintWarnings(const std::vector<std::string>& warnings) {
  for (const std::string& w : warnings) std::cerr << "braid: warning: " << w << "\n";
}

std::string Human(double v) {
  const char* units[] = {"", "K", "M", "G", "T", "P"};
  int u = 0;
  while (v >= 1000 && u < 5) {
    v /= 1000;
    ++u;
  }
  return absl::StrFormat("%.2f %s", v, units[u]);
}

int RunStats(const StatsArgs& a) {
  std::vector<std::string> warnings;
  graph::LoadOptions lo;
  lo.batch = a.batch;
  auto g = graph::LoadModel(a.model, lo, &warnings);
  if (!g.ok()) return ReportError(g.status());
  PrintWarnings(warnings);
  graph::GraphStats s = graph::ComputeStats(*g);
  if (a.json) {
    std::cout << graph::StatsToJson(s).dump(2) << "\n";
    return 0;
  }
  std::cout << "model          " << g->name() << "\n"
            << "ops            " << s.ops << "\n"
            << "parameters     " << s.parameters << " (" << Human(s.parameters) << ")\n"
            << "gradients      " << s.gradients << " tensors, " << Human(s.gradient_bytes) << "B\n"
            << "forward FLOPs  " << Human(s.forward_flops) << "FLOP per batch\n"
            << "op types:\n";
  for (const auto& [type, n] : s.op_types) std::cout << absl::StrFormat("  %-28s %d\n", type, n);
  return 0;
}

int RunExport(const ExportArgs& a) {
  std::vector<std::string> warnings;
  graph::LoadOptions lo;
  lo.batch = a.batch;
  auto g = graph::LoadModel(a.model, lo, &warnings);
  if (!g.ok()) return ReportError(g.status());
  PrintWarnings(warnings);
  graph::Graph out = std::move(*g);
  if (a.training) {
    graph::TrainingOptions opts;
    opts.ranks = a.ranks;
    opts.optimizer = a.optimizer == "adam" ? graph::Optimizer::kAdam : graph::Optimizer::kSgdMomentum;
    auto t = graph::BuildTrainingGraph(out, opts);
    if (!t.ok()) return ReportError(t.status());
    out = std::move(*t);
  }
  if (a.format == "text") {
    std::cout << graph::ToText(out);
  } else {
    std::cout << graph::GraphToJson(out).dump(1) << "\n";
  }
  return 0;
}

}  // namespace

void RegisterGraphCommands(CLI::App& app, CommandResult& result) {
  CLI::App* graph = app.add_subcommand("graph", "Inspect model graphs");
  graph->require_subcommand(1);

  auto stats = std::make_shared<StatsArgs>();
  CLI::App* s = graph->add_subcommand("stats", "Op counts, parameters, FLOPs and gradients of a model");
  s->add_option("model", stats->model, "model.onnx, a braid text graph, or zoo:NAME")->required();
  s->add_option("--batch", stats->batch, "per-rank batch (default: the model's)")->check(CLI::NonNegativeNumber);
  s->add_flag("--json", stats->json, "print JSON");
  s->callback([stats, &result] { result.exit_code = RunStats(*stats); });

  auto exp = std::make_shared<ExportArgs>();
  CLI::App* e = graph->add_subcommand("export", "Print the (training) graph with shapes, FLOPs and bytes");
  e->add_option("model", exp->model, "model.onnx, a braid text graph, or zoo:NAME")->required();
  e->add_option("--batch", exp->batch, "per-rank batch")->check(CLI::NonNegativeNumber);
  e->add_flag("--training", exp->training, "build the data-parallel training graph");
  e->add_option("--ranks", exp->ranks, "data-parallel ranks")->check(CLI::PositiveNumber);
  e->add_option("--optimizer", exp->optimizer, "sgd or adam")->check(CLI::IsMember({"sgd", "adam"}));
  e->add_option("--format", exp->format, "json or text")->check(CLI::IsMember({"json", "text"}));
  e->callback([exp, &result] { result.exit_code = RunExport(*exp); });
}

}  // namespace braid::client
