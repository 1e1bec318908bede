// A model's chat template (tokenizer_config.json "chat_template", chat_template.jinja in the model
// folder, or a file the config names) rendered exactly as transformers' apply_chat_template renders
// it: by Jinja2 itself (Debian's python3-jinja2 in an embedded CPython), in transformers' sandboxed
// environment and with its settings (docs/serve.md "Chat templates"). Not the tokenization of the
// result (the caller encodes it without adding special tokens, as transformers does).
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace dayzero::tokenizer {
class Tokenizer;
}

namespace dayzero::chat {

class ChatTemplate {
 public:
  // Compiles the template text. InvalidArgument names `source` and Jinja2's own error (with its
  // line), or says that the engine could not start (python3-jinja2 missing).
  // The first call starts the embedded interpreter in this process; only the ranks that render call it.
  static Result<std::unique_ptr<ChatTemplate>> compile(const std::string& text, const std::string& source);
  ~ChatTemplate();
  ChatTemplate(const ChatTemplate&) = delete;
  ChatTemplate& operator=(const ChatTemplate&) = delete;

  // Renders with vars (messages, add_generation_prompt, bos_token, eos_token, tools, ...) as
  // apply_chat_template passes them: keys of a message whose value is null are dropped, a message's
  // reasoning is also given as `reasoning_content` and `thinking`, and `tools` and `documents` are
  // none when absent. InvalidArgument with the template's own message on a raise_exception() or a
  // render error. Thread-safe (it takes the interpreter's lock).
  // vars is ordered: a template's tojson writes an object's keys in the order they were given, as
  // Python's dicts keep them.
  Result<std::string> render(const nlohmann::ordered_json& vars) const;

  const std::string& source() const { return source_; }
  // Whether the template reads a message's content as a list of {"type": "text" | "image", ...}
  // parts (it loops over it, as processor templates do, e.g. llava's) rather than as a string.
  // The service then passes each message's content as parts, as vLLM does.
  bool reads_content_parts() const { return content_parts_; }

 private:
  ChatTemplate() = default;
  void* template_ = nullptr;  // the compiled jinja2.Template (a PyObject*)
  std::string source_;
  bool content_parts_ = false;
};

// The variables apply_chat_template takes from the tokenizer: bos_token (the BOS id's text) and
// eos_token (the first EOS id's text), each absent when the tokenizer has none. `serve` and `run`
// render with these, so a chat request and a run's messages: prompt are the same ids.
nlohmann::ordered_json special_token_vars(const tokenizer::Tokenizer& tok);

// Renders a chat (messages, a JSON list) with add_generation_prompt and the tokenizer's special
// tokens, then encodes it without adding special tokens (the template writes them), as
// apply_chat_template(tokenize=True) does. InvalidArgument: the template's refusal.
Result<std::vector<int32_t>> render_and_encode(const ChatTemplate& tpl, const tokenizer::Tokenizer& tok,
                                               const nlohmann::ordered_json& messages, bool add_generation_prompt);

// The model's chat template: chat_template.jinja in model_dir, else tokenizer_config.json's
// chat_template (a string, or the entry named "default" of a list); NotFound when it has none.
// *source (may be null) receives the file it came from.
Result<std::string> find_model_chat_template(const std::string& model_dir, std::string* source = nullptr);

}  // namespace dayzero::chat
