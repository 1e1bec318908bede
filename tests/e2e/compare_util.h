// `dayzero compare --json` from e2e tests: the run and its parsed report, and the largest
// tensor error in it. Shared by compare_test and replay_test; not the compare code itself.
#pragma once

#include <nlohmann/json.hpp>

#include <cmath>
#include <string>

#include "e2e_util.h"

namespace dayzero::e2e {

struct Compared {
  Outcome o;
  nlohmann::json j;  // discarded when the exit code is 2 or the output holds no JSON
};

inline Compared compare(const fs::path& a, const fs::path& b, const std::string& flags = "") {
  Compared c;
  c.o = run_dayzero("compare " + a.string() + " " + b.string() + " --json " + flags);
  if (c.o.exit_code <= 1) {
    // stderr is interleaved: the JSON document runs from the first '{' to the last '}'.
    const size_t at = c.o.output.find('{'), end = c.o.output.rfind('}');
    c.j = nlohmann::json::parse(at == std::string::npos ? "" : c.o.output.substr(at, end + 1 - at), nullptr, false);
  }
  return c;
}

// A metric of the report: a number, or a string ("inf", "nan") read as infinite.
inline double num(const nlohmann::json& v) { return v.is_string() ? INFINITY : v.get<double>(); }

// The largest tensor error over every group; `where` (may be null) gets prompt/phase/name.
inline double worst_error(const nlohmann::json& j, std::string* where = nullptr) {
  double w = 0;
  for (const nlohmann::json& g : j.at("groups"))
    for (const nlohmann::json& t : g.at("tensors"))
      if (num(t.at("error")) > w) {
        w = num(t.at("error"));
        if (where) *where = g.at("prompt").get<std::string>() + "/" + g.at("phase").get<std::string>() + "/" +
                            t.at("name").get<std::string>();
      }
  return w;
}

}  // namespace dayzero::e2e
