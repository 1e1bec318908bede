// Tokenizer tests: the three fixture tokenizers against goldens written by
// tools/make_tokenizer_goldens.py (Python `tokenizers` ids, decoded text, transformers ids),
// small hand-built tokenizer.json files for options the fixtures do not use, the trainer,
// and the error cases. Not a benchmark: the qwen3 load time is printed, not judged.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "tools/bpe_trainer.h"

namespace dayzero::tokenizer {
namespace {

using nlohmann::json;

std::string fixture_dir(const std::string& name) {
  return std::string(DAYZERO_FIXTURES_DIR) + "/tokenizers/" + name;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

std::vector<int32_t> as_ids(const json& value) { return value.get<std::vector<int32_t>>(); }

std::string show(const std::vector<int32_t>& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) out += (i ? ", " : "") + std::to_string(ids[i]);
  return out + "]";
}

// "first mismatch at index i" for id lists, empty when equal.
std::string first_mismatch(const std::vector<int32_t>& got, const std::vector<int32_t>& want) {
  if (got == want) return "";
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  return "first mismatch at index " + std::to_string(i) + "\n  got  " + show(got) + "\n  want " + show(want);
}

// ---------------------------------------------------------------------------------------------
// Goldens of the real tokenizers.

class FixtureGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(FixtureGolden, MatchesPythonTokenizers) {
  const std::string name = GetParam();
  const auto start = std::chrono::steady_clock::now();
  auto loaded = Tokenizer::load(fixture_dir(name));
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  const Tokenizer& tok = **loaded;

  const std::string golden_path = std::string(DAYZERO_SOURCE_DIR) + "/tests/data/tokenizer/" + name + ".json";
  const json golden = json::parse(read_text(golden_path));
  ASSERT_EQ(golden.at("magic"), "dayzero-tokenizer-golden") << golden_path;
  ASSERT_EQ(golden.at("format_version"), 1) << golden_path;

  EXPECT_EQ(tok.vocab_size(), golden.at("vocab_size_with_added").get<int32_t>());
  if (golden.at("bos_id").is_null()) {
    EXPECT_FALSE(tok.bos_id().has_value());
  } else {
    ASSERT_TRUE(tok.bos_id().has_value());
    EXPECT_EQ(*tok.bos_id(), golden.at("bos_id").get<int32_t>());
  }
  EXPECT_EQ(tok.eos_ids(), as_ids(golden.at("eos_ids")));

