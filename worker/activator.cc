#include "worker/activator.h"

#include <ATen/ATen.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/bounded_json.h"
#include "base/digest.h"
#include "base/status_macros.h"
#include "base/text.h"
#include "proto/strategy_client.h"
#include "google/protobuf/util/json_util.h"
#include "graph/fingerprint.h"
#include "graph/model_source.h"
#include "graph/training.h"
#include "nlohmann/json.hpp"
#include "proto/plan_digest.h"
#include "worker/internal/executor.h"
#include "worker/runtime/gloo_group.h"
#include "worker/plan_cache.h"
#include "worker/rank_processes.h"
#include "worker/rendezvous_auth.h"
#include "worker/rendezvous_store.h"
#include "worker/rendezvous_wire.h"

namespace braid::worker {
namespace {

using graph::OpId;
using graph::TensorId;

// The largest plan rank 0 hands the other ranks.
constexpr int64_t kMaxPlanBytes = int64_t{256} << 20;

// What rank 0 hands the other ranks: how they verify the bytes, and the bytes.
enum class Source : int64_t { kError = 0, kServer = 1, kFile = 2 };

struct Payload {
  Source source = Source::kError;
  std::string bytes;  // kServer: the Plan, serialized deterministically; kFile: the file
  std::string tag;    // kFile: the HMAC (hex); kError: empty
  std::string error;  // kError: why rank 0 has no plan
};

absl::StatusOr<std::string> ReadWholeFile(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(what, " ", path, ": cannot read it"));
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (!ec && size > static_cast<uintmax_t>(kMaxPlanBytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " ", path, ": ", size, " bytes, over the ", kMaxPlanBytes, "-byte limit"));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool IsLoopback(const std::string& host) {
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

absl::StatusOr<std::pair<std::string, uint16_t>> ParseRendezvous(const std::string& hp) {
  const size_t colon = hp.rfind(':');
  int port = 0;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(hp.substr(colon + 1), &port) || port < 1 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rendezvous must be HOST:PORT with a port in [1, 65535], got '", hp, "'"));
  }
  std::string host = hp.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return std::make_pair(host, static_cast<uint16_t>(port));
}

// The token-authenticated channel to the server's Strategy service
// (client/strategy_client.h), its errors naming the call.
class ServerPlans {
 public:
  static absl::StatusOr<ServerPlans> Connect(const ActivateOptions& o) {
    client::ClientOptions co;
    co.address = o.server;
    co.token = o.token;
    co.rpc_timeout_s = 30;
    if (!o.tls_ca.empty()) {
      co.tls = true;
      ASSIGN_OR_RETURN(co.tls_root_certs_pem, ReadWholeFile(o.tls_ca, "--tls-ca"));
    }
    ASSIGN_OR_RETURN(std::unique_ptr<client::StrategyClient> c, client::StrategyClient::Create(co));
    return ServerPlans(std::move(c), o);
  }

  absl::StatusOr<v1::GetPlanResponse> Get(bool digest_only) {
    absl::StatusOr<v1::GetPlanResponse> r = client_->GetPlan(o_.job, digest_only);
    if (!r.ok()) return Named(r.status(), absl::StrCat("GetPlan ", o_.job, " from ", o_.server));
    return r;
  }

  absl::StatusOr<v1::StartRunResponse> StartRun(const v1::StartRunRequest& req) {
    absl::StatusOr<v1::StartRunResponse> r = client_->StartRun(req);
    if (!r.ok()) return Named(r.status(), absl::StrCat("StartRun of ", o_.job, " on ", o_.server));
    return r;
  }

  absl::StatusOr<v1::ReportMeasurementResponse> Report(const v1::ReportMeasurementRequest& req) {
    absl::StatusOr<v1::ReportMeasurementResponse> r = client_->ReportMeasurement(req);
    if (!r.ok()) return Named(r.status(), absl::StrCat("ReportMeasurement to ", o_.server));
    return r;
  }

