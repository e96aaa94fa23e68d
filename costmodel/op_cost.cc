#include "costmodel/op_cost.h"

#include "costmodel/profile_export.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "costmodel/cost_check.h"
#include "glog/logging.h"
#include "graph/ops.h"

namespace braid::costmodel {
namespace {

constexpr char kBraidVersion[] = "0.1.0";

graph::DType ComputeDType(const graph::Graph& g, const graph::Op& op) {
  if (!op.outputs.empty()) return g.tensor(op.outputs[0]).dtype;
  if (!op.inputs.empty()) return g.tensor(op.inputs[0]).dtype;
  return graph::DType::kF32;
}

bool IsHalf(graph::DType d) { return d == graph::DType::kF16 || d == graph::DType::kBF16; }

}  // namespace

std::string_view TimeSourceName(TimeSource s) {
  switch (s) {
    case TimeSource::kMeasured: return "measured";
    case TimeSource::kGnn: return "gnn";
    case TimeSource::kCorrectedRoofline: return "corrected_roofline";
    case TimeSource::kPrior: return "prior";
  }
  return "?";
}

bool IsCommunicationOp(const graph::Op& op) {
  return op.phase == graph::Phase::kCommunication || graph::IsCollectiveKind(op.kind);
}

bool IsLibraryOp(const graph::Op& op) { return graph::IsLibraryKind(op.kind); }

ClusterCostModel::ClusterCostModel(ClusterSpec spec, ProfileStore* store,
                                   FusedOpEstimator* estimator, CommModel comm,
                                   RooflineParams params)
    : spec_(std::move(spec)),
      store_(store),
      estimator_(estimator),
      backend_(&BackendFor(spec_)),
      comm_(std::move(comm)),
      params_(params) {
  if (store_ != nullptr && spec_.IsCpu()) {
    std::optional<ProfileSample> s = store_->Get({spec_.device.kind, kBucketPackOp, kPerByteSignature});
    if (s.has_value() && s->median_s > 0) pack_s_per_byte_ = s->median_s;
    std::optional<ProfileSample> n = store_->Get({spec_.device.kind, kRuntimeNodeOp, kPerNodeSignature});
    if (n.has_value() && n->median_s > 0) node_overhead_s_ = n->median_s;
  }
}

double ClusterCostModel::RooflineTime(const graph::Graph& g,
                                      std::span<const graph::OpId> ops) const {
  const RooflineParts p = Parts(g, ops);
  if (p.members == 0) return 0;
  const double mem_s = p.bytes / (spec_.device.memory_bandwidth * params_.bandwidth_efficiency);
  return std::max(p.flop_s, mem_s) + spec_.device.launch_overhead_s;
}

ClusterCostModel::RooflineParts ClusterCostModel::Parts(const graph::Graph& g,
                                                        std::span<const graph::OpId> ops) const {
  const DeviceSpec& dev = spec_.device;
  double flop_s = 0;
  int members = 0;
  for (graph::OpId id : ops) {
    const graph::Op& op = g.op(id);
    if (IsCommunicationOp(op)) continue;
    ++members;
    const graph::OpCategory cat = graph::CategoryOf(op.kind);
    const bool half = IsHalf(ComputeDType(g, op));
    double rate = dev.peak_flops_f32;
    if (cat == graph::OpCategory::kMatMul || cat == graph::OpCategory::kRecurrent) {
      rate = (half ? dev.peak_flops_f16 : dev.peak_flops_f32) * params_.matmul_efficiency;
    } else if (cat == graph::OpCategory::kConv) {
      rate = (half ? dev.peak_flops_f16 : dev.peak_flops_f32) * params_.conv_efficiency;
    }
    flop_s += op.flops / rate;
  }
  if (members == 0) return {};
  double bytes = 0;
  if (ops.size() == 1) {
    const graph::Op& op = g.op(ops[0]);
    bytes = static_cast<double>(op.bytes_read + op.bytes_written);
  } else {
    std::vector<graph::OpId> group(ops.begin(), ops.end());
    std::sort(group.begin(), group.end());
    auto in_group = [&](graph::OpId o) {
      return o != graph::kNoId && std::binary_search(group.begin(), group.end(), o);
    };
    std::vector<graph::TensorId> boundary;
    for (graph::OpId id : group) {
      const graph::Op& op = g.op(id);
      if (IsCommunicationOp(op)) continue;
      for (graph::TensorId t : op.inputs) {
        if (!in_group(g.tensor(t).producer)) boundary.push_back(t);
      }
      for (graph::TensorId t : op.outputs) {
        if (graph::LeavesGroup(g, t, in_group)) boundary.push_back(t);
      }
    }
    std::sort(boundary.begin(), boundary.end());
    boundary.erase(std::unique(boundary.begin(), boundary.end()), boundary.end());
    for (graph::TensorId t : boundary) bytes += static_cast<double>(g.tensor(t).Bytes());
  }
  return {flop_s, bytes, members};
}

std::optional<double> ClusterCostModel::Measured(const graph::Graph& g, graph::OpId op) const {
  return Lookup(ProfileKey{spec_.device.kind, g.op(op).type, OpSignature(g, op)});
}

std::optional<double> ClusterCostModel::MeasuredFused(const graph::Graph& g,
                                                      std::span<const graph::OpId> ops) const {
  return Lookup(ProfileKey{spec_.device.kind, kFusedOp, FusedSignature(g, ops)});
}

std::optional<double> ClusterCostModel::Lookup(const ProfileKey& key) const {
  if (store_ == nullptr) {
    // Without a store (--db none), the measurements the repository ships.
    std::optional<ProfileSample> s = ShippedProfiles::Get().Find(key);
    return s ? std::optional<double>(s->median_s) : std::nullopt;
  }
  std::string cache_key = absl::StrCat(key.op_type, "\n", key.signature);
  const int64_t gen = store_->Generation();
  std::lock_guard<std::mutex> lock(mu_);
  if (gen != cache_generation_) {
    cache_.clear();
    cache_generation_ = gen;
  }
  auto it = cache_.find(cache_key);
  if (it != cache_.end()) return it->second;
  std::optional<double> t;
  if (std::optional<ProfileSample> s = store_->Get(key)) t = s->median_s;
  cache_.emplace(std::move(cache_key), t);
  return t;
}

OpTime ClusterCostModel::ComputeTime(const graph::Graph& g, std::span<const graph::OpId> ops) {
  if (ops.empty()) return {0, TimeSource::kPrior};
  if (ops.size() == 1) {
    if (IsCommunicationOp(g.op(ops[0]))) return {0, TimeSource::kPrior};
    if (std::optional<double> t = Measured(g, ops[0])) return {*t, TimeSource::kMeasured};
    return {RooflineTime(g, ops), TimeSource::kPrior};
  }
  // A stored fused profile is checked as well: the profile database is a
  // file on disk, and larger groups than CheckCostsFinite's pairs reach
  // here only during a search.
  if (std::optional<double> t = MeasuredFused(g, ops); t.has_value() && PlausibleSeconds(*t)) {
    return {*t, TimeSource::kMeasured};
  }
  if (estimator_ != nullptr) {
    // An estimate is a model's output, not a measurement: one that is not a
    // usable time falls through to the corrected roofline rather than
    // reaching a simulator (the GNN estimator declines these itself; this
    // holds for any estimator).
    if (std::optional<double> t = estimator_->Estimate(g, ops)) {
      if (*t > 0 && PlausibleSeconds(*t)) return {*t, TimeSource::kGnn};
      LOG_FIRST_N(WARNING, 1) << "fused-op estimator " << estimator_->Version() << " estimated "
                              << *t << " s for a fused kernel; using the corrected roofline";
    }
  }
  return CorrectedRoofline(g, ops);
}

OpTime ClusterCostModel::CorrectedRoofline(const graph::Graph& g,
                                           std::span<const graph::OpId> ops) const {
  std::vector<graph::OpId> group(ops.begin(), ops.end());
  std::sort(group.begin(), group.end());
  group.erase(std::unique(group.begin(), group.end()), group.end());
  auto in_group = [&](graph::OpId o) {
    return o != graph::kNoId && std::binary_search(group.begin(), group.end(), o);
  };
  const DeviceSpec& dev = spec_.device;
  double unfused_s = 0;
  double library_s = 0;  // the library call's own measured time
  int measured = 0, kernels = 0;
  double saved_bytes = 0;
  // What the measured memory-bound members moved and took: their
  // bandwidth includes the cache residency of their tensors, which the
  // datasheet figure does not (small tensors stay in L2 between kernels).
  double member_bytes = 0, member_s = 0;
  for (graph::OpId id : group) {
    const graph::Op& op = g.op(id);
    if (IsCommunicationOp(op)) continue;
    ++kernels;
    std::optional<double> t = Measured(g, id);
    if (t.has_value()) {
      ++measured;
      // A library call's own time bounds its fused kernel from below:
      // epilogues do not make the contraction cheaper.
      if (IsLibraryOp(op)) {
        library_s = std::max(library_s, *t);
      } else {
        member_bytes += static_cast<double>(op.bytes_read + op.bytes_written);
        member_s += std::max(*t - dev.launch_overhead_s, 0.1 * *t);
      }
    }
    unfused_s += t.has_value() ? *t : RooflineTime(g, std::span<const graph::OpId>(&id, 1));
    // What fusing removes: the write of an output no one outside reads, and
    // every read of it by a member.
    for (graph::TensorId tid : op.outputs) {
      const graph::Tensor& tensor = g.tensor(tid);
      const int64_t inner_reads =
          std::count_if(tensor.consumers.begin(), tensor.consumers.end(), in_group);
      const double b = static_cast<double>(tensor.Bytes());
      saved_bytes += b * static_cast<double>(inner_reads) +
                     (graph::LeavesGroup(g, tid, in_group) ? 0.0 : b);
    }
  }
  if (measured == 0 || kernels < 2) return {RooflineTime(g, group), TimeSource::kPrior};
  double bw = dev.memory_bandwidth * params_.bandwidth_efficiency;
  // At most kCacheBandwidthFactor times the datasheet's: an L2 cache moves
  // 64 B per cycle per core, about ten times a core's DRAM bandwidth; a
  // faster figure is a measurement error, not a cache.
  constexpr double kCacheBandwidthFactor = 10;
  if (member_s > 0 && member_bytes > 0) {
    bw = std::clamp(member_bytes / member_s, bw, kCacheBandwidthFactor * bw);
  }
  const RooflineParts p = Parts(g, group);
  const double floor_s =
      std::max(std::max(p.flop_s, p.bytes / bw) + dev.launch_overhead_s, library_s);
  const double saved_s = saved_bytes / bw + (kernels - 1) * dev.launch_overhead_s;
  return {std::max(floor_s, unfused_s - saved_s), TimeSource::kCorrectedRoofline};
}

double ClusterCostModel::CollectiveTime(Collective c, int64_t bytes, int group_size) {
  return comm_.Time(c, bytes, group_size);
}

double ClusterCostModel::ComputeSlowdownDuringComm() const {
  return costmodel::ComputeSlowdownDuringComm(spec_);
}

double ClusterCostModel::CommSlowdownDuringCompute() const {
  return costmodel::CommSlowdownDuringCompute(spec_);
}

double ClusterCostModel::BucketPackTime(int64_t bytes) const {
  if (!spec_.IsCpu() || bytes <= 0) return 0.0;
  if (pack_s_per_byte_.has_value()) return *pack_s_per_byte_ * static_cast<double>(bytes);
  if (!(spec_.device.memory_bandwidth > 0)) return 0.0;
  return 2.0 * static_cast<double>(bytes) / spec_.device.memory_bandwidth;
}

void ClusterCostModel::PrefetchFused(const graph::Graph& g,
                                     std::span<const std::vector<graph::OpId>> groups) {
  if (estimator_ == nullptr) return;
  std::vector<std::vector<graph::OpId>> unmeasured;
  for (const std::vector<graph::OpId>& grp : groups) {
    if (grp.size() >= 2 && !MeasuredFused(g, grp).has_value()) unmeasured.push_back(grp);
  }
  if (!unmeasured.empty()) estimator_->Prefetch(g, unmeasured);
}

namespace {
std::mutex provider_mu;
FusedOpEstimatorProvider& Provider() {
  static auto* p = new FusedOpEstimatorProvider();
  return *p;
}
}  // namespace

void SetFusedOpEstimatorProvider(FusedOpEstimatorProvider provider) {
  std::lock_guard<std::mutex> lock(provider_mu);
  Provider() = std::move(provider);
}

FusedOpEstimator* FusedOpEstimatorFor(const ClusterSpec& cluster, const std::string& profile_db) {
  FusedOpEstimatorProvider p;
  {
    std::lock_guard<std::mutex> lock(provider_mu);
    p = Provider();
  }
  return p ? p(cluster, profile_db) : nullptr;
}

std::string ClusterCostModel::Generation() const {
  return absl::StrCat("braid-", kBraidVersion, "/profiles-",
                      store_ != nullptr ? absl::StrCat(store_->Generation()) : "none",
                      "/estimator-", estimator_ != nullptr ? estimator_->Version() : "none");
}

ProfileCoverage ClusterCostModel::CountProfiled(const graph::Graph& g) const {
  ProfileCoverage c;
  for (graph::OpId id = 0; id < g.num_ops(); ++id) {
    if (IsCommunicationOp(g.op(id))) continue;
    if (Measured(g, id).has_value()) {
      ++c.measured;
    } else {
      ++c.estimated;
    }
  }
  return c;
}

}  // namespace braid::costmodel
