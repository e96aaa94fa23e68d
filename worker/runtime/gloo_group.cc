#include "worker/runtime/gloo_group.h"

#include <sched.h>

namespace braid::runtime {

c10::intrusive_ptr<c10d::ProcessGroupGloo> MakeGlooGroup(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int world, const std::string& hostname,
    std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  options->devices.push_back(hostname.empty()
                                 ? c10d::ProcessGroupGloo::createDefaultDevice()
                                 : c10d::ProcessGroupGloo::createDeviceForHostname(hostname));
  options->threads = 1;  // as the collective benchmark measured
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, options);
}

void WaitPolling(const c10::intrusive_ptr<c10d::Work>& work) {
  while (!work->isCompleted()) sched_yield();
  work->wait();
}

void WaitCollective(const c10::intrusive_ptr<c10d::Work>& work, bool poll) {
  if (poll) {
    WaitPolling(work);
  } else {
    work->wait();
  }
}

at::Tensor GlooReduceScatter(c10d::ProcessGroupGloo& pg, const at::Tensor& t, int64_t dim,
                             bool poll) {
  const int64_t n = pg.getSize();
  if (n == 1) return t;
  TORCH_CHECK(t.size(dim) % n == 0, "reduce-scatter: dim ", dim, " of size ", t.size(dim),
              " does not divide over ", n, " ranks");
  // [.., n * b, ..] -> [n, .., b, ..]: member j's block first, contiguous.
  std::vector<int64_t> shape = t.sizes().vec();
  shape[dim] /= n;
  shape.insert(shape.begin() + dim, n);
  at::Tensor blocks = t.reshape(shape).movedim(dim, 0).contiguous();
  at::Tensor received = at::empty_like(blocks);
  std::vector<int64_t> even;  // empty split sizes: equal chunks along dim 0
  WaitCollective(pg.alltoall_base(received, blocks, even, even), poll);
  return received.sum(0).contiguous();
}

}  // namespace braid::runtime
