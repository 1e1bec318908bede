// Reading a model folder's own Python (remote code) without running it: a model released before
// transformers knows it ships configuration_*.py and modeling_*.py, and the analysis must not
// need Python at run time. This is a small reader, not a Python parser: it splits a file into
// logical lines (brackets, backslashes, strings and comments handled), reads literal values,
// and takes each config class's literal defaults. What it cannot read is named, never guessed.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace dayzero::analysis {

// One logical line of Python: indent (columns of its first physical line), the text with
// comments removed (strings kept), and `code`, the same with every string literal emptied
// (so a docstring never looks like code), and its first physical line number (1-based).
struct PyLine {
  int indent = 0, line = 0;
  std::string text, code;
};
std::vector<PyLine> python_logical_lines(std::string_view source);

// A literal as Python writes it: int (underscores, 0x), float (1e-6), True / False / None, a
// quoted string (adjacent strings joined), a list or tuple of literals, a dict with string keys,
// unary minus and + - * // between numbers (`4096 * 32`). nullopt for anything else (a call,
// a name, an f-string).
std::optional<nlohmann::json> python_literal(std::string_view text);

// The literal defaults of one configuration class: class attributes (`vocab_size: int = 32000`
// and `vocab_size = 32000` at the class's own level) and the keyword defaults of its __init__
// (an __init__ default wins over a class attribute of the same name, as at run time).
struct PyConfigClass {
  std::string name, model_type;
  int line = 0;
  nlohmann::json defaults = nlohmann::json::object();
  std::vector<std::string> unreadable;  // "key = <text as written>" (cut at 60 characters)
};
struct PyConfigFile {
  std::string file;  // the file name (configuration_x.py)
  std::vector<PyConfigClass> classes;
};
// Every class of the file that has an __init__ or a model_type, in file order.
PyConfigFile parse_python_config(std::string_view source, const std::string& file_name);

}  // namespace dayzero::analysis
