#include "costmodel/machine_view.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"

namespace braid::costmodel {
namespace {

// A view's devices are never listed to answer a question about them: a view
// of a 2^20-rank cluster has up to 2^20 devices, and the parallelization pass
// asks about thousands of views. Validity, node and island crossings and the
// ranks sharing a node are computed from (start, dims, strides).

using Wide = __int128;

// Floor and ceiling of a / b for b > 0.
Wide FloorDiv(Wide a, Wide b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
Wide CeilDiv(Wide a, Wide b) { return -FloorDiv(-a, b); }

// x, y with a*x + b*y = gcd(a, b), for a, b > 0.
Wide ExtendedGcd(Wide a, Wide b, Wide& x, Wide& y) {
  if (b == 0) {
    x = 1;
    y = 0;
    return a;
  }
  Wide x1, y1;
  const Wide g = ExtendedGcd(b, a % b, x1, y1);
  x = y1;
  y = x1 - (a / b) * y1;
  return g;
}

// Whether some (jb, jc) with |jb| < db, |jc| < dc and jb*sb + jc*sc = r
// exists (sb, sc > 0). The solutions of the linear Diophantine equation are
// one line: jb = x0 + t*sc/g, jc = y0 - t*sb/g.
bool BoxedSolution(Wide r, Wide sb, Wide db, Wide sc, Wide dc) {
  Wide u, v;
  const Wide g = ExtendedGcd(sb, sc, u, v);
  if (r % g != 0) return false;
  const Wide a = sc / g, b = sb / g;
  const Wide x0 = u * (r / g), y0 = v * (r / g);
  // -db < x0 + t*a < db and -dc < y0 - t*b < dc.
  const Wide lo = std::max(CeilDiv(-db + 1 - x0, a), CeilDiv(y0 - dc + 1, b));
  const Wide hi = std::min(FloorDiv(db - 1 - x0, a), FloorDiv(y0 + dc - 1, b));
  return lo <= hi;
}

// Two tasks on one device: a nonzero index difference j (|j_k| < dims[k])
// with sum j_k * strides[k] = 0. Returns it (first nonzero entry positive),
// or nothing when the view is injective. The dims of size 1 have j_k = 0;
// with three dims the smallest is walked (at most the cube root of the
// device count, which validation bounds first).
std::optional<std::vector<int64_t>> Collision(const MachineView& v) {
  std::vector<int> ks;
  for (size_t k = 0; k < v.dims.size(); ++k)
    if (v.dims[k] > 1) ks.push_back(static_cast<int>(k));
  std::vector<int64_t> j(v.dims.size(), 0);
  auto pair = [&](int b, int c, Wide r) -> bool {
    // Smallest |jb| first is not needed: any solution names a collision.
    const Wide sb = v.strides[b], sc = v.strides[c], db = v.dims[b], dc = v.dims[c];
    if (r == 0) {
      // jb = t*sc/g, jc = -t*sb/g with t = 1: the smallest nonzero one.
      const Wide g = std::gcd(v.strides[b], v.strides[c]);
      if (sc / g >= db || sb / g >= dc) return false;
      j[b] = static_cast<int64_t>(sc / g);
      j[c] = -static_cast<int64_t>(sb / g);
      return true;
    }
    if (!BoxedSolution(r, sb, db, sc, dc)) return false;
    Wide u, w;
    const Wide g = ExtendedGcd(sb, sc, u, w);
    const Wide a = sc / g, bb = sb / g;
    const Wide x0 = u * (r / g), y0 = w * (r / g);
    const Wide t = std::max(CeilDiv(-db + 1 - x0, a), CeilDiv(y0 - dc + 1, bb));
    j[b] = static_cast<int64_t>(x0 + t * a);
    j[c] = static_cast<int64_t>(y0 - t * bb);
    return true;
  };
  if (ks.size() <= 1) return std::nullopt;
  if (ks.size() == 2) {
    if (!pair(ks[0], ks[1], 0)) return std::nullopt;
  } else {
    int a = ks[0];
    for (int k : ks)
      if (v.dims[k] < v.dims[a]) a = k;
    std::vector<int> rest;
    for (int k : ks)
      if (k != a) rest.push_back(k);
    bool found = pair(rest[0], rest[1], 0);
    for (int64_t ja = 1; !found && ja < v.dims[a]; ++ja) {
      if (pair(rest[0], rest[1], -Wide{ja} * v.strides[a])) {
        j[a] = ja;
        found = true;
      }
    }
    if (!found) return std::nullopt;
  }
  for (int64_t x : j) {
    if (x == 0) continue;
    if (x < 0)
      for (int64_t& y : j) y = -y;
    break;
  }
  return j;
}

// The first task in row-major order whose device is at or past `limit`
// (some task's is): per dimension the smallest index from which the rest of
// the dimensions can still reach it.
int64_t FirstDeviceFrom(const MachineView& v, int64_t limit) {
  int64_t dev = v.start;
  for (size_t k = 0; k < v.dims.size(); ++k) {
    int64_t rest = 0;
    for (size_t l = k + 1; l < v.dims.size(); ++l) rest += int64_t{v.dims[l] - 1} * v.strides[l];
    const int64_t need = limit - dev - rest;
    const int64_t i = need <= 0 ? 0 : (need + v.strides[k] - 1) / v.strides[k];
    dev += i * v.strides[k];
  }
  return dev;
}

// Ordered factorizations of n into exactly k factors >= 2.
void Factorizations(int n, int k, std::vector<int>& prefix, std::vector<std::vector<int>>& out) {
  if (k == 0) {
    if (n == 1) out.push_back(prefix);
    return;
  }
  for (int f = 2; f <= n; ++f) {
    if (n % f != 0) continue;
    prefix.push_back(f);
    Factorizations(n / f, k - 1, prefix, out);
    prefix.pop_back();
  }
}

// The view's devices form one run start .. start + n - 1: its dims, ordered
// by stride, are 1, d_0, d_0 * d_1, ... (every view the parallelization pass
// costs is one).
bool Contiguous(const MachineView& v) {
  std::vector<std::pair<int64_t, int64_t>> by_stride;  // (stride, dim)
  for (size_t k = 0; k < v.dims.size(); ++k)
    if (v.dims[k] > 1) by_stride.emplace_back(v.strides[k], v.dims[k]);
  std::sort(by_stride.begin(), by_stride.end());
  int64_t next = 1;
  for (const auto& [stride, dim] : by_stride) {
    if (stride != next) return false;
    next *= dim;
  }
  return true;
}

// The most devices of a (valid) view on one node of `per_node` ranks.
int64_t MostOnOneNode(const MachineView& v, int per_node) {
  const int64_t n = NumViewDevices(v);
  if (Contiguous(v)) {
    // The run's first node holds per_node - start % per_node of it, whole
    // nodes per_node, the last node the rest.
    const int64_t first = std::min<int64_t>(n, per_node - v.start % per_node);
    const int64_t rest = n - first;
    if (rest >= per_node) return per_node;
    return std::max(first, rest);
  }
  // Other views (the reference machine-mapping solver enumerates them) are
  // counted task by task, per node touched.
  std::map<int64_t, int64_t> on_node;
  int64_t most = 0;
  std::vector<int64_t> idx(v.dims.size(), 0);
  for (int64_t t = 0; t < n; ++t) {
    int64_t dev = v.start;
    for (size_t k = 0; k < v.dims.size(); ++k) dev += idx[k] * v.strides[k];
    most = std::max(most, ++on_node[dev / per_node]);
    for (int k = static_cast<int>(v.dims.size()) - 1; k >= 0; --k) {
      if (++idx[k] < v.dims[k]) break;
      idx[k] = 0;
    }
  }
  return most;
}

}  // namespace

int64_t NumViewDevices(const MachineView& v) {
  int64_t n = 1;
  for (int d : v.dims) n *= d;
  return n;
}

std::string MachineViewString(const MachineView& v) {
  return absl::StrCat(v.start, ":[", absl::StrJoin(v.dims, ","), "]/[",
                      absl::StrJoin(v.strides, ","), "]");
}

absl::Status ValidateMachineView(const MachineView& v, const ClusterSpec& spec) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat("machine view ", MachineViewString(v), ": ", why));
  };
  if (v.dims.empty() || v.dims.size() > kMaxViewDims) {
    return bad(absl::StrCat("needs 1 to ", kMaxViewDims, " dims, has ", v.dims.size()));
  }
  if (v.strides.size() != v.dims.size()) {
    return bad(absl::StrCat(v.dims.size(), " dims but ", v.strides.size(), " strides"));
  }
  if (v.start < 0) return bad("start is negative");
  for (size_t k = 0; k < v.dims.size(); ++k) {
    if (v.dims[k] < 1) return bad(absl::StrCat("dim ", k, " has size ", v.dims[k]));
    if (v.strides[k] < 1) return bad(absl::StrCat("dim ", k, " has stride ", v.strides[k]));
  }
  // At most 3 dims below 2^31 each: the product fits 128 bits.
  Wide n = 1;
  for (int d : v.dims) n *= d;
  if (n > spec.num_ranks) {
    const std::string count = n <= Wide{INT64_MAX} ? absl::StrCat(static_cast<int64_t>(n))
                                                   : std::string("over 2^63");
    return bad(absl::StrCat("needs ", count, " devices, the cluster has ", spec.num_ranks));
  }
  int64_t last = v.start;  // the largest device: every index at its last value
  for (size_t k = 0; k < v.dims.size(); ++k) last += int64_t{v.dims[k] - 1} * v.strides[k];
  if (last >= spec.num_ranks) {
    return bad(absl::StrCat("device ", FirstDeviceFrom(v, spec.num_ranks),
                            " is outside the cluster's ", spec.num_ranks, " ranks"));
  }
  if (std::optional<std::vector<int64_t>> j = Collision(v)) {
    // Tasks i and i + j share a device; the smallest such i.
    int64_t dev = v.start;
    for (size_t k = 0; k < j->size(); ++k) dev += std::max<int64_t>(0, -(*j)[k]) * v.strides[k];
    return bad(absl::StrCat("device ", dev, " is used twice"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int>> ViewDevices(const MachineView& v, const ClusterSpec& spec) {
  RETURN_IF_ERROR(ValidateMachineView(v, spec));
  std::vector<int> out = {v.start};
  for (size_t k = 0; k < v.dims.size(); ++k) {
    std::vector<int> next;
    next.reserve(out.size() * v.dims[k]);
    for (int base : out) {
      for (int i = 0; i < v.dims[k]; ++i) next.push_back(base + i * v.strides[k]);
    }
    out = std::move(next);
  }
  return out;
}

absl::StatusOr<std::vector<MachineView>> EnumerateMachineViews(const ClusterSpec& spec,
                                                               int num_devices, int max_dims,
                                                               int max_views) {
  const int ranks = spec.num_ranks;
  if (num_devices < 1 || num_devices > ranks) {
    return absl::InvalidArgumentError(absl::StrCat("machine views of ", num_devices,
                                                   " devices: not in [1, ", ranks, "]"));
  }
  if (max_dims < 1 || max_dims > kMaxViewDims) {
    return absl::InvalidArgumentError(
        absl::StrCat("machine views: max_dims ", max_dims, " not in [1, ", kMaxViewDims, "]"));
  }
  std::vector<MachineView> out;
  if (num_devices == 1) {
    for (int s = 0; s < ranks; ++s) out.push_back({s, {1}, {1}});
    return out;
  }
  std::vector<int> strides_allowed;
  for (int s = 1; s < ranks; ++s) {
    if (ranks % s == 0) strides_allowed.push_back(s);
  }
  for (int k = 1; k <= max_dims; ++k) {
    std::vector<std::vector<int>> factorizations;
    std::vector<int> prefix;
    Factorizations(num_devices, k, prefix, factorizations);
    for (const std::vector<int>& dims : factorizations) {
      // Every k-tuple of allowed strides, in lexicographic order.
      std::vector<size_t> idx(k, 0);
      while (true) {
        MachineView v{0, dims, std::vector<int>(k)};
        int64_t span = 0;
        for (int j = 0; j < k; ++j) {
          v.strides[j] = strides_allowed[idx[j]];
          span += int64_t{dims[j] - 1} * v.strides[j];
        }
        for (int64_t start = 0; start + span < ranks; ++start) {
          v.start = static_cast<int>(start);
          if (!ValidateMachineView(v, spec).ok()) break;  // not injective: no start is
          if (static_cast<int>(out.size()) >= max_views) {
            return absl::ResourceExhaustedError(absl::StrCat(
                "more than ", max_views, " machine views of ", num_devices, " devices"));
          }
          out.push_back(v);
        }
        int j = k - 1;
        while (j >= 0 && ++idx[j] == strides_allowed.size()) idx[j--] = 0;
        if (j < 0) break;
      }
    }
  }
  return out;
}

std::string_view LinkLevelName(LinkLevel l) {
  switch (l) {
    case LinkLevel::kIntraNode: return "intra_node";
    case LinkLevel::kCrossIsland: return "cross_island";
    case LinkLevel::kInterNode: return "inter_node";
  }
  return "unknown";
}

absl::StatusOr<ViewDimLink> ViewDimensionLink(const MachineView& v, const ClusterSpec& spec,
                                              int dim) {
  RETURN_IF_ERROR(ValidateMachineView(v, spec));
  if (dim < 0 || dim >= static_cast<int>(v.dims.size())) {
    return absl::InvalidArgumentError(absl::StrCat("machine view ", MachineViewString(v),
                                                   ": dim ", dim, " out of range"));
  }
  if (v.dims[dim] == 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "machine view ", MachineViewString(v), ": dim ", dim, " has size 1 and uses no link"));
  }
  const int per_node = spec.devices_per_node;
  const bool islands =
      spec.intra.kind == IntraLinkKind::kNvlinkIslands && spec.intra.island_size > 0;
  // A group along `dim`: base + i * stride for i < dims[dim], where a base is
  // the device of a task with index 0 in `dim`. Its devices ascend, so it
  // leaves its first device's node (island) exactly when its last device
  // does: when base % per_node + span >= per_node, span being
  // (dims[dim] - 1) * stride (and the same within a node for islands, whose
  // size divides the node's). Only the bases' residues modulo the node
  // width matter, and along another dim k they repeat every
  // per_node / gcd(stride_k, per_node) indices, so walking those indices
  // finds every residue: at most per_node^2 steps, never one per device.
  const int64_t span = int64_t{v.dims[dim] - 1} * v.strides[dim];
  std::vector<int> others;
  std::vector<int64_t> period;
  for (size_t k = 0; k < v.dims.size(); ++k) {
    if (static_cast<int>(k) == dim) continue;
    others.push_back(static_cast<int>(k));
    period.push_back(std::min<int64_t>(
        v.dims[k], per_node / std::gcd<int64_t>(v.strides[k] % per_node, per_node)));
  }
  int64_t max_residue = 0, max_island_residue = 0;
  std::vector<int64_t> idx(others.size(), 0);
  while (true) {
    int64_t base = v.start;
    for (size_t o = 0; o < others.size(); ++o) base += idx[o] * v.strides[others[o]];
    const int64_t r = base % per_node;
    max_residue = std::max(max_residue, r);
    if (islands) max_island_residue = std::max(max_island_residue, r % spec.intra.island_size);
    int o = static_cast<int>(others.size()) - 1;
    while (o >= 0 && ++idx[o] == period[o]) idx[o--] = 0;
    if (o < 0) break;
  }
  const bool cross_node = max_residue + span >= per_node;
  const bool cross_island = islands && max_island_residue + span >= spec.intra.island_size;
  if (cross_node) {
    const int64_t most = MostOnOneNode(v, per_node);
    return ViewDimLink{LinkLevel::kInterNode,
                       spec.network.nics_per_node * spec.network.nic_bandwidth / most,
                       spec.network.latency_s};
  }
  if (cross_island) {
    return ViewDimLink{LinkLevel::kCrossIsland,
                       std::min(spec.intra.bandwidth, spec.intra.cross_island_bandwidth),
                       std::max(spec.intra.latency_s, spec.intra.cross_island_latency_s)};
  }
  return ViewDimLink{LinkLevel::kIntraNode, spec.intra.bandwidth, spec.intra.latency_s};
}

LinearCost RingCost(Collective c, int n, const ViewDimLink& link) {
  if (n <= 1) return {};
  const double dn = n, bw = link.bandwidth, lat = link.latency_s;
  switch (c) {
    case Collective::kAllReduce: return {2 * (dn - 1) / dn / bw, 2 * (dn - 1) * lat};
    case Collective::kAllGather:
    case Collective::kReduceScatter:
    case Collective::kAllToAll: return {(dn - 1) / dn / bw, (dn - 1) * lat};
    case Collective::kBroadcast: return {1 / bw, (dn - 1) * lat};
    case Collective::kSendRecv: return {1 / bw, lat};
  }
  return {};
}

}  // namespace braid::costmodel
