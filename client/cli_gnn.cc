// `braid gnn train` and `braid gnn eval`: the fused-op estimator (DisCo
// §4.3) trained on the samples `braid gnn sample` measured, and its accuracy
// on held-out fused ops (DisCo §6.5) next to the corrected roofline's. A
// checkpoint records its training and validation samples' content hashes
// (sample_hashes.h); eval refuses a test set that shares any of them.
#include <fstream>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "base/bounded_json.h"
#include "base/status_macros.h"
#include "client/cli.h"
#include "client/planning.h"
#include "costmodel/cluster.h"
#include "costmodel/comm_model.h"
#include "costmodel/gnn/gnn_estimator.h"
#include "costmodel/gnn/gnn_model.h"
#include "costmodel/gnn/gnn_train.h"
#include "costmodel/gnn/sample_hashes.h"
#include "costmodel/gnn/splits.h"
#include "costmodel/gnn_store.h"
#include "costmodel/op_cost.h"
#include "costmodel/profile_store.h"
#include "nlohmann/json.hpp"

namespace braid::client {
namespace {

namespace gnn = costmodel::gnn;

// Fewer measured samples than this train nothing useful.
constexpr int kMinExamples = 100;

struct TrainArgs {
  std::string db;
  std::string cluster = "cpu-local";
  std::string split = "all";
  std::string holdout = gnn::kDefaultHoldout;
  int epochs = 200;  // gnn::TrainOptions' defaults, chosen by validation loss
  int patience = 15;
  int batch_size = 128;
  uint64_t seed = 1;
  std::string out;
  int layers = 0, heads = 0, width = 0;  // 0: from the grid
};

struct EvalArgs {
  std::string db;
  std::string cluster = "cpu-local";
  std::string checkpoint;
  bool json = false;
  std::string dump;  // CSV of every test prediction
};

// What both commands open: the cluster, the profile store and the samples.
struct Data {
  costmodel::ClusterSpec cluster;
  std::string db;
  std::unique_ptr<costmodel::ProfileStore> profiles;
  std::unique_ptr<costmodel::GnnStore> samples;
  std::vector<costmodel::GnnExample> examples;
};

absl::StatusOr<Data> OpenData(const std::string& db_flag, const std::string& cluster_name) {
  Data d;
  ASSIGN_OR_RETURN(d.cluster, costmodel::LoadCluster(cluster_name));
  d.db = db_flag.empty() ? DefaultDatabasePath() : db_flag;
  if (!std::filesystem::exists(d.db)) {
    return absl::NotFoundError(absl::StrCat("profile store ", d.db,
                                            " does not exist: run braid gnn sample first"));
  }
  ASSIGN_OR_RETURN(d.profiles, costmodel::ProfileStore::Open(d.db));
  ASSIGN_OR_RETURN(d.samples, costmodel::GnnStore::Open(d.db));
  int missing = 0;
  ASSIGN_OR_RETURN(d.examples,
                   costmodel::LoadGnnExamples(*d.samples, *d.profiles, d.cluster.device.kind, &missing));
  if (static_cast<int>(d.examples.size()) < kMinExamples) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%d measured fused-op samples for device kind '%s' in %s (%d more lack their fused "
        "measurement); at least %d are needed: run braid gnn sample first",
        d.examples.size(), d.cluster.device.kind, d.db, missing, kMinExamples));
  }
  return d;
}

std::string DefaultCheckpointPath(const std::string& device_kind, gnn::Split split) {
  const std::string file = costmodel::GnnCheckpointFileName(device_kind);
  return split == gnn::Split::kAll ? file : absl::StrCat("split-", std::string(gnn::SplitName(split)), "-", file);
}

