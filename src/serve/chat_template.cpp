// The Jinja subset of chat templates: text, {{ expr }}, {# comments #}, {% if/elif/else/endif %},
// {% for x in expr %}...{% endfor %} (with loop.index0/index/first/last/length), {% set name = expr %};
// expressions: string/int/bool/none literals, lists, variables, .attr, [index], [a:b] slices,
// + - * % ~ == != < > <= >= in, not in, and, or, not, "is [not] defined/none/string", filters trim,
// length, upper, lower, tojson; string methods strip, lstrip, rstrip, startswith, endswith,
// upper, lower; functions raise_exception and range. Whitespace: {%- -%} and HF's trim_blocks
// and lstrip_blocks. Anything else is refused at compile time.
#include "serve/chat_template.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

namespace dayzero::serve {

using nlohmann::json;

// Not anonymous: ChatTemplate::Node holds these.
namespace jinja {

json undefined() { return json(json::value_t::discarded); }
bool is_undefined(const json& v) { return v.is_discarded(); }

bool truthy(const json& v) {
  if (is_undefined(v) || v.is_null()) return false;
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number()) return v.get<double>() != 0;
  if (v.is_string()) return !v.get_ref<const std::string&>().empty();
  if (v.is_array() || v.is_object()) return !v.empty();
  return false;
}

std::string to_text(const json& v) {
  if (is_undefined(v) || v.is_null()) return v.is_null() ? "None" : "";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
  return v.dump();
}

struct Token {
  enum Kind { kName, kString, kInt, kOp, kEnd } kind;
  std::string text;
};

struct TemplateError {
  std::string message;
};

struct Expr {
  enum Kind { kLit, kVar, kAttr, kIndex, kSlice, kCall, kMethod, kFilter, kNot, kAnd, kOr, kBin, kTest, kList, kNeg } kind;
  std::string name;  // variable, attribute, method, filter, test, operator
  json lit;
  bool negate = false;  // kTest: "is not"
  std::vector<std::unique_ptr<Expr>> kids;
};

std::vector<Token> lex(const std::string& s) {
  std::vector<Token> out;
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      out.push_back({Token::kName, s.substr(i, j - i)});
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
      out.push_back({Token::kInt, s.substr(i, j - i)});
      i = j;
    } else if (c == '\'' || c == '"') {
      std::string v;
      size_t j = i + 1;
      for (; j < s.size() && s[j] != c; ++j) {
        if (s[j] == '\\' && j + 1 < s.size()) {
          const char e = s[++j];
          v += e == 'n' ? '\n' : e == 't' ? '\t' : e;
        } else {
          v += s[j];
        }
      }
      if (j >= s.size()) throw TemplateError{"unterminated string"};
      out.push_back({Token::kString, v});
      i = j + 1;
    } else {
      static const char* two[] = {"==", "!=", "<=", ">="};
      std::string op(1, c);
      for (const char* t : two)
        if (s.compare(i, 2, t) == 0) op = t;
      if (std::string("=!<>+-*%~()[].,|:").find(c) == std::string::npos)
        throw TemplateError{std::string("unsupported character '") + c + "'"};
      out.push_back({Token::kOp, op});
      i += op.size();
    }
  }
  out.push_back({Token::kEnd, ""});
  return out;
}

class ExprParser {
 public:
  explicit ExprParser(std::vector<Token> t) : t_(std::move(t)) {}
  std::unique_ptr<Expr> parse() { return parse_or(); }
  bool at_end() const { return t_[i_].kind == Token::kEnd; }
  const Token& peek() const { return t_[i_]; }
  Token next() { return t_[i_].kind == Token::kEnd ? t_[i_] : t_[i_++]; }
  bool accept(Token::Kind k, const std::string& text) {
    if (t_[i_].kind == k && t_[i_].text == text) {
      ++i_;
      return true;
    }
    return false;
  }
  void expect(Token::Kind k, const std::string& text) {
    if (!accept(k, text)) throw TemplateError{"expected '" + text + "', found '" + t_[i_].text + "'"};
  }
  std::string name() {
    if (t_[i_].kind != Token::kName) throw TemplateError{"expected a name, found '" + t_[i_].text + "'"};
    return t_[i_++].text;
  }

