#include "worker/cpu_profiler.h"

#include <ATen/Parallel.h>

#include <filesystem>
#include <map>
#include <string>

#include "gmock/gmock.h"
#include "graph/text_format.h"
#include "gtest/gtest.h"

namespace braid::worker {
namespace {

using ::testing::HasSubstr;

// Small shapes and few repetitions keep the whole binary to a few seconds.
ProfileOptions Quick() {
  ProfileOptions o;
  o.warmup = 1;
  o.repetitions = 3;
  o.min_sample_s = 50e-6;
  return o;
}

constexpr char kTiny[] = R"(graph "tiny"
tensor x f32[2,3,8,8] input
tensor w f32[4,3,3,3] parameter
tensor b f32[4] parameter
tensor c f32[2,4,8,8] activation
tensor r f32[2,4,8,8] activation
tensor dc f32[2,4,8,8] input
tensor w.grad f32[4,3,3,3] gradient of=w
tensor a f32[16,32] input
tensor m f32[32,8] parameter
tensor mm f32[16,8] activation
tensor q f32[16,8] activation
op conv Conv (x, w, b) -> (c) {pads=[1,1,1,1], strides=[1,1]}
op relu Relu (c) -> (r)
op dconv_filter ConvGradFilter (x, dc) -> (w.grad) {pads=[1,1,1,1], strides=[1,1]} phase=backward
op matmul MatMul (a, m) -> (mm)
op wat FrobnicateGrad (mm) -> (q)
)";

TEST(CpuProfilerTest, MeasuresPositiveTimesOnOneThread) {
  auto g = graph::ParseText(kTiny);
  ASSERT_TRUE(g.ok()) << g.status();
  CpuProfiler profiler(Quick());
  EXPECT_EQ(at::get_num_threads(), 1);
  for (graph::OpId id : {0, 1, 2, 3}) {
    absl::StatusOr<OpProfile> p = profiler.ProfileOp(*g, id);
    ASSERT_TRUE(p.ok()) << g->op(id).type << ": " << p.status();
    EXPECT_GT(p->sample.median_s, 0) << g->op(id).type;
    EXPECT_GE(p->sample.spread_s, 0) << g->op(id).type;
    EXPECT_EQ(p->sample.repetitions, 3) << g->op(id).type;
  }
  EXPECT_EQ(profiler.ProfileOp(*g, 0)->aten, "at::convolution");
  EXPECT_EQ(profiler.ProfileOp(*g, 2)->aten, "at::convolution_backward(mask=weight)");
  EXPECT_EQ(profiler.ProfileOp(*g, 3)->aten, "at::matmul");
}

TEST(CpuProfilerTest, UnknownTypeIsUnimplementedNamingIt) {
  auto g = graph::ParseText(kTiny);
  ASSERT_TRUE(g.ok());
  absl::StatusOr<OpProfile> p = CpuProfiler(Quick()).ProfileOp(*g, 4);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("FrobnicateGrad"));
  EXPECT_FALSE(CpuProfiler::Supports("FrobnicateGrad"));
  EXPECT_TRUE(CpuProfiler::Supports("ConvGradData"));
}

TEST(CpuProfilerTest, ShapeDisagreementIsInvalidArgument) {
  // Without pads the convolution gives [2,4,6,6], not the declared [2,4,8,8].
  auto g = graph::ParseText(R"(graph "bad"
tensor x f32[2,3,8,8] input
tensor w f32[4,3,3,3] parameter
tensor c f32[2,4,8,8] activation
op conv Conv (x, w) -> (c)
)");
  ASSERT_TRUE(g.ok());
  absl::StatusOr<OpProfile> p = CpuProfiler(Quick()).ProfileOp(*g, 0);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(p.status().message()),
              HasSubstr("LibTorch computes [2,4,6,6] but the graph's output 'c' is [2,4,8,8]"));
}

