// tiktoken tokenizer tests: the Kimi-style fixture (tests/data/tokenizer/tiktoken/) against the
// ids of Python `tiktoken` written by tools/make_tiktoken_goldens.py, Kimi's pattern on its own,
// hand-built rank files for the merge rules, the choice of file by Tokenizer::load, and the
// error cases. Not a benchmark: the long-input case only bounds the time generously.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tokenizer/regex.h"
#include "tokenizer/tiktoken.h"
#include "tokenizer/tokenizer.h"
#include "tools/bpe_trainer.h"

namespace dayzero::tokenizer {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const std::string kFixtureDir = std::string(DAYZERO_SOURCE_DIR) + "/tests/data/tokenizer/tiktoken";
const std::string kGoldenPath = std::string(DAYZERO_SOURCE_DIR) + "/tests/data/tokenizer/tiktoken_goldens.json";

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

std::vector<int32_t> as_ids(const json& value) { return value.get<std::vector<int32_t>>(); }

std::string show(const std::vector<int32_t>& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) out += (i ? ", " : "") + std::to_string(ids[i]);
  return out + "]";
}

std::string first_mismatch(const std::vector<int32_t>& got, const std::vector<int32_t>& want) {
  if (got == want) return "";
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  return "first mismatch at index " + std::to_string(i) + "\n  got  " + show(got) + "\n  want " + show(want);
}

std::string base64(std::string_view bytes) {
  static const char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8) | uint8_t(bytes[i + 2]);
    for (int s : {18, 12, 6, 0}) out += kAlphabet[(v >> s) & 63];
  }
  if (i + 1 == bytes.size()) {
    uint32_t v = uint8_t(bytes[i]) << 16;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == bytes.size()) {
    uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8);
    for (int s : {18, 12, 6}) out += kAlphabet[(v >> s) & 63];
    out += "=";
  }
  return out;
}

// A rank file: the 256 single bytes at ranks 0..255 (rank = byte), then `extra` in order.
std::string rank_file(const std::vector<std::string>& extra) {
  std::string text;
  for (int b = 0; b < 256; ++b) text += base64(std::string(1, static_cast<char>(b))) + " " + std::to_string(b) + "\n";
  for (size_t i = 0; i < extra.size(); ++i) text += base64(extra[i]) + " " + std::to_string(256 + i) + "\n";
  return text;
}

std::unique_ptr<Tokenizer> must_load_tiktoken(const std::string& model, const std::string& config = "",
                                              const std::string& generation = "") {
  auto tok = Tokenizer::from_tiktoken(model, config, generation);
  EXPECT_TRUE(tok.ok()) << tok.status().message();
  return tok.ok() ? std::move(tok).value() : nullptr;
}

