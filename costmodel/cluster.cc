#include "costmodel/cluster.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/bounded_json.h"
#include "base/status_macros.h"
#include "glog/logging.h"
#include "nlohmann/json.hpp"

namespace braid::costmodel {
namespace {

using nlohmann::json;

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
// PCIe 3.0 x16: 8 GT/s per lane, 128b/130b encoding, 16 lanes = 15.75 GB/s per
// direction (PCI-SIG PCIe 3.0 base specification).
constexpr double kPcie3x16 = 8e9 * 128.0 / 130.0 * 16 / 8;
// CUDA kernel-launch overhead: NVIDIA quotes ~5 us per launch for the CUDA
// runtime (CUDA C++ Best Practices Guide, "kernel launch overhead"); a prior
// only, profiles include the real launch cost.
constexpr double kCudaLaunch = 5e-6;

ClusterSpec DiscoA() {
  // DisCo §6 cluster A: 6 machines, two 11GB GTX 1080 Ti each, one 100GbE
  // Mellanox RDMA card per machine, one 100GbE switch.
  ClusterSpec c;
  c.name = "disco-a";
  c.num_nodes = 6;
  c.devices_per_node = 2;
  c.device.kind = "cuda:NVIDIA GeForce GTX 1080 Ti";
  c.device.compute_capability = 61;
  // GTX 1080 Ti spec sheet: 3584 CUDA cores at 1582 MHz boost = 11.34 TFLOP/s
  // f32; GP102 runs f16 at 1/64 of the f32 rate (0.177 TFLOP/s); 11 GB
  // GDDR5X at 484 GB/s.
  c.device.peak_flops_f32 = 11.34e12;
  c.device.peak_flops_f16 = 11.34e12 / 64;
  c.device.memory_bandwidth = 484e9;
  c.device.memory_bytes = static_cast<int64_t>(11 * kGiB);
  c.device.launch_overhead_s = kCudaLaunch;
  // The two GPUs talk over PCIe 3.0 x16 (no NVLink on GeForce Pascal).
  c.intra.kind = IntraLinkKind::kPcie;
  c.intra.bandwidth = kPcie3x16;
  c.intra.latency_s = 1e-6;  // PCIe round trip order of magnitude; fitted D replaces it
  // 100 GbE = 12.5 GB/s per direction; Mellanox ConnectX-4 datasheet: sub-1 us
  // RDMA latency (plus a switch hop).
  c.network = {.nic_bandwidth = 100e9 / 8, .nics_per_node = 1, .latency_s = 1.5e-6};
  c.num_ranks = c.Capacity();
  return c;
}

ClusterSpec DiscoB() {
  // DisCo §6 cluster B: 8 machines, eight 16GB Tesla T4 each, one 100GbE NIC.
  ClusterSpec c;
  c.name = "disco-b";
  c.num_nodes = 8;
  c.devices_per_node = 8;
  c.device.kind = "cuda:Tesla T4";
  c.device.compute_capability = 75;
  // Tesla T4 datasheet: 8.1 TFLOP/s f32, 65 TFLOP/s f16 (mixed precision
  // tensor cores), 16 GB GDDR6 at 320 GB/s, PCIe 3.0 x16.
  c.device.peak_flops_f32 = 8.1e12;
  c.device.peak_flops_f16 = 65e12;
  c.device.memory_bandwidth = 320e9;
  c.device.memory_bytes = static_cast<int64_t>(16 * kGiB);
  c.device.launch_overhead_s = kCudaLaunch;
  c.intra.kind = IntraLinkKind::kPcie;
  c.intra.bandwidth = kPcie3x16;
  c.intra.latency_s = 1e-6;
  // 100 GbE without RDMA: kernel TCP stack, ~10 us one-way (prior).
  c.network = {.nic_bandwidth = 100e9 / 8, .nics_per_node = 1, .latency_s = 10e-6};
  c.num_ranks = c.Capacity();
  return c;
}

ClusterSpec Summit() {
  // OLCF Summit: 4608 nodes, each 2 POWER9 + 6 V100 SXM2 16GB; per socket 3
  // GPUs and the CPU are fully connected by NVLink 2.0 with 2 bricks (50 GB/s
  // per direction) per pair; the sockets are joined by the 64 GB/s X-Bus;
  // dual-rail EDR InfiniBand (2 x 100 Gb/s) per node.
  ClusterSpec c;
  c.name = "summit";
  c.num_nodes = 4608;
  c.devices_per_node = 6;
  c.device.kind = "cuda:Tesla V100-SXM2-16GB";
  c.device.compute_capability = 70;
  // V100 SXM2 datasheet: 15.7 TFLOP/s f32, 125 TFLOP/s tensor f16, 16 GB HBM2
  // at 900 GB/s.
  c.device.peak_flops_f32 = 15.7e12;
  c.device.peak_flops_f16 = 125e12;
  c.device.memory_bandwidth = 900e9;
  c.device.memory_bytes = static_cast<int64_t>(16 * kGiB);
  c.device.launch_overhead_s = kCudaLaunch;
  c.intra.kind = IntraLinkKind::kNvlinkIslands;
  c.intra.bandwidth = 50e9;
  c.intra.latency_s = 1e-6;
  c.intra.island_size = 3;
  c.intra.cross_island_bandwidth = 64e9 / 2;  // X-Bus 64 GB/s, both directions
  c.intra.cross_island_latency_s = 2e-6;
  // EDR InfiniBand: 100 Gb/s = 12.5 GB/s per direction per rail, ~1 us.
  c.network = {.nic_bandwidth = 100e9 / 8, .nics_per_node = 2, .latency_s = 1e-6};
  c.num_ranks = c.Capacity();
  return c;
}

ClusterSpec DgxH100() {
  // A DGX SuperPOD scalable unit: 32 DGX H100 systems, each 8 H100 SXM5 on
  // NVLink4 through NVSwitch, 8 ConnectX-7 400 Gb/s InfiniBand ports.
  ClusterSpec c;
  c.name = "dgx-h100";
  c.num_nodes = 32;
  c.devices_per_node = 8;
  c.device.kind = "cuda:NVIDIA H100 80GB HBM3";
  c.device.compute_capability = 90;
  // H100 SXM5 datasheet: 67 TFLOP/s f32, 989 TFLOP/s dense f16/bf16 tensor
  // (1979 with sparsity), 80 GB HBM3 at 3.35 TB/s.
  c.device.peak_flops_f32 = 67e12;
  c.device.peak_flops_f16 = 989e12;
  c.device.memory_bandwidth = 3.35e12;
  c.device.memory_bytes = static_cast<int64_t>(80 * kGiB);
  c.device.launch_overhead_s = kCudaLaunch;
  // NVLink4: 900 GB/s total bidirectional per GPU = 450 GB/s per direction.
  c.intra.kind = IntraLinkKind::kNvlinkSwitch;
  c.intra.bandwidth = 450e9;
  c.intra.latency_s = 1e-6;
  // 400 Gb/s NDR = 50 GB/s per direction per port.
  c.network = {.nic_bandwidth = 400e9 / 8, .nics_per_node = 8, .latency_s = 1e-6};
  c.num_ranks = c.Capacity();
  return c;
}

// Keeps printable ASCII only (other whitespace becomes a space, other bytes
// are dropped), ':' becomes ' ' unless `keep_colon`, whitespace runs collapse
// to one space, the ends are trimmed, and at most `max_len` characters stay.
std::string SanitizeKindPart(std::string_view text, bool keep_colon, size_t max_len) {
  std::string out;
  bool pending_space = false;
  for (char ch : text) {
    const unsigned char u = static_cast<unsigned char>(ch);
    const bool space = u == ' ' || u == '\t' || u == '\n' || u == '\r' || u == '\v' ||
                       u == '\f' || (u == ':' && !keep_colon);
    if (space) {
      pending_space = !out.empty();
      continue;
    }
    if (u < 0x21 || u > 0x7e) continue;  // control characters, non-ASCII bytes
    if (pending_space) out.push_back(' ');
    pending_space = false;
    out.push_back(ch);
  }
  if (out.size() > max_len) out.resize(max_len);
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

std::string_view TrimAscii(std::string_view s) {
  const std::string_view ws = " \t\r\n\v\f";
  size_t begin = s.find_first_not_of(ws);
  if (begin == std::string_view::npos) return {};
  return s.substr(begin, s.find_last_not_of(ws) - begin + 1);
}

// The value of the first "<key> : <value>" line of /proc/cpuinfo text whose
// key is `key`; empty when there is none.
std::string_view CpuinfoField(std::string_view cpuinfo, std::string_view key) {
  while (!cpuinfo.empty()) {
    size_t eol = cpuinfo.find('\n');
    std::string_view line = cpuinfo.substr(0, eol);
    cpuinfo = eol == std::string_view::npos ? std::string_view() : cpuinfo.substr(eol + 1);
    size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    if (TrimAscii(line.substr(0, colon)) == key) return TrimAscii(line.substr(colon + 1));
  }
  return {};
}

// Whether the whitespace-separated `list` has the word `word`.
bool HasWord(std::string_view list, std::string_view word) {
  const std::string_view ws = " \t";
  size_t pos = 0;
  while ((pos = list.find_first_not_of(ws, pos)) != std::string_view::npos) {
    size_t end = std::min(list.find_first_of(ws, pos), list.size());
    if (list.substr(pos, end - pos) == word) return true;
    pos = end;
  }
  return false;
}

ClusterSpec CpuLocal() {
  // Ranks are processes on this machine with one compute thread each; a
  // device is one CPU core. These figures are only the prior: real runs use
  // the profile store (op times measured by the CPU profiler, collective
  // times fitted from Gloo benchmarks). Measured on the build machine (Xeon,
  // Sapphire Rapids, KVM, shared): an AVX-512 FMA loop on one thread reached
  // 26 GFLOP/s; memcpy of 256 MiB 16-18 GB/s (read + write); TCP over
  // loopback 4.7 GB/s with a 13 us one-way ping-pong latency (Python sockets).
  ClusterSpec c;
  c.name = "cpu-local";
  int cores = static_cast<int>(std::thread::hardware_concurrency());
  if (cores < 1) cores = 1;
  c.num_nodes = 1;
  c.devices_per_node = cores;
  c.device.kind = LocalCpuDeviceKind();
  c.device.peak_flops_f32 = 26e9;
  // LibTorch 1.13's CPU kernels mostly compute f16/bf16 by widening to f32.
  c.device.peak_flops_f16 = 26e9;
  c.device.memory_bandwidth = 17e9;
  long pages = sysconf(_SC_PHYS_PAGES);
  long page_size = sysconf(_SC_PAGE_SIZE);
  c.device.memory_bytes = pages > 0 && page_size > 0
                              ? static_cast<int64_t>(pages) * page_size
                              : static_cast<int64_t>(8 * kGiB);
  // Per-kernel overhead, measured (braid gnn sample's profiles, 2026-11-24):
  // the smallest LibTorch ops (Reshape, Relu, Add on a few elements) take
  // 0.5-0.9 us per call and braid's smallest fused kernels 1.7 us. It was
  // a 10 us prior, which put every small fused kernel's roofline 5x over
  // its measurement.
  c.device.launch_overhead_s = 1e-6;
  c.intra.kind = IntraLinkKind::kLoopback;
  c.intra.bandwidth = 4.7e9;
  c.intra.latency_s = 13e-6;
  c.network = {.nic_bandwidth = 4.7e9, .nics_per_node = 1, .latency_s = 13e-6};
  c.cpu = {.cores_per_node = cores, .threads_per_rank = 1, .comm_threads_per_rank = 1};
  c.num_ranks = c.Capacity();
  return c;
}

absl::Status Bad(std::string_view field, std::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("cluster spec field '", std::string(field), "': ", std::string(why)));
}

// Typed JSON field readers that name the field in their errors.
absl::Status GetNumber(const json& obj, const char* parent, const char* key, double* out,
                       bool optional = false) {
  auto it = obj.find(key);
  std::string field = parent[0] ? absl::StrCat(parent, ".", key) : std::string(key);
  if (it == obj.end()) return optional ? absl::OkStatus() : Bad(field, "missing");
  if (!it->is_number()) return Bad(field, "must be a number");
  *out = it->get<double>();
  return absl::OkStatus();
}

absl::Status GetInt(const json& obj, const char* parent, const char* key, int64_t* out,
                    bool optional = false) {
  auto it = obj.find(key);
  std::string field = parent[0] ? absl::StrCat(parent, ".", key) : std::string(key);
  if (it == obj.end()) return optional ? absl::OkStatus() : Bad(field, "missing");
  if (!it->is_number_integer()) return Bad(field, "must be an integer");
  *out = it->get<int64_t>();
  return absl::OkStatus();
}

absl::Status GetString(const json& obj, const char* parent, const char* key, std::string* out) {
  auto it = obj.find(key);
  std::string field = parent[0] ? absl::StrCat(parent, ".", key) : std::string(key);
  if (it == obj.end()) return Bad(field, "missing");
  if (!it->is_string()) return Bad(field, "must be a string");
  *out = it->get<std::string>();
  return absl::OkStatus();
}

absl::Status GetObject(const json& obj, const char* key, const json** out, bool optional = false) {
  auto it = obj.find(key);
  if (it == obj.end()) {
    *out = nullptr;
    return optional ? absl::OkStatus() : Bad(key, "missing");
  }
  if (!it->is_object()) return Bad(key, "must be an object");
  *out = &*it;
  return absl::OkStatus();
}

absl::StatusOr<IntraLinkKind> ParseLinkKind(const std::string& s) {
  for (IntraLinkKind k : {IntraLinkKind::kNvlinkSwitch, IntraLinkKind::kNvlinkIslands,
                          IntraLinkKind::kPcie, IntraLinkKind::kLoopback}) {
    if (IntraLinkKindName(k) == s) return k;
  }
  return Bad("intra_node.kind",
             absl::StrCat("unknown link kind '", s,
                          "' (nvlink_switch, nvlink_islands, pcie, loopback)"));
}

int CheckedInt(int64_t v) {
  return v > INT32_MAX ? INT32_MAX : (v < INT32_MIN ? INT32_MIN : static_cast<int>(v));
}

// Physical bounds of a cluster spec. Outside them a spec describes no real
// machine, and the times derived from it (FLOPs / rate, bytes / bandwidth)
// could overflow to infinity in the simulator.
struct Bounds {
  double lo, hi;
};
constexpr Bounds kFlops{1e6, 1e18};            // FLOP/s per device: 1 MFLOP/s .. 1 EFLOP/s
constexpr Bounds kMemBandwidth{1e6, 1e15};     // bytes/s: 1 MB/s .. 1 PB/s
constexpr Bounds kLinkBandwidth{1e5, 1e14};    // bytes/s: 100 KB/s (a floppy: ~60 KB/s) .. 100 TB/s
constexpr Bounds kLatency{0, 1};               // seconds per message
constexpr Bounds kLaunch{0, 1};                // seconds per kernel launch
constexpr int64_t kMinMemoryBytes = int64_t{1} << 20;  // 1 MiB
constexpr int64_t kMaxMemoryBytes = int64_t{1} << 50;  // 1 PiB
constexpr int kMaxNodes = 1 << 20;
constexpr int kMaxDevicesPerNode = 1 << 12;
constexpr int64_t kMaxRanks = int64_t{1} << 20;
constexpr int kMaxNicsPerNode = 1024;
constexpr int kMaxCores = 1 << 16;

absl::Status CheckRange(double v, Bounds b, std::string_view field, std::string_view unit) {
  if (!std::isfinite(v) || v < b.lo || v > b.hi) {
    return Bad(field, absl::StrCat("must be in [", b.lo, ", ", b.hi, "] ", std::string(unit),
                                   ", got ", v));
  }
  return absl::OkStatus();
}

absl::Status CheckCount(int64_t v, int64_t lo, int64_t hi, std::string_view field) {
  if (v < lo || v > hi) return Bad(field, absl::StrCat("must be in [", lo, ", ", hi, "], got ", v));
  return absl::OkStatus();
}

}  // namespace

std::string_view IntraLinkKindName(IntraLinkKind k) {
  switch (k) {
    case IntraLinkKind::kNvlinkSwitch: return "nvlink_switch";
    case IntraLinkKind::kNvlinkIslands: return "nvlink_islands";
    case IntraLinkKind::kPcie: return "pcie";
    case IntraLinkKind::kLoopback: return "loopback";
  }
  return "unknown";
}

absl::Status ValidateCluster(const ClusterSpec& c) {
  if (c.name.empty()) return Bad("name", "must not be empty");
  RETURN_IF_ERROR(CheckCount(c.num_nodes, 1, kMaxNodes, "num_nodes"));
  RETURN_IF_ERROR(CheckCount(c.devices_per_node, 1, kMaxDevicesPerNode, "devices_per_node"));
  if (c.num_ranks < 1 || c.num_ranks > c.Capacity() || c.num_ranks > kMaxRanks) {
    return Bad("num_ranks", absl::StrCat("must be in [1, min(num_nodes * devices_per_node = ",
                                         c.Capacity(), ", ", kMaxRanks, ")], got ", c.num_ranks));
  }
  if (c.device.kind.empty()) return Bad("device.kind", "must not be empty");
  RETURN_IF_ERROR(CheckRange(c.device.peak_flops_f32, kFlops, "device.peak_flops_f32", "FLOP/s"));
  RETURN_IF_ERROR(CheckRange(c.device.peak_flops_f16, kFlops, "device.peak_flops_f16", "FLOP/s"));
  RETURN_IF_ERROR(
      CheckRange(c.device.memory_bandwidth, kMemBandwidth, "device.memory_bandwidth", "bytes/s"));
  RETURN_IF_ERROR(
      CheckCount(c.device.memory_bytes, kMinMemoryBytes, kMaxMemoryBytes, "device.memory_bytes"));
  RETURN_IF_ERROR(
      CheckRange(c.device.launch_overhead_s, kLaunch, "device.launch_overhead_s", "s"));
  RETURN_IF_ERROR(CheckRange(c.intra.bandwidth, kLinkBandwidth, "intra_node.bandwidth", "bytes/s"));
  RETURN_IF_ERROR(CheckRange(c.intra.latency_s, kLatency, "intra_node.latency_s", "s"));
  if (c.intra.kind == IntraLinkKind::kNvlinkIslands) {
    if (c.intra.island_size < 1) return Bad("intra_node.island_size", "must be >= 1");
    if (c.devices_per_node % c.intra.island_size != 0) {
      return Bad("intra_node.island_size",
                 absl::StrCat("devices_per_node (", c.devices_per_node,
                              ") is not divisible by island_size (", c.intra.island_size, ")"));
    }
    RETURN_IF_ERROR(CheckRange(c.intra.cross_island_bandwidth, kLinkBandwidth,
                                       "intra_node.cross_island_bandwidth", "bytes/s"));
    RETURN_IF_ERROR(CheckRange(c.intra.cross_island_latency_s, kLatency,
                                       "intra_node.cross_island_latency_s", "s"));
  }
  RETURN_IF_ERROR(
      CheckRange(c.network.nic_bandwidth, kLinkBandwidth, "network.nic_bandwidth", "bytes/s"));
  RETURN_IF_ERROR(CheckCount(c.network.nics_per_node, 1, kMaxNicsPerNode, "network.nics_per_node"));
  RETURN_IF_ERROR(CheckRange(c.network.latency_s, kLatency, "network.latency_s", "s"));
  RETURN_IF_ERROR(CheckCount(c.cpu.cores_per_node, 0, kMaxCores, "cpu.cores_per_node"));
  if (c.cpu.cores_per_node > 0) {
    RETURN_IF_ERROR(CheckCount(c.cpu.threads_per_rank, 1, kMaxCores, "cpu.threads_per_rank"));
    RETURN_IF_ERROR(
        CheckCount(c.cpu.comm_threads_per_rank, 0, kMaxCores, "cpu.comm_threads_per_rank"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ClusterSpec> ClusterPreset(std::string_view name) {
  ClusterSpec c;
  if (name == "disco-a") {
    c = DiscoA();
  } else if (name == "disco-b") {
    c = DiscoB();
  } else if (name == "summit") {
    c = Summit();
  } else if (name == "dgx-h100") {
    c = DgxH100();
  } else if (name == "cpu-local") {
    c = CpuLocal();
  } else {
    return absl::NotFoundError(absl::StrCat(
        "no cluster preset '", std::string(name),
        "' (presets: disco-a, disco-b, summit, dgx-h100, cpu-local)"));
  }
  absl::Status s = ValidateCluster(c);
  CHECK(s.ok()) << "preset " << std::string(name) << " is invalid: " << s;
  return c;
}

absl::StatusOr<ClusterSpec> ParseClusterJson(std::string_view text) {
  absl::StatusOr<json> parsed = base::ParseBoundedJson(text);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("cluster spec: ", parsed.status().message()));
  }
  const json j = *std::move(parsed);
  if (!j.is_object()) return absl::InvalidArgumentError("cluster spec: top level must be an object");
  ClusterSpec c;
  int64_t v = 0;
  RETURN_IF_ERROR(GetString(j, "", "name", &c.name));
  RETURN_IF_ERROR(GetInt(j, "", "num_nodes", &v));
  c.num_nodes = CheckedInt(v);
  RETURN_IF_ERROR(GetInt(j, "", "devices_per_node", &v));
  c.devices_per_node = CheckedInt(v);
  v = static_cast<int64_t>(c.num_nodes) * c.devices_per_node;
  RETURN_IF_ERROR(GetInt(j, "", "num_ranks", &v, /*optional=*/true));
  c.num_ranks = CheckedInt(v);

  const json* d = nullptr;
  RETURN_IF_ERROR(GetObject(j, "device", &d));
  RETURN_IF_ERROR(GetString(*d, "device", "kind", &c.device.kind));
  RETURN_IF_ERROR(GetNumber(*d, "device", "peak_flops_f32", &c.device.peak_flops_f32));
  RETURN_IF_ERROR(GetNumber(*d, "device", "peak_flops_f16", &c.device.peak_flops_f16));
  RETURN_IF_ERROR(GetNumber(*d, "device", "memory_bandwidth", &c.device.memory_bandwidth));
  RETURN_IF_ERROR(GetInt(*d, "device", "memory_bytes", &c.device.memory_bytes));
  RETURN_IF_ERROR(
      GetNumber(*d, "device", "launch_overhead_s", &c.device.launch_overhead_s));
  RETURN_IF_ERROR(GetInt(*d, "device", "compute_capability", &c.device.compute_capability,
                         /*optional=*/true));
  if (c.device.compute_capability < 0 || c.device.compute_capability > 1000) {
    return Bad("device.compute_capability", "must be major * 10 + minor, e.g. 80");
  }

  const json* in = nullptr;
  RETURN_IF_ERROR(GetObject(j, "intra_node", &in));
  std::string kind;
  RETURN_IF_ERROR(GetString(*in, "intra_node", "kind", &kind));
  ASSIGN_OR_RETURN(IntraLinkKind k, ParseLinkKind(kind));
  c.intra.kind = k;
  RETURN_IF_ERROR(GetNumber(*in, "intra_node", "bandwidth", &c.intra.bandwidth));
  RETURN_IF_ERROR(GetNumber(*in, "intra_node", "latency_s", &c.intra.latency_s));
  if (c.intra.kind == IntraLinkKind::kNvlinkIslands) {
    RETURN_IF_ERROR(GetInt(*in, "intra_node", "island_size", &v));
    c.intra.island_size = CheckedInt(v);
    RETURN_IF_ERROR(GetNumber(*in, "intra_node", "cross_island_bandwidth",
                                    &c.intra.cross_island_bandwidth));
    RETURN_IF_ERROR(GetNumber(*in, "intra_node", "cross_island_latency_s",
                                    &c.intra.cross_island_latency_s));
  }

  const json* n = nullptr;
  RETURN_IF_ERROR(GetObject(j, "network", &n));
  RETURN_IF_ERROR(GetNumber(*n, "network", "nic_bandwidth", &c.network.nic_bandwidth));
  RETURN_IF_ERROR(GetInt(*n, "network", "nics_per_node", &v));
  c.network.nics_per_node = CheckedInt(v);
  RETURN_IF_ERROR(GetNumber(*n, "network", "latency_s", &c.network.latency_s));

  const json* cpu = nullptr;
  RETURN_IF_ERROR(GetObject(j, "cpu", &cpu, /*optional=*/true));
  if (cpu != nullptr) {
    RETURN_IF_ERROR(GetInt(*cpu, "cpu", "cores_per_node", &v));
    c.cpu.cores_per_node = CheckedInt(v);
    v = 1;
    RETURN_IF_ERROR(GetInt(*cpu, "cpu", "threads_per_rank", &v, true));
    c.cpu.threads_per_rank = CheckedInt(v);
    v = 1;
    RETURN_IF_ERROR(GetInt(*cpu, "cpu", "comm_threads_per_rank", &v, true));
    c.cpu.comm_threads_per_rank = CheckedInt(v);
  }
  RETURN_IF_ERROR(ValidateCluster(c));
  // cores_per_node 0 means "not a CPU cluster": the other cpu fields mean
  // nothing then, and ClusterToJson omits the block; normalize them so a
  // spec and its JSON round trip have one fingerprint.
  if (!c.IsCpu()) c.cpu = CpuSpec{};
  return c;
}

absl::StatusOr<ClusterSpec> LoadCluster(std::string_view preset_or_path) {
  absl::StatusOr<ClusterSpec> preset = ClusterPreset(preset_or_path);
  if (preset.ok() || preset.status().code() != absl::StatusCode::kNotFound) return preset;
  std::ifstream in{std::string(preset_or_path)};
  if (!in) {
    return absl::NotFoundError(absl::StrCat(
        "cluster '", std::string(preset_or_path),
        "' is neither a preset (disco-a, disco-b, summit, dgx-h100, cpu-local) nor a readable file"));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  absl::StatusOr<ClusterSpec> c = ParseClusterJson(ss.str());
  if (!c.ok()) {
    return absl::Status(c.status().code(), absl::StrCat(std::string(preset_or_path), ": ",
                                                        std::string(c.status().message())));
  }
  return c;
}

absl::StatusOr<ClusterSpec> WithRanks(const ClusterSpec& spec, int n) {
  if (n < 1 || n > kMaxRanks) {
    return Bad("num_ranks", absl::StrCat("must be in [1, ", kMaxRanks, "], got ", n));
  }
  ClusterSpec c = spec;
  if (spec.IsCpu()) {
    // Ranks are processes on this machine: any number fits on the one node.
    c.num_nodes = 1;
    c.devices_per_node = n;
    c.num_ranks = n;
    if (c.intra.kind == IntraLinkKind::kNvlinkIslands) c.intra.kind = IntraLinkKind::kLoopback;
    RETURN_IF_ERROR(ValidateCluster(c));
    return c;
  }
  if (n > spec.Capacity()) {
    return Bad("num_ranks", absl::StrCat(n, " ranks exceed the capacity of ", spec.name, " (",
                                         spec.num_nodes, " nodes x ", spec.devices_per_node,
                                         " devices = ", spec.Capacity(), ")"));
  }
  c.num_nodes = (n + spec.devices_per_node - 1) / spec.devices_per_node;
  c.num_ranks = n;
  return c;
}

std::string ClusterToJson(const ClusterSpec& c) {
  json j;
  j["name"] = c.name;
  j["num_nodes"] = c.num_nodes;
  j["devices_per_node"] = c.devices_per_node;
  j["num_ranks"] = c.num_ranks;
  j["device"] = {{"kind", c.device.kind},
                 {"peak_flops_f32", c.device.peak_flops_f32},
                 {"peak_flops_f16", c.device.peak_flops_f16},
                 {"memory_bandwidth", c.device.memory_bandwidth},
                 {"memory_bytes", c.device.memory_bytes},
                 {"launch_overhead_s", c.device.launch_overhead_s}};
  if (c.device.compute_capability > 0) {
    j["device"]["compute_capability"] = c.device.compute_capability;
  }
  json in = {{"kind", std::string(IntraLinkKindName(c.intra.kind))},
             {"bandwidth", c.intra.bandwidth},
             {"latency_s", c.intra.latency_s}};
  if (c.intra.kind == IntraLinkKind::kNvlinkIslands) {
    in["island_size"] = c.intra.island_size;
    in["cross_island_bandwidth"] = c.intra.cross_island_bandwidth;
    in["cross_island_latency_s"] = c.intra.cross_island_latency_s;
  }
  j["intra_node"] = in;
  j["network"] = {{"nic_bandwidth", c.network.nic_bandwidth},
                  {"nics_per_node", c.network.nics_per_node},
                  {"latency_s", c.network.latency_s}};
  if (c.IsCpu()) {
    j["cpu"] = {{"cores_per_node", c.cpu.cores_per_node},
                {"threads_per_rank", c.cpu.threads_per_rank},
                {"comm_threads_per_rank", c.cpu.comm_threads_per_rank}};
  }
  return j.dump(2);
}

std::string ClusterFingerprint(const ClusterSpec& c) {
  // Canonical text of every field, hashed with 64-bit FNV-1a (stable across
  // builds and platforms, unlike std::hash).
  std::string canon = absl::StrFormat(
      "%s|%d|%d|%d|%s|%.17g|%.17g|%.17g|%d|%.17g|%s|%.17g|%.17g|%d|%.17g|%.17g|%.17g|%d|%.17g|"
      "%d|%d|%d",
      c.name, c.num_nodes, c.devices_per_node, c.num_ranks, c.device.kind,
      c.device.peak_flops_f32, c.device.peak_flops_f16, c.device.memory_bandwidth,
      c.device.memory_bytes, c.device.launch_overhead_s, std::string(IntraLinkKindName(c.intra.kind)),
      c.intra.bandwidth, c.intra.latency_s, c.intra.island_size, c.intra.cross_island_bandwidth,
      c.intra.cross_island_latency_s, c.network.nic_bandwidth, c.network.nics_per_node,
      c.network.latency_s, c.cpu.cores_per_node, c.cpu.threads_per_rank,
      c.cpu.comm_threads_per_rank);
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : canon) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  return absl::StrFormat("%s-%016x", c.name, h);
}

std::string CpuDeviceKindFrom(std::string_view cpuinfo, std::string_view machine,
                              const char* override_env) {
  if (override_env != nullptr) {
    std::string pinned = SanitizeKindPart(override_env, /*keep_colon=*/true, 128);
    if (!pinned.empty()) return pinned;
  }
  std::string isa;
  std::string model(CpuinfoField(cpuinfo, "model name"));
  if (machine == "x86_64" || machine == "amd64") {
    std::string_view flags = CpuinfoField(cpuinfo, "flags");
    isa = HasWord(flags, "avx512f") ? "x86_64-avx512"
          : HasWord(flags, "avx2")  ? "x86_64-avx2"
                                    : "x86_64-sse";
  } else if (machine == "aarch64" || machine == "arm64") {
    isa = HasWord(CpuinfoField(cpuinfo, "Features"), "sve") ? "aarch64-sve" : "aarch64-neon";
    if (model.empty()) {
      std::string_view part = CpuinfoField(cpuinfo, "CPU part");
      if (!part.empty()) model = "CPU part " + std::string(part);
    }
  } else {
    isa = SanitizeKindPart(machine, /*keep_colon=*/false, 64);
    if (isa.empty()) isa = "unknown";
  }
  model = SanitizeKindPart(model, /*keep_colon=*/false, 64);
  if (model.empty()) model = "unknown";
  return absl::StrCat("cpu-1t:", isa, ":", model);
}

const std::string& LocalCpuDeviceKind() {
  static const std::string* const kind = [] {
    std::string cpuinfo;
    if (std::ifstream in("/proc/cpuinfo"); in) {
      std::ostringstream text;
      text << in.rdbuf();
      cpuinfo = text.str();
    }
    struct utsname u {};
    std::string machine = uname(&u) == 0 ? std::string(u.machine) : std::string();
    return new std::string(
        CpuDeviceKindFrom(cpuinfo, machine, std::getenv("BRAID_CPU_DEVICE_KIND")));
  }();
  return *kind;
}

}  // namespace braid::costmodel
