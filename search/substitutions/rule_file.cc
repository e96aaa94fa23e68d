#include "search/substitutions/rule_file.h"

#include <fstream>
#include <set>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace braid::search {
namespace {

// What an op accepts. Attribute kinds: "degree" (int >= 1 or d), "dim"
// (int >= 0), "axis_or_r" (int >= 0 or r), "parts" (int >= 2), "int" (>= 0).
struct OpSpec {
  const char* name;
  int min_inputs;
  int max_inputs;
  std::vector<std::pair<const char*, const char*>> required;  // name, kind
  std::vector<std::pair<const char*, const char*>> optional;
};

const std::vector<OpSpec>& OpSpecs() {
  static const auto* specs = new std::vector<OpSpec>{
      {"MatMul", 2, 2, {}, {}},
      {"BatchMatMul", 2, 2, {}, {}},
      {"Add", 2, 2, {}, {}},
      {"Relu", 1, 1, {}, {}},
      {"GeLU", 1, 1, {}, {}},
      {"Softmax", 1, 1, {{"axis", "dim"}}, {}},
      {"Concat", 2, 8, {{"axis", "axis_or_r"}}, {}},
      {"Split", 1, 1, {{"axis", "dim"}, {"parts", "parts"}}, {}},
      {"Conv2D", 2, 2, {}, {{"padding", "int"}}},
      {"Partition", 1, 1, {{"dim", "dim"}, {"degree", "degree"}}, {}},
      {"Combine", 1, 1, {{"dim", "dim"}, {"degree", "degree"}}, {}},
      {"Replicate", 1, 1, {{"degree", "degree"}}, {}},
      {"Reduce", 1, 1, {{"degree", "degree"}}, {}},
  };
  return *specs;
}

const OpSpec* FindSpec(absl::string_view name) {
  for (const OpSpec& s : OpSpecs()) {
    if (name == s.name) return &s;
  }
  return nullptr;
}

bool IsIdentifier(absl::string_view s) {
  if (s.empty() || !(absl::ascii_isalpha(s[0]) || s[0] == '_')) return false;
  for (char c : s) {
    if (!(absl::ascii_isalnum(c) || c == '_')) return false;
  }
  return true;
}

// Parses one attribute value of the given kind; an empty string on success,
// else what is wrong.
std::string ParseAttrValue(absl::string_view text, absl::string_view kind, RuleAttr* out) {
  if (text == "d") {
    if (kind != "degree") return absl::StrCat("`d` is only allowed for a degree, not `", kind, "`");
    *out = {RuleAttr::Kind::kDegreeSymbol, 0};
    return "";
  }
  if (text == "r") {
    if (kind != "axis_or_r") return "`r` (the replica axis) is only allowed as Concat's axis";
    *out = {RuleAttr::Kind::kReplicaAxis, -1};
    return "";
  }
  int64_t v = 0;
  if (!absl::SimpleAtoi(text, &v)) return absl::StrCat("`", text, "` is not an integer");
  int64_t min = kind == "degree" ? 1 : kind == "parts" ? 2 : 0;
  if (v < min) return absl::StrCat("value ", v, " is below ", min);
  *out = {RuleAttr::Kind::kInt, v};
  return "";
}

// Parses and validates rule files line by line.
class Parser {
 public:
  explicit Parser(absl::string_view source) : source_(source) {}

  absl::StatusOr<std::vector<Rule>> Parse(absl::string_view text) {
    std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
    for (size_t i = 0; i < lines.size(); ++i) {
      line_ = static_cast<int>(i) + 1;
      absl::string_view l = lines[i];
      if (size_t hash = l.find('#'); hash != absl::string_view::npos) l = l.substr(0, hash);
      l = absl::StripAsciiWhitespace(l);
      if (l.empty()) continue;
      absl::Status s = in_rule_ ? RuleLine(l) : TopLine(l);
      if (!s.ok()) return s;
    }
    if (in_rule_) {
      line_ = rule_.line;
      return Error("has no `end`");
    }
    return std::move(rules_);
  }

 private:
  absl::Status Error(absl::string_view what) const {
    if (in_rule_) {
      return absl::InvalidArgumentError(
          absl::StrCat(source_, ":", line_, ": rule '", rule_.name, "': ", what));
    }
    return absl::InvalidArgumentError(absl::StrCat(source_, ":", line_, ": ", what));
  }

  absl::Status TopLine(absl::string_view l) {
    std::vector<absl::string_view> words = absl::StrSplit(l, ' ', absl::SkipWhitespace());
    if (words[0] != "rule") return Error(absl::StrCat("expected `rule NAME`, got `", l, "`"));
    if (words.size() != 2 || !IsIdentifier(words[1])) {
      return Error("expected `rule NAME` with NAME an identifier");
    }
    if (!names_.insert(std::string(words[1])).second) {
      return Error(absl::StrCat("duplicate rule name '", words[1], "'"));
    }
    rule_ = Rule{};
    rule_.name = std::string(words[1]);
    rule_.line = line_;
    in_rule_ = true;
    have_proof_ = false;
    src_defined_.clear();
    dst_defined_.clear();
    return absl::OkStatus();
  }