// One op of every mapped family on consistent shapes: each must run, match
// the graph's output shape and take a positive time.
constexpr char kCoverage[] = R"(graph "coverage"
tensor x f32[2,4,8,8] input
tensor dx f32[2,4,8,8] input
tensor s f32[4] parameter
tensor sb f32[4] parameter
tensor smean f32[4] constant
tensor svar f32[4] constant
tensor bn f32[2,4,8,8] activation
tensor dbn f32[2,4,8,8] activation
tensor mp f32[2,4,4,4] activation
tensor ap f32[2,4,4,4] activation
tensor gap f32[2,4,1,1] activation
tensor dp4 f32[2,4,4,4] input
tensor dmp f32[2,4,8,8] activation
tensor dap f32[2,4,8,8] activation
tensor dgap1 f32[2,4,1,1] input
tensor dgap f32[2,4,8,8] activation
tensor wd f32[4,4,3,3] parameter
tensor dcd f32[2,4,8,8] activation
tensor mpa f32[2,4,4,4] activation
tensor a f32[16,32] input
tensor a2 f32[16,32] input
tensor da f32[16,32] input
tensor lnw f32[32] parameter
tensor lnb f32[32] parameter
tensor ln f32[16,32] activation
tensor dln f32[16,32] activation
tensor sm f32[16,32] activation
tensor dsm f32[16,32] activation
tensor emb f32[100,32] parameter
tensor ids i64[4,5] input
tensor e f32[4,5,32] activation
tensor de f32[4,5,32] input
tensor emb.grad f32[100,32] gradient of=emb
tensor sx f32[5,2,8] input
tensor lw f32[1,64,8] parameter
tensor lr f32[1,64,16] parameter
tensor lb f32[1,128] parameter
tensor ly f32[5,1,2,16] activation
tensor dly f32[5,1,2,16] input
tensor dsx f32[5,2,8] activation
tensor at f32[32,16] activation
tensor cat f32[32,32] activation
tensor ra f32[512] activation
tensor rmean f32[16,1] activation
tensor rsum f32[32] activation
tensor drsum f32[16,32] activation
tensor drop f32[16,32] activation
tensor ddrop f32[16,32] activation
tensor logits f32[16,10] input
tensor labels i64[16] input
tensor loss f32[] activation
tensor dloss f32[] input
tensor dlogits f32[16,10] activation
tensor gw f32[32,8] parameter
tensor gb f32[8] parameter
tensor gm f32[16,8] activation
tensor dgm f32[16,8] input
tensor gw.grad f32[32,8] gradient of=gw
tensor add f32[16,32] activation
tensor mul f32[16,32] activation
tensor gelu f32[16,32] activation
tensor sig f32[16,32] activation
tensor tanh f32[16,32] activation
tensor drelu f32[16,32] activation
tensor dgelu f32[16,32] activation
tensor dsig f32[16,32] activation
tensor dtanh f32[16,32] activation
tensor mom f32[32,8] optimizer_state
tensor m1 f32[32,8] optimizer_state
tensor v1 f32[32,8] optimizer_state
tensor gw2 f32[32,8] activation
tensor gw3 f32[32,8] activation
op bn BatchNormalization (x, s, sb, smean, svar) -> (bn)
op bn_grad BatchNormalizationGrad (dx, x, s) -> (dbn) phase=backward
op maxpool MaxPool (x) -> (mp) {kernel_shape=[2,2], strides=[2,2]}
op avgpool AveragePool (x) -> (ap) {kernel_shape=[2,2], strides=[2,2]}
op gap GlobalAveragePool (x) -> (gap)
op maxpool_grad MaxPoolGrad (dp4, x) -> (dmp) {kernel_shape=[2,2], strides=[2,2]} phase=backward
op avgpool_grad AveragePoolGrad (dp4) -> (dap) {kernel_shape=[2,2], strides=[2,2]} phase=backward
op gap_grad GlobalAveragePoolGrad (dgap1) -> (dgap) phase=backward
op conv_grad_data ConvGradData (dx, wd) -> (dcd) {pads=[1,1,1,1]} phase=backward
op maxpool_asym MaxPool (x) -> (mpa) {kernel_shape=[3,3], strides=[2,2], pads=[0,0,1,1]}
op ln LayerNormalization (a, lnw, lnb) -> (ln) {axis=-1}
op ln_grad LayerNormalizationGrad (da, a, lnw) -> (dln) {axis=-1} phase=backward
op softmax Softmax (a) -> (sm) {axis=-1}
op softmax_grad SoftmaxGrad (da, sm) -> (dsm) {axis=-1} phase=backward
op gather Gather (emb, ids) -> (e)
op gather_grad GatherGrad (de, ids) -> (emb.grad) phase=backward
op lstm LSTM (sx, lw, lr, lb) -> (ly) {hidden_size=16}
op lstm_grad LSTMGrad (sx, lw, lr, lb, dly) -> (dsx) {hidden_size=16} phase=backward
op transpose Transpose (a) -> (at) {perm=[1,0]}
op concat Concat (a, a2) -> (cat) {axis=0}
op reshape Reshape (a) -> (ra)
op reduce_mean ReduceMean (a) -> (rmean) {axes=[1]}
op reduce_sum ReduceSum (a) -> (rsum) {axes=[0], keepdims=0}
op reduce_sum_grad ReduceSumGrad (rsum) -> (drsum) {axes=[0], keepdims=0} phase=backward
op dropout Dropout (a) -> (drop) {ratio=0.1}
op dropout_grad DropoutGrad (da) -> (ddrop) {ratio=0.1} phase=backward
op loss SoftmaxCrossEntropyLoss (logits, labels) -> (loss)
op loss_grad SoftmaxCrossEntropyLossGrad (dloss, logits, labels) -> (dlogits) phase=backward
op gemm Gemm (a, gw, gb) -> (gm)
op matmul_dw MatMul (a, dgm) -> (gw.grad) {transA=1} phase=backward
op add Add (a, a2) -> (add)
op mul Mul (a, a2) -> (mul)
op gelu Gelu (a) -> (gelu)
op sigmoid Sigmoid (a) -> (sig)
op tanh Tanh (a) -> (tanh)
op relu_grad ReluGrad (da, a) -> (drelu) phase=backward
op gelu_grad GeluGrad (da, a) -> (dgelu) phase=backward
op sigmoid_grad SigmoidGrad (da, sig) -> (dsig) phase=backward
op tanh_grad TanhGrad (da, tanh) -> (dtanh) phase=backward
op sgd SgdMomentumUpdate (gw, gw.grad, mom) -> (gw2) {lr=0.1, momentum=0.9} phase=update
op adam AdamUpdate (gw, gw.grad, m1, v1) -> (gw3) {lr=0.001} phase=update
)";

