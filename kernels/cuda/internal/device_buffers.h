// RAII owners of CUDA runtime objects for kernels/cuda's timing entry points
// and GPU tests: device memory, a stream, an event pair. Every constructor
// is a factory returning absl::StatusOr, so a machine without a device gets
// the runtime's reason instead of a half-built object.
//
//   ASSIGN_OR_RETURN(DeviceBuffer buf, DeviceBuffer::Upload(host_floats));
//   ASSIGN_OR_RETURN(std::vector<float> back, buf.DownloadFloats(n));
#ifndef BRAID_KERNELS_CUDA_INTERNAL_DEVICE_BUFFERS_H_
#define BRAID_KERNELS_CUDA_INTERNAL_DEVICE_BUFFERS_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/lt_gemm.h"

namespace braid::kernels::cuda::internal {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(o.bytes_) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  ~DeviceBuffer() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }

  // `bytes` (at least 1) of device memory, zeroed.
  static absl::StatusOr<DeviceBuffer> Zeros(size_t bytes) {
    DeviceBuffer b;
    b.bytes_ = bytes == 0 ? 1 : bytes;
    RETURN_IF_ERROR(
        CudaStatus(cudaMalloc(&b.ptr_, b.bytes_), absl::StrCat("cudaMalloc(", b.bytes_, " bytes)")));
    RETURN_IF_ERROR(CudaStatus(cudaMemset(b.ptr_, 0, b.bytes_), "cudaMemset"));
    return b;
  }
  static absl::StatusOr<DeviceBuffer> Upload(const void* host, size_t bytes) {
    ASSIGN_OR_RETURN(DeviceBuffer b, Zeros(bytes));
    if (bytes > 0)
      RETURN_IF_ERROR(CudaStatus(cudaMemcpy(b.ptr_, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy H2D"));
    return b;
  }
  static absl::StatusOr<DeviceBuffer> Upload(const std::vector<float>& v) {
    return Upload(v.data(), v.size() * sizeof(float));
  }
  // `v` converted to `t` (round to nearest even for the 16-bit types).
  static absl::StatusOr<DeviceBuffer> UploadAs(const std::vector<float>& v, LtDataType t) {
    if (t == LtDataType::kF32) return Upload(v);
    std::vector<uint16_t> bits(v.size());
    for (size_t i = 0; i < v.size(); ++i) bits[i] = ToBits16(v[i], t);
    return Upload(bits.data(), bits.size() * 2);
  }

  absl::Status Download(void* host, size_t bytes) const {
    return CudaStatus(cudaMemcpy(host, ptr_, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
  }
  // `n` values of type `t`, as floats.
  absl::StatusOr<std::vector<float>> DownloadAs(size_t n, LtDataType t) const {
    std::vector<float> out(n);
    if (t == LtDataType::kF32) {
      RETURN_IF_ERROR(Download(out.data(), n * sizeof(float)));
      return out;
    }
    std::vector<uint16_t> bits(n);
    RETURN_IF_ERROR(Download(bits.data(), n * 2));
    for (size_t i = 0; i < n; ++i) out[i] = FromBits16(bits[i], t);
    return out;
  }

  // Host conversions of one value to and from a 16-bit type's bits
  // (cuda_fp16.h / cuda_bf16.h, host side).
  static uint16_t ToBits16(float v, LtDataType t) {
    if (t == LtDataType::kF16) return static_cast<__half_raw>(__float2half_rn(v)).x;
    return static_cast<__nv_bfloat16_raw>(__float2bfloat16_rn(v)).x;
  }
  static float FromBits16(uint16_t bits, LtDataType t) {
    if (t == LtDataType::kF16) {
      __half_raw raw;
      raw.x = bits;
      return __half2float(__half(raw));
    }
    __nv_bfloat16_raw raw;
    raw.x = bits;
    return __bfloat162float(__nv_bfloat16(raw));
  }
  // `v` rounded to `t` and back: the values a buffer of type `t` holds.
  static std::vector<float> RoundTo(std::vector<float> v, LtDataType t) {
    if (t != LtDataType::kF32) {
      for (float& x : v) x = FromBits16(ToBits16(x, t), t);
    }
    return v;
  }

  void* get() const { return ptr_; }
  float* floats() const { return static_cast<float*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

class Stream {
 public:
  Stream() = default;
  Stream(Stream&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  Stream& operator=(Stream&&) = delete;
  ~Stream() {
    if (s_ != nullptr) cudaStreamDestroy(s_);
  }
  static absl::StatusOr<Stream> Create() {
    Stream s;
    RETURN_IF_ERROR(CudaStatus(cudaStreamCreateWithFlags(&s.s_, cudaStreamNonBlocking), "cudaStreamCreate"));
    return s;
  }
  cudaStream_t get() const { return s_; }
  absl::Status Sync() const { return CudaStatus(cudaStreamSynchronize(s_), "cudaStreamSynchronize"); }

 private:
  cudaStream_t s_ = nullptr;
};

// Two events bracketing work on a stream; Seconds() waits for the second.
class EventTimer {
 public:
  EventTimer() = default;
  EventTimer(EventTimer&& o) noexcept
      : start_(std::exchange(o.start_, nullptr)), stop_(std::exchange(o.stop_, nullptr)) {}
  EventTimer& operator=(EventTimer&&) = delete;
  ~EventTimer() {
    if (start_ != nullptr) cudaEventDestroy(start_);
    if (stop_ != nullptr) cudaEventDestroy(stop_);
  }
  static absl::StatusOr<EventTimer> Create() {
    EventTimer t;
    RETURN_IF_ERROR(CudaStatus(cudaEventCreate(&t.start_), "cudaEventCreate"));
    RETURN_IF_ERROR(CudaStatus(cudaEventCreate(&t.stop_), "cudaEventCreate"));
    return t;
  }
  absl::Status Start(cudaStream_t s) { return CudaStatus(cudaEventRecord(start_, s), "cudaEventRecord"); }
  absl::Status Stop(cudaStream_t s) { return CudaStatus(cudaEventRecord(stop_, s), "cudaEventRecord"); }
  absl::StatusOr<double> Seconds() const {
    RETURN_IF_ERROR(CudaStatus(cudaEventSynchronize(stop_), "cudaEventSynchronize"));
    float ms = 0;
    RETURN_IF_ERROR(CudaStatus(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime"));
    return ms * 1e-3;
  }

 private:
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

}  // namespace braid::kernels::cuda::internal

#endif  // BRAID_KERNELS_CUDA_INTERNAL_DEVICE_BUFFERS_H_
