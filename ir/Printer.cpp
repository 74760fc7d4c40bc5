//===- Printer.cpp - Textual IR printer ------------------------------------===//
#include "dlc/ir/TextIR.h"

#include "llvm/Support/Format.h"

#include <cctype>
#include <charconv>
#include <cmath>

namespace dlc::ir {

namespace {

bool isBareNameChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '$' ||
         c == '-';
}

void printString(llvm::raw_ostream &os, std::string_view s) {
  os << '"';
  for (char c : s) {
    unsigned char u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\')
      os << '\\' << c;
    else if (u < 0x20 || u >= 0x7f)
      os << '\\' << llvm::format_hex_no_prefix(u, 2);
    else
      os << c;
  }
  os << '"';
}

void printName(llvm::raw_ostream &os, char sigil, std::string_view name) {
  os << sigil;
  bool bare = !name.empty();
  for (char c : name)
    bare = bare && isBareNameChar(c);
  if (bare)
    os << name;
  else
    printString(os, name);
}

template <class T> std::string formatShortest(T v) {
  if (std::isnan(v))
    return "nan";
  if (std::isinf(v))
    return v < 0 ? "-inf" : "inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  std::string s(buf, r.ptr);
  if (s.find_first_of(".e") == std::string::npos)
    s += ".0";
  return s;
}

} // namespace

std::string formatFloat(float f) {
  return formatShortest(f);
}
std::string formatDouble(double d) {
  return formatShortest(d);
}

void printTensorLiteral(const Tensor &t, llvm::raw_ostream &os, const PrintOptions &opts) {
  os << t.type().str() << " dense<";
  int64_t n = t.numElements();
  if (opts.elideConstantsAbove >= 0 && n > opts.elideConstantsAbove) {
    os << "elided>";
    return;
  }
  constexpr int64_t kMaxListed = 16;
  if (n > kMaxListed) {
    os << "0x";
    const auto *p = static_cast<const uint8_t *>(t.raw());
    for (size_t i = 0; i < t.byteSize(); ++i)
      os << llvm::format_hex_no_prefix(p[i], 2, /*Upper=*/true);
    os << '>';
    return;
  }
  os << '[';
  for (int64_t i = 0; i < n; ++i) {
    if (i)
      os << ", ";
    DType dt = t.dtype();
    if (dt == DType::F64)
      os << formatDouble(loadElement<double>(dt, t.raw(), i));
    else if (isFloat(dt) || isFloat8(dt)) // (float8 values are floats, exactly)
      os << formatFloat(loadElement<float>(dt, t.raw(), i));
    else if (dt == DType::Bool)
      os << (loadElement<bool>(dt, t.raw(), i) ? "true" : "false");
    else if (isUnsignedInt(dt))
      os << loadElement<uint64_t>(dt, t.raw(), i);
    else
      os << loadElement<int64_t>(dt, t.raw(), i);
  }
  os << "]>";
}

static void printAttr(llvm::raw_ostream &os, const Attribute &a, const PrintOptions &opts) {
  auto list = [&](const auto &vec, auto &&printOne) {
    os << '[';
    for (size_t i = 0; i < vec.size(); ++i) {
      if (i)
        os << ", ";
      printOne(vec[i]);
    }
    os << ']';
  };
  switch (a.kind()) {
  case AttrKind::Int:
    os << a.i();
    break;
  case AttrKind::Float:
    os << formatFloat(a.f());
    break;
  case AttrKind::String:
    printString(os, a.s());
    break;
  case AttrKind::Ints:
    list(a.ints(), [&](int64_t v) { os << v; });
    break;
  case AttrKind::Floats:
    list(a.floats(), [&](float v) { os << formatFloat(v); });
    break;
  case AttrKind::Strings:
    list(a.strings(), [&](const std::string &v) { printString(os, v); });
    break;
  case AttrKind::Tensor:
    printTensorLiteral(a.tensor(), os, opts);
    break;
  }
}

