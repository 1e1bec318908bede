// Request parsing: one check per field, in the order a reader meets them; unknown fields and
// values this server cannot honour are refused, never ignored.
#include "serve/request.h"

#include <set>

namespace dayzero::serve {
namespace {

using nlohmann::json;

bool fail(ApiError* err, const std::string& param, const std::string& message, int status = 400) {
  *err = {status, param, (param.empty() ? "" : param + ": ") + message};
  return false;
}

std::string kind_of(const json& v) { return v.type_name(); }

bool parse_int(const json& v, const std::string& param, int min, int* out, ApiError* err) {
  if (!v.is_number_integer()) return fail(err, param, "expected an integer, got " + kind_of(v));
  const int64_t x = v.get<int64_t>();
  if (x < min || x > (int64_t{1} << 30)) return fail(err, param, "must be >= " + std::to_string(min) + ", got " + v.dump());
  *out = static_cast<int>(x);
  return true;
}

bool parse_content(const json& v, const std::string& param, const std::string& image_placeholder, std::string* out,
                   std::vector<std::pair<std::string, std::string>>* images, ApiError* err) {
  if (v.is_string()) {
    *out = v.get<std::string>();
    return true;
  }
  if (!v.is_array()) return fail(err, param, "expected a string or a list of content parts, got " + kind_of(v));
  for (size_t j = 0; j < v.size(); ++j) {
    const std::string p = param + "[" + std::to_string(j) + "]";
    const json& part = v[j];
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
      return fail(err, p, "expected a content part {\"type\": \"text\", \"text\": ...}");
    const std::string type = part["type"].get<std::string>();
    if (type == "image_url") {
      if (image_placeholder.empty()) return fail(err, p, "the model has no vision tower: send text parts only");
      for (const auto& [k, _] : part.items())
        if (k != "type" && k != "image_url") return fail(err, p + "." + k, "unknown field");
      const json& u = part.contains("image_url") ? part["image_url"] : json();
      const json url = u.is_string() ? u : u.is_object() && u.contains("url") ? u["url"] : json();
      if (!url.is_string()) return fail(err, p + ".image_url", "expected {\"url\": \"data:image/png;base64,...\"}");
      if (u.is_object())
        for (const auto& [k, _] : u.items())
          if (k != "url") return fail(err, p + ".image_url." + k, "unknown field");
      images->emplace_back(p + ".image_url", url.get<std::string>());
      *out += image_placeholder;
      continue;
    }
    if (type != "text") return fail(err, p + ".type", "unknown content part type '" + type + "'");
    for (const auto& [k, _] : part.items())
      if (k != "type" && k != "text") return fail(err, p + "." + k, "unknown field");
    if (!part.contains("text") || !part["text"].is_string()) return fail(err, p + ".text", "expected a string");
    *out += part["text"].get<std::string>();
  }
  return true;
}

}  // namespace

nlohmann::json ApiError::to_json() const {
  const char* type = status == 404 ? "not_found_error"
                     : status == 504 ? "timeout_error"
                     : status >= 500 ? "server_error"
                                     : "invalid_request_error";
  return {{"error", {{"message", message}, {"type", type}, {"param", param.empty() ? json() : json(param)},
                     {"code", nullptr}}}};
}

bool parse_request(Endpoint endpoint, std::string_view body, const std::string& model_id,
                   const std::string& image_placeholder, ApiRequest* out, ApiError* err) {
  *out = ApiRequest{};
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded()) return fail(err, "", "the body is not valid JSON");
  if (!j.is_object()) return fail(err, "", "the body must be a JSON object, got " + kind_of(j));
  const bool chat = endpoint == Endpoint::kChat;
  const std::set<std::string> known =
      chat ? std::set<std::string>{"model", "messages", "max_tokens", "max_completion_tokens", "stop", "stream",
                                   "temperature", "top_p", "seed", "n", "user"}
           : std::set<std::string>{"model", "prompt", "max_tokens", "stop", "stream", "temperature", "top_p", "seed",
                                   "n", "user"};
  for (const auto& [k, _] : j.items())
    if (!known.count(k)) return fail(err, k, "unknown field");
  out->endpoint = endpoint;
  if (j.contains("model")) {
    if (!j["model"].is_string()) return fail(err, "model", "expected a string, got " + kind_of(j["model"]));
    if (j["model"].get<std::string>() != model_id)
      return fail(err, "model", "the model '" + j["model"].get<std::string>() + "' is not served here; this server serves '" +
                                    model_id + "'", 404);
  }
  if (chat) {
    if (!j.contains("messages")) return fail(err, "messages", "required");
    const json& m = j["messages"];
    if (!m.is_array() || m.empty()) return fail(err, "messages", "expected a non-empty list of messages");
    for (size_t i = 0; i < m.size(); ++i) {
      const std::string p = "messages[" + std::to_string(i) + "]";
      if (!m[i].is_object()) return fail(err, p, "expected an object {\"role\": ..., \"content\": ...}");
      for (const auto& [k, _] : m[i].items())
        if (k != "role" && k != "content") return fail(err, p + "." + k, "unknown field");
      if (!m[i].contains("role") || !m[i]["role"].is_string()) return fail(err, p + ".role", "expected a string");
      ChatMessage msg;
      msg.role = m[i]["role"].get<std::string>();
      if (msg.role != "system" && msg.role != "user" && msg.role != "assistant")
        return fail(err, p + ".role", "expected system, user or assistant, got '" + msg.role + "'");
      if (!m[i].contains("content")) return fail(err, p + ".content", "required");
      if (!parse_content(m[i]["content"], p + ".content", image_placeholder, &msg.content, &out->images, err)) return false;
      out->messages.push_back(std::move(msg));
    }
  } else {
    if (!j.contains("prompt")) return fail(err, "prompt", "required");
    const json& p = j["prompt"];
    if (p.is_string()) {
      out->prompt_text = p.get<std::string>();
    } else if (p.is_array() && p.size() == 1 && p[0].is_string()) {
      out->prompt_text = p[0].get<std::string>();
    } else if (p.is_array() && !p.empty() && p[0].is_number_integer()) {
      std::vector<int32_t> ids;
      for (size_t i = 0; i < p.size(); ++i) {
        if (!p[i].is_number_integer() || p[i].get<int64_t>() < 0 || p[i].get<int64_t>() > INT32_MAX)
          return fail(err, "prompt[" + std::to_string(i) + "]", "expected a token id (an integer >= 0)");
        ids.push_back(p[i].get<int32_t>());
      }
      out->prompt_ids = std::move(ids);
    } else {
      return fail(err, "prompt", "expected a string, a list of one string or a non-empty list of token ids");
    }
    if (out->prompt_text && out->prompt_text->empty()) return fail(err, "prompt", "must not be empty");
  }
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    if (!j.contains(key) || j[key].is_null()) continue;
    int v = 0;
    if (!parse_int(j[key], key, 1, &v, err)) return false;
    out->max_tokens = v;
  }
  if (j.contains("stop") && !j["stop"].is_null()) {
    const json& s = j["stop"];
    if (s.is_string()) {
      out->stop.push_back(s.get<std::string>());
    } else if (s.is_array() && s.size() <= 4) {
      for (size_t i = 0; i < s.size(); ++i) {
        if (!s[i].is_string()) return fail(err, "stop[" + std::to_string(i) + "]", "expected a string");
        out->stop.push_back(s[i].get<std::string>());
      }
    } else {
      return fail(err, "stop", "expected a string or a list of at most 4 strings");
    }
    for (const std::string& x : out->stop)
      if (x.empty()) return fail(err, "stop", "a stop string must not be empty");
  }
  if (j.contains("stream") && !j["stream"].is_null()) {
    if (!j["stream"].is_boolean()) return fail(err, "stream", "expected true or false, got " + kind_of(j["stream"]));
    out->stream = j["stream"].get<bool>();
  }
  if (j.contains("temperature") && !j["temperature"].is_null()) {
    const json& t = j["temperature"];
    if (!t.is_number() || t.get<double>() < 0 || t.get<double>() > 2)
      return fail(err, "temperature", "expected a number from 0 (greedy) to 2, got " + t.dump());
    out->temperature = t.get<double>();
  }
  if (j.contains("top_p") && !j["top_p"].is_null()) {
    const json& t = j["top_p"];
    if (!t.is_number() || !(t.get<double>() > 0) || t.get<double>() > 1)
      return fail(err, "top_p", "expected a number in (0, 1], got " + t.dump());
    out->top_p = t.get<double>();
  }
  if (j.contains("seed") && !j["seed"].is_null()) {
    if (!j["seed"].is_number_integer() || j["seed"].get<int64_t>() < 0)
      return fail(err, "seed", "expected an integer >= 0, got " + j["seed"].dump());
    out->seed = j["seed"].get<uint64_t>();
  }
  if (j.contains("n") && !j["n"].is_null()) {
    if (!j["n"].is_number_integer() || j["n"].get<int64_t>() != 1)
      return fail(err, "n", "only 1 choice per request is served, got " + j["n"].dump());
  }
  if (j.contains("user") && !j["user"].is_string()) return fail(err, "user", "expected a string");
  return true;
}

}  // namespace dayzero::serve
