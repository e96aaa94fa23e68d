// The CUDA C of comm_gemm.h's fused kernels and their NVRTC compilation.
// One source for every tile size: BRAID_BM / BRAID_BN come as -D options,
// so each (tile, architecture) pair is one small compile (well under a
// second) cached for the process.
#include <nvrtc.h>

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "kernels/cuda/comm_gemm.h"

namespace braid::kernels::cuda {
namespace {

constexpr char kSource[] = R"CUDA(
// braid comm_gemm: Flux-style fused GEMM + communication kernels (fp32 SIMT).
#ifndef BRAID_BM
#error "BRAID_BM (tile rows) must be defined"
#endif
#ifndef BRAID_BN
#error "BRAID_BN (tile columns) must be defined"
#endif
#define BM BRAID_BM
#define BN BRAID_BN
#define BK 16
#define TM (BM / 16)  // rows per thread
#define TN (BN / 16)  // columns per thread
#define THREADS 256
#define MAX_RANKS 8

typedef long long i64;

// The peers' receive buffers, by value (no device-side pointer table).
struct SlotPtrs {
  float* p[MAX_RANKS];
};

__device__ __forceinline__ unsigned long long braid_globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// acc = A[row0:row0+BM, :K] @ B[:K, col0:col0+BN], rows < M and columns < N
// (zero-padded tiles). Thread (ty, tx) owns rows row0 + ty + 16 i and columns
// col0 + tx + 16 j. kBypassL1: A is read with ld.global.cg, for data another
// engine writes while the kernel runs (the AllGather chunks).
template <bool kBypassL1>
__device__ __forceinline__ void braid_tile_gemm(const float* A, const float* __restrict__ B, int M, int N,
                                                int K, int row0, int col0, float (*As)[BM + 4],
                                                float (*Bs)[BN], float acc[TM][TN]) {
  const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) acc[i][j] = 0.f;
  for (int k0 = 0; k0 < K; k0 += BK) {
    for (int e = tid; e < BM * BK; e += THREADS) {
      const int r = e / BK, c = e % BK, gr = row0 + r, gc = k0 + c;
      float v = 0.f;
      if (gr < M && gc < K) {
        const float* src = A + (i64)gr * K + gc;
        v = kBypassL1 ? __ldcg(src) : __ldg(src);
      }
      As[c][r] = v;
    }
    for (int e = tid; e < BK * BN; e += THREADS) {
      const int r = e / BN, c = e % BN, gr = k0 + r, gc = col0 + c;
      Bs[r][c] = (gr < K && gc < N) ? __ldg(B + (i64)gr * N + gc) : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
      float a[TM], b[TN];
#pragma unroll
      for (int i = 0; i < TM; ++i) a[i] = As[kk][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < TN; ++j) b[j] = Bs[kk][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
}

// GEMM + ReduceScatter (Flux Alg. 1, Write branch). Block b computes tile
// order[b] (row block, column block) of this rank's partial A @ B [M, N];
// the epilogue writes it into slot `rank` of the owner's receive buffer
// ([n][rows_per_rank][N]) through the owner's pointer.
extern "C" __global__ void __launch_bounds__(THREADS)
    braid_gemm_rs(const float* __restrict__ A, const float* __restrict__ B, SlotPtrs slots,
                  const int2* __restrict__ order, int M, int N, int K, int rows_per_rank, int rank) {
  __shared__ float As[BK][BM + 4];
  __shared__ float Bs[BK][BN];
  const int2 t = order[blockIdx.x];
  const int row0 = t.x * BM, col0 = t.y * BN;
  float acc[TM][TN];
  braid_tile_gemm<false>(A, B, M, N, K, row0, col0, As, Bs, acc);
  const int owner = row0 / rows_per_rank;  // a tile never straddles two owners
  float* dst = slots.p[owner];
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int r = row0 + ty + 16 * i;
    const i64 slot_row = (i64)rank * rows_per_rank + (r - owner * rows_per_rank);
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      const int c = col0 + tx + 16 * j;
      if (c < N) dst[slot_row * N + c] = acc[i][j];
    }
  }
}

// The owner's local reduction: out[i] = sum over slots s = 0..n-1 in order.
extern "C" __global__ void __launch_bounds__(THREADS)
    braid_reduce_slots(const float* __restrict__ slots, float* __restrict__ out, int n, i64 count) {
  for (i64 i = (i64)blockIdx.x * THREADS + threadIdx.x; i < count; i += (i64)gridDim.x * THREADS) {
    float s = 0.f;
    for (int r = 0; r < n; ++r) s += slots[(i64)r * count + i];
    out[i] = s;
  }
}

// AllGather + GEMM (Flux Alg. 2). Block b computes tile order[b] of
// C [M, N] = A_agg [M, K] @ B [K, N]; its prologue waits until the signal of
// the chunk (chunk_rows rows of A_agg) the tile reads holds this run's epoch
// (wrap-safe >=). On timeout it records chunk + 1 in *error and skips the tile.
extern "C" __global__ void __launch_bounds__(THREADS)
    braid_gemm_ag(const float* A, const float* __restrict__ B, float* __restrict__ C,
                  const int2* __restrict__ order, const unsigned* flags, unsigned epoch, int* error, int M,
                  int N, int K, int chunk_rows, i64 timeout_ns) {
  __shared__ float As[BK][BM + 4];
  __shared__ float Bs[BK][BN];
  __shared__ int ready;
  const int2 t = order[blockIdx.x];
  const int row0 = t.x * BM, col0 = t.y * BN;
  if (threadIdx.x == 0) {
    const int chunk = row0 / chunk_rows;
    const volatile unsigned* f = flags + chunk;
    int ok = 1;
    if ((int)(*f - epoch) < 0) {
      const unsigned long long start = braid_globaltimer();
      while ((int)(*f - epoch) < 0) {
        if ((i64)(braid_globaltimer() - start) > timeout_ns) {
          atomicCAS(error, 0, chunk + 1);
          ok = 0;
          break;
        }
        __nanosleep(200);
      }
    }
    __threadfence();  // the chunk's bytes are read after the signal
    ready = ok;
  }
  __syncthreads();
  if (!ready) return;
  float acc[TM][TN];
  braid_tile_gemm<true>(A, B, M, N, K, row0, col0, As, Bs, acc);
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int r = row0 + ty + 16 * i;
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      const int c = col0 + tx + 16 * j;
      if (r < M && c < N) C[(i64)r * N + c] = acc[i][j];
    }
  }
}
)CUDA";

