#include "graph/builder.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "glog/logging.h"
#include "graph/limits.h"
#include "graph/ops.h"

namespace braid::graph {
namespace {

std::string S(std::string_view sv) { return std::string(sv); }

int64_t Product(const std::vector<int64_t>& v, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end; ++i) p *= v[i];
  return p;
}

// Normalizes a possibly negative axis into [0, rank); -1 when out of range.
int64_t NormAxis(int64_t axis, int64_t rank) {
  if (axis < 0) axis += rank;
  return (axis < 0 || axis >= rank) ? -1 : axis;
}

absl::Status Invalid(std::string_view what, const std::string& msg) {
  return absl::InvalidArgumentError(absl::StrCat("op '", S(what), "': ", msg));
}

}  // namespace

absl::StatusOr<std::vector<int64_t>> BroadcastShapes(const std::vector<int64_t>& a,
                                                     const std::vector<int64_t>& b,
                                                     std::string_view what) {
  const size_t rank = std::max(a.size(), b.size());
  std::vector<int64_t> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1) {
      return Invalid(what, absl::StrCat("shapes ", ShapeString(a), " and ", ShapeString(b),
                                        " do not broadcast"));
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

absl::StatusOr<std::vector<int64_t>> MatMulShape(const std::vector<int64_t>& a,
                                                 const std::vector<int64_t>& b,
                                                 std::string_view what) {
  if (a.empty() || b.empty()) {
    return Invalid(what, "MatMul operands must have rank >= 1");
  }
  // numpy.matmul: a 1-D operand is promoted to a matrix and the added dim
  // removed from the result.
  std::vector<int64_t> pa = a, pb = b;
  if (a.size() == 1) pa.insert(pa.begin(), 1);
  if (b.size() == 1) pb.push_back(1);
  const int64_t m = pa[pa.size() - 2], k = pa.back();
  const int64_t k2 = pb[pb.size() - 2], n = pb.back();
  if (k != k2) {
    return Invalid(
        what, absl::StrCat("MatMul inner dims differ: ", ShapeString(a), " x ", ShapeString(b)));
  }
  std::vector<int64_t> batch_a(pa.begin(), pa.end() - 2), batch_b(pb.begin(), pb.end() - 2);
  ASSIGN_OR_RETURN(std::vector<int64_t> batch, BroadcastShapes(batch_a, batch_b, what));
  std::vector<int64_t> out = batch;
  if (a.size() != 1) out.push_back(m);
  if (b.size() != 1) out.push_back(n);
  return out;
}

absl::StatusOr<std::vector<int64_t>> WindowedShape(
    const std::vector<int64_t>& x, int64_t out_channels, const std::vector<int64_t>& kernel,
    const std::vector<int64_t>& strides, const std::vector<int64_t>& pads,
    const std::vector<int64_t>& dilations, std::string_view what) {
  const size_t n = kernel.size();
  if (n == 0 || x.size() != n + 2) {
    return Invalid(what, absl::StrCat("input ", ShapeString(x), " does not match a ", n,
                                      "-d kernel_shape ", ShapeString(kernel)));
  }
  if ((!strides.empty() && strides.size() != n) || (!pads.empty() && pads.size() != 2 * n) ||
      (!dilations.empty() && dilations.size() != n)) {
    return Invalid(what, absl::StrCat("strides/pads/dilations need ", n, "/", 2 * n, "/", n,
                                      " values for kernel_shape ", ShapeString(kernel)));
  }
  std::vector<int64_t> out = {x[0], out_channels < 0 ? x[1] : out_channels};
  for (size_t i = 0; i < n; ++i) {
    const int64_t s = strides.empty() ? 1 : strides[i];
    const int64_t d = dilations.empty() ? 1 : dilations[i];
    const int64_t pad = pads.empty() ? 0 : pads[i] + pads[i + n];
    if (kernel[i] <= 0 || s <= 0 || d <= 0 || pad < 0) {
      return Invalid(what, "kernel_shape, strides and dilations must be positive, pads >= 0");
    }
    const int64_t span = x[i + 2] + pad - d * (kernel[i] - 1) - 1;
    if (span < 0) {
      return Invalid(what, absl::StrCat("window ", ShapeString(kernel),
                                        " is larger than padded input ", ShapeString(x)));
    }
    out.push_back(span / s + 1);
  }
  return out;
}

GraphBuilder::GraphBuilder(std::string model_name, DType dtype)
    : g_(std::move(model_name)), dtype_(dtype) {}

GraphBuilder::Scope::Scope(GraphBuilder* b, std::string_view prefix) : b_(b) {
  b_->scopes_.push_back(S(prefix));
}
GraphBuilder::Scope::~Scope() { b_->scopes_.pop_back(); }

std::string GraphBuilder::NewOpName(std::string_view base) {
  std::string prefix = absl::StrJoin(scopes_, ".");
  if (!prefix.empty()) prefix += ".";
  prefix += S(base);
  int& counter = counters_[prefix];
  std::string name;
  do {
    name = absl::StrCat(prefix, ++counter);
  } while (used_names_.count(name) > 0);
  used_names_.insert(name);
  return name;
}

std::string GraphBuilder::ClaimName(std::string_view name) {
  std::string full = absl::StrJoin(scopes_, ".");
  if (!full.empty()) full += ".";
  full += S(name);
  if (!used_names_.insert(full).second && status_.ok()) {
    status_ = absl::InvalidArgumentError(
        absl::StrCat("graph '", g_.name(), "': name '", full, "' is used twice"));
  }
  return full;
}

bool GraphBuilder::Ok(std::initializer_list<TensorId> ids) const {
  if (!status_.ok()) return false;
  for (TensorId t : ids) {
    CHECK(t >= 0 && t < g_.num_tensors()) << "GraphBuilder: bad tensor id " << t;
  }
  return true;
}

TensorId GraphBuilder::Fail(absl::Status s) {
  if (status_.ok()) status_ = std::move(s);
  return kNoId;
}

const std::vector<int64_t>& GraphBuilder::Shape(TensorId t) const {
  static const std::vector<int64_t> kNone;
  if (t == kNoId && !status_.ok()) return kNone;
  CHECK(t >= 0 && t < g_.num_tensors()) << "GraphBuilder: bad tensor id " << t;
  return g_.tensor(t).shape;
}

TensorId GraphBuilder::AddSource(std::string_view name, std::vector<int64_t> shape, DType dtype,
                                 TensorRole role) {
  std::string full = ClaimName(name);
  if (!status_.ok()) return kNoId;
  for (int64_t d : shape) {
    if (d < 0) {
      return Fail(absl::InvalidArgumentError(
          absl::StrCat("tensor '", full, "' has a negative dimension: ", ShapeString(shape))));
    }
  }
  return g_.AddTensor(std::move(full), std::move(shape), dtype, role);
}

TensorId GraphBuilder::Input(std::string_view name, std::vector<int64_t> shape) {
  return AddSource(name, std::move(shape), dtype_, TensorRole::kInput);
}
TensorId GraphBuilder::Input(std::string_view name, std::vector<int64_t> shape, DType dtype) {
  return AddSource(name, std::move(shape), dtype, TensorRole::kInput);
}
TensorId GraphBuilder::Param(std::string_view name, std::vector<int64_t> shape) {
  return AddSource(name, std::move(shape), dtype_, TensorRole::kParameter);
}
TensorId GraphBuilder::Constant(std::string_view name, std::vector<int64_t> shape) {
  return AddSource(name, std::move(shape), dtype_, TensorRole::kConstant);
}
TensorId GraphBuilder::Constant(std::string_view name, std::vector<int64_t> shape, DType dtype) {
  return AddSource(name, std::move(shape), dtype, TensorRole::kConstant);
}

TensorId GraphBuilder::Constant(std::string_view name, std::vector<int64_t> shape, DType dtype,
                                std::vector<double> value) {
  TensorId t = AddSource(name, std::move(shape), dtype, TensorRole::kConstant);
  if (t == kNoId) return kNoId;
  Tensor& x = g_.mutable_tensor(t);
  if (static_cast<int64_t>(value.size()) != x.NumElements()) {
    return Fail(absl::InvalidArgumentError(absl::StrCat("constant '", x.name, "' has ", value.size(),
                                                        " values for ", x.NumElements(),
                                                        " elements")));
  }
  if (x.NumElements() <= Tensor::kMaxKeptConstantElements) x.value = std::move(value);
  return t;
}

TensorId GraphBuilder::NewParam(const std::string& op_name, std::string_view suffix,
                                std::vector<int64_t> shape, TensorRole role) {
  std::string name = absl::StrCat(op_name, ".", S(suffix));
  if (!used_names_.insert(name).second) {
    return Fail(absl::InvalidArgumentError(absl::StrCat("name '", name, "' is used twice")));
  }
  return g_.AddTensor(std::move(name), std::move(shape), dtype_, role);
}

TensorId GraphBuilder::Emit(const std::string& op_name, std::string_view type,
                            std::vector<TensorId> inputs, std::vector<int64_t> out_shape,
                            Attrs attrs, DType out_dtype) {
  if (!status_.ok()) return kNoId;
  TensorId out = g_.AddTensor(op_name, std::move(out_shape), out_dtype, TensorRole::kActivation);
  g_.AddOp(op_name, S(type), std::move(inputs), {out}, std::move(attrs));
  return out;
}

// ---- Convolution and pooling ------------------------------------------------

TensorId GraphBuilder::Conv(TensorId x, const ConvSpec& spec) {
  if (!Ok({x})) return kNoId;
  const std::string name = NewOpName("conv");
  const std::vector<int64_t> xs = Shape(x);
  const int64_t n = static_cast<int64_t>(spec.kernel_shape.size());
  if (xs.size() < 3) return Fail(Invalid(name, "Conv input must be [N, C, spatial...]"));
  if (spec.group <= 0 || xs[1] % spec.group != 0 || spec.out_channels <= 0 ||
      spec.out_channels % spec.group != 0) {
    return Fail(Invalid(name, absl::StrCat("group ", spec.group, " must divide in_channels ", xs[1],
                                           " and out_channels ", spec.out_channels)));
  }
  auto out = WindowedShape(xs, spec.out_channels, spec.kernel_shape, spec.strides, spec.pads,
                           spec.dilations, name);
  if (!out.ok()) return Fail(out.status());
  Attrs attrs;
  attrs["kernel_shape"] = spec.kernel_shape;
  attrs["strides"] = spec.strides.empty() ? std::vector<int64_t>(n, 1) : spec.strides;
  attrs["pads"] = spec.pads.empty() ? std::vector<int64_t>(2 * n, 0) : spec.pads;
  attrs["dilations"] = spec.dilations.empty() ? std::vector<int64_t>(n, 1) : spec.dilations;
  attrs["group"] = spec.group;
  std::vector<int64_t> wshape = {spec.out_channels, xs[1] / spec.group};
  wshape.insert(wshape.end(), spec.kernel_shape.begin(), spec.kernel_shape.end());
  std::vector<TensorId> inputs = {x, NewParam(name, "weight", std::move(wshape))};
  if (spec.bias) inputs.push_back(NewParam(name, "bias", {spec.out_channels}));
  return Emit(name, "Conv", std::move(inputs), *std::move(out), std::move(attrs), dtype_);
}

TensorId GraphBuilder::Conv(TensorId x, int64_t out_channels, int64_t kernel, int64_t stride,
                            int64_t pad, int64_t group, bool bias) {
  ConvSpec spec;
  spec.out_channels = out_channels;
  spec.kernel_shape = {kernel, kernel};
  spec.strides = {stride, stride};
  spec.pads = {pad, pad, pad, pad};
  spec.group = group;
  spec.bias = bias;
  return Conv(x, spec);
}

TensorId GraphBuilder::BatchNorm(TensorId x, double epsilon) {
  if (!Ok({x})) return kNoId;
  const std::string name = NewOpName("bn");
  const std::vector<int64_t> xs = Shape(x);
  if (xs.size() < 2) return Fail(Invalid(name, "BatchNormalization input must be [N, C, ...]"));
  const int64_t c = xs[1];
  std::vector<TensorId> inputs = {x, NewParam(name, "weight", {c}), NewParam(name, "bias", {c}),
                                  NewParam(name, "running_mean", {c}, TensorRole::kConstant),
                                  NewParam(name, "running_var", {c}, TensorRole::kConstant)};
  // ONNX momentum is PyTorch's 1 - momentum (0.1).
  Attrs attrs = {{"epsilon", epsilon}, {"momentum", 0.9}};
  return Emit(name, "BatchNormalization", std::move(inputs), xs, std::move(attrs),
              g_.tensor(x).dtype);
}

TensorId GraphBuilder::Pool(std::string_view base, OpKind kind, TensorId x,
                            const PoolSpec& spec) {
  if (!Ok({x})) return kNoId;
  const std::string name = NewOpName(base);
  auto out = WindowedShape(Shape(x), -1, spec.kernel_shape, spec.strides, spec.pads, {}, name);
  if (!out.ok()) return Fail(out.status());
  const size_t n = spec.kernel_shape.size();
  Attrs attrs;
  attrs["kernel_shape"] = spec.kernel_shape;
  attrs["strides"] = spec.strides.empty() ? std::vector<int64_t>(n, 1) : spec.strides;
  attrs["pads"] = spec.pads.empty() ? std::vector<int64_t>(2 * n, 0) : spec.pads;
  // PyTorch's avg_pool2d counts padding by default, and exports it so.
  if (kind == OpKind::kAveragePool) attrs["count_include_pad"] = int64_t{1};
  return Emit(name, OpKindName(kind), {x}, *std::move(out), std::move(attrs), g_.tensor(x).dtype);
}

TensorId GraphBuilder::MaxPool(TensorId x, const PoolSpec& spec) {
  return Pool("maxpool", OpKind::kMaxPool, x, spec);
}
TensorId GraphBuilder::MaxPool(TensorId x, int64_t kernel, int64_t stride, int64_t pad) {
  return MaxPool(x, PoolSpec{{kernel, kernel}, {stride, stride}, {pad, pad, pad, pad}});
}
TensorId GraphBuilder::AveragePool(TensorId x, const PoolSpec& spec) {
  return Pool("avgpool", OpKind::kAveragePool, x, spec);
}
TensorId GraphBuilder::AveragePool(TensorId x, int64_t kernel, int64_t stride, int64_t pad) {
  return AveragePool(x, PoolSpec{{kernel, kernel}, {stride, stride}, {pad, pad, pad, pad}});
}

TensorId GraphBuilder::GlobalAveragePool(TensorId x) {
  if (!Ok({x})) return kNoId;
  const std::string name = NewOpName("gap");
  std::vector<int64_t> out = Shape(x);
  if (out.size() < 3)
    return Fail(Invalid(name, "GlobalAveragePool input must be [N, C, spatial...]"));
  std::fill(out.begin() + 2, out.end(), 1);
  return Emit(name, "GlobalAveragePool", {x}, std::move(out), {}, g_.tensor(x).dtype);
}

// ---- Pointwise ----------------------------------------------------------------

TensorId GraphBuilder::Unary(std::string_view base, std::string_view type, TensorId x,
                             Attrs attrs) {
  if (!Ok({x})) return kNoId;
  return Emit(NewOpName(base), type, {x}, Shape(x), std::move(attrs), g_.tensor(x).dtype);
}

TensorId GraphBuilder::Relu(TensorId x) { return Unary("relu", "Relu", x); }
TensorId GraphBuilder::Gelu(TensorId x) { return Unary("gelu", "Gelu", x); }
TensorId GraphBuilder::Sigmoid(TensorId x) { return Unary("sigmoid", "Sigmoid", x); }
TensorId GraphBuilder::Tanh(TensorId x) { return Unary("tanh", "Tanh", x); }
TensorId GraphBuilder::Dropout(TensorId x, double ratio) {
  return Unary("dropout", "Dropout", x, {{"ratio", ratio}, {"training_mode", int64_t{1}}});
}

TensorId GraphBuilder::Binary(std::string_view base, std::string_view type, TensorId a,
                              TensorId b) {
  if (!Ok({a, b})) return kNoId;
  const std::string name = NewOpName(base);
  if (g_.tensor(a).dtype != g_.tensor(b).dtype) {
    return Fail(Invalid(name, absl::StrCat(S(type), " operands have different dtypes ",
                                           S(DTypeName(g_.tensor(a).dtype)), " and ",
                                           S(DTypeName(g_.tensor(b).dtype)))));
  }
  auto out = BroadcastShapes(Shape(a), Shape(b), name);
  if (!out.ok()) return Fail(out.status());
  return Emit(name, type, {a, b}, *std::move(out), {}, g_.tensor(a).dtype);
}

TensorId GraphBuilder::Add(TensorId a, TensorId b) { return Binary("add", "Add", a, b); }
TensorId GraphBuilder::Sub(TensorId a, TensorId b) { return Binary("sub", "Sub", a, b); }
TensorId GraphBuilder::Mul(TensorId a, TensorId b) { return Binary("mul", "Mul", a, b); }
TensorId GraphBuilder::Div(TensorId a, TensorId b) { return Binary("div", "Div", a, b); }

TensorId GraphBuilder::Scale(TensorId x, double factor_value) {
  if (!Ok({x})) return kNoId;
  const std::string name = NewOpName("scale");
  TensorId factor = NewParam(name, "factor", {}, TensorRole::kConstant);
  g_.mutable_tensor(factor).dtype = g_.tensor(x).dtype;
  g_.mutable_tensor(factor).value = {factor_value};
  return Emit(name, "Mul", {x, factor}, Shape(x), {}, g_.tensor(x).dtype);
}

// ---- Matrix products ------------------------------------------------------------

TensorId GraphBuilder::MatMul(TensorId a, TensorId b) {
  if (!Ok({a, b})) return kNoId;
  const std::string name = NewOpName("matmul");
  auto out = MatMulShape(Shape(a), Shape(b), name);
  if (!out.ok()) return Fail(out.status());
  return Emit(name, "MatMul", {a, b}, *std::move(out), {}, g_.tensor(a).dtype);
}

TensorId GraphBuilder::Gemm(TensorId a, TensorId b, TensorId c, bool trans_a, bool trans_b) {
  if (!Ok({a, b})) return kNoId;
  if (c != kNoId && !Ok({c})) return kNoId;
  const std::string name = NewOpName("gemm");
  const std::vector<int64_t>& as = Shape(a);
  const std::vector<int64_t>& bs = Shape(b);
  if (as.size() != 2 || bs.size() != 2) {
    return Fail(Invalid(name, absl::StrCat("Gemm needs 2-D operands, got ", ShapeString(as),
                                           " and ", ShapeString(bs))));
  }
  const int64_t m = trans_a ? as[1] : as[0], k = trans_a ? as[0] : as[1];
  const int64_t k2 = trans_b ? bs[1] : bs[0], n = trans_b ? bs[0] : bs[1];
  if (k != k2) {
    return Fail(Invalid(
        name, absl::StrCat("Gemm inner dims differ: ", ShapeString(as), " x ", ShapeString(bs),
                           " (transA=", trans_a, ", transB=", trans_b, ")")));
  }
  std::vector<TensorId> inputs = {a, b};
  if (c != kNoId) {
    auto bc = BroadcastShapes(Shape(c), {m, n}, name);
    if (!bc.ok() || *bc != std::vector<int64_t>{m, n}) {
      return Fail(Invalid(name, absl::StrCat("Gemm C ", ShapeString(Shape(c)),
                                             " does not broadcast to [", m, ",", n, "]")));
    }
    inputs.push_back(c);
  }
  Attrs attrs = {{"transA", int64_t{trans_a}}, {"transB", int64_t{trans_b}}};
  return Emit(name, "Gemm", std::move(inputs), {m, n}, std::move(attrs), g_.tensor(a).dtype);
}

TensorId GraphBuilder::Linear(TensorId x, int64_t out_features, bool bias) {
  if (!Ok({x})) return kNoId;
  const std::string name = NewOpName("linear");
  const std::vector<int64_t> xs = Shape(x);
  if (xs.empty()) return Fail(Invalid(name, "Linear input must have rank >= 1"));
  const int64_t in = xs.back();
  if (xs.size() == 2) {
    std::vector<TensorId> inputs = {x, NewParam(name, "weight", {out_features, in})};
    if (bias) inputs.push_back(NewParam(name, "bias", {out_features}));
    Attrs attrs = {{"transA", int64_t{0}}, {"transB", int64_t{1}}};
    return Emit(name, "Gemm", std::move(inputs), {xs[0], out_features}, std::move(attrs),
                g_.tensor(x).dtype);
  }
  TensorId w = NewParam(name, "weight", {in, out_features});
  std::vector<int64_t> out = xs;
  out.back() = out_features;
  if (!bias) return Emit(name, "MatMul", {x, w}, std::move(out), {}, g_.tensor(x).dtype);
  TensorId b = NewParam(name, "bias", {out_features});
  const std::string mm = name + ".matmul";
  if (!used_names_.insert(mm).second) {
    return Fail(absl::InvalidArgumentError(absl::StrCat("name '", mm, "' is used twice")));
  }
  TensorId y = Emit(mm, "MatMul", {x, w}, out, {}, g_.tensor(x).dtype);
  return Emit(name, "Add", {y, b}, std::move(out), {}, g_.tensor(x).dtype);
}

// ---- Data movement -------------------------------------------------------------

TensorId GraphBuilder::Flatten(TensorId x, int64_t axis) {
  if (!Ok({x})) return kNoId;
  const std::string name = NewOpName("flatten");
  const std::vector<int64_t>& xs = Shape(x);
  const int64_t rank = static_cast<int64_t>(xs.size());
  if (axis < 0) axis += rank;
  if (axis < 0 || axis > rank) {
    return Fail(Invalid(name, absl::StrCat("Flatten axis out of range for ", ShapeString(xs))));
  }
  std::vector<int64_t> out = {Product(xs, 0, axis), Product(xs, axis, rank)};
  return Emit(name, "Flatten", {x}, std::move(out), {{"axis", axis}}, g_.tensor(x).dtype);
}

TensorId GraphBuilder::Reshape(TensorId x, std::vector<int64_t> shape) {
  if (!Ok({x})) return kNoId;
  const std::string name = NewOpName("reshape");
  const std::vector<int64_t>& xs = Shape(x);
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0) {
      if (i >= xs.size()) return Fail(Invalid(name, "Reshape 0 refers past the input rank"));
      shape[i] = xs[i];
    }
    if (shape[i] == -1) {
      if (infer >= 0) return Fail(Invalid(name, "Reshape shape has two -1 dims"));
      infer = static_cast<int>(i);
    } else if (shape[i] < 0) {
      return Fail(Invalid(name, absl::StrCat("Reshape dim ", shape[i], " is invalid")));
    } else {
      known *= shape[i];
    }
  }
  const int64_t total = Product(xs, 0, xs.size());
  if (infer >= 0) {
    if (known == 0 || total % known != 0) {
      return Fail(Invalid(name, absl::StrCat("cannot infer -1 reshaping ", ShapeString(xs))));
    }
    shape[infer] = total / known;
    known = total;
  }
  if (known != total) {
    return Fail(Invalid(name, absl::StrCat("Reshape of ", ShapeString(xs), " to ",
                                           ShapeString(shape), " changes the element count")));
  }
  return Emit(name, "Reshape", {x}, shape, {{"shape", shape}}, g_.tensor(x).dtype);
}

