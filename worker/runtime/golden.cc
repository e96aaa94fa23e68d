#include "worker/runtime/golden.h"

#include <cmath>

#include "absl/strings/str_format.h"

namespace braid::runtime {

nlohmann::json TensorStats(const std::string& name, const HostTensor& h) {
  double sum = 0, sq = 0;
  int64_t nonfinite = 0;
  for (float v : h.data) {
    if (!std::isfinite(v)) {
      ++nonfinite;  // an attention mask's -inf, say: counted, not summed
      continue;
    }
    sum += v;
    sq += static_cast<double>(v) * v;
  }
  return {{"name", name}, {"shape", h.shape}, {"sum", sum}, {"l2", std::sqrt(sq)},
          {"nonfinite", nonfinite}};
}

absl::StatusOr<graph::Program> GoldenProgram(const nlohmann::json& golden) {
  if (!golden.is_object() || golden.value("format", "") != "braid-runtime-golden/1" ||
      !golden.contains("program")) {
    return absl::InvalidArgumentError("not a braid-runtime-golden/1 file");
  }
  return graph::ProgramFromJson(golden["program"]);
}

namespace {
// A number of the file; NaN for null (JSON has no NaN or infinity).
double Num(const nlohmann::json& j) { return j.is_number() ? j.get<double>() : std::nan(""); }
double Rel(double got, double want) {
  return std::abs(got - want) / std::max(std::abs(want), 1e-12);
}
}  // namespace

GoldenReport CompareWithGolden(const nlohmann::json& golden, const std::vector<double>& losses,
                               const std::map<std::string, HostTensor>& params,
                               const std::vector<nlohmann::json>& step0, double tolerance) {
  GoldenReport r;
  const nlohmann::json& want_losses = golden.at("losses");
  if (want_losses.size() != losses.size()) {
    r.ok = false;
    r.failures.push_back(absl::StrFormat("%d steps run, the golden file has %d", losses.size(),
                                         want_losses.size()));
  }
  for (size_t s = 0; s < losses.size() && s < want_losses.size(); ++s) {
    const double rel = Rel(losses[s], Num(want_losses[s]));
    r.max_loss_rel = std::max(r.max_loss_rel, rel);
    if (!(rel <= tolerance)) {
      r.ok = false;
      r.failures.push_back(absl::StrFormat("step %d loss %.9g, golden %.9g (rel %.3g)", s, losses[s],
                                           Num(want_losses[s]), rel));
    }
  }
  for (const nlohmann::json& p : golden.at("parameters")) {
    const std::string name = p.at("name");
    auto it = params.find(name);
    if (it == params.end()) {
      r.ok = false;
      r.failures.push_back("parameter " + name + " missing");
      continue;
    }
    const nlohmann::json got = TensorStats(name, it->second);
    const double rel = Rel(Num(got["l2"]), Num(p.at("l2")));
    r.max_param_rel = std::max(r.max_param_rel, rel);
    if (!(rel <= tolerance)) {
      r.ok = false;
      r.failures.push_back(absl::StrFormat("parameter %s l2 %.9g, golden %.9g (rel %.3g)", name,
                                           Num(got["l2"]), Num(p.at("l2")), rel));
    }
  }
  std::map<std::string, const nlohmann::json*> want;
  for (const nlohmann::json& t : golden.at("step0_tensors")) want[t.at("name")] = &t;
  for (const nlohmann::json& t : step0) {
    auto it = want.find(t.at("name"));
    if (it == want.end()) continue;
    const double w = Num(it->second->at("l2")), g = Num(t.at("l2"));
    const bool counts_differ = t.value("nonfinite", 0) != it->second->value("nonfinite", 0);
    if (counts_differ || !(std::abs(g - w) <= 1e-3 * std::abs(w) + 1e-6)) {
      if (r.first_differing_tensors.size() < 10) {
        r.first_differing_tensors.push_back(absl::StrFormat(
            "%s: l2 %.7g, golden %.7g; sum %.7g, golden %.7g; non-finite %d, golden %d",
            t.at("name").get<std::string>(), g, w, Num(t.at("sum")), Num(it->second->at("sum")),
            t.value("nonfinite", int64_t{0}), it->second->value("nonfinite", int64_t{0})));
      }
    }
  }
  return r;
}

}  // namespace braid::runtime
