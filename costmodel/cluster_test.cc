#include "costmodel/cluster.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace braid::costmodel {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(ClusterTest, PresetsCarryDatasheetFigures) {
  absl::StatusOr<ClusterSpec> a = LoadCluster("disco-a");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->Capacity(), 12);
  EXPECT_EQ(a->num_ranks, 12);
  EXPECT_DOUBLE_EQ(a->device.peak_flops_f32, 11.34e12);
  EXPECT_DOUBLE_EQ(a->device.memory_bandwidth, 484e9);
  EXPECT_NEAR(a->intra.bandwidth, 15.754e9, 1e6);  // PCIe 3.0 x16
  EXPECT_DOUBLE_EQ(a->network.nic_bandwidth, 12.5e9);

  absl::StatusOr<ClusterSpec> b = LoadCluster("disco-b");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->Capacity(), 64);
  EXPECT_DOUBLE_EQ(b->device.peak_flops_f16, 65e12);

  absl::StatusOr<ClusterSpec> s = LoadCluster("summit");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->devices_per_node, 6);
  EXPECT_EQ(s->intra.kind, IntraLinkKind::kNvlinkIslands);
  EXPECT_EQ(s->intra.island_size, 3);
  EXPECT_EQ(s->network.nics_per_node, 2);

  absl::StatusOr<ClusterSpec> h = LoadCluster("dgx-h100");
  ASSERT_TRUE(h.ok());
  EXPECT_DOUBLE_EQ(h->intra.bandwidth, 450e9);
  EXPECT_EQ(h->network.nics_per_node, 8);
  EXPECT_DOUBLE_EQ(h->network.nic_bandwidth, 50e9);

  absl::StatusOr<ClusterSpec> c = LoadCluster("cpu-local");
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->IsCpu());
  EXPECT_EQ(c->device.kind, LocalCpuDeviceKind());
  EXPECT_EQ(c->intra.kind, IntraLinkKind::kLoopback);

  EXPECT_EQ(LoadCluster("no-such-cluster").status().code(), absl::StatusCode::kNotFound);
}

constexpr char kXeonCpuinfo[] =
    "processor\t: 0\n"
    "vendor_id\t: GenuineIntel\n"
    "model name\t:   Intel(R) Xeon(R)\xc2\xae  Platinum\t8480+ @ 2.0GHz: rev B  \n"
    "flags\t\t: fpu sse sse2 avx avx2 avx512f avx512bw\n"
    "\n"
    "processor\t: 1\n"
    "model name\t: Other CPU\n"
    "flags\t\t: fpu sse\n";

TEST(ClusterTest, CpuDeviceKindNamesIsaAndModel) {
  // The first processor's model, whitespace collapsed, ':' and non-ASCII gone.
  EXPECT_EQ(CpuDeviceKindFrom(kXeonCpuinfo, "x86_64", nullptr),
            "cpu-1t:x86_64-avx512:Intel(R) Xeon(R) Platinum 8480+ @ 2.0GHz rev B");
  EXPECT_EQ(CpuDeviceKindFrom("model name : AMD EPYC 7763\nflags : sse avx2 avx512fx\n",
                              "x86_64", nullptr),
            "cpu-1t:x86_64-avx2:AMD EPYC 7763");  // whole words only
  EXPECT_EQ(CpuDeviceKindFrom("model name : Old\nflags : fpu sse sse2\n", "x86_64", nullptr),
            "cpu-1t:x86_64-sse:Old");
  EXPECT_EQ(CpuDeviceKindFrom("", "x86_64", nullptr), "cpu-1t:x86_64-sse:unknown");

  // aarch64: no model name on most kernels; the CPU part stands in.
  constexpr char kArm[] =
      "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd sve sve2\n"
      "CPU implementer\t: 0x41\nCPU part\t: 0xd40\n";
  EXPECT_EQ(CpuDeviceKindFrom(kArm, "aarch64", nullptr), "cpu-1t:aarch64-sve:CPU part 0xd40");
  EXPECT_EQ(CpuDeviceKindFrom("Features : fp asimd\nmodel name : Neoverse-N1\n", "aarch64",
                              nullptr),
            "cpu-1t:aarch64-neon:Neoverse-N1");
  EXPECT_EQ(CpuDeviceKindFrom("Features : fp asimd\n", "aarch64", nullptr),
            "cpu-1t:aarch64-neon:unknown");
  // Other machines: uname's machine name.
  EXPECT_EQ(CpuDeviceKindFrom("model name : POWER9\n", "ppc64le", nullptr),
            "cpu-1t:ppc64le:POWER9");

  // At most 64 characters of model, no trailing space left by the cut.
  const std::string long_model = std::string(63, 'x') + " yyyy";
  EXPECT_EQ(CpuDeviceKindFrom("model name : " + long_model + "\n", "riscv64", nullptr),
            "cpu-1t:riscv64:" + std::string(63, 'x'));
}

