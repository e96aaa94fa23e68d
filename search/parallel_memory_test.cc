#include "search/parallel_memory.h"

#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "glog/logging.h"

#include "costmodel/cluster.h"
#include "graph/builder.h"
#include "graph/training.h"

namespace braid::search {
namespace {

using graph::Graph;
using graph::GraphBuilder;
using graph::OpId;
using graph::OpKind;
using graph::Optimizer;
using graph::TensorId;
using ::testing::HasSubstr;

// x[64,32] -> MatMul w1[32,128] -> Gelu -> MatMul w2[128,32], f32.
// Whole tensors: x 8192 B, w1 16384 B, h 32768 B, w2 16384 B, y 8192 B.
struct Mlp {
  Graph g;
  OpId mm1 = -1, gelu = -1, mm2 = -1;
};

Mlp MakeMlp() {
  GraphBuilder b("mlp");
  TensorId x = b.Input("x", {64, 32});
  TensorId w1 = b.Param("w1", {32, 128});
  TensorId w2 = b.Param("w2", {128, 32});
  b.MarkOutput(b.MatMul(b.Gelu(b.MatMul(x, w1)), w2));
  absl::StatusOr<Graph> g = std::move(b).Build();
  CHECK(g.ok()) << g.status();
  Mlp m{*std::move(g)};
  CHECK_EQ(m.g.num_ops(), 3);
  for (OpId o = 0; o < m.g.num_ops(); ++o) {
    if (m.g.op(o).kind == OpKind::kMatMul) (m.mm1 < 0 ? m.mm1 : m.mm2) = o;
    if (m.g.op(o).kind == OpKind::kGelu) m.gelu = o;
  }
  CHECK(m.mm1 >= 0 && m.gelu >= 0 && m.mm2 >= 0);
  return m;
}

ParallelConfig Cfg(std::vector<int> out, int red = 1) { return ParallelConfig{std::move(out), red}; }

std::map<OpId, ParallelConfig> DataParallel(const Mlp& m) {
  return {{m.mm1, Cfg({4, 1})}, {m.gelu, Cfg({4, 1})}, {m.mm2, Cfg({4, 1})}};
}
// Megatron: column-parallel mm1, Gelu on the column shards, row-parallel mm2.
std::map<OpId, ParallelConfig> ColumnRow(const Mlp& m) {
  return {{m.mm1, Cfg({1, 4})}, {m.gelu, Cfg({1, 4})}, {m.mm2, Cfg({1, 1}, 4)}};
}

DeviceMemory Mem(int64_t params, int64_t opt, int64_t acts) {
  return DeviceMemory{.parameter_bytes = params,
                      .gradient_bytes = params,
                      .optimizer_bytes = opt,
                      .activation_bytes = acts,
                      .total_bytes = 2 * params + opt + acts};
}

TEST(PerDeviceMemoryTest, DataParallelKeepsWholeWeightsAndSplitsActivations) {
  Mlp m = MakeMlp();
  absl::StatusOr<DeviceMemory> mem =
      PerDeviceMemory(m.g, DataParallel(m), Optimizer::kSgdMomentum);
  ASSERT_TRUE(mem.ok()) << mem.status();
  // Weights replicated: 16384 + 16384. Activations a quarter of the rows:
  // x[16,32] 2048 + h[16,128] 8192 + gelu[16,128] 8192 + y[16,32] 2048.
  EXPECT_EQ(*mem, Mem(32768, 32768, 20480)) << DeviceMemoryString(*mem);
  EXPECT_EQ(mem->total_bytes, 118784);
}

TEST(PerDeviceMemoryTest, ColumnRowSplitsWeightsAndReplicatesActivations) {
  Mlp m = MakeMlp();
  absl::StatusOr<DeviceMemory> mem = PerDeviceMemory(m.g, ColumnRow(m), Optimizer::kSgdMomentum);
  ASSERT_TRUE(mem.ok()) << mem.status();
  // w1[32,128/4] 4096 + w2[128/4,32] 4096. Activations: x whole 8192,
  // h[64,128/4] 8192, gelu[64,128/4] 8192 (mm2 reads the same piece), y's
  // partial sums [64,32]x4 8192 whole on every device.
  EXPECT_EQ(*mem, Mem(8192, 8192, 32768)) << DeviceMemoryString(*mem);
  EXPECT_EQ(mem->total_bytes, 57344);
}

TEST(PerDeviceMemoryTest, AdamKeepsTwoStatesPerParameter) {
  Mlp m = MakeMlp();
  absl::StatusOr<DeviceMemory> data = PerDeviceMemory(m.g, DataParallel(m), Optimizer::kAdam);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(*data, Mem(32768, 65536, 20480));
  EXPECT_EQ(data->total_bytes, 151552);
  absl::StatusOr<DeviceMemory> cr = PerDeviceMemory(m.g, ColumnRow(m), Optimizer::kAdam);
  ASSERT_TRUE(cr.ok()) << cr.status();
  EXPECT_EQ(*cr, Mem(8192, 16384, 32768));
}

TEST(PerDeviceMemoryTest, ALayoutChangeBetweenOpsKeepsBothPieces) {
  Mlp m = MakeMlp();
  // mm1 data-parallel writes h[64/4,128]; Gelu wants h[64,128/4] (AllToAll).
  std::map<OpId, ParallelConfig> cfgs = {
      {m.mm1, Cfg({4, 1})}, {m.gelu, Cfg({1, 4})}, {m.mm2, Cfg({1, 1}, 4)}};
  absl::StatusOr<DeviceMemory> mem = PerDeviceMemory(m.g, cfgs, Optimizer::kSgdMomentum);
  ASSERT_TRUE(mem.ok()) << mem.status();
  // w1 whole 16384 + w2 shard 4096; x 2048 + h 8192 + h' 8192 + gelu 8192 + y 8192.
  EXPECT_EQ(*mem, Mem(20480, 20480, 34816)) << DeviceMemoryString(*mem);
}

TEST(PerDeviceMemoryTest, OpsWithoutConfigRunUnsplit) {
  Mlp m = MakeMlp();
  absl::StatusOr<DeviceMemory> mem = PerDeviceMemory(m.g, {}, Optimizer::kSgdMomentum);
  ASSERT_TRUE(mem.ok()) << mem.status();
  // x 8192 + h 32768 + gelu 32768 + y 8192.
  EXPECT_EQ(*mem, Mem(32768, 32768, 81920));
}

TEST(PerDeviceMemoryTest, StageAndMicroBatchHooks) {
  Mlp m = MakeMlp();
  MemoryOptions micro{.micro_batches = 4, .in_flight_micro_batches = 2};
  absl::StatusOr<DeviceMemory> mem =
      PerDeviceMemory(m.g, DataParallel(m), Optimizer::kSgdMomentum, micro);
  ASSERT_TRUE(mem.ok()) << mem.status();
  EXPECT_EQ(*mem, Mem(32768, 32768, 20480 / 2));

  // A stage holding only mm2 (row-parallel): w2 shard, its input piece, y.
  MemoryOptions stage{.ops = {m.mm2}};
  mem = PerDeviceMemory(m.g, ColumnRow(m), Optimizer::kSgdMomentum, stage);
  ASSERT_TRUE(mem.ok()) << mem.status();
  EXPECT_EQ(*mem, Mem(4096, 4096, 16384));
}

TEST(PerDeviceMemoryTest, RejectsBadInput) {
  Mlp m = MakeMlp();
  std::map<OpId, ParallelConfig> bad = {{m.mm1, Cfg({3, 1})}};
  absl::StatusOr<DeviceMemory> mem = PerDeviceMemory(m.g, bad, Optimizer::kAdam);
  EXPECT_EQ(mem.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(mem.status().message(), HasSubstr(m.g.op(m.mm1).name));

  mem = PerDeviceMemory(m.g, {{7, Cfg({1, 1})}}, Optimizer::kAdam);
  EXPECT_EQ(mem.status().code(), absl::StatusCode::kInvalidArgument);

  MemoryOptions o{.micro_batches = 2, .in_flight_micro_batches = 3};
  mem = PerDeviceMemory(m.g, {}, Optimizer::kAdam, o);
  EXPECT_EQ(mem.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CheckFitsDeviceTest, RefusesAPlanOverTheDeviceCapacity) {
  Mlp m = MakeMlp();
  costmodel::ClusterSpec cluster;
  cluster.name = "tiny";
  cluster.device.kind = "cuda:Tiny";
  cluster.device.memory_bytes = 70000;

  absl::StatusOr<DeviceMemory> cr = PerDeviceMemory(m.g, ColumnRow(m), Optimizer::kAdam);
  ASSERT_TRUE(cr.ok()) << cr.status();
  EXPECT_EQ(cr->total_bytes, 65536);
  EXPECT_TRUE(CheckFitsDevice(*cr, cluster).ok());

  absl::StatusOr<DeviceMemory> data = PerDeviceMemory(m.g, DataParallel(m), Optimizer::kAdam);
  ASSERT_TRUE(data.ok()) << data.status();
  absl::Status s = CheckFitsDevice(*data, cluster);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("plan needs 151552 bytes per device"));
  EXPECT_THAT(s.message(), HasSubstr("device 'cuda:Tiny'"));
  EXPECT_THAT(s.message(), HasSubstr("has 70000 bytes"));
  EXPECT_THAT(s.message(), HasSubstr("largest: optimizer state 65536 bytes"));

  // Exactly at capacity fits; unknown capacity (0) always fits.
  cluster.device.memory_bytes = data->total_bytes;
  EXPECT_TRUE(CheckFitsDevice(*data, cluster).ok());
  cluster.device.memory_bytes = 0;
  EXPECT_TRUE(CheckFitsDevice(*data, cluster).ok());
}

}  // namespace
}  // namespace braid::search
