// Request parsing: one check per field, in the order a reader meets them; unknown fields and
// values this server cannot honour are refused, never ignored.
#include "serve/request.h"

#include <cstdlib>
#include <set>

namespace dayzero::serve {
namespace {

// Ordered: the messages and tools reach the chat template with their keys in the order sent.
using ojson = nlohmann::ordered_json;

bool fail(ApiError* err, const std::string& param, const std::string& message, int status = 400,
          const std::string& code = "") {
  *err = {status, param, (param.empty() ? "" : param + ": ") + message, code};
  return false;
}

std::string kind_of(const ojson& v) { return v.type_name(); }

bool parse_int(const ojson& v, const std::string& param, int min, int* out, ApiError* err) {
  if (!v.is_number_integer()) return fail(err, param, "expected an integer, got " + kind_of(v));
  const int64_t x = v.get<int64_t>();
  if (x < min || x > (int64_t{1} << 30)) return fail(err, param, "must be >= " + std::to_string(min) + ", got " + v.dump());
  *out = static_cast<int>(x);
  return true;
}

bool parse_content(const ojson& v, const std::string& param, const std::string& image_placeholder, std::string* out,
                   ojson* parts, std::vector<std::pair<std::string, std::string>>* images, ApiError* err) {
  if (v.is_string()) {
    *out = v.get<std::string>();
    parts->push_back({{"type", "text"}, {"text", *out}});
    return true;
  }
  if (!v.is_array()) return fail(err, param, "expected a string or a list of content parts, got " + kind_of(v));
  for (size_t j = 0; j < v.size(); ++j) {
    const std::string p = param + "[" + std::to_string(j) + "]";
    const ojson& part = v[j];
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
      return fail(err, p, "expected a content part {\"type\": \"text\", \"text\": ...}");
    const std::string type = part["type"].get<std::string>();
    if (type == "image_url") {
      if (image_placeholder.empty()) return fail(err, p, "the model has no vision tower: send text parts only");
      for (const auto& [k, _] : part.items())
        if (k != "type" && k != "image_url") return fail(err, p + "." + k, "unknown field");
      const ojson& u = part.contains("image_url") ? part["image_url"] : ojson();
      const ojson url = u.is_string() ? u : u.is_object() && u.contains("url") ? u["url"] : ojson();
      if (!url.is_string()) return fail(err, p + ".image_url", "expected {\"url\": \"data:image/png;base64,...\"}");
      if (u.is_object())
        for (const auto& [k, _] : u.items())
          if (k != "url") return fail(err, p + ".image_url." + k, "unknown field");
      images->emplace_back(p + ".image_url", url.get<std::string>());
      *out += image_placeholder;
      parts->push_back({{"type", "image"}});
      continue;
    }
    if (type != "text") return fail(err, p + ".type", "unknown content part type '" + type + "'");
    for (const auto& [k, _] : part.items())
      if (k != "type" && k != "text") return fail(err, p + "." + k, "unknown field");
    if (!part.contains("text") || !part["text"].is_string()) return fail(err, p + ".text", "expected a string");
    *out += part["text"].get<std::string>();
    parts->push_back({{"type", "text"}, {"text", part["text"]}});
  }
  return true;
}

}  // namespace

nlohmann::json ApiError::to_json() const {
  using json = nlohmann::json;
  const char* type = status == 404 ? "not_found_error"
                     : status == 504 ? "timeout_error"
                     : status >= 500 ? "server_error"
                                     : "invalid_request_error";
  return {{"error", {{"message", message}, {"type", type}, {"param", param.empty() ? json() : json(param)},
                     {"code", code.empty() ? json() : json(code)}}}};
}

bool parse_request(Endpoint endpoint, std::string_view body, const std::string& model_id,
                   const std::string& image_placeholder, ApiRequest* out, ApiError* err) {
  *out = ApiRequest{};
  ojson j = ojson::parse(body, nullptr, false);
  if (j.is_discarded()) return fail(err, "", "the body is not valid JSON");
  if (!j.is_object()) return fail(err, "", "the body must be a JSON object, got " + kind_of(j));
  const bool chat = endpoint == Endpoint::kChat;
  // The fields both endpoints share: what OpenAI's and vLLM's clients send (sampling, stopping,
  // streaming); each is honoured below or refused with its name.
  std::set<std::string> known = {"model", "max_tokens", "stop", "stream", "stream_options", "temperature", "top_p",
                                 "top_k", "min_p", "seed", "n", "best_of", "user", "frequency_penalty",
                                 "presence_penalty", "repetition_penalty", "logit_bias", "ignore_eos", "min_tokens",
                                 "logprobs"};
  if (chat) known.insert({"messages", "max_completion_tokens", "top_logprobs", "tools", "chat_template_kwargs"});
  else known.insert({"prompt", "echo"});
  for (const auto& [k, _] : j.items())
    if (!known.count(k)) return fail(err, k, "unknown field");
  out->endpoint = endpoint;
  if (j.contains("model")) {
    if (!j["model"].is_string()) return fail(err, "model", "expected a string, got " + kind_of(j["model"]));
    if (j["model"].get<std::string>() != model_id)
      return fail(err, "model", "the model '" + j["model"].get<std::string>() + "' is not served here; this server serves '" +
                                    model_id + "'", 404, "model_not_found");
  }
  if (chat) {
    if (!j.contains("messages")) return fail(err, "messages", "required");
    const ojson& m = j["messages"];
    if (!m.is_array() || m.empty()) return fail(err, "messages", "expected a non-empty list of messages");
    for (size_t i = 0; i < m.size(); ++i) {
      const std::string p = "messages[" + std::to_string(i) + "]";
      if (!m[i].is_object()) return fail(err, p, "expected an object {\"role\": ..., \"content\": ...}");
      ChatMessage msg;
      // What the chat templates read besides role and content, passed to the template as sent.
      for (const auto& [k, v] : m[i].items()) {
        if (k == "role" || k == "content") continue;
        if (k == "name" || k == "tool_call_id" || k == "reasoning_content" || k == "reasoning") {
          if (!v.is_string() && !v.is_null()) return fail(err, p + "." + k, "expected a string");
        } else if (k == "tool_calls") {
          if (!v.is_array() && !v.is_null()) return fail(err, p + ".tool_calls", "expected a list of tool calls");
        } else {
          return fail(err, p + "." + k, "unknown field");
        }
        msg.extra[k] = v;
      }
      if (!m[i].contains("role") || !m[i]["role"].is_string()) return fail(err, p + ".role", "expected a string");
      msg.role = m[i]["role"].get<std::string>();
      if (msg.role != "system" && msg.role != "user" && msg.role != "assistant" && msg.role != "tool")
        return fail(err, p + ".role", "expected system, user, assistant or tool, got '" + msg.role + "'");
      if (!m[i].contains("content")) return fail(err, p + ".content", "required");
      if (m[i]["content"].is_null()) {
        // An assistant turn that only calls tools has no content (OpenAI sends null).
        if (msg.role != "assistant" || !msg.extra.contains("tool_calls"))
          return fail(err, p + ".content", "null only for an assistant message with tool_calls");
        msg.content_null = true;
      } else if (!parse_content(m[i]["content"], p + ".content", image_placeholder, &msg.content, &msg.parts, &out->images, err)) {
        return false;
      }
      out->messages.push_back(std::move(msg));
    }
    if (j.contains("tools") && !j["tools"].is_null()) {
      if (!j["tools"].is_array()) return fail(err, "tools", "expected a list of tool definitions");
      out->tools = j["tools"];
    }
    if (j.contains("chat_template_kwargs") && !j["chat_template_kwargs"].is_null()) {
      const ojson& k = j["chat_template_kwargs"];
      if (!k.is_object()) return fail(err, "chat_template_kwargs", "expected an object of template variables");
      for (const auto& [name, _] : k.items())
        if (name == "messages" || name == "tools")
          return fail(err, "chat_template_kwargs." + name, "give it as the request's own field");
      out->chat_template_kwargs = k;
    }
  } else {
    if (!j.contains("prompt")) return fail(err, "prompt", "required");
    const ojson& p = j["prompt"];
    // One prompt from v (a string or a list of token ids) as field `param`.
    const auto one = [&](const ojson& v, const std::string& param) {
      PromptInput in;
      in.param = param;
      if (v.is_string()) {
        if (v.get<std::string>().empty()) return fail(err, param, "must not be empty");
        in.text = v.get<std::string>();
      } else if (v.is_array() && !v.empty() && v[0].is_number_integer()) {
        std::vector<int32_t> ids;
        for (size_t i = 0; i < v.size(); ++i) {
          if (!v[i].is_number_integer() || v[i].get<int64_t>() < 0 || v[i].get<int64_t>() > INT32_MAX)
            return fail(err, param + "[" + std::to_string(i) + "]", "expected a token id (an integer >= 0)");
          ids.push_back(v[i].get<int32_t>());
        }
        in.ids = std::move(ids);
      } else {
        return fail(err, param, "expected a string or a non-empty list of token ids");
      }
      out->prompts.push_back(std::move(in));
      return true;
    };
    if (p.is_string() || (p.is_array() && !p.empty() && p[0].is_number_integer())) {
      if (!one(p, "prompt")) return false;
    } else if (p.is_array() && !p.empty()) {
      // A batch: a list of strings or of token-id lists, one choice each.
      for (size_t i = 0; i < p.size(); ++i)
        if (!one(p[i], "prompt[" + std::to_string(i) + "]")) return false;
    } else {
      return fail(err, "prompt",
                  "expected a string, a list of token ids, or a non-empty list of strings or of token-id lists");
    }
  }
  if (!chat && j.contains("echo") && !j["echo"].is_null()) {
    if (!j["echo"].is_boolean()) return fail(err, "echo", "expected true or false, got " + j["echo"].dump());
    out->echo = j["echo"].get<bool>();
  }
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    if (!j.contains(key) || j[key].is_null()) continue;
    int v = 0;
    // 0: the prompt alone (its log-probabilities), as lm-eval's log-likelihood requests may ask.
    if (!parse_int(j[key], key, out->echo ? 0 : 1, &v, err)) return false;
    out->max_tokens = v;
  }
  if (j.contains("stop") && !j["stop"].is_null()) {
    const ojson& s = j["stop"];
    if (s.is_string()) {
      out->stop.push_back(s.get<std::string>());
    } else if (s.is_array()) {
      for (size_t i = 0; i < s.size(); ++i) {
        if (!s[i].is_string()) return fail(err, "stop[" + std::to_string(i) + "]", "expected a string");
        out->stop.push_back(s[i].get<std::string>());
      }
    } else {
      return fail(err, "stop", "expected a string or a list of strings");
    }
    for (const std::string& x : out->stop)
      if (x.empty()) return fail(err, "stop", "a stop string must not be empty");
  }
  if (j.contains("stream") && !j["stream"].is_null()) {
    if (!j["stream"].is_boolean()) return fail(err, "stream", "expected true or false, got " + kind_of(j["stream"]));
    out->stream = j["stream"].get<bool>();
  }
  if (j.contains("stream_options") && !j["stream_options"].is_null()) {
    const ojson& o = j["stream_options"];
    if (!o.is_object()) return fail(err, "stream_options", "expected an object {\"include_usage\": true}");
    if (!out->stream) return fail(err, "stream_options", "only allowed with stream: true");
    for (const auto& [k, v] : o.items()) {
      if (k != "include_usage") return fail(err, "stream_options." + k, "unknown field");
      if (!v.is_boolean()) return fail(err, "stream_options.include_usage", "expected true or false, got " + v.dump());
      out->include_usage = v.get<bool>();
    }
  }
  SamplingParams& sp = out->sampling;
  // A number field in [lo, hi] (open at lo when lo_open); absent or null leaves *dst as it is.
  const auto number = [&](const char* key, double lo, double hi, bool lo_open, double* dst) {
    if (!j.contains(key) || j[key].is_null()) return true;
    const ojson& t = j[key];
    if (!t.is_number() || (lo_open ? !(t.get<double>() > lo) : !(t.get<double>() >= lo)) || t.get<double>() > hi)
      return fail(err, key, std::string("expected a number in ") + (lo_open ? "(" : "[") + ojson(lo).dump() + ", " +
                                ojson(hi).dump() + "], got " + t.dump());
    *dst = t.get<double>();
    return true;
  };
  if (!number("temperature", 0, 2, false, &sp.temperature) || !number("top_p", 0, 1, true, &sp.top_p) ||
      !number("min_p", 0, 1, false, &sp.min_p) || !number("frequency_penalty", -2, 2, false, &sp.frequency_penalty) ||
      !number("presence_penalty", -2, 2, false, &sp.presence_penalty) ||
      !number("repetition_penalty", 0, 2, true, &sp.repetition_penalty))
    return false;
  if (j.contains("top_k") && !j["top_k"].is_null()) {
    const ojson& t = j["top_k"];
    if (!t.is_number_integer() || t.get<int64_t>() < -1 || t.get<int64_t>() > INT32_MAX)
      return fail(err, "top_k", "expected an integer >= 1, or 0 or -1 for all tokens, got " + t.dump());
    sp.top_k = std::max<int>(0, t.get<int>());
  }
  if (j.contains("min_tokens") && !j["min_tokens"].is_null() && !parse_int(j["min_tokens"], "min_tokens", 0, &sp.min_tokens, err))
    return false;
  if (j.contains("logit_bias") && !j["logit_bias"].is_null()) {
    const ojson& b = j["logit_bias"];
    if (!b.is_object()) return fail(err, "logit_bias", "expected an object {\"token id\": bias}");
    for (const auto& [k, v] : b.items()) {
      const std::string param = "logit_bias." + k;
      char* end = nullptr;
      const long long id = std::strtoll(k.c_str(), &end, 10);
      if (k.empty() || *end != '\0' || id < 0 || id > INT32_MAX) return fail(err, param, "the key must be a token id");
      if (!v.is_number() || v.get<double>() < -100 || v.get<double>() > 100)
        return fail(err, param, "expected a number in [-100, 100], got " + v.dump());
      sp.logit_bias[static_cast<int32_t>(id)] = v.get<double>();
    }
  }
  if (j.contains("ignore_eos") && !j["ignore_eos"].is_null()) {
    if (!j["ignore_eos"].is_boolean()) return fail(err, "ignore_eos", "expected true or false, got " + j["ignore_eos"].dump());
    out->ignore_eos = j["ignore_eos"].get<bool>();
  }
  if (j.contains("seed") && !j["seed"].is_null()) {
    if (!j["seed"].is_number_integer() || j["seed"].get<int64_t>() < 0)
      return fail(err, "seed", "expected an integer >= 0, got " + j["seed"].dump());
    sp.seed = j["seed"].get<uint64_t>();
    out->seed_given = true;
  }
  for (const char* key : {"n", "best_of"}) {
    if (!j.contains(key) || j[key].is_null()) continue;
    if (!j[key].is_number_integer() || j[key].get<int64_t>() != 1)
      return fail(err, key, "only 1 choice per prompt is served, got " + j[key].dump());
  }
  constexpr int kMaxLogprobs = 20;
  const auto top_count = [&](const char* key, int* dst) {
    const ojson& v = j[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > kMaxLogprobs)
      return fail(err, key, "expected an integer from 0 to " + std::to_string(kMaxLogprobs) + ", got " + v.dump());
    *dst = v.get<int>();
    return true;
  };
  const bool has_logprobs = j.contains("logprobs") && !j["logprobs"].is_null();
  if (chat) {
    // Chat: logprobs is a boolean, top_logprobs the alternatives per token (OpenAI's shape).
    if (has_logprobs) {
      if (!j["logprobs"].is_boolean()) return fail(err, "logprobs", "expected true or false, got " + j["logprobs"].dump());
      if (j["logprobs"].get<bool>()) out->logprobs = 0;
    }
    if (j.contains("top_logprobs") && !j["top_logprobs"].is_null()) {
      int k = 0;
      if (!top_count("top_logprobs", &k)) return false;
      if (out->logprobs < 0 && k > 0) return fail(err, "top_logprobs", "needs logprobs: true");
      if (out->logprobs >= 0) out->logprobs = k;
    }
  } else if (has_logprobs) {
    if (!top_count("logprobs", &out->logprobs)) return false;  // completions: the number of alternatives
  }
  if (out->logprobs >= 0 && out->stream)
    return fail(err, "logprobs", "log-probabilities are served in a plain answer, not in a stream");
  if (out->echo && out->stream) return fail(err, "echo", "served in a plain answer, not in a stream");
  if (j.contains("user") && !j["user"].is_string()) return fail(err, "user", "expected a string");
  return true;
}

}  // namespace dayzero::serve