TEST(ClusterTest, CpuDeviceKindOverride) {
  // BRAID_CPU_DEVICE_KIND pins the kind verbatim (colons kept), sanitised.
  EXPECT_EQ(CpuDeviceKindFrom(kXeonCpuinfo, "x86_64", "cpu-1t"), "cpu-1t");
  EXPECT_EQ(CpuDeviceKindFrom(kXeonCpuinfo, "x86_64", "  cpu-1t:lab \t box\n"),
            "cpu-1t:lab box");
  EXPECT_EQ(CpuDeviceKindFrom(kXeonCpuinfo, "x86_64", std::string(200, 'k').c_str()),
            std::string(128, 'k'));
  // Empty (or nothing left after sanitising): detected as without it.
  for (const char* empty : {"", " \t", "\x01\xff"}) {
    EXPECT_EQ(CpuDeviceKindFrom(kXeonCpuinfo, "x86_64", empty),
              CpuDeviceKindFrom(kXeonCpuinfo, "x86_64", nullptr));
  }
}

TEST(ClusterTest, LocalCpuDeviceKindIsStableAndPrintable) {
  const std::string& kind = LocalCpuDeviceKind();
  EXPECT_EQ(&kind, &LocalCpuDeviceKind());  // computed once
  EXPECT_THAT(kind, StartsWith("cpu-"));
  for (char ch : kind) EXPECT_TRUE(ch >= 0x20 && ch <= 0x7e) << kind;
  const char* env = std::getenv("BRAID_CPU_DEVICE_KIND");
  if (env == nullptr || *env == '\0') {
    EXPECT_THAT(kind, StartsWith("cpu-1t:"));
    EXPECT_EQ(std::count(kind.begin(), kind.end(), ':'), 2) << kind;
  }
}

TEST(ClusterTest, JsonRoundTripAndFile) {
  for (const char* name : {"disco-a", "disco-b", "summit", "dgx-h100", "cpu-local"}) {
    ClusterSpec spec = *ClusterPreset(name);
    absl::StatusOr<ClusterSpec> back = ParseClusterJson(ClusterToJson(spec));
    ASSERT_TRUE(back.ok()) << name << ": " << back.status();
    EXPECT_EQ(ClusterFingerprint(*back), ClusterFingerprint(spec)) << name;
  }
  std::string path = ::testing::TempDir() + "/cluster_test.json";
  {
    std::ofstream out(path);
    out << ClusterToJson(*ClusterPreset("summit"));
  }
  absl::StatusOr<ClusterSpec> f = LoadCluster(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->name, "summit");
  std::remove(path.c_str());
}

// Mutates one field of a valid JSON spec and expects InvalidArgument naming it.
void ExpectRejected(const std::function<void(nlohmann::json&)>& mutate, const std::string& field) {
  nlohmann::json j = nlohmann::json::parse(ClusterToJson(*ClusterPreset("summit")));
  mutate(j);
  absl::StatusOr<ClusterSpec> c = ParseClusterJson(j.dump());
  ASSERT_FALSE(c.ok()) << field;
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("'" + field + "'"));
}

