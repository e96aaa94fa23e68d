#include "costmodel/profile_export.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "base/bounded_json.h"
#include "base/status_macros.h"
#include "glog/logging.h"

namespace braid::costmodel {
namespace {

absl::Status Bad(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("profile export: ", what));
}

absl::StatusOr<std::string> Text(const nlohmann::json& v, const std::string& what, bool allow_empty) {
  if (!v.is_string()) return Bad(absl::StrCat(what, " is not a string"));
  std::string s = v.get<std::string>();
  if (s.size() > kMaxProfileTextBytes) {
    return Bad(absl::StrCat(what, " is over ", kMaxProfileTextBytes, " bytes"));
  }
  if (!allow_empty && s.empty()) return Bad(absl::StrCat(what, " is empty"));
  return s;
}

absl::StatusOr<double> Number(const nlohmann::json& v, const std::string& what) {
  if (!v.is_number()) return Bad(absl::StrCat(what, " is not a number"));
  return v.get<double>();
}

absl::StatusOr<int64_t> Integer(const nlohmann::json& v, const std::string& what) {
  if (!v.is_number_integer()) return Bad(absl::StrCat(what, " is not an integer"));
  return v.get<int64_t>();
}

}  // namespace

absl::StatusOr<ProfileExport> CollectProfiles(const ProfileStore& store,
                                              const std::string& device_kind) {
  ProfileExport e;
  e.device_kind = device_kind;
  e.ops = store.ListOps(device_kind);
  e.comm = store.ListComm(device_kind);
  if (e.ops.empty() && e.comm.empty()) {
    return absl::NotFoundError(
        absl::StrCat("the profile store holds no profile for device kind '", device_kind, "'"));
  }
  return e;
}

nlohmann::json ProfileExportToJson(const ProfileExport& e) {
  nlohmann::json ops = nlohmann::json::array();
  for (const auto& [key, s] : e.ops) {
    ops.push_back({key.op_type, key.signature, s.median_s, s.spread_s, s.repetitions});
  }
  nlohmann::json comm = nlohmann::json::array();
  for (const CommSample& c : e.comm) comm.push_back({c.collective, c.group_size, c.bytes, c.seconds});
  return {{"format", kProfileExportFormat},
          {"device_kind", e.device_kind},
          {"source", e.source},
          {"ops", std::move(ops)},
          {"comm", std::move(comm)}};
}

std::string ProfileExportText(const ProfileExport& e) {
  const nlohmann::json j = ProfileExportToJson(e);
  std::string out = absl::StrCat("{\"format\": ", j["format"].dump(), ",\n \"device_kind\": ",
                                 j["device_kind"].dump(), ",\n \"source\": ", j["source"].dump(),
                                 ",\n");
  for (const char* list : {"ops", "comm"}) {
    absl::StrAppend(&out, " \"", list, "\": [");
    const nlohmann::json& rows = j[list];
    for (size_t i = 0; i < rows.size(); ++i) {
      absl::StrAppend(&out, i == 0 ? "\n  " : ",\n  ", rows[i].dump());
    }
    absl::StrAppend(&out, rows.empty() ? "]" : "\n ]", std::string(list) == "ops" ? ",\n" : "\n");
  }
  out += "}\n";
  return out;
}

absl::StatusOr<ProfileExport> ProfileExportFromJson(const nlohmann::json& j) {
  if (!j.is_object()) return Bad("not a JSON object");
  if (!j.contains("format") || j["format"] != kProfileExportFormat) {
    return Bad(absl::StrCat("format is not \"", kProfileExportFormat, "\""));
  }
  ProfileExport e;
  if (!j.contains("device_kind")) return Bad("no device_kind");
  ASSIGN_OR_RETURN(e.device_kind, Text(j["device_kind"], "device_kind", false));
  if (e.device_kind.size() > 256) return Bad("device_kind is over 256 bytes");
  if (j.contains("source")) {
    ASSIGN_OR_RETURN(e.source, Text(j["source"], "source", true));
  }
  const nlohmann::json ops = j.value("ops", nlohmann::json::array());
  const nlohmann::json comm = j.value("comm", nlohmann::json::array());
  if (!ops.is_array() || !comm.is_array()) return Bad("ops and comm must be arrays");
  if (ops.size() + comm.size() > kMaxProfileExportRows) {
    return Bad(absl::StrCat("over ", kMaxProfileExportRows, " rows"));
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    const std::string what = absl::StrCat("ops[", i, "]");
    const nlohmann::json& r = ops[i];
    if (!r.is_array() || r.size() != 5) {
      return Bad(absl::StrCat(what, " is not [op_type, signature, median_s, spread_s, repetitions]"));
    }
    ProfileKey key{e.device_kind, "", ""};
    ASSIGN_OR_RETURN(key.op_type, Text(r[0], what + " op_type", false));
    ASSIGN_OR_RETURN(key.signature, Text(r[1], what + " signature", true));
    ProfileSample s;
    ASSIGN_OR_RETURN(s.median_s, Number(r[2], what + " median_s"));
    ASSIGN_OR_RETURN(s.spread_s, Number(r[3], what + " spread_s"));
    ASSIGN_OR_RETURN(int64_t reps, Integer(r[4], what + " repetitions"));
    if (reps < 1 || reps > kMaxProfileRepetitions) return Bad(what + " repetitions out of range");
    s.repetitions = static_cast<int>(reps);
    if (!ValidProfileSample(s)) {
      return Bad(absl::StrCat(what, " (", key.op_type, "): times must be finite and in [0, ",
                              kMaxProfileSeconds, "] s"));
    }
    e.ops.push_back({std::move(key), s});
  }
  for (size_t i = 0; i < comm.size(); ++i) {
    const std::string what = absl::StrCat("comm[", i, "]");
    const nlohmann::json& r = comm[i];
    if (!r.is_array() || r.size() != 4) {
      return Bad(absl::StrCat(what, " is not [collective, group_size, bytes, seconds]"));
    }
    CommSample c;
    ASSIGN_OR_RETURN(c.collective, Text(r[0], what + " collective", false));
    ASSIGN_OR_RETURN(int64_t group, Integer(r[1], what + " group_size"));
    if (group < 1 || group > (1 << 20)) return Bad(what + " group_size out of range");
    c.group_size = static_cast<int>(group);
    ASSIGN_OR_RETURN(c.bytes, Integer(r[2], what + " bytes"));
    ASSIGN_OR_RETURN(c.seconds, Number(r[3], what + " seconds"));
    if (!ValidCommSample(c)) return Bad(absl::StrCat(what, " (", c.collective, ") out of range"));
    e.comm.push_back(std::move(c));
  }
  return e;
}

