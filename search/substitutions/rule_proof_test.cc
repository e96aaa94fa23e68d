// Proves the `proof: z3` rules of rules.txt the way TASO and Unity do (Unity
// §4, "Substitution verification"): operators are uninterpreted functions
// over an uninterpreted Tensor sort, with integer configuration parameters
// (dims, degrees), and their properties are first-order axioms. A rule holds
// when "some output of the source differs from the target's" is UNSAT under
// the axioms, for every degree d >= 2.
//
// The axioms state properties of the operators as they appear in the rules:
// MatMul is 2-d (x [m, k] @ w [k, n]); BatchMatMul is 4-d with batch dims 0
// and 1; Split's axioms assume equal-sized operands (rule_check_test evaluates
// the real shapes). A `numeric` rule is one whose properties the axiom set
// does not state (nested parallel-op layouts, convolutions, Reduce's
// linearity); rule_check_test alone vouches for it.
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include <z3++.h>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "search/substitutions/rule_file.h"

namespace braid::search {
namespace {

// Operator declarations and axioms in one Z3 context.
class Theory {
 public:
  Theory()
      : t_(ctx_.uninterpreted_sort("Tensor")),
        i_(ctx_.int_sort()),
        matmul_(z3::function("matmul", t_, t_, t_)),
        bmm_(z3::function("bmm", t_, t_, t_)),
        add_(z3::function("add", t_, t_, t_)),
        relu_(z3::function("relu", t_, t_)),
        gelu_(z3::function("gelu", t_, t_)),
        softmax_(z3::function("softmax", i_, t_, t_)),
        concat_(z3::function("concat", i_, t_, t_, t_)),
        split_(z3::function("split", i_, i_, i_, t_, t_)),
        conv2d_(z3::function("conv2d", t_, t_, t_)),
        partition_(z3::function("partition", i_, i_, t_, t_)),
        combine_(z3::function("combine", i_, i_, t_, t_)),
        replicate_(z3::function("replicate", i_, t_, t_)),
        reduce_(z3::function("reduce", i_, t_, t_)),
        degree_(ctx_.int_const("d")) {}

  z3::context& ctx() { return ctx_; }
  const z3::expr& degree() const { return degree_; }

  // The operator properties (TASO Table 2 style plus Unity's parallel ones).
  std::vector<z3::expr> Axioms() {
    z3::expr x = ctx_.constant("ax_x", t_), y = ctx_.constant("ax_y", t_);
    z3::expr z = ctx_.constant("ax_z", t_);
    z3::expr k = ctx_.int_const("ax_k"), d = ctx_.int_const("ax_d"), a = ctx_.int_const("ax_a");
    auto I = [&](int v) { return ctx_.int_val(v); };
    auto P = [&](const z3::expr& dim, const z3::expr& deg, const z3::expr& e) {
      return partition_(dim, deg, e);
    };
    std::vector<z3::expr> ax;
    // Combine undoes Partition of the same dim and degree.
    ax.push_back(z3::forall(k, d, x, combine_(k, d, P(k, d, x)) == x));
    // MatMul: data (rows of x), model (columns of w), reduction (k) parallel.
    ax.push_back(z3::forall(d, x, y, matmul_(P(I(0), d, x), replicate_(d, y)) ==
                                         P(I(0), d, matmul_(x, y))));
    ax.push_back(z3::forall(d, x, y, matmul_(replicate_(d, x), P(I(1), d, y)) ==
                                         P(I(1), d, matmul_(x, y))));
    ax.push_back(z3::forall(d, x, y, reduce_(d, matmul_(P(I(1), d, x), P(I(0), d, y))) ==
                                         matmul_(x, y)));
    // Unity §4: Reduce commutes with MatMul.
    ax.push_back(z3::forall(d, x, y, matmul_(reduce_(d, x), y) ==
                                         reduce_(d, matmul_(x, replicate_(d, y)))));
    // Elementwise ops commute with any Partition and with Replicate.
    for (const z3::func_decl& f : {relu_, gelu_}) {
      ax.push_back(z3::forall(k, d, x, f(P(k, d, x)) == P(k, d, f(x))));
      ax.push_back(z3::forall(d, x, f(replicate_(d, x)) == replicate_(d, f(x))));
    }
    ax.push_back(z3::forall(k, d, x, y, add_(P(k, d, x), P(k, d, y)) == P(k, d, add_(x, y))));
    // Softmax over axis a is local to any partition of another dim.
    ax.push_back(z3::forall(a, k, d, x, z3::implies(k != a, softmax_(a, P(k, d, x)) ==
                                                                P(k, d, softmax_(a, x)))));
    // BatchMatMul [b, h, m, k] is local to partitions of its batch dims.
    ax.push_back(z3::forall(k, d, x, y, z3::implies(k == 0 || k == 1,
                                                    bmm_(P(k, d, x), P(k, d, y)) ==
                                                        P(k, d, bmm_(x, y)))));
    // Add: commutative, associative, and the Reduce of two replicas.
    ax.push_back(z3::forall(x, y, add_(x, y) == add_(y, x)));
    ax.push_back(z3::forall(x, y, z, add_(add_(x, y), z) == add_(x, add_(y, z))));
    ax.push_back(z3::forall(x, y, reduce_(I(2), concat_(I(-1), x, y)) == add_(x, y)));
    // Concat and Split (two equal parts) along a tensor axis are inverses.
    ax.push_back(z3::forall(a, x, y, z3::implies(a >= 0, split_(a, I(2), I(0), concat_(a, x, y)) == x)));
    ax.push_back(z3::forall(a, x, y, z3::implies(a >= 0, split_(a, I(2), I(1), concat_(a, x, y)) == y)));
    ax.push_back(z3::forall(a, x, z3::implies(a >= 0, concat_(a, split_(a, I(2), I(0), x),
                                                              split_(a, I(2), I(1), x)) == x)));
    // MatMul is linear over Concat of x's rows and of w's columns; Relu over any Concat.
    ax.push_back(z3::forall(x, y, z, matmul_(concat_(I(0), x, y), z) ==
                                         concat_(I(0), matmul_(x, z), matmul_(y, z))));
    ax.push_back(z3::forall(x, y, z, matmul_(x, concat_(I(1), y, z)) ==
                                         concat_(I(1), matmul_(x, y), matmul_(x, z))));
    ax.push_back(z3::forall(a, x, y, z3::implies(a >= 0, relu_(concat_(a, x, y)) ==
                                                             concat_(a, relu_(x), relu_(y)))));
    return ax;
  }

