// Device-side plumbing of the CUDA profiler: one device with its stream and
// cuBLAS/cuDNN handles, RAII device memory, tensors, and cuDNN descriptors as
// shared handles that the op closures capture by value.
//
//   absl::StatusOr<std::unique_ptr<CudaContext>> ctx = CudaContext::Create(0);
//   absl::StatusOr<DeviceTensor> t = (*ctx)->NewTensor({32, 1024}, graph::DType::kF32, "x");
//   absl::Status s = (*ctx)->FillNormal(*t, /*seed=*/1);
//   absl::StatusOr<TensorDesc> d = MakeTensorDesc({1, 1, 32, 1024}, CUDNN_DATA_FLOAT);
#ifndef BRAID_WORKER_CUDA_INTERNAL_CUDA_CONTEXT_H_
#define BRAID_WORKER_CUDA_INTERNAL_CUDA_CONTEXT_H_

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"
#include "worker/cuda/cuda_device.h"
#include "worker/cuda/internal/kernels.h"

namespace braid::worker::cuda_internal {

// cudaMalloc'd memory, freed on destruction. Move-only.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // ResourceExhausted naming `what` and the size when the device is full.
  static absl::StatusOr<DeviceBuffer> Alloc(int64_t bytes, std::string_view what);
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  void* get() const { return ptr_; }
  int64_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  int64_t bytes_ = 0;
};

// A dense row-major tensor in device memory.
struct DeviceTensor {
  std::string name;
  std::vector<int64_t> shape;
  graph::DType dtype = graph::DType::kF32;
  DeviceBuffer buffer;

  int64_t elements() const;
  int64_t bytes() const { return elements() * graph::DTypeSize(dtype); }
  void* data() const { return buffer.get(); }
};

// The kernels' element type, cuDNN's and cuBLAS's data types for a graph
// dtype. Unimplemented for integer and bool dtypes (no covered op takes them).
absl::StatusOr<ElemType> ElemTypeOf(graph::DType d);
cudnnDataType_t CudnnType(graph::DType d);
cudaDataType_t CublasType(graph::DType d);
// The type cuDNN accumulates in and takes alpha/beta scaling factors as:
// double for f64, float otherwise.
cudnnDataType_t CudnnComputeType(graph::DType d);

// alpha/beta pointers in the type CudnnComputeType says.
struct Scale {
  Scale(graph::DType type, double v)
      : f(static_cast<float>(v)), d(v), is_double(type == graph::DType::kF64) {}
  const void* ptr() const { return is_double ? static_cast<const void*>(&d) : &f; }
  float f;
  double d;
  bool is_double;
};

class CudaContext {
 public:
  // Selects the device, creates a non-blocking stream and the library handles
  // bound to it. FailedPrecondition when there is no such device.
  static absl::StatusOr<std::unique_ptr<CudaContext>> Create(int ordinal);
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;
  ~CudaContext();

  const CudaDeviceInfo& device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  cublasHandle_t cublas() const { return cublas_; }
  cudnnHandle_t cudnn() const { return cudnn_; }

  // Makes this context's device current on the calling thread.
  absl::Status Activate() const;

  absl::StatusOr<DeviceTensor> NewTensor(const std::vector<int64_t>& shape, graph::DType dtype,
                                         std::string name) const;
  // Standard-normal values (see kernels.h); integer dtypes are Unimplemented.
  absl::Status FillNormal(DeviceTensor& t, uint64_t seed) const;
  absl::Status Upload(DeviceTensor& t, const void* host, int64_t bytes) const;
  absl::Status Download(const DeviceTensor& t, void* host, int64_t bytes) const;
  // Waits for the stream; the error of any kernel queued before surfaces here.
  absl::Status Sync(std::string_view what) const;
  // Bytes free on the device now.
  int64_t FreeBytes() const;

 private:
  CudaContext() = default;
  CudaDeviceInfo device_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  cudnnHandle_t cudnn_ = nullptr;
};

// cuDNN descriptors owned by shared_ptr so op closures can hold them.
using TensorDesc = std::shared_ptr<cudnnTensorStruct>;
using FilterDesc = std::shared_ptr<cudnnFilterStruct>;
using ConvDesc = std::shared_ptr<cudnnConvolutionStruct>;
using PoolDesc = std::shared_ptr<cudnnPoolingStruct>;
using ActivationDesc = std::shared_ptr<cudnnActivationStruct>;
using OpTensorDesc = std::shared_ptr<cudnnOpTensorStruct>;
using ReduceDesc = std::shared_ptr<cudnnReduceTensorStruct>;

// A packed (row-major) tensor descriptor; at least 4 dims (cuDNN's minimum).
absl::StatusOr<TensorDesc> MakeTensorDesc(const std::vector<int>& dims, cudnnDataType_t t);
absl::StatusOr<TensorDesc> MakeTensorDesc(const std::vector<int64_t>& dims, cudnnDataType_t t);
absl::StatusOr<FilterDesc> MakeFilterDesc(const std::vector<int>& dims, cudnnDataType_t t);
absl::StatusOr<ConvDesc> MakeConvDesc(const std::vector<int>& pads, const std::vector<int>& strides,
                                      const std::vector<int>& dilations, int groups,
                                      cudnnDataType_t compute, cudnnMathType_t math);
absl::StatusOr<PoolDesc> MakePoolDesc(cudnnPoolingMode_t mode, const std::vector<int>& window,
                                      const std::vector<int>& pads,
                                      const std::vector<int>& strides);
absl::StatusOr<ActivationDesc> MakeActivationDesc(cudnnActivationMode_t mode, double coef);
absl::StatusOr<OpTensorDesc> MakeOpTensorDesc(cudnnOpTensorOp_t op, cudnnDataType_t compute);
absl::StatusOr<ReduceDesc> MakeReduceDesc(cudnnReduceTensorOp_t op, cudnnDataType_t compute);

}  // namespace braid::worker::cuda_internal

#endif  // BRAID_WORKER_CUDA_INTERNAL_CUDA_CONTEXT_H_