 private:
  ServerPlans(std::unique_ptr<client::StrategyClient> c, const ActivateOptions& o)
      : client_(std::move(c)), o_(o) {}
  static absl::Status Named(const absl::Status& s, const std::string& what) {
    return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
  }
  std::unique_ptr<client::StrategyClient> client_;
  ActivateOptions o_;
};

// Rank 0: the plan and what the other ranks need to verify it.
Payload LoadPayload(const ActivateOptions& o) {
  Payload p;
  if (!o.job.empty()) {
    absl::StatusOr<ServerPlans> server = ServerPlans::Connect(o);
    if (!server.ok()) {
      p.error = std::string(server.status().message());
      return p;
    }
    PlanFetcher fetch = [&](const std::string&) { return server->Get(/*digest_only=*/false); };
    LocalPlanCache cache(o.cache_dir.empty() ? DefaultPlanCacheDir() : o.cache_dir);
    absl::StatusOr<FetchedPlan> fetched = FetchPlanCached(fetch, cache, o.job);
    if (!fetched.ok()) {
      p.error = fetched.status().ToString();
      return p;
    }
    // A plan served from the local cache is verified like one from the
    // server: against the digest every rank asks the server for.
    p.source = Source::kServer;
    p.bytes = SerializeDeterministic(fetched->plan.plan());
    return p;
  }
  absl::StatusOr<std::string> bytes = ReadWholeFile(o.plan_path, "plan file");
  if (!bytes.ok()) {
    p.error = std::string(bytes.status().message());
    return p;
  }
  std::string tag = o.plan_hmac;
  if (tag.empty()) {
    absl::StatusOr<std::string> t = ReadWholeFile(o.plan_path + ".hmac", "plan HMAC");
    if (!t.ok()) {
      p.error = absl::StrCat(o.plan_path, " has no HMAC tag (", o.plan_path,
                             ".hmac): sign it with `braid plan sign ", o.plan_path,
                             "` using the ranks' plan secret, or pass --plan-hmac");
      return p;
    }
    tag = std::string(absl::StripAsciiWhitespace(*t));
  }
  p.source = Source::kFile;
  p.bytes = *std::move(bytes);
  p.tag = std::move(tag);
  return p;
}

// Rank 0 puts the payload into the rendezvous store, which only ranks that
// proved the key can read (worker/rendezvous_store.h); every other rank
// takes it from there. Not over Gloo: a Gloo connection proves nothing.
constexpr char kPayloadKey[] = "braid/activate/payload";

absl::StatusOr<Payload> ExchangePayload(c10d::Store& store, int rank, Payload p) {
  if (rank == 0) {
    if (static_cast<int64_t>(p.bytes.size() + p.tag.size() + p.error.size()) > kMaxPlanBytes) {
      p = Payload{.error = absl::StrCat("the plan is over ", kMaxPlanBytes, " bytes")};
    }
    rendezvous::Encoder e;
    e.I64(static_cast<int64_t>(p.source)).Bytes(p.bytes).Bytes(p.tag).Bytes(p.error);
    store.set(kPayloadKey, std::vector<uint8_t>(e.data().begin(), e.data().end()));
    return p;
  }
  const std::vector<uint8_t> raw = store.get(kPayloadKey);
  rendezvous::Decoder d(std::string_view(reinterpret_cast<const char*>(raw.data()), raw.size()));
  Payload out;
  absl::StatusOr<int64_t> source = d.I64();
  absl::StatusOr<std::string> bytes = d.Bytes(kMaxPlanBytes);
  absl::StatusOr<std::string> tag = d.Bytes(kMaxPlanBytes);
  absl::StatusOr<std::string> error = d.Bytes(kMaxPlanBytes);
  if (!source.ok() || !bytes.ok() || !tag.ok() || !error.ok() || !d.Done().ok() || *source < 0 ||
      *source > static_cast<int64_t>(Source::kFile)) {
    return absl::DataLossError("activate: the plan rank 0 handed over does not decode");
  }
  out.source = static_cast<Source>(*source);
  out.bytes = *std::move(bytes);
  out.tag = *std::move(tag);
  out.error = *std::move(error);
  return out;
}

// This rank's check of the bytes it holds (rank 0 checks too: its cache or
// file may have been changed behind its back).
absl::StatusOr<std::string> Verify(const ActivateOptions& o, const Payload& p) {
  switch (p.source) {
    case Source::kServer: {
      ASSIGN_OR_RETURN(ServerPlans server, ServerPlans::Connect(o));
      ASSIGN_OR_RETURN(v1::GetPlanResponse digest, server.Get(/*digest_only=*/true));
      if (digest.plan_sha256().empty()) {
        return absl::FailedPreconditionError(
            absl::StrCat("the server at ", o.server, " gives no plan digest for ", o.job,
                         " (an older braid-server?): the plan cannot be verified"));
      }
      ASSIGN_OR_RETURN(std::string got, PlanDigestOfSerialized(p.bytes));
      if (!DigestsEqual(got, digest.plan_sha256())) {
        return absl::FailedPreconditionError(absl::StrCat(
            "plan of ", o.job, ": its SHA-256 ", got.substr(0, 16),
            "... is not the server's ", digest.plan_sha256().substr(0, 16),
            "...: the plan was changed after the server sent it (or the server's plan changed, "
            "e.g. rolled back: restart the job)"));
      }
      return absl::StrCat("SHA-256 against the server's digest (", o.server, ")");
    }
    case Source::kFile: {
      ASSIGN_OR_RETURN(std::string secret, LoadPlanSecret(o.secret_file));
      if (!DigestsEqual(HmacSha256Hex(secret, p.bytes), p.tag)) {
        return absl::FailedPreconditionError(absl::StrCat(
            "plan file ", o.plan_path, ": HMAC-SHA256 mismatch: the plan was changed after it "
            "was signed, or it was signed with another secret than this rank's"));
      }
      return std::string("HMAC-SHA256 with the ranks' shared secret");
    }
    case Source::kError:
      break;
  }
  return absl::FailedPreconditionError(absl::StrCat("rank 0 has no plan: ", EscapePeerText(p.error)));
}

absl::StatusOr<v1::Plan> ParsePayloadPlan(const ActivateOptions& o, const Payload& p) {
  if (p.source == Source::kServer) {
    v1::Plan plan;
    if (!plan.ParseFromString(p.bytes)) return absl::DataLossError("the broadcast plan does not parse");
    return plan;
  }
  return ParsePlanFile(p.bytes, o.plan_path);
}

absl::StatusOr<graph::Graph> BuildTraining(const ActivateOptions& o) {
  if (o.model.empty()) {
    return absl::InvalidArgumentError(
        "--model is required for a data-parallel plan (only an overlap plan carries its model)");
  }
  graph::LoadOptions lo;
  lo.batch = o.batch;
  std::vector<std::string> warnings;
  ASSIGN_OR_RETURN(graph::Graph fwd, graph::LoadModel(o.model, lo, &warnings));
  for (const std::string& w : warnings) LOG(WARNING) << "activate: " << o.model << ": " << w;
  graph::TrainingOptions t;
  t.ranks = o.world;
  if (o.optimizer == "adam") {
    t.optimizer = graph::Optimizer::kAdam;
  } else if (o.optimizer != "sgd") {
    return absl::InvalidArgumentError(absl::StrCat("unknown optimizer '", o.optimizer, "' (sgd or adam)"));
  }
  return graph::BuildTrainingGraph(fwd, t);
}

absl::Status CheckOptions(const ActivateOptions& o) {
  if (o.world < 1 || o.rank < 0 || o.rank >= o.world) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rank ", o.rank, " is not in [0, --world-size ", o.world, ")"));
  }
  if (o.job.empty() == o.plan_path.empty()) {
    return absl::InvalidArgumentError("give the plan as --job JOB (with --server) or --plan FILE, one of them");
  }
  if (o.iterations < 1 || o.warmup < 0) {
    return absl::InvalidArgumentError("--iterations must be >= 1 and --warmup >= 0");
  }
  return ParseRendezvous(o.rendezvous).status();
}

// Slowest rank per iteration, on every rank.
std::vector<double> MaxOverRanks(c10d::ProcessGroupGloo& pg, const std::vector<double>& own) {
  at::Tensor t = at::tensor(own, at::kDouble);
  std::vector<at::Tensor> io = {t};
  c10d::AllreduceOptions opts;
  opts.reduceOp = c10d::ReduceOp::MAX;
  pg.allreduce(io, opts)->wait();
  return std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
}

ExecBookkeeping SumOverRanks(c10d::ProcessGroupGloo& pg, const ExecBookkeeping& b) {
  at::Tensor t = at::tensor({static_cast<double>(b.allreduces_started),
                             static_cast<double>(b.gradients_reduced),
                             static_cast<double>(b.gradients_not_once), static_cast<double>(b.waits),
                             static_cast<double>(b.updates_before_wait),
                             static_cast<double>(b.bytes_copied),
                             static_cast<double>(b.buckets_verified),
                             static_cast<double>(b.verify_failures), b.pack_s, b.wait_s},
                            at::kDouble);
  std::vector<at::Tensor> io = {t};
  pg.allreduce(io)->wait();
  const double* v = t.data_ptr<double>();
  ExecBookkeeping s;
  s.allreduces_started = static_cast<int64_t>(v[0]);
  s.gradients_reduced = static_cast<int64_t>(v[1]);
  s.gradients_not_once = static_cast<int64_t>(v[2]);
  s.waits = static_cast<int64_t>(v[3]);
  s.updates_before_wait = static_cast<int64_t>(v[4]);
  s.bytes_copied = static_cast<int64_t>(v[5]);
  s.buckets_verified = static_cast<int64_t>(v[6]);
  s.verify_failures = static_cast<int64_t>(v[7]);
  s.pack_s = v[8];
  s.wait_s = v[9];
  return s;
}

}  // namespace

