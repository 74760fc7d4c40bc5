#include "Lexer.h"

#include <cctype>
#include <cstdio>

namespace dlc::ir {

std::string_view tokName(Tok k) {
  switch (k) {
  case Tok::Eof:
    return "end of input";
  case Tok::Error:
    return "error";
  case Tok::Ident:
    return "identifier";
  case Tok::ValueName:
    return "value name";
  case Tok::GraphName:
    return "graph name";
  case Tok::String:
    return "string";
  case Tok::Int:
    return "integer";
  case Tok::Float:
    return "float";
  case Tok::Hex:
    return "hex literal";
  case Tok::LParen:
    return "'('";
  case Tok::RParen:
    return "')'";
  case Tok::LBrace:
    return "'{'";
  case Tok::RBrace:
    return "'}'";
  case Tok::LBracket:
    return "'['";
  case Tok::RBracket:
    return "']'";
  case Tok::Less:
    return "'<'";
  case Tok::Greater:
    return "'>'";
  case Tok::Comma:
    return "','";
  case Tok::Colon:
    return "':'";
  case Tok::Equal:
    return "'='";
  case Tok::Arrow:
    return "'->'";
  }
  return "?";
}

namespace {

bool isIdentStart(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_';
}
bool isIdentChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}
bool isBareNameChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '$' ||
         c == '-';
}
int hexValue(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

class Lexer {
public:
  Lexer(std::string_view text, uint32_t firstLine) : s_(text), line_(firstLine) {}

  std::vector<Token> run() {
    std::vector<Token> out;
    for (;;) {
      Token t = next();
      bool stop = t.kind == Tok::Eof || t.kind == Tok::Error;
      out.push_back(std::move(t));
      if (stop)
        return out;
    }
  }

private:
  char peek(size_t k = 0) const { return pos_ + k < s_.size() ? s_[pos_ + k] : '\0'; }
  void advance() {
    if (s_[pos_] == '\n') {
      ++line_;
      col_ = 1;
    } else {
      ++col_;
    }
    ++pos_;
  }
  Token make(Tok k, std::string text = {}) { return {k, std::move(text), tokLine_, tokCol_}; }
  Token error(std::string msg) { return {Tok::Error, std::move(msg), tokLine_, tokCol_}; }

  void skipSpaceAndComments() {
    for (;;) {
      char c = peek();
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        advance();
      } else if (c == '/' && peek(1) == '/') {
        while (pos_ < s_.size() && peek() != '\n')
          advance();
      } else {
        return;
      }
    }
  }

  Token lexString() {
    advance(); // opening quote
    std::string out;
    for (;;) {
      if (pos_ >= s_.size() || peek() == '\n')
        return error("unterminated string");
      char c = peek();
      advance();
      if (c == '"')
        return make(Tok::String, std::move(out));
      if (c != '\\') {
        out += c;
        continue;
      }
      char e = peek();
      if (e == '"' || e == '\\') {
        out += e;
        advance();
      } else if (hexValue(e) >= 0 && hexValue(peek(1)) >= 0) {
        out += static_cast<char>(hexValue(e) * 16 + hexValue(peek(1)));
        advance();
        advance();
      } else {
        return error("invalid escape sequence in string");
      }
    }
  }

  Token lexName(Tok kind) {
    advance(); // sigil
    if (peek() == '"') {
      Token t = lexString();
      if (t.kind == Tok::Error)
        return t;
      if (t.text.empty())
        return error("empty name");
      return make(kind, std::move(t.text));
    }
    size_t start = pos_;
    while (isBareNameChar(peek()))
      advance();
    if (pos_ == start)
      return error(kind == Tok::ValueName ? "expected a value name after '%'"
                                          : "expected a graph name after '@'");
    return make(kind, std::string(s_.substr(start, pos_ - start)));
  }

  Token lexNumber() {
    size_t start = pos_;
    if (peek() == '-')
      advance();
    if (peek() == 'i' || peek() == 'n') { // -inf / -nan
      size_t identStart = pos_;
      while (isIdentChar(peek()))
        advance();
      std::string_view word = s_.substr(identStart, pos_ - identStart);
      if (word == "inf" || word == "nan")
        return make(Tok::Float, std::string(s_.substr(start, pos_ - start)));
      return error("expected a number after '-'");
    }
    if (peek() == '0' && (peek(1) == 'x' || peek(1) == 'X') && s_[start] != '-') {
      advance();
      advance();
      size_t digits = pos_;
      while (hexValue(peek()) >= 0)
        advance();
      if (pos_ == digits)
        return error("expected hex digits after '0x'");
      return make(Tok::Hex, std::string(s_.substr(digits, pos_ - digits)));
    }
    if (!std::isdigit(static_cast<unsigned char>(peek())))
      return error("expected a number");
    bool isFloatTok = false;
    while (std::isdigit(static_cast<unsigned char>(peek())))
      advance();
    if (peek() == '.') {
      isFloatTok = true;
      advance();
      while (std::isdigit(static_cast<unsigned char>(peek())))
        advance();
    }
    if (peek() == 'e' || peek() == 'E') {
      isFloatTok = true;
      advance();
      if (peek() == '+' || peek() == '-')
        advance();
      if (!std::isdigit(static_cast<unsigned char>(peek())))
        return error("expected exponent digits");
      while (std::isdigit(static_cast<unsigned char>(peek())))
        advance();
    }
    if (isIdentChar(peek()))
      return error("invalid character in number");
    return make(isFloatTok ? Tok::Float : Tok::Int, std::string(s_.substr(start, pos_ - start)));
  }

  Token next() {
    skipSpaceAndComments();
    tokLine_ = line_;
    tokCol_ = col_;
    if (pos_ >= s_.size())
      return make(Tok::Eof);
    char c = peek();
    auto single = [&](Tok k) {
      advance();
      return make(k);
    };
    switch (c) {
    case '(':
      return single(Tok::LParen);
    case ')':
      return single(Tok::RParen);
    case '{':
      return single(Tok::LBrace);
    case '}':
      return single(Tok::RBrace);
    case '[':
      return single(Tok::LBracket);
    case ']':
      return single(Tok::RBracket);
    case '<':
      return single(Tok::Less);
    case '>':
      return single(Tok::Greater);
    case ',':
      return single(Tok::Comma);
    case ':':
      return single(Tok::Colon);
    case '=':
      return single(Tok::Equal);
    case '"':
      return lexString();
    case '%':
      return lexName(Tok::ValueName);
    case '@':
      return lexName(Tok::GraphName);
    case '-':
      if (peek(1) == '>') {
        advance();
        advance();
        return make(Tok::Arrow);
      }
      return lexNumber();
    default:
      break;
    }
    if (std::isdigit(static_cast<unsigned char>(c)))
      return lexNumber();
    if (isIdentStart(c)) {
      size_t start = pos_;
      // Dotted names ("dlc.kernel") are one identifier.
      while (isIdentChar(peek()) ||
             (peek() == '.' && pos_ + 1 < s_.size() && isIdentStart(s_[pos_ + 1])))
        advance();
      std::string word(s_.substr(start, pos_ - start));
      if (word == "inf" || word == "nan")
        return make(Tok::Float, std::move(word));
      return make(Tok::Ident, std::move(word));
    }
    char hex[8];
    std::snprintf(hex, sizeof(hex), "0x%02X", static_cast<unsigned char>(c));
    std::string shown = std::isprint(static_cast<unsigned char>(c)) ? std::string("'") + c + "'"
                                                                    : std::string("byte ") + hex;
    return error("unexpected character " + shown);
  }

  std::string_view s_;
  size_t pos_ = 0;
  uint32_t line_;
  uint32_t col_ = 1;
  uint32_t tokLine_ = 0, tokCol_ = 0;
};

} // namespace

std::vector<Token> lex(std::string_view text, uint32_t firstLine) {
  return Lexer(text, firstLine).run();
}

} // namespace dlc::ir
