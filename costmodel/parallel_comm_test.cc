#include "costmodel/parallel_comm.h"

#include <vector>

#include "costmodel/internal/test_clusters.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace braid::costmodel {
namespace {

using graph::ParallelOp;
using graph::ParallelTensorShape;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

using testing::TwoByFour;  // costmodel/internal/test_clusters.h

ParallelTensorShape P(std::string_view text) {
  absl::StatusOr<ParallelTensorShape> s = graph::ParseParallelShape(text);
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

std::vector<CollectiveStep> Comm(std::vector<ParallelOp> ops, std::string_view shape) {
  absl::StatusOr<std::vector<CollectiveStep>> steps = ParallelOpsComm(ops, P(shape));
  EXPECT_TRUE(steps.ok()) << steps.status();
  return steps.ok() ? *steps : std::vector<CollectiveStep>{};
}

constexpr int64_t kMiB = 1 << 20;

TEST(ParallelCommTest, ReduceThenReplicateIsOneAllReduceOfThePiece) {
  // 1024x256 f32 = 1 MiB per replica, 4 replicas (data parallel gradients).
  std::vector<CollectiveStep> steps =
      Comm({ParallelOp::Reduce(4), ParallelOp::Replicate(4)}, "f32[1024,256]x4");
  EXPECT_THAT(steps, ElementsAre(CollectiveStep{Collective::kAllReduce, kMiB, 4, 1, 0, 2}));
  // Pieces of a partitioned tensor: 2 groups of 4 replicas, 512 KiB pieces.
  steps = Comm({ParallelOp::Reduce(4), ParallelOp::Replicate(4)}, "f32[1024/2,256]x4");
  EXPECT_THAT(steps, ElementsAre(CollectiveStep{Collective::kAllReduce, kMiB / 2, 4, 2, 0, 2}));
  EXPECT_EQ(CollectiveStepString(steps[0]), "AllReduce(524288 B x 4 ranks x 2 groups; ops 0-1)");
}

TEST(ParallelCommTest, ReduceThenPartitionIsOneReduceScatter) {
  // Input buffer: the 512 KiB piece; any dim may be partitioned.
  for (int dim : {0, 1}) {
    EXPECT_THAT(Comm({ParallelOp::Reduce(2), ParallelOp::Partition(dim, 2)}, "f32[1024,256/2]x2"),
                ElementsAre(CollectiveStep{Collective::kReduceScatter, kMiB / 2, 2, 2, 0, 2}))
        << dim;
  }
}

TEST(ParallelCommTest, CombineGathersAndFusesWithReplicateOrPartition) {
  // 16x32 f32 pieces = 2 KiB; the gathered buffer is 8 KiB.
  EXPECT_THAT(Comm({ParallelOp::Combine(0, 4)}, "f32[64/4,32]"),
              ElementsAre(CollectiveStep{Collective::kAllGather, 8192, 4, 1, 0, 1}));
  EXPECT_THAT(Comm({ParallelOp::Combine(0, 4), ParallelOp::Replicate(4)}, "f32[64/4,32]"),
              ElementsAre(CollectiveStep{Collective::kAllGather, 8192, 4, 1, 0, 2}));
  // Resharding from dim 0 to dim 1 is an AllToAll of the 2 KiB piece.
  EXPECT_THAT(Comm({ParallelOp::Combine(0, 4), ParallelOp::Partition(1, 4)}, "f32[64/4,32]"),
              ElementsAre(CollectiveStep{Collective::kAllToAll, 2048, 4, 1, 0, 2}));
  // Combine and Partition of the same dim and degree cancel, either way round.
  EXPECT_THAT(Comm({ParallelOp::Combine(0, 4), ParallelOp::Partition(0, 4)}, "f32[64/4,32]"),
              ElementsAre());
  EXPECT_THAT(Comm({ParallelOp::Partition(1, 2), ParallelOp::Combine(1, 2)}, "f32[64/4,32]"),
              ElementsAre());
}

TEST(ParallelCommTest, SingleOps) {
  EXPECT_THAT(Comm({ParallelOp::Replicate(8)}, "f32[1024]"),
              ElementsAre(CollectiveStep{Collective::kBroadcast, 4096, 8, 1, 0, 1}));
  // Each of the 2 pieces roots its own broadcast.
  EXPECT_THAT(Comm({ParallelOp::Replicate(4)}, "f32[1024/2]"),
              ElementsAre(CollectiveStep{Collective::kBroadcast, 2048, 4, 2, 0, 1}));
  EXPECT_THAT(Comm({ParallelOp::Reduce(2)}, "f16[1024]x4"),
              ElementsAre(CollectiveStep{Collective::kAllReduce, 2048, 2, 2, 0, 1}));
  EXPECT_THAT(Comm({ParallelOp::Partition(0, 4)}, "f32[1024]"), ElementsAre());
  EXPECT_THAT(Comm({ParallelOp::Pipeline(0, 4), ParallelOp::Batch(0, 4)}, "f32[1024/2]"),
              ElementsAre());
}

TEST(ParallelCommTest, DegreesMustMatchToFuse) {
  EXPECT_THAT(Comm({ParallelOp::Reduce(2), ParallelOp::Replicate(4)}, "f32[256]x4"),
              ElementsAre(CollectiveStep{Collective::kAllReduce, 1024, 2, 2, 0, 1},
                          CollectiveStep{Collective::kBroadcast, 1024, 4, 2, 1, 1}));
  EXPECT_THAT(Comm({ParallelOp::Reduce(2), ParallelOp::Partition(0, 4)}, "f32[256]x4"),
              ElementsAre(CollectiveStep{Collective::kAllReduce, 1024, 2, 2, 0, 1}));
}

TEST(ParallelCommTest, FusedPairsAreFoundInsideLongerSequences) {
  // Partition (local), Reduce+Replicate (AllReduce of the 256 B piece), Pipeline.
  std::vector<CollectiveStep> steps =
      Comm({ParallelOp::Partition(0, 2), ParallelOp::Reduce(2), ParallelOp::Replicate(2),
            ParallelOp::Pipeline(0, 4)},
           "f32[128]x2");
  EXPECT_THAT(steps, ElementsAre(CollectiveStep{Collective::kAllReduce, 256, 2, 2, 1, 2}));
}

TEST(ParallelCommTest, InvalidSequencesAreErrors) {
  std::vector<ParallelOp> ops = {ParallelOp::Reduce(2), ParallelOp::Replicate(2)};
  absl::StatusOr<std::vector<CollectiveStep>> steps = ParallelOpsComm(ops, P("f32[8]x3"));
  EXPECT_EQ(steps.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(steps.status().message(),
              HasSubstr("parallel op #0: Reduce(2) on f32[8]x3: 2 does not divide replica degree 3"));
  EXPECT_EQ(ParallelOpsCommTime(CommModel(TwoByFour()), ops, P("f32[8]x3")).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ParallelCommTest, TimesByHand) {
  const CommModel m(TwoByFour());
  std::vector<ParallelOp> fused = {ParallelOp::Reduce(4), ParallelOp::Replicate(4)};
  // Ring AllReduce inside a node: 2*(3/4) * 1 MiB / 100 GB/s + 6 * 1 us.
  EXPECT_NEAR(*ParallelOpsCommTime(m, fused, P("f32[1024,256]x4")), 2.172864e-5, 1e-12);
  // Unfused, the same two ops would be an AllReduce and a Broadcast
  // (1 MiB / 100 GB/s + 3 us): the fusion saves the broadcast.
  std::vector<CollectiveStep> unfused = {{Collective::kAllReduce, kMiB, 4, 1, 0, 1},
                                         {Collective::kBroadcast, kMiB, 4, 1, 1, 1}};
  EXPECT_NEAR(CollectiveStepsTime(m, unfused), 2.172864e-5 + 1.348576e-5, 1e-12);
  // ReduceScatter of 512 KiB over 2 ranks: (1/2) * 512 KiB / 100 GB/s + 1 us.
  std::vector<ParallelOp> rs = {ParallelOp::Reduce(2), ParallelOp::Partition(0, 2)};
  EXPECT_NEAR(*ParallelOpsCommTime(m, rs, P("f32[1024,256/2]x2")), 3.62144e-6, 1e-12);
  // 8 ranks span both nodes: hierarchical, 2*(3/4)/100e9 + 2*(1/2)/10e9 per
  // byte on 4 KiB, latency 2*3*1us + 2*1*5us.
  std::vector<ParallelOp> dp8 = {ParallelOp::Reduce(8), ParallelOp::Replicate(8)};
  EXPECT_NEAR(*ParallelOpsCommTime(m, dp8, P("f32[1024]x8")), 1.647104e-5, 1e-12);
  // No collective, no time.
  std::vector<ParallelOp> local = {ParallelOp::Partition(0, 8)};
  EXPECT_EQ(*ParallelOpsCommTime(m, local, P("f32[1024]")), 0.0);
}

}  // namespace
}  // namespace braid::costmodel
