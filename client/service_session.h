// The `braid` CLI's view of a strategy service: a remote braid-server
// (--server host:port) or, with no address, the embedded one -- a BraidServer
// in this process on the SQLite file EmbeddedServiceDbPath() with, when
// ServiceArgs::start_worker is set, an in-process CPU worker
// (client/embedded_worker.h) connected through the in-process channel. Read-only calls on the embedded service (status, jobs,
// plan get, workers) read the SQLite file directly instead of starting a
// server, so they never resume (and run) another CLI's unfinished job.
//
//   ServiceArgs a;                       // a.server empty: embedded
//   absl::StatusOr<std::unique_ptr<ServiceApi>> api = OpenService(a);
//   absl::StatusOr<braid::v1::SubmitGraphResponse> job = (*api)->Submit(req);
//   (*api)->Watch(job->job_id(), [](const braid::v1::JobStatus& s) { ... });
//
// JobGraphFor() rebuilds what a finished job was planned on -- training
// graph, cluster and cost model -- so the CLI can re-simulate a plan (Chrome
// trace, `plan explain`): from the embedded store, or, for a remote server,
// from the model and cluster given again on the command line (checked against
// the job's graph fingerprint).
#ifndef BRAID_CLIENT_SERVICE_SESSION_H_
#define BRAID_CLIENT_SERVICE_SESSION_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "braid/v1/strategy.pb.h"
#include "client/embedded_worker.h"
#include "costmodel/cluster.h"
#include "costmodel/op_cost.h"
#include "costmodel/profile_store.h"
#include "search/parallel_plan.h"
#include "graph/graph.h"
#include "search/plan.h"

namespace braid::client {

struct ServiceArgs {
  std::string server;  // host:port; empty: the embedded service
  std::string token;   // client token (remote only)
  std::string tls_ca;  // PEM roots: TLS (remote only)
  // The server's admin token (remote only): operator calls (restore, confirm).
  std::string admin_token;
  std::string service_db;  // embedded: "" = EmbeddedServiceDbPath()
  std::string profile_db;  // embedded: "" = DefaultDatabasePath() (client/planning.h)
  // embedded: starts the in-process CPU worker when the server starts
  // (StartEmbeddedCpuWorker in braid-torch); empty: no worker.
  EmbeddedWorkerFactory start_worker;
  int search_threads = 1;       // embedded: SearchConfig::threads
};

// $BRAID_SERVICE_DB, else service.db beside DefaultDatabasePath() (which
// stays the profile store, shared with `braid plan` and `braid profile`).
std::string EmbeddedServiceDbPath();

struct WorkerInfo {
  std::string id;
  std::string name;
  std::string device_kind;
  int slots = 0;
  double last_heartbeat_unix_s = 0;
};

class ServiceApi {
 public:
  virtual ~ServiceApi() = default;
  virtual bool embedded() const = 0;
  virtual absl::StatusOr<braid::v1::SubmitGraphResponse> Submit(
      const braid::v1::SubmitGraphRequest& req) = 0;
  // Calls `on_status` on every change until a final phase; returns the last.
  virtual absl::StatusOr<braid::v1::JobStatus> Watch(
      const std::string& job_id, const std::function<void(const braid::v1::JobStatus&)>& cb) = 0;
  virtual absl::StatusOr<braid::v1::JobStatus> GetJob(const std::string& job_id) = 0;
  virtual absl::StatusOr<braid::v1::GetPlanResponse> GetPlan(const std::string& job_id) = 0;
  virtual absl::StatusOr<braid::v1::JobStatus> Cancel(const std::string& job_id) = 0;
  virtual absl::StatusOr<std::vector<braid::v1::JobStatus>> ListJobs(int limit) = 0;
  // A training rank's measured iteration times (Strategy.ReportMeasurement);
  // the embedded service starts its server for it (rollbacks need it).
  virtual absl::StatusOr<braid::v1::ReportMeasurementResponse> ReportMeasurement(
      const braid::v1::ReportMeasurementRequest& req) = 0;
  virtual absl::StatusOr<braid::v1::StartRunResponse> StartRun(
      const braid::v1::StartRunRequest& req) = 0;
  virtual absl::StatusOr<braid::v1::ListRollbacksResponse> ListRollbacks(
      const braid::v1::ListRollbacksRequest& req) = 0;
  // Operator calls: a remote server needs ServiceArgs::admin_token.
  virtual absl::StatusOr<braid::v1::RollbackActionResponse> RestorePlan(
      const braid::v1::RestorePlanRequest& req) = 0;
  virtual absl::StatusOr<braid::v1::RollbackActionResponse> ConfirmRollback(
      const braid::v1::ConfirmRollbackRequest& req) = 0;
  // Unimplemented for a remote server (the Strategy API has no worker list).
  virtual absl::StatusOr<std::vector<WorkerInfo>> ListWorkers() = 0;
};

absl::StatusOr<std::unique_ptr<ServiceApi>> OpenService(const ServiceArgs& args);

// What a plan is simulated on.
struct JobGraph {
  graph::Graph training;
  costmodel::ClusterSpec cluster;
  std::unique_ptr<costmodel::ProfileStore> profiles;  // may be null
  std::unique_ptr<costmodel::ClusterCostModel> cost_model;
  search::Plan plan;
};

// Where to rebuild a remote job's graph from (ignored when embedded).
struct ModelSource {
  std::string model;    // zoo:NAME, model.onnx, text graph
  std::string cluster;  // preset or JSON file
  int ranks = 0;
  int batch = 0;
  std::string profile_db;  // "" = DefaultDatabasePath()
};

absl::StatusOr<JobGraph> JobGraphFor(const ServiceArgs& args, const ModelSource& source,
                                     const braid::v1::GetPlanResponse& plan);

}  // namespace braid::client

#endif  // BRAID_CLIENT_SERVICE_SESSION_H_
