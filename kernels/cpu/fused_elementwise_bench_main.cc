// braid-fused-elementwise-bench: the fused CPU elementwise kernel
// (fused_elementwise.h) against LibTorch op by op on the same chains, one
// thread, 2M-point (8 MiB) float tensors. Each repetition runs the LibTorch
// version (every op a separate ATen call allocating its output, as a model
// would) and then the fused kernel (Run, allocating its outputs), so both
// see the same machine state; medians with 95% confidence intervals. The
// fused kernel is also timed writing into preallocated outputs (RunInto):
// an 8 MiB allocation from glibc's malloc is a fresh mmap whose 2048 first-
// touch page faults can cost as much as the kernel itself on a VM.
//
//   braid-fused-elementwise-bench [--reps 40] [--warmup 5] [--points 2097152]
//                                 [--tile-sweep] [--isa-sweep] [--op-sweep]
//
// --tile-sweep times the fused kernel at several tile sizes (the measurement
// behind the default tile sizes in fused_elementwise_plan.cc; pass a smaller
// --points for data that stays in cache), --isa-sweep each instruction-set
// variant, --op-sweep each instruction alone (ns per point in L1).
// --points: points per full tensor, a multiple of 1024.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "base/command_line.h"
#include "kernels/cpu/fused_elementwise.h"
#include "kernels/ew_code.h"
#include "kernels/ew_program.h"

