#include "costmodel/gnn/gnn_estimator.h"

#include <atomic>
#include <cmath>
#include <exception>
#include <limits>
#include <mutex>
#include <shared_mutex>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/text.h"
#include "costmodel/cost_check.h"
#include "costmodel/gnn/gnn_model.h"
#include "glog/logging.h"

namespace braid::costmodel::gnn {
namespace {

// Predictions are written to SQLite in batches of at least this many (and
// whenever a Prefetch computed some, and at destruction).
constexpr size_t kFlushEvery = 64;

bool Estimable(const graph::Graph& g, std::span<const graph::OpId> sorted) {
  if (sorted.size() < 2) return false;
  for (graph::OpId id : sorted) {
    if (IsCommunicationOp(g.op(id))) return false;
  }
  return true;
}

// A prediction the cost model may use: a kernel time braid can plan with.
bool Usable(double s) { return std::isfinite(s) && s > 0 && s <= kMaxPredictedSeconds; }

// Remembered by StructuralKey for a group whose prediction was not usable:
// Estimate answers nullopt for it (the cost model's corrected roofline)
// without running the network again.
constexpr double kDeclined = std::numeric_limits<double>::quiet_NaN();

}  // namespace

struct GnnEstimator::Impl {
  Impl(LoadedCheckpoint c, const ClusterSpec& cluster, ProfileStore* profiles, GnnStore* store)
      : ckpt(std::move(c)),
        vocab(OpVocabulary::Build(ckpt.info.vocabulary)),
        members(cluster, profiles, nullptr, CommModel(cluster)),
        store(store) {}

  LoadedCheckpoint ckpt;
  OpVocabulary vocab;
  ClusterCostModel members;  // single-op times: profile, else roofline
  GnnStore* store;

  mutable std::shared_mutex mu;  // cache, by_key, pending
  absl::flat_hash_map<std::string, double> cache;  // by FusedSignature (what SQLite keeps)
  // The same predictions by StructuralKey: a hit needs no signature string.
  absl::flat_hash_map<GroupKey, double> by_key;
  std::vector<std::pair<std::string, double>> pending;
  std::mutex net_mu;    // the network runs one batch at a time
  std::mutex store_mu;  // GnnStore writes
  std::atomic<int64_t> forward_passes{0};
  std::atomic<int64_t> predictions_run{0};
  std::atomic<int64_t> declined{0};
  std::atomic<bool> warned{false};  // WarnOnce has logged
  int64_t loaded = 0;

  std::vector<double> Run(std::span<const FeatureGraph* const> graphs) {
    std::vector<double> out;
    std::lock_guard<std::mutex> lock(net_mu);
    out = Predict(ckpt.net, graphs, ckpt.info.stats);
    forward_passes.fetch_add(1, std::memory_order_relaxed);
    predictions_run.fetch_add(static_cast<int64_t>(graphs.size()), std::memory_order_relaxed);
    return out;
  }

  std::optional<double> ByKey(const GroupKey& key) const {
    std::shared_lock<std::shared_mutex> lock(mu);
    auto it = by_key.find(key);
    if (it == by_key.end()) return std::nullopt;
    return it->second;
  }

  // The cached prediction by signature; remembered under `key` too.
  std::optional<double> BySignature(const std::string& sig, const GroupKey& key) {
    std::unique_lock<std::shared_mutex> lock(mu);
    auto it = cache.find(sig);
    if (it == cache.end()) return std::nullopt;
    by_key.insert_or_assign(key, it->second);
    return it->second;
  }

