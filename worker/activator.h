// The activator: puts a plan into effect on the training ranks (DisCo §4.1,
// §5.1: the strategy is broadcast to every rank before training).
//
// Every rank runs `braid-worker activate` with the same model, world size and
// rendezvous address. The ranks meet through braid's rendezvous store, which
// rank 0 serves on the rendezvous address only (worker/rendezvous_store.h;
// LibTorch 1.13's TCPStore listens on every interface and admits anyone),
// and form a Gloo group through it (Debian's LibTorch is CPU-only; GPU ranks
// use NCCL directly, as worker/cuda/nccl_rank.cc does).
//
// The rendezvous is closed: a rank gets at the store only after it and rank
// 0 proved to each other, by a mutual nonce-based HMAC challenge bound to
// the rank, the world size and the rendezvous address, that they hold the
// ranks' key (`rendezvous_key`; by default the plan secret for a plan file,
// for a server job its report credential, else the client token). A process that cannot is refused and
// learns nothing: no Gloo address, no plan byte, no tag, no refusal reason.
// Without any key a multi-rank rendezvous is refused on a non-loopback
// address, and allowed with a warning on loopback (only this host's
// processes reach it there). Rank 0 waits --timeout-s for the ranks to join
// and then fails naming the ranks missing, as do the ranks waiting with it;
// a rank that cannot reach rank 0 gives up after --timeout-s too. Every text
// a peer sends (refusal reasons, rank 0's errors) is printed escaped
// (EscapePeerText). The activator reads no torchrun environment: under
// torchrun, start it with --rank $RANK --world-size $WORLD_SIZE and a
// rendezvous port of its own. Then:
//
//  1. Rank 0 fetches the plan: from braid-server (GetPlan of --job; the plan
//     is kept in the node's plan cache, worker/plan_cache.h), or from a plan
//     file (--plan) together with its HMAC tag (`<plan>.hmac`, written by
//     `braid plan sign` or by `braid plan -o` when a plan secret is set).
//  2. Rank 0 hands the plan's bytes to the other ranks through the store
//     (not over Gloo: a Gloo connection proves nothing).
//  3. Every rank verifies the bytes itself, against a digest it obtains over
//     an authenticated channel: the server's plan_sha256 (its own GetPlan with
//     digest_only, over the token-authenticated channel), or HMAC-SHA256 keyed
//     by the plan secret the ranks share (base/digest.h). A bare checksum
//     would catch corruption only; these catch tampering.
//  4. Every rank builds the training graph of its own model and refuses a
//     plan whose graph fingerprint differs, naming both.
//  5. The ranks agree (one allreduce of their verdicts) and either all refuse,
//     with the refusing rank and its reason, or all train: warm-up and timed
//     iterations with the plan in effect, through the executor that `braid
//     run` uses (worker/internal/executor.h): its buckets in plan order,
//     overlapped with the backward pass, its fused groups through braid's CPU
//     fused executor. With `baseline`, the DDP-bucket baseline's iterations
//     are interleaved with the plan's, on the same ranks.
//  6. The slowest rank's time per iteration is gathered to every rank; with a
//     server job and its report credential, rank 0 begins a run before
//     training (Strategy.StartRun: every activation is a new run) and every
//     rank reports its times under it (Strategy.ReportMeasurement).
//
// Overlap plans: a plan file whose JSON holds "overlap_training"
// ({model, rows, d_model, d_ff, heads, seq, blocks, ranks, lr, seed,
// "methods": one per OverlapPairs entry in that order, "pairs": their names,
// for the reader, "predicted_step_s"}), as `braid-overlap-measure
// --write-plan` writes braid's choice, goes through steps 1-3 and 5 the same
// way (broadcast, HMAC, agreement). Step 4 does not apply: the spec IS the
// model (every rank builds it from the plan itself; --model is not needed
// and not checked). Instead every rank validates the spec
// (ValidateOverlapTrainSpec, one method per pair, world size == its ranks)
// and refuses naming the field. The ranks then train the plan's methods on
// the activator's Gloo group (worker/overlap_train.h TrainOverlapOnGroup;
// `pin_cores` pins the ranks, as braid-overlap-measure's ranks are: it must
// be asked for, since the group exists before the plan's kind is known);
// with `baseline`, the all-"none" method list is interleaved step by step.
//
// Plan sizes are bounded by the world and the machine: a plan file over 256
// MiB is refused by rank 0, a data-parallel plan with more fusion groups (or
// group members) than the graph has ops, or more buckets (or bucket entries)
// than it has gradients, by every rank; an overlap spec's every dimension
// and its bytes per rank are bounded by ValidateOverlapTrainSpec. The
// training phase too ends at --timeout-s: a rank still training then stops
// its process (status 1), and its peers fail in their next collective.
//
// Nothing assumes one host: the rendezvous is HOST:PORT, and Gloo binds the
// address that reaches it (127.0.0.1 for a loopback rendezvous). Rank 0
// binds the store to HOST itself, so HOST must be an address of rank 0's
// host that the other hosts reach.
//
//   ActivateOptions o{.rank = r, .world = 3, .rendezvous = "127.0.0.1:29511",
//                     .plan_path = "plan.json", .model = "model.onnx"};
//   absl::StatusOr<ActivationResult> res = Activate(o);
#ifndef BRAID_WORKER_ACTIVATOR_H_
#define BRAID_WORKER_ACTIVATOR_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "braid/v1/plan.pb.h"
#include "braid/v1/strategy.pb.h"
#include "worker/executor.h"
#include "worker/overlap_train.h"