absl::StatusOr<v1::Plan> ParsePlanFile(const std::string& bytes, const std::string& what) {
  absl::StatusOr<nlohmann::json> parsed = base::ParseBoundedJson(bytes, base::kPlanJsonLimits);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", parsed.status().message()));
  }
  nlohmann::json j = *std::move(parsed);
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(what, ": not a JSON object"));
  if (j.contains("plan_json") || (j.contains("plan") && j["plan"].contains("fusion_groups")) ||
      (j.contains("plan") && j["plan"].contains("fusionGroups"))) {
    v1::GetPlanResponse resp;
    google::protobuf::util::JsonParseOptions po;
    po.ignore_unknown_fields = true;
    if (!google::protobuf::util::JsonStringToMessage(bytes, &resp, po).ok()) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": not a GetPlanResponse"));
    }
    return resp.plan();
  }
  if (j.contains("plan") && j["plan"].is_object()) {
    nlohmann::json inner = std::move(j["plan"]);
    for (const char* k : {"graph_fingerprint", "predicted_iteration_s", "ddp_buckets"}) {
      if (!inner.contains(k) && j.contains(k)) inner[k] = j[k];
    }
    j = std::move(inner);
  }
  if (j.value("format", "") != "braid.plan.v1") {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": not a braid plan (no \"format\": \"braid.plan.v1\")"));
  }
  if (j.contains("parallel") && j["parallel"].is_object()) {
    // Its groups and buckets name a per-device graph (search/parallel_graph.h),
    // and the data-parallel executor these ranks run cannot split a layer or
    // cut a pipeline. Parallel plans run on braid-parallel-rank processes,
    // which `braid run` spawns after mapping the plan onto their spec and
    // verifying it op by op (client/parallel_plan_exec.h); those ranks meet
    // through a local FileStore, not this activator's rendezvous, so they
    // are not wired in here yet.
    return absl::FailedPreconditionError(absl::StrCat(
        what, ": a parallel plan (", j["parallel"].value("strategy", std::string("?")),
        "): braid-worker activate runs data-parallel plans only; run this one on one host "
        "with `braid run MODEL --plan ", what,
        " --ranks N` (verified and trained on braid-parallel-rank ranks), or plan with "
        "`braid plan` without --parallel for the activator"));
  }
  if (j.contains("overlap_training")) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, ": an overlap (tensor-parallel) training plan, not a data-parallel one: run it with "
        "`braid-worker activate --plan ", what, "`"));
  }
  v1::Plan plan;
  try {
    plan.set_graph_fingerprint(j.value("graph_fingerprint", ""));
    plan.set_cluster_fingerprint(j.value("cluster_fingerprint", ""));
    plan.set_predicted_iteration_s(j.value("predicted_iteration_s", 0.0));
    for (const nlohmann::json& g : j.value("groups", nlohmann::json::array())) {
      v1::FusionGroup* fg = plan.add_fusion_groups();
      for (const std::string& op : g.at("ops").get<std::vector<std::string>>()) fg->add_ops(op);
      for (const std::string& op : g.value("duplicated", std::vector<std::string>{})) fg->add_duplicated(op);
    }
    for (const nlohmann::json& b : j.value("buckets", nlohmann::json::array())) {
      v1::Bucket* out = plan.add_buckets();
      for (const std::string& t : b.get<std::vector<std::string>>()) out->add_gradients(t);
    }
    for (const nlohmann::json& b : j.value("ddp_buckets", nlohmann::json::array())) {
      v1::Bucket* out = plan.add_ddp_buckets();
      for (const std::string& t : b.get<std::vector<std::string>>()) out->add_gradients(t);
    }
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": malformed plan: ", e.what()));
  }
  return plan;
}

