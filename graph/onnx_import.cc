#include "graph/onnx_import.h"

#include <algorithm>
#include <climits>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <queue>
#include <set>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/text.h"
#include "glog/logging.h"
#include "graph/import_sandbox.h"
#include "graph/limits.h"
#include "graph/canonicalize.h"
#include "graph/onnx_fold.h"
#include "graph/onnx_proto_util.h"
#include "graph/onnx_roles.h"
#include "graph/ops.h"
#include "onnx/defs/schema.h"
#include "onnx/onnx_pb.h"
#include "onnx/shape_inference/implementation.h"

namespace braid::graph {
namespace {

// Opsets of the default domain this importer accepts: libonnx 1.12 carries
// schemas (and shape inference) up to opset 17; below 7 the op semantics of
// BatchNormalization, Dropout and friends differ from what braid models.
constexpr int kMinOpset = 7;
constexpr int kMaxOpset = 17;
// Constant inputs converted into attributes must stay small.
constexpr int64_t kMaxAttrElements = 4096;

bool IsDefaultDomain(const std::string& d) { return d.empty() || d == "ai.onnx"; }

std::string NodeLabel(const onnx::NodeProto& node, int index) {
  if (!node.name().empty()) return node.name();
  return absl::StrCat("#", index, " (", node.op_type(), ")");
}

absl::Status WithPrefix(const absl::Status& s, const std::string& label) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(label, ": ", std::string(s.message())));
}

// Bytes per element of the ONNX types whose payload braid can size; 0 for
// the others (strings, complex), which are not checked.
int ElemBytes(int32_t type) {
  switch (type) {
    case onnx::TensorProto::FLOAT: case onnx::TensorProto::INT32: case onnx::TensorProto::UINT32:
      return 4;
    case onnx::TensorProto::DOUBLE: case onnx::TensorProto::INT64: case onnx::TensorProto::UINT64:
      return 8;
    case onnx::TensorProto::FLOAT16: case onnx::TensorProto::BFLOAT16:
    case onnx::TensorProto::INT16: case onnx::TensorProto::UINT16:
      return 2;
    case onnx::TensorProto::INT8: case onnx::TensorProto::UINT8: case onnx::TensorProto::BOOL:
      return 1;
    default:
      return 0;
  }
}

// Typed-field element count of a tensor's payload (ONNX stores f16, int8,
// bool, ... in int32_data).
int64_t TypedCount(const onnx::TensorProto& t) {
  switch (t.data_type()) {
    case onnx::TensorProto::FLOAT: return t.float_data_size();
    case onnx::TensorProto::DOUBLE: return t.double_data_size();
    case onnx::TensorProto::INT64: return t.int64_data_size();
    case onnx::TensorProto::UINT32: case onnx::TensorProto::UINT64: return t.uint64_data_size();
    default: return t.int32_data_size();
  }
}

// A tensor's dims and payload agree: libonnx reads constant payloads during
// shape inference without checking their length (a 7-byte int64[3] is a
// SIGSEGV in ParseData).
absl::Status CheckTensorPayload(const onnx::TensorProto& t, bool may_be_empty,
                                const std::string& what) {
  std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
  RETURN_IF_ERROR(CheckDims(dims, what));
  if (t.data_location() == onnx::TensorProto::EXTERNAL) return absl::OkStatus();
  const int size = ElemBytes(t.data_type());
  if (size == 0) return absl::OkStatus();
  int64_t n = 1;
  for (int64_t d : dims) n *= d;  // bounded by CheckDims
  const int64_t raw = static_cast<int64_t>(t.raw_data().size());
  const int64_t typed = TypedCount(t);
  if (raw == 0 && typed == 0) {
    if (n == 0 || may_be_empty) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", n, " elements declared but no data"));
  }
  if (raw != 0 && raw != n * size) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": raw_data holds ", raw, " bytes, its ",
                                                   ShapeString(dims), " elements need ", n * size));
  }
  if (raw == 0 && typed != n) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": holds ", typed, " values for ",
                                                   ShapeString(dims), " (", n, " elements)"));
  }
  return absl::OkStatus();
}

// One ONNX value (graph input, initializer, node output) during import.
struct Value {
  enum class Kind : uint8_t { kSource, kConst, kActivation };
  Kind kind = Kind::kActivation;
  int32_t elem_type = 0;
  std::vector<int64_t> dims;
  std::optional<ConstValue> constant;  // kConst only
  bool initializer = false;            // kSource from an initializer (or a clone of one)
  TensorId tensor = kNoId;
};

