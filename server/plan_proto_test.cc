// Tests of a stored parallel section as the wire ParallelPlan: its
// per-device program read back within bounds and checked against its
// fingerprint (a program changed in the store is refused), and the digest
// that covers it.
#include "server/plan_proto.h"

#include <string>

#include "gmock/gmock.h"
#include "graph/builder.h"
#include "graph/program.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "proto/plan_digest.h"
#include "search/program_lowering.h"

namespace braid::server {
namespace {

namespace v1 = braid::v1;
using ::testing::HasSubstr;

// Two Linears with a ReLU between them, lowered to its world-1 program.
std::string ProgramJson() {
  graph::GraphBuilder b("tiny_mlp");
  graph::TensorId x = b.Input("x", {8, 16});
  x = b.Relu(b.Linear(x, 16));
  b.MarkOutput(b.Linear(x, 4));
  const graph::Graph forward = *std::move(b).Build();
  absl::StatusOr<graph::Program> p = search::LowerWorldOne(forward, {});
  EXPECT_TRUE(p.ok()) << p.status();
  return graph::ProgramToJson(*p).dump();
}

ParallelSection SectionWith(const std::string& program_json) {
  ParallelSection s;
  s.strategy = "data_parallel";
  s.degree = 1;
  s.data_degree = 1;
  s.model_degree = 1;
  s.json = R"({"strategy":"data_parallel","degree":1,"ops":[],"dp_iteration_ms":1,)"
           R"("memory_per_device_bytes":1024,"device_memory_bytes":4096,"forward_collectives":0})";
  s.program_json = program_json;
  return s;
}

TEST(PlanProtoTest, AStoredProgramComesBackWithItsHeaderAndMatchesItsFingerprint) {
  const std::string text = ProgramJson();
  absl::StatusOr<v1::ParallelPlan> p = ParallelSectionToProto(SectionWith(text));
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(p->has_program());
  const v1::DeviceProgram& dp = p->program();
  const nlohmann::json j = nlohmann::json::parse(text);
  EXPECT_EQ(dp.format(), "braid-program/1");
  EXPECT_EQ(dp.row(), j["row"]);
  EXPECT_EQ(dp.mesh_size(), 0);
  EXPECT_EQ(dp.model_fingerprint(), j["model_fingerprint"]);
  EXPECT_EQ(dp.program_fingerprint(), j["program_fingerprint"]);
  EXPECT_EQ(dp.program_fingerprint().size(), 64u);
  EXPECT_EQ(nlohmann::json::parse(dp.json()), j);
  EXPECT_TRUE(CheckDeviceProgram(dp).ok()) << CheckDeviceProgram(dp);
  EXPECT_EQ(p->program_error(), "");
}

TEST(PlanProtoTest, ARowTheLoweringRefusedSaysWhy) {
  ParallelSection s = SectionWith("");
  s.program_error = "lowering: op fc (MatMul): no mesh";
  absl::StatusOr<v1::ParallelPlan> p = ParallelSectionToProto(s);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(p->has_program());
  EXPECT_EQ(p->program_error(), "lowering: op fc (MatMul): no mesh");
}

TEST(PlanProtoTest, AStoredProgramChangedAfterPlanningIsRefused) {
  nlohmann::json j = nlohmann::json::parse(ProgramJson());
  j["seed"] = j["seed"].get<uint64_t>() + 1;  // the fingerprint kept
  absl::StatusOr<v1::ParallelPlan> changed = ParallelSectionToProto(SectionWith(j.dump()));
  EXPECT_EQ(changed.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(changed.status().message(), HasSubstr("stored per-device program"));
  EXPECT_THAT(changed.status().message(),
              HasSubstr("program_fingerprint does not match its content"));
  j = nlohmann::json::parse(ProgramJson());
  j.erase("program_fingerprint");
  absl::StatusOr<v1::ParallelPlan> unsigned_program = ParallelSectionToProto(SectionWith(j.dump()));
  EXPECT_EQ(unsigned_program.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(unsigned_program.status().message(), HasSubstr("no program_fingerprint"));
  // Not JSON, and JSON past the nesting bound: refused before it is parsed.
  EXPECT_EQ(ParallelSectionToProto(SectionWith("{\"format\":")).status().code(),
            absl::StatusCode::kDataLoss);
  absl::StatusOr<v1::ParallelPlan> deep =
      ParallelSectionToProto(SectionWith(std::string(100, '[') + std::string(100, ']')));
  EXPECT_EQ(deep.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(deep.status().message(), HasSubstr("stored per-device program"));
}

// The digest covers the program through its header; a program's JSON
// changed on the wire (header and digest kept) fails CheckDeviceProgram,
// and with it PlanDigestOfSerialized.
TEST(PlanProtoTest, TheDigestBindsTheProgramThroughItsFingerprint) {
  absl::StatusOr<v1::ParallelPlan> par = ParallelSectionToProto(SectionWith(ProgramJson()));
  ASSERT_TRUE(par.ok()) << par.status();
  v1::Plan plan;
  plan.set_graph_fingerprint("00000000000000aa");
  *plan.mutable_parallel() = *par;
  const std::string digest = PlanDigest(plan);
  absl::StatusOr<std::string> got = PlanDigestOfSerialized(SerializeDeterministic(plan));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, digest);

  nlohmann::json j = nlohmann::json::parse(plan.parallel().program().json());
  j["seed"] = j["seed"].get<uint64_t>() + 1;
  v1::Plan forged = plan;
  forged.mutable_parallel()->mutable_program()->set_json(j.dump());
  EXPECT_EQ(PlanDigest(forged), digest);  // the header is the same...
  absl::Status s = CheckDeviceProgram(forged.parallel().program());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("does not match program_fingerprint"));
  // ...so ranks that receive the bytes check the JSON against it.
  EXPECT_EQ(PlanDigestOfSerialized(SerializeDeterministic(forged)).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A JSON whose own header differs from the wire header.
  j = nlohmann::json::parse(plan.parallel().program().json());
  j["row"] = "braid";
  forged.mutable_parallel()->mutable_program()->set_json(j.dump());
  EXPECT_THAT(CheckDeviceProgram(forged.parallel().program()).message(),
              HasSubstr("row is not the header's"));
}

}  // namespace
}  // namespace braid::server
