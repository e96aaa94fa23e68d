#include "base/sqlite.h"

#include <sqlite3.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "glog/logging.h"

namespace braid::base::sql {
namespace {

absl::Status SqliteError(sqlite3* db, int rc, std::string_view what) {
  const char* msg = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  std::string text = absl::StrCat("sqlite: ", std::string(what), ": ", msg, " (code ", rc, ")");
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return absl::UnavailableError(text);
    case SQLITE_CANTOPEN:
    case SQLITE_NOTFOUND:
      return absl::NotFoundError(text);
    case SQLITE_FULL:
    case SQLITE_NOMEM:
      return absl::ResourceExhaustedError(text);
    case SQLITE_CONSTRAINT:
    case SQLITE_MISMATCH:
    case SQLITE_RANGE:
      return absl::InvalidArgumentError(text);
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return absl::DataLossError(text);
    default:
      return absl::InternalError(text);
  }
}

}  // namespace

absl::StatusOr<Database> Database::Open(const std::string& path, const OpenOptions& options) {
  sqlite3* db = nullptr;
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX;
  if (options.create) flags |= SQLITE_OPEN_CREATE;
  int rc = sqlite3_open_v2(path.c_str(), &db, flags, nullptr);
  if (rc != SQLITE_OK) {
    absl::Status s = SqliteError(db, rc, absl::StrCat("open ", path));
    sqlite3_close_v2(db);  // sqlite3_open_v2 allocates a handle even on failure
    return s;
  }
  sqlite3_extended_result_codes(db, 1);
  Database database(db, path);
  if (options.busy_timeout_ms > 0) {
    rc = sqlite3_busy_timeout(db, options.busy_timeout_ms);
    if (rc != SQLITE_OK) return SqliteError(db, rc, "busy_timeout");
  }
  RETURN_IF_ERROR(database.Execute("PRAGMA foreign_keys=ON"));
  if (options.wal) {
    ASSIGN_OR_RETURN(Statement st, database.Prepare("PRAGMA journal_mode=WAL"));
    RETURN_IF_ERROR(st.Step());  // returns the resulting mode as a row
    // synchronous=NORMAL is the documented safe pairing with WAL (durable
    // across application crashes; a power loss may drop the last commits).
    RETURN_IF_ERROR(database.Execute("PRAGMA synchronous=NORMAL"));
  }
  return database;
}

Database::Database(Database&& other) noexcept
    : db_(std::exchange(other.db_, nullptr)), path_(std::move(other.path_)) {}

Database& Database::operator=(Database&& other) noexcept {
  if (this != &other) {
    if (db_ != nullptr) sqlite3_close_v2(db_);
    db_ = std::exchange(other.db_, nullptr);
    path_ = std::move(other.path_);
  }
  return *this;
}

Database::~Database() {
  if (db_ != nullptr) sqlite3_close_v2(db_);
}

absl::Status Database::Execute(std::string_view sql) {
  CHECK(db_ != nullptr) << "use of a moved-from sql::Database";
  char* err = nullptr;
  std::string text(sql);
  int rc = sqlite3_exec(db_, text.c_str(), nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    absl::Status s = SqliteError(db_, rc, absl::StrCat("exec \"", text, "\""));
    sqlite3_free(err);
    return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<Statement> Database::Prepare(std::string_view sql) {
  CHECK(db_ != nullptr) << "use of a moved-from sql::Database";
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &stmt, nullptr);
  if (rc != SQLITE_OK) {
    sqlite3_finalize(stmt);
    return SqliteError(db_, rc, absl::StrCat("prepare \"", std::string(sql), "\""));
  }
  if (stmt == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("sqlite: prepare \"", std::string(sql), "\": no statement"));
  }
  return Statement(stmt, db_);
}

absl::StatusOr<std::string> Database::JournalMode() {
  ASSIGN_OR_RETURN(Statement st, Prepare("PRAGMA journal_mode"));
  ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return absl::InternalError("sqlite: PRAGMA journal_mode returned no row");
  return st.ColumnText(0);
}

int64_t Database::LastInsertRowId() const { return sqlite3_last_insert_rowid(db_); }
int64_t Database::Changes() const { return sqlite3_changes(db_); }

Statement::Statement(Statement&& other) noexcept
    : stmt_(std::exchange(other.stmt_, nullptr)),
      db_(std::exchange(other.db_, nullptr)),
      bind_error_(other.bind_error_) {}

Statement& Statement::operator=(Statement&& other) noexcept {
  if (this != &other) {
    if (stmt_ != nullptr) sqlite3_finalize(stmt_);
    stmt_ = std::exchange(other.stmt_, nullptr);
    db_ = std::exchange(other.db_, nullptr);
    bind_error_ = other.bind_error_;
  }
  return *this;
}

Statement::~Statement() {
  if (stmt_ != nullptr) sqlite3_finalize(stmt_);
}

void Statement::BindResult(int rc) {
  if (rc != SQLITE_OK && bind_error_ == 0) bind_error_ = rc;
}