  // The Z3 terms of a rule graph's outputs, or an error string in `err`.
  std::vector<z3::expr> Translate(const Rule& rule, const RuleGraph& g, std::string* err) {
    std::map<std::string, z3::expr> env;
    for (const RuleInput& in : rule.inputs) {
      env.emplace(in.name, ctx_.constant(absl::StrCat("in_", in.name).c_str(), t_));
    }
    auto attr = [&](const RuleOp& op, const char* n) -> z3::expr {
      const RuleAttr& a = op.attr(n);
      return a.kind == RuleAttr::Kind::kDegreeSymbol ? degree_ : ctx_.int_val(a.Resolve(0));
    };
    for (const RuleOp& op : g.ops) {
      std::vector<z3::expr> in;
      for (const std::string& n : op.inputs) in.push_back(env.at(n));
      std::vector<z3::expr> out;
      const std::string& o = op.op;
      if (o == "MatMul") out.push_back(matmul_(in[0], in[1]));
      else if (o == "BatchMatMul") out.push_back(bmm_(in[0], in[1]));
      else if (o == "Add") out.push_back(add_(in[0], in[1]));
      else if (o == "Relu") out.push_back(relu_(in[0]));
      else if (o == "GeLU") out.push_back(gelu_(in[0]));
      else if (o == "Conv2D") out.push_back(conv2d_(in[0], in[1]));
      else if (o == "Softmax") out.push_back(softmax_(attr(op, "axis"), in[0]));
      else if (o == "Partition") out.push_back(partition_(attr(op, "dim"), attr(op, "degree"), in[0]));
      else if (o == "Combine") out.push_back(combine_(attr(op, "dim"), attr(op, "degree"), in[0]));
      else if (o == "Replicate") out.push_back(replicate_(attr(op, "degree"), in[0]));
      else if (o == "Reduce") out.push_back(reduce_(attr(op, "degree"), in[0]));
      else if (o == "Concat" && in.size() == 2) out.push_back(concat_(attr(op, "axis"), in[0], in[1]));
      else if (o == "Split" && NumOutputs(op) == 2) {
        for (int i = 0; i < 2; ++i) {
          out.push_back(split_(attr(op, "axis"), ctx_.int_val(2), ctx_.int_val(i), in[0]));
        }
      } else {
        *err = absl::StrCat("line ", op.line, ": no Z3 form for ", o, " with ", in.size(), " inputs");
        return {};
      }
      for (size_t i = 0; i < out.size(); ++i) env.emplace(op.outputs[i], out[i]);
    }
    std::vector<z3::expr> outputs;
    for (const std::string& n : g.outputs) outputs.push_back(env.at(n));
    return outputs;
  }

