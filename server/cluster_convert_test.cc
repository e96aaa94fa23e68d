// Round trips between the wire ClusterSpec and costmodel::ClusterSpec.
#include "server/cluster_convert.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace braid::server {
namespace {

using ::testing::HasSubstr;

TEST(ClusterConvertTest, PresetsRoundTripExactly) {
  for (const char* name : {"disco-a", "disco-b", "summit", "dgx-h100", "cpu-local"}) {
    costmodel::ClusterSpec c = *costmodel::ClusterPreset(name);
    absl::StatusOr<costmodel::ClusterSpec> back = ClusterFromProto(ClusterToProto(c));
    ASSERT_TRUE(back.ok()) << name << ": " << back.status();
    EXPECT_EQ(costmodel::ClusterFingerprint(*back), costmodel::ClusterFingerprint(c)) << name;
  }
}

TEST(ClusterConvertTest, ImpossibleClusterNamesTheField) {
  braid::v1::ClusterSpec p = ClusterToProto(*costmodel::ClusterPreset("dgx-h100"));
  p.mutable_intra_node()->set_bandwidth_bytes_per_s(-1);
  absl::Status s = ClusterFromProto(p).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("cluster_spec"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("bandwidth"));
  p = ClusterToProto(*costmodel::ClusterPreset("dgx-h100"));
  p.mutable_intra_node()->set_kind(braid::v1::LinkSpec::KIND_UNSPECIFIED);
  EXPECT_THAT(std::string(ClusterFromProto(p).status().message()),
              HasSubstr("cluster_spec.intra_node.kind"));
}

}  // namespace
}  // namespace braid::server
