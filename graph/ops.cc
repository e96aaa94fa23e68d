// Op categories, fusibility and analytic costs. The conventions are listed in
// graph/ops.h; the constants below are the ones documented there.
#include "graph/ops.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"

namespace braid::graph {
namespace {

constexpr double kTranscendentalFlops = 4;
constexpr double kNormFlops = 5;
constexpr double kSoftmaxFlops = 8;
constexpr double kSoftmaxGradFlops = 4;
constexpr double kLogSoftmaxGradFlops = 7;
constexpr double kLossGradFlops = 6;
constexpr double kSgdMomentumFlops = 4;
constexpr double kAdamFlops = 12;

using C = OpCategory;

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Forward elementwise types with their FLOPs per output element.
const std::map<std::string, double, std::less<>>& ElementwiseTable() {
  static const auto* table = [] {
    auto* t = new std::map<std::string, double, std::less<>>;
    auto set = [t](std::initializer_list<const char*> types, double flops) {
      for (const char* n : types) (*t)[n] = flops;
    };
    set({"Add", "Sub", "Mul", "Div", "Neg", "Abs", "Relu", "LeakyRelu", "PRelu", "ThresholdedRelu",
         "Clip", "Sqrt", "Reciprocal", "Min", "Max", "Sum", "Mean", "Where", "Equal", "Less",
         "Greater", "LessOrEqual", "GreaterOrEqual", "Not", "And", "Or", "Xor", "Cast", "CastLike",
         "Sign", "Floor", "Ceil", "Round", "Mod", "IsNaN", "IsInf", "Dropout", "Trilu"},
        1);
    set({"Exp", "Log", "Tanh", "Sigmoid", "Erf", "Softplus", "Pow", "Sin", "Cos", "Tan", "Asin",
         "Acos", "Atan", "Sinh", "Cosh", "Elu", "Selu", "Celu"},
        kTranscendentalFlops);
    set({"Gelu", "Mish"}, 2 * kTranscendentalFlops);
    set({"HardSigmoid", "Softsign"}, 3);
    set({"HardSwish"}, 4);
    return t;
  }();
  return *table;
}

// Elementwise types taking any number of inputs.
const std::set<std::string, std::less<>>& VariadicTypes() {
  static const auto* s = new std::set<std::string, std::less<>>{"Sum", "Mean", "Min", "Max"};
  return *s;
}

const std::map<std::string, OpCategory, std::less<>>& CategoryTable() {
  static const auto* table = [] {
    auto* t = new std::map<std::string, OpCategory, std::less<>>;
    for (const auto& [name, flops] : ElementwiseTable()) (*t)[name] = C::kElementwise;
    for (const char* n : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
                          "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum",
                          "ReduceLogSumExp", "GlobalAveragePool", "GlobalMaxPool", "ArgMax",
                          "ArgMin", "CumSum", "ReduceSumGrad", "ReduceMeanGrad", "ReduceMaxGrad",
                          "ReduceMinGrad", "GlobalAveragePoolGrad", "GlobalMaxPoolGrad",
                          "TileGrad"}) {
      (*t)[n] = C::kReduction;
    }
    for (const char* n : {"MatMul", "Gemm", "Einsum"}) (*t)[n] = C::kMatMul;
    for (const char* n : {"Conv", "ConvTranspose", "ConvGradData", "ConvGradFilter",
                          "ConvTransposeGradData", "ConvTransposeGradFilter"}) {
      (*t)[n] = C::kConv;
    }
    for (const char* n :
         {"MaxPool", "AveragePool", "LpPool", "MaxPoolGrad", "AveragePoolGrad", "LpPoolGrad"}) {
      (*t)[n] = C::kPool;
    }
    for (const char* n : {"BatchNormalization", "LayerNormalization", "InstanceNormalization",
                          "GroupNormalization", "BatchNormalizationGrad", "LayerNormalizationGrad",
                          "InstanceNormalizationGrad", "GroupNormalizationGrad"}) {
      (*t)[n] = C::kNormalization;
    }
    for (const char* n : {"Softmax", "LogSoftmax", "SoftmaxGrad", "LogSoftmaxGrad"}) {
      (*t)[n] = C::kSoftmax;
    }
    for (const char* n :
         {"Reshape", "Transpose", "Concat", "Split", "Slice", "Squeeze", "Unsqueeze", "Expand",
          "Pad", "Tile", "Flatten", "Identity", "Range", "ConstantOfShape", "Constant", "Shape",
          "Size", "DepthToSpace", "SpaceToDepth"}) {
      (*t)[n] = C::kDataMovement;
    }
    for (const char* n : {"Gather", "GatherElements", "GatherND", "ScatterElements", "ScatterND",
                          "OneHot", "GatherGrad", "GatherElementsGrad", "GatherNDGrad"}) {
      (*t)[n] = C::kGather;
    }
    for (const char* n : {"LSTM", "GRU", "RNN", "LSTMGrad", "GRUGrad", "RNNGrad"}) {
      (*t)[n] = C::kRecurrent;
    }
    for (const char* n : {"SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss",
                          "SoftmaxCrossEntropyLossGrad", "NegativeLogLikelihoodLossGrad"}) {
      (*t)[n] = C::kLoss;
    }
    for (const char* n :
         {"AllReduce", "AllGather", "ReduceScatter", "Broadcast", "AllToAll", "Send", "Recv"}) {
      (*t)[n] = C::kCollective;
    }
    for (const char* n : {"SgdMomentumUpdate", "AdamUpdate"}) (*t)[n] = C::kUpdate;
    for (const char* n : {"If", "Loop", "Scan"}) (*t)[n] = C::kControlFlow;
    // Gradients of binary/variadic elementwise ops emitted by the builder.
    for (const char* n : {"DivGrad", "PowGrad", "MinGrad", "MaxGrad", "WhereGrad", "MeanGrad"}) {
      (*t)[n] = C::kElementwise;
    }
    return t;
  }();
  return *table;
}

// "<Elementwise>Grad" -> "<Elementwise>", or "" when `type` is not one.
std::string_view ElementwiseGradBase(std::string_view type) {
  if (!EndsWith(type, "Grad")) return {};
  std::string_view base = type.substr(0, type.size() - 4);
  if (ElementwiseTable().count(base) == 0) return {};
  return base;
}

int64_t Elements(const Graph& g, TensorId t) { return g.tensor(t).NumElements(); }

const std::vector<int64_t>& Shape(const Graph& g, TensorId t) { return g.tensor(t).shape; }

int64_t Product(const std::vector<int64_t>& v, size_t from = 0) {
  int64_t p = 1;
  for (size_t i = from; i < v.size(); ++i) p *= v[i];
  return p;
}

double MatMulFlops(const Graph& g, const Op& op) {
  if (op.inputs.size() < 2 || op.outputs.empty()) return 0;
  const auto& a = Shape(g, op.inputs[0]);
  if (a.empty()) return 0;
  int64_t k = a.back();
  if (a.size() >= 2 && op.GetInt("transA", 0) != 0) k = a[a.size() - 2];
  double flops = 2.0 * static_cast<double>(Elements(g, op.outputs[0])) * static_cast<double>(k);
  if (op.type == "Gemm" && op.inputs.size() >= 3) flops += Elements(g, op.outputs[0]);
  return flops;
}

// 2 * (elements of the tensor that iterates the output positions) * (weight
// elements per output channel) — shared by all conv forms.
double ConvCore(const Graph& g, TensorId iter, TensorId weight) {
  const auto& w = Shape(g, weight);
  if (w.size() < 2) return 0;
  return 2.0 * static_cast<double>(Elements(g, iter)) * static_cast<double>(Product(w, 1));
}

double ConvFlops(const Graph& g, const Op& op) {
  if (op.inputs.size() < 2 || op.outputs.empty()) return 0;
  if (op.type == "Conv") {
    double f = ConvCore(g, op.outputs[0], op.inputs[1]);
    if (op.inputs.size() >= 3) f += Elements(g, op.outputs[0]);
    return f;
  }
  if (op.type == "ConvTranspose") {
    double f = ConvCore(g, op.inputs[0], op.inputs[1]);
    if (op.inputs.size() >= 3) f += Elements(g, op.outputs[0]);
    return f;
  }
  if (op.type == "ConvGradData") return ConvCore(g, op.inputs[0], op.inputs[1]);     // (dY, W)
  if (op.type == "ConvGradFilter") return ConvCore(g, op.inputs[1], op.outputs[0]);  // (X, dY)->dW
  if (op.type == "ConvTransposeGradData") return ConvCore(g, op.outputs[0], op.inputs[1]);  // dX
  if (op.type == "ConvTransposeGradFilter") return ConvCore(g, op.inputs[0], op.outputs[0]);
  return 0;
}

double PoolFlops(const Graph& g, const Op& op) {
  if (op.inputs.empty() || op.outputs.empty()) return 0;
  const std::vector<int64_t> kernel = op.GetInts("kernel_shape");
  // Forward ops iterate their output; Grad ops iterate dY (their first input).
  const TensorId iter = EndsWith(op.type, "Grad") ? op.inputs[0] : op.outputs[0];
  if (kernel.empty()) return static_cast<double>(Elements(g, op.inputs[0]));
  return static_cast<double>(Elements(g, iter)) * static_cast<double>(Product(kernel));
}

double RecurrentFlops(const Graph& g, const Op& op) {
  if (op.inputs.size() < 3) return 0;
  const auto& w = Shape(g, op.inputs[1]);
  const auto& r = Shape(g, op.inputs[2]);
  if (w.size() != 3 || r.size() != 3 || w[2] == 0) return 0;
  const double dirs = static_cast<double>(w[0]);
  const double input = static_cast<double>(w[2]);
  const double hidden = static_cast<double>(r[2]);
  const double rows = static_cast<double>(Elements(g, op.inputs[0])) / input;  // seq*batch
  const std::string_view base = EndsWith(op.type, "Grad")
                                    ? std::string_view(op.type).substr(0, op.type.size() - 4)
                                    : std::string_view(op.type);
  double per_row = 0;
  if (base == "LSTM") per_row = 2 * (input + hidden) * 4 * hidden + 32 * hidden;
  if (base == "GRU") per_row = 2 * (input + hidden) * 3 * hidden + 23 * hidden;
  if (base == "RNN") per_row = 2 * (input + hidden) * hidden + 6 * hidden;
  const double fwd = dirs * rows * per_row;
  return base == op.type ? fwd : 2 * fwd;
}

double ElementwiseFlops(const Graph& g, const Op& op) {
  if (op.outputs.empty()) return 0;
  const double out = static_cast<double>(Elements(g, op.outputs[0]));
  if (op.type == "MeanGrad") return 2 * out;
  if (std::string_view base = ElementwiseGradBase(op.type); !base.empty()) {
    return 2 * ElementwiseTable().find(base)->second * out;
  }
  auto it = ElementwiseTable().find(op.type);
  if (it == ElementwiseTable().end()) return 0;
  if (VariadicTypes().count(op.type) != 0) {
    return std::max<double>(1, static_cast<double>(op.inputs.size()) - 1) * out;
  }
  return it->second * out;
}

// The parsed form of an Einsum equation: one term per input and the output,
// each a string of index letters where '.' stands for the ellipsis.
struct EinsumTerms {
  std::vector<std::string> inputs;
  std::string output;
};

absl::StatusOr<EinsumTerms> ParseEinsum(std::string_view equation) {
  std::string eq;
  for (char c : equation) {
    if (c != ' ') eq.push_back(c);
  }
  auto compact = [](std::string term) -> absl::StatusOr<std::string> {
    std::string out;
    for (size_t i = 0; i < term.size(); ++i) {
      if (term.compare(i, 3, "...") == 0) {
        out.push_back('.');
        i += 2;
      } else if (std::isalpha(static_cast<unsigned char>(term[i]))) {
        out.push_back(term[i]);
      } else {
        return absl::InvalidArgumentError(absl::StrCat("bad Einsum term '", term, "'"));
      }
    }
    return out;
  };
  EinsumTerms terms;
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  size_t start = 0;
  while (true) {
    const size_t comma = lhs.find(',', start);
    auto term =
        compact(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (!term.ok()) return term.status();
    terms.inputs.push_back(*term);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (arrow != std::string::npos) {
    auto out = compact(eq.substr(arrow + 2));
    if (!out.ok()) return out.status();
    terms.output = *out;
  } else {
    // Implicit output: ellipsis first, then letters used exactly once, sorted.
    std::map<char, int> count;
    bool ellipsis = false;
    for (const auto& t : terms.inputs) {
      for (char c : t) {
        if (c == '.')
          ellipsis = true;
        else
          ++count[c];
      }
    }
    if (ellipsis) terms.output.push_back('.');
    for (const auto& [c, n] : count) {
      if (n == 1) terms.output.push_back(c);
    }
  }
  return terms;
}

// Letter sizes and the broadcast ellipsis shape of an Einsum.
struct EinsumSizes {
  std::map<char, int64_t> letters;
  std::vector<int64_t> ellipsis;
};

absl::StatusOr<EinsumSizes> EinsumBind(const EinsumTerms& terms,
                                       const std::vector<std::vector<int64_t>>& shapes) {
  if (terms.inputs.size() != shapes.size()) {
    return absl::InvalidArgumentError(absl::StrCat("Einsum equation has ", terms.inputs.size(),
                                                   " terms but the op has ", shapes.size(),
                                                   " inputs"));
  }
  EinsumSizes sizes;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const std::string& term = terms.inputs[i];
    const auto& shape = shapes[i];
    const bool has_ellipsis = term.find('.') != std::string::npos;
    const int64_t letters = static_cast<int64_t>(term.size()) - (has_ellipsis ? 1 : 0);
    const int64_t ell_rank = static_cast<int64_t>(shape.size()) - letters;
    if (ell_rank < 0 || (!has_ellipsis && ell_rank != 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("Einsum term '", term, "' does not match shape ", ShapeString(shape)));
    }
    size_t dim = 0;
    for (char c : term) {
      if (c == '.') {
        std::vector<int64_t> ell(shape.begin() + dim, shape.begin() + dim + ell_rank);
        // Right-aligned numpy broadcast with what was seen so far.
        std::vector<int64_t>& acc = sizes.ellipsis;
        if (ell.size() > acc.size()) acc.insert(acc.begin(), ell.size() - acc.size(), 1);
        for (size_t k = 0; k < ell.size(); ++k) {
          int64_t& a = acc[acc.size() - ell.size() + k];
          if (a == 1) a = ell[k];
        }
        dim += ell_rank;
        continue;
      }
      auto [it, inserted] = sizes.letters.emplace(c, shape[dim]);
      if (!inserted && it->second != shape[dim] && it->second == 1) it->second = shape[dim];
      ++dim;
    }
  }
  return sizes;
}

double EinsumFlops(const Graph& g, const Op& op) {
  auto terms = ParseEinsum(op.GetString("equation", ""));
  if (!terms.ok()) return 0;
  std::vector<std::vector<int64_t>> shapes;
  for (TensorId t : op.inputs) shapes.push_back(Shape(g, t));
  auto sizes = EinsumBind(*terms, shapes);
  if (!sizes.ok()) return 0;
  double all = static_cast<double>(Product(sizes->ellipsis));
  bool summed = false;
  for (const auto& [c, n] : sizes->letters) {
    all *= static_cast<double>(n);
    if (terms->output.find(c) == std::string::npos) summed = true;
  }
  const double per_term = static_cast<double>(op.inputs.size()) - 1 + (summed ? 1 : 0);
  return all * per_term;
}

double ReductionFlops(const Graph& g, const Op& op) {
  if (op.inputs.empty() || op.outputs.empty()) return 0;
  if (op.type == "ReduceSumGrad") return 0;
  if (op.type == "ReduceMeanGrad" || op.type == "ReduceMaxGrad" || op.type == "ReduceMinGrad" ||
      op.type == "GlobalAveragePoolGrad" || op.type == "GlobalMaxPoolGrad") {
    return static_cast<double>(Elements(g, op.outputs[0]));
  }
  return static_cast<double>(Elements(g, op.inputs[0]));  // forward and TileGrad
}

double Flops(const Graph& g, const Op& op) {
  if (op.opaque) return 0;
  const OpCategory cat = CategoryOf(op.type);
  auto in0 = [&] {
    return op.inputs.empty() ? 0.0 : static_cast<double>(Elements(g, op.inputs[0]));
  };
  auto out0 = [&] {
    return op.outputs.empty() ? 0.0 : static_cast<double>(Elements(g, op.outputs[0]));
  };
  switch (cat) {
    case C::kElementwise:
      return ElementwiseFlops(g, op);
    case C::kReduction:
      return ReductionFlops(g, op);
    case C::kMatMul:
      return op.type == "Einsum" ? EinsumFlops(g, op) : MatMulFlops(g, op);
    case C::kConv:
      return ConvFlops(g, op);
    case C::kPool:
      return PoolFlops(g, op);
    case C::kNormalization:
      return (EndsWith(op.type, "Grad") ? 2 * kNormFlops : kNormFlops) *
             (EndsWith(op.type, "Grad") ? out0() : in0());
    case C::kSoftmax:
      if (op.type == "SoftmaxGrad") return kSoftmaxGradFlops * out0();
      if (op.type == "LogSoftmaxGrad") return kLogSoftmaxGradFlops * out0();
      return kSoftmaxFlops * in0();
    case C::kGather:
      if (EndsWith(op.type, "Grad")) return in0();  // dY elements scatter-added
      return 0;
    case C::kRecurrent:
      return RecurrentFlops(g, op);
    case C::kLoss:
      if (op.type == "SoftmaxCrossEntropyLoss") return kSoftmaxFlops * in0();
      if (op.type == "SoftmaxCrossEntropyLossGrad") return kLossGradFlops * out0();
      if (op.type == "NegativeLogLikelihoodLoss") {
        return op.inputs.size() >= 2 ? static_cast<double>(Elements(g, op.inputs[1])) : 0;
      }
      return out0();  // NegativeLogLikelihoodLossGrad
    case C::kUpdate:
      return (op.type == "AdamUpdate" ? kAdamFlops : kSgdMomentumFlops) * in0();
    case C::kDataMovement:
    case C::kCollective:
    case C::kControlFlow:
    case C::kOpaque:
      return 0;
  }
  return 0;
}

}  // namespace

std::string_view CategoryName(OpCategory c) {
  switch (c) {
    case C::kElementwise:
      return "elementwise";
    case C::kReduction:
      return "reduction";
    case C::kMatMul:
      return "matmul";
    case C::kConv:
      return "conv";
    case C::kPool:
      return "pool";
    case C::kNormalization:
      return "normalization";
    case C::kSoftmax:
      return "softmax";
    case C::kDataMovement:
      return "data_movement";
    case C::kGather:
      return "gather";
    case C::kRecurrent:
      return "recurrent";
    case C::kLoss:
      return "loss";
    case C::kCollective:
      return "collective";
    case C::kUpdate:
      return "update";
    case C::kControlFlow:
      return "control_flow";
    case C::kOpaque:
      return "opaque";
  }
  return "?";
}

OpCategory CategoryOf(std::string_view type) {
  auto it = CategoryTable().find(type);
  if (it != CategoryTable().end()) return it->second;
  if (!ElementwiseGradBase(type).empty()) return C::kElementwise;
  return C::kOpaque;
}

bool IsKnownOpType(std::string_view type) { return CategoryOf(type) != C::kOpaque; }

bool IsFusible(const Op& op) {
  if (op.opaque) return false;
  switch (CategoryOf(op.type)) {
    case C::kCollective:
    case C::kUpdate:
    case C::kControlFlow:
    case C::kRecurrent:
    case C::kOpaque:
      return false;
    default:
      return true;
  }
}

bool IsElementwiseLike(const Op& op) {
  if (op.opaque) return false;
  const OpCategory c = CategoryOf(op.type);
  return c == C::kElementwise || c == C::kDataMovement || c == C::kReduction;
}

void AnnotateCost(Graph& g, OpId id) {
  const Op& op = g.op(id);
  std::vector<TensorId> distinct = op.inputs;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  int64_t read = 0;
  for (TensorId t : distinct) read += g.tensor(t).Bytes();
  int64_t written = 0;
  for (TensorId t : op.outputs) written += g.tensor(t).Bytes();
  const double flops = Flops(g, op);
  Op& m = g.mutable_op(id);
  m.flops = flops;
  m.bytes_read = read;
  m.bytes_written = written;
}

void AnnotateCosts(Graph& g) {
  for (OpId i = 0; i < g.num_ops(); ++i) AnnotateCost(g, i);
}

absl::StatusOr<std::vector<int64_t>> EinsumOutputShape(
    std::string_view equation, const std::vector<std::vector<int64_t>>& input_shapes) {
  auto terms = ParseEinsum(equation);
  if (!terms.ok()) return terms.status();
  auto sizes = EinsumBind(*terms, input_shapes);
  if (!sizes.ok()) return sizes.status();
  std::vector<int64_t> out;
  for (char c : terms->output) {
    if (c == '.') {
      out.insert(out.end(), sizes->ellipsis.begin(), sizes->ellipsis.end());
      continue;
    }
    auto it = sizes->letters.find(c);
    if (it == sizes->letters.end()) {
      return absl::InvalidArgumentError(absl::StrCat("Einsum output index '", std::string(1, c),
                                                     "' appears in no input of '",
                                                     std::string(equation), "'"));
    }
    out.push_back(it->second);
  }
  return out;
}

}  // namespace braid::graph
