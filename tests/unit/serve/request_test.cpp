// Request parsing: good bodies of both endpoints, and every refusal naming its field.
#include <gtest/gtest.h>

#include "serve/request.h"

namespace dayzero::serve {
namespace {

ApiError refuse(Endpoint e, const std::string& body) {
  ApiRequest r;
  ApiError err;
  EXPECT_FALSE(parse_request(e, body, "tiny", "", &r, &err)) << body;
  return err;
}

TEST(Request, CompletionsFields) {
  ApiRequest r;
  ApiError err;
  ASSERT_TRUE(parse_request(Endpoint::kCompletions,
                            R"({"model": "tiny", "prompt": "Hi", "max_tokens": 5, "stop": ["\n"], "stream": true,
                                "temperature": 0.5, "top_p": 0.9, "seed": 7, "n": 1, "user": "u"})",
                            "tiny", "", &r, &err))
      << err.message;
  EXPECT_EQ(*r.prompt_text, "Hi");
  EXPECT_EQ(*r.max_tokens, 5);
  EXPECT_EQ(r.stop, std::vector<std::string>{"\n"});
  EXPECT_TRUE(r.stream);
  EXPECT_EQ(r.temperature, 0.5);
  EXPECT_EQ(r.top_p, 0.9);
  EXPECT_EQ(*r.seed, 7u);
  ASSERT_TRUE(parse_request(Endpoint::kCompletions, R"({"prompt": [1, 2, 3]})", "tiny", "", &r, &err));
  EXPECT_EQ(*r.prompt_ids, (std::vector<int32_t>{1, 2, 3}));
}

TEST(Request, ChatFields) {
  ApiRequest r;
  ApiError err;
  ASSERT_TRUE(parse_request(Endpoint::kChat,
                            R"({"messages": [{"role": "system", "content": "S"},
                                {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
                                "max_completion_tokens": 3})",
                            "tiny", "", &r, &err))
      << err.message;
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[1].content, "ab");
  EXPECT_EQ(*r.max_tokens, 3);
  ASSERT_TRUE(parse_request(Endpoint::kChat,
                            R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "a "},
                                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}]}]})",
                            "tiny", "<image>", &r, &err))
      << err.message;
  EXPECT_EQ(r.messages[0].content, "a <image>");
  ASSERT_EQ(r.images.size(), 1u);
  EXPECT_EQ(r.images[0].first, "messages[0].content[1].image_url");
  EXPECT_EQ(r.images[0].second, "data:image/png;base64,AA==");
  ASSERT_TRUE(parse_request(Endpoint::kChat,
                            R"({"messages": [{"role": "system", "content": "S"},
                                {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
                                "max_completion_tokens": 3})",
                            "tiny", "", &r, &err));
  EXPECT_EQ(r.messages.size(), 2u);  // each parse starts from an empty request
  EXPECT_TRUE(r.images.empty());
}

TEST(Request, RefusalsNameTheField) {
  struct Case {
    Endpoint e;
    const char* body;
    int status;
    const char* param;
  } cases[] = {
      {Endpoint::kCompletions, "{oops", 400, ""},
      {Endpoint::kCompletions, "[1]", 400, ""},
      {Endpoint::kCompletions, R"({"prompt": "a", "echo": true})", 400, "echo"},
      {Endpoint::kCompletions, R"({})", 400, "prompt"},
      {Endpoint::kCompletions, R"({"prompt": ""})", 400, "prompt"},
      {Endpoint::kCompletions, R"({"prompt": [1, -2]})", 400, "prompt[1]"},
      {Endpoint::kCompletions, R"({"prompt": "a", "max_tokens": "5"})", 400, "max_tokens"},
      {Endpoint::kCompletions, R"({"prompt": "a", "max_tokens": 0})", 400, "max_tokens"},
      {Endpoint::kCompletions, R"({"prompt": "a", "stop": ["a", "b", "c", "d", "e"]})", 400, "stop"},
      {Endpoint::kCompletions, R"({"prompt": "a", "stop": [""]})", 400, "stop"},
      {Endpoint::kCompletions, R"({"prompt": "a", "stream": "yes"})", 400, "stream"},
      {Endpoint::kCompletions, R"({"prompt": "a", "temperature": 2.5})", 400, "temperature"},
      {Endpoint::kCompletions, R"({"prompt": "a", "top_p": 0})", 400, "top_p"},
      {Endpoint::kCompletions, R"({"prompt": "a", "seed": -1})", 400, "seed"},
      {Endpoint::kCompletions, R"({"prompt": "a", "n": 2})", 400, "n"},
      {Endpoint::kCompletions, R"({"prompt": "a", "model": "big"})", 404, "model"},
      {Endpoint::kChat, R"({"prompt": "a"})", 400, "prompt"},
      {Endpoint::kChat, R"({"messages": {}})", 400, "messages"},
      {Endpoint::kChat, R"({"messages": [{"role": "user"}]})", 400, "messages[0].content"},
      {Endpoint::kChat, R"({"messages": [{"role": "tool", "content": "x"}]})", 400, "messages[0].role"},
      {Endpoint::kChat, R"({"messages": [{"role": "user", "content": "x", "name": "n"}]})", 400, "messages[0].name"},
      {Endpoint::kChat, R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]})", 400,
       "messages[0].content[0]"},
      {Endpoint::kChat, R"({"messages": [{"role": "user", "content": [{"type": "audio"}]}]})", 400,
       "messages[0].content[0].type"},
  };
  for (const Case& c : cases) {
    const ApiError err = refuse(c.e, c.body);
    EXPECT_EQ(err.status, c.status) << c.body;
    EXPECT_EQ(err.param, c.param) << c.body << ": " << err.message;
    if (*c.param) {
      EXPECT_EQ(err.message.rfind(std::string(c.param) + ": ", 0), 0u) << err.message;
    }
    const nlohmann::json j = err.to_json();
    EXPECT_EQ(j["error"]["message"], err.message);
  }
}

}  // namespace
}  // namespace dayzero::serve
