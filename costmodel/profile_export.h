// Profile-store export files: one device kind's measured op (and collective)
// times as a small JSON document, so that measurements taken on a machine
// braid does not run on (a GPU machine lent for minutes, through the GPU kit)
// travel to where plans are made, and so that the repository can ship them.
//
//   braid profile export --db h100.db --device-kind "cuda:NVIDIA H100 80GB HBM3" --out h100.json
//   braid profile import h100.json --db ~/.braid/braid.db
//
// Format "braid-profiles/1":
//   {"format": "braid-profiles/1", "device_kind": "cuda:NVIDIA H100 80GB HBM3",
//    "source": "free text: the machine, the date, the command",
//    "ops":  [[op_type, signature, median_s, spread_s, repetitions], ...],
//    "comm": [[collective, group_size, bytes, seconds], ...]}
//
// Shipped profiles: every *.json export under costmodel/profiles (or the
// directory $BRAID_PROFILES names; "none" turns them off) answers the
// profile store's lookups that the store itself has no row for: what the
// store measured wins, the shipped measurement comes next, estimates last.
#ifndef BRAID_COSTMODEL_PROFILE_EXPORT_H_
#define BRAID_COSTMODEL_PROFILE_EXPORT_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "costmodel/profile_store.h"
#include "nlohmann/json.hpp"

namespace braid::costmodel {

inline constexpr char kProfileExportFormat[] = "braid-profiles/1";

// Bounds of an export file: the document, rows, and each text field.
inline constexpr size_t kMaxProfileExportBytes = size_t{64} << 20;
inline constexpr size_t kMaxProfileExportRows = 1'000'000;
inline constexpr size_t kMaxProfileTextBytes = 64 << 10;

struct ProfileExport {
  std::string device_kind;
  std::string source;
  std::vector<std::pair<ProfileKey, ProfileSample>> ops;  // key.device_kind == device_kind
  std::vector<CommSample> comm;
};

// Every op and collective profile of `device_kind` in `store`. NotFound when
// it holds none.
absl::StatusOr<ProfileExport> CollectProfiles(const ProfileStore& store,
                                              const std::string& device_kind);

nlohmann::json ProfileExportToJson(const ProfileExport& e);
// The same document with one row per line (small diffs when committed).
std::string ProfileExportText(const ProfileExport& e);

// InvalidArgument naming the first bad field or row (format, kinds, texts
// over their bounds, non-finite or out-of-range times, too many rows);
// nothing is partially accepted.
absl::StatusOr<ProfileExport> ProfileExportFromJson(const nlohmann::json& j);
absl::StatusOr<ProfileExport> ReadProfileExportFile(const std::string& path);

struct ImportReport {
  int ops_written = 0;
  int ops_kept = 0;  // already in the store, left as they were (without replace)
  int comm_written = 0;
  int comm_kept = 0;
};

// Writes the export's rows into `store`. Rows whose key the store already
// has are kept as they are unless `replace`.
absl::StatusOr<ImportReport> ImportProfiles(const ProfileExport& e, ProfileStore& store,
                                            bool replace);

// The shipped profiles (see the top of this file), loaded once per process.
// A file that does not parse is skipped with a warning.
class ShippedProfiles {
 public:
  static const ShippedProfiles& Get();
  // Loads `dir`'s *.json exports (tests and `braid profile shipped`).
  static ShippedProfiles Load(const std::string& dir, std::vector<std::string>* warnings);

  std::optional<ProfileSample> Find(const ProfileKey& key) const;
  std::vector<CommSample> Comm(const std::string& device_kind) const;
  const std::vector<std::string>& files() const { return files_; }
  size_t size() const { return ops_.size(); }

 private:
  std::map<std::tuple<std::string, std::string, std::string>, ProfileSample> ops_;
  std::map<std::string, std::vector<CommSample>> comm_;
  std::vector<std::string> files_;
};

}  // namespace braid::costmodel

#endif  // BRAID_COSTMODEL_PROFILE_EXPORT_H_
