// Device kernels of the CUDA profiler (see kernels.h for why these and no
// others). Accumulation is in float (double for f64 tensors), as PyTorch's
// kernels do for half and bfloat16.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "worker/cuda/internal/kernels.h"

namespace braid::worker::cuda_internal {
namespace {

constexpr int kThreads = 256;

template <typename T>
struct AccOf {
  using type = float;
};
template <>
struct AccOf<double> {
  using type = double;
};
template <typename T>
using Acc = typename AccOf<T>::type;

int GridFor(int64_t n) {
  return static_cast<int>(
      std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, 1 << 20)));
}

// splitmix64: a full-period 64-bit mixer, enough for test data.
__device__ uint64_t Mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

template <typename T>
__global__ void FillNormalKernel(T* out, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint64_t h = Mix(seed ^ Mix(static_cast<uint64_t>(i)));
    // Box-Muller on two 24-bit uniforms in (0, 1].
    const float u1 = (static_cast<float>(h >> 40) + 1.0f) * (1.0f / 16777216.0f);
    const float u2 = static_cast<float>((h >> 16) & 0xffffff) * (1.0f / 16777216.0f);
    const float v = sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
    out[i] = static_cast<T>(v);
  }
}

constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;
constexpr float kSqrt2OverPi = 0.79788456080286536f;
constexpr float kGeluCoeff = 0.044715f;

template <typename T>
__global__ void GeluForwardKernel(const T* x, T* y, int64_t n, bool tanh_approx) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = static_cast<float>(x[i]);
    float r;
    if (tanh_approx) {
      r = 0.5f * v * (1.0f + tanhf(kSqrt2OverPi * (v + kGeluCoeff * v * v * v)));
    } else {
      r = 0.5f * v * (1.0f + erff(v * kInvSqrt2));
    }
    y[i] = static_cast<T>(r);
  }
}

template <typename T>
__global__ void GeluBackwardKernel(const T* dy, const T* x, T* dx, int64_t n, bool tanh_approx) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = static_cast<float>(x[i]);
    float d;
    if (tanh_approx) {
      const float t = tanhf(kSqrt2OverPi * (v + kGeluCoeff * v * v * v));
      d = 0.5f * (1.0f + t) +
          0.5f * v * (1.0f - t * t) * kSqrt2OverPi * (1.0f + 3.0f * kGeluCoeff * v * v);
    } else {
      d = 0.5f * (1.0f + erff(v * kInvSqrt2)) + v * kInvSqrt2Pi * expf(-0.5f * v * v);
    }
    dx[i] = static_cast<T>(static_cast<float>(dy[i]) * d);
  }
}

// Sum over the block; every thread gets the result. `scratch` holds 32 values.
template <typename A>
__device__ A BlockSum(A v, A* scratch) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();  // scratch may still be read from a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) >> 5;
  v = lane < warps ? scratch[lane] : A(0);
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// One block per row: mean, then variance around it (two passes, stable), then y.
template <typename T>
__global__ void LayerNormForwardKernel(const T* x, const T* gamma, const T* beta, T* y, float* mean,
                                       float* rstd, int64_t cols, float eps) {
  using A = Acc<T>;
  __shared__ A scratch[32];
  const int64_t row = blockIdx.x;
  const T* xr = x + row * cols;
  T* yr = y + row * cols;
  A s = 0;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) s += static_cast<A>(xr[j]);
  const A mu = BlockSum(s, scratch) / static_cast<A>(cols);
  A v = 0;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const A d = static_cast<A>(xr[j]) - mu;
    v += d * d;
  }
  const A rs = A(1) / sqrt(BlockSum(v, scratch) / static_cast<A>(cols) + static_cast<A>(eps));
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    A o = (static_cast<A>(xr[j]) - mu) * rs;
    if (gamma != nullptr) o *= static_cast<A>(gamma[j]);
    if (beta != nullptr) o += static_cast<A>(beta[j]);
    yr[j] = static_cast<T>(o);
  }
  if (threadIdx.x == 0) {
    mean[row] = static_cast<float>(mu);
    rstd[row] = static_cast<float>(rs);
  }
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * gamma.
template <typename T>
__global__ void LayerNormBackwardDataKernel(const T* dy, const T* x, const T* gamma,
                                            const float* mean, const float* rstd, T* dx,
                                            int64_t cols) {
  using A = Acc<T>;
  __shared__ A scratch[32];
  const int64_t row = blockIdx.x;
  const T* dyr = dy + row * cols;
  const T* xr = x + row * cols;
  T* dxr = dx + row * cols;
  const A mu = mean[row], rs = rstd[row];
  A sg = 0, sgx = 0;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const A g = static_cast<A>(dyr[j]) * (gamma != nullptr ? static_cast<A>(gamma[j]) : A(1));
    sg += g;
    sgx += g * (static_cast<A>(xr[j]) - mu) * rs;
  }
  const A n = static_cast<A>(cols);
  const A mg = BlockSum(sg, scratch) / n;
  const A mgx = BlockSum(sgx, scratch) / n;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const A g = static_cast<A>(dyr[j]) * (gamma != nullptr ? static_cast<A>(gamma[j]) : A(1));
    const A xhat = (static_cast<A>(xr[j]) - mu) * rs;
    dxr[j] = static_cast<T>(rs * (g - mg - xhat * mgx));
  }
}

