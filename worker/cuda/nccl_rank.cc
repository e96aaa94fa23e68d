// The rank side of the NCCL benchmark: one process per GPU.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "worker/cuda/cuda_status.h"
#include "worker/cuda/internal/cuda_context.h"
#include "worker/cuda/nccl_bench.h"
#include "worker/cuda/nccl_id.h"
#include "worker/timing.h"

namespace braid::worker {
namespace {

using costmodel::Collective;
using cuda_internal::DeviceBuffer;

struct CommDeleter {
  void operator()(ncclComm* c) const { ncclCommDestroy(c); }
};
struct StreamDeleter {
  void operator()(CUstream_st* s) const { cudaStreamDestroy(s); }
};
struct EventDeleter {
  void operator()(CUevent_st* e) const { cudaEventDestroy(e); }
};

// Send/receive buffers of one (collective, bytes) point and its launch.
struct Call {
  Collective c;
  int64_t bytes;
  int world;
  DeviceBuffer send, recv;

  // Element counts per costmodel/comm_model.h's byte conventions.
  absl::Status Init() {
    const int64_t whole = bytes, part = bytes / world;
    const bool gather = c == Collective::kAllGather, scatter = c == Collective::kReduceScatter;
    ASSIGN_OR_RETURN(DeviceBuffer s, DeviceBuffer::Alloc(gather ? part : whole, "send buffer"));
    ASSIGN_OR_RETURN(DeviceBuffer r, DeviceBuffer::Alloc(scatter ? part : whole, "receive buffer"));
    send = std::move(s);
    recv = std::move(r);
    RETURN_IF_ERROR(CudaStatus(cudaMemset(send.get(), 0, send.bytes()), "cudaMemset"));
    return CudaStatus(cudaMemset(recv.get(), 0, recv.bytes()), "cudaMemset");
  }

  absl::Status Launch(ncclComm_t comm, cudaStream_t stream) const {
    const size_t elems = static_cast<size_t>(bytes / 4), per_rank = elems / world;
    switch (c) {
      case Collective::kAllReduce:
        return NcclStatus(
            ncclAllReduce(send.get(), recv.get(), elems, ncclFloat, ncclSum, comm, stream),
            "ncclAllReduce");
      case Collective::kAllGather:
        return NcclStatus(ncclAllGather(send.get(), recv.get(), per_rank, ncclFloat, comm, stream),
                          "ncclAllGather");
      case Collective::kReduceScatter:
        return NcclStatus(
            ncclReduceScatter(send.get(), recv.get(), per_rank, ncclFloat, ncclSum, comm, stream),
            "ncclReduceScatter");
      case Collective::kBroadcast:
        return NcclStatus(ncclBroadcast(send.get(), recv.get(), elems, ncclFloat, 0, comm, stream),
                          "ncclBroadcast");
      case Collective::kAllToAll:
        return NcclStatus(ncclAlltoAll(send.get(), recv.get(), per_rank, ncclFloat, comm, stream),
                          "ncclAlltoAll");
      default:
        return absl::InvalidArgumentError(
            absl::StrCat("nccl rank: ", std::string(costmodel::CollectiveName(c)),
                         " is not a group collective"));
    }
  }
};

}  // namespace

absl::Status RunNcclRank(const NcclRankConfig& config) {
  if (config.world < 1 || config.rank < 0 || config.rank >= config.world) {
    return absl::InvalidArgumentError(
        absl::StrCat("nccl rank: rank ", config.rank, " of world ", config.world));
  }
  RETURN_IF_ERROR(ValidateNcclBench(config.world, config.collectives, config.sizes, config.warmup,
                                    config.repetitions, /*min_ranks=*/1));
  RETURN_IF_ERROR(
      CudaStatus(cudaSetDevice(config.device), absl::StrCat("cudaSetDevice(", config.device, ")")));
  std::ofstream out(config.output_path);
  if (!out)
    return absl::NotFoundError(absl::StrCat("nccl rank: cannot write ", config.output_path));

  ncclUniqueId id{};
  if (config.rank == 0) {
    RETURN_IF_ERROR(NcclStatus(ncclGetUniqueId(&id), "ncclGetUniqueId"));
    RETURN_IF_ERROR(WriteNcclId(id, config.id_path));
  } else {
    ASSIGN_OR_RETURN(ncclUniqueId got,
                     ReadNcclId(config.id_path, absl::StrCat("nccl rank ", config.rank),
                                config.rendezvous_timeout_s));
    id = got;
  }
  ncclComm_t raw_comm = nullptr;
  RETURN_IF_ERROR(
      NcclStatus(ncclCommInitRank(&raw_comm, config.world, id, config.rank), "ncclCommInitRank"));
  std::unique_ptr<ncclComm, CommDeleter> comm(raw_comm);
  cudaStream_t raw_stream = nullptr;
  RETURN_IF_ERROR(CudaStatus(cudaStreamCreate(&raw_stream), "cudaStreamCreate"));
  std::unique_ptr<CUstream_st, StreamDeleter> stream(raw_stream);
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  RETURN_IF_ERROR(CudaStatus(cudaEventCreate(&e0), "cudaEventCreate"));
  std::unique_ptr<CUevent_st, EventDeleter> start(e0);
  RETURN_IF_ERROR(CudaStatus(cudaEventCreate(&e1), "cudaEventCreate"));
  std::unique_ptr<CUevent_st, EventDeleter> stop(e1);
  // A one-float AllReduce, waited for on the host, lines the ranks up before
  // each timed repetition: the time is the collective's, not the skew's.
  ASSIGN_OR_RETURN(DeviceBuffer flag, DeviceBuffer::Alloc(4, "barrier flag"));
  auto barrier = [&]() -> absl::Status {
    RETURN_IF_ERROR(NcclStatus(
        ncclAllReduce(flag.get(), flag.get(), 1, ncclFloat, ncclSum, comm.get(), stream.get()),
        "ncclAllReduce (barrier)"));
    return CudaStatus(cudaStreamSynchronize(stream.get()), "barrier");
  };

  for (Collective c : config.collectives) {
    for (int64_t bytes : config.sizes) {
      Call call{c, bytes, config.world, {}, {}};
      RETURN_IF_ERROR(call.Init());
      for (int i = 0; i < config.warmup; ++i)
        RETURN_IF_ERROR(call.Launch(comm.get(), stream.get()));
      RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream.get()), "warm-up"));
      std::vector<double> times;
      for (int r = 0; r < config.repetitions; ++r) {
        RETURN_IF_ERROR(barrier());
        RETURN_IF_ERROR(CudaStatus(cudaEventRecord(start.get(), stream.get()), "cudaEventRecord"));
        RETURN_IF_ERROR(call.Launch(comm.get(), stream.get()));
        RETURN_IF_ERROR(CudaStatus(cudaEventRecord(stop.get(), stream.get()), "cudaEventRecord"));
        RETURN_IF_ERROR(CudaStatus(cudaEventSynchronize(stop.get()), "collective"));
        float ms = 0;
        RETURN_IF_ERROR(
            CudaStatus(cudaEventElapsedTime(&ms, start.get(), stop.get()), "cudaEventElapsedTime"));
        times.push_back(static_cast<double>(ms) * 1e-3);
      }
      out << costmodel::CollectiveName(c) << ' ' << bytes;
      for (double t : times) out << ' ' << t;
      out << '\n';
    }
  }
  RETURN_IF_ERROR(barrier());
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("nccl rank: write ", config.output_path));
  return absl::OkStatus();
}

}  // namespace braid::worker
