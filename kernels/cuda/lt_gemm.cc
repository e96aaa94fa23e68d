#include "kernels/cuda/lt_gemm.h"

#include <bit>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/cuda/cuda_status.h"

namespace braid::kernels::cuda {
namespace {

struct EpilogueInfo {
  LtEpilogue e;
  std::string_view name;
  cublasLtEpilogue_t lt;
};

constexpr EpilogueInfo kEpilogues[] = {
    {LtEpilogue::kDefault, "DEFAULT", CUBLASLT_EPILOGUE_DEFAULT},
    {LtEpilogue::kRelu, "RELU", CUBLASLT_EPILOGUE_RELU},
    {LtEpilogue::kBias, "BIAS", CUBLASLT_EPILOGUE_BIAS},
    {LtEpilogue::kReluBias, "RELU_BIAS", CUBLASLT_EPILOGUE_RELU_BIAS},
    {LtEpilogue::kGelu, "GELU", CUBLASLT_EPILOGUE_GELU},
    {LtEpilogue::kGeluBias, "GELU_BIAS", CUBLASLT_EPILOGUE_GELU_BIAS},
    {LtEpilogue::kReluAux, "RELU_AUX", CUBLASLT_EPILOGUE_RELU_AUX},
    {LtEpilogue::kReluAuxBias, "RELU_AUX_BIAS", CUBLASLT_EPILOGUE_RELU_AUX_BIAS},
    {LtEpilogue::kGeluAux, "GELU_AUX", CUBLASLT_EPILOGUE_GELU_AUX},
    {LtEpilogue::kGeluAuxBias, "GELU_AUX_BIAS", CUBLASLT_EPILOGUE_GELU_AUX_BIAS},
    {LtEpilogue::kDRelu, "DRELU", CUBLASLT_EPILOGUE_DRELU},
    {LtEpilogue::kDReluBgrad, "DRELU_BGRAD", CUBLASLT_EPILOGUE_DRELU_BGRAD},
    {LtEpilogue::kDGelu, "DGELU", CUBLASLT_EPILOGUE_DGELU},
    {LtEpilogue::kDGeluBgrad, "DGELU_BGRAD", CUBLASLT_EPILOGUE_DGELU_BGRAD},
    {LtEpilogue::kBgradA, "BGRADA", CUBLASLT_EPILOGUE_BGRADA},
    {LtEpilogue::kBgradB, "BGRADB", CUBLASLT_EPILOGUE_BGRADB},
};
static_assert(sizeof(kEpilogues) / sizeof(kEpilogues[0]) == static_cast<size_t>(LtEpilogue::kCount));

bool IsOneOf(LtEpilogue e, std::initializer_list<LtEpilogue> set) {
  for (LtEpilogue x : set) {
    if (x == e) return true;
  }
  return false;
}

cudaDataType_t CudaType(LtDataType t) {
  switch (t) {
    case LtDataType::kF16:
      return CUDA_R_16F;
    case LtDataType::kBF16:
      return CUDA_R_16BF;
    case LtDataType::kF32:
      break;
  }
  return CUDA_R_32F;
}

// cuBLASLt's documented granularity of the aux leading dimension.
int64_t AuxLdMultiple(LtEpilogue e) { return LtEpilogueReluMask(e) ? 128 : 8; }

// The largest power of two (up to 256, cuBLASLt's default expectation)
// dividing the address: what the heuristic may assume of the buffer.
uint32_t Alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  if (a == 0) return 256;
  return static_cast<uint32_t>(std::min<uintptr_t>(256, a & (~a + 1)));
}

}  // namespace

std::string_view LtEpilogueName(LtEpilogue e) {
  return e < LtEpilogue::kCount ? kEpilogues[static_cast<size_t>(e)].name : "?";
}
cublasLtEpilogue_t ToCublasLtEpilogue(LtEpilogue e) {
  return e < LtEpilogue::kCount ? kEpilogues[static_cast<size_t>(e)].lt : CUBLASLT_EPILOGUE_DEFAULT;
}
size_t LtDataTypeBytes(LtDataType t) { return t == LtDataType::kF32 ? 4 : 2; }