// Column sums in two passes so that a few columns over many rows still fill
// the GPU: pass 1 reduces chunks of ChunkRows() rows per (32-column tile,
// chunk) block into `partial`, pass 2 adds the chunks up.
constexpr int64_t kMinChunkRows = 64;
constexpr int64_t kMaxChunks = 65535;  // gridDim.y limit
constexpr int kTileCols = 32, kTileRows = 8;

int64_t ChunkRows(int64_t rows) {
  return std::max<int64_t>(kMinChunkRows, (rows + kMaxChunks - 1) / kMaxChunks);
}

template <typename T>
__global__ void LayerNormParamsPartialKernel(const T* dy, const T* x, const float* mean,
                                             const float* rstd, float* partial, int64_t rows,
                                             int64_t cols, int64_t chunks, int64_t chunk_rows) {
  __shared__ float sg[kTileRows][kTileCols + 1], sb[kTileRows][kTileCols + 1];
  const int64_t col = blockIdx.x * static_cast<int64_t>(kTileCols) + threadIdx.x;
  const int64_t chunk = blockIdx.y;
  const int64_t end = min(rows, (chunk + 1) * chunk_rows);
  float g = 0, b = 0;
  if (col < cols) {
    for (int64_t r = chunk * chunk_rows + threadIdx.y; r < end; r += kTileRows) {
      const float d = static_cast<float>(dy[r * cols + col]);
      g += d * (static_cast<float>(x[r * cols + col]) - mean[r]) * rstd[r];
      b += d;
    }
  }
  sg[threadIdx.y][threadIdx.x] = g;
  sb[threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    for (int k = 1; k < kTileRows; ++k) {
      g += sg[k][threadIdx.x];
      b += sb[k][threadIdx.x];
    }
    partial[chunk * cols + col] = g;
    partial[(chunks + chunk) * cols + col] = b;
  }
}

template <typename T>
__global__ void LayerNormParamsFinalKernel(const float* partial, T* dgamma, T* dbeta, int64_t cols,
                                           int64_t chunks) {
  const int64_t col = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (col >= cols) return;
  float g = 0, b = 0;
  for (int64_t c = 0; c < chunks; ++c) {
    g += partial[c * cols + col];
    b += partial[(chunks + c) * cols + col];
  }
  if (dgamma != nullptr) dgamma[col] = static_cast<T>(g);
  if (dbeta != nullptr) dbeta[col] = static_cast<T>(b);
}

// Optimizer steps (kernels.h).
template <typename T>
__global__ void SgdMomentumKernel(const T* p, const T* g, const T* m, T* p_out, T* m_out,
                                  int64_t n, float lr, float mu, float wd) {
  using A = Acc<T>;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const A pv = static_cast<A>(p[i]);
    const A d = static_cast<A>(g[i]) + static_cast<A>(wd) * pv;
    const A b = (m != nullptr ? static_cast<A>(mu) * static_cast<A>(m[i]) : A(0)) + d;
    m_out[i] = static_cast<T>(b);
    p_out[i] = static_cast<T>(pv - static_cast<A>(lr) * b);
  }
}

template <typename T>
__global__ void AdamKernel(const T* p, const T* g, const T* m, const T* v, T* p_out, T* m_out,
                           T* v_out, int64_t n, float lr, float b1, float b2, float eps, float wd,
                           float bc1, float bc2_sqrt) {
  using A = Acc<T>;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const A pv = static_cast<A>(p[i]);
    const A d = static_cast<A>(g[i]) + static_cast<A>(wd) * pv;
    const A mv = m != nullptr ? static_cast<A>(m[i]) : A(0);
    const A vv = v != nullptr ? static_cast<A>(v[i]) : A(0);
    const A m2 = mv + (A(1) - static_cast<A>(b1)) * (d - mv);
    const A v2 = static_cast<A>(b2) * vv + (A(1) - static_cast<A>(b2)) * d * d;
    const A denom = sqrt(v2) / static_cast<A>(bc2_sqrt) + static_cast<A>(eps);
    m_out[i] = static_cast<T>(m2);
    v_out[i] = static_cast<T>(v2);
    p_out[i] = static_cast<T>(pv - static_cast<A>(lr) / static_cast<A>(bc1) * m2 / denom);
  }
}