int RunTrain(const TrainArgs& a) {
  absl::StatusOr<gnn::Split> split = gnn::ParseSplit(a.split);
  if (!split.ok()) return ReportError(split.status());
  absl::StatusOr<Data> d = OpenData(a.db, a.cluster);
  if (!d.ok()) return ReportError(d.status());
  gnn::TrainOptions opt;
  opt.seed = a.seed;
  opt.max_epochs = a.epochs;
  opt.patience = a.patience;
  opt.batch_size = a.batch_size;
  if (a.layers > 0 || a.heads > 0 || a.width > 0) {
    gnn::GnnHyperParams hp;
    if (a.layers > 0) hp.layers = a.layers;
    if (a.heads > 0) hp.heads = a.heads;
    if (a.width > 0) hp.width = a.width;
    if (absl::Status s = gnn::ValidateHyperParams(hp); !s.ok()) return ReportError(s);
    opt.grid = {hp};
  }
  opt.progress = [](const std::string& line) { std::cerr << "braid: " << line << "\n"; };
  std::cerr << absl::StrFormat("braid: %d fused-op samples for %s; split %s; %d grid point(s)\n",
                               d->examples.size(), d->cluster.device.kind, a.split, opt.grid.size());
  absl::StatusOr<gnn::GnnTrainRun> run =
      gnn::TrainFromExamples(d->examples, d->cluster, *split, a.holdout, opt);
  if (!run.ok()) return ReportError(run.status());
  const std::string out = a.out.empty() ? DefaultCheckpointPath(d->cluster.device.kind, *split) : a.out;
  if (absl::Status s = gnn::SaveCheckpoint(out, run->model.net, run->info); !s.ok()) return ReportError(s);
  absl::StatusOr<gnn::LoadedCheckpoint> saved = gnn::LoadCheckpoint(out, d->cluster.device.kind);
  if (!saved.ok()) return ReportError(saved.status());

  const gnn::TrainedGnn& m = run->model;
  std::cout << absl::StrFormat(
      "samples: %d train, %d validation, %d test (split %s%s)\n", run->sets.train.size(),
      run->sets.val.size(), run->sets.test.size(), a.split,
      *split == gnn::Split::kB ? absl::StrCat(", holdout ", a.holdout) : "");
  std::cout << absl::StrFormat("%6s %5s %5s %12s %12s %10s %6s %8s\n", "layers", "heads", "width",
                               "train_mse", "val_mse", "best_epoch", "epochs", "seconds");
  for (const gnn::GridPoint& p : m.grid) {
    std::cout << absl::StrFormat("%6d %5d %5d %12.5f %12.5f %10d %6d %8.1f\n", p.hp.layers, p.hp.heads,
                                 p.hp.width, p.train_loss, p.val_loss, p.best_epoch, p.epochs, p.seconds);
  }
  std::cout << absl::StrFormat(
      "chosen: %d layers x %d heads, width %d: validation MSE of log time %.5f (untrained %.5f)\n"
      "training took %.1f s on one thread\ncheckpoint: %s (id %s)\n",
      m.hp.layers, m.hp.heads, m.hp.width, m.val_loss, m.untrained_val_loss, m.seconds, out, saved->id);
  if (saved->info.sample_hashes.has_value()) {
    std::cout << absl::StrFormat(
        "sample hashes: %d training and %d validation samples recorded (braid gnn eval refuses "
        "test samples among them)\n",
        saved->info.sample_hashes->train.size(), saved->info.sample_hashes->validation.size());
  } else {
    std::cout << absl::StrFormat(
        "sample hashes: none recorded: %d training and validation samples are more than the %d a "
        "checkpoint holds (braid gnn eval reports the test set's disjointness unchecked)\n",
        run->sets.train.size() + run->sets.val.size(), gnn::kMaxSampleHashes);
  }
  if (*split != gnn::Split::kAll) {
    std::cout << "evaluate: braid gnn eval --checkpoint " << out << "\n";
  } else {
    std::cout << "searches load it from $BRAID_GNN_CHECKPOINT, or as "
              << costmodel::GnnCheckpointFileName(d->cluster.device.kind)
              << " in $BRAID_GNN_DIR, ../share/braid/gnn beside the executable, or "
                 "costmodel/gnn/checkpoints\n";
  }
  return 0;
}

// Error statistics of predictions against measurements.
nlohmann::ordered_json Metrics(const std::vector<double>& pred, const std::vector<double>& measured) {
  std::vector<double> err, ratio;
  err.reserve(pred.size());
  for (size_t i = 0; i < pred.size(); ++i) {
    err.push_back(std::abs(pred[i] - measured[i]) / measured[i]);
    ratio.push_back(pred[i] / measured[i]);
  }
  std::sort(err.begin(), err.end());
  std::sort(ratio.begin(), ratio.end());
  auto quantile = [&](double q) {
    if (err.empty()) return 0.0;
    const size_t k = static_cast<size_t>(std::ceil(q * static_cast<double>(err.size())));
    return err[std::min(err.size() - 1, k == 0 ? 0 : k - 1)];
  };
  auto within = [&](double x) {
    if (err.empty()) return 0.0;
    return static_cast<double>(std::upper_bound(err.begin(), err.end(), x) - err.begin()) /
           static_cast<double>(err.size());
  };
  nlohmann::ordered_json cdf = nlohmann::ordered_json::array();
  for (int pct = 1; pct <= 50; ++pct) cdf.push_back(within(pct / 100.0));
  return {{"n", err.size()},
          {"p50_error", quantile(0.5)},
          {"p90_error", quantile(0.9)},
          {"within_10pct", within(0.10)},
          {"within_14pct", within(0.14)},
          // Which way it errs: the median of predicted / measured.
          {"p50_ratio", ratio.empty() ? 0.0 : ratio[(ratio.size() - 1) / 2]},
          {"cdf_within_pct_1_to_50", cdf}};
}

