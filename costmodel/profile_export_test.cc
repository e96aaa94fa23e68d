#include "costmodel/profile_export.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace braid::costmodel {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  return (std::filesystem::path(::testing::TempDir()) / name).string();
}

std::unique_ptr<ProfileStore> FreshStore(const std::string& name) {
  const std::string path = TempPath(name);
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path + suffix);
  auto store = ProfileStore::Open(path);
  EXPECT_TRUE(store.ok()) << store.status();
  return *std::move(store);
}

constexpr char kKind[] = "cuda:NVIDIA H100 80GB HBM3";

TEST(ProfileExportTest, RoundTripsThroughTheTextForm) {
  auto store = FreshStore("export_roundtrip.db");
  ASSERT_TRUE(store->Put({kKind, "MatMul", "in(f32[8,8])"}, {1.5e-5, 1e-7, 7}).ok());
  ASSERT_TRUE(store->Put({kKind, "Relu", "in(f32[8])"}, {2e-6, 0, 7}).ok());
  ASSERT_TRUE(store->Put({"cpu-1t:other", "Relu", "in(f32[8])"}, {9e-3, 0, 3}).ok());
  ASSERT_TRUE(store->PutComm(kKind, {"AllReduce", 8, 1 << 20, 3e-5}).ok());
  absl::StatusOr<ProfileExport> e = CollectProfiles(*store, kKind);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->ops.size(), 2u);  // not the other kind's row
  e->source = "H100, gpu-kit";
  const std::string text = ProfileExportText(*e);
  EXPECT_THAT(text, HasSubstr("\n  [\"MatMul\",\"in(f32[8,8])\",1.5e-05"));
  absl::StatusOr<ProfileExport> back = ProfileExportFromJson(nlohmann::json::parse(text));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->device_kind, kKind);
  EXPECT_EQ(back->source, "H100, gpu-kit");
  ASSERT_EQ(back->ops.size(), 2u);
  EXPECT_EQ(back->ops[0].first.op_type, "MatMul");
  EXPECT_DOUBLE_EQ(back->ops[0].second.median_s, 1.5e-5);
  ASSERT_EQ(back->comm.size(), 1u);
  EXPECT_EQ(back->comm[0].bytes, 1 << 20);

  EXPECT_EQ(CollectProfiles(*store, "cuda:nothing").status().code(), absl::StatusCode::kNotFound);
}

TEST(ProfileExportTest, ImportKeepsStoredRowsUnlessReplacing) {
  ProfileExport e{kKind, "", {{{kKind, "MatMul", "a"}, {1e-5, 0, 7}}, {{kKind, "Relu", "b"}, {2e-6, 0, 7}}},
                  {{"AllReduce", 2, 1024, 1e-5}}};
  auto store = FreshStore("export_import.db");
  ASSERT_TRUE(store->Put({kKind, "MatMul", "a"}, {9e-5, 0, 11}).ok());
  absl::StatusOr<ImportReport> r = ImportProfiles(e, *store, /*replace=*/false);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->ops_written, 1);
  EXPECT_EQ(r->ops_kept, 1);
  EXPECT_EQ(r->comm_written, 1);
  EXPECT_DOUBLE_EQ(store->Get({kKind, "MatMul", "a"})->median_s, 9e-5);
  EXPECT_DOUBLE_EQ(store->Get({kKind, "Relu", "b"})->median_s, 2e-6);
  r = ImportProfiles(e, *store, /*replace=*/true);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->ops_written, 2);
  EXPECT_DOUBLE_EQ(store->Get({kKind, "MatMul", "a"})->median_s, 1e-5);
}

TEST(ProfileExportTest, RefusesBadDocumentsNamingTheRow) {
  auto bad = [](const std::string& text) {
    absl::StatusOr<ProfileExport> e = ProfileExportFromJson(nlohmann::json::parse(text));
    EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument) << text;
    return std::string(e.status().message());
  };
  EXPECT_THAT(bad(R"([1])"), HasSubstr("not a JSON object"));
  EXPECT_THAT(bad(R"({"format":"braid-profiles/2","device_kind":"k"})"), HasSubstr("format"));
  EXPECT_THAT(bad(R"({"format":"braid-profiles/1","device_kind":""})"), HasSubstr("device_kind is empty"));
  EXPECT_THAT(bad(R"({"format":"braid-profiles/1","device_kind":"k","ops":[["MatMul","s",-1,0,1]]})"),
              HasSubstr("ops[0] (MatMul): times must be finite"));
  EXPECT_THAT(bad(R"({"format":"braid-profiles/1","device_kind":"k","ops":[["A","s",1e-3,0,1],["B","s",1e-3,0,0]]})"),
              HasSubstr("ops[1] repetitions out of range"));
  EXPECT_THAT(bad(R"({"format":"braid-profiles/1","device_kind":"k","ops":[["A","s",1e-3]]})"),
              HasSubstr("ops[0] is not [op_type"));
  EXPECT_THAT(bad(R"({"format":"braid-profiles/1","device_kind":"k","ops":[[7,"s",1e-3,0,1]]})"),
              HasSubstr("ops[0] op_type is not a string"));
  EXPECT_THAT(bad(R"({"format":"braid-profiles/1","device_kind":"k","comm":[["AllReduce",0,8,1e-5]]})"),
              HasSubstr("comm[0] group_size out of range"));
  EXPECT_THAT(bad(R"({"format":"braid-profiles/1","device_kind":"k","comm":[["AllReduce",2,-8,1e-5]]})"),
              HasSubstr("comm[0] (AllReduce) out of range"));
  const std::string huge(kMaxProfileTextBytes + 1, 's');
  EXPECT_THAT(bad(R"({"format":"braid-profiles/1","device_kind":"k","ops":[["A",")" + huge + R"(",1e-3,0,1]]})"),
              HasSubstr("signature is over"));
}

TEST(ProfileExportTest, ShippedProfilesAnswerWhatTheStoreLacks) {
  const std::filesystem::path dir = TempPath("shipped_profiles");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "h100.json") << ProfileExportText(
      {kKind, "test", {{{kKind, "MatMul", "a"}, {1e-5, 0, 7}}}, {{"AllReduce", 8, 1 << 20, 3e-5}}});
  std::ofstream(dir / "broken.json") << "{\"format\": \"braid-profiles/1\", \"ops\": 3";
  std::ofstream(dir / "notes.txt") << "not an export";
  std::vector<std::string> warnings;
  ShippedProfiles p = ShippedProfiles::Load(dir.string(), &warnings);
  EXPECT_EQ(p.size(), 1u);
  EXPECT_EQ(p.files().size(), 1u);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("broken.json"));
  ASSERT_TRUE(p.Find({kKind, "MatMul", "a"}).has_value());
  EXPECT_FALSE(p.Find({kKind, "MatMul", "b"}).has_value());
  EXPECT_FALSE(p.Find({"cuda:other", "MatMul", "a"}).has_value());
  EXPECT_EQ(p.Comm(kKind).size(), 1u);
  EXPECT_TRUE(ShippedProfiles::Load((dir / "missing").string(), &warnings).files().empty());
}

// The tests run with BRAID_PROFILES=none: the store answers only its rows.
TEST(ProfileExportTest, TestsSeeNoShippedProfiles) {
  const char* env = std::getenv("BRAID_PROFILES");
  if (env == nullptr || std::string(env) != "none") GTEST_SKIP() << "run outside ctest";
  EXPECT_EQ(ShippedProfiles::Get().size(), 0u);
}

}  // namespace
}  // namespace braid::costmodel
