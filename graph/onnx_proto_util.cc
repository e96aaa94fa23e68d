#include "graph/onnx_proto_util.h"

#include <cmath>
#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"

namespace braid::graph {
namespace {

double HalfToDouble(uint16_t h) {
  const int sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, frac = h & 0x3ff;
  double v;
  if (exp == 0) {
    v = std::ldexp(frac, -24);
  } else if (exp == 31) {
    v = frac ? std::nan("") : HUGE_VAL;
  } else {
    v = std::ldexp(frac + 1024, exp - 25);
  }
  return sign ? -v : v;
}

template <typename T>
T ReadLE(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

}  // namespace

std::string ElemTypeName(int32_t t) {
  if (onnx::TensorProto_DataType_IsValid(t)) {
    return onnx::TensorProto_DataType_Name(static_cast<onnx::TensorProto_DataType>(t));
  }
  return absl::StrCat("#", t);
}

absl::StatusOr<DType> ToDType(int32_t t, const std::string& tensor) {
  switch (t) {
    case kOnnxFloat: return DType::kF32;
    case kOnnxFloat16: return DType::kF16;
    case kOnnxBFloat16: return DType::kBF16;
    case kOnnxDouble: return DType::kF64;
    case kOnnxInt64: case kOnnxUint64: return DType::kI64;
    case kOnnxInt32: case kOnnxUint32: return DType::kI32;
    case kOnnxInt8: return DType::kI8;
    case kOnnxUint8: return DType::kU8;
    case kOnnxBool: return DType::kBool;
    default:
      return absl::InvalidArgumentError(absl::StrCat("tensor '", tensor, "' has element type ",
                                                     ElemTypeName(t),
                                                     ", which braid does not support"));
  }
}

// The data of an ONNX tensor as a ConstValue; std::nullopt for external data,
// strings, or a payload that does not match the dims.
std::optional<ConstValue> DecodeTensor(const onnx::TensorProto& t) {
  const int32_t type = t.data_type();
  if (!IsOnnxFoldableType(type) || t.data_location() == onnx::TensorProto::EXTERNAL) {
    return std::nullopt;
  }
  ConstValue v;
  v.elem_type = type;
  v.dims.assign(t.dims().begin(), t.dims().end());
  for (int64_t d : v.dims) {
    if (d < 0) return std::nullopt;
  }
  const int64_t n = v.NumElements();
  auto put = [&](double x) {
    if (v.IsFloat()) {
      v.floats.push_back(x);
    } else {
      v.ints.push_back(static_cast<int64_t>(x));
    }
  };
  if (!t.raw_data().empty()) {
    static const std::map<int32_t, int> kSize = {
        {kOnnxFloat, 4}, {kOnnxDouble, 8}, {kOnnxFloat16, 2}, {kOnnxBFloat16, 2},
        {kOnnxInt64, 8}, {kOnnxInt32, 4},  {kOnnxInt16, 2},   {kOnnxInt8, 1},
        {kOnnxUint8, 1}, {kOnnxBool, 1},   {kOnnxUint16, 2},  {kOnnxUint32, 4},
        {kOnnxUint64, 8}};
    const int size = kSize.at(type);
    const std::string& raw = t.raw_data();
    if (static_cast<int64_t>(raw.size()) != n * size) return std::nullopt;
    for (int64_t i = 0; i < n; ++i) {
      const char* p = raw.data() + i * size;
      switch (type) {
        case kOnnxFloat: put(ReadLE<float>(p)); break;
        case kOnnxDouble: put(ReadLE<double>(p)); break;
        case kOnnxFloat16: put(HalfToDouble(ReadLE<uint16_t>(p))); break;
        case kOnnxBFloat16: {
          const uint32_t bits = static_cast<uint32_t>(ReadLE<uint16_t>(p)) << 16;
          float f;
          std::memcpy(&f, &bits, 4);
          put(f);
          break;
        }
        case kOnnxInt64: v.ints.push_back(ReadLE<int64_t>(p)); break;
        case kOnnxUint64: v.ints.push_back(static_cast<int64_t>(ReadLE<uint64_t>(p))); break;
        case kOnnxInt32: v.ints.push_back(ReadLE<int32_t>(p)); break;
        case kOnnxUint32: v.ints.push_back(ReadLE<uint32_t>(p)); break;
        case kOnnxInt16: v.ints.push_back(ReadLE<int16_t>(p)); break;
        case kOnnxUint16: v.ints.push_back(ReadLE<uint16_t>(p)); break;
        case kOnnxInt8: v.ints.push_back(ReadLE<int8_t>(p)); break;
        default: v.ints.push_back(ReadLE<uint8_t>(p)); break;  // uint8, bool
      }
    }
    return v;
  }
  switch (type) {
    case kOnnxFloat:
      for (float x : t.float_data()) put(x);
      break;
    case kOnnxDouble:
      for (double x : t.double_data()) put(x);
      break;
    case kOnnxInt64:
      for (int64_t x : t.int64_data()) v.ints.push_back(x);
      break;
    case kOnnxUint32:
    case kOnnxUint64:
      for (uint64_t x : t.uint64_data()) v.ints.push_back(static_cast<int64_t>(x));
      break;
    case kOnnxFloat16:
      for (int32_t x : t.int32_data()) put(HalfToDouble(static_cast<uint16_t>(x)));
      break;
    case kOnnxBFloat16:
      for (int32_t x : t.int32_data()) {
        const uint32_t bits = static_cast<uint32_t>(x) << 16;
        float f;
        std::memcpy(&f, &bits, 4);
        put(f);
      }
      break;
    default:
      for (int32_t x : t.int32_data()) v.ints.push_back(x);
      break;
  }
  const size_t have = v.IsFloat() ? v.floats.size() : v.ints.size();
  if (static_cast<int64_t>(have) != n) return std::nullopt;
  return v;
}

// The ONNX encoding of a ConstValue, for per-node shape inference.
onnx::TensorProto EncodeTensor(const ConstValue& v) {
  onnx::TensorProto t;
  t.set_data_type(v.elem_type);
  for (int64_t d : v.dims) t.add_dims(d);
  switch (v.elem_type) {
    case kOnnxFloat: for (double x : v.floats) t.add_float_data(static_cast<float>(x)); break;
    case kOnnxDouble: for (double x : v.floats) t.add_double_data(x); break;
    case kOnnxInt64: for (int64_t x : v.ints) t.add_int64_data(x); break;
    case kOnnxUint32: case kOnnxUint64:
      for (int64_t x : v.ints) t.add_uint64_data(static_cast<uint64_t>(x));
      break;
    default:
      if (v.IsFloat()) {
        t.set_data_type(kOnnxFloat);  // fp16/bf16 values are only read as numbers
        for (double x : v.floats) t.add_float_data(static_cast<float>(x));
      } else {
        for (int64_t x : v.ints) t.add_int32_data(static_cast<int32_t>(x));
      }
  }
  return t;
}

// The fully static tensor type of `type`, if it is one.
bool StaticTensorType(const onnx::TypeProto& type, int32_t* elem_type,
                      std::vector<int64_t>* dims) {
  if (!type.has_tensor_type()) return false;
  const auto& tt = type.tensor_type();
  if (tt.elem_type() == 0 || !tt.has_shape()) return false;
  std::vector<int64_t> out;
  for (const auto& d : tt.shape().dim()) {
    if (!d.has_dim_value() || d.dim_value() < 0) return false;
    out.push_back(d.dim_value());
  }
  *elem_type = tt.elem_type();
  *dims = std::move(out);
  return true;
}

// Attribute-like constant inputs: (op type, input slot) -> attribute name. A
// known constant in such a slot becomes an Attr instead of a tensor edge.
const char* AttrNameForInput(const std::string& type, int slot) {
  static const auto* table = new std::map<std::string, std::map<int, const char*>>{
      {"Reshape", {{1, "shape"}}},
      {"Expand", {{1, "shape"}}},
      {"Slice", {{1, "starts"}, {2, "ends"}, {3, "axes"}, {4, "steps"}}},
      {"Squeeze", {{1, "axes"}}},
      {"Unsqueeze", {{1, "axes"}}},
      {"Split", {{1, "split"}}},
      {"Tile", {{1, "repeats"}}},
      {"Pad", {{1, "pads"}, {2, "constant_value"}, {3, "axes"}}},
      {"ConstantOfShape", {{0, "shape"}}},
      {"ReduceSum", {{1, "axes"}}},
      {"ReduceMean", {{1, "axes"}}},
      {"ReduceMax", {{1, "axes"}}},
      {"ReduceMin", {{1, "axes"}}},
      {"ReduceProd", {{1, "axes"}}},
      {"ReduceL2", {{1, "axes"}}},
      {"ReduceSumSquare", {{1, "axes"}}},
      {"TopK", {{1, "k"}}},
      {"Trilu", {{1, "k"}}},
      {"Resize", {{1, "roi"}, {2, "scales"}, {3, "sizes"}}},
      {"Upsample", {{1, "scales"}}},
      {"Dropout", {{1, "ratio"}, {2, "training_mode"}}},
      {"Clip", {{1, "min"}, {2, "max"}}},
      {"CumSum", {{1, "axis"}}},
      {"OneHot", {{1, "depth"}}},
      {"Range", {{0, "start"}, {1, "limit"}, {2, "delta"}}},
  };
  auto it = table->find(type);
  if (it == table->end()) return nullptr;
  auto jt = it->second.find(slot);
  return jt == it->second.end() ? nullptr : jt->second;
}

AttrValue ConstToAttr(const ConstValue& v) {
  if (v.dims.empty()) {
    if (v.IsFloat()) return v.floats[0];
    return v.ints[0];
  }
  if (v.IsFloat()) return v.floats;
  return v.ints;
}

Attrs ConvertAttrs(const onnx::NodeProto& node) {
  Attrs attrs;
  for (const auto& a : node.attribute()) {
    switch (a.type()) {
      case onnx::AttributeProto::INT: attrs[a.name()] = a.i(); break;
      case onnx::AttributeProto::FLOAT: attrs[a.name()] = static_cast<double>(a.f()); break;
      case onnx::AttributeProto::STRING: attrs[a.name()] = a.s(); break;
      case onnx::AttributeProto::INTS:
        attrs[a.name()] = std::vector<int64_t>(a.ints().begin(), a.ints().end());
        break;
      case onnx::AttributeProto::FLOATS:
        attrs[a.name()] = std::vector<double>(a.floats().begin(), a.floats().end());
        break;
      case onnx::AttributeProto::TENSOR: {
        std::optional<ConstValue> v = DecodeTensor(a.t());
        if (v && v->NumElements() == 1) {
          v->dims.clear();
          attrs[a.name()] = ConstToAttr(*v);
        }
        break;
      }
      default:
        break;  // graphs, sparse tensors, type protos: not modelled
    }
  }
  return attrs;
}

}  // namespace braid::graph
