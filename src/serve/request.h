// The OpenAI-style request bodies `dayzero serve` accepts (POST /v1/completions and
// /v1/chat/completions), parsed and checked field by field; every refusal is an ApiError naming
// the field. Not the tokenization or the token limits (service.cpp, which holds the tokenizer).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "serve/sampler.h"

namespace dayzero::serve {

enum class Endpoint { kCompletions, kChat };

// A refused request: HTTP status, the field ("messages[1].role"; empty for the body as a whole)
// and one sentence. to_json() gives OpenAI's {"error": {message, type, param, code}}.
struct ApiError {
  ApiError() = default;
  ApiError(int status_, std::string param_, std::string message_, std::string code_ = "")
      : status(status_), param(std::move(param_)), message(std::move(message_)), code(std::move(code_)) {}
  int status = 400;
  std::string param;
  std::string message;
  std::string code;  // OpenAI's machine-readable code ("context_length_exceeded"); empty: null
  nlohmann::json to_json() const;
};

struct ChatMessage {
  std::string role;     // system | user | assistant | tool
  std::string content;  // text parts joined, each image part as the model's image placeholder
  // The same content as parts, for templates that read a list: {"type": "text", "text"} and
  // {"type": "image"} in order (a string is one text part).
  nlohmann::ordered_json parts = nlohmann::ordered_json::array();
  bool content_null = false;  // an assistant turn with tool_calls and no content
  // name, tool_calls, tool_call_id, reasoning_content, as sent (in the order sent: templates dump them)
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
};

// One prompt of a completions request: a string (encoded as `run` encodes a prompt's text) or
// token ids, used as given.
struct PromptInput {
  std::optional<std::string> text;
  std::optional<std::vector<int32_t>> ids;
  std::string param;  // "prompt" for a single prompt, "prompt[i]" for one of a list
};

struct ApiRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::vector<PromptInput> prompts;                   // completions: one choice each, in order
  std::vector<ChatMessage> messages;                  // chat
  nlohmann::ordered_json tools;                       // chat: the tool definitions, given to the template; null: none
  nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();  // chat: further template variables
  // chat: each image_url part in order: its field ("messages[0].content[1].image_url") and URL.
  std::vector<std::pair<std::string, std::string>> images;
  std::optional<int> max_tokens;                      // >= 1 (0 with echo); absent: generate.max_new_tokens
  std::vector<std::string> stop;                      // non-empty strings
  bool stream = false;
  bool include_usage = false;        // stream_options.include_usage: a last chunk with usage
  bool ignore_eos = false;           // EOS does not end the request (it is generated as a token)
  // Log-probabilities: -1 none; else how many most likely alternatives each token carries (0..20)
  // (completions `logprobs`; chat `logprobs: true` with `top_logprobs`).
  int logprobs = -1;
  bool echo = false;                 // completions: the prompt comes back before the completion (and
                                     // its tokens' log-probabilities with logprobs); max_tokens may be 0
  SamplingParams sampling;           // its seed is set by the caller when absent (seed_given)
  bool seed_given = false;
};

// Parses body for endpoint. model_id: the one model served (`model` must name it when given).
// image_placeholder: the model's image token text (e.g. "<image>"); empty for a text-only model,
// whose image parts are refused. Returns false with *err filled on any refusal.
bool parse_request(Endpoint endpoint, std::string_view body, const std::string& model_id,
                   const std::string& image_placeholder, ApiRequest* out, ApiError* err);

}  // namespace dayzero::serve