int RunEval(const EvalArgs& a) {
  absl::StatusOr<Data> d = OpenData(a.db, a.cluster);
  if (!d.ok()) return ReportError(d.status());
  const std::string kind = d->cluster.device.kind;
  std::string path = a.checkpoint;
  if (path.empty()) {
    std::optional<std::string> found = costmodel::GnnCheckpointPathFor(kind);
    if (!found.has_value()) {
      return ReportError(absl::NotFoundError(absl::StrCat(
          "no trained estimator for device kind '", kind, "' (", costmodel::GnnCheckpointFileName(kind),
          "): pass --checkpoint, or run braid gnn train")));
    }
    path = *found;
  }
  absl::StatusOr<std::unique_ptr<gnn::GnnEstimator>> est =
      gnn::GnnEstimator::Load(path, d->cluster, d->profiles.get(), nullptr);
  if (!est.ok()) return ReportError(est.status());
  const costmodel::gnn::CheckpointInfo& info = (*est)->info();
  absl::StatusOr<gnn::Split> split = gnn::ParseSplit(info.split);
  if (!split.ok()) return ReportError(split.status());
  const std::string holdout = info.holdout.empty() ? gnn::kDefaultHoldout : info.holdout;
  const gnn::SplitSets sets = gnn::SplitExamples(d->examples, *split, holdout);
  // The test samples must be ones the checkpoint was not fitted to or
  // validated on, whichever database they come from.
  std::vector<std::string> test_hashes;
  test_hashes.reserve(sets.test.size());
  for (int i : sets.test) test_hashes.push_back(gnn::SampleHash(kind, d->examples[i].signature));
  absl::StatusOr<gnn::Disjointness> disjoint = gnn::CheckDisjoint(info.sample_hashes, test_hashes);
  if (!disjoint.ok()) {
    return ReportError(absl::Status(
        disjoint.status().code(), absl::StrCat("checkpoint ", path, " on the samples in ", d->db, ": ",
                                               std::string(disjoint.status().message()))));
  }
  std::string unchecked_reason;
  if (!disjoint->checked) {
    unchecked_reason =
        info.train_samples + info.val_samples > static_cast<int64_t>(gnn::kMaxSampleHashes)
            ? absl::StrFormat("the checkpoint records no training-sample hashes (its %d training "
                              "and validation samples are more than the %d a checkpoint holds)",
                              info.train_samples + info.val_samples, gnn::kMaxSampleHashes)
            : "the checkpoint records no training-sample hashes (retrain with braid gnn train to "
              "record them)";
    std::cerr << "braid: cannot check that the test set is disjoint from the training set: "
              << unchecked_reason << "\n";
  }
  absl::StatusOr<costmodel::CommModel> comm = costmodel::CommModelFromStore(d->cluster, d->profiles.get());
  if (!comm.ok()) return ReportError(comm.status());
  costmodel::ClusterCostModel roofline(d->cluster, d->profiles.get(), nullptr, *comm);

  std::vector<std::pair<std::string, const std::vector<int>*>> parts;
  if (*split == gnn::Split::kB) {
    parts = {{"holdout", &sets.test_holdout}, {"onnx", &sets.test_onnx}, {"all", &sets.test}};
  } else {
    parts = {{"test", &sets.test}};
  }
  nlohmann::ordered_json j;
  j["checkpoint"] = path;
  j["checkpoint_id"] = (*est)->checkpoint_id();
  j["device_kind"] = kind;
  j["split"] = info.split;
  if (*split == gnn::Split::kB) j["holdout"] = holdout;
  j["hyper_parameters"] = {{"layers", info.hp.layers}, {"heads", info.hp.heads}, {"width", info.hp.width}};
  j["train_samples"] = info.train_samples;
  j["val_loss"] = info.val_loss;
  j["samples"] = d->examples.size();
  j["disjointness"] = disjoint->checked ? "checked" : "unchecked";
  if (disjoint->checked) {
    // No test sample is among the checkpoint's training and validation samples.
    j["disjointness_compared"] = {{"test_samples", disjoint->test_samples},
                                  {"checkpoint_samples", disjoint->recorded_samples}};
  } else {
    j["disjointness_reason"] = unchecked_reason;
  }
  std::vector<std::string> dump_rows = {
      "set,model,ops,measured_s,gnn_s,corrected_roofline_s,signature"};
  for (const auto& [name, idx] : parts) {
    std::vector<costmodel::gnn::FeatureGraph> fs;
    std::vector<double> measured, corrected;
    int corrected_sources = 0;
    for (int i : *idx) {
      const costmodel::GnnExample& e = d->examples[i];
      std::vector<graph::OpId> ops(e.graph.num_ops());
      std::iota(ops.begin(), ops.end(), 0);
      fs.push_back((*est)->Features(e.graph, ops));
      measured.push_back(e.fused.median_s);
      costmodel::OpTime t = roofline.CorrectedRoofline(e.graph, ops);
      corrected.push_back(t.seconds);
      if (t.source == costmodel::TimeSource::kCorrectedRoofline) ++corrected_sources;
    }
    absl::StatusOr<std::vector<double>> pred = (*est)->EstimateBatch(fs);
    if (!pred.ok()) return ReportError(pred.status());
    if (!a.dump.empty()) {
      for (size_t k = 0; k < idx->size(); ++k) {
        const costmodel::GnnExample& e = d->examples[(*idx)[k]];
        dump_rows.push_back(absl::StrCat(name, ",", e.model, ",", e.graph.num_ops(), ",",
                                         measured[k], ",", (*pred)[k], ",", corrected[k], ",\"",
                                         absl::StrReplaceAll(e.signature, {{"\"", "'"}}), "\""));
      }
    }
    j["sets"][name] = {{"gnn", Metrics(*pred, measured)},
                       {"corrected_roofline", Metrics(corrected, measured)},
                       {"roofline_with_member_profiles", corrected_sources}};
  }
  if (!a.dump.empty()) {
    std::ofstream out(a.dump, std::ios::trunc);
    for (const std::string& r : dump_rows) out << r << "\n";
    if (!out) return ReportError(absl::InvalidArgumentError(absl::StrCat(a.dump, ": cannot write")));
  }
  absl::StatusOr<std::optional<std::string>> noise = d->samples->GetMeta(kind, "noise_floor");
  if (noise.ok() && noise->has_value()) {
    nlohmann::ordered_json parsed =
        base::CheckJsonBounds(**noise).ok()
            ? nlohmann::ordered_json::parse(**noise, nullptr, /*allow_exceptions=*/false)
            : nlohmann::ordered_json(nlohmann::ordered_json::value_t::discarded);
    j["noise_floor"] = parsed.is_discarded() ? nlohmann::ordered_json(**noise) : parsed;
  }
  if (a.json) {
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::cout << absl::StrFormat(
      "checkpoint %s (id %s): split %s%s, %d layers x %d heads, width %d, %d training samples\n",
      path, (*est)->checkpoint_id(), info.split,
      *split == gnn::Split::kB ? absl::StrCat(", holdout ", holdout) : "", info.hp.layers,
      info.hp.heads, info.hp.width, info.train_samples);
  if (disjoint->checked) {
    std::cout << absl::StrFormat(
        "disjointness: checked: none of the %d test samples is among the %d training and "
        "validation samples the checkpoint records\n",
        disjoint->test_samples, disjoint->recorded_samples);
  } else {
    std::cout << "disjointness: unchecked: " << unchecked_reason << "\n";
  }
  std::cout << absl::StrFormat("%-8s %-18s %6s %9s %9s %9s %9s %9s\n", "set", "estimator", "n",
                               "p50_err", "p90_err", "within10%", "within14%", "p50_ratio");
  for (const auto& [name, part] : j["sets"].items()) {
    for (const char* est_name : {"gnn", "corrected_roofline"}) {
      const nlohmann::ordered_json& m = part[est_name];
      std::cout << absl::StrFormat("%-8s %-18s %6d %8.1f%% %8.1f%% %8.1f%% %8.1f%% %9.2f\n", name,
                                   est_name, m["n"].get<int>(), 100 * m["p50_error"].get<double>(),
                                   100 * m["p90_error"].get<double>(),
                                   100 * m["within_10pct"].get<double>(),
                                   100 * m["within_14pct"].get<double>(), m["p50_ratio"].get<double>());
    }
  }
  std::cout << "\nerror CDF (fraction of test fused ops within x% of the measurement)\n";
  std::cout << absl::StrFormat("%-8s %-18s", "set", "estimator");
  for (int pct : {1, 2, 5, 10, 14, 20, 30, 50}) std::cout << absl::StrFormat(" %5d%%", pct);
  std::cout << "\n";
  for (const auto& [name, part] : j["sets"].items()) {
    for (const char* est_name : {"gnn", "corrected_roofline"}) {
      const nlohmann::ordered_json& cdf = part[est_name]["cdf_within_pct_1_to_50"];
      std::cout << absl::StrFormat("%-8s %-18s", name, est_name);
      for (int pct : {1, 2, 5, 10, 14, 20, 30, 50}) {
        std::cout << absl::StrFormat(" %5.1f%%", 100 * cdf[pct - 1].get<double>());
      }
      std::cout << "\n";
    }
  }
  if (j.contains("noise_floor")) std::cout << "\nnoise floor: " << j["noise_floor"].dump() << "\n";
  return 0;
}

}  // namespace

