#include "worker/cuda/cuda_backend.h"

#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "graph/program.h"
#include "kernels/cuda/ew_kernel.h"
#include "worker/cuda/cuda_status.h"
#include "worker/cuda/nccl_id.h"
#include "worker/cuda/internal/cuda_context.h"
#include "worker/cuda/internal/cuda_ops.h"
#include "worker/cuda/internal/kernels.h"
#include "worker/cuda/internal/runtime_kernels.h"
#include "worker/fused_program.h"
#include "worker/runtime/values.h"

namespace braid::runtime {
namespace {

using graph::OpKind;
using K = graph::OpKind;
using worker::CudaStatus;
using worker::NcclStatus;
namespace ci = worker::cuda_internal;

int64_t Numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// A value in device memory; views share the memory of what they view.
class CudaValue : public Buffer {
 public:
  std::shared_ptr<ci::DeviceBuffer> mem;
  std::vector<int64_t> shape;
  graph::DType dtype = graph::DType::kF32;
  int64_t bytes() const override { return Numel(shape) * graph::DTypeSize(dtype); }
  void* data() const { return mem ? mem->get() : nullptr; }
  float* f32() const { return static_cast<float*>(data()); }
};

const CudaValue& V(const Value& v) { return static_cast<const CudaValue&>(*v); }

Value View(const Value& v, const std::vector<int64_t>& shape, graph::DType dtype) {
  auto out = std::make_shared<CudaValue>();
  out->mem = V(v).mem;
  out->shape = shape;
  out->dtype = dtype;
  return out;
}

absl::Status Bad(const graph::Op& op, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(op.type, " ", op.name, ": ", why));
}
absl::Status Unsupported(const graph::Op& op, const std::string& why) {
  return absl::UnimplementedError(
      absl::StrCat("the CUDA runtime cannot run ", op.type, " ", op.name, ": ", why));
}

absl::StatusOr<ci::AnyType> AnyOf(graph::DType d) {
  switch (d) {
    case graph::DType::kF32: return ci::AnyType::kF32;
    case graph::DType::kI64: return ci::AnyType::kI64;
    case graph::DType::kI32: return ci::AnyType::kI32;
    case graph::DType::kU8:
    case graph::DType::kBool: return ci::AnyType::kU8;
    default:
      return absl::UnimplementedError(
          absl::StrCat("the CUDA runtime holds no ", std::string(graph::DTypeName(d)), " tensors"));
  }
}

// Operand `v` broadcast (numpy rules) to `out`.
absl::StatusOr<ci::MapOperand> Operand(const Value& v, const std::vector<int64_t>& out) {
  ci::MapOperand o;
  o.data = V(v).data();
  ASSIGN_OR_RETURN(o.type, AnyOf(V(v).dtype));
  const std::vector<int64_t>& s = V(v).shape;
  if (s.size() > out.size()) return absl::InvalidArgumentError("operand has more dims than the result");
  const size_t lead = out.size() - s.size();
  int64_t stride = 1;
  for (size_t k = s.size(); k-- > 0;) {
    const size_t d = lead + k;
    if (s[k] != 1 && s[k] != out[d]) {
      return absl::InvalidArgumentError(absl::StrCat("operand ", graph::ShapeString(s),
                                                     " does not broadcast to ", graph::ShapeString(out)));
    }
    o.strides[d] = s[k] == 1 ? 0 : stride;
    stride *= s[k];
  }
  return o;
}

}  // namespace

// Per (graph, op): the library op with its own input/output tensors, or the
// NVRTC kernel of the op (or group) with its input tensor order.
struct CudaBackend::OpCache {
  std::optional<ci::CudaOp> library;
  std::shared_ptr<const kernels::cuda::CudaEwKernel> ew;
  worker::ElementwiseProgram program;
  worker::FusedGroup group;
  std::string why_not;  // a group without a fused kernel: why
};

CudaBackend::CudaBackend(CudaBackendOptions options) : options_(options) {}
CudaBackend::~CudaBackend() {
  if (ctx_) (void)cudaStreamSynchronize(ctx_->stream());
  cache_.clear();
}

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(CudaBackendOptions options) {
  // TF32 off for cuBLAS and cuDNN, before the first handle exists.
  setenv("NVIDIA_TF32_OVERRIDE", "0", /*overwrite=*/0);
  std::unique_ptr<CudaBackend> b(new CudaBackend(options));
  ASSIGN_OR_RETURN(b->ctx_, ci::CudaContext::Create(options.device));
  return b;
}

std::string CudaBackend::DeviceName() const {
  const auto& d = ctx_->device();
  return absl::StrCat(d.name, " (sm_", d.compute_major, d.compute_minor, ")");
}

void CudaBackend::Count(const std::string& path, const graph::Op& op) {
  ++by_path_[path];
  ++by_path_[absl::StrCat(path, ":", op.type)];
}

absl::StatusOr<Value> CudaBackend::NewValue(const std::vector<int64_t>& shape, graph::DType dtype) {
  auto v = std::make_shared<CudaValue>();
  v->shape = shape;
  v->dtype = dtype;
  ASSIGN_OR_RETURN(ci::DeviceBuffer b,
                   ci::DeviceBuffer::Alloc(std::max<int64_t>(v->bytes(), 1), "runtime tensor"));
  v->mem = std::make_shared<ci::DeviceBuffer>(std::move(b));
  return Value(v);
}

