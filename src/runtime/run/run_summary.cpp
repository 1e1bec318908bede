// The end of a run: the summary, expert-load and timeline written to this rank's file before it
// is marked complete, and the text each rank prints (rank 0 prints them all in rank order).
// Not the agreement on expects (run.cpp).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/run/run.h"

namespace dayzero::runtime {

std::string join_ids(const std::vector<int32_t>& ids) {
  std::ostringstream os;
  for (size_t i = 0; i < ids.size(); ++i) os << (i ? " " : "") << ids[i];
  return os.str();
}

Status Run::finish() {
  if (!writer_) return Status::Ok();
  const auto mem = be_->memory_info();
  nlohmann::json summary = {{"load_seconds", load_stats_.seconds},
                            {"load_bytes", load_stats_.bytes_read},
                            {"peak_memory_bytes", mem.peak_bytes},
                            {"peak_kv_cache_bytes", peak_kv_cache_bytes_},
                            {"weight_bytes", be_->name() == "cpu" ? device_weight_bytes_ : mem.weight_bytes},
                            {"max_batch", cfg_.generate.max_batch},
                            {"gemm", be_->describe()},
                            {"backend", be_->name()},
                            {"comm", comm_choice_}};
  DZ_RETURN_IF_ERROR(writer_->set_attribute("summary", summary.dump()));
  if (writes_activations_ && model_.hp.n_expert > 0)
    DZ_RETURN_IF_ERROR(writer_->set_attribute("expert_load", expert_load_report().dump()));
  DZ_RETURN_IF_ERROR(writer_->write_timeline(timeline_.snapshot()));
  DZ_RETURN_IF_ERROR(writer_->mark_complete());
  return writer_->close();
}

nlohmann::json Run::expert_load_report() const {
  // Per MoE layer of this stage: tokens per expert and per ep rank, and max/mean of each; then
  // the hottest experts of the stage with the ep rank and the world rank that hold them.
  nlohmann::json layers = nlohmann::json::array();
  const auto imbalance = [](const std::vector<int64_t>& v) {
    int64_t sum = 0, mx = 0;
    for (int64_t x : v) {
      sum += x;
      mx = std::max(mx, x);
    }
    return sum > 0 ? static_cast<double>(mx) * static_cast<double>(v.size()) / static_cast<double>(sum) : 0.0;
  };
  struct Hot {
    int64_t tokens;
    size_t layer, expert;
    double over_mean;
  };
  std::vector<Hot> hot;
  const plan::RankCoord& me = plan_.coord(env_.rank());
  // The world rank of this rank's expert group (same stage) that holds ep block b (its first
  // etp share): group rank b * etp = (dp_rank % ep_dp) * tp + tp_rank.
  const auto owner = [&](int b) {
    const int idx = b * plan_.etp;
    return plan::rank_of(plan_, me.dp_rank / plan_.ep_dp * plan_.ep_dp + idx / plan_.tp, me.pp_rank, idx % plan_.tp);
  };
  for (size_t l = 0; l < expert_tokens_.size(); ++l) {
    const auto& per_expert = expert_tokens_[l];
    if (per_expert.empty()) continue;
    std::vector<int64_t> per_rank(static_cast<size_t>(plan_.ep), 0);
    const size_t block = per_expert.size() / static_cast<size_t>(plan_.ep);
    int64_t sum = 0;
    for (size_t e = 0; e < per_expert.size(); ++e) per_rank[e / block] += per_expert[e], sum += per_expert[e];
    layers.push_back({{"layer", l}, {"tokens_per_expert", per_expert}, {"tokens_per_ep_rank", per_rank},
                      {"expert_max_over_mean", imbalance(per_expert)}, {"ep_rank_max_over_mean", imbalance(per_rank)}});
    const double mean = static_cast<double>(sum) / static_cast<double>(per_expert.size());
    for (size_t e = 0; e < per_expert.size(); ++e)
      if (per_expert[e] > 0) hot.push_back({per_expert[e], l, e, mean > 0 ? static_cast<double>(per_expert[e]) / mean : 0});
  }
  std::stable_sort(hot.begin(), hot.end(), [](const Hot& a, const Hot& b) { return a.tokens > b.tokens; });
  nlohmann::json top = nlohmann::json::array();
  const size_t block = model_.hp.n_expert > 0 ? static_cast<size_t>(model_.hp.n_expert / plan_.ep) : 1;
  for (size_t i = 0; i < std::min<size_t>(hot.size(), 5); ++i) {
    const int b = static_cast<int>(hot[i].expert / block);
    top.push_back({{"layer", hot[i].layer}, {"expert", hot[i].expert}, {"tokens", hot[i].tokens},
                   {"over_mean", hot[i].over_mean}, {"ep_rank", b}, {"rank", owner(b)}});
  }
  return {{"ep", plan_.ep}, {"layers", layers}, {"hot_experts", top}};
}

std::string Run::summary_text() const {
  // Each rank prints its own prompts; rank 0 adds the job-wide lines.
  std::ostringstream os;
  double prefill_s = 0, decode_s = 0;
  int64_t prefill_tok = 0, decode_tok = 0;
  for (const PromptRun& pr : prompts_) {
    prefill_s += pr.gen.prefill_seconds;
    decode_s += pr.gen.decode_seconds;
    prefill_tok += static_cast<int64_t>(pr.ids.size());
    decode_tok += pr.gen.decode_tokens;
    if (!writes_outputs_) continue;  // the same prompt is printed once, by its output owner
    const std::string shown = pr.prompt->text ? *pr.prompt->text : "[" + join_ids(pr.ids) + "]";
    os << "\n[" << pr.prompt->id << "] " << shown << "\n  -> " << pr.text << "\n  ids: " << join_ids(pr.gen.generated_ids)
       << (pr.gen.stopped_at_eos ? " (eos)" : "") << "\n";
    if (pr.nll) os << "  reference NLL " << *pr.nll << " nats/token, perplexity " << std::exp(*pr.nll) << "\n";
    if (!pr.failed_expect.empty()) os << "  EXPECT FAILED: " << pr.failed_expect << "\n";
  }
  if (writes_activations_ && model_.hp.n_expert > 0) {
    const nlohmann::json load = expert_load_report();
    double worst_expert = 0, worst_rank = 0;
    int worst_layer = -1;
    for (const auto& l : load["layers"]) {
      if (l["expert_max_over_mean"].get<double>() > worst_expert) {
        worst_expert = l["expert_max_over_mean"].get<double>();
        worst_layer = l["layer"].get<int>();
      }
      worst_rank = std::max(worst_rank, l["ep_rank_max_over_mean"].get<double>());
    }
    char line[256];
    std::snprintf(line, sizeof line,
                  "\nrank %d expert load: %zu MoE layer(s); worst expert max/mean %.2f (layer %d), worst ep-rank "
                  "max/mean %.2f over ep=%d (per layer in the dump's expert_load attribute)\n",
                  env_.rank(), load["layers"].size(), worst_expert, worst_layer, worst_rank, plan_.ep);
    os << line;
    for (const auto& h : load["hot_experts"]) {
      std::snprintf(line, sizeof line, "  hot expert: layer %d expert %d, %lld tokens (%.2fx the layer's mean), on ep rank %d = world rank %d\n",
                    h["layer"].get<int>(), h["expert"].get<int>(), static_cast<long long>(h["tokens"].get<int64_t>()),
                    h["over_mean"].get<double>(), h["ep_rank"].get<int>(), h["rank"].get<int>());
      os << line;
    }
  }
  if (replay_layers_ && env_.rank() == 0)
    os << "\nreplay of layers " << replay_layers_->first << ".." << replay_layers_->second - 1
       << " on the recorded inputs of " << args_.replay_from << ": prefill only, no decode and no logits\n";
  const auto mem = be_->memory_info();
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "\nrank %d timings: load %.3f s (%.2f GB/s, %llu tensors) | prefill %lld tok in %.3f s (%.1f tok/s) | "
                "decode %lld tok in %.3f s (%.1f tok/s, batches of <= %d) | peak memory %.1f MiB\n",
                env_.rank(), load_stats_.seconds,
                load_stats_.seconds > 0 ? static_cast<double>(load_stats_.bytes_read) / load_stats_.seconds * 1e-9 : 0.0,
                static_cast<unsigned long long>(load_stats_.tensors), static_cast<long long>(prefill_tok), prefill_s,
                prefill_s > 0 ? static_cast<double>(prefill_tok) / prefill_s : 0.0, static_cast<long long>(decode_tok),
                decode_s, decode_s > 0 ? static_cast<double>(decode_tok) / decode_s : 0.0, cfg_.generate.max_batch,
                static_cast<double>(mem.peak_bytes) / (1 << 20));
  os << buf;
  return os.str();
}

}  // namespace dayzero::runtime
