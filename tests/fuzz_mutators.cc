#include "tests/fuzz_mutators.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <set>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace braid::fuzz {
namespace {

using ::onnx::AttributeProto;
using ::onnx::GraphProto;
using ::onnx::ModelProto;
using ::onnx::NodeProto;
using ::onnx::TensorProto;
using ::onnx::TensorShapeProto;
using ::onnx::ValueInfoProto;

constexpr int64_t kInt64Min = std::numeric_limits<int64_t>::min();
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

size_t Pick(Rng& rng, size_t n) {
  return n == 0 ? 0 : std::uniform_int_distribution<size_t>(0, n - 1)(rng);
}
bool Chance(Rng& rng, double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; }
template <typename T>
const T& PickOf(Rng& rng, const std::vector<T>& v) {
  return v[Pick(rng, v.size())];
}

// Printable form of a possibly binary string, for the mutation log.
std::string Show(std::string_view sv) {
  const absl::string_view s(sv.data(), sv.size());
  if (s.size() > 40)
    return absl::StrCat("\"", absl::CHexEscape(s.substr(0, 24)), "...\" (", s.size(), " bytes)");
  return absl::StrCat("\"", absl::CHexEscape(s), "\"");
}

int64_t AdversarialInt(Rng& rng) {
  // 0 and -1 break the most arithmetic (a zero stride is a division by zero).
  const double r = std::uniform_real_distribution<double>(0, 1)(rng);
  if (r < 0.2) return 0;
  if (r < 0.3) return -1;
  if (r < 0.75) return PickOf(rng, AdversarialInts());
  if (r < 0.93) return std::uniform_int_distribution<int64_t>(-3, 8)(rng);
  return static_cast<int64_t>(rng());
}

std::string AdversarialName(Rng& rng) {
  const double r = std::uniform_real_distribution<double>(0, 1)(rng);
  if (r < 0.75) return PickOf(rng, AdversarialNames());
  std::string s(1 + Pick(rng, 12), '\0');
  for (char& c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

const std::vector<std::string>& IntAttrNames() {
  static const auto* names = new std::vector<std::string>{"strides",
                                                          "pads",
                                                          "kernel_shape",
                                                          "dilations",
                                                          "group",
                                                          "axis",
                                                          "axes",
                                                          "perm",
                                                          "split",
                                                          "keepdims",
                                                          "output_padding",
                                                          "output_shape",
                                                          "blocksize",
                                                          "batch_dims",
                                                          "k",
                                                          "to",
                                                          "transA",
                                                          "transB",
                                                          "upper",
                                                          "num_outputs",
                                                          "training_mode",
                                                          "ceil_mode",
                                                          "hidden_size",
                                                          "direction",
                                                          "start",
                                                          "end"};
  return *names;
}

const std::vector<std::string>& OpTypes() {
  static const auto* types = new std::vector<std::string>{"Conv",
                                                          "ConvTranspose",
                                                          "MaxPool",
                                                          "AveragePool",
                                                          "GlobalAveragePool",
                                                          "LpPool",
                                                          "ConstantOfShape",
                                                          "Constant",
                                                          "Transpose",
                                                          "Concat",
                                                          "Split",
                                                          "Reshape",
                                                          "Gather",
                                                          "GatherElements",
                                                          "GatherND",
                                                          "Slice",
                                                          "Expand",
                                                          "Tile",
                                                          "Pad",
                                                          "Resize",
                                                          "Range",
                                                          "Squeeze",
                                                          "Unsqueeze",
                                                          "Flatten",
                                                          "MatMul",
                                                          "Gemm",
                                                          "Einsum",
                                                          "BatchNormalization",
                                                          "LayerNormalization",
                                                          "GroupNormalization",
                                                          "InstanceNormalization",
                                                          "Softmax",
                                                          "LogSoftmax",
                                                          "ReduceMean",
                                                          "ReduceSum",
                                                          "ReduceMax",
                                                          "TopK",
                                                          "NonZero",
                                                          "Shape",
                                                          "Size",
                                                          "Cast",
                                                          "CastLike",
                                                          "Where",
                                                          "Trilu",
                                                          "CumSum",
                                                          "OneHot",
                                                          "DepthToSpace",
                                                          "SpaceToDepth",
                                                          "LSTM",
                                                          "GRU",
                                                          "RNN",
                                                          "Loop",
                                                          "If",
                                                          "Scan",
                                                          "Dropout",
                                                          "Identity",
                                                          "Relu",
                                                          "Add",
                                                          "Mul",
                                                          "Div",
                                                          "Sum",
                                                          "Max",
                                                          "Mean",
                                                          "Clip",
                                                          "Sqrt",
                                                          "Pow",
                                                          "Equal",
                                                          "Not",
                                                          "Det",
                                                          "Col2Im",
                                                          "SequenceConstruct",
                                                          "SoftmaxCrossEntropyLoss",
                                                          "NegativeLogLikelihoodLoss",
                                                          "AllReduce",
                                                          "SgdMomentumUpdate",
                                                          "ConvGradData"};
  return *types;
}

// Every value name of the graph: inputs, initializers, node outputs.
std::vector<std::string> ValueNames(const GraphProto& g) {
  std::vector<std::string> names;
  for (const auto& v : g.input()) names.push_back(v.name());
  for (const auto& t : g.initializer()) names.push_back(t.name());
  for (const auto& n : g.node()) {
    for (const auto& o : n.output()) names.push_back(o);
  }
  return names;
}

std::vector<int64_t> RandomInts(Rng& rng) {
  std::vector<int64_t> v(Pick(rng, 7));
  if (Chance(rng, 0.4)) {
    std::fill(v.begin(), v.end(), AdversarialInt(rng));  // [0,0], [2^31,2^31,2^31], ...
  } else {
    for (int64_t& x : v) x = AdversarialInt(rng);
  }
  return v;
}

std::string IntsString(const google::protobuf::RepeatedField<int64_t>& v) {
  return absl::StrCat("[", absl::StrJoin(v, ","), "]");
}

// ---- mutations -------------------------------------------------------------
// Each returns a description, or "" when it found nothing to mutate.

bool HasIntAttr(const NodeProto& n) {
  for (const auto& a : n.attribute()) {
    if (a.type() == AttributeProto::INT || a.type() == AttributeProto::INTS) return true;
  }
  return false;
}

std::string MutateIntAttr(ModelProto& m, Rng& rng) {
  GraphProto* g = m.mutable_graph();
  if (g->node_size() == 0) return "";
  // Mostly nodes that already have int attributes (Conv, pools, Transpose,
  // Concat, ...): their attributes are the ones shape inference divides by.
  std::vector<int> with_ints;
  for (int i = 0; i < g->node_size(); ++i) {
    if (HasIntAttr(g->node(i))) with_ints.push_back(i);
  }
  NodeProto* n = g->mutable_node(!with_ints.empty() && Chance(rng, 0.75)
                                     ? PickOf(rng, with_ints)
                                     : static_cast<int>(Pick(rng, g->node_size())));
  std::vector<AttributeProto*> ints;
  for (auto& a : *n->mutable_attribute()) {
    if (a.type() == AttributeProto::INT || a.type() == AttributeProto::INTS) ints.push_back(&a);
  }
  AttributeProto* a = nullptr;
  if (!ints.empty() && Chance(rng, 0.7)) {
    a = ints[Pick(rng, ints.size())];
  } else {
    const std::string& name = PickOf(rng, IntAttrNames());
    for (auto& existing : *n->mutable_attribute()) {
      if (existing.name() == name) a = &existing;
    }
    if (a == nullptr) {
      a = n->add_attribute();
      a->set_name(name);
      a->set_type(Chance(rng, 0.5) ? AttributeProto::INTS : AttributeProto::INT);
    }
  }
  const std::string where =
      absl::StrCat("node ", Show(n->name()), " (", n->op_type(), ") attr ", a->name());
  const double r = std::uniform_real_distribution<double>(0, 1)(rng);
  if (a->type() == AttributeProto::INTS && a->ints_size() > 0 && r < 0.5) {
    const int k = static_cast<int>(Pick(rng, a->ints_size()));
    a->set_ints(k, AdversarialInt(rng));
    return absl::StrCat(where, " = ", IntsString(a->ints()));
  }
  if (r < 0.85) {
    a->clear_i();
    a->clear_ints();
    if (a->type() == AttributeProto::INT) {
      a->set_i(AdversarialInt(rng));
      return absl::StrCat(where, " = ", a->i());
    }
    a->set_type(AttributeProto::INTS);
    for (int64_t v : RandomInts(rng)) a->add_ints(v);
    return absl::StrCat(where, " = ", IntsString(a->ints()));
  }
  // Kind confusion: INT <-> INTS, keeping the other field's payload.
  if (a->type() == AttributeProto::INT) {
    a->set_type(AttributeProto::INTS);
    return absl::StrCat(where, " retyped INTS");
  }
  a->set_type(AttributeProto::INT);
  return absl::StrCat(where, " retyped INT");
}

std::string MutateOtherAttr(ModelProto& m, Rng& rng) {
  GraphProto* g = m.mutable_graph();
  if (g->node_size() == 0) return "";
  NodeProto* n = g->mutable_node(static_cast<int>(Pick(rng, g->node_size())));
  const std::string where = absl::StrCat("node ", Show(n->name()), " (", n->op_type(), ")");
  switch (Pick(rng, 5)) {
    case 0: {  // a float attribute
      static const std::vector<float> kFloats = {0.0f,
                                                 -0.0f,
                                                 -1.0f,
                                                 1e-38f,
                                                 1e-45f,
                                                 3.4e38f,
                                                 std::numeric_limits<float>::infinity(),
                                                 -std::numeric_limits<float>::infinity(),
                                                 std::numeric_limits<float>::quiet_NaN()};
      static const std::vector<std::string> kNames = {"epsilon",  "alpha", "beta", "ratio",
                                                      "momentum", "gamma", "min",  "max"};
      AttributeProto* a = n->add_attribute();
      a->set_name(PickOf(rng, kNames));
      a->set_type(AttributeProto::FLOAT);
      a->set_f(PickOf(rng, kFloats));
      return absl::StrCat(where, " float attr ", a->name(), " = ", a->f());
    }
    case 1: {  // a string attribute
      static const std::vector<std::string> kNames = {
          "auto_pad", "mode",      "direction",
          "equation", "reduction", "coordinate_transformation_mode"};
      static const std::vector<std::string> kValues = {
          "SAME_UPPER", "SAME_LOWER", "VALID",     "NOTSET",      "bidirectional",
          "reverse",    "",           "ij,jk->ik", "...ii->...i", "i,i",
          "abc,cd->",   "mean",       "sum",       "none",        "\xff\xfe"};
      AttributeProto* a = n->add_attribute();
      a->set_name(PickOf(rng, kNames));
      a->set_type(AttributeProto::STRING);
      a->set_s(PickOf(rng, kValues));
      return absl::StrCat(where, " string attr ", a->name(), " = ", Show(a->s()));
    }
    case 2: {  // drop an attribute
      if (n->attribute_size() == 0) return "";
      const int k = static_cast<int>(Pick(rng, n->attribute_size()));
      std::string name = n->attribute(k).name();
      n->mutable_attribute()->DeleteSubrange(k, 1);
      return absl::StrCat(where, " attr ", name, " removed");
    }
    case 3: {  // duplicate an attribute with another value
      if (n->attribute_size() == 0) return "";
      AttributeProto* a = n->add_attribute();
      *a = n->attribute(static_cast<int>(Pick(rng, n->attribute_size() - 1)));
      a->set_i(AdversarialInt(rng));
      a->add_ints(AdversarialInt(rng));
      return absl::StrCat(where, " attr ", a->name(), " duplicated");
    }
    default: {  // an attribute whose type says one kind and holds another
      if (n->attribute_size() == 0) return "";
      AttributeProto* a = n->mutable_attribute(static_cast<int>(Pick(rng, n->attribute_size())));
      static const std::vector<AttributeProto::AttributeType> kTypes = {
          AttributeProto::UNDEFINED, AttributeProto::FLOAT,  AttributeProto::INT,
          AttributeProto::STRING,    AttributeProto::TENSOR, AttributeProto::GRAPH,
          AttributeProto::FLOATS,    AttributeProto::INTS,   AttributeProto::STRINGS};
      a->set_type(PickOf(rng, kTypes));
      return absl::StrCat(where, " attr ", a->name(), " retyped ", static_cast<int>(a->type()));
    }
  }
}

// Every tensor shape of the graph's value infos.
std::vector<std::pair<std::string, ::onnx::TypeProto*>> ValueTypes(GraphProto* g) {
  std::vector<std::pair<std::string, ::onnx::TypeProto*>> out;
  for (auto* list : {g->mutable_input(), g->mutable_output(), g->mutable_value_info()}) {
    for (ValueInfoProto& v : *list) out.emplace_back(v.name(), v.mutable_type());
  }
  return out;
}

std::string MutateDims(ModelProto& m, Rng& rng) {
  GraphProto* g = m.mutable_graph();
  if (g->initializer_size() > 0 && Chance(rng, 0.3)) {
    TensorProto* t = g->mutable_initializer(static_cast<int>(Pick(rng, g->initializer_size())));
    const std::string where = absl::StrCat("initializer ", Show(t->name()));
    switch (Pick(rng, 4)) {
      case 0:
        if (t->dims_size() == 0) return "";
        t->set_dims(static_cast<int>(Pick(rng, t->dims_size())), AdversarialInt(rng));
        return absl::StrCat(where, " dims = ", IntsString(t->dims()));
      case 1:
        t->add_dims(AdversarialInt(rng));
        return absl::StrCat(where, " dims = ", IntsString(t->dims()));
      case 2:
        t->clear_dims();
        for (int64_t v : RandomInts(rng)) t->add_dims(v);
        return absl::StrCat(where, " dims = ", IntsString(t->dims()));
      default: {
        static const std::vector<int> kTypes = {0, 1, 2, 6, 7, 8, 9, 10, 11, 14, 16, 17, 9999, -1};
        t->set_data_type(PickOf(rng, kTypes));
        return absl::StrCat(where, " data_type = ", t->data_type());
      }
    }
  }
  auto types = ValueTypes(g);
  if (types.empty()) return "";
  auto [name, type] = types[Pick(rng, types.size())];
  const std::string where = absl::StrCat("value ", Show(name));
  if (!type->has_tensor_type() || Chance(rng, 0.1)) {
    static const std::vector<int> kTypes = {0, 1, 6, 7, 8, 9, 11, 14, 16, 9999, -3};
    type->mutable_tensor_type()->set_elem_type(PickOf(rng, kTypes));
    return absl::StrCat(where, " elem_type = ", type->tensor_type().elem_type());
  }
  TensorShapeProto* shape = type->mutable_tensor_type()->mutable_shape();
  switch (Pick(rng, 6)) {
    case 0:
    case 1: {
      if (shape->dim_size() == 0) return "";
      auto* d = shape->mutable_dim(static_cast<int>(Pick(rng, shape->dim_size())));
      d->set_dim_value(AdversarialInt(rng));
      return absl::StrCat(where, " dim = ", d->dim_value());
    }
    case 2: {
      if (shape->dim_size() == 0) return "";
      auto* d = shape->mutable_dim(static_cast<int>(Pick(rng, shape->dim_size())));
      d->set_dim_param(Chance(rng, 0.5) ? std::string("batch") : AdversarialName(rng));
      return absl::StrCat(where, " dim_param = ", Show(d->dim_param()));
    }
    case 3:
      shape->add_dim()->set_dim_value(AdversarialInt(rng));
      return absl::StrCat(where, " gains a dim");
    case 4:
      if (shape->dim_size() == 0) return "";
      shape->mutable_dim()->RemoveLast();
      return absl::StrCat(where, " loses a dim");
    default:
      if (Chance(rng, 0.5)) {
        type->mutable_tensor_type()->clear_shape();
        return absl::StrCat(where, " shape removed");
      }
      for (auto& d : *shape->mutable_dim()) d.clear_value();
      return absl::StrCat(where, " dims unknown");
  }
}

// Renames `from` to `to` in every place a value name appears.
void RenameValue(GraphProto* g, const std::string& from, const std::string& to) {
  auto fix = [&](std::string* s) {
    if (*s == from) *s = to;
  };
  for (auto& v : *g->mutable_input()) fix(v.mutable_name());
  for (auto& v : *g->mutable_output()) fix(v.mutable_name());
  for (auto& v : *g->mutable_value_info()) fix(v.mutable_name());
  for (auto& t : *g->mutable_initializer()) fix(t.mutable_name());
  for (auto& n : *g->mutable_node()) {
    for (auto& s : *n.mutable_input()) fix(&s);
    for (auto& s : *n.mutable_output()) fix(&s);
  }
}

std::string MutateNames(ModelProto& m, Rng& rng) {
  GraphProto* g = m.mutable_graph();
  const double r = std::uniform_real_distribution<double>(0, 1)(rng);
  if (r < 0.15) {
    g->set_name(AdversarialName(rng));
    return absl::StrCat("graph name = ", Show(g->name()));
  }
  if (r < 0.55 && g->node_size() > 0) {
    NodeProto* n = g->mutable_node(static_cast<int>(Pick(rng, g->node_size())));
    if (Chance(rng, 0.2)) {  // a name another node already has
      n->set_name(g->node(static_cast<int>(Pick(rng, g->node_size()))).name());
    } else {
      n->set_name(AdversarialName(rng));
    }
    return absl::StrCat("node (", n->op_type(), ") name = ", Show(n->name()));
  }
  std::vector<std::string> names = ValueNames(*g);
  if (names.empty()) return "";
  const std::string from = PickOf(rng, names);
  std::string to = Chance(rng, 0.2) ? PickOf(rng, names) : AdversarialName(rng);
  if (to.empty() && Chance(rng, 0.5)) to = "\xff";  // "" means "no input" in ONNX
  RenameValue(g, from, to);
  return absl::StrCat("value ", Show(from), " renamed ", Show(to));
}

std::string MutateOpType(ModelProto& m, Rng& rng) {
  GraphProto* g = m.mutable_graph();
  if (g->node_size() == 0) return "";
  NodeProto* n = g->mutable_node(static_cast<int>(Pick(rng, g->node_size())));
  const std::string old = n->op_type();
  const double r = std::uniform_real_distribution<double>(0, 1)(rng);
  if (r < 0.8) {
    n->set_op_type(PickOf(rng, OpTypes()));
  } else if (r < 0.9) {
    n->set_op_type(AdversarialName(rng));
  } else {
    static const std::vector<std::string> kDomains = {"com.example", "ai.onnx.ml",
                                                      "ai.onnx",     "com.microsoft",
                                                      "\xff",        "ai.onnx.preview.training"};
    n->set_domain(PickOf(rng, kDomains));
    return absl::StrCat("node ", Show(n->name()), " domain = ", Show(n->domain()));
  }
  return absl::StrCat("node ", Show(n->name()), " op_type ", old, " -> ", Show(n->op_type()));
}

std::string MutateEdges(ModelProto& m, Rng& rng) {
  GraphProto* g = m.mutable_graph();
  if (g->node_size() == 0) return "";
  const int ni = static_cast<int>(Pick(rng, g->node_size()));
  NodeProto* n = g->mutable_node(ni);
  const std::string where = absl::StrCat("node ", Show(n->name()), " (", n->op_type(), ")");
  std::vector<std::string> names = ValueNames(*g);
  switch (Pick(rng, 9)) {
    case 0:
      if (n->input_size() == 0) return "";
      n->mutable_input()->DeleteSubrange(static_cast<int>(Pick(rng, n->input_size())), 1);
      return absl::StrCat(where, " drops an input");
    case 1:
      if (n->input_size() == 0) return "";
      n->add_input(n->input(static_cast<int>(Pick(rng, n->input_size()))));
      return absl::StrCat(where, " duplicates an input");
    case 2:
      if (n->input_size() == 0 || names.empty()) return "";
      *n->mutable_input(static_cast<int>(Pick(rng, n->input_size()))) = PickOf(rng, names);
      return absl::StrCat(where, " reads another value");
    case 3:
      n->add_input(Chance(rng, 0.5) ? std::string() : (names.empty() ? "x" : PickOf(rng, names)));
      return absl::StrCat(where, " gains an input");
    case 4:
      if (n->input_size() < 2) return "";
      std::swap(*n->mutable_input(0), *n->mutable_input(n->input_size() - 1));
      return absl::StrCat(where, " swaps inputs");
    case 5:
      if (n->output_size() == 0) return "";
      n->mutable_output()->RemoveLast();
      return absl::StrCat(where, " drops an output");
    case 6:
      n->add_output(Chance(rng, 0.5) ? absl::StrCat("fuzz_out", ni) : std::string());
      return absl::StrCat(where, " gains an output");
    case 7: {  // produce a value another node (or the graph input) already defines
      if (n->output_size() == 0 || names.empty()) return "";
      *n->mutable_output(0) = PickOf(rng, names);
      return absl::StrCat(where, " output renamed to an existing value");
    }
    default: {  // a cycle: read the output of a later node
      if (ni + 1 >= g->node_size() || n->input_size() == 0) return "";
      const NodeProto& later =
          g->node(ni + 1 + static_cast<int>(Pick(rng, g->node_size() - ni - 1)));
      if (later.output_size() == 0) return "";
      *n->mutable_input(static_cast<int>(Pick(rng, n->input_size()))) = later.output(0);
      return absl::StrCat(where, " reads a later node's output");
    }
  }
}

// Tensors holding constants: Constant values, ConstantOfShape fill values
// and initializers.
std::vector<std::pair<std::string, TensorProto*>> ConstantTensors(GraphProto* g) {
  std::vector<std::pair<std::string, TensorProto*>> out;
  for (auto& n : *g->mutable_node()) {
    for (auto& a : *n.mutable_attribute()) {
      if (a.type() == AttributeProto::TENSOR || a.has_t()) {
        out.emplace_back(absl::StrCat("node ", Show(n.name()), " (", n.op_type(), ") ", a.name()),
                         a.mutable_t());
      }
    }
  }
  for (auto& t : *g->mutable_initializer())
    out.emplace_back(absl::StrCat("initializer ", Show(t.name())), &t);
  return out;
}

std::string MutateConstant(ModelProto& m, Rng& rng) {
  auto tensors = ConstantTensors(m.mutable_graph());
  if (tensors.empty()) return "";
  // Mostly Constant/ConstantOfShape payloads (listed first): they feed shape
  // arguments (ConstantOfShape's shape, Reshape, Split, Slice, Expand, ...).
  size_t node_tensors = 0;
  while (node_tensors < tensors.size() &&
         !absl::StartsWith(tensors[node_tensors].first, "initializer")) {
    ++node_tensors;
  }
  const size_t k =
      node_tensors > 0 && Chance(rng, 0.75) ? Pick(rng, node_tensors) : Pick(rng, tensors.size());
  auto [where, t] = tensors[k];
  const double r = std::uniform_real_distribution<double>(0, 1)(rng);
  if (r < 0.55) {  // int64 payload, usually with matching dims
    std::vector<int64_t> v = RandomInts(rng);
    t->clear_float_data();
    t->clear_int32_data();
    t->clear_int64_data();
    t->clear_raw_data();
    t->set_data_type(TensorProto::INT64);
    for (int64_t x : v) t->add_int64_data(x);
    if (Chance(rng, 0.8)) {
      t->clear_dims();
      if (v.size() != 1 || Chance(rng, 0.5)) t->add_dims(static_cast<int64_t>(v.size()));
    }
    return absl::StrCat(where, " = int64 ", IntsString(t->int64_data()), " dims ",
                        IntsString(t->dims()));
  }
  if (r < 0.7) {  // the same payload as raw_data
    if (t->int64_data_size() == 0) return "";
    std::string raw;
    for (int64_t x : t->int64_data()) raw.append(reinterpret_cast<const char*>(&x), sizeof(x));
    if (Chance(rng, 0.3)) raw.resize(raw.size() - 1 - Pick(rng, raw.size()));  // short payload
    t->clear_int64_data();
    t->set_raw_data(raw);
    return absl::StrCat(where, " as raw_data of ", raw.size(), " bytes");
  }
  if (r < 0.85) {  // float payload with non-finite values
    static const std::vector<float> kFloats = {0.0f,
                                               1.0f,
                                               -1.0f,
                                               1e30f,
                                               std::numeric_limits<float>::infinity(),
                                               std::numeric_limits<float>::quiet_NaN()};
    t->clear_int64_data();
    t->clear_raw_data();
    t->clear_float_data();
    t->set_data_type(TensorProto::FLOAT);
    const size_t k = Pick(rng, 4);
    for (size_t i = 0; i < k; ++i) t->add_float_data(PickOf(rng, kFloats));
    return absl::StrCat(where, " = ", k, " floats");
  }
  // dims that disagree with the payload, or a data type that does
  t->clear_dims();
  for (int64_t x : RandomInts(rng)) t->add_dims(x);
  if (Chance(rng, 0.3)) t->set_data_type(static_cast<int>(Pick(rng, 18)));
  return absl::StrCat(where, " dims = ", IntsString(t->dims()), " type ", t->data_type());
}

std::string MutateOpset(ModelProto& m, Rng& rng) {
  static const std::vector<int64_t> kVersions = {0,  1,  5,  6,  7,  9,  11, 12, 13,
                                                 14, 15, 16, 17, 18, 19, 99, -1, int64_t{1} << 40};
  const double r = std::uniform_real_distribution<double>(0, 1)(rng);
  if (r < 0.2) {
    static const std::vector<int64_t> kIr = {0, -1, 1, 3, 7, 8, 9, 99};
    m.set_ir_version(PickOf(rng, kIr));
    return absl::StrCat("ir_version = ", m.ir_version());
  }
  if (r < 0.7 && m.opset_import_size() > 0) {
    auto* o = m.mutable_opset_import(static_cast<int>(Pick(rng, m.opset_import_size())));
    o->set_version(PickOf(rng, kVersions));
    return absl::StrCat("opset ", Show(o->domain()), " = ", o->version());
  }
  if (r < 0.85) {
    auto* o = m.add_opset_import();
    static const std::vector<std::string> kDomains = {"", "ai.onnx", "com.example", "ai.onnx.ml"};
    o->set_domain(PickOf(rng, kDomains));
    o->set_version(PickOf(rng, kVersions));
    return absl::StrCat("extra opset ", Show(o->domain()), " = ", o->version());
  }
  m.clear_opset_import();
  return "opsets removed";
}

std::string MutateStructure(ModelProto& m, Rng& rng) {
  GraphProto* g = m.mutable_graph();
  const double r = std::uniform_real_distribution<double>(0, 1)(rng);
  if (r < 0.2 && g->node_size() > 0) {
    const int i = static_cast<int>(Pick(rng, g->node_size()));
    std::string what = Show(g->node(i).name());
    g->mutable_node()->DeleteSubrange(i, 1);
    return absl::StrCat("node ", what, " removed");
  }
  if (r < 0.35 && g->node_size() > 0) {  // a second producer of the same values
    *g->add_node() = g->node(static_cast<int>(Pick(rng, g->node_size())));
    return absl::StrCat("node ", Show(g->node(g->node_size() - 1).name()), " duplicated");
  }
  if (r < 0.45 && g->node_size() > 1) {
    g->mutable_node()->SwapElements(static_cast<int>(Pick(rng, g->node_size())),
                                    static_cast<int>(Pick(rng, g->node_size())));
    return "two nodes swapped";
  }
  if (r < 0.55) {
    if (g->output_size() == 0) return "";
    if (Chance(rng, 0.5)) {
      g->clear_output();
      return "graph outputs removed";
    }
    *g->add_output() = g->output(static_cast<int>(Pick(rng, g->output_size())));
    return "graph output duplicated";
  }
  if (r < 0.6) {
    g->clear_value_info();
    return "value_info removed";
  }
  // A new node of some type over existing values with adversarial int
  // attributes; its output becomes a graph output half of the time.
  std::vector<std::string> names = ValueNames(*g);
  if (names.empty()) return "";
  NodeProto* n = g->add_node();
  n->set_op_type(PickOf(rng, OpTypes()));
  n->set_name(absl::StrCat("fuzz_node", g->node_size()));
  const size_t inputs = 1 + Pick(rng, 3);
  for (size_t i = 0; i < inputs; ++i) n->add_input(PickOf(rng, names));
  const std::string out = absl::StrCat("fuzz_value", g->node_size());
  n->add_output(out);
  const size_t attrs = Pick(rng, 4);
  for (size_t i = 0; i < attrs; ++i) {
    AttributeProto* a = n->add_attribute();
    a->set_name(PickOf(rng, IntAttrNames()));
    if (Chance(rng, 0.5)) {
      a->set_type(AttributeProto::INT);
      a->set_i(AdversarialInt(rng));
    } else {
      a->set_type(AttributeProto::INTS);
      for (int64_t v : RandomInts(rng)) a->add_ints(v);
    }
  }
  if (Chance(rng, 0.5)) g->add_output()->set_name(out);
  return absl::StrCat("new node ", n->op_type(), " over ",
                      absl::StrJoin(n->input(), ",", [](std::string* o, const std::string& s) {
                        o->append(Show(s));
                      }));
}

void CorruptBytes(std::string& bytes, Rng& rng, std::vector<std::string>* log) {
  const size_t edits = 1 + Pick(rng, 8);
  for (size_t e = 0; e < edits && !bytes.empty(); ++e) {
    const size_t at = Pick(rng, bytes.size());
    switch (Pick(rng, 5)) {
      case 0:
        bytes[at] = static_cast<char>(bytes[at] ^ (1 << Pick(rng, 8)));
        break;
      case 1: {
        static const std::vector<char> kBytes = {'\0', '\x7f', '\x80', '\xff', '\x01'};
        bytes[at] = PickOf(rng, kBytes);
        break;
      }
      case 2:
        bytes.insert(bytes.begin() + static_cast<std::ptrdiff_t>(at),
                     static_cast<char>(rng() & 0xff));
        break;
      case 3:
        bytes.erase(at, 1);
        break;
      default:
        bytes.resize(at);
        break;
    }
  }
  log->push_back(absl::StrCat("bytes corrupted (", edits, " edits), ", bytes.size(), " bytes"));
}

}  // namespace

Rng IterationRng(uint64_t seed, std::string_view target, int64_t iteration) {
  uint64_t h = SplitMix64(seed);
  for (char c : target) h = SplitMix64(h ^ static_cast<unsigned char>(c));
  h = SplitMix64(h ^ static_cast<uint64_t>(iteration));
  return Rng(h);
}

const std::vector<int64_t>& AdversarialInts() {
  static const auto* v = new std::vector<int64_t>{0,
                                                  -1,
                                                  -2,
                                                  -7,
                                                  1,
                                                  2,
                                                  3,
                                                  7,
                                                  99,
                                                  65537,
                                                  1000000000,
                                                  2147483647,
                                                  int64_t{2147483648},
                                                  int64_t{4294967296},
                                                  int64_t{1} << 62,
                                                  kInt64Max,
                                                  kInt64Min,
                                                  -int64_t{2147483648},
                                                  -(int64_t{1} << 62)};
  return *v;
}

const std::vector<std::string>& AdversarialNames() {
  static const auto* v = new std::vector<std::string>{"",
                                                      "\xff",
                                                      "\xc3\x28",
                                                      "\xed\xa0\x80",
                                                      "\xf4\x90\x80\x80",
                                                      "\xc0\xaf",
                                                      "ok\xe2\x82",
                                                      std::string("a\0b", 3),
                                                      "\n",
                                                      "\t\r",
                                                      "\x01\x1f",
                                                      "\x7f",
                                                      "\"",
                                                      "\\",
                                                      "\\\"",
                                                      "a b",
                                                      "#comment",
                                                      "{",
                                                      "}",
                                                      "->",
                                                      "(x)",
                                                      ",",
                                                      "=",
                                                      "[1,2]",
                                                      "f[1.0]",
                                                      "x",
                                                      "\xc3\xa9t\xc3\xa9",
                                                      "\xe2\x80\xae",
                                                      "graph",
                                                      "tensor",
                                                      "op",
                                                      "output",
                                                      "phase=backward",
                                                      "loss",
                                                      "labels",
                                                      "w.grad",
                                                      "w.grad.allreduce",
                                                      std::string(5000, 'a')};
  return *v;
}

std::string MutateOnnx(ModelProto& model, Rng& rng, std::vector<std::string>* log) {
  using Mutator = std::string (*)(ModelProto&, Rng&);
  static const std::vector<std::pair<Mutator, int>> kMutators = {
      {MutateIntAttr, 30},  {MutateOtherAttr, 6}, {MutateDims, 12},
      {MutateNames, 10},    {MutateOpType, 9},    {MutateEdges, 8},
      {MutateConstant, 14}, {MutateOpset, 3},     {MutateStructure, 8}};
  static const int kTotal = [] {
    int t = 0;
    for (const auto& [m, w] : kMutators) t += w;
    return t;
  }();
  int count = 1;
  while (count < 6 && Chance(rng, 0.45)) ++count;
  for (int done = 0, tries = 0; done < count && tries < 4 * count; ++tries) {
    int x = static_cast<int>(Pick(rng, kTotal));
    Mutator mutator = kMutators.back().first;
    for (const auto& [m, w] : kMutators) {
      if (x < w) {
        mutator = m;
        break;
      }
      x -= w;
    }
    std::string what = mutator(model, rng);
    if (!what.empty()) {
      log->push_back(std::move(what));
      ++done;
    }
  }
  std::string bytes;
  model.SerializeToString(&bytes);
  if (Chance(rng, 0.06)) CorruptBytes(bytes, rng, log);
  return bytes;
}

std::vector<ModelProto> OnnxReductions(const ModelProto& m) {
  std::vector<ModelProto> out;
  const GraphProto& g = m.graph();
  auto with = [&](const std::function<void(GraphProto*)>& f) {
    out.push_back(m);
    f(out.back().mutable_graph());
  };
  // Big steps first: keep only a prefix of the nodes (ONNX shape inference
  // and the importer walk nodes in order, so a prefix keeps the failing node
  // and its inputs), then drop every value no node mentions.
  const int n = g.node_size();
  for (int keep : {n / 8, n / 4, n / 2, 3 * n / 4, 7 * n / 8, n - 1}) {
    if (keep <= 0 || keep >= n || (keep == n - 1 && n < 8)) continue;
    with([keep](GraphProto* x) { x->mutable_node()->DeleteSubrange(keep, x->node_size() - keep); });
  }
  {
    std::set<std::string> used;
    for (const NodeProto& node : g.node()) {
      used.insert(node.input().begin(), node.input().end());
      used.insert(node.output().begin(), node.output().end());
    }
    ModelProto pruned = m;
    GraphProto* x = pruned.mutable_graph();
    auto prune = [&](auto* list) {
      for (int i = list->size() - 1; i >= 0; --i) {
        if (used.count(list->Get(i).name()) == 0) list->DeleteSubrange(i, 1);
      }
    };
    prune(x->mutable_input());
    prune(x->mutable_initializer());
    prune(x->mutable_value_info());
    prune(x->mutable_output());
    if (pruned.SerializeAsString() != m.SerializeAsString()) out.push_back(std::move(pruned));
  }
  if (g.value_info_size() > 0) with([](GraphProto* x) { x->clear_value_info(); });
  // Nodes last-first: stripping the tail keeps the failing node's inputs.
  for (int i = g.node_size() - 1; i >= 0; --i) {
    with([i](GraphProto* x) { x->mutable_node()->DeleteSubrange(i, 1); });
  }
  // Bypass a node: drop it and let its consumers read its first input.
  for (int i = g.node_size() - 1; i >= 0; --i) {
    const NodeProto& n = g.node(i);
    if (n.input_size() == 0 || n.input(0).empty() || n.output_size() == 0) continue;
    with([i](GraphProto* x) {
      const NodeProto victim = x->node(i);
      x->mutable_node()->DeleteSubrange(i, 1);
      for (const std::string& out : victim.output()) {
        if (!out.empty()) RenameValue(x, out, victim.input(0));
      }
    });
  }
  for (int i = 0; i < g.node_size(); ++i) {
    if (g.node(i).attribute_size() > 1)
      with([i](GraphProto* x) { x->mutable_node(i)->clear_attribute(); });
  }
  for (int i = g.initializer_size() - 1; i >= 0; --i) {
    with([i](GraphProto* x) { x->mutable_initializer()->DeleteSubrange(i, 1); });
  }
  for (int i = g.input_size() - 1; i >= 0; --i) {
    with([i](GraphProto* x) { x->mutable_input()->DeleteSubrange(i, 1); });
  }
  for (int i = g.output_size() - 1; i >= 0; --i) {
    with([i](GraphProto* x) { x->mutable_output()->DeleteSubrange(i, 1); });
  }
  for (int i = 0; i < g.node_size(); ++i) {
    for (int a = g.node(i).attribute_size() - 1; a >= 0; --a) {
      with(
          [i, a](GraphProto* x) { x->mutable_node(i)->mutable_attribute()->DeleteSubrange(a, 1); });
    }
  }
  for (int i = 0; i < g.node_size(); ++i) {
    if (!g.node(i).name().empty()) with([i](GraphProto* x) { x->mutable_node(i)->clear_name(); });
    if (!g.node(i).doc_string().empty()) {
      with([i](GraphProto* x) { x->mutable_node(i)->clear_doc_string(); });
    }
  }
  for (int i = m.opset_import_size() - 1; i >= 0; --i) {
    out.push_back(m);
    out.back().mutable_opset_import()->DeleteSubrange(i, 1);
  }
  if (!m.producer_name().empty() || !m.producer_version().empty() || !m.doc_string().empty()) {
    out.push_back(m);
    out.back().clear_producer_name();
    out.back().clear_producer_version();
    out.back().clear_doc_string();
  }
  return out;
}

// ---- ClusterSpec JSON --------------------------------------------------------

std::string JsonEdit::Describe() const {
  switch (kind) {
    case Kind::kSet:
      return absl::StrCat(pointer, " = ",
                          value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    case Kind::kRemove:
      return absl::StrCat(pointer, " removed");
    case Kind::kRawText:
      if (byte < 0) return absl::StrCat("text byte @", offset, " deleted");
      return absl::StrCat("text byte @", offset, insert ? " inserted " : " = ", byte);
    case Kind::kNest:
      return absl::StrCat(pointer.empty() ? "the document" : pointer, " nested ", levels,
                          " levels deep");
  }
  return "";
}

namespace {

void Leaves(const nlohmann::json& j, const std::string& prefix, std::vector<std::string>* out) {
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) {
      out->push_back(absl::StrCat(prefix, "/", k));
      Leaves(v, absl::StrCat(prefix, "/", k), out);
    }
  }
}

nlohmann::json AdversarialNumber(Rng& rng, bool integer) {
  static const std::vector<double> kDoubles = {0.0,
                                               -0.0,
                                               -1.0,
                                               1e-300,
                                               1e-308,
                                               4.9e-324,
                                               1e308,
                                               1.7976931348623157e308,
                                               -1e308,
                                               0.5,
                                               1e-9,
                                               1e30,
                                               3.0,
                                               65537.0,
                                               9.2233720368547758e18};
  static const std::vector<int64_t> kInts = {0,
                                             -1,
                                             1,
                                             2,
                                             3,
                                             7,
                                             65537,
                                             2147483647,
                                             int64_t{2147483648},
                                             int64_t{4294967296},
                                             kInt64Max,
                                             kInt64Min,
                                             -int64_t{2147483648}};
  if (integer || Chance(rng, 0.25)) {
    if (Chance(rng, 0.1)) return nlohmann::json(std::numeric_limits<uint64_t>::max());
    return nlohmann::json(PickOf(rng, kInts));
  }
  return nlohmann::json(PickOf(rng, kDoubles));
}

nlohmann::json WrongType(Rng& rng) {
  switch (Pick(rng, 9)) {
    case 0:
      return "NaN";
    case 1:
      return "inf";
    case 2:
      return "1e3";
    case 3:
      return nullptr;
    case 4:
      return true;
    case 5:
      return nlohmann::json::array();
    case 6:
      return nlohmann::json::object();
    case 7:
      return nlohmann::json::array({1, 2});
    default:
      return 1.5;
  }
}

JsonEdit RandomEdit(const nlohmann::json& seed, const std::vector<std::string>& paths, Rng& rng) {
  JsonEdit e;
  const double r = std::uniform_real_distribution<double>(0, 1)(rng);
  if (r < 0.08) {
    e.kind = JsonEdit::Kind::kRawText;
    e.offset = rng();
    const double b = std::uniform_real_distribution<double>(0, 1)(rng);
    e.byte = b < 0.3 ? -1 : static_cast<int>(b < 0.6 ? 0xff : rng() & 0xff);
    e.insert = Chance(rng, 0.5);
    return e;
  }
  static const std::vector<std::string> kExtra = {"/num_ranks",
                                                  "/cpu",
                                                  "/cpu/cores_per_node",
                                                  "/cpu/threads_per_rank",
                                                  "/cpu/comm_threads_per_rank",
                                                  "/intra_node/island_size",
                                                  "/intra_node/cross_island_bandwidth",
                                                  "/intra_node/cross_island_latency_s",
                                                  "/unknown_field"};
  e.pointer = Chance(rng, 0.85) ? PickOf(rng, paths) : PickOf(rng, kExtra);
  nlohmann::json::json_pointer ptr(e.pointer);
  const nlohmann::json* old = seed.contains(ptr) ? &seed.at(ptr) : nullptr;
  if (r < 0.16) {
    e.kind = JsonEdit::Kind::kRemove;
    return e;
  }
  if (r < 0.22) {
    e.value = WrongType(rng);
    return e;
  }
  if (old != nullptr && old->is_string()) {
    static const std::vector<std::string> kStrings = {"nvlink_switch",
                                                      "nvlink_islands",
                                                      "pcie",
                                                      "loopback",
                                                      "",
                                                      "cpu-1t",
                                                      std::string("nul\0in", 6),
                                                      "\"quoted\"",
                                                      "\n",
                                                      "\xc3\xa9",
                                                      std::string(5000, 'k')};
    e.value = PickOf(rng, kStrings);
    return e;
  }
  if (old != nullptr && old->is_object()) {
    e.value = Chance(rng, 0.5) ? nlohmann::json::object() : WrongType(rng);
    return e;
  }
  const bool integer = old == nullptr || old->is_number_integer();
  if (old != nullptr && old->is_number() && r < 0.6) {
    // Plausible but extreme: the seed's value scaled by 10^k (or nudged), so
    // that mutants pass validation and reach the cost model near its bounds.
    const double v = old->get<double>();
    const double k = std::uniform_int_distribution<int>(-12, 12)(rng) +
                     (Chance(rng, 0.3) ? std::uniform_real_distribution<double>(0, 1)(rng) : 0.0);
    const double scaled = Chance(rng, 0.15) ? std::nextafter(v, Chance(rng, 0.5) ? 0.0 : 1e308)
                                            : v * std::pow(10.0, k);
    if (integer) {
      e.value = scaled >= 9.2e18 ? kInt64Max : static_cast<int64_t>(std::max(scaled, -9.2e18));
    } else {
      e.value = scaled;
    }
    return e;
  }
  e.value = AdversarialNumber(rng, integer);
  return e;
}

}  // namespace

ClusterMutant MutateClusterJson(const nlohmann::json& seed, Rng& rng) {
  std::vector<std::string> paths;
  Leaves(seed, "", &paths);
  ClusterMutant m;
  if (paths.empty()) return m;
  if (Chance(rng, 0.1)) {  // a cluster far too large to enumerate
    const int64_t big = Chance(rng, 0.5) ? 65537 : 2147483647;
    m.edits.push_back({.kind = JsonEdit::Kind::kSet, .pointer = "/num_nodes", .value = big});
    m.edits.push_back({.kind = JsonEdit::Kind::kSet, .pointer = "/devices_per_node", .value = big});
    if (Chance(rng, 0.5)) {
      m.edits.push_back({.kind = JsonEdit::Kind::kSet,
                         .pointer = "/num_ranks",
                         .value = Chance(rng, 0.5) ? big : int64_t{4294967296}});
    } else {
      m.edits.push_back({.kind = JsonEdit::Kind::kRemove, .pointer = "/num_ranks"});
    }
  }
  int count = 1;
  while (count < 5 && Chance(rng, 0.4)) ++count;
  for (int i = 0; i < count; ++i) m.edits.push_back(RandomEdit(seed, paths, rng));
  return m;
}

std::string ApplyClusterMutant(const nlohmann::json& seed, const ClusterMutant& m) {
  return ApplyJsonMutant(seed, m);
}

namespace {

// Every object member and array element of `j` (as JSON pointers) and every
// string in it.
void AllPaths(const nlohmann::json& j, const std::string& prefix, std::vector<std::string>* paths,
              std::vector<std::string>* strings) {
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) {
      paths->push_back(absl::StrCat(prefix, "/", k));
      AllPaths(v, absl::StrCat(prefix, "/", k), paths, strings);
    }
  } else if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i) {
      paths->push_back(absl::StrCat(prefix, "/", i));
      AllPaths(j[i], absl::StrCat(prefix, "/", i), paths, strings);
    }
  } else if (j.is_string()) {
    strings->push_back(j.get<std::string>());
  }
}

