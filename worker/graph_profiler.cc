#include "worker/graph_profiler.h"

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "worker/cpu_profiler.h"
#include "worker/executor.h"
#include "worker/internal/executor.h"
#include "worker/timing.h"

namespace braid::worker {

absl::StatusOr<GraphProfileReport> ProfileGraphInGraph(const graph::Graph& training,
                                                       costmodel::ProfileStore& store,
                                                       const GraphProfileOptions& options) {
  if (options.ranks < 1 || options.iterations < 1 || options.warmup < 0) {
    return absl::InvalidArgumentError(
        "graph profiler: ranks >= 1, iterations >= 1 and warmup >= 0");
  }
  ExecStrategy s = GraphProfileStrategy(options.order);
  TrainBenchOptions o;
  o.ranks = options.ranks;
  o.warmup = options.warmup;
  o.iterations = options.iterations;
  o.verify_allreduce = false;
  o.rank_binary = options.rank_binary;
  o.timeout_s = options.timeout_s;
  // The same iterations without the per-op clocks, interleaved with the timed
  // ones: what the clocks themselves cost.
  ExecStrategy plain = s;
  plain.name = "compute only";
  plain.time_ops = false;
  ASSIGN_OR_RETURN(std::vector<StrategyMeasurement> m, RunTrainingBench(training, {s, plain}, o));
  absl::StatusOr<GraphProfileReport> report =
      StoreGraphProfile(training, m.front(), options.ranks, options.iterations, store);
  if (report.ok()) report->untimed_iteration_s = m[1].median_s;
  return report;
}

ExecStrategy GraphProfileStrategy(std::vector<graph::OpId> order,
                                  std::vector<ExecStrategy::FusedGroup> groups) {
  ExecStrategy s;
  s.name = groups.empty() ? "in-graph profile" : "in-graph fused profile";
  s.groups = std::move(groups);
  s.compute_only = true;
  s.time_ops = true;
  s.order = std::move(order);
  return s;
}

absl::StatusOr<GraphProfileReport> StoreGraphProfile(const graph::Graph& training,
                                                     const StrategyMeasurement& run, int ranks,
                                                     int iterations,
                                                     costmodel::ProfileStore& store,
                                                     const ExecStrategy* strategy) {
  if (ranks < 1 || iterations < 1) {
    return absl::InvalidArgumentError("graph profiler: ranks >= 1 and iterations >= 1");
  }
  GraphProfileReport report;
  report.iteration_s = run.median_s;
  // An iteration ends with its slowest rank: per timed iteration, take the
  // op times of the rank whose ops summed highest, so the stored means add
  // up to the mean of the slowest rank's compute.
  const int iters = iterations;
  std::vector<int> slowest(iters, 0);
  std::vector<double> total(iters, -1);
  for (int it = 0; it < iters; ++it) {
    for (int r = 0; r < ranks; ++r) {
      double sum = 0;
      for (const std::vector<double>& v : run.op_s) {
        if (!v.empty()) sum += v[static_cast<size_t>(r) * iters + it];
      }
      if (sum > total[it]) {
        total[it] = sum;
        slowest[it] = r;
      }
    }
  }
  // The simulator predicts a typical iteration (the median the executor
  // reports), so the means are taken over the iterations whose totals lie in
  // the interquartile range: a burst of machine noise in one iteration would
  // otherwise inflate every op's mean.
  std::vector<double> sorted = total;
  std::sort(sorted.begin(), sorted.end());
  const double lo = Quantile(sorted, 0.25), hi = Quantile(sorted, 0.75);
  std::vector<int> typical;
  for (int it = 0; it < iters; ++it) {
    if (total[it] >= lo && total[it] <= hi) typical.push_back(it);
  }
  if (typical.empty()) {  // cannot happen (the median lies between), but stay safe
    for (int it = 0; it < iters; ++it) typical.push_back(it);
  }
  // Fused groups: the executor timed each at its first member in the order
  // (its trigger); the other members have no times of their own.
  std::map<graph::OpId, std::pair<std::string, std::string>> trigger_key;
  std::vector<char> in_group(training.num_ops(), 0);
  if (strategy != nullptr && !strategy->groups.empty()) {
    std::vector<int> pos(training.num_ops(), -1);
    for (size_t i = 0; i < strategy->order.size(); ++i) pos[strategy->order[i]] = static_cast<int>(i);
    for (const ExecStrategy::FusedGroup& grp : strategy->groups) {
      graph::OpId trigger = graph::kNoId;
      for (graph::OpId id : grp.ops) {
        if (std::find(grp.duplicated.begin(), grp.duplicated.end(), id) != grp.duplicated.end()) {
          continue;
        }
        in_group[id] = 1;
        if (trigger == graph::kNoId || pos[id] < pos[trigger]) trigger = id;
      }
      if (trigger != graph::kNoId) {
        trigger_key[trigger] = {costmodel::kFusedOp, costmodel::FusedSignature(training, grp.ops)};
      }
    }
  }
  // Every instance of a key (the same layer repeated) pools its samples.
  std::map<std::pair<std::string, std::string>, std::vector<double>> by_key;
  std::map<std::pair<std::string, std::string>, int> instances;
  for (graph::OpId id = 0; id < training.num_ops(); ++id) {
    const graph::Op& op = training.op(id);
    if (graph::IsCollectiveKind(op.kind)) {
      ++report.communication;
      continue;
    }
    if (in_group[id] && !trigger_key.count(id)) continue;
    if (id >= static_cast<graph::OpId>(run.op_s.size()) ||
        run.op_s[id].size() != static_cast<size_t>(ranks) * iters) {
      return absl::InternalError(
          absl::StrCat("graph profiler: op '", op.name, "' was not timed by the ranks"));
    }
    ++report.ops_timed;
    auto it_key = trigger_key.find(id);
    auto key = it_key != trigger_key.end()
                   ? it_key->second
                   : std::make_pair(op.type, costmodel::OpSignature(training, id));
    std::vector<double>& v = by_key[key];
    for (int it : typical) {
      v.push_back(run.op_s[id][static_cast<size_t>(slowest[it]) * iters + it]);
    }
    ++instances[key];
  }
  for (auto& [key, samples] : by_key) {
    report.samples += static_cast<int64_t>(samples.size());
    TimingSummary sum = Summarize(samples);
    double total = 0;
    for (double x : samples) total += x;
    const double mean = total / static_cast<double>(samples.size());
    // The mean, not the median (costmodel::ProfileSample): the simulator sums
    // op times into an iteration.
    costmodel::ProfileSample sample{.median_s = mean, .spread_s = sum.iqr_s, .repetitions = sum.count};
    RETURN_IF_ERROR(store.Put({CpuDeviceKind(), key.first, key.second}, sample));
    ++report.keys_stored;
    report.sum_of_medians_s += sum.median_s * instances[key];
    report.sum_of_means_s += mean * instances[key];
  }
  // The packing copy, from the same ranks and iterations.
  if (run.pack_bytes > 0 && run.pack_s.size() == static_cast<size_t>(ranks) * iters) {
    double total = 0;
    for (int it : typical) total += run.pack_s[static_cast<size_t>(slowest[it]) * iters + it];
    report.pack_s = total / static_cast<double>(typical.size());
    report.pack_bytes = run.pack_bytes;
    costmodel::ProfileSample per_byte{
        .median_s = report.pack_s / static_cast<double>(run.pack_bytes),
        .spread_s = 0,
        .repetitions = static_cast<int>(typical.size())};
    RETURN_IF_ERROR(store.Put(
        {CpuDeviceKind(), costmodel::kBucketPackOp, costmodel::kPerByteSignature}, per_byte));
  }
  return report;
}

}  // namespace braid::worker
