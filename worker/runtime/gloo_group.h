// The Gloo process group every braid rank program makes (the executor ranks,
// the activator): one Gloo thread. Includes
// LibTorch's c10d headers: for the runtime's CPU backend and worker/ sources
// only, never a public header.
#ifndef BRAID_WORKER_RUNTIME_GLOO_GROUP_H_
#define BRAID_WORKER_RUNTIME_GLOO_GROUP_H_

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <string>

namespace braid::runtime {

// `hostname`: the address this rank's Gloo device binds and announces
// ("127.0.0.1" for ranks on one host); empty: Gloo's default device (the
// address the host name resolves to), for ranks on several hosts.
// `timeout`: how long a collective (and the group's own rendezvous) may wait
// for the other ranks.
c10::intrusive_ptr<c10d::ProcessGroupGloo> MakeGlooGroup(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int world, const std::string& hostname,
    std::chrono::milliseconds timeout = std::chrono::minutes(5));

// Waits for `work` by polling its completion, yielding the core between
// polls, then calls wait() (which rethrows the work's error). Work::wait()
// blocks instead, and a rank whose threads all block leaves its core idle:
// on a virtual machine the hypervisor may then take milliseconds to run it
// again when the peer's data arrives. Measured on cpu-local (2 ranks pinned,
// the 2-block transformer's 512 KiB tensor-parallel all-reduces): blocking,
// half the calls took 2-6 ms instead of 0.3-0.6 ms, and a step 45-58 ms;
// polling, 41-47 ms (BENCHMARKS.md). MPI and NCCL poll for the same reason.
// Only for a rank bound to its own core (PinToCore): unbound, the polling
// threads of two ranks take the cores their Gloo threads need (the collective
// benchmark's 64 KiB all-reduce went from 0.4 to 3.6 ms that way). Bound
// ranks of braid-parallel-rank wait for their step's collectives this way,
// and the collective benchmark times them this way when its ranks are bound. A collective's own timeout
// (MakeGlooGroup) still ends the wait: the work then completes with an error.
// Collectives only: c10d's Gloo send/recv works (this LibTorch's SendWork,
// RecvWork) never report isCompleted() before wait(), so polling one would
// never end; the pipeline ranks move activations by 2-rank broadcasts for
// that reason (parallel_train.cc PeerLink).
void WaitPolling(const c10::intrusive_ptr<c10d::Work>& work);

// WaitPolling(work) when `poll`, else work->wait().
void WaitCollective(const c10::intrusive_ptr<c10d::Work>& work, bool poll);

// The sum over the group's members of `t`, of which this member keeps block
// rank of size(t, dim) / size along `dim` (which must divide): c10d's Gloo
// has no reduce_scatter in this LibTorch, so an all-to-all hands every member
// its block of every other member's `t` and the member adds them up. A
// collective, so a bound rank can poll for it (`poll`: WaitCollective). Both the
// parallel ranks and the collective benchmark (its "ReduceScatter") run it.
at::Tensor GlooReduceScatter(c10d::ProcessGroupGloo& pg, const at::Tensor& t, int64_t dim,
                             bool poll);

}  // namespace braid::runtime

// The worker's rank programs use the same group.
namespace braid::worker {
using runtime::GlooReduceScatter;
using runtime::MakeGlooGroup;
using runtime::WaitCollective;
using runtime::WaitPolling;
}  // namespace braid::worker

#endif  // BRAID_WORKER_RUNTIME_GLOO_GROUP_H_