constexpr size_t kMaxLogChars = 4000;

struct Target {
  std::string name;  // "sm_80" / "compute_90"
  bool ptx = false;
};

// As ew_kernel.cc: a cubin for an architecture NVRTC lists, PTX of the
// newest listed one below it for a newer GPU.
absl::StatusOr<Target> PickTarget(int major, int minor) {
  if (major < 1 || minor < 0 || minor > 9) {
    return absl::InvalidArgumentError(absl::StrCat("comm gemm: bad compute capability ", major, ".", minor));
  }
  int n = 0;
  RETURN_IF_ERROR(NvrtcStatus(nvrtcGetNumSupportedArchs(&n), "nvrtcGetNumSupportedArchs"));
  std::vector<int> archs(static_cast<size_t>(n));
  RETURN_IF_ERROR(NvrtcStatus(nvrtcGetSupportedArchs(archs.data()), "nvrtcGetSupportedArchs"));
  std::sort(archs.begin(), archs.end());
  const int want = major * 10 + minor;
  if (archs.empty() || want < archs.front()) {
    return absl::FailedPreconditionError(absl::StrCat("comm gemm: NVRTC does not target sm_", want,
                                                      " (supported: ", absl::StrJoin(archs, ","), ")"));
  }
  if (std::find(archs.begin(), archs.end(), want) != archs.end())
    return Target{absl::StrCat("sm_", want), false};
  const int best = *std::prev(std::upper_bound(archs.begin(), archs.end(), want));
  return Target{absl::StrCat("compute_", best), true};
}

struct ProgramDeleter {
  void operator()(nvrtcProgram p) const { nvrtcDestroyProgram(&p); }
};

