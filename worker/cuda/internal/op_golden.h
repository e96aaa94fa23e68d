// Golden op cases for the CUDA op test: each case is a one-op graph (text
// format), its inputs and the outputs a reference implementation computed for
// them (LibTorch on the CPU, written by braid-cuda-golden). The GPU test reads
// the file, so the test binary itself needs no LibTorch and travels in the
// GPU kit (deploy/gpu-kit.sh).
//
//   absl::Status s = WriteGoldenFile(path, cases);
//   absl::StatusOr<std::vector<GoldenCase>> c = ReadGoldenFile(path);
//
// Format (little-endian): the magic line "BRAIDGOLD1\n", u32 case count, then
// per case: str name, str graph text, f64 rtol, u32 #inputs, tensors, u32
// #outputs, tensors; str = u32 length + bytes; tensor = u8 defined, u32 rank,
// i64 dims[rank], f32 data[product of dims]. Reading is bounded: a file over
// 256 MiB, a count, rank, dimension or length beyond what the remaining bytes
// can hold is InvalidArgument naming the case.
#ifndef BRAID_WORKER_CUDA_INTERNAL_OP_GOLDEN_H_
#define BRAID_WORKER_CUDA_INTERNAL_OP_GOLDEN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace braid::worker::cuda_internal {

struct GoldenTensor {
  bool defined = true;  // an undefined output is not checked
  std::vector<int64_t> shape;
  std::vector<float> data;  // row-major, product of shape elements
};

struct GoldenCase {
  std::string name;
  std::string graph_text;  // op 0 is the op under test
  double rtol = 1e-4;      // relative to max(|reference|, 1)
  std::vector<GoldenTensor> inputs;
  std::vector<GoldenTensor> outputs;
};

absl::Status WriteGoldenFile(const std::string& path, const std::vector<GoldenCase>& cases);
absl::StatusOr<std::vector<GoldenCase>> ReadGoldenFile(const std::string& path);

}  // namespace braid::worker::cuda_internal

#endif  // BRAID_WORKER_CUDA_INTERNAL_OP_GOLDEN_H_