 private:
  static std::unique_ptr<Expr> make(Expr::Kind k, std::string name = "") {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->name = std::move(name);
    return e;
  }
  std::unique_ptr<Expr> bin(Expr::Kind k, std::string op, std::unique_ptr<Expr> a, std::unique_ptr<Expr> b) {
    auto e = make(k, std::move(op));
    e->kids.push_back(std::move(a));
    e->kids.push_back(std::move(b));
    return e;
  }
  std::unique_ptr<Expr> parse_or() {
    auto a = parse_and();
    while (accept(Token::kName, "or")) a = bin(Expr::kOr, "or", std::move(a), parse_and());
    return a;
  }
  std::unique_ptr<Expr> parse_and() {
    auto a = parse_not();
    while (accept(Token::kName, "and")) a = bin(Expr::kAnd, "and", std::move(a), parse_not());
    return a;
  }
  std::unique_ptr<Expr> parse_not() {
    if (accept(Token::kName, "not")) {
      auto e = make(Expr::kNot);
      e->kids.push_back(parse_not());
      return e;
    }
    return parse_cmp();
  }
  std::unique_ptr<Expr> parse_cmp() {
    auto a = parse_add();
    for (;;) {
      const Token& t = peek();
      if (t.kind == Token::kOp && (t.text == "==" || t.text == "!=" || t.text == "<" || t.text == ">" ||
                                   t.text == "<=" || t.text == ">=")) {
        const std::string op = next().text;
        a = bin(Expr::kBin, op, std::move(a), parse_add());
      } else if (accept(Token::kName, "in")) {
        a = bin(Expr::kBin, "in", std::move(a), parse_add());
      } else if (t.kind == Token::kName && t.text == "not" && t_[i_ + 1].kind == Token::kName && t_[i_ + 1].text == "in") {
        i_ += 2;
        auto in = bin(Expr::kBin, "in", std::move(a), parse_add());
        a = make(Expr::kNot);
        a->kids.push_back(std::move(in));
      } else if (accept(Token::kName, "is")) {
        auto e = make(Expr::kTest);
        e->negate = accept(Token::kName, "not");
        e->name = name();
        if (e->name != "defined" && e->name != "none" && e->name != "string" && e->name != "undefined")
          throw TemplateError{"unsupported test 'is " + e->name + "'"};
        e->kids.push_back(std::move(a));
        a = std::move(e);
      } else {
        return a;
      }
    }
  }
  std::unique_ptr<Expr> parse_add() {
    auto a = parse_mul();
    for (;;) {
      if (accept(Token::kOp, "+")) a = bin(Expr::kBin, "+", std::move(a), parse_mul());
      else if (accept(Token::kOp, "-")) a = bin(Expr::kBin, "-", std::move(a), parse_mul());
      else if (accept(Token::kOp, "~")) a = bin(Expr::kBin, "~", std::move(a), parse_mul());
      else return a;
    }
  }
  std::unique_ptr<Expr> parse_mul() {
    auto a = parse_unary();
    for (;;) {
      if (accept(Token::kOp, "*")) a = bin(Expr::kBin, "*", std::move(a), parse_unary());
      else if (accept(Token::kOp, "%")) a = bin(Expr::kBin, "%", std::move(a), parse_unary());
      else return a;
    }
  }
  std::unique_ptr<Expr> parse_unary() {
    if (accept(Token::kOp, "-")) {
      auto e = make(Expr::kNeg);
      e->kids.push_back(parse_unary());
      return e;
    }
    return parse_filter();
  }
  std::unique_ptr<Expr> parse_filter() {
    auto a = parse_postfix();
    while (accept(Token::kOp, "|")) {
      auto e = make(Expr::kFilter, name());
      if (e->name != "trim" && e->name != "length" && e->name != "upper" && e->name != "lower" && e->name != "tojson")
        throw TemplateError{"unsupported filter '" + e->name + "'"};
      e->kids.push_back(std::move(a));
      a = std::move(e);
    }
    return a;
  }
  std::vector<std::unique_ptr<Expr>> args() {
    std::vector<std::unique_ptr<Expr>> out;
    if (accept(Token::kOp, ")")) return out;
    do out.push_back(parse_or());
    while (accept(Token::kOp, ","));
    expect(Token::kOp, ")");
    return out;
  }
  std::unique_ptr<Expr> parse_postfix() {
    auto a = parse_primary();
    for (;;) {
      if (accept(Token::kOp, ".")) {
        const std::string n = name();
        if (accept(Token::kOp, "(")) {
          static const char* methods[] = {"strip", "lstrip", "rstrip", "startswith", "endswith", "upper", "lower"};
          bool ok = false;
          for (const char* m : methods) ok = ok || n == m;
          if (!ok) throw TemplateError{"unsupported method '." + n + "()'"};
          auto e = make(Expr::kMethod, n);
          e->kids.push_back(std::move(a));
          for (auto& x : args()) e->kids.push_back(std::move(x));
          a = std::move(e);
        } else {
          auto e = make(Expr::kAttr, n);
          e->kids.push_back(std::move(a));
          a = std::move(e);
        }
      } else if (accept(Token::kOp, "[")) {
        std::unique_ptr<Expr> lo, hi;
        if (!(peek().kind == Token::kOp && peek().text == ":")) lo = parse_or();
        if (accept(Token::kOp, ":")) {
          if (!(peek().kind == Token::kOp && peek().text == "]")) hi = parse_or();
          expect(Token::kOp, "]");
          auto e = make(Expr::kSlice);
          e->kids.push_back(std::move(a));
          e->kids.push_back(std::move(lo));
          e->kids.push_back(std::move(hi));
          a = std::move(e);
        } else {
          expect(Token::kOp, "]");
          a = bin(Expr::kIndex, "[]", std::move(a), std::move(lo));
        }
      } else {
        return a;
      }
    }
  }
  std::unique_ptr<Expr> parse_primary() {
    const Token t = next();
    if (t.kind == Token::kString) {
      auto e = make(Expr::kLit);
      e->lit = t.text;
      return e;
    }
    if (t.kind == Token::kInt) {
      auto e = make(Expr::kLit);
      e->lit = std::stoll(t.text);
      return e;
    }
    if (t.kind == Token::kOp && t.text == "(") {
      auto e = parse_or();
      expect(Token::kOp, ")");
      return e;
    }
    if (t.kind == Token::kOp && t.text == "[") {
      auto e = make(Expr::kList);
      if (!accept(Token::kOp, "]")) {
        do e->kids.push_back(parse_or());
        while (accept(Token::kOp, ","));
        expect(Token::kOp, "]");
      }
      return e;
    }
    if (t.kind == Token::kName) {
      if (t.text == "true" || t.text == "True" || t.text == "false" || t.text == "False") {
        auto e = make(Expr::kLit);
        e->lit = t.text == "true" || t.text == "True";
        return e;
      }
      if (t.text == "none" || t.text == "None") return make(Expr::kLit);
      if (accept(Token::kOp, "(")) {
        if (t.text != "raise_exception" && t.text != "range") throw TemplateError{"unsupported function '" + t.text + "()'"};
        auto e = make(Expr::kCall, t.text);
        e->kids = args();
        return e;
      }
      return make(Expr::kVar, t.text);
    }
    throw TemplateError{"unexpected '" + t.text + "'"};
  }

