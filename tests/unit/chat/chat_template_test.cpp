// Chat templates: the real templates of the fixture tokenizers (Qwen3, DeepSeek-V3) rendered by
// dayzero's engine and encoded by its tokenizer equal, byte for byte and id for id, what
// transformers' apply_chat_template gives (tests/data/chat_template/, written by
// tools/make_chat_template_goldens.py), including the chats a template refuses; and transformers'
// environment: whitespace settings, loop controls, its tojson, raise_exception, strftime_now,
// namespace, and the sandbox.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "chat/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace dayzero::chat {
namespace {

// Ordered, as Python's dicts are: a template's tojson writes the keys in the order they came.
using json = nlohmann::ordered_json;

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::unique_ptr<ChatTemplate> must_compile(const std::string& tpl) {
  auto t = ChatTemplate::compile(tpl, "test.jinja");
  EXPECT_TRUE(t.ok()) << t.status().message();
  return t.ok() ? std::move(*t) : nullptr;
}

std::string render(const std::string& tpl, const json& vars) {
  auto t = must_compile(tpl);
  if (!t) return "";
  auto out = t->render(vars);
  EXPECT_TRUE(out.ok()) << out.status().message();
  return out.ok() ? *out : "";
}

class Golden : public ::testing::TestWithParam<std::string> {};

TEST_P(Golden, RendersAndEncodesAsTransformers) {
  const std::string name = GetParam();
  const std::string dir = std::string(DAYZERO_FIXTURES_DIR) + "/tokenizers/" + name;
  const std::string path = std::string(DAYZERO_SOURCE_DIR) + "/tests/data/chat_template/" + name + ".json";
  const json golden = json::parse(read_text(path));
  ASSERT_EQ(golden.at("magic"), "dayzero-chat-template-golden") << path;
  ASSERT_EQ(golden.at("format_version"), 1) << path;
  std::string source;
  auto text = find_model_chat_template(dir, &source);
  ASSERT_TRUE(text.ok()) << text.status().message();
  EXPECT_EQ(source, dir + "/tokenizer_config.json");
  auto tpl = ChatTemplate::compile(*text, source);
  ASSERT_TRUE(tpl.ok()) << tpl.status().message();
  auto tok = tokenizer::Tokenizer::load(dir);
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  int rendered = 0, refused = 0;
  for (const json& c : golden.at("cases")) {
    const std::string what = c.at("chat").get<std::string>() + (c.at("add_generation_prompt") ? " +gen" : "");
    // The variables the service gives: the tokenizer's BOS and EOS strings, the request's fields.
    json vars = json::object();
    for (const char* k : {"bos_token", "eos_token"})
      if (golden.at("special_tokens").contains(k)) vars[k] = golden["special_tokens"][k];
    if (c.contains("kwargs"))
      for (const auto& [k, v] : c["kwargs"].items()) vars[k] = v;
    vars["messages"] = c.at("messages");
    vars["add_generation_prompt"] = c.at("add_generation_prompt");
    if (c.contains("tools")) vars["tools"] = c["tools"];
    auto out = (*tpl)->render(vars);
    if (c.contains("error")) {
      ASSERT_FALSE(out.ok()) << what;
      // Jinja2's own error, as transformers raised it.
      const std::string err = c["error"].get<std::string>();
      EXPECT_NE(out.status().message().find(err.substr(err.find(": ") + 2)), std::string::npos)
          << what << ": " << out.status().message() << " vs " << err;
      ++refused;
      continue;
    }
    ASSERT_TRUE(out.ok()) << what << ": " << out.status().message();
    EXPECT_EQ(*out, c.at("text").get<std::string>()) << what;
    EXPECT_EQ((*tok)->encode(*out, false), c.at("ids").get<std::vector<int32_t>>()) << what;
    ++rendered;
  }
  EXPECT_GE(rendered, 14);
  std::cout << name << ": " << rendered << " renderings equal transformers', " << refused << " refused alike\n";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Golden, ::testing::Values("qwen3", "deepseek_v3"));

// llava-1.5's processor template, which loops over a message's content parts: rendered as
// transformers' render_jinja_template renders it (text only: the fixtures have no llava tokenizer),
// and recognised as reading parts, where the tokenizer templates above read a string.
TEST(ChatTemplate, ProcessorTemplateReadsContentParts) {
  const std::string path = std::string(DAYZERO_SOURCE_DIR) + "/tests/data/chat_template/llava.json";
  const json golden = json::parse(read_text(path));
  ASSERT_EQ(golden.at("magic"), "dayzero-chat-template-golden") << path;
  const std::string file = std::string(DAYZERO_SOURCE_DIR) + "/" + golden.at("template_file").get<std::string>();
  auto tpl = ChatTemplate::compile(json::parse(read_text(file)).at("chat_template").get<std::string>(), file);
  ASSERT_TRUE(tpl.ok()) << tpl.status().message();
  EXPECT_TRUE((*tpl)->reads_content_parts());
  int n = 0;
  for (const json& c : golden.at("cases")) {
    auto out = (*tpl)->render({{"messages", c.at("messages")}, {"add_generation_prompt", c.at("add_generation_prompt")}});
    ASSERT_TRUE(out.ok()) << out.status().message();
    EXPECT_EQ(*out, c.at("text").get<std::string>()) << c.at("chat");
    ++n;
  }
  EXPECT_EQ(n, 6);
  for (const char* name : {"qwen3", "deepseek_v3"}) {
    auto text = find_model_chat_template(std::string(DAYZERO_FIXTURES_DIR) + "/tokenizers/" + name);
    ASSERT_TRUE(text.ok());
    auto t = ChatTemplate::compile(*text, name);
    ASSERT_TRUE(t.ok());
    EXPECT_FALSE((*t)->reads_content_parts()) << name;
  }
  EXPECT_TRUE(must_compile("{% for m in messages %}{% for p in m.content | selectattr('type', 'equalto', 'text') %}"
                           "{{ p.text }}{% endfor %}{% endfor %}")->reads_content_parts());
  EXPECT_FALSE(must_compile("{% for m in messages %}{{ m.content }}{% endfor %}")->reads_content_parts());
}

TEST(ChatTemplate, TransformersEnvironment) {
  // trim_blocks drops the newline after a block tag; lstrip_blocks the indentation before one;
  // {%- and -%} strip all whitespace on their side; {{ }} tags are left alone.
  EXPECT_EQ(render("A\n  {% if true %}\nB {{ 'x' }}\n  {%- endif %}\nC\n{{- ' D' }}", json::object()), "A\nB xC D");
  // Loop controls, namespace(), transformers' tojson (no HTML escaping, non-ASCII kept, its options).
  EXPECT_EQ(render("{% for i in range(5) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 3 %}{% break %}{% endif %}"
                   "{{ i }}{% endfor %}",
                   json::object()),
            "02");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}",
                   {{"messages", {1, 2, 3}}}),
            "3");
  EXPECT_EQ(render("{{ x | tojson }}|{{ x | tojson(indent=2) }}", {{"x", {{"a", "<é>"}}}}),
            "{\"a\": \"<é>\"}|{\n  \"a\": \"<é>\"\n}");
  // strftime_now, the {% generation %} tag, and what apply_chat_template passes: tools none, keys
  // whose value is null dropped, reasoning under its three names.
  EXPECT_EQ(render("{{ strftime_now('%Y') | length }}", json::object()), "4");
  EXPECT_EQ(render("{% generation %}G{% endgeneration %}", json::object()), "G");
  EXPECT_EQ(render("{{ tools is defined }} {{ tools is none }} {{ add_generation_prompt }}", json::object()),
            "True True False");
  EXPECT_EQ(render("{{ messages[0].content is defined }} {{ messages[0].thinking }} {{ messages[0].reasoning_content }}",
                   {{"messages", {{{"role", "assistant"}, {"content", nullptr}, {"reasoning", "r"}}}}}),
            "False r r");
}

