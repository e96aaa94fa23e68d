// The Gloo process group every braid rank program makes (the executor ranks,
// the activator): one Gloo thread. Includes
// LibTorch's c10d headers: for worker/ sources only, never a public header.
#ifndef BRAID_WORKER_GLOO_GROUP_H_
#define BRAID_WORKER_GLOO_GROUP_H_

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <string>

namespace braid::worker {

// `hostname`: the address this rank's Gloo device binds and announces
// ("127.0.0.1" for ranks on one host); empty: Gloo's default device (the
// address the host name resolves to), for ranks on several hosts.
// `timeout`: how long a collective (and the group's own rendezvous) may wait
// for the other ranks.
c10::intrusive_ptr<c10d::ProcessGroupGloo> MakeGlooGroup(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int world, const std::string& hostname,
    std::chrono::milliseconds timeout = std::chrono::minutes(5));

}  // namespace braid::worker

#endif  // BRAID_WORKER_GLOO_GROUP_H_
