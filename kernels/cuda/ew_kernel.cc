#include "kernels/cuda/ew_kernel.h"

#include <nvrtc.h>

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "kernels/cuda/ew_codegen.h"

namespace braid::kernels::cuda {
namespace {

// NVRTC's log is kept in the error, capped: a failing generated source is a
// braid bug and the first lines say which.
constexpr size_t kMaxLogChars = 4000;

struct Target {
  std::string name;  // "sm_80" / "compute_90"
  CudaArch arch;
  bool ptx = false;
};

absl::StatusOr<std::vector<int>> SupportedArchs() {
  int n = 0;
  RETURN_IF_ERROR(NvrtcStatus(nvrtcGetNumSupportedArchs(&n), "nvrtcGetNumSupportedArchs"));
  std::vector<int> archs(static_cast<size_t>(n));
  RETURN_IF_ERROR(NvrtcStatus(nvrtcGetSupportedArchs(archs.data()), "nvrtcGetSupportedArchs"));
  std::sort(archs.begin(), archs.end());
  return archs;
}

absl::StatusOr<Target> PickTarget(int major, int minor) {
  if (major < 1 || minor < 0 || minor > 9) {
    return absl::InvalidArgumentError(absl::StrCat("bad compute capability ", major, ".", minor));
  }
  ASSIGN_OR_RETURN(std::vector<int> archs, SupportedArchs());
  const int want = major * 10 + minor;
  if (archs.empty() || want < archs.front()) {
    return absl::FailedPreconditionError(absl::StrCat("NVRTC ", archs.empty() ? 0 : archs.front(),
                                                      "+ does not target sm_", want,
                                                      " (supported: ", absl::StrJoin(archs, ","), ")"));
  }
  if (std::find(archs.begin(), archs.end(), want) != archs.end()) {
    return Target{absl::StrCat("sm_", want), CudaArch{major, minor}, false};
  }
  // Newer (or unlisted) architecture: PTX of the newest one not above it.
  const int best = *std::prev(std::upper_bound(archs.begin(), archs.end(), want));
  return Target{absl::StrCat("compute_", best), CudaArch{best / 10, best % 10}, true};
}

struct ProgramDeleter {
  void operator()(nvrtcProgram p) const { nvrtcDestroyProgram(&p); }
};

// NVRTC: source -> cubin or PTX image.
absl::StatusOr<std::string> NvrtcCompile(const std::string& source, const Target& t) {
  nvrtcProgram raw = nullptr;
  RETURN_IF_ERROR(NvrtcStatus(nvrtcCreateProgram(&raw, source.c_str(), "braid_ew.cu", 0, nullptr, nullptr),
                              "nvrtcCreateProgram"));
  std::unique_ptr<_nvrtcProgram, ProgramDeleter> prog(raw);
  // Precise math (no --use_fast_math, no flush-to-zero): the results are
  // checked against the host reference. FMA contraction stays on (default).
  const std::string arch_opt = absl::StrCat("--gpu-architecture=", t.name);
  const char* opts[] = {arch_opt.c_str(), "--std=c++17"};
  const nvrtcResult r = nvrtcCompileProgram(raw, 2, opts);
  if (r != NVRTC_SUCCESS) {
    size_t log_size = 0;
    std::string log;
    if (nvrtcGetProgramLogSize(raw, &log_size) == NVRTC_SUCCESS && log_size > 1) {
      log.resize(log_size);
      if (nvrtcGetProgramLog(raw, log.data()) != NVRTC_SUCCESS) log.clear();
      while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
      if (log.size() > kMaxLogChars) log = absl::StrCat(log.substr(0, kMaxLogChars), "...");
    }
    return absl::Status(NvrtcStatusCode(r), absl::StrCat("nvrtcCompileProgram(", t.name,
                                                         "): ", nvrtcGetErrorString(r), ": ", log));
  }
  std::string image;
  size_t size = 0;
  if (t.ptx) {
    RETURN_IF_ERROR(NvrtcStatus(nvrtcGetPTXSize(raw, &size), "nvrtcGetPTXSize"));  // includes the NUL
    image.resize(size);
    RETURN_IF_ERROR(NvrtcStatus(nvrtcGetPTX(raw, image.data()), "nvrtcGetPTX"));
  } else {
    RETURN_IF_ERROR(NvrtcStatus(nvrtcGetCUBINSize(raw, &size), "nvrtcGetCUBINSize"));
    image.resize(size);
    RETURN_IF_ERROR(NvrtcStatus(nvrtcGetCUBIN(raw, image.data()), "nvrtcGetCUBIN"));
  }
  return image;
}

int64_t Product(const std::vector<int64_t>& v) {
  int64_t n = 1;
  for (int64_t d : v) n *= d;
  return n;
}

// Kernels are few (one per fused group and architecture) and small, so the
// cache keeps them all for the life of the process; it is never destroyed,
// which also keeps library unloads out of static destruction, when the CUDA
// runtime may already be gone.
struct Cache {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<const CudaEwKernel>> kernels;
};
Cache& GlobalCache() {
  static Cache* cache = new Cache;
  return *cache;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const CudaEwKernel>> CudaEwKernel::Compile(const EwProgram& p, int sm_major,
                                                                          int sm_minor) {
  RETURN_IF_ERROR(ValidateProgram(p));
  ASSIGN_OR_RETURN(Target t, PickTarget(sm_major, sm_minor));
  const std::string key = absl::StrCat(t.name, "|", p.Signature());
  Cache& cache = GlobalCache();
  {
    std::lock_guard<std::mutex> lock(cache.mu);
    auto it = cache.kernels.find(key);
    if (it != cache.kernels.end()) return it->second;
  }
  // Compiled outside the lock (tens of milliseconds); a racing compile of
  // the same key loses below and its result is dropped.
  std::shared_ptr<CudaEwKernel> k(new CudaEwKernel);
  k->program_ = p;
  ASSIGN_OR_RETURN(k->source_, GenerateEwSource(p));
  ASSIGN_OR_RETURN(k->image_, NvrtcCompile(k->source_, t));
  k->target_ = t.name;
  k->arch_ = t.arch;
  k->is_ptx_ = t.ptx;
  k->points_ = Product(p.shape);
  for (size_t j = 0; j < p.outputs.size(); ++j) {
    if (p.outputs[j].reduce == ReduceKind::kNone) continue;
    k->max_reduced_size_ = std::max(k->max_reduced_size_, Product(p.OutputShape(static_cast<int>(j))));
    k->has_mean_ = k->has_mean_ || p.outputs[j].reduce == ReduceKind::kMean;
  }
  std::lock_guard<std::mutex> lock(cache.mu);
  return cache.kernels.emplace(key, std::move(k)).first->second;
}

absl::StatusOr<std::shared_ptr<const CudaEwKernel>> CudaEwKernel::CompileForCurrentDevice(
    const EwProgram& p) {
  ASSIGN_OR_RETURN(CudaArch arch, CurrentDeviceArch());
  return Compile(p, arch.major, arch.minor);
}

CudaEwKernel::~CudaEwKernel() {
  if (library_ != nullptr) cudaLibraryUnload(library_);
}

absl::Status CudaEwKernel::Prepare(int device) const {
  // Caller holds mu_.
  ASSIGN_OR_RETURN(CudaArch dev, CurrentDeviceArch());
  const bool runs = is_ptx_ ? dev.sm() >= arch_.sm() : (dev.major == arch_.major && dev.minor >= arch_.minor);
  if (!runs) {
    return absl::FailedPreconditionError(absl::StrCat("fused kernel built for ", target_,
                                                      " cannot run on device ", device, " (sm_", dev.sm(),
                                                      "): compile it for ", dev.major, ".", dev.minor));
  }
  if (library_ == nullptr) {
    // Context-independent loading: the runtime loads the image into each
    // device's context when a kernel first launches there.
    RETURN_IF_ERROR(
        CudaStatus(cudaLibraryLoadData(&library_, image_.data(), nullptr, nullptr, 0, nullptr, nullptr, 0),
                   absl::StrCat("cudaLibraryLoadData(", target_, ")")));
    RETURN_IF_ERROR(
        CudaStatus(cudaLibraryGetKernel(&main_, library_, kEwKernelName), "cudaLibraryGetKernel"));
    if (max_reduced_size_ > 0) {
      RETURN_IF_ERROR(
          CudaStatus(cudaLibraryGetKernel(&init_, library_, kEwInitKernelName), "cudaLibraryGetKernel"));
    }
    if (has_mean_) {
      RETURN_IF_ERROR(CudaStatus(cudaLibraryGetKernel(&finalize_, library_, kEwFinalizeKernelName),
                                 "cudaLibraryGetKernel"));
    }
  }
  int sms = 0;
  RETURN_IF_ERROR(CudaStatus(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
                             "cudaDeviceGetAttribute(MultiProcessorCount)"));
  if (sm_count_.size() <= static_cast<size_t>(device)) sm_count_.resize(static_cast<size_t>(device) + 1, 0);
  sm_count_[static_cast<size_t>(device)] = std::max(sms, 1);
  return absl::OkStatus();
}

absl::Status CudaEwKernel::Launch(const char* name, const void* kernel, int64_t work, void** args,
                                  cudaStream_t stream, int sm_count) const {
  // Enough blocks for a few waves at full occupancy (2048 threads per SM);
  // the grid-stride loop covers the rest.
  const int64_t wanted = (work + kEwBlockSize - 1) / kEwBlockSize;
  const int64_t cap = int64_t{sm_count} * (2048 / kEwBlockSize) * 4;
  const unsigned grid = static_cast<unsigned>(std::max<int64_t>(1, std::min(wanted, cap)));
  // A cudaKernel_t is accepted wherever the runtime takes a kernel's address.
  return CudaStatus(cudaLaunchKernel(kernel, dim3(grid), dim3(kEwBlockSize), args, 0, stream),
                    absl::StrCat("cudaLaunchKernel(", name, ", ", grid, " blocks)"));
}

absl::Status CudaEwKernel::Run(absl::Span<const float* const> inputs, absl::Span<float* const> outputs,
                               cudaStream_t stream) const {
  if (inputs.size() != program_.inputs.size() || outputs.size() != program_.outputs.size()) {
    return absl::InvalidArgumentError(absl::StrCat("fused kernel takes ", program_.inputs.size(),
                                                   " inputs and ", program_.outputs.size(), " outputs, got ",
                                                   inputs.size(), " and ", outputs.size()));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i] == nullptr)
      return absl::InvalidArgumentError(absl::StrCat("fused kernel input ", i, " is null"));
  }
  for (size_t j = 0; j < outputs.size(); ++j) {
    if (outputs[j] == nullptr)
      return absl::InvalidArgumentError(absl::StrCat("fused kernel output ", j, " is null"));
  }
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    // Report the device situation rather than cudaGetDevice's own code.
    RETURN_IF_ERROR(CudaDeviceCount());
    return absl::FailedPreconditionError("no CUDA device: cudaGetDevice failed");
  }
  int sm_count = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (static_cast<size_t>(device) >= sm_count_.size() || sm_count_[static_cast<size_t>(device)] == 0) {
      RETURN_IF_ERROR(Prepare(device));
    }
    sm_count = sm_count_[static_cast<size_t>(device)];
  }
  // Kernel arguments: the address of each pointer, inputs then outputs.
  std::vector<const void*> ptrs;
  ptrs.reserve(inputs.size() + outputs.size());
  for (const float* p : inputs) ptrs.push_back(p);
  for (float* p : outputs) ptrs.push_back(p);
  std::vector<void*> args;
  args.reserve(ptrs.size());
  for (const void*& p : ptrs) args.push_back(&p);
  void** out_args = args.data() + inputs.size();

  if (init_ != nullptr)
    RETURN_IF_ERROR(Launch(kEwInitKernelName, init_, max_reduced_size_, out_args, stream, sm_count));
  RETURN_IF_ERROR(Launch(kEwKernelName, main_, points_, args.data(), stream, sm_count));
  if (finalize_ != nullptr)
    RETURN_IF_ERROR(Launch(kEwFinalizeKernelName, finalize_, max_reduced_size_, out_args, stream, sm_count));
  return absl::OkStatus();
}

size_t CudaEwKernelCacheSize() {
  Cache& cache = GlobalCache();
  std::lock_guard<std::mutex> lock(cache.mu);
  return cache.kernels.size();
}

}  // namespace braid::kernels::cuda