 private:
  z3::context ctx_;
  z3::sort t_, i_;
  z3::func_decl matmul_, bmm_, add_, relu_, gelu_, softmax_, concat_, split_, conv2d_;
  z3::func_decl partition_, combine_, replicate_, reduce_;
  z3::expr degree_;
};

constexpr unsigned kTimeoutMs = 2000;
constexpr unsigned kWrongTimeoutMs = 300;

// z3::unsat when the rule is proved; `err` is set when it cannot be stated.
z3::check_result Prove(const Rule& rule, std::string* err, unsigned timeout_ms = kTimeoutMs) {
  Theory th;
  std::vector<z3::expr> src = th.Translate(rule, rule.src, err);
  if (!err->empty()) return z3::unknown;
  std::vector<z3::expr> dst = th.Translate(rule, rule.dst, err);
  if (!err->empty()) return z3::unknown;
  z3::solver s(th.ctx());
  z3::params p(th.ctx());
  p.set("timeout", timeout_ms);
  s.set(p);
  for (const z3::expr& a : th.Axioms()) s.add(a);
  s.add(th.degree() >= 2);
  z3::expr differs = th.ctx().bool_val(false);
  for (size_t i = 0; i < src.size(); ++i) differs = differs || src[i] != dst[i];
  s.add(differs);
  return s.check();
}

std::string ResultName(z3::check_result r) {
  return r == z3::unsat ? "unsat (proved)" : r == z3::sat ? "sat (counterexample)" : "unknown";
}

TEST(RuleProofTest, EveryZ3RuleIsProved) {
  absl::StatusOr<std::vector<Rule>> rules = LoadRuleFile(BRAID_RULES_FILE);
  ASSERT_TRUE(rules.ok()) << rules.status();
  int proved = 0, numeric = 0;
  for (const Rule& rule : *rules) {
    if (rule.proof != ProofMethod::kZ3) {
      ++numeric;
      continue;
    }
    auto start = std::chrono::steady_clock::now();
    std::string err;
    z3::check_result r = Prove(rule, &err);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    EXPECT_TRUE(err.empty()) << "rule " << rule.name << ": " << err;
    EXPECT_EQ(r, z3::unsat) << "rule " << rule.name << " (line " << rule.line
                            << ") is marked `proof: z3` but Z3 says " << ResultName(r);
    if (r == z3::unsat) ++proved;
    std::cout << "  " << rule.name << ": " << ResultName(r) << " in " << ms << " ms\n";
  }
  std::cout << proved << " rules proved by Z3, " << numeric << " checked numerically only\n";
  EXPECT_GE(proved, 15);
}

absl::StatusOr<Rule> ParseOne(const std::string& body) {
  absl::StatusOr<std::vector<Rule>> rules =
      ParseRuleFile("rule wrong\n  proof: z3\n" + body + "end\n");
  if (!rules.ok()) return rules.status();
  return (*rules)[0];
}

// The proof must be able to fail: wrong rules are not proved, and the axioms
// alone are not contradictory (else everything would be "proved").
TEST(RuleProofTest, WrongRulesAreNotProved) {
  const char* wrong[] = {
      // Combine of the wrong dim after data-parallel MatMul.
      "  input x [8, 8]\n  input w [8, 8]\n  src y = MatMul(x, w)\n"
      "  dst xp = Partition(x, dim=0, degree=d)\n  dst wr = Replicate(w, degree=d)\n"
      "  dst yp = MatMul(xp, wr)\n  dst y = Combine(yp, dim=1, degree=d)\n  output y\n",
      // Relu does not commute with Reduce.
      "  input x [8, 8] replica=d\n  src s = Reduce(x, degree=d)\n  src y = Relu(s)\n"
      "  dst r = Relu(x)\n  dst y = Reduce(r, degree=d)\n  output y\n",
      // Softmax over the partitioned axis.
      "  input x [8, 8]\n  src y = Softmax(x, axis=1)\n"
      "  dst xp = Partition(x, dim=1, degree=d)\n  dst yp = Softmax(xp, axis=1)\n"
      "  dst y = Combine(yp, dim=1, degree=d)\n  output y\n",
      // Split gives its parts back in order, not swapped.
      "  input x1 [8, 8]\n  input x2 [8, 8]\n  src c = Concat(x1, x2, axis=1)\n"
      "  src y1, y2 = Split(c, axis=1, parts=2)\n  output y1 -> x2\n  output y2 -> x1\n",
      // Megatron with the weights partitioned the other way round.
      "  input x [8, 8]\n  input w1 [8, 8]\n  input w2 [8, 8]\n"
      "  src h = MatMul(x, w1)\n  src y = MatMul(h, w2)\n"
      "  dst xr = Replicate(x, degree=d)\n  dst w1p = Partition(w1, dim=0, degree=d)\n"
      "  dst hp = MatMul(xr, w1p)\n  dst w2p = Partition(w2, dim=1, degree=d)\n"
      "  dst yp = MatMul(hp, w2p)\n  dst y = Reduce(yp, degree=d)\n  output y\n",
  };
  for (const char* body : wrong) {
    absl::StatusOr<Rule> rule = ParseOne(body);
    ASSERT_TRUE(rule.ok()) << rule.status();
    std::string err;
    // A wrong rule runs to the timeout (unknown) or gets a model (sat).
    EXPECT_NE(Prove(*rule, &err, kWrongTimeoutMs), z3::unsat) << body;
    EXPECT_TRUE(err.empty()) << err;
  }
  Theory th;
  z3::solver s(th.ctx());
  z3::params p(th.ctx());
  p.set("timeout", kWrongTimeoutMs);
  s.set(p);
  for (const z3::expr& a : th.Axioms()) s.add(a);
  EXPECT_NE(s.check(), z3::unsat) << "the axioms contradict each other";
}

}  // namespace
}  // namespace braid::search