// Imports one ModelProto: registers graph inputs and initializers, orders the
// nodes, runs ONNX shape inference, then walks the nodes folding whatever is
// known at import time (Constant, Identity, shape arithmetic, constant masks)
// and turning the rest into braid ops; roles of weights come last, from use.
class Importer {
 public:
  Importer(const OnnxImportOptions& options, std::vector<std::string>* warnings)
      : options_(options), warnings_(warnings) {}

  absl::StatusOr<Graph> Run(onnx::ModelProto& model, std::string graph_name);

 private:
  absl::Status CheckOpsets(const onnx::ModelProto& model);
  absl::Status AddSources(onnx::GraphProto* g);
  absl::StatusOr<std::vector<int>> TopologicalOrder(const onnx::GraphProto& g);
  absl::Status CheckNodes(const onnx::GraphProto& g);
  absl::Status InferShapes(onnx::ModelProto& model);
  absl::Status ImportNode(const onnx::NodeProto& node, int index);
  absl::StatusOr<bool> TryFold(const onnx::NodeProto& node, const Attrs& attrs);
  absl::Status KeepOp(const onnx::NodeProto& node, int index, Attrs attrs);
  absl::Status OutputType(const onnx::NodeProto& node, int index, int slot, bool opaque,
                          int32_t* elem_type, std::vector<int64_t>* dims);
  bool InferNode(const onnx::NodeProto& node, std::vector<onnx::TypeProto>* out);
  absl::StatusOr<TensorId> Materialize(const std::string& name);
  void SetConst(const std::string& name, ConstValue v);
  const std::string& Resolve(const std::string& name) const;
  Value* Find(const std::string& name);
  int OpsetFor(const std::string& domain) const;
  void Warn(std::string w) {
    if (warnings_ != nullptr) warnings_->push_back(std::move(w));
  }

  const OnnxImportOptions& options_;
  std::vector<std::string>* warnings_;
  Graph graph_;
  std::unordered_map<std::string, int> opsets_;
  std::unordered_map<std::string, Value> values_;
  std::unordered_map<std::string, std::string> alias_;
  std::unordered_map<std::string, int> uses_;
  std::unordered_map<std::string, const onnx::TypeProto*> inferred_;
  std::set<std::string> op_names_;
  RoleEvidence evidence_;
};

int Importer::OpsetFor(const std::string& domain) const {
  auto it = opsets_.find(IsDefaultDomain(domain) ? "" : domain);
  return it == opsets_.end() ? 1 : it->second;
}

const std::string& Importer::Resolve(const std::string& name) const {
  const std::string* n = &name;
  for (auto it = alias_.find(*n); it != alias_.end(); it = alias_.find(*n)) n = &it->second;
  return *n;
}

Value* Importer::Find(const std::string& name) {
  auto it = values_.find(Resolve(name));
  return it == values_.end() ? nullptr : &it->second;
}

void Importer::SetConst(const std::string& name, ConstValue v) {
  Value& val = values_[name];
  val.kind = Value::Kind::kConst;
  val.elem_type = v.elem_type;
  val.dims = v.dims;
  val.constant = std::move(v);
}

absl::Status Importer::CheckOpsets(const onnx::ModelProto& model) {
  for (const auto& o : model.opset_import()) {
    opsets_[IsDefaultDomain(o.domain()) ? "" : o.domain()] = static_cast<int>(o.version());
  }
  auto it = opsets_.find("");
  if (it == opsets_.end()) {
    return absl::InvalidArgumentError(
        "not a valid ONNX ModelProto (no opset_import for the default domain)");
  }
  if (it->second < kMinOpset || it->second > kMaxOpset) {
    return absl::InvalidArgumentError(absl::StrCat("unsupported opset ", it->second,
                                                   " (braid imports opsets ", kMinOpset, "..",
                                                   kMaxOpset, ")"));
  }
  return absl::OkStatus();
}

