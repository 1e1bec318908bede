# cmake -DIN=file -DOUT=file.cpp -DNAMESPACE=ns -DFUNCTION=name -P EmbedText.cmake
# Writes OUT defining `std::string_view NAMESPACE::FUNCTION()` that returns IN's bytes, so a
# data file the program needs (data/config_defaults.json) is part of the binary
# and nothing outside it is read at run time. IN must not contain the raw-string delimiter.
file(READ "${IN}" content)
string(FIND "${content}" ")dzembed\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${IN} contains the raw-string delimiter )dzembed\"")
endif()
string(LENGTH "${content}" n)
set(out "// Generated from ${IN} by cmake/EmbedText.cmake: do not edit.\n#include <string_view>\n\n")
string(APPEND out "namespace ${NAMESPACE} {\n\nstd::string_view ${FUNCTION}() {\n  static constexpr char kText[] =\n")
# Pieces of 16 KiB: every compiler takes raw strings of this size.
set(i 0)
while(i LESS n)
  string(SUBSTRING "${content}" ${i} 16384 piece)
  string(APPEND out "      R\"dzembed(${piece})dzembed\"\n")
  math(EXPR i "${i} + 16384")
endwhile()
string(APPEND out "      \"\";\n  return {kText, sizeof(kText) - 1};\n}\n\n}  // namespace ${NAMESPACE}\n")
file(WRITE "${OUT}.tmp" "${out}")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.tmp")