void printNode(const Node &n, llvm::raw_ostream &os, const PrintOptions &opts) {
  for (unsigned i = 0; i < n.numResults(); ++i) {
    if (i)
      os << ", ";
    printName(os, '%', n.result(i)->name());
  }
  os << " = " << n.opName() << '(';
  for (unsigned i = 0; i < n.numOperands(); ++i) {
    if (i)
      os << ", ";
    if (Value *v = n.operand(i))
      printName(os, '%', v->name());
    else
      os << '_';
  }
  os << ')';
  if (!n.attrs().empty()) {
    os << " {";
    bool first = true;
    for (const auto &[name, a] : n.attrs()) {
      os << (first ? "" : ", ") << name << " = ";
      printAttr(os, a, opts);
      first = false;
    }
    os << '}';
  }
  os << " : ";
  for (unsigned i = 0; i < n.numResults(); ++i)
    os << (i ? ", " : "") << n.result(i)->type().str();
  if (opts.printLocs && !n.name().empty()) {
    os << " loc(";
    printString(os, n.name());
    os << ')';
  }
}

void printFusionGroup(const FusionGroup &fg, llvm::raw_ostream &os) {
  os << "group " << groupKindName(fg.kind) << " {";
  bool first = true;
  auto field = [&](const char *name) {
    os << (first ? "" : ", ") << name << " = ";
    first = false;
  };
  auto list = [&](const char *name, const std::vector<Node *> &nodes) {
    if (nodes.empty())
      return;
    field(name);
    os << '[';
    for (size_t i = 0; i < nodes.size(); ++i) {
      os << (i ? ", " : "");
      printName(os, '%', nodes[i]->result()->name());
    }
    os << ']';
  };
  auto value = [&](const char *name, const Value *v) {
    if (!v)
      return;
    field(name);
    printName(os, '%', v->name());
  };
  if (!fg.anchor) {
    list("nodes", fg.nodes);
  } else {
    value("anchor", fg.anchor->result());
    list("prologue", fg.prologue);
    list("core", fg.core);
    list("epilogue", fg.epilogue);
  }
  value("bias", fg.bias);
  value("residual", fg.residual);
  if (fg.activation != GemmEpilogueOp::None) {
    field("activation");
    os << gemmEpilogueOpName(fg.activation);
  }
  os << '}';
}

void printGraph(const Graph &g, llvm::raw_ostream &os, const PrintOptions &opts) {
  os << "graph ";
  printName(os, '@', g.name());
  os << '(';
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    if (i)
      os << ", ";
    printName(os, '%', g.inputs()[i]->name());
    os << ": " << g.inputs()[i]->type().str();
  }
  os << ") -> (";
  bool first = true;
  for (const GraphOutput &o : g.outputs()) {
    if (o.isUpdate())
      continue;
    os << (first ? "" : ", ");
    first = false;
    printString(os, o.name);
    os << ": " << (o.value ? o.value->type().str() : "?");
  }
  os << ") {\n";
  for (const auto *list : {&g.parameters(), &g.constants()})
    for (const auto &c : *list) {
      os << "  ";
      printName(os, '%', c->name());
      os << (c->isTrainable() ? " = param " : c->isParameter() ? " = state " : " = const ");
      printTensorLiteral(c->data(), os, opts);
      os << '\n';
    }
  for (const Node &n : g.nodes()) {
    os << "  ";
    printNode(n, os, opts);
    os << '\n';
    if (const FusionGroup *fg = n.fusionGroup(); fg && fg->root() == &n) {
      os << "  ";
      printFusionGroup(*fg, os);
      os << '\n';
    }
  }
  for (const GraphOutput &o : g.outputs())
    if (o.isUpdate() && o.value) {
      os << "  update ";
      printName(os, '%', o.variable->name());
      os << " = ";
      printName(os, '%', o.value->name());
      os << '\n';
    }
  os << "  return";
  first = true;
  for (const GraphOutput &o : g.outputs()) {
    if (o.isUpdate())
      continue;
    os << (first ? " " : ", ");
    first = false;
    if (o.value)
      printName(os, '%', o.value->name());
  }
  os << "\n}\n";
}

std::string printGraph(const Graph &g, const PrintOptions &opts) {
  std::string s;
  llvm::raw_string_ostream os(s);
  printGraph(g, os, opts);
  return os.str();
}

} // namespace dlc::ir
