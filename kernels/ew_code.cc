#include "kernels/ew_code.h"

namespace braid::kernels {
namespace {

struct Info {
  std::string_view name;
  int arity;
};

constexpr Info kInfo[] = {
    {"Copy", 1},
    {"Neg", 1},
    {"Abs", 1},
    {"Relu", 1},
    {"LeakyRelu", 1},
    {"Sqrt", 1},
    {"Reciprocal", 1},
    {"Exp", 1},
    {"Log", 1},
    {"Tanh", 1},
    {"Sigmoid", 1},
    {"Erf", 1},
    {"Softplus", 1},
    {"Sin", 1},
    {"Cos", 1},
    {"Gelu", 1},
    {"GeluTanh", 1},
    {"Elu", 1},
    {"Selu", 1},
    {"HardSigmoid", 1},
    {"HardSwish", 1},
    {"Softsign", 1},
    {"Floor", 1},
    {"Ceil", 1},
    {"Round", 1},
    {"Sign", 1},
    {"Clip", 1},
    {"Affine", 1},
    {"Add", 2},
    {"Sub", 2},
    {"Mul", 2},
    {"Div", 2},
    {"Min", 2},
    {"Max", 2},
    {"Pow", 2},
    {"PRelu", 2},
    {"ReluGrad", 2},
    {"LeakyReluGrad", 2},
    {"GeluGrad", 2},
    {"GeluTanhGrad", 2},
    {"SigmoidGrad", 2},
    {"TanhGrad", 2},
    {"EluGrad", 2},
    {"SoftplusGrad", 2},
    {"HardSigmoidGrad", 2},
    {"HardSwishGrad", 2},
    {"SqrtGrad", 2},
    {"ReciprocalGrad", 2},
    {"AbsGrad", 2},
    {"ErfGrad", 2},
    {"SinGrad", 2},
    {"CosGrad", 2},
    {"ClipGrad", 2},
    {"DivGradB", 3},
    {"EqualMask", 3},
    {"PowGradBase", 3},
    {"PowGradExp", 3},
};
static_assert(sizeof(kInfo) / sizeof(kInfo[0]) == static_cast<size_t>(EwCode::kCount));

}  // namespace

int EwArity(EwCode code) {
  return code < EwCode::kCount ? kInfo[static_cast<size_t>(code)].arity : 0;
}

std::string_view EwName(EwCode code) {
  return code < EwCode::kCount ? kInfo[static_cast<size_t>(code)].name : "?";
}

}  // namespace braid::kernels