absl::StatusOr<Value> CudaBackend::FromHost(const HostTensor& h, graph::DType dtype) {
  RETURN_IF_ERROR(ctx_->Activate());
  ASSIGN_OR_RETURN(Value v, NewValue(h.shape, dtype));
  const int64_t n = Numel(h.shape);
  if (static_cast<int64_t>(h.data.size()) != n) {
    return absl::InvalidArgumentError(absl::StrCat("host tensor of ", h.data.size(),
                                                   " values for shape ", graph::ShapeString(h.shape)));
  }
  std::vector<char> host(static_cast<size_t>(std::max<int64_t>(V(v).bytes(), 1)));
  switch (dtype) {
    case graph::DType::kF32: std::memcpy(host.data(), h.data.data(), n * sizeof(float)); break;
    case graph::DType::kF64: {
      auto* p = reinterpret_cast<double*>(host.data());
      for (int64_t i = 0; i < n; ++i) p[i] = h.data[i];
      break;
    }
    case graph::DType::kI64: {
      auto* p = reinterpret_cast<int64_t*>(host.data());
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<int64_t>(h.data[i]);
      break;
    }
    case graph::DType::kI32: {
      auto* p = reinterpret_cast<int32_t*>(host.data());
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<int32_t>(h.data[i]);
      break;
    }
    case graph::DType::kU8:
    case graph::DType::kBool: {
      auto* p = reinterpret_cast<uint8_t*>(host.data());
      for (int64_t i = 0; i < n; ++i) p[i] = dtype == graph::DType::kBool ? h.data[i] != 0 : static_cast<uint8_t>(h.data[i]);
      break;
    }
    default:
      return absl::UnimplementedError(
          absl::StrCat("the CUDA runtime holds no ", std::string(graph::DTypeName(dtype)), " tensors"));
  }
  if (n > 0) {
    RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(V(v).data(), host.data(), V(v).bytes(),
                                               cudaMemcpyHostToDevice, ctx_->stream()),
                               "upload"));
  }
  RETURN_IF_ERROR(ctx_->Sync("upload"));
  return v;
}

absl::StatusOr<HostTensor> CudaBackend::ToHost(const Value& v) {
  const CudaValue& x = V(v);
  const int64_t n = Numel(x.shape);
  std::vector<char> host(static_cast<size_t>(std::max<int64_t>(x.bytes(), 1)));
  if (n > 0) {
    RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(host.data(), x.data(), x.bytes(),
                                               cudaMemcpyDeviceToHost, ctx_->stream()),
                               "download"));
  }
  RETURN_IF_ERROR(ctx_->Sync("download"));
  HostTensor h;
  h.shape = x.shape;
  h.data.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    switch (x.dtype) {
      case graph::DType::kF32: h.data[i] = reinterpret_cast<const float*>(host.data())[i]; break;
      case graph::DType::kF64: h.data[i] = static_cast<float>(reinterpret_cast<const double*>(host.data())[i]); break;
      case graph::DType::kI64: h.data[i] = static_cast<float>(reinterpret_cast<const int64_t*>(host.data())[i]); break;
      case graph::DType::kI32: h.data[i] = static_cast<float>(reinterpret_cast<const int32_t*>(host.data())[i]); break;
      case graph::DType::kU8:
      case graph::DType::kBool: h.data[i] = reinterpret_cast<const uint8_t*>(host.data())[i]; break;
      default:
        return absl::UnimplementedError(
            absl::StrCat("the CUDA runtime holds no ", std::string(graph::DTypeName(x.dtype)), " tensors"));
    }
  }
  return h;
}

absl::StatusOr<Value> CudaBackend::Load(const graph::Tensor& t, const graph::LoadSpec& spec,
                                        const RankContext& ctx) {
  const uint64_t key = SeedOf(ctx.program->seed, spec.source, spec.per_step ? ctx.step : -1);
  ASSIGN_OR_RETURN(HostTensor full, FullValue(spec, key));
  HostTensor piece = NarrowHost(full, ctx.program->mesh, ctx.coord, spec.dim_axes, spec.segments);
  if (static_cast<int64_t>(piece.data.size()) != t.NumElements()) {
    return absl::InternalError(absl::StrCat("loaded ", t.name, " as ", graph::ShapeString(piece.shape),
                                            ", the program says ", graph::ShapeString(t.shape)));
  }
  piece.shape = t.shape;
  return FromHost(piece, t.dtype);
}

absl::StatusOr<Value> CudaBackend::Flatten(const std::vector<Value>& values) {
  if (values.empty()) return absl::InvalidArgumentError("an empty bucket");
  int64_t n = 0;
  for (const Value& v : values) {
    if (V(v).dtype != V(values[0]).dtype) return absl::InvalidArgumentError("a bucket of mixed dtypes");
    n += Numel(V(v).shape);
  }
  ASSIGN_OR_RETURN(Value flat, NewValue({n}, V(values[0]).dtype));
  char* at = static_cast<char*>(V(flat).data());
  for (const Value& v : values) {
    RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(at, V(v).data(), V(v).bytes(), cudaMemcpyDeviceToDevice,
                                               ctx_->stream()),
                               "bucket flatten"));
    at += V(v).bytes();
  }
  return flat;
}

