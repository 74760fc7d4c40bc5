//===- Movement.cpp - Shape and data-movement kernels ----------------------===//
//
// Metadata-only ops (Identity, Reshape, Flatten, Squeeze, Unsqueeze) alias their
// operand's buffer. Transpose, Slice, Expand, Tile, Gather and Concat are one-node
// fusion groups (the index arithmetic of Fused.cpp); Pad, Split and the shape ops
// are here: each output element is computed from the output coordinates with
// compile-time strides.
//===----------------------------------------------------------------------===//
#include "EmitterUtils.h"

#include "../Fused.h"

namespace dlc::codegen {

using namespace ir;

namespace {

llvm::Error lowerPad(Lowering &l, const Node &n) {
  const Value *x = n.operand(0);
  const auto &p = n.attrInts("pads");
  const std::string &mode = n.attrString("mode");
  int64_t rank = x->rank(), total = n.result()->type().numElements();
  l.allocate(n.result());
  if (total == 0)
    return llvm::Error::success();
  KernelBuilder kb(l, n, "");
  std::string ip = x->type().numElements() ? kb.pointerTo(x) : "", op = kb.outputPointer(n.result());
  std::string fill = "0";
  if (const Value *cv = n.operand(1))
    fill = isScalarConstant(cv) ? scalarLiteral(cv) : kb.pointerTo(cv) + "[0]";
  CodeStream &b = kb.body();
  Shape st = stridesOf(x->shape());
  {
    CodeStream::Block loop(b, gridStrideLoop("i", ll(total)));
    IndexMapper(n.result()->shape()).emitCoords(b, "i", "c");
    b.line("bool outside = false;");
    b.line("long long src = 0;");
    for (int64_t d = 0; d < rank; ++d) {
      int64_t dim = x->shape()[d];
      std::string v = "v" + std::to_string(d);
      b.line("long long " + v + " = c" + std::to_string(d) + " - " + ll(p[d]) + ";");
      if (mode == "constant") {
        b.line("outside |= " + v + " < 0 || " + v + " >= " + ll(dim) + ";");
      } else if (mode == "edge") {
        b.line(v + " = " + v + " < 0 ? 0 : (" + v + " >= " + ll(dim) + " ? " + ll(dim - 1) + " : " + v + ");");
      } else if (mode == "wrap") {
        b.line(v + " = ((" + v + " % " + ll(dim) + ") + " + ll(dim) + ") % " + ll(dim) + ";");
      } else { // reflect
        int64_t period = dim == 1 ? 1 : 2 * (dim - 1);
        b.line(v + " = ((" + v + " % " + ll(period) + ") + " + ll(period) + ") % " + ll(period) + ";");
        b.line("if (" + v + " >= " + ll(dim) + ") " + v + " = " + ll(period) + " - " + v + ";");
      }
      b.line("src += " + v + " * " + ll(st[d]) + ";");
    }
    if (ip.empty())
      b.line(op + "[i] = dlc::cvt<" + std::string(cudaType(x->dtype())) + ">(" + fill + ");");
    else
      b.line(op + "[i] = outside ? dlc::cvt<" + std::string(cudaType(x->dtype())) + ">(" + fill +
             ") : " + ip + "[src];");
  }
  uint64_t grid;
  uint32_t block;
  elementwiseLaunchShape(total, grid, block);
  kb.launch(grid, block);
  return llvm::Error::success();
}

/// Concat: each output element reads from the input whose range holds its axis coordinate.
llvm::Error lowerSplit(Lowering &l, const Node &n) {
  const Value *x = n.operand(0);
  int64_t rank = x->rank(), axis = n.attrInt("axis");
  if (axis < 0)
    axis += rank;
  int64_t total = x->type().numElements();
  for (unsigned r = 0; r < n.numResults(); ++r)
    l.allocate(n.result(r));
  if (total == 0)
    return llvm::Error::success();
  KernelBuilder kb(l, n, "");
  std::string ip = kb.pointerTo(x);
  std::vector<std::string> outs;
  for (unsigned r = 0; r < n.numResults(); ++r)
    outs.push_back(n.result(r)->type().numElements() ? kb.outputPointer(n.result(r)) : "");
  CodeStream &b = kb.body();
  {
    CodeStream::Block loop(b, gridStrideLoop("i", ll(total)));
    IndexMapper(x->shape()).emitCoords(b, "i", "c");
    int64_t offset = 0;
    bool first = true;
    for (unsigned r = 0; r < n.numResults(); ++r) {
      const Value *v = n.result(r);
      int64_t len = v->shape()[axis];
      if (len == 0)
        continue;
      Shape st = stridesOf(v->shape());
      std::string idx;
      for (int64_t d = 0; d < rank; ++d)
        idx += (d ? " + " : "") + std::string(d == axis ? "(c" + std::to_string(d) + " - " + ll(offset) + ")"
                                                        : "c" + std::to_string(d)) +
               " * " + ll(st[d]);
      b.line(std::string(first ? "" : "else ") + "if (c" + std::to_string(axis) + " < " +
             ll(offset + len) + ") " + outs[r] + "[" + idx + "] = " + ip + "[i];");
      first = false;
      offset += len;
    }
  }
  uint64_t grid;
  uint32_t block;
  elementwiseLaunchShape(total, grid, block);
  kb.launch(grid, block);
  return llvm::Error::success();
}

/// A kernel that writes value(i) for every output element.
void emitGenerator(Lowering &l, const Node &n, const std::string &valueExpr) {
  const Value *out = n.result();
  int64_t total = out->type().numElements();
  l.allocate(out);
  if (total == 0)
    return;
  KernelBuilder kb(l, n, "");
  std::string op = kb.outputPointer(out);
  {
    CodeStream::Block loop(kb.body(), gridStrideLoop("i", ll(total)));
    kb.body().line("dlc::st(" + op + ", i, " + valueExpr + ");");
  }
  uint64_t grid;
  uint32_t block;
  elementwiseLaunchShape(total, grid, block);
  kb.launch(grid, block);
}

} // namespace

llvm::Error lowerMovement(Lowering &l, const Node &n) {
  switch (n.kind()) {
  case OpKind::Identity:
  case OpKind::Reshape:
  case OpKind::Flatten:
  case OpKind::Squeeze:
  case OpKind::Unsqueeze:
    l.alias(n.result(), n.operand(0));
    return llvm::Error::success();
  // Index-mapping ops are one-node fusion groups: the same index arithmetic that
  // inlines them into fused kernels (Fused.cpp).
  case OpKind::Transpose:
  case OpKind::Slice:
  case OpKind::Expand:
  case OpKind::Tile:
  case OpKind::Gather:
  case OpKind::Concat: return lowerInlineNode(l, n);
  case OpKind::Pad: return lowerPad(l, n);
  case OpKind::Split: return lowerSplit(l, n);
  case OpKind::Shape: {
    // Static shapes: the result is known at compile time.
    const Shape &s = n.operand(0)->shape();
    int64_t rank = static_cast<int64_t>(s.size());
    int64_t start = n.attrInt("start");
    start = std::clamp<int64_t>(start < 0 ? start + rank : start, 0, rank);
    std::vector<int64_t> dims(s.begin() + start, s.begin() + start + n.result()->shape()[0]);
    BufferRef r = l.constantBuffer(Tensor::fromVector(n.result()->type(), dims), n.result()->name());
    l.bind(n.result(), r);
    return llvm::Error::success();
  }
  case OpKind::ConstantOfShape: {
    const Tensor &v = n.attrTensor("value");
    DType dt = v.dtype();
    std::string lit = isUnsignedInt(dt) ? std::to_string(v.getInt(0)) + "ULL"
                      : isInt(dt)       ? literalInt(v.getInt(0))
                                        : literal(dt == DType::F64 ? DType::F64 : DType::F32, v.getDouble(0));
    emitGenerator(l, n, lit);
    return llvm::Error::success();
  }
  case OpKind::Range: {
    const Value *s = n.operand(0), *d = n.operand(2);
    if (!s->isConstant() || !d->isConstant())
      return makeError("Range needs constant start and delta");
    DType dt = n.result()->dtype();
    if (isFloat(dt))
      emitGenerator(l, n, literal(DType::F64, s->data().getDouble(0)) + " + (double)i * " +
                              literal(DType::F64, d->data().getDouble(0)));
    else
      emitGenerator(l, n, literalInt(s->data().getInt(0)) + " + i * " + literalInt(d->data().getInt(0)));
    return llvm::Error::success();
  }
  default: return errorf("no CUDA lowering for {0}", n.opName());
  }
}

} // namespace dlc::codegen
