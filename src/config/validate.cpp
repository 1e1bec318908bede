// validate(): the rules of a run config that hold whatever YAML spelled it (ranges, prompt ids,
// text xor tokens, ep/etp against tp, dump placeholders). It does not look at the checkpoint or
// the machine; whether a plan fits is plan/'s question.
#include <cmath>
#include <regex>
#include <set>

#include "config/run_config.h"

namespace dayzero::config {
namespace {

class Checker {
 public:
  explicit Checker(const RunConfig& cfg) : cfg_(cfg) {}

  Status error(const std::string& path, const std::string& what) const {
    std::string where = cfg_.source_name;
    auto it = cfg_.key_positions.find(path);
    if (it != cfg_.key_positions.end())
      where += ":" + std::to_string(it->second.first) + ":" + std::to_string(it->second.second);
    return Status::InvalidArgument(where + ": " + path + ": " + what);
  }
  template <class T>
  Status at_least(const std::string& path, T v, T lo) const {
    if (v < lo) return error(path, "must be >= " + std::to_string(lo) + ", got " + std::to_string(v));
    return Status::Ok();
  }
  Status at_least(const std::string& path, const std::optional<int>& v, int lo) const {
    return v ? at_least(path, *v, lo) : Status::Ok();
  }

 private:
  const RunConfig& cfg_;
};

bool valid_prompt_id(const std::string& id) {
  if (id.empty() || id == "." || id == "..") return false;
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == '-' || c == '.';
    if (!ok) return false;
  }
  return true;
}

std::string num(double v) {
  std::string s = std::to_string(v);
  while (s.size() > 1 && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

}  // namespace

Status validate(const RunConfig& cfg) {
  const Checker c(cfg);

  if (cfg.model.path.empty()) return c.error("model.path", "missing required key (the checkpoint folder)");

  const ParallelConfig& p = cfg.parallel;
  DZ_RETURN_IF_ERROR(c.at_least("parallel.dp", p.dp, 1));
  DZ_RETURN_IF_ERROR(c.at_least("parallel.pp", p.pp, 1));
  DZ_RETURN_IF_ERROR(c.at_least("parallel.tp", p.tp, 1));
  DZ_RETURN_IF_ERROR(c.at_least("parallel.ep", p.ep, 1));
  DZ_RETURN_IF_ERROR(c.at_least("parallel.etp", p.etp, 1));
  // ep beyond tp (or without tp): wide expert parallelism, the expert group spanning ep / tp
  // data-parallel attention replicas (docs/planner.md "Wide expert parallelism").
  const bool wide = p.ep && !p.etp && (!p.tp || *p.ep > *p.tp);
  if (wide && p.tp && *p.ep % *p.tp != 0)
    return c.error("parallel.ep", "ep " + std::to_string(*p.ep) + " is not a multiple of tp " + std::to_string(*p.tp) +
                                      " (wide expert parallelism spans ep / tp attention replicas)");
  if (!wide && p.tp && p.ep && *p.tp % *p.ep != 0)
    return c.error("parallel.ep", "ep " + std::to_string(*p.ep) + " does not divide tp " + std::to_string(*p.tp) +
                                      " (MoE layers split the tp ranks as ep x etp)");
  if (p.tp && p.etp && *p.tp % *p.etp != 0)
    return c.error("parallel.etp", "etp " + std::to_string(*p.etp) + " does not divide tp " +
                                       std::to_string(*p.tp) + " (MoE layers split the tp ranks as ep x etp)");
  if (p.tp && p.ep && p.etp && *p.ep * *p.etp != *p.tp)
    return c.error("parallel.etp", "ep x etp must equal tp, got " + std::to_string(*p.ep) + " x " +
                                       std::to_string(*p.etp) + " != " + std::to_string(*p.tp));

  // Keys that parse but that this build cannot honour are refused rather than ignored.
  if (cfg.model.dtype && *cfg.model.dtype != DType::kF32 && cfg.backend != Backend::kCuda)
    return c.error("model.dtype", std::string(*cfg.model.dtype == DType::kBF16 ? "bfloat16" : "float16") +
                                      " cannot take effect: the CPU backend computes in float32 only "
                                      "(backend: auto runs on the CPU); use float32 or omit the key");
  if (cfg.comm == CommKind::kNccl) {
#ifdef DAYZERO_WITH_CUDA
    if (cfg.backend == Backend::kCpu)
      return c.error("comm", "nccl cannot take effect with backend: cpu (NCCL moves device buffers; the CPU "
                             "backend's tensors are on the host); use mpi or auto");
#else
    return c.error("comm", "nccl cannot take effect: this dayzero was built without CUDA (configure with "
                           "DAYZERO_CUDA=ON); use mpi or auto");
#endif
  }

  // topology: its values were checked by topology::parse_keys as they were read.

  DZ_RETURN_IF_ERROR(c.at_least<int64_t>("limits.max_prompt_tokens", cfg.limits.max_prompt_tokens, 1));
  DZ_RETURN_IF_ERROR(c.at_least<int64_t>("limits.max_image_pixels", cfg.limits.max_image_pixels, 1));

  const GenerateConfig& g = cfg.generate;
  DZ_RETURN_IF_ERROR(c.at_least("generate.max_new_tokens", g.max_new_tokens, 0));
  DZ_RETURN_IF_ERROR(c.at_least("generate.top_k_record", g.top_k_record, 0));
  DZ_RETURN_IF_ERROR(c.at_least("generate.max_batch", g.max_batch, 1));

  if (cfg.prompts.empty()) return c.error("prompts", "at least one prompt is required");
  std::set<std::string> ids;
  for (size_t i = 0; i < cfg.prompts.size(); ++i) {
    const Prompt& pr = cfg.prompts[i];
    const std::string path = "prompts[" + std::to_string(i) + "]";
    if (!valid_prompt_id(pr.id))
      return c.error(path + ".id", "\"" + pr.id + "\" is not a valid id (use letters, digits, '_', '-', '.')");
    if (!ids.insert(pr.id).second) return c.error(path + ".id", "duplicate prompt id \"" + pr.id + "\"");
    if (int(pr.text.has_value()) + int(pr.tokens.has_value()) + int(pr.messages_json.has_value()) > 1)
      return c.error(path, "prompt \"" + pr.id + "\" gives more than one of text, tokens and messages; give exactly one");
    if (!pr.text && !pr.tokens && !pr.messages_json)
      return c.error(path, "prompt \"" + pr.id + "\" needs text, tokens or messages");
    if (pr.text && pr.text->empty()) return c.error(path + ".text", "must not be empty");
    if (pr.tokens && pr.tokens->empty()) return c.error(path + ".tokens", "must not be empty");
    if (pr.tokens && static_cast<int64_t>(pr.tokens->size()) > cfg.limits.max_prompt_tokens)
      return c.error(path + ".tokens", std::to_string(pr.tokens->size()) + " tokens exceed limits.max_prompt_tokens " +
                                           std::to_string(cfg.limits.max_prompt_tokens));
    for (size_t j = 0; j < pr.images.size(); ++j)
      if (pr.images[j].empty()) return c.error(path + ".images[" + std::to_string(j) + "]", "must not be empty");
    if (static_cast<int64_t>(pr.expect.first_tokens.size()) > g.max_new_tokens)
      return c.error(path + ".expect.first_tokens",
                     std::to_string(pr.expect.first_tokens.size()) + " expected tokens but generate.max_new_tokens is " +
                         std::to_string(g.max_new_tokens));
    for (size_t j = 0; j < pr.expect.contains.size(); ++j)
      if (pr.expect.contains[j].empty())
        return c.error(path + ".expect.contains", "an empty string matches anything; remove it");
  }

  if (cfg.dump.dir.empty()) return c.error("dump.dir", "must not be empty");
  {
    auto expanded = expand_dump_dir(cfg.dump.dir, cfg.config_stem.empty() ? "config" : cfg.config_stem, 0);
    if (!expanded.ok()) return c.error("dump.dir", expanded.status().message());
  }
  for (const std::string& pt : cfg.dump.activations.points)
    if (!is_dump_point(pt)) return c.error("dump.activations.points", "unknown point \"" + pt + "\"");
  for (int l : cfg.dump.activations.layers)
    if (l < 0) return c.error("dump.activations.layers", "layer indices must be >= 0, got " + std::to_string(l));

  const WatchdogConfig& w = cfg.watchdog;
  if (w.collective_timeout_s < 0)
    return c.error("watchdog.collective_timeout_s", "must be >= 0 (0 disables it), got " + num(w.collective_timeout_s));
  if (w.phase_timeout_s < 0)
    return c.error("watchdog.phase_timeout_s", "must be >= 0 (0 disables it), got " + num(w.phase_timeout_s));
  if (w.ring_events < 1 || w.ring_events > kMaxRingEvents)
    return c.error("watchdog.ring_events", "must be in 1.." + std::to_string(kMaxRingEvents) + ", got " + std::to_string(w.ring_events));

  if (cfg.debug.perturb) {
    const PerturbConfig& pb = *cfg.debug.perturb;
    // The points a block produces through emit(); topk_ids are ids and vision points are not
    // run yet, so neither can be scaled.
    static const std::regex kPoint(R"((embed|final_norm|logits|layers\.(0|[1-9][0-9]*)\.(attn_norm|attn_out|ffn_norm|router_logits|ffn_out|layer_out)))");
    if (!std::regex_match(pb.point, kPoint))
      return c.error("debug.perturb.point", "\"" + pb.point +
                                                "\" is not a point that can be scaled (embed, layers.{L}.attn_norm|attn_out|"
                                                "ffn_norm|router_logits|ffn_out|layer_out, final_norm, logits)");
    if (!std::isfinite(pb.scale)) return c.error("debug.perturb.scale", "must be a finite number, got " + num(pb.scale));
  }

  DZ_RETURN_IF_ERROR(c.at_least("runtime.threads", cfg.runtime.threads, 1));
  DZ_RETURN_IF_ERROR(c.at_least("runtime.staging_mib", cfg.runtime.staging_mib, 1));
  return Status::Ok();
}

}  // namespace dayzero::config
