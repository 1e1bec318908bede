// Reading Python source without running it (python_source.h): logical lines, literals and the
// literal defaults of configuration classes.
#include "analysis/python_source.h"

#include <cctype>
#include <cerrno>
#include <cstring>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace dayzero::analysis {
namespace {

bool py_starts(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

std::string_view py_trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool is_ident(std::string_view s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  return true;
}

// Index just past the string literal starting at s[i] (a quote); nullopt when unterminated.
std::optional<size_t> string_end(std::string_view s, size_t i) {
  const char q = s[i];
  const bool triple = i + 2 < s.size() && s[i + 1] == q && s[i + 2] == q;
  i += triple ? 3 : 1;
  while (i < s.size()) {
    if (s[i] == '\\') { i += 2; continue; }
    if (triple ? s.substr(i, 3) == std::string(3, q) : s[i] == q) return i + (triple ? 3 : 1);
    ++i;
  }
  return std::nullopt;
}
size_t skip_string(std::string_view s, size_t i) { return string_end(s, i).value_or(s.size()); }

// Positions of `c` outside strings and brackets.
std::vector<size_t> top_level(std::string_view s, char c) {
  std::vector<size_t> out;
  int depth = 0;
  for (size_t i = 0; i < s.size();) {
    const char x = s[i];
    if (x == '"' || x == '\'') { i = skip_string(s, i); continue; }
    if (x == '(' || x == '[' || x == '{') ++depth;
    else if (x == ')' || x == ']' || x == '}') --depth;
    else if (x == c && depth == 0) out.push_back(i);
    ++i;
  }
  return out;
}

// Index of the bracket closing the one at s[open] (s.size() when unbalanced).
size_t matching_close(std::string_view s, size_t open) {
  int depth = 0;
  for (size_t i = open; i < s.size();) {
    const char x = s[i];
    if (x == '"' || x == '\'') { i = skip_string(s, i); continue; }
    if (x == '(' || x == '[' || x == '{') ++depth;
    if ((x == ')' || x == ']' || x == '}') && --depth == 0) return i;
    ++i;
  }
  return s.size();
}

// "key: annotation = value" or "key = value" -> key and value; the '=' of ==, <=, >=, != and :=
// is not an assignment.
std::optional<std::pair<std::string, std::string_view>> assignment(std::string_view s) {
  for (size_t p : top_level(s, '=')) {
    const char before = p > 0 ? s[p - 1] : ' ', after = p + 1 < s.size() ? s[p + 1] : ' ';
    if (after == '=' || before == '=' || before == '<' || before == '>' || before == '!' || before == ':' ||
        before == '+' || before == '-' || before == '*' || before == '/' || before == '%' || before == '|' ||
        before == '&')
      continue;
    std::string_view key = py_trim(s.substr(0, p));
    if (auto colon = top_level(key, ':'); !colon.empty()) key = py_trim(key.substr(0, colon[0]));
    if (!is_ident(key)) return std::nullopt;
    return std::make_pair(std::string(key), py_trim(s.substr(p + 1)));
  }
  return std::nullopt;
}

// Recursive descent over one literal expression (python_literal).
class Literal {
 public:
  explicit Literal(std::string_view s) : s_(s) {}
  std::optional<nlohmann::json> parse() {
    auto v = sum();
    ws();
    if (!v || p_ != s_.size()) return std::nullopt;
    return v;
  }

 private:
  void ws() {
    while (p_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[p_]))) ++p_;
  }
  bool eat(std::string_view t) {
    ws();
    if (s_.substr(p_, t.size()) != t) return false;
    p_ += t.size();
    return true;
  }
  static std::optional<nlohmann::json> arith(const nlohmann::json& a, const nlohmann::json& b, char op) {
    if (!a.is_number() || !b.is_number()) return std::nullopt;
    if (a.is_number_integer() && b.is_number_integer()) {
      const int64_t x = a.get<int64_t>(), y = b.get<int64_t>();
      int64_t r = 0;
      if (op == '+' && !__builtin_add_overflow(x, y, &r)) return r;
      if (op == '-' && !__builtin_sub_overflow(x, y, &r)) return r;
      if (op == '*' && !__builtin_mul_overflow(x, y, &r)) return r;
      if (op == '/' && y != 0) return x / y - ((x % y != 0) && ((x < 0) != (y < 0)) ? 1 : 0);  // floor division
      return std::nullopt;
    }
    const double x = a.get<double>(), y = b.get<double>();
    if (op == '+') return x + y;
    if (op == '-') return x - y;
    if (op == '*') return x * y;
    if (op == '/' && y != 0) return std::floor(x / y);
    return std::nullopt;
  }
  std::optional<nlohmann::json> sum() {
    auto v = term();
    while (v) {
      ws();
      const char op = p_ < s_.size() ? s_[p_] : 0;
      if (op != '+' && op != '-') break;
      ++p_;
      auto r = term();
      if (!r) return std::nullopt;
      v = arith(*v, *r, op);
    }
    return v;
  }
  std::optional<nlohmann::json> term() {
    auto v = unary();
    while (v) {
      ws();
      char op = 0;
      if (s_.substr(p_, 2) == "//") op = '/', p_ += 2;
      else if (s_.substr(p_, 2) == "**") return std::nullopt;
      else if (p_ < s_.size() && s_[p_] == '*') op = '*', ++p_;
      else break;
      auto r = unary();
      if (!r) return std::nullopt;
      v = arith(*v, *r, op);
    }
    return v;
  }
  std::optional<nlohmann::json> unary() {
    if (eat("-")) {
      auto v = unary();
      if (!v || !v->is_number()) return std::nullopt;
      if (v->is_number_integer()) return -v->get<int64_t>();
      return -v->get<double>();
    }
    if (eat("+")) return unary();
    return atom();
  }
  std::optional<nlohmann::json> items(char close, bool dict) {
    nlohmann::json out = dict ? nlohmann::json::object() : nlohmann::json::array();
    while (true) {
      if (eat(std::string_view(&close, 1))) return out;
      auto k = sum();
      if (!k) return std::nullopt;
      if (dict) {
        if (!k->is_string() || !eat(":")) return std::nullopt;
        auto v = sum();
        if (!v) return std::nullopt;
        out[k->get<std::string>()] = *v;
      } else {
        out.push_back(*k);
      }
      if (eat(",")) continue;
      if (eat(std::string_view(&close, 1))) return out;
      return std::nullopt;
    }
  }
  std::optional<std::string> string() {
    ws();
    bool raw = false;
    while (p_ < s_.size() && std::strchr("rRbBuU", s_[p_]) && p_ + 1 < s_.size() && s_[p_ + 1] != '=' &&
           (s_[p_ + 1] == '"' || s_[p_ + 1] == '\'' || std::strchr("rRbB", s_[p_ + 1])))
      raw = raw || s_[p_] == 'r' || s_[p_] == 'R', ++p_;
    if (p_ >= s_.size() || (s_[p_] != '"' && s_[p_] != '\'')) return std::nullopt;
    const std::optional<size_t> closed = string_end(s_, p_);
    if (!closed) return std::nullopt;
    const size_t end = *closed;
    const char q = s_[p_];
    const size_t open = end - p_ >= 6 && s_[p_ + 1] == q && s_[p_ + 2] == q ? 3 : 1;
    std::string_view body = s_.substr(p_ + open, end - p_ - 2 * open);
    p_ = end;
    std::string out;
    for (size_t i = 0; i < body.size(); ++i) {
      if (raw || body[i] != '\\' || i + 1 >= body.size()) { out += body[i]; continue; }
      const char e = body[++i];
      out += e == 'n' ? '\n' : e == 't' ? '\t' : e;
    }
    return out;
  }
  std::optional<nlohmann::json> atom() {
    ws();
    if (p_ >= s_.size()) return std::nullopt;
    const char c = s_[p_];
    if (c == '[') return ++p_, items(']', false);
    if (c == '{') return ++p_, items('}', true);
    if (c == '(') {
      ++p_;
      if (eat(")")) return nlohmann::json::array();
      auto v = sum();
      if (!v) return std::nullopt;
      if (eat(")")) return v;  // parenthesised value
      if (!eat(",")) return std::nullopt;
      auto rest = items(')', false);  // a tuple, read as a list
      if (!rest) return std::nullopt;
      nlohmann::json out = nlohmann::json::array({*v});
      for (auto& x : *rest) out.push_back(x);
      return out;
    }
    if (c == 'f' || c == 'F') {
      if (p_ + 1 < s_.size() && (s_[p_ + 1] == '"' || s_[p_ + 1] == '\'')) return std::nullopt;  // f-string
    }
    if (c == '"' || c == '\'' || ((std::strchr("rRbBuU", c) != nullptr) && p_ + 1 < s_.size() &&
                                  (s_[p_ + 1] == '"' || s_[p_ + 1] == '\'' || std::strchr("rRbB", s_[p_ + 1])))) {
      std::string out;
      while (true) {  // adjacent strings are one
        const size_t save = p_;
        auto s = string();
        if (!s) { p_ = save; break; }
        out += *s;
      }
      return out;
    }
    if (std::isdigit(static_cast<unsigned char>(c)) || c == '.') return number();
    size_t e = p_;
    while (e < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[e])) || s_[e] == '_')) ++e;
    const std::string_view word = s_.substr(p_, e - p_);
    p_ = e;
    if (word == "True") return true;
    if (word == "False") return false;
    if (word == "None") return nlohmann::json(nullptr);
    return std::nullopt;
  }
  std::optional<nlohmann::json> number() {
    size_t e = p_;
    bool real = false, hex = s_.substr(p_, 2) == "0x" || s_.substr(p_, 2) == "0X";
    if (hex) e += 2;
    while (e < s_.size()) {
      const char x = s_[e];
      if (std::isdigit(static_cast<unsigned char>(x)) || x == '_' || (hex && std::isxdigit(static_cast<unsigned char>(x)))) {
        ++e;
      } else if (!hex && (x == '.' || x == 'e' || x == 'E')) {
        real = true;
        ++e;
        if ((x == 'e' || x == 'E') && e < s_.size() && (s_[e] == '+' || s_[e] == '-')) ++e;
      } else {
        break;
      }
    }
    std::string digits;
    for (size_t i = p_; i < e; ++i)
      if (s_[i] != '_') digits += s_[i];
    p_ = e;
    char* end = nullptr;
    errno = 0;
    if (real) {
      const double v = std::strtod(digits.c_str(), &end);
      if (*end != 0 || errno != 0) return std::nullopt;
      return v;
    }
    const long long v = std::strtoll(digits.c_str(), &end, hex ? 16 : 10);
    if (*end != 0 || errno != 0) return std::nullopt;
    return static_cast<int64_t>(v);
  }

  std::string_view s_;
  size_t p_ = 0;
};