// A fresh folder under the build tree, removed at the end of the test.
class TempDir {
 public:
  explicit TempDir(const std::string& name) : path_(fs::path(DAYZERO_BINARY_DIR) / "tiktoken_test_tmp" / name) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// ---------------------------------------------------------------------------------------------
// The fixture against Python tiktoken.

TEST(Tiktoken, FixtureMatchesPythonTiktoken) {
  auto loaded = Tokenizer::load(kFixtureDir);
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  const Tokenizer& tok = **loaded;
  const json golden = json::parse(read_text(kGoldenPath));
  ASSERT_EQ(golden.at("magic"), "dayzero-tiktoken-golden") << kGoldenPath;
  ASSERT_EQ(golden.at("format_version"), 1) << kGoldenPath;
  EXPECT_EQ(golden.at("pat_str").get<std::string>(), std::string(kKimiPattern));

  EXPECT_EQ(tok.vocab_size(), golden.at("vocab_size").get<int32_t>());
  ASSERT_TRUE(tok.bos_id().has_value());
  EXPECT_EQ(*tok.bos_id(), golden.at("bos_id").get<int32_t>());
  EXPECT_EQ(tok.eos_ids(), as_ids(golden.at("eos_ids")));

  size_t n_cases = 0, n_failed = 0;
  for (const auto& c : golden.at("cases")) {
    const std::string text = c.at("text").get<std::string>();
    const std::string where = "case " + std::to_string(n_cases) + " " + json(text).dump();
    ++n_cases;
    const auto ids = tok.encode(text);
    bool ok = true;
    if (auto m = first_mismatch(ids, as_ids(c.at("ids"))); !m.empty()) {
      ADD_FAILURE() << where << ": " << m;
      ok = false;
    }
    // Kimi adds no special tokens, whatever add_special_tokens says.
    EXPECT_EQ(tok.encode(text, /*add_special_tokens=*/false), ids) << where;
    const std::string decoded = tok.decode(ids);
    if (decoded != c.at("decoded").get<std::string>() || decoded != text) {
      ADD_FAILURE() << where << " decode: got " << json(decoded).dump() << " want " << c.at("decoded").dump();
      ok = false;
    }
    n_failed += ok ? 0 : 1;
  }
  for (const auto& c : golden.at("decode_cases")) {
    const auto ids = as_ids(c.at("ids"));
    EXPECT_EQ(tok.decode(ids), c.at("decoded").get<std::string>()) << "decode " << show(ids);
  }
  EXPECT_GE(n_cases, 60u);
  std::printf("[ golden   ] tiktoken: %zu/%zu cases match (tiktoken %s)\n", n_cases - n_failed, n_cases,
              golden.at("tiktoken_version").get<std::string>().c_str());
}

TEST(Tiktoken, FixtureAccessors) {
  auto loaded = Tokenizer::load(kFixtureDir);
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  const Tokenizer& tok = **loaded;
  const json golden = json::parse(read_text(kGoldenPath));
  const int32_t n = golden.at("n_ranks").get<int32_t>();

  EXPECT_EQ(tok.token_to_id("[BOS]"), n);
  EXPECT_EQ(tok.token_to_id("<|im_end|>"), n + 2);
  EXPECT_EQ(tok.id_to_token(n + 2), "<|im_end|>");
  // Unnamed reserved ids get Kimi's names.
  EXPECT_EQ(tok.id_to_token(n + 5), "<|reserved_token_" + std::to_string(n + 5) + "|>");
  EXPECT_EQ(tok.token_to_id("<|reserved_token_" + std::to_string(n + 5) + "|>"), n + 5);
  EXPECT_TRUE(tok.is_special(n));
  EXPECT_TRUE(tok.is_special(n + 5));
  EXPECT_FALSE(tok.is_special(0));
  EXPECT_FALSE(tok.is_special(n + 256));

  // Ranked tokens are named in the byte-level alphabet: " the" is "Ġthe", byte 0x0A is "Ċ".
  auto the = tok.token_to_id("\xC4\xA0the");
  ASSERT_TRUE(the.has_value());
  EXPECT_EQ(tok.encode(" the"), std::vector<int32_t>{*the});
  EXPECT_EQ(tok.id_to_token(*the), "\xC4\xA0the");
  // Ranks follow qwen3's ids: printable bytes first, then the shifted ones ('\n' is "Ċ", 198).
  EXPECT_EQ(tok.token_to_id("\xC4\x8A"), 198);
  EXPECT_EQ(tok.id_to_token(198), "\xC4\x8A");
  EXPECT_EQ(tok.encode("\n"), std::vector<int32_t>{198});
  EXPECT_FALSE(tok.token_to_id(" the").has_value());  // a raw space is not in the alphabet
  EXPECT_FALSE(tok.token_to_id("no such token").has_value());
  EXPECT_EQ(tok.id_to_token(-1), "");
  EXPECT_EQ(tok.id_to_token(n + 256), "");

  // Unknown ids are skipped; special tokens too when asked.
  const std::vector<int32_t> ids = tok.encode("[BOS]Hi there<|im_end|>");
  ASSERT_EQ(ids.front(), n);
  ASSERT_EQ(ids.back(), n + 2);
  EXPECT_EQ(tok.decode(ids, /*skip_special_tokens=*/true), "Hi there");
  std::vector<int32_t> with_unknown = ids;
  with_unknown.insert(with_unknown.begin() + 1, 10'000'000);
  with_unknown.push_back(-3);
  EXPECT_EQ(tok.decode(with_unknown), "[BOS]Hi there<|im_end|>");
  // Invalid UTF-8 input is encoded as U+FFFD, as Python would receive it.
  EXPECT_EQ(tok.decode(tok.encode("a\xFFz")), "a\xEF\xBF\xBDz");
}

TEST(Tiktoken, ConcurrentEncodeMatchesSerial) {
  auto loaded = Tokenizer::load(kFixtureDir);
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  const Tokenizer& tok = **loaded;
  const json golden = json::parse(read_text(kGoldenPath));
  std::vector<std::string> texts;
  std::vector<std::vector<int32_t>> want;
  for (const auto& c : golden.at("cases")) {
    texts.push_back(c.at("text").get<std::string>());
    want.push_back(as_ids(c.at("ids")));
  }
  std::vector<int> failures(4, 0);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < failures.size(); ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 10; ++round) {
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

TEST(Tiktoken, LongPiecesRoundTrip) {
  auto loaded = Tokenizer::load(kFixtureDir);
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  const Tokenizer& tok = **loaded;
  // One regex piece of 200k bytes each: the heap merge keeps this near-linear (tiktoken's
  // rescanning loop is quadratic here). The bound is 50x what a debug build needs.
  const std::vector<std::string> texts = {std::string(200'000, 'x'), std::string(200'000, ' ') + "end",
                                          std::string(200'000, '7')};
  const auto start = std::chrono::steady_clock::now();
  for (const auto& text : texts) EXPECT_EQ(tok.decode(tok.encode(text)), text);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 30.0);
}

// ---------------------------------------------------------------------------------------------
// Kimi's pattern and the merge rules on hand-built files.

std::vector<std::string> pieces(const Regex& regex, const std::string& text) {
  std::vector<std::string> out;
  for (auto [start, end] : regex.find_all(text)) out.push_back(text.substr(start, end - start));
  return out;
}

TEST(Tiktoken, KimiPatternSplitsHanRuns) {
  auto regex = Regex::compile(kimi_pattern_for_pcre2());
  ASSERT_TRUE(regex.ok()) << regex.status().message();
  const Regex& re = **regex;
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces(re, "中文English混合"), (V{"中文", "English", "混合"}));
  EXPECT_EQ(pieces(re, "北京市 Pascal"), (V{"北京市", " Pascal"}));
  EXPECT_EQ(pieces(re, "汉字abc's DEF'LL"), (V{"汉字", "abc's", " DEF'LL"}));
  // 、 and ー are Common script (Han only in Script_Extensions): punctuation and a letter.
  EXPECT_EQ(pieces(re, "你好、世界"), (V{"你好", "、", "世界"}));
  EXPECT_EQ(pieces(re, "ラーメン 12345"), (V{"ラーメン", " ", "123", "45"}));
  EXPECT_EQ(pieces(re, "a \n\n b  "), (V{"a", " \n\n", " b", "  "}));
}

TEST(Tiktoken, MergesLowestRankFirstAndLooksUpWholePieces) {
  // "bc" ranks below "ab": "abc" -> a + bc, though "ab" comes first in the text.
  auto tok = must_load_tiktoken(rank_file({"bc", "ab", "xyz"}));
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->encode("abc"), (std::vector<int32_t>{'a', 256}));
  EXPECT_EQ(tok->encode("abab"), (std::vector<int32_t>{257, 257}));
  // A piece that is itself a token is taken whole even though no merge reaches it.
  EXPECT_EQ(tok->encode("xyz"), (std::vector<int32_t>{258}));
  EXPECT_EQ(tok->encode("xyzx"), (std::vector<int32_t>{'x', 'y', 'z', 'x'}));
  // Equal ranks go left to right: "bcbc" -> bc + bc; "ccc" has no pair.
  EXPECT_EQ(tok->encode("bcbc"), (std::vector<int32_t>{256, 256}));
  EXPECT_EQ(tok->vocab_size(), 259 + kKimiReservedSpecialTokens);
  EXPECT_FALSE(tok->bos_id().has_value());  // no [BOS] without a config naming it
  EXPECT_TRUE(tok->eos_ids().empty());
}

TEST(Tiktoken, SpecialTokensLeftmostLongestAndConfig) {
  const std::string config = R"({
    "added_tokens_decoder": {
      "256": {"content": "<a>", "special": true},
      "257": {"content": "<a><b>", "special": true},
      "258": {"content": "[BOS]", "special": true},
      "600": {"content": "<late>", "special": false}
    },
    "eos_token": {"content": "<a>", "lstrip": false}
  })";
  auto tok = must_load_tiktoken(rank_file({}), config);
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->encode("x<a><b>y<a>"), (std::vector<int32_t>{'x', 257, 'y', 256}));
  EXPECT_EQ(tok->encode("<a<a>"), (std::vector<int32_t>{'<', 'a', 256}));
  EXPECT_EQ(tok->bos_id(), 258);  // the default name "[BOS]"
  EXPECT_EQ(tok->eos_ids(), (std::vector<int32_t>{256}));
  // Ids past the reserved block are kept; "special": false keeps them in skip_special decodes.
  EXPECT_EQ(tok->vocab_size(), 601);
  EXPECT_EQ(tok->encode("<late>"), (std::vector<int32_t>{600}));
  EXPECT_FALSE(tok->is_special(600));
  const std::vector<int32_t> ids = {256, 'o', 600};
  EXPECT_EQ(tok->decode(ids, /*skip_special_tokens=*/true), "o<late>");
  EXPECT_EQ(tok->id_to_token(259), "<|reserved_token_259|>");

  auto generation = must_load_tiktoken(rank_file({}), config, R"({"eos_token_id": [258, 257]})");
  ASSERT_TRUE(generation);
  EXPECT_EQ(generation->eos_ids(), (std::vector<int32_t>{258, 257}));
  auto no_bos = must_load_tiktoken(rank_file({}), R"({"bos_token": null})");
  ASSERT_TRUE(no_bos);
  EXPECT_FALSE(no_bos->bos_id().has_value());
}

