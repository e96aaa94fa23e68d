#include "worker/collective_matmul.h"
#include "worker/collective_matmul_ops.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <sched.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <sstream>
#include <thread>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/stats.h"
#include "base/status_macros.h"
#include "worker/runtime/gloo_group.h"
#include "worker/rank_processes.h"

namespace braid::worker {
namespace {

using Pg = c10d::ProcessGroupGloo;
using WorkPtr = c10::intrusive_ptr<c10d::Work>;

// The primitives RunCollectiveMatMulRank times when spec.parts is set.
constexpr const char* kPartNames[] = {"gemm_chunk", "gemm_half", "xfer_half", "add_chunk",
                                      "add_half",   "copy_chunk", "copy_half", "xfer_chunk",
                                      "xfer_cpu_fraction"};

constexpr DecomposeMethod kAllMethods[] = {DecomposeMethod::kNone, DecomposeMethod::kLooped,
                                           DecomposeMethod::kLoopedUnrolled,
                                           DecomposeMethod::kBidirectional};

int64_t Mod(int64_t a, int64_t n) { return ((a % n) + n) % n; }

// A rank's chunk of `rows` rows cut into the pieces a method moves
// separately: one piece (looped) or two halves, each with its ring direction
// (+1: sent to rank r+1, received from r-1; -1: the other way).
struct Piece {
  int64_t off = 0, len = 0;
  int dir = 1;
};

std::vector<Piece> Pieces(DecomposeMethod method, int64_t rows) {
  if (method == DecomposeMethod::kNone || method == DecomposeMethod::kLooped) {
    return {{0, rows, 1}};
  }
  const int64_t h = rows / 2;
  const int second_dir = method == DecomposeMethod::kBidirectional ? -1 : 1;
  return {{0, h, 1}, {h, rows - h, second_dir}};
}

WorkPtr Send(Pg& pg, const at::Tensor& t, int dst, int tag) {
  std::vector<at::Tensor> v{t};
  return pg.send(v, dst, tag);
}

WorkPtr Recv(Pg& pg, const at::Tensor& t, int src, int tag) {
  std::vector<at::Tensor> v{t};
  return pg.recv(v, src, tag);
}

}  // namespace

namespace cmm {

// AllGather->MatMul, decomposed: out [m, nout/n].
at::Tensor AllGatherMatMulLooped(const RankState& s, DecomposeMethod method, at::Tensor* gathered) {
  const int64_t rows = s.m / s.n;
  at::Tensor out = at::empty({s.m, s.w.size(1)}, s.x.options());
  const std::vector<Piece> pieces = Pieces(method, rows);
  const size_t np = pieces.size();
  std::vector<at::Tensor> cur(np), next(np);
  std::vector<WorkPtr> recvs(np), sends;
  for (size_t p = 0; p < np; ++p) cur[p] = s.x.narrow(0, pieces[p].off, pieces[p].len);
  if (gathered != nullptr) {
    *gathered = at::empty({s.m, s.k}, s.x.options());
    gathered->narrow(0, s.rank * rows, rows).copy_(s.x);
  }
  for (int step = 0; step < s.n; ++step) {
    for (size_t p = 0; p < np; ++p) {
      const Piece& pc = pieces[p];
      if (step > 0) {
        recvs[p]->wait();
        cur[p] = next[p];
      }
      if (step < s.n - 1) {
        const int to = static_cast<int>(Mod(s.rank + pc.dir, s.n));
        const int from = static_cast<int>(Mod(s.rank - pc.dir, s.n));
        const int tag = step * 2 + static_cast<int>(p);
        sends.push_back(Send(*s.pg, cur[p], to, tag));
        if (gathered != nullptr) {
          // Received straight into its rows of the gathered input.
          const int64_t nchunk = Mod(s.rank - pc.dir * (step + 1), s.n);
          next[p] = gathered->narrow(0, nchunk * rows + pc.off, pc.len);
        } else {
          next[p] = at::empty({pc.len, s.k}, s.x.options());
        }
        recvs[p] = Recv(*s.pg, next[p], from, tag);
      }
      // At step s the piece held came from rank r - dir * s.
      const int64_t chunk = Mod(s.rank - pc.dir * step, s.n);
      at::Tensor o = out.narrow(0, chunk * rows + pc.off, pc.len);
      at::mm_out(o, cur[p], s.w);
    }
  }
  for (auto& w : sends) w->wait();
  return out;
}

at::Tensor AllGather(const RankState& s) {
  const int64_t rows = s.m / s.n;
  at::Tensor full = at::empty({s.m, s.k}, s.x.options());
  std::vector<std::vector<at::Tensor>> outs(1);
  for (int i = 0; i < s.n; ++i) outs[0].push_back(full.narrow(0, i * rows, rows));
  std::vector<at::Tensor> in{s.x};
  s.pg->allgather(outs, in)->wait();
  return full;
}

// The ring reduce-scatter of the rows of a [m, nout] sum whose per-rank
// partial block b (piece p: rows [b*rows + off, +len)) `partial` makes: at
// step s rank r handles block (r - dir*(s+1)) mod n, adds what it received
// and passes it on; at the last step the block is r's own. With `partial`
// computing a GEMM this is the looped MatMul->ReduceScatter; with it taking
// a view of a precomputed partial, the plain reduce-scatter (added in place).
at::Tensor RingReduceScatter(const RankState& s, DecomposeMethod method,
                             const std::function<at::Tensor(int64_t, int64_t, int64_t)>& partial) {
  const int64_t rows = s.m / s.n;
  at::Tensor out = at::empty({rows, s.nout}, s.x.options());
  const std::vector<Piece> pieces = Pieces(method, rows);
  const size_t np = pieces.size();
  std::vector<at::Tensor> incoming(np), outgoing;
  std::vector<WorkPtr> recvs(np), sends;
  for (int step = 0; step < s.n; ++step) {
    for (size_t p = 0; p < np; ++p) {
      const Piece& pc = pieces[p];
      const int64_t block = Mod(s.rank - pc.dir * (step + 1), s.n);
      at::Tensor acc = partial(block * rows + pc.off, pc.len, static_cast<int64_t>(p));
      if (step > 0) {
        recvs[p]->wait();
        acc.add_(incoming[p]);
      }
      if (step < s.n - 1) {
        const int to = static_cast<int>(Mod(s.rank + pc.dir, s.n));
        const int from = static_cast<int>(Mod(s.rank - pc.dir, s.n));
        const int tag = step * 2 + static_cast<int>(p);
        sends.push_back(Send(*s.pg, acc, to, tag));
        outgoing.push_back(acc);
        incoming[p] = at::empty({pc.len, s.nout}, s.x.options());
        recvs[p] = Recv(*s.pg, incoming[p], from, tag);
      } else {
        out.narrow(0, pc.off, pc.len).copy_(acc);
      }
    }
  }
  for (auto& w : sends) w->wait();
  return out;
}

}  // namespace cmm

namespace {

using cmm::AllGather;
using cmm::AllGatherMatMulLooped;
using cmm::RankState;
using cmm::RingReduceScatter;

at::Tensor RunMethod(const RankState& s, CollectivePattern pattern, DecomposeMethod method) {
  if (pattern == CollectivePattern::kAllGatherMatMul) {
    if (method == DecomposeMethod::kNone) return at::mm(AllGather(s), s.w);
    return AllGatherMatMulLooped(s, method);
  }
  if (method == DecomposeMethod::kNone) {
    at::Tensor whole = at::mm(s.x, s.w);  // [m, nout]: the GEMM, then the collective
    return RingReduceScatter(s, DecomposeMethod::kLooped, [&](int64_t row, int64_t len, int64_t) {
      return whole.narrow(0, row, len);
    });
  }
  return RingReduceScatter(s, method, [&](int64_t row, int64_t len, int64_t) {
    return at::mm(s.x.narrow(0, row, len), s.w);
  });
}

// The full inputs every rank and the reference make from the seed.
std::pair<at::Tensor, at::Tensor> MakeInputs(const CollectiveMatMulSpec& spec) {
  at::Generator gen = at::detail::createCPUGenerator(spec.seed);
  at::Tensor x = at::randn({spec.m, spec.k}, gen, at::kFloat);
  at::Tensor w = at::randn({spec.k, spec.nout}, gen, at::kFloat);
  return {x, w};
}

// Rank r's expected out_r.
at::Tensor ReferenceShard(const CollectiveMatMulSpec& spec, const at::Tensor& full, int r) {
  if (spec.pattern == CollectivePattern::kAllGatherMatMul) {
    const int64_t cols = spec.nout / spec.ranks;
    return full.narrow(1, r * cols, cols).contiguous();
  }
  const int64_t rows = spec.m / spec.ranks;
  return full.narrow(0, r * rows, rows).contiguous();
}

std::vector<int64_t> OutShape(const CollectiveMatMulSpec& spec) {
  if (spec.pattern == CollectivePattern::kAllGatherMatMul) return {spec.m, spec.nout / spec.ranks};
  return {spec.m / spec.ranks, spec.nout};
}

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string BinPath(const std::string& out, DecomposeMethod m) {
  return absl::StrCat(out, ".", std::string(DecomposeMethodName(m)), ".bin");
}

absl::StatusOr<std::string> ReadText(const std::string& path) {
  std::ifstream f(path);
  if (!f) return absl::NotFoundError(absl::StrCat("collective matmul: cannot read ", path));
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string MethodList(const std::vector<DecomposeMethod>& ms) {
  std::string s;
  for (DecomposeMethod m : ms) {
    if (!s.empty()) s += ",";
    s += std::string(DecomposeMethodName(m));
  }
  return s;
}

}  // namespace

std::string_view CollectivePatternName(CollectivePattern p) {
  return p == CollectivePattern::kAllGatherMatMul ? "allgather_matmul" : "matmul_reducescatter";
}

std::string_view DecomposeMethodName(DecomposeMethod m) {
  switch (m) {
    case DecomposeMethod::kNone:
      return "none";
    case DecomposeMethod::kLooped:
      return "looped";
    case DecomposeMethod::kLoopedUnrolled:
      return "unrolled";
    case DecomposeMethod::kBidirectional:
      return "bidirectional";
  }
  return "unknown";
}

absl::StatusOr<CollectivePattern> ParseCollectivePattern(std::string_view name) {
  for (CollectivePattern p :
       {CollectivePattern::kAllGatherMatMul, CollectivePattern::kMatMulReduceScatter}) {
    if (CollectivePatternName(p) == name) return p;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "collective matmul: unknown pattern '", std::string(name),
      "' (allgather_matmul, matmul_reducescatter)"));
}

absl::StatusOr<DecomposeMethod> ParseDecomposeMethod(std::string_view name) {
  for (DecomposeMethod m : kAllMethods) {
    if (DecomposeMethodName(m) == name) return m;
  }
  return absl::InvalidArgumentError(absl::StrCat("collective matmul: unknown method '",
                                                 std::string(name),
                                                 "' (none, looped, unrolled, bidirectional)"));
}

absl::Status CanDecompose(CollectivePattern pattern, DecomposeMethod method, int64_t m, int64_t k,
                          int64_t nout, int ranks) {
  // The overlap model's rules (costmodel/overlap_model.h): one statement of
  // what each method can split.
  const costmodel::OverlapShape shape{
      .pattern = pattern == CollectivePattern::kAllGatherMatMul
                     ? costmodel::OverlapPattern::kAllGatherMatMul
                     : costmodel::OverlapPattern::kMatMulReduceScatter,
      .m = m, .k = k, .nout = nout, .ranks = ranks};
  costmodel::OverlapMethod om = costmodel::OverlapMethod::kNone;
  switch (method) {
    case DecomposeMethod::kNone: om = costmodel::OverlapMethod::kNone; break;
    case DecomposeMethod::kLooped: om = costmodel::OverlapMethod::kLooped; break;
    case DecomposeMethod::kLoopedUnrolled: om = costmodel::OverlapMethod::kUnrolled; break;
    case DecomposeMethod::kBidirectional: om = costmodel::OverlapMethod::kBidirectional; break;
  }
  absl::Status s = costmodel::CanOverlap(shape, om);
  if (s.ok()) return s;
  return absl::InvalidArgumentError(absl::StrCat("collective matmul: ", s.message()));
}

absl::Status RunCollectiveMatMulRank(const CollectiveMatMulRankConfig& config) {
  const CollectiveMatMulSpec& spec = config.spec;
  if (config.world < 1 || config.rank < 0 || config.rank >= config.world ||
      spec.ranks != config.world) {
    return absl::InvalidArgumentError(absl::StrCat("collective matmul rank: rank ", config.rank,
                                                   " of world ", config.world, ", spec ranks ",
                                                   spec.ranks));
  }
  for (DecomposeMethod m : spec.methods) {
    RETURN_IF_ERROR(CanDecompose(spec.pattern, m, spec.m, spec.k, spec.nout, spec.ranks));
  }
  if (spec.pin_cores) RETURN_IF_ERROR(PinToCore(config.rank, "collective matmul"));

  // One LibTorch (and OpenBLAS) thread for the GEMMs; Gloo has its own.
  at::set_num_threads(1);
  using SetFn = void (*)(int);
  if (auto f = reinterpret_cast<SetFn>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) f(1);

  std::map<std::string, std::vector<double>> times;
  std::vector<std::string> order = {"gemm", "comm"};
  for (DecomposeMethod m : spec.methods) order.push_back(std::string(DecomposeMethodName(m)));
  if (spec.parts) {
    for (const char* p : kPartNames) order.push_back(p);
  }
  try {
    auto store = c10::make_intrusive<c10d::FileStore>(config.store_path, config.world);
    auto pg = MakeGlooGroup(store, config.rank, config.world, "127.0.0.1");
    RankState s;
    s.pg = pg.get();
    s.rank = config.rank;
    s.n = config.world;
    s.m = spec.m;
    s.k = spec.k;
    s.nout = spec.nout;
    auto [x, w] = MakeInputs(spec);
    const int r = config.rank, n = config.world;
    at::Tensor gemm_x;  // the non-split GEMM's left operand
    if (spec.pattern == CollectivePattern::kAllGatherMatMul) {
      s.x = x.narrow(0, r * (spec.m / n), spec.m / n).contiguous();
      s.w = w.narrow(1, r * (spec.nout / n), spec.nout / n).contiguous();
      gemm_x = x;  // [m, k] @ [k, nout/n]
    } else {
      s.x = x.narrow(1, r * (spec.k / n), spec.k / n).contiguous();
      s.w = w.narrow(0, r * (spec.k / n), spec.k / n).contiguous();
      gemm_x = s.x;  // [m, k/n] @ [k/n, nout]
    }
    // Zeros: the in-place ring additions leave it unchanged across runs.
    at::Tensor comm_partial = at::zeros({spec.m, spec.nout}, at::kFloat);
    // The primitives the overlap model composes (costmodel/overlap_model.h):
    // a ring step's chunk GEMM and half-chunk GEMM, its transfer of a chunk
    // and of a half (send to r+1 while receiving from r-1), and the ReduceScatter accumulator's addition and copy.
    const bool ag = spec.pattern == CollectivePattern::kAllGatherMatMul;
    const int64_t rows = spec.m / n, half = rows / 2;
    const int64_t cols = ag ? spec.k : spec.nout;
    const at::Tensor chunk_a = ag ? s.x : s.x.narrow(0, 0, rows);
    const at::Tensor half_a = chunk_a.narrow(0, 0, std::max<int64_t>(half, 1));
    at::Tensor send_buf = at::randn({rows, cols}, at::kFloat);
    at::Tensor recv_buf = at::empty({rows, cols}, at::kFloat);
    at::Tensor acc = at::randn({rows, spec.nout}, at::kFloat);
    at::Tensor inc = at::randn({rows, spec.nout}, at::kFloat);
    at::Tensor blk = at::empty({rows, spec.nout}, at::kFloat);
    // A ring step's transfer of `rows` rows (a chunk, or one half of it):
    // send to r+1 while receiving from r-1.
    auto transfer = [&](int64_t len) {
      std::vector<WorkPtr> works;
      works.push_back(Send(*pg, send_buf.narrow(0, 0, len), static_cast<int>(Mod(r + 1, n)), 1000));
      works.push_back(Recv(*pg, recv_buf.narrow(0, 0, len), static_cast<int>(Mod(r - 1, n)), 1000));
      for (auto& w : works) w->wait();
    };
    auto cpu_seconds = [] {
      timespec ts{};
      clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
      return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
    };
    std::vector<at::Tensor> last(spec.methods.size());
    for (int rep = 0; rep < spec.warmup + spec.repetitions; ++rep) {
      const bool timed = rep >= spec.warmup;
      auto timed_run = [&](const std::string& name, const std::function<void()>& fn) {
        pg->barrier()->wait();
        const auto t0 = std::chrono::steady_clock::now();
        fn();
        const double t = SecondsSince(t0);
        if (timed) times[name].push_back(t);
      };
      timed_run("gemm", [&] { at::mm(gemm_x, s.w); });
      timed_run("comm", [&] {
        if (spec.pattern == CollectivePattern::kAllGatherMatMul) {
          AllGather(s);
        } else {
          RingReduceScatter(s, DecomposeMethod::kLooped, [&](int64_t row, int64_t len, int64_t) {
            return comm_partial.narrow(0, row, len);
          });
        }
      });
      for (size_t i = 0; i < spec.methods.size(); ++i) {
        timed_run(order[2 + i], [&] { last[i] = RunMethod(s, spec.pattern, spec.methods[i]); });
      }
      if (spec.parts) {
        timed_run("gemm_chunk", [&] { at::mm(chunk_a, s.w); });
        timed_run("gemm_half", [&] { at::mm(half_a, s.w); });
        timed_run("xfer_half", [&] { transfer(rows - half); });
        timed_run("add_chunk", [&] { acc.add_(inc); });
        timed_run("add_half", [&] { acc.narrow(0, 0, rows - half).add_(inc.narrow(0, 0, rows - half)); });
        timed_run("copy_chunk", [&] { blk.copy_(acc); });
        timed_run("copy_half", [&] { blk.narrow(0, 0, rows - half).copy_(acc.narrow(0, 0, rows - half)); });
        // The chunk transfer, with the CPU time the process spent on it (Gloo's
        // device thread and the kernel's socket copies; this thread sleeps).
        pg->barrier()->wait();
        const double c0 = cpu_seconds();
        const auto t0 = std::chrono::steady_clock::now();
        transfer(rows);
        const double wall = SecondsSince(t0), cpu = cpu_seconds() - c0;
        if (timed) {
          times["xfer_chunk"].push_back(wall);
          times["xfer_cpu_fraction"].push_back(wall > 0 ? cpu / wall : 0.0);
        }
      }
    }
    pg->barrier()->wait();
    for (size_t i = 0; i < spec.methods.size(); ++i) {
      const std::string path = BinPath(config.output_path, spec.methods[i]);
      at::Tensor t = last[i].contiguous();
      FILE* f = std::fopen(path.c_str(), "wb");
      if (f == nullptr) return absl::InternalError(absl::StrCat("collective matmul: cannot write ", path));
      const size_t wrote = std::fwrite(t.data_ptr<float>(), sizeof(float), t.numel(), f);
      if (std::fclose(f) != 0 || wrote != static_cast<size_t>(t.numel())) {
        return absl::InternalError(absl::StrCat("collective matmul: write ", path));
      }
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("collective matmul rank ", config.rank, ": ", e.what()));
  }
  std::ofstream out(config.output_path);
  out.precision(17);
  for (const std::string& name : order) {
    out << name;
    for (double t : times[name]) out << ' ' << t;
    out << '\n';
  }
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("collective matmul: write ", config.output_path));
  return absl::OkStatus();
}

