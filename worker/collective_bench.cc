#include "worker/collective_bench.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "glog/logging.h"
#include "worker/rank_processes.h"
#include "worker/timing.h"


namespace braid::worker {
namespace {

namespace fs = std::filesystem;
using costmodel::Collective;


absl::Status Validate(const CollectiveBenchOptions& o) {
  if (o.ranks < 2) return absl::InvalidArgumentError("collective bench: ranks must be >= 2");
  if (o.collectives.empty() || o.sizes.empty()) {
    return absl::InvalidArgumentError("collective bench: collectives and sizes must be non-empty");
  }
  if (o.repetitions < 1 || o.warmup < 0) {
    return absl::InvalidArgumentError("collective bench: repetitions >= 1 and warmup >= 0");
  }
  for (Collective c : o.collectives) {
    if (c == Collective::kSendRecv) {
      return absl::UnimplementedError(absl::StrCat(
          "collective bench: ", std::string(costmodel::CollectiveName(c)),
          " is not available in LibTorch 1.13's ProcessGroupGloo"));
    }
  }
  for (int64_t b : o.sizes) {
    if (b <= 0 || b % (4 * o.ranks) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "collective bench: size ", b, " is not a positive multiple of 4 * ranks = ", 4 * o.ranks));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> FindRankBinary(const std::string& configured) {
  return FindRankProgram(configured, "braid-collective-rank", "BRAID_COLLECTIVE_RANK",
                         "collective bench");
}

absl::StatusOr<std::vector<CollectiveMeasurement>> RunCollectiveBench(
    const CollectiveBenchOptions& options, costmodel::ProfileStore* store) {
  RETURN_IF_ERROR(Validate(options));
  ASSIGN_OR_RETURN(std::string binary, FindRankBinary(options.rank_binary));
  ASSIGN_OR_RETURN(RankDir dir, RankDir::Create("braid-coll"));

  std::vector<std::string> names;
  for (Collective c : options.collectives) names.push_back(std::string(costmodel::CollectiveName(c)));
  std::vector<std::vector<std::string>> argv;
  for (int r = 0; r < options.ranks; ++r) {
    argv.push_back({binary,
                    "--store", dir.path() + "/store",
                    "--out", absl::StrCat(dir.path(), "/rank", r, ".txt"),
                    "--rank", absl::StrCat(r),
                    "--world", absl::StrCat(options.ranks),
                    "--collectives", absl::StrJoin(names, ","),
                    "--sizes", absl::StrJoin(options.sizes, ","),
                    "--warmup", absl::StrCat(options.warmup),
                    "--repetitions", absl::StrCat(options.repetitions)});
    if (options.pin_cores) argv.back().push_back("--pin-cores");
    if (options.pin_cores && options.poll) argv.back().push_back("--poll");
  }
  RETURN_IF_ERROR(RunRanks(argv, dir, options.timeout_s, "collective bench"));

  return CollectRankMeasurements(dir, options.ranks, names, options.sizes, options.repetitions,
                                 "collective bench", store, options.device_kind,
                                 options.store_mean);
}

}  // namespace braid::worker
