#include "costmodel/comm_model.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "glog/logging.h"

namespace braid::costmodel {
namespace {

constexpr Collective kAllCollectives[] = {
    Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter,
    Collective::kBroadcast, Collective::kAllToAll,  Collective::kSendRecv};

struct Link {
  double bandwidth;
  double latency_s;
};

// The slowest intra-node link a group of `local` ranks of one node spans.
Link IntraLink(const ClusterSpec& s, int local) {
  if (s.intra.kind == IntraLinkKind::kNvlinkIslands && local > s.intra.island_size) {
    return {std::min(s.intra.bandwidth, s.intra.cross_island_bandwidth),
            std::max(s.intra.latency_s, s.intra.cross_island_latency_s)};
  }
  return {s.intra.bandwidth, s.intra.latency_s};
}

// One level of ring collectives over `n` ranks on links of bandwidth `bw`.
LinearCost Flat(Collective c, int n, double bw, double lat) {
  const double dn = n;
  switch (c) {
    case Collective::kAllReduce:
      return {2 * (dn - 1) / dn / bw, 2 * (dn - 1) * lat};
    case Collective::kAllGather:
    case Collective::kReduceScatter:
    case Collective::kAllToAll:
      return {(dn - 1) / dn / bw, (dn - 1) * lat};
    case Collective::kBroadcast:
      return {1 / bw, (dn - 1) * lat};
    case Collective::kSendRecv:
      return {1 / bw, lat};
  }
  return {};
}

}  // namespace

std::string_view CollectiveName(Collective c) {
  switch (c) {
    case Collective::kAllReduce: return "AllReduce";
    case Collective::kAllGather: return "AllGather";
    case Collective::kReduceScatter: return "ReduceScatter";
    case Collective::kBroadcast: return "Broadcast";
    case Collective::kAllToAll: return "AllToAll";
    case Collective::kSendRecv: return "SendRecv";
  }
  return "unknown";
}

absl::StatusOr<std::vector<Collective>> ParseCollectives(const std::vector<std::string>& names) {
  std::vector<Collective> out;
  for (const std::string& name : names) {
    ASSIGN_OR_RETURN(Collective c, ParseCollective(name));
    out.push_back(c);
  }
  return out;
}

absl::StatusOr<Collective> ParseCollective(std::string_view name) {
  for (Collective c : kAllCollectives) {
    if (CollectiveName(c) == name) return c;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown collective '", std::string(name),
                                                 "' (AllReduce, AllGather, ReduceScatter, "
                                                 "Broadcast, AllToAll, SendRecv)"));
}

absl::StatusOr<LinearCost> FitLinear(std::span<const std::pair<double, double>> points) {
  std::set<double> sizes;
  for (const auto& [x, y] : points) {
    if (!std::isfinite(x) || !std::isfinite(y) || x < 0 || y < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("comm fit: invalid point (bytes=", x, ", seconds=", y, ")"));
    }
    sizes.insert(x);
  }
  if (sizes.size() < 2) {
    return absl::InvalidArgumentError("comm fit: needs at least two distinct sizes");
  }
  // Weighted least squares with weights 1/y^2: timing noise is roughly
  // proportional to the time, so this minimizes the relative error and lets
  // the small sizes determine D while the large ones determine C. Centered
  // (weighted) sums keep it numerically stable across 1 KB .. 1 GB.
  double sw = 0, mx = 0, my = 0;
  auto weight = [](double y) { return 1.0 / std::max(y * y, 1e-30); };
  for (const auto& [x, y] : points) {
    double w = weight(y);
    sw += w;
    mx += w * x;
    my += w * y;
  }
  mx /= sw;
  my /= sw;
  double sxx = 0, sxy = 0;
  for (const auto& [x, y] : points) {
    double w = weight(y);
    sxx += w * (x - mx) * (x - mx);
    sxy += w * (x - mx) * (y - my);
  }
  LinearCost fit{sxy / sxx, my - sxy / sxx * mx};
  if (fit.overhead_s < 0) {
    // Through the origin: minimize sum w (y - C x)^2.
    double xx = 0, xy = 0;
    for (const auto& [x, y] : points) {
      double w = weight(y);
      xx += w * x * x;
      xy += w * x * y;
    }
    fit = {xy / xx, 0};
  }
  if (!(fit.seconds_per_byte > 0)) {
    return absl::InvalidArgumentError(
        "comm fit: time does not grow with size (fitted C <= 0); measurements are too noisy");
  }
  return fit;
}

LinearCost CommModel::Prior(Collective c, int n) const {
  if (n <= 1) return {};
  const ClusterSpec& s = spec_;
  if (n <= s.devices_per_node) {
    Link l = IntraLink(s, n);
    return Flat(c, n, l.bandwidth, l.latency_s);
  }
  const int local = s.devices_per_node;
  const int nodes = (n + local - 1) / local;
  const double L = local, N = nodes, dn = n;
  const double net_bw = s.network.nic_bandwidth * s.network.nics_per_node;
  const double net_lat = s.network.latency_s;
  if (local == 1) {
    // One rank per node: a flat ring over the network. A point-to-point
    // message uses one NIC.
    if (c == Collective::kSendRecv) return Flat(c, n, s.network.nic_bandwidth, net_lat);
    return Flat(c, n, net_bw, net_lat);
  }
  Link in = IntraLink(s, local);
  switch (c) {
    case Collective::kAllReduce:
      return {2 * (L - 1) / L / in.bandwidth + 2 * (N - 1) / N / net_bw,
              2 * (L - 1) * in.latency_s + 2 * (N - 1) * net_lat};
    case Collective::kAllGather:
    case Collective::kReduceScatter:
      return {(L - 1) / L / in.bandwidth + (N - 1) / N / net_bw,
              (L - 1) * in.latency_s + (N - 1) * net_lat};
    case Collective::kBroadcast:
      return {1 / std::min(in.bandwidth, net_bw), (L - 1) * in.latency_s + (N - 1) * net_lat};
    case Collective::kAllToAll:
      return {std::max(L * (dn - L) / dn / net_bw, (L - 1) / dn / in.bandwidth),
              (L - 1) * in.latency_s + (dn - L) * net_lat};
    case Collective::kSendRecv:
      // Two ranks never span nodes when a node holds more than one rank.
      return Flat(c, n, in.bandwidth, in.latency_s);
  }
  return {};
}

