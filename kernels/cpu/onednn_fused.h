// oneDNN primitives for braid's CPU fused executor: a MatMul/Gemm or a 2-D
// convolution followed by a chain of pointwise post-ops (bias, activation,
// residual add, ...), run as ONE oneDNN primitive, so the post-ops are applied
// while the output tile is still in registers instead of in extra passes over
// memory. The library is Debian's libdnnl 2.6.3, the one LibTorch links; its
// headers (/usr/include/oneapi/dnnl/) are the reference for what is possible.
//
// Post-ops are EwCodes (kernels/ew_code.h), with the formulas given there.
// Tensors are float32 CPU tensors in the plain layouts the executor uses
// (row-major, NCHW/OIHW); any layout change oneDNN needs stays inside Run().
//
//   MatMulSpec s;                              // relu(A[64,1024] B[1024,1024] + bias)
//   s.a = {64, 1024};
//   s.b = {1024, 1024};
//   s.c = {1024};                              // Gemm's C, broadcast over rows
//   s.post_ops = {{EwCode::kRelu}};
//   ASSIGN_OR_RETURN(std::shared_ptr<const OneDnnMatMul> mm, OneDnnMatMul::Get(s));
//   ASSIGN_OR_RETURN(at::Tensor y, mm->Run(a, b, &bias, {}));
//
//   ConvSpec c;                                // relu(conv(x, w) + b + residual)
//   c.x = {16, 64, 56, 56};
//   c.w = {64, 64, 3, 3};
//   c.has_bias = true;
//   c.pads_begin = c.pads_end = {1, 1};
//   c.extras = {{16, 64, 56, 56}};
//   c.post_ops = {{EwCode::kAdd, 0, 0, /*extra=*/0}, {EwCode::kRelu}};
//   ASSIGN_OR_RETURN(auto conv, OneDnnConv::Get(c));
//   ASSIGN_OR_RETURN(at::Tensor y, conv->Run(x, w, &b, {&residual, 1}));
//
// Get() builds the primitive once per spec and at::get_num_threads() (a
// process-wide, thread-safe cache that keeps every primitive: a model has a
// bounded set of specs) and returns Unimplemented, naming the reason, when
// oneDNN 2.6 cannot run the spec with an optimized kernel; the caller then
// runs the ops one by one. Run() is const and may be called from several
// threads at once; it uses at most the thread count Get() saw (oneDNN's
// OpenMP runtime follows omp_get_max_threads(), which at::set_num_threads
// sets, but some kernels fix the count at creation; see onednn_fused.cc).
#ifndef BRAID_KERNELS_CPU_ONEDNN_FUSED_H_
#define BRAID_KERNELS_CPU_ONEDNN_FUSED_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/ew_code.h"

namespace braid::kernels::cpu {

// One pointwise step after the GEMM/convolution: y = code(y[, extras[extra]]).
struct PostOp {
  EwCode code = EwCode::kCopy;  // unary, or binary (kAdd, kSub, kMul, kDiv, kMin, kMax)
  float p0 = 0, p1 = 0;         // parameters as ew_code.h defines them
  int extra = -1;               // binary: index of the second operand among the extras
};

// Whether oneDNN 2.6 applies `code` as a post-op with ew_code.h's formula and
// an optimized (JIT) kernel. Accepted: Copy, Neg, Abs, Relu, LeakyRelu, Sqrt,
// Reciprocal, Exp, Log, Tanh, Sigmoid, Softplus, Gelu, GeluTanh, Elu, Selu,
// HardSigmoid, HardSwish, Round, Clip, Affine; binary Add, Sub, Mul, Div, Min,
// Max. onednn_fused.cc gives each code's oneDNN algorithm and the reason for
// every code left out. Finite inputs get ew_code.h's values; a NaN input does
// not always give NaN: Relu and HardSigmoid give 0, Clip its lower bound, Exp
// +inf, Min/Max the other operand when the running value is NaN (oneDNN's
// JIT clamps with vmaxps/vminps; ATen gives NaN).
bool OneDnnPostOpSupported(EwCode code);

// ONNX MatMul / Gemm: Y = alpha * op(A) op(B) + beta * C, then post_ops in
// order. op(A) is A, or A with its last two dims swapped when trans_a.
struct MatMulSpec {
  std::vector<int64_t> a, b;  // rank >= 2 (1-D: Unimplemented); batch dims (all
                              // but the last two) broadcast numpy-style
  bool trans_a = false, trans_b = false;
  float alpha = 1, beta = 1;
  // Gemm's C, broadcastable to Y: [N], [1,N], [M,1], [M,N], [1] (a scalar C,
  // also given as a rank-0 tensor). Empty: no C. With beta 0, C is not read.
  std::vector<int64_t> c;
  std::vector<std::vector<int64_t>> extras;  // binary post-op operands, broadcastable to Y
  std::vector<PostOp> post_ops;

