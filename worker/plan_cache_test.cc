#include "worker/plan_cache.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "proto/plan_digest.h"

namespace braid::worker {
namespace {

using ::testing::HasSubstr;

// A plan as the server gives it: with the digest of its plan.
braid::v1::GetPlanResponse SomePlan() {
  braid::v1::GetPlanResponse p;
  p.set_job_id("job-00000000000000aa");
  p.set_plan_json(R"({"groups":[],"buckets":[["w.grad"]]})");
  p.mutable_plan()->add_buckets()->add_gradients("w.grad");
  p.mutable_plan()->set_predicted_iteration_s(0.125);
  p.set_origin("search");
  p.set_plan_sha256(PlanDigest(p.plan()));
  return p;
}

std::string TempDir(const std::string& name) {
  std::string d = ::testing::TempDir() + "/" + name;
  std::filesystem::remove_all(d);
  return d;
}

// Writes `plan` as a cache file would hold it, digest as given.
void Plant(const std::string& path, const braid::v1::GetPlanResponse& plan) {
  std::string json;
  ASSERT_TRUE(google::protobuf::util::MessageToJsonString(plan, &json).ok());
  std::ofstream(path, std::ios::trunc) << json;
}

const PlanFetcher kDown = [](const std::string&) -> absl::StatusOr<braid::v1::GetPlanResponse> {
  return absl::UnavailableError("connection refused");
};

TEST(LocalPlanCacheTest, RoundTripsAndRejectsBadKeys) {
  LocalPlanCache cache(TempDir("plan_cache_rt"));
  EXPECT_FALSE(cache.Get("job-1")->has_value());
  ASSERT_TRUE(cache.Put("job-1", SomePlan()).ok());
  std::optional<braid::v1::GetPlanResponse> got = *cache.Get("job-1");
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->plan().predicted_iteration_s(), 0.125);
  EXPECT_EQ(got->plan().buckets(0).gradients(0), "w.grad");
  EXPECT_EQ(got->origin(), "search");
  EXPECT_EQ(got->plan_sha256(), SomePlan().plan_sha256());
  EXPECT_EQ(cache.Put("../etc/passwd", SomePlan()).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cache.Put("", SomePlan()).code(), absl::StatusCode::kInvalidArgument);
}

TEST(LocalPlanCacheTest, ServesTheCacheOnlyWhenTheServerIsUnreachable) {
  LocalPlanCache cache(TempDir("plan_cache_fetch"));
  int calls = 0;
  PlanFetcher up = [&](const std::string&) -> absl::StatusOr<braid::v1::GetPlanResponse> {
    ++calls;
    return SomePlan();
  };
  PlanFetcher gone = [&](const std::string&) -> absl::StatusOr<braid::v1::GetPlanResponse> {
    return absl::NotFoundError("job job-1 not found");
  };
  absl::StatusOr<FetchedPlan> miss = FetchPlanCached(kDown, cache, "job-1");
  EXPECT_EQ(miss.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(miss.status().message()), HasSubstr("no cached plan"));

  absl::StatusOr<FetchedPlan> fetched = FetchPlanCached(up, cache, "job-1");
  ASSERT_TRUE(fetched.ok()) << fetched.status();
  EXPECT_FALSE(fetched->from_local_cache);
  EXPECT_EQ(fetched->cache_error, "");
  EXPECT_EQ(calls, 1);

  absl::StatusOr<FetchedPlan> cached = FetchPlanCached(kDown, cache, "job-1");
  ASSERT_TRUE(cached.ok()) << cached.status();
  EXPECT_TRUE(cached->from_local_cache);
  EXPECT_EQ(cached->plan.plan().predicted_iteration_s(), 0.125);

  EXPECT_EQ(FetchPlanCached(gone, cache, "job-1").status().code(), absl::StatusCode::kNotFound);
}

TEST(LocalPlanCacheTest, CorruptFileIsRefused) {
  LocalPlanCache cache(TempDir("plan_cache_corrupt"));
  ASSERT_TRUE(cache.Put("job-2", SomePlan()).ok());
  { std::ofstream(*cache.PathFor("job-2"), std::ios::trunc) << "{ not json"; }
  EXPECT_EQ(cache.Get("job-2").status().code(), absl::StatusCode::kDataLoss);
  absl::StatusOr<FetchedPlan> down = FetchPlanCached(kDown, cache, "job-2");
  EXPECT_EQ(down.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(down.status().message()), HasSubstr("cached plan is refused"));
}

TEST(LocalPlanCacheTest, PlantedFileWithWrongDigestIsRefused) {
  LocalPlanCache cache(TempDir("plan_cache_planted"));
  ASSERT_TRUE(cache.Put("job-3", SomePlan()).ok());
  const std::string path = *cache.PathFor("job-3");

  // Another plan under the digest the server gave for the cached one.
  braid::v1::GetPlanResponse forged = SomePlan();
  forged.mutable_plan()->mutable_buckets(0)->set_gradients(0, "evil.grad");
  Plant(path, forged);
  absl::StatusOr<std::optional<braid::v1::GetPlanResponse>> got = cache.Get("job-3");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(got.status().message()), HasSubstr("does not match its digest"));
  absl::StatusOr<FetchedPlan> down = FetchPlanCached(kDown, cache, "job-3");
  ASSERT_FALSE(down.ok());
  EXPECT_EQ(down.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(down.status().message()), HasSubstr("does not match its digest"));

