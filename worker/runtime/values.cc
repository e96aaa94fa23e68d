#include "worker/runtime/values.h"

#include <cmath>
#include <numbers>

#include "absl/strings/str_cat.h"
#include "graph/parallel_shape.h"

namespace braid::runtime {
namespace {

uint64_t Mix(uint64_t h, std::string_view s) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;
constexpr int64_t kMaxElements = int64_t{1} << 31;

absl::Status Bad(const graph::Op& op, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(op.type, ": ", why));
}

}  // namespace

uint64_t SeedOf(uint64_t seed, std::string_view name, int64_t step) {
  uint64_t h = 1469598103934665603ull ^ seed;
  h = Mix(h, name);
  h = Mix(h, absl::StrCat("#", step));
  return h;
}

uint64_t SplitMix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

absl::StatusOr<HostTensor> FullValue(const graph::LoadSpec& spec, uint64_t key) {
  int64_t n = 1;
  for (int64_t d : spec.full_shape) {
    if (d < 0) return absl::InvalidArgumentError(absl::StrCat(spec.source, ": negative dim"));
    n *= d;
    if (n > kMaxElements) {
      return absl::InvalidArgumentError(
          absl::StrCat(spec.source, ": more than 2^31 elements to generate"));
    }
  }
  HostTensor h;
  h.shape = spec.full_shape;
  h.data.resize(static_cast<size_t>(n));
  float* out = h.data.data();
  auto hash = [key](int64_t i) { return SplitMix64(key + static_cast<uint64_t>(i) * kGolden); };
  switch (spec.init) {
    case graph::InitKind::kNormal:
      for (int64_t i = 0; i < n; ++i) {
        const double u1 = static_cast<double>((hash(2 * i) >> 11) + 1) * 0x1p-53;  // (0, 1]
        const double u2 = static_cast<double>(hash(2 * i + 1) >> 11) * 0x1p-53;    // [0, 1)
        out[i] = static_cast<float>(std::sqrt(-2.0 * std::log(u1)) *
                                    std::cos(2.0 * std::numbers::pi * u2));
      }
      break;
    case graph::InitKind::kUniform:
      for (int64_t i = 0; i < n; ++i) {
        const double u = static_cast<double>(hash(i) >> 40) * 0x1p-24;  // [0, 1)
        out[i] = static_cast<float>((u * 2 - 1) * spec.bound);
      }
      break;
    case graph::InitKind::kIntegers: {
      if (spec.high < 1 || spec.high > (int64_t{1} << 24)) {
        return absl::InvalidArgumentError(
            absl::StrCat(spec.source, ": integers in [0, ", spec.high, ") cannot be drawn"));
      }
      const uint64_t high = static_cast<uint64_t>(spec.high);
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(((hash(i) >> 32) * high) >> 32);
      break;
    }
    case graph::InitKind::kOnes: std::fill(h.data.begin(), h.data.end(), 1.0f); break;
    case graph::InitKind::kZeros: std::fill(h.data.begin(), h.data.end(), 0.0f); break;
    case graph::InitKind::kFill:
      std::fill(h.data.begin(), h.data.end(), static_cast<float>(spec.value));
      break;
    case graph::InitKind::kValue:
      if (static_cast<int64_t>(spec.values.size()) != n) {
        return absl::InvalidArgumentError(absl::StrCat(spec.source, ": ", spec.values.size(),
                                                       " values for ", n, " elements"));
      }
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(spec.values[i]);
      break;
  }
  return h;
}

absl::StatusOr<std::vector<uint8_t>> KeepMask(const graph::Op& op, const std::string& key_op,
                                              const std::vector<int64_t>& local, double ratio,
                                              const RankContext& ctx) {
  std::vector<int64_t> full = op.GetInts("global_shape");
  std::vector<int64_t> offset(local.size(), 0);
  if (full.empty()) {
    full = local;
  } else {
    if (full.size() != local.size()) return Bad(op, "global_shape does not match the output's rank");
    const std::vector<int64_t> flat = op.GetInts("piece_axes");
    size_t d = 0;
    std::vector<int> axes;
    for (int64_t a : flat) {
      if (a >= 0) {
        axes.push_back(static_cast<int>(a));
        continue;
      }
      if (d >= local.size()) return Bad(op, "piece_axes names more dims than the output has");
      if (axes.empty() && local[d] != full[d]) {
        return Bad(op, "global_shape disagrees with an unsplit dim of the output");
      }
      if (!axes.empty()) {
        const std::vector<int>& mesh = ctx.program->mesh;
        for (int x : axes)
          if (x >= static_cast<int>(mesh.size())) return Bad(op, "piece_axes names an axis off the mesh");
        if (graph::PieceCount(mesh, axes) * local[d] != full[d])
          return Bad(op, "piece_axes and global_shape disagree with the output's shape");
        offset[d] = graph::PieceIndex(mesh, ctx.coord, axes) * local[d];
      }
      axes.clear();
      ++d;
    }
    if (d != local.size() || !axes.empty()) return Bad(op, "piece_axes does not close every dim");
  }
  const uint64_t key = SeedOf(ctx.program->seed, key_op, ctx.step);
  const uint64_t threshold = static_cast<uint64_t>(std::ldexp(ratio, 32));
  int64_t n = 1;
  for (int64_t s : local) n *= s;
  if (n < 0 || n > kMaxElements) return Bad(op, "the mask has more than 2^31 elements");
  std::vector<uint8_t> out(static_cast<size_t>(n));
  const size_t r = local.size();
  std::vector<int64_t> stride(r, 1), idx(r, 0);
  for (size_t d = r; d-- > 1;) stride[d - 1] = stride[d] * full[d];
  int64_t base = 0;
  for (size_t d = 0; d < r; ++d) base += offset[d] * stride[d];
  int64_t g = base;
  for (int64_t e = 0; e < n; ++e) {
    const uint64_t h = SplitMix64(key + static_cast<uint64_t>(g) * kGolden);
    out[e] = (h >> 32) >= threshold;
    // Next local element: advance the innermost index and carry.
    for (size_t d = r; d-- > 0;) {
      if (++idx[d] < local[d]) {
        g += stride[d];
        break;
      }
      g -= (local[d] - 1) * stride[d];
      idx[d] = 0;
    }
  }
  return out;
}

}  // namespace braid::runtime
