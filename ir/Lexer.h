//===- Lexer.h - Tokens of the textual IR -----------------------*- C++ -*-===//
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dlc::ir {

enum class Tok : uint8_t {
  Eof,
  Error,     // text holds the message
  Ident,     // graph, const, Conv, f32, nan, true, ...
  ValueName, // %name (text holds the unquoted name)
  GraphName, // @name
  String,    // "..." (text holds the unescaped contents)
  Int,       // -?[0-9]+
  Float,     // with '.' or exponent, or [-]inf / nan
  Hex,       // 0x... (text holds the digits)
  LParen,
  RParen,
  LBrace,
  RBrace,
  LBracket,
  RBracket,
  Less,
  Greater,
  Comma,
  Colon,
  Equal,
  Arrow,
};

struct Token {
  Tok kind;
  std::string text;
  uint32_t line;
  uint32_t col;
};

/// Splits the whole input into tokens (ending with Eof, or Error at the first bad char).
/// `//` starts a comment that runs to the end of the line.
std::vector<Token> lex(std::string_view text, uint32_t firstLine);

std::string_view tokName(Tok k);

} // namespace dlc::ir
