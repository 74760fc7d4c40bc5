//===- Collective.cpp - Collectives of data-parallel training --------------===//
//
// AllReduce(g1, ..., gk) -> (r1, ..., rk): the mean of each operand over the ranks
// of a data-parallel run (dlc compile --train --data-parallel inserts one per bucket
// of gradients, and --sync-batchnorm one per batch statistic). Within one process, the only rank, the mean is the operand itself,
// which is what the reference computes. Codegen packs the operands into one buffer,
// reduces it beside the following steps and waits for it before the first reader.
//===----------------------------------------------------------------------===//
#include "OpUtils.h"

#include "dlc/ir/GradBuilder.h"

#include <cstring>

namespace dlc::ir {
namespace {
using namespace ops;

llvm::Error verifyAllReduce(const Node &n) {
  if (n.numResults() != n.numOperands())
    return errorf("has {0} operands but {1} results (one per operand)", n.numOperands(), n.numResults());
  for (unsigned i = 0; i < n.numOperands(); ++i) {
    if (auto e = requireType(n, i, kFloat))
      return e;
    if (n.operand(i)->dtype() != n.operand(0)->dtype())
      return makeError("every operand of a bucket must have the same dtype");
  }
  return ok();
}

InferResult inferAllReduce(const Node &n) {
  TypeList types;
  for (unsigned i = 0; i < n.numOperands(); ++i)
    types.push_back(n.operand(i)->type());
  return types;
}

llvm::Error refAllReduce(const Node &, const Inputs &in, Outputs &out) {
  for (size_t i = 0; i < in.size(); ++i)
    std::memcpy(out[i].mutableRaw(), in[i]->raw(), in[i]->byteSize());
  return ok();
}

/// Each rank differentiates its own loss, and the step averages the ranks' gradients
/// (the global batch's loss is the mean of theirs). A mean over the ranks that feeds
/// every rank's loss (synchronized BatchNorm's statistics) passes back the mean of
/// the ranks' gradients: the same all-reduce.
llvm::Error gradAllReduce(GradBuilder &b, const Node &n) {
  for (unsigned i = 0; i < n.numOperands(); ++i)
    if (b.wants(i) && b.grad(i))
      b.accumulate(i, b.op(OpKind::AllReduce, {b.grad(i)}));
  return ok();
}

} // namespace

void defineCollectiveOps(OpTable &t) {
  t.def(OpKind::AllReduce)
      .operands(1, kVariadic)
      .results(1, kVariadic)
      .attr("bucket_bytes", AttrKind::Int, int64_t{0}) // the size limit the buckets were made with
      .fusion(FusionKind::Opaque)
      .fp16(Fp16Policy::Follow)
      .layout(LayoutRule::fixed())
      .verify(verifyAllReduce)
      .infer(inferAllReduce)
      .reference(refAllReduce)
      .gradient(gradAllReduce);
}

} // namespace dlc::ir
