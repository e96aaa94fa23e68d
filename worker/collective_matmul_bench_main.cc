// braid-collective-matmul-bench: times the decomposed collective matmuls
// (worker/collective_matmul.h) on real Gloo ranks of this host and prints, per
// pattern, a markdown table: m, method, median [95% CI of the median] of the
// slowest rank's time, the non-split GEMM alone, the collective alone, Flux's
// effective communication time (overall - GEMM) and overlap efficiency
// (1 - ECT / ECT of the undecomposed baseline "none"), and next to them the
// overlap model's prediction (costmodel/overlap_model.h) composed from the
// primitives timed in the same interleaved repetitions (chunk GEMMs, a ring
// step's transfer and the CPU it takes, additions): predicted time and
// efficiency, and whether the sign and the value (within 15 points) agree.
//
//   braid-collective-matmul-bench --ranks 2 --m 64,256,1024,4096 --k 1024 \
//       --n 1024 --reps 20
#include <algorithm>
#include <cmath>
#include <optional>
#include <random>
#include <cstdio>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_format.h"
#include "base/command_line.h"
#include "base/stats.h"
#include "costmodel/comm_model.h"
#include "worker/collective_matmul.h"

namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Flux eq. 2 on the medians of `method`, `none` and `gemm`, and its 95%
// bootstrap interval: the repetitions (interleaved, so one index is one
// stretch of the machine's load) resampled jointly, 2000 times, fixed seed.
struct EffInterval {
  double low = 0, high = 0;
};
EffInterval EfficiencyInterval(const std::vector<double>& method, const std::vector<double>& none,
                               const std::vector<double>& gemm) {
  const size_t n = method.size();
  std::mt19937 rng(12345);
  std::uniform_int_distribution<size_t> pick(0, n - 1);
  std::vector<double> effs;
  std::vector<double> a(n), b(n), g(n);
  for (int it = 0; it < 2000; ++it) {
    for (size_t i = 0; i < n; ++i) {
      const size_t j = pick(rng);
      a[i] = method[j];
      b[i] = none[j];
      g[i] = gemm[j];
    }
    const double mg = Median(g), base = Median(b) - mg;
    if (base > 0) effs.push_back(1.0 - (Median(a) - mg) / base);
  }
  if (effs.size() < 100) return {NAN, NAN};
  std::sort(effs.begin(), effs.end());
  return {effs[effs.size() * 25 / 1000], effs[effs.size() * 975 / 1000]};
}

}  // namespace