  std::vector<Token> t_;
  size_t i_ = 0;
};

}  // namespace jinja

using jinja::Expr;
using jinja::ExprParser;
using jinja::TemplateError;
using jinja::Token;
using jinja::is_undefined;
using jinja::lex;
using jinja::to_text;
using jinja::truthy;
using jinja::undefined;

struct ChatTemplate::Node {
  enum Kind { kBody, kText, kOutput, kIf, kFor, kSet } kind = kBody;
  std::string text;  // kText; kFor: loop variable; kSet: name
  std::vector<std::unique_ptr<Expr>> exprs;  // kOutput, kSet: one; kIf: one per branch; kFor: the iterable
  std::vector<std::unique_ptr<Node>> kids;   // kBody: children; kIf: one body per branch (+ else); kFor: body
};

namespace {

using Node = ChatTemplate::Node;

struct Segment {
  enum Kind { kText, kExpr, kStmt } kind;
  std::string text;
  size_t offset;
};

bool is_blank(char c) { return c == ' ' || c == '\t'; }

std::vector<Segment> split(const std::string& s) {
  std::vector<Segment> out;
  size_t i = 0;
  bool trim_next = false, newline_next = false;
  while (i <= s.size()) {
    const size_t open = s.find('{', i);
    size_t at = std::string::npos;
    for (size_t p = open; p != std::string::npos && p + 1 < s.size(); p = s.find('{', p + 1))
      if (s[p + 1] == '{' || s[p + 1] == '%' || s[p + 1] == '#') {
        at = p;
        break;
      }
    std::string text = s.substr(i, at == std::string::npos ? std::string::npos : at - i);
    // lstrip_blocks looks at the source: only blanks between the line start and the tag.
    const size_t nl = text.find_last_of('\n');
    const bool line_start = nl != std::string::npos || i == 0;
    bool blanks_only = true;
    for (size_t k = nl == std::string::npos ? 0 : nl + 1; k < text.size(); ++k) blanks_only = blanks_only && is_blank(text[k]);
    if (trim_next) {
      size_t k = 0;
      while (k < text.size() && std::isspace(static_cast<unsigned char>(text[k]))) ++k;
      text.erase(0, k);
    } else if (newline_next && !text.empty() && text[0] == '\n') {
      text.erase(0, 1);  // trim_blocks
    }
    if (at == std::string::npos) {
      if (!text.empty()) out.push_back({Segment::kText, text, i});
      break;
    }
    const char kind = s[at + 1];
    const std::string close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
    const size_t end = s.find(close, at + 2);
    if (end == std::string::npos) throw TemplateError{"unclosed tag at offset " + std::to_string(at)};
    std::string inner = s.substr(at + 2, end - at - 2);
    const bool lstrip_left = !inner.empty() && inner[0] == '-';
    const bool keep_left = !inner.empty() && inner[0] == '+';
    const bool strip_right = !inner.empty() && inner.back() == '-';
    if (lstrip_left) {
      size_t k = text.size();
      while (k > 0 && std::isspace(static_cast<unsigned char>(text[k - 1]))) --k;
      text.erase(k);
    } else if (kind != '{' && !keep_left) {  // lstrip_blocks: blanks from the line start
      if (line_start && blanks_only) {
        size_t k = text.size();
        while (k > 0 && is_blank(text[k - 1])) --k;
        text.erase(k);
      }
    }
    if (lstrip_left || keep_left) inner.erase(0, 1);
    if (strip_right) inner.pop_back();
    if (!text.empty()) out.push_back({Segment::kText, text, i});
    if (kind == '{') out.push_back({Segment::kExpr, inner, at});
    if (kind == '%') out.push_back({Segment::kStmt, inner, at});
    trim_next = strip_right;
    newline_next = kind != '{';
    i = end + 2;
  }
  return out;
}

std::unique_ptr<Expr> parse_expr(ExprParser& p) {
  auto e = p.parse();
  if (!p.at_end()) throw TemplateError{"unexpected '" + p.peek().text + "'"};
  return e;
}

// Parses segments from i until one of the stop keywords; returns the keyword met ("" at the end).
std::string parse_body(const std::vector<Segment>& segs, size_t& i, Node& body, const std::vector<std::string>& stops,
                       ExprParser* stop_parser_out, size_t* stop_offset) {
  while (i < segs.size()) {
    const Segment& sg = segs[i];
    try {
      if (sg.kind == Segment::kText) {
        auto n = std::make_unique<Node>();
        n->kind = Node::kText;
        n->text = sg.text;
        body.kids.push_back(std::move(n));
        ++i;
        continue;
      }
      ExprParser p(lex(sg.text));
      if (sg.kind == Segment::kExpr) {
        auto n = std::make_unique<Node>();
        n->kind = Node::kOutput;
        n->exprs.push_back(parse_expr(p));
        body.kids.push_back(std::move(n));
        ++i;
        continue;
      }
      const std::string kw = p.name();
      for (const std::string& s : stops)
        if (kw == s) {
          *stop_parser_out = std::move(p);
          *stop_offset = sg.offset;
          ++i;
          return kw;
        }
      ++i;
      if (kw == "if") {
        auto n = std::make_unique<Node>();
        n->kind = Node::kIf;
        n->exprs.push_back(parse_expr(p));
        for (;;) {
          auto branch = std::make_unique<Node>();
          ExprParser sp({});
          size_t off = 0;
          const std::string end = parse_body(segs, i, *branch, {"elif", "else", "endif"}, &sp, &off);
          n->kids.push_back(std::move(branch));
          if (end == "endif") break;
          if (end == "elif") {
            n->exprs.push_back(parse_expr(sp));
            continue;
          }
          if (end == "else") {
            auto tail = std::make_unique<Node>();
            ExprParser ep({});
            const std::string e2 = parse_body(segs, i, *tail, {"endif"}, &ep, &off);
            if (e2 != "endif") throw TemplateError{"{% if %} without {% endif %}"};
            n->kids.push_back(std::move(tail));
            break;
          }
          throw TemplateError{"{% if %} without {% endif %}"};
        }
        body.kids.push_back(std::move(n));
      } else if (kw == "for") {
        auto n = std::make_unique<Node>();
        n->kind = Node::kFor;
        n->text = p.name();
        p.expect(Token::kName, "in");
        n->exprs.push_back(parse_expr(p));
        auto loop_body = std::make_unique<Node>();
        ExprParser sp({});
        size_t off = 0;
        if (parse_body(segs, i, *loop_body, {"endfor"}, &sp, &off) != "endfor")
          throw TemplateError{"{% for %} without {% endfor %}"};
        n->kids.push_back(std::move(loop_body));
        body.kids.push_back(std::move(n));
      } else if (kw == "set") {
        auto n = std::make_unique<Node>();
        n->kind = Node::kSet;
        n->text = p.name();
        p.expect(Token::kOp, "=");
        n->exprs.push_back(parse_expr(p));
        body.kids.push_back(std::move(n));
      } else {
        throw TemplateError{"unsupported statement '{% " + kw + " %}'"};
      }
    } catch (const TemplateError& e) {
      if (e.message.find("offset") != std::string::npos) throw;
      throw TemplateError{e.message + " (at offset " + std::to_string(sg.offset) + ")"};
    }
  }
  if (!stops.empty()) throw TemplateError{"missing {% " + stops.back() + " %}"};
  return "";
}

struct Scope {
  std::vector<json> frames;  // innermost last
  json lookup(const std::string& n) const {
    for (auto it = frames.rbegin(); it != frames.rend(); ++it)
      if (it->contains(n)) return (*it)[n];
    return undefined();
  }
};

std::string strip(const std::string& s, bool left, bool right) {
  size_t b = 0, e = s.size();
  while (left && b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (right && e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

std::string need_string(const json& v, const char* what) {
  if (!v.is_string()) throw TemplateError{std::string(what) + " of a " + (is_undefined(v) ? "undefined value" : v.type_name())};
  return v.get<std::string>();
}

json eval(const Expr& e, Scope& sc) {
  switch (e.kind) {
    case Expr::kLit: return e.lit;
    case Expr::kVar: return sc.lookup(e.name);
    case Expr::kList: {
      json a = json::array();
      for (const auto& k : e.kids) a.push_back(eval(*k, sc));
      return a;
    }
    case Expr::kAttr: {
      const json o = eval(*e.kids[0], sc);
      if (o.is_object() && o.contains(e.name)) return o[e.name];
      return undefined();
    }
    case Expr::kIndex: {
      const json o = eval(*e.kids[0], sc);
      const json k = eval(*e.kids[1], sc);
      if (o.is_object() && k.is_string() && o.contains(k.get<std::string>())) return o[k.get<std::string>()];
      if (o.is_array() && k.is_number_integer()) {
        int64_t i = k.get<int64_t>();
        if (i < 0) i += static_cast<int64_t>(o.size());
        if (i >= 0 && i < static_cast<int64_t>(o.size())) return o[static_cast<size_t>(i)];
      }
      return undefined();
    }
    case Expr::kSlice: {
      const json o = eval(*e.kids[0], sc);
      if (!o.is_array() && !o.is_string()) throw TemplateError{"slice of a " + std::string(o.type_name())};
      const int64_t n = o.is_array() ? static_cast<int64_t>(o.size()) : static_cast<int64_t>(o.get<std::string>().size());
      auto bound = [&](const std::unique_ptr<Expr>& x, int64_t dflt) {
        if (!x) return dflt;
        int64_t v = eval(*x, sc).get<int64_t>();
        if (v < 0) v += n;
        return std::clamp<int64_t>(v, 0, n);
      };
      const int64_t lo = bound(e.kids[1], 0), hi = std::max(lo, bound(e.kids[2], n));
      if (o.is_string()) return o.get<std::string>().substr(static_cast<size_t>(lo), static_cast<size_t>(hi - lo));
      return json(o.begin() + lo, o.begin() + hi);
    }
    case Expr::kCall: {
      if (e.name == "raise_exception")
        throw TemplateError{e.kids.empty() ? "raise_exception()" : to_text(eval(*e.kids[0], sc))};
      if (e.kids.size() != 1) throw TemplateError{"range() takes one argument here"};
      json a = json::array();
      for (int64_t i = 0; i < eval(*e.kids[0], sc).get<int64_t>(); ++i) a.push_back(i);
      return a;
    }
    case Expr::kMethod: {
      const std::string s = need_string(eval(*e.kids[0], sc), ("." + e.name + "()").c_str());
      if (e.name == "strip") return strip(s, true, true);
      if (e.name == "lstrip") return strip(s, true, false);
      if (e.name == "rstrip") return strip(s, false, true);
      if (e.name == "upper" || e.name == "lower") {
        std::string r = s;
        for (char& c : r) c = static_cast<char>(e.name == "upper" ? std::toupper(c) : std::tolower(c));
        return r;
      }
      if (e.kids.size() != 2) throw TemplateError{"." + e.name + "() takes one argument"};
      const std::string x = need_string(eval(*e.kids[1], sc), ("." + e.name + "()").c_str());
      if (e.name == "startswith") return s.rfind(x, 0) == 0;
      return s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
    }
    case Expr::kFilter: {
      const json v = eval(*e.kids[0], sc);
      if (e.name == "length") {
        if (v.is_string()) return v.get<std::string>().size();
        if (v.is_array() || v.is_object()) return v.size();
        throw TemplateError{"length of a " + std::string(v.type_name())};
      }
      if (e.name == "tojson") return v.dump();
      const std::string s = need_string(v, ("|" + e.name).c_str());
      if (e.name == "trim") return strip(s, true, true);
      std::string r = s;
      for (char& c : r) c = static_cast<char>(e.name == "upper" ? std::toupper(c) : std::tolower(c));
      return r;
    }
    case Expr::kNot: return !truthy(eval(*e.kids[0], sc));
    case Expr::kNeg: return -eval(*e.kids[0], sc).get<int64_t>();
    case Expr::kAnd: {
      const json a = eval(*e.kids[0], sc);
      return truthy(a) ? eval(*e.kids[1], sc) : a;
    }
    case Expr::kOr: {
      const json a = eval(*e.kids[0], sc);
      return truthy(a) ? a : eval(*e.kids[1], sc);
    }
    case Expr::kTest: {
      const json v = eval(*e.kids[0], sc);
      bool r = e.name == "defined"     ? !is_undefined(v)
               : e.name == "undefined" ? is_undefined(v)
               : e.name == "none"      ? v.is_null()
                                       : v.is_string();
      return e.negate ? !r : r;
    }
    case Expr::kBin: {
      const json a = eval(*e.kids[0], sc), b = eval(*e.kids[1], sc);
      const std::string& op = e.name;
      if (op == "~") return to_text(a) + to_text(b);
      if (op == "==") return !is_undefined(a) && !is_undefined(b) ? a == b : is_undefined(a) == is_undefined(b);
      if (op == "!=") return !(!is_undefined(a) && !is_undefined(b) ? a == b : is_undefined(a) == is_undefined(b));
      if (op == "in") {
        if (b.is_string()) return b.get<std::string>().find(need_string(a, "'in'")) != std::string::npos;
        if (b.is_object()) return a.is_string() && b.contains(a.get<std::string>());
        if (b.is_array()) return std::find(b.begin(), b.end(), a) != b.end();
        throw TemplateError{"'in' a " + std::string(b.type_name())};
      }
      if (op == "+" && a.is_string() && b.is_string()) return a.get<std::string>() + b.get<std::string>();
      if (op == "+" && a.is_array() && b.is_array()) {
        json r = a;
        for (const auto& x : b) r.push_back(x);
        return r;
      }
      if (!a.is_number() || !b.is_number())
        throw TemplateError{"'" + op + "' between a " + (is_undefined(a) ? "undefined value" : a.type_name()) + " and a " +
                            (is_undefined(b) ? "undefined value" : b.type_name())};
      const double x = a.get<double>(), y = b.get<double>();
      if (op == "+") return a.is_number_integer() && b.is_number_integer() ? json(a.get<int64_t>() + b.get<int64_t>()) : json(x + y);
      if (op == "-") return a.is_number_integer() && b.is_number_integer() ? json(a.get<int64_t>() - b.get<int64_t>()) : json(x - y);
      if (op == "*" || op == "%") {
        if (!a.is_number_integer() || !b.is_number_integer()) throw TemplateError{"'" + op + "' of non-integers"};
        const int64_t i = a.get<int64_t>(), k = b.get<int64_t>();
        if (op == "*") return i * k;
        if (k == 0) throw TemplateError{"'%' by zero"};
        return ((i % k) + k) % k;  // Python's modulo
      }
      if (op == "<") return x < y;
      if (op == ">") return x > y;
      if (op == "<=") return x <= y;
      return x >= y;
    }
  }
  return undefined();
}

void exec(const Node& n, Scope& sc, std::string& out) {
  switch (n.kind) {
    case Node::kBody:
      for (const auto& k : n.kids) exec(*k, sc, out);
      return;
    case Node::kText: out += n.text; return;
    case Node::kOutput: out += to_text(eval(*n.exprs[0], sc)); return;
    case Node::kSet: sc.frames.back()[n.text] = eval(*n.exprs[0], sc); return;
    case Node::kIf:
      for (size_t b = 0; b < n.kids.size(); ++b)
        if (b >= n.exprs.size() || truthy(eval(*n.exprs[b], sc))) {
          exec(*n.kids[b], sc, out);
          return;
        }
      return;
    case Node::kFor: {
      json items = eval(*n.exprs[0], sc);
      if (is_undefined(items) || items.is_null()) return;
      if (!items.is_array()) throw TemplateError{"{% for %} over a " + std::string(items.type_name())};
      const size_t len = items.size();
      for (size_t i = 0; i < len; ++i) {
        sc.frames.push_back(json::object());
        sc.frames.back()[n.text] = items[i];
        sc.frames.back()["loop"] = {{"index0", i}, {"index", i + 1}, {"first", i == 0}, {"last", i + 1 == len}, {"length", len}};
        exec(*n.kids[0], sc, out);
        sc.frames.pop_back();
      }
      return;
    }
  }
}

}  // namespace

ChatTemplate::~ChatTemplate() = default;

Result<std::unique_ptr<ChatTemplate>> ChatTemplate::compile(const std::string& text, const std::string& source) {
  std::unique_ptr<ChatTemplate> t(new ChatTemplate());
  t->root_ = std::make_unique<Node>();
  try {
    const std::vector<Segment> segs = split(text);
    size_t i = 0;
    ExprParser unused({});
    size_t off = 0;
    parse_body(segs, i, *t->root_, {}, &unused, &off);
  } catch (const TemplateError& e) {
    return Status::InvalidArgument(source + ": the chat template is outside the Jinja subset dayzero renders: " +
                                   e.message + " (docs/serve.md \"Chat templates\")");
  }
  return t;
}

Result<std::string> ChatTemplate::render(const json& vars) const {
  Scope sc;
  sc.frames.push_back(vars);
  sc.frames.push_back(json::object());
  std::string out;
  try {
    exec(*root_, sc, out);
  } catch (const TemplateError& e) {
    return Status::InvalidArgument(e.message);
  } catch (const json::exception& e) {
    return Status::InvalidArgument(std::string("a value of the wrong kind: ") + e.what());
  }
  return out;
}

Result<std::string> find_model_chat_template(const std::string& model_dir) {
  std::ifstream jinja(model_dir + "/chat_template.jinja");
  if (jinja) {
    std::stringstream ss;
    ss << jinja.rdbuf();
    return ss.str();
  }
  std::ifstream cfg(model_dir + "/tokenizer_config.json");
  if (!cfg) return Status::NotFound(model_dir + ": no chat_template.jinja and no tokenizer_config.json");
  std::stringstream ss;
  ss << cfg.rdbuf();
  const json j = json::parse(ss.str(), nullptr, false);
  if (j.is_discarded()) return Status::Corrupt(model_dir + "/tokenizer_config.json: not valid JSON");
  if (j.contains("chat_template")) {
    const json& t = j["chat_template"];
    if (t.is_string()) return t.get<std::string>();
    if (t.is_array())
      for (const json& e : t)
        if (e.is_object() && e.value("name", "") == "default" && e.contains("template") && e["template"].is_string())
          return e["template"].get<std::string>();
  }
  return Status::NotFound(model_dir + ": the model has no chat template (tokenizer_config.json chat_template, chat_template.jinja)");
}

}  // namespace dayzero::serve