  size_t n_cases = 0, n_failed = 0, n_transformers_differ = 0;
  for (const auto& c : golden.at("cases")) {
    const std::string text = c.at("text").get<std::string>();
    const std::string where = name + " case " + std::to_string(n_cases) + " " + json(text).dump();
    ++n_cases;
    const auto ids = tok.encode(text, /*add_special_tokens=*/false);
    const auto ids_special = tok.encode(text);
    const std::string decoded = tok.decode(ids_special);
    const std::string decoded_skip = tok.decode(ids_special, /*skip_special_tokens=*/true);
    bool ok = true;
    if (auto m = first_mismatch(ids, as_ids(c.at("ids"))); !m.empty()) {
      ADD_FAILURE() << where << " add_special_tokens=false: " << m;
      ok = false;
    }
    if (auto m = first_mismatch(ids_special, as_ids(c.at("ids_with_special"))); !m.empty()) {
      ADD_FAILURE() << where << " add_special_tokens=true: " << m;
      ok = false;
    }
    if (decoded != c.at("decoded").get<std::string>()) {
      ADD_FAILURE() << where << " decode: got " << json(decoded).dump() << " want " << c.at("decoded").dump();
      ok = false;
    }
    if (decoded_skip != c.at("decoded_skip_special").get<std::string>()) {
      ADD_FAILURE() << where << " decode(skip_special_tokens): got " << json(decoded_skip).dump() << " want "
                    << c.at("decoded_skip_special").dump();
      ok = false;
    }
    // transformers 5 ids. Where they differ from tokenizer.json's pipeline (its LlamaTokenizer
    // swaps the Prepend normalizer for a Metaspace pre-tokenizer, which treats leading spaces
    // differently) the special tokens added around the text must still agree: that is what
    // add_bos_token handling decides.
    const auto transformers_ids = as_ids(c.at("transformers_ids"));
    if (transformers_ids != ids_special) {
      ++n_transformers_differ;
      auto leading = [&](const std::vector<int32_t>& v) {
        std::vector<int32_t> out;
        for (int32_t id : v) {
          if (!tok.is_special(id)) break;
          out.push_back(id);
        }
        return out;
      };
      auto trailing = [&](const std::vector<int32_t>& v) {
        std::vector<int32_t> out;
        for (auto it = v.rbegin(); it != v.rend() && tok.is_special(*it); ++it) out.push_back(*it);
        return out;
      };
      if (leading(transformers_ids) != leading(ids_special) || trailing(transformers_ids) != trailing(ids_special)) {
        ADD_FAILURE() << where << " special tokens differ from transformers: "
                      << first_mismatch(ids_special, transformers_ids);
        ok = false;
      }
    }
    n_failed += ok ? 0 : 1;
  }
  EXPECT_EQ(n_transformers_differ, golden.at("n_transformers_differ").get<size_t>());
  EXPECT_GE(n_cases, 60u);
  std::printf("[ golden   ] %s: %zu/%zu cases match (tokenizers %s), %zu where transformers %s differs; "
              "load %.3f s\n",
              name.c_str(), n_cases - n_failed, n_cases, golden.at("tokenizers_version").get<std::string>().c_str(),
              n_transformers_differ, golden.at("transformers_version").get<std::string>().c_str(), load_s);
}

INSTANTIATE_TEST_SUITE_P(Tokenizer, FixtureGolden,
                         ::testing::Values("qwen3", "deepseek_v3", "sentencepiece_bpe_32k"));

TEST(Tokenizer, FixtureAccessors) {
  auto qwen = Tokenizer::load(fixture_dir("qwen3"));
  ASSERT_TRUE(qwen.ok()) << qwen.status().message();
  EXPECT_EQ((*qwen)->token_to_id("<|im_start|>"), 151644);
  EXPECT_EQ((*qwen)->id_to_token(151644), "<|im_start|>");
  EXPECT_TRUE((*qwen)->is_special(151644));
  EXPECT_FALSE((*qwen)->is_special(151668));  // </think> is added but not special
  EXPECT_FALSE((*qwen)->is_special(9707));
  EXPECT_EQ((*qwen)->id_to_token(9707), "Hello");
  EXPECT_EQ((*qwen)->id_to_token(-1), "");
  EXPECT_EQ((*qwen)->id_to_token(10'000'000), "");
  EXPECT_FALSE((*qwen)->token_to_id("no such token here").has_value());
  const std::vector<int32_t> with_unknown = {9707, 10'000'000, 1879};
  EXPECT_EQ((*qwen)->decode(with_unknown), "Hello world");

  // Byte-level output that is not UTF-8 decodes as Rust's from_utf8_lossy does: one U+FFFD per
  // maximal invalid subsequence ("æ" is byte 0xE6, "Ĥ" byte 0x82). Python: "\ufffdHello\ufffd".
  const std::vector<int32_t> partial = {162, 9707, 162, 224};
  EXPECT_EQ((*qwen)->decode(partial), "\xEF\xBF\xBDHello\xEF\xBF\xBD");

  auto sp = Tokenizer::load(fixture_dir("sentencepiece_bpe_32k"));
  ASSERT_TRUE(sp.ok()) << sp.status().message();
  EXPECT_EQ((*sp)->token_to_id("<0x0A>"), 13);
  EXPECT_EQ((*sp)->token_to_id("\xE2\x96\x81The"), 415);
  // Invalid UTF-8 in the input is encoded as U+FFFD, as Python would receive it.
  EXPECT_EQ((*sp)->decode((*sp)->encode("a\xFFz", false)), "a\xEF\xBF\xBDz");
  // Byte-fallback tokens that do not form UTF-8 give one U+FFFD each. Python: "\ufffd\ufffd Hello".
  const std::vector<int32_t> bytes = {233, 154, 22557};
  EXPECT_EQ((*sp)->decode(bytes), "\xEF\xBF\xBD\xEF\xBF\xBD Hello");
}

TEST(Tokenizer, ConcurrentEncodeMatchesSerial) {
  auto loaded = Tokenizer::load(fixture_dir("sentencepiece_bpe_32k"));
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  const Tokenizer& tok = **loaded;
  const json golden = json::parse(read_text(std::string(DAYZERO_SOURCE_DIR) + "/tests/data/tokenizer/sentencepiece_bpe_32k.json"));
  std::vector<std::string> texts;
  std::vector<std::vector<int32_t>> want;
  for (const auto& c : golden.at("cases")) {
    texts.push_back(c.at("text").get<std::string>());
    want.push_back(as_ids(c.at("ids_with_special")));
  }
  // Several threads share one tokenizer (and its word cache); every result must be exact.
  std::vector<int> failures(4, 0);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < failures.size(); ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round) {
        for (size_t i = 0; i < texts.size(); ++i) {
          size_t k = (i + t * 7 + static_cast<size_t>(round)) % texts.size();
          if (tok.encode(texts[k]) != want[k]) ++failures[t];
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (size_t t = 0; t < failures.size(); ++t) EXPECT_EQ(failures[t], 0) << "thread " << t;
}

// ---------------------------------------------------------------------------------------------
// Hand-built tokenizer.json files for options the fixtures leave out. Expected ids were
// produced with Python `tokenizers` 0.23.3 on the same JSON.

json tiny_model(json vocab, json merges) {
  return {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
          {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false},
          {"vocab", std::move(vocab)}, {"merges", std::move(merges)}};
}

json tiny_tokenizer(json model) {
  return {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}, {"added_tokens", json::array()},
          {"normalizer", nullptr}, {"pre_tokenizer", nullptr}, {"post_processor", nullptr},
          {"decoder", nullptr}, {"model", std::move(model)}};
}

std::unique_ptr<Tokenizer> must_load(const json& tokenizer_json, const std::string& config = "",
                                     const std::string& generation = "") {
  auto tok = Tokenizer::from_json(tokenizer_json.dump(), config, generation);
  EXPECT_TRUE(tok.ok()) << tok.status().message();
  return tok.ok() ? std::move(tok).value() : nullptr;
}

TEST(Tokenizer, UnkFuseAndByteFallback) {
  json vocab = {{"<unk>", 0}, {"a", 1}, {"b", 2}, {"ab", 3}, {"<0x78>", 4}};
  json spec = tiny_tokenizer(tiny_model(vocab, json::array({"a b"})));
  spec["model"]["unk_token"] = "<unk>";
  spec["model"]["fuse_unk"] = true;
  auto fused = must_load(spec);
  ASSERT_TRUE(fused);
  EXPECT_EQ(fused->encode("yyabyab"), (std::vector<int32_t>{0, 3, 0, 3}));
  spec["model"]["fuse_unk"] = false;
  auto unfused = must_load(spec);
  ASSERT_TRUE(unfused);
  EXPECT_EQ(unfused->encode("yyabyab"), (std::vector<int32_t>{0, 0, 3, 0, 3}));
  spec["model"]["byte_fallback"] = true;
  auto fallback = must_load(spec);
  ASSERT_TRUE(fallback);
  EXPECT_EQ(fallback->encode("xab"), (std::vector<int32_t>{4, 3}));
  spec["model"]["unk_token"] = nullptr;
  auto no_unk = must_load(spec);
  ASSERT_TRUE(no_unk);
  EXPECT_EQ(no_unk->encode("yabx"), (std::vector<int32_t>{3, 4}));  // unknown 'y' is dropped
}

TEST(Tokenizer, IgnoreMergesTakesWholeWords) {
  // "abc" is in the vocabulary but no merge builds it.
  json vocab = {{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"abc", 4}};
  json spec = tiny_tokenizer(tiny_model(vocab, json::array({json::array({"a", "b"})})));
  auto plain = must_load(spec);
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->encode("abc"), (std::vector<int32_t>{3, 2}));
  spec["model"]["ignore_merges"] = true;
  auto ignoring = must_load(spec);
  ASSERT_TRUE(ignoring);
  EXPECT_EQ(ignoring->encode("abc"), (std::vector<int32_t>{4}));
}

TEST(Tokenizer, AddedTokenStripAndSingleWord) {
  json vocab = {{"a", 0}, {"b", 1}, {" ", 2}};
  json spec = tiny_tokenizer(tiny_model(vocab, json::array()));
  spec["added_tokens"] = json::array({
      {{"id", 3}, {"content", "<L>"}, {"single_word", false}, {"lstrip", true}, {"rstrip", false},
       {"normalized", false}, {"special", true}},
      {{"id", 4}, {"content", "<R>"}, {"single_word", false}, {"lstrip", false}, {"rstrip", true},
       {"normalized", false}, {"special", true}},
      {{"id", 5}, {"content", "ab"}, {"single_word", true}, {"lstrip", false}, {"rstrip", false},
       {"normalized", true}, {"special", false}},
  });
  auto tok = must_load(spec);
  ASSERT_TRUE(tok);
  // Python tokenizers: "a  <L> b" -> [0, 3, 2, 1]; "a<R>  b" -> [0, 4, 1];
  // "ab aab ab" -> [5, 2, 0, 0, 1, 2, 5].
  EXPECT_EQ(tok->encode("a  <L> b"), (std::vector<int32_t>{0, 3, 2, 1}));
  EXPECT_EQ(tok->encode("a<R>  b"), (std::vector<int32_t>{0, 4, 1}));
  EXPECT_EQ(tok->encode("ab aab ab"), (std::vector<int32_t>{5, 2, 0, 0, 1, 2, 5}));
  EXPECT_TRUE(tok->is_special(3));
  EXPECT_FALSE(tok->is_special(5));
  EXPECT_EQ(tok->vocab_size(), 6);
}

TEST(Tokenizer, MetaspacePrependFirst) {
  json vocab = {{"<unk>", 0}, {"\xE2\x96\x81", 1}, {"\xE2\x96\x81" "a", 2}, {"a", 3}, {"<s>", 4}};
  json spec = tiny_tokenizer(tiny_model(vocab, json::array({"\xE2\x96\x81 a"})));
  spec["model"]["unk_token"] = "<unk>";
  spec["added_tokens"] = json::array({{{"id", 4}, {"content", "<s>"}, {"single_word", false}, {"lstrip", false},
                                       {"rstrip", false}, {"normalized", false}, {"special", true}}});
  spec["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "first"},
                           {"split", true}};
  spec["decoder"] = {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "first"},
                     {"split", true}};
  auto tok = must_load(spec);
  ASSERT_TRUE(tok);
  // Python tokenizers: "a a<s>a" -> [2, 2, 4, 3]; " a" -> [2]; decode -> "a a<s>a".
  EXPECT_EQ(tok->encode("a a<s>a"), (std::vector<int32_t>{2, 2, 4, 3}));
  EXPECT_EQ(tok->encode(" a"), (std::vector<int32_t>{2}));
  const std::vector<int32_t> ids = {2, 2, 4, 3};
  EXPECT_EQ(tok->decode(ids), "a a<s>a");
}