namespace braid::worker {

struct ActivateOptions {
  int rank = 0;
  int world = 0;
  std::string rendezvous;  // HOST:PORT of the store rank 0 serves (on that address only)
  // The address this rank's Gloo device uses; empty: 127.0.0.1 when the
  // rendezvous host is a loopback address, else the host name's address.
  std::string bind_host;

  // The plan: a server job ...
  std::string job;
  std::string server;
  std::string token;   // client token (Bearer)
  std::string tls_ca;  // PEM roots; set: TLS
  std::string cache_dir;
  // The job's report credential (SubmitGraphResponse.report_credential):
  // rank 0 begins the run with it (Strategy.StartRun) and every rank reports
  // under that run. Empty: the times are not reported.
  std::string report_credential;
  // ... or a file, verified by HMAC: the tag `plan_hmac` (hex) or, when
  // empty, the contents of `<plan_path>.hmac`; the secret from
  // `secret_file` / $BRAID_PLAN_SECRET_FILE / $BRAID_PLAN_SECRET.
  std::string plan_path;
  std::string plan_hmac;
  std::string secret_file;
  // The secret the ranks prove to each other at the rendezvous before any
  // plan byte moves (see the file comment). Empty: the plan secret for a
  // plan file; for a server job `report_credential`, else `token`.
  std::string rendezvous_key;

  // The model every rank builds: ONNX, braid text, or zoo:NAME.
  std::string model;
  int batch = 0;
  std::string optimizer = "sgd";