// Registers graph inputs and initializers. Symbolic or unknown input dims are
// pinned to default_batch in the proto itself so shape inference sees them.
absl::Status Importer::AddSources(onnx::GraphProto* g) {
  if (g->sparse_initializer_size() > 0) {
    return absl::InvalidArgumentError(absl::StrCat("sparse initializer '",
                                                   g->sparse_initializer(0).values().name(),
                                                   "' is not supported"));
  }
  for (const onnx::TensorProto& t : g->initializer()) {
    Value v;
    v.elem_type = t.data_type();
    v.dims.assign(t.dims().begin(), t.dims().end());  // bounded by CheckNodes
    if (!IsOnnxFloatType(t.data_type())) {
      if (std::optional<ConstValue> c = DecodeTensor(t)) {
        SetConst(t.name(), *std::move(c));
        continue;
      }
    }
    v.kind = Value::Kind::kSource;
    v.initializer = true;
    values_[t.name()] = std::move(v);
  }
  for (onnx::ValueInfoProto& in : *g->mutable_input()) {
    if (values_.count(in.name())) continue;  // an initializer listed as an input
    if (!in.type().has_tensor_type()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "graph input '", in.name(), "' has a non-tensor type (",
          in.type().has_sequence_type() ? "sequence"
          : in.type().has_map_type()    ? "map"
          : in.type().has_optional_type() ? "optional"
          : in.type().has_sparse_tensor_type() ? "sparse tensor"
                                                 : "no type",
          "); braid imports tensor inputs only"));
    }
    auto* tt = in.mutable_type()->mutable_tensor_type();
    if (!tt->has_shape()) {
      return absl::InvalidArgumentError(
          absl::StrCat("graph input '", in.name(), "' has no shape (rank unknown)"));
    }
    Value v;
    v.kind = Value::Kind::kSource;
    v.elem_type = tt->elem_type();
    for (auto& d : *tt->mutable_shape()->mutable_dim()) {
      if (!d.has_dim_value() || d.dim_value() < 0) d.set_dim_value(options_.default_batch);
      v.dims.push_back(d.dim_value());
    }
    RETURN_IF_ERROR(
        CheckDims(v.dims, absl::StrCat("graph input '", base::EscapeForDisplay(in.name()), "'")));
    values_[in.name()] = std::move(v);
  }
  return absl::OkStatus();
}

// Kahn's algorithm over nodes, preferring file order. Fails on undefined
// inputs, values produced twice, and cycles (naming a node on the cycle).
absl::StatusOr<std::vector<int>> Importer::TopologicalOrder(const onnx::GraphProto& g) {
  const int n = g.node_size();
  std::unordered_map<std::string, int> producer;
  for (int i = 0; i < n; ++i) {
    for (const std::string& out : g.node(i).output()) {
      if (out.empty()) continue;
      auto [it, fresh] = producer.emplace(out, i);
      if (!fresh || values_.count(out)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "value '", out, "' is defined twice (node '", NodeLabel(g.node(i), i), "')"));
      }
    }
  }
  std::vector<std::vector<int>> succ(n);
  std::vector<int> indegree(n, 0);
  for (int i = 0; i < n; ++i) {
    for (const std::string& in : g.node(i).input()) {
      if (in.empty()) continue;
      ++uses_[in];
      auto it = producer.find(in);
      if (it != producer.end()) {
        succ[it->second].push_back(i);
        ++indegree[i];
      } else if (!values_.count(in)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "node '", NodeLabel(g.node(i), i), "' (", g.node(i).op_type(), ") reads '", in,
            "', which no node, graph input or initializer defines"));
      }
    }
  }
  for (const auto& out : g.output()) ++uses_[out.name()];
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (int i = 0; i < n; ++i) {
    if (indegree[i] == 0) ready.push(i);
  }
  std::vector<int> order;
  order.reserve(n);
  while (!ready.empty()) {
    const int i = ready.top();
    ready.pop();
    order.push_back(i);
    for (int j : succ[i]) {
      if (--indegree[j] == 0) ready.push(j);
    }
  }
  if (static_cast<int>(order.size()) == n) return order;
  // Walk backwards through unfinished producers until a node repeats: it lies
  // on a cycle.
  int cur = 0;
  while (indegree[cur] == 0) ++cur;
  std::vector<bool> seen(n, false);
  while (!seen[cur]) {
    seen[cur] = true;
    for (const std::string& in : g.node(cur).input()) {
      auto it = producer.find(in);
      if (it != producer.end() && indegree[it->second] > 0) {
        cur = it->second;
        break;
      }
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("the graph has a cycle through node '",
                                                 NodeLabel(g.node(cur), cur), "' (",
                                                 g.node(cur).op_type(), ")"));
}