  absl::Status RuleLine(absl::string_view l) {
    if (l == "end") return EndRule();
    if (absl::ConsumePrefix(&l, "proof:")) {
      l = absl::StripAsciiWhitespace(l);
      if (l == "z3") {
        rule_.proof = ProofMethod::kZ3;
      } else if (l == "numeric") {
        rule_.proof = ProofMethod::kNumeric;
      } else {
        return Error(absl::StrCat("proof must be `z3` or `numeric`, got `", l, "`"));
      }
      have_proof_ = true;
      return absl::OkStatus();
    }
    if (absl::ConsumePrefix(&l, "doc:")) {
      if (!rule_.doc.empty()) absl::StrAppend(&rule_.doc, " ");
      absl::StrAppend(&rule_.doc, absl::StripAsciiWhitespace(l));
      return absl::OkStatus();
    }
    absl::string_view keyword = l.substr(0, l.find(' '));
    absl::string_view rest = absl::StripAsciiWhitespace(l.substr(keyword.size()));
    if (keyword == "input") return InputLine(rest);
    if (keyword == "src") return OpLine(rest, &rule_.src, &src_defined_);
    if (keyword == "dst") return OpLine(rest, &rule_.dst, &dst_defined_);
    if (keyword == "output") return OutputLine(rest);
    if (keyword == "rule") return Error("previous rule has no `end`");
    return Error(absl::StrCat("unknown statement `", keyword,
                              "` (expected proof:, doc:, input, src, dst, output or end)"));
  }

