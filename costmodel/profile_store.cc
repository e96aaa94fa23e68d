#include "costmodel/profile_store.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/sqlite.h"
#include "base/status_macros.h"
#include "costmodel/profile_export.h"
#include "glog/logging.h"

namespace braid::costmodel {
namespace {

namespace sql = base::sql;

bool ValidSample(const ProfileSample& s) {
  return std::isfinite(s.median_s) && s.median_s >= 0 && s.median_s <= kMaxProfileSeconds &&
         std::isfinite(s.spread_s) && s.spread_s >= 0 && s.spread_s <= kMaxProfileSeconds &&
         s.repetitions >= 1 && s.repetitions <= kMaxProfileRepetitions;
}

// InvalidArgument, naming `store`, for a key without device kind or op type
// or a sample outside the bounds (ValidSample).
absl::Status CheckPut(const char* store, const ProfileKey& key, const ProfileSample& sample) {
  if (key.device_kind.empty() || key.op_type.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(store, "::Put: device_kind and op_type must be set"));
  }
  if (!ValidSample(sample)) {
    return absl::InvalidArgumentError(absl::StrCat(
        store, "::Put(", key.op_type, "): sample needs median_s and spread_s in [0, ",
        kMaxProfileSeconds, "] s and repetitions in [1, ", kMaxProfileRepetitions, "], got ",
        sample.median_s, ", ", sample.spread_s, ", ", sample.repetitions));
  }
  return absl::OkStatus();
}

bool ValidComm(const CommSample& s) {
  return s.group_size >= 1 && s.group_size <= (1 << 20) && s.bytes >= 0 &&
         s.bytes <= (int64_t{1} << 50) && std::isfinite(s.seconds) && s.seconds >= 0 &&
         s.seconds <= kMaxProfileSeconds;
}

// Numbered schema migrations; append only, never edit a released one.
constexpr sql::Migration kMigrations[] = {
    {1,
     "CREATE TABLE op_profiles("
     "  device_kind TEXT NOT NULL,"
     "  op_type TEXT NOT NULL,"
     "  signature TEXT NOT NULL,"
     "  median_s REAL NOT NULL,"
     "  spread_s REAL NOT NULL,"
     "  repetitions INTEGER NOT NULL,"
     "  updated_at INTEGER NOT NULL,"
     "  PRIMARY KEY(device_kind, op_type, signature));"
     "CREATE TABLE comm_profiles("
     "  device_kind TEXT NOT NULL,"
     "  collective TEXT NOT NULL,"
     "  group_size INTEGER NOT NULL,"
     "  bytes INTEGER NOT NULL,"
     "  seconds REAL NOT NULL,"
     "  updated_at INTEGER NOT NULL,"
     "  PRIMARY KEY(device_kind, collective, group_size, bytes));"
     "CREATE TABLE meta(key TEXT PRIMARY KEY, value INTEGER NOT NULL);"
     "INSERT INTO meta(key, value) VALUES('generation', 0);"},
    // The fused-op estimator's samples and prediction cache (gnn_store.h).
    {2,
     "CREATE TABLE gnn_samples("
     "  device_kind TEXT NOT NULL,"
     "  model TEXT NOT NULL,"
     "  signature TEXT NOT NULL,"
     "  graph_text TEXT NOT NULL,"
     "  num_ops INTEGER NOT NULL,"
     "  created_at INTEGER NOT NULL,"
     "  PRIMARY KEY(device_kind, model, signature));"
     "CREATE TABLE gnn_predictions("
     "  checkpoint_id TEXT NOT NULL,"
     "  signature TEXT NOT NULL,"
     "  seconds REAL NOT NULL,"
     "  PRIMARY KEY(checkpoint_id, signature));"
     "CREATE TABLE gnn_meta("
     "  device_kind TEXT NOT NULL,"
     "  key TEXT NOT NULL,"
     "  value TEXT NOT NULL,"
     "  PRIMARY KEY(device_kind, key));"},
};

int64_t NowUnixSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Formats a double so that parsing it back gives the same value.
std::string ExactDouble(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

std::string QuoteString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  out.push_back('"');
  return out;
}

std::string AttrString(const graph::AttrValue& v) {
  return std::visit(
      [](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, int64_t>) {
          return absl::StrCat(x);
        } else if constexpr (std::is_same_v<T, double>) {
          return ExactDouble(x);
        } else if constexpr (std::is_same_v<T, std::string>) {
          return QuoteString(x);
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          return absl::StrCat("[", absl::StrJoin(x, ","), "]");
        } else {
          std::vector<std::string> parts;
          for (double d : x) parts.push_back(ExactDouble(d));
          return absl::StrCat("[", absl::StrJoin(parts, ","), "]");
        }
      },
      v);
}

