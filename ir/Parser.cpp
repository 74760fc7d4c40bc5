//===- Parser.cpp - Textual IR parser --------------------------------------===//
#include "Lexer.h"
#include "dlc/ir/TextIR.h"

#include "llvm/ADT/STLExtras.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <set>
#include <unordered_map>
#include <unordered_set>

namespace dlc::ir {

namespace {

/// A parsed attribute before it is matched against the op's schema.
struct RawAttr {
  enum Kind { Int, Float, String, List, Tensor } kind;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::vector<RawAttr> list;
  ir::Tensor t;
};

class Parser {
public:
  Parser(std::string_view text, std::string_view file, unsigned firstLine)
      : file_(file), toks_(lex(text, firstLine)) {}

  llvm::Expected<std::unique_ptr<Graph>> run() {
    if (auto e = parseGraph())
      return e;
    return std::move(g_);
  }

private:
  const Token &tok() const { return toks_[pos_]; }
  const Token &consume() { return toks_[pos_++]; }
  bool is(Tok k) const { return tok().kind == k; }
  bool isIdent(std::string_view w) const { return is(Tok::Ident) && tok().text == w; }

  llvm::Error errorAt(const Token &t, const std::string &msg) {
    if (t.kind == Tok::Error)
      return errorf("{0}:{1}:{2}: {3}", file_, t.line, t.col, t.text);
    return errorf("{0}:{1}:{2}: {3}", file_, t.line, t.col, msg);
  }
  llvm::Error error(const std::string &msg) { return errorAt(tok(), msg); }
  std::string describeTok(const Token &t) {
    switch (t.kind) {
    case Tok::Ident:
    case Tok::Int:
    case Tok::Float:
      return "'" + t.text + "'";
    case Tok::ValueName:
      return "'%" + t.text + "'";
    default:
      return std::string(tokName(t.kind));
    }
  }
  llvm::Error expect(Tok k, const char *context) {
    if (!is(k))
      return error(std::string("expected ") + std::string(tokName(k)) + " " + context + ", found " +
                   describeTok(tok()));
    ++pos_;
    return llvm::Error::success();
  }
  llvm::Error expectIdent(std::string_view w, const char *context) {
    if (!isIdent(w))
      return error("expected '" + std::string(w) + "' " + context + ", found " +
                   describeTok(tok()));
    ++pos_;
    return llvm::Error::success();
  }

  llvm::Expected<int64_t> parseInt() {
    if (!is(Tok::Int))
      return error("expected an integer, found " + describeTok(tok()));
    const Token &t = consume();
    int64_t v = 0;
    auto r = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
    if (r.ec != std::errc())
      return errorAt(t, "integer out of range: " + t.text);
    return v;
  }

  static double parseFloatText(const std::string &text) {
    if (text == "nan" || text == "-nan")
      return std::numeric_limits<double>::quiet_NaN();
    if (text == "inf")
      return std::numeric_limits<double>::infinity();
    if (text == "-inf")
      return -std::numeric_limits<double>::infinity();
    double v = 0;
    std::from_chars(text.data(), text.data() + text.size(), v);
    return v;
  }
  static float parseFloat32Text(const std::string &text) {
    if (text == "nan" || text == "-nan" || text == "inf" || text == "-inf")
      return static_cast<float>(parseFloatText(text));
    float v = 0;
    // Parse directly as float: parsing as double then rounding can double-round.
    std::from_chars(text.data(), text.data() + text.size(), v);
    return v;
  }

  llvm::Expected<TensorType> parseType() {
    if (!is(Tok::Ident))
      return error("expected a type such as f32[1,3], found " + describeTok(tok()));
    const Token &t = consume();
    auto dt = parseDType(t.text);
    if (!dt)
      return errorAt(t, "unknown element type '" + t.text + "'");
    if (auto e = expect(Tok::LBracket, "to start the shape"))
      return e;
    Shape shape;
    while (!is(Tok::RBracket)) {
      if (!shape.empty())
        if (auto e = expect(Tok::Comma, "between dimensions"))
          return e;
      const Token &dimTok = tok();
      auto d = parseInt();
      if (!d)
        return d.takeError();
      if (*d < 0)
        return errorAt(dimTok, "dimension must be non-negative, got " + std::to_string(*d));
      shape.push_back(*d);
    }
    ++pos_;
    TensorType type(*dt, std::move(shape));
    if (!type.checkedNumElements() || *type.checkedNumElements() > kMaxTensorElements)
      return errorAt(t, "type " + type.str() + " has too many elements");
    return type;
  }

