// Row helpers shared by the Store's translation units (store.cc,
// store_feedback.cc). Callers hold the Store's mutex.
#ifndef BRAID_SERVER_INTERNAL_STORE_ROWS_H_
#define BRAID_SERVER_INTERNAL_STORE_ROWS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/sqlite.h"
#include "server/store.h"

namespace braid::server::internal {

absl::Status PutPlanLocked(base::sql::Database& db, const PlanRecord& p);
absl::StatusOr<std::optional<PlanRecord>> GetPlanLocked(base::sql::Database& db,
                                                        const std::string& key);
// Seconds as a JSON array, and back (DataLoss for anything else).
std::string TimesJson(const std::vector<double>& v);
absl::StatusOr<std::vector<double>> TimesFromJson(const std::string& text);

}  // namespace braid::server::internal

#endif  // BRAID_SERVER_INTERNAL_STORE_ROWS_H_
