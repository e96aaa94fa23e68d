#include "graph/fingerprint.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <type_traits>

#include "base/status_macros.h"
#include "xxhash.h"

namespace braid::graph {
namespace {

// Accumulates bytes into an XXH3 state; every field is length- or
// tag-prefixed so concatenations cannot collide by shifting boundaries.
class Hasher {
 public:
  Hasher() : state_(XXH3_createState()) { XXH3_64bits_reset(state_); }
  ~Hasher() { XXH3_freeState(state_); }
  Hasher(const Hasher&) = delete;
  Hasher& operator=(const Hasher&) = delete;

  template <typename T>
  void Pod(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    XXH3_64bits_update(state_, &v, sizeof(v));
  }
  void Str(std::string_view s) {
    Pod(static_cast<uint64_t>(s.size()));
    XXH3_64bits_update(state_, s.data(), s.size());
  }
  template <typename T>
  void Vec(const std::vector<T>& v) {
    Pod(static_cast<uint64_t>(v.size()));
    for (const T& x : v) Pod(x);
  }
  uint64_t Digest() const { return XXH3_64bits_digest(state_); }

 private:
  XXH3_state_t* state_;
};

void HashAttr(Hasher& h, const AttrValue& v) {
  h.Pod(static_cast<uint8_t>(v.index()));
  std::visit(
      [&h](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::string>) {
          h.Str(x);
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>> ||
                             std::is_same_v<T, std::vector<double>>) {
          h.Vec(x);
        } else {
          h.Pod(x);
        }
      },
      v);
}

void HashTensorType(Hasher& h, const Tensor& t) {
  h.Pod(static_cast<uint8_t>(t.dtype));
  h.Pod(static_cast<uint8_t>(t.role));
  h.Vec(t.shape);
}

}  // namespace

absl::StatusOr<uint64_t> Fingerprint(const Graph& g) {
  ASSIGN_OR_RETURN(auto order, g.TopologicalOrder());
  // Source tensors hash by type only; produced tensors by producer and slot.
  std::vector<uint64_t> th(g.num_tensors());
  for (TensorId t = 0; t < g.num_tensors(); ++t) {
    const Tensor& ten = g.tensor(t);
    if (ten.producer != kNoId) continue;
    Hasher h;
    h.Pod(uint8_t{1});
    HashTensorType(h, ten);
    th[t] = h.Digest();
  }
  std::vector<uint64_t> op_hashes;
  op_hashes.reserve(g.num_ops());
  for (OpId id : order) {
    const Op& op = g.op(id);
    Hasher h;
    h.Pod(uint8_t{2});
    h.Str(op.type);
    h.Pod(static_cast<uint8_t>(op.phase));
    h.Pod(op.opaque);
    h.Pod(static_cast<uint64_t>(op.attrs.size()));
    for (const auto& [k, v] : op.attrs) {  // std::map: sorted by key
      h.Str(k);
      HashAttr(h, v);
    }
    h.Pod(static_cast<uint64_t>(op.inputs.size()));
    for (TensorId t : op.inputs) h.Pod(th[t]);
    h.Pod(static_cast<uint64_t>(op.outputs.size()));
    const uint64_t oh = h.Digest();
    op_hashes.push_back(oh);
    for (size_t i = 0; i < op.outputs.size(); ++i) {
      Hasher o;
      o.Pod(uint8_t{3});
      o.Pod(oh);
      o.Pod(static_cast<uint64_t>(i));
      HashTensorType(o, g.tensor(op.outputs[i]));
      th[op.outputs[i]] = o.Digest();
    }
  }
  // Gradients also say which parameter they belong to.
  std::vector<uint64_t> links;
  for (const Tensor& t : g.tensors()) {
    if (t.grad_of == kNoId) continue;
    links.push_back(XXH3_64bits_withSeed(&th[t.grad_of], sizeof(uint64_t), th[&t - &g.tensors()[0]]));
  }
  std::sort(op_hashes.begin(), op_hashes.end());
  std::sort(links.begin(), links.end());
  Hasher h;
  h.Pod(uint8_t{4});
  h.Vec(op_hashes);
  h.Vec(links);
  std::vector<uint64_t> outs;
  for (TensorId t : g.outputs()) outs.push_back(th[t]);
  h.Vec(outs);
  // Unused source tensors (inputs nobody reads) still distinguish graphs.
  std::vector<uint64_t> sources;
  for (TensorId t = 0; t < g.num_tensors(); ++t) {
    if (g.tensor(t).producer == kNoId) sources.push_back(th[t]);
  }
  std::sort(sources.begin(), sources.end());
  h.Vec(sources);
  return h.Digest();
}

absl::StatusOr<std::string> FingerprintHex(const Graph& g) {
  ASSIGN_OR_RETURN(auto fp, Fingerprint(g));
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(fp));
  return std::string(buf);
}

}  // namespace braid::graph
