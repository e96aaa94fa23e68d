#include "worker/cuda/nccl_bench.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "worker/cuda/cuda_device.h"
#include "worker/rank_processes.h"
#include "worker/timing.h"

namespace braid::worker {
namespace {

using costmodel::Collective;


}  // namespace

absl::Status ValidateNcclBench(int ranks, const std::vector<Collective>& collectives,
                               const std::vector<int64_t>& sizes, int warmup, int repetitions,
                               int min_ranks) {
  if (ranks < min_ranks) {
    return absl::InvalidArgumentError(absl::StrCat("nccl bench: ranks must be >= ", min_ranks));
  }
  if (collectives.empty() || sizes.empty()) {
    return absl::InvalidArgumentError("nccl bench: collectives and sizes must be non-empty");
  }
  if (repetitions < 1 || warmup < 0) {
    return absl::InvalidArgumentError("nccl bench: repetitions >= 1 and warmup >= 0");
  }
  for (Collective c : collectives) {
    if (c == Collective::kSendRecv) {
      return absl::InvalidArgumentError(
          "nccl bench: SendRecv is a point-to-point transfer, not a group collective");
    }
  }
  for (int64_t b : sizes) {
    if (b <= 0 || b % (4 * ranks) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "nccl bench: size ", b, " is not a positive multiple of 4 * ranks = ", 4 * ranks));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<CollectiveMeasurement>> RunNcclBench(const NcclBenchOptions& options,
                                                                costmodel::ProfileStore* store) {
  RETURN_IF_ERROR(ValidateNcclBench(options.ranks, options.collectives, options.sizes,
                                    options.warmup, options.repetitions));
  if (options.first_device < 0) return absl::InvalidArgumentError("nccl bench: first_device < 0");
  // One GPU per rank: NCCL rejects two ranks of a communicator on one device.
  absl::StatusOr<int> count = CudaDeviceCount();
  if (!count.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("nccl bench: ", options.ranks,
                                                      " ranks need as many GPUs; ",
                                                      std::string(count.status().message())));
  }
  if (options.first_device + options.ranks > *count) {
    return absl::FailedPreconditionError(absl::StrCat(
        "nccl bench: ", options.ranks, " ranks from device ", options.first_device, " need ",
        options.first_device + options.ranks, " GPUs; this machine has ", *count));
  }
  std::string device_kind = options.device_kind;
  if (device_kind.empty()) {
    ASSIGN_OR_RETURN(CudaDeviceInfo d, FindCudaDevice(options.first_device));
    device_kind = absl::StrCat("gpu-local:", d.kind);
  }
  ASSIGN_OR_RETURN(std::string binary, FindRankProgram(options.rank_binary, "braid-nccl-rank",
                                                       "BRAID_NCCL_RANK", "nccl bench"));
  ASSIGN_OR_RETURN(RankDir dir, RankDir::Create("braid-nccl"));

  std::vector<std::string> names;
  for (Collective c : options.collectives)
    names.push_back(std::string(costmodel::CollectiveName(c)));
  std::vector<std::vector<std::string>> argv;
  for (int r = 0; r < options.ranks; ++r) {
    argv.push_back({binary, "--id-file", dir.path() + "/nccl-id", "--out",
                    absl::StrCat(dir.path(), "/rank", r, ".txt"), "--rank", absl::StrCat(r),
                    "--world", absl::StrCat(options.ranks), "--device",
                    absl::StrCat(options.first_device + r), "--collectives",
                    absl::StrJoin(names, ","), "--sizes", absl::StrJoin(options.sizes, ","),
                    "--warmup", absl::StrCat(options.warmup), "--repetitions",
                    absl::StrCat(options.repetitions)});
  }
  RETURN_IF_ERROR(RunRanks(argv, dir, options.timeout_s, "nccl bench"));

  return CollectRankMeasurements(dir, options.ranks, names, options.sizes, options.repetitions,
                                 "nccl bench", store, device_kind);
}

}  // namespace braid::worker