TEST(ChatTemplate, RaiseExceptionAndRenderErrors) {
  auto t = must_compile("{% if messages[0].role != 'user' %}{{ raise_exception('Conversation roles must alternate') }}"
                        "{% endif %}{{ messages[0].content }}");
  ASSERT_TRUE(t);
  EXPECT_EQ(*t->render({{"messages", {{{"role", "user"}, {"content", "hi"}}}}}), "hi");
  auto out = t->render({{"messages", {{{"role", "assistant"}, {"content", "x"}}}}});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("Conversation roles must alternate"), std::string::npos) << out.status().message();
  // The sandbox: no way out to Python's internals.
  auto escape = must_compile("{{ ''.__class__.__mro__[1].__subclasses__() }}");
  ASSERT_TRUE(escape);
  out = escape->render(json::object());
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("unsafe"), std::string::npos) << out.status().message();
  auto ns = must_compile("{% set ns = namespace(_x=1) %}");
  ASSERT_TRUE(ns);
  EXPECT_FALSE(ns->render(json::object()).ok());
}

TEST(ChatTemplate, RefusalNamesTheFileAndJinjasError) {
  for (const auto& [tpl, what] : std::vector<std::pair<const char*, const char*>>{
           {"{% for m in messages %}", "Unexpected end of template"},
           {"{{ 'a' ", "unexpected end of template"},
           {"{% frobnicate %}", "Encountered unknown tag 'frobnicate'"},
           {"line one\n{{ x | nosuchfilter }}", "No filter named 'nosuchfilter'"}}) {
    auto t = ChatTemplate::compile(tpl, "model/tokenizer_config.json");
    ASSERT_FALSE(t.ok()) << tpl;
    const std::string& msg = t.status().message();
    EXPECT_EQ(msg.rfind("model/tokenizer_config.json: ", 0), 0u) << msg;
    EXPECT_NE(msg.find("Template"), std::string::npos) << msg;  // TemplateSyntaxError / TemplateAssertionError
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
  }
  auto t = ChatTemplate::compile("line one\n{{ x | nosuchfilter }}", "t.jinja");
  EXPECT_NE(t.status().message().find("line 2"), std::string::npos) << t.status().message();
}

TEST(ChatTemplate, ConcurrentRendersAgree) {
  auto t = must_compile("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}");
  ASSERT_TRUE(t);
  const json vars = {{"messages", {{{"role", "user"}, {"content", "a"}}, {{"role", "assistant"}, {"content", "b"}}}}};
  std::vector<std::string> got(8);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < got.size(); ++i)
    threads.emplace_back([&, i] {
      for (int k = 0; k < 50; ++k) got[i] = *t->render(vars);
    });
  for (auto& th : threads) th.join();
  for (const auto& g : got) EXPECT_EQ(g, "<user>a<assistant>b");
}

}  // namespace
}  // namespace dayzero::chat