std::string TensorListString(const graph::Graph& g, const std::vector<graph::TensorId>& ids) {
  std::vector<std::string> parts;
  parts.reserve(ids.size());
  for (graph::TensorId t : ids) {
    const graph::Tensor& tensor = g.tensor(t);
    parts.push_back(
        absl::StrCat(std::string(graph::DTypeName(tensor.dtype)), graph::ShapeString(tensor.shape)));
  }
  return absl::StrJoin(parts, ",");
}

// One connection guarded by one mutex: SQLite connections are not safe for
// concurrent use, and the store's calls are short.
class SqliteProfileStore final : public ProfileStore {
 public:
  explicit SqliteProfileStore(sql::Database db) : db_(std::move(db)) {}

  absl::Status Put(const ProfileKey& key, const ProfileSample& sample) override {
    RETURN_IF_ERROR(CheckPut("ProfileStore", key, sample));
    std::lock_guard<std::mutex> lock(mu_);
    sql::Transaction txn(db_);
    RETURN_IF_ERROR(txn.Begin());
    ASSIGN_OR_RETURN(
        sql::Statement st,
        db_.Prepare(
            "INSERT OR REPLACE INTO op_profiles(device_kind, op_type, signature, median_s, spread_s,"
            " repetitions, updated_at) VALUES(?, ?, ?, ?, ?, ?, ?)"));
    st.BindText(1, key.device_kind);
    st.BindText(2, key.op_type);
    st.BindText(3, key.signature);
    st.BindDouble(4, sample.median_s);
    st.BindDouble(5, sample.spread_s);
    st.BindInt64(6, sample.repetitions);
    st.BindInt64(7, NowUnixSeconds());
    RETURN_IF_ERROR(st.Run());
    RETURN_IF_ERROR(BumpGenerationLocked());
    return txn.Commit();
  }

  std::optional<ProfileSample> Get(const ProfileKey& key) const override {
    std::optional<ProfileSample> own = GetOwn(key);
    if (own.has_value()) return own;
    return ShippedProfiles::Get().Find(key);
  }

  std::optional<ProfileSample> GetOwn(const ProfileKey& key) const override {
    std::lock_guard<std::mutex> lock(mu_);
    absl::StatusOr<sql::Statement> st = db_.Prepare(
        "SELECT median_s, spread_s, repetitions FROM op_profiles"
        " WHERE device_kind = ? AND op_type = ? AND signature = ?");
    if (!st.ok()) {
      LOG(WARNING) << "ProfileStore::Get: " << st.status();
      return std::nullopt;
    }
    st->BindText(1, key.device_kind);
    st->BindText(2, key.op_type);
    st->BindText(3, key.signature);
    absl::StatusOr<bool> row = st->Step();
    if (!row.ok()) {
      // The interface has no error channel: a read failure is a cache miss,
      // which sends the cost model to its estimate.
      LOG(WARNING) << "ProfileStore::Get: " << row.status();
      return std::nullopt;
    }
    if (!*row) return std::nullopt;
    const int64_t reps = st->ColumnInt64(2);
    ProfileSample sample{.median_s = st->ColumnDouble(0),
                         .spread_s = st->ColumnDouble(1),
                         .repetitions = static_cast<int>(std::clamp<int64_t>(reps, 0, INT32_MAX))};
    // A row written before the store checked its bounds (or by hand) is not
    // a measurement: the cost model falls back to its estimate.
    if (!ValidSample(sample)) {
      LOG(WARNING) << "ProfileStore::Get: ignoring out-of-range profile of " << key.op_type
                   << " (median_s " << sample.median_s << ")";
      return std::nullopt;
    }
    return sample;
  }