CLI::App* RegisterGnnCommands(CLI::App& app, CommandResult& result) {
  CLI::App* g = app.add_subcommand("gnn", kGnnAbout);
  g->require_subcommand(1);

  auto t = std::make_shared<TrainArgs>();
  CLI::App* train = g->add_subcommand("train", "Train the fused-op estimator on the measured samples");
  train->add_option("--profile-db,--db", t->db, "profile store holding the samples (default: the CLI's)");
  train->add_option("--cluster", t->cluster, "cluster whose device kind the samples were measured on")
      ->capture_default_str();
  train->add_option("--split", t->split,
                    "a: unseen fused ops of the six DisCo models (hash 0-7 train, 8 validate, 9 "
                    "test); b: unseen model (--holdout and ONNX models test); all: every sample "
                    "but split a's test part (the checkpoint search uses)")
      ->check(CLI::IsMember({"a", "b", "all"}))
      ->capture_default_str();
  train->add_option("--holdout", t->holdout, "split b: the held-out model")->capture_default_str();
  train->add_option("--epochs", t->epochs, "most epochs per network")->check(CLI::PositiveNumber)->capture_default_str();
  train->add_option("--patience", t->patience, "epochs without a better validation loss before stopping")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  train->add_option("--batch-size", t->batch_size, "groups per step")->check(CLI::PositiveNumber)->capture_default_str();
  train->add_option("--seed", t->seed, "initialisation and shuffling seed")->capture_default_str();
  train->add_option("--layers", t->layers, "graph attention layers (skips the grid search)")->check(CLI::Range(1, 16));
  train->add_option("--heads", t->heads, "attention heads (skips the grid search)")->check(CLI::Range(1, 64));
  train->add_option("--width", t->width, "node embedding width (skips the grid search)")->check(CLI::Range(1, 4096));
  train->add_option("-o,--output", t->out,
                    "checkpoint file (default: the device kind's file name, e.g. "
                    "cpu-1t-x86-64-avx512-amd-epyc.pt; split a/b prefixed split-a-/split-b-)");
  train->callback([t, &result] { result.exit_code = RunTrain(*t); });

  auto e = std::make_shared<EvalArgs>();
  CLI::App* eval = g->add_subcommand(
      "eval",
      "Errors of the estimator and of the corrected roofline on the checkpoint's test set (refused "
      "when a test sample is one the checkpoint was trained or validated on)");
  eval->add_option("--dump", e->dump,
                   "write every test prediction (set, model, measured, GNN, corrected roofline, "
                   "signature) to this CSV file");
  eval->add_option("--checkpoint", e->checkpoint,
                   "checkpoint (default: the device kind's trained estimator, see GnnCheckpointPathFor)");
  eval->add_option("--profile-db,--db", e->db, "profile store holding the samples (default: the CLI's)");
  eval->add_option("--cluster", e->cluster, "cluster whose device kind the samples were measured on")
      ->capture_default_str();
  eval->add_flag("--json", e->json, "print JSON");
  eval->callback([e, &result] { result.exit_code = RunEval(*e); });
  return g;
}

}  // namespace braid::client
