// kernels/cuda on a GPU (ctest label `gpu`): every NVRTC fused kernel
// against the host reference evaluator (ew_reference.h), and every cuBLASLt
// forward epilogue and the DRELU/DGELU(_BGRAD) and BGRADA/B backward ones
// against a host GEMM in double (a CUTLASS-style host check). Every test
// skips with "no CUDA device: <the runtime's reason>" without a GPU.
#include <cmath>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/ew_kernel.h"
#include "kernels/cuda/ew_reference.h"
#include "kernels/cuda/internal/device_buffers.h"
#include "kernels/cuda/internal/test_programs.h"
#include "kernels/cuda/lt_gemm.h"
#include "kernels/cuda/timing.h"

namespace braid::kernels::cuda {
namespace {

using internal::DeviceBuffer;
using internal::Stream;

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const absl::StatusOr<int> n = CudaDeviceCount();
    if (!n.ok()) GTEST_SKIP() << n.status().message();
  }
};

std::vector<float> Random(int64_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

int64_t Product(const std::vector<int64_t>& v) {
  int64_t n = 1;
  for (int64_t d : v) n *= d;
  return n;
}

bool Close(double got, double want, double atol, double rtol) {
  if (std::isnan(want) || std::isnan(got)) return std::isnan(want) && std::isnan(got);
  if (std::isinf(want) || std::isinf(got)) return got == want;
  return std::fabs(got - want) <= atol + rtol * std::fabs(want);
}

// ---- fused elementwise kernels ---------------------------------------------

// Runs `p` on the device and compares each output with the host reference.
// Reductions get an absolute slack growing with the number of reduced
// points (float atomics against a double sum).
void CheckEwAgainst(const EwProgram& p, const std::vector<std::vector<float>>& inputs,
                    const std::vector<std::vector<float>>* want, double atol, double rtol) {
  absl::StatusOr<std::shared_ptr<const CudaEwKernel>> k = CudaEwKernel::CompileForCurrentDevice(p);
  ASSERT_TRUE(k.ok()) << k.status();
  std::vector<DeviceBuffer> ins, outs;
  std::vector<const float*> in_ptrs;
  std::vector<float*> out_ptrs;
  for (const std::vector<float>& v : inputs) {
    absl::StatusOr<DeviceBuffer> b = DeviceBuffer::Upload(v);
    ASSERT_TRUE(b.ok()) << b.status();
    in_ptrs.push_back(b->floats());
    ins.push_back(*std::move(b));
  }
  for (size_t j = 0; j < p.outputs.size(); ++j) {
    // Pre-filled with a sentinel: an element the kernel forgets shows up.
    absl::StatusOr<DeviceBuffer> b = DeviceBuffer::Upload(std::vector<float>((*want)[j].size(), 12345.0f));
    ASSERT_TRUE(b.ok()) << b.status();
    out_ptrs.push_back(b->floats());
    outs.push_back(*std::move(b));
  }
  absl::StatusOr<Stream> stream = Stream::Create();
  ASSERT_TRUE(stream.ok()) << stream.status();
  ASSERT_TRUE((*k)->Run(in_ptrs, out_ptrs, stream->get()).ok());
  ASSERT_TRUE(stream->Sync().ok());
  const int64_t points = Product(p.shape);
  for (size_t j = 0; j < p.outputs.size(); ++j) {
    absl::StatusOr<std::vector<float>> got = outs[j].DownloadAs((*want)[j].size(), LtDataType::kF32);
    ASSERT_TRUE(got.ok()) << got.status();
    const EwOutput& o = p.outputs[j];
    const int64_t count = points / static_cast<int64_t>((*want)[j].size());
    const double slack = o.reduce == ReduceKind::kNone || o.reduce == ReduceKind::kMax
                             ? atol
                             : atol + 4e-6 * static_cast<double>(count);
    const std::string what =
        o.reg >= static_cast<int>(p.inputs.size())
            ? std::string(EwName(p.instrs[static_cast<size_t>(o.reg) - p.inputs.size()].code))
            : "input";
    int bad = 0;
    for (size_t e = 0; e < (*got).size() && bad < 5; ++e) {
      if (!Close((*got)[e], (*want)[j][e], slack, rtol)) {
        ++bad;
        ADD_FAILURE() << "output " << j << " (" << what << ", reduce " << static_cast<int>(o.reduce)
                      << ") element " << e << ": got " << (*got)[e] << ", want " << (*want)[j][e];
      }
    }
  }
}

void CheckEw(const EwProgram& p, const std::vector<std::vector<float>>& inputs, double atol = 1e-5,
             double rtol = 2e-5) {
  absl::StatusOr<std::vector<std::vector<float>>> want = EvaluateEwProgram(p, inputs);
  ASSERT_TRUE(want.ok()) << want.status();
  CheckEwAgainst(p, inputs, &*want, atol, rtol);
}

std::vector<std::vector<float>> RandomInputs(const EwProgram& p, float lo, float hi, uint32_t seed) {
  std::vector<std::vector<float>> in;
  for (size_t k = 0; k < p.inputs.size(); ++k) {
    in.push_back(Random(Product(p.inputs[k]), lo, hi, seed + static_cast<uint32_t>(k)));
  }
  return in;
}

TEST_F(GpuTest, EveryCodeMatchesTheReference) {
  // Odd sizes: partial warps and blocks; r1 and r2 broadcast both ways.
  for (const std::vector<int64_t>& shape : {std::vector<int64_t>{37, 129}, std::vector<int64_t>{3, 5, 67}}) {
    const EwProgram p = internal::AllCodesProgram(shape);
    SCOPED_TRACE(p.Signature().substr(0, 40));
    CheckEw(p, RandomInputs(p, -3.0f, 3.0f, 1));
    CheckEw(p, RandomInputs(p, 0.2f, 3.0f, 7));  // log, sqrt, pow on their domains
  }
}

TEST_F(GpuTest, GradientPatterns) {
  EwProgram p;  // Max's gradient: dY where X is the max; Div's gradient for B
  p.shape = {33, 70};
  p.inputs = {{33, 70}, {70}, {33, 70}};  // x, y, dy
  p.instrs = {{EwCode::kMax, 0, 1},
              {EwCode::kEqualMask, 2, 0, 3},
              {EwCode::kDivGradB, 2, 3, 1},
              {EwCode::kGeluTanhGrad, 2, 0}};
  p.outputs = {{4}, {5}, {6}, {4, ReduceKind::kSum, {0}}};
  CheckEw(p, RandomInputs(p, -2.0f, 2.0f, 3));
}

TEST_F(GpuTest, BroadcastingAndReductions) {
  EwProgram p;
  p.shape = {3, 4, 5, 6};
  p.inputs = {{4, 1, 6}, {3, 1, 5, 1}, {6}};
  p.instrs = {{EwCode::kMul, 0, 1}, {EwCode::kAdd, 3, 2}, {EwCode::kTanh, 4}};
  p.outputs = {{5},
               {5, ReduceKind::kSum, {1, 3}},
               {5, ReduceKind::kMax, {0, 2}},
               {4, ReduceKind::kMean, {0, 1, 2, 3}},
               {4, ReduceKind::kMax, {3}}};
  CheckEw(p, RandomInputs(p, -2.0f, 2.0f, 11));

  EwProgram rows;           // column sums (lanes on different elements), row means
  rows.shape = {64, 1000};  // (warps straddle rows), max of all
  rows.inputs = {{64, 1000}, {1000}};
  rows.instrs = {{EwCode::kAdd, 0, 1}, {EwCode::kRelu, 2}};
  rows.outputs = {
      {3}, {3, ReduceKind::kSum, {0}}, {3, ReduceKind::kMean, {1}}, {2, ReduceKind::kMax, {0, 1}}};
  CheckEw(rows, RandomInputs(rows, -1.0f, 1.0f, 12));
}

TEST_F(GpuTest, FullReductionsLoopOverTheGrid) {
  EwProgram p;  // 4M points: several grid-stride trips on any GPU
  p.shape = {int64_t{1} << 22};
  p.inputs = {{int64_t{1} << 22}};
  p.instrs = {{EwCode::kSin, 0}};
  p.outputs = {{1, ReduceKind::kSum, {0}},
               {1, ReduceKind::kMean, {0}},
               {1, ReduceKind::kMax, {0}},
               {0, ReduceKind::kMax, {0}}};
  CheckEw(p, RandomInputs(p, -3.0f, 3.0f, 13));
}

TEST_F(GpuTest, MaxOfNegativesZerosAndNaN) {
  EwProgram p;
  p.shape = {4, 40};
  p.inputs = {{4, 40}};
  p.instrs = {{EwCode::kCopy, 0}};
  p.outputs = {{1, ReduceKind::kMax, {1}}};
  std::vector<float> x = Random(160, -9.0f, -1.0f, 14);                             // row 0: negatives only
  for (int i = 40; i < 80; ++i) x[static_cast<size_t>(i)] = i % 2 ? -0.0f : -1.0f;  // row 1: -0 is the max
  x[100] = std::nanf("");                                                           // row 2: NaN wins
  x[150] = -std::numeric_limits<float>::infinity();                                 // row 3: ignored
  CheckEw(p, {x});
}

TEST_F(GpuTest, RankZeroAndWideIndices) {
  EwProgram scalar;
  scalar.shape = {};
  scalar.inputs = {{}, {}};
  scalar.instrs = {{EwCode::kPow, 0, 1}};
  scalar.outputs = {{2}};
  CheckEw(scalar, {{2.0f}, {10.0f}});

  // 3 * 2^30 points (64-bit indices), no big buffers: broadcast inputs, a
  // max over the long axis.
  EwProgram wide;
  wide.shape = {3, int64_t{1} << 30};
  wide.inputs = {{3, 1}};
  wide.instrs = {{EwCode::kAffine, 0, -1, -1, 2.0f, 1.0f}};
  wide.outputs = {{1, ReduceKind::kMax, {1}}};
  const std::vector<std::vector<float>> want = {
      {3.0f, 11.0f, -3.0f}};  // the host reference would take minutes
  CheckEwAgainst(wide, {{1.0f, 5.0f, -2.0f}}, &want, 0, 0);
}

TEST_F(GpuTest, TimeEwKernel) {
  EwProgram p;
  p.shape = {256, 4096};
  p.inputs = {{256, 4096}, {4096}};
  p.instrs = {{EwCode::kAdd, 0, 1}, {EwCode::kGelu, 2}};
  p.outputs = {{3}, {3, ReduceKind::kSum, {0}}};
  const absl::StatusOr<double> s = TimeEwKernel(p, 20);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_GT(*s, 0.0);
  EXPECT_LT(*s, 1.0);
}

// ---- cuBLASLt ---------------------------------------------------------------

double GeluTanh(double x) {
  return 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}
double GeluTanhGrad(double x) {
  const double t = std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * 0.7978845608028654 * (1 + 3 * 0.044715 * x * x);
}

// Host operands of a spec, rounded to its type, and their device copies.
struct Operands {
  std::vector<float> a, b, c, bias;
  DeviceBuffer da, db, dc, dd, dbias, daux;
};

absl::StatusOr<Operands> MakeOperands(const LtGemmSpec& s, uint32_t seed) {
  Operands o;
  const int64_t elem = static_cast<int64_t>(LtDataTypeBytes(s.dtype));
  o.a = DeviceBuffer::RoundTo(Random(s.a_bytes() / elem, -1, 1, seed), s.dtype);
  o.b = DeviceBuffer::RoundTo(Random(s.b_bytes() / elem, -1, 1, seed + 1), s.dtype);
  o.c = DeviceBuffer::RoundTo(Random(s.c_bytes() / elem, -1, 1, seed + 2), s.dtype);
  o.bias = DeviceBuffer::RoundTo(Random(std::max(s.m, s.n), -1, 1, seed + 3), s.dtype);
  ASSIGN_OR_RETURN(o.da, DeviceBuffer::UploadAs(o.a, s.dtype));
  ASSIGN_OR_RETURN(o.db, DeviceBuffer::UploadAs(o.b, s.dtype));
  ASSIGN_OR_RETURN(o.dc, DeviceBuffer::UploadAs(o.c, s.dtype));
  ASSIGN_OR_RETURN(o.dd, DeviceBuffer::Zeros(static_cast<size_t>(s.c_bytes())));
  ASSIGN_OR_RETURN(o.dbias, DeviceBuffer::UploadAs(o.bias, s.dtype));
  ASSIGN_OR_RETURN(o.daux, DeviceBuffer::Zeros(static_cast<size_t>(s.aux_bytes())));
  return o;
}

// alpha op(A) op(B) + beta C, column-major m x n with ld m, in double.
std::vector<double> HostGemm(const LtGemmSpec& s, const Operands& o) {
  std::vector<double> d(static_cast<size_t>(s.m * s.n));
  const int64_t lda = s.lda_or_packed(), ldb = s.ldb_or_packed(), ldc = s.ldc_or_packed();
  for (int64_t j = 0; j < s.n; ++j) {
    for (int64_t i = 0; i < s.m; ++i) {
      double acc = 0;
      for (int64_t kk = 0; kk < s.k; ++kk) {
        const double a =
            s.trans_a ? o.a[static_cast<size_t>(kk + i * lda)] : o.a[static_cast<size_t>(i + kk * lda)];
        const double b =
            s.trans_b ? o.b[static_cast<size_t>(j + kk * ldb)] : o.b[static_cast<size_t>(kk + j * ldb)];
        acc += a * b;
      }
      d[static_cast<size_t>(i + j * s.m)] = s.alpha * acc + s.beta * o.c[static_cast<size_t>(i + j * ldc)];
    }
  }
  return d;
}

absl::Status RunGemm(LtGemm& lt, const LtGemmSpec& s, Operands& o) {
  ASSIGN_OR_RETURN(Stream stream, Stream::Create());
  const LtGemmArgs args{o.da.get(), o.db.get(), o.dc.get(), o.dd.get(), o.dbias.get(), o.daux.get()};
  RETURN_IF_ERROR(lt.Run(s, args, stream.get()));
  return stream.Sync();
}

// D (packed into ld m) as floats.
std::vector<float> DownloadD(const LtGemmSpec& s, const Operands& o) {
  absl::StatusOr<std::vector<float>> d =
      o.dd.DownloadAs(static_cast<size_t>(s.ldc_or_packed() * s.n), s.dtype);
  EXPECT_TRUE(d.ok()) << d.status();
  std::vector<float> out(static_cast<size_t>(s.m * s.n));
  for (int64_t j = 0; d.ok() && j < s.n; ++j) {
    for (int64_t i = 0; i < s.m; ++i) {
      out[static_cast<size_t>(i + j * s.m)] = (*d)[static_cast<size_t>(i + j * s.ldc_or_packed())];
    }
  }
  return out;
}

void ExpectClose(const std::vector<float>& got, const std::vector<double>& want, double tol,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t e = 0; e < got.size() && bad < 5; ++e) {
    if (!Close(got[e], want[e], tol, tol)) {
      ++bad;
      ADD_FAILURE() << what << " element " << e << ": got " << got[e] << ", want " << want[e];
    }
  }
}

