// Checkpoints of a program's training: every parameter and optimizer state
// tensor at its full shape (the ranks' pieces assembled), f32.
//
// File: "BRAIDCK1", a u64 header length, a JSON header
// {"format": "braid-checkpoint/1", "model_fingerprint", "program_fingerprint",
//  "steps", "tensors": [{"name", "shape", "offset"}]} and the raw
// little-endian f32 data the offsets (in elements) point into.
//
//   RETURN_IF_ERROR(WriteCheckpoint(path, ck));
//   Checkpoint back = *ReadCheckpoint(path);
#ifndef BRAID_WORKER_RUNTIME_CHECKPOINT_H_
#define BRAID_WORKER_RUNTIME_CHECKPOINT_H_

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/runtime/interpreter.h"

namespace braid::runtime {

struct Checkpoint {
  std::string model_fingerprint;
  std::string program_fingerprint;
  int steps = 0;  // training steps taken
  std::map<std::string, HostTensor> tensors;
};

absl::Status WriteCheckpoint(const std::string& path, const Checkpoint& ck);
// InvalidArgument for a file that is not a checkpoint or whose header does
// not fit its data; bounded: at most 1 MiB of header, 2^31 elements per
// tensor, 8 dims.
absl::StatusOr<Checkpoint> ReadCheckpoint(const std::string& path);

// Per tensor of `ref`, the relative error ||got - ref|| / ||ref|| (2-norms;
// ||ref|| taken as at least an RMS of 1e-4, so a tensor that is zero up to
// rounding compares by its absolute error): the largest, the tensor it is in,
// and the tensors missing from `got` or shaped differently.
struct CheckpointDiff {
  double max_rel_error = 0;
  std::string worst;  // the tensor with the largest relative error
  // Every compared tensor's relative error, largest first.
  std::vector<std::pair<std::string, double>> errors;
  std::vector<std::string> mismatched;
};
// `only`: compare just these tensors (e.g. the parameters, leaving out
// optimizer state); null: every tensor of `ref`.
CheckpointDiff CompareCheckpoints(const Checkpoint& got, const Checkpoint& ref,
                                  const std::set<std::string>* only = nullptr);
// The source names of a program's parameters (what a numerics check compares).
std::set<std::string> ParameterNames(const graph::Program& p);

}  // namespace braid::runtime

#endif  // BRAID_WORKER_RUNTIME_CHECKPOINT_H_