  /// dense<[...]> | dense<0x...> after the type.
  llvm::Expected<ir::Tensor> parseDense(const TensorType &type) {
    if (auto e = expectIdent("dense", "before constant data"))
      return e;
    if (auto e = expect(Tok::Less, "after 'dense'"))
      return e;
    int64_t n = type.numElements();
    if (isIdent("elided"))
      return error("constant data was elided when this IR was printed and cannot be parsed; "
                   "print without eliding constants");
    // The data is checked against the type before the tensor is allocated: a huge
    // shape with little (or no) data is an error, not an enormous allocation.
    if (!is(Tok::Hex) && !is(Tok::LBracket))
      return error("expected '[' or hex data in dense<...>, found " + describeTok(tok()));
    if (is(Tok::Hex) && tok().text.size() != 2 * type.byteSize())
      return errorAt(tok(), "hex data has " + std::to_string(tok().text.size() / 2) +
                                " bytes, type " + type.str() + " needs " +
                                std::to_string(type.byteSize()));
    if (is(Tok::LBracket)) {
      auto element = [](const Token &e) {
        return e.kind == Tok::Int || e.kind == Tok::Float ||
               (e.kind == Tok::Ident && (e.text == "true" || e.text == "false"));
      };
      int64_t given = 0;
      size_t j = pos_ + 1; // toks_ ends with Eof, which stops the scan
      for (; toks_[j].kind == Tok::Comma || element(toks_[j]); ++j)
        given += toks_[j].kind != Tok::Comma;
      if (toks_[j].kind != Tok::RBracket)
        return errorAt(toks_[j],
                       "expected a constant element, ',' or ']', found " + describeTok(toks_[j]));
      if (given > n)
        return errorAt(tok(), "too many elements for type " + type.str());
      if (given < n)
        return errorAt(tok(), "constant of type " + type.str() + " needs " + std::to_string(n) +
                                  " elements, got " + std::to_string(given));
    }
    ir::Tensor t(type);
    if (is(Tok::Hex)) {
      const Token &h = consume();
      auto *p = static_cast<uint8_t *>(t.mutableRaw());
      auto hv = [](char c) { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; };
      for (size_t i = 0; i < t.byteSize(); ++i)
        p[i] = static_cast<uint8_t>(hv(h.text[2 * i]) * 16 + hv(h.text[2 * i + 1]));
    } else {
      // The element count was checked above.
      if (auto e = expect(Tok::LBracket, "or hex data in dense<...>"))
        return e;
      int64_t i = 0;
      void *p = t.mutableRaw();
      while (!is(Tok::RBracket)) {
        if (i > 0)
          if (auto e = expect(Tok::Comma, "between elements"))
            return e;
        const Token &e = consume();
        DType dt = type.dtype;
        if (e.kind == Tok::Ident && (e.text == "true" || e.text == "false")) {
          if (dt != DType::Bool)
            return errorAt(e, "boolean element in a " + std::string(dtypeName(dt)) + " constant");
          storeElement<bool>(dt, p, i, e.text == "true");
        } else if (e.kind == Tok::Float) {
          if (!isFloat(dt) && !isFloat8(dt))
            return errorAt(e, "float element in a " + std::string(dtypeName(dt)) + " constant");
          if (dt == DType::F64)
            storeElement<double>(dt, p, i, parseFloatText(e.text));
          else
            storeElement<float>(dt, p, i, parseFloat32Text(e.text));
        } else if (e.kind == Tok::Int) {
          if (dt == DType::Bool)
            return errorAt(e, "integer element in a bool constant");
          if (isFloat(dt) || isFloat8(dt)) {
            storeElement<double>(dt, p, i, parseFloatText(e.text));
          } else if (isUnsignedInt(dt)) {
            uint64_t v = 0;
            auto r = std::from_chars(e.text.data(), e.text.data() + e.text.size(), v);
            if (r.ec != std::errc())
              return errorAt(e, "element out of range for " + std::string(dtypeName(dt)));
            storeElement<uint64_t>(dt, p, i, v);
          } else {
            int64_t v = 0;
            auto r = std::from_chars(e.text.data(), e.text.data() + e.text.size(), v);
            if (r.ec != std::errc())
              return errorAt(e, "element out of range for " + std::string(dtypeName(dt)));
            storeElement<int64_t>(dt, p, i, v);
          }
        } else {
          return errorAt(e, "expected a constant element, found " + describeTok(e));
        }
        ++i;
      }
      ++pos_;
    }
    if (auto e = expect(Tok::Greater, "to close dense<...>"))
      return e;
    return t;
  }

