#include "costmodel/gnn/provider.h"

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "costmodel/gnn/gnn_estimator.h"
#include "costmodel/gnn_store.h"
#include "costmodel/op_cost.h"
#include "costmodel/profile_store.h"
#include "glog/logging.h"

namespace braid::costmodel::gnn {
namespace {

// Members in destruction order: the estimator (which writes its pending
// predictions) before the stores it writes to.
struct Loaded {
  std::unique_ptr<ProfileStore> profiles;
  std::unique_ptr<GnnStore> cache;
  std::unique_ptr<GnnEstimator> estimator;  // null: could not load (logged once)
};

struct Registry {
  std::mutex mu;
  std::map<std::tuple<std::string, std::string, std::string, std::string>, Loaded> loaded;
};

// Writes the predictions still pending (Estimate misses are written in
// batches) before the process exits.
void FlushAll();

Registry& TheRegistry() {
  static auto* r = [] {
    auto* reg = new Registry();  // lives to the end of the process
    std::atexit(FlushAll);
    return reg;
  }();
  return *r;
}

void FlushAll() {
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (auto& [key, l] : r.loaded) {
    if (l.estimator == nullptr) continue;
    if (absl::Status s = l.estimator->Flush(); !s.ok()) {
      LOG(WARNING) << "fused-op estimator: predictions not saved: " << s.message();
    }
  }
}

FusedOpEstimator* Provide(const ClusterSpec& cluster, const std::string& profile_db) {
  std::optional<std::string> path = GnnCheckpointPathFor(cluster.device.kind);
  if (!path.has_value()) return nullptr;
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto key = std::make_tuple(cluster.name, cluster.device.kind, *path, profile_db);
  auto it = r.loaded.find(key);
  if (it != r.loaded.end()) return it->second.estimator.get();
  Loaded l;
  absl::Status s;
  if (!profile_db.empty() && profile_db != ":memory:") {
    absl::StatusOr<std::unique_ptr<ProfileStore>> p = ProfileStore::Open(profile_db);
    absl::StatusOr<std::unique_ptr<GnnStore>> c = GnnStore::Open(profile_db);
    if (p.ok() && c.ok()) {
      l.profiles = *std::move(p);
      l.cache = *std::move(c);
    } else {
      s = p.ok() ? c.status() : p.status();
    }
  }
  if (s.ok()) {
    // Load returns every refusal as a status; the catch is the last line
    // of defence of the server's handlers, which an exception must not
    // escape.
    try {
      absl::StatusOr<std::unique_ptr<GnnEstimator>> e =
          GnnEstimator::Load(*path, cluster, l.profiles.get(), l.cache.get());
      if (e.ok()) {
        l.estimator = *std::move(e);
      } else {
        s = e.status();
      }
    } catch (const std::exception& e) {
      s = absl::InternalError(absl::StrCat("loading it threw: ", e.what()));
    }
  }
  if (!s.ok()) {
    LOG(WARNING) << "fused-op estimator " << *path << " not used for " << cluster.name << " ("
                 << cluster.device.kind << "): " << s.message()
                 << "; unmeasured fused ops get the corrected roofline";
  }
  FusedOpEstimator* out = l.estimator.get();
  r.loaded.emplace(std::move(key), std::move(l));
  return out;
}

}  // namespace

void InstallGnnEstimatorProvider() { SetFusedOpEstimatorProvider(Provide); }

}  // namespace braid::costmodel::gnn
