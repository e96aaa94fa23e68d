// Evaluates both sides of every rule in rules.txt with LibTorch on random
// inputs, for parallel degrees 2 and 4, and checks that the outputs agree in
// value (allclose, float64) and in parallel degrees (the PCG's fingerprint
// test, Unity §4, made exact per rule).
//
// A parallel tensor is a list of per-device tensors laid out row-major over a
// stack of parallel axes (outermost first): Partition and Replicate add an
// innermost axis; Combine and Reduce remove the innermost axis of their kind.
// Compute ops run per device; the axis at each position of the stack follows
// from the op's inputs' axes (e.g. MatMul of a column partition of x with a
// row partition of w gives a replica axis of partial sums), and a combination
// that no device-local op can compute is an error.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "search/substitutions/rule_file.h"

namespace braid::search {
namespace {

struct Axis {
  bool replica = false;
  int64_t dim = -1;  // the partitioned dimension; -1 for a replica axis
  int64_t degree = 1;
  bool operator==(const Axis&) const = default;
  std::string ToString() const {
    return replica ? absl::StrCat("R", degree) : absl::StrCat("P", dim, ":", degree);
  }
};

struct PTensor {
  std::vector<torch::Tensor> pieces;
  std::vector<Axis> axes;
  std::string AxesString() const {
    return absl::StrCat("[", absl::StrJoin(axes, ",", [](std::string* o, const Axis& a) {
                          absl::StrAppend(o, a.ToString());
                        }), "]");
  }
};

int64_t Product(const std::vector<Axis>& axes, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end; ++i) p *= axes[i].degree;
  return p;
}

absl::Status Bad(const RuleOp& op, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("line ", op.line, " ", op.op, ": ", what));
}

absl::StatusOr<PTensor> Partition(const RuleOp& op, const PTensor& t, int64_t dim, int64_t k) {
  PTensor out{{}, t.axes};
  out.axes.push_back({false, dim, k});
  for (const torch::Tensor& p : t.pieces) {
    if (dim >= p.dim() || p.size(dim) % k != 0) {
      return Bad(op, absl::StrCat("cannot partition dim ", dim, " of a ", p.dim(), "-d piece by ", k));
    }
    for (const torch::Tensor& c : p.chunk(k, dim)) out.pieces.push_back(c);
  }
  return out;
}

absl::StatusOr<PTensor> Replicate(const PTensor& t, int64_t k) {
  PTensor out{{}, t.axes};
  out.axes.push_back({true, -1, k});
  for (const torch::Tensor& p : t.pieces) {
    for (int64_t j = 0; j < k; ++j) out.pieces.push_back(p);
  }
  return out;
}

// Combine (cat along `dim`) or Reduce (sum) of the innermost axis of the kind.
absl::StatusOr<PTensor> Merge(const RuleOp& op, const PTensor& t, bool replica, int64_t dim,
                              int64_t k) {
  int a = static_cast<int>(t.axes.size()) - 1;
  while (a >= 0 && !(t.axes[a].replica == replica && (replica || t.axes[a].dim == dim))) --a;
  if (a < 0) return Bad(op, absl::StrCat("no matching parallel axis in ", t.AxesString()));
  if (t.axes[a].degree != k) {
    return Bad(op, absl::StrCat("degree ", k, " but the axis is ", t.axes[a].ToString()));
  }
  int64_t outer = Product(t.axes, 0, a);
  int64_t inner = Product(t.axes, a + 1, t.axes.size());
  PTensor out{{}, t.axes};
  out.axes.erase(out.axes.begin() + a);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      std::vector<torch::Tensor> group;
      for (int64_t j = 0; j < k; ++j) group.push_back(t.pieces[(o * k + j) * inner + i]);
      out.pieces.push_back(replica ? torch::stack(group).sum(0) : torch::cat(group, dim));
    }
  }
  return out;
}