std::string shown(std::string_view key, std::string_view value) {
  std::string v(value.substr(0, 60));
  if (value.size() > 60) v += "...";
  return std::string(key) + " = " + v;
}

void set_default(PyConfigClass& c, const std::string& key, std::string_view value) {
  if (auto v = python_literal(value)) {
    c.defaults[key] = *v;
    std::erase_if(c.unreadable, [&](const std::string& u) { return py_starts(u, key + " = "); });
  } else if (!c.defaults.contains(key)) {
    c.unreadable.push_back(shown(key, value));
  }
}

}  // namespace

std::vector<PyLine> python_logical_lines(std::string_view s) {
  std::vector<PyLine> out;
  PyLine cur;
  bool started = false;
  int depth = 0, col = 0, line = 1;
  const auto flush = [&] {
    if (started && !py_trim(cur.text).empty()) out.push_back(std::move(cur));
    cur = PyLine{};
    started = false;
    depth = 0;
    col = 0;
  };
  for (size_t i = 0; i < s.size();) {
    const char c = s[i];
    if (!started) {
      if (c == ' ') { ++col, ++i; continue; }
      if (c == '\t') { col = (col / 8 + 1) * 8, ++i; continue; }
      if (c == '\r' || c == '\f') { ++i; continue; }
      if (c == '\n') { col = 0, ++line, ++i; continue; }
      started = true;
      cur.indent = col;
      cur.line = line;
    }
    if (c == '#') {
      while (i < s.size() && s[i] != '\n') ++i;
      continue;
    }
    if (c == '\\' && i + 1 < s.size() && (s[i + 1] == '\n' || s[i + 1] == '\r')) {
      i += s[i + 1] == '\r' && i + 2 < s.size() && s[i + 2] == '\n' ? 3 : 2;
      ++line;
      cur.text += ' ', cur.code += ' ';
      continue;
    }
    if (c == '\n') {
      ++line, ++i;
      if (depth > 0) { cur.text += ' ', cur.code += ' '; continue; }
      flush();
      continue;
    }
    if (c == '"' || c == '\'') {
      const size_t end = skip_string(s, i);
      const std::string_view lit = s.substr(i, end - i);
      for (char x : lit) line += x == '\n';
      const size_t q = lit.size() >= 6 && lit[1] == c && lit[2] == c ? 3 : 1;
      cur.text += lit;
      cur.code += std::string(2 * q, c);
      i = end;
      continue;
    }
    if (c == '(' || c == '[' || c == '{') ++depth;
    if (c == ')' || c == ']' || c == '}') depth = depth > 0 ? depth - 1 : 0;
    cur.text += c, cur.code += c;
    ++i;
  }
  flush();
  return out;
}