class LtGemmGpuTest : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    absl::StatusOr<std::unique_ptr<LtGemm>> lt = LtGemm::Create();
    ASSERT_TRUE(lt.ok()) << lt.status();
    lt_ = *std::move(lt);
  }
  std::unique_ptr<LtGemm> lt_;
};

TEST_F(LtGemmGpuTest, ForwardEpilogues) {
  using E = LtEpilogue;
  for (E e : {E::kDefault, E::kRelu, E::kBias, E::kReluBias, E::kGelu, E::kGeluBias, E::kReluAux,
              E::kReluAuxBias, E::kGeluAux, E::kGeluAuxBias}) {
    for (int t = 0; t < 4; ++t) {
      LtGemmSpec s;
      s.m = 96, s.n = 72, s.k = 80;
      s.trans_a = t & 1, s.trans_b = t & 2;
      s.epilogue = e;
      s.alpha = 0.75f;
      s.beta = t == 3 ? 0.5f : 0.0f;       // a residual on one layout
      if (t == 2) s.lda = s.a_rows() + 8;  // padded leading dimensions on another
      if (t == 2) s.ldc = s.m + 4;
      const std::string what = absl::StrCat(std::string(LtEpilogueName(e)), " ", s.Key());
      absl::StatusOr<Operands> o = MakeOperands(s, 100 + t);
      ASSERT_TRUE(o.ok()) << o.status();
      const absl::Status st = RunGemm(*lt_, s, *o);
      ASSERT_TRUE(st.ok()) << what << ": " << st;
      std::vector<double> pre = HostGemm(s, *o);
      if (LtEpilogueReadsBias(e)) {
        for (int64_t j = 0; j < s.n; ++j) {
          for (int64_t i = 0; i < s.m; ++i)
            pre[static_cast<size_t>(i + j * s.m)] += o->bias[static_cast<size_t>(i)];
        }
      }
      const bool gelu = e == E::kGelu || e == E::kGeluBias || e == E::kGeluAux || e == E::kGeluAuxBias;
      const bool relu = e == E::kRelu || e == E::kReluBias || e == E::kReluAux || e == E::kReluAuxBias;
      std::vector<double> want = pre;
      for (double& v : want) v = gelu ? GeluTanh(v) : relu ? std::max(v, 0.0) : v;
      // GELU may be evaluated with fast hardware tanh: a looser tolerance.
      ExpectClose(DownloadD(s, *o), want, gelu ? 2e-3 : 1e-4, what);
      if (e == E::kGeluAux || e == E::kGeluAuxBias) {  // aux holds the GELU input
        absl::StatusOr<std::vector<float>> aux =
            o->daux.DownloadAs(static_cast<size_t>(s.aux_ld_or_default() * s.n), s.dtype);
        ASSERT_TRUE(aux.ok()) << aux.status();
        std::vector<float> packed(static_cast<size_t>(s.m * s.n));
        for (int64_t j = 0; j < s.n; ++j) {
          for (int64_t i = 0; i < s.m; ++i) {
            packed[static_cast<size_t>(i + j * s.m)] =
                (*aux)[static_cast<size_t>(i + j * s.aux_ld_or_default())];
          }
        }
        ExpectClose(packed, pre, 1e-4, what + " aux");
      }
    }
  }
}

