// GEMMs with fused epilogues on cuBLASLt (cublasLtMatmul): the CUDA side of
// braid's fused GEMM + bias + activation kernels and of their backward
// passes (ReLU/GELU gradients and bias gradients in the GEMM epilogue).
//
// Conventions are cuBLAS's: column-major matrices, D (m x n) =
//   epilogue(alpha * op(A) op(B) + beta * C [+ bias])
// with op(A) m x k, op(B) k x n, C and D m x n with the same leading
// dimension ldc (C may be D itself). A row-major caller computes the
// transpose: swap A and B and m and n.
//
//   LtGemmSpec s;
//   s.m = 1024; s.n = 64; s.k = 4096;               // Y^T = W X^T + b (a Linear layer)
//   s.trans_a = false; s.trans_b = true;
//   s.epilogue = LtEpilogue::kGeluAuxBias;
//   RETURN_IF_ERROR(LtGemmCanImplement(s));         // no GPU needed
//   ASSIGN_OR_RETURN(std::unique_ptr<LtGemm> lt, LtGemm::Create());
//   LtGemmArgs args{.a = w, .b = x, .d = y, .bias = b, .aux = gelu_in};
//   RETURN_IF_ERROR(lt->Run(s, args, stream));
//
// Epilogue semantics (cublasLt.h, cublasLtEpilogue_t and
// cublasLtMatmulDescAttributes_t):
//   BIAS*:  bias is a packed vector of m elements (rows of D) of D's type,
//           broadcast over the columns and added before the activation.
//   *_AUX:  forward epilogues also write aux: for ReLU a bit-mask (1 bit per
//           element of D, leading dimension in bits), for GELU the GELU
//           input (D's type). GELU is the tanh approximation.
//   DRELU / DGELU: D = (alpha op(A) op(B) + beta C) * relu'/gelu'(forward
//           input), read from the forward pass's aux.
//   *_BGRAD: also write the bias gradient (m elements, the row sums of D)
//           to `bias`.
//   BGRADA / BGRADB: write the bias gradient of op(A) (m elements, summed
//           over k) or of op(B) (n elements, summed over k) to `bias`.
//   CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: for the ReLU bit-mask "must be
//   divisible by 128 and be no less than the number of rows in the output
//   matrix"; for the GELU input "must be divisible by 8 and be no less than
//   the number of rows" (cublasLt.h). LtGemmCanImplement checks these.
#ifndef BRAID_KERNELS_CUDA_LT_GEMM_H_
#define BRAID_KERNELS_CUDA_LT_GEMM_H_

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace braid::kernels::cuda {

enum class LtEpilogue : uint8_t {
  kDefault,
  kRelu,
  kBias,
  kReluBias,
  kGelu,
  kGeluBias,
  kReluAux,
  kReluAuxBias,
  kGeluAux,
  kGeluAuxBias,
  kDRelu,
  kDReluBgrad,
  kDGelu,
  kDGeluBgrad,
  kBgradA,
  kBgradB,
  kCount,  // not an epilogue
};

// A, B, C, D, bias and GELU aux all have this type; alpha, beta and the
// accumulation are float (CUBLAS_COMPUTE_32F).
enum class LtDataType : uint8_t { kF32, kF16, kBF16 };

std::string_view LtEpilogueName(LtEpilogue e);  // "GELU_AUX_BIAS", as in cuBLASLt
cublasLtEpilogue_t ToCublasLtEpilogue(LtEpilogue e);
size_t LtDataTypeBytes(LtDataType t);

bool LtEpilogueReadsBias(LtEpilogue e);   // BIAS, RELU_BIAS, GELU_BIAS, *_AUX_BIAS
bool LtEpilogueWritesBias(LtEpilogue e);  // *_BGRAD, BGRADA, BGRADB
bool LtEpilogueWritesAux(LtEpilogue e);   // RELU_AUX*, GELU_AUX*
bool LtEpilogueReadsAux(LtEpilogue e);    // DRELU*, DGELU*
bool LtEpilogueReluMask(LtEpilogue e);    // aux is the ReLU bit-mask

struct LtGemmSpec {
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  // Leading dimensions; 0 = packed (the stored matrix's row count).
  int64_t lda = 0, ldb = 0, ldc = 0;
  // Aux leading dimension (bits for the ReLU mask, elements for GELU); 0 = m
  // rounded up to the multiple cuBLASLt requires (128 / 8).
  int64_t aux_ld = 0;
  LtEpilogue epilogue = LtEpilogue::kDefault;
  LtDataType dtype = LtDataType::kF32;
  float alpha = 1.0f;
  float beta = 0.0f;  // residual: beta * C is added before the epilogue
  bool tf32 = false;  // F32 only: CUBLAS_COMPUTE_32F_FAST_TF32 (tensor cores)

  // With the defaults above resolved.
  int64_t a_rows() const { return trans_a ? k : m; }
  int64_t a_cols() const { return trans_a ? m : k; }
  int64_t b_rows() const { return trans_b ? n : k; }
  int64_t b_cols() const { return trans_b ? k : n; }
  int64_t lda_or_packed() const { return lda ? lda : a_rows(); }
  int64_t ldb_or_packed() const { return ldb ? ldb : b_rows(); }
  int64_t ldc_or_packed() const { return ldc ? ldc : m; }
  int64_t aux_ld_or_default() const;
  // Sizes of the buffers Run reads and writes, in bytes (0: not used).
  int64_t a_bytes() const;
  int64_t b_bytes() const;
  int64_t c_bytes() const;  // C and D each
  int64_t bias_bytes() const;
  int64_t aux_bytes() const;
  // Canonical text: the key plans are cached under.
  std::string Key() const;
};

struct LtGemmArgs {
  const void* a = nullptr;
  const void* b = nullptr;
  const void* c = nullptr;  // residual, read when beta != 0 (may equal d; null = d)
  void* d = nullptr;
  void* bias = nullptr;  // bias in (BIAS*) or bias gradient out (*BGRAD*)
  void* aux = nullptr;   // written by *_AUX, read by DRELU*/DGELU*
};

// OK when the spec is one cuBLASLt documents as valid: positive sizes,
// leading dimensions no less than the stored rows, the aux leading dimension
// rules above, TF32 only with F32. InvalidArgument naming the field
// otherwise. The algorithm heuristic on the device has the last word: Run
// answers Unimplemented when it finds no algorithm (a combination of
// epilogue, type and layout cuBLASLt has no kernel for).
absl::Status LtGemmCanImplement(const LtGemmSpec& s);

class LtGemm {
 public:
  // A cuBLASLt handle and a `workspace_bytes` workspace on the current
  // device. FailedPrecondition "no CUDA device: ..." without one.
  static absl::StatusOr<std::unique_ptr<LtGemm>> Create(size_t workspace_bytes = size_t{32} << 20);
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  // Enqueues D = epilogue(...) on `stream`. InvalidArgument for a spec
  // LtGemmCanImplement rejects or a missing pointer the epilogue needs;
  // Unimplemented when cuBLASLt has no algorithm for it. The algorithm is
  // chosen once per (spec, pointer alignments) and cached.
  absl::Status Run(const LtGemmSpec& s, const LtGemmArgs& args, cudaStream_t stream);

 private:
  struct Plan;
  LtGemm() = default;
  absl::StatusOr<Plan*> GetPlan(const LtGemmSpec& s, const LtGemmArgs& args);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<Plan>> plans_;
};

}  // namespace braid::kernels::cuda

#endif  // BRAID_KERNELS_CUDA_LT_GEMM_H_
