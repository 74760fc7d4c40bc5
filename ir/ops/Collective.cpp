//===- Collective.cpp - Collectives of data-parallel training --------------===//
//
// AllReduce(g1, ..., gk) -> (r1, ..., rk): the mean of each operand over the ranks
// of a data-parallel run (dlc compile --train --data-parallel inserts one per bucket
// of gradients, and --sync-batchnorm one per batch statistic). Within one process, the only rank,
// the mean is the operand itself, which is what the reference computes. Codegen packs the operands
// into one buffer, reduces it beside the following steps and waits for it before the first reader.
//
// ZeRO-1 (dlc compile --zero N) shards the optimizer over N ranks with three more,
// on 1-D tensors of N equal shares: ReduceScatter(x[N*S]) -> [S] is this rank's share
// of the mean of x over the ranks, RankShard(x[N*S]) -> [S] this rank's share of x,
// and AllGather(x[S]) -> [N*S] every rank's x in rank order. The reference is one
// process standing for every rank alike: rank 0's share, and x repeated N times.
//===----------------------------------------------------------------------===//
#include "OpUtils.h"
#include "dlc/ir/GradBuilder.h"

#include <cstring>

namespace dlc::ir {
namespace {
using namespace ops;

llvm::Error verifyAllReduce(const Node &n) {
  if (n.numResults() != n.numOperands())
    return errorf("has {0} operands but {1} results (one per operand)", n.numOperands(),
                  n.numResults());
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

llvm::Error verifySharded(const Node &n) {
  if (auto e = requireType(n, 0, kFloat))
    return e;
  int64_t ranks = n.attrInt("ranks");
  if (ranks < 1)
    return errorf("ranks must be >= 1, got {0}", ranks);
  const Shape &s = n.operand(0)->shape();
  if (s.size() != 1)
    return makeError("the operand must be one-dimensional");
  if (n.kind() != OpKind::AllGather && s[0] % ranks)
    return errorf("{0} elements do not split into {1} equal shares", s[0], ranks);
  return ok();
}

InferResult inferSharded(const Node &n) {
  int64_t ranks = n.attrInt("ranks"), len = n.operand(0)->shape()[0];
  return TypeList{TensorType{n.operand(0)->dtype(),
                             {n.kind() == OpKind::AllGather ? len * ranks : len / ranks}}};
}

llvm::Error refSharded(const Node &n, const Inputs &in, Outputs &out) {
  size_t bytes = in[0]->byteSize();
  if (n.kind() == OpKind::AllGather) {
    for (int64_t r = 0; r < n.attrInt("ranks"); ++r)
      std::memcpy(static_cast<char *>(out[0].mutableRaw()) + r * bytes, in[0]->raw(), bytes);
  } else {
    std::memcpy(out[0].mutableRaw(), in[0]->raw(), out[0].byteSize());
  }
  return ok();
}

} // namespace

void defineCollectiveOps(OpTable &t) {
  t.def(OpKind::AllReduce)
      .operands(1, kVariadic)
      .results(1, kVariadic)
      .attr("bucket_bytes", AttrKind::Int, int64_t{0}) // the size limit the buckets were made with
      .fusible(Fusibility::opaque())
      .fp16(Fp16Policy::Follow)
      .layout(LayoutRule::fixed())
      .verify(verifyAllReduce)
      .infer(inferAllReduce)
      .reference(refAllReduce)
      .gradient(gradAllReduce);
  for (OpKind k : {OpKind::ReduceScatter, OpKind::AllGather, OpKind::RankShard})
    t.def(k)
        .operands(1)
        .attr("ranks", AttrKind::Int)
        .fusible(Fusibility::opaque())
        .fp16(Fp16Policy::Follow)
        .layout(LayoutRule::fixed())
        .verify(verifySharded)
        .infer(inferSharded)
        .reference(refSharded);
}

} // namespace dlc::ir