// The ATen call that times each op of kCoverage: the family's own kernel,
// not a stand-in.
const std::map<std::string, std::string>& CoverageCalls() {
  static const auto* calls = new std::map<std::string, std::string>{
      {"bn", "at::native_batch_norm(training=true)"},
      {"bn_grad", "at::native_batch_norm_backward"},
      {"maxpool", "at::max_pool2d_with_indices"},
      {"avgpool", "at::avg_pool2d"},
      {"gap", "at::mean"},
      {"maxpool_grad", "at::max_pool2d_with_indices_backward"},
      {"avgpool_grad", "at::avg_pool2d_backward"},
      {"gap_grad", "at::expand + at::div"},
      {"conv_grad_data", "at::convolution_backward(mask=input)"},
      {"maxpool_asym", "at::max_pool2d_with_indices"},
      {"ln", "at::native_layer_norm"},
      {"ln_grad", "at::native_layer_norm_backward"},
      {"softmax", "at::_softmax"},
      {"softmax_grad", "at::_softmax_backward_data"},
      {"gather", "at::embedding"},
      {"gather_grad", "at::embedding_dense_backward"},
      {"lstm", "at::lstm"},
      {"lstm_grad", "at::lstm + torch::autograd::grad"},
      {"transpose", "at::permute + contiguous"},
      {"concat", "at::cat"},
      {"reshape", "at::reshape"},
      {"reduce_mean", "at::mean"},
      {"reduce_sum", "at::sum"},
      {"reduce_sum_grad", "at::expand + contiguous"},
      {"dropout", "at::native_dropout(train=true)"},
      {"dropout_grad", "at::native_dropout_backward"},
      {"loss", "at::cross_entropy_loss"},
      {"loss_grad", "at::nll_loss_backward + at::_log_softmax_backward_data"},
      {"gemm", "at::addmm"},
      {"matmul_dw", "at::matmul"},
      {"add", "at::add"},
      {"mul", "at::mul"},
      {"gelu", "at::gelu"},
      {"sigmoid", "at::sigmoid"},
      {"tanh", "at::tanh"},
      {"relu_grad", "at::threshold_backward"},
      {"gelu_grad", "at::gelu_backward"},
      {"sigmoid_grad", "at::sigmoid_backward"},
      {"tanh_grad", "at::tanh_backward"},
      {"sgd", "mul_ + add_ + add_ (torch.optim.SGD step)"},
      {"adam", "lerp_ + mul_ + addcmul_ + sqrt + div + add_ + addcdiv_ (torch.optim.Adam step)"},
  };
  return *calls;
}