std::optional<nlohmann::json> python_literal(std::string_view text) { return Literal(py_trim(text)).parse(); }

PyConfigFile parse_python_config(std::string_view source, const std::string& file_name) {
  PyConfigFile f{file_name, {}};
  PyConfigClass* cls = nullptr;
  int body = -1;
  bool has_init = false;
  const auto close = [&] {
    if (cls && !has_init && cls->model_type.empty()) f.classes.pop_back();
    cls = nullptr;
  };
  for (const PyLine& l : python_logical_lines(source)) {
    std::string_view code = l.code;
    if (l.indent == 0) {
      close();
      if (!py_starts(code, "class ")) continue;
      std::string_view rest = py_trim(code.substr(6));
      size_t e = 0;
      while (e < rest.size() && (std::isalnum(static_cast<unsigned char>(rest[e])) || rest[e] == '_')) ++e;
      f.classes.push_back(PyConfigClass{std::string(rest.substr(0, e)), "", l.line, nlohmann::json::object(), {}});
      cls = &f.classes.back();
      body = -1;
      has_init = false;
      continue;
    }
    if (!cls) continue;
    if (body < 0) body = l.indent;
    if (l.indent != body) continue;  // method bodies, nested blocks
    if (py_starts(code, "def __init__")) {
      has_init = true;
      const std::string_view text = l.text;
      const size_t open = text.find('(');
      if (open == std::string_view::npos) continue;
      const std::string_view params = text.substr(open + 1, matching_close(text, open) - open - 1);
      size_t from = 0;
      std::vector<size_t> commas = top_level(params, ',');
      commas.push_back(params.size());
      for (size_t comma : commas) {
        const std::string_view p = py_trim(params.substr(from, comma - from));
        from = comma + 1;
        if (p.empty() || p[0] == '*' || p == "self") continue;
        if (auto a = assignment(p)) set_default(*cls, a->first, a->second);
      }
      continue;
    }
    if (py_starts(code, "def ") || py_starts(code, "@") || py_starts(code, "class ") || py_starts(code, "async ")) continue;
    auto a = assignment(l.text);
    if (!a) continue;
    if (a->first == "model_type") {
      if (auto v = python_literal(a->second); v && v->is_string()) cls->model_type = v->get<std::string>();
      continue;
    }
    // Class-level tables that are not config keys (tp plans, key maps) and private names.
    if (a->first[0] == '_' || py_starts(a->first, "base_model_") || a->first == "attribute_map" ||
        a->first == "sub_configs" || a->first == "sub_configs_defaults" || a->first == "keys_to_ignore_at_inference")
      continue;
    set_default(*cls, a->first, a->second);
  }
  close();
  return f;
}

}  // namespace dayzero::analysis
