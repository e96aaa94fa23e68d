// braid-onednn-fused-bench: one-primitive oneDNN GEMM/convolution with fused
// post-ops against the LibTorch calls a model makes for the same layers, on
// one thread (at::set_num_threads(1)).
//
//   (1) GEMM + bias + ReLU, A 64x1024 by B 1024x1024, bias [1024]:
//       at::mm, at::add, at::relu | at::addmm, at::relu | OneDnnMatMul
//   (2) Conv + bias + ReLU, X 16x64x56x56, W 64x64x3x3, pad 1:
//       at::conv2d, at::add, at::relu | at::conv2d(bias), at::relu | OneDnnConv
//   (3) the layout study behind OneDnnConv's choice: the same convolution as
//       raw oneDNN primitives on plain NCHW vs nChw16c / nhwc with reorders.
//
// Variants run interleaved (A, B, C, A, B, C, ...) after a warm-up, so drift
// of the shared machine hits all alike; each row prints the median, the 95%
// confidence interval of the median from binomial order statistics and the
// speed-up over the first (three-call) variant, and the process CPU time over
// the calling thread's CPU time (1.00: the variant ran on one thread). It
// also checks that oneDNN follows the caller's thread count: that ratio is ~2
// for the fused GEMM built under at::set_num_threads(2).
//
//   build/bin/braid-onednn-fused-bench [--reps 40]   (convolution reps, at least 20;
//                                                      the GEMM gets 5x as many)
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <malloc.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "base/command_line.h"
#include "kernels/cpu/onednn_fused.h"

