#include "graph/program.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/digest.h"
#include "base/status_macros.h"
#include "graph/text_format.h"
#include "nlohmann/json.hpp"

namespace braid::graph {
namespace {

constexpr std::pair<InitKind, std::string_view> kInitNames[] = {
    {InitKind::kNormal, "normal"},   {InitKind::kUniform, "uniform"},
    {InitKind::kOnes, "ones"},       {InitKind::kZeros, "zeros"},
    {InitKind::kIntegers, "integers"}, {InitKind::kFill, "fill"},
    {InitKind::kValue, "value"},
};

absl::Status CheckAxes(const std::vector<int>& mesh, const std::vector<int>& axes,
                       const std::string& what) {
  std::set<int> seen;
  for (int a : axes) {
    if (a < 0 || a >= static_cast<int>(mesh.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": mesh axis ", a, " out of range (mesh has ", mesh.size(), " axes)"));
    }
    if (!seen.insert(a).second) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": mesh axis ", a, " repeated"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string_view InitKindName(InitKind k) {
  for (const auto& [kind, name] : kInitNames)
    if (kind == k) return name;
  return "normal";
}

absl::StatusOr<InitKind> ParseInitKind(std::string_view name_view) {
  const std::string name(name_view);
  for (const auto& [kind, n] : kInitNames)
    if (n == name) return kind;
  return absl::InvalidArgumentError(absl::StrCat("unknown init kind '", name, "'"));
}

int Program::World() const {
  int w = 1;
  for (int s : mesh) w *= s;
  return w;
}

std::vector<int> MeshCoordinate(const std::vector<int>& mesh, int rank) {
  std::vector<int> c(mesh.size(), 0);
  for (int a = static_cast<int>(mesh.size()) - 1; a >= 0; --a) {
    c[a] = rank % mesh[a];
    rank /= mesh[a];
  }
  return c;
}

int64_t PieceIndex(const std::vector<int>& mesh, const std::vector<int>& coord,
                   const std::vector<int>& axes) {
  int64_t i = 0;
  for (int a : axes) i = i * mesh[a] + coord[a];
  return i;
}

int64_t PieceCount(const std::vector<int>& mesh, const std::vector<int>& axes) {
  int64_t n = 1;
  for (int a : axes) n *= mesh[a];
  return n;
}

PieceBox PieceBoxOf(const std::vector<int64_t>& full_shape, const std::vector<int>& mesh,
                    const std::vector<int>& coord, const std::vector<std::vector<int>>& dim_axes,
                    const std::vector<int64_t>& segments) {
  PieceBox b;
  static const std::vector<int> kWhole;
  for (size_t d = 0; d < full_shape.size(); ++d) {
    const std::vector<int>& axes = d < dim_axes.size() ? dim_axes[d] : kWhole;
    const int64_t n = PieceCount(mesh, axes);
    const int64_t at = axes.empty() ? 0 : PieceIndex(mesh, coord, axes);
    const int64_t s = d < segments.size() ? std::max<int64_t>(1, segments[d]) : 1;
    if (s > 1) {
      const int64_t seg = full_shape[d] / s, len = seg / n;
      b.full.insert(b.full.end(), {s, seg});
      b.piece.insert(b.piece.end(), {s, len});
      b.start.insert(b.start.end(), {0, at * len});
    } else {
      const int64_t len = full_shape[d] / n;
      b.full.push_back(full_shape[d]);
      b.piece.push_back(len);
      b.start.push_back(at * len);
    }
  }
  return b;
}

std::vector<int> GroupRanks(const std::vector<int>& mesh, int rank, const std::vector<int>& axes) {
  const std::vector<int> base = MeshCoordinate(mesh, rank);
  const int64_t n = PieceCount(mesh, axes);
  std::vector<int> out;
  out.reserve(n);
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int> c = base;
    int64_t rest = i;
    for (int k = static_cast<int>(axes.size()) - 1; k >= 0; --k) {
      c[axes[k]] = static_cast<int>(rest % mesh[axes[k]]);
      rest /= mesh[axes[k]];
    }
    int r = 0;
    for (size_t a = 0; a < mesh.size(); ++a) r = r * mesh[a] + c[a];
    out.push_back(r);
  }
  return out;
}

absl::StatusOr<std::vector<std::vector<OpId>>> ScheduleNodes(const Program& p) {
  const Graph& g = p.graph;
  auto bad = [](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("program groups: ", why));
  };
  ASSIGN_OR_RETURN(std::vector<OpId> order, g.TopologicalOrder());
  std::map<std::string, OpId, std::less<>> by_name;
  for (OpId id = 0; id < g.num_ops(); ++id) by_name[g.op(id).name] = id;
  // node_of[op]: its group's index, or groups + op for an op of its own.
  const int ng = static_cast<int>(p.groups.size());
  std::vector<int> node_of(g.num_ops(), -1);
  size_t members = 0;
  for (int k = 0; k < ng; ++k) {
    members += p.groups[k].size();
    if (members > static_cast<size_t>(Program::kMaxGroupMembers)) {
      return bad(absl::StrCat("more than ", Program::kMaxGroupMembers, " members"));
    }
    if (p.groups[k].empty()) return bad(absl::StrCat("group ", k, " is empty"));
    for (const std::string& name : p.groups[k]) {
      auto it = by_name.find(name);
      if (it == by_name.end()) return bad(absl::StrCat("group ", k, " names no op ", name));
      const Op& op = g.op(it->second);
      const OpCategory c = CategoryOf(op.kind);
      if (c == OpCategory::kCollective || c == OpCategory::kUpdate) {
        return bad(absl::StrCat(name, " (", op.type, ") cannot be in a group"));
      }
      if (node_of[it->second] >= 0) return bad(absl::StrCat(name, " is in two groups"));
      node_of[it->second] = k;
    }
  }
  const int n = ng + g.num_ops();
  for (OpId id = 0; id < g.num_ops(); ++id)
    if (node_of[id] < 0) node_of[id] = ng + id;
  // Kahn's algorithm on the contracted graph, nodes taken in the order of
  // their first op in `order` (deterministic).
  std::vector<std::set<int>> succ(n);
  std::vector<int> indeg(n, 0);
  for (OpId id = 0; id < g.num_ops(); ++id) {
    for (TensorId t : g.op(id).outputs) {
      for (OpId c : g.tensor(t).consumers) {
        const int a = node_of[id], b = node_of[c];
        if (a != b && succ[a].insert(b).second) ++indeg[b];
      }
    }
  }
  std::vector<int> first(n, -1);
  std::vector<std::vector<OpId>> ops_of(n);
  for (size_t i = 0; i < order.size(); ++i) {
    const int v = node_of[order[i]];
    if (first[v] < 0) first[v] = static_cast<int>(i);
    ops_of[v].push_back(order[i]);
  }
  std::set<std::pair<int, int>> ready;  // (first position, node)
  for (int v = 0; v < n; ++v)
    if (first[v] >= 0 && indeg[v] == 0) ready.insert({first[v], v});
  std::vector<std::vector<OpId>> out;
  while (!ready.empty()) {
    const int v = ready.begin()->second;
    ready.erase(ready.begin());
    out.push_back(ops_of[v]);
    for (int w : succ[v])
      if (--indeg[w] == 0) ready.insert({first[w], w});
  }
  size_t scheduled = 0;
  for (const auto& node : out) scheduled += node.size();
  if (scheduled != order.size()) return bad("the groups make a cycle between them");
  return out;
}

// Program::buckets: members exist, are AllReduces alike, in one bucket
// each, and their outputs are not read before the bucket starts.
static absl::Status ValidateBuckets(const Program& p, const std::vector<OpId>& order) {
  if (p.buckets.empty()) return absl::OkStatus();
  const Graph& g = p.graph;
  auto bad = [](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("program buckets: ", why));
  };
  std::map<std::string, OpId, std::less<>> by_name;
  for (OpId id = 0; id < g.num_ops(); ++id) by_name[g.op(id).name] = id;
  std::vector<int> pos(g.num_ops());
  for (size_t i = 0; i < order.size(); ++i) pos[order[i]] = static_cast<int>(i);
  std::set<OpId> seen;
  size_t members = 0;
  for (size_t b = 0; b < p.buckets.size(); ++b) {
    const std::vector<std::string>& bucket = p.buckets[b];
    members += bucket.size();
    if (bucket.empty()) return bad(absl::StrCat("bucket ", b, " is empty"));
    if (members > static_cast<size_t>(Program::kMaxBucketMembers)) {
      return bad(absl::StrCat("more than ", Program::kMaxBucketMembers, " members"));
    }
    int start = -1;
    const Op* first = nullptr;
    for (const std::string& name : bucket) {
      auto it = by_name.find(name);
      if (it == by_name.end()) return bad(absl::StrCat("bucket ", b, " names no op ", name));
      const Op& op = g.op(it->second);
      if (op.kind != OpKind::kAllReduce || op.inputs.size() != 1 || op.outputs.size() != 1) {
        return bad(absl::StrCat(name, " is not an AllReduce"));
      }
      if (!seen.insert(it->second).second) return bad(absl::StrCat(name, " is in two buckets"));
      if (first != nullptr &&
          (op.GetInts("mesh_axes") != first->GetInts("mesh_axes") ||
           g.tensor(op.inputs[0]).dtype != g.tensor(first->inputs[0]).dtype)) {
        return bad(absl::StrCat("bucket ", b, " mixes groups or dtypes (", first->name, ", ", name, ")"));
      }
      if (first == nullptr) first = &op;
      start = std::max(start, pos[it->second]);
    }
    for (const std::string& name : bucket) {
      const Op& op = g.op(by_name.at(name));
      for (OpId reader : g.tensor(op.outputs[0]).consumers) {
        if (pos[reader] <= start) {
          return bad(absl::StrCat(g.op(reader).name, " reads ", g.tensor(op.outputs[0]).name,
                                  " before bucket ", b, " starts"));
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateProgram(const Program& p) {
  if (p.mesh.size() > static_cast<size_t>(Program::kMaxMeshAxes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("program mesh has ", p.mesh.size(), " axes; at most ", Program::kMaxMeshAxes));
  }
  int64_t world = 1;
  for (int s : p.mesh) {
    if (s < 1) return absl::InvalidArgumentError(absl::StrCat("program mesh axis of size ", s));
    world *= s;
    if (world > Program::kMaxWorld) {
      return absl::InvalidArgumentError(
          absl::StrCat("program mesh spans more than ", Program::kMaxWorld, " devices"));
    }
  }
  RETURN_IF_ERROR(p.graph.Validate());
  const Graph& g = p.graph;
  for (TensorId t = 0; t < g.num_tensors(); ++t) {
    const Tensor& x = g.tensor(t);
    if (x.producer != kNoId) continue;
    auto it = p.loads.find(x.name);
    if (it == p.loads.end()) {
      return absl::InvalidArgumentError(absl::StrCat("program tensor ", x.name, " has no load spec"));
    }
    const LoadSpec& l = it->second;
    if (l.full_shape.size() != x.shape.size() || l.dim_axes.size() != x.shape.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("load spec of ", x.name, ": rank differs from the tensor's"));
    }
    std::vector<int> all;
    for (size_t d = 0; d < x.shape.size(); ++d) {
      RETURN_IF_ERROR(CheckAxes(p.mesh, l.dim_axes[d], absl::StrCat("load spec of ", x.name)));
      all.insert(all.end(), l.dim_axes[d].begin(), l.dim_axes[d].end());
      const int64_t n = PieceCount(p.mesh, l.dim_axes[d]);
      if (l.full_shape[d] != x.shape[d] * n) {
        return absl::InvalidArgumentError(absl::StrCat(
            "load spec of ", x.name, ": dim ", d, " full size ", l.full_shape[d], " is not ",
            n, " pieces of ", x.shape[d]));
      }
    }
    RETURN_IF_ERROR(CheckAxes(p.mesh, all, absl::StrCat("load spec of ", x.name)));
    if (!l.segments.empty()) {
      if (l.segments.size() != x.shape.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("load spec of ", x.name, ": segments do not have one entry per dim"));
      }
      for (size_t d = 0; d < x.shape.size(); ++d) {
        const int64_t s = l.segments[d];
        if (s < 1 || s > LoadSpec::kMaxSegments || l.full_shape[d] % s != 0 ||
            (l.full_shape[d] / s) % PieceCount(p.mesh, l.dim_axes[d]) != 0) {
          return absl::InvalidArgumentError(absl::StrCat(
              "load spec of ", x.name, ": dim ", d, " of ", l.full_shape[d], " is not ", s,
              " equal segments each split in ", PieceCount(p.mesh, l.dim_axes[d]), " (segments in [1, ",
              LoadSpec::kMaxSegments, "])"));
        }
      }
    }
    if (l.init == InitKind::kIntegers && l.high < 1) {
      return absl::InvalidArgumentError(absl::StrCat("load spec of ", x.name, ": high < 1"));
    }
    if (l.init == InitKind::kValue) {
      int64_t n = 1;
      for (int64_t s : l.full_shape) n *= s;
      if (static_cast<int64_t>(l.values.size()) != n) {
        return absl::InvalidArgumentError(absl::StrCat("load spec of ", x.name, ": ", l.values.size(),
                                                       " values for ", n, " elements"));
      }
    }
  }
  for (const Op& op : g.ops()) {
    const bool coll = CategoryOf(op.kind) == OpCategory::kCollective;
    if (coll) {
      if (!IsOneOf(op.kind, {OpKind::kAllReduce, OpKind::kAllGather, OpKind::kReduceScatter})) {
        return absl::InvalidArgumentError(
            absl::StrCat("program op ", op.name, ": collective ", op.type, " is not executable"));
      }
      const std::vector<int64_t> axes64 = op.GetInts("mesh_axes");
      std::vector<int> axes(axes64.begin(), axes64.end());
      RETURN_IF_ERROR(CheckAxes(p.mesh, axes, absl::StrCat("program op ", op.name)));
      if (op.inputs.size() != 1 || op.outputs.size() != 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("program op ", op.name, ": a collective has one input and one output"));
      }
      if (op.kind != OpKind::kAllReduce) {
        const int64_t dim = op.GetInt("dim", -1);
        const size_t rank = g.tensor(op.inputs[0]).shape.size();
        if (axes.size() != 1 || dim < 0 || dim >= static_cast<int64_t>(rank)) {
          return absl::InvalidArgumentError(absl::StrCat(
              "program op ", op.name, ": ", op.type, " needs one mesh axis and a dim in range"));
        }
      }
    }
    if (op.attrs.contains("shard_axes")) {
      const std::vector<int64_t> axes64 = op.GetInts("shard_axes");
      RETURN_IF_ERROR(CheckAxes(p.mesh, std::vector<int>(axes64.begin(), axes64.end()),
                                absl::StrCat("program op ", op.name)));
      if (!IsOneOf(op.kind, {OpKind::kSlice, OpKind::kPad})) {
        return absl::InvalidArgumentError(
            absl::StrCat("program op ", op.name, ": shard_axes on a ", op.type));
      }
    }
  }
  ASSIGN_OR_RETURN(std::vector<std::vector<OpId>> nodes, ScheduleNodes(p));
  std::vector<OpId> order;
  for (const std::vector<OpId>& node : nodes) order.insert(order.end(), node.begin(), node.end());
  RETURN_IF_ERROR(ValidateBuckets(p, order));
  return absl::OkStatus();
}

std::string ComputeProgramFingerprint(const Program& p) {
  nlohmann::json j = ProgramToJson(p);
  j.erase("program_fingerprint");
  return Sha256Hex(j.dump());
}

nlohmann::json ProgramToJson(const Program& p) {
  nlohmann::json loads = nlohmann::json::object();
  for (const auto& [name, l] : p.loads) {
    nlohmann::json e = {{"source", l.source},
                        {"full_shape", l.full_shape},
                        {"dim_axes", l.dim_axes},
                        {"init", std::string(InitKindName(l.init))}};
    if (l.init == InitKind::kFill) e["value"] = l.value;
    if (l.init == InitKind::kUniform) e["bound"] = l.bound;
    if (!l.segments.empty()) e["segments"] = l.segments;
    if (l.init == InitKind::kIntegers) e["high"] = l.high;
    if (l.per_step) e["per_step"] = true;
    if (l.init == InitKind::kValue) {
      // JSON has no infinities or NaN: those are written as strings.
      nlohmann::json v = nlohmann::json::array();
      for (double x : l.values) {
        if (std::isfinite(x)) v.push_back(x);
        else v.push_back(std::isnan(x) ? "nan" : (x > 0 ? "inf" : "-inf"));
      }
      e["values"] = std::move(v);
    }
    loads[name] = std::move(e);
  }
  nlohmann::json j = {{"format", std::string(kProgramFormat)},
                      {"model", p.model},
                      {"row", p.row},
                      {"mesh", p.mesh},
                      {"seed", p.seed},
                      {"model_fingerprint", p.model_fingerprint},
                      {"program_fingerprint", p.program_fingerprint},
                      {"graph", ToText(p.graph)},
                      {"loads", std::move(loads)}};
  if (!p.buckets.empty()) j["buckets"] = p.buckets;
  if (!p.groups.empty()) j["groups"] = p.groups;
  return j;
}

// An optional field of lists of op names (Program::buckets, groups), at
// most `max_members` names in all.
static absl::Status ReadNameLists(const nlohmann::json& j, const std::string& key, int max_members,
                                  std::vector<std::vector<std::string>>& out) {
  if (!j.contains(key)) return absl::OkStatus();
  const nlohmann::json& lists = j[key];
  if (!lists.is_array()) return absl::InvalidArgumentError(absl::StrCat("program: ", key, " is not a list"));
  size_t members = 0;
  for (const auto& list : lists) {
    if (!list.is_array()) {
      return absl::InvalidArgumentError(absl::StrCat("program: an entry of ", key, " is not a list"));
    }
    members += list.size();
    if (members > static_cast<size_t>(max_members)) {
      return absl::InvalidArgumentError(absl::StrCat("program: more than ", max_members, " ", key, " members"));
    }
    out.push_back(list.get<std::vector<std::string>>());
  }
  return absl::OkStatus();
}

absl::StatusOr<Program> ProgramFromJson(const nlohmann::json& j) {
  auto bad = [](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("program: ", what));
  };
  if (!j.is_object()) return bad("not a JSON object");
  if (!j.contains("format") || !j["format"].is_string() ||
      j["format"].get<std::string>() != kProgramFormat) {
    return bad(absl::StrCat("format is not ", std::string(kProgramFormat)));
  }
  Program p;
  try {
    p.model = j.value("model", "");
    p.row = j.value("row", "");
    p.seed = j.value("seed", uint64_t{0});
    p.model_fingerprint = j.value("model_fingerprint", "");
    p.program_fingerprint = j.value("program_fingerprint", "");
    if (!j.contains("mesh") || !j["mesh"].is_array()) return bad("no mesh");
    if (j["mesh"].size() > static_cast<size_t>(Program::kMaxMeshAxes)) return bad("mesh too long");
    for (const auto& s : j["mesh"]) p.mesh.push_back(s.get<int>());
    if (!j.contains("graph") || !j["graph"].is_string()) return bad("no graph");
    ASSIGN_OR_RETURN(p.graph, ParseText(j["graph"].get<std::string>()));
    RETURN_IF_ERROR(ReadNameLists(j, "buckets", Program::kMaxBucketMembers, p.buckets));
    RETURN_IF_ERROR(ReadNameLists(j, "groups", Program::kMaxGroupMembers, p.groups));
    if (!j.contains("loads") || !j["loads"].is_object()) return bad("no loads");
    for (const auto& [name, e] : j["loads"].items()) {
      LoadSpec l;
      l.source = e.at("source").get<std::string>();
      l.full_shape = e.at("full_shape").get<std::vector<int64_t>>();
      l.dim_axes = e.at("dim_axes").get<std::vector<std::vector<int>>>();
      ASSIGN_OR_RETURN(l.init, ParseInitKind(e.at("init").get<std::string>()));
      l.value = e.value("value", 0.0);
      l.bound = e.value("bound", 0.0);
      l.high = e.value("high", int64_t{2});
      l.per_step = e.value("per_step", false);
      if (e.contains("segments")) {
        if (!e["segments"].is_array() || e["segments"].size() != l.full_shape.size()) {
          return bad(absl::StrCat("load ", name, ": segments do not have one entry per dim"));
        }
        l.segments = e["segments"].get<std::vector<int64_t>>();
      }
      if (e.contains("values")) {
        if (!e["values"].is_array() || e["values"].size() > static_cast<size_t>(Tensor::kMaxKeptConstantElements)) {
          return bad(absl::StrCat("load spec of ", name, ": values not a bounded list"));
        }
        for (const auto& x : e["values"]) {
          if (x.is_number()) {
            l.values.push_back(x.get<double>());
          } else if (x.is_string() && (x == "inf" || x == "-inf" || x == "nan")) {
            l.values.push_back(std::strtod(x.get<std::string>().c_str(), nullptr));
          } else {
            return bad(absl::StrCat("load spec of ", name, ": a value is not a number"));
          }
        }
      }
      p.loads.emplace(name, std::move(l));
    }
  } catch (const nlohmann::json::exception& e) {
    return bad(e.what());
  }
  RETURN_IF_ERROR(ValidateProgram(p));
  if (!p.program_fingerprint.empty() && p.program_fingerprint != ComputeProgramFingerprint(p)) {
    return bad("program_fingerprint does not match its content");
  }
  return p;
}

}  // namespace braid::graph
