// The rank side of the collective benchmark: c10d ProcessGroupGloo on loopback.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <chrono>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "worker/collective_bench.h"
#include "worker/runtime/gloo_group.h"
#include "worker/rank_processes.h"
#include "worker/timing.h"

namespace braid::worker {
namespace {

using costmodel::Collective;

// Runs one collective of `bytes` over `pg` (tensors reused across calls).
class CollectiveCall {
 public:
  CollectiveCall(Collective c, int64_t bytes, int world, int rank) : c_(c) {
    const int64_t elems = bytes / 4;
    switch (c) {
      case Collective::kAllReduce:
      case Collective::kBroadcast:
        io_ = {at::ones({elems}, at::kFloat) * rank};
        break;
      case Collective::kAllGather:
        io_ = {at::full({elems / world}, static_cast<float>(rank), at::kFloat)};
        gathered_.emplace_back();
        for (int r = 0; r < world; ++r) gathered_[0].push_back(at::empty({elems / world}, at::kFloat));
        break;
      case Collective::kAllToAll:
        io_ = {at::full({elems}, static_cast<float>(rank), at::kFloat)};
        out_ = at::empty({elems}, at::kFloat);
        break;
      case Collective::kReduceScatter:  // bytes: the input buffer
        io_ = {at::full({elems}, static_cast<float>(rank), at::kFloat)};
        break;
      default:
        break;
    }
  }

  // Runs the call to completion (WaitCollective).
  void Run(c10d::ProcessGroupGloo& pg, bool poll) {
    if (c_ == Collective::kReduceScatter) {
      GlooReduceScatter(pg, io_[0], 0, poll);  // what the parallel ranks run
      return;
    }
    WaitCollective(Start(pg), poll);
  }

 private:
  c10::intrusive_ptr<c10d::Work> Start(c10d::ProcessGroupGloo& pg) {
    switch (c_) {
      case Collective::kAllReduce:
        return pg.allreduce(io_);
      case Collective::kBroadcast:
        return pg.broadcast(io_);
      case Collective::kAllGather:
        return pg.allgather(gathered_, io_);
      case Collective::kAllToAll: {
        std::vector<int64_t> even;  // empty split sizes: equal chunks
        return pg.alltoall_base(out_, io_[0], even, even);
      }
      default:
        return {};
    }
  }

  Collective c_;
  std::vector<at::Tensor> io_;
  std::vector<std::vector<at::Tensor>> gathered_;
  at::Tensor out_;
};

}  // namespace

absl::Status RunCollectiveRank(const RankConfig& config) {
  if (config.world < 1 || config.rank < 0 || config.rank >= config.world) {
    return absl::InvalidArgumentError(
        absl::StrCat("collective rank: rank ", config.rank, " of world ", config.world));
  }
  for (Collective c : config.collectives) {
    if (c != Collective::kAllReduce && c != Collective::kAllGather &&
        c != Collective::kBroadcast && c != Collective::kAllToAll &&
        c != Collective::kReduceScatter) {
      return absl::UnimplementedError(absl::StrCat(
          "collective bench: ", std::string(costmodel::CollectiveName(c)),
          " is not available in LibTorch 1.13's ProcessGroupGloo"));
    }
  }
  if (config.pin_cores) RETURN_IF_ERROR(PinToCore(config.rank, "collective"));
  // One compute thread per rank, as the CPU training executor runs.
  at::set_num_threads(1);
  const bool poll = config.pin_cores && config.poll;
  // Bound ranks poll for their collectives and the barrier before each, as
  // bound training ranks do (a rank left blocking in the barrier wakes up
  // late, and its peer's collective would wait for it).
  std::ofstream out(config.output_path);
  if (!out) {
    return absl::NotFoundError(absl::StrCat("collective rank: cannot write ", config.output_path));
  }
  try {
    auto store = c10::make_intrusive<c10d::FileStore>(config.store_path, config.world);
    auto options = c10d::ProcessGroupGloo::Options::create(std::chrono::milliseconds(120000));
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    // One Gloo worker thread: a rank runs one collective at a time.
    options->threads = 1;
    c10d::ProcessGroupGloo pg(store, config.rank, config.world, options);
    for (Collective c : config.collectives) {
      std::vector<CollectiveCall> calls;
      for (int64_t bytes : config.sizes) calls.emplace_back(c, bytes, config.world, config.rank);
      for (CollectiveCall& call : calls) {
        for (int i = 0; i < config.warmup; ++i) call.Run(pg, poll);
      }
      // Repetitions round-robin over the sizes: the machine's drift over the
      // benchmark's seconds then reaches every size alike instead of shifting
      // some sizes against others (which bends the fitted line).
      std::vector<std::vector<double>> times(calls.size());
      for (int r = 0; r < config.repetitions; ++r) {
        for (size_t k = 0; k < calls.size(); ++k) {
          WaitCollective(pg.barrier(), poll);  // start together: time the collective, not the skew
          auto t0 = std::chrono::steady_clock::now();
          calls[k].Run(pg, poll);
          times[k].push_back(SecondsSince(t0));
        }
      }
      for (size_t k = 0; k < calls.size(); ++k) {
        out << costmodel::CollectiveName(c) << ' ' << config.sizes[k];
        for (double t : times[k]) out << ' ' << t;
        out << '\n';
      }
    }
    pg.barrier()->wait();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("collective rank ", config.rank, ": ", e.what()));
  }
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("collective rank: write ", config.output_path));
  return absl::OkStatus();
}

}  // namespace braid::worker