int main(int argc, char** argv) {
  using namespace braid::worker;
  int ranks = 2, reps = 20, warmup = 2;
  std::vector<int64_t> ms = {64, 256, 1024, 4096};
  int64_t k = 1024, nout = 1024;
  std::vector<std::string> patterns = {"allgather_matmul", "matmul_reducescatter"};
  std::string rank_binary;
  bool pin_cores = true;
  int agree_sign = 0, signed_rows = 0, agree_15 = 0, compared = 0;
  CLI::App app{"Decomposed collective matmul benchmark on Gloo ranks"};
  app.add_option("--ranks", ranks);
  app.add_option("--m", ms)->delimiter(',');
  app.add_option("--k", k);
  app.add_option("--n", nout, "output features");
  app.add_option("--reps", reps);
  app.add_option("--warmup", warmup);
  app.add_option("--patterns", patterns)->delimiter(',');
  app.add_option("--rank-binary", rank_binary);
  app.add_option("--pin-cores", pin_cores, "pin rank r to core r mod cores (default true)");
  if (std::optional<int> done = braid::base::ParseCommandLine(app, argc, argv)) return *done;
  const std::vector<DecomposeMethod> methods = {DecomposeMethod::kNone, DecomposeMethod::kLooped,
                                                DecomposeMethod::kLoopedUnrolled,
                                                DecomposeMethod::kBidirectional};
  for (const std::string& pname : patterns) {
    auto pattern = ParseCollectivePattern(pname);
    if (!pattern.ok()) {
      std::cerr << pattern.status() << "\n";
      return 1;
    }
    std::printf("\n### %s, %d ranks, k=%lld, n=%lld, %d reps (+%d warm-up)\n\n", pname.c_str(),
                ranks, static_cast<long long>(k), static_cast<long long>(nout), reps, warmup);
    std::fflush(stdout);
    std::printf("| m | method | median ms [95%% CI] | t_gemm ms | t_comm ms | effective comm ms | "
                "overlap eff. %% [95%% CI] | predicted ms | predicted eff. %% | sign, within 15 pts | "
                "max rel diff |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
    // All sizes first: the transfers and the collective are fitted across
    // them (T = bytes * C + D, costmodel::FitLinear, as braid's comm model
    // fits worker benchmarks), which one size's median alone is too noisy
    // for on shared cores; the model then reads the fitted lines.
    std::vector<CollectiveMatMulSpec> specs;
    std::vector<CollectiveMatMulResult> results;
    std::vector<std::pair<double, double>> p2p_points, coll_points;
    std::vector<double> rhos;
    for (int64_t m : ms) {
      CollectiveMatMulSpec spec{.pattern = *pattern, .methods = methods, .m = m, .k = k,
                                .nout = nout, .ranks = ranks, .repetitions = reps,
                                .warmup = warmup, .seed = 1, .parts = true,
                                .pin_cores = pin_cores};
      CollectiveMatMulOptions options;
      options.rank_binary = rank_binary;
      auto r = RunCollectiveMatMul(spec, options);
      if (!r.ok()) {
        std::cerr << r.status() << "\n";
        return 1;
      }
      const bool ag = *pattern == CollectivePattern::kAllGatherMatMul;
      const int64_t rows = m / ranks, half = rows - rows / 2, cols = ag ? k : nout;
      for (double t : r->parts.at("xfer_chunk")) p2p_points.push_back({rows * cols * 4.0, t});
      for (double t : r->parts.at("xfer_half")) p2p_points.push_back({half * cols * 4.0, t});
      for (double t : r->comm_s) coll_points.push_back({m * cols * 4.0, t});
      rhos.push_back(Median(r->parts.at("xfer_cpu_fraction")));
      specs.push_back(spec);
      results.push_back(*std::move(r));
    }
    auto p2p_fit = braid::costmodel::FitLinear(p2p_points);
    auto coll_fit = braid::costmodel::FitLinear(coll_points);
    if (!p2p_fit.ok() || !coll_fit.ok()) {
      std::cerr << "fit: " << (p2p_fit.ok() ? coll_fit.status() : p2p_fit.status()) << "\n";
      return 1;
    }
    const double rho = Median(rhos);
    for (size_t mi = 0; mi < specs.size(); ++mi) {
      const CollectiveMatMulSpec& spec = specs[mi];
      const int64_t m = spec.m;
      const CollectiveMatMulResult* r = &results[mi];
      const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
      const double spare = std::max(0.0, static_cast<double>(hw) / ranks - 1.0);
      auto parts = MeasuredOverlapParts(spec, *r, spare);
      if (!parts.ok()) {
        std::cerr << parts.status() << "\n";
        return 1;
      }
      {
        const bool ag = *pattern == CollectivePattern::kAllGatherMatMul;
        const int64_t rows = m / ranks, half = rows - rows / 2, cols = ag ? k : nout;
        parts->chunk_transfer_s = p2p_fit->At(rows * cols * 4);
        parts->half_transfer_s = p2p_fit->At(half * cols * 4);
        parts->collective_s = coll_fit->At(m * cols * 4);
        parts->transfer_cpu_fraction = rho;
      }
      const auto mpat = *pattern == CollectivePattern::kAllGatherMatMul
                            ? braid::costmodel::OverlapPattern::kAllGatherMatMul
                            : braid::costmodel::OverlapPattern::kMatMulReduceScatter;
      auto model_method = [](DecomposeMethod d) {
        switch (d) {
          case DecomposeMethod::kNone: return braid::costmodel::OverlapMethod::kNone;
          case DecomposeMethod::kLooped: return braid::costmodel::OverlapMethod::kLooped;
          case DecomposeMethod::kLoopedUnrolled: return braid::costmodel::OverlapMethod::kUnrolled;
          case DecomposeMethod::kBidirectional:
            return braid::costmodel::OverlapMethod::kBidirectional;
        }
        return braid::costmodel::OverlapMethod::kNone;
      };
      const double pred_none =
          braid::costmodel::PredictOverlapTime(mpat, braid::costmodel::OverlapMethod::kNone, *parts);
      for (size_t i = 0; i < r->methods.size(); ++i) {
        const braid::MedianInterval ci = braid::MedianConfidenceInterval(r->methods[i].seconds);
        const OverlapEfficiency e = ComputeOverlapEfficiency(*r, i);
        const double pred =
            braid::costmodel::PredictOverlapTime(mpat, model_method(r->methods[i].method), *parts);
        const double pred_e = braid::costmodel::OverlapEfficiencyOf(pred, pred_none, parts->gemm_s);
        std::string verdict = "(baseline)";
        std::string eff_text = "0.0";
        if (r->methods[i].method != DecomposeMethod::kNone) {
          const EffInterval ei =
              EfficiencyInterval(r->methods[i].seconds, r->methods[0].seconds, r->gemm_s);
          eff_text = absl::StrFormat("%.1f [%.0f, %.0f]", e.efficiency * 100, ei.low * 100,
                                     ei.high * 100);
          // The measured sign is known only where its interval excludes 0.
          std::string sign = "n/s";
          if (ei.low > 0 || ei.high < 0) {
            const bool ok = (pred_e >= 0) == (e.efficiency >= 0);
            agree_sign += ok;
            ++signed_rows;
            sign = ok ? "yes" : "NO";
          }
          const bool within = std::abs(pred_e - e.efficiency) <= 0.15;
          agree_15 += within;
          ++compared;
          verdict = sign + ", " + (within ? "yes" : "NO");
        }
        std::printf("| %lld | %s | %.3f %s | %.3f | %.3f | %.3f | %s | %.3f | %.1f | %s | "
                    "%.1e |\n",
                    static_cast<long long>(m),
                    std::string(DecomposeMethodName(r->methods[i].method)).c_str(),
                    ci.median * 1e3, braid::FormatInterval(ci, 1e3, 3).c_str(), e.gemm_s * 1e3,
                    e.comm_s * 1e3,
                    e.effective_comm_s * 1e3, eff_text.c_str(), pred * 1e3, pred_e * 100,
                    verdict.c_str(), r->methods[i].max_rel_diff);
      }
      std::printf("|  | parts: G_c %.3f, G_h %.3f, P_c %.3f, P_h %.3f (fitted), A_c %.3f, rho %.2f, "
                  "spare cores/rank %.1f |  |  |  |  |  |  |  |  |  |\n",
                  parts->chunk_gemm_s * 1e3, parts->half_gemm_s * 1e3,
                  parts->chunk_transfer_s * 1e3, parts->half_transfer_s * 1e3,
                  parts->chunk_add_s * 1e3,
                  parts->transfer_cpu_fraction, parts->spare_cores_per_rank);
      std::fflush(stdout);
    }
    std::printf("\nfitted over every size: a ring step's transfer %.1f us + %.3f ns/byte, the "
                "collective %.1f us + %.3f ns/byte; transfer CPU share rho %.2f (median)\n",
                p2p_fit->overhead_s * 1e6, p2p_fit->seconds_per_byte * 1e9,
                coll_fit->overhead_s * 1e6, coll_fit->seconds_per_byte * 1e9, rho);
  }
  std::printf("\nprediction vs measurement: sign agrees in %d of %d decomposed rows whose measured "
              "sign is known (95%% interval excludes 0; n/s: it does not), value within 15 points "
              "in %d of %d\n",
              agree_sign, signed_rows, agree_15, compared);
  return 0;
}
