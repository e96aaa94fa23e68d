// Op categories, fusibility and analytic costs. The conventions are listed in
// graph/ops.h; the constants below are the ones documented there, except the
// elementwise FLOPs per element, which are traits of the kinds (op_kind.cc).
#include "graph/ops.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace braid::graph {
namespace {

constexpr double kNormFlops = 5;
constexpr double kSoftmaxFlops = 8;
constexpr double kSoftmaxGradFlops = 4;
constexpr double kLogSoftmaxGradFlops = 7;
constexpr double kLossGradFlops = 6;
constexpr double kSgdMomentumFlops = 4;
constexpr double kAdamFlops = 12;

using C = OpCategory;
using K = OpKind;

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
  if (op.kind == K::kGemm && op.inputs.size() >= 3) flops += Elements(g, op.outputs[0]);
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
  switch (op.kind) {
    case K::kConv: {
      double f = ConvCore(g, op.outputs[0], op.inputs[1]);
      if (op.inputs.size() >= 3) f += Elements(g, op.outputs[0]);
      return f;
    }
    case K::kConvTranspose: {
      double f = ConvCore(g, op.inputs[0], op.inputs[1]);
      if (op.inputs.size() >= 3) f += Elements(g, op.outputs[0]);
      return f;
    }
    case K::kConvGradData:  // (dY, W)
      return ConvCore(g, op.inputs[0], op.inputs[1]);
    case K::kConvGradFilter:  // (X, dY) -> dW
      return ConvCore(g, op.inputs[1], op.outputs[0]);
    case K::kConvTransposeGradData:  // -> dX
      return ConvCore(g, op.outputs[0], op.inputs[1]);
    case K::kConvTransposeGradFilter:
      return ConvCore(g, op.inputs[0], op.outputs[0]);
    default:
      return 0;
  }
}

double PoolFlops(const Graph& g, const Op& op) {
  if (op.inputs.empty() || op.outputs.empty()) return 0;
  const std::vector<int64_t> kernel = op.GetInts("kernel_shape");
  // Forward ops iterate their output; Grad ops iterate dY (their first input).
  const TensorId iter = IsGradientKind(op.kind) ? op.inputs[0] : op.outputs[0];
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
  const OpKind base = IsGradientKind(op.kind) ? GradOf(op.kind) : op.kind;
  double per_row = 0;
  if (base == K::kLSTM) per_row = 2 * (input + hidden) * 4 * hidden + 32 * hidden;
  if (base == K::kGRU) per_row = 2 * (input + hidden) * 3 * hidden + 23 * hidden;
  if (base == K::kRNN) per_row = 2 * (input + hidden) * hidden + 6 * hidden;
  const double fwd = dirs * rows * per_row;
  return base == op.kind ? fwd : 2 * fwd;
}

double ElementwiseFlops(const Graph& g, const Op& op) {
  if (op.outputs.empty()) return 0;
  const double out = static_cast<double>(Elements(g, op.outputs[0]));
  const OpKindTraits& t = Traits(op.kind);
  if (t.variadic) return std::max<double>(1, static_cast<double>(op.inputs.size()) - 1) * out;
  return t.flops_per_element * out;  // a <Op>Grad's is twice its forward's
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
    ASSIGN_OR_RETURN(
        auto term,
        compact(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start)));
    terms.inputs.push_back(term);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (arrow != std::string::npos) {
    ASSIGN_OR_RETURN(auto out, compact(eq.substr(arrow + 2)));
    terms.output = out;
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
  switch (op.kind) {
    case K::kReduceSumGrad:
      return 0;
    case K::kReduceMeanGrad:
    case K::kReduceMaxGrad:
    case K::kReduceMinGrad:
    case K::kGlobalAveragePoolGrad:
    case K::kGlobalMaxPoolGrad:
      return static_cast<double>(Elements(g, op.outputs[0]));
    default:
      return static_cast<double>(Elements(g, op.inputs[0]));  // forward and TileGrad
  }
}

double Flops(const Graph& g, const Op& op) {
  if (op.opaque) return 0;
  const OpCategory cat = CategoryOf(op.kind);
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
      return op.kind == K::kEinsum ? EinsumFlops(g, op) : MatMulFlops(g, op);
    case C::kConv:
      return ConvFlops(g, op);
    case C::kPool:
      return PoolFlops(g, op);
    case C::kNormalization:
      return IsGradientKind(op.kind) ? 2 * kNormFlops * out0() : kNormFlops * in0();
    case C::kSoftmax:
      if (op.kind == K::kSoftmaxGrad) return kSoftmaxGradFlops * out0();
      if (op.kind == K::kLogSoftmaxGrad) return kLogSoftmaxGradFlops * out0();
      return kSoftmaxFlops * in0();
    case C::kGather:
      if (IsGradientKind(op.kind)) return in0();  // dY elements scatter-added
      return 0;
    case C::kRecurrent:
      return RecurrentFlops(g, op);
    case C::kLoss:
      if (op.kind == K::kSoftmaxCrossEntropyLoss) return kSoftmaxFlops * in0();
      if (op.kind == K::kSoftmaxCrossEntropyLossGrad) return kLossGradFlops * out0();
      if (op.kind == K::kNegativeLogLikelihoodLoss) {
        return op.inputs.size() >= 2 ? static_cast<double>(Elements(g, op.inputs[1])) : 0;
      }
      return out0();  // NegativeLogLikelihoodLossGrad
    case C::kUpdate:
      return (op.kind == K::kAdamUpdate ? kAdamFlops : kSgdMomentumFlops) * in0();
    case C::kDataMovement:
    case C::kCollective:
    case C::kControlFlow:
    case C::kOpaque:
      return 0;
  }
  return 0;
}

}  // namespace

OpCategory CategoryOf(std::string_view type) { return CategoryOf(OpKindFromName(type)); }

bool IsKnownOpType(std::string_view type) { return IsKnownOpKind(OpKindFromName(type)); }

bool IsFusible(const Op& op) {
  if (op.opaque) return false;
  switch (CategoryOf(op.kind)) {
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
  const OpCategory c = CategoryOf(op.kind);
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
  ASSIGN_OR_RETURN(auto terms, ParseEinsum(equation));
  ASSIGN_OR_RETURN(auto sizes, EinsumBind(terms, input_shapes));
  std::vector<int64_t> out;
  for (char c : terms.output) {
    if (c == '.') {
      out.insert(out.end(), sizes.ellipsis.begin(), sizes.ellipsis.end());
      continue;
    }
    auto it = sizes.letters.find(c);
    if (it == sizes.letters.end()) {
      return absl::InvalidArgumentError(absl::StrCat("Einsum output index '", std::string(1, c),
                                                     "' appears in no input of '",
                                                     std::string(equation), "'"));
    }
    out.push_back(it->second);
  }
  return out;
}

}  // namespace braid::graph
