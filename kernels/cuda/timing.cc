#include "kernels/cuda/timing.h"

#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/ew_kernel.h"
#include "kernels/cuda/internal/device_buffers.h"

namespace braid::kernels::cuda {
namespace {

using internal::DeviceBuffer;
using internal::EventTimer;
using internal::Stream;

int64_t Product(const std::vector<int64_t>& v) {
  int64_t n = 1;
  for (int64_t d : v) n *= d;
  return n;
}

std::vector<float> Uniform(int64_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

absl::Status CheckReps(int reps) {
  if (reps < 1)
    return absl::InvalidArgumentError(absl::StrCat("timing: reps = ", reps, " must be at least 1"));
  return absl::OkStatus();
}

// Warm-up run, then `reps` timed runs between two events.
template <typename RunFn>
absl::StatusOr<double> TimeRuns(const Stream& stream, int reps, RunFn run) {
  RETURN_IF_ERROR(run());
  RETURN_IF_ERROR(stream.Sync());
  ASSIGN_OR_RETURN(EventTimer timer, EventTimer::Create());
  RETURN_IF_ERROR(timer.Start(stream.get()));
  for (int r = 0; r < reps; ++r) RETURN_IF_ERROR(run());
  RETURN_IF_ERROR(timer.Stop(stream.get()));
  ASSIGN_OR_RETURN(double seconds, timer.Seconds());
  return seconds / reps;
}

}  // namespace

absl::StatusOr<double> TimeEwKernel(const EwProgram& p, int reps) {
  RETURN_IF_ERROR(ValidateProgram(p));
  RETURN_IF_ERROR(CheckReps(reps));
  ASSIGN_OR_RETURN(std::shared_ptr<const CudaEwKernel> kernel, CudaEwKernel::CompileForCurrentDevice(p));
  std::vector<DeviceBuffer> ins, outs;
  std::vector<const float*> in_ptrs;
  std::vector<float*> out_ptrs;
  for (size_t k = 0; k < p.inputs.size(); ++k) {
    ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::Upload(Uniform(Product(p.inputs[k]), 0.5f, 1.5f,
                                                                  static_cast<uint32_t>(k + 1))));
    in_ptrs.push_back(b.floats());
    ins.push_back(std::move(b));
  }
  for (size_t j = 0; j < p.outputs.size(); ++j) {
    const int64_t n = Product(p.OutputShape(static_cast<int>(j)));
    ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::Zeros(static_cast<size_t>(n) * sizeof(float)));
    out_ptrs.push_back(b.floats());
    outs.push_back(std::move(b));
  }
  ASSIGN_OR_RETURN(Stream stream, Stream::Create());
  return TimeRuns(stream, reps, [&] { return kernel->Run(in_ptrs, out_ptrs, stream.get()); });
}

absl::StatusOr<double> TimeLtGemm(const LtGemmSpec& s, int reps) {
  RETURN_IF_ERROR(LtGemmCanImplement(s));
  RETURN_IF_ERROR(CheckReps(reps));
  ASSIGN_OR_RETURN(std::unique_ptr<LtGemm> gemm, LtGemm::Create());
  const int64_t elem = static_cast<int64_t>(LtDataTypeBytes(s.dtype));
  ASSIGN_OR_RETURN(DeviceBuffer a, DeviceBuffer::UploadAs(Uniform(s.a_bytes() / elem, -1, 1, 1), s.dtype));
  ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::UploadAs(Uniform(s.b_bytes() / elem, -1, 1, 2), s.dtype));
  ASSIGN_OR_RETURN(DeviceBuffer c, DeviceBuffer::UploadAs(Uniform(s.c_bytes() / elem, -1, 1, 3), s.dtype));
  ASSIGN_OR_RETURN(DeviceBuffer d, DeviceBuffer::Zeros(static_cast<size_t>(s.c_bytes())));
  ASSIGN_OR_RETURN(DeviceBuffer bias,
                   DeviceBuffer::UploadAs(Uniform(s.bias_bytes() / elem, -1, 1, 4), s.dtype));
  // The ReLU bit-mask input of DRELU is random bits (its cost does not
  // depend on them); the GELU input of DGELU is a matrix of real values.
  DeviceBuffer aux;
  if (LtEpilogueReadsAux(s.epilogue) && !LtEpilogueReluMask(s.epilogue)) {
    ASSIGN_OR_RETURN(aux, DeviceBuffer::UploadAs(Uniform(s.aux_bytes() / elem, -2, 2, 5), s.dtype));
  } else {
    std::vector<uint8_t> bits(static_cast<size_t>(s.aux_bytes()));
    std::mt19937 gen(5);
    for (uint8_t& x : bits) x = static_cast<uint8_t>(gen());
    ASSIGN_OR_RETURN(aux, DeviceBuffer::Upload(bits.data(), bits.size()));
  }
  ASSIGN_OR_RETURN(Stream stream, Stream::Create());
  const LtGemmArgs args{a.get(), b.get(), c.get(), d.get(), bias.get(), aux.get()};
  return TimeRuns(stream, reps, [&] { return gemm->Run(s, args, stream.get()); });
}

}  // namespace braid::kernels::cuda
