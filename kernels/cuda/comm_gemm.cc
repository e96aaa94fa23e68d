#include "kernels/cuda/comm_gemm.h"

// Driver API types and enums only (CUstream, CUdeviceptr, CUresult): the
// library does not link libcuda; cuStreamWriteValue32 is reached through
// cudaGetDriverEntryPointByVersion, so GPU-less machines still load it.
#include <cuda.h>
#include <nccl.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/cuda/lt_gemm.h"

namespace braid::kernels::cuda {
namespace {

constexpr int64_t kMaxDim = int64_t{1} << 31;  // kernels index dims as int
constexpr int kThreads = 256;                  // THREADS in the source

int Mod(int64_t a, int64_t n) { return static_cast<int>(((a % n) + n) % n); }

absl::Status NcclStatus(ncclResult_t e, std::string_view what) {
  if (e == ncclSuccess) return absl::OkStatus();
  absl::StatusCode code = absl::StatusCode::kInternal;
  if (e == ncclInvalidArgument) code = absl::StatusCode::kInvalidArgument;
  if (e == ncclInvalidUsage) code = absl::StatusCode::kFailedPrecondition;
  if (e == ncclRemoteError) code = absl::StatusCode::kUnavailable;
  return absl::Status(code, absl::StrCat(std::string(what), ": ncclResult ", static_cast<int>(e), ": ",
                                         ncclGetErrorString(e)));
}

// Restores the calling thread's current device (the group switches devices).
class DeviceGuard {
 public:
  DeviceGuard() { ok_ = cudaGetDevice(&device_) == cudaSuccess; }
  ~DeviceGuard() {
    if (ok_) cudaSetDevice(device_);
  }

 private:
  int device_ = 0;
  bool ok_ = false;
};

absl::Status SetDevice(int d) { return CudaStatus(cudaSetDevice(d), absl::StrCat("cudaSetDevice(", d, ")")); }

// Device memory of one device, grown on demand (zeroed when allocated).
class DevMem {
 public:
  DevMem() = default;
  DevMem(const DevMem&) = delete;
  DevMem& operator=(const DevMem&) = delete;
  ~DevMem() { Free(); }
  // The caller has made `device` current.
  absl::Status Reserve(int device, size_t bytes) {
    if (bytes <= bytes_) return absl::OkStatus();
    Free();
    RETURN_IF_ERROR(CudaStatus(cudaMalloc(&ptr_, bytes), absl::StrCat("cudaMalloc(", bytes, " bytes)")));
    device_ = device;
    bytes_ = bytes;
    return CudaStatus(cudaMemset(ptr_, 0, bytes), "cudaMemset");
  }
  void Free() {
    if (ptr_ == nullptr) return;
    int cur = 0;
    const bool have = cudaGetDevice(&cur) == cudaSuccess;
    cudaSetDevice(device_);
    cudaFree(ptr_);
    if (have) cudaSetDevice(cur);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  float* f() const { return static_cast<float*>(ptr_); }
  void* get() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  int device_ = 0;
};

// Mirrors `struct SlotPtrs` of the CUDA source (passed by value).
struct SlotPtrs {
  float* p[kMaxCommGemmRanks];
};

using WriteValue32Fn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

absl::StatusOr<WriteValue32Fn> GetWriteValue32() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
  RETURN_IF_ERROR(
      CudaStatus(cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", &fn, 12000, cudaEnableDefault, &q),
                 "cudaGetDriverEntryPointByVersion(cuStreamWriteValue32)"));
  if (q != cudaDriverEntryPointSuccess || fn == nullptr) {
    return absl::FailedPreconditionError("comm gemm: the driver has no cuStreamWriteValue32");
  }
  return reinterpret_cast<WriteValue32Fn>(fn);
}

// Row-major out [rows, cols] = a [rows, inner] @ b [inner, cols] (+ c when
// beta = 1) with cuBLASLt, which is column-major: the transposes, swapped.
absl::Status RowMajorGemm(LtGemm& lt, const float* a, const float* b, const float* c, float* out,
                          int64_t rows, int64_t inner, int64_t cols, float beta, cudaStream_t stream) {
  LtGemmSpec spec;
  spec.m = cols;
  spec.n = rows;
  spec.k = inner;
  spec.beta = beta;
  LtGemmArgs args;
  args.a = b;
  args.b = a;
  args.c = c;
  args.d = out;
  return lt.Run(spec, args, stream);
}

std::string What(const char* family, CommPattern p) {
  return absl::StrCat("comm gemm (", family, " ", std::string(CommPatternName(p)), ")");
}

absl::Status CheckCommon(const std::string& what, CommPattern p, const CommGemmShape& s, int n) {
  if (n < 2 || n > kMaxCommGemmRanks) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": n = ", n, " ranks (want 2 to ", kMaxCommGemmRanks, ")"));
  }
  const std::pair<const char*, int64_t> dims[] = {{"m", s.m}, {"k", s.k}, {"nout", s.nout}};
  for (const auto& [name, v] : dims) {
    if (v < 1) return absl::InvalidArgumentError(absl::StrCat(what, ": ", name, " = ", v, " must be >= 1"));
    if (v >= kMaxDim) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": ", name, " = ", v, " must be below 2^31"));
    }
  }
  return CheckShardable(what, p, s, n);
}

}  // namespace

