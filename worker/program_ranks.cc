#include "worker/program_ranks.h"

#include <fstream>

#include "absl/strings/str_cat.h"
#include "base/bounded_json.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"
#include "worker/rank_processes.h"

namespace braid::worker {

absl::StatusOr<ProgramRun> TrainProgramOnRanks(const graph::Program& p,
                                               const ProgramRunOptions& o) {
  ASSIGN_OR_RETURN(std::string bin, FindRankProgram(o.rank_binary, "braid-rank", "BRAID_RANK", o.what));
  ASSIGN_OR_RETURN(RankDir dir, RankDir::Create("braid-program"));
  const std::string prog = dir.path() + "/program.json";
  {
    std::ofstream f(prog);
    f << graph::ProgramToJson(p).dump();
    if (!f) return absl::PermissionDeniedError(absl::StrCat("cannot write ", prog));
  }
  std::vector<std::vector<std::string>> argv;
  for (int r = 0; r < p.World(); ++r) {
    argv.push_back({bin, "--program", prog, "--rank", absl::StrCat(r), "--store",
                    dir.path() + "/store", "--steps", absl::StrCat(o.steps), "--out",
                    absl::StrCat(dir.path(), "/rank", r, ".json"), "--checkpoint-out",
                    dir.path() + "/checkpoint.bin"});
    if (!o.dropout) argv.back().push_back("--no-dropout");
    if (o.float64) argv.back().push_back("--float64");
    if (o.pin_cores) argv.back().push_back("--pin-cores");
    if (o.clock_ops) {
      argv.back().insert(argv.back().end(), {"--clock-ops", "--warmup", absl::StrCat(o.warmup)});
    }
  }
  RETURN_IF_ERROR(RunRanks(argv, dir, o.timeout_s, o.what));
  ProgramRun out;
  for (int r = 0; r < p.World(); ++r) {
    ASSIGN_OR_RETURN(nlohmann::json res,
                     base::ReadBoundedJsonFile(absl::StrCat(dir.path(), "/rank", r, ".json")));
    try {
      out.peak_bytes.push_back(res.value("peak_bytes", int64_t{0}));
      if (o.clock_ops) {
        std::vector<ProgramOpClock> clocks;
        for (const auto& c : res.at("op_seconds")) {
          clocks.push_back({c.at("op").get<std::string>(), c.at("type").get<std::string>(),
                            c.at("median_s").get<double>(), c.at("min_s").get<double>()});
        }
        out.op_clocks.push_back(std::move(clocks));
      }
      if (r != 0) continue;
      for (const auto& st : res.at("steps")) {
        out.losses.push_back(st.at("loss").get<double>());
        out.step_s.push_back(st.at("seconds").get<double>());
        out.collectives.push_back(st.value("collectives", 0));
        out.groups_fused.push_back(st.value("groups_fused", 0));
        out.groups_unfused.push_back(st.value("groups_unfused", 0));
      }
      if (res.contains("unfused_groups")) {
        out.unfused_why = res["unfused_groups"].get<std::map<std::string, std::string>>();
      }
    } catch (const nlohmann::json::exception& e) {
      return absl::InternalError(absl::StrCat("rank ", r, "'s result: ", e.what()));
    }
  }
  ASSIGN_OR_RETURN(out.checkpoint, runtime::ReadCheckpoint(dir.path() + "/checkpoint.bin"));
  return out;
}

}  // namespace braid::worker
