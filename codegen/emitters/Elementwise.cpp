//===- Elementwise.cpp - Expression templates of element-wise ops -----------===//
//
// The kernels of element-wise ops come from Fused.cpp (a node alone is a one-node
// group): operands load in their compute type (float for f32/f16/bf16), broadcast
// operands get an index from the output coordinates, scalar constants become
// literals, and f32 same-shape kernels move float4s. This file expands an op's
// expression template.
//
// Expression templates (OpDef::cudaExpr): $0..$9 are operand values, $T the compute
// type of operand 0, ${attr} an attribute as a literal (strings as dlc::attr_X),
// and "$k?" an optional operand (dlc::None() when absent).
//===----------------------------------------------------------------------===//
#include "EmitterUtils.h"

namespace dlc::codegen {

using namespace ir;

namespace {

std::string attrLiteral(const Node &n, const std::string &name) {
  const Attribute *a = n.attr(name);
  if (!a)
    return "0";
  switch (a->kind()) {
  case AttrKind::Int:
    return literalInt(a->i());
  case AttrKind::Float:
    return literal(DType::F32, a->f());
  case AttrKind::String:
    return "dlc::attr_" + a->s();
  default:
    return "0";
  }
}

/// Expands an expression template for node n with operand value names `vals`
/// (empty string = absent operand).
llvm::Expected<std::string> expand(const std::string &tmpl, const Node &n,
                                   const std::vector<std::string> &vals, const std::string &index) {
  std::string out;
  for (size_t i = 0; i < tmpl.size(); ++i) {
    char c = tmpl[i];
    if (c != '$') {
      out += c;
      continue;
    }
    char d = i + 1 < tmpl.size() ? tmpl[i + 1] : 0;
    if (d == '{') {
      size_t close = tmpl.find('}', i);
      out += attrLiteral(n, tmpl.substr(i + 2, close - i - 2));
      i = close;
      continue;
    }
    if (d == 'i') { // the element's index in the node's result
      out += "(" + index + ")";
      ++i;
      continue;
    }
    if (d >= '0' && d <= '9') {
      size_t k = static_cast<size_t>(d - '0');
      bool optional = i + 2 < tmpl.size() && tmpl[i + 2] == '?';
      std::string v = k < vals.size() ? vals[k] : "";
      if (v.empty() && !optional)
        return errorf("{0}: its expression needs operand {1}", n.describe(), k);
      out += v.empty() ? "dlc::None()" : v;
      i += optional ? 2 : 1;
      continue;
    }
    out += c;
  }
  return out;
}

} // namespace

llvm::Expected<std::string> expandExpr(const Node &n, const std::vector<std::string> &vals,
                                       const std::string &index) {
  const char *tmpl = n.def().cudaExpr;
  std::string t = computeType(n.operand(0)->dtype());
  std::string s = tmpl;
  // $T: the compute type name, spliced where a cast or declaration needs it.
  std::string withT;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '$' && i + 1 < s.size() && s[i + 1] == 'T') {
      withT += t;
      ++i;
    } else {
      withT += s[i];
    }
  }
  // Variadic ops (Min, Max) fold their binary template left to right.
  if (n.numOperands() > 2 && n.def().maxOperands == kVariadic) {
    std::string acc = vals[0];
    for (size_t k = 1; k < vals.size(); ++k) {
      auto e = expand(withT, n, {acc, vals[k]}, index);
      if (!e)
        return e.takeError();
      acc = std::move(*e);
    }
    return acc;
  }
  if (n.numOperands() == 1 && n.def().maxOperands == kVariadic)
    return vals[0];
  return expand(withT, n, vals, index);
}

} // namespace dlc::codegen