absl::StatusOr<CollectiveMatMulResult> RunCollectiveMatMul(const CollectiveMatMulSpec& spec,
                                                           const CollectiveMatMulOptions& options) {
  if (spec.methods.empty()) return absl::InvalidArgumentError("collective matmul: no methods");
  if (spec.repetitions < 1 || spec.warmup < 0) {
    return absl::InvalidArgumentError(absl::StrCat("collective matmul: repetitions=",
                                                   spec.repetitions, " warmup=", spec.warmup));
  }
  for (DecomposeMethod m : spec.methods) {
    RETURN_IF_ERROR(CanDecompose(spec.pattern, m, spec.m, spec.k, spec.nout, spec.ranks));
  }
  ASSIGN_OR_RETURN(std::string binary,
                   FindRankProgram(options.rank_binary, "braid-collective-matmul-rank",
                                   "BRAID_COLLECTIVE_MATMUL_RANK", "collective matmul"));
  ASSIGN_OR_RETURN(RankDir dir, RankDir::Create("braid-cmm"));
  std::vector<std::vector<std::string>> argv;
  for (int r = 0; r < spec.ranks; ++r) {
    argv.push_back({binary, "--store", dir.path() + "/store", "--out",
                    absl::StrCat(dir.path(), "/rank", r, ".txt"), "--rank", absl::StrCat(r),
                    "--world", absl::StrCat(spec.ranks), "--pattern",
                    std::string(CollectivePatternName(spec.pattern)), "--methods",
                    MethodList(spec.methods), "--m", absl::StrCat(spec.m), "--k",
                    absl::StrCat(spec.k), "--nout", absl::StrCat(spec.nout), "--reps",
                    absl::StrCat(spec.repetitions), "--warmup", absl::StrCat(spec.warmup),
                    "--seed", absl::StrCat(spec.seed)});
    if (spec.parts) argv.back().push_back("--parts");
    if (spec.pin_cores) argv.back().push_back("--pin-cores");
  }
  RETURN_IF_ERROR(RunRanks(argv, dir, options.timeout_s, "collective matmul"));

  // Times: per name, the slowest rank per repetition.
  std::map<std::string, std::vector<double>> slowest;
  for (int r = 0; r < spec.ranks; ++r) {
    const std::string path = absl::StrCat(dir.path(), "/rank", r, ".txt");
    ASSIGN_OR_RETURN(std::string text, ReadText(path));
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream ls(line);
      std::string name;
      ls >> name;
      std::vector<double> ts;
      double t = 0;
      while (ls >> t) ts.push_back(t);
      if (static_cast<int>(ts.size()) != spec.repetitions) {
        return absl::InternalError(absl::StrCat("collective matmul: rank ", r, " reported ",
                                                ts.size(), " times for ", name, ", expected ",
                                                spec.repetitions));
      }
      std::vector<double>& acc = slowest[name];
      acc.resize(ts.size(), 0.0);
      for (size_t i = 0; i < ts.size(); ++i) acc[i] = std::max(acc[i], ts[i]);
    }
  }
  CollectiveMatMulResult res;
  res.gemm_s = slowest["gemm"];
  res.comm_s = slowest["comm"];
  if (spec.parts) {
    for (const char* p : kPartNames) res.parts[p] = slowest[p];
  }
  if (static_cast<int>(res.gemm_s.size()) != spec.repetitions ||
      static_cast<int>(res.comm_s.size()) != spec.repetitions) {
    return absl::InternalError("collective matmul: ranks reported no gemm/comm times");
  }
  try {
    auto [x, w] = MakeInputs(spec);
    const at::Tensor full = at::mm(x.to(at::kDouble), w.to(at::kDouble)).to(at::kFloat);
    const std::vector<int64_t> shape = OutShape(spec);
    for (DecomposeMethod m : spec.methods) {
      MethodMeasurement mm;
      mm.method = m;
      mm.seconds = slowest[std::string(DecomposeMethodName(m))];
      if (static_cast<int>(mm.seconds.size()) != spec.repetitions) {
        return absl::InternalError(absl::StrCat("collective matmul: no times for ",
                                                std::string(DecomposeMethodName(m))));
      }
      for (int r = 0; r < spec.ranks; ++r) {
        const at::Tensor ref = ReferenceShard(spec, full, r);
        at::Tensor got = at::empty(shape, at::kFloat);
        const std::string path = BinPath(absl::StrCat(dir.path(), "/rank", r, ".txt"), m);
        FILE* f = std::fopen(path.c_str(), "rb");
        if (f == nullptr) {
          return absl::InternalError(absl::StrCat("collective matmul: cannot read ", path));
        }
        const size_t got_n = std::fread(got.data_ptr<float>(), sizeof(float), got.numel(), f);
        std::fclose(f);
        if (got_n != static_cast<size_t>(got.numel())) {
          return absl::InternalError(absl::StrCat("collective matmul: ", path, " has ", got_n,
                                                  " floats, expected ", got.numel()));
        }
        const double denom = std::max(ref.abs().max().item<double>(), 1e-30);
        const double rel = (got - ref).abs().max().item<double>() / denom;
        mm.max_rel_diff = std::max(mm.max_rel_diff, rel);
        if (!(rel < 1e-4)) {
          return absl::InternalError(absl::StrCat(
              "collective matmul ", std::string(CollectivePatternName(spec.pattern)), "/",
              std::string(DecomposeMethodName(m)), ": rank ", r,
              " differs from the reference: max|diff|/max|ref| = ", rel));
        }
      }
      res.methods.push_back(std::move(mm));
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("collective matmul reference: ", e.what()));
  }
  return res;
}

