// Kernels of the runtime's CUDA backend (see runtime_kernels.h).
#include <algorithm>

#include "worker/cuda/internal/runtime_kernels.h"

namespace braid::worker::cuda_internal {
namespace {

constexpr int kThreads = 256;

int GridFor(int64_t n) {
  return static_cast<int>(
      std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, 1 << 20)));
}

__device__ float LoadF(const void* p, AnyType t, int64_t i) {
  switch (t) {
    case AnyType::kF32: return static_cast<const float*>(p)[i];
    case AnyType::kI64: return static_cast<float>(static_cast<const int64_t*>(p)[i]);
    case AnyType::kI32: return static_cast<float>(static_cast<const int32_t*>(p)[i]);
    case AnyType::kU8: return static_cast<float>(static_cast<const uint8_t*>(p)[i]);
  }
  return 0.f;
}

__device__ int64_t LoadI(const void* p, AnyType t, int64_t i) {
  switch (t) {
    case AnyType::kF32: return static_cast<int64_t>(static_cast<const float*>(p)[i]);
    case AnyType::kI64: return static_cast<const int64_t*>(p)[i];
    case AnyType::kI32: return static_cast<const int32_t*>(p)[i];
    case AnyType::kU8: return static_cast<const uint8_t*>(p)[i];
  }
  return 0;
}

struct MapGeometry {
  int rank;
  int64_t dims[kMaxMapRank];
  MapOperand ops[3];
};

__global__ void TernaryKernel(TernaryCode code, MapGeometry geo, float* out, int64_t n, float p) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t rest = i, off[3] = {0, 0, 0};
    for (int k = geo.rank - 1; k >= 0; --k) {
      const int64_t c = rest % geo.dims[k];
      rest /= geo.dims[k];
      for (int o = 0; o < 3; ++o) off[o] += c * geo.ops[o].strides[k];
    }
    float v[3] = {0.f, 0.f, 0.f};
    for (int o = 0; o < 3; ++o)
      if (geo.ops[o].data != nullptr) v[o] = LoadF(geo.ops[o].data, geo.ops[o].type, off[o]);
    float r = 0.f;
    switch (code) {
      case TernaryCode::kWhere: r = v[0] != 0.f ? v[1] : v[2]; break;
      case TernaryCode::kPowGradBase: r = v[0] * v[2] * powf(v[1], v[2] - 1.f); break;
      case TernaryCode::kPowGradExp: r = v[0] * powf(v[1], v[2]) * logf(v[1]); break;
      case TernaryCode::kWhereGradThen: r = v[1] != 0.f ? v[0] : 0.f; break;
      case TernaryCode::kWhereGradElse: r = v[1] != 0.f ? 0.f : v[0]; break;
      case TernaryCode::kMaskScale: r = v[0] * v[1] * p; break;
    }
    out[i] = r;
  }
}

// Element i of a gather's output [outer, n, inner]: where it reads in the
// data [outer, axis_size, inner] (a negative index counts from the end); -1
// for an index off the axis.
__device__ int64_t GatherRow(const void* idx, AnyType it, int64_t i, int64_t axis_size, int64_t n,
                             int64_t inner) {
  const int64_t in = i % inner, j = (i / inner) % n, o = i / (inner * n);
  int64_t k = LoadI(idx, it, j);
  if (k < 0) k += axis_size;
  if (k < 0 || k >= axis_size) return -1;
  return (o * axis_size + k) * inner + in;
}

__global__ void GatherKernel(const float* data, const void* idx, AnyType it, float* y, int64_t outer,
                             int64_t axis_size, int64_t n, int64_t inner, int* bad) {
  const int64_t total = outer * n * inner;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t at = GatherRow(idx, it, i, axis_size, n, inner);
    if (at < 0) {
      y[i] = 0.f;
      if (bad != nullptr) *bad = 1;
      continue;
    }
    y[i] = data[at];
  }
}

__global__ void GatherGradKernel(const float* dy, const void* idx, AnyType it, float* dx, int64_t outer,
                                 int64_t axis_size, int64_t n, int64_t inner) {
  const int64_t total = outer * n * inner;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t at = GatherRow(idx, it, i, axis_size, n, inner);
    if (at >= 0) atomicAdd(&dx[at], dy[i]);
  }
}

// One block per row (b, i): the row's elements are scores[b, c, i], c < classes.
__device__ void RowMaxSum(const float* scores, int64_t b, int64_t i, int64_t classes, int64_t inner,
                          float* max_out, float* sum_out) {
  __shared__ float red[kThreads];
  const float* base = scores + b * classes * inner + i;
  float m = -INFINITY;
  for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) m = fmaxf(m, base[c * inner]);
  red[threadIdx.x] = m;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
    __syncthreads();
  }
  m = red[0];
  __syncthreads();
  float acc = 0.f;
  for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) acc += expf(base[c * inner] - m);
  red[threadIdx.x] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  *max_out = m;
  *sum_out = red[0];
  __syncthreads();
}

__global__ void SceRowKernel(const float* scores, const void* labels, AnyType lt, float* row_loss,
                             int64_t classes, int64_t inner, int* bad) {
  const int64_t row = blockIdx.x;
  const int64_t b = row / inner, i = row % inner;
  float m, s;
  RowMaxSum(scores, b, i, classes, inner, &m, &s);
  if (threadIdx.x == 0) {
    const int64_t label = LoadI(labels, lt, row);
    if (label < 0 || label >= classes) {
      row_loss[row] = 0.f;
      if (bad != nullptr) *bad = 1;
    } else {
      row_loss[row] = logf(s) + m - scores[(b * classes + label) * inner + i];
    }
  }
}

