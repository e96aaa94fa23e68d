// A graph with exactly two profiling keys, shared by the task-queue tests
// (server/) and the profiling-worker tests (worker/): two Relus of one
// signature share a key, the Add is another, and the AllReduce is the
// collective benchmark's job, not a profiling task.
#ifndef BRAID_TESTS_PROFILING_GRAPH_H_
#define BRAID_TESTS_PROFILING_GRAPH_H_

namespace braid::testing_graphs {

inline constexpr char kTwoProfilingKeys[] = R"(graph "t"
tensor x f32[4,8] input
tensor y f32[4,8] input
tensor a f32[4,8] activation
tensor b f32[4,8] activation
tensor c f32[4,8] activation
tensor d f32[4,8] activation
op r1 Relu (x) -> (a)
op r2 Relu (y) -> (b)
op add Add (a, b) -> (c)
op ar AllReduce (c) -> (d) {group_size=2} phase=comm
output d
)";

}  // namespace braid::testing_graphs

#endif  // BRAID_TESTS_PROFILING_GRAPH_H_