// Forward with an *_AUX_BIAS epilogue, then the backward GEMM of the same
// m x n shape with DRELU/DGELU(_BGRAD) reading that aux. cuBLASLt need not
// have every gradient epilogue for F32 data (Unimplemented then skips that
// case, saying so); BF16, the type training runs them in, must work.
void CheckBackward(LtGemm& lt, LtEpilogue fwd, LtEpilogue bwd, LtDataType dtype) {
  const bool f32 = dtype == LtDataType::kF32;
  const std::string what = absl::StrCat(std::string(LtEpilogueName(fwd)), " -> ",
                                        std::string(LtEpilogueName(bwd)), f32 ? " f32" : " bf16");
  LtGemmSpec f;
  f.m = 136, f.n = 48, f.k = 64;
  f.epilogue = fwd;
  f.dtype = dtype;
  absl::StatusOr<Operands> fo = MakeOperands(f, 200);
  ASSERT_TRUE(fo.ok()) << fo.status();
  const absl::Status fst = RunGemm(lt, f, *fo);
  ASSERT_TRUE(fst.ok()) << what << ": " << fst;
  const std::vector<float> y = DownloadD(f, *fo);

  LtGemmSpec b = f;
  b.k = 40;
  b.trans_a = true;
  b.epilogue = bwd;
  absl::StatusOr<Operands> bo = MakeOperands(b, 300);
  ASSERT_TRUE(bo.ok()) << bo.status();
  bo->daux = std::move(fo->daux);  // the forward pass's aux: mask or GELU input
  const absl::Status bst = RunGemm(lt, b, *bo);
  if (f32 && absl::IsUnimplemented(bst)) {
    GTEST_SKIP() << "cuBLASLt on this GPU has no " << what << ": " << bst;
  }
  ASSERT_TRUE(bst.ok()) << what << ": " << bst;
  std::vector<double> want = HostGemm(b, *bo);
  if (LtEpilogueReluMask(bwd)) {
    // The mask the device wrote is "forward output > 0": taken from its own
    // output, so a pre-activation rounding to either side of 0 agrees.
    for (size_t e = 0; e < want.size(); ++e) want[e] = y[e] > 0 ? want[e] : 0.0;
  } else {
    absl::StatusOr<std::vector<float>> aux =
        bo->daux.DownloadAs(static_cast<size_t>(b.aux_ld_or_default() * b.n), b.dtype);
    ASSERT_TRUE(aux.ok()) << aux.status();
    for (int64_t j = 0; j < b.n; ++j) {
      for (int64_t i = 0; i < b.m; ++i) {
        want[static_cast<size_t>(i + j * b.m)] *=
            GeluTanhGrad((*aux)[static_cast<size_t>(i + j * b.aux_ld_or_default())]);
      }
    }
  }
  const double tol = !f32 ? 2e-2 : LtEpilogueReluMask(bwd) ? 1e-4 : 2e-3;
  ExpectClose(DownloadD(b, *bo), want, tol, what);
  if (LtEpilogueWritesBias(bwd)) {  // the row sums of D
    std::vector<double> bgrad(static_cast<size_t>(b.m), 0.0);
    for (int64_t j = 0; j < b.n; ++j) {
      for (int64_t i = 0; i < b.m; ++i)
        bgrad[static_cast<size_t>(i)] += want[static_cast<size_t>(i + j * b.m)];
    }
    absl::StatusOr<std::vector<float>> got = bo->dbias.DownloadAs(static_cast<size_t>(b.m), b.dtype);
    ASSERT_TRUE(got.ok()) << got.status();
    ExpectClose(*got, bgrad, tol * 10, what + " bias gradient");
  }
}

