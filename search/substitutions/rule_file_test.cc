#include "search/substitutions/rule_file.h"

#include <set>
#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace braid::search {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kGood[] = R"(
# a comment
rule dp   # trailing comment
  proof: z3
  doc: first line
  doc: second line
  input x [8, 16]
  input w [16, 8]
  input p [8, 8] replica=d
  src y = MatMul(x, w)
  dst xp = Partition(x, dim=0, degree=d)
  dst wr = Replicate(w, degree=d)
  dst yp = MatMul(xp, wr)
  dst y = Combine(yp, dim=0, degree=d)
  output y
end

rule split
  proof: numeric
  input x1 [8, 8]
  input x2 [8, 8]
  src c = Concat(x1, x2, axis=r)
  src a, b = Split(c, axis=1, parts=2)
  output a -> x1
  output b -> x2
end
)";

TEST(RuleFileTest, ParsesRules) {
  absl::StatusOr<std::vector<Rule>> rules = ParseRuleFile(kGood);
  ASSERT_TRUE(rules.ok()) << rules.status();
  ASSERT_EQ(rules->size(), 2u);
  const Rule& dp = (*rules)[0];
  EXPECT_EQ(dp.name, "dp");
  EXPECT_EQ(dp.line, 3);
  EXPECT_EQ(dp.proof, ProofMethod::kZ3);
  EXPECT_EQ(dp.doc, "first line second line");
  ASSERT_EQ(dp.inputs.size(), 3u);
  EXPECT_THAT(dp.inputs[1].shape, ElementsAre(16, 8));
  EXPECT_EQ(dp.inputs[0].replica.Resolve(4), 1);
  EXPECT_EQ(dp.inputs[2].replica.Resolve(4), 4);
  ASSERT_EQ(dp.dst.ops.size(), 4u);
  const RuleOp& part = dp.dst.ops[0];
  EXPECT_EQ(part.op, "Partition");
  EXPECT_THAT(part.inputs, ElementsAre("x"));
  EXPECT_THAT(part.outputs, ElementsAre("xp"));
  EXPECT_EQ(part.attr("dim").Resolve(4), 0);
  EXPECT_EQ(part.attr("degree").Resolve(4), 4);
  EXPECT_EQ(part.attr("degree").ToString(), "d");
  EXPECT_EQ(part.line, 11);
  EXPECT_THAT(dp.src.outputs, ElementsAre("y"));
  EXPECT_THAT(dp.dst.outputs, ElementsAre("y"));

  const Rule& split = (*rules)[1];
  EXPECT_EQ(split.proof, ProofMethod::kNumeric);
  EXPECT_EQ(split.src.ops[0].attr("axis").kind, RuleAttr::Kind::kReplicaAxis);
  EXPECT_THAT(split.src.ops[1].outputs, ElementsAre("a", "b"));
  EXPECT_TRUE(split.dst.ops.empty());
  EXPECT_THAT(split.src.outputs, ElementsAre("a", "b"));
  EXPECT_THAT(split.dst.outputs, ElementsAre("x1", "x2"));
}

// Parses `body` wrapped in a rule named r (the rule line is line 1) and
// expects an InvalidArgument whose message contains `what`.
void ExpectError(const std::string& text, const std::string& what) {
  absl::StatusOr<std::vector<Rule>> rules = ParseRuleFile(text, "t.txt");
  ASSERT_FALSE(rules.ok()) << "parsed: " << text;
  EXPECT_EQ(rules.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(rules.status().message()), HasSubstr(what)) << text;
}

std::string Wrap(const std::string& body) {
  return "rule r\n  proof: z3\n  input x [8, 8]\n  input w [8, 8]\n" + body + "end\n";
}

