#include "server/cluster_convert.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace braid::server {

using braid::v1::LinkSpec;

absl::StatusOr<costmodel::ClusterSpec> ClusterFromProto(const braid::v1::ClusterSpec& p) {
  costmodel::ClusterSpec c;
  c.name = p.name();
  if (c.name.empty()) return absl::InvalidArgumentError("cluster_spec.name must be set");
  c.num_nodes = p.nodes();
  c.devices_per_node = p.devices_per_node();
  if (c.num_nodes < 1) return absl::InvalidArgumentError("cluster_spec.nodes must be >= 1");
  if (c.devices_per_node < 1) {
    return absl::InvalidArgumentError("cluster_spec.devices_per_node must be >= 1");
  }
  c.num_ranks = p.num_ranks() == 0 ? c.num_nodes * c.devices_per_node : p.num_ranks();
  const braid::v1::DeviceSpec& d = p.device();
  c.device.kind = d.kind();
  c.device.peak_flops_f32 = d.peak_flops_fp32();
  c.device.peak_flops_f16 = d.peak_flops_fp16();
  c.device.memory_bandwidth = d.memory_bandwidth_bytes_per_s();
  c.device.memory_bytes = d.memory_bytes();
  c.device.launch_overhead_s = d.kernel_launch_s();
  const LinkSpec& l = p.intra_node();
  switch (l.kind()) {
    case LinkSpec::NVLINK_SWITCH: c.intra.kind = costmodel::IntraLinkKind::kNvlinkSwitch; break;
    case LinkSpec::NVLINK_ISLANDS: c.intra.kind = costmodel::IntraLinkKind::kNvlinkIslands; break;
    case LinkSpec::PCIE: c.intra.kind = costmodel::IntraLinkKind::kPcie; break;
    case LinkSpec::LOOPBACK: c.intra.kind = costmodel::IntraLinkKind::kLoopback; break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("cluster_spec.intra_node.kind must be set (got ", l.kind(), ")"));
  }
  c.intra.bandwidth = l.bandwidth_bytes_per_s();
  c.intra.latency_s = l.latency_s();
  c.intra.island_size = l.island_size();
  c.intra.cross_island_bandwidth = l.inter_island_bandwidth_bytes_per_s();
  c.intra.cross_island_latency_s = l.inter_island_latency_s();
  c.network.nic_bandwidth = p.inter_node().nic_bandwidth_bytes_per_s();
  c.network.nics_per_node = p.inter_node().nics_per_node();
  c.network.latency_s = p.inter_node().latency_s();
  c.cpu.cores_per_node = p.cores_per_node();
  c.cpu.threads_per_rank = p.threads_per_rank() == 0 ? 1 : p.threads_per_rank();
  c.cpu.comm_threads_per_rank = p.comm_threads_per_rank() == 0 ? 1 : p.comm_threads_per_rank();
  if (absl::Status s = costmodel::ValidateCluster(c); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("cluster_spec: ", s.message()));
  }
  return c;
}

braid::v1::ClusterSpec ClusterToProto(const costmodel::ClusterSpec& c) {
  braid::v1::ClusterSpec p;
  p.set_name(c.name);
  p.set_nodes(c.num_nodes);
  p.set_devices_per_node(c.devices_per_node);
  p.set_num_ranks(c.num_ranks);
  braid::v1::DeviceSpec* d = p.mutable_device();
  d->set_kind(c.device.kind);
  d->set_peak_flops_fp32(c.device.peak_flops_f32);
  d->set_peak_flops_fp16(c.device.peak_flops_f16);
  d->set_memory_bandwidth_bytes_per_s(c.device.memory_bandwidth);
  d->set_memory_bytes(c.device.memory_bytes);
  d->set_kernel_launch_s(c.device.launch_overhead_s);
  LinkSpec* l = p.mutable_intra_node();
  switch (c.intra.kind) {
    case costmodel::IntraLinkKind::kNvlinkSwitch: l->set_kind(LinkSpec::NVLINK_SWITCH); break;
    case costmodel::IntraLinkKind::kNvlinkIslands: l->set_kind(LinkSpec::NVLINK_ISLANDS); break;
    case costmodel::IntraLinkKind::kPcie: l->set_kind(LinkSpec::PCIE); break;
    case costmodel::IntraLinkKind::kLoopback: l->set_kind(LinkSpec::LOOPBACK); break;
  }
  l->set_bandwidth_bytes_per_s(c.intra.bandwidth);
  l->set_latency_s(c.intra.latency_s);
  l->set_island_size(c.intra.island_size);
  l->set_inter_island_bandwidth_bytes_per_s(c.intra.cross_island_bandwidth);
  l->set_inter_island_latency_s(c.intra.cross_island_latency_s);
  p.mutable_inter_node()->set_nic_bandwidth_bytes_per_s(c.network.nic_bandwidth);
  p.mutable_inter_node()->set_nics_per_node(c.network.nics_per_node);
  p.mutable_inter_node()->set_latency_s(c.network.latency_s);
  p.set_cores_per_node(c.cpu.cores_per_node);
  p.set_threads_per_rank(c.cpu.threads_per_rank);
  p.set_comm_threads_per_rank(c.cpu.comm_threads_per_rank);
  return p;
}

}  // namespace braid::server