// One gradient epilogue and data type per test, so that an epilogue
// cuBLASLt lacks on this GPU skips alone, naming itself.
struct BackwardCase {
  LtEpilogue fwd, bwd;
  LtDataType dtype;
};

class LtGemmBackwardGpuTest : public LtGemmGpuTest,
                              public ::testing::WithParamInterface<BackwardCase> {};

TEST_P(LtGemmBackwardGpuTest, ReluAndGeluGradientEpilogues) {
  CheckBackward(*lt_, GetParam().fwd, GetParam().bwd, GetParam().dtype);
}

std::vector<BackwardCase> BackwardCases() {
  std::vector<BackwardCase> c;
  for (LtDataType t : {LtDataType::kF32, LtDataType::kBF16}) {
    c.push_back({LtEpilogue::kReluAuxBias, LtEpilogue::kDRelu, t});
    c.push_back({LtEpilogue::kReluAuxBias, LtEpilogue::kDReluBgrad, t});
    c.push_back({LtEpilogue::kGeluAuxBias, LtEpilogue::kDGelu, t});
    c.push_back({LtEpilogue::kGeluAuxBias, LtEpilogue::kDGeluBgrad, t});
  }
  return c;
}

INSTANTIATE_TEST_SUITE_P(Epilogues, LtGemmBackwardGpuTest, ::testing::ValuesIn(BackwardCases()),
                         [](const ::testing::TestParamInfo<BackwardCase>& i) {
                           return absl::StrCat(std::string(LtEpilogueName(i.param.bwd)), "_",
                                               i.param.dtype == LtDataType::kF32 ? "f32" : "bf16");
                         });

