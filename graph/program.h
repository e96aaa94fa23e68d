// The per-device program: what one training rank executes under a plan.
//
// A program is one device's training graph (forward, backward, collectives,
// optimizer update) at the shapes that device holds, parameterised by the
// rank's coordinate on a device mesh, so one program serves every rank (the
// SPMD form of XLA's partitioner and Alpa's instruction lists). The
// lowering (search/program_lowering.h) writes it; the runtime
// (worker/runtime/) executes it; `braid run --check` compares its training
// with the world-1 program of the same model.
//
// The mesh. `mesh` lists axis sizes, major first; the world is their
// product and rank r sits at coordinate c[a] = (r / stride[a]) % mesh[a],
// stride[a] the product of the sizes after a. A tensor split on a dim over
// the axes [a1, a2, ...] (major first) holds, on rank r, piece number
// ((c[a1] * mesh[a2] + c[a2]) * ...) of that dim, of size dim / product;
// over every mesh axis that splits none of its dims it is replicated.
//
// Collectives of the graph carry attributes that make them exact:
//   AllReduce      mesh_axes: the group (ranks differing only on those axes);
//                  reduce "sum". Empty mesh_axes: an identity (a weight
//                  replicated nowhere).
//   AllGather      mesh_axes (one axis) and dim: the pieces of the group's
//                  members concatenated along dim in coordinate order.
//   ReduceScatter  mesh_axes (one axis) and dim: the sum over the group, of
//                  which a member keeps its piece along dim (the adjoint of
//                  AllGather).
// A Slice or Pad with attribute `shard_axes` (mesh axes, major first) is
// rank-relative: its one axis (attribute axes, or the pads' one non-zero
// dim) starts at piece index * piece size instead of at 0 (a Partition of a
// replicated tensor, and its adjoint in backward).
//
// Loaded tensors. Every graph tensor without a producer (inputs, parameters,
// constants, optimizer state, the loss seed) has a LoadSpec: the source it
// is a piece of, its full shape, the mesh axes splitting each dim, and how
// its full value is made. A rank builds the full tensor from the seed and
// narrows it to its piece (every rank draws the same full tensor; the
// generators are not index-addressable, so memory is the full tensor's for
// the moment of loading). Data inputs are drawn per step; parameters once.
//
//   Program p = *LowerProgram(forward, cluster, parallelize_result, opts);
//   std::string json = ProgramToJson(p).dump();
//   Program q = *ProgramFromJson(nlohmann::json::parse(json));
#ifndef BRAID_GRAPH_PROGRAM_H_
#define BRAID_GRAPH_PROGRAM_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"
#include "nlohmann/json_fwd.hpp"

