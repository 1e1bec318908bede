// parse_json_limited, read_regular_file and json_excerpt: the depth limit, duplicate keys, a
// FIFO refused without blocking, and messages that never copy a whole value.
#include "core/json.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>

namespace dayzero {
namespace {

std::string nested_arrays(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

TEST(Json, ParsesOrdinaryDocuments) {
  auto j = parse_json_limited(R"({"a": [1, {"b": "c"}], "d": null})", "x.json");
  ASSERT_TRUE(j.ok()) << j.status().message();
  EXPECT_EQ((*j)["a"][1]["b"], "c");
  EXPECT_TRUE((*j)["d"].is_null());
}

TEST(Json, DepthLimitIsExactAndFast) {
  EXPECT_TRUE(parse_json_limited(nested_arrays(kMaxJsonDepth), "ok.json").ok());
  const auto t0 = std::chrono::steady_clock::now();
  auto deep = parse_json_limited("{\"k\": " + nested_arrays(100000) + "}", "deep.json");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_FALSE(deep.ok());
  EXPECT_EQ(deep.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(deep.status().message().find("deep.json"), std::string::npos) << deep.status().message();
  EXPECT_NE(deep.status().message().find("nesting deeper than 64"), std::string::npos) << deep.status().message();
  EXPECT_LT(deep.status().message().size(), 200u);
  EXPECT_LT(s, 1.0);
  EXPECT_FALSE(parse_json_limited(nested_arrays(kMaxJsonDepth + 1), "x.json").ok());
}

TEST(Json, DuplicateKeysOnlyWhenAsked) {
  const std::string text = R"({"a": 1, "b": {"a": 2, "a": 3}})";
  auto lax = parse_json_limited(text, "lax.json");
  ASSERT_TRUE(lax.ok());
  EXPECT_EQ((*lax)["b"]["a"], 3);  // nlohmann's rule: the last one wins
  JsonParseOptions strict;
  strict.reject_duplicate_keys = true;
  auto s = parse_json_limited(text, "strict.json", strict);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("key 'a' appears twice"), std::string::npos) << s.status().message();
  // The same key in two different objects is not a duplicate.
  EXPECT_TRUE(parse_json_limited(R"({"a": {"x": 1}, "b": {"x": 2}})", "x.json", strict).ok());
}

TEST(Json, MalformedTextNamesTheSource) {
  auto j = parse_json_limited("{\"a\": ", "bad.json");
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().exit_code(), 2);
  EXPECT_EQ(j.status().message().rfind("bad.json: malformed JSON", 0), 0u) << j.status().message();
}

TEST(Json, ExcerptIsShortAndNotRecursive) {
  EXPECT_EQ(json_excerpt(nlohmann::json::array({1, 2, 3})), "[1,2,3]");
  EXPECT_EQ(json_excerpt(nlohmann::json::array({1, {2}})), "an array of 2");
  EXPECT_EQ(json_excerpt(nlohmann::json(std::vector<int>(9, 0))), "an array of 9");
  EXPECT_EQ(json_excerpt(nlohmann::json::object()), "an object of 0");
  EXPECT_EQ(json_excerpt(nlohmann::json(7)), "7");
  EXPECT_EQ(json_excerpt(nlohmann::json(std::string(100, 'x')), 5), "\"xxxxx...\"");
  EXPECT_STREQ(json_kind(nlohmann::json("s")), "a string");
}

TEST(Json, ReadRegularFileRefusesAFifoWithoutBlocking) {
  std::string tmpl = (std::filesystem::temp_directory_path() / "dz_json_XXXXXX").string();
  const std::string dir = ::mkdtemp(tmpl.data());
  const std::string fifo = dir + "/config.json";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto r = read_json_file(fifo);  // would block forever in a plain open()
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find(fifo + ": not a regular file"), std::string::npos) << r.status().message();
  EXPECT_EQ(read_json_file(dir + "/absent.json").status().code(), StatusCode::kNotFound);
  std::ofstream(dir + "/big.json") << "[1, 2, 3]";
  auto big = read_regular_file(dir + "/big.json", 4);
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("exceed the limit of 4"), std::string::npos) << big.status().message();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dayzero
