// braid-cuda-profile: measures a zoo model's training ops and a sample of its
// fused groups on one GPU with the CUDA profiler (cuBLAS, cuDNN, NVRTC
// kernels, cuBLASLt epilogues) and stores them in a profile store under the
// device's kind ("cuda:<name>"). Links no LibTorch, so it travels in the GPU
// kit. Each measurement is also one JSON line on --jsonl, written and flushed
// as it is taken: a run stopped by a timeout keeps what it measured.
// With --plan-dir, the fused groups of DIR/<model>.json (the output of
// `braid plan zoo:<model> --json`, at the same batch) are measured too: the
// kernels braid's plans choose, not only random ones.
//
//   braid-cuda-profile --model transformer --model resnet50 --batch 8 --fused 12 \
//       --store h100.db --jsonl profile.jsonl [--plan-dir plans/]
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "base/command_line.h"
#include "costmodel/fused_sampler.h"
#include "costmodel/fusion_backend.h"
#include "absl/strings/str_cat.h"
#include "base/bounded_json.h"
#include "base/status_macros.h"
#include "costmodel/profile_store.h"
#include "graph/training.h"
#include "graph/zoo.h"
#include "nlohmann/json.hpp"
#include "worker/cuda/cuda_device.h"
#include "worker/cuda/cuda_profiler.h"
#include "worker/profile_graph.h"

namespace braid::worker {
namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::vector<std::string> models;
  int batch = 0;
  bool sample = false;
  int fused = 12;
  uint64_t seed = 1;
  int device = 0;
  int repetitions = 7;
  double max_seconds_per_op = 0.5;
  double budget_s = 120;  // per model
  std::string store;
  std::string jsonl;
  std::string plan_dir;
};

// The fused groups (two or more ops) of a `braid plan --json` file, as op ids
// of `g`. NotFound without the file; InvalidArgument when it does not parse
// or names an op `g` lacks (a plan of another model or batch).
absl::StatusOr<std::vector<std::vector<graph::OpId>>> PlanGroups(const graph::Graph& g,
                                                                 const std::string& path) {
  if (!std::filesystem::exists(path)) return absl::NotFoundError(path);
  ASSIGN_OR_RETURN(nlohmann::json j, base::ReadBoundedJsonFile(path, base::kPlanJsonLimits));
  const nlohmann::json* plan = &j;
  if (j.is_object() && j.contains("plan")) plan = &j["plan"];
  if (!plan->is_object() || !plan->contains("groups") || !(*plan)["groups"].is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": no plan.groups array"));
  }
  std::map<std::string, graph::OpId> ids;
  for (graph::OpId o = 0; o < g.num_ops(); ++o) ids[g.op(o).name] = o;
  std::vector<std::vector<graph::OpId>> groups;
  for (const nlohmann::json& group : (*plan)["groups"]) {
    if (!group.is_object() || !group.contains("ops") || !group["ops"].is_array()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": a group without an ops array"));
    }
    std::vector<graph::OpId> ops;
    for (const nlohmann::json& name : group["ops"]) {
      auto it = name.is_string() ? ids.find(name.get<std::string>()) : ids.end();
      if (it == ids.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": op ", name.dump(), " is not in the model's training graph"));
      }
      ops.push_back(it->second);
    }
    std::sort(ops.begin(), ops.end());
    ops.erase(std::unique(ops.begin(), ops.end()), ops.end());
    if (ops.size() >= 2) groups.push_back(std::move(ops));
  }
  return groups;
}

class Lines {
 public:
  explicit Lines(const std::string& path) {
    if (!path.empty()) f_.open(path, std::ios::app);
  }
  void Write(const nlohmann::json& j) {
    const std::string s = j.dump();
    std::cout << s << "\n" << std::flush;
    if (f_.is_open()) f_ << s << "\n" << std::flush;
  }

 private:
  std::ofstream f_;
};

nlohmann::json Result(const absl::StatusOr<OpProfile>& p) {
  nlohmann::json j;
  if (p.ok()) {
    j["status"] = "measured";
    j["median_s"] = p->sample.median_s;
    j["spread_s"] = p->sample.spread_s;
    j["repetitions"] = p->sample.repetitions;
    j["calls"] = p->aten;
  } else {
    j["status"] = p.status().code() == absl::StatusCode::kUnimplemented ? "unsupported" : "failed";
    j["error"] = std::string(p.status().message());
  }
  return j;
}

