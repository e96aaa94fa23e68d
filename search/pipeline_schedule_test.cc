#include "search/pipeline_schedule.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace braid::search {
namespace {

// Equal stages, no transfers: (m + p - 1) * (f + b) for both orders, and
// 1F1B holds at most p - s micro-batches where GPipe holds all m.
TEST(PipelineScheduleTest, EqualStagesMatchTheClosedFormAndBoundMemory) {
  const std::vector<PipelineStage> st(4, {.forward_s = 1, .backward_s = 2, .activation_bytes = 10});
  for (PipelineOrder order : {PipelineOrder::k1F1B, PipelineOrder::kGPipe}) {
    absl::StatusOr<PipelineTiming> t = SimulatePipeline(st, 8, 0, order);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_DOUBLE_EQ(t->iteration_s, (8 + 4 - 1) * 3.0);
    EXPECT_DOUBLE_EQ(t->busy_s, 8 * 3.0);
    EXPECT_DOUBLE_EQ(t->bubble_fraction, 1 - 24.0 / 33.0);
  }
  absl::StatusOr<PipelineTiming> f1b1 = SimulatePipeline(st, 8, 0);
  EXPECT_THAT(f1b1->peak_in_flight, ::testing::ElementsAre(4, 3, 2, 1));
  EXPECT_THAT(f1b1->peak_activation_bytes, ::testing::ElementsAre(40, 30, 20, 10));
  absl::StatusOr<PipelineTiming> gpipe = SimulatePipeline(st, 8, 0, PipelineOrder::kGPipe);
  EXPECT_THAT(gpipe->peak_in_flight, ::testing::ElementsAre(8, 8, 8, 8));
}

TEST(PipelineScheduleTest, OneStageIsSequentialAndFewMicroBatchesLimitWarmUp) {
  absl::StatusOr<PipelineTiming> one = SimulatePipeline({{.forward_s = 1, .backward_s = 2}}, 5, 0.5);
  ASSERT_TRUE(one.ok());
  EXPECT_DOUBLE_EQ(one->iteration_s, 15);  // no neighbour, no transfer
  EXPECT_DOUBLE_EQ(one->bubble_fraction, 0);
  // 4 stages, 2 micro-batches: warm-up is capped at m.
  const std::vector<PipelineStage> st(4, {.forward_s = 1, .backward_s = 1});
  absl::StatusOr<PipelineTiming> t = SimulatePipeline(st, 2, 0);
  ASSERT_TRUE(t.ok());
  EXPECT_DOUBLE_EQ(t->iteration_s, (2 + 4 - 1) * 2.0);
  EXPECT_THAT(t->peak_in_flight, ::testing::ElementsAre(2, 2, 2, 1));
}

// Transfers on the critical path: 2 stages, 1 micro-batch: F0, send, F1, B1,
// send, B0.
TEST(PipelineScheduleTest, TransfersAndTheSlowestStage) {
  absl::StatusOr<PipelineTiming> t =
      SimulatePipeline({{.forward_s = 1, .backward_s = 2}, {.forward_s = 3, .backward_s = 4}}, 1, 0.5);
  ASSERT_TRUE(t.ok());
  EXPECT_DOUBLE_EQ(t->iteration_s, 1 + 0.5 + 3 + 4 + 0.5 + 2);
  // Many micro-batches: the slow stage sets the pace, m * (3 + 4) plus the
  // fill and drain through the fast one.
  absl::StatusOr<PipelineTiming> many =
      SimulatePipeline({{.forward_s = 1, .backward_s = 2}, {.forward_s = 3, .backward_s = 4}}, 16, 0);
  ASSERT_TRUE(many.ok());
  EXPECT_DOUBLE_EQ(many->busy_s, 16 * 7.0);
  EXPECT_DOUBLE_EQ(many->iteration_s, 1 + 16 * 7.0 + 2);
}

TEST(PipelineScheduleTest, BadInputIsRefused) {
  EXPECT_EQ(SimulatePipeline({}, 4, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SimulatePipeline({{}}, 0, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SimulatePipeline({{.forward_s = -1}}, 1, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace braid::search