absl::StatusOr<std::vector<Value>> CudaBackend::Unflatten(
    const Value& flat, const std::vector<std::vector<int64_t>>& shapes) {
  std::vector<Value> out;
  const char* at = static_cast<const char*>(V(flat).data());
  int64_t used = 0;
  for (const auto& s : shapes) {
    ASSIGN_OR_RETURN(Value v, NewValue(s, V(flat).dtype));
    used += V(v).bytes();
    if (used > V(flat).bytes()) return absl::InvalidArgumentError("bucket pieces exceed the buffer");
    RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(V(v).data(), at, V(v).bytes(), cudaMemcpyDeviceToDevice,
                                               ctx_->stream()),
                               "bucket unflatten"));
    at += V(v).bytes();
    out.push_back(std::move(v));
  }
  RETURN_IF_ERROR(ctx_->Sync("bucket unflatten"));
  return out;
}

absl::StatusOr<std::vector<Value>> CudaBackend::Run(const graph::Graph& g, const graph::Op& op,
                                                    const std::vector<Value>& inputs,
                                                    const RankContext& ctx) {
  RETURN_IF_ERROR(ctx_->Activate());
  absl::StatusOr<std::vector<Value>> out = RunOp(g, op, inputs, ctx);
  if (!out.ok()) {
    (void)cudaStreamSynchronize(ctx_->stream());
    (void)cudaGetLastError();
    return out.status();
  }
  if (options_.sync_each_op) RETURN_IF_ERROR(ctx_->Sync(absl::StrCat(op.type, " ", op.name)));
  return out;
}

