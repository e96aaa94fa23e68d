// The one idiom for propagating an error to the caller, as in abseil's and
// XLA's status macros. RETURN_IF_ERROR takes an absl::Status or an
// absl::StatusOr<T> expression and returns its status from the enclosing
// function when it is not OK; ASSIGN_OR_RETURN evaluates an absl::StatusOr<T>
// expression, returns its status when it is not OK and otherwise assigns (or
// declares) `lhs` from the value. The enclosing function may return
// absl::Status or any absl::StatusOr<U>; a lambda using them needs a return
// type those convert to.
//
//   absl::StatusOr<Plan> Load(Store& store, std::string_view id) {
//     RETURN_IF_ERROR(store.Open());                           // absl::Status
//     RETURN_IF_ERROR(store.Lookup(id));                       // absl::StatusOr<Row>, value unused
//     ASSIGN_OR_RETURN(std::string text, store.PlanText(id));  // declares `text`
//     ASSIGN_OR_RETURN(const Graph& g, store.Graph(id));       // binds to the value
//     ASSIGN_OR_RETURN(text, store.PlanText(id));              // assigns to `text`
//     return ParsePlan(g, text);
//   }
//
// ASSIGN_OR_RETURN expands to several statements: it cannot be the body of an
// unbraced `if`, and `lhs` must not contain an unparenthesized comma (write
// `auto [a, b]` or `auto p` rather than `std::pair<A, B> p`).
#ifndef BRAID_BASE_STATUS_MACROS_H_
#define BRAID_BASE_STATUS_MACROS_H_

#include <utility>

#include "absl/base/optimization.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace braid::base::status_macros_internal {

// The status of a Status or StatusOr expression, without copying a value.
inline const absl::Status& AsStatus(const absl::Status& s) { return s; }
inline absl::Status AsStatus(absl::Status&& s) { return std::move(s); }
template <typename T>
const absl::Status& AsStatus(const absl::StatusOr<T>& s) {
  return s.status();
}
template <typename T>
absl::Status AsStatus(absl::StatusOr<T>&& s) {
  return std::move(s).status();
}

}  // namespace braid::base::status_macros_internal

#define BRAID_STATUS_MACROS_CONCAT_INNER_(a, b) a##b
#define BRAID_STATUS_MACROS_CONCAT_(a, b) BRAID_STATUS_MACROS_CONCAT_INNER_(a, b)

#define RETURN_IF_ERROR(expr)                                                                 \
  do {                                                                                        \
    if (absl::Status braid_status_macros_status_ =                                            \
            ::braid::base::status_macros_internal::AsStatus(expr);                            \
        ABSL_PREDICT_FALSE(!braid_status_macros_status_.ok())) {                              \
      return braid_status_macros_status_;                                                     \
    }                                                                                         \
  } while (false)

#define ASSIGN_OR_RETURN(lhs, rexpr)                                                          \
  BRAID_STATUS_MACROS_ASSIGN_OR_RETURN_IMPL_(                                                 \
      BRAID_STATUS_MACROS_CONCAT_(braid_status_macros_statusor_, __COUNTER__), lhs, rexpr)

#define BRAID_STATUS_MACROS_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                               \
  if (ABSL_PREDICT_FALSE(!statusor.ok())) {                              \
    return std::move(statusor).status();                                 \
  }                                                                      \
  lhs = *std::move(statusor)

#endif  // BRAID_BASE_STATUS_MACROS_H_