class LtGemmBiasGradGpuTest : public LtGemmGpuTest,
                              public ::testing::WithParamInterface<LtEpilogue> {};

INSTANTIATE_TEST_SUITE_P(Epilogues, LtGemmBiasGradGpuTest,
                         ::testing::Values(LtEpilogue::kBgradA, LtEpilogue::kBgradB),
                         [](const ::testing::TestParamInfo<LtEpilogue>& i) {
                           return std::string(LtEpilogueName(i.param));
                         });

TEST_P(LtGemmBiasGradGpuTest, BiasGradientOfAOrB) {
  // The weight-gradient GEMM of a Linear layer: op(A) = dY^T, op(B) = X.
  {
    const LtEpilogue e = GetParam();
    LtGemmSpec s;
    s.m = 64, s.n = 96, s.k = 128;
    s.trans_b = true;
    s.epilogue = e;
    absl::StatusOr<Operands> o = MakeOperands(s, 400);
    ASSERT_TRUE(o.ok()) << o.status();
    const absl::Status st = RunGemm(*lt_, s, *o);
    if (absl::IsUnimplemented(st)) {  // cuBLASLt's own limit on this GPU, not a braid error
      GTEST_SKIP() << "cuBLASLt on this GPU has no " << LtEpilogueName(e) << ": " << st;
    }
    ASSERT_TRUE(st.ok()) << st;
    ExpectClose(DownloadD(s, *o), HostGemm(s, *o), 1e-4, std::string(LtEpilogueName(e)));
    const bool of_a = e == LtEpilogue::kBgradA;
    std::vector<double> want(static_cast<size_t>(of_a ? s.m : s.n), 0.0);
    for (size_t r = 0; r < want.size(); ++r) {
      for (int64_t kk = 0; kk < s.k; ++kk) {
        const int64_t i = static_cast<int64_t>(r);
        want[r] +=
            of_a ? o->a[static_cast<size_t>(i + kk * s.lda_or_packed())]   // op(A)(i, kk), A not transposed
                 : o->b[static_cast<size_t>(i + kk * s.ldb_or_packed())];  // op(B)(kk, j) = B(j, kk)
      }
    }
    absl::StatusOr<std::vector<float>> got = o->dbias.DownloadAs(want.size(), s.dtype);
    ASSERT_TRUE(got.ok()) << got.status();
    ExpectClose(*got, want, 1e-4, absl::StrCat(std::string(LtEpilogueName(e)), " bias gradient"));
  }
}

