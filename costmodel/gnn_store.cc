#include "costmodel/gnn_store.h"

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <cmath>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/sqlite.h"
#include "base/status_macros.h"
#include "graph/text_format.h"

namespace braid::costmodel {
namespace {

namespace sql = base::sql;

int64_t NowSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// One connection behind one mutex, like the profile store.
class SqliteGnnStore final : public GnnStore {
 public:
  explicit SqliteGnnStore(sql::Database db) : db_(std::move(db)) {}

  absl::StatusOr<bool> PutSample(const GnnSampleRecord& s) override {
    if (s.device_kind.empty() || s.model.empty() || s.signature.empty() || s.graph_text.empty() ||
        s.num_ops < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("GnnStore::PutSample: device kind, model, signature and graph must be set "
                       "and the group must have ops; got model '",
                       s.model, "' with ", s.num_ops, " ops"));
    }
    std::lock_guard<std::mutex> lock(mu_);
    ASSIGN_OR_RETURN(sql::Statement st,
                     db_.Prepare("INSERT OR IGNORE INTO gnn_samples(device_kind, model, signature,"
                                 " graph_text, num_ops, created_at) VALUES(?, ?, ?, ?, ?, ?)"));
    st.BindText(1, s.device_kind);
    st.BindText(2, s.model);
    st.BindText(3, s.signature);
    st.BindText(4, s.graph_text);
    st.BindInt64(5, s.num_ops);
    st.BindInt64(6, NowSeconds());
    RETURN_IF_ERROR(st.Run());
    return db_.Changes() > 0;
  }

  absl::StatusOr<std::vector<GnnSampleRecord>> Samples(
      const std::string& device_kind) const override {
    std::lock_guard<std::mutex> lock(mu_);
    ASSIGN_OR_RETURN(sql::Statement st,
                     db_.Prepare("SELECT model, signature, graph_text, num_ops FROM gnn_samples"
                                 " WHERE device_kind = ? ORDER BY rowid"));
    st.BindText(1, device_kind);
    std::vector<GnnSampleRecord> out;
    while (true) {
      ASSIGN_OR_RETURN(bool row, st.Step());
      if (!row) break;
      out.push_back({device_kind, st.ColumnText(0), st.ColumnText(1), st.ColumnText(2),
                     static_cast<int>(st.ColumnInt64(3))});
    }
    return out;
  }

  absl::StatusOr<int64_t> CountSamples(const std::string& device_kind,
                                       const std::string& model) const override {
    std::lock_guard<std::mutex> lock(mu_);
    ASSIGN_OR_RETURN(
        sql::Statement st,
        db_.Prepare("SELECT COUNT(*) FROM gnn_samples WHERE device_kind = ? AND model = ?"));
    st.BindText(1, device_kind);
    st.BindText(2, model);
    ASSIGN_OR_RETURN(bool row, st.Step());
    return row ? st.ColumnInt64(0) : 0;
  }

  absl::Status PutPredictions(
      const std::string& checkpoint_id,
      const std::vector<std::pair<std::string, double>>& signature_seconds) override {
    if (checkpoint_id.empty()) {
      return absl::InvalidArgumentError("GnnStore::PutPredictions: empty checkpoint id");
    }
    std::lock_guard<std::mutex> lock(mu_);
    sql::Transaction txn(db_);
    RETURN_IF_ERROR(txn.Begin());
    ASSIGN_OR_RETURN(sql::Statement st,
                     db_.Prepare("INSERT OR REPLACE INTO gnn_predictions(checkpoint_id, signature,"
                                 " seconds) VALUES(?, ?, ?)"));
    for (const auto& [sig, seconds] : signature_seconds) {
      if (!std::isfinite(seconds) || seconds < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "GnnStore::PutPredictions: prediction ", seconds, " s is not a finite time"));
      }
      st.Reset();
      st.BindText(1, checkpoint_id);
      st.BindText(2, sig);
      st.BindDouble(3, seconds);
      RETURN_IF_ERROR(st.Run());
    }
    return txn.Commit();
  }

  absl::StatusOr<std::vector<std::pair<std::string, double>>> Predictions(
      const std::string& checkpoint_id) const override {
    std::lock_guard<std::mutex> lock(mu_);
    ASSIGN_OR_RETURN(
        sql::Statement st,
        db_.Prepare("SELECT signature, seconds FROM gnn_predictions WHERE checkpoint_id = ?"));
    st.BindText(1, checkpoint_id);
    std::vector<std::pair<std::string, double>> out;
    while (true) {
      ASSIGN_OR_RETURN(bool row, st.Step());
      if (!row) break;
      out.emplace_back(st.ColumnText(0), st.ColumnDouble(1));
    }
    return out;
  }

  absl::StatusOr<int64_t> KeepOnlyPredictions(const std::string& device_kind,
                                               const std::string& checkpoint_id) override {
    std::lock_guard<std::mutex> lock(mu_);
    sql::Transaction txn(db_);
    RETURN_IF_ERROR(txn.Begin());
    ASSIGN_OR_RETURN(
        sql::Statement get,
        db_.Prepare("SELECT value FROM gnn_meta WHERE device_kind = ? AND key = 'checkpoint_id'"));
    get.BindText(1, device_kind);
    ASSIGN_OR_RETURN(bool row, get.Step());
    int64_t dropped = 0;
    if (row && get.ColumnText(0) != checkpoint_id) {
      ASSIGN_OR_RETURN(sql::Statement del,
                       db_.Prepare("DELETE FROM gnn_predictions WHERE checkpoint_id = ?"));
      del.BindText(1, get.ColumnText(0));
      RETURN_IF_ERROR(del.Run());
      dropped = db_.Changes();
    }
    ASSIGN_OR_RETURN(sql::Statement put,
                     db_.Prepare("INSERT OR REPLACE INTO gnn_meta(device_kind, key, value)"
                                 " VALUES(?, 'checkpoint_id', ?)"));
    put.BindText(1, device_kind);
    put.BindText(2, checkpoint_id);
    RETURN_IF_ERROR(put.Run());
    RETURN_IF_ERROR(txn.Commit());
    return dropped;
  }

  absl::Status PutMeta(const std::string& device_kind, const std::string& key,
                       const std::string& value) override {
    std::lock_guard<std::mutex> lock(mu_);
    ASSIGN_OR_RETURN(sql::Statement st,
                     db_.Prepare("INSERT OR REPLACE INTO gnn_meta(device_kind, key, value)"
                                 " VALUES(?, ?, ?)"));
    st.BindText(1, device_kind);
    st.BindText(2, key);
    st.BindText(3, value);
    return st.Run();
  }

  absl::StatusOr<std::optional<std::string>> GetMeta(const std::string& device_kind,
                                                     const std::string& key) const override {
    std::lock_guard<std::mutex> lock(mu_);
    ASSIGN_OR_RETURN(
        sql::Statement st,
        db_.Prepare("SELECT value FROM gnn_meta WHERE device_kind = ? AND key = ?"));
    st.BindText(1, device_kind);
    st.BindText(2, key);
    ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) return std::optional<std::string>();
    return std::optional<std::string>(st.ColumnText(0));
  }

 private:
  mutable std::mutex mu_;
  mutable sql::Database db_;
};

}  // namespace

