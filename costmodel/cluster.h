// The cluster a plan is made for: nodes x devices per node, what one device
// can do (peak FLOP/s, memory bandwidth and capacity, kernel-launch overhead),
// how devices in a node are linked and how nodes are networked. The cost model
// derives its analytic priors (roofline op times, alpha-beta collective times)
// from it; measured profiles override those priors.
//
//   absl::StatusOr<ClusterSpec> c = LoadCluster("dgx-h100");     // a preset
//   absl::StatusOr<ClusterSpec> f = LoadCluster("/etc/braid/cluster.json");
//   absl::StatusOr<ClusterSpec> four = WithRanks(*c, 4);          // first 4 GPUs
//   std::string fp = ClusterFingerprint(*four);                   // plan-cache key
//
// Presets: disco-a, disco-b (the DisCo paper's clusters A and B), summit,
// dgx-h100, cpu-local (ranks as one-thread processes on this machine; its
// device kind is LocalCpuDeviceKind(), see below).
//
// JSON schema (every field required unless marked optional; units SI: bytes,
// bytes/s, FLOP/s, seconds):
//   {
//     "name": "my-cluster",
//     "num_nodes": 2,
//     "devices_per_node": 8,
//     "num_ranks": 16,                         // optional, default nodes*devices
//     "device": {
//       "kind": "cuda:NVIDIA H100 80GB HBM3",  // profile-store device kind
//       "peak_flops_f32": 6.7e13,
//       "peak_flops_f16": 9.89e14,             // f16 and bf16
//       "memory_bandwidth": 3.35e12,
//       "memory_bytes": 85899345920,
//       "launch_overhead_s": 5e-6
//     },
//     "intra_node": {
//       "kind": "nvlink_switch",   // nvlink_switch | nvlink_islands | pcie | loopback
//       "bandwidth": 4.5e11,       // per direction, per device
//       "latency_s": 2e-6,
//       "island_size": 4,          // nvlink_islands only
//       "cross_island_bandwidth": 3.2e10,   // nvlink_islands only
//       "cross_island_latency_s": 3e-6      // nvlink_islands only
//     },
//     "network": {"nic_bandwidth": 5e10, "nics_per_node": 8, "latency_s": 5e-6},
//     "cpu": {                     // optional; CPU clusters (contention model)
//       "cores_per_node": 2, "threads_per_rank": 1, "comm_threads_per_rank": 1
//     }
//   }
// Invalid values (0 nodes, negative bandwidth, devices per node not divisible
// by the island size, ...) give InvalidArgument naming the field. Every rate,
// latency and count must also be physically plausible (kClusterBounds in
// cluster.cc: e.g. a link between 100 KB/s -- slower than a floppy drive --
// and 100 TB/s, a device between 1 MFLOP/s and 1 EFLOP/s, at most 2^20
// ranks), so that every time the cost model derives from a spec is finite.
#ifndef BRAID_COSTMODEL_CLUSTER_H_
#define BRAID_COSTMODEL_CLUSTER_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace braid::costmodel {

struct DeviceSpec {
  // Profile-store device kind: "cuda:<GPU name>", or for one CPU thread
  // "cpu-1t:<isa>:<model>" (LocalCpuDeviceKind()).
  std::string kind;
  double peak_flops_f32 = 0;    // FLOP/s
  double peak_flops_f16 = 0;    // FLOP/s, f16 and bf16 (tensor cores where present)
  double memory_bandwidth = 0;  // bytes/s
  int64_t memory_bytes = 0;
  double launch_overhead_s = 0;
  // GPUs: CUDA compute capability as major * 10 + minor (61 for sm_61);
  // 0 when unknown, and on CPUs. Optional in cluster files.
  int64_t compute_capability = 0;
};

enum class IntraLinkKind : uint8_t { kNvlinkSwitch, kNvlinkIslands, kPcie, kLoopback };
std::string_view IntraLinkKindName(IntraLinkKind k);  // "nvlink_switch", ...

struct IntraNodeLinks {
  IntraLinkKind kind = IntraLinkKind::kPcie;
  double bandwidth = 0;  // bytes/s per direction per device
  double latency_s = 0;
  // kNvlinkIslands: devices form islands of `island_size` fully linked at
  // `bandwidth`; traffic between islands goes at `cross_island_bandwidth`.
  int island_size = 0;
  double cross_island_bandwidth = 0;
  double cross_island_latency_s = 0;
};

