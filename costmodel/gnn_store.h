// The fused-op estimator's data in the profile store's SQLite file: training
// samples (fused groups drawn from models, DisCo §5.2) and the estimator's
// prediction cache. A sample is only an index: the fused kernel's measured
// time and its members' single-op times live in op_profiles (ProfileStore),
// where workers put them when they run the profiling tasks the sampler
// enqueues (server/task_queue.h CreateFusedTasks, CreateTasksForMisses).
//
//   absl::StatusOr<std::unique_ptr<GnnStore>> s = GnnStore::Open(path);
//   (*s)->PutSample({kind, "zoo:vgg19@sample", FusedSignature(sub, all), ToText(sub), n});
//   absl::StatusOr<std::vector<GnnExample>> ex = LoadGnnExamples(**s, *profiles, kind);
#ifndef BRAID_COSTMODEL_GNN_STORE_H_
#define BRAID_COSTMODEL_GNN_STORE_H_

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "costmodel/profile_store.h"
#include "graph/graph.h"

namespace braid::costmodel {

// One sampled fused op: `graph` is the group alone (server's FusedGroupGraph:
// every op of it is a member, in the group's op-id order), in braid's text
// format (graph/text_format.h), so that FusedSignature(graph, all ops) ==
// `signature`.
struct GnnSampleRecord {
  std::string device_kind;
  std::string model;      // where it was drawn: "zoo:vgg19@sample", "tests/data/x.onnx"
  std::string signature;  // FusedSignature of the group
  std::string graph_text;
  int num_ops = 0;
};

class GnnStore {
 public:
  // Opens or creates the file and migrates the profile store's schema (the
  // tables live beside op_profiles).
  static absl::StatusOr<std::unique_ptr<GnnStore>> Open(const std::string& path);
  virtual ~GnnStore() = default;

  // Idempotent: a sample already recorded for (device kind, model,
  // signature) is left as it is. Returns true when it was new.
  virtual absl::StatusOr<bool> PutSample(const GnnSampleRecord& s) = 0;
  // Every sample of the device kind, in insertion order.
  virtual absl::StatusOr<std::vector<GnnSampleRecord>> Samples(
      const std::string& device_kind) const = 0;
  virtual absl::StatusOr<int64_t> CountSamples(const std::string& device_kind,
                                               const std::string& model) const = 0;

  // The estimator's prediction cache, keyed by the checkpoint's identity
  // (a digest of its bytes) and the fused signature.
  virtual absl::Status PutPredictions(
      const std::string& checkpoint_id,
      const std::vector<std::pair<std::string, double>>& signature_seconds) = 0;
  virtual absl::StatusOr<std::vector<std::pair<std::string, double>>> Predictions(
      const std::string& checkpoint_id) const = 0;
  // Makes `checkpoint_id` the device kind's checkpoint: when another one was
  // recorded for the kind (gnn_meta "checkpoint_id"), its predictions are
  // dropped. Other device kinds' predictions stay. Returns how many rows went.
  virtual absl::StatusOr<int64_t> KeepOnlyPredictions(const std::string& device_kind,
                                                      const std::string& checkpoint_id) = 0;

  // Small facts about a device kind's sample set (text, usually JSON):
  // "noise_floor" is the repeatability of fused-op timings (braid gnn sample).
  virtual absl::Status PutMeta(const std::string& device_kind, const std::string& key,
                               const std::string& value) = 0;
  virtual absl::StatusOr<std::optional<std::string>> GetMeta(const std::string& device_kind,
                                                             const std::string& key) const = 0;
};

// A sample joined with its measurements: what the GNN trains and is
// evaluated on.
struct GnnExample {
  std::string model;
  std::string signature;
  graph::Graph graph;  // every op a member
  ProfileSample fused;  // the fused kernel, measured by a worker
  // Per op of `graph` (op-id order): its single-op profile under the same
  // device kind (op type, OpSignature), nullopt where none was measured.
  std::vector<std::optional<ProfileSample>> members;
};

// The samples of `device_kind` whose fused kernel has a profile (others are
// not run yet, or failed); `missing_fused` (when set) gets how many lacked one.
absl::StatusOr<std::vector<GnnExample>> LoadGnnExamples(const GnnStore& samples,
                                                        const ProfileStore& profiles,
                                                        const std::string& device_kind,
                                                        int* missing_fused = nullptr);

// The trained estimator of a device kind, by file name: the kind lowercased,
// every run of other characters than [a-z0-9] one '-', plus ".pt"
// ("cpu-1t:x86_64-avx512:AMD EPYC" -> "cpu-1t-x86-64-avx512-amd-epyc.pt").
std::string GnnCheckpointFileName(const std::string& device_kind);

// Where that checkpoint is, first found of: $BRAID_GNN_CHECKPOINT (any
// kind: loading it checks the kind it was trained for), then the file name
// in $BRAID_GNN_DIR, beside the executable in ../share/braid/gnn, and in the
// source tree's costmodel/gnn/checkpoints (where the repository ships one).
// nullopt when none exists or $BRAID_GNN_CHECKPOINT is "none".
std::optional<std::string> GnnCheckpointPathFor(const std::string& device_kind);

}  // namespace braid::costmodel

#endif  // BRAID_COSTMODEL_GNN_STORE_H_
