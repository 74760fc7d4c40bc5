//===- Elementwise.cpp - Element-wise and broadcasting kernels -------------===//
//
// One grid-stride kernel per node: each operand is loaded in its compute type
// (float for f32/f16/bf16), the op table's expression template is applied, and the
// result is converted to the output type. Broadcast operands get an index computed
// from the output coordinates; scalar constants become literals. When every
// operand is an f32 tensor of the output's shape and the size is a multiple of 4,
// the loop moves float4s.
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
  case AttrKind::Int: return literalInt(a->i());
  case AttrKind::Float: return literal(DType::F32, a->f());
  case AttrKind::String: return "dlc::attr_" + a->s();
  default: return "0";
  }
}

/// Expands an expression template for node n with operand value names `vals`
/// (empty string = absent operand).
std::string expand(const std::string &tmpl, const Node &n, const std::vector<std::string> &vals) {
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
    if (d >= '0' && d <= '9') {
      size_t k = static_cast<size_t>(d - '0');
      bool optional = i + 2 < tmpl.size() && tmpl[i + 2] == '?';
      std::string v = k < vals.size() ? vals[k] : "";
      out += v.empty() ? (optional ? "dlc::None()" : "/*missing operand*/") : v;
      i += optional ? 2 : 1;
      continue;
    }
    out += c;
  }
  return out;
}

} // namespace

std::string expandExpr(const Node &n, const std::vector<std::string> &vals) {
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
    for (size_t k = 1; k < vals.size(); ++k)
      acc = expand(withT, n, {acc, vals[k]});
    return acc;
  }
  if (n.numOperands() == 1 && n.def().maxOperands == kVariadic)
    return vals[0];
  return expand(withT, n, vals);
}

llvm::Error lowerElementwise(Lowering &l, const Node &n) {
  if (!n.def().cudaExpr)
    return errorf("no CUDA expression for {0}", n.opName());
  const Value *out = n.result();
  int64_t total = out->type().numElements();
  l.allocate(out);
  if (total == 0)
    return llvm::Error::success();
  KernelBuilder kb(l, n, "");
  std::string outPtr = kb.outputPointer(out);

  // Vectorized form: all tensor operands f32 with the output's shape, f32 output.
  bool vec4 = out->dtype() == DType::F32 && total % 4 == 0;
  for (Value *v : n.operands())
    if (v && !isScalarConstant(v) && (v->dtype() != DType::F32 || v->shape() != out->shape()))
      vec4 = false;

  CodeStream &b = kb.body();
  std::vector<std::string> vals;
  std::vector<std::string> ptrs(n.numOperands());
  for (unsigned k = 0; k < n.numOperands(); ++k) {
    const Value *v = n.operand(k);
    if (v && !isScalarConstant(v))
      ptrs[k] = kb.pointerTo(v);
  }
  if (vec4) {
    b.line("const long long n4 = " + literalInt(total / 4) + ";");
    CodeStream::Block loop(b, "for (long long j = blockIdx.x * (long long)blockDim.x + threadIdx.x; "
                              "j < n4; j += (long long)gridDim.x * blockDim.x)");
    for (unsigned k = 0; k < n.numOperands(); ++k)
      if (!ptrs[k].empty())
        b.line("const float4 q" + std::to_string(k) + " = reinterpret_cast<const float4 *>(" +
               ptrs[k] + ")[j];");
    b.line("float4 r;");
    for (const char *lane : {"x", "y", "z", "w"}) {
      vals.clear();
      for (unsigned k = 0; k < n.numOperands(); ++k) {
        const Value *v = n.operand(k);
        if (!v)
          vals.push_back("");
        else if (isScalarConstant(v))
          vals.push_back(scalarLiteral(v));
        else
          vals.push_back("q" + std::to_string(k) + "." + lane);
      }
      b.line(std::string("r.") + lane + " = dlc::cvt<float>(" + expandExpr(n, vals) + ");");
    }
    b.line("reinterpret_cast<float4 *>(" + outPtr + ")[j] = r;");
  } else {
    IndexMapper im(out->shape());
    b.line("const long long n = " + literalInt(total) + ";");
    CodeStream::Block loop(b, "for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; "
                              "i < n; i += (long long)gridDim.x * blockDim.x)");
    bool needCoords = false;
    for (unsigned k = 0; k < n.numOperands(); ++k)
      if (!ptrs[k].empty() && n.operand(k)->shape() != out->shape())
        needCoords = true;
    if (needCoords)
      im.emitCoords(b, "i", "c");
    for (unsigned k = 0; k < n.numOperands(); ++k) {
      const Value *v = n.operand(k);
      if (!v) {
        vals.push_back("");
        continue;
      }
      if (isScalarConstant(v)) {
        vals.push_back(scalarLiteral(v));
        continue;
      }
      std::string idx = v->shape() == out->shape() ? "i" : im.broadcastIndex(v->shape(), "c");
      std::string name = "v" + std::to_string(k);
      b.line("const " + std::string(computeType(v->dtype())) + " " + name + " = dlc::ld<" +
             computeType(v->dtype()) + ">(" + ptrs[k] + ", " + idx + ");");
      vals.push_back(name);
    }
    b.line("dlc::st(" + outPtr + ", i, " + expandExpr(n, vals) + ");");
  }
  kb.setFlops(static_cast<double>(total) * std::max<unsigned>(1, n.numOperands() - 1));
  uint64_t grid;
  uint32_t block;
  elementwiseLaunchShape(vec4 ? total / 4 : total, grid, block);
  kb.launch(grid, block);
  return llvm::Error::success();
}

} // namespace dlc::codegen
