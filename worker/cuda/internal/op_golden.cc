#include "worker/cuda/internal/op_golden.h"

#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace braid::worker::cuda_internal {
namespace {

constexpr char kMagic[] = "BRAIDGOLD1\n";
constexpr int64_t kMaxFileBytes = int64_t{256} << 20;
constexpr uint32_t kMaxRank = 8;

void PutRaw(std::string& out, const void* p, size_t n) {
  out.append(static_cast<const char*>(p), n);
}
void PutU32(std::string& out, uint32_t v) { PutRaw(out, &v, sizeof v); }
void PutStr(std::string& out, const std::string& s) {
  PutU32(out, static_cast<uint32_t>(s.size()));
  out += s;
}
void PutTensor(std::string& out, const GoldenTensor& t) {
  const uint8_t defined = t.defined ? 1 : 0;
  PutRaw(out, &defined, 1);
  PutU32(out, static_cast<uint32_t>(t.shape.size()));
  for (int64_t d : t.shape) PutRaw(out, &d, sizeof d);
  PutRaw(out, t.data.data(), t.data.size() * sizeof(float));
}

// A bounded cursor over the file's bytes.
class Reader {
 public:
  explicit Reader(const std::string& bytes) : b_(bytes) {}
  size_t left() const { return b_.size() - pos_; }
  bool Raw(void* p, size_t n) {
    if (n > left()) return false;
    std::memcpy(p, b_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  bool U32(uint32_t& v) { return Raw(&v, sizeof v); }
  bool Str(std::string& s) {
    uint32_t n = 0;
    if (!U32(n) || n > left()) return false;
    s.assign(b_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  absl::Status Tensor(GoldenTensor& t, const std::string& what) {
    uint8_t defined = 0;
    uint32_t rank = 0;
    if (!Raw(&defined, 1) || !U32(rank)) return Truncated(what);
    if (defined > 1 || rank > kMaxRank) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": bad tensor header"));
    }
    t.defined = defined == 1;
    t.shape.assign(rank, 0);
    int64_t elements = 1;
    for (int64_t& d : t.shape) {
      if (!Raw(&d, sizeof d)) return Truncated(what);
      if (d < 0 || (d > 0 && elements > static_cast<int64_t>(left() / sizeof(float)) / d)) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": dimension ", d, " exceeds the file's remaining bytes"));
      }
      elements *= d;
    }
    t.data.resize(elements);
    if (!Raw(t.data.data(), elements * sizeof(float))) return Truncated(what);
    return absl::OkStatus();
  }
  static absl::Status Truncated(const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": the golden file ends early"));
  }

 private:
  const std::string& b_;
  size_t pos_ = 0;
};

}  // namespace

absl::Status WriteGoldenFile(const std::string& path, const std::vector<GoldenCase>& cases) {
  std::string out = kMagic;
  PutU32(out, static_cast<uint32_t>(cases.size()));
  for (const GoldenCase& c : cases) {
    PutStr(out, c.name);
    PutStr(out, c.graph_text);
    PutRaw(out, &c.rtol, sizeof c.rtol);
    PutU32(out, static_cast<uint32_t>(c.inputs.size()));
    for (const GoldenTensor& t : c.inputs) PutTensor(out, t);
    PutU32(out, static_cast<uint32_t>(c.outputs.size()));
    for (const GoldenTensor& t : c.outputs) PutTensor(out, t);
  }
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f.write(out.data(), static_cast<std::streamsize>(out.size()));
    if (!f.good()) return absl::InternalError(absl::StrCat("cannot write ", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("cannot rename ", tmp, " to ", path));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<GoldenCase>> ReadGoldenFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot open the golden file ", path));
  f.seekg(0, std::ios::end);
  const std::streamoff size = f.tellg();
  if (size < 0 || size > kMaxFileBytes) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": over ", kMaxFileBytes, " bytes"));
  }
  f.seekg(0);
  std::string bytes(static_cast<size_t>(size), '\0');
  f.read(bytes.data(), size);
  if (!f) return absl::InternalError(absl::StrCat("cannot read ", path));
  const size_t magic = sizeof kMagic - 1;
  if (bytes.compare(0, magic, kMagic) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a braid golden file"));
  }
  std::string rest = bytes.substr(magic);
  Reader r(rest);
  uint32_t n = 0;
  if (!r.U32(n)) return Reader::Truncated(path);
  // Every case takes at least 24 bytes.
  if (n > r.left() / 24) return absl::InvalidArgumentError(absl::StrCat(path, ": bad case count"));
  std::vector<GoldenCase> cases(n);
  for (uint32_t i = 0; i < n; ++i) {
    GoldenCase& c = cases[i];
    const std::string what = absl::StrCat(path, " case ", i);
    if (!r.Str(c.name) || !r.Str(c.graph_text) || !r.Raw(&c.rtol, sizeof c.rtol)) {
      return Reader::Truncated(what);
    }
    if (!(c.rtol > 0 && c.rtol < 1)) {
      return absl::InvalidArgumentError(absl::StrCat(what, " (", c.name, "): rtol out of (0, 1)"));
    }
    for (std::vector<GoldenTensor>* list : {&c.inputs, &c.outputs}) {
      uint32_t count = 0;
      if (!r.U32(count)) return Reader::Truncated(what);
      if (count > r.left() / 5) {
        return absl::InvalidArgumentError(absl::StrCat(what, " (", c.name, "): bad tensor count"));
      }
      list->resize(count);
      for (GoldenTensor& t : *list) {
        absl::Status s = r.Tensor(t, absl::StrCat(what, " (", c.name, ")"));
        if (!s.ok()) return s;
      }
    }
  }
  if (r.left() != 0) return absl::InvalidArgumentError(absl::StrCat(path, ": trailing bytes"));
  return cases;
}

}  // namespace braid::worker::cuda_internal