absl::Status CanImplementFusedCommGemm(CommPattern p, const CommGemmShape& s, int n,
                                       const FusedCommGemmParams& params) {
  const std::string what = What("fused", p);
  RETURN_IF_ERROR(CheckCommon(what, p, s, n));
  for (const auto& [name, t] :
       {std::pair<const char*, int>{"tile_m", params.tile_m}, {"tile_n", params.tile_n}}) {
    if (t != 32 && t != 64 && t != 128) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": ", name, " = ", t, " (want 32, 64 or 128)"));
    }
  }
  const int64_t rows = s.m / n;
  if (p == CommPattern::kAllGatherMatMul) {
    if (params.chunks_per_rank < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": chunks_per_rank = ", params.chunks_per_rank, " must be >= 1"));
    }
    if (rows % params.chunks_per_rank != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": m / n = ", rows, " is not a multiple of chunks_per_rank = ", params.chunks_per_rank));
    }
    const int64_t chunk = rows / params.chunks_per_rank;
    if (chunk % params.tile_m != 0) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": m / n / chunks_per_rank = ", chunk,
                                                     " is not a multiple of tile_m = ", params.tile_m));
    }
    if (!(params.signal_timeout_s > 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": signal_timeout_s = ", params.signal_timeout_s, " must be > 0"));
    }
  } else if (rows % params.tile_m != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": m / n = ", rows, " is not a multiple of tile_m = ", params.tile_m));
  }
  return absl::OkStatus();
}

absl::Status CanImplementLoopedCommGemm(CommPattern p, LoopedMethod m, const CommGemmShape& s, int n) {
  const std::string what = What(std::string(LoopedMethodName(m)).c_str(), p);
  RETURN_IF_ERROR(CheckCommon(what, p, s, n));
  if (m != LoopedMethod::kLooped && s.m / n < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": m / n = ", s.m / n, " rows per rank cannot be cut in two", " halves (needs m / n >= 2)"));
  }
  return absl::OkStatus();
}

// ---- the group --------------------------------------------------------------

struct CommGemmGroup::Rank {
  int device = 0;
  CudaArch arch;
  cudaStream_t compute = nullptr, copy = nullptr;
  cudaStream_t comm[2] = {nullptr, nullptr};
  ncclComm_t nccl[2] = {nullptr, nullptr};
  std::unique_ptr<LtGemm> lt;
  DevMem gathered, slots, flags, order, error, acc, incoming;
  std::string order_key;  // what `order` holds
  std::vector<cudaEvent_t> events;
  size_t next_event = 0;

