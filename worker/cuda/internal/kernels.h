// The few device kernels the CUDA profiler cannot get from cuBLAS or cuDNN:
// random fill for every float dtype, GELU and its gradient (legacy cuDNN has
// no GELU activation), layer normalization (cuDNN's legacy API has only
// batch normalization), the optimizer steps, transposes and dropout. All of them live in kernels.cu, the one CUDA source
// of braid_worker_cuda, so the build compiles device code once.
//
// Plain C++ over raw device pointers: no graph or absl types, so nvcc never
// parses absl headers. Each launcher enqueues on `stream` and returns the
// launch error (cudaSuccess when queued).
//
//   FillNormal(ElemType::kF32, ptr, n, /*seed=*/7, stream);
//   GeluForward(ElemType::kF16, x, y, n, /*tanh_approx=*/false, stream);
#ifndef BRAID_WORKER_CUDA_INTERNAL_KERNELS_H_
#define BRAID_WORKER_CUDA_INTERNAL_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace braid::worker::cuda_internal {

// The element types the kernels are instantiated for.
enum class ElemType : uint8_t { kF32, kF16, kBF16, kF64 };

// Standard-normal values from a counter-based hash of (seed, index): the same
// seed gives the same data on every device and run.
cudaError_t FillNormal(ElemType t, void* data, int64_t n, uint64_t seed, cudaStream_t stream);

// y = GELU(x), exact (erf) or the tanh approximation (ONNX approximate="tanh").
cudaError_t GeluForward(ElemType t, const void* x, void* y, int64_t n, bool tanh_approx,
                        cudaStream_t stream);
// dx = dy * GELU'(x).
cudaError_t GeluBackward(ElemType t, const void* dy, const void* x, void* dx, int64_t n,
                         bool tanh_approx, cudaStream_t stream);

// Layer normalization of `rows` rows of `cols` elements: y = (x - mean) *
// rstd * gamma + beta (gamma/beta may be null: 1 and 0). mean and rstd are
// float[rows] (saved for the backward pass). Accumulates in float (double for
// kF64).
cudaError_t LayerNormForward(ElemType t, const void* x, const void* gamma, const void* beta,
                             void* y, float* mean, float* rstd, int64_t rows, int64_t cols,
                             float epsilon, cudaStream_t stream);
// dx of layer normalization given the saved mean and rstd.
cudaError_t LayerNormBackwardData(ElemType t, const void* dy, const void* x, const void* gamma,
                                  const float* mean, const float* rstd, void* dx, int64_t rows,
                                  int64_t cols, cudaStream_t stream);
// dgamma = sum over rows of dy * xhat, dbeta = sum of dy (either may be null).
// Two passes through `partial`, float[2 * LayerNormPartialRows(rows) * cols].
int64_t LayerNormPartialRows(int64_t rows);
cudaError_t LayerNormBackwardParams(ElemType t, const void* dy, const void* x, const float* mean,
                                    const float* rstd, void* dgamma, void* dbeta, float* partial,
                                    int64_t rows, int64_t cols, cudaStream_t stream);

// Optimizer steps, out of place (inputs and outputs may alias), as
// torch.optim.SGD and torch.optim.Adam take them for one tensor of n
// elements. SGD: d = g + wd * p; m' = mu * m + d; p' = p - lr * m' (m null:
// 0). Adam: d = g + wd * p; m' = m + (1 - b1)(d - m); v' = b2 v + (1 - b2) d^2;
// p' = p - (lr / bc1) m' / (sqrt(v') / bc2_sqrt + eps), with the bias
// corrections bc1 = 1 - b1^step, bc2_sqrt = sqrt(1 - b2^step).
cudaError_t SgdMomentumStep(ElemType t, const void* p, const void* g, const void* m, void* p_out,
                            void* m_out, int64_t n, float lr, float mu, float wd,
                            cudaStream_t stream);
cudaError_t AdamStep(ElemType t, const void* p, const void* g, const void* m, const void* v,
                     void* p_out, void* m_out, void* v_out, int64_t n, float lr, float b1,
                     float b2, float eps, float wd, float bc1, float bc2_sqrt,
                     cudaStream_t stream);

// y = x permuted: output dim k is input dim perm[k]. rank <= kMaxPermuteRank.
inline constexpr int kMaxPermuteRank = 8;
cudaError_t Permute(ElemType t, const void* x, void* y, int rank, const int64_t* in_dims,
                    const int* perm, cudaStream_t stream);

// Training-mode dropout keyed by (seed, element index): element i is kept
// when a uniform draw from a hash of (seed, i) is >= ratio, and scaled by
// 1 / (1 - ratio). `mask` (bytes, 1 = kept) may be null. The backward pass
// multiplies by the mask when given, else regenerates it from the seed.
cudaError_t DropoutForward(ElemType t, const void* x, void* y, uint8_t* mask, int64_t n,
                           float ratio, uint64_t seed, cudaStream_t stream);
cudaError_t DropoutBackward(ElemType t, const void* dy, const uint8_t* mask, void* dx, int64_t n,
                            float ratio, uint64_t seed, cudaStream_t stream);

}  // namespace braid::worker::cuda_internal

#endif  // BRAID_WORKER_CUDA_INTERNAL_KERNELS_H_
