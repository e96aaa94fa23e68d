#include "search/validity.h"

#include "search/contraction.h"

namespace braid::search {

absl::Status ValidatePlan(const graph::Graph& g, const Plan& plan,
                          const costmodel::FusionBackend* backend) {
  return Contract(g, plan, backend).status();
}

}  // namespace braid::search
