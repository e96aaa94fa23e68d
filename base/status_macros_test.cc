// RETURN_IF_ERROR and ASSIGN_OR_RETURN: errors reach the caller unchanged,
// values are assigned, the expression is evaluated once, and both work in
// functions returning absl::Status and absl::StatusOr.
#include "base/status_macros.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace braid::base {
namespace {

absl::Status Fail(std::string_view why) { return absl::InvalidArgumentError(std::string(why)); }

absl::StatusOr<int> IntOr(bool ok, int v) {
  if (!ok) return absl::NotFoundError("no int");
  return v;
}

absl::StatusOr<std::unique_ptr<std::string>> Boxed(bool ok, std::string v) {
  if (!ok) return absl::ResourceExhaustedError("no box");
  return std::make_unique<std::string>(std::move(v));
}

// Runs `first`, then records that it got past it.
absl::Status ReturnIfErrorStatus(const absl::Status& first, bool* reached_end) {
  *reached_end = false;
  RETURN_IF_ERROR(first);
  *reached_end = true;
  return absl::OkStatus();
}

TEST(StatusMacrosTest, ReturnIfErrorPassesOkThrough) {
  bool reached = false;
  EXPECT_TRUE(ReturnIfErrorStatus(absl::OkStatus(), &reached).ok());
  EXPECT_TRUE(reached);
}

TEST(StatusMacrosTest, ReturnIfErrorReturnsTheErrorUnchanged) {
  bool reached = true;
  absl::Status s = ReturnIfErrorStatus(Fail("bad shape"), &reached);
  EXPECT_FALSE(reached);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "bad shape");
}

TEST(StatusMacrosTest, ReturnIfErrorTakesAStatusOr) {
  int after = 0;
  auto f = [&](bool ok) -> absl::Status {
    RETURN_IF_ERROR(IntOr(ok, 7));
    ++after;
    return absl::OkStatus();
  };
  EXPECT_TRUE(f(true).ok());
  EXPECT_EQ(after, 1);
  absl::Status s = f(false);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "no int");
  EXPECT_EQ(after, 1);
}

TEST(StatusMacrosTest, ReturnIfErrorInAFunctionReturningStatusOr) {
  auto f = [](absl::Status first) -> absl::StatusOr<std::string> {
    RETURN_IF_ERROR(first);
    return std::string("done");
  };
  EXPECT_EQ(*f(absl::OkStatus()), "done");
  absl::StatusOr<std::string> r = f(absl::DataLossError("torn page"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(r.status().message(), "torn page");
}

TEST(StatusMacrosTest, ReturnIfErrorEvaluatesItsArgumentOnce) {
  int calls = 0;
  auto once = [&]() -> absl::Status {
    ++calls;
    return calls == 1 ? Fail("first") : absl::OkStatus();
  };
  auto f = [&]() -> absl::Status {
    RETURN_IF_ERROR(once());
    return absl::OkStatus();
  };
  EXPECT_EQ(f().message(), "first");
  EXPECT_EQ(calls, 1);
}

TEST(StatusMacrosTest, ReturnIfErrorIsOneStatement) {
  // Usable as the body of an unbraced if/else without swallowing the else.
  auto f = [](bool check, absl::Status s) -> absl::Status {
    if (check)
      RETURN_IF_ERROR(s);
    else
      return absl::CancelledError("unchecked");
    return absl::OkStatus();
  };
  EXPECT_TRUE(f(true, absl::OkStatus()).ok());
  EXPECT_EQ(f(true, Fail("x")).message(), "x");
  EXPECT_EQ(f(false, absl::OkStatus()).code(), absl::StatusCode::kCancelled);
}

TEST(StatusMacrosTest, AssignOrReturnDeclaresTheValue) {
  auto f = [](bool ok) -> absl::StatusOr<int> {
    ASSIGN_OR_RETURN(int v, IntOr(ok, 20));
    ASSIGN_OR_RETURN(const int w, IntOr(true, 22));  // a second temporary in the same scope
    return v + w;
  };
  EXPECT_EQ(*f(true), 42);
  absl::StatusOr<int> r = f(false);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(r.status().message(), "no int");
}

TEST(StatusMacrosTest, AssignOrReturnAssignsAnExistingVariable) {
  int v = -1;
  auto f = [&](bool ok, int x) -> absl::Status {
    ASSIGN_OR_RETURN(v, IntOr(ok, x));
    return absl::OkStatus();
  };
  EXPECT_TRUE(f(true, 5).ok());
  EXPECT_EQ(v, 5);
  EXPECT_EQ(f(false, 9).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(v, 5);  // left alone on error
}

TEST(StatusMacrosTest, AssignOrReturnMovesMoveOnlyValues) {
  auto f = [](bool ok) -> absl::StatusOr<std::string> {
    ASSIGN_OR_RETURN(std::unique_ptr<std::string> box, Boxed(ok, "payload"));
    return *box;
  };
  EXPECT_EQ(*f(true), "payload");
  EXPECT_EQ(f(false).status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(StatusMacrosTest, AssignOrReturnBindsAReferenceThatStaysValid) {
  auto make = []() -> absl::StatusOr<std::vector<int>> { return std::vector<int>{1, 2, 3}; };
  auto f = [&]() -> absl::StatusOr<int> {
    ASSIGN_OR_RETURN(const std::vector<int>& v, make());
    ASSIGN_OR_RETURN(auto n, IntOr(true, 10));
    return v[0] + v[1] + v[2] + n;
  };
  EXPECT_EQ(*f(), 16);
}

TEST(StatusMacrosTest, AssignOrReturnInAFunctionReturningStatus) {
  std::string seen;
  auto f = [&](bool ok) -> absl::Status {
    ASSIGN_OR_RETURN(auto box, Boxed(ok, "kept"));
    seen = *box;
    return absl::OkStatus();
  };
  EXPECT_TRUE(f(true).ok());
  EXPECT_EQ(seen, "kept");
  absl::Status s = f(false);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(), "no box");
}

}  // namespace
}  // namespace braid::base
