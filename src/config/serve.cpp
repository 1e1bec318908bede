// The serve section of a run config (ServeConfig): read only by `dayzero serve`.
#include <filesystem>

#include "config/run_config_internal.h"

namespace dayzero::config::parse_internal {

Status Parser::parse_serve(const YAML::Node& n) {
  DZ_RETURN_IF_ERROR(check_map(n, "serve", {"host", "port", "max_body_bytes", "max_request_tokens", "request_timeout_s",
                                            "drain_s", "http_threads", "chat_template", "image_dir", "dump_requests", "max_queue"}));
  ServeConfig& s = cfg_->serve;
  if (given(n["dump_requests"]))
    DZ_RETURN_IF_ERROR(get_bool(n["dump_requests"], "serve.dump_requests", &s.dump_requests));
  if (given(n["host"])) DZ_RETURN_IF_ERROR(get_string(n["host"], "serve.host", &s.host));
  if (given(n["port"])) {
    DZ_RETURN_IF_ERROR(get_int(n["port"], "serve.port", &s.port));
    if (s.port < 1 || s.port > 65535) return error(n["port"], "serve.port", "must be 1..65535, got " + n["port"].Scalar());
  }
  for (const auto& [key, value] : {std::pair<const char*, int64_t*>{"max_body_bytes", &s.max_body_bytes},
                                   {"max_request_tokens", &s.max_request_tokens},
                                   {"max_queue", &s.max_queue}}) {
    if (!given(n[key])) continue;
    const std::string path = std::string("serve.") + key;
    DZ_RETURN_IF_ERROR(get_int64(n[key], path, value));
    if (*value < 1) return error(n[key], path, "must be >= 1, got " + n[key].Scalar());
  }
  if (given(n["request_timeout_s"])) {
    DZ_RETURN_IF_ERROR(get_double(n["request_timeout_s"], "serve.request_timeout_s", &s.request_timeout_s));
    if (!(s.request_timeout_s > 0))
      return error(n["request_timeout_s"], "serve.request_timeout_s", "must be a number of seconds > 0");
  }
  if (given(n["drain_s"])) {
    DZ_RETURN_IF_ERROR(get_double(n["drain_s"], "serve.drain_s", &s.drain_s));
    if (s.drain_s < 0) return error(n["drain_s"], "serve.drain_s", "must be a number of seconds >= 0");
  }
  if (given(n["http_threads"])) {
    DZ_RETURN_IF_ERROR(get_int(n["http_threads"], "serve.http_threads", &s.http_threads));
    if (s.http_threads < 1 || s.http_threads > 4096)
      return error(n["http_threads"], "serve.http_threads", "must be 1..4096");
  }
  for (const auto& [key, value] : {std::pair<const char*, std::optional<std::string>*>{"chat_template", &s.chat_template},
                                   {"image_dir", &s.image_dir}}) {
    if (!given(n[key])) continue;
    const std::string path = std::string("serve.") + key;
    std::string p;
    DZ_RETURN_IF_ERROR(get_string(n[key], path, &p));
    if (p.empty()) return error(n[key], path, "must not be empty");
    const std::filesystem::path fp(p);
    *value = fp.is_absolute() || cfg_->base_dir.empty()
                 ? p
                 : (std::filesystem::path(cfg_->base_dir) / fp).lexically_normal().string();
  }
  return Status::Ok();
}

}  // namespace dayzero::config::parse_internal