// The output axis of a per-device compute op from its inputs' axes at one
// position of the stack; `rank` is the rank of the first input.
absl::StatusOr<Axis> ComputeAxis(const RuleOp& op, const std::vector<Axis>& in, int64_t rank) {
  const Axis& a = in[0];
  auto P = [](int64_t dim) { return [dim](const Axis& x) { return !x.replica && x.dim == dim; }; };
  auto R = [](const Axis& x) { return x.replica; };
  auto err = [&]() -> absl::Status {
    std::vector<std::string> s;
    for (const Axis& x : in) s.push_back(x.ToString());
    return Bad(op, absl::StrCat("no device-local form for input axes ", absl::StrJoin(s, ", ")));
  };
  for (const Axis& x : in) {
    if (x.degree != a.degree) return err();
  }
  if (op.op == "Relu" || op.op == "GeLU") return a;
  if (op.op == "Softmax") {
    if (P(op.attr("axis").value)(a)) return err();
    return a;
  }
  if (op.op == "Add") {
    if (!(in[1] == a)) return err();
    return a;
  }
  if (op.op == "Concat" || op.op == "Split") {
    for (const Axis& x : in) {
      if (!(x == a)) return err();
    }
    if (P(op.attr("axis").value)(a)) return err();
    return a;
  }
  const Axis& b = in[1];
  Axis out = a;
  if (op.op == "MatMul" || op.op == "BatchMatMul") {
    int64_t m = rank - 2, n = rank - 1;
    if (!a.replica && a.dim < m && b == a) return a;  // batch dims
    if (P(m)(a) && R(b)) return a;
    if (R(a) && P(n)(b)) return out = Axis{false, n, a.degree};
    if (P(n)(a) && P(m)(b)) return out = Axis{true, -1, a.degree};
    if (R(a) && R(b)) return a;
    return err();
  }
  if (op.op == "Conv2D") {  // x [N, C, H, W], w [O, C, kh, kw]
    if (P(0)(a) && R(b)) return a;
    if (R(a) && P(0)(b)) return out = Axis{false, 1, a.degree};
    if (P(1)(a) && P(1)(b)) return out = Axis{true, -1, a.degree};
    if (R(a) && R(b)) return a;
    return err();
  }
  return Bad(op, "not a compute op");
}

torch::Tensor Compute(const RuleOp& op, const std::vector<torch::Tensor>& in) {
  if (op.op == "MatMul" || op.op == "BatchMatMul") return torch::matmul(in[0], in[1]);
  if (op.op == "Add") return in[0] + in[1];
  if (op.op == "Relu") return torch::relu(in[0]);
  if (op.op == "GeLU") return torch::gelu(in[0]);
  if (op.op == "Softmax") return torch::softmax(in[0], op.attr("axis").value);
  if (op.op == "Concat") return torch::cat(in, op.attr("axis").value);
  if (op.op == "Conv2D") {
    int64_t pad = op.attrs.contains("padding") ? op.attr("padding").value : 0;
    return torch::conv2d(in[0], in[1], {}, 1, pad);
  }
  TORCH_CHECK(false, "no compute for ", op.op);
}

