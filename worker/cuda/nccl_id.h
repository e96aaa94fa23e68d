// NCCL unique ids passed between the processes of one communicator through
// a file every process sees: the id's owner writes it (write, then rename:
// a reader never sees part of one), the others wait for it. Used by the
// NCCL benchmark's ranks (nccl_rank.cc) and the runtime's communicator
// (cuda_backend.cc).
#ifndef BRAID_WORKER_CUDA_NCCL_ID_H_
#define BRAID_WORKER_CUDA_NCCL_ID_H_

#include <nccl.h>

#include <string>

#include "absl/status/statusor.h"

namespace braid::worker {

absl::Status WriteNcclId(const ncclUniqueId& id, const std::string& path);
// DeadlineExceeded naming `who` and the path when none appears within
// `timeout_s`.
absl::StatusOr<ncclUniqueId> ReadNcclId(const std::string& path, const std::string& who,
                                        double timeout_s);

}  // namespace braid::worker

#endif  // BRAID_WORKER_CUDA_NCCL_ID_H_