bool IsOverlapPlanFile(const std::string& bytes) {
  // Out of bounds or not JSON: not an overlap plan (ParsePlanFile says why).
  const absl::StatusOr<nlohmann::json> j = base::ParseBoundedJson(bytes, base::kPlanJsonLimits);
  return j.ok() && j->is_object() && j->contains("overlap_training") && !j->contains("parallel");
}

absl::StatusOr<OverlapPlan> ParseOverlapPlanFile(const std::string& bytes, const std::string& what,
                                                 int world) {
  absl::StatusOr<nlohmann::json> parsed = base::ParseBoundedJson(bytes, base::kPlanJsonLimits);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", parsed.status().message()));
  }
  const nlohmann::json j = *std::move(parsed);
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(what, ": not a JSON object"));
  if (j.value("format", "") != "braid.plan.v1") {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": not a braid plan (no \"format\": \"braid.plan.v1\")"));
  }
  if (j.contains("parallel")) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": both \"parallel\" and \"overlap_training\": one kind of plan per file"));
  }
  const nlohmann::json& o = j.contains("overlap_training") ? j["overlap_training"] : nlohmann::json();
  if (!o.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": \"overlap_training\" is not an object"));
  }
  OverlapPlan p;
  OverlapTrainSpec& s = p.spec;
  // Each field by name, so a refusal names the one that is wrong.
  auto field = [&](const char* name, auto& into) -> absl::Status {
    if (!o.contains(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": overlap_training has no \"", name, "\""));
    }
    try {
      o.at(name).get_to(into);
    } catch (const nlohmann::json::exception& e) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": overlap_training \"", name, "\": ", e.what()));
    }
    return absl::OkStatus();
  };
  std::string model;
  std::vector<std::string> methods;
  RETURN_IF_ERROR(field("model", model));
  absl::StatusOr<OverlapModel> m = ParseOverlapModel(model);
  if (!m.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": overlap_training \"model\": ",
                                                   std::string(m.status().message())));
  }
  s.model = *m;
  RETURN_IF_ERROR(field("rows", s.rows));
  RETURN_IF_ERROR(field("d_model", s.d_model));
  RETURN_IF_ERROR(field("d_ff", s.d_ff));
  RETURN_IF_ERROR(field("heads", s.heads));
  RETURN_IF_ERROR(field("seq", s.seq));
  RETURN_IF_ERROR(field("blocks", s.blocks));
  RETURN_IF_ERROR(field("ranks", s.ranks));
  RETURN_IF_ERROR(field("lr", s.lr));
  RETURN_IF_ERROR(field("seed", s.seed));
  RETURN_IF_ERROR(field("methods", methods));
  if (o.contains("predicted_step_s")) RETURN_IF_ERROR(field("predicted_step_s", p.predicted_step_s));
  if (s.ranks != world) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": overlap_training \"ranks\" is ", s.ranks,
                                                   ", but the world size is ", world));
  }
  // ValidateOverlapTrainSpec needs ranks >= 2 before the pairs make sense.
  s.variants = {{DecomposeMethod::kNone}};
  if (absl::Status v = ValidateOverlapTrainSpec(s); !v.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", std::string(v.message())));
  }
  const std::vector<OverlapPair> pairs = OverlapPairs(s);
  if (methods.size() != pairs.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": overlap_training \"methods\" lists ", methods.size(), " methods, the ",
        std::string(OverlapModelName(s.model)), " spec has ", pairs.size(), " pairs (one method per pair, "
        "in OverlapPairs' order)"));
  }
  for (size_t i = 0; i < methods.size(); ++i) {
    absl::StatusOr<DecomposeMethod> dm = ParseDecomposeMethod(methods[i]);
    if (!dm.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": overlap_training \"methods\"[", i,
                                                     "] (pair ", pairs[i].name, "): ",
                                                     std::string(dm.status().message())));
    }
    p.methods.push_back(*dm);
  }
  s.variants = {p.methods};
  if (absl::Status v = ValidateOverlapTrainSpec(s); !v.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": overlap_training \"methods\": ", std::string(v.message())));
  }
  return p;
}