namespace braid::kernels::cpu {
namespace {

struct Variant {
  std::string name;
  std::function<at::Tensor()> run;
  std::vector<double> ms;
  double process_cpu_s = 0, thread_cpu_s = 0;  // over the timed runs
};

double CpuSeconds(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// 0-based indices of the order statistics x_(j), x_(n+1-j) (1-based) that
// bound a >= 95% confidence interval of the median of n samples: the count B
// of samples below the true median is Binomial(n, 1/2), and the interval
// misses it with probability 2 P(B <= j - 1) <= 0.05. n = 40: x_(14)..x_(27).
std::pair<int, int> MedianCi(int n) {
  std::vector<double> cdf(n + 1);
  double acc = 0;
  for (int k = 0; k <= n; ++k) {
    acc += std::exp(std::lgamma(n + 1.0) - std::lgamma(k + 1.0) - std::lgamma(n - k + 1.0) -
                    n * std::log(2.0));
    cdf[k] = acc;
  }
  int j = 0;  // largest 1-based j with P(B <= j - 1) <= 0.025
  while (j + 1 <= n && cdf[j] <= 0.025) ++j;
  j = std::max(j, 1);
  return {j - 1, n - j};  // symmetric: x_(j) .. x_(n+1-j)
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void RunInterleaved(std::vector<Variant>& vs, int warmup, int reps) {
  for (int i = 0; i < warmup; ++i) {
    for (Variant& v : vs) v.run();
  }
  for (int i = 0; i < reps; ++i) {
    for (Variant& v : vs) {
      const double p0 = CpuSeconds(CLOCK_PROCESS_CPUTIME_ID);
      const double c0 = CpuSeconds(CLOCK_THREAD_CPUTIME_ID);
      const auto t0 = std::chrono::steady_clock::now();
      at::Tensor y = v.run();
      v.ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      v.thread_cpu_s += CpuSeconds(CLOCK_THREAD_CPUTIME_ID) - c0;
      v.process_cpu_s += CpuSeconds(CLOCK_PROCESS_CPUTIME_ID) - p0;
    }
  }
}

void PrintRows(const char* case_name, const std::vector<Variant>& vs) {
  const double base = Median(vs[0].ms);
  for (const Variant& v : vs) {
    std::vector<double> s = v.ms;
    std::sort(s.begin(), s.end());
    const auto [lo, hi] = MedianCi(static_cast<int>(s.size()));
    const double med = Median(s);
    std::printf("| %s | %s | %.3f [%.3f, %.3f] | %.2fx | %.2f |\n", case_name, v.name.c_str(), med,
                s[lo], s[hi], base / med, v.process_cpu_s / v.thread_cpu_s);
  }
}

void CheckSame(const char* what, const at::Tensor& got, const at::Tensor& want) {
  const float diff = (got - want).abs().max().item<float>();
  const float scale = want.abs().max().item<float>();
  std::printf("%s: max |fused - torch| = %.3g (max |y| %.3g)\n", what, diff, scale);
  if (!(diff <= 1e-4f * std::max(1.f, scale))) {
    std::fprintf(stderr, "%s: results differ\n", what);
    std::exit(1);
  }
}

at::Tensor Unwrap(absl::StatusOr<at::Tensor> y) {
  if (!y.ok()) {
    std::fprintf(stderr, "Run: %s\n", std::string(y.status().message()).c_str());
    std::exit(1);
  }
  return *std::move(y);
}

// Process CPU time / calling thread CPU time over `reps` runs of `f`.
double ThreadRatio(const std::function<void()>& f, int reps) {
  f();
  const double p0 = CpuSeconds(CLOCK_PROCESS_CPUTIME_ID), t0 = CpuSeconds(CLOCK_THREAD_CPUTIME_ID);
  for (int i = 0; i < reps; ++i) f();
  return (CpuSeconds(CLOCK_PROCESS_CPUTIME_ID) - p0) / (CpuSeconds(CLOCK_THREAD_CPUTIME_ID) - t0);
}

// LibTorch's matmuls call OpenBLAS (libopenblas0-pthread), whose own thread
// pool at::set_num_threads does not reach; the CPU profiler and executor
// ranks set it to 1 the same way (worker/cpu_profiler.cc).
void SetBlasThreads(int n) {
  using SetFn = void (*)(int);
  if (auto f = reinterpret_cast<SetFn>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) f(n);
}

std::string BlasInfo() {
  using ConfigFn = char* (*)();
  using ThreadsFn = int (*)();
  auto config = reinterpret_cast<ConfigFn>(dlsym(RTLD_DEFAULT, "openblas_get_config"));
  auto threads = reinterpret_cast<ThreadsFn>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  if (config == nullptr || threads == nullptr) return "BLAS: not OpenBLAS";
  return std::string("BLAS: ") + config() + ", openblas threads " + std::to_string(threads());
}

// (3) Raw oneDNN: conv + bias + relu in `tag` (weights `any`), timed with
// the reorders a plain-NCHW caller needs.
struct RawConv {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{eng};
  dnnl::convolution_forward conv;
  dnnl::memory x_plain, w_plain, x, w, b, y, y_plain;
  std::vector<std::pair<dnnl::reorder, std::pair<dnnl::memory, dnnl::memory>>> pre, post;
  std::string impl;

  RawConv(dnnl::memory::format_tag tag, const at::Tensor& xt, const at::Tensor& wt,
          const at::Tensor& bt, at::Tensor& yt) {
    using dnnl::memory;
    using Tag = memory::format_tag;
    const auto f32 = memory::data_type::f32;
    const memory::dims xd = xt.sizes().vec(), wd = wt.sizes().vec(), yd = yt.sizes().vec();
    dnnl::post_ops po;
    po.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
    dnnl::primitive_attr attr;
    attr.set_post_ops(po);
    const memory::desc w_any(wd, f32, tag == Tag::nchw ? Tag::oihw : Tag::any);
    dnnl::convolution_forward::primitive_desc pd(
        dnnl::convolution_forward::desc(
            dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
            memory::desc(xd, f32, tag), w_any, memory::desc({wd[0]}, f32, Tag::x),
            memory::desc(yd, f32, tag), {1, 1}, {0, 0}, {1, 1}, {1, 1}),
        attr, eng);
    impl = pd.impl_info_str();
    conv = dnnl::convolution_forward(pd);
    x_plain = memory({xd, f32, Tag::nchw}, eng, xt.data_ptr());
    w_plain = memory({wd, f32, Tag::oihw}, eng, wt.data_ptr());
    y_plain = memory({yd, f32, Tag::nchw}, eng, yt.data_ptr());
    b = memory(pd.bias_desc(), eng, bt.data_ptr());
    auto stage = [&](const memory& plain, const memory::desc& md, bool in) {
      if (plain.get_desc() == md) return plain;
      memory m(md, eng);
      auto& list = in ? pre : post;
      list.push_back({in ? dnnl::reorder(plain, m) : dnnl::reorder(m, plain),
                      in ? std::pair{plain, m} : std::pair{m, plain}});
      return m;
    };
    x = stage(x_plain, pd.src_desc(), true);
    w = stage(w_plain, pd.weights_desc(), true);
    y = stage(y_plain, pd.dst_desc(), false);
  }
  void Run() {
    for (auto& [r, io] : pre) r.execute(stream, io.first, io.second);
    conv.execute(stream,
                 {{DNNL_ARG_SRC, x}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_BIAS, b}, {DNNL_ARG_DST, y}});
    for (auto& [r, io] : post) r.execute(stream, io.first, io.second);
    stream.wait();
  }
};

int Main(int argc, char** argv) {
  int reps = 40;
  CLI::App app{"oneDNN GEMM/convolution with fused post-ops against LibTorch's calls, one thread"};
  app.add_option("--reps", reps, "convolution repetitions (at least 20; the GEMM gets 5x as many)")
      ->capture_default_str();
  if (std::optional<int> done = braid::base::ParseCommandLine(app, argc, argv)) return *done;
  reps = std::max(20, reps);
  // The executor's steady state (worker::KeepFreedMemory): freed activations
  // stay in the heap instead of being unmapped and page-faulted in again.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  at::set_num_threads(1);
  SetBlasThreads(1);
  at::manual_seed(1);
  std::printf("%s%s\n", at::get_parallel_info().c_str(), BlasInfo().c_str());
  std::printf(
      "oneDNN %d.%d.%d; per variant %d GEMM / %d convolution reps, interleaved, after 3 warm-up "
      "rounds\n\n",
      dnnl_version()->major, dnnl_version()->minor, dnnl_version()->patch, 5 * reps, reps);

  // (1) GEMM + bias + ReLU.
  const at::Tensor a = at::randn({64, 1024}), b = at::randn({1024, 1024}) * 0.03,
                   bias = at::randn({1024});
  auto mm = OneDnnMatMul::Get(
      {.a = {64, 1024}, .b = {1024, 1024}, .c = {1024}, .post_ops = {{EwCode::kRelu}}});
  if (!mm.ok()) {
    std::fprintf(stderr, "%s\n", std::string(mm.status().message()).c_str());
    return 1;
  }
  CheckSame("gemm", Unwrap((*mm)->Run(a, b, &bias, {})), at::relu(at::addmm(bias, a, b)));
  std::vector<Variant> gemm = {
      {"torch mm + add + relu", [&] { return at::relu(at::add(at::mm(a, b), bias)); }},
      {"torch addmm + relu", [&] { return at::relu(at::addmm(bias, a, b)); }},
      {std::string("oneDNN matmul+post-ops (") + std::string((*mm)->impl()) + ")",
       [&] { return Unwrap((*mm)->Run(a, b, &bias, {})); }},
  };

  // (2) Conv + bias + ReLU.
  const at::Tensor x = at::randn({16, 64, 56, 56}), w = at::randn({64, 64, 3, 3}) * 0.05,
                   cb = at::randn({64});
  auto conv = OneDnnConv::Get({.x = {16, 64, 56, 56},
                               .w = {64, 64, 3, 3},
                               .has_bias = true,
                               .pads_begin = {1, 1},
                               .pads_end = {1, 1},
                               .post_ops = {{EwCode::kRelu}}});
  if (!conv.ok()) {
    std::fprintf(stderr, "%s\n", std::string(conv.status().message()).c_str());
    return 1;
  }
  CheckSame("conv", Unwrap((*conv)->Run(x, w, &cb, {})), at::relu(at::conv2d(x, w, cb, 1, 1)));
  std::vector<Variant> convs = {
      {"torch conv2d + add + relu",
       [&] {
         return at::relu(at::add(at::conv2d(x, w, {}, 1, 1), cb.view({1, 64, 1, 1})));
       }},
      {"torch conv2d(bias) + relu", [&] { return at::relu(at::conv2d(x, w, cb, 1, 1)); }},
      {std::string("oneDNN conv+post-ops (") + std::string((*conv)->layout()) + ", " +
           std::string((*conv)->impl()) + ")",
       [&] { return Unwrap((*conv)->Run(x, w, &cb, {})); }},
  };

  // (3) Layout study on raw primitives (output buffers preallocated).
  at::Tensor y_nchw = at::empty({16, 64, 56, 56}), y_blk = at::empty_like(y_nchw),
             y_nhwc = at::empty_like(y_nchw);
  RawConv raw_nchw(dnnl::memory::format_tag::nchw, x, w, cb, y_nchw);
  RawConv raw_blk(dnnl::memory::format_tag::nChw16c, x, w, cb, y_blk);
  RawConv raw_nhwc(dnnl::memory::format_tag::nhwc, x, w, cb, y_nhwc);
  std::vector<Variant> layouts = {
      {"nchw, plain weights (" + raw_nchw.impl + ")",
       [&] {
         raw_nchw.Run();
         return y_nchw;
       }},
      {"nChw16c + reorders (" + raw_blk.impl + ")",
       [&] {
         raw_blk.Run();
         return y_blk;
       }},
      {"nhwc + reorders (" + raw_nhwc.impl + ")",
       [&] {
         raw_nhwc.Run();
         return y_nhwc;
       }},
  };

  RunInterleaved(gemm, 3, 5 * reps);  // 1.5 ms a call: more reps, same wall time share
  RunInterleaved(convs, 3, reps);
  RunInterleaved(layouts, 3, reps);
  std::printf("\n| case | variant | median ms [95%% CI] | speed-up vs first row | CPU/thread |\n");
  std::printf("| --- | --- | ---: | ---: | ---: |\n");
  PrintRows("GEMM 64x1024x1024 + bias + ReLU", gemm);
  PrintRows("Conv 16x64x56x56 3x3 + bias + ReLU", convs);
  PrintRows("layout study (raw oneDNN conv)", layouts);

  // Threads: oneDNN's OpenMP runtime takes its team size from
  // omp_get_max_threads(), which at::set_num_threads sets.
  const double one = ThreadRatio([&] { Unwrap((*mm)->Run(a, b, &bias, {})); }, 40);
  at::set_num_threads(2);
  auto mm2 = OneDnnMatMul::Get((*mm)->spec());
  const double two = ThreadRatio([&] { Unwrap((*mm2)->Run(a, b, &bias, {})); }, 40);
  at::set_num_threads(1);
  std::printf(
      "\nthreads: process CPU / calling-thread CPU over 40 fused GEMMs: %.2f with "
      "at::set_num_threads(1), %.2f with at::set_num_threads(2)\n",
      one, two);
  return 0;
}

}  // namespace
}  // namespace braid::kernels::cpu

int main(int argc, char** argv) { return braid::kernels::cpu::Main(argc, argv); }
