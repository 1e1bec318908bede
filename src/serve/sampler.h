// Seeded sampling of a served request: the logit adjustments a request asks for (logit_bias,
// repetition / frequency / presence penalties, min_tokens), then temperature, top-k, top-p and
// min-p over the logits, drawn from a generator seeded by the request, so that every rank of the
// last stage draws the same token and the same request with the same seed gets the same tokens.
// With every adjustment at its neutral value, temperature 0 is the argmax of the runtime's greedy
// decode, bit for bit (the logits are not touched).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <random>
#include <unordered_map>
#include <vector>

namespace dayzero::serve {

// What a request asks of the sampler; the defaults are neutral (greedy, nothing adjusted).
struct SamplingParams {
  double temperature = 0;            // 0: greedy; up to 2
  double top_p = 1;                  // (0, 1]
  int top_k = 0;                     // 0 (or -1 in a request): all tokens
  double min_p = 0;                  // [0, 1]: tokens below min_p x the top probability are dropped
  double frequency_penalty = 0;      // [-2, 2]: minus this x the token's count in the output so far
  double presence_penalty = 0;       // [-2, 2]: minus this once the token is in the output
  double repetition_penalty = 1;     // > 0: a prompt or output token's logit divided (> 0) or multiplied (< 0)
  std::map<int32_t, double> logit_bias;  // token id -> [-100, 100] added to its logit
  int min_tokens = 0;                // EOS ids are not drawn before this many tokens
  uint64_t seed = 0;
  bool neutral() const;              // no logit is changed before the draw
};
void to_json(nlohmann::json& j, const SamplingParams& p);
void from_json(const nlohmann::json& j, SamplingParams& p);

class Sampler {
 public:
  // REQUIRES: the params in the ranges above. prompt: the request's ids (repetition_penalty);
  // eos_ids: the ids min_tokens holds back.
  Sampler(SamplingParams params, std::vector<int32_t> prompt = {}, std::vector<int32_t> eos_ids = {});
  // Temperature and top-p alone.
  Sampler(double temperature, double top_p, uint64_t seed) : Sampler(only(temperature, top_p, seed)) {}
  // The next token from logits [n_vocab]; it is remembered as part of the output.
  int32_t pick(const float* logits, int64_t n_vocab);

 private:
  static SamplingParams only(double temperature, double top_p, uint64_t seed) {
    SamplingParams p;
    p.temperature = temperature;
    p.top_p = top_p;
    p.seed = seed;
    return p;
  }
  SamplingParams p_;
  std::vector<int32_t> prompt_, eos_ids_;
  std::unordered_map<int32_t, int> counts_;  // output token -> times drawn
  int n_out_ = 0;
  std::mt19937_64 rng_;
  std::vector<float> adjusted_;  // [n_vocab] scratch
};

}  // namespace dayzero::serve