std::optional<LinearCost> CommModel::Fitted(Collective c, int group_size) const {
  auto it = fitted_.find({c, group_size});
  if (it == fitted_.end()) return std::nullopt;
  return it->second;
}

LinearCost CommModel::Coefficients(Collective c, int group_size) const {
  if (group_size <= 1) return {};
  if (std::optional<LinearCost> f = Fitted(c, group_size)) return *f;
  return Prior(c, group_size);
}

double CommModel::Time(Collective c, int64_t bytes, int group_size) const {
  if (group_size <= 1) return 0;
  return Coefficients(c, group_size).At(bytes);
}

absl::Status CommModel::Fit(std::span<const CommSample> samples, std::vector<std::string>* notes) {
  std::map<std::pair<Collective, int>, std::vector<std::pair<double, double>>> groups;
  for (const CommSample& s : samples) {
    ASSIGN_OR_RETURN(Collective c, ParseCollective(s.collective));
    if (s.group_size < 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "comm sample for ", s.collective, ": group_size must be >= 2, got ", s.group_size));
    }
    groups[{c, s.group_size}].push_back({static_cast<double>(s.bytes), s.seconds});
  }
  std::map<std::pair<Collective, int>, LinearCost> fitted;
  for (const auto& [key, points] : groups) {
    std::set<double> sizes;
    for (const auto& p : points) sizes.insert(p.first);
    if (sizes.size() >= 2) {
      absl::StatusOr<LinearCost> f = FitLinear(points);
      if (!f.ok() && notes != nullptr) {
        LinearCost flat{.seconds_per_byte = Prior(key.first, key.second).seconds_per_byte};
        for (const auto& [x, t] : points) flat.overhead_s += std::max(0.0, t - flat.seconds_per_byte * x);
        flat.overhead_s /= static_cast<double>(points.size());
        fitted[key] = flat;
        notes->push_back(absl::StrCat(std::string(CollectiveName(key.first)), " over ", key.second,
                                      " ranks: ", f.status().message(), "; priced with the prior's "
                                      "bandwidth and the measured latency, ", flat.overhead_s * 1e6, " us"));
        continue;
      }
      if (!f.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(std::string(CollectiveName(key.first)), " over ",
                                                       key.second, " ranks: ",
                                                       std::string(f.status().message())));
      }
      fitted[key] = *f;
      continue;
    }
    // One size measured: keep the prior's shape, scaled to the measurement.
    LinearCost prior = Prior(key.first, key.second);
    double mean = 0;
    for (const auto& p : points) mean += p.second;
    mean /= points.size();
    double at = prior.At(static_cast<int64_t>(points[0].first));
    if (at > 0 && mean > 0) {
      double k = mean / at;
      fitted[key] = {prior.seconds_per_byte * k, prior.overhead_s * k};
    }
  }
  for (auto& [key, f] : fitted) fitted_[key] = f;
  return absl::OkStatus();
}

std::string CommProfileKey(const ClusterSpec& spec) {
  return absl::StrCat(spec.name, ":", spec.device.kind);
}

absl::StatusOr<CommModel> CommModelFromStore(const ClusterSpec& spec, const ProfileStore* store) {
  CommModel m(spec);
  if (store == nullptr) return m;
  std::vector<CommSample> samples = store->GetComm(CommProfileKey(spec));
  std::vector<std::string> notes;
  RETURN_IF_ERROR(m.Fit(samples, &notes));
  for (const std::string& n : notes) LOG(WARNING) << "comm model of " << spec.name << ": " << n;
  return m;
}

double ComputeSlowdownDuringComm(const ClusterSpec& spec) {
  if (!spec.IsCpu()) return 1.0;
  const double cores = spec.cpu.cores_per_node;
  const double ranks = std::min(spec.num_ranks, spec.devices_per_node);
  const double compute = ranks * spec.cpu.threads_per_rank;
  const double during = ranks * (spec.cpu.threads_per_rank + spec.cpu.comm_threads_per_rank);
  return std::max(1.0, during / cores) / std::max(1.0, compute / cores);
}

double CommSlowdownDuringCompute(const ClusterSpec& spec) {
  if (!spec.IsCpu()) return 1.0;
  const double cores = spec.cpu.cores_per_node;
  const double ranks = std::min(spec.num_ranks, spec.devices_per_node);
  const double comm = ranks * spec.cpu.comm_threads_per_rank;
  const double during = ranks * (spec.cpu.threads_per_rank + spec.cpu.comm_threads_per_rank);
  return std::max(1.0, during / cores) / std::max(1.0, comm / cores);
}

}  // namespace braid::costmodel
