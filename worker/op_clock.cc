#include "worker/op_clock.h"

namespace braid::worker {

OpClock& RankClock() {
  static OpClock clock;
  return clock;
}

}  // namespace braid::worker