TensorId GraphBuilder::Transpose(TensorId x, std::vector<int64_t> perm) {
  if (!Ok({x})) return kNoId;
  const std::string name = NewOpName("transpose");
  const std::vector<int64_t>& xs = Shape(x);
  std::vector<int64_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  bool valid = perm.size() == xs.size();
  for (size_t i = 0; valid && i < sorted.size(); ++i) valid = sorted[i] == static_cast<int64_t>(i);
  if (!valid) {
    return Fail(Invalid(name, absl::StrCat("perm ", ShapeString(perm), " is not a permutation for ",
                                           ShapeString(xs))));
  }
  std::vector<int64_t> out(xs.size());
  for (size_t i = 0; i < perm.size(); ++i) out[i] = xs[perm[i]];
  return Emit(name, "Transpose", {x}, std::move(out), {{"perm", perm}}, g_.tensor(x).dtype);
}

TensorId GraphBuilder::Concat(const std::vector<TensorId>& xs, int64_t axis) {
  if (!status_.ok()) return kNoId;
  const std::string name = NewOpName("concat");
  if (xs.empty()) return Fail(Invalid(name, "Concat needs at least one input"));
  for (TensorId t : xs) CHECK(t >= 0 && t < g_.num_tensors()) << "GraphBuilder: bad id " << t;
  std::vector<int64_t> out = Shape(xs[0]);
  const int64_t ax = NormAxis(axis, static_cast<int64_t>(out.size()));
  if (ax < 0) return Fail(Invalid(name, absl::StrCat("Concat axis ", axis, " out of range")));
  for (size_t i = 1; i < xs.size(); ++i) {
    const std::vector<int64_t>& s = Shape(xs[i]);
    bool match = s.size() == out.size() && g_.tensor(xs[i]).dtype == g_.tensor(xs[0]).dtype;
    for (size_t d = 0; match && d < s.size(); ++d) {
      match = static_cast<int64_t>(d) == ax || s[d] == out[d];
    }
    if (!match) {
      return Fail(Invalid(name, absl::StrCat("Concat input ", ShapeString(s), " does not match ",
                                             ShapeString(Shape(xs[0])), " off axis ", ax)));
    }
    out[ax] += s[ax];
  }
  return Emit(name, "Concat", xs, std::move(out), {{"axis", ax}}, g_.tensor(xs[0]).dtype);
}