  struct Fresh {
    std::string sig;
    GroupKey key;
    double seconds;
  };
  // Remembers new predictions; writes them through when `flush` or enough
  // are pending. An unusable prediction (not finite, not positive, or above
  // kMaxPredictedSeconds) is remembered as declined, never stored.
  void Insert(std::vector<Fresh> fresh, bool flush) {
    std::vector<std::pair<std::string, double>> to_write;
    {
      std::unique_lock<std::shared_mutex> lock(mu);
      for (Fresh& f : fresh) {
        if (!Usable(f.seconds)) {
          Decline(f);
          f.seconds = kDeclined;
          by_key.insert_or_assign(f.key, kDeclined);
          continue;
        }
        cache.insert_or_assign(f.sig, f.seconds);
        by_key.insert_or_assign(f.key, f.seconds);
        if (store != nullptr) pending.emplace_back(std::move(f.sig), f.seconds);
      }
      if (store != nullptr && (flush || pending.size() >= kFlushEvery)) to_write.swap(pending);
    }
    if (!to_write.empty()) {
      absl::Status s = Write(to_write);
      if (!s.ok()) LOG(WARNING) << "GNN prediction cache: " << s;
    }
  }

  // The first of what an estimator cannot answer goes to the log; the
  // rest only to the counters (a search asks thousands of groups).
  void WarnOnce(const std::string& what) {
    if (warned.exchange(true)) return;
    LOG(WARNING) << "fused-op estimator " << ckpt.path << " (gnn-" << ckpt.id << "): " << what
                 << "; such fused groups get the corrected roofline (said once per estimator)";
  }

  void Decline(const Fresh& f) {
    declined.fetch_add(1, std::memory_order_relaxed);
    WarnOnce(absl::StrCat("predicted ", f.seconds, " s for the fused group ",
                          base::EscapeForDisplay(f.sig.substr(0, 200)),
                          ", not a finite, positive time of at most ", kMaxPredictedSeconds, " s"));
  }

  absl::Status Write(const std::vector<std::pair<std::string, double>>& rows) {
    std::lock_guard<std::mutex> lock(store_mu);
    return store->PutPredictions(ckpt.id, rows);
  }
};

GnnEstimator::GnnEstimator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

GnnEstimator::~GnnEstimator() {
  if (absl::Status s = Flush(); !s.ok()) LOG(WARNING) << "GNN prediction cache: " << s;
}

absl::StatusOr<std::unique_ptr<GnnEstimator>> GnnEstimator::Load(const std::string& checkpoint_path,
                                                                 const ClusterSpec& cluster,
                                                                 ProfileStore* profiles,
                                                                 GnnStore* cache) {
  UseOneThread();
  ASSIGN_OR_RETURN(LoadedCheckpoint c, LoadCheckpoint(checkpoint_path, cluster.device.kind));
  auto impl = std::make_unique<Impl>(std::move(c), cluster, profiles, cache);
  if (cache != nullptr) {
    RETURN_IF_ERROR(cache->KeepOnlyPredictions(cluster.device.kind, impl->ckpt.id).status());
    ASSIGN_OR_RETURN(auto rows, cache->Predictions(impl->ckpt.id));
    impl->cache.reserve(rows.size());
    for (auto& [sig, s] : rows) {
      // The cache file is input too: a row no prediction could have made is
      // dropped (the network is asked again).
      if (Usable(s)) impl->cache.insert_or_assign(std::move(sig), s);
    }
    impl->loaded = static_cast<int64_t>(impl->cache.size());
  }
  return std::unique_ptr<GnnEstimator>(new GnnEstimator(std::move(impl)));
}

std::optional<double> GnnEstimator::Estimate(const graph::Graph& g, std::span<const graph::OpId> ops) {
  const std::vector<graph::OpId> group = SortedGroup(ops);
  if (!Estimable(g, group)) return std::nullopt;
  const GroupKey key = StructuralKey(g, group);
  if (std::optional<double> hit = impl_->ByKey(key)) {
    if (std::isnan(*hit)) return std::nullopt;  // declined
    return hit;
  }
  std::string sig = FusedSignature(g, group);
  if (std::optional<double> hit = impl_->BySignature(sig, key)) return hit;
  const FeatureGraph f = Features(g, group);
  const FeatureGraph* one = &f;
  double s = 0;
  try {
    s = impl_->Run(std::span<const FeatureGraph* const>(&one, 1))[0];
  } catch (const std::exception& e) {
    impl_->WarnOnce(absl::StrCat("the network failed: ", e.what()));
    return std::nullopt;
  }
  std::vector<Impl::Fresh> fresh;
  fresh.push_back({std::move(sig), key, s});
  impl_->Insert(std::move(fresh), /*flush=*/false);
  if (!Usable(s)) return std::nullopt;
  return s;
}

void GnnEstimator::Prefetch(const graph::Graph& g, std::span<const std::vector<graph::OpId>> groups) {
  std::vector<Impl::Fresh> fresh;
  std::vector<FeatureGraph> features;
  {
    absl::flat_hash_set<GroupKey> seen;
    for (const std::vector<graph::OpId>& ops : groups) {
      const std::vector<graph::OpId> group = SortedGroup(ops);
      if (!Estimable(g, group)) continue;
      const GroupKey key = StructuralKey(g, group);
      if (seen.contains(key) || impl_->ByKey(key).has_value()) continue;
      seen.insert(key);
      std::string sig = FusedSignature(g, group);
      if (impl_->BySignature(sig, key).has_value()) continue;
      features.push_back(Features(g, group));
      fresh.push_back({std::move(sig), key, 0});
    }
  }
  if (features.empty()) return;
  std::vector<const FeatureGraph*> ptrs;
  ptrs.reserve(features.size());
  for (const FeatureGraph& f : features) ptrs.push_back(&f);
  std::vector<double> s;
  try {
    s = impl_->Run(ptrs);
  } catch (const std::exception& e) {
    impl_->WarnOnce(absl::StrCat("the network failed: ", e.what()));
    return;
  }
  for (size_t i = 0; i < s.size(); ++i) fresh[i].seconds = s[i];
  impl_->Insert(std::move(fresh), /*flush=*/true);
}

std::string GnnEstimator::Version() const { return absl::StrCat("gnn-", impl_->ckpt.id); }

FeatureGraph GnnEstimator::Features(const graph::Graph& g, std::span<const graph::OpId> ops) {
  const std::vector<MemberTime> times = MemberTimes(impl_->members, g, ops);
  return ExtractFeatures(g, ops, times, impl_->vocab);
}

absl::StatusOr<std::vector<double>> GnnEstimator::EstimateBatch(std::span<const FeatureGraph> graphs) {
  std::vector<const FeatureGraph*> ptrs;
  ptrs.reserve(graphs.size());
  for (const FeatureGraph& f : graphs) ptrs.push_back(&f);
  try {
    return impl_->Run(ptrs);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("GNN estimator: ", e.what()));
  }
}