bool LtEpilogueReadsBias(LtEpilogue e) {
  using E = LtEpilogue;
  return IsOneOf(e, {E::kBias, E::kReluBias, E::kGeluBias, E::kReluAuxBias, E::kGeluAuxBias});
}
bool LtEpilogueWritesBias(LtEpilogue e) {
  using E = LtEpilogue;
  return IsOneOf(e, {E::kDReluBgrad, E::kDGeluBgrad, E::kBgradA, E::kBgradB});
}
bool LtEpilogueWritesAux(LtEpilogue e) {
  using E = LtEpilogue;
  return IsOneOf(e, {E::kReluAux, E::kReluAuxBias, E::kGeluAux, E::kGeluAuxBias});
}
bool LtEpilogueReadsAux(LtEpilogue e) {
  using E = LtEpilogue;
  return IsOneOf(e, {E::kDRelu, E::kDReluBgrad, E::kDGelu, E::kDGeluBgrad});
}
bool LtEpilogueReluMask(LtEpilogue e) {
  using E = LtEpilogue;
  return IsOneOf(e, {E::kReluAux, E::kReluAuxBias, E::kDRelu, E::kDReluBgrad});
}

int64_t LtGemmSpec::aux_ld_or_default() const {
  if (aux_ld != 0) return aux_ld;
  const int64_t mult = AuxLdMultiple(epilogue);
  return (m + mult - 1) / mult * mult;
}

int64_t LtGemmSpec::a_bytes() const {
  return lda_or_packed() * a_cols() * static_cast<int64_t>(LtDataTypeBytes(dtype));
}
int64_t LtGemmSpec::b_bytes() const {
  return ldb_or_packed() * b_cols() * static_cast<int64_t>(LtDataTypeBytes(dtype));
}
int64_t LtGemmSpec::c_bytes() const {
  return ldc_or_packed() * n * static_cast<int64_t>(LtDataTypeBytes(dtype));
}
int64_t LtGemmSpec::bias_bytes() const {
  if (!LtEpilogueReadsBias(epilogue) && !LtEpilogueWritesBias(epilogue)) return 0;
  return (epilogue == LtEpilogue::kBgradB ? n : m) * static_cast<int64_t>(LtDataTypeBytes(dtype));
}
int64_t LtGemmSpec::aux_bytes() const {
  if (!LtEpilogueWritesAux(epilogue) && !LtEpilogueReadsAux(epilogue)) return 0;
  if (LtEpilogueReluMask(epilogue)) return aux_ld_or_default() * n / 8;  // one bit per element
  return aux_ld_or_default() * n * static_cast<int64_t>(LtDataTypeBytes(dtype));
}

std::string LtGemmSpec::Key() const {
  return absl::StrCat(m, "x", n, "x", k, trans_a ? "T" : "N", trans_b ? "T" : "N", ",ld=", lda_or_packed(),
                      ",", ldb_or_packed(), ",", ldc_or_packed(), ",", aux_ld_or_default(), ",",
                      std::string(LtEpilogueName(epilogue)), ",t", static_cast<int>(dtype),
                      tf32 ? ",tf32" : "", ",a", std::bit_cast<uint32_t>(alpha), ",b",
                      std::bit_cast<uint32_t>(beta));
}

absl::Status LtGemmCanImplement(const LtGemmSpec& s) {
  if (s.epilogue >= LtEpilogue::kCount) return absl::InvalidArgumentError("lt gemm: unknown epilogue");
  if (s.dtype != LtDataType::kF32 && s.dtype != LtDataType::kF16 && s.dtype != LtDataType::kBF16) {
    return absl::InvalidArgumentError("lt gemm: unknown data type");
  }
  constexpr int64_t kMaxDim = (int64_t{1} << 31) - 1;
  const int64_t dims[] = {s.m, s.n, s.k};
  const char* names[] = {"m", "n", "k"};
  for (int i = 0; i < 3; ++i) {
    if (dims[i] < 1 || dims[i] > kMaxDim) {
      return absl::InvalidArgumentError(
          absl::StrCat("lt gemm: ", names[i], " = ", dims[i], " is not in [1, 2^31)"));
    }
  }
  struct Ld {
    const char* name;
    int64_t ld, rows;
  };
  for (const Ld& l : {Ld{"lda", s.lda, s.a_rows()}, Ld{"ldb", s.ldb, s.b_rows()}, Ld{"ldc", s.ldc, s.m}}) {
    if (l.ld != 0 && (l.ld < l.rows || l.ld > kMaxDim)) {
      return absl::InvalidArgumentError(
          absl::StrCat("lt gemm: ", l.name, " = ", l.ld, " is below the stored matrix's ", l.rows, " rows"));
    }
  }
  if (LtEpilogueWritesAux(s.epilogue) || LtEpilogueReadsAux(s.epilogue)) {
    // cublasLt.h, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: the ReLU bit-mask's
    // ld (in bits) "must be divisible by 128", the GELU input's "by 8", and
    // either "no less than the number of rows in the output matrix".
    const int64_t ld = s.aux_ld_or_default(), mult = AuxLdMultiple(s.epilogue);
    if (ld < s.m || ld % mult != 0) {
      return absl::InvalidArgumentError(absl::StrCat("lt gemm: ", std::string(LtEpilogueName(s.epilogue)),
                                                     " aux ld ", ld, " must be a multiple of ", mult,
                                                     " and at least m = ", s.m));
    }
  }
  if (s.tf32 && s.dtype != LtDataType::kF32) {
    return absl::InvalidArgumentError("lt gemm: tf32 applies to F32 data only");
  }
  if (!std::isfinite(s.alpha) || !std::isfinite(s.beta)) {
    return absl::InvalidArgumentError("lt gemm: alpha and beta must be finite");
  }
  return absl::OkStatus();
}