struct PermuteGeometry {
  int rank;
  int64_t out_dims[kMaxPermuteRank];
  int64_t in_strides[kMaxPermuteRank];  // the input stride of output dim k
};

template <typename T>
__global__ void PermuteKernel(const T* x, T* y, int64_t n, PermuteGeometry geo) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t rest = i, src = 0;
    for (int k = geo.rank - 1; k >= 0; --k) {
      const int64_t c = rest % geo.out_dims[k];
      rest /= geo.out_dims[k];
      src += c * geo.in_strides[k];
    }
    y[i] = x[src];
  }
}

// Whether element i survives dropout at `ratio` under `seed`.
__device__ bool DropoutKeep(uint64_t seed, int64_t i, float ratio) {
  const uint64_t h = Mix(seed ^ Mix(static_cast<uint64_t>(i)));
  const float u = static_cast<float>(h >> 40) * (1.0f / 16777216.0f);  // [0, 1)
  return u >= ratio;
}

template <typename T>
__global__ void DropoutForwardKernel(const T* x, T* y, uint8_t* mask, int64_t n, float ratio,
                                     float scale, uint64_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const bool keep = DropoutKeep(seed, i, ratio);
    y[i] = static_cast<T>(keep ? static_cast<Acc<T>>(x[i]) * scale : Acc<T>(0));
    if (mask != nullptr) mask[i] = keep ? 1 : 0;
  }
}

template <typename T>
__global__ void DropoutBackwardKernel(const T* dy, const uint8_t* mask, T* dx, int64_t n,
                                      float ratio, float scale, uint64_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const bool keep = mask != nullptr ? mask[i] != 0 : DropoutKeep(seed, i, ratio);
    dx[i] = static_cast<T>(keep ? static_cast<Acc<T>>(dy[i]) * scale : Acc<T>(0));
  }
}

// Calls f(T{}) with T the C++ type of `t`.
template <typename F>
cudaError_t Dispatch(ElemType t, F&& f) {
  switch (t) {
    case ElemType::kF32:
      f(float{});
      break;
    case ElemType::kF16:
      f(__half{});
      break;
    case ElemType::kBF16:
      f(__nv_bfloat16{});
      break;
    case ElemType::kF64:
      f(double{});
      break;
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t FillNormal(ElemType t, void* data, int64_t n, uint64_t seed, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  return Dispatch(t, [&](auto z) {
    using T = decltype(z);
    FillNormalKernel<T><<<GridFor(n), kThreads, 0, stream>>>(static_cast<T*>(data), n, seed);
  });
}

cudaError_t GeluForward(ElemType t, const void* x, void* y, int64_t n, bool tanh_approx,
                        cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  return Dispatch(t, [&](auto z) {
    using T = decltype(z);
    GeluForwardKernel<T><<<GridFor(n), kThreads, 0, stream>>>(static_cast<const T*>(x),
                                                              static_cast<T*>(y), n, tanh_approx);
  });
}

cudaError_t GeluBackward(ElemType t, const void* dy, const void* x, void* dx, int64_t n,
                         bool tanh_approx, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  return Dispatch(t, [&](auto z) {
    using T = decltype(z);
    GeluBackwardKernel<T><<<GridFor(n), kThreads, 0, stream>>>(
        static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<T*>(dx), n, tanh_approx);
  });
}

cudaError_t LayerNormForward(ElemType t, const void* x, const void* gamma, const void* beta,
                             void* y, float* mean, float* rstd, int64_t rows, int64_t cols,
                             float epsilon, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  return Dispatch(t, [&](auto z) {
    using T = decltype(z);
    LayerNormForwardKernel<T><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(gamma), static_cast<const T*>(beta),
        static_cast<T*>(y), mean, rstd, cols, epsilon);
  });
}

cudaError_t LayerNormBackwardData(ElemType t, const void* dy, const void* x, const void* gamma,
                                  const float* mean, const float* rstd, void* dx, int64_t rows,
                                  int64_t cols, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  return Dispatch(t, [&](auto z) {
    using T = decltype(z);
    LayerNormBackwardDataKernel<T><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
        static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<const T*>(gamma), mean,
        rstd, static_cast<T*>(dx), cols);
  });
}

int64_t LayerNormPartialRows(int64_t rows) {
  return std::max<int64_t>(1, (rows + ChunkRows(rows) - 1) / ChunkRows(rows));
}