absl::StatusOr<std::vector<Value>> CudaBackend::RunOp(const graph::Graph& g, const graph::Op& op,
                                                      const std::vector<Value>& in,
                                                      const RankContext& ctx) {
  auto out_shape = [&](int k) { return g.tensor(op.outputs[k]).shape; };
  auto out_dtype = [&](int k) { return g.tensor(op.outputs[k]).dtype; };
  const cudaStream_t stream = ctx_->stream();
  auto ternary = [&](ci::TernaryCode code, std::vector<Value> operands, float p,
                     const std::vector<int64_t>& shape) -> absl::StatusOr<Value> {
    if (shape.size() > static_cast<size_t>(ci::kMaxMapRank)) return Unsupported(op, "more than 8 dims");
    ci::MapOperand ops[3];
    for (size_t i = 0; i < operands.size() && i < 3; ++i) {
      absl::StatusOr<ci::MapOperand> o = Operand(operands[i], shape);
      if (!o.ok()) return Bad(op, std::string(o.status().message()));
      ops[i] = *o;
    }
    ASSIGN_OR_RETURN(Value y, NewValue(shape, graph::DType::kF32));
    RETURN_IF_ERROR(CudaStatus(ci::TernaryMap(code, ops, V(y).f32(), static_cast<int>(shape.size()),
                                              shape.data(), p, stream),
                               "TernaryMap"));
    return y;
  };
  auto need_f32 = [&](const Value& v) -> absl::Status {
    if (V(v).dtype != graph::DType::kF32) return Unsupported(op, "a float32 operand is not float32");
    return absl::OkStatus();
  };
  auto keep_mask = [&](const std::string& key_op, double ratio) -> absl::StatusOr<Value> {
    ASSIGN_OR_RETURN(std::vector<uint8_t> keep, KeepMask(op, key_op, V(in[0]).shape, ratio, ctx));
    ASSIGN_OR_RETURN(Value m, NewValue(V(in[0]).shape, graph::DType::kBool));
    if (!keep.empty()) {
      RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(V(m).data(), keep.data(), keep.size(),
                                                 cudaMemcpyHostToDevice, stream),
                                 "upload dropout mask"));
      RETURN_IF_ERROR(ctx_->Sync("upload dropout mask"));  // `keep` dies here
    }
    return m;
  };

  switch (op.kind) {
    case K::kReshape:
    case K::kFlatten:
    case K::kSqueeze:
    case K::kUnsqueeze:
    case K::kIdentity: {
      if (in.empty()) return Bad(op, "no input");
      if (Numel(V(in[0]).shape) != Numel(out_shape(0)) || V(in[0]).dtype != out_dtype(0))
        return Bad(op, "the output is not a view of the input");
      Count("view", op);
      return std::vector<Value>{View(in[0], out_shape(0), out_dtype(0))};
    }
    case K::kDropout: {
      const double ratio = op.GetFloat("ratio", 0.5);
      const bool train = op.GetInt("training_mode", 0) != 0 || op.outputs.size() > 1;
      RETURN_IF_ERROR(need_f32(in[0]));
      std::vector<Value> outs;
      Value mask;
      if (!options_.dropout || !train || ratio <= 0) {
        outs.push_back(View(in[0], out_shape(0), out_dtype(0)));
        if (op.outputs.size() > 1) {
          HostTensor ones{out_shape(1), std::vector<float>(Numel(out_shape(1)), 1.f)};
          ASSIGN_OR_RETURN(mask, FromHost(ones, out_dtype(1)));
        }
      } else {
        ASSIGN_OR_RETURN(mask, keep_mask(op.name, ratio));
        ASSIGN_OR_RETURN(Value y, ternary(ci::TernaryCode::kMaskScale, {in[0], mask},
                                          static_cast<float>(1.0 / (1.0 - ratio)), out_shape(0)));
        outs.push_back(y);
        if (op.outputs.size() > 1 && out_dtype(1) != graph::DType::kBool &&
            out_dtype(1) != graph::DType::kU8) {
          ASSIGN_OR_RETURN(HostTensor h, ToHost(mask));
          ASSIGN_OR_RETURN(mask, FromHost(h, out_dtype(1)));
        }
      }
      if (op.outputs.size() > 1) outs.push_back(View(mask, out_shape(1), out_dtype(1)));
      Count("braid kernel", op);
      return outs;
    }
    case K::kDropoutGrad: {
      const double ratio = op.GetFloat("ratio", 0.5);
      Count("braid kernel", op);
      if (!options_.dropout || ratio <= 0) return std::vector<Value>{View(in[0], out_shape(0), out_dtype(0))};
      const float scale = static_cast<float>(1.0 / (1.0 - ratio));
      if (in.size() >= 2) {
        ASSIGN_OR_RETURN(Value y, ternary(ci::TernaryCode::kMaskScale, {in[0], in[1]}, scale, out_shape(0)));
        return std::vector<Value>{y};
      }
      const std::string forward = op.GetString("mask_of", "");
      if (op.GetInt("training_mode", 0) == 0 || forward.empty())
        return std::vector<Value>{View(in[0], out_shape(0), out_dtype(0))};
      ASSIGN_OR_RETURN(Value mask, keep_mask(forward, ratio));
      ASSIGN_OR_RETURN(Value y, ternary(ci::TernaryCode::kMaskScale, {in[0], mask}, scale, out_shape(0)));
      return std::vector<Value>{y};
    }
    case K::kWhere: {
      if (in.size() != 3) return Bad(op, "expects 3 inputs");
      if (out_dtype(0) != graph::DType::kF32) return Unsupported(op, "a non-float32 Where");
      ASSIGN_OR_RETURN(Value y, ternary(ci::TernaryCode::kWhere, {in[0], in[1], in[2]}, 0, out_shape(0)));
      Count("braid kernel", op);
      return std::vector<Value>{y};
    }
    case K::kWhereGrad: {
      if (in.size() < 2) return Bad(op, "expects (dY, condition)");
      const auto code = op.GetInt("input_index", 1) == 1 ? ci::TernaryCode::kWhereGradThen
                                                          : ci::TernaryCode::kWhereGradElse;
      ASSIGN_OR_RETURN(Value y, ternary(code, {in[0], in[1]}, 0, out_shape(0)));
      Count("braid kernel", op);
      return std::vector<Value>{y};
    }
    case K::kPowGrad: {
      if (in.size() != 3) return Bad(op, "expects (dY, base, exponent)");
      const auto code = op.GetInt("input_index", 0) == 0 ? ci::TernaryCode::kPowGradBase
                                                          : ci::TernaryCode::kPowGradExp;
      ASSIGN_OR_RETURN(Value y, ternary(code, {in[0], in[1], in[2]}, 0, out_shape(0)));
      Count("braid kernel", op);
      return std::vector<Value>{y};
    }
    case K::kGather:
    case K::kGatherGrad: {
      if (in.size() != 2) return Bad(op, "expects 2 inputs");
      RETURN_IF_ERROR(need_f32(in[0]));
      const bool grad = op.kind == K::kGatherGrad;
      const std::vector<int64_t> data = grad ? out_shape(0) : V(in[0]).shape;
      const int64_t rank = static_cast<int64_t>(data.size());
      int64_t axis = op.GetInt("axis", 0);
      if (axis < 0) axis += rank;
      if (axis < 0 || axis >= rank) return Bad(op, "axis off the data's dims");
      int64_t outer = 1, inner = 1;
      for (int64_t d = 0; d < axis; ++d) outer *= data[d];
      for (int64_t d = axis + 1; d < rank; ++d) inner *= data[d];
      const int64_t n = Numel(V(in[1]).shape);
      ASSIGN_OR_RETURN(ci::AnyType it, AnyOf(V(in[1]).dtype));
      ASSIGN_OR_RETURN(Value y, NewValue(out_shape(0), graph::DType::kF32));
      if (Numel(out_shape(0)) != (grad ? outer * data[axis] * inner : outer * n * inner))
        return Bad(op, "output shape disagrees with data and indices");
      if (grad) {
        RETURN_IF_ERROR(CudaStatus(ci::GatherRowsGrad(V(in[0]).f32(), V(in[1]).data(), it, V(y).f32(),
                                                      outer, data[axis], n, inner, stream),
                                   "GatherRowsGrad"));
      } else {
        RETURN_IF_ERROR(CudaStatus(ci::GatherRows(V(in[0]).f32(), V(in[1]).data(), it, V(y).f32(), outer,
                                                  data[axis], n, inner, nullptr, stream),
                                   "GatherRows"));
      }
      Count("braid kernel", op);
      return std::vector<Value>{y};
    }
    case K::kSoftmaxCrossEntropyLoss:
    case K::kSoftmaxCrossEntropyLossGrad: {
      const bool grad = op.kind == K::kSoftmaxCrossEntropyLossGrad;
      if (op.GetString("reduction", "mean") != "mean") return Unsupported(op, "only reduction 'mean'");
      if (in.size() != (grad ? 3u : 2u)) return Bad(op, "wrong input count");
      if (!grad && op.outputs.size() != 1) return Unsupported(op, "the log-probability output");
      const Value& scores = in[grad ? 1 : 0];
      const Value& labels = in[grad ? 2 : 1];
      RETURN_IF_ERROR(need_f32(scores));
      const std::vector<int64_t>& s = V(scores).shape;
      if (s.size() < 2) return Bad(op, "scores need a class axis");
      int64_t inner = 1;
      for (size_t d = 2; d < s.size(); ++d) inner *= s[d];
      if (Numel(V(labels).shape) != s[0] * inner) return Bad(op, "labels do not match the scores' rows");
      ASSIGN_OR_RETURN(ci::AnyType lt, AnyOf(V(labels).dtype));
      ASSIGN_OR_RETURN(Value y, NewValue(out_shape(0), graph::DType::kF32));
      if (grad) {
        RETURN_IF_ERROR(need_f32(in[0]));
        RETURN_IF_ERROR(CudaStatus(ci::SoftmaxCrossEntropyGrad(V(in[0]).f32(), V(scores).f32(),
                                                               V(labels).data(), lt, V(y).f32(), s[0],
                                                               s[1], inner, stream),
                                   "SoftmaxCrossEntropyGrad"));
      } else {
        ASSIGN_OR_RETURN(Value rows, NewValue({s[0] * inner}, graph::DType::kF32));
        RETURN_IF_ERROR(CudaStatus(ci::SoftmaxCrossEntropy(V(scores).f32(), V(labels).data(), lt,
                                                           V(y).f32(), V(rows).f32(), s[0], s[1], inner,
                                                           nullptr, stream),
                                   "SoftmaxCrossEntropy"));
        RETURN_IF_ERROR(ctx_->Sync("SoftmaxCrossEntropy"));  // `rows` dies here
      }
      Count("braid kernel", op);
      return std::vector<Value>{y};
    }
    case K::kSgdMomentumUpdate:
    case K::kAdamUpdate: {
      const bool adam = op.kind == K::kAdamUpdate;
      if (in.size() < 2) return Bad(op, "expects (p, g, ...)");
      for (const Value& v : in) RETURN_IF_ERROR(need_f32(v));
      const int64_t n = Numel(V(in[0]).shape);
      std::vector<Value> outs;
      for (size_t k = 0; k < op.outputs.size(); ++k) {
        ASSIGN_OR_RETURN(Value o, NewValue(out_shape(static_cast<int>(k)), graph::DType::kF32));
        outs.push_back(o);
      }
      const float wd = static_cast<float>(op.GetFloat("weight_decay", 0.0));
      if (!adam) {
        // torch.optim.SGD: buf = mu * buf + d; with no momentum input buf = d.
        ASSIGN_OR_RETURN(Value scratch, NewValue(V(in[0]).shape, graph::DType::kF32));
        void* m_out = outs.size() > 1 ? V(outs[1]).data() : V(scratch).data();
        RETURN_IF_ERROR(CudaStatus(
            ci::SgdMomentumStep(ci::ElemType::kF32, V(in[0]).data(), V(in[1]).data(),
                                in.size() > 2 ? V(in[2]).data() : nullptr, V(outs[0]).data(), m_out, n,
                                static_cast<float>(op.GetFloat("lr", 0.01)),
                                static_cast<float>(op.GetFloat("momentum", 0.9)), wd, stream),
            "SgdMomentumStep"));
        RETURN_IF_ERROR(ctx_->Sync("SgdMomentumStep"));
      } else {
        if (in.size() != 4 || outs.size() != 3) return Bad(op, "expects (p, g, m, v) -> (p, m, v)");
        const double b1 = op.GetFloat("beta1", 0.9), b2 = op.GetFloat("beta2", 0.999);
        const double t = ctx.step + 1;
        RETURN_IF_ERROR(CudaStatus(
            ci::AdamStep(ci::ElemType::kF32, V(in[0]).data(), V(in[1]).data(), V(in[2]).data(),
                         V(in[3]).data(), V(outs[0]).data(), V(outs[1]).data(), V(outs[2]).data(), n,
                         static_cast<float>(op.GetFloat("lr", 1e-3)), static_cast<float>(b1),
                         static_cast<float>(b2), static_cast<float>(op.GetFloat("epsilon", 1e-8)), wd,
                         static_cast<float>(1 - std::pow(b1, t)),
                         static_cast<float>(std::sqrt(1 - std::pow(b2, t))), stream),
            "AdamStep"));
      }
      Count("braid kernel", op);
      return outs;
    }
    default:
      break;
  }

  const graph::OpId id = static_cast<graph::OpId>(&op - g.ops().data());
  if (id < 0 || id >= g.num_ops()) return absl::InternalError(absl::StrCat("op ", op.name, " is not in its graph"));
  auto key = std::make_pair(&g, id);
  std::unique_ptr<OpCache>& c = cache_[key];
  if (!c) {
    c = std::make_unique<OpCache>();
    // braid's NVRTC program of the op alone, when it has one (float32 only).
    const bool ew = worker::EwMappingOf(op).has_value() || op.kind == K::kReduceSum ||
                    op.kind == K::kReduceMean || op.kind == K::kReduceMax;
    if (ew) (void)PrepareNvrtc(g, {key.second}, *c);
    if (!c->ew) {
      absl::StatusOr<ci::CudaOp> lib = ci::MakeCudaOp(*ctx_, g, key.second);
      if (!lib.ok()) {
        absl::Status s = lib.status();
        cache_.erase(key);
        return Unsupported(op, std::string(s.message()));
      }
      c->library = *std::move(lib);
    }
  }
  if (c->ew) {
    std::map<graph::TensorId, Value> inputs;
    for (size_t i = 0; i < op.inputs.size(); ++i) inputs[op.inputs[i]] = in[i];
    ASSIGN_OR_RETURN(auto made, RunNvrtc(g, *c, inputs));
    std::vector<Value> outs;
    for (graph::TensorId t : op.outputs) {
      auto it = made.find(t);
      if (it == made.end()) return Unsupported(op, "an output the NVRTC program does not write");
      outs.push_back(it->second);
    }
    Count("nvrtc", op);
    return outs;
  }
  ci::CudaOp& lib = *c->library;
  if (lib.inputs.size() != in.size()) return Bad(op, "input count differs from the graph's");
  for (size_t i = 0; i < in.size(); ++i) {
    if (lib.inputs[i].bytes() != V(in[i]).bytes()) {
      return Bad(op, absl::StrCat("input ", i, " holds ", V(in[i]).bytes(), " bytes, the op reads ",
                                  lib.inputs[i].bytes()));
    }
    if (lib.inputs[i].bytes() > 0) {
      RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(lib.inputs[i].data(), V(in[i]).data(), lib.inputs[i].bytes(),
                                                 cudaMemcpyDeviceToDevice, stream),
                                 "op input copy"));
    }
  }
  if (lib.prepare) RETURN_IF_ERROR(lib.prepare());
  RETURN_IF_ERROR(lib.run());
  std::vector<Value> outs;
  for (size_t k = 0; k < lib.outputs.size(); ++k) {
    ASSIGN_OR_RETURN(Value v, NewValue(out_shape(static_cast<int>(k)), out_dtype(static_cast<int>(k))));
    if (V(v).bytes() != lib.outputs[k].bytes()) return Bad(op, "output size differs from the graph's");
    if (V(v).bytes() > 0) {
      RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(V(v).data(), lib.outputs[k].data(), V(v).bytes(),
                                                 cudaMemcpyDeviceToDevice, stream),
                                 "op output copy"));
    }
    outs.push_back(std::move(v));
  }
  Count("cublas/cudnn", op);
  return outs;
}

