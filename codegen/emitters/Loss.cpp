//===- Loss.cpp - Negative log-likelihood loss -----------------------------===//
#include "../Library.h"
#include "EmitterUtils.h"

#include <cstddef>

namespace dlc::codegen {

using namespace ir;

namespace {

llvm::Error lowerNllLoss(Lowering &l, const Node &n) {
  const Value *x = n.operand(0), *t = n.operand(1), *w = n.operand(2), *y = n.result();
  int64_t N = x->shape()[0], C = x->shape()[1],
          D = t->type().numElements() / std::max<int64_t>(N, 1);
  const std::string &red = n.attrString("reduction");
  l.allocate(y);
  int64_t total = N * D;
  if (red == "none" && !total)
    return llvm::Error::success();
  MiscShape s{};
  s.total = total;
  s.n0 = C;
  s.n1 = std::max<int64_t>(D, 1);
  s.n2 = n.attrInt("ignore_index");
  s.d0 = Divmod::make(std::max<int64_t>(D, 1));
  LaunchArgs a;
  a.shape(s);
  a.pointer(offsetof(MiscShape, a), l.bufferOf(x), x->type().byteSize(), false);
  a.pointer(offsetof(MiscShape, b), l.bufferOf(t), t->type().byteSize(), false);
  if (w)
    a.pointer(offsetof(MiscShape, c), l.bufferOf(w), w->type().byteSize(), false);
  a.pointer(offsetof(MiscShape, y), l.bufferOf(y), y->type().byteSize(), true);
  a.pointer(offsetof(MiscShape, err), l.checkWord(n, "target class out of range"), 4, true);
  const char *mode = red == "none" ? "0" : red == "sum" ? "1" : "2";
  Instantiation inst{
      "dlc::nll_loss",
      {mode, l.indexType(x->type().numElements()), cudaType(x->dtype()), cudaType(t->dtype())},
      "dlc::MiscShape",
      {}};
  inst.needsSync = red != "none";
  uint32_t k = l.instantiate(inst);
  l.launch(n, k, a, red == "none" ? gridFor(total, 256) : 1, 256, 0, 2.0 * total);
  return llvm::Error::success();
}

} // namespace

void registerLossLowerings(LoweringRegistry &r) {
  r.op(OpKind::NegativeLogLikelihoodLoss, lowerNllLoss);
}

} // namespace dlc::codegen