int Run(const Args& a) {
  absl::StatusOr<CudaDeviceInfo> dev = FindCudaDevice(a.device);
  if (!dev.ok()) {
    std::cerr << "braid-cuda-profile: " << dev.status() << "\n";
    return 2;
  }
  auto store = costmodel::ProfileStore::Open(a.store);
  if (!store.ok()) {
    std::cerr << "braid-cuda-profile: --store: " << store.status() << "\n";
    return 2;
  }
  Lines out(a.jsonl);
  out.Write({{"device", dev->name}, {"kind", dev->kind}, {"sm_count", dev->sm_count},
             {"compute_capability", std::to_string(dev->compute_major) + "." +
                                        std::to_string(dev->compute_minor)}});
  ProfileOptions o;
  o.repetitions = a.repetitions;
  o.max_seconds_per_op = a.max_seconds_per_op;
  CudaProfiler profiler(o, a.device);
  int failed = 0;
  for (const std::string& name : a.models) {
    absl::StatusOr<graph::Graph> fwd = graph::BuildZooModel(
        name, a.batch, a.sample ? graph::ZooSize::kSample : graph::ZooSize::kPublished);
    absl::StatusOr<graph::Graph> g =
        fwd.ok() ? graph::BuildTrainingGraph(*fwd, {}) : absl::StatusOr<graph::Graph>(fwd.status());
    if (!g.ok()) {
      std::cerr << "braid-cuda-profile: " << name << ": " << g.status() << "\n";
      return 2;
    }
    const std::string model =
        absl::StrCat("zoo:", name, a.sample ? "@sample" : "", a.batch > 0 ? "@" : "",
                     a.batch > 0 ? std::to_string(a.batch) : "");
    const Clock::time_point start = Clock::now();
    auto over = [&] {
      return std::chrono::duration<double>(Clock::now() - start).count() > a.budget_s;
    };
    absl::StatusOr<ProfileGraphReport> r = ProfileDistinctOps(
        *g, **store, dev->kind, [&](const graph::Graph& gg, graph::OpId op) {
          if (over()) return absl::StatusOr<OpProfile>(absl::DeadlineExceededError("budget spent"));
          absl::StatusOr<OpProfile> p = profiler.ProfileOp(gg, op);
          nlohmann::json j = Result(p);
          j["model"] = model;
          j["kind"] = "op";
          j["op"] = gg.op(op).name;
          j["type"] = gg.op(op).type;
          j["signature"] = costmodel::OpSignature(gg, op);
          out.Write(j);
          return p;
        });
    if (!r.ok()) {
      std::cerr << "braid-cuda-profile: " << r.status() << "\n";
      return 1;
    }
    failed += r->failed;
    costmodel::FusedSamplerOptions fo;
    fo.count = a.fused;
    fo.seed = a.seed;
    fo.max_ops = 6;
    std::vector<std::vector<graph::OpId>> groups;
    if (!a.plan_dir.empty()) {
      absl::StatusOr<std::vector<std::vector<graph::OpId>>> planned =
          PlanGroups(*g, (std::filesystem::path(a.plan_dir) / (name + ".json")).string());
      if (planned.ok()) {
        groups = *std::move(planned);
      } else if (planned.status().code() != absl::StatusCode::kNotFound) {
        // The sampled groups are still measured; the run reports the plan.
        out.Write({{"model", model}, {"kind", "plan"}, {"status", "failed"},
                   {"error", std::string(planned.status().message())}});
        ++failed;
      }
    }
    const size_t from_plan = groups.size();
    if (a.fused > 0) {
      for (std::vector<graph::OpId>& group :
           costmodel::SampleFusedGroups(*g, costmodel::GpuFusionBackend(), fo)) {
        groups.push_back(std::move(group));
      }
    }
    std::set<std::string> seen;
    for (size_t gi = 0; gi < groups.size(); ++gi) {
      const std::vector<graph::OpId>& group = groups[gi];
      if (over()) break;
      if (!seen.insert(costmodel::FusedSignature(*g, group)).second) continue;
      absl::StatusOr<OpProfile> p = profiler.ProfileFused(*g, group);
      const std::string sig = costmodel::FusedSignature(*g, group);
      nlohmann::json j = Result(p);
      j["model"] = model;
      j["kind"] = "fused";
      j["from"] = gi < from_plan ? "plan" : "sample";
      std::vector<std::string> types;
      for (graph::OpId op : group) types.push_back(g->op(op).type);
      j["types"] = types;
      j["signature"] = sig;
      out.Write(j);
      if (p.ok()) {
        absl::Status s = (*store)->Put({dev->kind, costmodel::kFusedOp, sig}, p->sample);
        if (!s.ok()) {
          std::cerr << "braid-cuda-profile: " << s << "\n";
          return 1;
        }
      } else if (p.status().code() != absl::StatusCode::kUnimplemented) {
        ++failed;
      }
    }
    out.Write({{"model", model}, {"kind", "summary"}, {"profiled", r->profiled},
               {"unsupported", r->unsupported}, {"failed", r->failed},
               {"communication", r->communication}, {"plan_groups", from_plan},
               {"budget_spent", over()}});
  }
  return failed > 0 ? 1 : 0;
}

}  // namespace
}  // namespace braid::worker

int main(int argc, char** argv) {
  braid::worker::Args a;
  CLI::App app{"Measures zoo models' training ops and fused groups on one GPU"};
  app.add_option("--model", a.models, "zoo model name (repeatable)")->required();
  app.add_option("--batch", a.batch, "per-device batch (0: the zoo default)")
      ->check(CLI::Range(0, 65536));
  app.add_flag("--sample", a.sample, "the zoo's small sample size");
  app.add_option("--fused", a.fused, "fused groups sampled per model")->check(CLI::Range(0, 10000));
  app.add_option("--seed", a.seed, "fused-group sampling seed");
  app.add_option("--device", a.device, "GPU ordinal")->check(CLI::Range(0, 1023));
  app.add_option("--repetitions", a.repetitions, "timed samples per op")->check(CLI::Range(1, 1000));
  app.add_option("--max-seconds-per-op", a.max_seconds_per_op)->check(CLI::Range(0.001, 60.0));
  app.add_option("--budget-s", a.budget_s, "time per model; the rest is left unmeasured")
      ->check(CLI::Range(1.0, 86400.0));
  app.add_option("--store", a.store, "profile store (SQLite) to write")->required();
  app.add_option("--jsonl", a.jsonl, "also append each measurement here as a JSON line");
  app.add_option("--plan-dir", a.plan_dir,
                 "also measure the fused groups of DIR/<model>.json (braid plan --json output)");
  if (std::optional<int> done = braid::base::ParseCommandLine(app, argc, argv)) return *done;
  return braid::worker::Run(a);
}