absl::Status CudaBackend::PrepareNvrtc(const graph::Graph& g, const std::vector<graph::OpId>& ops,
                                       OpCache& c) {
  ASSIGN_OR_RETURN(worker::FusedGroup grp, worker::AnalyzeGroup(g, ops));
  absl::StatusOr<worker::ElementwiseProgram> ep = worker::BuildElementwiseProgram(g, grp);
  if (!ep.ok()) return absl::UnimplementedError(absl::StrCat("no NVRTC program: ", ep.status().message()));
  for (const std::vector<graph::TensorId>* ts : {&ep->inputs, &grp.escaping})
    for (graph::TensorId t : *ts)
      if (g.tensor(t).dtype != graph::DType::kF32)
        return absl::UnimplementedError("a tensor of the group is not float32");
  ASSIGN_OR_RETURN(c.ew, kernels::cuda::CudaEwKernel::CompileForCurrentDevice(ep->program));
  c.program = *std::move(ep);
  c.group = std::move(grp);
  return absl::OkStatus();
}

absl::StatusOr<std::map<graph::TensorId, Value>> CudaBackend::RunNvrtc(
    const graph::Graph& g, const OpCache& c, const std::map<graph::TensorId, Value>& inputs) {
  std::vector<const float*> ins;
  for (graph::TensorId t : c.program.inputs) {
    auto it = inputs.find(t);
    if (it == inputs.end()) return absl::InternalError("an NVRTC program's input holds no value");
    ins.push_back(V(it->second).f32());
  }
  std::map<graph::TensorId, Value> outs;
  std::vector<float*> out_ptrs;
  for (graph::TensorId t : c.group.escaping) {
    ASSIGN_OR_RETURN(Value v, NewValue(g.tensor(t).shape, graph::DType::kF32));
    out_ptrs.push_back(V(v).f32());
    outs[t] = v;
  }
  RETURN_IF_ERROR(c.ew->Run(ins, out_ptrs, ctx_->stream()));
  return outs;
}

