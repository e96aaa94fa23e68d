// Run with BRAID_PROFILES naming the repository's costmodel/profiles (see
// costmodel/CMakeLists.txt): a store answers Get from the shipped rows it
// lacks, GetOwn only from its own, and its own rows win.
#include <cstdlib>
#include <filesystem>

#include "costmodel/profile_export.h"
#include "gtest/gtest.h"

namespace braid::costmodel {
namespace {

TEST(ShippedProfileStoreTest, GetFallsBackGetOwnDoesNot) {
  const char* dir = std::getenv("BRAID_PROFILES");
  ASSERT_NE(dir, nullptr);
  ASSERT_GT(ShippedProfiles::Get().size(), 0u) << dir;
  const std::string file = ShippedProfiles::Get().files().front();
  absl::StatusOr<ProfileExport> e = ReadProfileExportFile(file);
  ASSERT_TRUE(e.ok()) << e.status();
  ASSERT_FALSE(e->ops.empty());
  const auto& [key, sample] = e->ops.front();

  const std::string path =
      (std::filesystem::path(::testing::TempDir()) / "shipped_store.db").string();
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path + suffix);
  auto store = ProfileStore::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  std::optional<ProfileSample> got = (*store)->Get(key);
  ASSERT_TRUE(got.has_value()) << key.op_type << " " << key.signature;
  EXPECT_DOUBLE_EQ(got->median_s, sample.median_s);
  EXPECT_FALSE((*store)->GetOwn(key).has_value());

  OverlayProfileStore overlay(**store);
  EXPECT_TRUE(overlay.Get(key).has_value());
  EXPECT_FALSE(overlay.GetOwn(key).has_value());

  ASSERT_TRUE((*store)->Put(key, {sample.median_s * 2, 0, 3}).ok());
  EXPECT_DOUBLE_EQ((*store)->Get(key)->median_s, sample.median_s * 2);
  EXPECT_DOUBLE_EQ((*store)->GetOwn(key)->median_s, sample.median_s * 2);
  EXPECT_FALSE((*store)->Get({key.device_kind, key.op_type, "no such signature"}).has_value());
}

}  // namespace
}  // namespace braid::costmodel