namespace braid::graph {

inline constexpr std::string_view kProgramFormat = "braid-program/1";

// How the full value of a loaded tensor is made.
enum class InitKind : uint8_t {
  kNormal,     // a data input: N(0, 1), drawn afresh every step
  kUniform,    // a weight: U(-bound, bound), bound = 1/sqrt(fan_in)
  kOnes,       // a normalization scale, a running variance, the loss seed
  kZeros,      // a bias, a running mean, optimizer state
  kIntegers,   // indices or labels: integers in [0, high), drawn every step
               // for inputs, once for constants
  kFill,       // every element `value` (the loss seed: 1 / world)
  kValue,      // the model's own value (`values`, row-major, full shape)
};
std::string_view InitKindName(InitKind k);
absl::StatusOr<InitKind> ParseInitKind(std::string_view name);

struct LoadSpec {
  std::string source;                 // the model's tensor this is a piece of
  std::vector<int64_t> full_shape;    // its full shape
  std::vector<std::vector<int>> dim_axes;  // per dim: mesh axes splitting it, major first
  InitKind init = InitKind::kNormal;
  double value = 0;       // kFill
  double bound = 0;       // kUniform
  int64_t high = 2;       // kIntegers
  bool per_step = false;  // drawn again every step (data inputs)
  std::vector<double> values;  // kValue
  // Per dim (empty: 1 each): the dim is this many equal segments and a rank
  // holds its piece of every segment, in segment order, rather than one
  // contiguous block: a column-parallel fused QKV weight [D, 3D] with 3
  // segments puts rank r's heads of q, k and v side by side.
  std::vector<int64_t> segments;
  static constexpr int64_t kMaxSegments = 1 << 10;
};

// Where a rank's piece of a loaded tensor lies in the full tensor: a box in
// the full tensor's dims with each segmented dim expanded into (segment,
// offset within the segment), which keeps row-major order.
struct PieceBox {
  std::vector<int64_t> full;   // the expanded full shape
  std::vector<int64_t> piece;  // the expanded piece shape
  std::vector<int64_t> start;  // the piece's first element, per expanded dim
};
PieceBox PieceBoxOf(const std::vector<int64_t>& full_shape, const std::vector<int>& mesh,
                    const std::vector<int>& coord, const std::vector<std::vector<int>>& dim_axes,
                    const std::vector<int64_t>& segments);

struct Program {
  std::string model;                 // the source model's name
  std::vector<int> mesh;             // axis sizes, major first; {} for one device
  Graph graph{""};                   // the per-device training graph
  std::map<std::string, LoadSpec> loads;  // by graph tensor name
  uint64_t seed = 0;                 // of every generated value
  // Fingerprints: of the source model's forward graph, and of this program
  // (graph text, mesh, loads, groups and buckets).
  std::string model_fingerprint;
  std::string program_fingerprint;
  // Where a row of a plan came from ("data_parallel", "expert:megatron",
  // "braid", "world-1").
  std::string row;
  // Gradient buckets (the plan's tensor fusion, PyTorch DDP's buckets): each
  // a list of AllReduce op names of `graph`, run as one AllReduce of their
  // inputs flattened and concatenated in list order, started where the last
  // of them comes in the execution order (ScheduleNodes) and waited on where the
  // first of their outputs is read. Members share mesh_axes and dtype; an op
  // is in at most one bucket; no member's output is read before the bucket
  // starts.
  std::vector<std::vector<std::string>> buckets;
  static constexpr int kMaxBucketMembers = 1 << 16;
  // Fusion groups (the plan's op fusion): each a list of op names of
  // `graph`, run as one node when every tensor its members read from outside
  // it is made: one fused kernel where the backend has one for the group,
  // else its members in order (the same values). No op is in two groups, no
  // collective or update op is in one, and with each group contracted to one
  // node the graph stays acyclic.
  std::vector<std::vector<std::string>> groups;
  static constexpr int kMaxGroupMembers = 1 << 20;
  // Bounds: axes and their sizes.
  static constexpr int kMaxMeshAxes = 16;
  static constexpr int kMaxWorld = 1 << 16;

  int World() const;
};

// Rank r's coordinate on `mesh` (one entry per axis).
std::vector<int> MeshCoordinate(const std::vector<int>& mesh, int rank);
// The piece index along a dim split over `axes` (major first) at `coord`,
// and the number of pieces.
int64_t PieceIndex(const std::vector<int>& mesh, const std::vector<int>& coord,
                   const std::vector<int>& axes);
int64_t PieceCount(const std::vector<int>& mesh, const std::vector<int>& axes);
// The ranks of rank r's group over `axes`, in piece order (the member at
// position i holds piece i of a dim split over those axes).
std::vector<int> GroupRanks(const std::vector<int>& mesh, int rank, const std::vector<int>& axes);

// InvalidArgument naming what is wrong: mesh sizes, axes out of range or
// repeated, a load spec that does not fit its tensor, collectives without
// their attributes.
absl::Status ValidateProgram(const Program& p);

// The program's ops as nodes in a topological order: each group (members
// in the graph's topological order) as one node, every other op as its own.
// InvalidArgument naming the problem when the groups break the rules of
// Program::groups.
absl::StatusOr<std::vector<std::vector<OpId>>> ScheduleNodes(const Program& p);

// The fingerprint of the whole program (graph text, mesh, loads, seed,
// groups and buckets: its ProgramToJson without this field), hex.
std::string ComputeProgramFingerprint(const Program& p);

nlohmann::json ProgramToJson(const Program& p);
// Checks the format, bounds every field and validates the program.
absl::StatusOr<Program> ProgramFromJson(const nlohmann::json& j);

}  // namespace braid::graph

#endif  // BRAID_GRAPH_PROGRAM_H_
