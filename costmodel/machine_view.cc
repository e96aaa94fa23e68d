#include "costmodel/machine_view.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"

namespace braid::costmodel {
namespace {

// Device ids without validation; int64 so an out-of-range view cannot wrap.
std::vector<int64_t> RawDevices(const MachineView& v) {
  std::vector<int64_t> out = {v.start};
  for (size_t k = 0; k < v.dims.size(); ++k) {
    std::vector<int64_t> next;
    next.reserve(out.size() * std::max(v.dims[k], 1));
    for (int64_t base : out) {
      for (int i = 0; i < v.dims[k]; ++i) next.push_back(base + int64_t{i} * v.strides[k]);
    }
    out = std::move(next);
  }
  return out;
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
  if (NumViewDevices(v) > spec.num_ranks) {
    return bad(absl::StrCat("needs ", NumViewDevices(v), " devices, the cluster has ",
                            spec.num_ranks));
  }
  std::set<int64_t> seen;
  for (int64_t d : RawDevices(v)) {
    if (d >= spec.num_ranks) {
      return bad(absl::StrCat("device ", d, " is outside the cluster's ", spec.num_ranks,
                              " ranks"));
    }
    if (!seen.insert(d).second) return bad(absl::StrCat("device ", d, " is used twice"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int>> ViewDevices(const MachineView& v, const ClusterSpec& spec) {
  RETURN_IF_ERROR(ValidateMachineView(v, spec));
  std::vector<int> out;
  for (int64_t d : RawDevices(v)) out.push_back(static_cast<int>(d));
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
  // A group along `dim`: the tasks that differ only in index `dim`. Its
  // devices are base + i * stride; the view's devices are every base plus
  // those offsets, so checking each device against its group's first is
  // enough.
  const std::vector<int> devices = *ViewDevices(v, spec);
  int64_t inner = 1;  // tasks between consecutive members of a group
  for (size_t k = dim + 1; k < v.dims.size(); ++k) inner *= v.dims[k];
  bool cross_node = false, cross_island = false;
  for (size_t t = 0; t < devices.size(); ++t) {
    const int64_t pos = (static_cast<int64_t>(t) / inner) % v.dims[dim];
    const int first = devices[t - pos * inner];
    const int d = devices[t];
    if (d / per_node != first / per_node) cross_node = true;
    if (islands && (d % per_node) / spec.intra.island_size !=
                       (first % per_node) / spec.intra.island_size) {
      cross_island = true;
    }
  }
  if (cross_node) {
    std::map<int, int> on_node;
    int most = 0;
    for (int d : devices) most = std::max(most, ++on_node[d / per_node]);
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