  llvm::Expected<RawAttr> parseRawAttr() {
    RawAttr a;
    if (is(Tok::Int)) {
      a.kind = RawAttr::Int;
      auto v = parseInt();
      if (!v)
        return v.takeError();
      a.i = *v;
      a.s = toks_[pos_ - 1].text;
    } else if (is(Tok::Float)) {
      a.kind = RawAttr::Float;
      a.s = consume().text;
    } else if (is(Tok::String)) {
      a.kind = RawAttr::String;
      a.s = consume().text;
    } else if (is(Tok::LBracket)) {
      a.kind = RawAttr::List;
      ++pos_;
      while (!is(Tok::RBracket)) {
        if (!a.list.empty())
          if (auto e = expect(Tok::Comma, "between list elements"))
            return e;
        if (!is(Tok::Int) && !is(Tok::Float) && !is(Tok::String))
          return error("expected a number or string in attribute list, found " +
                       describeTok(tok()));
        auto elem = parseRawAttr();
        if (!elem)
          return elem.takeError();
        a.list.push_back(std::move(*elem));
      }
      ++pos_;
    } else if (is(Tok::Ident)) {
      a.kind = RawAttr::Tensor;
      auto type = parseType();
      if (!type)
        return type.takeError();
      auto t = parseDense(*type);
      if (!t)
        return t.takeError();
      a.t = std::move(*t);
    } else {
      return error("expected an attribute value, found " + describeTok(tok()));
    }
    return a;
  }

  /// Converts a raw attribute to the kind the op's schema expects (ints to floats,
  /// empty lists to the expected list kind). Mismatches are left for the verifier.
  llvm::Expected<Attribute> toAttribute(const RawAttr &r, const AttrSpec *spec, const Token &at) {
    AttrKind want = spec ? spec->kind : AttrKind::Int;
    switch (r.kind) {
    case RawAttr::Int:
      if (spec && want == AttrKind::Float)
        return Attribute(parseFloat32Text(r.s));
      return Attribute(r.i);
    case RawAttr::Float:
      return Attribute(parseFloat32Text(r.s));
    case RawAttr::String:
      return Attribute(r.s);
    case RawAttr::Tensor:
      return Attribute(r.t);
    case RawAttr::List: {
      bool anyString = false, anyFloat = false;
      for (const RawAttr &e : r.list) {
        anyString |= e.kind == RawAttr::String;
        anyFloat |= e.kind == RawAttr::Float;
      }
      if (anyString) {
        std::vector<std::string> v;
        for (const RawAttr &e : r.list) {
          if (e.kind != RawAttr::String)
            return errorAt(at, "attribute list mixes strings and numbers");
          v.push_back(e.s);
        }
        return Attribute(std::move(v));
      }
      if (r.list.empty() && spec && want == AttrKind::Strings)
        return Attribute(std::vector<std::string>{});
      if (anyFloat || (spec && want == AttrKind::Floats)) {
        std::vector<float> v;
        for (const RawAttr &e : r.list)
          v.push_back(parseFloat32Text(e.s));
        return Attribute(std::move(v));
      }
      std::vector<int64_t> v;
      for (const RawAttr &e : r.list)
        v.push_back(e.i);
      return Attribute(std::move(v));
    }
    }
    return Attribute();
  }

  llvm::Expected<Value *> lookup(const Token &t) {
    if (Value *v = g_->findValue(t.text))
      return v;
    // Say whether the value is defined further down (a cycle or misordered nodes).
    for (size_t k = pos_; k + 1 < toks_.size(); ++k) {
      if (toks_[k].kind != Tok::ValueName || toks_[k].text != t.text)
        continue;
      size_t j = k + 1; // skip the other names of a multi-result definition
      while (j + 1 < toks_.size() && toks_[j].kind == Tok::Comma &&
             toks_[j + 1].kind == Tok::ValueName)
        j += 2;
      if (toks_[j].kind == Tok::Equal)
        return errorAt(t, "value '%" + t.text + "' is used before its definition at line " +
                              std::to_string(toks_[k].line) +
                              " (a cycle, or nodes not in topological order)");
    }
    return errorAt(t, "use of undefined value '%" + t.text + "'");
  }