absl::StatusOr<costmodel::OverlapParts> MeasuredOverlapParts(const CollectiveMatMulSpec& spec,
                                                             const CollectiveMatMulResult& r,
                                                             double spare_cores_per_rank) {
  auto median = [&](const std::string& name) -> absl::StatusOr<double> {
    auto it = r.parts.find(name);
    if (it == r.parts.end() || it->second.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("collective matmul: no '", name, "' times (run with spec.parts)"));
    }
    return Summarize(it->second).median_s;
  };
  costmodel::OverlapParts p;
  p.ranks = spec.ranks;
  p.gemm_s = Summarize(r.gemm_s).median_s;
  p.collective_s = Summarize(r.comm_s).median_s;
  ASSIGN_OR_RETURN(p.chunk_gemm_s, median("gemm_chunk"));
  ASSIGN_OR_RETURN(p.half_gemm_s, median("gemm_half"));
  ASSIGN_OR_RETURN(p.chunk_transfer_s, median("xfer_chunk"));
  ASSIGN_OR_RETURN(p.half_transfer_s, median("xfer_half"));
  if (spec.pattern == CollectivePattern::kMatMulReduceScatter) {
    ASSIGN_OR_RETURN(p.chunk_add_s, median("add_chunk"));
    ASSIGN_OR_RETURN(p.half_add_s, median("add_half"));
    ASSIGN_OR_RETURN(p.chunk_copy_s, median("copy_chunk"));
    ASSIGN_OR_RETURN(p.half_copy_s, median("copy_half"));
  }
  ASSIGN_OR_RETURN(p.transfer_cpu_fraction, median("xfer_cpu_fraction"));
  p.spare_cores_per_rank = spare_cores_per_rank;
  p.gemm_source = costmodel::TimeSource::kMeasured;
  p.comm_source = costmodel::TimeSource::kMeasured;
  return p;
}