// What ONNX shape inference and braid's folding would divide by or index
// with, checked before either runs (libonnx 1.12 does not check strides, and
// a zero stride is a SIGFPE inside convPoolShapeInference), and every name
// checked as UTF-8 so no later JSON or terminal output trips on it.
absl::Status Importer::CheckNodes(const onnx::GraphProto& g) {
  auto utf8 = [](const std::string& name, const std::string& what) -> absl::Status {
    if (base::IsValidUtf8(name) && name.size() <= kMaxNameBytes) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        what, " '", base::EscapeForDisplay(name.substr(0, 256)),
        name.size() > kMaxNameBytes ? "' is too long" : "' is not valid UTF-8"));
  };
  RETURN_IF_ERROR(utf8(g.name(), "graph name"));
  for (const auto& vi : g.input()) {
    RETURN_IF_ERROR(utf8(vi.name(), "graph input"));
  }
  for (const auto& vi : g.output()) {
    RETURN_IF_ERROR(utf8(vi.name(), "graph output"));
  }
  for (const auto& t : g.initializer()) {
    RETURN_IF_ERROR(utf8(t.name(), "initializer"));
  }
  for (int i = 0; i < g.node_size(); ++i) {
    const onnx::NodeProto& node = g.node(i);
    const std::string label =
        absl::StrCat("node '", base::EscapeForDisplay(NodeLabel(node, i)), "' (",
                     base::EscapeForDisplay(node.op_type()), ")");
    RETURN_IF_ERROR(utf8(node.name(), absl::StrCat("node #", i, " name")));
    RETURN_IF_ERROR(utf8(node.op_type(), absl::StrCat("node #", i, " op type")));
    RETURN_IF_ERROR(utf8(node.domain(), absl::StrCat("node #", i, " domain")));
    for (const std::string& v : node.input()) {
      RETURN_IF_ERROR(utf8(v, absl::StrCat(label, " input")));
    }
    for (const std::string& v : node.output()) {
      RETURN_IF_ERROR(utf8(v, absl::StrCat(label, " output")));
    }
    if (!IsDefaultDomain(node.domain())) continue;
    // The op's schema: input and output counts, required attributes (a Scan
    // without its body graph is a SIGSEGV in its shape inference), attribute
    // types. Unknown ops have none and stay opaque.
    const onnx::OpSchema* schema =
        onnx::OpSchemaRegistry::Instance()->GetSchema(node.op_type(), OpsetFor(""), "");
    if (schema != nullptr && !schema->Deprecated()) {
      try {
        schema->Verify(node);
      } catch (const std::exception& e) {
        return absl::InvalidArgumentError(absl::StrCat(label, ": ", e.what()));
      }
    }
    for (const auto& a : node.attribute()) {
      if (a.has_t()) {
        RETURN_IF_ERROR(CheckTensorPayload(a.t(), /*may_be_empty=*/false,
                                           absl::StrCat(label, " attribute '", a.name(), "'")));
      }
      for (const std::string& str : a.strings()) {
        if (!base::IsValidUtf8(str)) {
          return absl::InvalidArgumentError(
              absl::StrCat(label, ": attribute '", a.name(), "' holds a string that is not valid UTF-8"));
        }
      }
      if (a.has_s() && !base::IsValidUtf8(a.s())) {
        return absl::InvalidArgumentError(
            absl::StrCat(label, ": attribute '", a.name(), "' is a string that is not valid UTF-8"));
      }
    }
    RETURN_IF_ERROR(CheckOpAttrs(node.op_type(), ConvertAttrs(node), nullptr, label));
  }
  for (const onnx::TensorProto& t : g.initializer()) {
    // Weight-less exports keep float weights' shapes without data; integer
    // initializers feed shape inference (shapes, axes) and need theirs.
    RETURN_IF_ERROR(
        CheckTensorPayload(t, /*may_be_empty=*/IsOnnxFloatType(t.data_type()),
                           absl::StrCat("initializer '", base::EscapeForDisplay(t.name()), "'")));
  }
  return absl::OkStatus();
}

absl::Status Importer::InferShapes(onnx::ModelProto& model) {
  // error_mode 0: a node ONNX cannot infer keeps unknown outputs (the importer
  // retries it per node with folded constants) instead of failing the model.
  onnx::ShapeInferenceOptions opts(/*check_type_val=*/false, /*strict_mode_val=*/0,
                                   /*data_prop_val=*/true);
  try {
    onnx::shape_inference::InferShapes(model, onnx::OpSchemaRegistry::Instance(), opts);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("ONNX shape inference failed: ", e.what()));
  }
  const onnx::GraphProto& g = model.graph();
  for (const auto& vi : g.value_info()) inferred_[vi.name()] = &vi.type();
  for (const auto& vi : g.output()) inferred_[vi.name()] = &vi.type();
  return absl::OkStatus();
}

absl::StatusOr<TensorId> Importer::Materialize(const std::string& name) {
  const std::string& key = Resolve(name);
  auto it = values_.find(key);
  CHECK(it != values_.end()) << "value '" << key << "' checked by TopologicalOrder";
  Value& v = it->second;
  if (v.tensor != kNoId) return v.tensor;
  ASSIGN_OR_RETURN(DType dtype, ToDType(v.elem_type, key));
  TensorRole role = TensorRole::kActivation;
  if (v.kind == Value::Kind::kConst) role = TensorRole::kConstant;
  if (v.kind == Value::Kind::kSource) {
    role = v.initializer ? TensorRole::kConstant : TensorRole::kInput;  // refined at the end
  }
  CHECK(v.kind != Value::Kind::kActivation) << "activation '" << key << "' has no tensor";
  v.tensor = graph_.AddTensor(key, v.dims, dtype, role);
  if (v.kind == Value::Kind::kConst && v.constant &&
      v.constant->NumElements() <= Tensor::kMaxKeptConstantElements &&
      v.constant->NumElements() == graph_.tensor(v.tensor).NumElements()) {
    std::vector<double>& kept = graph_.mutable_tensor(v.tensor).value;
    kept.reserve(v.constant->NumElements());
    for (int64_t i = 0; i < v.constant->NumElements(); ++i) kept.push_back(v.constant->AsDouble(i));
  }
  if (v.kind == Value::Kind::kSource) evidence_.AddSource(v.tensor, v.initializer);
  return v.tensor;
}

