// The profile store: measured op times in SQLite, keyed by device kind, op
// type and the op's signature (input/output shapes, dtype, attributes).
// Workers write it; the cost model reads it before falling back to estimates.
//
//   auto store = ProfileStore::Open("/var/lib/braid/braid.db");
//   (*store)->Put({"cpu-1t", "Conv", sig}, {.median_s = 1.2e-3, ...});
//   std::optional<ProfileSample> s = (*store)->Get({"cpu-1t", "Conv", sig});
#ifndef BRAID_COSTMODEL_PROFILE_STORE_H_
#define BRAID_COSTMODEL_PROFILE_STORE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"
#include <span>

#include "graph/graph.h"

namespace braid::base::sql {
class Database;
}  // namespace braid::base::sql

namespace braid::costmodel {

struct ProfileKey {
  // "cpu-1t:x86_64-avx512:AMD EPYC" (LocalCpuDeviceKind()),
  // "cuda:NVIDIA H100 80GB HBM3", ...
  std::string device_kind;
  std::string op_type;      // graph op type
  std::string signature;    // OpSignature()
};

// Bounds of a stored measurement: one op or collective timed at more than an
// hour, or more repetitions than a profiler runs, is no measurement braid
// trusts. Put/PutComm refuse samples outside them (and non-finite ones), and
// Get/GetComm skip such rows written by older versions.
inline constexpr double kMaxProfileSeconds = 3600;
inline constexpr int kMaxProfileRepetitions = 10'000'000;

struct ProfileSample {
  // The op's time as the simulator uses it: the median of an op timed alone
  // (worker/cpu_profiler.h), or the mean over an op's samples inside training
  // iterations (worker/graph_profiler.h): an iteration is a sum of op times,
  // and a sum follows the means, outliers included.
  double median_s = 0;
  double spread_s = 0;  // interquartile range
  int repetitions = 0;
};

// Where the in-graph profiler stores the measured cost of packing gradients
// into a bucket buffer: op type kBucketPackOp, signature kPerByteSignature,
// median_s = seconds per byte (worker/graph_profiler.h).
inline constexpr char kBucketPackOp[] = "BucketPack";
inline constexpr char kPerByteSignature[] = "per_byte";
// Where `braid run --profile` stores the runtime's own time per compute node
// of a program (braid-rank: dispatch, value bookkeeping, frees, the step's
// data loads): the step time no op's clock holds, over the compute nodes.
// Op type kRuntimeNodeOp, signature kPerNodeSignature, median_s = seconds.
inline constexpr char kRuntimeNodeOp[] = "RuntimeNode";
inline constexpr char kPerNodeSignature[] = "per_node";

// Canonical signature of an op: input and output shapes and dtypes plus its
// attributes, so equal ops in different graphs share a profile.
std::string OpSignature(const graph::Graph& g, graph::OpId op);

// Profiles of fused kernels are stored under op type kFusedOp and the
// canonical signature of the fused subgraph (FusedSignature).
inline constexpr char kFusedOp[] = "Fused";

// Canonical signature of a fused group (members and duplicated copies, in
// any order): each member's type and OpSignature in op-id order (the graph's
// topological order), each input as a member-local reference or "ext", and
// which outputs leave the kernel. Equal subgraphs in different places of a
// graph, or in different graphs, share it: the eight identical layers of an
// MLP share one fused profile.
std::string FusedSignature(const graph::Graph& g, std::span<const graph::OpId> ops);

// Collective measurements for the communication-model fit.
struct CommSample {
  std::string collective;  // CollectiveName()
  int group_size = 0;
  int64_t bytes = 0;
  double seconds = 0;
};

// Whether a sample / collective sample is within the bounds above (finite,
// times in [0, kMaxProfileSeconds], repetitions in [1, kMaxProfileRepetitions];
// group sizes in [1, 2^20], bytes in [0, 2^50]).
bool ValidProfileSample(const ProfileSample& s);
bool ValidCommSample(const CommSample& s);

// Creates or migrates the schema of a profile store file: op and comm
// profiles, and the fused-op estimator's tables (gnn_store.h).
absl::Status MigrateProfileDatabase(base::sql::Database& db);

class ProfileStore {
 public:
  // Opens or creates the SQLite file (WAL mode) and migrates its schema.
  static absl::StatusOr<std::unique_ptr<ProfileStore>> Open(const std::string& path);
  virtual ~ProfileStore() = default;

  virtual absl::Status Put(const ProfileKey& key, const ProfileSample& sample) = 0;
  virtual std::optional<ProfileSample> Get(const ProfileKey& key) const = 0;
  // The store's own row for `key`, without the shipped measurements Get
  // falls back to (profile_export.h): what a profiler still has to measure.
  virtual std::optional<ProfileSample> GetOwn(const ProfileKey& key) const { return Get(key); }
  virtual absl::Status PutComm(const std::string& device_kind, const CommSample& s) = 0;
  virtual std::vector<CommSample> GetComm(const std::string& device_kind) const = 0;
  // Increases whenever a profile is written; part of a plan's generation.
  virtual int64_t Generation() const = 0;
  // Every op profile the store itself holds for `device_kind` (exports,
  // profile_export.h), ordered by op type and signature; none by default.
  virtual std::vector<std::pair<ProfileKey, ProfileSample>> ListOps(
      const std::string& device_kind) const {
    (void)device_kind;
    return {};
  }
  // The collectives the store itself holds for `device_kind` (without the
  // shipped ones GetComm may fall back to).
  virtual std::vector<CommSample> ListComm(const std::string& device_kind) const {
    return GetComm(device_kind);
  }
};

// A store that answers op profiles from its own samples first and from
// `base` otherwise, and collectives from `base`: to price a plan with some
// ops' costs from another source (op times clocked inside training steps)
// while the base store stays as it is. Put writes
// only to the overlay (in memory); PutComm is refused. `base` must outlive it.
class OverlayProfileStore final : public ProfileStore {
 public:
  explicit OverlayProfileStore(const ProfileStore& base) : base_(base) {}
  absl::Status Put(const ProfileKey& key, const ProfileSample& sample) override;
  std::optional<ProfileSample> Get(const ProfileKey& key) const override;
  std::optional<ProfileSample> GetOwn(const ProfileKey& key) const override;
  absl::Status PutComm(const std::string& device_kind, const CommSample& s) override;
  std::vector<CommSample> GetComm(const std::string& device_kind) const override {
    return base_.GetComm(device_kind);
  }
  int64_t Generation() const override { return base_.Generation() + puts_; }

 private:
  const ProfileStore& base_;
  std::map<std::tuple<std::string, std::string, std::string>, ProfileSample> own_;
  int64_t puts_ = 0;
};

}  // namespace braid::costmodel

#endif  // BRAID_COSTMODEL_PROFILE_STORE_H_
