#include "graph/op_attrs.h"

#include <algorithm>
#include <string>

namespace braid::graph {

std::vector<int64_t> IntsOr(const Op& op, std::string_view key, size_t n, int64_t def) {
  std::vector<int64_t> v = op.GetInts(key);
  if (v.size() != n) v.assign(n, def);
  return v;
}

std::vector<int64_t> ResolvePads(const Op& op, const std::vector<int64_t>& in_spatial,
                                 const std::vector<int64_t>& out_spatial,
                                 const std::vector<int64_t>& kernel,
                                 const std::vector<int64_t>& strides,
                                 const std::vector<int64_t>& dilations) {
  const size_t n = in_spatial.size();
  std::vector<int64_t> pads = op.GetInts("pads");
  if (pads.size() == 2 * n) return pads;
  pads.assign(2 * n, 0);
  const std::string auto_pad = op.GetString("auto_pad", "NOTSET");
  if ((auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") && out_spatial.size() == n) {
    for (size_t i = 0; i < n; ++i) {
      const int64_t total = std::max<int64_t>(
          0, (out_spatial[i] - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - in_spatial[i]);
      const int64_t small = total / 2;
      pads[i] = auto_pad == "SAME_UPPER" ? small : total - small;
      pads[i + n] = total - pads[i];
    }
  }
  return pads;
}

std::vector<int64_t> ReduceAxes(const Op& op, const std::vector<int64_t>& in,
                                const std::vector<int64_t>& out) {
  std::vector<int64_t> axes = op.GetInts("axes");
  const int64_t rank = static_cast<int64_t>(in.size());
  for (int64_t& ax : axes) {
    if (ax < 0) ax += rank;
  }
  if (!axes.empty()) return axes;
  if (out.size() == in.size()) {
    for (int64_t i = 0; i < rank; ++i) {
      if (out[i] != in[i]) axes.push_back(i);
    }
  } else {
    // keepdims=0: walk both shapes, an input dim without its match is reduced.
    size_t j = 0;
    for (int64_t i = 0; i < rank; ++i) {
      const size_t left_in = static_cast<size_t>(rank - i), left_out = out.size() - j;
      if (j < out.size() && in[i] == out[j] && left_in >= left_out) {
        ++j;
      } else {
        axes.push_back(i);
      }
    }
  }
  int64_t out_elems = 1;
  for (int64_t d : out) out_elems *= d;
  if (axes.empty() && out_elems == 1) {
    for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
  }
  return axes;
}

}  // namespace braid::graph
