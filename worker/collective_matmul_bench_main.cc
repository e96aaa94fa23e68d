// braid-collective-matmul-bench: times the decomposed collective matmuls
// (worker/collective_matmul.h) on real Gloo ranks of this host and prints, per
// pattern, a markdown table: m, method, median [95% CI of the median] of the
// slowest rank's time, the non-split GEMM alone, the collective alone, Flux's
// effective communication time (overall - GEMM) and overlap efficiency
// (1 - ECT / ECT of the undecomposed baseline "none").
//
//   braid-collective-matmul-bench --ranks 2 --m 64,256,1024,4096 --k 1024 \
//       --n 1024 --reps 20
#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "base/stats.h"
#include "worker/collective_matmul.h"

int main(int argc, char** argv) {
  using namespace braid::worker;
  int ranks = 2, reps = 20, warmup = 2;
  std::vector<int64_t> ms = {64, 256, 1024, 4096};
  int64_t k = 1024, nout = 1024;
  std::vector<std::string> patterns = {"allgather_matmul", "matmul_reducescatter"};
  std::string rank_binary;
  CLI::App app{"Decomposed collective matmul benchmark on Gloo ranks"};
  app.add_option("--ranks", ranks);
  app.add_option("--m", ms)->delimiter(',');
  app.add_option("--k", k);
  app.add_option("--n", nout, "output features");
  app.add_option("--reps", reps);
  app.add_option("--warmup", warmup);
  app.add_option("--patterns", patterns)->delimiter(',');
  app.add_option("--rank-binary", rank_binary);
  CLI11_PARSE(app, argc, argv);
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
    std::printf("| m | method | median ms [95%% CI] | t_gemm ms | t_comm ms | effective comm ms | "
                "overlap eff. %% | max rel diff |\n|---|---|---|---|---|---|---|---|\n");
    for (int64_t m : ms) {
      CollectiveMatMulSpec spec{.pattern = *pattern, .methods = methods, .m = m, .k = k,
                                .nout = nout, .ranks = ranks, .repetitions = reps,
                                .warmup = warmup, .seed = 1};
      CollectiveMatMulOptions options;
      options.rank_binary = rank_binary;
      auto r = RunCollectiveMatMul(spec, options);
      if (!r.ok()) {
        std::cerr << r.status() << "\n";
        return 1;
      }
      for (size_t i = 0; i < r->methods.size(); ++i) {
        const braid::MedianInterval ci = braid::MedianConfidenceInterval(r->methods[i].seconds);
        const OverlapEfficiency e = ComputeOverlapEfficiency(*r, i);
        std::printf("| %lld | %s | %.3f [%.3f, %.3f] | %.3f | %.3f | %.3f | %.1f | %.1e |\n",
                    static_cast<long long>(m),
                    std::string(DecomposeMethodName(r->methods[i].method)).c_str(),
                    ci.median * 1e3, ci.low * 1e3, ci.high * 1e3, e.gemm_s * 1e3, e.comm_s * 1e3,
                    e.effective_comm_s * 1e3, e.efficiency * 100, r->methods[i].max_rel_diff);
      }
      std::fflush(stdout);
    }
  }
  return 0;
}