absl::StatusOr<std::string> NvrtcCompileCommGemm(const Target& t, int tile_m, int tile_n) {
  nvrtcProgram raw = nullptr;
  RETURN_IF_ERROR(NvrtcStatus(nvrtcCreateProgram(&raw, kSource, "braid_comm_gemm.cu", 0, nullptr, nullptr),
                              "nvrtcCreateProgram"));
  std::unique_ptr<_nvrtcProgram, ProgramDeleter> prog(raw);
  const std::string arch = absl::StrCat("--gpu-architecture=", t.name);
  const std::string bm = absl::StrCat("-DBRAID_BM=", tile_m);
  const std::string bn = absl::StrCat("-DBRAID_BN=", tile_n);
  const char* opts[] = {arch.c_str(), bm.c_str(), bn.c_str(), "--std=c++17"};
  const nvrtcResult r = nvrtcCompileProgram(raw, 4, opts);
  if (r != NVRTC_SUCCESS) {
    size_t log_size = 0;
    std::string log;
    if (nvrtcGetProgramLogSize(raw, &log_size) == NVRTC_SUCCESS && log_size > 1) {
      log.resize(log_size);
      if (nvrtcGetProgramLog(raw, log.data()) != NVRTC_SUCCESS) log.clear();
      while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
      if (log.size() > kMaxLogChars) log = absl::StrCat(log.substr(0, kMaxLogChars), "...");
    }
    return absl::Status(NvrtcStatusCode(r),
                        absl::StrCat("nvrtcCompileProgram(comm gemm, ", t.name, ", ", tile_m, "x", tile_n,
                                     "): ", nvrtcGetErrorString(r), ": ", log));
  }
  std::string image;
  size_t size = 0;
  if (t.ptx) {
    RETURN_IF_ERROR(NvrtcStatus(nvrtcGetPTXSize(raw, &size), "nvrtcGetPTXSize"));
    image.resize(size);
    RETURN_IF_ERROR(NvrtcStatus(nvrtcGetPTX(raw, image.data()), "nvrtcGetPTX"));
  } else {
    RETURN_IF_ERROR(NvrtcStatus(nvrtcGetCUBINSize(raw, &size), "nvrtcGetCUBINSize"));
    image.resize(size);
    RETURN_IF_ERROR(NvrtcStatus(nvrtcGetCUBIN(raw, image.data()), "nvrtcGetCUBIN"));
  }
  return image;
}

bool ValidTile(int t) { return t == 32 || t == 64 || t == 128; }

// Never destroyed, as ew_kernel.cc's cache: no library unloads during
// static destruction.
struct Cache {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<const CommGemmKernels>> kernels;
};
Cache& GlobalCache() {
  static Cache* cache = new Cache;
  return *cache;
}

}  // namespace

const std::string& CommGemmSource() {
  static const std::string* s = new std::string(kSource);
  return *s;
}

absl::StatusOr<std::shared_ptr<const CommGemmKernels>> CommGemmKernels::Compile(int tile_m, int tile_n,
                                                                                int sm_major, int sm_minor) {
  if (!ValidTile(tile_m)) {
    return absl::InvalidArgumentError(absl::StrCat("comm gemm: tile_m = ", tile_m, " (want 32, 64 or 128)"));
  }
  if (!ValidTile(tile_n)) {
    return absl::InvalidArgumentError(absl::StrCat("comm gemm: tile_n = ", tile_n, " (want 32, 64 or 128)"));
  }
  ASSIGN_OR_RETURN(Target t, PickTarget(sm_major, sm_minor));
  const std::string key = absl::StrCat(t.name, "|", tile_m, "x", tile_n);
  Cache& cache = GlobalCache();
  {
    std::lock_guard<std::mutex> lock(cache.mu);
    auto it = cache.kernels.find(key);
    if (it != cache.kernels.end()) return it->second;
  }
  std::shared_ptr<CommGemmKernels> k(new CommGemmKernels);
  ASSIGN_OR_RETURN(k->image_, NvrtcCompileCommGemm(t, tile_m, tile_n));
  k->target_ = t.name;
  k->is_ptx_ = t.ptx;
  k->tile_m_ = tile_m;
  k->tile_n_ = tile_n;
  std::lock_guard<std::mutex> lock(cache.mu);
  return cache.kernels.emplace(key, std::move(k)).first->second;
}

CommGemmKernels::~CommGemmKernels() {
  if (library_ != nullptr) cudaLibraryUnload(library_);
}

absl::StatusOr<CommGemmKernels::Handles> CommGemmKernels::Load() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (library_ == nullptr) {
    cudaLibrary_t lib = nullptr;
    RETURN_IF_ERROR(
        CudaStatus(cudaLibraryLoadData(&lib, image_.data(), nullptr, nullptr, 0, nullptr, nullptr, 0),
                   absl::StrCat("cudaLibraryLoadData(comm gemm, ", target_, ")")));
    Handles h;
    absl::Status st = CudaStatus(cudaLibraryGetKernel(&h.gemm_rs, lib, kGemmReduceScatterKernel),
                                 "cudaLibraryGetKernel(braid_gemm_rs)");
    if (st.ok()) {
      st = CudaStatus(cudaLibraryGetKernel(&h.reduce, lib, kReduceSlotsKernel),
                      "cudaLibraryGetKernel(braid_reduce_slots)");
    }
    if (st.ok()) {
      st = CudaStatus(cudaLibraryGetKernel(&h.gemm_ag, lib, kAllGatherGemmKernel),
                      "cudaLibraryGetKernel(braid_gemm_ag)");
    }
    if (!st.ok()) {
      cudaLibraryUnload(lib);
      return st;
    }
    library_ = lib;
    handles_ = h;
  }
  return handles_;
}

}  // namespace braid::kernels::cuda
