// The worker agent's --device choices in a build with the CUDA backend, on
// any machine: with a GPU "cuda" and "auto" name it, without one "cuda" is a
// configuration error and "auto" falls back to the CPU profiler.
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/cuda/cuda_device.h"
#include "worker/worker_agent.h"

namespace braid::worker {
namespace {

using ::testing::HasSubstr;

TEST(WorkerAgentCudaTest, DeviceKindsFollowTheMachine) {
  absl::StatusOr<CudaDeviceInfo> gpu = FindCudaDevice(0);
  absl::StatusOr<std::string> cuda = DeviceKindFor("cuda");
  absl::StatusOr<std::string> cuda0 = DeviceKindFor("cuda:0");
  absl::StatusOr<std::string> any = DeviceKindFor("auto");
  if (gpu.ok()) {
    ASSERT_TRUE(cuda.ok()) << cuda.status();
    EXPECT_EQ(*cuda, "cuda:" + gpu->name);
    EXPECT_EQ(*cuda0, *cuda);
    EXPECT_EQ(*any, *cuda);
  } else {
    EXPECT_EQ(cuda.status().code(), absl::StatusCode::kInvalidArgument);
    // The CUDA runtime's reason reaches the operator.
    EXPECT_THAT(std::string(cuda.status().message()),
                HasSubstr("--device: 'cuda': cuda: no usable device: cudaError"));
    EXPECT_EQ(cuda0.status().code(), absl::StatusCode::kInvalidArgument);
    ASSERT_TRUE(any.ok()) << any.status();
    EXPECT_EQ(*any, CpuDeviceKind());
  }
}

TEST(WorkerAgentCudaTest, BadDeviceValues) {
  absl::StatusOr<std::string> bad = DeviceKindFor("cuda:x");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("ordinal after 'cuda:' is not a number"));
  absl::StatusOr<std::string> far = DeviceKindFor("cuda:4096");
  EXPECT_EQ(far.status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::string> tpu = DeviceKindFor("tpu");
  EXPECT_EQ(tpu.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(tpu.status().message()), HasSubstr("supported: cpu, cuda, cuda:N, auto"));
}

}  // namespace
}  // namespace braid::worker