TEST(ClusterTest, ImpossibleSpecsNameTheField) {
  ExpectRejected([](auto& j) { j["num_nodes"] = 0; }, "num_nodes");
  ExpectRejected([](auto& j) { j["devices_per_node"] = -1; }, "devices_per_node");
  ExpectRejected([](auto& j) { j["num_ranks"] = 1000000; }, "num_ranks");
  ExpectRejected([](auto& j) { j["intra_node"]["bandwidth"] = -5.0; }, "intra_node.bandwidth");
  ExpectRejected([](auto& j) { j["intra_node"]["island_size"] = 4; }, "intra_node.island_size");
  ExpectRejected([](auto& j) { j["network"]["nic_bandwidth"] = 0; }, "network.nic_bandwidth");
  ExpectRejected([](auto& j) { j["device"].erase("peak_flops_f32"); }, "device.peak_flops_f32");
  ExpectRejected([](auto& j) { j["device"]["memory_bytes"] = "lots"; }, "device.memory_bytes");
  ExpectRejected([](auto& j) { j["intra_node"]["kind"] = "carrier-pigeon"; }, "intra_node.kind");
  EXPECT_EQ(ParseClusterJson("{not json").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ClusterTest, PhysicallyImpossibleValuesAreRefused) {
  // Slower than a floppy drive, faster than any machine, or so many ranks an
  // int would wrap: each would make the cost model's times overflow.
  ExpectRejected([](auto& j) { j["intra_node"]["bandwidth"] = 1e-300; }, "intra_node.bandwidth");
  ExpectRejected([](auto& j) { j["intra_node"]["bandwidth"] = 1e30; }, "intra_node.bandwidth");
  ExpectRejected([](auto& j) { j["device"]["peak_flops_f32"] = 1e-308; }, "device.peak_flops_f32");
  ExpectRejected([](auto& j) { j["device"]["peak_flops_f16"] = 1e300; }, "device.peak_flops_f16");
  ExpectRejected([](auto& j) { j["device"]["memory_bandwidth"] = 1.0; }, "device.memory_bandwidth");
  ExpectRejected([](auto& j) { j["device"]["launch_overhead_s"] = 1e9; }, "device.launch_overhead_s");
  ExpectRejected([](auto& j) { j["network"]["latency_s"] = 1e300; }, "network.latency_s");
  ExpectRejected([](auto& j) { j["network"]["nics_per_node"] = 1 << 20; }, "network.nics_per_node");
  ExpectRejected([](auto& j) {
    j["num_nodes"] = 65537;
    j["devices_per_node"] = 65537;
  }, "devices_per_node");
  ExpectRejected([](auto& j) { j["num_nodes"] = int64_t{1} << 40; }, "num_nodes");
  // 65537 x 65537 no longer wraps to a small capacity.
  ClusterSpec big = *ClusterPreset("disco-a");
  big.num_nodes = 65537;
  big.devices_per_node = 65537;
  EXPECT_EQ(big.Capacity(), int64_t{65537} * 65537);
  EXPECT_FALSE(ValidateCluster(big).ok());
  // Every preset is within the bounds.
  for (const char* p : {"disco-a", "disco-b", "summit", "dgx-h100", "cpu-local"}) {
    EXPECT_TRUE(ClusterPreset(p).ok()) << p;
  }
  EXPECT_FALSE(WithRanks(*ClusterPreset("cpu-local"), 1 << 21).ok());
}

TEST(ClusterTest, WithRanksFillsNodesInOrder) {
  ClusterSpec a = *ClusterPreset("disco-a");
  absl::StatusOr<ClusterSpec> five = WithRanks(a, 5);
  ASSERT_TRUE(five.ok());
  EXPECT_EQ(five->num_nodes, 3);
  EXPECT_EQ(five->devices_per_node, 2);
  EXPECT_EQ(five->num_ranks, 5);
  absl::StatusOr<ClusterSpec> one = WithRanks(a, 1);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->num_nodes, 1);
  absl::StatusOr<ClusterSpec> too_many = WithRanks(a, 13);
  EXPECT_EQ(too_many.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(too_many.status().message()), HasSubstr("capacity"));
  EXPECT_FALSE(WithRanks(a, 0).ok());

  ClusterSpec cpu = *ClusterPreset("cpu-local");
  absl::StatusOr<ClusterSpec> seven = WithRanks(cpu, 7);
  ASSERT_TRUE(seven.ok());
  EXPECT_EQ(seven->num_nodes, 1);
  EXPECT_EQ(seven->devices_per_node, 7);
  EXPECT_EQ(seven->num_ranks, 7);
  EXPECT_TRUE(ValidateCluster(*seven).ok());
}

TEST(ClusterTest, FingerprintIsStableAndSensitive) {
  ClusterSpec a = *ClusterPreset("dgx-h100");
  std::string fp = ClusterFingerprint(a);
  EXPECT_THAT(fp, StartsWith("dgx-h100-"));
  EXPECT_EQ(fp.size(), std::string("dgx-h100-").size() + 16);
  EXPECT_EQ(ClusterFingerprint(*ClusterPreset("dgx-h100")), fp);
  EXPECT_NE(ClusterFingerprint(*WithRanks(a, 8)), fp);
  a.network.latency_s *= 2;
  EXPECT_NE(ClusterFingerprint(a), fp);
}

}  // namespace
}  // namespace braid::costmodel
