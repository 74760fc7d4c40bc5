//===- Index.cpp - Gather/scatter, one-hot, triangular masks, unpooling ----===//
//
// Gathers are one thread per output element. Scatters copy the data first; a
// scatter without reduction writes in parallel (duplicates are undefined in ONNX),
// one with a reduction runs in a single thread in index order, which matches the
// reference exactly. Out-of-range indices trap (the launch fails) instead of
// reading or writing outside a buffer.
//===----------------------------------------------------------------------===//
#include "EmitterUtils.h"

namespace dlc::codegen {

using namespace ir;

namespace {

void launchOver(KernelBuilder &kb, int64_t total) {
  uint64_t grid;
  uint32_t block;
  elementwiseLaunchShape(total, grid, block);
  kb.launch(grid, block);
}

/// Declares `var` = index value read from `ptr[at]`, wrapped by dim and checked.
void readIndex(CodeStream &b, const std::string &var, const std::string &ptr, const std::string &at,
               int64_t dim) {
  b.line("long long " + var + " = (long long)" + ptr + "[" + at + "];");
  b.line("if (" + var + " < 0) " + var + " += " + ll(dim) + ";");
  b.line("if (" + var + " < 0 || " + var + " >= " + ll(dim) + ") { __trap(); " + var + " = 0; }");
}

llvm::Error lowerTrilu(Lowering &l, const Node &n) {
  const Value *x = n.operand(0), *y = n.result();
  int64_t total = x->type().numElements(), cols = x->shape().back(), rows = x->shape()[x->rank() - 2];
  l.allocate(y);
  if (!total)
    return llvm::Error::success();
  KernelBuilder kb(l, n, "");
  std::string xp = kb.pointerTo(x), yp = kb.outputPointer(y);
  bool upper = n.attrInt("upper") != 0;
  std::string k = ll(n.attrInt("k"));
  {
    CodeStream::Block loop(kb.body(), gridStrideLoop("i", ll(total)));
    kb.body().line("const long long c = i % " + ll(cols) + ", r = (i / " + ll(cols) + ") % " + ll(rows) + ";");
    kb.body().line(yp + "[i] = (" + (upper ? "c - r >= " : "c - r <= ") + k + ") ? " + xp + "[i] : dlc::cvt<" +
                   cudaType(x->dtype()) + ">(0);");
  }
  launchOver(kb, total);
  return llvm::Error::success();
}

llvm::Error lowerGatherElements(Lowering &l, const Node &n) {
  const Value *x = n.operand(0), *idx = n.operand(1), *y = n.result();
  int64_t axis = n.attrInt("axis"), rank = x->rank();
  if (axis < 0)
    axis += rank;
  int64_t total = y->type().numElements();
  l.allocate(y);
  if (!total)
    return llvm::Error::success();
  KernelBuilder kb(l, n, "");
  std::string xp = kb.pointerTo(x), ip = kb.pointerTo(idx), yp = kb.outputPointer(y);
  Shape xs = stridesOf(x->shape());
  CodeStream &b = kb.body();
  {
    CodeStream::Block loop(b, gridStrideLoop("i", ll(total)));
    IndexMapper(y->shape()).emitCoords(b, "i", "c");
    readIndex(b, "g", ip, "i", x->shape()[axis]);
    std::string src;
    for (int64_t d = 0; d < rank; ++d)
      src += (d ? " + " : "") + std::string(d == axis ? "g" : "c" + std::to_string(d)) + " * " + ll(xs[d]);
    b.line(yp + "[i] = " + xp + "[" + src + "];");
  }
  launchOver(kb, total);
  return llvm::Error::success();
}

llvm::Error lowerScatterElements(Lowering &l, const Node &n) {
  const Value *x = n.operand(0), *idx = n.operand(1), *upd = n.operand(2), *y = n.result();
  int64_t axis = n.attrInt("axis"), rank = x->rank();
  if (axis < 0)
    axis += rank;
  BufferRef yb = l.allocate(y);
  if (x->type().numElements())
    l.addCopy(l.bufferOf(x), yb, x->type().byteSize(), n);
  int64_t total = idx->type().numElements();
  if (!total)
    return llvm::Error::success();
  const std::string &red = n.attrString("reduction");
  KernelBuilder kb(l, n, "");
  std::string ip = kb.pointerTo(idx), up = kb.pointerTo(upd), yp = kb.outputPointer(y);
  Shape ys = stridesOf(y->shape());
  CodeStream &b = kb.body();
  std::string ct = computeType(y->dtype());
  {
    CodeStream::Block loop(b, red == "none" ? gridStrideLoop("i", ll(total))
                                            : "for (long long i = 0; i < " + ll(total) + "; ++i)");
    IndexMapper(idx->shape()).emitCoords(b, "i", "c");
    readIndex(b, "g", ip, "i", x->shape()[axis]);
    std::string dst;
    for (int64_t d = 0; d < rank; ++d)
      dst += (d ? " + " : "") + std::string(d == axis ? "g" : "c" + std::to_string(d)) + " * " + ll(ys[d]);
    b.line("const long long at = " + dst + ";");
    if (red == "none")
      b.line(yp + "[at] = " + up + "[i];");
    else {
      std::string cur = "dlc::ld<" + ct + ">(" + yp + ", at)", u = "dlc::ld<" + ct + ">(" + up + ", i)";
      std::string e = red == "add" ? cur + " + " + u : red == "mul" ? cur + " * " + u
                    : red == "max" ? "dlc::stdmax(" + cur + ", " + u + ")"
                                   : "dlc::stdmin(" + cur + ", " + u + ")";
      b.line("dlc::st(" + yp + ", at, " + e + ");");
    }
  }
  if (red == "none")
    launchOver(kb, total);
  else
    kb.launch(1, 1);
  return llvm::Error::success();
}

llvm::Error lowerGatherND(Lowering &l, const Node &n) {
  const Value *x = n.operand(0), *idx = n.operand(1), *y = n.result();
  const Shape &ds = x->shape(), &is = idx->shape();
  int64_t bdims = n.attrInt("batch_dims"), q = is.back();
  Shape st = stridesOf(ds);
  int64_t slice = 1, batch = 1;
  for (size_t i = bdims + q; i < ds.size(); ++i)
    slice *= ds[i];
  for (int64_t i = 0; i < bdims; ++i)
    batch *= ds[i];
  int64_t tuples = idx->type().numElements() / q, perBatch = tuples / std::max<int64_t>(batch, 1);
  int64_t batchStride = bdims > 0 ? st[bdims - 1] : 0, total = y->type().numElements();
  l.allocate(y);
  if (!total)
    return llvm::Error::success();
  KernelBuilder kb(l, n, "");
  std::string xp = kb.pointerTo(x), ip = kb.pointerTo(idx), yp = kb.outputPointer(y);
  CodeStream &b = kb.body();
  {
    CodeStream::Block loop(b, gridStrideLoop("i", ll(total)));
    b.line("const long long t = i / " + ll(slice) + ", j = i % " + ll(slice) + ";");
    b.line("long long base = (t / " + ll(std::max<int64_t>(perBatch, 1)) + ") * " + ll(batchStride) + ";");
    for (int64_t k = 0; k < q; ++k) {
      readIndex(b, "g" + std::to_string(k), ip, "t * " + ll(q) + " + " + ll(k), ds[bdims + k]);
      b.line("base += g" + std::to_string(k) + " * " + ll(st[bdims + k]) + ";");
    }
    b.line(yp + "[i] = " + xp + "[base + j];");
  }
  launchOver(kb, total);
  return llvm::Error::success();
}

llvm::Error lowerScatterND(Lowering &l, const Node &n) {
  const Value *x = n.operand(0), *idx = n.operand(1), *upd = n.operand(2), *y = n.result();
  const Shape &ds = x->shape(), &is = idx->shape();
  int64_t q = is.back();
  Shape st = stridesOf(ds);
  int64_t slice = 1;
  for (size_t i = q; i < ds.size(); ++i)
    slice *= ds[i];
  BufferRef yb = l.allocate(y);
  if (x->type().numElements())
    l.addCopy(l.bufferOf(x), yb, x->type().byteSize(), n);
  int64_t total = upd->type().numElements();
  if (!total)
    return llvm::Error::success();
  const std::string &red = n.attrString("reduction");
  KernelBuilder kb(l, n, "");
  std::string ip = kb.pointerTo(idx), up = kb.pointerTo(upd), yp = kb.outputPointer(y);
  std::string ct = computeType(y->dtype());
  CodeStream &b = kb.body();
  {
    CodeStream::Block loop(b, red == "none" ? gridStrideLoop("i", ll(total))
                                            : "for (long long i = 0; i < " + ll(total) + "; ++i)");
    b.line("const long long t = i / " + ll(slice) + ", j = i % " + ll(slice) + ";");
    b.line("long long at = j;");
    for (int64_t k = 0; k < q; ++k) {
      readIndex(b, "g" + std::to_string(k), ip, "t * " + ll(q) + " + " + ll(k), ds[k]);
      b.line("at += g" + std::to_string(k) + " * " + ll(st[k]) + ";");
    }
    if (red == "none")
      b.line(yp + "[at] = " + up + "[i];");
    else {
      std::string cur = "dlc::ld<" + ct + ">(" + yp + ", at)", u = "dlc::ld<" + ct + ">(" + up + ", i)";
      std::string e = red == "add" ? cur + " + " + u : red == "mul" ? cur + " * " + u
                    : red == "max" ? "dlc::stdmax(" + cur + ", " + u + ")"
                                   : "dlc::stdmin(" + cur + ", " + u + ")";
      b.line("dlc::st(" + yp + ", at, " + e + ");");
    }
  }
  if (red == "none")
    launchOver(kb, total);
  else
    kb.launch(1, 1);
  return llvm::Error::success();
}

llvm::Error lowerOneHot(Lowering &l, const Node &n) {
  const Value *idx = n.operand(0), *vals = n.operand(1), *y = n.result();
  int64_t rank = y->rank(), axis = n.attrInt("axis"), depth = n.attrInt("depth");
  if (axis < 0)
    axis += rank;
  int64_t total = y->type().numElements();
  l.allocate(y);
  if (!total)
    return llvm::Error::success();
  KernelBuilder kb(l, n, "");
  std::string ip = kb.pointerTo(idx), vp = kb.pointerTo(vals), yp = kb.outputPointer(y);
  Shape ist = stridesOf(idx->shape());
  CodeStream &b = kb.body();
  {
    CodeStream::Block loop(b, gridStrideLoop("i", ll(total)));
    IndexMapper(y->shape()).emitCoords(b, "i", "c");
    std::string at;
    for (int64_t d = 0, k = 0; d < rank; ++d) {
      if (d == axis)
        continue;
      at += (at.empty() ? "" : " + ") + std::string("c") + std::to_string(d) + " * " + ll(ist[k++]);
    }
    b.line("long long v = (long long)dlc::ld<double>(" + ip + ", " + (at.empty() ? "0" : at) + ");");
    b.line("if (v < 0) v += " + ll(depth) + ";");
    b.line(yp + "[i] = " + vp + "[v == c" + std::to_string(axis) + " ? 1 : 0];");
  }
  launchOver(kb, total);
  return llvm::Error::success();
}

llvm::Error lowerReverseSequence(Lowering &l, const Node &n) {
  const Value *x = n.operand(0), *lens = n.operand(1), *y = n.result();
  int64_t bax = n.attrInt("batch_axis"), tax = n.attrInt("time_axis"), total = x->type().numElements();
  l.allocate(y);
  if (!total)
    return llvm::Error::success();
  KernelBuilder kb(l, n, "");
  std::string xp = kb.pointerTo(x), lp = kb.pointerTo(lens), yp = kb.outputPointer(y);
  Shape st = stridesOf(x->shape());
  CodeStream &b = kb.body();
  {
    CodeStream::Block loop(b, gridStrideLoop("i", ll(total)));
    IndexMapper(x->shape()).emitCoords(b, "i", "c");
    std::string ct = "c" + std::to_string(tax);
    b.line("long long len = (long long)" + lp + "[c" + std::to_string(bax) + "];");
    b.line("len = len < 0 ? 0 : (len > " + ll(x->shape()[tax]) + " ? " + ll(x->shape()[tax]) + " : len);");
    b.line("const long long t = " + ct + " < len ? len - 1 - " + ct + " : " + ct + ";");
    std::string src;
    for (int64_t d = 0; d < x->rank(); ++d)
      src += (d ? " + " : "") + std::string(d == tax ? "t" : "c" + std::to_string(d)) + " * " + ll(st[d]);
    b.line(yp + "[i] = " + xp + "[" + src + "];");
  }
  launchOver(kb, total);
  return llvm::Error::success();
}

llvm::Error lowerMaxUnpool(Lowering &l, const Node &n) {
  const Value *x = n.operand(0), *idx = n.operand(1), *y = n.result();
  // Indices address the default unpooled shape; re-address into the output shape.
  const Shape &xs = x->shape();
  int64_t k = x->rank() - 2;
  const auto &ks = n.attrInts("kernel_shape"), &strides = n.attrInts("strides"), &pads = n.attrInts("pads");
  Shape def{xs[0], xs[1]};
  for (int64_t i = 0; i < k; ++i)
    def.push_back((xs[2 + i] - 1) * (strides.empty() ? 1 : strides[i]) + ks[i] -
                  (pads.empty() ? 0 : pads[i] + pads[i + k]));
  BufferRef yb = l.allocate(y);
  l.addMemset(yb, y->type().byteSize(), 0, n);
  int64_t total = x->type().numElements(), defTotal = product(def);
  if (!total)
    return llvm::Error::success();
  KernelBuilder kb(l, n, "");
  std::string xp = kb.pointerTo(x), ip = kb.pointerTo(idx), yp = kb.outputPointer(y);
  Shape ost = stridesOf(y->shape());
  CodeStream &b = kb.body();
  {
    CodeStream::Block loop(b, gridStrideLoop("i", ll(total)));
    b.line("long long t = (long long)" + ip + "[i];");
    b.line("if (t < 0 || t >= " + ll(defTotal) + ") { __trap(); continue; }");
    b.line("long long at = 0; bool inside = true;");
    for (int64_t d = static_cast<int64_t>(def.size()) - 1; d >= 0; --d) {
      b.line("{ const long long cd = t % " + ll(def[d]) + "; t /= " + ll(def[d]) + "; inside &= cd < " +
             ll(y->shape()[d]) + "; at += cd * " + ll(ost[d]) + "; }");
    }
    b.line("if (inside) " + yp + "[at] = " + xp + "[i];");
  }
  launchOver(kb, total);
  return llvm::Error::success();
}

} // namespace

llvm::Error lowerIndex(Lowering &l, const Node &n) {
  switch (n.kind()) {
  case OpKind::Trilu: return lowerTrilu(l, n);
  case OpKind::GatherElements: return lowerGatherElements(l, n);
  case OpKind::ScatterElements: return lowerScatterElements(l, n);
  case OpKind::GatherND: return lowerGatherND(l, n);
  case OpKind::ScatterND: return lowerScatterND(l, n);
  case OpKind::OneHot: return lowerOneHot(l, n);
  case OpKind::ReverseSequence: return lowerReverseSequence(l, n);
  case OpKind::MaxUnpool: return lowerMaxUnpool(l, n);
  default: return errorf("no CUDA lowering for {0}", n.opName());
  }
}

} // namespace dlc::codegen