absl::StatusOr<std::map<graph::TensorId, Value>> CudaBackend::RunGroup(
    const graph::Graph& g, const std::vector<graph::OpId>& members,
    const std::map<graph::TensorId, Value>& inputs, const RankContext& ctx, bool* fused) {
  RETURN_IF_ERROR(ctx_->Activate());
  std::unique_ptr<OpCache>& c = cache_[std::make_pair(&g, -1 - members.front())];
  if (!c) {
    c = std::make_unique<OpCache>();
    std::vector<graph::OpId> sorted = members;
    std::sort(sorted.begin(), sorted.end());
    if (absl::Status s = PrepareNvrtc(g, sorted, *c); !s.ok()) c->why_not = std::string(s.message());
  }
  if (!c->ew) {
    unfused_why_[g.op(members.front()).name] = c->why_not;
    return Backend::RunGroup(g, members, inputs, ctx, fused);
  }
  ASSIGN_OR_RETURN(auto outs, RunNvrtc(g, *c, inputs));
  if (options_.sync_each_op) RETURN_IF_ERROR(ctx_->Sync(absl::StrCat("group of ", g.op(members.front()).name)));
  by_path_["nvrtc group"] += static_cast<int64_t>(members.size());  // ops run
  *fused = true;
  return outs;
}

