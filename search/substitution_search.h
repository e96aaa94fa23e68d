// Algebraic substitutions on forward graphs and Unity's substitution search
// (Unity §5.1, TASO's cost-based backtracking).
//
// The rule file (search/substitutions/rules.txt) holds two kinds of rules:
//  - parallel rules: either side uses Unity's parallel ops (Partition,
//    Combine, Replicate, Reduce) or a Concat along the replica dim `r`. braid
//    realizes them as per-op ParallelConfigs that the machine-mapping DP
//    enumerates (search/parallel_config.h, search/parallelize.h), so they are
//    never applied here as graph rewrites;
//  - algebraic rules: compute ops only on both sides (Concat/Split
//    cancellation, matmul_concat_rows, matmul_concat_weight_cols,
//    relu_concat). These rewrite a graph::Graph into another graph::Graph,
//    and the search below picks the sequence of them that the cost function
//    (the caller passes ParallelizeForward(...)->time_s) likes best.
//
// Matching. A rule's source pattern is matched op by op in definition order;
// an op whose inputs include a bound tensor is looked for among that tensor's
// consumers, otherwise among all ops (ascending ids), so the enumeration order
// is deterministic. Rule op names map to braid kinds (MatMul/BatchMatMul ->
// MatMul without transA/transB, Add, Relu, GeLU -> Gelu, Softmax, Concat,
// Split, Conv2D -> Conv). The rules are written on tensors of a fixed rank
// (the `input` shapes); a graph tensor may have that rank or more, and axis
// attributes count from the last dim (a rule's Concat axis 1 on [8, 16]
// tensors is axis 2 of a [B, S, H] tensor: MatMul's batch dims ride along).
// A match is rejected when
//  - an op kind, arity, output count or (normalized) axis differs;
//  - an intermediate pattern tensor (not a pattern output) is read outside
//    the match or is a graph output (the rewrite would drop a live value);
//  - an input variable binds a tensor a matched op produces;
// and the rewrite of a match fails (FailedPrecondition) when the replacement's
// inferred shapes do not reproduce the pattern outputs' shapes and dtypes:
// this is what makes a Split's parts line up with a Concat's inputs
// (concat_split_cancel), since a graph Split may have unequal parts.
//
// Rewriting. Matched ops are removed, intermediate tensors dropped; each
// replacement op i is named "<root op>/<rule>/<i>" (root: the op matched to
// the pattern's last op) and its new tensors after it. A pattern output that
// the replacement computes keeps its tensor (name, id order, graph output);
// one the replacement maps to an existing tensor (`output y1 -> x1`) has its
// readers and graph-output slot redirected to that tensor. Parameters are
// kept; new ops get AnnotateCost; the result is rebuilt in topological order
// and Validate()d.
//
// Search (Unity §5.1): a priority queue of graphs ordered by cost (ties by
// insertion), every algebraic rule at every match of the popped graph;
// a rewrite whose fingerprint (graph/fingerprint.h) was seen is skipped, a
// new one is costed, and kept in the queue when cost < alpha * best (alpha
// 1.05 as in Unity and TASO). Budget: at most `budget` cost evaluations
// (the input graph's included) and an optional wall-time limit. A rewrite the
// cost function rejects (an error) is counted and skipped.
//
//   std::vector<Rule> rules = *LoadRuleFile("search/substitutions/rules.txt");
//   ClusterSpec c = *WithRanks(*LoadCluster("dgx-h100"), 8);
//   ClusterCostModel cm(c, nullptr, nullptr, CommModel(c));
//   SubstitutionCostFn cost = [&](const graph::Graph& g) -> absl::StatusOr<double> {
//     ASSIGN_OR_RETURN(ParallelizeResult r, ParallelizeForward(g, c, cm));
//     return r.time_s;
//   };
//   absl::StatusOr<SubstitutionSearchResult> r = SubstitutionSearch(g, rules, cost);
//   r->best; r->best_cost; r->steps[0].rule; r->steps[0].matched_ops; r->evaluated;
#ifndef BRAID_SEARCH_SUBSTITUTION_SEARCH_H_
#define BRAID_SEARCH_SUBSTITUTION_SEARCH_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "graph/graph.h"
#include "search/stop_token.h"
#include "search/substitutions/rule_file.h"

