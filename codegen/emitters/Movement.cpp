//===- Movement.cpp - Shape and data-movement kernels ----------------------===//
//
// Metadata-only ops (Identity, Reshape, Flatten, Squeeze, Unsqueeze) alias their
// operand's buffer. Transpose, Slice, Expand, Tile, Gather and Concat are one-node
// fusion groups (the index arithmetic of Fused.cpp). Pad is the pad template, a
// Split output a strided copy, ConstantOfShape and Range the fill template; Shape is
// a constant (static shapes).
//===----------------------------------------------------------------------===//
#include "../Fused.h"
#include "EmitterUtils.h"

#include <cmath>
#include <cstddef>

namespace dlc::codegen {

using namespace ir;

namespace {

llvm::Error lowerPad(Lowering &l, const Node &n) {
  const Value *x = n.operand(0), *y = n.result();
  const auto &p = n.attrInts("pads");
  const std::string &mode = n.attrString("mode");
  int64_t rank = x->rank(), total = y->type().numElements();
  l.allocate(y);
  if (total == 0)
    return llvm::Error::success();
  if (rank > kMaxRank)
    return errorf("Pad of rank {0} (code generation handles up to {1} dims)", rank, kMaxRank);
  const Value *cv = n.operand(1);
  double fill = 0;
  int64_t fillInt = 0;
  if (cv && isScalarConstant(cv)) {
    fill = cv->data().getDouble(0);
    fillInt = isInt(cv->dtype()) || cv->dtype() == DType::Bool ? cv->data().getInt(0) : 0;
  }
  // Where the last dim is not padded (channels-last spatial pads, the zero-stuffing of
  // strided gradients), a thread moves a run of whole channels, 16 bytes where the
  // extents and alignments allow: the index math runs once per run. A constant fill
  // must then be zero bytes.
  const int64_t es = static_cast<int64_t>(dtypeSize(x->dtype()));
  int64_t perRun = 1;
  if (rank > 0 && p[rank - 1] == 0 && p[2 * rank - 1] == 0 &&
      (mode != "constant" ||
       (!(cv && !isScalarConstant(cv)) && fill == 0 && !std::signbit(fill) && fillInt == 0)))
    perRun = vectorRun(l, {x, y}, x->shape().back(), 16 / es);
  // (moved as 4-byte words: a run shorter than one stays element-wise)
  const int64_t runBytes = perRun > 1 && perRun * es >= 4 ? perRun * es : 0;
  if (!runBytes)
    perRun = 1;
  Shape xs = x->shape(), ys = y->shape();
  if (perRun > 1) {
    xs.back() /= perRun;
    ys.back() /= perRun;
  }
  PadShape s{};
  s.total = total / perRun;
  s.rank = rank;
  s.fill = fill;
  s.fillInt = fillInt;
  Shape st = stridesOf(xs);
  for (int64_t d = 0; d < rank; ++d) {
    s.inDim[d] = xs[d];
    s.inStride[d] = st[d];
    s.pad[d] = p[d];
    s.outDim[d] = Divmod::make(ys[d]);
  }
  const char *m = mode == "constant" ? "dlc::kPadConstant"
                  : mode == "edge"   ? "dlc::kPadEdge"
                  : mode == "wrap"   ? "dlc::kPadWrap"
                                     : "dlc::kPadReflect";
  const std::string dt = runBytes ? "dlc::VecOf<unsigned, " + std::to_string(runBytes / 4) + ">"
                                  : std::string(cudaType(x->dtype()));
  Instantiation inst{"dlc::pad",
                     {m, l.indexType(std::max(total, x->type().numElements())), dt},
                     "dlc::PadShape",
                     {}};
  uint32_t k = l.instantiate(inst);
  LaunchArgs a;
  a.shape(s);
  if (x->type().numElements())
    a.pointer(offsetof(PadShape, x), l.bufferOf(x), x->type().byteSize(), false);
  if (cv && !isScalarConstant(cv))
    a.pointer(offsetof(PadShape, fillPtr), l.bufferOf(cv), cv->type().byteSize(), false);
  a.pointer(offsetof(PadShape, y), l.bufferOf(y), y->type().byteSize(), true);
  l.launch(n, k, a, gridFor(s.total, 256), 256);
  return llvm::Error::success();
}

/// Split: each output is a strided copy of its window of the input.
llvm::Error lowerSplit(Lowering &l, const Node &n) {
  const Value *x = n.operand(0);
  int64_t rank = x->rank(), axis = n.attrInt("axis");
  if (axis < 0)
    axis += rank;
  Shape st = stridesOf(x->shape());
  int64_t offset = 0;
  for (unsigned r = 0; r < n.numResults(); ++r) {
    const Value *v = n.result(r);
    l.allocate(v);
    int64_t len = v->shape()[axis], total = v->type().numElements();
    if (total)
      if (auto e = emitStridedCopy(l, n, x, offset * st[axis], l.bufferOf(v), v->type().byteSize(),
                                   v->shape(), st))
        return e;
    offset += len;
  }
  return llvm::Error::success();
}

/// A kernel that writes a value (ConstantOfShape) or a ramp (Range) to every element.
void emitFill(Lowering &l, const Node &n, bool isRange, double f0, double f1, int64_t n0,
              int64_t n1) {
  const Value *out = n.result();
  int64_t total = out->type().numElements();
  l.allocate(out);
  if (total == 0)
    return;
  MiscShape s{};
  s.total = total;
  s.f0 = f0;
  s.f1 = f1;
  s.n0 = n0;
  s.n1 = n1;
  Instantiation inst{"dlc::fill",
                     {isRange ? "true" : "false", l.indexType(total), cudaType(out->dtype())},
                     "dlc::MiscShape",
                     {}};
  uint32_t k = l.instantiate(inst);
  LaunchArgs a;
  a.shape(s);
  a.pointer(offsetof(MiscShape, y), l.bufferOf(out), out->type().byteSize(), true);
  l.launch(n, k, a, gridFor(total, 256), 256);
}

} // namespace

llvm::Error emitStridedCopy(Lowering &l, const Node &n, const Value *x, int64_t base, BufferRef dst,
                            uint64_t dstBytes, const Shape &dims,
                            const std::vector<int64_t> &strides) {
  int64_t total = product(dims);
  auto view = stridedView(dims, strides);
  if (!view)
    return view.takeError();
  CopyShape s{};
  s.total = total;
  s.base = base;
  s.map = *view;
  Instantiation inst{"dlc::copy_strided",
                     {l.indexType(std::max(total, x->type().numElements())), cudaType(x->dtype())},
                     "dlc::CopyShape",
                     {}};
  uint32_t k = l.instantiate(inst);
  LaunchArgs a;
  a.shape(s);
  a.pointer(offsetof(CopyShape, x), l.bufferOf(x), x->type().byteSize(), false);
  a.pointer(offsetof(CopyShape, y), dst, dstBytes, true);
  l.launch(n, k, a, gridFor(total, 256), 256);
  return llvm::Error::success();
}

/// Static shapes: the result is known at compile time.
llvm::Error lowerShape(Lowering &l, const Node &n) {
  const Shape &s = n.operand(0)->shape();
  int64_t rank = static_cast<int64_t>(s.size());
  int64_t start = n.attrInt("start");
  start = std::clamp<int64_t>(start < 0 ? start + rank : start, 0, rank);
  std::vector<int64_t> dims(s.begin() + start, s.begin() + start + n.result()->shape()[0]);
  BufferRef r = l.constantBuffer(Tensor::fromVector(n.result()->type(), dims), n.result()->name());
  l.bind(n.result(), r);
  return llvm::Error::success();
}

llvm::Error lowerConstantOfShape(Lowering &l, const Node &n) {
  const Tensor &v = n.attrTensor("value");
  bool integral = isInt(v.dtype()) || v.dtype() == DType::Bool;
  emitFill(l, n, false, integral ? 0.0 : v.getDouble(0), 0, integral ? v.getInt(0) : 0, 0);
  return llvm::Error::success();
}

llvm::Error lowerRange(Lowering &l, const Node &n) {
  const Value *s = n.operand(0), *d = n.operand(2);
  if (!s->isConstant() || !d->isConstant())
    return makeError("Range needs constant start and delta");
  if (isFloat(n.result()->dtype()))
    emitFill(l, n, true, s->data().getDouble(0), d->data().getDouble(0), 0, 0);
  else
    emitFill(l, n, true, 0, 0, s->data().getInt(0), d->data().getInt(0));
  return llvm::Error::success();
}

// Views (Reshape, ...) and index-mapping ops (Transpose, Slice, ...) are inlinable:
// alone, each is a one-node fusion group (Fused.cpp), the same index arithmetic that
// inlines it into fused kernels.
void registerMovementLowerings(LoweringRegistry &r) {
  r.op(OpKind::Pad, lowerPad);
  r.op(OpKind::Split, lowerSplit);
  r.op(OpKind::Shape, lowerShape);
  r.op(OpKind::ConstantOfShape, lowerConstantOfShape);
  r.op(OpKind::Range, lowerRange);
}

} // namespace dlc::codegen
