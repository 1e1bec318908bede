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
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(*r.prompts[0].text, "Hi");
  EXPECT_EQ(r.prompts[0].param, "prompt");
  EXPECT_EQ(*r.max_tokens, 5);
  EXPECT_EQ(r.stop, std::vector<std::string>{"\n"});
  EXPECT_TRUE(r.stream);
  EXPECT_EQ(r.sampling.temperature, 0.5);
  EXPECT_EQ(r.sampling.top_p, 0.9);
  EXPECT_EQ(r.sampling.seed, 7u);
  EXPECT_TRUE(r.seed_given);
  EXPECT_TRUE(r.sampling.neutral());
  ASSERT_TRUE(parse_request(Endpoint::kCompletions, R"({"prompt": [1, 2, 3]})", "tiny", "", &r, &err));
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(*r.prompts[0].ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_FALSE(r.seed_given);
}

// What lm-eval, vllm bench serve and the OpenAI SDK send: batches of prompts, the neutral
// penalties, stream_options, vLLM's extra sampling fields, more than 4 stop strings.
TEST(Request, ClientFields) {
  ApiRequest r;
  ApiError err;
  ASSERT_TRUE(parse_request(Endpoint::kCompletions, R"({"prompt": [[1, 2], [3]], "temperature": 0, "seed": 1234,
                                "max_tokens": 1, "frequency_penalty": 0, "presence_penalty": 0, "logit_bias": {},
                                "n": 1, "best_of": 1, "stop": ["a", "b", "c", "d", "e"]})",
                            "tiny", "", &r, &err))
      << err.message;
  ASSERT_EQ(r.prompts.size(), 2u);
  EXPECT_EQ(*r.prompts[0].ids, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(*r.prompts[1].ids, (std::vector<int32_t>{3}));
  EXPECT_EQ(r.prompts[1].param, "prompt[1]");
  EXPECT_EQ(r.stop.size(), 5u);
  EXPECT_TRUE(r.sampling.neutral());
  ASSERT_TRUE(parse_request(Endpoint::kCompletions, R"({"prompt": ["x", "y", "z"]})", "tiny", "", &r, &err));
  ASSERT_EQ(r.prompts.size(), 3u);
  EXPECT_EQ(*r.prompts[2].text, "z");
  ASSERT_TRUE(parse_request(Endpoint::kChat, R"({"messages": [{"role": "user", "content": "x"}], "stream": true,
                                "stream_options": {"include_usage": true}, "top_k": 5, "min_p": 0.1,
                                "repetition_penalty": 1.2, "frequency_penalty": 0.5, "presence_penalty": -0.5,
                                "logit_bias": {"7": -100, "9": 2.5}, "min_tokens": 3, "ignore_eos": true})",
                            "tiny", "", &r, &err))
      << err.message;
  EXPECT_TRUE(r.include_usage);
  EXPECT_TRUE(r.ignore_eos);
  EXPECT_EQ(r.sampling.top_k, 5);
  EXPECT_EQ(r.sampling.min_p, 0.1);
  EXPECT_EQ(r.sampling.repetition_penalty, 1.2);
  EXPECT_EQ(r.sampling.frequency_penalty, 0.5);
  EXPECT_EQ(r.sampling.presence_penalty, -0.5);
  EXPECT_EQ(r.sampling.logit_bias, (std::map<int32_t, double>{{7, -100}, {9, 2.5}}));
  EXPECT_EQ(r.sampling.min_tokens, 3);
  EXPECT_FALSE(r.sampling.neutral());
  // What travels to the ranks that sample comes back the same.
  const SamplingParams back = nlohmann::json(r.sampling).get<SamplingParams>();
  EXPECT_EQ(back.logit_bias, r.sampling.logit_bias);
  EXPECT_EQ(back.repetition_penalty, 1.2);
  EXPECT_EQ(back.min_tokens, 3);
  EXPECT_EQ(r.logprobs, -1);
  // lm-eval's log-likelihood request: echo, logprobs 1, max_tokens 0 or 1.
  ASSERT_TRUE(parse_request(Endpoint::kCompletions, R"({"prompt": [[1, 2]], "echo": true, "logprobs": 1, "max_tokens": 0})",
                            "tiny", "", &r, &err))
      << err.message;
  EXPECT_TRUE(r.echo);
  EXPECT_EQ(r.logprobs, 1);
  EXPECT_EQ(*r.max_tokens, 0);
  ASSERT_TRUE(parse_request(Endpoint::kChat, R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true,
                                "top_logprobs": 3})",
                            "tiny", "", &r, &err))
      << err.message;
  EXPECT_EQ(r.logprobs, 3);
  ASSERT_TRUE(parse_request(Endpoint::kChat, R"({"messages": [{"role": "user", "content": "x"}], "logprobs": false,
                                "top_logprobs": 0})",
                            "tiny", "", &r, &err))
      << err.message;
  EXPECT_EQ(r.logprobs, -1);
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
      {Endpoint::kCompletions, R"({"prompt": "a", "echo": 1})", 400, "echo"},
      {Endpoint::kCompletions, R"({"prompt": "a", "logprobs": 21})", 400, "logprobs"},
      {Endpoint::kCompletions, R"({"prompt": "a", "logprobs": true})", 400, "logprobs"},
      {Endpoint::kCompletions, R"({"prompt": "a", "logprobs": 1, "stream": true})", 400, "logprobs"},
      {Endpoint::kCompletions, R"({"prompt": "a", "echo": true, "stream": true})", 400, "echo"},
      {Endpoint::kCompletions, R"({"prompt": "a", "echo": true, "max_tokens": -1})", 400, "max_tokens"},
      {Endpoint::kChat, R"({"messages": [{"role": "user", "content": "x"}], "logprobs": 1})", 400, "logprobs"},
      {Endpoint::kChat, R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", 400, "top_logprobs"},
      {Endpoint::kChat, R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 21})", 400,
       "top_logprobs"},
      {Endpoint::kCompletions, R"({})", 400, "prompt"},
      {Endpoint::kCompletions, R"({"prompt": ""})", 400, "prompt"},
      {Endpoint::kCompletions, R"({"prompt": [1, -2]})", 400, "prompt[1]"},
      {Endpoint::kCompletions, R"({"prompt": "a", "max_tokens": "5"})", 400, "max_tokens"},
      {Endpoint::kCompletions, R"({"prompt": "a", "max_tokens": 0})", 400, "max_tokens"},  // 0 only with echo
      {Endpoint::kCompletions, R"({"prompt": "a", "stop": ["a", 3]})", 400, "stop[1]"},
      {Endpoint::kCompletions, R"({"prompt": ["a", ""]})", 400, "prompt[1]"},
      {Endpoint::kCompletions, R"({"prompt": [[1], [2, -1]]})", 400, "prompt[1][1]"},
      {Endpoint::kCompletions, R"({"prompt": [[1], 3]})", 400, "prompt[1]"},
      {Endpoint::kCompletions, R"({"prompt": []})", 400, "prompt"},
      {Endpoint::kCompletions, R"({"prompt": "a", "stream_options": {"include_usage": true}})", 400, "stream_options"},
      {Endpoint::kCompletions, R"({"prompt": "a", "stream": true, "stream_options": {"x": 1}})", 400, "stream_options.x"},
      {Endpoint::kCompletions, R"({"prompt": "a", "frequency_penalty": 3})", 400, "frequency_penalty"},
      {Endpoint::kCompletions, R"({"prompt": "a", "presence_penalty": "0"})", 400, "presence_penalty"},
      {Endpoint::kCompletions, R"({"prompt": "a", "repetition_penalty": 0})", 400, "repetition_penalty"},
      {Endpoint::kCompletions, R"({"prompt": "a", "logit_bias": {"x": 1}})", 400, "logit_bias.x"},
      {Endpoint::kCompletions, R"({"prompt": "a", "logit_bias": {"5": 101}})", 400, "logit_bias.5"},
      {Endpoint::kCompletions, R"({"prompt": "a", "top_k": -2})", 400, "top_k"},
      {Endpoint::kCompletions, R"({"prompt": "a", "min_p": 1.5})", 400, "min_p"},
      {Endpoint::kCompletions, R"({"prompt": "a", "min_tokens": -1})", 400, "min_tokens"},
      {Endpoint::kCompletions, R"({"prompt": "a", "ignore_eos": 1})", 400, "ignore_eos"},
      {Endpoint::kCompletions, R"({"prompt": "a", "best_of": 2})", 400, "best_of"},
      {Endpoint::kCompletions, R"({"prompt": "a", "suffix": "b"})", 400, "suffix"},
      {Endpoint::kCompletions, R"({"prompt": "a", "stop": [""]})", 400, "stop"},
      {Endpoint::kCompletions, R"({"prompt": "a", "stream": "yes"})", 400, "stream"},
      {Endpoint::kCompletions, R"({"prompt": "a", "temperature": 2.5})", 400, "temperature"},
      {Endpoint::kCompletions, R"({"prompt": "a", "top_p": 0})", 400, "top_p"},
      {Endpoint::kCompletions, R"({"prompt": "a", "seed": -1})", 400, "seed"},
      {Endpoint::kCompletions, R"({"prompt": "a", "n": 2})", 400, "n"},
      {Endpoint::kCompletions, R"({"prompt": "a", "model": "big"})", 404, "model"},
      {Endpoint::kChat, R"({"messages": [{"role": "user", "content": "x"}], "echo": true})", 400, "echo"},
      {Endpoint::kChat, R"({"prompt": "a"})", 400, "prompt"},
      {Endpoint::kChat, R"({"messages": {}})", 400, "messages"},
      {Endpoint::kChat, R"({"messages": [{"role": "user"}]})", 400, "messages[0].content"},
      {Endpoint::kChat, R"({"messages": [{"role": "robot", "content": "x"}]})", 400, "messages[0].role"},
      {Endpoint::kChat, R"({"messages": [{"role": "user", "content": "x", "nom": "n"}]})", 400, "messages[0].nom"},
      {Endpoint::kChat, R"({"messages": [{"role": "user", "content": null}]})", 400, "messages[0].content"},
      {Endpoint::kChat, R"({"messages": [{"role": "user", "content": "x", "tool_calls": 3}]})", 400,
       "messages[0].tool_calls"},
      {Endpoint::kChat, R"({"messages": [{"role": "user", "content": "x"}], "tools": {}})", 400, "tools"},
      {Endpoint::kChat, R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"messages": 1}})",
       400, "chat_template_kwargs.messages"},
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
    EXPECT_EQ(j["error"]["code"], c.status == 404 ? nlohmann::json("model_not_found") : nlohmann::json()) << c.body;
  }
}

}  // namespace
}  // namespace dayzero::serve