namespace braid::kernels::cpu {
namespace {

constexpr int64_t kCols = 1024;
constexpr int64_t kDefaultRows = 2048;  // 2048 x 1024 floats = 8 MiB

struct Chain {
  std::string name;
  int ops;
  EwProgram program;
  std::vector<at::Tensor> inputs;
  // The same computation op by op; returns what the fused outputs hold.
  std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)> torch;
};

std::vector<Chain> Chains(int64_t rows) {
  const std::vector<int64_t> full = {rows, kCols};
  auto Full = [&] { return at::randn(full); };
  auto Row = [] { return at::randn({kCols}); };
  const std::vector<int64_t> row = {kCols};
  std::vector<Chain> chains;
  {  // Bias, GELU, dropout mask, residual: a transformer MLP epilogue.
    Chain c{"bias+gelu+mask+residual", 4};
    c.program.shape = full;
    c.program.inputs = {full, row, full, full};  // x, bias, mask, residual
    c.program.instrs = {
        {EwCode::kAdd, 0, 1}, {EwCode::kGelu, 4}, {EwCode::kMul, 5, 2}, {EwCode::kAdd, 6, 3}};
    c.program.outputs = {{7}};
    c.inputs = {Full(), Row(), at::bernoulli(at::full(full, 0.9f)) / 0.9, Full()};
    c.torch = [](const std::vector<at::Tensor>& in) {
      at::Tensor t = at::add(in[0], in[1]);
      t = at::gelu(t);
      t = at::mul(t, in[2]);
      return std::vector<at::Tensor>{at::add(t, in[3])};
    };
    chains.push_back(std::move(c));
  }
  {  // A backward chain: relu grad, per-column scale, residual grad, scale,
     // tanh grad, mask.
    Chain c{"relu_grad,mul,add,scale,tanh_grad,mul", 6};
    c.program.shape = full;
    c.program.inputs = {full, full, row, full, full, full};  // dy, y, w, dres, t, mask
    c.program.instrs = {{EwCode::kReluGrad, 0, 1}, {EwCode::kMul, 6, 2},
                        {EwCode::kAdd, 7, 3},      {EwCode::kAffine, 8, -1, -1, 0.5f, 0.0f},
                        {EwCode::kTanhGrad, 9, 4}, {EwCode::kMul, 10, 5}};
    c.program.outputs = {{11}};
    c.inputs = {Full(), at::relu(Full()), Row(), Full(), at::tanh(Full()), Full()};
    c.torch = [](const std::vector<at::Tensor>& in) {
      at::Tensor t = at::threshold_backward(in[0], in[1], 0);
      t = at::mul(t, in[2]);
      t = at::add(t, in[3]);
      t = at::mul(t, 0.5);
      t = at::tanh_backward(t, in[4]);
      return std::vector<at::Tensor>{at::mul(t, in[5])};
    };
    chains.push_back(std::move(c));
  }
  {  // Cheap arithmetic only: memory traffic is all there is to save.
    Chain c{"add,mul,relu,max,sub,mul,add,relu", 8};
    c.program.shape = full;
    c.program.inputs = {full, full, full, row};  // a, b, c, s
    c.program.instrs = {{EwCode::kAdd, 0, 1}, {EwCode::kMul, 4, 3}, {EwCode::kRelu, 5},
                        {EwCode::kMax, 6, 2}, {EwCode::kSub, 7, 0}, {EwCode::kMul, 8, 8},
                        {EwCode::kAdd, 9, 1}, {EwCode::kRelu, 10}};
    c.program.outputs = {{11}};
    c.inputs = {Full(), Full(), Full(), Row()};
    c.torch = [](const std::vector<at::Tensor>& in) {
      at::Tensor t = at::add(in[0], in[1]);
      t = at::mul(t, in[3]);
      t = at::relu(t);
      t = at::maximum(t, in[2]);
      t = at::sub(t, in[0]);
      t = at::mul(t, t);
      t = at::add(t, in[1]);
      return std::vector<at::Tensor>{at::relu(t)};
    };
    chains.push_back(std::move(c));
  }
  {  // The bias-gradient pattern: dx = relu_grad(dy, y), db = column sums.
    Chain c{"relu_grad + column sum (dx, db)", 2};
    c.program.shape = full;
    c.program.inputs = {full, full};
    c.program.instrs = {{EwCode::kReluGrad, 0, 1}};
    c.program.outputs = {{2}, {2, ReduceKind::kSum, {0}}};
    c.inputs = {Full(), at::relu(Full())};
    c.torch = [](const std::vector<at::Tensor>& in) {
      at::Tensor dx = at::threshold_backward(in[0], in[1], 0);
      return std::vector<at::Tensor>{dx, at::sum(dx, {0}, /*keepdim=*/true)};
    };
    chains.push_back(std::move(c));
  }
  return chains;
}

double Ms(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Median and its 95% confidence interval from order statistics: with n
// samples, the number below the true median is Binomial(n, 1/2), so
// [x_(k), x_(n+1-k)] (1-based, sorted) covers the median with probability
// 1 - 2 P(B <= k-1); k is the largest with that coverage >= 95%. No
// distributional assumption about the timings is needed.
struct Summary {
  double median, lo, hi;
};
Summary Summarize(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  const int n = static_cast<int>(x.size());
  const double median = n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
  // P(B <= j) for B ~ Binomial(n, 1/2), accumulated in log space.
  auto cdf = [n](int j) {
    double total = 0;
    for (int i = 0; i <= j; ++i) {
      total += std::exp(std::lgamma(n + 1.0) - std::lgamma(i + 1.0) - std::lgamma(n - i + 1.0) -
                        n * std::log(2.0));
    }
    return total;
  };
  int k = 1;
  while (k + 1 <= n / 2 && 1 - 2 * cdf(k) >= 0.95) ++k;                 // k + 1 still covers 95%
  if (1 - 2 * cdf(k - 1) < 0.95) return {median, x.front(), x.back()};  // n too small
  return {median, x[static_cast<size_t>(k - 1)], x[static_cast<size_t>(n - k)]};
}

double MaxAbsDiff(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>());
  }
  return worst;
}

double MiB(const Chain& c) {
  double bytes = 0;
  for (const at::Tensor& t : c.inputs) bytes += static_cast<double>(t.numel()) * 4;
  for (int o = 0; o < static_cast<int>(c.program.outputs.size()); ++o) {
    double n = 1;
    for (int64_t d : c.program.OutputShape(o)) n *= static_cast<double>(d);
    bytes += n * 4;
  }
  return bytes / (1 << 20);
}