// ---- NCCL ----

namespace {

struct CommDeleter {
  void operator()(ncclComm* c) const { ncclCommDestroy(c); }
};
using Comm = std::unique_ptr<ncclComm, CommDeleter>;

// Waits for the stream the collective was enqueued on, then finishes it.
class NcclPending : public Pending {
 public:
  NcclPending(ci::CudaContext* ctx, std::function<absl::StatusOr<Value>()> finish)
      : ctx_(ctx), finish_(std::move(finish)) {}
  absl::StatusOr<Value> Wait() override {
    RETURN_IF_ERROR(ctx_->Sync("NCCL collective"));
    return finish_();
  }

 private:
  ci::CudaContext* ctx_;
  std::function<absl::StatusOr<Value>()> finish_;
};

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(int rank, int world, CudaBackend& backend)
      : rank_(rank), world_(world), backend_(backend) {}

  absl::Status Make(const graph::Program& p, const std::string& id_dir, double timeout_s) {
    std::vector<std::vector<int>> wanted;
    std::vector<int> all(world_);
    for (int r = 0; r < world_; ++r) all[r] = r;
    wanted.push_back(all);
    for (const graph::Op& op : p.graph.ops()) {
      if (graph::CategoryOf(op.kind) != graph::OpCategory::kCollective) continue;
      const std::vector<int64_t> a64 = op.GetInts("mesh_axes");
      wanted.push_back(graph::GroupRanks(p.mesh, rank_, std::vector<int>(a64.begin(), a64.end())));
    }
    RETURN_IF_ERROR(backend_.context().Activate());
    for (const std::vector<int>& g : wanted) {
      if (comms_.contains(g) || (g.size() <= 1 && g != all)) continue;
      const int me = static_cast<int>(std::find(g.begin(), g.end(), rank_) - g.begin());
      const std::string path =
          (std::filesystem::path(id_dir) / absl::StrCat("nccl-", absl::StrJoin(g, "-"), ".id")).string();
      ncclUniqueId id{};
      if (me == 0) {
        RETURN_IF_ERROR(NcclStatus(ncclGetUniqueId(&id), "ncclGetUniqueId"));
        RETURN_IF_ERROR(worker::WriteNcclId(id, path));
      } else {
        ASSIGN_OR_RETURN(id, worker::ReadNcclId(path, absl::StrCat("rank ", rank_), timeout_s));
      }
      ncclComm_t c = nullptr;
      RETURN_IF_ERROR(NcclStatus(ncclCommInitRank(&c, static_cast<int>(g.size()), id, me),
                                 absl::StrCat("ncclCommInitRank (ranks ", absl::StrJoin(g, ","), ")")));
      comms_[g] = Comm(c);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<Pending>> Start(const graph::Op& op, const std::vector<int>& group,
                                                 const Value& input) override {
    auto it = comms_.find(group);
    if (it == comms_.end()) {
      if (group.size() <= 1) return std::unique_ptr<Pending>(new ReadyPending(input));
      return absl::InternalError("a collective's group was not made");
    }
    ncclComm_t comm = it->second.get();
    ci::CudaContext& ctx = backend_.context();
    RETURN_IF_ERROR(ctx.Activate());
    const CudaValue& x = V(input);
    if (x.dtype != graph::DType::kF32) return absl::UnimplementedError("NCCL collectives of non-float32 tensors");
    const int64_t gsize = static_cast<int64_t>(group.size());
    const int64_t n = Numel(x.shape);
    const int64_t rank = static_cast<int64_t>(x.shape.size());
    int64_t dim = op.GetInt("dim", 0);
    if (dim < 0) dim += rank;
    const cudaStream_t stream = ctx.stream();
    // NCCL gathers and scatters along the leading dim: the op's `dim` is
    // moved to the front before, and back to its place after (a permuted
    // copy each way).
    auto front = [&]() -> absl::StatusOr<Value> {
      if (dim == 0) return input;
      std::vector<int> perm = {static_cast<int>(dim)};
      for (int d = 0; d < rank; ++d)
        if (d != dim) perm.push_back(d);
      return Permuted(input, perm);
    };
    auto back = [this, dim](const Value& y) -> absl::StatusOr<Value> {
      if (dim == 0) return y;
      std::vector<int> perm;
      for (int d = 1; d <= dim; ++d) perm.push_back(d);
      perm.push_back(0);
      for (int d = static_cast<int>(dim) + 1; d < static_cast<int>(V(y).shape.size()); ++d) perm.push_back(d);
      ASSIGN_OR_RETURN(Value z, Permuted(y, perm));
      RETURN_IF_ERROR(backend_.context().Sync("collective permute"));
      return z;
    };
    switch (op.kind) {
      case K::kAllReduce: {
        ASSIGN_OR_RETURN(Value y, backend_.NewValue(x.shape, x.dtype));
        RETURN_IF_ERROR(NcclStatus(ncclAllReduce(x.data(), V(y).data(), n, ncclFloat, ncclSum, comm, stream),
                                   "ncclAllReduce"));
        return std::unique_ptr<Pending>(new NcclPending(&ctx, [y] { return y; }));
      }
      case K::kAllGather: {
        if (dim < 0 || dim >= rank) return absl::InvalidArgumentError("AllGather dim off the tensor");
        ASSIGN_OR_RETURN(Value src, front());
        std::vector<int64_t> gathered = V(src).shape;
        gathered[0] *= gsize;
        ASSIGN_OR_RETURN(Value y, backend_.NewValue(gathered, x.dtype));
        RETURN_IF_ERROR(NcclStatus(ncclAllGather(V(src).data(), V(y).data(), n, ncclFloat, comm, stream),
                                   "ncclAllGather"));
        return std::unique_ptr<Pending>(new NcclPending(&ctx, [back, y, src] { return back(y); }));
      }
      case K::kReduceScatter: {
        if (dim < 0 || dim >= rank) return absl::InvalidArgumentError("ReduceScatter dim off the tensor");
        if (x.shape[dim] % gsize != 0) return absl::InvalidArgumentError("ReduceScatter dim not divisible");
        ASSIGN_OR_RETURN(Value src, front());
        std::vector<int64_t> piece = V(src).shape;
        piece[0] /= gsize;
        ASSIGN_OR_RETURN(Value y, backend_.NewValue(piece, x.dtype));
        RETURN_IF_ERROR(NcclStatus(
            ncclReduceScatter(V(src).data(), V(y).data(), n / gsize, ncclFloat, ncclSum, comm, stream),
            "ncclReduceScatter"));
        return std::unique_ptr<Pending>(new NcclPending(&ctx, [back, y, src] { return back(y); }));
      }
      default:
        return absl::UnimplementedError(absl::StrCat("NCCL collective ", op.type));
    }
  }

  // `v` with its dims in `perm`'s order (output dim k is input dim perm[k]),
  // enqueued on the backend's stream.
  absl::StatusOr<Value> Permuted(const Value& v, const std::vector<int>& perm) {
    const CudaValue& x = V(v);
    std::vector<int64_t> shape;
    for (int d : perm) shape.push_back(x.shape[d]);
    ASSIGN_OR_RETURN(Value y, backend_.NewValue(shape, x.dtype));
    RETURN_IF_ERROR(CudaStatus(ci::Permute(ci::ElemType::kF32, x.data(), V(y).data(),
                                           static_cast<int>(x.shape.size()), x.shape.data(), perm.data(),
                                           backend_.context().stream()),
                               "Permute"));
    return y;
  }

  absl::StatusOr<std::vector<HostTensor>> AllGatherHost(const HostTensor& v) override {
    std::vector<int> all(world_);
    for (int r = 0; r < world_; ++r) all[r] = r;
    std::vector<HostTensor> out(world_);
    if (world_ == 1) {
      out[0] = v;
      return out;
    }
    ASSIGN_OR_RETURN(Value d, backend_.FromHost({{static_cast<int64_t>(v.data.size())}, v.data}, graph::DType::kF32));
    ASSIGN_OR_RETURN(Value y, backend_.NewValue({world_ * static_cast<int64_t>(v.data.size())}, graph::DType::kF32));
    RETURN_IF_ERROR(NcclStatus(ncclAllGather(V(d).data(), V(y).data(), v.data.size(), ncclFloat,
                                             comms_.at(all).get(), backend_.context().stream()),
                               "ncclAllGather (parameters)"));
    ASSIGN_OR_RETURN(HostTensor h, backend_.ToHost(y));
    for (int r = 0; r < world_; ++r) {
      out[r].shape = v.shape;
      out[r].data.assign(h.data.begin() + r * v.data.size(), h.data.begin() + (r + 1) * v.data.size());
    }
    return out;
  }

 private:
  int rank_, world_;
  CudaBackend& backend_;
  std::map<std::vector<int>, Comm> comms_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> MakeNcclCommunicator(const graph::Program& program,
                                                                   int rank, CudaBackend& backend,
                                                                   const std::string& id_dir,
                                                                   double timeout_s) {
  auto c = std::make_unique<NcclCommunicator>(rank, program.World(), backend);
  RETURN_IF_ERROR(c->Make(program, id_dir, timeout_s));
  return std::unique_ptr<Communicator>(std::move(c));
}

}  // namespace braid::runtime
