// Small cluster specs that costmodel tests build their expectations on. For
// tests only.
#ifndef BRAID_COSTMODEL_INTERNAL_TEST_CLUSTERS_H_
#define BRAID_COSTMODEL_INTERNAL_TEST_CLUSTERS_H_

#include "costmodel/cluster.h"
#include "gtest/gtest.h"

namespace braid::costmodel::testing {

// 2 nodes x 4 GPUs behind an NVLink switch (100 GB/s, 1 us); one 10 GB/s NIC
// per node, 5 us.
inline ClusterSpec TwoByFour() {
  ClusterSpec c;
  c.name = "two-by-four";
  c.num_nodes = 2;
  c.devices_per_node = 4;
  c.num_ranks = 8;
  c.device = {.kind = "test", .peak_flops_f32 = 1e12, .peak_flops_f16 = 1e12,
              .memory_bandwidth = 1e11, .memory_bytes = 1 << 30, .launch_overhead_s = 0};
  c.intra = {.kind = IntraLinkKind::kNvlinkSwitch, .bandwidth = 100e9, .latency_s = 1e-6};
  c.network = {.nic_bandwidth = 10e9, .nics_per_node = 1, .latency_s = 5e-6};
  EXPECT_TRUE(ValidateCluster(c).ok());
  return c;
}

}  // namespace braid::costmodel::testing

#endif  // BRAID_COSTMODEL_INTERNAL_TEST_CLUSTERS_H_