// ns per point of every instruction alone on 4096 points that stay in L1
// (one-instruction programs, RunInto, best of 7 batches of 100 runs), per
// loop variant: what each instruction costs inside a fused chain.
void OpSweep() {
  constexpr int64_t kPoints = 4096;
  const std::vector<int64_t> shape = {kPoints};
  // Operands in [0.5, 1.5]: inside every instruction's domain.
  const std::vector<at::Tensor> operands = {at::rand(shape) + 0.5, at::rand(shape) + 0.5,
                                            at::rand(shape) + 0.5};
  std::printf("| instruction | sse2 ns/point | avx2 ns/point | avx512 ns/point |\n");
  std::printf("| --- | ---: | ---: | ---: |\n");
  for (int code = 0; code < static_cast<int>(EwCode::kCount); ++code) {
    const EwCode c = static_cast<EwCode>(code);
    const int arity = EwArity(c);
    EwProgram p;
    p.shape = shape;
    p.inputs.assign(static_cast<size_t>(arity), shape);
    EwInstr instr{c, 0};
    if (arity >= 2) instr.b = 1;
    if (arity >= 3) instr.c = 2;
    instr.p0 = 0.5f;
    instr.p1 = 1.0f;
    p.instrs = {instr};
    p.outputs = {{arity}};
    const std::vector<at::Tensor> in(operands.begin(), operands.begin() + arity);
    std::vector<at::Tensor> out = {at::empty(shape)};
    std::printf("| %s |", std::string(EwName(c)).c_str());
    for (EwIsa isa : {EwIsa::kSse2, EwIsa::kAvx2, EwIsa::kAvx512}) {
      auto k = FusedElementwiseKernel::Compile(p, {0, isa});
      double best = 1e30;
      for (int batch = 0; batch < 7 && k.ok(); ++batch) {
        const double ms = Ms([&] {
          for (int r = 0; r < 100; ++r) (void)(*k)->RunInto(in, out);
        });
        best = std::min(best, ms * 1e6 / (100.0 * kPoints));
      }
      std::printf(" %.3f |", best);
    }
    std::printf("\n");
  }
}

