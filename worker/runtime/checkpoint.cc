#include "worker/runtime/checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace braid::runtime {
namespace {

constexpr char kMagic[8] = {'B', 'R', 'A', 'I', 'D', 'C', 'K', '1'};
constexpr uint64_t kMaxHeader = 1 << 20;
constexpr int64_t kMaxElements = int64_t{1} << 31;

}  // namespace

absl::Status WriteCheckpoint(const std::string& path, const Checkpoint& ck) {
  nlohmann::json tensors = nlohmann::json::array();
  int64_t offset = 0;
  for (const auto& [name, t] : ck.tensors) {
    tensors.push_back({{"name", name}, {"shape", t.shape}, {"offset", offset}});
    offset += static_cast<int64_t>(t.data.size());
  }
  const std::string header = nlohmann::json{{"format", "braid-checkpoint/1"},
                                            {"model_fingerprint", ck.model_fingerprint},
                                            {"program_fingerprint", ck.program_fingerprint},
                                            {"steps", ck.steps},
                                            {"tensors", tensors}}
                                 .dump();
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return absl::PermissionDeniedError(absl::StrCat("cannot write ", tmp));
    const uint64_t n = header.size();
    f.write(kMagic, sizeof(kMagic));
    f.write(reinterpret_cast<const char*>(&n), sizeof(n));
    f.write(header.data(), static_cast<std::streamsize>(header.size()));
    for (const auto& [name, t] : ck.tensors) {
      f.write(reinterpret_cast<const char*>(t.data.data()),
              static_cast<std::streamsize>(t.data.size() * sizeof(float)));
    }
    if (!f) return absl::DataLossError(absl::StrCat("writing ", tmp, " failed"));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::PermissionDeniedError(absl::StrCat("cannot rename ", tmp, " to ", path));
  }
  return absl::OkStatus();
}

absl::StatusOr<Checkpoint> ReadCheckpoint(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot open checkpoint ", path));
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint ", path, ": ", why));
  };
  char magic[8];
  uint64_t n = 0;
  if (!f.read(magic, 8) || std::memcmp(magic, kMagic, 8) != 0) return bad("not a braid checkpoint");
  if (!f.read(reinterpret_cast<char*>(&n), sizeof(n)) || n > kMaxHeader) return bad("bad header length");
  std::string header(n, '\0');
  if (!f.read(header.data(), static_cast<std::streamsize>(n))) return bad("truncated header");
  Checkpoint ck;
  try {
    nlohmann::json j = nlohmann::json::parse(header);
    if (j.value("format", "") != "braid-checkpoint/1") return bad("unknown format");
    ck.model_fingerprint = j.value("model_fingerprint", "");
    ck.program_fingerprint = j.value("program_fingerprint", "");
    ck.steps = j.value("steps", 0);
    int64_t expected = 0;
    for (const auto& t : j.at("tensors")) {
      HostTensor h;
      h.shape = t.at("shape").get<std::vector<int64_t>>();
      if (h.shape.size() > 8) return bad("a tensor has more than 8 dims");
      int64_t count = 1;
      for (int64_t d : h.shape) {
        if (d < 0 || (d > 0 && count > kMaxElements / d)) return bad("a tensor is too large");
        count *= d;
      }
      if (t.at("offset").get<int64_t>() != expected) return bad("offsets are not consecutive");
      expected += count;
      h.data.resize(count);
      if (!f.read(reinterpret_cast<char*>(h.data.data()), static_cast<std::streamsize>(count * sizeof(float)))) {
        return bad("truncated data");
      }
      ck.tensors[t.at("name").get<std::string>()] = std::move(h);
    }
  } catch (const nlohmann::json::exception& e) {
    return bad(e.what());
  }
  if (f.peek() != std::char_traits<char>::eof()) return bad("trailing bytes");
  return ck;
}

std::set<std::string> ParameterNames(const graph::Program& p) {
  std::set<std::string> out;
  for (const graph::Tensor& t : p.graph.tensors()) {
    if (t.role == graph::TensorRole::kParameter && t.producer == graph::kNoId) {
      out.insert(p.loads.at(t.name).source);
    }
  }
  return out;
}

CheckpointDiff CompareCheckpoints(const Checkpoint& got, const Checkpoint& ref,
                                  const std::set<std::string>* only) {
  CheckpointDiff d;
  for (const auto& [name, r] : ref.tensors) {
    if (only != nullptr && !only->contains(name)) continue;
    auto it = got.tensors.find(name);
    if (it == got.tensors.end() || it->second.shape != r.shape) {
      d.mismatched.push_back(name);
      continue;
    }
    double num = 0, den = 0;
    for (size_t i = 0; i < r.data.size(); ++i) {
      const double e = static_cast<double>(it->second.data[i]) - r.data[i];
      num += e * e;
      den += static_cast<double>(r.data[i]) * r.data[i];
    }
    // An RMS of 1e-4 is the floor of the reference's size: a tensor whose
    // updates cancel to about zero (a key bias under softmax, a bias
    // feeding a BatchNorm, whose input gradient has zero mean) holds only
    // rounding noise, which no relative error can compare; below the floor
    // the error is the absolute RMS difference over 1e-4.
    const double floor = 1e-8 * static_cast<double>(r.data.size());
    double rel = std::sqrt(num / std::max(den, floor));
    if (std::isnan(rel)) rel = std::numeric_limits<double>::infinity();
    d.errors.emplace_back(name, rel);
    if (rel > d.max_rel_error || d.worst.empty()) {
      if (rel >= d.max_rel_error) {
        d.max_rel_error = rel;
        d.worst = name;
      }
    }
  }
  std::stable_sort(d.errors.begin(), d.errors.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  return d;
}

}  // namespace braid::runtime