// Applies one op of a rule graph to parallel tensors.
absl::StatusOr<std::vector<PTensor>> Apply(const RuleOp& op, const std::vector<PTensor>& in,
                                           int64_t degree) {
  auto attr = [&](const char* n) { return op.attr(n).Resolve(degree); };
  if (op.op == "Partition") {
    absl::StatusOr<PTensor> t = Partition(op, in[0], attr("dim"), attr("degree"));
    if (!t.ok()) return t.status();
    return std::vector<PTensor>{*std::move(t)};
  }
  if (op.op == "Replicate") return std::vector<PTensor>{*Replicate(in[0], attr("degree"))};
  if (op.op == "Combine" || op.op == "Reduce") {
    bool reduce = op.op == "Reduce";
    absl::StatusOr<PTensor> t =
        Merge(op, in[0], reduce, reduce ? -1 : attr("dim"), attr("degree"));
    if (!t.ok()) return t.status();
    return std::vector<PTensor>{*std::move(t)};
  }
  if (op.op == "Concat" && op.attr("axis").kind == RuleAttr::Kind::kReplicaAxis) {
    PTensor out{{}, in[0].axes};
    for (const PTensor& t : in) {
      if (t.axes != out.axes) return Bad(op, "replica concat of differently parallel inputs");
    }
    out.axes.push_back({true, -1, static_cast<int64_t>(in.size())});
    for (size_t p = 0; p < in[0].pieces.size(); ++p) {
      for (const PTensor& t : in) out.pieces.push_back(t.pieces[p]);
    }
    return std::vector<PTensor>{out};
  }
  // A compute op: per device, with the stack of axes derived position-wise.
  for (const PTensor& t : in) {
    if (t.axes.size() != in[0].axes.size()) {
      return Bad(op, absl::StrCat("inputs have parallel axes ", in[0].AxesString(), " and ",
                                  t.AxesString()));
    }
  }
  std::vector<Axis> axes;
  for (size_t i = 0; i < in[0].axes.size(); ++i) {
    std::vector<Axis> at;
    for (const PTensor& t : in) at.push_back(t.axes[i]);
    absl::StatusOr<Axis> a = ComputeAxis(op, at, in[0].pieces[0].dim());
    if (!a.ok()) return a.status();
    axes.push_back(*a);
  }
  int n_out = NumOutputs(op);
  std::vector<PTensor> out(n_out, PTensor{{}, axes});
  try {
    for (size_t p = 0; p < in[0].pieces.size(); ++p) {
      std::vector<torch::Tensor> args;
      for (const PTensor& t : in) args.push_back(t.pieces[p]);
      if (op.op == "Split") {
        int64_t ax = op.attr("axis").value;
        if (args[0].size(ax) % n_out != 0) return Bad(op, "split of an indivisible dimension");
        std::vector<torch::Tensor> parts = args[0].chunk(n_out, ax);
        for (int i = 0; i < n_out; ++i) out[i].pieces.push_back(parts[i]);
      } else {
        out[0].pieces.push_back(Compute(op, args));
      }
    }
  } catch (const c10::Error& e) {
    return Bad(op, e.what_without_backtrace());
  }
  return out;
}

using Env = std::map<std::string, PTensor>;

absl::StatusOr<std::vector<PTensor>> Evaluate(const RuleGraph& g, Env env, int64_t degree) {
  for (const RuleOp& op : g.ops) {
    std::vector<PTensor> in;
    for (const std::string& name : op.inputs) in.push_back(env.at(name));
    absl::StatusOr<std::vector<PTensor>> out = Apply(op, in, degree);
    if (!out.ok()) return out.status();
    for (size_t i = 0; i < op.outputs.size(); ++i) env[op.outputs[i]] = (*out)[i];
  }
  std::vector<PTensor> outputs;
  for (const std::string& name : g.outputs) outputs.push_back(env.at(name));
  return outputs;
}

Env RandomInputs(const Rule& rule, int64_t degree) {
  Env env;
  for (const RuleInput& in : rule.inputs) {
    int64_t replicas = in.replica.Resolve(degree);
    PTensor t;
    for (int64_t r = 0; r < replicas; ++r) {
      t.pieces.push_back(torch::randn(in.shape, torch::kFloat64));
    }
    if (replicas > 1) t.axes.push_back({true, -1, replicas});
    env[in.name] = t;
  }
  return env;
}

// Checks one rule at one degree: OK when both sides evaluate and agree.
absl::Status CheckRule(const Rule& rule, int64_t degree, uint64_t seed) {
  torch::manual_seed(seed);
  Env env = RandomInputs(rule, degree);
  absl::StatusOr<std::vector<PTensor>> src = Evaluate(rule.src, env, degree);
  if (!src.ok()) return absl::Status(src.status().code(), absl::StrCat("src: ", src.status().message()));
  absl::StatusOr<std::vector<PTensor>> dst = Evaluate(rule.dst, env, degree);
  if (!dst.ok()) return absl::Status(dst.status().code(), absl::StrCat("dst: ", dst.status().message()));
  for (size_t i = 0; i < src->size(); ++i) {
    const PTensor& s = (*src)[i];
    const PTensor& d = (*dst)[i];
    std::string what = absl::StrCat("output ", rule.src.outputs[i], " -> ", rule.dst.outputs[i]);
    if (s.axes != d.axes) {
      return absl::FailedPreconditionError(absl::StrCat(
          what, ": parallel degrees differ: ", s.AxesString(), " vs ", d.AxesString()));
    }
    for (size_t p = 0; p < s.pieces.size(); ++p) {
      if (!s.pieces[p].sizes().equals(d.pieces[p].sizes())) {
        return absl::FailedPreconditionError(absl::StrCat(what, ": piece ", p, " shapes differ"));
      }
      if (!torch::allclose(s.pieces[p], d.pieces[p], 1e-9, 1e-9)) {
        double diff = (s.pieces[p] - d.pieces[p]).abs().max().item<double>();
        return absl::FailedPreconditionError(
            absl::StrCat(what, ": piece ", p, " values differ (max |diff| ", diff, ")"));
      }
    }
  }
  return absl::OkStatus();
}

