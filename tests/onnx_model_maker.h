// Builds ONNX ModelProtos node by node for tests of malformed models (the
// importer's unit tests and the service's end-to-end hardening tests).
//
//   ModelMaker m;                          // opset 13
//   m.Input("x", {1, 3, 8, 8});
//   onnx::NodeProto* n = m.Node("MaxPool", "pool", {"x"}, {"y"});
//   ModelMaker::Ints(n, "strides", {0, 0});
//   m.Output("y");
//   std::string bytes = m.Bytes();
#ifndef BRAID_TESTS_ONNX_MODEL_MAKER_H_
#define BRAID_TESTS_ONNX_MODEL_MAKER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "onnx/onnx_pb.h"

namespace braid::testing_onnx {

class ModelMaker {
 public:
  explicit ModelMaker(int opset = 13) {
    m_.set_ir_version(8);
    auto* o = m_.add_opset_import();
    o->set_domain("");
    o->set_version(opset);
    m_.mutable_graph()->set_name("g");
  }
  void Input(const std::string& name, const std::vector<int64_t>& dims) {
    auto* in = m_.mutable_graph()->add_input();
    in->set_name(name);
    auto* tt = in->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) tt->mutable_shape()->add_dim()->set_dim_value(d);
  }
  void FloatInit(const std::string& name, const std::vector<int64_t>& dims) {
    auto* t = m_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    int64_t n = 1;
    for (int64_t d : dims) {
      t->add_dims(d);
      n *= d;
    }
    for (int64_t i = 0; i < n; ++i) t->add_float_data(0.5f);
  }
  void IntInit(const std::string& name, const std::vector<int64_t>& values) {
    auto* t = m_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    t->add_dims(static_cast<int64_t>(values.size()));
    for (int64_t v : values) t->add_int64_data(v);
  }
  onnx::NodeProto* Node(const std::string& type, const std::string& name,
                        const std::vector<std::string>& ins, const std::vector<std::string>& outs) {
    auto* n = m_.mutable_graph()->add_node();
    n->set_op_type(type);
    n->set_name(name);
    for (const auto& i : ins) n->add_input(i);
    for (const auto& o : outs) n->add_output(o);
    return n;
  }
  static void Ints(onnx::NodeProto* n, const std::string& name, const std::vector<int64_t>& v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }
  static void Int(onnx::NodeProto* n, const std::string& name, int64_t v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }
  void Output(const std::string& name) { m_.mutable_graph()->add_output()->set_name(name); }
  std::string Bytes() const { return m_.SerializeAsString(); }

 private:
  onnx::ModelProto m_;
};

// A Conv (with a weight), MaxPool or AveragePool node named "win" with
// kernel 3x3 and strides [0, 0] on a [1,3,8,8] input: the model that made
// libonnx's shape inference divide by zero.
inline std::string ZeroStrideModel(const std::string& type) {
  ModelMaker m;
  m.Input("x", {1, 3, 8, 8});
  std::vector<std::string> ins = {"x"};
  if (type == "Conv") {
    m.FloatInit("w", {4, 3, 3, 3});
    ins.push_back("w");
  }
  onnx::NodeProto* n = m.Node(type, "win", ins, {"y"});
  ModelMaker::Ints(n, "kernel_shape", {3, 3});
  ModelMaker::Ints(n, "strides", {0, 0});
  m.Output("y");
  return m.Bytes();
}

// A ConstantOfShape node "fill" of shape [1e9, 1e9, 1e9] (1e27 elements)
// added to an input: the model whose costs overflowed to infinity.
inline std::string HugeConstantOfShapeModel() {
  ModelMaker m;
  m.IntInit("shape", {1000000000, 1000000000, 1000000000});
  m.Node("ConstantOfShape", "fill", {"shape"}, {"big"});
  m.Input("x", {1});
  m.Node("Add", "add", {"big", "x"}, {"y"});
  m.Output("y");
  return m.Bytes();
}

}  // namespace braid::testing_onnx

#endif  // BRAID_TESTS_ONNX_MODEL_MAKER_H_
