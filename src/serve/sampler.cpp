// Adjustments in the order vLLM applies them (logit_bias and min_tokens, then the penalties), then
// the softmax at the temperature in double precision, top-k, the smallest set of most likely
// tokens whose mass reaches top_p (ties broken by the lower id), min-p, and one uniform draw.
#include "serve/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "kernels/ops.h"

namespace dayzero::serve {

bool SamplingParams::neutral() const {
  return frequency_penalty == 0 && presence_penalty == 0 && repetition_penalty == 1 && logit_bias.empty() &&
         min_tokens == 0;
}

void to_json(nlohmann::json& j, const SamplingParams& p) {
  nlohmann::json bias = nlohmann::json::array();
  for (const auto& [id, b] : p.logit_bias) bias.push_back({id, b});
  j = {{"temperature", p.temperature}, {"top_p", p.top_p}, {"top_k", p.top_k}, {"min_p", p.min_p},
       {"frequency_penalty", p.frequency_penalty}, {"presence_penalty", p.presence_penalty},
       {"repetition_penalty", p.repetition_penalty}, {"logit_bias", bias}, {"min_tokens", p.min_tokens},
       {"seed", p.seed}};
}

void from_json(const nlohmann::json& j, SamplingParams& p) {
  p.temperature = j.at("temperature").get<double>();
  p.top_p = j.at("top_p").get<double>();
  p.top_k = j.at("top_k").get<int>();
  p.min_p = j.at("min_p").get<double>();
  p.frequency_penalty = j.at("frequency_penalty").get<double>();
  p.presence_penalty = j.at("presence_penalty").get<double>();
  p.repetition_penalty = j.at("repetition_penalty").get<double>();
  p.logit_bias.clear();
  for (const auto& e : j.at("logit_bias")) p.logit_bias[e[0].get<int32_t>()] = e[1].get<double>();
  p.min_tokens = j.at("min_tokens").get<int>();
  p.seed = j.at("seed").get<uint64_t>();
}

Sampler::Sampler(SamplingParams params, std::vector<int32_t> prompt, std::vector<int32_t> eos_ids)
    : p_(std::move(params)), prompt_(std::move(prompt)), eos_ids_(std::move(eos_ids)), rng_(p_.seed) {}

int32_t Sampler::pick(const float* logits, int64_t n_vocab) {
  if (!p_.neutral()) {
    adjusted_.assign(logits, logits + n_vocab);
    float* x = adjusted_.data();
    for (const auto& [id, b] : p_.logit_bias)
      if (id < n_vocab) x[id] = static_cast<float>(x[id] + b);
    if (n_out_ < p_.min_tokens)
      for (int32_t id : eos_ids_)
        if (id < n_vocab) x[id] = -std::numeric_limits<float>::infinity();
    if (p_.repetition_penalty != 1) {
      std::vector<char> seen(static_cast<size_t>(n_vocab), 0);
      for (int32_t id : prompt_)
        if (id >= 0 && id < n_vocab) seen[id] = 1;
      for (const auto& [id, _] : counts_) seen[id] = 1;
      const auto r = static_cast<float>(p_.repetition_penalty);
      for (int64_t i = 0; i < n_vocab; ++i)
        if (seen[i]) x[i] = x[i] > 0 ? x[i] / r : x[i] * r;
    }
    for (const auto& [id, n] : counts_)
      x[id] = static_cast<float>(x[id] - p_.frequency_penalty * n - p_.presence_penalty);
    logits = x;
  }
  int32_t token = 0;
  if (p_.temperature == 0) {
    token = static_cast<int32_t>(kernels::cpu::argmax(n_vocab, logits));
  } else {
    const float top = *std::max_element(logits, logits + n_vocab);
    std::vector<double> p(static_cast<size_t>(n_vocab));
    for (int64_t i = 0; i < n_vocab; ++i) p[i] = std::exp((static_cast<double>(logits[i]) - top) / p_.temperature);
    std::vector<int32_t> order(static_cast<size_t>(n_vocab));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return p[a] > p[b]; });
    const size_t limit = p_.top_k > 0 ? std::min<size_t>(order.size(), static_cast<size_t>(p_.top_k)) : order.size();
    double total = 0;
    for (size_t k = 0; k < limit; ++k) total += p[order[k]];
    size_t keep = 0;
    double mass = 0;
    const double floor = p_.min_p * p[order[0]];
    while (keep < limit && (keep == 0 || (mass < p_.top_p * total && p[order[keep]] >= floor))) mass += p[order[keep++]];
    // 53 random bits: the same double on every rank and every standard library.
    const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53 * mass;
    double c = 0;
    token = order[keep - 1];
    for (size_t k = 0; k < keep; ++k) {
      c += p[order[k]];
      if (u < c) {
        token = order[k];
        break;
      }
    }
  }
  ++counts_[token];
  ++n_out_;
  return token;
}

}  // namespace dayzero::serve