TEST(Tokenizer, ConfigSpecialTokensAndGenerationEos) {
  json vocab = {{"<", 0}, {"e", 1}, {">", 2}, {"x", 3}};
  json spec = tiny_tokenizer(tiny_model(vocab, json::array()));
  spec["post_processor"] = {{"type", "TemplateProcessing"},
                            {"single", json::array({{{"SpecialToken", {{"id", "<b>"}, {"type_id", 0}}}},
                                                    {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
                            {"pair", json::array()},
                            {"special_tokens", {{"<b>", {{"id", "<b>"}, {"ids", {3}}, {"tokens", {"<b>"}}}}}}};
  // transformers adds the named special token "<e>", which tokenizer.json lacks.
  const std::string config = R"({"bos_token": null, "eos_token": "<e>", "add_bos_token": true})";
  auto tok = must_load(spec, config);
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->token_to_id("<e>"), 4);
  EXPECT_TRUE(tok->is_special(4));
  EXPECT_EQ(tok->encode("x<e>", false), (std::vector<int32_t>{3, 4}));
  EXPECT_EQ(tok->encode("x<e>"), (std::vector<int32_t>{3, 3, 4}));  // template only; add_bos_token ignored
  EXPECT_FALSE(tok->bos_id().has_value());
  EXPECT_EQ(tok->eos_ids(), (std::vector<int32_t>{4}));
  auto with_generation = must_load(spec, config, R"({"eos_token_id": [4, 2]})");
  ASSERT_TRUE(with_generation);
  EXPECT_EQ(with_generation->eos_ids(), (std::vector<int32_t>{4, 2}));
  auto without_config = must_load(spec);
  ASSERT_TRUE(without_config);
  EXPECT_EQ(without_config->encode("x<e>", false), (std::vector<int32_t>{3, 0, 1, 2}));
}

// ---------------------------------------------------------------------------------------------
// Trainer.

const char kTrainingText[] =
    "The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs away!\n"
    "Tokenizers split text into pieces, and pieces into tokens: 123 + 456 = 579.\n"
    "Byte-level BPE never needs an unknown token, because every byte has an id.\n"
    "Ünïcödé text, 日本語のテキスト, and emoji 🙂 all round-trip exactly.\n";

TEST(Trainer, RoundTripsTextAndSpecials) {
  const std::vector<std::string> specials = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  auto trained = tools::train_byte_level_tokenizer_json(kTrainingText, 400, specials);
  ASSERT_TRUE(trained.ok()) << trained.status().message();
  auto again = tools::train_byte_level_tokenizer_json(kTrainingText, 400, specials);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*trained, *again) << "training is not deterministic";

  auto tok = must_load(json::parse(*trained));
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->vocab_size(), 400);
  for (size_t i = 0; i < specials.size(); ++i) {
    EXPECT_EQ(tok->token_to_id(specials[i]), static_cast<int32_t>(397 + i));
    EXPECT_TRUE(tok->is_special(static_cast<int32_t>(397 + i)));
  }
  EXPECT_FALSE(tok->is_special(0));
  const std::vector<std::string> texts = {
      "", "The quick brown fox", "  spaces\tand\nnewlines\r\n", "unseen: Ωμέγα, ٣٤٥, 🇯🇵👨‍👩‍👧",
      "<|im_start|>user\nhello<|im_end|>\n<|endoftext|>", "\x01\x7f control bytes", kTrainingText};
  for (const auto& text : texts) {
    auto ids = tok->encode(text);
    EXPECT_EQ(tok->decode(ids), text) << json(text).dump();
    for (int32_t id : ids) EXPECT_LT(id, 400);
  }
  // Merges shorten common words: "The" is one token after training on this text.
  EXPECT_EQ(tok->encode("The", false).size(), 1u);
}

TEST(Trainer, RejectsImpossibleRequests) {
  auto small = tools::train_byte_level_tokenizer_json("abc", 257, {"<a>", "<b>"});
  ASSERT_FALSE(small.ok());
  EXPECT_EQ(small.status().code(), StatusCode::kInvalidArgument);
  auto too_little_text = tools::train_byte_level_tokenizer_json("ab ab", 300, {});
  ASSERT_FALSE(too_little_text.ok());
  EXPECT_EQ(too_little_text.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_little_text.status().message().find("needs more text"), std::string::npos);
  auto repeated = tools::train_byte_level_tokenizer_json(kTrainingText, 300, {"<a>", "<a>"});
  EXPECT_FALSE(repeated.ok());
}

// ---------------------------------------------------------------------------------------------
// Errors.

TEST(TokenizerErrors, MissingTokenizerJsonIsNotFound) {
  const std::string dir = std::string(DAYZERO_BINARY_DIR) + "/no_such_model_dir";
  auto tok = Tokenizer::load(dir);
  ASSERT_FALSE(tok.ok());
  EXPECT_EQ(tok.status().code(), StatusCode::kNotFound);
  EXPECT_NE(tok.status().message().find(dir + "/tokenizer.json"), std::string::npos) << tok.status().message();
}

TEST(TokenizerErrors, UnsupportedModelTypeIsNamed) {
  json spec = tiny_tokenizer({{"type", "WordPiece"}, {"vocab", {{"a", 0}}}, {"unk_token", "[UNK]"}});
  auto tok = Tokenizer::from_json(spec.dump());
  ASSERT_FALSE(tok.ok());
  EXPECT_EQ(tok.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(tok.status().message().find("WordPiece"), std::string::npos) << tok.status().message();
}

TEST(TokenizerErrors, UnsupportedComponentIsNamed) {
  json spec = tiny_tokenizer(tiny_model({{"a", 0}}, json::array()));
  spec["normalizer"] = {{"type", "Precompiled"}, {"precompiled_charsmap", ""}};
  auto tok = Tokenizer::from_json(spec.dump());
  ASSERT_FALSE(tok.ok());
  EXPECT_EQ(tok.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(tok.status().message().find("Precompiled"), std::string::npos) << tok.status().message();
}

TEST(TokenizerErrors, MalformedFilesAreCorrupt) {
  auto truncated = Tokenizer::from_json(R"({"model": {"type": "BPE", "vocab": {"a": 0)");
  ASSERT_FALSE(truncated.ok());
  EXPECT_EQ(truncated.status().code(), StatusCode::kCorrupt);

  json bad_merge = tiny_tokenizer(tiny_model({{"a", 0}, {"b", 1}, {"ab", 2}}, json::array({"a c"})));
  auto merge = Tokenizer::from_json(bad_merge.dump());
  ASSERT_FALSE(merge.ok());
  EXPECT_EQ(merge.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(merge.status().message().find("'c'"), std::string::npos) << merge.status().message();

  json bad_regex = tiny_tokenizer(tiny_model({{"a", 0}}, json::array()));
  bad_regex["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"},
                                {"invert", false}};
  auto regex = Tokenizer::from_json(bad_regex.dump());
  ASSERT_FALSE(regex.ok());
  EXPECT_EQ(regex.status().code(), StatusCode::kInvalidArgument);

  for (const json& merges : {json::array({"a b c"}), json::array({json::array({"a", "b", "ab"})}), json::array({1})}) {
    auto bad = Tokenizer::from_json(tiny_tokenizer(tiny_model({{"a", 0}, {"b", 1}, {"ab", 2}}, merges)).dump());
    ASSERT_FALSE(bad.ok()) << merges.dump();
    EXPECT_EQ(bad.status().code(), StatusCode::kCorrupt) << bad.status().message();
  }

  json bad_type = tiny_tokenizer(tiny_model({{"a", "zero"}}, json::array()));
  auto type = Tokenizer::from_json(bad_type.dump());
  ASSERT_FALSE(type.ok());
  EXPECT_EQ(type.status().code(), StatusCode::kCorrupt);
}

}  // namespace
}  // namespace dayzero::tokenizer
