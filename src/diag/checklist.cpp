// The Day-0 checklist (checklist.h): evaluation of the gathered figures, the printed lines and
// checklist.json.
#include "diag/checklist.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>

#include "core/json.h"
#include "core/strings.h"

namespace dayzero::diag {
namespace {

std::string mib(int64_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

std::string seconds(double s) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3g s", s);
  return buf;
}

ChecklistLine weights_line(const ChecklistInputs& in) {
  ChecklistLine l{"weights", "weights loaded completely", CheckStatus::kPass, ""};
  int64_t slices = 0, bytes = 0, nan = 0, inf = 0;
  std::vector<std::string> bad;
  for (const ChecklistRank& r : in.ranks) {
    slices += r.slices, bytes += r.bytes_read, nan += r.nan, inf += r.inf;
    if (r.nan || r.inf)
      bad.push_back("rank " + std::to_string(r.rank) + " (" + std::to_string(r.nan) + " NaN, " + std::to_string(r.inf) +
                    " Inf)");
  }
  l.detail = std::to_string(in.tensors_claimed) + " of " + std::to_string(in.tensors_total) + " tensors claimed" +
             (in.weights_scope.empty() ? "" : " (" + in.weights_scope + ")") + ", " + std::to_string(slices) +
             " slices (" + mib(bytes) + ") read and checked against the plan, " + std::to_string(nan) + " NaN, " +
             std::to_string(inf) + " Inf";
  if (in.tensors_claimed != in.tensors_total || nan || inf || in.ranks.empty()) l.status = CheckStatus::kFail;
  if (!bad.empty()) l.detail += ": " + join_list(bad, 10);
  return l;
}

ChecklistLine memory_line(const ChecklistInputs& in) {
  char title[96];
  std::snprintf(title, sizeof title, "peak memory per rank under memory_fraction %.3g of the device", in.memory_fraction);
  ChecklistLine l{"peak_memory", title, CheckStatus::kNotRun, "no rank reported its memory"};
  const ChecklistRank* worst = nullptr;
  double worst_share = -1;
  for (const ChecklistRank& r : in.ranks) {
    const double share = r.cap_bytes > 0 ? static_cast<double>(r.peak_bytes) / static_cast<double>(r.cap_bytes)
                                         : std::numeric_limits<double>::infinity();
    if (share > worst_share) worst_share = share, worst = &r;
  }
  if (!worst) return l;
  l.status = worst->peak_bytes <= worst->cap_bytes ? CheckStatus::kPass : CheckStatus::kFail;
  char share[32];
  std::snprintf(share, sizeof share, "%.0f%%", worst_share * 100);
  l.detail = "worst rank " + std::to_string(worst->rank) + " (" + worst->host + ") peaked at " + mib(worst->peak_bytes) +
             ", " + share + " of its cap " + mib(worst->cap_bytes) + " (device " + mib(worst->device_bytes) + ")";
  return l;
}

ChecklistLine latency_line(const ChecklistInputs& in, bool image) {
  ChecklistLine l{image ? "first_token_image" : "first_token_text", "", CheckStatus::kNotRun, ""};
  const double limit = image ? in.first_token_image_s : in.first_token_text_s;
  l.title = std::string("first-token latency of ") + (image ? "image" : "text") + " prompts under " + seconds(limit);
  const ChecklistPrompt* worst = nullptr;
  std::vector<std::string> over;
  int n = 0;
  for (const ChecklistPrompt& p : in.prompts) {
    if (p.image != image) continue;
    ++n;
    if (!worst || p.first_token_s > worst->first_token_s) worst = &p;
    if (!(p.first_token_s <= limit)) over.push_back("'" + p.id + "' " + seconds(p.first_token_s));
  }
  if (!worst) {
    l.detail = std::string("no ") + (image ? "image" : "text") + " prompt";
    return l;
  }
  l.status = over.empty() ? CheckStatus::kPass : CheckStatus::kFail;
  l.detail = std::to_string(n) + " prompt(s), slowest '" + worst->id + "' " + seconds(worst->first_token_s);
  if (!over.empty()) l.detail += "; over the limit: " + join_list(over, 10);
  return l;
}

ChecklistLine image_line(const ChecklistInputs& in) {
  ChecklistLine l{"image_prompts", "image+text prompts ran without a memory failure", CheckStatus::kNotRun,
                  "no image prompt"};
  std::vector<std::string> ids;
  for (const ChecklistPrompt& p : in.prompts)
    if (p.image) ids.push_back("'" + p.id + "'");
  if (ids.empty()) return l;
  // A memory failure stops the run (exit 3) before the checklist: reaching it means they ran.
  l.status = CheckStatus::kPass;
  l.detail = std::to_string(ids.size()) + " ran to their last token: " + join_list(ids, 10);
  return l;
}

ChecklistLine repeat_line(const ChecklistInputs& in) {
  ChecklistLine l{"repeat", "repeated runs give identical outputs", CheckStatus::kNotRun,
                  "run with --repeat N (N >= 2) to check it"};
  if (in.repeat < 2) return l;
  std::vector<std::string> differ;
  for (const ChecklistPrompt& p : in.prompts)
    if (!p.repeat_diff.empty()) differ.push_back("'" + p.id + "' " + p.repeat_diff);
  l.status = differ.empty() ? CheckStatus::kPass : CheckStatus::kFail;
  l.detail = differ.empty() ? std::to_string(in.prompts.size()) + " prompt(s) x " + std::to_string(in.repeat) +
                                  " repetitions: generated ids, logits_last and step top-k bitwise identical"
                            : std::to_string(differ.size()) + " of " + std::to_string(in.prompts.size()) +
                                  " prompt(s) differ: " + join_list(differ, 5);
  return l;
}

ChecklistLine expect_line(const ChecklistInputs& in) {
  ChecklistLine l{"expect", "prompts' expectations hold", CheckStatus::kNotRun, "no prompt has an expect"};
  int n = 0;
  std::vector<std::string> failed;
  for (const ChecklistPrompt& p : in.prompts) {
    if (!p.has_expect) continue;
    ++n;
    if (!p.failed_expect.empty()) failed.push_back("'" + p.id + "': " + p.failed_expect);
  }
  if (!n) return l;
  l.status = failed.empty() ? CheckStatus::kPass : CheckStatus::kFail;
  l.detail = failed.empty() ? std::to_string(n) + " prompt(s) checked" : join_list(failed, 5);
  return l;
}

}  // namespace

const char* check_status_name(CheckStatus s) {
  switch (s) {
    case CheckStatus::kPass: return "pass";
    case CheckStatus::kFail: return "fail";
    case CheckStatus::kNotRun: return "not run";
    case CheckStatus::kInfo: return "info";
  }
  return "?";
}

bool Checklist::pass() const {
  return std::none_of(lines.begin(), lines.end(), [](const ChecklistLine& l) { return l.status == CheckStatus::kFail; });
}

Checklist evaluate_checklist(const ChecklistInputs& in) {
  Checklist c;
  c.lines = {weights_line(in),       memory_line(in),    latency_line(in, false), latency_line(in, true),
             image_line(in),         repeat_line(in),    expect_line(in)};
  if (!in.expert_load.empty()) {
    const ExpertLoad* worst = &in.expert_load.front();
    double ranks = 0;
    for (const ExpertLoad& e : in.expert_load) {
      if (e.expert_max_over_mean > worst->expert_max_over_mean) worst = &e;
      ranks = std::max(ranks, e.ep_rank_max_over_mean);
    }
    char detail[256];
    std::snprintf(detail, sizeof detail,
                  "tokens per expert max/mean <= %.2f, per ep rank <= %.2f; hottest: layer %d expert %d, %lld tokens, "
                  "on rank %d",
                  worst->expert_max_over_mean, ranks, worst->hot_layer, worst->hot_expert,
                  static_cast<long long>(worst->hot_tokens), worst->hot_rank);
    c.lines.push_back({"expert_load", "expert load (information)", CheckStatus::kInfo, detail});
  }
  return c;
}

std::string format_checklist(const Checklist& c) {
  std::string s = "\nDay-0 checklist:\n";
  for (const ChecklistLine& l : c.lines) {
    char tag[16];
    std::snprintf(tag, sizeof tag, "  %-9s", l.status == CheckStatus::kPass   ? "PASS"
                                              : l.status == CheckStatus::kFail ? "FAIL"
                                              : l.status == CheckStatus::kInfo ? "info"
                                                                               : "not run");
    s += tag + l.title + ": " + l.detail + "\n";
  }
  s += c.pass() ? "checklist: PASS\n" : "checklist: FAIL\n";
  return s;
}

nlohmann::ordered_json checklist_to_json(const Checklist& c, int exit_code, int repeat) {
  nlohmann::ordered_json lines = nlohmann::ordered_json::array();
  for (const ChecklistLine& l : c.lines)
    lines.push_back({{"key", l.key}, {"title", l.title}, {"status", check_status_name(l.status)}, {"detail", l.detail}});
  return {{"schema_version", kChecklistSchemaVersion}, {"complete", true}, {"exit_code", exit_code},
          {"pass", c.pass()}, {"repeat", repeat}, {"lines", lines}};
}

nlohmann::ordered_json failed_run_json(int exit_code, const std::string& phase, const std::string& error) {
  return {{"schema_version", kChecklistSchemaVersion}, {"complete", false}, {"exit_code", exit_code},
          {"pass", false}, {"failed_phase", phase}, {"error", error}, {"lines", nlohmann::ordered_json::array()}};
}

std::string repeat_difference(const RepeatOutputs& a, const RepeatOutputs& b, int repetition) {
  const std::string rep = "repetition " + std::to_string(repetition) + ": ";
  const size_t n = std::min(a.generated_ids.size(), b.generated_ids.size());
  for (size_t i = 0; i < n; ++i)
    if (a.generated_ids[i] != b.generated_ids[i])
      return rep + "generated token " + std::to_string(i) + " is " + std::to_string(b.generated_ids[i]) + ", not " +
             std::to_string(a.generated_ids[i]);
  if (a.generated_ids.size() != b.generated_ids.size())
    return rep + std::to_string(b.generated_ids.size()) + " generated tokens, not " +
           std::to_string(a.generated_ids.size());
  const auto bits_differ = [](std::span<const float> x, std::span<const float> y, size_t* at) {
    if (x.size() != y.size()) return *at = std::min(x.size(), y.size()), true;
    for (size_t i = 0; i < x.size(); ++i)
      if (std::memcmp(&x[i], &y[i], sizeof(float)) != 0) return *at = i, true;
    return false;
  };
  size_t at = 0;
  if (bits_differ(a.logits_last, b.logits_last, &at)) {
    char buf[160];
    const double va = at < a.logits_last.size() ? a.logits_last[at] : NAN, vb = at < b.logits_last.size() ? b.logits_last[at] : NAN;
    std::snprintf(buf, sizeof buf, "logits_last[%zu] is %.9g, not %.9g", at, vb, va);
    return rep + buf;
  }
  if (!std::equal(a.step_topk_ids.begin(), a.step_topk_ids.end(), b.step_topk_ids.begin(), b.step_topk_ids.end()))
    return rep + "the step top-k ids differ";
  if (bits_differ(a.step_topk_logits, b.step_topk_logits, &at))
    return rep + "step top-k logit " + std::to_string(at) + " differs";
  return "";
}

Result<nlohmann::json> read_checklist(const std::string& run_dir) {
  const std::string path = (std::filesystem::path(run_dir) / kChecklistFileName).string();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return Status::NotFound(path + ": no such file");
  DZ_ASSIGN_OR_RETURN(nlohmann::json j, read_json_file(path));
  if (!j.is_object() || !j.contains("exit_code") || !j["exit_code"].is_number_integer() || !j.contains("complete") ||
      !j["complete"].is_boolean())
    return Status::InvalidArgument(path + ": not a checklist record (needs exit_code and complete)");
  return j;
}

}  // namespace dayzero::diag
