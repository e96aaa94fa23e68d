// The rank side of the timing executor (worker/executor.h): one LibTorch
// thread, c10d ProcessGroupGloo on loopback, one CpuKernel per compute op.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <time.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "base/bounded_json.h"
#include "base/status_macros.h"
#include "graph/text_format.h"
#include "worker/cpu_kernels.h"
#include "worker/executor.h"
#include "worker/internal/allreduce_check.h"
#include "worker/internal/executor.h"
#include "worker/fused_kernels.h"
#include "worker/runtime/gloo_group.h"
#include "worker/timing.h"

namespace braid::worker {
namespace {

using graph::OpId;
using graph::TensorId;

// Every rank seeds LibTorch alike, so all ranks bind identical kernel inputs
// and the allreduce result is world * the local buffer (verify_allreduce).
constexpr uint64_t kSeed = 20240917;

struct BucketState {
  std::vector<TensorId> grads;
  std::vector<int64_t> offsets;  // element offset of each gradient in `buffer`
  at::Tensor buffer;             // allocated once per strategy
  int remaining = 0;
  bool ready = false, started = false, waited = false;
  c10::intrusive_ptr<c10d::Work> work;
  at::Tensor expected;  // verify: world * the buffer as started
};

struct StrategyState {
  std::string name;
  bool after_backward = false;
  bool compute_only = false;
  bool time_ops = false;
  std::vector<int64_t> probe_bytes;
  std::vector<OpId> order;
  std::vector<BucketState> buckets;
  std::map<TensorId, int> bucket_of;
  int last_backward_pos = -1;  // position in `order` of the last backward op
  // Fused groups (worker/fused_kernels.h) and, per op, the group it is a
  // non-duplicated member of (-1: it runs alone).
  std::vector<FusedCpuKernel> fused;
  std::vector<int> group_of;
  std::vector<char> group_ran;  // this iteration
};

class RankExecutor {
 public:
  RankExecutor(const graph::Graph& g, internal::GradientMaps maps, c10d::ProcessGroupGloo& pg,
               int world)
      : g_(g), maps_(std::move(maps)), pg_(pg), world_(world) {}