std::optional<double> GnnEstimator::Cached(const std::string& signature) const {
  std::shared_lock<std::shared_mutex> lock(impl_->mu);
  auto it = impl_->cache.find(signature);
  if (it == impl_->cache.end()) return std::nullopt;
  return it->second;
}

std::optional<double> GnnEstimator::Cached(const GroupKey& key) const {
  std::optional<double> hit = impl_->ByKey(key);
  if (hit.has_value() && std::isnan(*hit)) return std::nullopt;
  return hit;
}

absl::Status GnnEstimator::Flush() {
  if (impl_->store == nullptr) return absl::OkStatus();
  std::vector<std::pair<std::string, double>> rows;
  {
    std::unique_lock<std::shared_mutex> lock(impl_->mu);
    rows.swap(impl_->pending);
  }
  if (rows.empty()) return absl::OkStatus();
  return impl_->Write(rows);
}

int64_t GnnEstimator::forward_passes() const { return impl_->forward_passes.load(); }
int64_t GnnEstimator::predictions_run() const { return impl_->predictions_run.load(); }
int64_t GnnEstimator::declined() const { return impl_->declined.load(); }
int64_t GnnEstimator::cache_size() const {
  std::shared_lock<std::shared_mutex> lock(impl_->mu);
  return static_cast<int64_t>(impl_->cache.size());
}
int64_t GnnEstimator::loaded_from_store() const { return impl_->loaded; }
const std::string& GnnEstimator::checkpoint_id() const { return impl_->ckpt.id; }
const CheckpointInfo& GnnEstimator::info() const { return impl_->ckpt.info; }

}  // namespace braid::costmodel::gnn