std::string GnnCheckpointFileName(const std::string& device_kind) {
  std::string out;
  bool dash = false;
  for (char c : device_kind) {
    const char l = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if ((l >= 'a' && l <= 'z') || (l >= '0' && l <= '9')) {
      out += l;
      dash = false;
    } else if (!dash && !out.empty()) {
      out += '-';
      dash = true;
    }
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return (out.empty() ? std::string("unknown") : out) + ".pt";
}

std::optional<std::string> GnnCheckpointPathFor(const std::string& device_kind) {
  namespace fs = std::filesystem;
  if (const char* env = std::getenv("BRAID_GNN_CHECKPOINT"); env != nullptr && *env != '\0') {
    if (std::string(env) == "none") return std::nullopt;
    return std::string(env);
  }
  const std::string name = GnnCheckpointFileName(device_kind);
  std::vector<fs::path> dirs;
  if (const char* env = std::getenv("BRAID_GNN_DIR"); env != nullptr && *env != '\0') {
    dirs.emplace_back(env);
  }
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) dirs.push_back(exe.parent_path() / ".." / "share" / "braid" / "gnn");
#ifdef BRAID_GNN_SOURCE_DIR
  dirs.emplace_back(BRAID_GNN_SOURCE_DIR);
#endif
  for (const fs::path& d : dirs) {
    const fs::path p = d / name;
    if (fs::is_regular_file(p, ec)) return p.string();
  }
  return std::nullopt;
}

absl::StatusOr<std::unique_ptr<GnnStore>> GnnStore::Open(const std::string& path) {
  ASSIGN_OR_RETURN(sql::Database db, sql::Database::Open(path));
  RETURN_IF_ERROR(MigrateProfileDatabase(db));
  return std::unique_ptr<GnnStore>(new SqliteGnnStore(std::move(db)));
}

absl::StatusOr<std::vector<GnnExample>> LoadGnnExamples(const GnnStore& samples,
                                                        const ProfileStore& profiles,
                                                        const std::string& device_kind,
                                                        int* missing_fused) {
  ASSIGN_OR_RETURN(std::vector<GnnSampleRecord> records, samples.Samples(device_kind));
  std::vector<GnnExample> out;
  int missing = 0;
  for (GnnSampleRecord& r : records) {
    std::optional<ProfileSample> fused = profiles.Get({device_kind, kFusedOp, r.signature});
    if (!fused.has_value()) {
      ++missing;
      continue;
    }
    absl::StatusOr<graph::Graph> g = graph::ParseText(r.graph_text);
    if (!g.ok()) {
      return absl::DataLossError(absl::StrCat("gnn sample of ", r.model,
                                              " does not parse: ", g.status().message()));
    }
    GnnExample e{std::move(r.model), std::move(r.signature), *std::move(g), *fused, {}};
    e.members.reserve(e.graph.num_ops());
    for (graph::OpId op = 0; op < e.graph.num_ops(); ++op) {
      e.members.push_back(
          profiles.Get({device_kind, e.graph.op(op).type, OpSignature(e.graph, op)}));
    }
    out.push_back(std::move(e));
  }
  if (missing_fused != nullptr) *missing_fused = missing;
  return out;
}

}  // namespace braid::costmodel