// ---- LtGemm -----------------------------------------------------------------

struct LtGemm::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~Plan() {
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (c != nullptr) cublasLtMatrixLayoutDestroy(c);
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
  }
};

absl::StatusOr<std::unique_ptr<LtGemm>> LtGemm::Create(size_t workspace_bytes) {
  RETURN_IF_ERROR(CudaDeviceCount());
  std::unique_ptr<LtGemm> g(new LtGemm);
  RETURN_IF_ERROR(CublasStatus(cublasLtCreate(&g->handle_), "cublasLtCreate"));
  if (workspace_bytes > 0) {
    RETURN_IF_ERROR(CudaStatus(cudaMalloc(&g->workspace_, workspace_bytes),
                               absl::StrCat("cudaMalloc(lt gemm workspace, ", workspace_bytes, " bytes)")));
    g->workspace_bytes_ = workspace_bytes;
  }
  return g;
}

LtGemm::~LtGemm() {
  plans_.clear();
  if (workspace_ != nullptr) cudaFree(workspace_);
  if (handle_ != nullptr) cublasLtDestroy(handle_);
}

absl::StatusOr<LtGemm::Plan*> LtGemm::GetPlan(const LtGemmSpec& s, const LtGemmArgs& args) {
  const void* c = args.c != nullptr ? args.c : args.d;
  const uint32_t align[] = {Alignment(args.a), Alignment(args.b), Alignment(c), Alignment(args.d)};
  const std::string key = absl::StrCat(s.Key(), "|", align[0], ",", align[1], ",", align[2], ",", align[3],
                                       ",", Alignment(args.bias), ",", Alignment(args.aux));
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second.get();

  auto plan = std::make_unique<Plan>();
  const cublasComputeType_t compute = s.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  RETURN_IF_ERROR(
      CublasStatus(cublasLtMatmulDescCreate(&plan->desc, compute, CUDA_R_32F), "cublasLtMatmulDescCreate"));
  auto set = [&](cublasLtMatmulDescAttributes_t attr, const auto& value, const char* what) {
    return CublasStatus(cublasLtMatmulDescSetAttribute(plan->desc, attr, &value, sizeof(value)),
                        absl::StrCat("cublasLtMatmulDescSetAttribute(", what, ")"));
  };
  const int32_t ta = s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  RETURN_IF_ERROR(set(CUBLASLT_MATMUL_DESC_TRANSA, ta, "TRANSA"));
  RETURN_IF_ERROR(set(CUBLASLT_MATMUL_DESC_TRANSB, tb, "TRANSB"));
  const uint32_t epilogue = ToCublasLtEpilogue(s.epilogue);
  RETURN_IF_ERROR(set(CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue, "EPILOGUE"));
  // The heuristic reads the bias and aux pointers' alignment (cublasLt.h),
  // so they are set before it runs; Run sets the actual ones each call.
  if (LtEpilogueReadsBias(s.epilogue) || LtEpilogueWritesBias(s.epilogue)) {
    RETURN_IF_ERROR(set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, args.bias, "BIAS_POINTER"));
  }
  if (LtEpilogueWritesAux(s.epilogue) || LtEpilogueReadsAux(s.epilogue)) {
    RETURN_IF_ERROR(set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, args.aux, "EPILOGUE_AUX_POINTER"));
    const int64_t aux_ld = s.aux_ld_or_default();
    RETURN_IF_ERROR(set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, aux_ld, "EPILOGUE_AUX_LD"));
  }
  const cudaDataType_t t = CudaType(s.dtype);
  auto layout = [&](cublasLtMatrixLayout_t* l, int64_t rows, int64_t cols, int64_t ld, const char* what) {
    return CublasStatus(
        cublasLtMatrixLayoutCreate(l, t, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld),
        absl::StrCat("cublasLtMatrixLayoutCreate(", what, ")"));
  };
  RETURN_IF_ERROR(layout(&plan->a, s.a_rows(), s.a_cols(), s.lda_or_packed(), "A"));
  RETURN_IF_ERROR(layout(&plan->b, s.b_rows(), s.b_cols(), s.ldb_or_packed(), "B"));
  RETURN_IF_ERROR(layout(&plan->c, s.m, s.n, s.ldc_or_packed(), "C/D"));

  cublasLtMatmulPreference_t pref = nullptr;
  RETURN_IF_ERROR(CublasStatus(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate"));
  std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, decltype(&cublasLtMatmulPreferenceDestroy)> pref_guard(
      pref, &cublasLtMatmulPreferenceDestroy);
  auto set_pref = [&](cublasLtMatmulPreferenceAttributes_t attr, const auto& value) {
    return CublasStatus(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value)),
                        "cublasLtMatmulPreferenceSetAttribute");
  };
  const uint64_t ws = workspace_bytes_;
  RETURN_IF_ERROR(set_pref(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, ws));
  RETURN_IF_ERROR(set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align[0]));
  RETURN_IF_ERROR(set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align[1]));
  RETURN_IF_ERROR(set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align[2]));
  RETURN_IF_ERROR(set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align[3]));

  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle_, plan->desc, plan->a, plan->b, plan->c,
                                                           plan->c, pref, 1, &result, &found);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || (st == CUBLAS_STATUS_SUCCESS && found == 0)) {
    return absl::UnimplementedError(absl::StrCat("lt gemm: cuBLASLt has no algorithm for ", s.Key()));
  }
  RETURN_IF_ERROR(CublasStatus(st, "cublasLtMatmulAlgoGetHeuristic"));
  plan->algo = result.algo;
  return plans_.emplace(key, std::move(plan)).first->second.get();
}