  // Without a digest, or with one that is not a SHA-256 digest.
  forged.clear_plan_sha256();
  Plant(path, forged);
  EXPECT_THAT(std::string(cache.Get("job-3").status().message()), HasSubstr("no plan digest"));
  EXPECT_FALSE(FetchPlanCached(kDown, cache, "job-3").ok());
  forged.set_plan_sha256("\x1b[31mnot-hex");
  Plant(path, forged);
  absl::StatusOr<std::optional<braid::v1::GetPlanResponse>> bad = cache.Get("job-3");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("not a SHA-256 digest"));
  EXPECT_THAT(std::string(bad.status().message()), ::testing::Not(HasSubstr("\x1b")));

  // The same plan with its own digest is served: a cost figure the digest
  // leaves out (a re-costed plan) does not matter.
  braid::v1::GetPlanResponse recosted = SomePlan();
  recosted.mutable_plan()->set_predicted_iteration_s(0.5);
  Plant(path, recosted);
  absl::StatusOr<FetchedPlan> ok = FetchPlanCached(kDown, cache, "job-3");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_TRUE(ok->from_local_cache);
  EXPECT_EQ(ok->plan.plan().predicted_iteration_s(), 0.5);
}

TEST(LocalPlanCacheTest, ServesTheFetchedPlanWhenTheCacheCannotBeWritten) {
  PlanFetcher up = [](const std::string&) -> absl::StatusOr<braid::v1::GetPlanResponse> {
    return SomePlan();
  };
  // A cache directory below a regular file cannot be created, whoever runs
  // the test (root included).
  const std::string base = TempDir("plan_cache_unwritable");
  std::filesystem::create_directories(base);
  std::ofstream(base + "/file") << "x";
  std::vector<std::string> dirs = {base + "/file/plans"};
  // A read-only directory, where permissions apply (not for root).
  if (geteuid() != 0) {
    const std::string ro = base + "/read-only";
    std::filesystem::create_directories(ro);
    ASSERT_EQ(chmod(ro.c_str(), 0555), 0);
    dirs.push_back(ro);
  }
  for (const std::string& dir : dirs) {
    SCOPED_TRACE(dir);
    LocalPlanCache cache(dir);
    EXPECT_FALSE(cache.Put("job-4", SomePlan()).ok());
    absl::StatusOr<FetchedPlan> p = FetchPlanCached(up, cache, "job-4");
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_FALSE(p->from_local_cache);
    EXPECT_THAT(p->cache_error, HasSubstr(dir));
    EXPECT_EQ(p->plan.plan_sha256(), SomePlan().plan_sha256());
    EXPECT_EQ(p->plan.plan().buckets(0).gradients(0), "w.grad");
    EXPECT_FALSE(std::filesystem::exists(*cache.PathFor("job-4")));
  }
}

TEST(LocalPlanCacheTest, ServerAnswerWithoutMatchingDigestIsServedButNotCached) {
  LocalPlanCache cache(TempDir("plan_cache_server_digest"));
  PlanFetcher odd = [](const std::string&) -> absl::StatusOr<braid::v1::GetPlanResponse> {
    braid::v1::GetPlanResponse p = SomePlan();
    p.set_plan_sha256(std::string(64, '0'));
    return p;
  };
  absl::StatusOr<FetchedPlan> p = FetchPlanCached(odd, cache, "job-5");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->cache_error, HasSubstr("does not match its digest"));
  EXPECT_FALSE(std::filesystem::exists(*cache.PathFor("job-5")));
  EXPECT_EQ(FetchPlanCached(kDown, cache, "job-5").status().code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace braid::worker
