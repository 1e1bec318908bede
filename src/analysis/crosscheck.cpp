// The index against the estimate (analysis.h cross_check_index): model.safetensors.index.json
// states the checkpoint's bytes (metadata.total_size) and every tensor's name before anything
// is downloaded; a difference from what the config predicts is a register line, never silent.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "analysis/analysis.h"

namespace dayzero::analysis {
namespace {

// Bytes over which the index and the estimate are said to disagree (2 %).
constexpr double kIndexTolerance = 0.02;
// Register lines of one kind before "and N more".
constexpr size_t kMaxGroupLines = 8;

std::string grouped(uint64_t v) { return model::grouped_count(static_cast<int64_t>(v)); }

std::string percent(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%+.1f %%", 100.0 * x);
  return b;
}

// The same module under the prefixes checkpoints put before it (llava's language_model.).
std::string normalized(std::string t) {
  for (const char* p : {"model.language_model.", "language_model.model.", "language_model."})
    if (t.rfind(p, 0) == 0) return (std::string(p) == "language_model." ? "" : "model.") + t.substr(std::string(p).size());
  return t;
}

}  // namespace

void cross_check_index(Analysis& a, const nlohmann::json& config, const FolderCode* code) {
  auto est = analyze(config, {}, Source::kConfig, code);
  if (a.index_total_size > 0) {
    const double total = static_cast<double>(a.index_total_size);
    const double ours = static_cast<double>(a.weight_bytes);
    if (a.weight_bytes == 0 || std::fabs(total - ours) > kIndexTolerance * ours)
      a.risks.push_back("model.safetensors.index.json metadata.total_size " + grouped(a.index_total_size) +
                        " bytes; the index's names with the config's shapes give " + grouped(a.weight_bytes) + " bytes (" +
                        percent(a.weight_bytes ? total / ours - 1.0 : 1.0) + ")");
    if (est.ok() && est->weight_bytes > 0 &&
        std::fabs(static_cast<double>(est->weight_bytes) - ours) > kIndexTolerance * static_cast<double>(est->weight_bytes))
      a.risks.push_back("the config estimate alone gives " + grouped(est->weight_bytes) + " bytes, the index's names " +
                        grouped(a.weight_bytes) + " (metadata.total_size " + grouped(a.index_total_size) + ")");
  }
  if (!est.ok()) {
    a.risks.push_back("the config estimate could not be made to compare with the index: " + est.status().message());
    return;
  }
  // Tensor names: groups no rule explains, and parts whose count from the index's names differs
  // from the estimate's (a group the estimate lacks, or lacks a group it has). Checkpoints name
  // the same tensors differently (Mixtral's block_sparse_moe.w1 is mlp.experts.gate_proj), so
  // parts are compared, and the groups behind a difference named.
  std::set<std::string> est_templates;
  for (const Group& g : est->groups) est_templates.insert(normalized(g.tmpl));
  size_t lines = 0, more = 0;
  const auto add = [&](const std::string& line) {
    if (lines++ < kMaxGroupLines) a.risks.push_back(line);
    else ++more;
  };
  for (const Group& g : a.groups)
    if (g.component == model::Component::kUnknown)
      add("tensor group " + g.tmpl + " (" + std::to_string(g.tensors) + " tensors) is in the index; no rule explains it");
  std::set<std::string> parts;
  for (const auto& [p, n] : a.parts) parts.insert(p);
  for (const auto& [p, n] : est->parts) parts.insert(p);
  for (const std::string& p : parts) {
    if (p == "unknown") continue;
    const int64_t ours = a.parts.count(p) ? a.parts.at(p) : 0, theirs = est->parts.count(p) ? est->parts.at(p) : 0;
    if (std::fabs(static_cast<double>(ours - theirs)) <= kIndexTolerance * static_cast<double>(std::max(ours, theirs))) continue;
    std::string groups;
    for (const Group& g : a.groups)
      if (g.part == p && !est_templates.count(normalized(g.tmpl))) groups += (groups.empty() ? "" : ", ") + g.tmpl;
    add(p + ": the index's names give " + model::grouped_count(ours) + " parameters, the config estimate " +
        model::grouped_count(theirs) + " (" + percent(theirs ? static_cast<double>(ours) / static_cast<double>(theirs) - 1.0 : 1.0) +
        ")" + (groups.empty() ? std::string() : "; groups the estimate does not have: " + groups));
  }
  if (more > 0) a.risks.push_back("and " + std::to_string(more) + " more differences between the index and the estimate");
}

}  // namespace dayzero::analysis
