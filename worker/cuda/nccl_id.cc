#include "worker/cuda/nccl_id.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"

namespace braid::worker {

absl::Status WriteNcclId(const ncclUniqueId& id, const std::string& path) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(id.internal, sizeof(id.internal));
    if (!out) return absl::InternalError(absl::StrCat("nccl: cannot write ", tmp));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return absl::InternalError(absl::StrCat("nccl: rename to ", path, ": ", ec.message()));
  return absl::OkStatus();
}

absl::StatusOr<ncclUniqueId> ReadNcclId(const std::string& path, const std::string& who,
                                        double timeout_s) {
  const auto start = std::chrono::steady_clock::now();
  while (true) {
    std::ifstream in(path, std::ios::binary);
    ncclUniqueId id{};
    if (in && in.read(id.internal, sizeof(id.internal))) return id;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > timeout_s) {
      return absl::DeadlineExceededError(absl::StrCat(who, ": no ncclUniqueId at ", path, " after ",
                                                      timeout_s, " s (its writer died?)"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace braid::worker
