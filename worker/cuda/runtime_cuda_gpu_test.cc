// The runtime on a GPU: world-1 training of zoo:mlp@sample and the tests/data
// GPT decoder on the CUDA backend (every op on the GPU) against golden
// CPU-runtime runs of the same programs (braid-runtime-golden), and a
// one-rank NCCL communicator. Skips without a CUDA device.
//
// Golden files: $BRAID_RUNTIME_GOLDEN_DIR (the GPU kit's data/runtime), else
// the build's tests/runtime_golden.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <numeric>

#include "absl/strings/str_join.h"
#include "worker/cuda/cuda_backend.h"
#include "worker/cuda/cuda_device.h"
#include "worker/runtime/golden.h"
#include "worker/runtime/interpreter.h"

namespace braid::runtime {
namespace {

std::filesystem::path GoldenDir() {
  if (const char* d = std::getenv("BRAID_RUNTIME_GOLDEN_DIR"); d != nullptr && *d != '\0') return d;
  return BRAID_RUNTIME_GOLDEN_DIR;
}

class RuntimeCudaGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<int> n = worker::CudaDeviceCount();
    if (!n.ok() || *n < 1) GTEST_SKIP() << "no CUDA device: " << (n.ok() ? "0 devices" : n.status().ToString());
    dir_ = std::filesystem::temp_directory_path() /
           ("braid-runtime-cuda-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }

  // Returns the backend's counts of fusion groups run fused and op by op.
  std::pair<int, int> TrainAgainstGolden(const std::string& file) {
    std::pair<int, int> groups{0, 0};
    TrainGolden(file, &groups);
    return groups;
  }

  void TrainGolden(const std::string& file, std::pair<int, int>* groups) {
    std::ifstream in(GoldenDir() / file);
    ASSERT_TRUE(in.good()) << "no golden file " << (GoldenDir() / file);
    const nlohmann::json golden = nlohmann::json::parse(in);
    absl::StatusOr<graph::Program> p = GoldenProgram(golden);
    ASSERT_TRUE(p.ok()) << p.status();
    absl::StatusOr<std::unique_ptr<CudaBackend>> b =
        CudaBackend::Create({.device = 0, .dropout = golden.value("dropout", false)});
    ASSERT_TRUE(b.ok()) << b.status();
    absl::StatusOr<std::unique_ptr<Communicator>> comm =
        MakeNcclCommunicator(*p, 0, **b, dir_.string(), 60);
    ASSERT_TRUE(comm.ok()) << comm.status();
    Interpreter it(*p, 0, **b, **comm);
    ASSERT_TRUE(it.Init().ok());
    std::vector<double> losses, seconds;
    std::vector<nlohmann::json> step0;
    absl::Status observed;
    StepOptions first;
    first.observe = [&](graph::TensorId t, const Value& v) {
      absl::StatusOr<HostTensor> h = (*b)->ToHost(v);
      if (!h.ok()) {
        observed.Update(h.status());
        return;
      }
      step0.push_back(TensorStats(p->graph.tensor(t).name, *h));
    };
    const int steps = golden.at("losses").size();
    for (int s = 0; s < steps; ++s) {
      absl::StatusOr<StepResult> r = it.Step(s, s == 0 ? first : StepOptions{});
      ASSERT_TRUE(r.ok()) << "step " << s << ": " << r.status();
      ASSERT_TRUE(observed.ok()) << observed;
      losses.push_back(r->loss);
      seconds.push_back(r->seconds);
      groups->first += r->groups_fused;
      groups->second += r->groups_unfused;
    }
    absl::StatusOr<std::map<std::string, HostTensor>> params = it.GatherParameters();
    ASSERT_TRUE(params.ok()) << params.status();
    const GoldenReport report = CompareWithGolden(golden, losses, *params, step0, 1e-4);
    // Every compute op ran on the GPU, once per step.
    int compute_ops = 0;
    for (const graph::Op& op : p->graph.ops())
      compute_ops += graph::CategoryOf(op.kind) != graph::OpCategory::kCollective;
    int64_t ran = 0;
    std::vector<std::string> paths;
    for (const auto& [path, n] : (*b)->OpsByPath()) {
      if (path.find(':') == std::string::npos) {
        ran += n;
        paths.push_back(path + " " + std::to_string(n));
      }
    }
    std::cout << "runtime-cuda: " << golden.value("model", file) << " on " << (*b)->DeviceName()
              << ": losses " << nlohmann::json(losses).dump() << ", golden " << golden.at("losses").dump()
              << ", max rel " << report.max_loss_rel << " (parameters " << report.max_param_rel
              << "); step seconds " << nlohmann::json(seconds).dump() << "; ops by path: "
              << absl::StrJoin(paths, ", ") << "\n";
    for (const auto& [path, n] : (*b)->OpsByPath())
      if (path.find(':') != std::string::npos) std::cout << "  " << path << " " << n << "\n";
    if (!p->groups.empty()) {
      std::cout << "runtime-cuda: fusion groups over " << steps << " steps: " << groups->first
                << " fused (NVRTC), " << groups->second << " op by op; why op by op:\n";
      for (const auto& [first, why] : (*b)->UnfusedWhy()) std::cout << "  " << first << ": " << why << "\n";
    }
    if (!report.first_differing_tensors.empty()) {
      std::cout << "runtime-cuda: step-0 tensors first differing from the CPU runtime:\n  "
                << absl::StrJoin(report.first_differing_tensors, "\n  ") << "\n";
    }
    EXPECT_TRUE(report.ok) << absl::StrJoin(report.failures, "\n");
    EXPECT_EQ(ran, static_cast<int64_t>(compute_ops) * steps) << "ops run on the GPU";
  }

  std::filesystem::path dir_;
};

TEST_F(RuntimeCudaGpuTest, WorldOneMlpMatchesTheCpuRuntime) { TrainAgainstGolden("mlp_sample.json"); }

TEST_F(RuntimeCudaGpuTest, WorldOneGptDecoderMatchesTheCpuRuntime) {
  TrainAgainstGolden("gpt_decoder.json");
}

// The GPT decoder's program with its dgx-h100 plan's fusion groups: the
// elementwise groups run as NVRTC kernels, the others op by op. (A world-1
// program has no buckets: its AllReduces span no mesh axis.)
TEST_F(RuntimeCudaGpuTest, WorldOneGptDecoderWithItsPlansFusionGroups) {
  const std::pair<int, int> groups = TrainAgainstGolden("gpt_decoder_plan.json");
  EXPECT_GT(groups.first, 0) << "no fusion group ran as one kernel";
}

// The one-rank NCCL communicator: each collective of a world of one returns
// its input (AllGather and ReduceScatter along a non-leading dim too).
TEST_F(RuntimeCudaGpuTest, OneRankNcclCommunicator) {
  graph::Program p;
  p.graph = graph::Graph("nccl");
  absl::StatusOr<std::unique_ptr<CudaBackend>> b = CudaBackend::Create({});
  ASSERT_TRUE(b.ok()) << b.status();
  absl::StatusOr<std::unique_ptr<Communicator>> comm = MakeNcclCommunicator(p, 0, **b, dir_.string(), 60);
  ASSERT_TRUE(comm.ok()) << comm.status();
  HostTensor x{{3, 4, 5}, std::vector<float>(60)};
  std::iota(x.data.begin(), x.data.end(), 1.0f);
  absl::StatusOr<Value> v = (*b)->FromHost(x, graph::DType::kF32);
  ASSERT_TRUE(v.ok()) << v.status();
  for (const char* type : {"AllReduce", "AllGather", "ReduceScatter"}) {
    for (int64_t dim : {0, 1, 2}) {
      graph::Op op;
      op.name = std::string(type) + "_" + std::to_string(dim);
      op.type = type;
      op.kind = std::string(type) == "AllReduce"   ? graph::OpKind::kAllReduce
                : std::string(type) == "AllGather" ? graph::OpKind::kAllGather
                                                   : graph::OpKind::kReduceScatter;
      op.attrs["dim"] = dim;
      absl::StatusOr<std::unique_ptr<Pending>> w = (*comm)->Start(op, {0}, *v);
      ASSERT_TRUE(w.ok()) << op.name << ": " << w.status();
      absl::StatusOr<Value> y = (*w)->Wait();
      ASSERT_TRUE(y.ok()) << op.name << ": " << y.status();
      absl::StatusOr<HostTensor> h = (*b)->ToHost(*y);
      ASSERT_TRUE(h.ok()) << h.status();
      EXPECT_EQ(h->shape, x.shape) << op.name;
      EXPECT_EQ(h->data, x.data) << op.name;
    }
  }
  absl::StatusOr<std::vector<HostTensor>> all = (*comm)->AllGatherHost(x);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ((*all)[0].data, x.data);
}

}  // namespace
}  // namespace braid::runtime
