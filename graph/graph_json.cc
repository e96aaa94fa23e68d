#include "graph/graph_json.h"

namespace braid::graph {
namespace {

nlohmann::json AttrJson(const AttrValue& v) {
  return std::visit([](const auto& x) { return nlohmann::json(x); }, v);
}

}  // namespace

nlohmann::json GraphToJson(const Graph& g) {
  nlohmann::json tensors = nlohmann::json::array();
  for (TensorId t = 0; t < g.num_tensors(); ++t) {
    const Tensor& ten = g.tensor(t);
    nlohmann::json j = {{"id", t},
                        {"name", ten.name},
                        {"shape", ten.shape},
                        {"dtype", std::string(DTypeName(ten.dtype))},
                        {"role", std::string(RoleName(ten.role))},
                        {"bytes", ten.Bytes()}};
    if (ten.grad_of != kNoId) j["gradient_of"] = g.tensor(ten.grad_of).name;
    tensors.push_back(std::move(j));
  }
  nlohmann::json ops = nlohmann::json::array();
  for (OpId i = 0; i < g.num_ops(); ++i) {
    const Op& op = g.op(i);
    nlohmann::json ins = nlohmann::json::array(), outs = nlohmann::json::array();
    for (TensorId t : op.inputs) ins.push_back({{"name", g.tensor(t).name}, {"shape", g.tensor(t).shape}});
    for (TensorId t : op.outputs) outs.push_back({{"name", g.tensor(t).name}, {"shape", g.tensor(t).shape}});
    nlohmann::json attrs = nlohmann::json::object();
    for (const auto& [k, v] : op.attrs) attrs[k] = AttrJson(v);
    ops.push_back({{"id", i},
                   {"name", op.name},
                   {"type", op.type},
                   {"phase", std::string(PhaseName(op.phase))},
                   {"inputs", std::move(ins)},
                   {"outputs", std::move(outs)},
                   {"attrs", std::move(attrs)},
                   {"flops", op.flops},
                   {"bytes_read", op.bytes_read},
                   {"bytes_written", op.bytes_written},
                   {"opaque", op.opaque}});
  }
  nlohmann::json outputs = nlohmann::json::array();
  for (TensorId t : g.outputs()) outputs.push_back(g.tensor(t).name);
  return {{"name", g.name()}, {"tensors", std::move(tensors)}, {"ops", std::move(ops)},
          {"outputs", std::move(outputs)}};
}

GraphStats ComputeStats(const Graph& g) {
  GraphStats s;
  s.ops = g.num_ops();
  for (const Op& op : g.ops()) {
    ++s.op_types[op.type];
    if (op.phase == Phase::kForward) s.forward_flops += op.flops;
  }
  for (const Tensor& t : g.tensors()) {
    if (t.role != TensorRole::kParameter) continue;
    s.parameters += t.NumElements();
    ++s.gradients;
    s.gradient_bytes += t.Bytes();
  }
  return s;
}

nlohmann::json StatsToJson(const GraphStats& s) {
  return {{"ops", s.ops},
          {"op_types", s.op_types},
          {"parameters", s.parameters},
          {"gradients", s.gradients},
          {"gradient_bytes", s.gradient_bytes},
          {"forward_flops", s.forward_flops}};
}

}  // namespace braid::graph
