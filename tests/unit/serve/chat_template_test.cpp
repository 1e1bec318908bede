// The chat template subset: real templates' shapes rendered to the exact text transformers'
// apply_chat_template gives (worked out by hand from the Jinja semantics, trim_blocks and
// lstrip_blocks on), and templates outside the subset refused at compile time.
#include <gtest/gtest.h>

#include "serve/chat_template.h"

namespace dayzero::serve {
namespace {

using nlohmann::json;

std::string render(const std::string& tpl, const json& vars) {
  auto t = ChatTemplate::compile(tpl, "test.jinja");
  EXPECT_TRUE(t.ok()) << t.status().message();
  if (!t.ok()) return "";
  auto out = (*t)->render(vars);
  EXPECT_TRUE(out.ok()) << out.status().message();
  return out.ok() ? *out : "";
}

const json kUser = json::array({{{"role", "user"}, {"content", "Hi"}}});

TEST(ChatTemplate, ChatMlWithDefaultSystem) {
  const std::string tpl =
      "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
      "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
      "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
      "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
  EXPECT_EQ(render(tpl, {{"messages", kUser}, {"add_generation_prompt", true}}),
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(render(tpl, {{"messages", kUser}, {"add_generation_prompt", false}}),
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
}

TEST(ChatTemplate, Llama2StyleAlternationAndSystem) {
  const std::string tpl =
      "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
      "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
      "{% set system_message = false %}{% endif %}"
      "{% for message in loop_messages %}"
      "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
      "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
      "{% if loop.index0 == 0 and system_message != false %}"
      "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
      "{% else %}{% set content = message['content'] %}{% endif %}"
      "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
      "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}";
  const json msgs = json::array({{{"role", "system"}, {"content", "Be brief."}},
                                 {{"role", "user"}, {"content", "Hi "}},
                                 {{"role", "assistant"}, {"content", "Hello"}},
                                 {{"role", "user"}, {"content", "Bye"}}});
  EXPECT_EQ(render(tpl, {{"messages", msgs}, {"bos_token", "<s>"}, {"eos_token", "</s>"}}),
            "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello </s><s>[INST] Bye [/INST]");
  // Roles out of order: the template's own raise_exception, as a render error.
  auto t = ChatTemplate::compile(tpl, "llama2.jinja");
  ASSERT_TRUE(t.ok());
  const json bad = json::array({{{"role", "assistant"}, {"content", "x"}}});
  auto out = (*t)->render({{"messages", bad}, {"bos_token", "<s>"}, {"eos_token", "</s>"}});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("Conversation roles must alternate"), std::string::npos);
}

TEST(ChatTemplate, WhitespaceControlTrimAndLstripBlocks) {
  // trim_blocks drops the newline after a block tag; lstrip_blocks the indentation before one;
  // {%- and -%} strip all whitespace on their side; {{ }} tags are left alone.
  const std::string tpl = "A\n  {% if true %}\nB {{ 'x' }}\n  {%- endif %}\nC\n{{- ' D' }}";
  EXPECT_EQ(render(tpl, json::object()), "A\nB xC D");
}

TEST(ChatTemplate, TestsFiltersAndLoopVariables) {
  const std::string tpl =
      "{% for m in messages %}{{ loop.index }}/{{ loop.length }}:{{ m.content | upper }}"
      "{% if not loop.last %},{% endif %}{% endfor %}|{{ tools is defined }}|{{ messages | length }}"
      "|{{ 'ab' in 'xaby' }}|{{ none is none }}|{{ 'x' ~ 3 }}";
  const json msgs = json::array({{{"role", "user"}, {"content", "a"}}, {{"role", "user"}, {"content", "b"}}});
  EXPECT_EQ(render(tpl, {{"messages", msgs}}), "1/2:A,2/2:B|False|2|True|True|x3");
}

TEST(ChatTemplate, RefusesWhatItCannotRender) {
  for (const char* tpl : {"{% macro f() %}{% endmacro %}",         // macros
                          "{{ messages | map(attribute='role') }}",  // filters outside the subset
                          "{% set ns = namespace(x=1) %}",           // namespace()
                          "{{ x.items() }}",                         // methods outside the subset
                          "{% for m in messages %}",                 // unclosed
                          "{{ 'a' "}) {                              // unclosed tag
    auto t = ChatTemplate::compile(tpl, "model/tokenizer_config.json");
    ASSERT_FALSE(t.ok()) << tpl;
    EXPECT_NE(t.status().message().find("model/tokenizer_config.json"), std::string::npos) << t.status().message();
    EXPECT_NE(t.status().message().find("outside the Jinja subset"), std::string::npos) << t.status().message();
  }
}

}  // namespace
}  // namespace dayzero::serve
