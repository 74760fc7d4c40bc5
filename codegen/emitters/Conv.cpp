//===- Conv.cpp - Implicit-GEMM and direct convolution kernels --------------===//
//
// Conv with one group (floating point) is an implicit GEMM: a block computes a
// tile of output channels x output positions, staging weight tiles and on-the-fly
// im2col tiles of the input in shared memory, so no column buffer ever reaches
// memory. Grouped and depthwise convolutions (MobileNet) use a direct kernel, one
// thread per output. Both add the bias and run the fused epilogue (activation,
// residual add, ...) on each output as it is stored. ConvTranspose is a direct
// gather kernel.
//===----------------------------------------------------------------------===//
#include "Window.h"

#include "../Fused.h"

namespace dlc::codegen {

using namespace ir;

namespace {

Shape spatialKernel(const Value *w) { return Shape(w->shape().begin() + 2, w->shape().end()); }

/// Direct convolution: one thread per output element (grouped and depthwise).
void emitDirectConv(Lowering &l, const Node &n, const Window3 &w, int64_t M, int64_t groups) {
  const Value *x = n.operand(0), *wt = n.operand(1), *b = n.operand(2), *y = n.result();
  int64_t Cg = w.C / groups, Mg = M / groups, total = y->type().numElements();
  std::string ct = computeType(y->dtype());
  KernelBuilder kb(l, n, "direct");
  FusedAccess fa(l, kb, l.group());
  std::string xp = kb.pointerTo(x), wp = kb.pointerTo(wt);
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
    fa.store(bd, y, "i", "acc");
  }
  uint64_t grid;
  uint32_t block;
  elementwiseLaunchShape(total, grid, block);
  kb.launch(grid, block);
}

/// Tile shape of the implicit GEMM: 256 threads as TY (output channels) x TX
/// (output positions), each computing RM x RN outputs; K is staged BK at a time.
struct ConvTiles {
  int TY, TX, RM, RN;
  static constexpr int BK = 16, Threads = 256;
  int BM() const { return TY * RM; }
  int BN() const { return TX * RN; }
  static ConvTiles forChannels(int64_t M) {
    int bm = 4;
    while (bm < 64 && bm < M)
      bm *= 2;
    ConvTiles t;
    t.TY = std::min(16, bm);
    t.RM = bm / t.TY;
    t.TX = Threads / t.TY;
    t.RN = t.TX <= 16 ? 4 : t.TX <= 64 ? 2 : 1;
    return t;
  }
};

/// Implicit-GEMM convolution (one group): out[m, p] = sum_kk W[m, kk] * im2col(x)[kk, p]
/// with the im2col element computed on the fly while staging tiles in shared memory;
/// bias and the fused epilogue are applied to each output as it is stored.
void emitImplicitGemmConv(Lowering &l, const Node &n, const Window3 &w, int64_t M) {
  const Value *x = n.operand(0), *wt = n.operand(1), *b = n.operand(2), *y = n.result();
  DType dt = y->dtype();
  std::string at = dt == DType::F64 ? "double" : "float"; // accumulation type
  int64_t K = w.C * w.kSize(), P = w.outSize(), NP = w.N * P;
  ConvTiles t = ConvTiles::forChannels(M);
  KernelBuilder kb(l, n, "igemm");
  FusedAccess fa(l, kb, l.group());
  std::string xp = kb.pointerTo(x), wp = kb.pointerTo(wt), bp = b ? kb.pointerTo(b) : "";
  CodeStream &bd = kb.body();
  kb.setNeedsSync();
  // 32-bit index arithmetic when every tensor fits (fewer registers), else 64-bit.
  bool wide = std::max({x->type().numElements(), y->type().numElements(), wt->type().numElements(), K * NP}) >=
              (int64_t{1} << 31);
  std::string IT = wide ? "long long" : "int";
  auto lit = [&](int64_t v) { return wide ? ll(v) : std::to_string(v); };
  kb.setFlops(2.0 * static_cast<double>(M) * static_cast<double>(NP) * static_cast<double>(K));
  std::string BK = std::to_string(t.BK), BM = std::to_string(t.BM()), BN = std::to_string(t.BN());
  bd.line("__shared__ " + at + " As[" + BK + "][" + BM + "];");
  bd.line("__shared__ " + at + " Bs[" + BK + "][" + BN + "];");
  bd.line("const int tid = threadIdx.x, tx = tid % " + std::to_string(t.TX) + ", ty = tid / " + std::to_string(t.TX) +
          ";");
  bd.line("const " + IT + " pBase = (" + IT + ")blockIdx.x * " + BN + ", mBase = (" + IT + ")blockIdx.y * " + BM + ";");
  bd.line(at + " acc[" + std::to_string(t.RM) + "][" + std::to_string(t.RN) + "] = {};");
  {
    CodeStream::Block kloop(bd, "for (" + IT + " kBase = 0; kBase < " + lit(K) + "; kBase += " + BK + ")");
    // Stage A (weights, [M, K] row-major) transposed into As[k][m].
    {
      CodeStream::Block e(bd, "for (int e = tid; e < " + std::to_string(t.BK * t.BM()) + "; e += " +
                                  std::to_string(ConvTiles::Threads) + ")");
      bd.line("const int r = e / " + BK + ", c = e % " + BK + ";");
      bd.line("const " + IT + " m = mBase + r, kk = kBase + c;");
      bd.line("As[c][r] = (m < " + lit(M) + " && kk < " + lit(K) + ") ? dlc::ld<" + at + ">(" + wp + ", m * " + lit(K) +
              " + kk) : (" + at + ")0;");
    }
    // Stage B (im2col of x, [K, N*P]) into Bs[k][p]; adjacent threads take adjacent p.
    {
      CodeStream::Block e(bd, "for (int e = tid; e < " + std::to_string(t.BK * t.BN()) + "; e += " +
                                  std::to_string(ConvTiles::Threads) + ")");
      bd.line("const int r = e / " + BN + ", c = e % " + BN + ";");
      bd.line("const " + IT + " kk = kBase + r, p = pBase + c;");
      bd.line(at + " v = 0;");
      {
      CodeStream::Block in(bd, "if (kk < " + lit(K) + " && p < " + lit(NP) + ")");
      bd.line("const " + IT + " ch = kk / " + lit(w.kSize()) + ", kr = kk % " + lit(w.kSize()) + ";");
      bd.line("const " + IT + " q2 = kr % " + lit(w.k[2]) + ", q1 = (kr / " + lit(w.k[2]) + ") % " + lit(w.k[1]) +
              ", q0 = kr / " + lit(w.k[1] * w.k[2]) + ";");
      bd.line("const " + IT + " op = p % " + lit(P) + ", nb = p / " + lit(P) + ";");
      bd.line("const " + IT + " o2 = op % " + lit(w.out[2]) + ", o1 = (op / " + lit(w.out[2]) + ") % " + lit(w.out[1]) +
              ", o0 = op / " + lit(w.out[1] * w.out[2]) + ";");
      for (int d = 0; d < 3; ++d)
        bd.line("const " + IT + " i" + std::to_string(d) + " = o" + std::to_string(d) + " * " + lit(w.stride[d]) +
                " + q" + std::to_string(d) + " * " + lit(w.dil[d]) + " - " + lit(w.padB[d]) + ";");
      bd.line("if (i0 >= 0 && i0 < " + lit(w.in[0]) + " && i1 >= 0 && i1 < " + lit(w.in[1]) + " && i2 >= 0 && i2 < " +
              lit(w.in[2]) + ") v = dlc::ld<" + at + ">(" + xp + ", (nb * " + lit(w.C) + " + ch) * " + lit(w.inSize()) +
              " + (i0 * " + lit(w.in[1]) + " + i1) * " + lit(w.in[2]) + " + i2);");
      }
      bd.line("Bs[r][c] = v;");
    }
    bd.line("__syncthreads();");
    {
      bd.line("#pragma unroll");
      CodeStream::Block kk(bd, "for (int kk = 0; kk < " + BK + "; ++kk)");
      bd.line(at + " a[" + std::to_string(t.RM) + "], bv[" + std::to_string(t.RN) + "];");
      // Fully unrolled, so that acc, a and bv stay in registers.
      bd.line("#pragma unroll");
      bd.line("for (int i = 0; i < " + std::to_string(t.RM) + "; ++i) a[i] = As[kk][ty + " + std::to_string(t.TY) +
              " * i];");
      bd.line("#pragma unroll");
      bd.line("for (int j = 0; j < " + std::to_string(t.RN) + "; ++j) bv[j] = Bs[kk][tx + " + std::to_string(t.TX) +
              " * j];");
      bd.line("#pragma unroll");
      bd.line("for (int i = 0; i < " + std::to_string(t.RM) + "; ++i)");
      bd.line("#pragma unroll");
      bd.line("for (int j = 0; j < " + std::to_string(t.RN) + "; ++j) acc[i][j] += a[i] * bv[j];");
    }
    bd.line("__syncthreads();");
  }
  // Epilogue: bias, then the fused consumers, one output at a time.
  bd.line("#pragma unroll");
  {
    CodeStream::Block i(bd, "for (int i = 0; i < " + std::to_string(t.RM) + "; ++i)");
    bd.line("const " + IT + " m = mBase + ty + " + std::to_string(t.TY) + " * i;");
    CodeStream::Block mIn(bd, "if (m < " + lit(M) + ")");
    if (b)
      bd.line("const " + at + " bias = dlc::ld<" + at + ">(" + bp + ", m);");
    bd.line("#pragma unroll");
    CodeStream::Block j(bd, "for (int j = 0; j < " + std::to_string(t.RN) + "; ++j)");
    bd.line("const " + IT + " p = pBase + tx + " + std::to_string(t.TX) + " * j;");
    CodeStream::Block pIn(bd, "if (p < " + lit(NP) + ")");
    bd.line("const " + IT + " o = (p / " + lit(P) + " * " + lit(M) + " + m) * " + lit(P) + " + p % " + lit(P) + ";");
    fa.store(bd, y, "o", std::string("(") + computeType(dt) + ")(acc[i][j]" + (b ? " + bias" : "") + ")");
  }
  kb.launch((NP + t.BN() - 1) / t.BN(), ConvTiles::Threads, 0, static_cast<uint32_t>((M + t.BM() - 1) / t.BM()));
}

llvm::Error lowerConvForward(Lowering &l, const Node &n) {
  const Value *x = n.operand(0), *wt = n.operand(1), *y = n.result();
  Window3 w = windowOf(n, x->shape(), y->shape(), spatialKernel(wt));
  int64_t M = wt->shape()[0], groups = n.attrInt("group");
  l.allocate(y);
  if (y->type().numElements() == 0)
    return llvm::Error::success();
  DType dt = y->dtype();
  bool floating = dt == DType::F32 || dt == DType::F16 || dt == DType::BF16 || dt == DType::F64;
  if (groups != 1 || !floating)
    emitDirectConv(l, n, w, M, groups);
  else
    emitImplicitGemmConv(l, n, w, M);
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