TensorId GraphBuilder::Expand(TensorId x, std::vector<int64_t> shape) {
  if (!Ok({x})) return kNoId;
  const std::string name = NewOpName("expand");
  auto out = BroadcastShapes(Shape(x), shape, name);
  if (!out.ok()) return Fail(out.status());
  return Emit(name, "Expand", {x}, *out, {{"shape", *out}}, g_.tensor(x).dtype);
}

TensorId GraphBuilder::Reduce(std::string_view base, std::string_view type, TensorId x,
                              std::vector<int64_t> axes, bool keepdims) {
  if (!Ok({x})) return kNoId;
  const std::string name = NewOpName(base);
  const std::vector<int64_t>& xs = Shape(x);
  const int64_t rank = static_cast<int64_t>(xs.size());
  std::vector<bool> reduced(xs.size(), false);
  for (int64_t& a : axes) {
    const int64_t n = NormAxis(a, rank);
    if (n < 0 || reduced[n]) {
      return Fail(
          Invalid(name, absl::StrCat(S(type), " axis ", a, " is out of range or repeated")));
    }
    reduced[n] = true;
    a = n;
  }
  std::vector<int64_t> out;
  for (int64_t d = 0; d < rank; ++d) {
    if (!reduced[d]) {
      out.push_back(xs[d]);
    } else if (keepdims) {
      out.push_back(1);
    }
  }
  Attrs attrs = {{"axes", axes}, {"keepdims", int64_t{keepdims}}};
  return Emit(name, type, {x}, std::move(out), std::move(attrs), g_.tensor(x).dtype);
}