void Statement::BindInt64(int index, int64_t value) {
  BindResult(sqlite3_bind_int64(stmt_, index, value));
}
void Statement::BindDouble(int index, double value) {
  BindResult(sqlite3_bind_double(stmt_, index, value));
}
void Statement::BindText(int index, std::string_view value) {
  BindResult(sqlite3_bind_text(stmt_, index, value.data(), static_cast<int>(value.size()),
                               SQLITE_TRANSIENT));
}
void Statement::BindNull(int index) { BindResult(sqlite3_bind_null(stmt_, index)); }

absl::StatusOr<bool> Statement::Step() {
  CHECK(stmt_ != nullptr) << "use of a moved-from sql::Statement";
  if (bind_error_ != 0) {
    return SqliteError(db_, bind_error_, absl::StrCat("bind in \"", sqlite3_sql(stmt_), "\""));
  }
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return SqliteError(db_, rc, absl::StrCat("step \"", sqlite3_sql(stmt_), "\""));
}

absl::Status Statement::Run() {
  ASSIGN_OR_RETURN(bool row, Step());
  if (row) {
    return absl::InternalError(
        absl::StrCat("sqlite: \"", sqlite3_sql(stmt_), "\" returned a row; use Step()"));
  }
  return absl::OkStatus();
}

void Statement::Reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
  bind_error_ = 0;
}

int64_t Statement::ColumnInt64(int col) const { return sqlite3_column_int64(stmt_, col); }
double Statement::ColumnDouble(int col) const { return sqlite3_column_double(stmt_, col); }
std::string Statement::ColumnText(int col) const {
  const unsigned char* text = sqlite3_column_text(stmt_, col);
  if (text == nullptr) return "";
  return std::string(reinterpret_cast<const char*>(text), sqlite3_column_bytes(stmt_, col));
}
bool Statement::ColumnIsNull(int col) const {
  return sqlite3_column_type(stmt_, col) == SQLITE_NULL;
}

Transaction::~Transaction() {
  if (open_) {
    absl::Status s = db_.Execute("ROLLBACK");
    if (!s.ok()) LOG(WARNING) << "sqlite: rollback failed: " << s;
  }
}

absl::Status Transaction::Begin() {
  CHECK(!open_) << "Transaction::Begin called twice";
  // IMMEDIATE takes the write lock now, so a busy database surfaces here
  // (after the busy timeout) instead of as a deadlock on the first write.
  RETURN_IF_ERROR(db_.Execute("BEGIN IMMEDIATE"));
  open_ = true;
  return absl::OkStatus();
}

absl::Status Transaction::Commit() {
  CHECK(open_) << "Transaction::Commit without Begin";
  RETURN_IF_ERROR(db_.Execute("COMMIT"));
  open_ = false;
  return absl::OkStatus();
}

absl::StatusOr<int> SchemaVersion(Database& db) {
  ASSIGN_OR_RETURN(
      Statement exists,
      db.Prepare(
          "SELECT COUNT(*) FROM sqlite_master WHERE type='table' AND name='schema_version'"));
  ASSIGN_OR_RETURN(bool row, exists.Step());
  if (!row || exists.ColumnInt64(0) == 0) return 0;
  ASSIGN_OR_RETURN(Statement st, db.Prepare("SELECT MAX(version) FROM schema_version"));
  ASSIGN_OR_RETURN(row, st.Step());
  if (!row || st.ColumnIsNull(0)) return 0;
  return static_cast<int>(st.ColumnInt64(0));
}

absl::Status Migrate(Database& db, std::span<const Migration> migrations) {
  for (size_t i = 0; i < migrations.size(); ++i) {
    if (migrations[i].version != static_cast<int>(i) + 1) {
      return absl::InvalidArgumentError(absl::StrCat("sqlite migrations: entry ", i, " has version ",
                                                     migrations[i].version, ", want ", i + 1));
    }
  }
  // The bookkeeping table and each migration run under the write lock so two
  // processes opening a fresh file concurrently do not both migrate it.
  Transaction txn(db);
  RETURN_IF_ERROR(txn.Begin());
  RETURN_IF_ERROR(
      db.Execute("CREATE TABLE IF NOT EXISTS schema_version("
                 "version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)"));
  ASSIGN_OR_RETURN(int current, SchemaVersion(db));
  const int newest = static_cast<int>(migrations.size());
  if (current > newest) {
    return absl::FailedPreconditionError(absl::StrCat(
        "sqlite: ", db.path(), " has schema version ", current,
        " but this build knows versions up to ", newest, " (written by a newer braid?)"));
  }
  for (int v = current + 1; v <= newest; ++v) {
    if (auto s = db.Execute(migrations[v - 1].sql); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("migration ", v, ": ", s.message()));
    }
    ASSIGN_OR_RETURN(
        Statement bump,
        db.Prepare(
            "INSERT INTO schema_version(version, applied_at) VALUES(?, strftime('%s','now'))"));
    bump.BindInt64(1, v);
    RETURN_IF_ERROR(bump.Run());
  }
  return txn.Commit();
}

}  // namespace braid::base::sql
