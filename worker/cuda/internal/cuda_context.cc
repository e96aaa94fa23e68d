#include "worker/cuda/internal/cuda_context.h"

#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "glog/logging.h"
#include "worker/cuda/cuda_status.h"
#include "worker/cuda/internal/op_geometry.h"

namespace braid::worker::cuda_internal {

absl::StatusOr<DeviceBuffer> DeviceBuffer::Alloc(int64_t bytes, std::string_view what) {
  DeviceBuffer b;
  if (bytes <= 0) return b;
  cudaError_t e = cudaMalloc(&b.ptr_, static_cast<size_t>(bytes));
  if (e != cudaSuccess) {
    // Out of memory is not sticky: clear it so a later cudaGetLastError does
    // not report it again.
    (void)cudaGetLastError();
    return CudaStatus(e, absl::StrCat("cudaMalloc ", bytes, " bytes for ", std::string(what)));
  }
  b.bytes_ = bytes;
  return b;
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_ != nullptr) cudaFree(ptr_);
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ != nullptr) cudaFree(ptr_);
}

int64_t DeviceTensor::elements() const { return Product(shape); }

absl::StatusOr<ElemType> ElemTypeOf(graph::DType d) {
  switch (d) {
    case graph::DType::kF32:
      return ElemType::kF32;
    case graph::DType::kF16:
      return ElemType::kF16;
    case graph::DType::kBF16:
      return ElemType::kBF16;
    case graph::DType::kF64:
      return ElemType::kF64;
    default:
      return absl::UnimplementedError(absl::StrCat("cuda profiler: dtype ",
                                                   std::string(graph::DTypeName(d)),
                                                   " is not mapped (floating dtypes only)"));
  }
}

cudnnDataType_t CudnnType(graph::DType d) {
  switch (d) {
    case graph::DType::kF16:
      return CUDNN_DATA_HALF;
    case graph::DType::kBF16:
      return CUDNN_DATA_BFLOAT16;
    case graph::DType::kF64:
      return CUDNN_DATA_DOUBLE;
    default:
      return CUDNN_DATA_FLOAT;
  }
}

cudaDataType_t CublasType(graph::DType d) {
  switch (d) {
    case graph::DType::kF16:
      return CUDA_R_16F;
    case graph::DType::kBF16:
      return CUDA_R_16BF;
    case graph::DType::kF64:
      return CUDA_R_64F;
    default:
      return CUDA_R_32F;
  }
}

cudnnDataType_t CudnnComputeType(graph::DType d) {
  return d == graph::DType::kF64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
}

absl::StatusOr<std::unique_ptr<CudaContext>> CudaContext::Create(int ordinal) {
  ASSIGN_OR_RETURN(CudaDeviceInfo info, FindCudaDevice(ordinal));
  std::unique_ptr<CudaContext> c(new CudaContext());
  c->device_ = std::move(info);
  RETURN_IF_ERROR(c->Activate());
  RETURN_IF_ERROR(CudaStatus(cudaStreamCreateWithFlags(&c->stream_, cudaStreamNonBlocking),
                             "cudaStreamCreate"));
  RETURN_IF_ERROR(CublasStatus(cublasCreate(&c->cublas_), "cublasCreate"));
  RETURN_IF_ERROR(CublasStatus(cublasSetStream(c->cublas_, c->stream_), "cublasSetStream"));
  // fp32 GEMMs stay in full fp32 (no TF32), PyTorch's default since 1.12
  // (torch.backends.cuda.matmul.allow_tf32 = False).
  RETURN_IF_ERROR(
      CublasStatus(cublasSetMathMode(c->cublas_, CUBLAS_DEFAULT_MATH), "cublasSetMathMode"));
  RETURN_IF_ERROR(CudnnStatus(cudnnCreate(&c->cudnn_), "cudnnCreate"));
  RETURN_IF_ERROR(CudnnStatus(cudnnSetStream(c->cudnn_, c->stream_), "cudnnSetStream"));
  return c;
}