TensorId GraphBuilder::ReduceSum(TensorId x, std::vector<int64_t> axes, bool keepdims) {
  return Reduce("reducesum", "ReduceSum", x, std::move(axes), keepdims);
}
TensorId GraphBuilder::ReduceMean(TensorId x, std::vector<int64_t> axes, bool keepdims) {
  return Reduce("reducemean", "ReduceMean", x, std::move(axes), keepdims);
}

// ---- Normalisation, lookups, recurrent ----------------------------------------------

TensorId GraphBuilder::Softmax(TensorId x, int64_t axis) {
  if (!Ok({x})) return kNoId;
  const std::string name = NewOpName("softmax");
  const int64_t ax = NormAxis(axis, static_cast<int64_t>(Shape(x).size()));
  if (ax < 0) return Fail(Invalid(name, absl::StrCat("Softmax axis ", axis, " out of range")));
  return Emit(name, "Softmax", {x}, Shape(x), {{"axis", ax}}, g_.tensor(x).dtype);
}

TensorId GraphBuilder::LayerNorm(TensorId x, double epsilon) {
  if (!Ok({x})) return kNoId;
  const std::string name = NewOpName("ln");
  const std::vector<int64_t> xs = Shape(x);
  if (xs.empty()) return Fail(Invalid(name, "LayerNormalization input must have rank >= 1"));
  const int64_t d = xs.back();
  std::vector<TensorId> inputs = {x, NewParam(name, "weight", {d}), NewParam(name, "bias", {d})};
  Attrs attrs = {{"axis", static_cast<int64_t>(xs.size()) - 1}, {"epsilon", epsilon}};
  return Emit(name, "LayerNormalization", std::move(inputs), xs, std::move(attrs),
              g_.tensor(x).dtype);
}

