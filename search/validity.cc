#include "search/validity.h"

#include "search/contraction.h"

namespace braid::search {

absl::Status ValidatePlan(const graph::Graph& g, const Plan& plan) {
  return Contract(g, plan).status();
}

}  // namespace braid::search
