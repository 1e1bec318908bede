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

namespace dayzero::serve {

enum class Endpoint { kCompletions, kChat };

// A refused request: HTTP status, the field ("messages[1].role"; empty for the body as a whole)
// and one sentence. to_json() gives OpenAI's {"error": {message, type, param, code}}.
struct ApiError {
  int status = 400;
  std::string param;
  std::string message;
  nlohmann::json to_json() const;
};

struct ChatMessage {
  std::string role;     // system | user | assistant
  std::string content;  // text parts joined, each image part as the model's image placeholder
};

struct ApiRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::optional<std::string> prompt_text;             // completions: a string prompt
  std::optional<std::vector<int32_t>> prompt_ids;     // completions: token ids, used as given
  std::vector<ChatMessage> messages;                  // chat
  // chat: each image_url part in order: its field ("messages[0].content[1].image_url") and URL.
  std::vector<std::pair<std::string, std::string>> images;
  std::optional<int> max_tokens;                      // >= 1; absent: generate.max_new_tokens
  std::vector<std::string> stop;                      // at most 4, non-empty
  bool stream = false;
  double temperature = 0;            // 0: greedy (the default); up to 2
  double top_p = 1;                  // (0, 1]
  std::optional<uint64_t> seed;      // sampling seed; absent: the request's id
};

// Parses body for endpoint. model_id: the one model served (`model` must name it when given).
// image_placeholder: the model's image token text (e.g. "<image>"); empty for a text-only model,
// whose image parts are refused. Returns false with *err filled on any refusal.
bool parse_request(Endpoint endpoint, std::string_view body, const std::string& model_id,
                   const std::string& image_placeholder, ApiRequest* out, ApiError* err);

}  // namespace dayzero::serve