TEST(CpuProfilerTest, EveryMappedFamilyRunsWithTheGraphsShapes) {
  auto g = graph::ParseText(kCoverage);
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_EQ(CoverageCalls().size(), static_cast<size_t>(g->num_ops()));
  CpuProfiler profiler(Quick());
  for (graph::OpId id = 0; id < g->num_ops(); ++id) {
    const std::string& name = g->op(id).name;
    absl::StatusOr<OpProfile> p = profiler.ProfileOp(*g, id);
    ASSERT_TRUE(p.ok()) << name << ": " << p.status();
    EXPECT_GT(p->sample.median_s, 0) << name;
    ASSERT_TRUE(CoverageCalls().contains(name)) << name;
    EXPECT_EQ(p->aten, CoverageCalls().at(name)) << name;
  }
}

class ProfileGraphTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = std::filesystem::path(::testing::TempDir()) / "profile_graph_test.db";
    std::filesystem::remove(path_);
    std::filesystem::remove(path_.string() + "-wal");
    std::filesystem::remove(path_.string() + "-shm");
  }
  std::filesystem::path path_;
};

TEST_F(ProfileGraphTest, ProfilesDistinctKeysOnceAndSkipsStoredOnes) {
  auto g = graph::ParseText(R"(graph "g"
tensor x f32[8,16] input
tensor y1 f32[8,16] activation
tensor y2 f32[8,16] activation
tensor y3 f32[8,32] activation
tensor y4 f32[8,32] activation
tensor y5 f32[8,32] activation
tensor y6 f32[8,32] activation
tensor w f32[16,32] parameter
op relu1 Relu (x) -> (y1)
op relu2 Relu (y1) -> (y2)
op mm MatMul (y2, w) -> (y3)
op relu3 Relu (y3) -> (y4)
op odd Frobnicate (y4) -> (y5)
op ar AllReduce (y4) -> (y6) {group_size=2} phase=comm
)");
  ASSERT_TRUE(g.ok()) << g.status();
  auto store = costmodel::ProfileStore::Open(path_.string());
  ASSERT_TRUE(store.ok());
  absl::StatusOr<ProfileGraphReport> r = ProfileGraph(*g, **store, Quick());
  ASSERT_TRUE(r.ok()) << r.status();
  // relu1 and relu2 share a signature; relu3 has another shape.
  EXPECT_EQ(r->profiled, 3);
  EXPECT_EQ(r->skipped, 0);
  EXPECT_EQ(r->unsupported, 1);
  EXPECT_EQ(r->failed, 0);
  EXPECT_EQ(r->communication, 1);
  ASSERT_EQ(r->errors.size(), 1u);
  EXPECT_THAT(r->errors[0], HasSubstr("Frobnicate"));
  EXPECT_EQ((*store)->Generation(), 3);
  auto relu = (*store)->Get({CpuDeviceKind(), "Relu", costmodel::OpSignature(*g, 0)});
  ASSERT_TRUE(relu.has_value());
  EXPECT_GT(relu->median_s, 0);
  EXPECT_EQ(relu->repetitions, 3);

  absl::StatusOr<ProfileGraphReport> again = ProfileGraph(*g, **store, Quick());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->profiled, 0);
  EXPECT_EQ(again->skipped, 3);
  EXPECT_EQ(again->unsupported, 1);
  EXPECT_EQ((*store)->Generation(), 3);
}

TEST(CpuBackendInfoTest, UsesOpenBlasOnOneThread) {
  CpuProfiler profiler;
  std::string info = CpuBackendInfo();
  EXPECT_THAT(info, HasSubstr("threads=1"));
  // Debian's LibTorch falls back to the reference BLAS without
  // libopenblas0-pthread; the profile would then be ~40x too slow.
  EXPECT_THAT(info, HasSubstr("OpenBLAS"));
  EXPECT_THAT(info, HasSubstr("openblas_threads=1"));
}

}  // namespace
}  // namespace braid::worker
