// Device kernels of the runtime's CUDA backend (worker/cuda/cuda_backend.h)
// for the ops that neither cuBLAS/cuDNN (cuda_ops.h) nor braid's NVRTC
// elementwise programs (kernels/cuda/ew_kernel.h) cover: embedding lookups
// and their gradient, softmax cross-entropy and its gradient, and a
// broadcasting ternary map (Where, the gradients of Pow and Where, masks).
// Plain C++ over raw device pointers (nvcc never parses absl); float32
// values; integer inputs (indices, labels, conditions) in any of the
// IndexType element types. Each launcher enqueues on `stream` and returns
// the launch error.
#ifndef BRAID_WORKER_CUDA_INTERNAL_RUNTIME_KERNELS_H_
#define BRAID_WORKER_CUDA_INTERNAL_RUNTIME_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace braid::worker::cuda_internal {

// How an input's elements are stored: read as float by the ternary map, as
// an integer by Gather and the loss.
enum class AnyType : uint8_t { kF32, kI64, kI32, kU8 };

inline constexpr int kMaxMapRank = 8;

// One operand of the map: its elements' type and, per output dim, its
// stride (0 where it is broadcast).
struct MapOperand {
  const void* data = nullptr;
  AnyType type = AnyType::kF32;
  int64_t strides[kMaxMapRank] = {};
};

enum class TernaryCode : uint8_t {
  kWhere,          // c ? a : b
  kPowGradBase,    // a * c * pow(b, c - 1)   (a = dY, b = base, c = exponent)
  kPowGradExp,     // a * pow(b, c) * log(b)
  kWhereGradThen,  // b ? a : 0   (a = dY, b = condition)
  kWhereGradElse,  // b ? 0 : a
  kMaskScale,      // a * b * p   (b = keep mask, p = 1 / (1 - ratio))
};

// out[i] = code(ops[0], ops[1], ops[2]) over `rank` dims `dims` (float out).
cudaError_t TernaryMap(TernaryCode code, const MapOperand ops[3], float* out, int rank,
                       const int64_t* dims, float p, cudaStream_t stream);

// y[o, j, i] = data[o, idx[j] (negative: + axis_size), i] for outer o < outer,
// j < n, i < inner. An index off [-axis_size, axis_size) writes 0 and sets
// *bad (device int, may be null) to 1.
cudaError_t GatherRows(const float* data, const void* idx, AnyType idx_type, float* y, int64_t outer,
                       int64_t axis_size, int64_t n, int64_t inner, int* bad, cudaStream_t stream);
// dx (zeroed here) += dy scattered back: the gradient of GatherRows.
cudaError_t GatherRowsGrad(const float* dy, const void* idx, AnyType idx_type, float* dx,
                           int64_t outer, int64_t axis_size, int64_t n, int64_t inner,
                           cudaStream_t stream);

// Mean softmax cross-entropy of scores [batch, classes, inner] (class axis 1)
// against labels [batch, inner]: loss[0] = mean over rows of
// logsumexp(row) - row[label]. `row_loss` is float scratch of batch * inner.
// A label off [0, classes) sets *bad to 1.
cudaError_t SoftmaxCrossEntropy(const float* scores, const void* labels, AnyType label_type,
                                float* loss, float* row_loss, int64_t batch, int64_t classes,
                                int64_t inner, int* bad, cudaStream_t stream);
// dscores = dloss[0] * (softmax(row) - onehot(label)) / rows.
cudaError_t SoftmaxCrossEntropyGrad(const float* dloss, const float* scores, const void* labels,
                                    AnyType label_type, float* dscores, int64_t batch,
                                    int64_t classes, int64_t inner, cudaStream_t stream);

// y = x converted, for loads and casts between the stored types (float
// values of integer tensors are exact below 2^24).
cudaError_t ConvertFromFloat(const float* x, void* y, AnyType to, int64_t n, cudaStream_t stream);
cudaError_t ConvertToFloat(const void* x, AnyType from, float* y, int64_t n, cudaStream_t stream);

}  // namespace braid::worker::cuda_internal

#endif  // BRAID_WORKER_CUDA_INTERNAL_RUNTIME_KERNELS_H_