int Main(int argc, char** argv) {
  int reps = 40, warmup = 5;
  int64_t points = kDefaultRows * kCols;
  bool tile_sweep = false, isa_sweep = false, op_sweep = false;
  CLI::App app{"The fused CPU elementwise kernel against LibTorch op by op, one thread"};
  app.add_option("--reps", reps, "timed repetitions (at least 5)")->capture_default_str();
  app.add_option("--warmup", warmup, "untimed repetitions first")->capture_default_str();
  app.add_option("--points", points, "points per full tensor, a multiple of 1024")
      ->capture_default_str();
  app.add_flag("--tile-sweep", tile_sweep, "time the fused kernel at several tile sizes");
  app.add_flag("--isa-sweep", isa_sweep, "time each instruction-set variant");
  app.add_flag("--op-sweep", op_sweep, "time each instruction alone (ns per point in L1)");
  if (std::optional<int> done = braid::base::ParseCommandLine(app, argc, argv)) return *done;
  if (reps < 5 || warmup < 0 || points < kCols || points % kCols != 0 ||
      points > (int64_t{1} << 28)) {
    std::fprintf(stderr, "--reps >= 5, --warmup >= 0, --points a multiple of %lld up to 2^28\n",
                 static_cast<long long>(kCols));
    return 2;
  }
  const int64_t rows = points / kCols;
  at::set_num_threads(1);
  at::manual_seed(42);
  if (op_sweep) {
    OpSweep();
    return 0;
  }
  std::vector<Chain> chains = Chains(rows);

  // Each configuration is a kernel to time against LibTorch.
  struct Config {
    std::string label;
    FusedElementwiseOptions options;
  };
  std::vector<Config> configs = {{"default", {}}};
  if (tile_sweep) {
    configs.clear();
    for (int64_t t : {64, 128, 256, 512, 1024, 2048, 4096}) {
      for (auto pf :
           {FusedElementwiseOptions::Prefetch::kOff, FusedElementwiseOptions::Prefetch::kOn}) {
        configs.push_back({"tile sweep", {t, EwIsa::kAuto, pf}});
      }
    }
  }
  if (isa_sweep) {
    configs.clear();
    for (EwIsa isa : {EwIsa::kSse2, EwIsa::kAvx2, EwIsa::kAvx512}) {
      configs.push_back({"isa sweep", {0, isa}});
    }
  }

  std::printf(
      "one thread; %lld x %lld float tensors; %d interleaved repetitions after %d warm-up; "
      "median ms [95%% CI]\n\n",
      static_cast<long long>(rows), static_cast<long long>(kCols), reps, warmup);
  std::printf(
      "| chain | ops | config | tile | isa | prefetch | MiB in+out | torch ms | fused ms | "
      "speed-up | "
      "fused RunInto ms | max abs diff |\n");
  std::printf(
      "| --- | ---: | --- | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (Chain& c : chains) {
    std::vector<std::shared_ptr<const FusedElementwiseKernel>> kernels;
    for (const Config& cfg : configs) {
      auto k = FusedElementwiseKernel::Compile(c.program, cfg.options);
      if (!k.ok()) {
        std::fprintf(stderr, "%s: %s\n", c.name.c_str(), k.status().ToString().c_str());
        return 1;
      }
      kernels.push_back(*k);
    }
    std::vector<at::Tensor> torch_out;
    std::vector<std::vector<at::Tensor>> fused_out(kernels.size());
    std::vector<at::Tensor> preallocated;
    for (int o = 0; o < static_cast<int>(c.program.outputs.size()); ++o) {
      preallocated.push_back(at::empty(c.program.OutputShape(o)));
    }
    auto run_torch = [&] { torch_out = c.torch(c.inputs); };
    auto check = [&](const absl::Status& s) {
      if (!s.ok()) {
        std::fprintf(stderr, "%s: %s\n", c.name.c_str(), s.ToString().c_str());
        std::exit(1);
      }
    };
    auto run_fused = [&](size_t i) {
      auto r = kernels[i]->Run(c.inputs);
      check(r.status());
      fused_out[i] = std::move(*r);
    };
    auto run_fused_into = [&](size_t i) { check(kernels[i]->RunInto(c.inputs, preallocated)); };
    // Interleaved: each repetition runs LibTorch and then every kernel (Run,
    // then RunInto), the kernels in a rotated order, so that drifting load
    // on the shared machine hits all of them alike.
    std::vector<double> tt;
    std::vector<std::vector<double>> tf(kernels.size()), ti(kernels.size());
    for (int rep = -warmup; rep < reps; ++rep) {
      const double t = Ms(run_torch);
      if (rep >= 0) tt.push_back(t);
      for (size_t j = 0; j < kernels.size(); ++j) {
        const size_t i = (j + static_cast<size_t>(rep + warmup)) % kernels.size();
        const double f = Ms([&] { run_fused(i); });
        const double f_into = Ms([&] { run_fused_into(i); });
        if (rep >= 0) {
          tf[i].push_back(f);
          ti[i].push_back(f_into);
        }
      }
    }
    const Summary st = Summarize(tt);
    for (size_t i = 0; i < kernels.size(); ++i) {
      const Summary sf = Summarize(tf[i]);
      const Summary si = Summarize(ti[i]);
      std::printf(
          "| %s | %d | %s | %lld | %s | %s | %.0f | %.3f [%.3f, %.3f] | %.3f [%.3f, %.3f] | %.2fx "
          "| "
          "%.3f [%.3f, %.3f] | %.1e |\n",
          c.name.c_str(), c.ops, configs[i].label.c_str(),
          static_cast<long long>(kernels[i]->tile_elems()),
          std::string(EwIsaName(kernels[i]->isa())).c_str(), kernels[i]->prefetch() ? "on" : "off",
          MiB(c), st.median, st.lo, st.hi, sf.median, sf.lo, sf.hi, st.median / sf.median,
          si.median, si.lo, si.hi, MaxAbsDiff(fused_out[i], torch_out));
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace braid::kernels::cpu

int main(int argc, char** argv) { return braid::kernels::cpu::Main(argc, argv); }
