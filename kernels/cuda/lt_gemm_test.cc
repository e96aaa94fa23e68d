// cuBLASLt GEMM specs on any machine: the epilogue table, the documented
// shape rules LtGemmCanImplement enforces, buffer sizes, and the statuses
// without a device. gpu_test.cc runs the GEMMs.
#include "kernels/cuda/lt_gemm.h"

#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/internal/device_buffers.h"
#include "kernels/cuda/timing.h"

namespace braid::kernels::cuda {
namespace {

using ::testing::HasSubstr;

LtGemmSpec Spec(LtEpilogue e, int64_t m = 100, int64_t n = 10, int64_t k = 32) {
  LtGemmSpec s;
  s.m = m;
  s.n = n;
  s.k = k;
  s.epilogue = e;
  return s;
}

TEST(LtGemmTest, EpilogueTableMatchesCublasLt) {
  std::set<int> seen;
  for (int i = 0; i < static_cast<int>(LtEpilogue::kCount); ++i) {
    const LtEpilogue e = static_cast<LtEpilogue>(i);
    EXPECT_TRUE(seen.insert(ToCublasLtEpilogue(e)).second) << LtEpilogueName(e);
  }
  EXPECT_EQ(ToCublasLtEpilogue(LtEpilogue::kDefault), CUBLASLT_EPILOGUE_DEFAULT);
  EXPECT_EQ(ToCublasLtEpilogue(LtEpilogue::kGeluAuxBias), CUBLASLT_EPILOGUE_GELU_AUX_BIAS);
  EXPECT_EQ(ToCublasLtEpilogue(LtEpilogue::kDReluBgrad), CUBLASLT_EPILOGUE_DRELU_BGRAD);
  EXPECT_EQ(ToCublasLtEpilogue(LtEpilogue::kBgradB), CUBLASLT_EPILOGUE_BGRADB);
  EXPECT_EQ(LtEpilogueName(LtEpilogue::kDGeluBgrad), "DGELU_BGRAD");
  EXPECT_TRUE(LtEpilogueReadsBias(LtEpilogue::kReluAuxBias));
  EXPECT_FALSE(LtEpilogueReadsBias(LtEpilogue::kReluAux));
  EXPECT_TRUE(LtEpilogueWritesBias(LtEpilogue::kBgradA));
  EXPECT_TRUE(LtEpilogueWritesAux(LtEpilogue::kGeluAux));
  EXPECT_TRUE(LtEpilogueReadsAux(LtEpilogue::kDGelu));
  EXPECT_TRUE(LtEpilogueReluMask(LtEpilogue::kDRelu));
  EXPECT_FALSE(LtEpilogueReluMask(LtEpilogue::kGeluAuxBias));
}

TEST(LtGemmTest, CanImplementChecksShapesAndLeadingDimensions) {
  EXPECT_TRUE(LtGemmCanImplement(Spec(LtEpilogue::kDefault)).ok());
  EXPECT_EQ(LtGemmCanImplement(Spec(LtEpilogue::kDefault, 0)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LtGemmCanImplement(Spec(LtEpilogue::kDefault, 8, 8, int64_t{1} << 32)).code(),
            absl::StatusCode::kInvalidArgument);
  LtGemmSpec s = Spec(LtEpilogue::kBias);
  s.lda = 99;  // A is m x k = 100 x 32: ld below its 100 rows
  EXPECT_EQ(LtGemmCanImplement(s).code(), absl::StatusCode::kInvalidArgument);
  s.trans_a = true;  // now A is stored k x m: 32 rows
  EXPECT_TRUE(LtGemmCanImplement(s).ok());
  s.ldc = 50;
  const absl::Status st = LtGemmCanImplement(s);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("ldc"));
}

TEST(LtGemmTest, AuxLeadingDimensionFollowsTheCublasLtRules) {
  // ReLU bit-mask: a multiple of 128 bits, at least m.
  LtGemmSpec s = Spec(LtEpilogue::kReluAux);
  EXPECT_EQ(s.aux_ld_or_default(), 128);
  EXPECT_TRUE(LtGemmCanImplement(s).ok());
  s.aux_ld = 100;
  EXPECT_EQ(LtGemmCanImplement(s).code(), absl::StatusCode::kInvalidArgument);
  s.aux_ld = 256;
  EXPECT_TRUE(LtGemmCanImplement(s).ok());
  s.epilogue = LtEpilogue::kDReluBgrad;
  s.aux_ld = 64;  // a multiple of 128 is required, and >= m
  EXPECT_EQ(LtGemmCanImplement(s).code(), absl::StatusCode::kInvalidArgument);
  // GELU input: a multiple of 8 elements, at least m.
  s = Spec(LtEpilogue::kGeluAuxBias);
  EXPECT_EQ(s.aux_ld_or_default(), 104);
  EXPECT_TRUE(LtGemmCanImplement(s).ok());
  s.aux_ld = 100;
  EXPECT_EQ(LtGemmCanImplement(s).code(), absl::StatusCode::kInvalidArgument);
  s.epilogue = LtEpilogue::kGelu;  // no aux: its ld is not looked at
  EXPECT_TRUE(LtGemmCanImplement(s).ok());
}

TEST(LtGemmTest, CanImplementChecksTypesAndScalars) {
  LtGemmSpec s = Spec(LtEpilogue::kDefault);
  s.tf32 = true;
  EXPECT_TRUE(LtGemmCanImplement(s).ok());
  s.dtype = LtDataType::kBF16;
  EXPECT_EQ(LtGemmCanImplement(s).code(), absl::StatusCode::kInvalidArgument);
  s.tf32 = false;
  s.beta = std::numeric_limits<float>::infinity();
  EXPECT_EQ(LtGemmCanImplement(s).code(), absl::StatusCode::kInvalidArgument);
}

TEST(LtGemmTest, BufferSizes) {
  LtGemmSpec s = Spec(LtEpilogue::kReluAuxBias, 100, 10, 32);
  EXPECT_EQ(s.a_bytes(), 100 * 32 * 4);
  EXPECT_EQ(s.b_bytes(), 32 * 10 * 4);
  EXPECT_EQ(s.c_bytes(), 100 * 10 * 4);
  EXPECT_EQ(s.bias_bytes(), 100 * 4);
  EXPECT_EQ(s.aux_bytes(), 128 * 10 / 8);  // one bit per element
  s.epilogue = LtEpilogue::kGeluAux;
  s.dtype = LtDataType::kBF16;
  EXPECT_EQ(s.bias_bytes(), 0);
  EXPECT_EQ(s.aux_bytes(), 104 * 10 * 2);
  s.epilogue = LtEpilogue::kBgradB;  // the gradient of op(B)'s bias: n elements
  EXPECT_EQ(s.bias_bytes(), 10 * 2);
  EXPECT_EQ(s.aux_bytes(), 0);
}

TEST(LtGemmTest, KeysDifferWithEverythingThatSelectsAnAlgorithm) {
  LtGemmSpec a = Spec(LtEpilogue::kBias), b = a;
  EXPECT_EQ(a.Key(), b.Key());
  b.trans_b = true;
  EXPECT_NE(a.Key(), b.Key());
  b = a;
  b.beta = 1;
  EXPECT_NE(a.Key(), b.Key());
  b = a;
  b.epilogue = LtEpilogue::kReluBias;
  EXPECT_NE(a.Key(), b.Key());
}

TEST(LtGemmTest, FailedPreconditionWithoutDevice) {
  // InvalidArgument comes first, on any machine.
  EXPECT_EQ(TimeLtGemm(Spec(LtEpilogue::kDefault, 0), 5).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TimeLtGemm(Spec(LtEpilogue::kDefault), 0).status().code(), absl::StatusCode::kInvalidArgument);
  if (CudaDeviceCount().ok()) return;  // gpu_test.cc covers the device
  const absl::StatusOr<std::unique_ptr<LtGemm>> g = LtGemm::Create();
  EXPECT_EQ(g.status().code(), absl::StatusCode::kFailedPrecondition) << g.status();
  const absl::StatusOr<double> t = TimeLtGemm(Spec(LtEpilogue::kGeluAuxBias), 5);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kFailedPrecondition) << t.status();
  EXPECT_THAT(t.status().message(), HasSubstr("no CUDA device"));
}

TEST(LtGemmTest, HostConversionsTo16BitTypes) {
  using internal::DeviceBuffer;
  EXPECT_EQ(DeviceBuffer::ToBits16(1.5f, LtDataType::kF16), 0x3e00);
  EXPECT_EQ(DeviceBuffer::ToBits16(2.25f, LtDataType::kBF16), 0x4010);
  EXPECT_EQ(DeviceBuffer::FromBits16(0xc000, LtDataType::kBF16), -2.0f);
  EXPECT_EQ(DeviceBuffer::FromBits16(0x3c00, LtDataType::kF16), 1.0f);
  // 1 + 2^-10 keeps its bit in F16 (10 mantissa bits), not in BF16 (7).
  EXPECT_EQ(DeviceBuffer::RoundTo({1.0f + 0x1p-10f}, LtDataType::kF16)[0], 1.0f + 0x1p-10f);
  EXPECT_EQ(DeviceBuffer::RoundTo({1.0f + 0x1p-10f}, LtDataType::kBF16)[0], 1.0f);
}

TEST(CudaStatusTest, MapsLibraryCodes) {
  EXPECT_EQ(CudaStatusCode(cudaErrorInsufficientDriver), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(CudaStatusCode(cudaErrorMemoryAllocation), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(NvrtcStatusCode(NVRTC_ERROR_COMPILATION), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CublasStatusCode(CUBLAS_STATUS_NOT_SUPPORTED), absl::StatusCode::kUnimplemented);
  const absl::Status s = CublasStatus(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("cublasLtMatmul: CUBLAS_STATUS_INVALID_VALUE"));
  EXPECT_THAT(NvrtcStatus(NVRTC_ERROR_INVALID_OPTION, "nvrtc").message(),
              HasSubstr("nvrtc: nvrtcResult 5: "));
  EXPECT_TRUE(CudaStatus(cudaSuccess, "x").ok());
}

}  // namespace
}  // namespace braid::kernels::cuda
