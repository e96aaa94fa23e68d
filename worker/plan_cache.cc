#include "worker/plan_cache.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "base/digest.h"
#include "base/bounded_json.h"
#include "base/status_macros.h"
#include "glog/logging.h"
#include "google/protobuf/util/json_util.h"
#include "proto/plan_digest.h"

namespace braid::worker {

namespace fs = std::filesystem;

namespace {

// OK when `plan` carries a digest (64 hex digits) and it is its plan's
// (the per-device program's JSON checked against the fingerprint the
// digest covers).
absl::Status CheckDigest(const braid::v1::GetPlanResponse& plan) {
  const std::string& given = plan.plan_sha256();
  if (given.size() != 64 || given.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) {
    return absl::InvalidArgumentError(
        given.empty() ? "no plan digest (plan_sha256)"
                      : "plan_sha256 is not a SHA-256 digest (64 hex digits)");
  }
  if (!DigestsEqual(PlanDigest(plan.plan()), given)) {
    return absl::InvalidArgumentError("the plan does not match its digest (plan_sha256 " + given +
                                      ")");
  }
  if (plan.plan().has_parallel() && plan.plan().parallel().has_program()) {
    return CheckDeviceProgram(plan.plan().parallel().program());
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> LocalPlanCache::PathFor(const std::string& key) const {
  if (key.empty() || key.size() > 128) {
    return absl::InvalidArgumentError("plan key: must be 1 to 128 bytes");
  }
  for (char c : key) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok || key == "." || key == "..") {
      return absl::InvalidArgumentError(
          absl::StrCat("plan key '", key, "': only [A-Za-z0-9._-] allowed"));
    }
  }
  return (fs::path(dir_) / (key + ".json")).string();
}

absl::Status LocalPlanCache::Put(const std::string& key, const braid::v1::GetPlanResponse& plan) {
  ASSIGN_OR_RETURN(std::string path, PathFor(key));
  if (absl::Status s = CheckDigest(plan); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("plan of ", key, ": ", s.message(),
                                                   ": not cached"));
  }
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) return absl::InternalError(absl::StrCat(dir_, ": cannot create: ", ec.message()));
  std::string json;
  google::protobuf::util::JsonPrintOptions o;
  o.add_whitespace = true;
  o.preserve_proto_field_names = true;
  if (auto s = google::protobuf::util::MessageToJsonString(plan, &json, o); !s.ok()) {
    return absl::InternalError(absl::StrCat("plan to JSON: ", s.ToString()));
  }
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << json;
    out.flush();
    if (!out) {
      out.close();
      fs::remove(tmp, ec);
      return absl::InternalError(absl::StrCat(tmp, ": write failed"));
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    return absl::InternalError(absl::StrCat(path, ": rename failed: ", ec.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<braid::v1::GetPlanResponse>> LocalPlanCache::Get(
    const std::string& key) const {
  ASSIGN_OR_RETURN(std::string path, PathFor(key));
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::optional<braid::v1::GetPlanResponse>();
  std::stringstream ss;
  ss << in.rdbuf();
  // A cache file is input: bounded before protobuf's JSON parser sees it.
  if (absl::Status s = base::CheckJsonBounds(ss.str(), base::kPlanJsonLimits); !s.ok()) {
    return absl::DataLossError(absl::StrCat(path, ": not a cached plan: ", s.message()));
  }
  braid::v1::GetPlanResponse plan;
  if (auto s = google::protobuf::util::JsonStringToMessage(ss.str(), &plan); !s.ok()) {
    return absl::DataLossError(absl::StrCat(path, ": not a cached plan: ", s.ToString()));
  }
  if (absl::Status s = CheckDigest(plan); !s.ok()) {
    return absl::DataLossError(absl::StrCat(path, ": ", s.message()));
  }
  return std::optional<braid::v1::GetPlanResponse>(std::move(plan));
}

absl::StatusOr<FetchedPlan> FetchPlanCached(const PlanFetcher& fetch, LocalPlanCache& cache,
                                            const std::string& job_id) {
  ASSIGN_OR_RETURN(std::string path, cache.PathFor(job_id));
  FetchedPlan out;
  out.path = path;
  absl::StatusOr<braid::v1::GetPlanResponse> fetched = fetch(job_id);
  if (fetched.ok()) {
    // The caller needs the plan, not the copy: a cache that cannot be written
    // (read-only or full directory, a server answer without a digest) costs
    // only the fallback for the next time the server is down.
    if (absl::Status put = cache.Put(job_id, *fetched); !put.ok()) {
      out.cache_error = std::string(put.message());
      LOG(WARNING) << "plan of " << job_id << " served without caching it: " << put.message();
    }
    out.plan = *std::move(fetched);
    return out;
  }
  const absl::StatusCode code = fetched.status().code();
  if (code != absl::StatusCode::kUnavailable && code != absl::StatusCode::kDeadlineExceeded) {
    return fetched.status();
  }
  absl::StatusOr<std::optional<braid::v1::GetPlanResponse>> read = cache.Get(job_id);
  if (read.status().code() == absl::StatusCode::kDataLoss) {
    LOG(WARNING) << "cached plan refused: " << read.status().message();
    return absl::UnavailableError(absl::StrCat(
        "server unreachable (", std::string(fetched.status().message()),
        ") and the cached plan is refused: ", std::string(read.status().message())));
  }
  RETURN_IF_ERROR(read.status());
  std::optional<braid::v1::GetPlanResponse>& cached = *read;
  if (!cached.has_value()) {
    return absl::UnavailableError(absl::StrCat("server unreachable (",
                                               std::string(fetched.status().message()),
                                               ") and no cached plan at ", path));
  }
  out.plan = *std::move(cached);
  out.from_local_cache = true;
  return out;
}

std::string DefaultPlanCacheDir() {
  if (const char* d = std::getenv("BRAID_PLAN_CACHE"); d != nullptr && *d != '\0') return d;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    return absl::StrCat(xdg, "/braid/plans");
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return absl::StrCat(home, "/.cache/braid/plans");
  }
  return "/tmp/braid/plans";
}

}  // namespace braid::worker
