// braid-overlap-measure: overlapped tensor-parallel training on Gloo ranks
// (worker/overlap_train.h), each pair's method chosen by braid's search from
// primitives measured on these ranks (client/overlap_choice.h), measured
// against no overlap and each fixed method applied to every pair.
//
//   braid-overlap-measure --model mlp --ranks 2 --rounds 15 --steps 3
//
// 1. Measures the primitives at every pair's shapes (pinned ranks), fits the
//    transfer line, measures rho; prints each pair's candidates as the
//    overlap model predicts them (and the pair measured alone per method).
// 2. Trains the variants {none, looped, unrolled, bidirectional, braid}
//    interleaved round by round on the same ranks (each round: `steps` steps
//    of every variant), drops round 0 as warm-up, and prints per variant the
//    median step time with the 95% confidence interval of the median
//    (base/stats.h), the time inside the pairs (measured; and as the overlap
//    model predicts it), the predicted step (the none variant's measured
//    time outside the pairs plus the predicted pairs), and braid's verdict
//    against every other variant from the paired per-step differences (same
//    round, same step): slower only when the difference's 95% CI is above 0.
// 3. Checks every variant's losses equal the none variant's.
// 4. With --write-plan P, writes braid's choice as an overlap plan file
//    (worker/activator.h: {"format": "braid.plan.v1", "overlap_training":
//    {...sizes, "methods", "pairs", "predicted_step_s"}}) and, when the ranks'
//    plan secret is configured ($BRAID_PLAN_SECRET_FILE or
//    $BRAID_PLAN_SECRET), its HMAC-SHA256 tag as P.hmac, as `braid plan -o`
//    does; `braid-worker activate --plan P` runs it.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/command_line.h"
#include "base/digest.h"
#include "base/stats.h"
#include "worker/activator.h"
#include "client/overlap_choice.h"
#include "worker/overlap_train.h"

