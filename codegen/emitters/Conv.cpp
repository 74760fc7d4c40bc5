//===- Conv.cpp - Convolution as im2col + GEMM, direct kernels for groups --===//
//
// Conv with one group: a 1x1/stride-1 convolution is a batched GEMM on the input
// as it is; otherwise an im2col kernel writes [N, C*k, P] columns and a batched GEMM
// multiplies W [M, C*k] by each image's columns. Grouped and depthwise convolutions
// (MobileNet) use a direct kernel, one thread per output. Bias is added by a
// broadcast kernel (the fusion pass folds it into the GEMM epilogue later).
// ConvTranspose is a direct gather kernel.
//===----------------------------------------------------------------------===//
#include "Window.h"

namespace dlc::codegen {

using namespace ir;

namespace {

Shape spatialKernel(const Value *w) { return Shape(w->shape().begin() + 2, w->shape().end()); }

void emitBiasAdd(Lowering &l, const Node &n, const Value *bias, const Value *y, int64_t perChannel) {
  int64_t total = y->type().numElements(), M = y->shape()[1];
  KernelBuilder kb(l, n, "bias");
  std::string bp = kb.pointerTo(bias), yp = kb.pointer(y->dtype(), l.bufferOf(y), false);
  std::string ct = computeType(y->dtype());
  {
    CodeStream::Block loop(kb.body(), gridStrideLoop("i", ll(total)));
    kb.body().line("dlc::st(" + yp + ", i, dlc::ld<" + ct + ">(" + yp + ", i) + dlc::ld<" + ct + ">(" + bp +
                   ", (i / " + ll(perChannel) + ") % " + ll(M) + "));");
  }
  uint64_t grid;
  uint32_t block;
  elementwiseLaunchShape(total, grid, block);
  kb.launch(grid, block);
}

/// Direct convolution: one thread per output element (grouped and depthwise).
void emitDirectConv(Lowering &l, const Node &n, const Window3 &w, int64_t M, int64_t groups) {
  const Value *x = n.operand(0), *wt = n.operand(1), *b = n.operand(2), *y = n.result();
  int64_t Cg = w.C / groups, Mg = M / groups, total = y->type().numElements();
  std::string ct = computeType(y->dtype());
  KernelBuilder kb(l, n, "direct");
  std::string xp = kb.pointerTo(x), wp = kb.pointerTo(wt), yp = kb.outputPointer(y);
  std::string bp = b ? kb.pointerTo(b) : "";
  CodeStream &bd = kb.body();
  kb.setFlops(2.0 * total * Cg * w.kSize());
  {
    CodeStream::Block loop(bd, gridStrideLoop("i", ll(total)));
    bd.line("const long long o2 = i % " + ll(w.out[2]) + ", o1 = (i / " + ll(w.out[2]) + ") % " + ll(w.out[1]) +
            ", o0 = (i / " + ll(w.out[1] * w.out[2]) + ") % " + ll(w.out[0]) + ";");
    bd.line("const long long m = (i / " + ll(w.outSize()) + ") % " + ll(M) + ", nb = i / " + ll(M * w.outSize()) + ";");
    bd.line("const long long g = m / " + ll(Mg) + ";");
    bd.line(ct + " acc = " + (b ? "dlc::ld<" + ct + ">(" + bp + ", m)" : "(" + ct + ")0") + ";");
    bd.line("for (long long c = 0; c < " + ll(Cg) + "; ++c) {");
    bd.line("const long long xb = (nb * " + ll(w.C) + " + g * " + ll(Cg) + " + c) * " + ll(w.inSize()) + ";");
    bd.line("const long long wb = (m * " + ll(Cg) + " + c) * " + ll(w.kSize()) + ";");
    for (int d = 0; d < 3; ++d) {
      std::string k = "k" + std::to_string(d), id = "i" + std::to_string(d), o = "o" + std::to_string(d);
      bd.line("for (long long " + k + " = 0; " + k + " < " + ll(w.k[d]) + "; ++" + k + ") {");
      bd.line("const long long " + id + " = " + o + " * " + ll(w.stride[d]) + " + " + k + " * " + ll(w.dil[d]) +
              " - " + ll(w.padB[d]) + ";");
      bd.line("if (" + id + " < 0 || " + id + " >= " + ll(w.in[d]) + ") continue;");
    }
    bd.line("acc += dlc::ld<" + ct + ">(" + xp + ", xb + (i0 * " + ll(w.in[1]) + " + i1) * " + ll(w.in[2]) +
            " + i2) * dlc::ld<" + ct + ">(" + wp + ", wb + (k0 * " + ll(w.k[1]) + " + k1) * " + ll(w.k[2]) + " + k2);");
    bd.line("}}}}");
    bd.line("dlc::st(" + yp + ", i, acc);");
  }
  uint64_t grid;
  uint32_t block;
  elementwiseLaunchShape(total, grid, block);
  kb.launch(grid, block);
}

llvm::Error lowerConvForward(Lowering &l, const Node &n) {
  const Value *x = n.operand(0), *wt = n.operand(1), *b = n.operand(2), *y = n.result();
  Window3 w = windowOf(n, x->shape(), y->shape(), spatialKernel(wt));
  int64_t M = wt->shape()[0], groups = n.attrInt("group");
  BufferRef yb = l.allocate(y);
  if (y->type().numElements() == 0)
    return llvm::Error::success();
  DType dt = y->dtype();
  bool gemmable = dt == DType::F32 || dt == DType::F16 || dt == DType::BF16 || dt == DType::F64;
  if (groups != 1 || !gemmable) {
    emitDirectConv(l, n, w, M, groups);
    return llvm::Error::success();
  }
  int64_t K = w.C * w.kSize(), P = w.outSize();
  bool pointwise = w.kSize() == 1;
  for (int d = 0; d < 3; ++d)
    pointwise &= w.stride[d] == 1 && w.padB[d] == 0 && w.padE[d] == 0;
  BufferRef cols = l.bufferOf(x);
  if (!pointwise) {
    cols = l.temp(static_cast<uint64_t>(w.N * K * P) * dtypeSize(dt), y->name() + ".im2col");
    KernelBuilder kb(l, n, "im2col");
    std::string xp = kb.pointerTo(x), cp = kb.pointer(dt, cols, false);
    CodeStream &bd = kb.body();
    int64_t total = w.N * K * P;
    {
      CodeStream::Block loop(bd, gridStrideLoop("i", ll(total)));
      bd.line("const long long p = i % " + ll(P) + ", row = (i / " + ll(P) + ") % " + ll(K) + ", nb = i / " +
              ll(K * P) + ";");
      bd.line("const long long c = row / " + ll(w.kSize()) + ", kk = row % " + ll(w.kSize()) + ";");
      bd.line("const long long k2 = kk % " + ll(w.k[2]) + ", k1 = (kk / " + ll(w.k[2]) + ") % " + ll(w.k[1]) +
              ", k0 = kk / " + ll(w.k[1] * w.k[2]) + ";");
      bd.line("const long long o2 = p % " + ll(w.out[2]) + ", o1 = (p / " + ll(w.out[2]) + ") % " + ll(w.out[1]) +
              ", o0 = p / " + ll(w.out[1] * w.out[2]) + ";");
      for (int d = 0; d < 3; ++d)
        bd.line("const long long i" + std::to_string(d) + " = o" + std::to_string(d) + " * " + ll(w.stride[d]) +
                " + k" + std::to_string(d) + " * " + ll(w.dil[d]) + " - " + ll(w.padB[d]) + ";");
      bd.line("const bool inside = i0 >= 0 && i0 < " + ll(w.in[0]) + " && i1 >= 0 && i1 < " + ll(w.in[1]) +
              " && i2 >= 0 && i2 < " + ll(w.in[2]) + ";");
      bd.line(cp + "[i] = inside ? " + xp + "[(nb * " + ll(w.C) + " + c) * " + ll(w.inSize()) + " + (i0 * " +
              ll(w.in[1]) + " + i1) * " + ll(w.in[2]) + " + i2] : dlc::cvt<" + cudaType(dt) + ">(0.0f);");
    }
    uint64_t grid;
    uint32_t block;
    elementwiseLaunchShape(total, grid, block);
    kb.launch(grid, block);
  }
  GemmStep g;
  g.dtype = dt;
  g.m = M;
  g.n = P;
  g.k = K;
  g.batch = w.N;
  g.a = l.bufferOf(wt);
  g.b = cols;
  g.c = yb;
  g.lda = K;
  g.ldb = P;
  g.ldc = P;
  g.strideA = 0;
  g.strideB = K * P;
  g.strideC = M * P;
  l.addGemm(g, n);
  if (b)
    emitBiasAdd(l, n, b, y, P);
  return llvm::Error::success();
}

llvm::Error lowerConvTranspose(Lowering &l, const Node &n) {
  const Value *x = n.operand(0), *wt = n.operand(1), *b = n.operand(2), *y = n.result();
  // The window's "in" is ConvTranspose's output and "out" its input (the gather view).
  Window3 w = windowOf(n, y->shape(), x->shape(), spatialKernel(wt));
  int64_t groups = n.attrInt("group"), C = x->shape()[1], Cg = C / groups, Mg = wt->shape()[1],
          M = Mg * groups, total = y->type().numElements();
  l.allocate(y);
  if (total == 0)
    return llvm::Error::success();
  std::string ct = computeType(y->dtype());
  KernelBuilder kb(l, n, "");
  std::string xp = kb.pointerTo(x), wp = kb.pointerTo(wt), yp = kb.outputPointer(y);
  std::string bp = b ? kb.pointerTo(b) : "";
  CodeStream &bd = kb.body();
  int64_t ySp = w.inSize(), xSp = w.outSize();
  kb.setFlops(2.0 * x->type().numElements() * Mg * w.kSize());
  {
    CodeStream::Block loop(bd, gridStrideLoop("i", ll(total)));
    bd.line("const long long y2 = i % " + ll(w.in[2]) + ", y1 = (i / " + ll(w.in[2]) + ") % " + ll(w.in[1]) +
            ", y0 = (i / " + ll(w.in[1] * w.in[2]) + ") % " + ll(w.in[0]) + ";");
    bd.line("const long long m = (i / " + ll(ySp) + ") % " + ll(M) + ", nb = i / " + ll(M * ySp) + ";");
    bd.line("const long long g = m / " + ll(Mg) + ", mm = m % " + ll(Mg) + ";");
    bd.line(ct + " acc = " + (b ? "dlc::ld<" + ct + ">(" + bp + ", m)" : "(" + ct + ")0") + ";");
    bd.line("for (long long c = g * " + ll(Cg) + "; c < (g + 1) * " + ll(Cg) + "; ++c) {");
    for (int d = 0; d < 3; ++d) {
      std::string k = "k" + std::to_string(d), t = "t" + std::to_string(d), xi = "x" + std::to_string(d);
      bd.line("for (long long " + k + " = 0; " + k + " < " + ll(w.k[d]) + "; ++" + k + ") {");
      bd.line("const long long " + t + " = y" + std::to_string(d) + " + " + ll(w.padB[d]) + " - " + k + " * " +
              ll(w.dil[d]) + ";");
      bd.line("if (" + t + " < 0 || " + t + " % " + ll(w.stride[d]) + " != 0) continue;");
      bd.line("const long long " + xi + " = " + t + " / " + ll(w.stride[d]) + ";");
      bd.line("if (" + xi + " >= " + ll(w.out[d]) + ") continue;");
    }
    bd.line("acc += dlc::ld<" + ct + ">(" + xp + ", (nb * " + ll(C) + " + c) * " + ll(xSp) + " + (x0 * " +
            ll(w.out[1]) + " + x1) * " + ll(w.out[2]) + " + x2) * dlc::ld<" + ct + ">(" + wp + ", (c * " + ll(Mg) +
            " + mm) * " + ll(w.kSize()) + " + (k0 * " + ll(w.k[1]) + " + k1) * " + ll(w.k[2]) + " + k2);");
    bd.line("}}}}");
    bd.line("dlc::st(" + yp + ", i, acc);");
  }
  uint64_t grid;
  uint32_t block;
  elementwiseLaunchShape(total, grid, block);
  kb.launch(grid, block);
  return llvm::Error::success();
}

} // namespace

llvm::Error lowerConv(Lowering &l, const Node &n) {
  switch (n.kind()) {
  case OpKind::Conv: return lowerConvForward(l, n);
  case OpKind::ConvTranspose: return lowerConvTranspose(l, n);
  default: return errorf("no CUDA lowering for {0}", n.opName());
  }
}

} // namespace dlc::codegen