  llvm::Error checkNewName(const Token &t) {
    if (g_->findValue(t.text))
      return errorAt(t, "redefinition of value '%" + t.text + "'");
    return llvm::Error::success();
  }

  llvm::Error parseStatement() {
    const Token &first = tok();
    std::vector<const Token *> names;
    for (;;) {
      if (!is(Tok::ValueName))
        return error("expected a value name or 'return', found " + describeTok(tok()));
      names.push_back(&consume());
      if (auto e = checkNewName(*names.back()))
        return e;
      for (size_t k = 0; k + 1 < names.size(); ++k)
        if (names[k]->text == names.back()->text)
          return errorAt(*names.back(), "redefinition of value '%" + names.back()->text + "'");
      if (!is(Tok::Comma))
        break;
      ++pos_;
    }
    if (auto e = expect(Tok::Equal, "after result names"))
      return e;

    if (isIdent("const") || isIdent("param") || isIdent("state")) {
      bool param = tok().text != "const", trainable = tok().text == "param";
      ++pos_;
      if (names.size() != 1)
        return errorAt(first, param ? "a parameter defines exactly one value"
                                    : "a constant defines exactly one value");
      auto type = parseType();
      if (!type)
        return type.takeError();
      auto data = parseDense(*type);
      if (!data)
        return data.takeError();
      if (param)
        g_->addParameter(names[0]->text, std::move(*data), trainable);
      else
        g_->addConstant(names[0]->text, std::move(*data));
      return llvm::Error::success();
    }

    if (!is(Tok::Ident))
      return error("expected an op name, 'const', 'param' or 'state', found " + describeTok(tok()));
    const Token &opTok = consume();
    auto kind = opKindFromName(opTok.text);
    if (!kind)
      return errorAt(opTok, "unknown op '" + opTok.text + "'");
    const OpDef &def = opDef(*kind);

    std::vector<Value *> operands;
    if (auto e = expect(Tok::LParen, "after the op name"))
      return e;
    while (!is(Tok::RParen)) {
      if (!operands.empty())
        if (auto e = expect(Tok::Comma, "between operands"))
          return e;
      if (isIdent("_")) {
        ++pos_;
        operands.push_back(nullptr);
        continue;
      }
      if (!is(Tok::ValueName))
        return error("expected an operand ('%name' or '_'), found " + describeTok(tok()));
      auto v = lookup(consume());
      if (!v)
        return v.takeError();
      operands.push_back(*v);
    }
    ++pos_;

    AttrMap attrs;
    if (is(Tok::LBrace)) {
      ++pos_;
      while (!is(Tok::RBrace)) {
        if (!attrs.empty())
          if (auto e = expect(Tok::Comma, "between attributes"))
            return e;
        if (!is(Tok::Ident))
          return error("expected an attribute name, found " + describeTok(tok()));
        const Token &nameTok = consume();
        if (attrs.count(nameTok.text))
          return errorAt(nameTok, "duplicate attribute '" + nameTok.text + "'");
        if (auto e = expect(Tok::Equal, "after the attribute name"))
          return e;
        const Token &valTok = tok();
        auto raw = parseRawAttr();
        if (!raw)
          return raw.takeError();
        auto a = toAttribute(*raw, def.findAttr(nameTok.text), valTok);
        if (!a)
          return a.takeError();
        attrs.emplace(nameTok.text, std::move(*a));
      }
      ++pos_;
    }

    if (auto e = expect(Tok::Colon, "before the result types"))
      return e;
    std::vector<TensorType> types;
    for (;;) {
      auto t = parseType();
      if (!t)
        return t.takeError();
      types.push_back(std::move(*t));
      if (!is(Tok::Comma))
        break;
      ++pos_;
    }
    if (types.size() != names.size())
      return errorAt(first, std::to_string(names.size()) + " result names but " +
                                std::to_string(types.size()) + " result types");

    std::string nodeName;
    if (isIdent("loc")) {
      ++pos_;
      if (auto e = expect(Tok::LParen, "after 'loc'"))
        return e;
      if (!is(Tok::String))
        return error("expected a string in loc(...)");
      nodeName = consume().text;
      if (auto e = expect(Tok::RParen, "to close loc(...)"))
        return e;
    }

    std::vector<std::string> resultNames;
    for (const Token *t : names)
      resultNames.push_back(t->text);
    Node *n = g_->createNode(*kind, std::move(operands), std::move(types), std::move(attrs),
                             std::move(nodeName), nullptr, std::move(resultNames));
    n->setLoc({first.line, first.col});
    order_.emplace(n, order_.size());
    return llvm::Error::success();
  }

