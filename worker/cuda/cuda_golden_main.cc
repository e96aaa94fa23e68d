// braid-cuda-golden: writes the CUDA op test's golden file. For every op the
// CUDA profiler covers, a one-op graph, seeded standard-normal inputs (shaped
// where the op needs realistic ones) and the outputs LibTorch computes for
// them on the CPU (CUTLASS-style host reference). cuda_gpu_test runs each op
// on the device and compares; the GPU kit carries the file, so the test needs
// no LibTorch there.
//
//   braid-cuda-golden --out build/tests/cuda_op_golden.bin
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <functional>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "base/command_line.h"
#include "graph/text_format.h"
#include "worker/cuda/internal/op_golden.h"

namespace braid::worker {
namespace {

using Tensors = std::vector<at::Tensor>;

// One op under test: op 0 of `text`, its CPU reference (expected outputs by
// output index; an undefined tensor skips that output) and a tolerance
// relative to the reference's largest magnitude.
struct Case {
  std::string name;
  std::string text;
  std::function<Tensors(const Tensors&)> reference;
  double rtol = 1e-4;
  // Replaces the standard-normal inputs where an op needs realistic ones.
  std::function<void(Tensors&)> inputs;
};

std::string Graph(const std::string& body) { return "graph \"t\"\n" + body; }

// Reference conv geometry helpers.
at::Tensor ConvBackwardData(const at::Tensor& dy, const at::Tensor& w, std::vector<int64_t> x_shape,
                            std::vector<int64_t> stride, std::vector<int64_t> pad) {
  at::Tensor x = at::zeros(x_shape);
  std::vector<int64_t> dil(stride.size(), 1), zero(stride.size(), 0);
  return std::get<0>(at::convolution_backward(dy, x, w, c10::nullopt, stride, pad, dil, false, zero,
                                              1, {true, false, false}));
}

std::vector<Case> Cases() {
  std::vector<Case> c;
  // ---- cuBLAS ----
  c.push_back({"matmul", Graph(R"(tensor a f32[16,32] input
tensor b f32[32,8] input
tensor y f32[16,8] activation
op mm MatMul (a, b) -> (y)
)"),
               [](const Tensors& i) { return Tensors{at::matmul(i[0], i[1])}; }});
  c.push_back({"matmul_folded_batch", Graph(R"(tensor a f32[3,5,16] input
tensor b f32[16,8] input
tensor y f32[3,5,8] activation
op mm MatMul (a, b) -> (y)
)"),
               [](const Tensors& i) { return Tensors{at::matmul(i[0], i[1])}; }});
  c.push_back({"matmul_batched_transA", Graph(R"(tensor a f32[4,16,8] input
tensor b f32[4,16,12] input
tensor y f32[4,8,12] activation
op mm MatMul (a, b) -> (y) {transA=1}
)"),
               [](const Tensors& i) { return Tensors{at::matmul(i[0].transpose(-2, -1), i[1])}; }});
  c.push_back({"matmul_transB", Graph(R"(tensor a f32[16,64] input
tensor b f32[32,64] input
tensor y f32[16,32] activation
op mm MatMul (a, b) -> (y) {transB=1}
)"),
               [](const Tensors& i) { return Tensors{at::matmul(i[0], i[1].t())}; }});
  c.push_back({"matmul_shared_lhs", Graph(R"(tensor a f32[6,10] input
tensor b f32[3,10,7] input
tensor y f32[3,6,7] activation
op mm MatMul (a, b) -> (y)
)"),
               [](const Tensors& i) { return Tensors{at::matmul(i[0], i[1])}; }});
  c.push_back({"gemm_bias", Graph(R"(tensor a f32[12,20] input
tensor b f32[20,9] input
tensor c f32[9] input
tensor y f32[12,9] activation
op g Gemm (a, b, c) -> (y) {alpha=0.5, beta=2.0}
)"),
               [](const Tensors& i) { return Tensors{at::addmm(i[2], i[0], i[1], 2.0, 0.5)}; }});
  // ---- cuDNN convolutions (TF32 may be used for fp32: looser tolerance) ----
  c.push_back({"conv_bias_stride", Graph(R"(tensor x f32[2,3,9,9] input
tensor w f32[4,3,3,3] input
tensor b f32[4] input
tensor y f32[2,4,5,5] activation
op conv Conv (x, w, b) -> (y) {pads=[1,1,1,1], strides=[2,2]}
)"),
               [](const Tensors& i) {
                 return Tensors{
                     at::convolution(i[0], i[1], i[2], {2, 2}, {1, 1}, {1, 1}, false, {0, 0}, 1)};
               },
               1e-2});
  c.push_back({"conv_group_dilation", Graph(R"(tensor x f32[2,4,8,8] input
tensor w f32[4,2,3,3] input
tensor y f32[2,4,8,8] activation
op conv Conv (x, w) -> (y) {pads=[2,2,2,2], dilations=[2,2], group=2}
)"),
               [](const Tensors& i) {
                 return Tensors{at::convolution(i[0], i[1], c10::nullopt, {1, 1}, {2, 2}, {2, 2},
                                                false, {0, 0}, 2)};
               },
               1e-2});
  c.push_back({"conv_1d", Graph(R"(tensor x f32[2,3,10] input
tensor w f32[4,3,3] input
tensor y f32[2,4,8] activation
op conv Conv (x, w) -> (y)
)"),
               [](const Tensors& i) {
                 return Tensors{
                     at::convolution(i[0], i[1], c10::nullopt, {1}, {0}, {1}, false, {0}, 1)};
               },
               1e-2});
  c.push_back({"conv_grad_data", Graph(R"(tensor dy f32[2,4,5,5] input
tensor w f32[4,3,3,3] input
tensor dx f32[2,3,9,9] activation
op dconv ConvGradData (dy, w) -> (dx) {pads=[1,1,1,1], strides=[2,2]} phase=backward
)"),
               [](const Tensors& i) {
                 return Tensors{ConvBackwardData(i[0], i[1], {2, 3, 9, 9}, {2, 2}, {1, 1})};
               },
               1e-2});
  c.push_back({"conv_grad_filter_bias", Graph(R"(tensor x f32[2,3,9,9] input
tensor dy f32[2,4,5,5] input
tensor dw f32[4,3,3,3] activation
tensor db f32[4] activation
op dconv ConvGradFilter (x, dy) -> (dw, db) {pads=[1,1,1,1], strides=[2,2]} phase=backward
)"),
               [](const Tensors& i) {
                 std::vector<int64_t> bias = {4};
                 auto r = at::convolution_backward(i[1], i[0], at::zeros({4, 3, 3, 3}),
                                                   at::OptionalIntArrayRef(bias), {2, 2}, {1, 1},
                                                   {1, 1}, false, {0, 0}, 1, {false, true, true});
                 return Tensors{std::get<1>(r), std::get<2>(r)};
               },
               1e-2});
  // ---- activations and their gradients ----
  const std::string ew = "tensor x f32[4,33] input\ntensor y f32[4,33] activation\n";
  const std::string ew2 =
      "tensor dy f32[4,33] input\ntensor x f32[4,33] input\ntensor y f32[4,33] activation\n";
  c.push_back({"relu", Graph(ew + "op f Relu (x) -> (y)\n"),
               [](const Tensors& i) { return Tensors{at::relu(i[0])}; }});
  c.push_back({"sigmoid", Graph(ew + "op f Sigmoid (x) -> (y)\n"),
               [](const Tensors& i) { return Tensors{at::sigmoid(i[0])}; }});
  c.push_back({"tanh", Graph(ew + "op f Tanh (x) -> (y)\n"),
               [](const Tensors& i) { return Tensors{at::tanh(i[0])}; }});
  c.push_back({"elu", Graph(ew + "op f Elu (x) -> (y) {alpha=0.5}\n"),
               [](const Tensors& i) { return Tensors{at::elu(i[0], 0.5)}; }});
  c.push_back({"gelu", Graph(ew + "op f Gelu (x) -> (y)\n"),
               [](const Tensors& i) { return Tensors{at::gelu(i[0], "none")}; }});
  c.push_back({"gelu_tanh", Graph(ew + "op f Gelu (x) -> (y) {approximate=\"tanh\"}\n"),
               [](const Tensors& i) { return Tensors{at::gelu(i[0], "tanh")}; }});
  // (dY, Y) with Y a real forward output, as the training builder saves it.
  c.push_back({"relu_grad", Graph(ew2 + "op f ReluGrad (dy, x) -> (y) phase=backward\n"),
               [](const Tensors& i) { return Tensors{at::threshold_backward(i[0], i[1], 0)}; },
               1e-4, [](Tensors& i) { i[1] = at::relu(i[1]); }});
  c.push_back({"sigmoid_grad", Graph(ew2 + "op f SigmoidGrad (dy, x) -> (y) phase=backward\n"),
               [](const Tensors& i) { return Tensors{at::sigmoid_backward(i[0], i[1])}; }, 1e-4,
               [](Tensors& i) { i[1] = at::sigmoid(i[1]); }});
  c.push_back({"tanh_grad", Graph(ew2 + "op f TanhGrad (dy, x) -> (y) phase=backward\n"),
               [](const Tensors& i) { return Tensors{at::tanh_backward(i[0], i[1])}; }, 1e-4,
               [](Tensors& i) { i[1] = at::tanh(i[1]); }});
  c.push_back(
      {"elu_grad", Graph(ew2 + "op f EluGrad (dy, x) -> (y) {alpha=0.5} phase=backward\n"),
       [](const Tensors& i) { return Tensors{at::elu_backward(i[0], 0.5, 1, 1, false, i[1])}; }});
  c.push_back({"gelu_grad", Graph(ew2 + "op f GeluGrad (dy, x) -> (y) phase=backward\n"),
               [](const Tensors& i) { return Tensors{at::gelu_backward(i[0], i[1], "none")}; }});
  c.push_back({"gelu_tanh_grad",
               Graph(ew2 + "op f GeluGrad (dy, x) -> (y) {approximate=\"tanh\"} phase=backward\n"),
               [](const Tensors& i) { return Tensors{at::gelu_backward(i[0], i[1], "tanh")}; }});
  // ---- binary ops with broadcasting ----
  c.push_back({"add_channel_bias", Graph(R"(tensor a f32[2,3,4,5] input
tensor b f32[3,1,1] input
tensor y f32[2,3,4,5] activation
op f Add (a, b) -> (y)
)"),
               [](const Tensors& i) { return Tensors{at::add(i[0], i[1])}; }});
  c.push_back({"sub_broadcast_lhs", Graph(R"(tensor a f32[8] input
tensor b f32[4,8] input
tensor y f32[4,8] activation
op f Sub (a, b) -> (y)
)"),
               [](const Tensors& i) { return Tensors{at::sub(i[0], i[1])}; }});
  c.push_back({"sub", Graph(R"(tensor a f32[4,8] input
tensor b f32[4,1] input
tensor y f32[4,8] activation
op f Sub (a, b) -> (y)
)"),
               [](const Tensors& i) { return Tensors{at::sub(i[0], i[1])}; }});
  c.push_back({"mul", Graph(R"(tensor a f32[6,7] input
tensor b f32[6,7] input
tensor y f32[6,7] activation
op f Mul (a, b) -> (y)
)"),
               [](const Tensors& i) { return Tensors{at::mul(i[0], i[1])}; }});
  c.push_back({"max", Graph(R"(tensor a f32[6,7] input
tensor b f32[7] input
tensor y f32[6,7] activation
op f Max (a, b) -> (y)
)"),
               [](const Tensors& i) { return Tensors{at::maximum(i[0], i[1])}; }});
  // ---- softmax ----
  c.push_back({"softmax_axis1", Graph(R"(tensor x f32[4,6,5] input
tensor y f32[4,6,5] activation
op f Softmax (x) -> (y) {axis=1}
)"),
               [](const Tensors& i) { return Tensors{at::_softmax(i[0], 1, false)}; }});
  c.push_back({"log_softmax", Graph(R"(tensor x f32[4,6,5] input
tensor y f32[4,6,5] activation
op f LogSoftmax (x) -> (y)
)"),
               [](const Tensors& i) { return Tensors{at::_log_softmax(i[0], -1, false)}; }});
  c.push_back({"softmax_grad", Graph(R"(tensor dy f32[8,10] input
tensor sm f32[8,10] input
tensor dx f32[8,10] activation
op f SoftmaxGrad (dy, sm) -> (dx) {axis=-1} phase=backward
)"),
               [](const Tensors& i) {
                 return Tensors{at::_softmax_backward_data(i[0], i[1], -1, at::kFloat)};
               },
               1e-4, [](Tensors& i) { i[1] = at::_softmax(i[1], -1, false); }});
  c.push_back({"log_softmax_grad", Graph(R"(tensor dy f32[8,10] input
tensor ls f32[8,10] input
tensor dx f32[8,10] activation
op f LogSoftmaxGrad (dy, ls) -> (dx) phase=backward
)"),
               [](const Tensors& i) {
                 return Tensors{at::_log_softmax_backward_data(i[0], i[1], -1, at::kFloat)};
               },
               1e-4, [](Tensors& i) { i[1] = at::_log_softmax(i[1], -1, false); }});
  // ---- batch norm (training mode) ----
  c.push_back({"batch_norm", Graph(R"(tensor x f32[4,3,5,5] input
tensor s f32[3] input
tensor b f32[3] input
tensor m f32[3] input
tensor v f32[3] input
tensor y f32[4,3,5,5] activation
op bn BatchNormalization (x, s, b, m, v) -> (y) {epsilon=1e-5, momentum=0.9}
)"),
               [](const Tensors& i) {
                 return Tensors{std::get<0>(at::native_batch_norm(i[0], i[1], i[2], i[3].clone(),
                                                                  i[4].clone(), true, 0.1, 1e-5))};
               },
               1e-4, [](Tensors& i) { i[4] = i[4].abs() + 0.5; }});
  auto bn_grad_ref = [](const Tensors& i, bool want_dx) {
    at::Tensor rm = at::zeros({3}), rv = at::ones({3});
    auto fwd = at::native_batch_norm(i[1], i[2], at::zeros({3}), rm, rv, true, 0.1, 1e-5);
    auto r = at::native_batch_norm_backward(i[0], i[1], i[2], rm, rv, std::get<1>(fwd),
                                            std::get<2>(fwd), true, 1e-5, {true, true, true});
    return want_dx ? Tensors{std::get<0>(r), std::get<1>(r), std::get<2>(r)}
                   : Tensors{std::get<1>(r), std::get<2>(r)};
  };
  c.push_back({"batch_norm_grad", Graph(R"(tensor dy f32[4,3,5,5] input
tensor x f32[4,3,5,5] input
tensor s f32[3] input
tensor dx f32[4,3,5,5] activation
tensor ds f32[3] activation
tensor db f32[3] activation
op bn BatchNormalizationGrad (dy, x, s) -> (dx, ds, db) {grad_inputs=[0,1,2]} phase=backward
)"),
               [bn_grad_ref](const Tensors& i) { return bn_grad_ref(i, true); }, 1e-3});
  c.push_back({"batch_norm_grad_params_only", Graph(R"(tensor dy f32[4,3,5,5] input
tensor x f32[4,3,5,5] input
tensor s f32[3] input
tensor ds f32[3] activation
tensor db f32[3] activation
op bn BatchNormalizationGrad (dy, x, s) -> (ds, db) {grad_inputs=[1,2]} phase=backward
)"),
               [bn_grad_ref](const Tensors& i) { return bn_grad_ref(i, false); }, 1e-3});
  // ---- pooling ----
  c.push_back({"max_pool", Graph(R"(tensor x f32[2,3,8,8] input
tensor y f32[2,3,4,4] activation
op p MaxPool (x) -> (y) {kernel_shape=[2,2], strides=[2,2]}
)"),
               [](const Tensors& i) {
                 return Tensors{at::max_pool2d(i[0], {2, 2}, {2, 2})};
               }});
  c.push_back({"max_pool_3d", Graph(R"(tensor x f32[1,2,4,6,6] input
tensor y f32[1,2,2,3,3] activation
op p MaxPool (x) -> (y) {kernel_shape=[2,2,2], strides=[2,2,2]}
)"),
               [](const Tensors& i) {
                 return Tensors{at::max_pool3d(i[0], {2, 2, 2}, {2, 2, 2})};
               }});
  c.push_back({"avg_pool_pad_excluded", Graph(R"(tensor x f32[2,3,7,7] input
tensor y f32[2,3,7,7] activation
op p AveragePool (x) -> (y) {kernel_shape=[3,3], pads=[1,1,1,1]}
)"),
               [](const Tensors& i) {
                 return Tensors{at::avg_pool2d(i[0], {3, 3}, {1, 1}, {1, 1}, false, false)};
               }});
  c.push_back({"max_pool_grad", Graph(R"(tensor dy f32[2,3,4,4] input
tensor x f32[2,3,8,8] input
tensor dx f32[2,3,8,8] activation
op p MaxPoolGrad (dy, x) -> (dx) {kernel_shape=[2,2], strides=[2,2]} phase=backward
)"),
               [](const Tensors& i) {
                 auto [y, idx] = at::max_pool2d_with_indices(i[1], {2, 2}, {2, 2});
                 return Tensors{at::max_pool2d_with_indices_backward(i[0], i[1], {2, 2}, {2, 2},
                                                                     {0, 0}, {1, 1}, false, idx)};
               }});
  c.push_back({"avg_pool_grad", Graph(R"(tensor dy f32[2,3,7,7] input
tensor dx f32[2,3,7,7] activation
op p AveragePoolGrad (dy) -> (dx) {kernel_shape=[3,3], pads=[1,1,1,1], count_include_pad=1} phase=backward
)"),
               [](const Tensors& i) {
                 return Tensors{at::avg_pool2d_backward(i[0], at::zeros({2, 3, 7, 7}), {3, 3},
                                                        {1, 1}, {1, 1}, false, true, c10::nullopt)};
               }});
  // ---- reductions and their broadcasts ----
  c.push_back({"reduce_sum", Graph(R"(tensor x f32[3,4,5] input
tensor y f32[3,5] activation
op r ReduceSum (x) -> (y) {axes=[1], keepdims=0}
)"),
               [](const Tensors& i) { return Tensors{at::sum(i[0], {1}, false)}; }});
  // Only a size-1 axis reduced (the batch of one of a broadcast bias's
  // gradient): the identity.
  c.push_back({"reduce_sum_unit_axis", Graph(R"(tensor x f32[1,6,5] input
tensor y f32[6,5] activation
op r ReduceSum (x) -> (y) {axes=[0], keepdims=0}
)"),
               [](const Tensors& i) { return Tensors{at::sum(i[0], {0}, false)}; }});
  c.push_back({"reduce_mean", Graph(R"(tensor x f32[3,4,5] input
tensor y f32[1,4,1] activation
op r ReduceMean (x) -> (y) {axes=[0,2]}
)"),
               [](const Tensors& i) {
                 return Tensors{at::mean(i[0], at::IntArrayRef({0, 2}), true)};
               }});
  c.push_back({"reduce_max", Graph(R"(tensor x f32[3,4,5] input
tensor y f32[3,4] activation
op r ReduceMax (x) -> (y) {axes=[-1], keepdims=0}
)"),
               [](const Tensors& i) { return Tensors{at::amax(i[0], {-1}, false)}; }});
  c.push_back({"global_avg_pool", Graph(R"(tensor x f32[2,3,4,4] input
tensor y f32[2,3,1,1] activation
op r GlobalAveragePool (x) -> (y)
)"),
               [](const Tensors& i) {
                 return Tensors{at::mean(i[0], at::IntArrayRef({2, 3}), true)};
               }});
  c.push_back({"reduce_sum_grad", Graph(R"(tensor dy f32[3,5] input
tensor dx f32[3,4,5] activation
op r ReduceSumGrad (dy) -> (dx) {axes=[1], keepdims=0} phase=backward
)"),
               [](const Tensors& i) {
                 return Tensors{i[0].unsqueeze(1).expand({3, 4, 5})};
               }});
  c.push_back({"reduce_mean_grad", Graph(R"(tensor dy f32[1,4,1] input
tensor dx f32[3,4,5] activation
op r ReduceMeanGrad (dy) -> (dx) {axes=[0,2]} phase=backward
)"),
               [](const Tensors& i) {
                 return Tensors{i[0].expand({3, 4, 5}) / 15.0};
               }});
  c.push_back({"global_avg_pool_grad", Graph(R"(tensor dy f32[2,3,1,1] input
tensor dx f32[2,3,4,4] activation
op r GlobalAveragePoolGrad (dy) -> (dx) phase=backward
)"),
               [](const Tensors& i) {
                 return Tensors{i[0].expand({2, 3, 4, 4}) / 16.0};
               }});
  // ---- data movement ----
  c.push_back({"transpose_heads", Graph(R"(tensor x f32[2,5,3,4] input
tensor y f32[2,3,5,4] activation
op t Transpose (x) -> (y) {perm=[0,2,1,3]}
)"),
               [](const Tensors& i) { return Tensors{i[0].permute({0, 2, 1, 3}).contiguous()}; }});
  c.push_back({"transpose_default_perm", Graph(R"(tensor x f32[7,3,2] input
tensor y f32[2,3,7] activation
op t Transpose (x) -> (y)
)"),
               [](const Tensors& i) { return Tensors{i[0].permute({2, 1, 0}).contiguous()}; }});
  c.push_back({"concat_axis1", Graph(R"(tensor a f32[3,2,4] input
tensor b f32[3,5,4] input
tensor c f32[3,1,4] input
tensor y f32[3,8,4] activation
op cat Concat (a, b, c) -> (y) {axis=1}
)"),
               [](const Tensors& i) { return Tensors{at::cat({i[0], i[1], i[2]}, 1)}; }});
  c.push_back({"split_last_axis", Graph(R"(tensor x f32[4,3,9] input
tensor q f32[4,3,2] activation
tensor k f32[4,3,3] activation
tensor v f32[4,3,4] activation
op s Split (x) -> (q, k, v) {axis=-1}
)"),
               [](const Tensors& i) {
                 std::vector<at::Tensor> parts = at::split_with_sizes(i[0], {2, 3, 4}, -1);
                 return Tensors{parts[0].contiguous(), parts[1].contiguous(), parts[2].contiguous()};
               }});
  // ---- optimizer updates (torch.optim's single-tensor steps) ----
  c.push_back({"sgd_momentum", Graph(R"(tensor p f32[6,10] input
tensor g f32[6,10] input
tensor m f32[6,10] input
tensor p2 f32[6,10] activation
tensor m2 f32[6,10] activation
op u SgdMomentumUpdate (p, g, m) -> (p2, m2) {lr=0.1, momentum=0.9, weight_decay=0.01} phase=update
)"),
               [](const Tensors& i) {
                 at::Tensor d = i[1] + 0.01 * i[0];
                 at::Tensor b = 0.9 * i[2] + d;
                 return Tensors{i[0] - 0.1 * b, b};
               }});
  c.push_back({"sgd_first_step", Graph(R"(tensor p f32[33] input
tensor g f32[33] input
tensor p2 f32[33] activation
tensor m2 f32[33] activation
op u SgdMomentumUpdate (p, g) -> (p2, m2) {lr=0.5} phase=update
)"),
               [](const Tensors& i) { return Tensors{i[0] - 0.5 * i[1], i[1]}; }});
  c.push_back({"adam", Graph(R"(tensor p f32[5,12] input
tensor g f32[5,12] input
tensor m f32[5,12] input
tensor v f32[5,12] input
tensor p2 f32[5,12] activation
tensor m2 f32[5,12] activation
tensor v2 f32[5,12] activation
op u AdamUpdate (p, g, m, v) -> (p2, m2, v2) {lr=0.01, beta1=0.8, beta2=0.99, epsilon=1e-6, weight_decay=0.1, step=3} phase=update
)"),
               [](const Tensors& i) {
                 const double b1 = 0.8, b2 = 0.99;
                 at::Tensor d = i[1] + 0.1 * i[0];
                 at::Tensor m = i[2] + (1 - b1) * (d - i[2]);
                 at::Tensor v = b2 * i[3] + (1 - b2) * d * d;
                 at::Tensor denom = v.sqrt() / std::sqrt(1 - std::pow(b2, 3)) + 1e-6;
                 return Tensors{i[0] - 0.01 / (1 - std::pow(b1, 3)) * m / denom, m, v};
               },
               1e-4, [](Tensors& i) { i[3] = i[3].abs(); }});
  // ---- layer norm (braid's kernels) ----
  c.push_back({"layer_norm", Graph(R"(tensor x f32[6,10] input
tensor s f32[10] input
tensor b f32[10] input
tensor y f32[6,10] activation
op ln LayerNormalization (x, s, b) -> (y) {axis=-1, epsilon=1e-5}
)"),
               [](const Tensors& i) {
                 return Tensors{std::get<0>(at::native_layer_norm(i[0], {10}, i[1], i[2], 1e-5))};
               }});
  c.push_back({"layer_norm_two_dims", Graph(R"(tensor x f32[2,3,16] input
tensor s f32[3,16] input
tensor y f32[2,3,16] activation
op ln LayerNormalization (x, s) -> (y) {axis=1}
)"),
               [](const Tensors& i) {
                 return Tensors{
                     std::get<0>(at::native_layer_norm(i[0], {3, 16}, i[1], c10::nullopt, 1e-5))};
               }});
  // 300 rows: several chunks in the two-pass parameter-gradient reduction.
  c.push_back({"layer_norm_grad", Graph(R"(tensor dy f32[300,64] input
tensor x f32[300,64] input
tensor s f32[64] input
tensor dx f32[300,64] activation
tensor ds f32[64] activation
tensor db f32[64] activation
op ln LayerNormalizationGrad (dy, x, s) -> (dx, ds, db) {axis=-1, grad_inputs=[0,1,2]} phase=backward
)"),
               [](const Tensors& i) {
                 auto [y, mean, rstd] =
                     at::native_layer_norm(i[1], {64}, i[2], at::zeros({64}), 1e-5);
                 auto r = at::native_layer_norm_backward(i[0], i[1], {64}, mean, rstd, i[2],
                                                         at::zeros({64}), {true, true, true});
                 return Tensors{std::get<0>(r), std::get<1>(r), std::get<2>(r)};
               },
               1e-3});
  return c;
}


cuda_internal::GoldenTensor ToGolden(const at::Tensor& t) {
  cuda_internal::GoldenTensor g;
  if (!t.defined()) {
    g.defined = false;
    return g;
  }
  at::Tensor c = t.to(at::kFloat).contiguous();
  g.shape.assign(c.sizes().begin(), c.sizes().end());
  g.data.assign(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
  return g;
}

int Main(int argc, char** argv) {
  CLI::App app{"Writes the CUDA op test's golden inputs and LibTorch reference outputs"};
  std::string out;
  app.add_option("--out", out, "golden file to write")->required();
  if (std::optional<int> done = braid::base::ParseCommandLine(app, argc, argv)) return *done;
  at::set_num_threads(1);
  std::vector<cuda_internal::GoldenCase> golden;
  for (const Case& c : Cases()) {
    absl::StatusOr<graph::Graph> g = graph::ParseText(c.text);
    if (!g.ok()) {
      std::cerr << c.name << ": " << g.status() << "\n";
      return 1;
    }
    at::manual_seed(42);
    Tensors in;
    for (graph::TensorId t : g->op(0).inputs) in.push_back(at::randn(g->tensor(t).shape, at::kFloat));
    if (c.inputs) c.inputs(in);
    for (at::Tensor& t : in) t = t.contiguous();
    cuda_internal::GoldenCase gc{c.name, c.text, c.rtol, {}, {}};
    for (const at::Tensor& t : in) gc.inputs.push_back(ToGolden(t));
    for (const at::Tensor& t : c.reference(in)) gc.outputs.push_back(ToGolden(t));
    golden.push_back(std::move(gc));
  }
  absl::Status s = cuda_internal::WriteGoldenFile(out, golden);
  if (!s.ok()) {
    std::cerr << s << "\n";
    return 1;
  }
  std::cout << "wrote " << golden.size() << " golden op cases to " << out << "\n";
  return 0;
}

}  // namespace
}  // namespace braid::worker

int main(int argc, char** argv) { return braid::worker::Main(argc, argv); }