absl::Status Importer::ImportNode(const onnx::NodeProto& node, int index) {
  const std::string& type = node.op_type();
  for (const std::string& in : node.input()) {
    if (!in.empty() && Find(in) == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("node '", NodeLabel(node, index),
                                                     "' reads '", in,
                                                     "', which an earlier node left undefined"));
    }
  }
  if ((type == "Identity" || type == "Dropout") &&
      (node.input_size() == 0 || node.input(0).empty() || node.output_size() == 0 ||
       node.output(0).empty())) {
    return absl::InvalidArgumentError(absl::StrCat(type, " node '", NodeLabel(node, index),
                                                   "' needs an input and an output"));
  }
  if (!IsDefaultDomain(node.domain())) return KeepOp(node, index, ConvertAttrs(node));
  if (type == "Constant") {
    if (node.output_size() != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("Constant node '", NodeLabel(node, index), "' must have one output"));
    }
    std::optional<ConstValue> c;
    for (const auto& a : node.attribute()) {
      if (a.name() == "value") c = DecodeTensor(a.t());
      if (a.name() == "value_float") c = ConstValue::Floats({}, {a.f()});
      if (a.name() == "value_floats") {
        c = ConstValue::Floats({a.floats_size()}, {a.floats().begin(), a.floats().end()});
      }
      if (a.name() == "value_int") c = ConstValue::Ints({}, {a.i()});
      if (a.name() == "value_ints") {
        c = ConstValue::Ints({a.ints_size()}, {a.ints().begin(), a.ints().end()});
      }
    }
    if (!c) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Constant node '", NodeLabel(node, index),
          "' has no numeric value braid can read (string, sparse or external data)"));
    }
    SetConst(node.output(0), *std::move(c));
    return absl::OkStatus();
  }
  if (type == "Identity" && node.input_size() == 1 && node.output_size() == 1) {
    Value* in = Find(node.input(0));
    if (in->kind == Value::Kind::kSource) {
      // Exporters deduplicate equal-valued weights into one input read through
      // Identity nodes; each copy is its own weight of the original model.
      Value clone = *in;
      clone.tensor = kNoId;
      values_[node.output(0)] = std::move(clone);
    } else {
      alias_[node.output(0)] = Resolve(node.input(0));
    }
    return absl::OkStatus();
  }
  Attrs attrs = ConvertAttrs(node);
  if (type == "Dropout" && node.input_size() >= 1) {
    bool training = false;
    if (OpsetFor("") >= 12 && node.input_size() >= 3 && !node.input(2).empty()) {
      const Value* mode = Find(node.input(2));
      training = mode->kind != Value::Kind::kConst || mode->constant->NumElements() != 1 ||
                 mode->constant->AsInt(0) != 0;
    }
    const bool mask_used = node.output_size() >= 2 && !node.output(1).empty() &&
                           uses_[node.output(1)] > 0;
    if (!training && !mask_used) {  // inference-mode Dropout is the identity
      alias_[node.output(0)] = Resolve(node.input(0));
      return absl::OkStatus();
    }
  }
  absl::StatusOr<bool> folded = TryFold(node, attrs);
  if (!folded.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("node '", NodeLabel(node, index), "' (",
                                                   type, "): ", std::string(folded.status().message())));
  }
  if (*folded) return absl::OkStatus();
  return KeepOp(node, index, std::move(attrs));
}