// Stands in for a nested value until the document is text (a tree 100,000
// levels deep cannot be dumped by a recursive serializer).
constexpr char kNestSentinel[] = "\x01braid-fuzz-nest\x01";

}  // namespace

JsonMutant MutateJsonDocument(const nlohmann::json& seed, Rng& rng,
                              const std::vector<std::string>& droppable) {
  std::vector<std::string> paths, strings;
  AllPaths(seed, "", &paths, &strings);
  std::vector<std::string> drop;
  for (const std::string& p : paths) {
    for (const std::string& prefix : droppable) {
      if (absl::StartsWith(p, prefix + "/")) drop.push_back(p);
    }
  }
  JsonMutant m;
  if (paths.empty()) return m;
  if (Chance(rng, 0.05)) {
    static const std::vector<int64_t> kLevels = {63, 64, 65, 1000, 100000};
    m.edits.push_back({.kind = JsonEdit::Kind::kNest,
                       .pointer = Chance(rng, 0.3) ? std::string() : PickOf(rng, paths),
                       .levels = PickOf(rng, kLevels)});
  }
  int count = 1;
  while (count < 5 && Chance(rng, 0.4)) ++count;
  if (!drop.empty() && Chance(rng, 0.35)) {
    // Entries dropped where the document stays one the reader accepts, so
    // that the stages behind it see the mutant.
    for (int i = 0; i < count; ++i) {
      m.edits.push_back({.kind = JsonEdit::Kind::kRemove, .pointer = PickOf(rng, drop)});
    }
    return m;
  }
  for (int i = 0; i < count; ++i) {
    if (!strings.empty() && Chance(rng, 0.25)) {
      m.edits.push_back({.kind = JsonEdit::Kind::kSet,
                         .pointer = PickOf(rng, paths),
                         .value = PickOf(rng, strings)});
    } else {
      m.edits.push_back(RandomEdit(seed, paths, rng));
    }
  }
  return m;
}