// ---------------------------------------------------------------------------------------------
// Which file load() reads.

TEST(Tiktoken, LoadPrefersTokenizerJson) {
  TempDir dir("both");
  auto trained = tools::train_byte_level_tokenizer_json(
      "The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs away! 123 456", 260, {});
  ASSERT_TRUE(trained.ok()) << trained.status().message();
  write_text(dir.path() / "tokenizer.json", *trained);
  write_text(dir.path() / "tiktoken.model", rank_file({"the"}));
  auto both = Tokenizer::load(dir.path().string());
  ASSERT_TRUE(both.ok()) << both.status().message();
  EXPECT_EQ((*both)->vocab_size(), 260);  // tokenizer.json's, not 257 + 256

  fs::remove(dir.path() / "tokenizer.json");
  auto only_tiktoken = Tokenizer::load(dir.path().string());
  ASSERT_TRUE(only_tiktoken.ok()) << only_tiktoken.status().message();
  EXPECT_EQ((*only_tiktoken)->vocab_size(), 257 + kKimiReservedSpecialTokens);
  EXPECT_EQ((*only_tiktoken)->encode("the"), std::vector<int32_t>{256});
}

// ---------------------------------------------------------------------------------------------
// Errors.

TEST(TiktokenErrors, NeitherFileIsNotFoundNamingTheFolder) {
  TempDir dir("empty");
  auto tok = Tokenizer::load(dir.path().string());
  ASSERT_FALSE(tok.ok());
  EXPECT_EQ(tok.status().code(), StatusCode::kNotFound);
  const std::string& message = tok.status().message();
  EXPECT_NE(message.find(dir.path().string() + ":"), std::string::npos) << message;
  EXPECT_NE(message.find("tokenizer.json"), std::string::npos) << message;
  EXPECT_NE(message.find("tiktoken.model"), std::string::npos) << message;
}

