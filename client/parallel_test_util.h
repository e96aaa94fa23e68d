// Specs the parallel plan execution test uses (parallel_plan_exec_test):
// a small MLP and a 2-block transformer at given
// data and model degrees.
#ifndef BRAID_CLIENT_PARALLEL_TEST_UTIL_H_
#define BRAID_CLIENT_PARALLEL_TEST_UTIL_H_

#include <vector>

#include "worker/parallel_train.h"

namespace braid::client::testing {

using worker::LayerParallel;
using worker::ParallelTrainSpec;
using worker::TransformerShape;

// Linears 64 -> 128 -> 128 -> 128 -> 32, batch 16, one layer per kind.
inline ParallelTrainSpec Mlp(std::vector<LayerParallel::Kind> kinds, int data, int model) {
  ParallelTrainSpec s;
  s.widths = {64, 128, 128, 128, 32};
  s.batch = 16;
  for (LayerParallel::Kind k : kinds) s.layers.push_back({k});
  s.ranks = data * model;
  s.data_degree = data;
  s.model_degree = model;
  return s;
}

// d_model 32, 4 heads, seq 8, d_ff 64, 2 blocks, batch 4.
inline ParallelTrainSpec Transformer(int data, int model) {
  ParallelTrainSpec s;
  s.batch = 4;
  s.ranks = data * model;
  s.data_degree = data;
  s.model_degree = model;
  s.transformer = TransformerShape{.d_model = 32, .heads = 4, .seq = 8, .d_ff = 64, .blocks = 2};
  return s;
}

}  // namespace braid::client::testing

#endif  // BRAID_CLIENT_PARALLEL_TEST_UTIL_H_
