#include "graph/text_format.h"

#include <cctype>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"

namespace braid::graph {
namespace {

bool IsBareChar(char c) {
  return !std::isspace(static_cast<unsigned char>(c)) && c != '(' && c != ')' && c != ',' &&
         c != '{' && c != '}' && c != '=' && c != '"' && c != '[' && c != ']' && c != '#';
}

std::string Quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  out += '"';
  return out;
}

// Names are written bare when that parses back to the same name.
std::string Name(std::string_view s) {
  bool bare = !s.empty();
  for (char c : s) bare = bare && IsBareChar(c);
  return bare ? std::string(s) : Quote(s);
}

std::string Float(double v) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  std::string s = buf;
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // keep it a float
  return s;
}

std::string AttrText(const AttrValue& v) {
  struct Visitor {
    std::string operator()(int64_t i) const { return absl::StrCat(i); }
    std::string operator()(double d) const { return Float(d); }
    std::string operator()(const std::string& s) const { return Quote(s); }
    std::string operator()(const std::vector<int64_t>& l) const {
      return absl::StrCat("[", absl::StrJoin(l, ","), "]");
    }
    std::string operator()(const std::vector<double>& l) const {
      std::vector<std::string> parts;
      for (double d : l) parts.push_back(Float(d));
      return absl::StrCat("f[", absl::StrJoin(parts, ","), "]");
    }
  };
  return std::visit(Visitor{}, v);
}

// ---- Parsing ---------------------------------------------------------------

enum class Tok { kWord, kString, kPunct, kEnd };

struct Token {
  Tok kind = Tok::kEnd;
  std::string text;
};

class Lexer {
 public:
  Lexer(std::string_view line, int line_no) : s_(line), line_no_(line_no) {}

