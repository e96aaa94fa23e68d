#include "costmodel/gnn/features.h"

#include <algorithm>
#include <cmath>
#include <string_view>
#include <type_traits>
#include <variant>

#include "graph/op_kind.h"
#include "xxhash.h"

namespace braid::costmodel::gnn {
namespace {

static_assert(static_cast<int>(graph::OpCategory::kOpaque) + 1 == kNumCategories);

// Single-op times below a nanosecond (communication ops, empty tensors) are
// clamped so that their logarithm stays finite.
constexpr double kMinSeconds = 1e-9;

// log2(1+d) of `shape` right-aligned to rank 4; dims beyond the last four
// are folded into the first kept one so the element count survives.
void Shape4(const std::vector<int64_t>& shape, float* out) {
  double dims[4] = {0, 0, 0, 0};
  const int rank = static_cast<int>(shape.size());
  const int start = std::max(0, rank - 4);
  double lead = 1;
  for (int i = 0; i < start; ++i) lead *= static_cast<double>(shape[i]);
  for (int i = start; i < rank; ++i) {
    double d = static_cast<double>(shape[i]);
    if (i == start && start > 0) d *= lead;
    dims[4 - (rank - i)] = d;
  }
  for (int i = 0; i < 4; ++i) out[i] = static_cast<float>(std::log2(1.0 + dims[i]));
}

}  // namespace

OpVocabulary OpVocabulary::Build(std::vector<std::string> types) {
  std::sort(types.begin(), types.end());
  types.erase(std::unique(types.begin(), types.end()), types.end());
  OpVocabulary v;
  v.names_ = std::move(types);
  for (size_t i = 0; i < v.names_.size(); ++i) v.index_[v.names_[i]] = static_cast<int>(i) + 1;
  return v;
}

int OpVocabulary::Index(const std::string& type) const {
  auto it = index_.find(type);
  return it == index_.end() ? 0 : it->second;
}

std::vector<graph::OpId> SortedGroup(std::span<const graph::OpId> ops) {
  std::vector<graph::OpId> members(ops.begin(), ops.end());
  std::sort(members.begin(), members.end());
  members.erase(std::unique(members.begin(), members.end()), members.end());
  return members;
}

std::vector<MemberTime> MemberTimes(ClusterCostModel& model, const graph::Graph& g,
                                    std::span<const graph::OpId> ops) {
  std::vector<graph::OpId> members = SortedGroup(ops);
  std::vector<MemberTime> out;
  out.reserve(members.size());
  for (graph::OpId id : members) {
    const OpTime t = model.ComputeTime(g, std::span<const graph::OpId>(&id, 1));
    out.push_back({t.seconds, t.source == TimeSource::kMeasured});
  }
  return out;
}

FeatureGraph ExtractFeatures(const graph::Graph& g, std::span<const graph::OpId> ops,
                             std::span<const MemberTime> times, const OpVocabulary& vocab) {
  const std::vector<graph::OpId> members = SortedGroup(ops);
  const int n = static_cast<int>(members.size());
  auto local = [&](graph::OpId o) -> int {
    if (o == graph::kNoId) return -1;
    auto it = std::lower_bound(members.begin(), members.end(), o);
    return (it != members.end() && *it == o) ? static_cast<int>(it - members.begin()) : -1;
  };
  auto in_group = [&](graph::OpId o) { return local(o) >= 0; };

  FeatureGraph f;
  f.num_nodes = n;
  f.type_ids.resize(n);
  f.nodes.assign(static_cast<size_t>(n) * kNodeFeatures, 0.0f);
  f.adj.assign(static_cast<size_t>(n) * n, 0);
  double sum_s = 0;
  std::vector<graph::TensorId> boundary;
  for (int i = 0; i < n; ++i) {
    const graph::Op& op = g.op(members[i]);
    float* row = f.nodes.data() + static_cast<size_t>(i) * kNodeFeatures;
    f.type_ids[i] = vocab.Index(op.type);
    double in_bytes = 0, out_bytes = 0;
    int ext = 0;
    f.adj[static_cast<size_t>(i) * n + i] = 1;
    for (graph::TensorId t : op.inputs) {
      const graph::Tensor& tensor = g.tensor(t);
      in_bytes += static_cast<double>(tensor.Bytes());
      const int p = local(tensor.producer);
      if (p < 0) {
        ++ext;
        boundary.push_back(t);
      } else {
        f.adj[static_cast<size_t>(i) * n + p] = 1;
        f.adj[static_cast<size_t>(p) * n + i] = 1;
      }
    }
    bool leaves = false;
    for (graph::TensorId t : op.outputs) {
      out_bytes += static_cast<double>(g.tensor(t).Bytes());
      if (graph::LeavesGroup(g, t, in_group)) {
        leaves = true;
        boundary.push_back(t);
      }
    }
    const double s = std::max(kMinSeconds, i < static_cast<int>(times.size()) ? times[i].seconds : 0.0);
    sum_s += s;
    row[0] = static_cast<float>(std::log1p(in_bytes));
    row[1] = static_cast<float>(std::log1p(out_bytes));
    row[2] = static_cast<float>(std::log1p(std::max(0.0, op.flops)));
    row[3] = static_cast<float>(std::log(s));
    row[4] = (i < static_cast<int>(times.size()) && times[i].measured) ? 1.0f : 0.0f;
    static const std::vector<int64_t> kNone;
    Shape4(op.outputs.empty() ? kNone : g.tensor(op.outputs[0]).shape, row + 5);
    Shape4(op.inputs.empty() ? kNone : g.tensor(op.inputs[0]).shape, row + 9);
    Shape4(op.inputs.size() < 2 ? kNone : g.tensor(op.inputs[1]).shape, row + 13);
    row[17] = static_cast<float>(ext);
    row[18] = leaves ? 1.0f : 0.0f;
    row[19 + static_cast<int>(graph::CategoryOf(op.kind))] = 1.0f;
  }
  std::sort(boundary.begin(), boundary.end());
  boundary.erase(std::unique(boundary.begin(), boundary.end()), boundary.end());
  double boundary_bytes = 0;
  for (graph::TensorId t : boundary) boundary_bytes += static_cast<double>(g.tensor(t).Bytes());
  f.log_sum_member_s = std::log(std::max(kMinSeconds, sum_s));
  f.group = {static_cast<float>(f.log_sum_member_s), static_cast<float>(std::log1p(boundary_bytes)),
             static_cast<float>(n)};
  return f;
}

namespace {

// Appends fields to a byte string, each with its size where it varies, so
// that different field sequences never give the same bytes.
class KeyWriter {
 public:
  explicit KeyWriter(std::string* buf) : buf_(buf) { buf_->clear(); }
  void Int(int64_t v) { buf_->append(reinterpret_cast<const char*>(&v), sizeof v); }
  void Double(double v) { buf_->append(reinterpret_cast<const char*>(&v), sizeof v); }
  void Str(std::string_view s) {
    Int(static_cast<int64_t>(s.size()));
    buf_->append(s.data(), s.size());
  }
  void Tensors(const graph::Graph& g, const std::vector<graph::TensorId>& ids) {
    Int(static_cast<int64_t>(ids.size()));
    for (graph::TensorId t : ids) {
      const graph::Tensor& tensor = g.tensor(t);
      Int(static_cast<int64_t>(tensor.dtype));
      Int(static_cast<int64_t>(tensor.shape.size()));
      for (int64_t d : tensor.shape) Int(d);
    }
  }
  void Attr(const graph::AttrValue& v) {
    Int(static_cast<int64_t>(v.index()));
    std::visit(
        [this](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, int64_t>) {
            Int(x);
          } else if constexpr (std::is_same_v<T, double>) {
            Double(x);
          } else if constexpr (std::is_same_v<T, std::string>) {
            Str(x);
          } else {
            Int(static_cast<int64_t>(x.size()));
            for (const auto& e : x) {
              if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
                Int(e);
              } else {
                Double(e);
              }
            }
          }
        },
        v);
  }