  int warmup = 2;
  int iterations = 5;
  bool baseline = false;  // interleave the plan's DDP-bucket baseline
  // Overlap plans: also interleave every fixed method applied to every pair
  // (none, looped, unrolled, bidirectional), step by step with the plan's.
  bool compare_methods = false;
  bool report = true;     // report to the server (server jobs only)
  // The rendezvous (every rank joined), each collective, and the training
  // phase.
  double timeout_s = 300;
  // Pin rank r to core r mod cores (worker/rank_processes.h PinToCore)
  // before the Gloo group is made, so Gloo's threads share its core.
  bool pin_cores = false;
};

struct ActivationResult {
  std::string plan_sha256;
  std::string verified_by;  // how every rank checked the plan
  std::string graph_fingerprint;
  double predicted_iteration_s = 0;  // the plan's (simulated)
  int fusion_groups = 0;
  int buckets = 0;
  // Per timed iteration, the slowest rank's seconds.
  std::vector<double> plan_iteration_s;
  std::vector<double> baseline_iteration_s;  // with `baseline`
  ExecBookkeeping plan_book;                 // summed over ranks
  // This rank's own times (what it reports).
  std::vector<double> own_plan_s;
  std::vector<double> own_baseline_s;
  std::optional<braid::v1::ReportMeasurementResponse> report;  // rank 0's
  // An overlap plan: the spec it trained, the plan's per-pair methods and
  // per timed step the plan's losses; predicted_iteration_s is the plan's
  // predicted_step_s, plan_iteration_s / baseline_iteration_s its steps and
  // the all-"none" baseline's; graph_fingerprint stays empty.
  bool overlap = false;
  OverlapTrainSpec overlap_spec;
  std::vector<DecomposeMethod> overlap_methods;
  std::vector<double> plan_loss;
  std::vector<double> baseline_loss;
  // With compare_methods: per fixed method ("none", "looped", ...), per
  // timed step the slowest rank's seconds, interleaved with the plan's.
  std::vector<std::string> compared_names;
  std::vector<std::vector<double>> compared_iteration_s;
};

// InvalidArgument for bad options; FailedPrecondition (every rank) when any
// rank refused the plan, naming the rank and why (digest or HMAC mismatch,
// graph fingerprint mismatch, a plan the CPU executor cannot run);
// Unavailable when the server cannot be reached for the plan or its digest;
// DeadlineExceeded naming the missing ranks when not every rank joined the
// rendezvous within timeout_s; PermissionDenied when this rank and rank 0
// could not prove the same key to each other.
absl::StatusOr<ActivationResult> Activate(const ActivateOptions& options);

// The parts of Activate that need no ranks, for tests and for `braid plan`
// tooling.

// A plan file's bytes as a braid.v1.Plan: `braid plan -o` JSON
// ({"format": "braid.plan.v1", "graph_fingerprint", "groups", "buckets",
// "ddp_buckets", "predicted_iteration_s"}), `braid plan --json` output (the
// same under "plan"), or a GetPlanResponse in protobuf's JSON mapping
// (`braid-worker plan get -o`). InvalidArgument naming `what` otherwise.
absl::StatusOr<braid::v1::Plan> ParsePlanFile(const std::string& bytes, const std::string& what);

// An overlap plan file (see the file comment).
struct OverlapPlan {
  OverlapTrainSpec spec;  // variants: {methods}
  std::vector<DecomposeMethod> methods;  // one per OverlapPairs(spec) entry
  double predicted_step_s = 0;
};

// Whether `bytes` is a braid.plan.v1 JSON object with "overlap_training".
bool IsOverlapPlanFile(const std::string& bytes);

// The overlap plan in `bytes`, checked for `world` ranks: InvalidArgument
// naming `what` and the field (a missing or mistyped field, "methods" not one
// per pair, "ranks" not `world`, what ValidateOverlapTrainSpec refuses, an
// unknown method, a "parallel" section beside it).
absl::StatusOr<OverlapPlan> ParseOverlapPlanFile(const std::string& bytes, const std::string& what,
                                                 int world);

// The plan file's text for `spec` (its sizes) run with `methods`, one per
// OverlapPairs(spec) entry.
std::string OverlapPlanJson(const OverlapTrainSpec& spec, const std::vector<DecomposeMethod>& methods,
                            double predicted_step_s);

// The strategy that runs `plan` on `training`: groups and buckets resolved by
// name, the executor's order for the groups. FailedPrecondition when the
// plan's graph fingerprint is not `fingerprint`; InvalidArgument naming the
// first op or gradient the graph lacks, or what the executor refuses.
absl::StatusOr<ExecStrategy> StrategyFromPlan(const graph::Graph& training,
                                              const std::string& fingerprint,
                                              const braid::v1::Plan& plan);

}  // namespace braid::worker

#endif  // BRAID_WORKER_ACTIVATOR_H_