  // An event for this run (the pool is reused run after run: Runs block).
  absl::StatusOr<cudaEvent_t> Event() {
    if (next_event == events.size()) {
      cudaEvent_t e = nullptr;
      RETURN_IF_ERROR(CudaStatus(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate"));
      events.push_back(e);
    }
    return events[next_event++];
  }

  ~Rank() {
    if (cudaSetDevice(device) != cudaSuccess) return;
    for (ncclComm_t& c : nccl) {
      if (c != nullptr) ncclCommDestroy(c);
    }
    lt.reset();
    for (cudaEvent_t e : events) cudaEventDestroy(e);
    for (cudaStream_t s : {compute, copy, comm[0], comm[1]}) {
      if (s != nullptr) cudaStreamDestroy(s);
    }
  }
};

absl::StatusOr<std::unique_ptr<CommGemmGroup>> CommGemmGroup::Create(int n) {
  if (n < 2 || n > kMaxCommGemmRanks) {
    return absl::InvalidArgumentError(
        absl::StrCat("comm gemm: a group of n = ", n, " ranks (want 2 to ", kMaxCommGemmRanks, ")"));
  }
  ASSIGN_OR_RETURN(int count, CudaDeviceCount());
  if (count < n) {
    return absl::FailedPreconditionError(
        absl::StrCat("comm gemm: ", n, " ranks need ", n, " CUDA devices (found ", count, ")"));
  }
  DeviceGuard guard;
  std::unique_ptr<CommGemmGroup> g(new CommGemmGroup);
  for (int d = 0; d < n; ++d) {
    auto r = std::make_unique<Rank>();
    r->device = d;
    RETURN_IF_ERROR(SetDevice(d));
    ASSIGN_OR_RETURN(r->arch, CurrentDeviceArch());
    for (cudaStream_t* s : {&r->compute, &r->copy, &r->comm[0], &r->comm[1]}) {
      RETURN_IF_ERROR(CudaStatus(cudaStreamCreateWithFlags(s, cudaStreamNonBlocking), "cudaStreamCreate"));
    }
    g->ranks_.push_back(std::move(r));
  }
  g->all_peers_ = true;
  for (int a = 0; a < n; ++a) {
    RETURN_IF_ERROR(SetDevice(a));
    for (int b = 0; b < n; ++b) {
      if (a == b) continue;
      int can = 0;
      RETURN_IF_ERROR(CudaStatus(cudaDeviceCanAccessPeer(&can, a, b), "cudaDeviceCanAccessPeer"));
      if (!can) {
        if (g->all_peers_) {
          g->peer_missing_a_ = a;
          g->peer_missing_b_ = b;
        }
        g->all_peers_ = false;
        continue;
      }
      const cudaError_t e = cudaDeviceEnablePeerAccess(b, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled) {
        cudaGetLastError();  // clear the sticky-free error state
      } else {
        RETURN_IF_ERROR(CudaStatus(e, absl::StrCat("cudaDeviceEnablePeerAccess(", a, " -> ", b, ")")));
      }
    }
  }
  return g;
}

CommGemmGroup::~CommGemmGroup() {
  DeviceGuard guard;
  ranks_.clear();
}

absl::Status CommGemmGroup::CheckPointers(absl::Span<const float* const> x, absl::Span<const float* const> w,
                                          absl::Span<float* const> out) const {
  const size_t n = ranks_.size();
  if (x.size() != n || w.size() != n || out.size() != n) {
    return absl::InvalidArgumentError(absl::StrCat("comm gemm: ", x.size(), " x, ", w.size(), " w and ",
                                                   out.size(), " out pointers for ", n, " ranks"));
  }
  for (size_t r = 0; r < n; ++r) {
    if (x[r] == nullptr) return absl::InvalidArgumentError(absl::StrCat("comm gemm: x[", r, "] is null"));
    if (w[r] == nullptr) return absl::InvalidArgumentError(absl::StrCat("comm gemm: w[", r, "] is null"));
    if (out[r] == nullptr) return absl::InvalidArgumentError(absl::StrCat("comm gemm: out[", r, "] is null"));
  }
  return absl::OkStatus();
}

absl::Status CommGemmGroup::SyncAll() {
  absl::Status first;
  for (const auto& r : ranks_) {
    absl::Status st = SetDevice(r->device);
    for (cudaStream_t s : {r->compute, r->copy, r->comm[0], r->comm[1]}) {
      if (st.ok())
        st = CudaStatus(cudaStreamSynchronize(s),
                        absl::StrCat("cudaStreamSynchronize(device ", r->device, ")"));
    }
    if (first.ok()) first = st;
    r->next_event = 0;
  }
  return first;
}

namespace {

// Uploads rank `rank`'s tile order (FusedTileOrder) unless already there.
absl::Status UploadOrder(DevMem& mem, std::string& key, int device, CommPattern p, const FusedTileGeometry& g,
                         int rank) {
  const std::string want = absl::StrCat(static_cast<int>(p), "|", g.n, "|", g.gemm_m, "|", g.gemm_n, "|",
                                        g.rows_per_rank, "|", g.tile_m, "|", g.tile_n, "|", rank);
  if (want == key) return absl::OkStatus();
  const std::vector<TileCoord> order = FusedTileOrder(p, g, rank);
  std::vector<int32_t> flat;
  flat.reserve(order.size() * 2);
  for (const TileCoord& t : order) {
    flat.push_back(t.row_block);
    flat.push_back(t.col_block);
  }
  key.clear();
  RETURN_IF_ERROR(mem.Reserve(device, flat.size() * sizeof(int32_t)));
  RETURN_IF_ERROR(
      CudaStatus(cudaMemcpy(mem.get(), flat.data(), flat.size() * sizeof(int32_t), cudaMemcpyHostToDevice),
                 "cudaMemcpy(tile order)"));
  key = want;
  return absl::OkStatus();
}

absl::Status Launch(cudaKernel_t k, const char* name, int64_t blocks, void** args, cudaStream_t s) {
  return CudaStatus(cudaLaunchKernel(reinterpret_cast<const void*>(k), dim3(static_cast<unsigned>(blocks)),
                                     dim3(kThreads), args, 0, s),
                    absl::StrCat("cudaLaunchKernel(", name, ", ", blocks, " blocks)"));
}

}  // namespace

absl::Status CommGemmGroup::RunFused(CommPattern p, const CommGemmShape& s, const FusedCommGemmParams& params,
                                     absl::Span<const float* const> x, absl::Span<const float* const> w,
                                     absl::Span<float* const> out) {
  RETURN_IF_ERROR(CanImplementFusedCommGemm(p, s, ranks(), params));
  RETURN_IF_ERROR(CheckPointers(x, w, out));
  DeviceGuard guard;
  return p == CommPattern::kAllGatherMatMul ? RunFusedAllGather(s, params, x, w, out)
                                            : RunFusedReduceScatter(s, params, x, w, out);
}

absl::Status CommGemmGroup::RunFusedReduceScatter(const CommGemmShape& s, const FusedCommGemmParams& params,
                                                  absl::Span<const float* const> x,
                                                  absl::Span<const float* const> w,
                                                  absl::Span<float* const> out) {
  if (!all_peers_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "comm gemm: fused GEMM+ReduceScatter writes into the peers' memory, but device ", peer_missing_a_,
        " cannot access device ", peer_missing_b_, " (cudaDeviceCanAccessPeer)"));
  }
  const int n = ranks();
  const FusedTileGeometry g =
      FusedGeometry(CommPattern::kMatMulReduceScatter, s, n, params.tile_m, params.tile_n, 1);
  const int64_t slot = g.rows_per_rank * s.nout;  // floats per slot
  SlotPtrs slots{};
  for (int r = 0; r < n; ++r) {
    Rank& rk = *ranks_[r];
    RETURN_IF_ERROR(SetDevice(rk.device));
    RETURN_IF_ERROR(rk.slots.Reserve(rk.device, static_cast<size_t>(n * slot) * sizeof(float)));
    RETURN_IF_ERROR(UploadOrder(rk.order, rk.order_key, rk.device, CommPattern::kMatMulReduceScatter, g, r));
    slots.p[r] = rk.slots.f();
  }
  std::vector<cudaEvent_t> done(static_cast<size_t>(n));
  int M = static_cast<int>(g.gemm_m), N = static_cast<int>(g.gemm_n), K = static_cast<int>(g.gemm_k);
  int rows = static_cast<int>(g.rows_per_rank);
  for (int r = 0; r < n; ++r) {
    Rank& rk = *ranks_[r];
    RETURN_IF_ERROR(SetDevice(rk.device));
    ASSIGN_OR_RETURN(auto kernels,
                     CommGemmKernels::Compile(params.tile_m, params.tile_n, rk.arch.major, rk.arch.minor));
    ASSIGN_OR_RETURN(CommGemmKernels::Handles h, kernels->Load());
    const float* a = x[r];
    const float* b = w[r];
    const void* order = rk.order.get();
    int rank = r;
    void* args[] = {&a, &b, &slots, &order, &M, &N, &K, &rows, &rank};
    RETURN_IF_ERROR(Launch(h.gemm_rs, kGemmReduceScatterKernel, g.tiles(), args, rk.compute));
    ASSIGN_OR_RETURN(done[r], rk.Event());
    RETURN_IF_ERROR(CudaStatus(cudaEventRecord(done[r], rk.compute), "cudaEventRecord"));
  }
  // Each owner sums its slots once every rank's epilogue has written them.
  for (int o = 0; o < n; ++o) {
    Rank& rk = *ranks_[o];
    RETURN_IF_ERROR(SetDevice(rk.device));
    for (int r = 0; r < n; ++r) {
      RETURN_IF_ERROR(CudaStatus(cudaStreamWaitEvent(rk.compute, done[r], 0), "cudaStreamWaitEvent"));
    }
    ASSIGN_OR_RETURN(auto kernels,
                     CommGemmKernels::Compile(params.tile_m, params.tile_n, rk.arch.major, rk.arch.minor));
    ASSIGN_OR_RETURN(CommGemmKernels::Handles h, kernels->Load());
    const float* in = rk.slots.f();
    float* o_ptr = out[o];
    int nn = n;
    long long count = slot;
    void* args[] = {&in, &o_ptr, &nn, &count};
    const int64_t blocks = std::min<int64_t>((slot + kThreads - 1) / kThreads, 4096);
    RETURN_IF_ERROR(Launch(h.reduce, kReduceSlotsKernel, blocks, args, rk.compute));
  }
  return SyncAll();
}