TEST(TiktokenErrors, MalformedBase64NamesFileAndLine) {
  TempDir dir("bad_base64");
  std::string text = rank_file({});
  // Line 3 of the file: a character outside the alphabet.
  size_t line3 = text.find('\n', text.find('\n') + 1) + 1;
  text.replace(line3, 4, "I*==");
  write_text(dir.path() / "tiktoken.model", text);
  auto tok = Tokenizer::load(dir.path().string());
  ASSERT_FALSE(tok.ok());
  EXPECT_EQ(tok.status().code(), StatusCode::kCorrupt);
  const std::string& message = tok.status().message();
  EXPECT_NE(message.find(dir.path().string()), std::string::npos) << message;
  EXPECT_NE(message.find("tiktoken.model line 3"), std::string::npos) << message;
  EXPECT_NE(message.find("base64"), std::string::npos) << message;
}

TEST(TiktokenErrors, MalformedFilesAreCorrupt) {
  const std::string good = rank_file({"ab"});
  struct Case {
    std::string name;
    std::string text;
    std::string needle;  // in the message
  };
  const std::vector<Case> cases = {
      {"bad padding", good + "YWJj= 257\n", "line 258: token"},
      {"data after padding", good + "YQ==YQ== 257\n", "line 258: token"},
      {"one field", good + "YWJj\n", "line 258: expected"},
      {"three fields", good + "YWJj 257 1\n", "line 258: expected"},
      {"rank not a number", good + "YWJj -1\n", "line 258: rank '-1'"},
      {"rank too large", good + "YWJj 99999999999\n", "line 258: rank"},
      {"rank out of range", good + "YWJj 300\n", "line 258: rank 300 is not below"},
      {"rank twice", good + "YWJj 256\n", "line 258: rank 256 appears twice"},
      {"token twice", good + "YWI= 257\n", "line 258: token 'ab' appears twice"},
      {"missing byte", rank_file({}).substr(rank_file({}).find('\n') + 1) + "YWI= 0\n", "byte 0x00 has no rank"},
      {"empty", "\n\n", "no tokens"},
  };
  for (const auto& c : cases) {
    auto tok = Tokenizer::from_tiktoken(c.text);
    ASSERT_FALSE(tok.ok()) << c.name;
    EXPECT_EQ(tok.status().code(), StatusCode::kCorrupt) << c.name << ": " << tok.status().message();
    EXPECT_NE(tok.status().message().find("tiktoken.model"), std::string::npos) << c.name;
    EXPECT_NE(tok.status().message().find(c.needle), std::string::npos) << c.name << ": " << tok.status().message();
  }
  // Blank lines and CRLF line ends are accepted, as Python's splitlines() and split() take them.
  std::string crlf = good;
  for (size_t at = crlf.find('\n'); at != std::string::npos; at = crlf.find('\n', at + 2)) crlf.replace(at, 1, "\r\n");
  EXPECT_TRUE(Tokenizer::from_tiktoken("\n" + crlf + "\n\n").ok());
}

