// The PCG substitution rule file: named pairs of small graphs (source pattern
// -> target pattern) over tensor variables, compute ops and Unity's parallel
// ops (Partition, Combine, Replicate, Reduce), with the parallel degree as the
// symbol `d`, bound when a rule is checked or applied. The rules are data
// (search/substitutions/rules.txt); rule_check_test evaluates both sides of
// every rule with LibTorch and rule_proof_test proves the `proof: z3` ones.
//
// Format (one statement per line, `#` starts a comment):
//
//   rule matmul_data_parallel
//     proof: z3                       # or `numeric`
//     doc: Partition the rows of x, replicate w, combine the rows of y.
//     input x [8, 16]                 # shape used by the numeric check
//     input p [8, 16] replica=d       # an input that is already d partial sums
//     src y = MatMul(x, w)
//     dst xp = Partition(x, dim=0, degree=d)
//     dst wr = Replicate(w, degree=d)
//     dst yp = MatMul(xp, wr)
//     dst y = Combine(yp, dim=0, degree=d)
//     output y                        # same name on both sides, or
//     output y1 -> x1                 # source variable -> target variable
//   end
//
// The source and target graphs have separate variable namespaces; both see
// the inputs. Split has `parts` outputs: `src a, b = Split(c, axis=1, parts=2)`.
// Concat's axis may be `r`: a concatenation along the replica dimension (the
// inputs become the replicas of one parallel tensor, Unity Fig. 11b).
//
// Usage:
//   absl::StatusOr<std::vector<Rule>> rules = LoadRuleFile(path);
//   for (const Rule& r : *rules) ... r.src.ops ... r.dst.ops ...
#ifndef BRAID_SEARCH_SUBSTITUTIONS_RULE_FILE_H_
#define BRAID_SEARCH_SUBSTITUTIONS_RULE_FILE_H_

#include <cstdint>
#include <map>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"

namespace braid::search {

// An attribute value: an integer, the degree symbol `d`, or (Concat's axis
// only) the replica dimension `r`.
struct RuleAttr {
  enum class Kind { kInt, kDegreeSymbol, kReplicaAxis };
  Kind kind = Kind::kInt;
  int64_t value = 0;

  // The value with the degree symbol bound to `degree`; the replica axis is -1.
  int64_t Resolve(int64_t degree) const;
  std::string ToString() const;
};

// One operator application: `outputs = op(inputs, attrs)`.
struct RuleOp {
  std::string op;  // MatMul, BatchMatMul, Add, Relu, GeLU, Softmax, Concat,
                   // Split, Conv2D, Partition, Combine, Replicate, Reduce.
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
  std::map<std::string, RuleAttr> attrs;
  int line = 0;

  const RuleAttr& attr(const std::string& name) const { return attrs.at(name); }
};

// One side of a rule: ops in definition order (each uses only the inputs and
// earlier ops' outputs) and the variables that are the side's outputs.
struct RuleGraph {
  std::vector<RuleOp> ops;
  std::vector<std::string> outputs;
};

struct RuleInput {
  std::string name;
  std::vector<int64_t> shape;
  // Replicas of the input (a parallel tensor of partial sums); 1 for a plain
  // tensor. Kind kDegreeSymbol means `d`.
  RuleAttr replica{RuleAttr::Kind::kInt, 1};
};

// How a rule's correctness is established: `z3` rules are proved from the
// operator axioms in rule_proof_test (and also checked numerically); `numeric`
// rules are only evaluated on random inputs by rule_check_test.
enum class ProofMethod { kZ3, kNumeric };

struct Rule {
  std::string name;
  std::string doc;
  ProofMethod proof = ProofMethod::kNumeric;
  std::vector<RuleInput> inputs;
  RuleGraph src;
  RuleGraph dst;
  int line = 0;  // of the `rule` statement
};

// Parses rule-file text. `source` names the file in error messages. Errors are
// InvalidArgument and name the source, the line and (inside a rule) the rule.
absl::StatusOr<std::vector<Rule>> ParseRuleFile(absl::string_view text,
                                                absl::string_view source = "<rules>");

// Reads and parses a rule file (NotFound when it cannot be read).
absl::StatusOr<std::vector<Rule>> LoadRuleFile(const std::string& path);

// The text of rules.txt as braid was built with it, and its parse.
absl::string_view BuiltinRuleFile();
absl::StatusOr<std::vector<Rule>> BuiltinRules();

// The number of outputs `op` produces (Split: its `parts`).
int NumOutputs(const RuleOp& op);

}  // namespace braid::search

#endif  // BRAID_SEARCH_SUBSTITUTIONS_RULE_FILE_H_