namespace braid::search {

// Partition, Combine, Replicate, Reduce.
bool IsParallelRuleOp(const std::string& op);
// Either side uses a parallel op or a Concat along the replica dim `r`.
bool IsParallelRule(const Rule& rule);

// A rule oriented for rewriting: match `pattern`, replace it by
// `replacement`; pattern.outputs[i] becomes replacement.outputs[i].
struct RewriteRule {
  std::string name;  // the rule's name; "<name>.reverse" for target -> source
  std::vector<RuleInput> inputs;
  RuleGraph pattern;
  RuleGraph replacement;
  // The rank each variable has in the rule (from the `input` shapes): graph
  // tensors may have more, and axes are mapped counting from the last dim.
  std::map<std::string, int> pattern_ranks;
  std::map<std::string, int> replacement_ranks;
};

// The algebraic rules of `rules`, in file order, each source -> target; with
// `reverse`, also target -> source ("<name>.reverse", right after it) where
// that direction has a pattern op, every pattern output is computed by a
// pattern op and the replacement reads only inputs the pattern binds (the
// Concat/Split cancellations have no reverse). InvalidArgument when a rule
// names an op kind braid cannot map.
absl::StatusOr<std::vector<RewriteRule>> AlgebraicRewriteRules(const std::vector<Rule>& rules,
                                                              bool reverse = false);

// One place a rule's pattern occurs in a graph.
struct RuleMatch {
  std::vector<graph::OpId> ops;                  // per pattern op
  std::map<std::string, graph::TensorId> vars;   // every pattern variable
};

// Every match of `rule` in `g`, in a deterministic order (see the top).
std::vector<RuleMatch> FindMatches(const graph::Graph& g, const RewriteRule& rule);

// The graph with `match` replaced. FailedPrecondition when the replacement's
// shapes do not reproduce the pattern outputs, a cycle would appear, or a
// redirected graph output would land on a graph source; Unimplemented for a
// replacement op without a shape rule here (Conv2D).
absl::StatusOr<graph::Graph> ApplyMatch(const graph::Graph& g, const RewriteRule& rule,
                                        const RuleMatch& match);

using SubstitutionCostFn = std::function<absl::StatusOr<double>(const graph::Graph&)>;

struct SubstitutionSearchOptions {
  // Keep a candidate when cost < alpha * best (Unity and TASO: 1.05).
  double alpha = 1.05;
  // Most cost-function calls, the input graph's included (>= 1).
  int budget = 200;
  // Wall-time limit in seconds; 0: none. Checked before each evaluation.
  double time_limit_s = 0;
  // Apply the algebraic rules in both directions (AlgebraicRewriteRules).
  bool reverse_rules = false;
  // Checked with time_limit_s, and between rules and matches: once it fires
  // the search ends with the best graph so far (`stopped`). A cost-function
  // error that is this stop (StopToken::ToStatus) ends it the same way.
  StopToken stop;
};

// One rewrite on the way from the input to the best graph.
struct SubstitutionStep {
  std::string rule;
  std::vector<std::string> matched_ops;  // names, per pattern op
};

struct SubstitutionSearchResult {
  graph::Graph best;
  double best_cost = 0;
  double initial_cost = 0;
  std::vector<SubstitutionStep> steps;  // input -> best
  int evaluated = 0;         // cost-function calls (rejected ones included)
  int cost_rejected = 0;     // calls that returned an error
  int rewrite_failed = 0;    // matches ApplyMatch refused
  int duplicates = 0;        // rewrites whose fingerprint was seen
  int expanded = 0;          // graphs popped from the queue
  int rules_used = 0;        // algebraic rewrite rules tried
  int parallel_rules_skipped = 0;  // rules left to the parallelization DP
  bool budget_exhausted = false;
  bool timed_out = false;
  bool stopped = false;  // options.stop fired (cancelled or past its deadline)
  double search_s = 0;
};

// InvalidArgument for alpha < 1 or budget < 1; the cost function's error on
// the input graph (options.stop's status when it fired before that cost);
// AlgebraicRewriteRules' errors.
absl::StatusOr<SubstitutionSearchResult> SubstitutionSearch(
    const graph::Graph& forward, const std::vector<Rule>& rules, const SubstitutionCostFn& cost_fn,
    const SubstitutionSearchOptions& options = {});

}  // namespace braid::search

#endif  // BRAID_SEARCH_SUBSTITUTION_SEARCH_H_
