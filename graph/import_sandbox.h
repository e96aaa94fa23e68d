// Runs a model import in a forked child process, so that a crash, a hang or
// a runaway allocation inside a third-party parser (libonnx's shape
// inference is not hardened against malformed models: Debian's 1.12 has
// SIGSEGVs and SIGFPEs on inputs a fuzzer finds in seconds) ends the child,
// not the strategy service that imported the model. The child sends the
// graph back in braid's text format (which round-trips exactly) with the
// import warnings; the parent parses and validates it again.
//
//   absl::StatusOr<Graph> g = ImportIsolated(
//       [&](std::vector<std::string>* w) { return ImportInProcess(bytes, w); },
//       "model.onnx", {.timeout_s = 60}, &warnings);
#ifndef BRAID_GRAPH_IMPORT_SANDBOX_H_
#define BRAID_GRAPH_IMPORT_SANDBOX_H_

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"

namespace braid::graph {

struct SandboxOptions {
  // The child is killed after this long (DeadlineExceeded).
  double timeout_s = 120;
  // Address-space limit of the child in bytes beyond what the parent maps at
  // fork time (0: none). An allocation past it fails in the child only.
  int64_t extra_address_space_bytes = int64_t{16} << 30;
};

// Runs `import` in a child (its warnings come back into `warnings`). A status from `import` comes back as is; a child
// killed by a signal is InvalidArgument "<what>: the import crashed (signal
// N, NAME) ..."; a timeout is DeadlineExceeded. Falls back to running
// `import` in this process only when fork() itself fails.
absl::StatusOr<Graph> ImportIsolated(const std::function<absl::StatusOr<Graph>(std::vector<std::string>*)>& import,
                                     std::string_view what, const SandboxOptions& options,
                                     std::vector<std::string>* warnings);

}  // namespace braid::graph

#endif  // BRAID_GRAPH_IMPORT_SANDBOX_H_