TensorId GraphBuilder::Gather(TensorId data, TensorId indices, int64_t axis) {
  if (!Ok({data, indices})) return kNoId;
  const std::string name = NewOpName("gather");
  const std::vector<int64_t>& ds = Shape(data);
  const DType it = g_.tensor(indices).dtype;
  if (it != DType::kI64 && it != DType::kI32) {
    return Fail(
        Invalid(name, absl::StrCat("Gather indices must be i64 or i32, got ", S(DTypeName(it)))));
  }
  const int64_t ax = NormAxis(axis, static_cast<int64_t>(ds.size()));
  if (ax < 0) return Fail(Invalid(name, absl::StrCat("Gather axis ", axis, " out of range")));
  std::vector<int64_t> out(ds.begin(), ds.begin() + ax);
  out.insert(out.end(), Shape(indices).begin(), Shape(indices).end());
  out.insert(out.end(), ds.begin() + ax + 1, ds.end());
  return Emit(name, "Gather", {data, indices}, std::move(out), {{"axis", ax}},
              g_.tensor(data).dtype);
}

TensorId GraphBuilder::Embedding(TensorId indices, int64_t vocab, int64_t dim, TensorId* table) {
  if (!Ok({indices})) return kNoId;
  const std::string name = NewOpName("embedding");
  const DType it = g_.tensor(indices).dtype;
  if (it != DType::kI64 && it != DType::kI32) {
    return Fail(Invalid(
        name, absl::StrCat("embedding indices must be i64 or i32, got ", S(DTypeName(it)))));
  }
  TensorId w = NewParam(name, "weight", {vocab, dim});
  if (table != nullptr) *table = w;
  std::vector<int64_t> out = Shape(indices);
  out.push_back(dim);
  return Emit(name, "Gather", {w, indices}, std::move(out), {{"axis", int64_t{0}}}, dtype_);
}

