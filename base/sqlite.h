// Small RAII wrappers over SQLite (libsqlite3), in the style of Chromium's
// sql/database.h and sql/statement.h: a Database owns one connection, a
// Statement owns one prepared statement; neither is copyable, every fallible
// call returns absl::Status, and errors carry SQLite's message and the SQL.
// Migrate() applies numbered schema migrations recorded in `schema_version`.
// Used by the profile store (costmodel/) and the server's store (server/).
//
//   absl::StatusOr<sql::Database> db = sql::Database::Open("/tmp/x.db");
//   RETURN_IF_ERROR(db->Execute("CREATE TABLE t(a INTEGER)"));
//   absl::StatusOr<sql::Statement> ins = db->Prepare("INSERT INTO t VALUES(?)");
//   ins->BindInt64(1, 42);
//   RETURN_IF_ERROR(ins->Run());
//   absl::StatusOr<sql::Statement> sel = db->Prepare("SELECT a FROM t");
//   while (*sel->Step()) int64_t a = sel->ColumnInt64(0);
#ifndef BRAID_BASE_SQLITE_H_
#define BRAID_BASE_SQLITE_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

struct sqlite3;
struct sqlite3_stmt;

namespace braid::base::sql {

struct OpenOptions {
  bool wal = true;              // journal_mode=WAL: readers do not block the writer
  int busy_timeout_ms = 5000;   // wait this long for another connection's lock
  bool create = true;           // create the file when it does not exist
};

class Statement;

class Database {
 public:
  // Opens (or creates) `path`; ":memory:" opens a private in-memory database
  // (which cannot be in WAL mode: it stays in "memory" journal mode).
  static absl::StatusOr<Database> Open(const std::string& path, const OpenOptions& options = {});

  Database(Database&& other) noexcept;
  Database& operator=(Database&& other) noexcept;
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;
  ~Database();

  // Runs one or more ';'-separated statements that return no rows needed.
  absl::Status Execute(std::string_view sql);
  absl::StatusOr<Statement> Prepare(std::string_view sql);

  // "wal", "delete", "memory", ...
  absl::StatusOr<std::string> JournalMode();
  int64_t LastInsertRowId() const;
  int64_t Changes() const;  // rows changed by the last statement

  const std::string& path() const { return path_; }
  sqlite3* handle() const { return db_; }

 private:
  Database(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  sqlite3* db_ = nullptr;
  std::string path_;
};

// A prepared statement. Bind indices start at 1 (SQLite's convention), column
// indices at 0. Bind* errors are reported by the next Step()/Run().
class Statement {
 public:
  Statement(Statement&& other) noexcept;
  Statement& operator=(Statement&& other) noexcept;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  ~Statement();

  void BindInt64(int index, int64_t value);
  void BindDouble(int index, double value);
  void BindText(int index, std::string_view value);
  void BindNull(int index);

  // Advances: true when a row is available, false when done.
  absl::StatusOr<bool> Step();
  // Steps until done (for INSERT/UPDATE/DDL); a returned row is an error.
  absl::Status Run();
  // Makes the statement runnable again and clears its bindings.
  void Reset();

  int64_t ColumnInt64(int col) const;
  double ColumnDouble(int col) const;
  std::string ColumnText(int col) const;
  bool ColumnIsNull(int col) const;

 private:
  friend class Database;
  Statement(sqlite3_stmt* stmt, sqlite3* db) : stmt_(stmt), db_(db) {}
  void BindResult(int rc);
  sqlite3_stmt* stmt_ = nullptr;
  sqlite3* db_ = nullptr;
  int bind_error_ = 0;  // first failed bind's SQLite code, 0 when none
};

// BEGIN IMMEDIATE ... COMMIT; rolls back when destroyed uncommitted, so an
// early `return status;` undoes a half-written change.
class Transaction {
 public:
  explicit Transaction(Database& db) : db_(db) {}
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  ~Transaction();

  absl::Status Begin();
  absl::Status Commit();

 private:
  Database& db_;
  bool open_ = false;
};

// Migration i (1-based position in the list) brings the schema from version
// i-1 to i. Each runs in its own transaction together with the version bump.
struct Migration {
  int version;
  std::string_view sql;
};

// Creates `schema_version(version)` when missing and applies the migrations
// newer than the recorded version, in order. Fails with FailedPrecondition when
// the file's version is newer than the newest migration (a newer braid wrote
// it), and with InvalidArgument when versions are not 1, 2, 3, ... in order.
absl::Status Migrate(Database& db, std::span<const Migration> migrations);

// The recorded schema version; 0 for a database without `schema_version`.
absl::StatusOr<int> SchemaVersion(Database& db);

}  // namespace braid::base::sql

#endif  // BRAID_BASE_SQLITE_H_
