#include "worker/gloo_group.h"

namespace braid::worker {

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

}  // namespace braid::worker