TEST(RuleFileTest, ErrorsNameTheRuleAndLine) {
  ExpectError(Wrap("  src y = MatMull(x, w)\n  output y\n"),
              "t.txt:5: rule 'r': unknown op `MatMull`");
  ExpectError(Wrap("  src y = MatMul(x, v)\n  output y\n"),
              "t.txt:5: rule 'r': src uses `v` before it is defined");
  ExpectError(Wrap("  src y = MatMul(x)\n  output y\n"), "t.txt:5: rule 'r': MatMul takes 2 inputs, got 1");
  ExpectError(Wrap("  src y = Partition(x, degree=d)\n  output y\n"),
              "t.txt:5: rule 'r': Partition needs attribute `dim`");
  ExpectError(Wrap("  src y = Partition(x, dim=d, degree=2)\n  output y\n"),
              "`d` is only allowed for a degree");
  ExpectError(Wrap("  src y = Partition(x, dim=0, degree=0)\n  output y\n"), "value 0 is below 1");
  ExpectError(Wrap("  src y = Partition(x, dim=0, degree=two)\n  output y\n"), "`two` is not an integer");
  ExpectError(Wrap("  src y = Relu(x, axis=1)\n  output y\n"), "Relu has no attribute `axis`");
  ExpectError(Wrap("  src y = Softmax(x, axis=r)\n  output y\n"), "`r` (the replica axis) is only allowed");
  ExpectError(Wrap("  src a = Split(x, axis=1, parts=2)\n  output a\n"), "Split has 2 outputs, 1 named");
  ExpectError(Wrap("  src y = Relu(x)\n  src y = Relu(y)\n  output y\n"), "t.txt:6: rule 'r': src defines `y` twice");
  ExpectError(Wrap("  src y = Relu(x)\n  output z\n"), "t.txt:6: rule 'r': src has no variable `z`");
  ExpectError(Wrap("  src y = Relu(x)\n  dst z = Relu(x)\n  output y\n"), "dst has no variable `y`");
  ExpectError(Wrap("  src y = Relu(x)\n"), "t.txt:6: rule 'r': has no `output`");
  ExpectError(Wrap("  src y = Relu(x)\n  frobnicate\n  output y\n"), "t.txt:6: rule 'r': unknown statement `frobnicate`");
  ExpectError(Wrap("  src y = Relu(x)\n  input z [4]\n  output y -> x\n"),
              "inputs must be declared before the src and dst ops");
  ExpectError(Wrap("  input x [4]\n  src y = Relu(x)\n  output y\n"), "input 'x' declared twice");
  ExpectError(Wrap("  input z [4, -1]\n  src y = Relu(x)\n  output y\n"), "dimension `-1` is not a positive integer");
  ExpectError(Wrap("  src y Relu(x)\n  output y\n"), "expected `src OUT[, OUT...] = Op(");
  ExpectError("rule r\n  input x [8]\n  src y = Relu(x)\n  output y -> x\nend\n",
              "t.txt:5: rule 'r': missing `proof: z3|numeric`");
  ExpectError("rule r\n  proof: maybe\n", "t.txt:2: rule 'r': proof must be `z3` or `numeric`");
  ExpectError("rule r\n  proof: z3\n  input x [8]\n  src y = Relu(x)\n  output y -> x\n",
              "t.txt:1: rule 'r': has no `end`");
  ExpectError("\n\nsrc y = Relu(x)\n", "t.txt:3: expected `rule NAME`");
  ExpectError(Wrap("  src y = Relu(x)\n  output y -> x\n") + Wrap("  src y = Relu(x)\n  output y -> x\n"),
              "t.txt:8: duplicate rule name 'r'");
}

TEST(RuleFileTest, LoadsTheRepositoryRuleFile) {
  absl::StatusOr<std::vector<Rule>> rules = LoadRuleFile(BRAID_RULES_FILE);
  ASSERT_TRUE(rules.ok()) << rules.status();
  std::set<std::string> names;
  for (const Rule& r : *rules) names.insert(r.name);
  for (const char* required :
       {"matmul_data_parallel", "matmul_column_parallel", "matmul_row_parallel",
        "megatron_mlp_relu", "megatron_mlp_gelu", "attention_head_parallel", "relu_spatial_rows",
        "concat_split_cancel", "add_to_concat_reduce", "matmul_reduce_commute"}) {
    EXPECT_TRUE(names.contains(required)) << required;
  }
  EXPECT_EQ(LoadRuleFile("/nonexistent/rules.txt").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace braid::search