  // Makes every compute op's kernel once (inputs bound now).
  absl::Status BuildKernels() {
    at::manual_seed(kSeed);
    kernels_.resize(g_.num_ops());
    for (OpId id = 0; id < g_.num_ops(); ++id) {
      if (graph::IsCollectiveKind(g_.op(id).kind)) continue;
      ASSIGN_OR_RETURN(CpuKernel k, MakeCpuKernel(g_, id, &slots_));
      kernels_[id] = std::move(k);
    }
    // A result laid out unlike its graph tensor (LSTM's Y) is never bound.
    bind_.assign(g_.num_ops(), false);
    for (OpId id = 0; id < g_.num_ops(); ++id) {
      const graph::Op& op = g_.op(id);
      bind_[id] = kernels_[id].run && kernels_[id].check == CpuKernel::Check::kShape &&
                  !op.outputs.empty() && slots_.Has(op.outputs[0]);
    }
    // A gradient that is not its producer's output 0 (the kernel does not
    // return it) is copied from a stand-in of its shape: the copy costs the same.
    for (TensorId t : maps_.gradients) {
      const graph::Tensor& tensor = g_.tensor(t);
      if (g_.op(tensor.producer).outputs[0] != t) {
        standin_[t] = at::randn(tensor.shape, at::TensorOptions().dtype(internal::ToScalarType(tensor.dtype)));
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<StrategyState> Prepare(const nlohmann::json& j) {
    StrategyState s;
    s.group_of.assign(g_.num_ops(), -1);
    for (const auto& grp : j.value("groups", nlohmann::json::array())) {
      const std::vector<OpId> ops = grp.at("ops").get<std::vector<OpId>>();
      const std::vector<OpId> dups = grp.at("duplicated").get<std::vector<OpId>>();
      ASSIGN_OR_RETURN(FusedCpuKernel k, MakeFusedCpuKernel(g_, ops, &slots_));
      for (OpId id : ops) {
        if (std::find(dups.begin(), dups.end(), id) == dups.end()) {
          s.group_of[id] = static_cast<int>(s.fused.size());
        }
      }
      s.fused.push_back(std::move(k));
    }
    s.group_ran.assign(s.fused.size(), 0);
    s.name = j.at("name").get<std::string>();
    s.after_backward = j.at("after_backward").get<bool>();
    s.compute_only = j.at("compute_only").get<bool>();
    s.time_ops = j.value("time_ops", false);
    s.probe_bytes = j.value("probe_allreduce_bytes", std::vector<int64_t>{});
    s.order = j.at("order").get<std::vector<OpId>>();
    for (const auto& b : j.at("buckets")) {
      BucketState bucket;
      bucket.grads = b.get<std::vector<TensorId>>();
      int64_t total = 0;
      for (TensorId t : bucket.grads) {
        s.bucket_of[t] = static_cast<int>(s.buckets.size());
        bucket.offsets.push_back(total);
        total += g_.tensor(t).NumElements();
      }
      bucket.buffer = at::zeros(
          {total}, at::TensorOptions().dtype(internal::ToScalarType(g_.tensor(bucket.grads[0]).dtype)));
      s.buckets.push_back(std::move(bucket));
    }
    for (size_t i = 0; i < s.order.size(); ++i) {
      if (g_.op(s.order[i]).phase == graph::Phase::kBackward) s.last_backward_pos = static_cast<int>(i);
    }
    return s;
  }

  // One iteration; adds to `book`. `verify`: check every allreduce's result.
  absl::Status RunIteration(StrategyState& s, bool verify, ExecBookkeeping& book) {
    std::fill(s.group_ran.begin(), s.group_ran.end(), 0);
    for (BucketState& b : s.buckets) {
      b.remaining = static_cast<int>(b.grads.size());
      b.ready = b.started = b.waited = false;
      b.work.reset();
      b.expected = at::Tensor();
    }
    reduced_count_.clear();
    produced_.clear();
    size_t next_issue = 0;
    auto issue_ready = [&](bool all) {
      while (next_issue < s.buckets.size() && (all || s.buckets[next_issue].ready)) {
        Start(s.buckets[next_issue++], verify, book);
      }
    };
    if (!s.probe_bytes.empty()) {
      probe_s_.clear();
      for (int64_t bytes : s.probe_bytes) {
        at::Tensor& buf = probe_buf_[bytes];
        if (!buf.defined()) buf = at::ones({bytes / 4});
        std::vector<at::Tensor> io = {buf};
        pg_.barrier()->wait();
        const auto t0 = std::chrono::steady_clock::now();
        pg_.allreduce(io)->wait();
        probe_s_.emplace_back(bytes, SecondsSince(t0));
      }
      return absl::OkStatus();
    }
    if (s.compute_only) {
      if (op_s_ == nullptr) {
        for (OpId id : s.order) RETURN_IF_ERROR(Step(s, id).status());
        return absl::OkStatus();
      }
      // Timed: every op, and once the last backward op has run, packing
      // every gradient into one buffer (the allreduce-after-backward bucket),
      // timed apart from the ops.
      op_s_->clear();
      pack_s_ = -1;
      std::vector<at::Tensor> grads;
      for (size_t pos = 0; pos < s.order.size(); ++pos) {
        const OpId id = s.order[pos];
        const auto t0 = std::chrono::steady_clock::now();
        ASSIGN_OR_RETURN(bool ran, Step(s, id));
        if (ran) op_s_->emplace_back(id, SecondsSince(t0));
        for (const auto& [t, value] : step_out_) {
          if (g_.tensor(t).role == graph::TensorRole::kGradient) grads.push_back(value);
        }
        if (static_cast<int>(pos) == s.last_backward_pos) {
          pack_s_ = Pack(grads);
          grads.clear();
        }
      }
      return absl::OkStatus();
    }
    if (s.after_backward && s.last_backward_pos < 0) issue_ready(true);
    for (size_t pos = 0; pos < s.order.size(); ++pos) {
      const OpId id = s.order[pos];
      const graph::Op& op = g_.op(id);
      if (op.phase == graph::Phase::kUpdate) {
        for (TensorId t : op.inputs) {
          auto r = maps_.reduced_to_grad.find(t);
          if (r == maps_.reduced_to_grad.end()) continue;
          BucketState& b = s.buckets[s.bucket_of.at(r->second)];
          if (!b.waited && b.started) Wait(b, book);
          if (!b.waited) ++book.updates_before_wait;
        }
      }
      RETURN_IF_ERROR(Step(s, id).status());
      for (const auto& [t, value] : step_out_) {
        if (g_.tensor(t).role != graph::TensorRole::kGradient) continue;
        produced_[t] = value;
        BucketState& b = s.buckets[s.bucket_of.at(t)];
        if (--b.remaining == 0) b.ready = true;
      }
      if (!s.after_backward) issue_ready(false);
      if (s.after_backward && static_cast<int>(pos) == s.last_backward_pos) issue_ready(true);
    }
    for (BucketState& b : s.buckets) {
      if (!b.started) {
        return absl::InternalError(absl::StrCat("executor: strategy '", s.name,
                                                "': a bucket was never started"));
      }
      if (!b.waited) Wait(b, book);
    }
    for (TensorId t : maps_.gradients) {
      auto it = reduced_count_.find(t);
      if (it == reduced_count_.end() || it->second != 1) ++book.gradients_not_once;
    }
    return absl::OkStatus();
  }

  // When set, a compute_only iteration appends (op, seconds) per op run.
  void set_op_times(std::vector<std::pair<OpId, double>>* op_s) { op_s_ = op_s; }
  // The last timed compute-only iteration's packing seconds (-1: none), and
  // the bytes packed.
  double pack_s() const { return pack_s_; }
  // The last probe iteration's (bytes, seconds).
  const std::vector<std::pair<int64_t, double>>& probe_s() const { return probe_s_; }
  int64_t pack_bytes() const { return pack_buffer_.defined() ? pack_buffer_.nbytes() : 0; }

 private:
  // Runs the op and hands its result to the ops that read it.
  at::Tensor RunOp(OpId id) {
    at::Tensor result = kernels_[id].run();
    if (bind_[id]) bind_[id] = slots_.Bind(g_.op(id).outputs[0], result);
    return result;
  }

  // Runs op `id`, or its fused group when `id` is the group's first member
  // in the order (false: a member of a group that already ran). step_out_
  // gets the tensors produced: (graph tensor, value); a group's are the
  // tensors it writes out, each bound to its slot for the ops that read it.
  absl::StatusOr<bool> Step(StrategyState& s, OpId id) {
    step_out_.clear();
    const int gi = s.group_of.empty() ? -1 : s.group_of[id];
    if (gi < 0) {
      at::Tensor result = RunOp(id);
      for (TensorId t : g_.op(id).outputs) {
        auto st = standin_.find(t);
        step_out_.emplace_back(t, st != standin_.end() ? st->second : result);
      }
      return true;
    }
    if (s.group_ran[gi]) return false;
    s.group_ran[gi] = 1;
    FusedCpuKernel& k = s.fused[gi];
    RETURN_IF_ERROR(k.run());
    for (size_t i = 0; i < k.outputs.size(); ++i) {
      const at::Tensor& value = k.output(i);
      slots_.Bind(k.outputs[i], value);
      step_out_.emplace_back(k.outputs[i], value);
    }
    return true;
  }

  // Copies `grads` back to back into pack_buffer_ as Start() fills a bucket.
  double Pack(const std::vector<at::Tensor>& grads) {
    if (!pack_buffer_.defined()) {
      int64_t total = 0;
      for (TensorId t : maps_.gradients) total += g_.tensor(t).NumElements();
      pack_buffer_ = at::zeros({total});
    }
    const auto t0 = std::chrono::steady_clock::now();
    int64_t offset = 0;
    for (const at::Tensor& grad : grads) {
      const int64_t n = grad.numel();
      if (offset + n > pack_buffer_.numel()) break;
      pack_buffer_.narrow(0, offset, n).copy_(grad.reshape({-1}));
      offset += n;
    }
    return SecondsSince(t0);
  }

  void Start(BucketState& b, bool verify, ExecBookkeeping& book) {
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t i = 0; i < b.grads.size(); ++i) {
      const TensorId t = b.grads[i];
      const int64_t n = g_.tensor(t).NumElements();
      auto p = produced_.find(t);
      // A bucket started before its gradient exists (after_backward with no
      // backward op) copies nothing for it; the count shows it.
      if (p == produced_.end()) continue;
      b.buffer.narrow(0, b.offsets[i], n).copy_(p->second.reshape({-1}));
      ++reduced_count_[t];
      ++book.gradients_reduced;
      book.bytes_copied += n * b.buffer.element_size();
      produced_.erase(p);
    }
    book.pack_s += SecondsSince(t0);
    if (verify) b.expected = b.buffer * static_cast<double>(world_);
    std::vector<at::Tensor> io = {b.buffer};
    b.work = pg_.allreduce(io);
    b.started = true;
    ++book.allreduces_started;
  }

  void Wait(BucketState& b, ExecBookkeeping& book) {
    const auto t0 = std::chrono::steady_clock::now();
    b.work->wait();
    book.wait_s += SecondsSince(t0);
    b.waited = true;
    ++book.waits;
    if (b.expected.defined()) {
      ++book.buckets_verified;
      if (!internal::AllreduceSumMatches(b.buffer, b.expected)) ++book.verify_failures;
      b.expected = at::Tensor();
    }
  }

  const graph::Graph& g_;
  const internal::GradientMaps maps_;
  c10d::ProcessGroupGloo& pg_;
  const int world_;
  TensorSlots slots_;  // declared before kernels_: the kernels hold its tensors
  std::vector<CpuKernel> kernels_;
  std::vector<bool> bind_;  // per op: its result feeds its output's slot
  std::vector<std::pair<OpId, double>>* op_s_ = nullptr;
  at::Tensor pack_buffer_;  // time_ops: the allreduce-after-backward bucket
  std::map<int64_t, at::Tensor> probe_buf_;
  std::vector<std::pair<int64_t, double>> probe_s_;
  double pack_s_ = -1;
  std::map<TensorId, at::Tensor> standin_;
  std::map<TensorId, at::Tensor> produced_;  // gradients of this iteration not yet copied
  std::map<TensorId, int> reduced_count_;
  std::vector<std::pair<TensorId, at::Tensor>> step_out_;  // Step's results
};

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("executor rank: cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void SetBlasThreads(int n) {
  using SetFn = void (*)(int);
  if (auto f = reinterpret_cast<SetFn>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) f(n);
}

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

void WriteBook(std::ostream& out, int s, const ExecBookkeeping& b) {
  out << "book " << s << ' ' << b.allreduces_started << ' ' << b.gradients_reduced << ' '
      << b.gradients_not_once << ' ' << b.waits << ' ' << b.updates_before_wait << ' '
      << b.bytes_copied << ' ' << b.buckets_verified << ' ' << b.verify_failures << ' '
      << b.pack_s << ' ' << b.wait_s << '\n';
}

}  // namespace

namespace internal {

void SetUpRankProcess() {
  at::set_num_threads(1);
  SetBlasThreads(1);
  if (!KeepFreedMemory()) LOG(WARNING) << "executor rank: mallopt refused; allocations page-fault";
  // Results feed the next ops (TensorSlots): keep denormal values, which
  // chained random data can produce, from slowing the kernels down.
  at::globalContext().setFlushDenormal(true);
}

absl::StatusOr<RankResults> RunStrategiesOnRank(const graph::Graph& g, const nlohmann::json& spec,
                                                c10d::ProcessGroupGloo& pg, int world) {
  ASSIGN_OR_RETURN(GradientMaps maps, MapGradients(g));
  RankResults r;
  try {
    const int warmup = spec.at("warmup").get<int>();
    const int iterations = spec.at("iterations").get<int>();
    const bool verify = spec.at("verify_allreduce").get<bool>();
    RankExecutor exec(g, std::move(maps), pg, world);
    RETURN_IF_ERROR(exec.BuildKernels());
    std::vector<StrategyState> states;
    for (const auto& j : spec.at("strategies")) {
      ASSIGN_OR_RETURN(StrategyState st, exec.Prepare(j));
      states.push_back(std::move(st));
    }
    const size_t n = states.size();
    r.books.resize(n);
    r.times.resize(n);
    r.cpu.resize(n);
    r.op_log.resize(n);
    r.pack_log.resize(n);
    r.probe_log.resize(n);
    std::vector<std::pair<OpId, double>> op_times;
    for (int it = 0; it < warmup + iterations; ++it) {
      for (size_t s = 0; s < n; ++s) {
        ExecBookkeeping warm;
        const bool timed = it >= warmup;
        pg.barrier()->wait();
        exec.set_op_times(timed && states[s].time_ops ? &op_times : nullptr);
        const double c0 = ThreadCpuSeconds();
        auto t0 = std::chrono::steady_clock::now();
        RETURN_IF_ERROR(
            exec.RunIteration(states[s], verify && it == 0 && warmup > 0, timed ? r.books[s] : warm));
        const double t = SecondsSince(t0);
        const double c = ThreadCpuSeconds() - c0;
        if (timed) {
          r.times[s].push_back(t);
          r.cpu[s].push_back(c);
          if (!states[s].probe_bytes.empty()) {
            r.probe_log[s].insert(r.probe_log[s].end(), exec.probe_s().begin(), exec.probe_s().end());
          }
          if (states[s].time_ops) {
            r.op_log[s].insert(r.op_log[s].end(), op_times.begin(), op_times.end());
            if (exec.pack_s() >= 0) r.pack_log[s].push_back(exec.pack_s());
          }
        }
        r.books[s].buckets_verified += warm.buckets_verified;
        r.books[s].verify_failures += warm.verify_failures;
      }
    }
    pg.barrier()->wait();
    r.pack_bytes = exec.pack_bytes();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("executor rank ", pg.getRank(), ": ", e.what()));
  }
  return r;
}

}  // namespace internal

absl::Status RunTrainRank(const TrainRankConfig& config) {
  if (config.world < 1 || config.rank < 0 || config.rank >= config.world) {
    return absl::InvalidArgumentError(
        absl::StrCat("executor rank: rank ", config.rank, " of world ", config.world));
  }
  internal::SetUpRankProcess();
  ASSIGN_OR_RETURN(std::string text, ReadFile(config.graph_path));
  ASSIGN_OR_RETURN(graph::Graph g, graph::ParseText(text));
  ASSIGN_OR_RETURN(std::string strategies_text, ReadFile(config.strategies_path));
  absl::StatusOr<nlohmann::json> parsed =
      base::ParseBoundedJson(strategies_text, base::kPlanJsonLimits);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(config.strategies_path, ": ", parsed.status().message()));
  }
  nlohmann::json spec = *std::move(parsed);
  std::ofstream out(config.output_path);
  if (!out) return absl::NotFoundError(absl::StrCat("executor rank: cannot write ", config.output_path));
  internal::RankResults r;
  try {
    auto store = c10::make_intrusive<c10d::FileStore>(config.store_path, config.world);
    auto pg = MakeGlooGroup(store, config.rank, config.world, "127.0.0.1");
    ASSIGN_OR_RETURN(r, internal::RunStrategiesOnRank(g, spec, *pg, config.world));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("executor rank ", config.rank, ": ", e.what()));
  }
  for (size_t s = 0; s < r.times.size(); ++s) {
    for (size_t i = 0; i < r.times[s].size(); ++i) {
      out << "iter " << s << ' ' << r.times[s][i] << ' ' << r.cpu[s][i] << '\n';
    }
    for (const auto& [op, sec] : r.op_log[s]) out << "op " << s << ' ' << op << ' ' << sec << '\n';
    for (const auto& [bytes, sec] : r.probe_log[s]) {
      out << "probe " << s << ' ' << bytes << ' ' << sec << '\n';
    }
    for (double sec : r.pack_log[s]) out << "pack " << s << ' ' << sec << ' ' << r.pack_bytes << '\n';
    WriteBook(out, static_cast<int>(s), r.books[s]);
  }
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("executor rank: write ", config.output_path));
  return absl::OkStatus();
}

}  // namespace braid::worker