OverlapEfficiency ComputeOverlapEfficiency(const CollectiveMatMulResult& r, size_t i) {
  OverlapEfficiency e;
  e.overall_s = Summarize(r.methods.at(i).seconds).median_s;
  e.gemm_s = Summarize(r.gemm_s).median_s;
  e.comm_s = Summarize(r.comm_s).median_s;
  e.effective_comm_s = e.overall_s - e.gemm_s;
  e.efficiency = std::numeric_limits<double>::quiet_NaN();
  e.baseline_effective_comm_s = std::numeric_limits<double>::quiet_NaN();
  for (const MethodMeasurement& m : r.methods) {
    if (m.method != DecomposeMethod::kNone) continue;
    e.baseline_effective_comm_s = Summarize(m.seconds).median_s - e.gemm_s;
    if (e.baseline_effective_comm_s != 0) {
      e.efficiency = 1.0 - e.effective_comm_s / e.baseline_effective_comm_s;
    }
  }
  return e;
}

namespace cmm {

at::Tensor AllGatherMatMul(Pg& pg, int rank, int n, const at::Tensor& x, const at::Tensor& w,
                           DecomposeMethod method, at::Tensor* gathered) {
  RankState s;
  s.pg = &pg;
  s.rank = rank;
  s.n = n;
  s.x = x.contiguous();  // its rows are sent
  s.w = w;
  s.m = x.size(0) * n;
  s.k = x.size(1);
  s.nout = w.size(1) * n;
  if (method == DecomposeMethod::kNone) {
    at::Tensor full = AllGather(s);
    if (gathered != nullptr) *gathered = full;
    return at::mm(full, s.w);
  }
  return AllGatherMatMulLooped(s, method, gathered);
}

at::Tensor MatMulReduceScatter(Pg& pg, int rank, int n, const at::Tensor& x, const at::Tensor& w,
                               DecomposeMethod method) {
  RankState s;
  s.pg = &pg;
  s.rank = rank;
  s.n = n;
  s.x = x;
  s.w = w;
  s.m = x.size(0);
  s.k = x.size(1) * n;
  s.nout = w.size(1);
  return RunMethod(s, CollectivePattern::kMatMulReduceScatter, method);
}

}  // namespace cmm

}  // namespace braid::worker
