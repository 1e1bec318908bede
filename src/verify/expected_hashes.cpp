// Expected-hash lists: format detection by the first non-empty line, then a line parser.
#include "verify/expected_hashes.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <set>

#include "core/json.h"

namespace dayzero::verify {
namespace {

constexpr uint64_t kMaxHashFileBytes = 64ull << 20;
constexpr std::string_view kLfsVersion = "version https://git-lfs.github.com/spec/v1";

bool is_hex64(std::string_view s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
}

std::string lower(std::string_view s) {
  std::string o(s);
  for (char& c : o) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return o;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.back() == '\r' || s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  return s;
}

std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t nl = text.find('\n', pos);
    const size_t end = nl == std::string_view::npos ? text.size() : nl;
    lines.push_back(text.substr(pos, end - pos));
    if (nl == std::string_view::npos) break;
    pos = nl + 1;
  }
  return lines;
}

std::string where(const std::string& source, size_t line) { return source + " line " + std::to_string(line + 1); }

Result<std::vector<ExpectedHash>> parse_lfs(const std::vector<std::string_view>& lines, const std::string& source,
                                            const std::string& name_if_single) {
  std::vector<ExpectedHash> out;
  std::string pending_name;  // from the last `==` line
  bool in_pointer = false;
  size_t pointer_line = 0;
  const auto close = [&]() -> Status {
    if (!in_pointer) return Status::Ok();
    if (out.back().sha256.empty())
      return Status::Corrupt(where(source, pointer_line) + ": LFS pointer without an `oid sha256:` line");
    in_pointer = false;
    return Status::Ok();
  };
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string_view line = trim(lines[i]);
    if (line.empty()) continue;
    if (line.substr(0, 2) == "==") {
      DZ_RETURN_IF_ERROR(close());
      pending_name = std::string(trim(line.substr(2)));
      if (pending_name.empty()) return Status::Corrupt(where(source, i) + ": `==` line without a file name");
      continue;
    }
    if (line == kLfsVersion) {
      DZ_RETURN_IF_ERROR(close());
      std::string name = pending_name;
      if (name.empty()) {
        if (!out.empty() || name_if_single.empty())
          return Status::Corrupt(where(source, i) + ": LFS pointer without a `== <file name>` line before it");
        name = name_if_single;
      }
      pending_name.clear();
      out.push_back({name, "", std::nullopt});
      in_pointer = true;
      pointer_line = i;
      continue;
    }
    if (!in_pointer)
      return Status::Corrupt(where(source, i) + ": expected `== <file name>` or `" + std::string(kLfsVersion) +
                             "`, found \"" + std::string(line.substr(0, 60)) + "\"");
    if (line.substr(0, 11) == "oid sha256:") {
      const std::string_view hex = line.substr(11);
      if (!is_hex64(hex)) return Status::Corrupt(where(source, i) + ": oid is not 64 hex digits");
      if (!out.back().sha256.empty()) return Status::Corrupt(where(source, i) + ": second oid in one LFS pointer");
      out.back().sha256 = lower(hex);
    } else if (line.substr(0, 5) == "size ") {
      const std::string_view num = line.substr(5);
      if (num.empty() || num.size() > 19 || !std::all_of(num.begin(), num.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return Status::Corrupt(where(source, i) + ": size \"" + std::string(num.substr(0, 30)) + "\" is not a byte count");
      out.back().size = std::stoull(std::string(num));
    } else {
      return Status::Corrupt(where(source, i) + ": unexpected line in an LFS pointer: \"" +
                             std::string(line.substr(0, 60)) + "\"");
    }
  }
  DZ_RETURN_IF_ERROR(close());
  if (!pending_name.empty()) return Status::Corrupt(source + ": `== " + pending_name + "` is followed by no LFS pointer");
  return out;
}

Result<std::vector<ExpectedHash>> parse_sha256sum(const std::vector<std::string_view>& lines, const std::string& source) {
  std::vector<ExpectedHash> out;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string_view line = trim(lines[i]);
    if (line.empty()) continue;
    // `<hex>  name` (text mode) or `<hex> *name` (binary mode), as sha256sum writes them.
    if (line.size() < 67 || !is_hex64(line.substr(0, 64)) || line[64] != ' ' || (line[65] != ' ' && line[65] != '*'))
      return Status::Corrupt(where(source, i) + ": not a `<sha256>  <file>` line nor an LFS pointer: \"" +
                             std::string(line.substr(0, 60)) + "\"");
    std::string name(line.substr(66));
    if (name.substr(0, 2) == "./") name = name.substr(2);
    out.push_back({name, lower(line.substr(0, 64)), std::nullopt});
  }
  return out;
}

}  // namespace

Result<std::vector<ExpectedHash>> parse_expected_hashes(std::string_view text, const std::string& source,
                                                        const std::string& name_if_single) {
  const std::vector<std::string_view> lines = split_lines(text);
  std::string_view first;
  for (auto l : lines)
    if (!trim(l).empty()) {
      first = trim(l);
      break;
    }
  if (first.empty()) return Status::Corrupt(source + ": no expected hashes (empty file)");
  const bool lfs = first.substr(0, 2) == "==" || first == kLfsVersion;
  DZ_ASSIGN_OR_RETURN(std::vector<ExpectedHash> out,
                      lfs ? parse_lfs(lines, source, name_if_single) : parse_sha256sum(lines, source));
  std::set<std::string> seen;
  for (const auto& e : out)
    if (!seen.insert(e.name).second) return Status::Corrupt(source + ": file " + e.name + " is listed twice");
  return out;
}

Result<std::vector<ExpectedHash>> read_expected_hashes(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    DIR* d = ::opendir(path.c_str());
    if (!d) return Status::IoError(path + ": cannot list the folder");
    std::vector<std::string> names;
    while (dirent* e = ::readdir(d)) {
      const std::string n = e->d_name;
      if (n.size() > 12 && n.substr(n.size() - 12) == ".safetensors") names.push_back(n);
    }
    ::closedir(d);
    std::sort(names.begin(), names.end());
    if (names.empty()) return Status::NotFound(path + ": no *.safetensors LFS pointer files in the folder");
    std::vector<ExpectedHash> out;
    for (const auto& n : names) {
      const std::string p = path + "/" + n;
      DZ_ASSIGN_OR_RETURN(std::string text, read_regular_file(p, 4096));
      DZ_ASSIGN_OR_RETURN(auto one, parse_expected_hashes(text, p, n));
      if (one.size() != 1) return Status::Corrupt(p + ": a pointer file in a folder must hold one LFS pointer");
      out.push_back(std::move(one[0]));
    }
    return out;
  }
  DZ_ASSIGN_OR_RETURN(std::string text, read_regular_file(path, kMaxHashFileBytes));
  std::string base = path.substr(path.find_last_of('/') + 1);
  return parse_expected_hashes(text, path, base);
}

}  // namespace dayzero::verify