  /// group KIND {nodes = [%a, ...] | anchor = %a, prologue = [...], core = [...],
  ///             epilogue = [...], bias = %b, residual = %r, activation = relu}
  llvm::Error parseFusionGroup() {
    const Token &at = consume();
    if (!is(Tok::Ident))
      return error("expected a fusion group kind after 'group', found " + describeTok(tok()));
    const Token &kindTok = consume();
    auto kind = groupKindFromName(kindTok.text);
    if (!kind)
      return errorAt(kindTok, "unknown fusion group kind '" + kindTok.text + "'");
    FusionGroup fg;
    fg.kind = *kind;
    std::vector<Node *> listed;
    auto node = [&](const Token &t) -> llvm::Expected<Node *> {
      auto v = lookup(t);
      if (!v)
        return v.takeError();
      Node *n = (*v)->definingNode();
      if (!n || n->result() != *v)
        return errorAt(t, "'%" + t.text + "' is not the first result of a node");
      if (n->fusionGroup() || llvm::is_contained(listed, n))
        return errorAt(t, "the node of '%" + t.text + "' is in another fusion group already");
      listed.push_back(n);
      return n;
    };
    if (auto e = expect(Tok::LBrace, "to start the fusion group"))
      return e;
    std::set<std::string> seen;
    while (!is(Tok::RBrace)) {
      if (!seen.empty())
        if (auto e = expect(Tok::Comma, "between fusion group fields"))
          return e;
      if (!is(Tok::Ident))
        return error("expected a fusion group field, found " + describeTok(tok()));
      const Token &field = consume();
      if (!seen.insert(field.text).second)
        return errorAt(field, "fusion group field '" + field.text + "' is given twice");
      if (auto e = expect(Tok::Equal, "after the field name"))
        return e;
      std::vector<Node *> *list = field.text == "nodes"      ? &fg.nodes
                                  : field.text == "prologue" ? &fg.prologue
                                  : field.text == "core"     ? &fg.core
                                  : field.text == "epilogue" ? &fg.epilogue
                                                             : nullptr;
      if (list) {
        if (auto e = expect(Tok::LBracket, "to start the node list"))
          return e;
        while (!is(Tok::RBracket)) {
          if (!list->empty())
            if (auto e = expect(Tok::Comma, "between nodes"))
              return e;
          if (!is(Tok::ValueName))
            return error("expected a node's result like '%x', found " + describeTok(tok()));
          auto n = node(consume());
          if (!n)
            return n.takeError();
          list->push_back(*n);
        }
        ++pos_;
      } else if (field.text == "anchor") {
        if (!is(Tok::ValueName))
          return error("expected the anchor's result like '%x', found " + describeTok(tok()));
        auto n = node(consume());
        if (!n)
          return n.takeError();
        fg.anchor = *n;
      } else if (field.text == "bias" || field.text == "residual") {
        if (!is(Tok::ValueName))
          return error("expected a value like '%x', found " + describeTok(tok()));
        auto v = lookup(consume());
        if (!v)
          return v.takeError();
        (field.text == "bias" ? fg.bias : fg.residual) = *v;
      } else if (field.text == "activation") {
        const Token &t = tok();
        auto op = is(Tok::Ident) ? gemmEpilogueOpFromName(consume().text) : std::nullopt;
        if (!op)
          return errorAt(t,
                         "expected an activation (none, relu, gelu_tanh), found " + describeTok(t));
        fg.activation = *op;
      } else {
        return errorAt(field, "unknown fusion group field '" + field.text + "'");
      }
    }
    ++pos_;
    if (fg.anchor ? !fg.nodes.empty()
                  : !fg.prologue.empty() || !fg.core.empty() || !fg.epilogue.empty())
      return errorAt(at, "a fusion group lists its nodes, or its anchor and its parts");
    if (fg.anchor) {
      fg.nodes = listed;
      std::sort(fg.nodes.begin(), fg.nodes.end(),
                [&](Node *a, Node *b) { return order_.at(a) < order_.at(b); });
    }
    if (fg.nodes.empty())
      return errorAt(at, "a fusion group needs nodes");
    g_->addFusionGroup(std::move(fg));
    return llvm::Error::success();
  }