// Evaluates the node when everything it reads is known at import time.
absl::StatusOr<bool> Importer::TryFold(const onnx::NodeProto& node, const Attrs& attrs) {
  const std::string& type = node.op_type();
  if (node.output_size() != 1 || node.output(0).empty() || node.input_size() == 0 ||
      node.input(0).empty()) {
    return false;
  }
  const Value* x = Find(node.input(0));
  if (type == "Shape" || type == "Size") {
    if (x->kind == Value::Kind::kActivation && x->tensor == kNoId) return false;
    const std::vector<int64_t>& dims = x->dims;
    if (type == "Size") {
      int64_t n = 1;
      for (int64_t d : dims) n *= d;
      SetConst(node.output(0), ConstValue::Ints({}, {n}));
      return true;
    }
    const int64_t rank = static_cast<int64_t>(dims.size());
    auto clamp = [rank](int64_t v) { return std::clamp(v < 0 ? v + rank : v, int64_t{0}, rank); };
    auto it_s = attrs.find("start"), it_e = attrs.find("end");
    const int64_t start = it_s == attrs.end() ? 0 : clamp(std::get<int64_t>(it_s->second));
    const int64_t end = it_e == attrs.end() ? rank : clamp(std::get<int64_t>(it_e->second));
    std::vector<int64_t> out(dims.begin() + start, dims.begin() + std::max(start, end));
    const int64_t n = static_cast<int64_t>(out.size());
    SetConst(node.output(0), ConstValue::Ints({n}, std::move(out)));
    return true;
  }
  std::vector<const ConstValue*> inputs;
  for (const std::string& in : node.input()) {
    if (in.empty()) {
      inputs.push_back(nullptr);
      continue;
    }
    const Value* v = Find(in);
    if (v->kind != Value::Kind::kConst) return false;
    inputs.push_back(&*v->constant);
  }
  absl::StatusOr<std::optional<ConstValue>> r;
  if (type == "ConstantOfShape") {
    ConstValue value = ConstValue::Floats({}, {0.0});
    for (const auto& a : node.attribute()) {
      if (a.name() != "value") continue;
      std::optional<ConstValue> v = DecodeTensor(a.t());
      if (!v || v->NumElements() != 1) return false;
      value = *std::move(v);
    }
    r = FillConst(inputs[0]->ToInts(), value, kDefaultMaxFoldElements);
  } else {
    r = FoldOp(type, attrs, OpsetFor(""), inputs, kDefaultMaxFoldElements);
  }
  RETURN_IF_ERROR(r.status());
  if (!r->has_value()) return false;
  SetConst(node.output(0), **std::move(r));
  return true;
}

// Runs the node's ONNX shape inference function on braid's static shapes and
// folded constants (ONNX's own pass cannot see values computed by folding).
bool Importer::InferNode(const onnx::NodeProto& node, std::vector<onnx::TypeProto>* out) {
  const onnx::OpSchema* schema = onnx::OpSchemaRegistry::Instance()->GetSchema(
      node.op_type(), OpsetFor(node.domain()), IsDefaultDomain(node.domain()) ? "" : node.domain());
  if (schema == nullptr || !schema->has_type_and_shape_inference_function()) return false;
  std::vector<onnx::TypeProto> types;
  std::vector<onnx::TensorProto> data;
  types.reserve(node.input_size());
  data.reserve(node.input_size());
  std::unordered_map<std::string, onnx::TypeProto*> types_by_name;
  std::unordered_map<std::string, const onnx::TensorProto*> data_by_name;
  for (const std::string& in : node.input()) {
    if (in.empty() || types_by_name.count(in)) continue;
    const Value* v = Find(in);
    onnx::TypeProto& t = types.emplace_back();
    auto* tt = t.mutable_tensor_type();
    tt->set_elem_type(v->elem_type);
    auto* shape = tt->mutable_shape();
    for (int64_t d : v->dims) shape->add_dim()->set_dim_value(d);
    types_by_name[in] = &t;
    if (v->kind == Value::Kind::kConst) {
      data.push_back(EncodeTensor(*v->constant));
      data_by_name[in] = &data.back();
    }
  }
  onnx::NodeProto copy = node;
  try {
    onnx::shape_inference::InferenceContextImpl ctx(copy, types_by_name, data_by_name, {});
    schema->GetTypeAndShapeInferenceFunction()(ctx);
    out->clear();
    for (int i = 0; i < node.output_size(); ++i) out->push_back(*ctx.getOutputType(i));
  } catch (const std::exception&) {
    return false;
  }
  return true;
}

