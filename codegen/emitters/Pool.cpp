//===- Pool.cpp - Max/average pooling and global pooling ------------------===//
//
// One thread per output element walks its window (normalized to 3-D, like the
// reference). Global pooling is a per-(n, c) reduction over the spatial dims.
//===----------------------------------------------------------------------===//
#include "Window.h"

#include "../Fused.h"

namespace dlc::codegen {

using namespace ir;

namespace {

llvm::Error lowerWindowPool(Lowering &l, const Node &n) {
  const Value *x = n.operand(0), *y = n.result(0);
  bool isMax = n.kind() == OpKind::MaxPool;
  Window3 w = windowOf(n, x->shape(), y->shape(), n.attrInts("kernel_shape"));
  l.allocate(y);
  bool withIdx = n.numResults() > 1;
  if (withIdx)
    l.allocate(n.result(1));
  int64_t total = y->type().numElements();
  if (total == 0)
    return llvm::Error::success();
  std::string ct = computeType(x->dtype());
  std::string acc = isMax ? ct : "double";
  KernelBuilder kb(l, n, "");
  FusedAccess fa(l, kb, l.group());
  std::string idxp = withIdx ? kb.outputPointer(n.result(1)) : "";
  bool colMajor = isMax && n.attrInt("storage_order") == 1;
  bool includePad = !isMax && n.attrInt("count_include_pad") != 0;
  CodeStream &b = kb.body();
  kb.setFlops(static_cast<double>(total * w.kSize()));
  {
    CodeStream::Block loop(b, gridStrideLoop("i", ll(total)));
    b.line("const long long o2 = i % " + ll(w.out[2]) + ", o1 = (i / " + ll(w.out[2]) + ") % " +
           ll(w.out[1]) + ", o0 = (i / " + ll(w.out[1] * w.out[2]) + ") % " + ll(w.out[0]) +
           ", nc = i / " + ll(w.outSize()) + ";");
    b.line("const long long base = nc * " + ll(w.inSize()) + ";");
    if (isMax) {
      DType dt = x->dtype();
      b.line(acc + " best = " +
             std::string(isFloat(dt) ? "-(" + acc + ")(1.0 / 0.0)"
                                     : (isSignedInt(dt) ? "(-9223372036854775807LL - 1)" : "0ULL")) +
             ";");
      b.line("long long bestCell = -1;");
    } else {
      b.line(acc + " sum = 0;");
      b.line("long long count = 0;");
    }
    for (int d = 0; d < 3; ++d) {
      std::string o = "o" + std::to_string(d), kk = "k" + std::to_string(d), id = "i" + std::to_string(d);
      b.line("for (long long " + kk + " = 0; " + kk + " < " + ll(w.k[d]) + "; ++" + kk + ") {");
      b.line("const long long " + id + " = " + o + " * " + ll(w.stride[d]) + " + " + kk + " * " +
             ll(w.dil[d]) + " - " + ll(w.padB[d]) + ";");
      b.line("if (" + id + " < 0 || " + id + " >= " + ll(w.in[d]) + ") continue;");
    }
    b.line("const long long cell = (i0 * " + ll(w.in[1]) + " + i1) * " + ll(w.in[2]) + " + i2;");
    if (isMax) {
      b.line("const " + acc + " v = (" + acc + ")" + fa.load(b, x, "base + cell") + ";");
      b.line("if (bestCell < 0) bestCell = cell;");
      b.line("if (v > best) { best = v; bestCell = cell; }");
    } else {
      b.line("sum += (double)" + fa.load(b, x, "base + cell") + "; ++count;");
    }
    b.line("}}}");
    if (isMax) {
      b.line("if (bestCell < 0) bestCell = 0;");
      fa.store(b, y, "i", "best");
      if (withIdx) {
        std::string flat = "bestCell";
        if (colMajor) {
          // Spatial index in column-major order over the real spatial dims.
          int64_t s = x->rank() - 2;
          b.line("long long cr = bestCell, cm = 0, mult = 1;");
          b.line("long long cc[3]; cc[2] = cr % " + ll(w.in[2]) + "; cr /= " + ll(w.in[2]) + "; cc[1] = cr % " +
                 ll(w.in[1]) + "; cc[0] = cr / " + ll(w.in[1]) + ";");
          b.line("for (int d = " + std::to_string(3 - s) + "; d < 3; ++d) { cm += cc[d] * mult; mult *= (d == 0 ? " +
                 ll(w.in[0]) + " : d == 1 ? " + ll(w.in[1]) + " : " + ll(w.in[2]) + "); }");
          flat = "cm";
        }
        b.line(idxp + "[i] = base + " + flat + ";");
      }
    } else {
      if (includePad) {
        // Window cells inside [-padBegin, in + padEnd), as the reference counts them.
        std::string padded = "1";
        for (int d = 0; d < 3; ++d) {
          std::string o = "o" + std::to_string(d);
          b.line("const long long s" + std::to_string(d) + " = " + o + " * " + ll(w.stride[d]) + " - " +
                 ll(w.padB[d]) + ";");
          b.line("const long long e" + std::to_string(d) + " = dlc::stdmin(s" + std::to_string(d) + " + " +
                 ll((w.k[d] - 1) * w.dil[d] + 1) + ", " + ll(w.in[d] + w.padE[d]) + ");");
          padded += " * ((e" + std::to_string(d) + " - s" + std::to_string(d) + " + " + ll(w.dil[d] - 1) +
                    ") / " + ll(w.dil[d]) + ")";
        }
        b.line("count = " + padded + ";");
      }
      fa.store(b, y, "i", "(" + ct + ")(count ? sum / (double)count : 0.0)");
    }
  }
  uint64_t grid;
  uint32_t block;
  elementwiseLaunchShape(total, grid, block);
  kb.launch(grid, block);
  return llvm::Error::success();
}

llvm::Error lowerGlobalPool(Lowering &l, const Node &n) {
  const Value *x = n.operand(0), *y = n.result();
  bool isMax = n.kind() == OpKind::GlobalMaxPool;
  int64_t nc = x->shape()[0] * x->shape()[1];
  int64_t len = nc ? x->type().numElements() / nc : 0;
  l.allocate(y);
  if (nc == 0)
    return llvm::Error::success();
  std::string ct = computeType(x->dtype());
  KernelBuilder kb(l, n, "");
  FusedAccess fa(l, kb, l.group());
  CodeStream &b = kb.body();
  kb.setFlops(static_cast<double>(x->type().numElements()));
  std::string identity = isMax ? "-(" + ct + ")(1.0 / 0.0)" : "(" + ct + ")0";
  std::string opn = isMax ? "dlc::MaxOp()" : "dlc::SumOp()";
  std::string fin = isMax ? "acc" : "acc / (" + ct + ")" + ll(len);
  if (len <= 64) {
    {
      CodeStream::Block loop(b, gridStrideLoop("o", ll(nc)));
      b.line(ct + " acc = " + identity + ";");
      {
        CodeStream::Block loop2(b, "for (long long r = 0; r < " + ll(len) + "; ++r)");
        b.line("acc = " + opn + "(acc, " + fa.load(b, x, "o * " + ll(len) + " + r") + ");");
      }
      fa.store(b, y, "o", fin);
    }
    uint64_t grid;
    uint32_t block;
    elementwiseLaunchShape(nc, grid, block);
    kb.launch(grid, block);
    return llvm::Error::success();
  }
  kb.setNeedsSync();
  b.line("__shared__ " + ct + " smem[32];");
  b.line("const long long o = blockIdx.x;");
  b.line(ct + " acc = " + identity + ";");
  {
    CodeStream::Block loop(b, "for (long long r = threadIdx.x; r < " + ll(len) + "; r += blockDim.x)");
    b.line("acc = " + opn + "(acc, " + fa.load(b, x, "o * " + ll(len) + " + r") + ");");
  }
  b.line("acc = dlc::blockReduce(acc, " + opn + ", " + identity + ", smem);");
  {
    CodeStream::Block first(b, "if (threadIdx.x == 0)");
    fa.store(b, y, "o", fin);
  }
  kb.launch(nc, 256);
  return llvm::Error::success();
}

} // namespace

llvm::Error lowerPool(Lowering &l, const Node &n) {
  switch (n.kind()) {
  case OpKind::MaxPool:
  case OpKind::AveragePool: return lowerWindowPool(l, n);
  case OpKind::GlobalAveragePool:
  case OpKind::GlobalMaxPool: return lowerGlobalPool(l, n);
  default: return errorf("no CUDA lowering for {0}", n.opName());
  }
}

} // namespace dlc::codegen