TEST_F(LtGemmGpuTest, Bf16ReluBias) {
  LtGemmSpec s;
  s.m = 128, s.n = 64, s.k = 96;
  s.trans_a = true;
  s.epilogue = LtEpilogue::kReluBias;
  s.dtype = LtDataType::kBF16;
  absl::StatusOr<Operands> o = MakeOperands(s, 500);
  ASSERT_TRUE(o.ok()) << o.status();
  ASSERT_TRUE(RunGemm(*lt_, s, *o).ok());
  std::vector<double> want = HostGemm(s, *o);
  for (int64_t j = 0; j < s.n; ++j) {
    for (int64_t i = 0; i < s.m; ++i) {
      double& v = want[static_cast<size_t>(i + j * s.m)];
      v = std::max(v + o->bias[static_cast<size_t>(i)], 0.0);
    }
  }
  ExpectClose(DownloadD(s, *o), want, 2e-2, "bf16 RELU_BIAS");  // D rounded to 8 bits of mantissa
}

TEST_F(LtGemmGpuTest, TimeLtGemm) {
  LtGemmSpec s;
  s.m = 1024, s.n = 512, s.k = 768;
  s.epilogue = LtEpilogue::kGeluAuxBias;
  s.dtype = LtDataType::kBF16;
  absl::StatusOr<double> t = TimeLtGemm(s, 10);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_GT(*t, 0.0);
  s.epilogue = LtEpilogue::kDReluBgrad;
  t = TimeLtGemm(s, 10);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_GT(*t, 0.0);
}

}  // namespace
}  // namespace braid::kernels::cuda