  llvm::Error parseGraph() {
    if (auto e = expectIdent("graph", "at the start of the file"))
      return e;
    if (!is(Tok::GraphName))
      return error("expected a graph name like '@main', found " + describeTok(tok()));
    g_ = std::make_unique<Graph>(consume().text);
    if (auto e = expect(Tok::LParen, "to start the input list"))
      return e;
    while (!is(Tok::RParen)) {
      if (!g_->inputs().empty())
        if (auto e = expect(Tok::Comma, "between inputs"))
          return e;
      if (!is(Tok::ValueName))
        return error("expected an input name like '%x', found " + describeTok(tok()));
      const Token &nameTok = consume();
      if (auto e = checkNewName(nameTok))
        return e;
      if (auto e = expect(Tok::Colon, "after the input name"))
        return e;
      auto type = parseType();
      if (!type)
        return type.takeError();
      g_->addInput(nameTok.text, std::move(*type));
    }
    ++pos_;
    if (auto e = expect(Tok::Arrow, "after the inputs"))
      return e;
    if (auto e = expect(Tok::LParen, "to start the output list"))
      return e;
    std::vector<std::pair<const Token *, TensorType>> outputs;
    while (!is(Tok::RParen)) {
      if (!outputs.empty())
        if (auto e = expect(Tok::Comma, "between outputs"))
          return e;
      if (!is(Tok::String))
        return error("expected an output name string like \"y\", found " + describeTok(tok()));
      const Token &nameTok = consume();
      if (auto e = expect(Tok::Colon, "after the output name"))
        return e;
      auto type = parseType();
      if (!type)
        return type.takeError();
      outputs.emplace_back(&nameTok, std::move(*type));
    }
    ++pos_;
    if (auto e = expect(Tok::LBrace, "to start the graph body"))
      return e;
    while (!isIdent("return")) {
      if (is(Tok::Eof) || is(Tok::RBrace) || is(Tok::Error))
        return error("expected 'return' before the end of the graph, found " + describeTok(tok()));
      if (isIdent("update")) { // update %variable = %value
        ++pos_;
        if (!is(Tok::ValueName))
          return error("expected the variable after 'update', found " + describeTok(tok()));
        const Token &varTok = consume();
        auto var = lookup(varTok);
        if (!var)
          return var.takeError();
        if (auto e = expect(Tok::Equal, "after the updated variable"))
          return e;
        if (!is(Tok::ValueName))
          return error("expected the new value of '%" + varTok.text + "', found " +
                       describeTok(tok()));
        auto val = lookup(consume());
        if (!val)
          return val.takeError();
        if (!(*var)->isParameter())
          return errorAt(varTok, "'%" + varTok.text +
                                     "' is not a param or state variable and cannot be updated");
        g_->addUpdate(*var, *val);
        continue;
      }
      if (isIdent("group")) {
        if (auto e = parseFusionGroup())
          return e;
        continue;
      }
      if (auto e = parseStatement())
        return e;
    }
    const Token &retTok = consume();
    std::vector<Value *> rets;
    while (is(Tok::ValueName)) {
      auto v = lookup(consume());
      if (!v)
        return v.takeError();
      rets.push_back(*v);
      if (!is(Tok::Comma))
        break;
      ++pos_;
    }
    if (rets.size() != outputs.size())
      return errorAt(retTok, "graph declares " + std::to_string(outputs.size()) +
                                 " outputs but returns " + std::to_string(rets.size()) + " values");
    for (size_t i = 0; i < rets.size(); ++i) {
      if (rets[i]->type() != outputs[i].second)
        return errorAt(*outputs[i].first, "output \"" + outputs[i].first->text + "\" is declared " +
                                              outputs[i].second.str() + " but the returned value " +
                                              "'%" + rets[i]->name() + "' is " +
                                              rets[i]->type().str());
      g_->addOutput(outputs[i].first->text, rets[i]);
    }
    if (auto e = expect(Tok::RBrace, "to close the graph"))
      return e;
    if (!is(Tok::Eof))
      return error("unexpected " + describeTok(tok()) + " after the graph");
    return llvm::Error::success();
  }

  std::string file_;
  std::vector<Token> toks_;
  size_t pos_ = 0;
  std::unique_ptr<Graph> g_;
  std::unordered_map<const Node *, size_t> order_; // node -> its position in the file
};

} // namespace

llvm::Expected<std::unique_ptr<Graph>> parseGraph(std::string_view text, std::string_view fileName,
                                                  unsigned firstLine) {
  return Parser(text, fileName, firstLine).run();
}

} // namespace dlc::ir