  absl::Status PutComm(const std::string& device_kind, const CommSample& s) override {
    if (device_kind.empty() || s.collective.empty() || !ValidComm(s)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ProfileStore::PutComm: need device_kind, collective, group_size in [1, 2^20], bytes "
          "in [0, 2^50], seconds in [0, ", kMaxProfileSeconds, "]; got '", device_kind, "', '",
          s.collective, "', ", s.group_size, ", ", s.bytes, ", ", s.seconds));
    }
    std::lock_guard<std::mutex> lock(mu_);
    sql::Transaction txn(db_);
    RETURN_IF_ERROR(txn.Begin());
    ASSIGN_OR_RETURN(
        sql::Statement st,
        db_.Prepare(
            "INSERT OR REPLACE INTO comm_profiles(device_kind, collective, group_size, bytes, seconds,"
            " updated_at) VALUES(?, ?, ?, ?, ?, ?)"));
    st.BindText(1, device_kind);
    st.BindText(2, s.collective);
    st.BindInt64(3, s.group_size);
    st.BindInt64(4, s.bytes);
    st.BindDouble(5, s.seconds);
    st.BindInt64(6, NowUnixSeconds());
    RETURN_IF_ERROR(st.Run());
    RETURN_IF_ERROR(BumpGenerationLocked());
    return txn.Commit();
  }

  // The store's collectives of `device_kind`; the shipped ones when it has none.
  std::vector<CommSample> GetComm(const std::string& device_kind) const override {
    std::vector<CommSample> own = ListComm(device_kind);
    if (!own.empty()) return own;
    return ShippedProfiles::Get().Comm(device_kind);
  }

  std::vector<CommSample> ListComm(const std::string& device_kind) const override {
    std::vector<CommSample> out;
    std::lock_guard<std::mutex> lock(mu_);
    absl::StatusOr<sql::Statement> st = db_.Prepare(
        "SELECT collective, group_size, bytes, seconds FROM comm_profiles WHERE device_kind = ?"
        " ORDER BY collective, group_size, bytes");
    if (!st.ok()) {
      LOG(WARNING) << "ProfileStore::GetComm: " << st.status();
      return out;
    }
    st->BindText(1, device_kind);
    while (true) {
      absl::StatusOr<bool> row = st->Step();
      if (!row.ok()) {
        LOG(WARNING) << "ProfileStore::GetComm: " << row.status();
        return {};
      }
      if (!*row) break;
      CommSample c{.collective = st->ColumnText(0),
                   .group_size = static_cast<int>(std::clamp<int64_t>(st->ColumnInt64(1), 0, INT32_MAX)),
                   .bytes = st->ColumnInt64(2),
                   .seconds = st->ColumnDouble(3)};
      if (!ValidComm(c)) {
        LOG(WARNING) << "ProfileStore::GetComm: ignoring an out-of-range sample of "
                     << c.collective << " (" << c.bytes << " bytes, " << c.seconds << " s)";
        continue;
      }
      out.push_back(std::move(c));
    }
    return out;
  }

  std::vector<std::pair<ProfileKey, ProfileSample>> ListOps(
      const std::string& device_kind) const override {
    std::vector<std::pair<ProfileKey, ProfileSample>> out;
    std::lock_guard<std::mutex> lock(mu_);
    absl::StatusOr<sql::Statement> st = db_.Prepare(
        "SELECT op_type, signature, median_s, spread_s, repetitions FROM op_profiles"
        " WHERE device_kind = ? ORDER BY op_type, signature");
    if (!st.ok()) {
      LOG(WARNING) << "ProfileStore::ListOps: " << st.status();
      return out;
    }
    st->BindText(1, device_kind);
    while (true) {
      absl::StatusOr<bool> row = st->Step();
      if (!row.ok()) {
        LOG(WARNING) << "ProfileStore::ListOps: " << row.status();
        return {};
      }
      if (!*row) break;
      ProfileSample sample{
          .median_s = st->ColumnDouble(2),
          .spread_s = st->ColumnDouble(3),
          .repetitions = static_cast<int>(std::clamp<int64_t>(st->ColumnInt64(4), 0, INT32_MAX))};
      if (!ValidSample(sample)) continue;
      out.push_back({ProfileKey{device_kind, st->ColumnText(0), st->ColumnText(1)}, sample});
    }
    return out;
  }

  int64_t Generation() const override {
    std::lock_guard<std::mutex> lock(mu_);
    // Read from the file, not a member: another process (a worker) may have
    // written profiles since.
    absl::StatusOr<sql::Statement> st =
        db_.Prepare("SELECT value FROM meta WHERE key = 'generation'");
    if (!st.ok()) {
      LOG(WARNING) << "ProfileStore::Generation: " << st.status();
      return -1;
    }
    absl::StatusOr<bool> row = st->Step();
    if (!row.ok() || !*row) {
      LOG(WARNING) << "ProfileStore::Generation: no generation row";
      return -1;
    }
    return st->ColumnInt64(0);
  }

 private:
  absl::Status BumpGenerationLocked() {
    return db_.Execute("UPDATE meta SET value = value + 1 WHERE key = 'generation'");
  }

  mutable std::mutex mu_;
  mutable sql::Database db_;  // guarded by mu_; const reads still prepare statements
};

}  // namespace

