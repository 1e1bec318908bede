// Small text helpers that messages in several folders share.
#pragma once

#include <cstddef>
#include <limits>
#include <string>
#include <vector>

namespace dayzero {

// "a, b, c"; past `limit` items "a, b, ... (N in all)", so a message stays one line.
inline std::string join_list(const std::vector<std::string>& items,
                             size_t limit = std::numeric_limits<size_t>::max()) {
  std::string s;
  for (size_t i = 0; i < items.size() && i < limit; ++i) s += (i ? ", " : "") + items[i];
  if (items.size() > limit) s += ", ... (" + std::to_string(items.size()) + " in all)";
  return s;
}

// 'name', the way error messages quote a tensor, key or file name.
inline std::string single_quoted(const std::string& s) { return "'" + s + "'"; }

}  // namespace dayzero