  // Canonical text of the spec (shapes, flags, parameters as exact float bits).
  std::string Signature() const;
};

// ONNX Conv, 2-D: X [N,C,H,W], W [O,C/groups,kh,kw], optional B [O];
// Y [N,O,H',W'] with H' = (H + pb + pe - d (kh - 1) - 1) / s + 1 (floor).
struct ConvSpec {
  std::vector<int64_t> x, w;
  bool has_bias = false;
  std::vector<int64_t> strides{1, 1}, dilations{1, 1};  // ONNX dilations (1 = dense)
  std::vector<int64_t> pads_begin{0, 0}, pads_end{0, 0};
  int64_t groups = 1;
  // Binary post-op operands, broadcastable to Y: per-tensor [1], per-channel
  // [1,O,1,1] or [O,1,1], a full [N,O,H',W'] residual, ...
  std::vector<std::vector<int64_t>> extras;
  std::vector<PostOp> post_ops;

  std::string Signature() const;
};

class OneDnnMatMul {
 public:
  // The primitive for `s` (created on first use). InvalidArgument for
  // inconsistent shapes or post-op operands; Unimplemented when oneDNN 2.6
  // cannot express the spec or has only its reference kernel for it.
  static absl::StatusOr<std::shared_ptr<const OneDnnMatMul>> Get(const MatMulSpec& s);

  // Y for float32 CPU tensors of the spec's shapes (`c` is null iff the spec
  // has no C; extras in the spec's order). Non-contiguous inputs are copied.
  absl::StatusOr<at::Tensor> Run(const at::Tensor& a, const at::Tensor& b, const at::Tensor* c,
                                 std::span<const at::Tensor> extras) const;

  const MatMulSpec& spec() const { return spec_; }
  const std::vector<int64_t>& output_shape() const { return y_; }
  // oneDNN's implementation name, e.g. "brg:avx512_core".
  const std::string& impl() const;

  struct State;  // oneDNN objects (onednn_fused.cc); only Get() constructs
  OneDnnMatMul(MatMulSpec spec, std::vector<int64_t> y, std::unique_ptr<State> state);
  ~OneDnnMatMul();

 private:
  MatMulSpec spec_;
  std::vector<int64_t> y_;
  std::unique_ptr<State> state_;
};

class OneDnnConv {
 public:
  // As OneDnnMatMul::Get.
  static absl::StatusOr<std::shared_ptr<const OneDnnConv>> Get(const ConvSpec& s);

  // Y for float32 CPU tensors of the spec's shapes (`bias` null iff !has_bias).
  absl::StatusOr<at::Tensor> Run(const at::Tensor& x, const at::Tensor& w, const at::Tensor* bias,
                                 std::span<const at::Tensor> extras) const;

  const ConvSpec& spec() const { return spec_; }
  const std::vector<int64_t>& output_shape() const { return y_; }
  const std::string& impl() const;
  // The activation layout the primitive runs in: "nChw16c", "nhwc" or "nchw"
  // (the first two mean Run() reorders X, Y and full-size extras).
  const std::string& layout() const;

  struct State;
  OneDnnConv(ConvSpec spec, std::vector<int64_t> y, std::unique_ptr<State> state);
  ~OneDnnConv();

 private:
  ConvSpec spec_;
  std::vector<int64_t> y_;
  std::unique_ptr<State> state_;
};

}  // namespace braid::kernels::cpu

#endif  // BRAID_KERNELS_CPU_ONEDNN_FUSED_H_