absl::Status CommGemmGroup::RunFusedAllGather(const CommGemmShape& s, const FusedCommGemmParams& params,
                                              absl::Span<const float* const> x,
                                              absl::Span<const float* const> w,
                                              absl::Span<float* const> out) {
  static const absl::StatusOr<WriteValue32Fn> write_value = GetWriteValue32();
  RETURN_IF_ERROR(write_value.status());
  const int n = ranks();
  const FusedTileGeometry g = FusedGeometry(CommPattern::kAllGatherMatMul, s, n, params.tile_m, params.tile_n,
                                            params.chunks_per_rank);
  const int chunks = g.chunks_per_rank;
  const int64_t chunk_floats = g.chunk_rows() * s.k;
  const size_t chunk_bytes = static_cast<size_t>(chunk_floats) * sizeof(float);
  if (++epoch_ == 0) epoch_ = 1;  // flags start at 0: epoch 0 would count as set
  const uint32_t epoch = epoch_;
  auto signal = [&](Rank& rk, int chunk, cudaStream_t st) {
    const CUdeviceptr addr =
        static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(rk.flags.get()) + sizeof(uint32_t) * chunk);
    const CUresult e = (*write_value)(st, addr, epoch, CU_STREAM_WRITE_VALUE_DEFAULT);
    if (e == CUDA_SUCCESS) return absl::OkStatus();
    return absl::InternalError(absl::StrCat("comm gemm: cuStreamWriteValue32 (device ", rk.device, ", chunk ",
                                            chunk, "): CUresult ", static_cast<int>(e)));
  };
  for (int r = 0; r < n; ++r) {
    Rank& rk = *ranks_[r];
    RETURN_IF_ERROR(SetDevice(rk.device));
    RETURN_IF_ERROR(rk.gathered.Reserve(rk.device, static_cast<size_t>(s.m * s.k) * sizeof(float)));
    RETURN_IF_ERROR(rk.flags.Reserve(rk.device, static_cast<size_t>(n * chunks) * sizeof(uint32_t)));
    RETURN_IF_ERROR(rk.error.Reserve(rk.device, sizeof(int)));
    RETURN_IF_ERROR(UploadOrder(rk.order, rk.order_key, rk.device, CommPattern::kAllGatherMatMul, g, r));
    // The local chunk first, on the GEMM's stream: ready before any tile
    // runs, and no copy the spinning GEMM could starve of SMs.
    RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(rk.gathered.f() + r * g.rows_per_rank * s.k, x[r],
                                               chunk_bytes * chunks, cudaMemcpyDeviceToDevice, rk.compute),
                               "cudaMemcpyAsync(local chunk)"));
    for (int j = 0; j < chunks; ++j) RETURN_IF_ERROR(signal(rk, r * chunks + j, rk.compute));
  }
  // Pulls of the peers' chunks, in the ring order after the local rank,
  // each followed by its signal (the driver fences before the write).
  for (int r = 0; r < n; ++r) {
    Rank& rk = *ranks_[r];
    RETURN_IF_ERROR(SetDevice(rk.device));
    for (int c : AllGatherCopyOrder(r, n)) {
      if (c == r) continue;
      for (int j = 0; j < chunks; ++j) {
        float* dst = rk.gathered.f() + (c * g.rows_per_rank + j * g.chunk_rows()) * s.k;
        const float* src = x[c] + j * chunk_floats;
        RETURN_IF_ERROR(
            CudaStatus(cudaMemcpyPeerAsync(dst, rk.device, src, ranks_[c]->device, chunk_bytes, rk.copy),
                       absl::StrCat("cudaMemcpyPeerAsync(", c, " -> ", r, ")")));
        RETURN_IF_ERROR(signal(rk, c * chunks + j, rk.copy));
      }
    }
  }
  int M = static_cast<int>(g.gemm_m), N = static_cast<int>(g.gemm_n), K = static_cast<int>(g.gemm_k);
  int chunk_rows = static_cast<int>(g.chunk_rows());
  long long timeout_ns = static_cast<long long>(params.signal_timeout_s * 1e9);
  for (int r = 0; r < n; ++r) {
    Rank& rk = *ranks_[r];
    RETURN_IF_ERROR(SetDevice(rk.device));
    ASSIGN_OR_RETURN(auto kernels,
                     CommGemmKernels::Compile(params.tile_m, params.tile_n, rk.arch.major, rk.arch.minor));
    ASSIGN_OR_RETURN(CommGemmKernels::Handles h, kernels->Load());
    const float* a = rk.gathered.f();
    const float* b = w[r];
    float* c = out[r];
    const void* order = rk.order.get();
    const void* flags = rk.flags.get();
    unsigned ep = epoch;
    void* err = rk.error.get();
    void* args[] = {&a, &b, &c, &order, &flags, &ep, &err, &M, &N, &K, &chunk_rows, &timeout_ns};
    RETURN_IF_ERROR(Launch(h.gemm_ag, kAllGatherGemmKernel, g.tiles(), args, rk.compute));
  }
  RETURN_IF_ERROR(SyncAll());
  // Every rank's error word is read and cleared; the first one set is reported.
  absl::Status timed_out;
  for (int r = 0; r < n; ++r) {
    Rank& rk = *ranks_[r];
    RETURN_IF_ERROR(SetDevice(rk.device));
    int e = 0;
    RETURN_IF_ERROR(CudaStatus(cudaMemcpy(&e, rk.error.get(), sizeof(int), cudaMemcpyDeviceToHost),
                               "cudaMemcpy(error word)"));
    if (e == 0) continue;
    RETURN_IF_ERROR(CudaStatus(cudaMemset(rk.error.get(), 0, sizeof(int)), "cudaMemset(error word)"));
    if (timed_out.ok()) {
      timed_out = absl::DeadlineExceededError(
          absl::StrCat("comm gemm: fused AllGather+GEMM rank ", r, " waited more than ",
                       params.signal_timeout_s, " s for the signal of chunk ", e - 1, " (from rank ",
                       (e - 1) / chunks, "); its output is incomplete"));
    }
  }
  return timed_out;
}

