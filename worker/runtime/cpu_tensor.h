// The CPU backend's buffer (one at::Tensor) and its dtype mapping.
// LibTorch-facing: for LibTorch-linked sources only (the CPU backend, its
// communicator, worker/'s CPU kernels).
#ifndef BRAID_WORKER_RUNTIME_CPU_TENSOR_H_
#define BRAID_WORKER_RUNTIME_CPU_TENSOR_H_

#include <ATen/ATen.h>

#include <memory>

#include "worker/runtime/interpreter.h"

namespace braid::runtime {

class CpuBuffer : public Buffer {
 public:
  explicit CpuBuffer(at::Tensor t) : t_(std::move(t)) {}
  int64_t bytes() const override { return static_cast<int64_t>(t_.numel() * t_.element_size()); }
  const at::Tensor& tensor() const { return t_; }

 private:
  at::Tensor t_;
};

// The ATen scalar type of a graph dtype.
inline at::ScalarType ScalarTypeOf(graph::DType d) {
  switch (d) {
    case graph::DType::kF32: return at::kFloat;
    case graph::DType::kF16: return at::kHalf;
    case graph::DType::kBF16: return at::kBFloat16;
    case graph::DType::kF64: return at::kDouble;
    case graph::DType::kI64: return at::kLong;
    case graph::DType::kI32: return at::kInt;
    case graph::DType::kI8: return at::kChar;
    case graph::DType::kU8: return at::kByte;
    case graph::DType::kBool: return at::kBool;
  }
  return at::kFloat;
}

inline Value WrapTensor(at::Tensor t) { return std::make_shared<CpuBuffer>(std::move(t)); }
// The tensor of a value the CPU backend or its communicator made.
inline const at::Tensor& TensorOf(const Value& v) { return static_cast<const CpuBuffer&>(*v).tensor(); }

}  // namespace braid::runtime

#endif  // BRAID_WORKER_RUNTIME_CPU_TENSOR_H_