absl::Status Importer::OutputType(const onnx::NodeProto& node, int index, int slot, bool opaque,
                                  int32_t* elem_type, std::vector<int64_t>* dims) {
  const std::string& name = node.output(slot);
  auto it = inferred_.find(name);
  if (it != inferred_.end() && StaticTensorType(*it->second, elem_type, dims)) {
    return absl::OkStatus();
  }
  std::vector<onnx::TypeProto> types;
  if (InferNode(node, &types) && StaticTensorType(types[slot], elem_type, dims)) {
    return absl::OkStatus();
  }
  // BatchNormalization's training outputs (running and saved mean/variance)
  // have no ONNX shape inference before opset 14; they are per channel.
  if (node.op_type() == "BatchNormalization" && slot >= 1 && node.input_size() >= 2 &&
      IsDefaultDomain(node.domain())) {
    const Value* scale = Find(node.input(1));
    *elem_type = scale->elem_type;
    *dims = scale->dims;
    return absl::OkStatus();
  }
  // Nothing static: take what ONNX knows and fill the gaps.
  const onnx::TypeProto* partial = it != inferred_.end() ? it->second
                                   : static_cast<size_t>(slot) < types.size() ? &types[slot]
                                                                              : nullptr;
  const Value* first = nullptr;
  for (const std::string& in : node.input()) {
    if (!in.empty()) {
      first = Find(in);
      break;
    }
  }
  *elem_type = first != nullptr ? first->elem_type : kOnnxFloat;
  *dims = first != nullptr ? first->dims : std::vector<int64_t>{};
  std::string how = "the first input's shape";
  if (partial != nullptr && partial->has_tensor_type()) {
    const auto& tt = partial->tensor_type();
    if (tt.elem_type() != 0) *elem_type = tt.elem_type();
    if (tt.has_shape()) {
      dims->clear();
      for (const auto& d : tt.shape().dim()) {
        dims->push_back(d.has_dim_value() && d.dim_value() >= 0 ? d.dim_value()
                                                                 : options_.default_batch);
      }
      how = absl::StrCat("default_batch (", options_.default_batch, ") for unknown dims");
    }
  }
  if (!opaque) {
    Warn(absl::StrCat("could not infer a static shape for '", name, "' (node '",
                      NodeLabel(node, index), "', ", node.op_type(), "): used ", how, ", ",
                      ShapeString(*dims)));
  }
  return absl::OkStatus();
}

absl::Status Importer::KeepOp(const onnx::NodeProto& node, int index, Attrs attrs) {
  const bool default_domain = IsDefaultDomain(node.domain());
  const std::string type =
      default_domain ? node.op_type() : absl::StrCat(node.domain(), ".", node.op_type());
  const bool opaque = !IsKnownOpType(type);
  const std::string label = NodeLabel(node, index);
  if (opaque) {
    Warn(absl::StrCat("unknown op type '", type, "' (node '", label, "'): kept as an opaque op"));
  }
  bool indices_integer = false;
  if (type == "Gather" && node.input_size() >= 2 && !node.input(1).empty()) {
    indices_integer = !IsOnnxFloatType(Find(node.input(1))->elem_type);
  }
  std::vector<TensorId> inputs;
  std::vector<std::pair<TensorId, int>> uses;
  for (int slot = 0; slot < node.input_size(); ++slot) {
    const std::string& in = node.input(slot);
    if (in.empty()) continue;
    const Value* v = Find(in);
    const char* attr = AttrNameForInput(type, slot);
    if (v->kind == Value::Kind::kConst && attr != nullptr &&
        v->constant->NumElements() <= kMaxAttrElements) {
      attrs[attr] = ConstToAttr(*v->constant);
      continue;
    }
    ASSIGN_OR_RETURN(TensorId t, Materialize(in));
    inputs.push_back(t);
    uses.emplace_back(t, slot);
  }
  for (const auto& [t, slot] : uses) evidence_.RecordUse(t, type, slot, indices_integer);
  std::vector<TensorId> outputs;
  for (int slot = 0; slot < node.output_size(); ++slot) {
    const std::string& name = node.output(slot);
    if (name.empty()) continue;
    int32_t elem_type = 0;
    std::vector<int64_t> dims;
    RETURN_IF_ERROR(OutputType(node, index, slot, opaque, &elem_type, &dims));
    RETURN_IF_ERROR(
        CheckDims(dims, absl::StrCat("node '", label, "' (", type, ") output '", name, "'")));
    ASSIGN_OR_RETURN(DType dtype, ToDType(elem_type, name));
    Value& v = values_[name];
    v.kind = Value::Kind::kActivation;
    v.elem_type = elem_type;
    v.dims = dims;
    v.tensor = graph_.AddTensor(name, std::move(dims), dtype, TensorRole::kActivation);
    outputs.push_back(v.tensor);
  }
  std::string op_name = node.name().empty() ? absl::StrCat(node.op_type(), "_", index) : node.name();
  if (op_names_.count(op_name)) op_name = absl::StrCat(op_name, "_", index);
  op_names_.insert(op_name);
  const OpId id = graph_.AddOp(op_name, type, std::move(inputs), std::move(outputs), std::move(attrs));
  graph_.mutable_op(id).opaque = opaque;
  return absl::OkStatus();
}

