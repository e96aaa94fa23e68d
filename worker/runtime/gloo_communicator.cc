// The CPU backend's communicator: c10d ProcessGroupGloo, one process group
// per distinct group of ranks the program's collectives use.
#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "worker/runtime/cpu_backend.h"
#include "worker/runtime/cpu_tensor.h"
#include "worker/runtime/gloo_group.h"

namespace braid::runtime {
namespace {


class GlooPending : public Pending {
 public:
  GlooPending(c10::intrusive_ptr<c10d::Work> work, std::function<at::Tensor()> finish)
      : work_(std::move(work)), finish_(std::move(finish)) {}
  absl::StatusOr<Value> Wait() override {
    try {
      work_->wait();
      return WrapTensor(finish_());
    } catch (const std::exception& e) {
      return absl::UnavailableError(absl::StrCat("collective failed: ", e.what()));
    }
  }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  std::function<at::Tensor()> finish_;
};

class GlooCommunicator : public Communicator {
 public:
  GlooCommunicator(int rank, int world) : rank_(rank), world_(world) {}

  absl::Status Make(const graph::Program& p, const std::string& store_path,
                    const std::string& hostname, double timeout_s) {
    const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
    store_ = c10::make_intrusive<c10d::FileStore>(store_path, world_);
    std::vector<std::vector<int>> wanted;
    std::vector<int> all(world_);
    for (int r = 0; r < world_; ++r) all[r] = r;
    wanted.push_back(all);
    for (const graph::Op& op : p.graph.ops()) {
      if (graph::CategoryOf(op.kind) != graph::OpCategory::kCollective) continue;
      const std::vector<int64_t> a64 = op.GetInts("mesh_axes");
      wanted.push_back(graph::GroupRanks(p.mesh, rank_, std::vector<int>(a64.begin(), a64.end())));
    }
    try {
      for (const std::vector<int>& g : wanted) {
        if (g.size() <= 1 || groups_.contains(g)) continue;
        const int me = static_cast<int>(std::find(g.begin(), g.end(), rank_) - g.begin());
        auto prefixed = c10::make_intrusive<c10d::PrefixStore>(
            absl::StrCat("group:", absl::StrJoin(g, ","), "/"), store_);
        groups_[g] = MakeGlooGroup(prefixed, me, static_cast<int>(g.size()), hostname, timeout);
      }
    } catch (const std::exception& e) {
      return absl::UnavailableError(absl::StrCat("rank ", rank_, ": making the Gloo groups: ", e.what()));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<Pending>> Start(const graph::Op& op, const std::vector<int>& group,
                                                 const Value& input) override {
    const at::Tensor& x = TensorOf(input);
    if (group.size() <= 1) return std::unique_ptr<Pending>(new ReadyPending(input));
    auto it = groups_.find(group);
    if (it == groups_.end()) return absl::InternalError("a collective's group was not made");
    c10d::ProcessGroupGloo& pg = *it->second;
    try {
      switch (op.kind) {
        case graph::OpKind::kAllReduce: {
          // Values are immutable: reduce into a copy, unless nothing else
          // holds this one (a gradient bucket's fresh buffer).
          const bool owned = input.use_count() == 1 && x.is_contiguous() &&
                             x.storage().use_count() == 1 && x.storage_offset() == 0;
          std::vector<at::Tensor> buf = {owned ? x : x.clone()};
          auto work = pg.allreduce(buf);
          return std::unique_ptr<Pending>(new GlooPending(work, [buf] { return buf[0]; }));
        }
        case graph::OpKind::kAllGather: {
          const int64_t dim = op.GetInt("dim", 0);
          std::vector<at::Tensor> in = {x.contiguous()};
          std::vector<std::vector<at::Tensor>> out(1);
          for (size_t i = 0; i < group.size(); ++i) out[0].push_back(at::empty_like(in[0]));
          auto work = pg.allgather(out, in);
          return std::unique_ptr<Pending>(
              new GlooPending(work, [out, dim] { return at::cat(out[0], dim).contiguous(); }));
        }
        case graph::OpKind::kReduceScatter: {
          const int64_t dim = op.GetInt("dim", 0);
          return std::unique_ptr<Pending>(
              new ReadyPending(WrapTensor(GlooReduceScatter(pg, x, dim, false))));
        }
        default:
          return absl::UnimplementedError(absl::StrCat("collective ", op.type));
      }
    } catch (const std::exception& e) {
      return absl::UnavailableError(absl::StrCat(op.type, " ", op.name, ": ", e.what()));
    }
  }

  absl::StatusOr<std::vector<HostTensor>> AllGatherHost(const HostTensor& v) override {
    std::vector<HostTensor> out(world_);
    if (world_ == 1) {
      out[0] = v;
      return out;
    }
    std::vector<int> all(world_);
    for (int r = 0; r < world_; ++r) all[r] = r;
    c10d::ProcessGroupGloo& pg = *groups_.at(all);
    at::Tensor t = at::from_blob(const_cast<float*>(v.data.data()), {static_cast<int64_t>(v.data.size())},
                                 at::TensorOptions().dtype(at::kFloat)).clone();
    std::vector<at::Tensor> in = {t};
    std::vector<std::vector<at::Tensor>> got(1);
    for (int r = 0; r < world_; ++r) got[0].push_back(at::empty_like(t));
    try {
      pg.allgather(got, in)->wait();
    } catch (const std::exception& e) {
      return absl::UnavailableError(absl::StrCat("gathering parameters: ", e.what()));
    }
    for (int r = 0; r < world_; ++r) {
      out[r].shape = v.shape;
      out[r].data.assign(got[0][r].data_ptr<float>(), got[0][r].data_ptr<float>() + t.numel());
    }
    return out;
  }

 private:
  int rank_, world_;
  c10::intrusive_ptr<c10d::Store> store_;
  std::map<std::vector<int>, c10::intrusive_ptr<c10d::ProcessGroupGloo>> groups_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> MakeGlooCommunicator(const graph::Program& program,
                                                                   int rank,
                                                                   const std::string& store_path,
                                                                   const std::string& hostname,
                                                                   double timeout_s) {
  auto c = std::make_unique<GlooCommunicator>(rank, program.World());
  RETURN_IF_ERROR(c->Make(program, store_path, hostname, timeout_s));
  return std::unique_ptr<Communicator>(std::move(c));
}

}  // namespace braid::runtime
