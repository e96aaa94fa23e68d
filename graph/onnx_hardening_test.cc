// Malformed ONNX models that could crash or mislead an importer: each is
// refused with InvalidArgument naming the node and attribute, and
// nothing crashes. The models are built here, node by node.
#include <cstdint>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "graph/onnx_import.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "tests/onnx_model_maker.h"

namespace braid::graph {
namespace {

using ::testing::HasSubstr;
using ::braid::testing_onnx::ModelMaker;

absl::StatusOr<Graph> Import(const ModelMaker& m) {
  return ImportOnnxBytes(m.Bytes(), OnnxImportOptions{}, nullptr);
}

void ExpectRefused(const absl::StatusOr<Graph>& g, const std::vector<std::string>& parts) {
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << g.status();
  for (const std::string& p : parts) EXPECT_THAT(std::string(g.status().message()), HasSubstr(p));
}

TEST(OnnxHardeningTest, ZeroStridesAreRefusedBeforeShapeInference) {
  for (const char* type : {"Conv", "MaxPool", "AveragePool"}) {
    absl::StatusOr<Graph> g =
        ImportOnnxBytes(testing_onnx::ZeroStrideModel(type), OnnxImportOptions{}, nullptr);
    ExpectRefused(g, {"node 'win'", type, "attribute 'strides'"});
  }
}

TEST(OnnxHardeningTest, HugePadsDilationsAndGroupsAreRefused) {
  struct Case {
    const char* attr;
    std::vector<int64_t> value;
  };
  for (const Case& c : {Case{"pads", {0, 0, int64_t{1} << 62, 0}}, Case{"dilations", {-1, 1}},
                        Case{"kernel_shape", {0, 3}}}) {
    ModelMaker m;
    m.Input("x", {1, 3, 8, 8});
    m.FloatInit("w", {4, 3, 3, 3});
    onnx::NodeProto* n = m.Node("Conv", "c1", {"x", "w"}, {"y"});
    ModelMaker::Ints(n, c.attr, c.value);
    m.Output("y");
    ExpectRefused(Import(m), {"node 'c1'", std::string("attribute '") + c.attr + "'"});
  }
  ModelMaker m;
  m.Input("x", {1, 3, 8, 8});
  m.FloatInit("w", {4, 3, 3, 3});
  onnx::NodeProto* n = m.Node("Conv", "c1", {"x", "w"}, {"y"});
  ModelMaker::Int(n, "group", 0);
  m.Output("y");
  ExpectRefused(Import(m), {"node 'c1'", "attribute 'group'"});
}

TEST(OnnxHardeningTest, InvalidUtf8NamesAreRefusedNamingTheNode) {
  ModelMaker m;
  m.Input("x", {2, 4});
  m.Node("Relu", std::string("relu\xff\xfe"), {"x"}, {"y"});
  m.Output("y");
  ExpectRefused(Import(m), {"name 'relu\\xff\\xfe' is not valid UTF-8"});
  ModelMaker t;
  t.Input(std::string("x\xc0"), {2, 4});
  t.Node("Relu", "r", {std::string("x\xc0")}, {"y"});
  t.Output("y");
  ExpectRefused(Import(t), {"graph input 'x\\xc0' is not valid UTF-8"});
}

TEST(OnnxHardeningTest, HugeShapesAreRefused) {
  ExpectRefused(ImportOnnxBytes(testing_onnx::HugeConstantOfShapeModel(), OnnxImportOptions{}, nullptr),
                {"node 'fill'", "more than 2^40 elements"});
  {  // a graph input dim of 2^62
    ModelMaker m;
    m.Input("x", {int64_t{1} << 62, 2});
    m.Node("Relu", "r", {"x"}, {"y"});
    m.Output("y");
    ExpectRefused(Import(m), {"graph input 'x'", "outside [0, 2^32]"});
  }
  {  // an initializer with a negative dim
    ModelMaker m;
    m.Input("x", {2, 2});
    m.FloatInit("w", {-2, 2});
    m.Node("MatMul", "mm", {"x", "w"}, {"y"});
    m.Output("y");
    ExpectRefused(Import(m), {"initializer 'w' has a negative dimension"});
  }
}

TEST(OnnxHardeningTest, OutOfRangeAxesPermsAndSplitsAreRefused) {
  {
    ModelMaker m;
    m.Input("x", {2, 3, 4, 5, 6, 7});
    onnx::NodeProto* n = m.Node("Transpose", "tr", {"x"}, {"y"});
    ModelMaker::Ints(n, "perm", {5, -7});
    m.Output("y");
    ExpectRefused(Import(m), {"node 'tr'", "attribute 'perm'"});
  }
  {
    ModelMaker m;
    m.Input("a", {2, 3});
    m.Input("b", {2, 3});
    onnx::NodeProto* n = m.Node("Concat", "cat", {"a", "b"}, {"y"});
    ModelMaker::Int(n, "axis", 99);
    m.Output("y");
    ExpectRefused(Import(m), {"cat", "axis"});
  }
  {
    ModelMaker m;  // opset 13: split sizes are an input
    m.Input("x", {16, 4});
    m.IntInit("sizes", {100, -84});
    m.Node("Split", "sp", {"x", "sizes"}, {"y0", "y1"});
    m.Output("y0");
    m.Output("y1");
    absl::StatusOr<Graph> g = Import(m);
    ASSERT_FALSE(g.ok());
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << g.status();
    EXPECT_THAT(std::string(g.status().message()), HasSubstr("sp"));
  }
}

}  // namespace
}  // namespace braid::graph
