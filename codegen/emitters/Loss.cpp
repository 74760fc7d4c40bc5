//===- Loss.cpp - Negative log-likelihood loss -----------------------------===//
#include "EmitterUtils.h"

namespace dlc::codegen {

using namespace ir;

llvm::Error lowerLoss(Lowering &l, const Node &n) {
  if (n.kind() != OpKind::NegativeLogLikelihoodLoss)
    return errorf("no CUDA lowering for {0}", n.opName());
  const Value *x = n.operand(0), *t = n.operand(1), *w = n.operand(2), *y = n.result();
  int64_t N = x->shape()[0], C = x->shape()[1], D = t->type().numElements() / std::max<int64_t>(N, 1);
  int64_t ignore = n.attrInt("ignore_index");
  const std::string &red = n.attrString("reduction");
  l.allocate(y);
  int64_t total = N * D;
  KernelBuilder kb(l, n, "");
  std::string xp = kb.pointerTo(x), tp = kb.pointerTo(t), wp = w ? kb.pointerTo(w) : "", yp = kb.outputPointer(y);
  CodeStream &b = kb.body();
  auto term = [&]() {
    b.line("const long long tg = (long long)" + tp + "[e];");
    b.line("const long long bb = e / " + ll(std::max<int64_t>(D, 1)) + ", dd = e % " + ll(std::max<int64_t>(D, 1)) + ";");
    b.line("double loss = 0, wt = 0;");
    b.line("if (tg != " + literalInt(ignore) + ") {");
    b.line("  if (tg < 0 || tg >= " + ll(C) + ") { __trap(); } else {");
    b.line("  wt = " + (w ? "dlc::ld<double>(" + wp + ", tg)" : std::string("1.0")) + ";");
    b.line("  loss = -dlc::ld<double>(" + xp + ", (bb * " + ll(C) + " + tg) * " + ll(D) + " + dd) * wt; }");
    b.line("}");
  };
  if (red == "none") {
    if (total) {
      {
        CodeStream::Block loop(b, gridStrideLoop("e", ll(total)));
        term();
        b.line("dlc::st(" + yp + ", e, loss);");
      }
      uint64_t grid;
      uint32_t block;
      elementwiseLaunchShape(total, grid, block);
      kb.launch(grid, block);
    }
    return llvm::Error::success();
  }
  // sum / mean: one block accumulates loss and weight in double.
  kb.setNeedsSync();
  b.line("__shared__ double smem[32];");
  b.line("double total = 0, weights = 0;");
  {
    CodeStream::Block loop(b, "for (long long e = threadIdx.x; e < " + ll(total) + "; e += blockDim.x)");
    term();
    b.line("total += loss; weights += wt;");
  }
  b.line("total = dlc::blockReduce(total, dlc::SumOp(), 0.0, smem);");
  b.line("weights = dlc::blockReduce(weights, dlc::SumOp(), 0.0, smem);");
  b.line("if (threadIdx.x == 0) dlc::st(" + yp + ", 0, " + (red == "sum" ? "total" : "total / weights") + ");");
  kb.launch(1, 256);
  return llvm::Error::success();
}

} // namespace dlc::codegen