 private:
  std::string* buf_;
};

}  // namespace

GroupKey StructuralKey(const graph::Graph& g, std::span<const graph::OpId> members) {
  thread_local std::string buf;
  KeyWriter w(&buf);
  auto local = [&](graph::OpId o) -> int {
    if (o == graph::kNoId) return -1;
    auto it = std::lower_bound(members.begin(), members.end(), o);
    return (it != members.end() && *it == o) ? static_cast<int>(it - members.begin()) : -1;
  };
  w.Int(static_cast<int64_t>(members.size()));
  for (graph::OpId m : members) {
    const graph::Op& op = g.op(m);
    w.Str(op.type);
    w.Tensors(g, op.inputs);
    w.Tensors(g, op.outputs);
    w.Int(static_cast<int64_t>(op.attrs.size()));
    for (const auto& [name, value] : op.attrs) {
      w.Str(name);
      w.Attr(value);
    }
    for (graph::TensorId t : op.inputs) {
      const graph::Tensor& in = g.tensor(t);
      const int p = local(in.producer);
      if (p < 0) {
        w.Int(-1);
        continue;
      }
      const graph::Op& prod = g.op(in.producer);
      w.Int(p);
      w.Int(std::find(prod.outputs.begin(), prod.outputs.end(), t) - prod.outputs.begin());
    }
    for (graph::TensorId t : op.outputs) {
      w.Int(graph::LeavesGroup(g, t, [&](graph::OpId c) { return local(c) >= 0; }) ? 1 : 0);
    }
  }
  const XXH128_hash_t h = XXH3_128bits(buf.data(), buf.size());
  return {h.low64, h.high64};
}

FeatureStats ComputeStats(std::span<const FeatureGraph> graphs) {
  std::vector<double> ns(kNodeFeatures, 0), nss(kNodeFeatures, 0);
  std::vector<double> gs(kGroupFeatures, 0), gss(kGroupFeatures, 0);
  double nodes = 0;
  for (const FeatureGraph& f : graphs) {
    for (int i = 0; i < f.num_nodes; ++i) {
      for (int k = 0; k < kNodeFeatures; ++k) {
        const double v = f.nodes[static_cast<size_t>(i) * kNodeFeatures + k];
        ns[k] += v;
        nss[k] += v * v;
      }
    }
    nodes += f.num_nodes;
    for (int k = 0; k < kGroupFeatures; ++k) {
      gs[k] += f.group[k];
      gss[k] += static_cast<double>(f.group[k]) * f.group[k];
    }
  }
  const double groups = static_cast<double>(graphs.size());
  auto finish = [](const std::vector<double>& s, const std::vector<double>& ss, double count,
                   std::vector<float>* mean, std::vector<float>* sd) {
    for (size_t k = 0; k < s.size(); ++k) {
      const double m = count > 0 ? s[k] / count : 0.0;
      const double var = count > 0 ? std::max(0.0, ss[k] / count - m * m) : 0.0;
      const double d = std::sqrt(var);
      mean->push_back(static_cast<float>(m));
      sd->push_back(d < 1e-6 ? 1.0f : static_cast<float>(d));
    }
  };
  FeatureStats st;
  finish(ns, nss, nodes, &st.node_mean, &st.node_std);
  finish(gs, gss, groups, &st.group_mean, &st.group_std);
  return st;
}

}  // namespace braid::costmodel::gnn