namespace {

using braid::worker::DecomposeMethod;

char Letter(DecomposeMethod m) {
  switch (m) {
    case DecomposeMethod::kNone:
      return 'n';
    case DecomposeMethod::kLooped:
      return 'l';
    case DecomposeMethod::kLoopedUnrolled:
      return 'u';
    case DecomposeMethod::kBidirectional:
      return 'b';
  }
  return '?';
}

absl::Status WriteText(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  f.close();
  if (!f) return absl::InternalError(absl::StrCat("--write-plan: cannot write ", path));
  return absl::OkStatus();
}

// The plan file and, with a plan secret configured, its tag beside it (what
// `braid plan -o` does, client/cli_plan.cc WritePlanFile).
// Whether it signed.
absl::StatusOr<bool> WritePlan(const std::string& path, const std::string& text) {
  if (absl::Status s = WriteText(path, text); !s.ok()) return s;
  absl::StatusOr<std::string> secret = braid::LoadPlanSecret("");
  if (absl::IsNotFound(secret.status())) return false;
  if (!secret.ok()) return secret.status();
  if (absl::Status s = WriteText(path + ".hmac", braid::HmacSha256Hex(*secret, text) + "\n"); !s.ok()) {
    return s;
  }
  return true;
}

int Fail(const absl::Status& s) {
  std::cerr << "braid-overlap-measure: " << s << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  namespace w = braid::worker;
  std::string model = "mlp";
  w::OverlapTrainSpec s;
  int64_t rows = -1, d = -1, f = -1, heads = -1, seq = -1;
  int part_reps = 7;
  bool no_pin = false;
  s.rounds = 15;
  s.steps = 3;
  s.lr = 0.01;
  CLI::App app{"Overlapped tensor-parallel training: braid's per-pair choice vs fixed methods"};
  app.add_option("--model", model, "mlp or transformer");
  app.add_option("--ranks", s.ranks, "tensor-parallel ranks");
  app.add_option("--rounds", s.rounds, "interleaved rounds (round 0 is warm-up)");
  app.add_option("--steps", s.steps, "steps of each variant per round");
  app.add_option("--rows", rows, "tokens per step (default 1024)");
  app.add_option("--d-model", d, "model width (default 512)");
  app.add_option("--d-ff", f, "MLP hidden width (default 4 * d-model)");
  app.add_option("--heads", heads, "transformer heads (default 8)");
  app.add_option("--seq", seq, "transformer sequence length (default 128)");
  app.add_option("--blocks", s.blocks, "blocks");
  app.add_option("--part-reps", part_reps, "repetitions of each primitive measurement");
  app.add_option("--lr", s.lr, "SGD learning rate");
  app.add_option("--seed", s.seed);
  app.add_flag("--no-pin", no_pin, "do not pin rank r to core r");
  std::string write_plan;
  app.add_option("--write-plan", write_plan,
                 "write braid's choice as an overlap plan file (and FILE.hmac with a plan secret) "
                 "for braid-worker activate --plan");
  if (std::optional<int> done = braid::base::ParseCommandLine(app, argc, argv)) return *done;
  auto m = w::ParseOverlapModel(model);
  if (!m.ok()) return Fail(m.status());
  s.model = *m;
  s.rows = rows > 0 ? rows : 1024;
  s.d_model = d > 0 ? d : 512;
  s.d_ff = f > 0 ? f : 4 * s.d_model;
  s.heads = heads > 0 ? heads : 8;
  s.seq = seq > 0 ? seq : std::min<int64_t>(128, s.rows);
  s.pin_cores = !no_pin;
  if (absl::Status v = w::ValidateOverlapTrainSpec(s); !v.ok()) return Fail(v);

  std::printf("## braid-overlap-measure: %s, %d ranks, rows=%ld d_model=%ld d_ff=%ld", model.c_str(),
              s.ranks, static_cast<long>(s.rows), static_cast<long>(s.d_model),
              static_cast<long>(s.d_ff));
  if (s.model == w::OverlapModel::kTransformer) {
    std::printf(" heads=%ld seq=%ld", static_cast<long>(s.heads), static_cast<long>(s.seq));
  }
  std::printf(" blocks=%d, pinned=%s\n\n", s.blocks, s.pin_cores ? "yes" : "no");
  std::fflush(stdout);

  absl::StatusOr<braid::client::OverlapMeasurements> meas = braid::client::MeasureOverlapPrimitives(s, part_reps, {});
  if (!meas.ok()) return Fail(meas.status());
  std::printf("Measured: %zu transfer samples, fitted line %.1f us + %.3f ns/B; rho (transfer CPU "
              "share) = %.3f; %zu GEMM shapes, %zu Add shapes\n\n",
              meas->transfer_samples.size(), meas->transfer_line.overhead_s * 1e6,
              meas->transfer_line.seconds_per_byte * 1e9, meas->transfer_cpu_fraction,
              meas->gemm_s.size(), meas->add_s.size());
  absl::StatusOr<braid::client::TrainingOverlapChoice> choice = braid::client::ChooseTrainingOverlaps(s, *meas);
  if (!choice.ok()) return Fail(choice.status());

  const std::vector<w::OverlapPair> pairs = w::OverlapPairs(s);
  std::printf("### braid's choice per pair (predicted ms per candidate; measured ms of the pair "
              "alone)\n\n");
  std::printf("| pair | pattern | m | k | nout | pred none | pred looped | pred unrolled | pred "
              "bidir | chosen | meas none | meas looped | meas unrolled | meas bidir |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  std::vector<std::vector<double>> pred(pairs.size(), std::vector<double>(4, NAN));
  for (size_t i = 0; i < pairs.size(); ++i) {
    const w::OverlapPair& p = pairs[i];
    const braid::search::OverlapChoice& c = choice->choices[i];
    for (const auto& cand : c.candidates) {
      absl::StatusOr<DecomposeMethod> dm = braid::client::DecomposeMethodOf(cand.method);
      if (dm.ok()) pred[i][static_cast<int>(*dm)] = cand.time_s;
    }
    const auto& ms = meas->method_s.at({p.pattern, p.m, p.k, p.nout});
    std::printf("| %s | %s | %ld | %ld | %ld | %.2f | %.2f | %.2f | %.2f | **%s** | %.2f | %.2f | "
                "%.2f | %.2f |\n",
                p.name.c_str(), std::string(w::CollectivePatternName(p.pattern)).c_str(),
                static_cast<long>(p.m), static_cast<long>(p.k), static_cast<long>(p.nout),
                pred[i][0] * 1e3, pred[i][1] * 1e3, pred[i][2] * 1e3, pred[i][3] * 1e3,
                std::string(w::DecomposeMethodName(choice->methods[i])).c_str(),
                ms.at(DecomposeMethod::kNone) * 1e3, ms.at(DecomposeMethod::kLooped) * 1e3,
                ms.at(DecomposeMethod::kLoopedUnrolled) * 1e3,
                ms.at(DecomposeMethod::kBidirectional) * 1e3);
  }
  std::printf("\n");
  std::fflush(stdout);

  const std::vector<std::string> names = {"none", "looped", "unrolled", "bidirectional", "braid"};
  s.variants = {{DecomposeMethod::kNone}, {DecomposeMethod::kLooped},
                {DecomposeMethod::kLoopedUnrolled}, {DecomposeMethod::kBidirectional},
                choice->methods};
  absl::StatusOr<w::OverlapTrainResult> r = w::RunOverlapTraining(s, {});
  if (!r.ok()) return Fail(r.status());
  const int skip = s.rounds > 1 ? s.steps : 0;  // round 0: warm-up
  std::vector<std::vector<double>> times;
  for (const w::OverlapVariantResult& v : r->variants) {
    times.emplace_back(v.step_s.begin() + skip, v.step_s.end());
  }
  // The step outside the pairs (local ops, loss, update), from the none variant.
  std::vector<double> rest;
  for (size_t j = skip; j < r->variants[0].step_s.size(); ++j) {
    rest.push_back(r->variants[0].step_s[j] - r->variants[0].pair_s[j]);
  }
  const double rest_s = braid::Summarize(rest).median_s;
  std::printf("### Training step, variants interleaved (%d rounds x %d steps each%s)\n\n",
              s.rounds, s.steps, skip > 0 ? ", round 0 dropped as warm-up" : "");
  std::printf("Per-pair methods in pair order (n none, l looped, u unrolled, b bidirectional). "
              "In pairs: the step's time inside its pairs (collective + GEMM), measured "
              "and as the overlap model predicts the variant's methods; predicted step: the "
              "none variant's measured time outside the pairs (%.1f ms) plus the predicted "
              "pairs.\n\n", rest_s * 1e3);
  std::printf("| variant | per-pair methods | median step ms [95%% CI or range] | in pairs ms (measured) | "
              "in pairs ms (predicted) | predicted step ms |\n");
  std::printf("|---|---|---|---|---|---|\n");
  double braid_predicted_step_s = 0;
  for (size_t v = 0; v < names.size(); ++v) {
    std::string letters;
    double pred_sum = 0;
    for (size_t i = 0; i < pairs.size(); ++i) {
      const DecomposeMethod dm = r->variants[v].methods[i];
      letters += Letter(dm);
      pred_sum += pred[i][static_cast<int>(dm)];
    }
    if (v + 1 == names.size()) braid_predicted_step_s = rest_s + pred_sum;
    const braid::MedianInterval ci = braid::MedianConfidenceInterval(times[v]);
    const std::vector<double> in_pairs(r->variants[v].pair_s.begin() + skip,
                                       r->variants[v].pair_s.end());
    std::printf("| %s | %s | %.1f %s | %.1f | %.1f | %.1f |\n", names[v].c_str(),
                letters.c_str(), ci.median * 1e3, braid::FormatInterval(ci, 1e3, 1).c_str(),
                braid::Summarize(in_pairs).median_s * 1e3, pred_sum * 1e3,
                (rest_s + pred_sum) * 1e3);
  }
  std::printf("\nVerdicts (braid - other, paired per step: median [95%% CI, or the range below 6 steps] ms):\n\n");
  bool all_ok = true;
  const size_t b = names.size() - 1;
  for (size_t v = 0; v + 1 < names.size(); ++v) {
    std::vector<double> diff;
    for (size_t j = 0; j < times[b].size(); ++j) diff.push_back(times[b][j] - times[v][j]);
    const braid::MedianInterval ci = braid::MedianConfidenceInterval(diff);
    const char* verdict = ci.low > 0    ? "SLOWER beyond the interval"
                          : ci.high < 0 ? "faster beyond the interval"
                                        : "no difference beyond the interval";
    if (ci.low > 0) all_ok = false;
    std::printf("- braid vs %s: %+.2f %s ms: %s\n", names[v].c_str(), ci.median * 1e3,
                braid::FormatInterval(ci, 1e3, 2).c_str(), verdict);
  }
  double worst = 0;
  for (size_t v = 1; v < names.size(); ++v) {
    for (size_t i = 0; i < r->variants[v].loss.size(); ++i) {
      const double ref = r->variants[0].loss[i];
      worst = std::max(worst, std::abs(r->variants[v].loss[i] - ref) / std::max(1e-30, std::abs(ref)));
    }
  }
  std::printf("\nbraid no slower than every other variant: %s. Losses of every variant vs none: "
              "max relative difference %.2e over %zu steps.\n",
              all_ok ? "yes" : "NO", worst, r->variants[0].loss.size());
  if (!write_plan.empty()) {
    s.variants = {choice->methods};
    absl::StatusOr<bool> signed_ =
        WritePlan(write_plan, w::OverlapPlanJson(s, choice->methods, braid_predicted_step_s));
    if (!signed_.ok()) return Fail(signed_.status());
    std::printf("\nbraid's choice written to %s (predicted step %.3f ms)%s\n", write_plan.c_str(),
                braid_predicted_step_s * 1e3,
                *signed_ ? ", signed: .hmac beside it" : ", unsigned (no plan secret configured)");
  }
  return 0;
}
