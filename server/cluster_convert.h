// Conversion between the wire ClusterSpec (proto/braid/v1/cluster.proto) and
// the cost model's costmodel::ClusterSpec. The proto names fields by unit
// (bytes_per_s, _s); the struct uses SI units too, so values carry over.
//
//   absl::StatusOr<costmodel::ClusterSpec> c = ClusterFromProto(req.cluster_spec());
//   braid::v1::ClusterSpec wire = ClusterToProto(*c);
#ifndef BRAID_SERVER_CLUSTER_CONVERT_H_
#define BRAID_SERVER_CLUSTER_CONVERT_H_

#include "absl/status/statusor.h"
#include "braid/v1/cluster.pb.h"
#include "costmodel/cluster.h"

namespace braid::server {

// Validates the result (costmodel::ValidateCluster); errors are
// InvalidArgument naming the field as "cluster_spec.<field>".
// num_ranks 0 means every device; threads 0 mean 1.
absl::StatusOr<costmodel::ClusterSpec> ClusterFromProto(const braid::v1::ClusterSpec& p);

braid::v1::ClusterSpec ClusterToProto(const costmodel::ClusterSpec& c);

}  // namespace braid::server

#endif  // BRAID_SERVER_CLUSTER_CONVERT_H_
