// The Day-0 checklist at the end of a run: each rank's figures (peak memory against the plan's
// cap, the slices it loaded, its prompts' first-token latencies, repetitions and expects),
// evaluated by rank 0 into checklist.json and the printed lines (diag/checklist.h); and the
// record a run that stopped at a phase leaves in the same file. Not the evaluation itself.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "core/json.h"
#include "diag/checklist.h"
#include "runtime/run/run.h"

namespace dayzero::runtime {
namespace fs = std::filesystem;
namespace {

void write_record(const std::string& run_dir, const nlohmann::ordered_json& j) {
  const fs::path path = fs::path(run_dir) / diag::kChecklistFileName;
  const fs::path tmp = path.string() + ".tmp";
  std::ofstream f(tmp, std::ios::binary);
  f << j.dump(2) << "\n";
  f.close();
  std::error_code ec;
  if (f) fs::rename(tmp, path, ec);
  if (!f || ec) std::cerr << "dayzero: error: cannot write " << path.string() << std::endl;
}

}  // namespace

std::string Run::checklist_figures() const {
  int64_t nan = 0, inf = 0;
  for (const auto& r : records_) nan += r.nan_count, inf += r.inf_count;
  nlohmann::json prompts = nlohmann::json::array();
  for (const PromptRun& pr : prompts_) {
    // Each prompt once, from its output owner; a replay has no first token to time.
    if (!writes_outputs_ || replay_layers_) continue;
    prompts.push_back({{"id", pr.prompt->id},
                       {"image", !pr.images.empty()},
                       {"first_token_s", pr.gen.prefill_seconds},
                       {"has_expect", !pr.prompt->expect.empty()},
                       {"failed_expect", pr.failed_expect},
                       {"repeat_diff", pr.repeat_diff}});
  }
  nlohmann::json j = {{"rank", env_.rank()},
                            {"host", env_.hostname()},
                            {"peak_bytes", be_->memory_info().peak_bytes},
                            {"device_bytes", device_memory_bytes_},
                            {"cap_bytes", plan_.memory_cap_bytes},
                            {"slices", static_cast<int64_t>(records_.size())},
                            {"bytes_read", static_cast<int64_t>(load_stats_.bytes_read)},
                            {"nan", nan},
                            {"inf", inf},
                            {"prompts", prompts}};
  if (writes_activations_ && model_.hp.n_expert > 0) {
    // This stage's worst expert and ep-rank imbalance and its hottest expert.
    const nlohmann::json load = expert_load_report();
    double expert = 0, rank = 0;
    for (const auto& l : load["layers"]) {
      expert = std::max(expert, l["expert_max_over_mean"].get<double>());
      rank = std::max(rank, l["ep_rank_max_over_mean"].get<double>());
    }
    j["expert_load"] = {{"expert_max_over_mean", expert}, {"ep_rank_max_over_mean", rank},
                        {"hot", load["hot_experts"].empty() ? nlohmann::json() : load["hot_experts"][0]}};
  }
  return j.dump();
}

Status Run::report_checklist(const std::vector<std::string>& figures) const {
  diag::ChecklistInputs in;
  in.tensors_total = tensors_needed_;
  in.tensors_claimed = tensors_claimed_;
  if (replay_layers_)
    in.weights_scope = "layers " + std::to_string(replay_layers_->first) + ".." +
                       std::to_string(replay_layers_->second - 1) + " of a replay";
  in.repeat = args_.repeat;
  in.first_token_text_s = cfg_.checklist.first_token_text_s;
  in.first_token_image_s = cfg_.checklist.first_token_image_s;
  in.memory_fraction = memory_fraction_;
  for (const std::string& text : figures) {
    auto parsed = parse_json_limited(text, "the checklist figures of a rank");
    if (!parsed.ok()) return parsed.status();
    const nlohmann::json& j = *parsed;
    diag::ChecklistRank r;
    r.rank = j.at("rank").get<int>();
    r.host = j.at("host").get<std::string>();
    r.peak_bytes = j.at("peak_bytes").get<int64_t>();
    r.device_bytes = j.at("device_bytes").get<int64_t>();
    r.cap_bytes = j.at("cap_bytes").get<int64_t>();
    r.slices = j.at("slices").get<int64_t>();
    r.bytes_read = j.at("bytes_read").get<int64_t>();
    r.nan = j.at("nan").get<int64_t>();
    r.inf = j.at("inf").get<int64_t>();
    in.ranks.push_back(r);
    if (j.contains("expert_load")) {
      const auto& e = j.at("expert_load");
      diag::ExpertLoad& x = in.expert_load.emplace_back();
      x.rank = r.rank;
      x.expert_max_over_mean = e.at("expert_max_over_mean").get<double>();
      x.ep_rank_max_over_mean = e.at("ep_rank_max_over_mean").get<double>();
      if (!e.at("hot").is_null()) {
        x.hot_layer = e.at("hot").at("layer").get<int>();
        x.hot_expert = e.at("hot").at("expert").get<int>();
        x.hot_tokens = e.at("hot").at("tokens").get<int64_t>();
        x.hot_rank = e.at("hot").at("rank").get<int>();
      }
    }
    for (const auto& p : j.at("prompts"))
      in.prompts.push_back({p.at("id").get<std::string>(), p.at("image").get<bool>(), p.at("first_token_s").get<double>(),
                            p.at("has_expect").get<bool>(), p.at("failed_expect").get<std::string>(),
                            p.at("repeat_diff").get<std::string>()});
  }
  // In config order, not in the order the replicas ran them.
  std::vector<diag::ChecklistPrompt> ordered;
  for (const config::Prompt& p : cfg_.prompts)
    for (const auto& cp : in.prompts)
      if (cp.id == p.id) ordered.push_back(cp);
  in.prompts = std::move(ordered);
  const diag::Checklist c = diag::evaluate_checklist(in);
  std::cout << diag::format_checklist(c) << std::flush;
  std::string failed;
  for (const auto& p : in.prompts)
    if (!p.failed_expect.empty()) failed += (failed.empty() ? "" : "; ") + ("prompt '" + p.id + "': " + p.failed_expect);
  for (const auto& l : c.lines)
    if (l.status == diag::CheckStatus::kFail && l.key != "expect")
      failed += (failed.empty() ? "" : "; ") + ("checklist: " + l.title + " failed: " + l.detail);
  write_record(run_dir_, diag::checklist_to_json(c, failed.empty() ? 0 : 1, args_.repeat));
  return failed.empty() ? Status::Ok() : Status::CheckFailed(failed);
}

void Run::record_failed_run(const Status& s, const std::string& phase) const {
  write_record(run_dir_, diag::failed_run_json(s.exit_code(), phase, s.message()));
}

}  // namespace dayzero::runtime