TEST(RuleCheckTest, EveryRuleHoldsNumerically) {
  absl::StatusOr<std::vector<Rule>> rules = LoadRuleFile(BRAID_RULES_FILE);
  ASSERT_TRUE(rules.ok()) << rules.status();
  ASSERT_GE(rules->size(), 20u);
  for (const Rule& rule : *rules) {
    for (int64_t degree : {2, 4}) {
      for (uint64_t seed : {1, 2}) {
        absl::Status s = CheckRule(rule, degree, seed);
        EXPECT_TRUE(s.ok()) << "rule " << rule.name << " (line " << rule.line << ") d=" << degree
                            << " seed=" << seed << ": " << s;
      }
    }
  }
}

// The check must be able to fail: wrong rules are rejected for the right reason.
absl::Status CheckText(const std::string& body, int64_t degree) {
  absl::StatusOr<std::vector<Rule>> rules =
      ParseRuleFile("rule wrong\n  proof: numeric\n" + body + "end\n");
  EXPECT_TRUE(rules.ok()) << rules.status();
  if (!rules.ok()) return rules.status();
  return CheckRule((*rules)[0], degree, 7);
}

TEST(RuleCheckTest, RejectsWrongRules) {
  using ::testing::HasSubstr;
  // Relu does not commute with a Reduce of partial sums.
  absl::Status s = CheckText(
      "  input x [8, 8] replica=d\n"
      "  src s = Reduce(x, degree=d)\n  src y = Relu(s)\n"
      "  dst r = Relu(x)\n  dst y = Reduce(r, degree=d)\n  output y\n", 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("values differ"));
  // Spatial Relu without the Combine: same values per device, other degrees.
  s = CheckText(
      "  input x [8, 8]\n  src y = Relu(x)\n"
      "  dst xp = Partition(x, dim=0, degree=d)\n  dst y = Relu(xp)\n  output y\n", 4);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("parallel degrees differ: [] vs [P0:4]"));
  // Data parallelism that combines the wrong dimension.
  s = CheckText(
      "  input x [8, 8]\n  input w [8, 8]\n  src y = MatMul(x, w)\n"
      "  dst xp = Partition(x, dim=0, degree=d)\n  dst wr = Replicate(w, degree=d)\n"
      "  dst yp = MatMul(xp, wr)\n  dst y = Combine(yp, dim=1, degree=d)\n  output y\n", 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("no matching parallel axis in [P0:2]"));
  // Softmax over a partitioned axis has no device-local form.
  s = CheckText(
      "  input x [8, 8]\n  src y = Softmax(x, axis=1)\n"
      "  dst xp = Partition(x, dim=1, degree=d)\n  dst yp = Softmax(xp, axis=1)\n"
      "  dst y = Combine(yp, dim=1, degree=d)\n  output y\n", 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("no device-local form"));
  // Row-parallel MatMul that combines instead of reducing the partial sums.
  s = CheckText(
      "  input x [8, 8]\n  input w [8, 8]\n  src y = MatMul(x, w)\n"
      "  dst xp = Partition(x, dim=1, degree=d)\n  dst wp = Partition(w, dim=0, degree=d)\n"
      "  dst yp = MatMul(xp, wp)\n  dst y = Combine(yp, dim=0, degree=d)\n  output y\n", 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("no matching parallel axis in [R2]"));
}

}  // namespace
}  // namespace braid::search