absl::Status LtGemm::Run(const LtGemmSpec& s, const LtGemmArgs& args, cudaStream_t stream) {
  RETURN_IF_ERROR(LtGemmCanImplement(s));
  if (args.a == nullptr || args.b == nullptr || args.d == nullptr) {
    return absl::InvalidArgumentError("lt gemm: A, B and D pointers are required");
  }
  const bool needs_bias = LtEpilogueReadsBias(s.epilogue) || LtEpilogueWritesBias(s.epilogue);
  if (needs_bias && args.bias == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("lt gemm: ", std::string(LtEpilogueName(s.epilogue)), " needs a bias pointer"));
  }
  const bool needs_aux = LtEpilogueWritesAux(s.epilogue) || LtEpilogueReadsAux(s.epilogue);
  if (needs_aux && args.aux == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("lt gemm: ", std::string(LtEpilogueName(s.epilogue)), " needs an aux pointer"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(Plan * plan, GetPlan(s, args));
  // Descriptors are read when cublasLtMatmul enqueues, so updating the
  // cached one's pointers under the lock is safe for earlier launches.
  if (needs_bias) {
    RETURN_IF_ERROR(CublasStatus(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                                &args.bias, sizeof(args.bias)),
                                 "cublasLtMatmulDescSetAttribute(BIAS_POINTER)"));
  }
  if (needs_aux) {
    RETURN_IF_ERROR(
        CublasStatus(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                    &args.aux, sizeof(args.aux)),
                     "cublasLtMatmulDescSetAttribute(EPILOGUE_AUX_POINTER)"));
  }
  const void* c = args.c != nullptr ? args.c : args.d;
  return CublasStatus(
      cublasLtMatmul(handle_, plan->desc, &s.alpha, args.a, plan->a, args.b, plan->b, &s.beta, c, plan->c,
                     args.d, plan->c, &plan->algo, workspace_, workspace_bytes_, stream),
      absl::StrCat("cublasLtMatmul(", s.Key(), ")"));
}

}  // namespace braid::kernels::cuda