TensorId GraphBuilder::LSTM(TensorId x, int64_t hidden_size) {
  if (!Ok({x})) return kNoId;
  const std::string name = NewOpName("lstm");
  const std::vector<int64_t> xs = Shape(x);
  if (xs.size() != 3 || hidden_size <= 0) {
    return Fail(
        Invalid(name, absl::StrCat("LSTM needs X [seq, batch, input] and hidden_size > 0, got ",
                                   ShapeString(xs))));
  }
  const int64_t h = hidden_size;
  std::vector<TensorId> inputs = {x, NewParam(name, "W", {1, 4 * h, xs[2]}),
                                  NewParam(name, "R", {1, 4 * h, h}),
                                  NewParam(name, "B", {1, 8 * h})};
  Attrs attrs = {{"hidden_size", h}, {"direction", std::string("forward")}};
  return Emit(name, "LSTM", std::move(inputs), {xs[0], 1, xs[1], h}, std::move(attrs),
              g_.tensor(x).dtype);
}

std::vector<TensorId> GraphBuilder::Custom(std::string_view base, std::string_view type,
                                           std::vector<TensorId> inputs,
                                           std::vector<std::vector<int64_t>> output_shapes,
                                           Attrs attrs) {
  if (!status_.ok()) return {};
  for (TensorId t : inputs) CHECK(t >= 0 && t < g_.num_tensors()) << "GraphBuilder: bad id " << t;
  const std::string name = NewOpName(base);
  std::vector<TensorId> outs;
  for (size_t i = 0; i < output_shapes.size(); ++i) {
    std::string tname = name;
    if (output_shapes.size() > 1) {
      tname = absl::StrCat(name, ".out", i);
      used_names_.insert(tname);
    }
    outs.push_back(
        g_.AddTensor(std::move(tname), output_shapes[i], dtype_, TensorRole::kActivation));
  }
  g_.AddOp(name, S(type), std::move(inputs), outs, std::move(attrs));
  return outs;
}

void GraphBuilder::MarkOutput(TensorId t) {
  if (Ok({t})) g_.AddOutput(t);
}

absl::StatusOr<Graph> GraphBuilder::Build() && {
  RETURN_IF_ERROR(status_);
  if (g_.outputs().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("graph '", g_.name(), "' has no outputs (call MarkOutput)"));
  }
  // Bounds before cost annotation, which multiplies dims (zoo:NAME@BATCH).
  RETURN_IF_ERROR(CheckGraphLimits(g_));
  AnnotateCosts(g_);
  RETURN_IF_ERROR(g_.Validate());
  return std::move(g_);
}

}  // namespace braid::graph