  absl::Status InputLine(absl::string_view rest) {
    if (!rule_.src.ops.empty() || !rule_.dst.ops.empty()) {
      return Error("inputs must be declared before the src and dst ops");
    }
    size_t open = rest.find('[');
    size_t close = rest.find(']');
    if (open == absl::string_view::npos || close == absl::string_view::npos || close < open) {
      return Error("expected `input NAME [D0, D1, ...] [replica=N|d]`");
    }
    RuleInput in;
    in.name = std::string(absl::StripAsciiWhitespace(rest.substr(0, open)));
    if (!IsIdentifier(in.name)) return Error(absl::StrCat("bad input name `", in.name, "`"));
    if (!src_defined_.insert(in.name).second) {
      return Error(absl::StrCat("input '", in.name, "' declared twice"));
    }
    dst_defined_.insert(in.name);
    for (absl::string_view dim : absl::StrSplit(rest.substr(open + 1, close - open - 1), ',')) {
      int64_t v = 0;
      if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(dim), &v) || v <= 0) {
        return Error(absl::StrCat("input '", in.name, "': dimension `",
                                  absl::StripAsciiWhitespace(dim), "` is not a positive integer"));
      }
      in.shape.push_back(v);
    }
    absl::string_view tail = absl::StripAsciiWhitespace(rest.substr(close + 1));
    if (!tail.empty()) {
      if (!absl::ConsumePrefix(&tail, "replica=")) {
        return Error(absl::StrCat("input '", in.name, "': unexpected `", tail, "`"));
      }
      std::string err = ParseAttrValue(tail, "degree", &in.replica);
      if (!err.empty()) return Error(absl::StrCat("input '", in.name, "': replica: ", err));
    }
    rule_.inputs.push_back(std::move(in));
    return absl::OkStatus();
  }

  absl::Status OpLine(absl::string_view rest, RuleGraph* g, std::set<std::string>* defined) {
    const char* side = g == &rule_.src ? "src" : "dst";
    size_t eq = rest.find('=');
    size_t open = rest.find('(');
    if (eq == absl::string_view::npos || open == absl::string_view::npos || open < eq ||
        rest.back() != ')') {
      return Error(absl::StrCat("expected `", side, " OUT[, OUT...] = Op(IN, ..., key=value)`"));
    }
    RuleOp op;
    op.line = line_;
    op.op = std::string(absl::StripAsciiWhitespace(rest.substr(eq + 1, open - eq - 1)));
    const OpSpec* spec = FindSpec(op.op);
    if (spec == nullptr) return Error(absl::StrCat("unknown op `", op.op, "`"));
    for (absl::string_view out : absl::StrSplit(rest.substr(0, eq), ',')) {
      op.outputs.emplace_back(absl::StripAsciiWhitespace(out));
    }
    absl::string_view args = rest.substr(open + 1, rest.size() - open - 2);
    for (absl::string_view arg : absl::StrSplit(args, ',', absl::SkipWhitespace())) {
      arg = absl::StripAsciiWhitespace(arg);
      if (size_t kv = arg.find('='); kv != absl::string_view::npos) {
        std::string key(absl::StripAsciiWhitespace(arg.substr(0, kv)));
        absl::string_view value = absl::StripAsciiWhitespace(arg.substr(kv + 1));
        const char* kind = nullptr;
        for (const auto& [n, k] : spec->required) {
          if (key == n) kind = k;
        }
        for (const auto& [n, k] : spec->optional) {
          if (key == n) kind = k;
        }
        if (kind == nullptr) return Error(absl::StrCat(op.op, " has no attribute `", key, "`"));
        RuleAttr a;
        std::string err = ParseAttrValue(value, kind, &a);
        if (!err.empty()) return Error(absl::StrCat(op.op, " attribute `", key, "`: ", err));
        if (!op.attrs.emplace(key, a).second) {
          return Error(absl::StrCat(op.op, " attribute `", key, "` given twice"));
        }
      } else {
        if (!op.attrs.empty()) {
          return Error(absl::StrCat(op.op, ": positional input `", arg, "` after an attribute"));
        }
        if (!defined->contains(std::string(arg))) {
          return Error(absl::StrCat(side, " uses `", arg, "` before it is defined"));
        }
        op.inputs.emplace_back(arg);
      }
    }
    for (const auto& [n, k] : spec->required) {
      if (!op.attrs.contains(n)) return Error(absl::StrCat(op.op, " needs attribute `", n, "`"));
    }
    int n_in = static_cast<int>(op.inputs.size());
    if (n_in < spec->min_inputs || n_in > spec->max_inputs) {
      return Error(absl::StrCat(op.op, " takes ", spec->min_inputs,
                                spec->max_inputs == spec->min_inputs
                                    ? std::string()
                                    : absl::StrCat(" to ", spec->max_inputs),
                                " inputs, got ", n_in));
    }
    if (static_cast<int>(op.outputs.size()) != NumOutputs(op)) {
      return Error(absl::StrCat(op.op, " has ", NumOutputs(op), " outputs, ",
                                op.outputs.size(), " named"));
    }
    for (const std::string& out : op.outputs) {
      if (!IsIdentifier(out)) return Error(absl::StrCat("bad variable name `", out, "`"));
      if (!defined->insert(out).second) {
        return Error(absl::StrCat(side, " defines `", out, "` twice"));
      }
    }
    g->ops.push_back(std::move(op));
    return absl::OkStatus();
  }

  absl::Status OutputLine(absl::string_view rest) {
    std::vector<std::string> parts = absl::StrSplit(rest, absl::ByString("->"));
    if (parts.size() > 2) return Error("expected `output NAME` or `output SRC -> DST`");
    std::string src(absl::StripAsciiWhitespace(parts[0]));
    std::string dst(absl::StripAsciiWhitespace(parts.size() == 2 ? parts[1] : parts[0]));
    if (!src_defined_.contains(src)) return Error(absl::StrCat("src has no variable `", src, "`"));
    if (!dst_defined_.contains(dst)) return Error(absl::StrCat("dst has no variable `", dst, "`"));
    rule_.src.outputs.push_back(src);
    rule_.dst.outputs.push_back(dst);
    return absl::OkStatus();
  }

  absl::Status EndRule() {
    if (!have_proof_) return Error("missing `proof: z3|numeric`");
    if (rule_.inputs.empty()) return Error("declares no inputs");
    if (rule_.src.ops.empty()) return Error("has no src ops");
    if (rule_.src.outputs.empty()) return Error("has no `output`");
    rules_.push_back(std::move(rule_));
    in_rule_ = false;
    return absl::OkStatus();
  }

  std::string source_;
  int line_ = 0;
  bool in_rule_ = false;
  bool have_proof_ = false;
  Rule rule_;
  std::set<std::string> src_defined_, dst_defined_, names_;
  std::vector<Rule> rules_;
};

}  // namespace

int64_t RuleAttr::Resolve(int64_t degree) const {
  switch (kind) {
    case Kind::kInt: return value;
    case Kind::kDegreeSymbol: return degree;
    case Kind::kReplicaAxis: return -1;
  }
  return value;
}

std::string RuleAttr::ToString() const {
  switch (kind) {
    case Kind::kInt: return absl::StrCat(value);
    case Kind::kDegreeSymbol: return "d";
    case Kind::kReplicaAxis: return "r";
  }
  return "?";
}

int NumOutputs(const RuleOp& op) {
  if (op.op == "Split") {
    auto it = op.attrs.find("parts");
    return it == op.attrs.end() ? 1 : static_cast<int>(it->second.value);
  }
  return 1;
}

absl::StatusOr<std::vector<Rule>> ParseRuleFile(absl::string_view text, absl::string_view source) {
  return Parser(source).Parse(text);
}

absl::StatusOr<std::vector<Rule>> LoadRuleFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read rule file ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseRuleFile(ss.str(), path);
}

absl::StatusOr<std::vector<Rule>> BuiltinRules() {
  return ParseRuleFile(BuiltinRuleFile(), "rules.txt (built in)");
}

}  // namespace braid::search