TEST(TiktokenErrors, InconsistentSpecialTokensAreCorrupt) {
  const std::string model = rank_file({});
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"added_tokens_decoder": {"255": {"content": "<x>"}}})", "id 255 is a rank"},
      {R"({"added_tokens_decoder": {"256": {"content": "<x>"}, "257": {"content": "<x>"}}})", "appears twice"},
      {R"({"added_tokens_decoder": {"two": {"content": "<x>"}}})", "'two' is not an id"},
      {R"({"added_tokens_decoder": {"256": {"no_content": 1}}})", "has no 'content'"},
      {R"({"added_tokens_decoder": {"256": {"content": "<x>"}}, "bos_token": "<y>"})", "bos_token '<y>'"},
      {R"({"added_tokens_decoder": [1, 2]})", "not an object"},
      {R"({"bos_token": )", "tokenizer_config.json"},
  };
  for (const auto& [config, needle] : cases) {
    auto tok = Tokenizer::from_tiktoken(model, config);
    ASSERT_FALSE(tok.ok()) << config;
    EXPECT_EQ(tok.status().code(), StatusCode::kCorrupt) << config << ": " << tok.status().message();
    EXPECT_NE(tok.status().message().find(needle), std::string::npos) << config << ": " << tok.status().message();
  }
}

}  // namespace
}  // namespace dayzero::tokenizer