CudaContext::~CudaContext() {
  if (cudnn_ != nullptr) cudnnDestroy(cudnn_);
  if (cublas_ != nullptr) cublasDestroy(cublas_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

absl::Status CudaContext::Activate() const {
  return CudaStatus(cudaSetDevice(device_.ordinal),
                    absl::StrCat("cudaSetDevice(", device_.ordinal, ")"));
}

absl::StatusOr<DeviceTensor> CudaContext::NewTensor(const std::vector<int64_t>& shape,
                                                    graph::DType dtype, std::string name) const {
  DeviceTensor t;
  t.name = std::move(name);
  t.shape = shape;
  t.dtype = dtype;
  ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::Alloc(t.bytes(), t.name));
  t.buffer = std::move(b);
  return t;
}

absl::Status CudaContext::FillNormal(DeviceTensor& t, uint64_t seed) const {
  ASSIGN_OR_RETURN(ElemType e, ElemTypeOf(t.dtype));
  return CudaStatus(cuda_internal::FillNormal(e, t.data(), t.elements(), seed, stream_),
                    absl::StrCat("fill ", t.name));
}

absl::Status CudaContext::Upload(DeviceTensor& t, const void* host, int64_t bytes) const {
  if (bytes != t.bytes()) {
    return absl::InvalidArgumentError(
        absl::StrCat("upload to ", t.name, ": ", bytes, " bytes for a tensor of ", t.bytes()));
  }
  RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(t.data(), host, bytes, cudaMemcpyHostToDevice, stream_), "upload " + t.name));
  return Sync("upload " + t.name);
}

absl::Status CudaContext::Download(const DeviceTensor& t, void* host, int64_t bytes) const {
  if (bytes != t.bytes()) {
    return absl::InvalidArgumentError(
        absl::StrCat("download of ", t.name, ": ", bytes, " bytes for a tensor of ", t.bytes()));
  }
  RETURN_IF_ERROR(
      CudaStatus(cudaMemcpyAsync(host, t.data(), bytes, cudaMemcpyDeviceToHost, stream_),
                 "download " + t.name));
  return Sync("download " + t.name);
}

absl::Status CudaContext::Sync(std::string_view what) const {
  return CudaStatus(cudaStreamSynchronize(stream_), what);
}

int64_t CudaContext::FreeBytes() const {
  size_t free_b = 0, total = 0;
  if (cudaMemGetInfo(&free_b, &total) != cudaSuccess) return 0;
  return static_cast<int64_t>(free_b);
}

// ---- descriptors ----

absl::StatusOr<TensorDesc> MakeTensorDesc(const std::vector<int>& dims_in, cudnnDataType_t t) {
  std::vector<int> dims = dims_in;
  while (dims.size() < 4) dims.push_back(1);
  std::vector<int> strides(dims.size());
  int64_t s = 1;
  for (size_t i = dims.size(); i-- > 0;) {
    strides[i] = static_cast<int>(s);
    s *= dims[i];
  }
  if (s > std::numeric_limits<int>::max()) {
    return absl::UnimplementedError(
        absl::StrCat("a tensor of ", s, " elements exceeds cuDNN's int strides"));
  }
  cudnnTensorDescriptor_t d = nullptr;
  RETURN_IF_ERROR(CudnnStatus(cudnnCreateTensorDescriptor(&d), "cudnnCreateTensorDescriptor"));
  TensorDesc h(d, cudnnDestroyTensorDescriptor);
  RETURN_IF_ERROR(CudnnStatus(
      cudnnSetTensorNdDescriptor(d, t, static_cast<int>(dims.size()), dims.data(), strides.data()),
      "cudnnSetTensorNdDescriptor"));
  return h;
}

absl::StatusOr<TensorDesc> MakeTensorDesc(const std::vector<int64_t>& dims, cudnnDataType_t t) {
  absl::StatusOr<std::vector<int>> d = ToIntDims(dims);
  if (!d.ok()) return absl::UnimplementedError(std::string(d.status().message()));
  return MakeTensorDesc(*d, t);
}

absl::StatusOr<FilterDesc> MakeFilterDesc(const std::vector<int>& dims, cudnnDataType_t t) {
  cudnnFilterDescriptor_t d = nullptr;
  RETURN_IF_ERROR(CudnnStatus(cudnnCreateFilterDescriptor(&d), "cudnnCreateFilterDescriptor"));
  FilterDesc h(d, cudnnDestroyFilterDescriptor);
  RETURN_IF_ERROR(
      CudnnStatus(cudnnSetFilterNdDescriptor(d, t, CUDNN_TENSOR_NCHW, static_cast<int>(dims.size()),
                                             dims.data()),
                  "cudnnSetFilterNdDescriptor"));
  return h;
}