std::string ApplyJsonMutant(const nlohmann::json& seed, const JsonMutant& m) {
  nlohmann::json j = seed;
  int64_t wrap_levels = 0, nest_levels = 0;
  for (const JsonEdit& e : m.edits) {
    if (e.kind == JsonEdit::Kind::kRawText) continue;
    if (e.kind == JsonEdit::Kind::kNest && e.pointer.empty()) {
      wrap_levels = e.levels;
      continue;
    }
    try {
      nlohmann::json::json_pointer ptr(e.pointer);
      if (e.kind == JsonEdit::Kind::kRemove) {
        if (j.contains(ptr)) {
          nlohmann::json& parent = j[ptr.parent_pointer()];
          if (parent.is_array()) {
            parent.erase(static_cast<size_t>(std::stoul(ptr.back())));
          } else {
            parent.erase(ptr.back());
          }
        }
      } else if (e.kind == JsonEdit::Kind::kNest) {
        j[ptr] = kNestSentinel;
        nest_levels = e.levels;
      } else {
        j[ptr] = e.value;
      }
    } catch (const std::exception&) {
      // The parent is not an object any more (an earlier edit replaced it),
      // or an array index is out of range.
    }
  }
  std::string text = j.dump(2);
  if (nest_levels > 0) {
    const std::string sentinel = nlohmann::json(kNestSentinel).dump();
    if (const size_t at = text.find(sentinel); at != std::string::npos) {
      const size_t n = static_cast<size_t>(nest_levels);
      text.replace(at, sentinel.size(), std::string(n, '[') + "0" + std::string(n, ']'));
    }
  }
  for (const JsonEdit& e : m.edits) {
    if (e.kind != JsonEdit::Kind::kRawText || text.empty()) continue;
    const size_t at = e.offset % text.size();
    if (e.byte < 0) {
      text.erase(at, 1);
    } else if (e.insert) {
      text.insert(text.begin() + static_cast<std::ptrdiff_t>(at), static_cast<char>(e.byte));
    } else {
      text[at] = static_cast<char>(e.byte);
    }
  }
  if (wrap_levels > 0) {
    std::string wrapped;
    wrapped.reserve(text.size() + static_cast<size_t>(wrap_levels) * 10);
    for (int64_t i = 0; i < wrap_levels; ++i) wrapped += "{\"plan\":";
    wrapped += text;
    wrapped.append(static_cast<size_t>(wrap_levels), '}');
    text = std::move(wrapped);
  }
  return text;
}

}  // namespace braid::fuzz