__global__ void MeanKernel(const float* x, int64_t n, float* out) {
  __shared__ double red[kThreads];
  double acc = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += x[i];
  red[threadIdx.x] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[0] = static_cast<float>(red[0] / static_cast<double>(n));
}

__global__ void SceGradKernel(const float* dloss, const float* scores, const void* labels, AnyType lt,
                              float* dscores, int64_t classes, int64_t inner, float inv_rows) {
  const int64_t row = blockIdx.x;
  const int64_t b = row / inner, i = row % inner;
  float m, s;
  RowMaxSum(scores, b, i, classes, inner, &m, &s);
  const int64_t label = LoadI(labels, lt, row);
  const float scale = dloss[0] * inv_rows;
  for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) {
    const int64_t at = (b * classes + c) * inner + i;
    const float p = expf(scores[at] - m) / s;
    dscores[at] = (p - (c == label ? 1.f : 0.f)) * scale;
  }
}

__global__ void FromFloatKernel(const float* x, void* y, AnyType to, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    switch (to) {
      case AnyType::kF32: static_cast<float*>(y)[i] = x[i]; break;
      case AnyType::kI64: static_cast<int64_t*>(y)[i] = static_cast<int64_t>(x[i]); break;
      case AnyType::kI32: static_cast<int32_t*>(y)[i] = static_cast<int32_t>(x[i]); break;
      case AnyType::kU8: static_cast<uint8_t*>(y)[i] = x[i] != 0.f ? 1 : 0; break;
    }
  }
}

__global__ void ToFloatKernel(const void* x, AnyType from, float* y, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = LoadF(x, from, i);
}

}  // namespace

cudaError_t TernaryMap(TernaryCode code, const MapOperand ops[3], float* out, int rank,
                       const int64_t* dims, float p, cudaStream_t stream) {
  if (rank < 0 || rank > kMaxMapRank) return cudaErrorInvalidValue;
  MapGeometry geo{};
  geo.rank = rank;
  int64_t n = 1;
  for (int k = 0; k < rank; ++k) {
    geo.dims[k] = dims[k];
    n *= dims[k];
  }
  for (int o = 0; o < 3; ++o) geo.ops[o] = ops[o];
  if (n == 0) return cudaSuccess;
  TernaryKernel<<<GridFor(n), kThreads, 0, stream>>>(code, geo, out, n, p);
  return cudaGetLastError();
}

cudaError_t GatherRows(const float* data, const void* idx, AnyType idx_type, float* y, int64_t outer,
                       int64_t axis_size, int64_t n, int64_t inner, int* bad, cudaStream_t stream) {
  const int64_t total = outer * n * inner;
  if (total == 0) return cudaSuccess;
  GatherKernel<<<GridFor(total), kThreads, 0, stream>>>(data, idx, idx_type, y, outer, axis_size, n,
                                                        inner, bad);
  return cudaGetLastError();
}

cudaError_t GatherRowsGrad(const float* dy, const void* idx, AnyType idx_type, float* dx,
                           int64_t outer, int64_t axis_size, int64_t n, int64_t inner,
                           cudaStream_t stream) {
  cudaError_t e = cudaMemsetAsync(dx, 0, sizeof(float) * outer * axis_size * inner, stream);
  if (e != cudaSuccess) return e;
  const int64_t total = outer * n * inner;
  if (total == 0) return cudaSuccess;
  GatherGradKernel<<<GridFor(total), kThreads, 0, stream>>>(dy, idx, idx_type, dx, outer, axis_size,
                                                            n, inner);
  return cudaGetLastError();
}

cudaError_t SoftmaxCrossEntropy(const float* scores, const void* labels, AnyType label_type,
                                float* loss, float* row_loss, int64_t batch, int64_t classes,
                                int64_t inner, int* bad, cudaStream_t stream) {
  const int64_t rows = batch * inner;
  if (rows == 0 || classes == 0 || rows > (int64_t{1} << 31)) return cudaErrorInvalidValue;
  SceRowKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(scores, labels, label_type,
                                                                     row_loss, classes, inner, bad);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  MeanKernel<<<1, kThreads, 0, stream>>>(row_loss, rows, loss);
  return cudaGetLastError();
}

cudaError_t SoftmaxCrossEntropyGrad(const float* dloss, const float* scores, const void* labels,
                                    AnyType label_type, float* dscores, int64_t batch,
                                    int64_t classes, int64_t inner, cudaStream_t stream) {
  const int64_t rows = batch * inner;
  if (rows == 0 || classes == 0 || rows > (int64_t{1} << 31)) return cudaErrorInvalidValue;
  SceGradKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
      dloss, scores, labels, label_type, dscores, classes, inner, 1.0f / static_cast<float>(rows));
  return cudaGetLastError();
}

cudaError_t ConvertFromFloat(const float* x, void* y, AnyType to, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  FromFloatKernel<<<GridFor(n), kThreads, 0, stream>>>(x, y, to, n);
  return cudaGetLastError();
}

cudaError_t ConvertToFloat(const void* x, AnyType from, float* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  ToFloatKernel<<<GridFor(n), kThreads, 0, stream>>>(x, from, y, n);
  return cudaGetLastError();
}

}  // namespace braid::worker::cuda_internal