std::string OverlapPlanJson(const OverlapTrainSpec& spec, const std::vector<DecomposeMethod>& methods,
                            double predicted_step_s) {
  nlohmann::json names = nlohmann::json::array(), ms = nlohmann::json::array();
  for (const OverlapPair& p : OverlapPairs(spec)) names.push_back(p.name);
  for (DecomposeMethod m : methods) ms.push_back(std::string(DecomposeMethodName(m)));
  const nlohmann::json j = {
      {"format", "braid.plan.v1"},
      {"overlap_training",
       {{"model", std::string(OverlapModelName(spec.model))},
        {"rows", spec.rows},
        {"d_model", spec.d_model},
        {"d_ff", spec.d_ff},
        {"heads", spec.heads},
        {"seq", spec.seq},
        {"blocks", spec.blocks},
        {"ranks", spec.ranks},
        {"lr", spec.lr},
        {"seed", spec.seed},
        {"methods", ms},
        {"pairs", names},
        {"predicted_step_s", predicted_step_s}}}};
  return j.dump(1) + "\n";
}

namespace {

absl::StatusOr<std::vector<std::vector<TensorId>>> ResolveBuckets(
    const graph::Graph& g, const google::protobuf::RepeatedPtrField<v1::Bucket>& buckets,
    const std::string& which) {
  // Each gradient sits in one bucket: a plan listing more buckets or entries
  // than the graph has gradients is not for this graph, and is refused before
  // anything is built for it.
  int64_t gradients = 0, entries = 0;
  for (TensorId t = 0; t < g.num_tensors(); ++t) {
    gradients += g.tensor(t).role == graph::TensorRole::kGradient;
  }
  for (const v1::Bucket& b : buckets) entries += b.gradients_size();
  if (buckets.size() > gradients || entries > gradients) {
    return absl::InvalidArgumentError(absl::StrCat(
        which, " buckets: ", buckets.size(), " buckets of ", entries,
        " gradients in all, but this rank's graph has ", gradients, " gradients"));
  }
  std::map<std::string, TensorId, std::less<>> index;
  for (TensorId t = 0; t < g.num_tensors(); ++t) index.emplace(g.tensor(t).name, t);
  std::vector<std::vector<TensorId>> out;
  for (const v1::Bucket& b : buckets) {
    out.emplace_back();
    for (const std::string& name : b.gradients()) {
      auto it = index.find(name);
      if (it == index.end()) {
        return absl::InvalidArgumentError(absl::StrCat(
            which, " bucket ", out.size() - 1, ": this rank's model has no gradient '", name, "'"));
      }
      out.back().push_back(it->second);
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<ExecStrategy> StrategyFromPlan(const graph::Graph& training,
                                              const std::string& fingerprint, const v1::Plan& plan) {
  if (plan.graph_fingerprint().empty()) {
    return absl::FailedPreconditionError(
        "the plan names no graph fingerprint: it cannot be checked against this rank's model "
        "(write it with a current `braid plan -o` or fetch it from the server)");
  }
  if (plan.graph_fingerprint() != fingerprint) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the plan is for training graph ", plan.graph_fingerprint(), ", this rank's model builds ",
        fingerprint, " (the model, its batch, the world size and the optimizer must be the plan's)"));
  }
  // Each op is in at most one group (duplicated ones aside), so no plan for
  // this graph has more groups than it has ops, or a group more members.
  if (plan.fusion_groups_size() > training.num_ops()) {
    return absl::InvalidArgumentError(absl::StrCat("the plan has ", plan.fusion_groups_size(),
                                                   " fusion groups, but this rank's graph has ",
                                                   training.num_ops(), " ops"));
  }
  for (int gi = 0; gi < plan.fusion_groups_size(); ++gi) {
    const v1::FusionGroup& grp = plan.fusion_groups(gi);
    if (grp.ops_size() > training.num_ops() || grp.duplicated_size() > training.num_ops()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "fusion group ", gi, " lists ", grp.ops_size(), " ops (", grp.duplicated_size(),
          " duplicated), but this rank's graph has ", training.num_ops(), " ops"));
    }
  }
  std::map<std::string, OpId, std::less<>> ops;
  for (OpId o = 0; o < training.num_ops(); ++o) ops.emplace(training.op(o).name, o);
  ExecStrategy s{.name = "plan"};
  for (int gi = 0; gi < plan.fusion_groups_size(); ++gi) {
    ExecStrategy::FusedGroup grp;
    auto resolve = [&](const std::string& name, std::vector<OpId>& into) -> absl::Status {
      auto it = ops.find(name);
      if (it == ops.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("fusion group ", gi, ": this rank's model has no op '", name, "'"));
      }
      into.push_back(it->second);
      return absl::OkStatus();
    };
    for (const std::string& name : plan.fusion_groups(gi).ops()) RETURN_IF_ERROR(resolve(name, grp.ops));
    for (const std::string& name : plan.fusion_groups(gi).duplicated()) {
      RETURN_IF_ERROR(resolve(name, grp.duplicated));
    }
    s.groups.push_back(std::move(grp));
  }
  ASSIGN_OR_RETURN(s.buckets, ResolveBuckets(training, plan.buckets(), "plan"));
  ASSIGN_OR_RETURN(s.order, ExecOrderFor(training, s.groups));
  RETURN_IF_ERROR(ValidateStrategy(training, s));
  return s;
}