absl::StatusOr<Graph> Importer::Run(onnx::ModelProto& model, std::string graph_name) {
  if (options_.default_batch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("OnnxImportOptions.default_batch must be >= 1, got ", options_.default_batch));
  }
  if (!model.has_graph()) {
    return absl::InvalidArgumentError("not a valid ONNX ModelProto (no graph)");
  }
  if (model.ir_version() <= 0) {
    return absl::InvalidArgumentError("not a valid ONNX ModelProto (no ir_version)");
  }
  RETURN_IF_ERROR(CheckOpsets(model));
  onnx::GraphProto* g = model.mutable_graph();
  RETURN_IF_ERROR(CheckNodes(*g));
  RETURN_IF_ERROR(AddSources(g));
  ASSIGN_OR_RETURN(std::vector<int> order, TopologicalOrder(*g));
  bool sorted = true;
  for (int i = 0; i < static_cast<int>(order.size()); ++i) sorted = sorted && order[i] == i;
  if (!sorted) {  // ONNX shape inference walks nodes in file order
    google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
    for (int i : order) *nodes.Add() = std::move(*g->mutable_node(i));
    g->mutable_node()->Swap(&nodes);
  }
  RETURN_IF_ERROR(InferShapes(model));

  graph_.set_name(graph_name.empty() ? g->name() : std::move(graph_name));
  for (int i = 0; i < g->node_size(); ++i) {
    RETURN_IF_ERROR(ImportNode(g->node(i), sorted ? i : order[i]));
  }
  for (const auto& out : g->output()) {
    if (Find(out.name()) == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("graph output '", out.name(), "' is not defined by any node or input"));
    }
    ASSIGN_OR_RETURN(TensorId t, Materialize(out.name()));
    graph_.AddOutput(t);
  }
  evidence_.AssignRoles(graph_);
  // Bounds first: cost annotation multiplies dims and attributes.
  RETURN_IF_ERROR(CheckGraphLimits(graph_));
  AnnotateCosts(graph_);
  if (absl::Status s = graph_.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("imported graph is invalid: ", std::string(s.message())));
  }
  // Attention's packed projections and merged batch-head dims, restated
  // with the dims a head split shards (graph/canonicalize.h).
  if (!options_.canonicalize) return std::move(graph_);
  return CanonicalizeForSharding(graph_);
}

absl::StatusOr<Graph> ImportInProcess(std::string_view bytes, const std::string& label,
                                      std::string graph_name, const OnnxImportOptions& options,
                                      std::vector<std::string>* warnings) {
  if (static_cast<int64_t>(bytes.size()) > options.max_model_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": model is ", bytes.size(),
                                                   " bytes, larger than max_model_bytes (",
                                                   options.max_model_bytes, ")"));
  }
  if (bytes.size() > static_cast<size_t>(INT_MAX)) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": model is ", bytes.size(), " bytes; protobuf reads at most 2 GiB"));
  }
  try {
    onnx::ModelProto model;
    if (!model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
      return absl::InvalidArgumentError(absl::StrCat(
          label, ": not a valid ONNX ModelProto (protobuf parse failed: truncated or corrupt)"));
    }
    Importer importer(options, warnings);
    absl::StatusOr<Graph> g = importer.Run(model, std::move(graph_name));
    if (!g.ok()) return WithPrefix(g.status(), label);
    return g;
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": ONNX error: ", e.what()));
  }
}

absl::StatusOr<Graph> Import(std::string_view bytes, const std::string& label,
                             std::string graph_name, const OnnxImportOptions& options,
                             std::vector<std::string>* warnings) {
  if (!options.isolate) return ImportInProcess(bytes, label, std::move(graph_name), options, warnings);
  return ImportIsolated(
      [&](std::vector<std::string>* w) {
        return ImportInProcess(bytes, label, graph_name, options, w);
      },
      label, {.timeout_s = options.isolate_timeout_s}, warnings);
}

}  // namespace

absl::StatusOr<Graph> ImportOnnxFile(const std::string& path, const OnnxImportOptions& options,
                                     std::vector<std::string>* warnings) {
  std::error_code ec;
  const std::filesystem::path p(path);
  if (!std::filesystem::exists(p, ec)) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
  if (std::filesystem::is_directory(p, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": is a directory, not an ONNX file"));
  }
  const uintmax_t size = std::filesystem::file_size(p, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat(path, ": cannot stat: ", ec.message()));
  if (size > static_cast<uintmax_t>(options.max_model_bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": model is ", size,
                                                   " bytes, larger than max_model_bytes (",
                                                   options.max_model_bytes, ")"));
  }
  std::ifstream f(p, std::ios::binary);
  std::string bytes(size, '\0');
  if (!f || !f.read(bytes.data(), static_cast<std::streamsize>(size))) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": cannot read the file"));
  }
  return Import(bytes, path, p.stem().string(), options, warnings);
}

absl::StatusOr<Graph> ImportOnnxBytes(std::string_view bytes, const OnnxImportOptions& options,
                                      std::vector<std::string>* warnings) {
  return Import(bytes, "<onnx bytes>", "", options, warnings);
}

}  // namespace braid::graph