absl::StatusOr<ConvDesc> MakeConvDesc(const std::vector<int>& pads, const std::vector<int>& strides,
                                      const std::vector<int>& dilations, int groups,
                                      cudnnDataType_t compute, cudnnMathType_t math) {
  cudnnConvolutionDescriptor_t d = nullptr;
  RETURN_IF_ERROR(
      CudnnStatus(cudnnCreateConvolutionDescriptor(&d), "cudnnCreateConvolutionDescriptor"));
  ConvDesc h(d, cudnnDestroyConvolutionDescriptor);
  RETURN_IF_ERROR(CudnnStatus(
      cudnnSetConvolutionNdDescriptor(d, static_cast<int>(pads.size()), pads.data(), strides.data(),
                                      dilations.data(), CUDNN_CROSS_CORRELATION, compute),
      "cudnnSetConvolutionNdDescriptor"));
  RETURN_IF_ERROR(
      CudnnStatus(cudnnSetConvolutionGroupCount(d, groups), "cudnnSetConvolutionGroupCount"));
  RETURN_IF_ERROR(CudnnStatus(cudnnSetConvolutionMathType(d, math), "cudnnSetConvolutionMathType"));
  return h;
}

absl::StatusOr<PoolDesc> MakePoolDesc(cudnnPoolingMode_t mode, const std::vector<int>& window,
                                      const std::vector<int>& pads,
                                      const std::vector<int>& strides) {
  cudnnPoolingDescriptor_t d = nullptr;
  RETURN_IF_ERROR(CudnnStatus(cudnnCreatePoolingDescriptor(&d), "cudnnCreatePoolingDescriptor"));
  PoolDesc h(d, cudnnDestroyPoolingDescriptor);
  RETURN_IF_ERROR(CudnnStatus(
      cudnnSetPoolingNdDescriptor(d, mode, CUDNN_PROPAGATE_NAN, static_cast<int>(window.size()),
                                  window.data(), pads.data(), strides.data()),
      "cudnnSetPoolingNdDescriptor"));
  return h;
}

absl::StatusOr<ActivationDesc> MakeActivationDesc(cudnnActivationMode_t mode, double coef) {
  cudnnActivationDescriptor_t d = nullptr;
  RETURN_IF_ERROR(
      CudnnStatus(cudnnCreateActivationDescriptor(&d), "cudnnCreateActivationDescriptor"));
  ActivationDesc h(d, cudnnDestroyActivationDescriptor);
  RETURN_IF_ERROR(CudnnStatus(cudnnSetActivationDescriptor(d, mode, CUDNN_PROPAGATE_NAN, coef),
                              "cudnnSetActivationDescriptor"));
  return h;
}

absl::StatusOr<OpTensorDesc> MakeOpTensorDesc(cudnnOpTensorOp_t op, cudnnDataType_t compute) {
  cudnnOpTensorDescriptor_t d = nullptr;
  RETURN_IF_ERROR(CudnnStatus(cudnnCreateOpTensorDescriptor(&d), "cudnnCreateOpTensorDescriptor"));
  OpTensorDesc h(d, cudnnDestroyOpTensorDescriptor);
  RETURN_IF_ERROR(CudnnStatus(cudnnSetOpTensorDescriptor(d, op, compute, CUDNN_PROPAGATE_NAN),
                              "cudnnSetOpTensorDescriptor"));
  return h;
}

absl::StatusOr<ReduceDesc> MakeReduceDesc(cudnnReduceTensorOp_t op, cudnnDataType_t compute) {
  cudnnReduceTensorDescriptor_t d = nullptr;
  RETURN_IF_ERROR(
      CudnnStatus(cudnnCreateReduceTensorDescriptor(&d), "cudnnCreateReduceTensorDescriptor"));
  ReduceDesc h(d, cudnnDestroyReduceTensorDescriptor);
  RETURN_IF_ERROR(CudnnStatus(
      cudnnSetReduceTensorDescriptor(d, op, compute, CUDNN_PROPAGATE_NAN,
                                     CUDNN_REDUCE_TENSOR_NO_INDICES, CUDNN_32BIT_INDICES),
      "cudnnSetReduceTensorDescriptor"));
  return h;
}

}  // namespace braid::worker::cuda_internal