namespace {

// What a rank runs once it accepted the plan.
struct Accepted {
  v1::Plan plan;
  ExecStrategy plan_strategy;
  ExecStrategy ddp_strategy;  // with --baseline
};

// This rank's verdict on the broadcast plan: verified, for this rank's
// graph, runnable by the executor (and its DDP baseline, when asked).
absl::StatusOr<Accepted> Accept(const ActivateOptions& o, const Payload& payload,
                                const graph::Graph& training, ActivationResult& res) {
  Accepted a;
  ASSIGN_OR_RETURN(res.verified_by, Verify(o, payload));
  ASSIGN_OR_RETURN(a.plan, ParsePayloadPlan(o, payload));
  ASSIGN_OR_RETURN(res.graph_fingerprint, graph::FingerprintHex(training));
  ASSIGN_OR_RETURN(a.plan_strategy, StrategyFromPlan(training, res.graph_fingerprint, a.plan));
  if (!o.baseline) return a;
  if (a.plan.ddp_buckets_size() == 0) {
    return absl::FailedPreconditionError(
        "--baseline: the plan carries no DDP-bucket baseline (ddp_buckets) to measure against");
  }
  a.ddp_strategy.name = "ddp";
  ASSIGN_OR_RETURN(a.ddp_strategy.buckets, ResolveBuckets(training, a.plan.ddp_buckets(), "ddp"));
  a.ddp_strategy.order = internal::DefaultOrder(training);
  RETURN_IF_ERROR(ValidateStrategy(training, a.ddp_strategy));
  return a;
}

// Every rank learns the first rank that refused and its reason (through the
// store), so all stop together; OK when none refused.
absl::Status Agree(c10d::Store& store, c10d::ProcessGroupGloo& pg, const ActivateOptions& o,
                   const absl::Status& verdict) {
  if (!verdict.ok()) {
    const std::string m(verdict.message().substr(0, 16384));
    store.set(absl::StrCat("braid/activate/refused/", o.rank), std::vector<uint8_t>(m.begin(), m.end()));
  }
  at::Tensor first = at::tensor({static_cast<int64_t>(verdict.ok() ? o.world : o.rank)}, at::kLong);
  std::vector<at::Tensor> io = {first};
  c10d::AllreduceOptions opts;
  opts.reduceOp = c10d::ReduceOp::MIN;
  pg.allreduce(io, opts)->wait();
  const int64_t r = first.item<int64_t>();
  if (r >= o.world) return absl::OkStatus();
  const std::vector<uint8_t> why = store.get(absl::StrCat("braid/activate/refused/", r));
  // Every rank has the reason before rank 0 stops serving the store.
  pg.barrier()->wait();
  // Another rank's words: escaped, so no terminal escape reaches a terminal.
  return absl::FailedPreconditionError(absl::StrCat(
      "rank ", r, " refused the plan: ", EscapePeerText(std::string_view(
                                             reinterpret_cast<const char*>(why.data()), why.size()))));
}

bool Reports(const ActivateOptions& o) {
  return !o.job.empty() && o.report && !o.report_credential.empty();
}

// Rank 0 begins the run (StartRun) and hands its attempt id to every rank
// through the store; a failure reaches every rank the same way ("!" + why).
absl::StatusOr<std::string> BeginRun(const ActivateOptions& o, c10d::Store& store) {
  const std::string key = "braid/activate/attempt";
  if (o.rank == 0) {
    absl::StatusOr<std::string> attempt = [&]() -> absl::StatusOr<std::string> {
      ASSIGN_OR_RETURN(ServerPlans server, ServerPlans::Connect(o));
      v1::StartRunRequest req;
      req.set_job_id(o.job);
      req.set_report_credential(o.report_credential);
      req.set_world_size(o.world);
      req.set_source("braid-worker activate");
      ASSIGN_OR_RETURN(v1::StartRunResponse r, server.StartRun(req));
      return r.attempt_id();
    }();
    const std::string v = attempt.ok() ? *attempt : absl::StrCat("!", attempt.status().ToString());
    store.set(key, std::vector<uint8_t>(v.begin(), v.end()));
    return attempt;
  }
  const std::vector<uint8_t> got = store.get(key);
  std::string v(got.begin(), got.end());
  if (!v.empty() && v[0] == '!') {
    return absl::FailedPreconditionError(absl::StrCat("rank 0 could not begin the run: ",
                                                      base::EscapeForDisplay(v.substr(1, 512))));
  }
  return v;
}

// Every rank reports its own times; ranks 1.. first, so that rank 0's answer
// covers every rank. Every rank reaches the barrier, reported or not.
absl::Status Report(const ActivateOptions& o, const std::string& attempt_id,
                    c10d::ProcessGroupGloo& pg, ActivationResult& res) {
  absl::StatusOr<ServerPlans> server = ServerPlans::Connect(o);
  v1::ReportMeasurementRequest req;
  req.set_job_id(o.job);
  req.set_report_credential(o.report_credential);
  req.set_attempt_id(attempt_id);
  req.set_rank(o.rank);
  req.set_world_size(o.world);
  req.set_plan_sha256(res.plan_sha256);
  for (double t : res.own_plan_s) req.add_plan_iteration_s(t);
  for (double t : res.own_baseline_s) req.add_baseline_iteration_s(t);
  req.set_source("braid-worker activate");
  absl::StatusOr<v1::ReportMeasurementResponse> rep = absl::UnknownError("not reported");
  if (o.rank != 0 && server.ok()) rep = server->Report(req);
  pg.barrier()->wait();
  if (o.rank == 0) rep = server.ok() ? server->Report(req) : server.status();
  if (!rep.ok()) return rep.status();
  if (o.rank == 0) res.report = *std::move(rep);
  return absl::OkStatus();
}

// Ends this rank's process when its training phase outlasts --timeout-s: a
// GEMM or a collective in progress cannot be cancelled, and a plan too large
// for the limits ValidateOverlapTrainSpec and StrategyFromPlan check must
// not hold the ranks for ever. The peers then fail in their next collective.
class TrainingDeadline {
 public:
  TrainingDeadline(const ActivateOptions& o)
      : thread_([this, seconds = o.timeout_s, rank = o.rank] {
          std::unique_lock<std::mutex> l(mu_);
          if (cv_.wait_for(l, std::chrono::duration<double>(seconds), [&] { return done_; })) return;
          std::cerr << "braid-worker: activate rank " << rank << ": training passed --timeout-s ("
                    << seconds << " s): stopping this rank" << std::endl;
          std::_Exit(1);
        }) {}
  ~TrainingDeadline() {
    {
      std::lock_guard<std::mutex> l(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;  // last: it uses the members above
};

// An overlap plan (see activator.h): verified like any plan file, its spec
// checked by every rank, agreed on, then trained on this group.
absl::StatusOr<ActivationResult> ActivateOverlap(const ActivateOptions& o, c10d::Store& store,
                                                 c10d::ProcessGroupGloo& pg, const Payload& payload) {
  ActivationResult res;
  res.overlap = true;
  absl::StatusOr<OverlapPlan> plan = [&]() -> absl::StatusOr<OverlapPlan> {
    ASSIGN_OR_RETURN(res.verified_by, Verify(o, payload));
    return ParseOverlapPlanFile(payload.bytes, o.plan_path, o.world);
  }();
  RETURN_IF_ERROR(Agree(store, pg, o, plan.status()));
  OverlapTrainSpec spec = plan->spec;
  spec.variants = {plan->methods};
  if (o.baseline) spec.variants.push_back({DecomposeMethod::kNone});
  const size_t first_compared = spec.variants.size();
  if (o.compare_methods) {
    for (DecomposeMethod m : {DecomposeMethod::kNone, DecomposeMethod::kLooped,
                              DecomposeMethod::kLoopedUnrolled, DecomposeMethod::kBidirectional}) {
      if (m == DecomposeMethod::kNone && o.baseline) continue;  // the baseline is it
      spec.variants.push_back({m});
      res.compared_names.push_back(std::string(DecomposeMethodName(m)));
    }
  }
  absl::StatusOr<std::vector<OverlapVariantResult>> trained;
  {
    TrainingDeadline deadline(o);
    trained = TrainOverlapOnGroup(spec, pg, o.rank, o.warmup, o.iterations);
  }
  ASSIGN_OR_RETURN(std::vector<OverlapVariantResult> runs, std::move(trained));
  for (size_t i = first_compared; i < runs.size(); ++i) {
    res.compared_iteration_s.push_back(runs[i].step_s);
  }
  res.plan_sha256 = Sha256Hex(payload.bytes);
  res.predicted_iteration_s = plan->predicted_step_s;
  res.overlap_spec = plan->spec;
  res.overlap_methods = plan->methods;
  res.plan_iteration_s = runs[0].step_s;
  res.plan_loss = runs[0].loss;
  if (o.baseline) {
    res.baseline_iteration_s = runs[1].step_s;
    res.baseline_loss = runs[1].loss;
  }
  return res;
}

}  // namespace

namespace {

// The secret the ranks prove to each other at the rendezvous (activator.h).
absl::StatusOr<std::string> RendezvousSecret(const ActivateOptions& o) {
  if (!o.rendezvous_key.empty()) return o.rendezvous_key;
  // A server job's own credential separates it from the client's other jobs.
  if (o.plan_path.empty()) return o.report_credential.empty() ? o.token : o.report_credential;
  absl::StatusOr<std::string> secret = LoadPlanSecret(o.secret_file);
  if (!secret.ok()) {
    return absl::Status(secret.status().code(),
                        absl::StrCat("the ranks of a plan file prove the plan secret to each other "
                                     "at the rendezvous: ", secret.status().message()));
  }
  return secret;
}

// The rendezvous store, every rank joined by `timeout` from now.
absl::StatusOr<c10::intrusive_ptr<RendezvousStore>> MeetRanks(const ActivateOptions& o,
                                                              const std::string& host, uint16_t port,
                                                              std::chrono::milliseconds timeout) {
  ASSIGN_OR_RETURN(std::string secret, RendezvousSecret(o));
  if (o.world > 1 && secret.empty()) {
    if (!IsLoopback(host)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--rendezvous ", o.rendezvous, " is not a loopback address and the ranks share no key "
          "to prove to each other there (a server job's report credential or token): "
          "refusing to let any process that reaches it join as a rank"));
    }
    LOG(WARNING) << "activate: no key for the rendezvous at " << o.rendezvous
                 << ": any process on this host can join it as a rank";
  }
  const rendezvous::Clock::time_point deadline = rendezvous::Clock::now() + timeout;
  RendezvousOptions ro{.address = o.rendezvous, .host = host, .port = port, .rank = o.rank,
                       .world = o.world, .key = DeriveRendezvousKey(secret), .timeout = timeout};
  ASSIGN_OR_RETURN(c10::intrusive_ptr<RendezvousStore> store, RendezvousStore::Open(ro));
  if (o.rank == 0 && o.world > 1) {
    LOG(INFO) << "activate: rank 0 serves the rendezvous on " << o.rendezvous
              << " (that address only); waiting up to " << o.timeout_s << " s for ranks 1.."
              << o.world - 1;
  }
  RETURN_IF_ERROR(store->AwaitJoin(deadline));
  return store;
}

}  // namespace

absl::StatusOr<ActivationResult> Activate(const ActivateOptions& o) {
  RETURN_IF_ERROR(CheckOptions(o));
  internal::SetUpRankProcess();
  ASSIGN_OR_RETURN(auto hp, ParseRendezvous(o.rendezvous));
  const auto& [host, port] = hp;
  // Every rank builds its graph before the rendezvous; one that cannot
  // refuses the plan below, so the others learn why.
  absl::StatusOr<graph::Graph> training = BuildTraining(o);
  ActivationResult res;
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1e3));
  try {
    ASSIGN_OR_RETURN(c10::intrusive_ptr<RendezvousStore> store, MeetRanks(o, host, port, timeout));
    if (o.pin_cores) RETURN_IF_ERROR(PinToCore(o.rank, "activate"));
    const std::string bind = !o.bind_host.empty() ? o.bind_host : IsLoopback(host) ? "127.0.0.1" : "";
    auto pg = MakeGlooGroup(store, o.rank, o.world, bind, timeout);

    Payload mine;
    if (o.rank == 0) mine = LoadPayload(o);
    ASSIGN_OR_RETURN(Payload payload, ExchangePayload(*store, o.rank, std::move(mine)));
    if (payload.source == Source::kFile && IsOverlapPlanFile(payload.bytes)) {
      return ActivateOverlap(o, *store, *pg, payload);
    }
    absl::StatusOr<Accepted> accepted =
        training.ok() ? Accept(o, payload, *training, res) : absl::StatusOr<Accepted>(training.status());
    RETURN_IF_ERROR(Agree(*store, *pg, o, accepted.status()));

    std::string attempt_id;
    if (Reports(o)) {
      ASSIGN_OR_RETURN(attempt_id, BeginRun(o, *store));
    }

    std::vector<ExecStrategy> strategies = {accepted->plan_strategy};
    if (o.baseline) strategies.push_back(accepted->ddp_strategy);
    TrainBenchOptions bench;
    bench.warmup = o.warmup;
    bench.iterations = o.iterations;
    const nlohmann::json spec = internal::StrategiesToJson(strategies, bench);
    const v1::Plan& plan = accepted->plan;
    {
      TrainingDeadline deadline(o);
      ASSIGN_OR_RETURN(internal::RankResults r,
                       internal::RunStrategiesOnRank(*training, spec, *pg, o.world));
      res.own_plan_s = r.times[0];
      res.plan_iteration_s = MaxOverRanks(*pg, r.times[0]);
      res.plan_book = SumOverRanks(*pg, r.books[0]);
      if (o.baseline) {
        res.own_baseline_s = r.times[1];
        res.baseline_iteration_s = MaxOverRanks(*pg, r.times[1]);
      }
    }
    res.plan_sha256 = PlanDigest(plan);
    res.predicted_iteration_s = plan.predicted_iteration_s();
    res.fusion_groups = plan.fusion_groups_size();
    res.buckets = plan.buckets_size();
    if (Reports(o)) RETURN_IF_ERROR(Report(o, attempt_id, *pg, res));
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("activate rank ", o.rank, ": ", EscapePeerText(e.what())));
  }
  return res;
}

}  // namespace braid::worker