struct NetworkSpec {
  double nic_bandwidth = 0;  // bytes/s per direction per NIC
  int nics_per_node = 1;
  double latency_s = 0;
};

// CPU clusters only: how many cores a node has and how ranks use them. The
// comm model derives the compute slowdown while Gloo runs from these.
struct CpuSpec {
  int cores_per_node = 0;  // 0: not a CPU cluster
  int threads_per_rank = 1;
  int comm_threads_per_rank = 1;  // Gloo threads busy while a collective runs
};

struct ClusterSpec {
  std::string name;
  int num_nodes = 1;
  int devices_per_node = 1;
  // Ranks in use; they fill nodes in order (node 0 gets ranks
  // 0..devices_per_node-1, ...). <= num_nodes * devices_per_node.
  int num_ranks = 1;
  DeviceSpec device;
  IntraNodeLinks intra;
  NetworkSpec network;
  CpuSpec cpu;

  // 64-bit: a spec is validated before its fields are trusted, and
  // 65537 x 65537 must not wrap to a small count.
  int64_t Capacity() const { return int64_t{num_nodes} * devices_per_node; }
  bool IsCpu() const { return cpu.cores_per_node > 0; }
};

// A preset name (see above) or the path of a JSON file in the schema above.
absl::StatusOr<ClusterSpec> LoadCluster(std::string_view preset_or_path);
// Parses and validates JSON text in the schema above.
absl::StatusOr<ClusterSpec> ParseClusterJson(std::string_view json_text);
// The preset of that name; NotFound for an unknown name.
absl::StatusOr<ClusterSpec> ClusterPreset(std::string_view name);
// InvalidArgument naming the first impossible field.
absl::Status ValidateCluster(const ClusterSpec& spec);

// The spec restricted to the first `n` ranks (nodes filled in order). GPU
// clusters: InvalidArgument when n exceeds the capacity. CPU clusters
// (cpu-local): any n >= 1 ranks on one node.
absl::StatusOr<ClusterSpec> WithRanks(const ClusterSpec& spec, int n);

// The spec as JSON in the schema above (round-trips through ParseClusterJson).
std::string ClusterToJson(const ClusterSpec& spec);

// A stable identifier of the spec: "<name>-<16 hex digits>" hashing every
// field (doubles printed with %.17g), so equal specs give equal strings.
std::string ClusterFingerprint(const ClusterSpec& spec);

// The profile-store device kind of one thread of this machine's CPU, what the
// cpu-local preset, the CPU profiler and CPU workers key profiles by:
// "cpu-1t:<isa>:<model>", e.g. "cpu-1t:x86_64-avx512:AMD EPYC", so profiles
// measured on one CPU are not used for another.
//   <isa>:   x86_64: "x86_64-avx512" (avx512f in /proc/cpuinfo's flags),
//            "x86_64-avx2" (avx2), else "x86_64-sse"; aarch64: "aarch64-sve"
//            (sve in Features), else "aarch64-neon"; other machines: uname's
//            machine name.
//   <model>: /proc/cpuinfo's "model name" (aarch64 without one: "CPU part
//            <part>", else "unknown"), trimmed, whitespace runs collapsed to
//            one space, only printable ASCII kept, ':' replaced by ' ', at
//            most 64 characters.
// Environment: BRAID_CPU_DEVICE_KIND, when set and non-empty, pins the kind
// (e.g. BRAID_CPU_DEVICE_KIND=cpu-1t in tests, or to share profiles between
// machines known to be alike); it is used verbatim after the same sanitising,
// except that ':' is kept and the limit is 128 characters.
// Computed once (thread-safe); later changes to the environment are ignored.
const std::string& LocalCpuDeviceKind();

// LocalCpuDeviceKind()'s computation: `cpuinfo` is /proc/cpuinfo's text,
// `machine` uname(2)'s machine ("x86_64", "aarch64", ...), `override_env`
// BRAID_CPU_DEVICE_KIND's value (nullptr when unset).
std::string CpuDeviceKindFrom(std::string_view cpuinfo, std::string_view machine,
                              const char* override_env);

}  // namespace braid::costmodel

#endif  // BRAID_COSTMODEL_CLUSTER_H_
