// The chat template of a model (tokenizer_config.json "chat_template", or chat_template.jinja in
// the model folder, or serve.chat_template) rendered by a documented subset of Jinja, the subset
// Hugging Face chat templates are mostly written in (docs/serve.md "Chat templates"). A template
// outside the subset is refused when it is compiled, at start-up, never rendered approximately.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <string>

#include "core/status.h"

namespace dayzero::serve {

class ChatTemplate {
 public:
  // Compiles the template text. InvalidArgument names `source` and the first construct outside
  // the subset, with its offset.
  static Result<std::unique_ptr<ChatTemplate>> compile(const std::string& text, const std::string& source);
  ~ChatTemplate();

  // Renders with the given variables (messages, add_generation_prompt, bos_token, eos_token,
  // ...); HF's trim_blocks and lstrip_blocks apply. InvalidArgument on a raise_exception() or a
  // value of the wrong kind (its message is the template's own).
  Result<std::string> render(const nlohmann::json& vars) const;

  struct Node;

 private:
  ChatTemplate() = default;
  std::unique_ptr<Node> root_;
};

// The model's chat template: chat_template.jinja in model_dir, else tokenizer_config.json's
// chat_template (a string, or the entry named "default" of a list); NotFound when it has none.
Result<std::string> find_model_chat_template(const std::string& model_dir);

}  // namespace dayzero::serve