// ---- looped (ASPLOS'23) -------------------------------------------------------

absl::Status CommGemmGroup::EnsureNccl(int pieces) {
  const int n = ranks();
  for (int p = 0; p < pieces; ++p) {
    if (ranks_[0]->nccl[p] != nullptr) continue;
    std::vector<ncclComm_t> comms(static_cast<size_t>(n), nullptr);
    std::vector<int> devs;
    for (const auto& r : ranks_) devs.push_back(r->device);
    RETURN_IF_ERROR(NcclStatus(ncclCommInitAll(comms.data(), n, devs.data()), "ncclCommInitAll"));
    for (int r = 0; r < n; ++r) ranks_[r]->nccl[p] = comms[r];
  }
  for (const auto& r : ranks_) {
    if (r->lt != nullptr) continue;
    RETURN_IF_ERROR(SetDevice(r->device));
    ASSIGN_OR_RETURN(r->lt, LtGemm::Create());
  }
  return absl::OkStatus();
}

namespace {

// One ncclGroup: every rank sends `send[r]` to r + dir and receives into
// `recv[r]` from r - dir, `count` floats, on its piece's communicator.
template <typename RankPtr>
absl::Status RingExchange(const std::vector<RankPtr>& ranks, int piece, int dir, size_t count,
                          const std::vector<const float*>& send, const std::vector<float*>& recv) {
  const int n = static_cast<int>(ranks.size());
  absl::Status st = NcclStatus(ncclGroupStart(), "ncclGroupStart");
  if (!st.ok()) return st;
  for (int r = 0; r < n && st.ok(); ++r) {
    auto& rk = *ranks[r];
    st = NcclStatus(ncclSend(send[r], count, ncclFloat, Mod(r + dir, n), rk.nccl[piece], rk.comm[piece]),
                    absl::StrCat("ncclSend(", r, " -> ", Mod(r + dir, n), ")"));
    if (st.ok()) {
      st = NcclStatus(ncclRecv(recv[r], count, ncclFloat, Mod(r - dir, n), rk.nccl[piece], rk.comm[piece]),
                      absl::StrCat("ncclRecv(", Mod(r - dir, n), " -> ", r, ")"));
    }
  }
  const absl::Status end = NcclStatus(ncclGroupEnd(), "ncclGroupEnd");
  RETURN_IF_ERROR(st);
  return end;
}

}  // namespace

