#include "kernels/ew_program.h"

#include <bit>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace braid::kernels {

std::vector<int64_t> EwProgram::OutputShape(int i) const {
  std::vector<int64_t> s = shape;
  const EwOutput& o = outputs[static_cast<size_t>(i)];
  if (o.reduce != ReduceKind::kNone) {
    for (int ax : o.axes) s[static_cast<size_t>(ax)] = 1;
  }
  return s;
}

std::string EwProgram::Signature() const {
  std::string s = absl::StrCat("ew[", absl::StrJoin(shape, "x"), "](");
  for (size_t i = 0; i < inputs.size(); ++i) {
    absl::StrAppend(&s, i ? "," : "", absl::StrJoin(inputs[i], "x"));
  }
  s += ")";
  for (const EwInstr& in : instrs) {
    absl::StrAppend(&s, ";", std::string(EwName(in.code)), "(", in.a, ",", in.b, ",", in.c, ",",
                    std::bit_cast<uint32_t>(in.p0), ",", std::bit_cast<uint32_t>(in.p1), ")");
  }
  s += "->";
  for (const EwOutput& o : outputs) {
    absl::StrAppend(&s, o.reg, ":", static_cast<int>(o.reduce), "[", absl::StrJoin(o.axes, ","), "];");
  }
  return s;
}

absl::Status ValidateProgram(const EwProgram& p) {
  const int rank = static_cast<int>(p.shape.size());
  double points = 1;
  for (int64_t d : p.shape) {
    if (d < 1) return absl::InvalidArgumentError(absl::StrCat("program dim ", d, " is not positive"));
    points *= static_cast<double>(d);
  }
  if (points > static_cast<double>(int64_t{1} << 40)) {
    return absl::InvalidArgumentError("program has more than 2^40 points");
  }
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    const std::vector<int64_t>& in = p.inputs[i];
    if (static_cast<int>(in.size()) > rank) {
      return absl::InvalidArgumentError(absl::StrCat("input ", i, " has rank ", in.size(),
                                                     " above the program's ", rank));
    }
    for (size_t k = 0; k < in.size(); ++k) {
      const int64_t d = in[in.size() - 1 - k];
      const int64_t full = p.shape[p.shape.size() - 1 - k];
      if (d != 1 && d != full) {
        return absl::InvalidArgumentError(
            absl::StrCat("input ", i, " [", absl::StrJoin(in, ","),
                         "] does not broadcast to [", absl::StrJoin(p.shape, ","), "]"));
      }
    }
  }
  const int n_in = static_cast<int>(p.inputs.size());
  for (size_t k = 0; k < p.instrs.size(); ++k) {
    const EwInstr& in = p.instrs[k];
    if (in.code >= EwCode::kCount) return absl::InvalidArgumentError("unknown instruction code");
    const int self = n_in + static_cast<int>(k);
    const int arity = EwArity(in.code);
    const int ops[3] = {in.a, in.b, in.c};
    for (int j = 0; j < 3; ++j) {
      const bool want = j < arity;
      if (want && (ops[j] < 0 || ops[j] >= self)) {
        return absl::InvalidArgumentError(absl::StrCat("instruction ", k, " (", std::string(EwName(in.code)),
                                                       ") reads register ", ops[j],
                                                       ", not an earlier one"));
      }
      if (!want && ops[j] != -1) {
        return absl::InvalidArgumentError(absl::StrCat("instruction ", k, " (", std::string(EwName(in.code)),
                                                       ") takes ", arity, " operands"));
      }
    }
  }
  if (p.outputs.empty()) return absl::InvalidArgumentError("program has no outputs");
  for (size_t i = 0; i < p.outputs.size(); ++i) {
    const EwOutput& o = p.outputs[i];
    if (o.reg < 0 || o.reg >= p.num_registers()) {
      return absl::InvalidArgumentError(absl::StrCat("output ", i, " reads register ", o.reg));
    }
    int last = -1;
    for (int ax : o.axes) {
      if (ax <= last || ax >= rank) {
        return absl::InvalidArgumentError(absl::StrCat("output ", i, " has bad reduce axis ", ax));
      }
      last = ax;
    }
    if ((o.reduce == ReduceKind::kNone) != o.axes.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("output ", i, ": reduce axes are given exactly when it reduces"));
    }
  }
  return absl::OkStatus();
}

}  // namespace braid::kernels