  absl::StatusOr<Token> Next() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
    if (pos_ >= s_.size() || s_[pos_] == '#') return Token{Tok::kEnd, ""};
    char c = s_[pos_];
    if (c == '"') {
      std::string out;
      ++pos_;
      while (pos_ < s_.size() && s_[pos_] != '"') {
        if (s_[pos_] == '\\' && pos_ + 1 < s_.size()) {
          ++pos_;
          out += s_[pos_] == 'n' ? '\n' : s_[pos_];
        } else {
          out += s_[pos_];
        }
        ++pos_;
      }
      if (pos_ >= s_.size()) return Error("unterminated string");
      ++pos_;
      return Token{Tok::kString, std::move(out)};
    }
    if (!IsBareChar(c)) {
      ++pos_;
      return Token{Tok::kPunct, std::string(1, c)};
    }
    size_t start = pos_;
    while (pos_ < s_.size() && IsBareChar(s_[pos_])) ++pos_;
    return Token{Tok::kWord, std::string(s_.substr(start, pos_ - start))};
  }

  absl::StatusOr<Token> Peek() {
    size_t save = pos_;
    auto t = Next();
    pos_ = save;
    return t;
  }

  absl::Status Expect(std::string_view punct) {
    ASSIGN_OR_RETURN(auto t, Next());
    if (t.kind != Tok::kPunct || t.text != punct) {
      return Error(absl::StrCat("expected '", std::string(punct), "', got '", t.text, "'"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> NameToken(std::string_view what) {
    ASSIGN_OR_RETURN(auto t, Next());
    if (t.kind != Tok::kWord && t.kind != Tok::kString) {
      return Error(absl::StrCat("expected ", std::string(what), ", got '", t.text, "'"));
    }
    return t.text;
  }

  absl::Status Error(std::string_view msg) const {
    return absl::InvalidArgumentError(absl::StrCat("line ", line_no_, ": ", std::string(msg)));
  }

 private:
  std::string_view s_;
  size_t pos_ = 0;
  int line_no_;
};

absl::StatusOr<int64_t> ParseInt(Lexer& lx, std::string_view text) {
  int64_t v;
  if (!absl::SimpleAtoi(std::string(text), &v)) {
    return lx.Error(absl::StrCat("expected an integer, got '", std::string(text), "'"));
  }
  return v;
}

absl::StatusOr<double> ParseDouble(Lexer& lx, std::string_view text) {
  std::string s(text);
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size()) {
    return lx.Error(absl::StrCat("expected a number, got '", s, "'"));
  }
  return v;
}

bool LooksFloat(std::string_view t) { return t.find_first_of(".eEn") != std::string_view::npos; }

// Parses "[a,b,c]" after the '[' has been consumed.
template <typename T, typename F>
absl::StatusOr<std::vector<T>> ParseList(Lexer& lx, F parse_one) {
  std::vector<T> out;
  ASSIGN_OR_RETURN(auto t, lx.Next());
  if (t.kind == Tok::kPunct && t.text == "]") return out;
  while (true) {
    if (t.kind != Tok::kWord) return lx.Error(absl::StrCat("bad list element '", t.text, "'"));
    ASSIGN_OR_RETURN(auto v, parse_one(lx, t.text));
    out.push_back(v);
    ASSIGN_OR_RETURN(t, lx.Next());
    if (t.kind == Tok::kPunct && t.text == "]") return out;
    if (t.kind != Tok::kPunct || t.text != ",") return lx.Error("expected ',' or ']' in a list");
    ASSIGN_OR_RETURN(t, lx.Next());
  }
}

absl::StatusOr<AttrValue> ParseAttrValue(Lexer& lx) {
  ASSIGN_OR_RETURN(auto t, lx.Next());
  if (t.kind == Tok::kString) return AttrValue(t.text);
  if (t.kind == Tok::kPunct && t.text == "[") {
    ASSIGN_OR_RETURN(auto l, ParseList<int64_t>(lx, ParseInt));
    return AttrValue(l);
  }
  if (t.kind == Tok::kWord && t.text == "f") {
    RETURN_IF_ERROR(lx.Expect("["));
    ASSIGN_OR_RETURN(auto l, ParseList<double>(lx, ParseDouble));
    return AttrValue(l);
  }
  if (t.kind != Tok::kWord) return lx.Error(absl::StrCat("bad attribute value '", t.text, "'"));
  if (LooksFloat(t.text)) {
    ASSIGN_OR_RETURN(auto d, ParseDouble(lx, t.text));
    return AttrValue(d);
  }
  ASSIGN_OR_RETURN(auto i, ParseInt(lx, t.text));
  return AttrValue(i);
}

// Parses "(a, b, c)" into tensor ids.
absl::StatusOr<std::vector<TensorId>> ParseTensorList(Lexer& lx, const Graph& g) {
  RETURN_IF_ERROR(lx.Expect("("));
  std::vector<TensorId> ids;
  ASSIGN_OR_RETURN(auto peek, lx.Peek());
  if (peek.kind == Tok::kPunct && peek.text == ")") {
    lx.Next().IgnoreError();
    return ids;
  }
  while (true) {
    ASSIGN_OR_RETURN(auto name, lx.NameToken("a tensor name"));
    auto id = g.FindTensor(name);
    if (!id.ok()) return lx.Error(absl::StrCat("unknown tensor '", name, "'"));
    ids.push_back(*id);
    ASSIGN_OR_RETURN(auto t, lx.Next());
    if (t.kind == Tok::kPunct && t.text == ")") return ids;
    if (t.kind != Tok::kPunct || t.text != ",") return lx.Error("expected ',' or ')'");
  }
}

absl::Status ParseTensorLine(Lexer& lx, Graph& g,
                             std::vector<std::pair<TensorId, std::string>>& grad_links) {
  ASSIGN_OR_RETURN(auto name, lx.NameToken("a tensor name"));
  ASSIGN_OR_RETURN(auto dt, lx.Next());
  auto dtype = ParseDType(dt.text);
  if (!dtype.ok()) return lx.Error(std::string(dtype.status().message()));
  RETURN_IF_ERROR(lx.Expect("["));
  ASSIGN_OR_RETURN(auto shape, ParseList<int64_t>(lx, ParseInt));
  ASSIGN_OR_RETURN(auto rt, lx.Next());
  auto role = ParseRole(rt.text);
  if (!role.ok()) return lx.Error(std::string(role.status().message()));
  if (g.FindTensor(name).ok()) return lx.Error(absl::StrCat("tensor '", name, "' declared twice"));
  TensorId id = g.AddTensor(name, shape, *dtype, *role);
  ASSIGN_OR_RETURN(auto t, lx.Next());
  if (t.kind == Tok::kWord && t.text == "of") {
    RETURN_IF_ERROR(lx.Expect("="));
    ASSIGN_OR_RETURN(auto of, lx.NameToken("a parameter name"));
    grad_links.emplace_back(id, of);
    ASSIGN_OR_RETURN(t, lx.Next());
  }
  if (t.kind == Tok::kWord && t.text == "value") {
    RETURN_IF_ERROR(lx.Expect("="));
    ASSIGN_OR_RETURN(auto f, lx.Next());
    if (f.kind != Tok::kWord || f.text != "f") return lx.Error("expected value=f[...]");
    RETURN_IF_ERROR(lx.Expect("["));
    ASSIGN_OR_RETURN(auto v, ParseList<double>(lx, ParseDouble));
    if (static_cast<int64_t>(v.size()) != g.tensor(id).NumElements()) {
      return lx.Error(absl::StrCat("tensor '", name, "' value has ", v.size(), " elements, its shape ",
                                   g.tensor(id).NumElements()));
    }
    g.mutable_tensor(id).value = std::move(v);
    ASSIGN_OR_RETURN(t, lx.Next());
  }
  if (t.kind != Tok::kEnd) return lx.Error(absl::StrCat("unexpected '", t.text, "'"));
  return absl::OkStatus();
}

absl::Status ParseOpLine(Lexer& lx, Graph& g) {
  ASSIGN_OR_RETURN(auto name, lx.NameToken("an op name"));
  ASSIGN_OR_RETURN(auto type, lx.NameToken("an op type"));
  ASSIGN_OR_RETURN(auto ins, ParseTensorList(lx, g));
  ASSIGN_OR_RETURN(auto arrow, lx.Next());
  if (arrow.kind != Tok::kWord || arrow.text != "->") return lx.Error("expected '->'");
  ASSIGN_OR_RETURN(auto outs, ParseTensorList(lx, g));
  Attrs attrs;
  Phase phase = Phase::kForward;
  double flops = 0;
  int64_t read = 0, written = 0;
  bool opaque = false;
  while (true) {
    ASSIGN_OR_RETURN(auto t, lx.Next());
    if (t.kind == Tok::kEnd) break;
    if (t.kind == Tok::kPunct && t.text == "{") {
      while (true) {
        ASSIGN_OR_RETURN(auto k, lx.Next());
        if (k.kind == Tok::kPunct && k.text == "}") break;
        if (k.kind == Tok::kPunct && k.text == ",") continue;
        if (k.kind != Tok::kWord && k.kind != Tok::kString) {
          return lx.Error(absl::StrCat("bad attribute name '", k.text, "'"));
        }
        RETURN_IF_ERROR(lx.Expect("="));
        ASSIGN_OR_RETURN(auto v, ParseAttrValue(lx));
        attrs[k.text] = std::move(v);
      }
      continue;
    }
    if (t.kind == Tok::kWord && t.text == "opaque") {
      opaque = true;
      continue;
    }
    if (t.kind != Tok::kWord) return lx.Error(absl::StrCat("unexpected '", t.text, "'"));
    std::string key = t.text;
    RETURN_IF_ERROR(lx.Expect("="));
    ASSIGN_OR_RETURN(auto v, lx.Next());
    if (key == "phase") {
      auto p = ParsePhase(v.text);
      if (!p.ok()) return lx.Error(std::string(p.status().message()));
      phase = *p;
    } else if (key == "flops") {
      ASSIGN_OR_RETURN(auto d, ParseDouble(lx, v.text));
      flops = d;
    } else if (key == "read" || key == "written") {
      ASSIGN_OR_RETURN(auto i, ParseInt(lx, v.text));
      (key == "read" ? read : written) = i;
    } else {
      return lx.Error(absl::StrCat("unknown op field '", key, "'"));
    }
  }
  OpId id = g.AddOp(name, type, ins, outs, std::move(attrs), phase);
  Op& op = g.mutable_op(id);
  op.flops = flops;
  op.bytes_read = read;
  op.bytes_written = written;
  op.opaque = opaque;
  return absl::OkStatus();
}

}  // namespace

std::string ToText(const Graph& g) {
  std::string out = absl::StrCat("graph ", Quote(g.name()), "\n");
  for (const Tensor& t : g.tensors()) {
    absl::StrAppend(&out, "tensor ", Name(t.name), " ", std::string(DTypeName(t.dtype)),
                    ShapeString(t.shape), " ", std::string(RoleName(t.role)));
    if (t.grad_of != kNoId) absl::StrAppend(&out, " of=", Name(g.tensor(t.grad_of).name));
    if (!t.value.empty()) absl::StrAppend(&out, " value=", AttrText(t.value));
    out += "\n";
  }
  for (const Op& op : g.ops()) {
    std::vector<std::string> ins, outs;
    for (TensorId t : op.inputs) ins.push_back(Name(g.tensor(t).name));
    for (TensorId t : op.outputs) outs.push_back(Name(g.tensor(t).name));
    absl::StrAppend(&out, "op ", Name(op.name), " ", Name(op.type), " (", absl::StrJoin(ins, ", "),
                    ") -> (", absl::StrJoin(outs, ", "), ")");
    if (!op.attrs.empty()) {
      std::vector<std::string> kv;
      for (const auto& [k, v] : op.attrs) kv.push_back(absl::StrCat(Name(k), "=", AttrText(v)));
      absl::StrAppend(&out, " {", absl::StrJoin(kv, ", "), "}");
    }
    if (op.phase != Phase::kForward) absl::StrAppend(&out, " phase=", std::string(PhaseName(op.phase)));
    if (op.flops != 0) absl::StrAppend(&out, " flops=", Float(op.flops));
    if (op.bytes_read != 0) absl::StrAppend(&out, " read=", op.bytes_read);
    if (op.bytes_written != 0) absl::StrAppend(&out, " written=", op.bytes_written);
    if (op.opaque) out += " opaque";
    out += "\n";
  }
  for (TensorId t : g.outputs()) absl::StrAppend(&out, "output ", Name(g.tensor(t).name), "\n");
  return out;
}

absl::StatusOr<Graph> ParseText(std::string_view text) {
  Graph g;
  std::vector<std::pair<TensorId, std::string>> grad_links;
  bool seen_header = false;
  int line_no = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    Lexer lx(line, line_no);
    ASSIGN_OR_RETURN(auto kw, lx.Next());
    if (kw.kind == Tok::kEnd) continue;
    if (kw.kind == Tok::kWord && kw.text == "graph") {
      if (seen_header) return lx.Error("second 'graph' header");
      ASSIGN_OR_RETURN(auto name, lx.NameToken("a graph name"));
      g.set_name(name);
      seen_header = true;
      continue;
    }
    if (!seen_header) return lx.Error("expected the header: graph \"NAME\"");
    if (kw.kind == Tok::kWord && kw.text == "tensor") {
      RETURN_IF_ERROR(ParseTensorLine(lx, g, grad_links));
    } else if (kw.kind == Tok::kWord && kw.text == "op") {
      RETURN_IF_ERROR(ParseOpLine(lx, g));
    } else if (kw.kind == Tok::kWord && kw.text == "output") {
      ASSIGN_OR_RETURN(auto name, lx.NameToken("a tensor name"));
      auto id = g.FindTensor(name);
      if (!id.ok()) return lx.Error(absl::StrCat("unknown tensor '", name, "'"));
      g.AddOutput(*id);
    } else {
      return lx.Error(absl::StrCat("expected 'tensor', 'op' or 'output', got '", kw.text, "'"));
    }
  }
  if (!seen_header) return absl::InvalidArgumentError("empty graph text: no 'graph' header");
  for (const auto& [grad, param] : grad_links) {
    auto p = g.FindTensor(param);
    if (!p.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("gradient '", g.tensor(grad).name,
                                                     "' names unknown parameter '", param, "'"));
    }
    g.mutable_tensor(grad).grad_of = *p;
  }
  RETURN_IF_ERROR(g.Validate());
  return g;
}

}  // namespace braid::graph