absl::Status CommGemmGroup::RunLooped(CommPattern p, LoopedMethod m, const CommGemmShape& s,
                                      absl::Span<const float* const> x, absl::Span<const float* const> w,
                                      absl::Span<float* const> out) {
  RETURN_IF_ERROR(CanImplementLoopedCommGemm(p, m, s, ranks()));
  RETURN_IF_ERROR(CheckPointers(x, w, out));
  DeviceGuard guard;
  const LoopedPlan plan = PlanLooped(p, m, s, ranks());
  RETURN_IF_ERROR(EnsureNccl(plan.pieces));
  return RunLoopedPlan(plan, x, w, out);
}

absl::Status CommGemmGroup::RunLoopedPlan(const LoopedPlan& plan, absl::Span<const float* const> x,
                                          absl::Span<const float* const> w, absl::Span<float* const> out) {
  const int n = ranks();
  for (auto& rk : ranks_) {
    RETURN_IF_ERROR(SetDevice(rk->device));
    RETURN_IF_ERROR(
        rk->gathered.Reserve(rk->device, static_cast<size_t>(plan.gathered_floats) * sizeof(float)));
    RETURN_IF_ERROR(rk->acc.Reserve(rk->device, static_cast<size_t>(plan.acc_floats) * sizeof(float)));
    RETURN_IF_ERROR(
        rk->incoming.Reserve(rk->device, static_cast<size_t>(plan.incoming_floats) * sizeof(float)));
  }
  auto ptr = [&](int r, const BufferRef& ref) -> float* {
    Rank& rk = *ranks_[r];
    switch (ref.buffer) {
      case LoopedBuffer::kX:
        return const_cast<float*>(x[r]) + ref.offset;  // only read (GEMM A, ncclSend)
      case LoopedBuffer::kOut:
        return out[r] + ref.offset;
      case LoopedBuffer::kGathered:
        return rk.gathered.f() + ref.offset;
      case LoopedBuffer::kAcc:
        return rk.acc.f() + ref.offset;
      case LoopedBuffer::kIncoming:
        return rk.incoming.f() + ref.offset;
    }
    return nullptr;
  };
  // received[op index][r]: recorded on rank r's piece stream after that
  // exchange; the GEMMs that read what it delivered wait for it.
  std::vector<std::vector<cudaEvent_t>> received(plan.ops.size());
  for (size_t i = 0; i < plan.ops.size(); ++i) {
    const LoopedOp& op = plan.ops[i];
    if (op.kind == LoopedOp::Kind::kExchange) {
      std::vector<const float*> send(n);
      std::vector<float*> recv(n);
      for (int r = 0; r < n; ++r) {
        send[r] = ptr(r, op.send[r]);
        recv[r] = ptr(r, op.recv[r]);
      }
      RETURN_IF_ERROR(RingExchange(ranks_, op.piece, op.dir, static_cast<size_t>(op.count), send, recv));
      received[i].resize(static_cast<size_t>(n));
      for (int r = 0; r < n; ++r) {
        Rank& rk = *ranks_[r];
        RETURN_IF_ERROR(SetDevice(rk.device));
        ASSIGN_OR_RETURN(received[i][r], rk.Event());
        RETURN_IF_ERROR(CudaStatus(cudaEventRecord(received[i][r], rk.comm[op.piece]), "cudaEventRecord"));
      }
      continue;
    }
    Rank& rk = *ranks_[op.rank];
    RETURN_IF_ERROR(SetDevice(rk.device));
    if (op.wait_exchange >= 0) {
      RETURN_IF_ERROR(CudaStatus(cudaStreamWaitEvent(rk.compute, received[op.wait_exchange][op.rank], 0),
                                 "cudaStreamWaitEvent(exchange -> GEMM)"));
    }
    RETURN_IF_ERROR(RowMajorGemm(*rk.lt, ptr(op.rank, op.a), w[op.rank],
                                 op.beta != 0.0f ? ptr(op.rank, op.c) : nullptr, ptr(op.rank, op.d), op.rows,
                                 op.inner, op.cols, op.beta, rk.compute));
    if (op.feeds_exchange) {
      ASSIGN_OR_RETURN(cudaEvent_t computed, rk.Event());
      RETURN_IF_ERROR(CudaStatus(cudaEventRecord(computed, rk.compute), "cudaEventRecord"));
      RETURN_IF_ERROR(CudaStatus(cudaStreamWaitEvent(rk.comm[op.piece], computed, 0),
                                 "cudaStreamWaitEvent(GEMM -> exchange)"));
    }
  }
  return SyncAll();
}

}  // namespace braid::kernels::cuda