cudaError_t LayerNormBackwardParams(ElemType t, const void* dy, const void* x, const float* mean,
                                    const float* rstd, void* dgamma, void* dbeta, float* partial,
                                    int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  const int64_t chunks = LayerNormPartialRows(rows);
  return Dispatch(t, [&](auto z) {
    using T = decltype(z);
    dim3 grid(static_cast<unsigned>((cols + kTileCols - 1) / kTileCols),
              static_cast<unsigned>(chunks));
    LayerNormParamsPartialKernel<T><<<grid, dim3(kTileCols, kTileRows), 0, stream>>>(
        static_cast<const T*>(dy), static_cast<const T*>(x), mean, rstd, partial, rows, cols,
        chunks, ChunkRows(rows));
    LayerNormParamsFinalKernel<T><<<GridFor(cols), kThreads, 0, stream>>>(
        partial, static_cast<T*>(dgamma), static_cast<T*>(dbeta), cols, chunks);
  });
}

cudaError_t SgdMomentumStep(ElemType t, const void* p, const void* g, const void* m, void* p_out,
                            void* m_out, int64_t n, float lr, float mu, float wd,
                            cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  return Dispatch(t, [&](auto z) {
    using T = decltype(z);
    SgdMomentumKernel<T><<<GridFor(n), kThreads, 0, stream>>>(
        static_cast<const T*>(p), static_cast<const T*>(g), static_cast<const T*>(m),
        static_cast<T*>(p_out), static_cast<T*>(m_out), n, lr, mu, wd);
  });
}

cudaError_t AdamStep(ElemType t, const void* p, const void* g, const void* m, const void* v,
                     void* p_out, void* m_out, void* v_out, int64_t n, float lr, float b1,
                     float b2, float eps, float wd, float bc1, float bc2_sqrt,
                     cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  return Dispatch(t, [&](auto z) {
    using T = decltype(z);
    AdamKernel<T><<<GridFor(n), kThreads, 0, stream>>>(
        static_cast<const T*>(p), static_cast<const T*>(g), static_cast<const T*>(m),
        static_cast<const T*>(v), static_cast<T*>(p_out), static_cast<T*>(m_out),
        static_cast<T*>(v_out), n, lr, b1, b2, eps, wd, bc1, bc2_sqrt);
  });
}

cudaError_t Permute(ElemType t, const void* x, void* y, int rank, const int64_t* in_dims,
                    const int* perm, cudaStream_t stream) {
  if (rank < 0 || rank > kMaxPermuteRank) return cudaErrorInvalidValue;
  PermuteGeometry geo{};
  geo.rank = rank;
  int64_t in_strides[kMaxPermuteRank];
  int64_t stride = 1, n = 1;
  for (int k = rank - 1; k >= 0; --k) {
    in_strides[k] = stride;
    stride *= in_dims[k];
  }
  for (int k = 0; k < rank; ++k) {
    if (perm[k] < 0 || perm[k] >= rank) return cudaErrorInvalidValue;
    geo.out_dims[k] = in_dims[perm[k]];
    geo.in_strides[k] = in_strides[perm[k]];
    n *= geo.out_dims[k];
  }
  if (n <= 0) return cudaSuccess;
  return Dispatch(t, [&](auto z) {
    using T = decltype(z);
    PermuteKernel<T><<<GridFor(n), kThreads, 0, stream>>>(static_cast<const T*>(x),
                                                          static_cast<T*>(y), n, geo);
  });
}

cudaError_t DropoutForward(ElemType t, const void* x, void* y, uint8_t* mask, int64_t n,
                           float ratio, uint64_t seed, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (!(ratio >= 0.0f && ratio < 1.0f)) return cudaErrorInvalidValue;
  const float scale = 1.0f / (1.0f - ratio);
  return Dispatch(t, [&](auto z) {
    using T = decltype(z);
    DropoutForwardKernel<T><<<GridFor(n), kThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<T*>(y), mask, n, ratio, scale, seed);
  });
}

cudaError_t DropoutBackward(ElemType t, const void* dy, const uint8_t* mask, void* dx, int64_t n,
                            float ratio, uint64_t seed, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (!(ratio >= 0.0f && ratio < 1.0f)) return cudaErrorInvalidValue;
  const float scale = 1.0f / (1.0f - ratio);
  return Dispatch(t, [&](auto z) {
    using T = decltype(z);
    DropoutBackwardKernel<T><<<GridFor(n), kThreads, 0, stream>>>(
        static_cast<const T*>(dy), mask, static_cast<T*>(dx), n, ratio, scale, seed);
  });
}

}  // namespace braid::worker::cuda_internal
