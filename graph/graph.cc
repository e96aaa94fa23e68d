#include "graph/graph.h"

#include <algorithm>
#include <queue>
#include <set>

#include "base/status_macros.h"
#include "glog/logging.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/limits.h"

namespace braid::graph {
namespace {

constexpr std::pair<DType, std::string_view> kDTypeNames[] = {
    {DType::kF32, "f32"}, {DType::kF16, "f16"}, {DType::kBF16, "bf16"},
    {DType::kF64, "f64"}, {DType::kI64, "i64"}, {DType::kI32, "i32"},
    {DType::kI8, "i8"},   {DType::kU8, "u8"},   {DType::kBool, "bool"}};

constexpr std::pair<TensorRole, std::string_view> kRoleNames[] = {
    {TensorRole::kInput, "input"},
    {TensorRole::kParameter, "parameter"},
    {TensorRole::kConstant, "constant"},
    {TensorRole::kActivation, "activation"},
    {TensorRole::kGradient, "gradient"},
    {TensorRole::kOptimizerState, "optimizer_state"}};

constexpr std::pair<Phase, std::string_view> kPhaseNames[] = {
    {Phase::kForward, "forward"},
    {Phase::kBackward, "backward"},
    {Phase::kCommunication, "comm"},
    {Phase::kUpdate, "update"}};

template <typename E, size_t N>
std::string_view NameOf(const std::pair<E, std::string_view> (&table)[N], E e) {
  for (const auto& [k, v] : table) {
    if (k == e) return v;
  }
  return "?";
}

template <typename E, size_t N>
absl::StatusOr<E> Parse(const std::pair<E, std::string_view> (&table)[N],
                        std::string_view name, std::string_view what) {
  for (const auto& [k, v] : table) {
    if (v == name) return k;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown ", std::string(what), " '", std::string(name), "'"));
}

}  // namespace

int64_t DTypeSize(DType d) {
  switch (d) {
    case DType::kF64:
    case DType::kI64:
      return 8;
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
      return 2;
    case DType::kI8:
    case DType::kU8:
    case DType::kBool:
      return 1;
  }
  return 4;
}

std::string_view DTypeName(DType d) { return NameOf(kDTypeNames, d); }
absl::StatusOr<DType> ParseDType(std::string_view n) { return Parse(kDTypeNames, n, "dtype"); }
std::string_view RoleName(TensorRole r) { return NameOf(kRoleNames, r); }
absl::StatusOr<TensorRole> ParseRole(std::string_view n) { return Parse(kRoleNames, n, "tensor role"); }
std::string_view PhaseName(Phase p) { return NameOf(kPhaseNames, p); }
absl::StatusOr<Phase> ParsePhase(std::string_view n) { return Parse(kPhaseNames, n, "phase"); }

int64_t Tensor::NumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t Op::GetInt(std::string_view key, int64_t def) const {
  auto it = attrs.find(key);
  if (it == attrs.end()) return def;
  if (auto* v = std::get_if<int64_t>(&it->second)) return *v;
  return def;
}

double Op::GetFloat(std::string_view key, double def) const {
  auto it = attrs.find(key);
  if (it == attrs.end()) return def;
  if (auto* v = std::get_if<double>(&it->second)) return *v;
  if (auto* v = std::get_if<int64_t>(&it->second)) return static_cast<double>(*v);
  return def;
}

std::string Op::GetString(std::string_view key, std::string_view def) const {
  auto it = attrs.find(key);
  if (it == attrs.end()) return std::string(def);
  if (auto* v = std::get_if<std::string>(&it->second)) return *v;
  return std::string(def);
}

std::vector<int64_t> Op::GetInts(std::string_view key) const {
  auto it = attrs.find(key);
  if (it == attrs.end()) return {};
  if (auto* v = std::get_if<std::vector<int64_t>>(&it->second)) return *v;
  if (auto* v = std::get_if<int64_t>(&it->second)) return {*v};
  return {};
}

TensorId Graph::AddTensor(std::string name, std::vector<int64_t> shape, DType dtype,
                          TensorRole role) {
  Tensor t;
  t.name = std::move(name);
  t.shape = std::move(shape);
  t.dtype = dtype;
  t.role = role;
  // Keep a complete name index current (FindTensor rebuilds an incomplete
  // one): clearing it here made parsing a graph quadratic in its tensors.
  const bool indexed = !tensors_.empty() && name_index_.size() == tensors_.size();
  tensors_.push_back(std::move(t));
  const TensorId id = static_cast<TensorId>(tensors_.size() - 1);
  if (indexed) {
    name_index_.emplace(tensors_.back().name, id);
  } else {
    name_index_.clear();
  }
  return id;
}

OpId Graph::AddOp(std::string name, std::string type, std::vector<TensorId> inputs,
                  std::vector<TensorId> outputs, Attrs attrs, Phase phase) {
  const OpId id = static_cast<OpId>(ops_.size());
  for (TensorId t : inputs) {
    CHECK(t >= 0 && t < num_tensors()) << "op " << name << ": bad input id " << t;
    auto& cons = tensors_[t].consumers;
    if (cons.empty() || cons.back() != id) cons.push_back(id);
  }
  for (TensorId t : outputs) {
    CHECK(t >= 0 && t < num_tensors()) << "op " << name << ": bad output id " << t;
    // A second producer is kept out of the tensor (first one wins) and reported
    // by Validate() through the op's outputs.
    if (tensors_[t].producer == kNoId) tensors_[t].producer = id;
  }
  Op op;
  op.name = std::move(name);
  op.type = std::move(type);
  op.kind = OpKindFromName(op.type);
  op.inputs = std::move(inputs);
  op.outputs = std::move(outputs);
  op.attrs = std::move(attrs);
  op.phase = phase;
  ops_.push_back(std::move(op));
  return id;
}

absl::StatusOr<TensorId> Graph::FindTensor(std::string_view name) const {
  if (name_index_.size() != tensors_.size()) {
    name_index_.clear();
    for (TensorId i = 0; i < num_tensors(); ++i) name_index_.emplace(tensors_[i].name, i);
  }
  auto it = name_index_.find(name);
  if (it == name_index_.end()) {
    return absl::NotFoundError(absl::StrCat("no tensor named '", std::string(name), "'"));
  }
  return it->second;
}

std::vector<OpId> Graph::Predecessors(OpId op) const {
  std::vector<OpId> out;
  for (TensorId t : ops_[op].inputs) {
    if (tensors_[t].producer != kNoId) out.push_back(tensors_[t].producer);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<OpId> Graph::Successors(OpId op) const {
  std::vector<OpId> out;
  for (TensorId t : ops_[op].outputs) {
    out.insert(out.end(), tensors_[t].consumers.begin(), tensors_[t].consumers.end());
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

absl::StatusOr<std::vector<OpId>> Graph::TopologicalOrder() const {
  std::vector<int> indeg(ops_.size(), 0);
  std::vector<std::vector<OpId>> succ(ops_.size());
  for (OpId i = 0; i < num_ops(); ++i) {
    for (OpId p : Predecessors(i)) {
      if (p == i) {
        return absl::InvalidArgumentError(
            absl::StrCat("graph has a cycle: op '", ops_[i].name, "' consumes its own output"));
      }
      succ[p].push_back(i);
      ++indeg[i];
    }
  }
  std::priority_queue<OpId, std::vector<OpId>, std::greater<>> ready;
  for (OpId i = 0; i < num_ops(); ++i) {
    if (indeg[i] == 0) ready.push(i);
  }
  std::vector<OpId> order;
  order.reserve(ops_.size());
  while (!ready.empty()) {
    OpId o = ready.top();
    ready.pop();
    order.push_back(o);
    for (OpId s : succ[o]) {
      if (--indeg[s] == 0) ready.push(s);
    }
  }
  if (order.size() != ops_.size()) {
    for (OpId i = 0; i < num_ops(); ++i) {
      if (indeg[i] > 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("graph has a cycle through op '", ops_[i].name, "' (", ops_[i].type, ")"));
      }
    }
  }
  return order;
}

absl::Status Graph::Validate() const {
  RETURN_IF_ERROR(CheckGraphLimits(*this));
  std::set<std::string_view> names;
  for (TensorId t = 0; t < num_tensors(); ++t) {
    const Tensor& ten = tensors_[t];
    if (ten.name.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("tensor #", t, " has no name"));
    }
    if (!names.insert(ten.name).second) {
      return absl::InvalidArgumentError(absl::StrCat("tensor name '", ten.name, "' is used twice"));
    }
    for (int64_t d : ten.shape) {
      if (d < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor '", ten.name, "' has a negative dimension: ", ShapeString(ten.shape)));
      }
    }
    const bool is_source = ten.role == TensorRole::kInput || ten.role == TensorRole::kParameter ||
                           ten.role == TensorRole::kConstant;
    if (is_source && ten.producer != kNoId) {
      return absl::InvalidArgumentError(absl::StrCat(
          std::string(RoleName(ten.role)), " tensor '", ten.name, "' must not be produced by an op (it is by '",
          ops_[ten.producer].name, "')"));
    }
    if ((ten.role == TensorRole::kActivation || ten.role == TensorRole::kGradient) &&
        ten.producer == kNoId) {
      return absl::InvalidArgumentError(absl::StrCat(std::string(RoleName(ten.role)), " tensor '", ten.name,
                                                     "' has no producing op"));
    }
    if (ten.role == TensorRole::kGradient) {
      if (ten.grad_of == kNoId || ten.grad_of >= num_tensors() ||
          tensors_[ten.grad_of].role != TensorRole::kParameter) {
        return absl::InvalidArgumentError(
            absl::StrCat("gradient tensor '", ten.name, "' does not name the parameter it is for"));
      }
      if (tensors_[ten.grad_of].shape != ten.shape) {
        return absl::InvalidArgumentError(absl::StrCat(
            "gradient tensor '", ten.name, "' has shape ", ShapeString(ten.shape),
            " but its parameter '", tensors_[ten.grad_of].name, "' has ",
            ShapeString(tensors_[ten.grad_of].shape)));
      }
    }
  }
  std::set<std::string_view> op_names;
  for (OpId i = 0; i < num_ops(); ++i) {
    const Op& op = ops_[i];
    if (!op_names.insert(op.name).second) {
      return absl::InvalidArgumentError(absl::StrCat("op name '", op.name, "' is used twice"));
    }
    if (op.kind != OpKindFromName(op.type)) {  // a type changed after AddOp: a bug
      return absl::InternalError(absl::StrCat("op '", op.name, "' has type ", op.type,
                                              " but kind ", std::string(OpKindName(op.kind))));
    }
    for (TensorId t : op.outputs) {
      if (tensors_[t].producer != i) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor '", tensors_[t].name, "' is produced by two ops: '",
            tensors_[t].producer == kNoId ? "<none>" : ops_[tensors_[t].producer].name, "' and '",
            op.name, "'"));
      }
    }
  }
  RETURN_IF_ERROR(TopologicalOrder());
  return absl::OkStatus();
}

int64_t Graph::NumParameters() const {
  int64_t n = 0;
  for (const Tensor& t : tensors_) {
    if (t.role == TensorRole::kParameter) n += t.NumElements();
  }
  return n;
}

double Graph::TotalFlops(Phase phase) const {
  double f = 0;
  for (const Op& op : ops_) {
    if (op.phase == phase) f += op.flops;
  }
  return f;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

}  // namespace braid::graph
