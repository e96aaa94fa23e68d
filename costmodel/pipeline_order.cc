#include "costmodel/pipeline_order.h"

#include <algorithm>

namespace braid::costmodel {

std::vector<MicroStep> PipelineStageOrder(int stage, int stages, int micro_batches, bool gpipe) {
  const int m = micro_batches;
  std::vector<MicroStep> out;
  if (gpipe) {
    for (int j = 0; j < m; ++j) out.push_back({true, j});
    for (int j = 0; j < m; ++j) out.push_back({false, j});
    return out;
  }
  const int warmup = std::min(stages - stage - 1, m);
  for (int j = 0; j < warmup; ++j) out.push_back({true, j});
  for (int j = 0; j < m - warmup; ++j) {
    out.push_back({true, warmup + j});
    out.push_back({false, j});
  }
  for (int j = m - warmup; j < m; ++j) out.push_back({false, j});
  return out;
}

}  // namespace braid::costmodel