bool ValidProfileSample(const ProfileSample& s) { return ValidSample(s); }
bool ValidCommSample(const CommSample& s) { return ValidComm(s); }

std::string OpSignature(const graph::Graph& g, graph::OpId op) {
  const graph::Op& o = g.op(op);
  std::vector<std::string> attrs;
  attrs.reserve(o.attrs.size());
  // graph::Attrs is an ordered map: iteration is already sorted by name.
  for (const auto& [name, value] : o.attrs) attrs.push_back(absl::StrCat(name, "=", AttrString(value)));
  return absl::StrCat("in(", TensorListString(g, o.inputs), ")out(",
                      TensorListString(g, o.outputs), "){", absl::StrJoin(attrs, ";"), "}");
}

std::string FusedSignature(const graph::Graph& g, std::span<const graph::OpId> ops) {
  std::vector<graph::OpId> members(ops.begin(), ops.end());
  std::sort(members.begin(), members.end());
  members.erase(std::unique(members.begin(), members.end()), members.end());
  auto local = [&](graph::OpId o) -> int {
    auto it = std::lower_bound(members.begin(), members.end(), o);
    return (it != members.end() && *it == o) ? static_cast<int>(it - members.begin()) : -1;
  };
  std::string s = absl::StrCat("fused", members.size());
  for (graph::OpId m : members) {
    const graph::Op& op = g.op(m);
    absl::StrAppend(&s, "|", op.type, ":", OpSignature(g, m), "<");
    for (graph::TensorId t : op.inputs) {
      const graph::Tensor& in = g.tensor(t);
      const int p = in.producer == graph::kNoId ? -1 : local(in.producer);
      if (p < 0) {
        s += "ext,";
        continue;
      }
      const graph::Op& prod = g.op(in.producer);
      const int slot = static_cast<int>(
          std::find(prod.outputs.begin(), prod.outputs.end(), t) - prod.outputs.begin());
      absl::StrAppend(&s, "m", p, ".", slot, ",");
    }
    s += ">";
    for (graph::TensorId t : op.outputs) {
      s += graph::LeavesGroup(g, t, [&](graph::OpId c) { return local(c) >= 0; }) ? "o" : "i";
    }
  }
  return s;
}

absl::Status MigrateProfileDatabase(base::sql::Database& db) {
  return sql::Migrate(db, kMigrations);
}

absl::StatusOr<std::unique_ptr<ProfileStore>> ProfileStore::Open(const std::string& path) {
  ASSIGN_OR_RETURN(sql::Database db, sql::Database::Open(path));
  RETURN_IF_ERROR(MigrateProfileDatabase(db));
  return std::unique_ptr<ProfileStore>(new SqliteProfileStore(std::move(db)));
}

absl::Status OverlayProfileStore::Put(const ProfileKey& key, const ProfileSample& sample) {
  RETURN_IF_ERROR(CheckPut("OverlayProfileStore", key, sample));
  own_[{key.device_kind, key.op_type, key.signature}] = sample;
  ++puts_;
  return absl::OkStatus();
}

std::optional<ProfileSample> OverlayProfileStore::Get(const ProfileKey& key) const {
  auto it = own_.find({key.device_kind, key.op_type, key.signature});
  if (it != own_.end()) return it->second;
  return base_.Get(key);
}

std::optional<ProfileSample> OverlayProfileStore::GetOwn(const ProfileKey& key) const {
  auto it = own_.find({key.device_kind, key.op_type, key.signature});
  if (it != own_.end()) return it->second;
  return base_.GetOwn(key);
}

absl::Status OverlayProfileStore::PutComm(const std::string& device_kind, const CommSample&) {
  return absl::FailedPreconditionError(absl::StrCat(
      "OverlayProfileStore::PutComm(", device_kind,
      "): collective samples belong in the base store, which the overlay only reads"));
}

}  // namespace braid::costmodel