absl::StatusOr<ProfileExport> ReadProfileExportFile(const std::string& path) {
  absl::StatusOr<nlohmann::json> j =
      base::ReadBoundedJsonFile(path, {.max_bytes = kMaxProfileExportBytes, .max_depth = 8});
  if (!j.ok()) return j.status();
  absl::StatusOr<ProfileExport> e = ProfileExportFromJson(*j);
  if (!e.ok()) return absl::Status(e.status().code(), absl::StrCat(path, ": ", e.status().message()));
  return e;
}

absl::StatusOr<ImportReport> ImportProfiles(const ProfileExport& e, ProfileStore& store,
                                            bool replace) {
  ImportReport r;
  std::set<std::pair<std::string, std::string>> have;
  if (!replace) {
    for (const auto& [key, sample] : store.ListOps(e.device_kind)) {
      have.insert({key.op_type, key.signature});
    }
  }
  for (const auto& [key, sample] : e.ops) {
    if (have.contains({key.op_type, key.signature})) {
      ++r.ops_kept;
      continue;
    }
    RETURN_IF_ERROR(store.Put(key, sample));
    ++r.ops_written;
  }
  std::set<std::tuple<std::string, int, int64_t>> have_comm;
  if (!replace) {
    for (const CommSample& c : store.ListComm(e.device_kind)) {
      have_comm.insert({c.collective, c.group_size, c.bytes});
    }
  }
  for (const CommSample& c : e.comm) {
    if (have_comm.contains({c.collective, c.group_size, c.bytes})) {
      ++r.comm_kept;
      continue;
    }
    RETURN_IF_ERROR(store.PutComm(e.device_kind, c));
    ++r.comm_written;
  }
  return r;
}

ShippedProfiles ShippedProfiles::Load(const std::string& dir, std::vector<std::string>* warnings) {
  ShippedProfiles p;
  std::error_code ec;
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.path().extension() == ".json" && entry.is_regular_file(ec)) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  for (const std::filesystem::path& f : files) {
    absl::StatusOr<ProfileExport> e = ReadProfileExportFile(f.string());
    if (!e.ok()) {
      if (warnings != nullptr) warnings->push_back(std::string(e.status().message()));
      continue;
    }
    for (const auto& [key, sample] : e->ops) {
      p.ops_.emplace(std::make_tuple(key.device_kind, key.op_type, key.signature), sample);
    }
    std::vector<CommSample>& comm = p.comm_[e->device_kind];
    comm.insert(comm.end(), e->comm.begin(), e->comm.end());
    p.files_.push_back(f.string());
  }
  return p;
}

const ShippedProfiles& ShippedProfiles::Get() {
  static const ShippedProfiles* shipped = [] {
    const char* env = std::getenv("BRAID_PROFILES");
    std::string dir = env != nullptr && *env != '\0' ? std::string(env) : BRAID_PROFILES_SOURCE_DIR;
    if (dir == "none") return new ShippedProfiles();
    std::vector<std::string> warnings;
    auto* p = new ShippedProfiles(Load(dir, &warnings));
    for (const std::string& w : warnings) LOG(WARNING) << "shipped profiles: skipping " << w;
    return p;
  }();
  return *shipped;
}

std::optional<ProfileSample> ShippedProfiles::Find(const ProfileKey& key) const {
  auto it = ops_.find({key.device_kind, key.op_type, key.signature});
  if (it == ops_.end()) return std::nullopt;
  return it->second;
}

std::vector<CommSample> ShippedProfiles::Comm(const std::string& device_kind) const {
  auto it = comm_.find(device_kind);
  return it == comm_.end() ? std::vector<CommSample>{} : it->second;
}

}  // namespace braid::costmodel
