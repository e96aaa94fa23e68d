#include "worker/timing.h"

#include <malloc.h>

namespace braid::worker {

bool KeepFreedMemory() {
  // 32 MiB: the largest mmap threshold glibc accepts on 64-bit; blocks below
  // it come from the heap and are reused. The heap is never trimmed.
  const bool mmap_ok = mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1;
  const bool trim_ok = mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1;
  return mmap_ok && trim_ok;
}

}  // namespace braid::worker
