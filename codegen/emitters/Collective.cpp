//===- Collective.cpp - All-reduce of a bucket of gradients ----------------===//
//
// AllReduce(g1..gk) becomes one CollectiveStep: the gradients are packed into one
// arena buffer (each at an arena-aligned offset, so that kernels reading them keep
// their vector loads), and the results are views into that buffer, which the runtime
// averages over the ranks. The optimizer reads the averaged gradients in place; the
// wait comes right before the first step that reads the bucket
// (Lowering::addCollectiveWaits).
//===----------------------------------------------------------------------===//
#include "../MemoryPlan.h"
#include "EmitterUtils.h"

namespace dlc::codegen {

using namespace ir;

namespace {

/// ZeRO-1's collectives on one 1-D tensor: a reduce-scatter or all-gather packs it
/// into staging (its own buffer may die at once) and writes the result's buffer
/// beside the following steps; a shard reads this rank's share straight from it.
llvm::Error lowerSharded(Lowering &l, const Node &n) {
  CollectiveStep s;
  s.op = n.kind() == OpKind::ReduceScatter ? pkg::CollectiveOp::ReduceScatter
         : n.kind() == OpKind::AllGather   ? pkg::CollectiveOp::AllGather
                                           : pkg::CollectiveOp::Shard;
  s.bucket = l.nextBucket();
  s.dtype = n.operand(0)->dtype();
  s.ranks = static_cast<uint32_t>(n.attrInt("ranks"));
  s.count = static_cast<uint64_t>(n.operand(0)->type().numElements());
  uint64_t bytes = n.operand(0)->type().byteSize();
  if (s.op == pkg::CollectiveOp::Shard) {
    s.staging = l.bufferOf(n.operand(0));
  } else {
    s.staging = l.temp(std::max<uint64_t>(bytes, 1),
                       std::string(n.opName()) + " " + std::to_string(s.bucket));
    s.sources = {l.bufferOf(n.operand(0))};
    s.offsets = {0};
    s.sizes = {bytes};
  }
  s.output = l.allocate(n.result());
  l.setZeroRanks(s.ranks);
  l.setBucketBytes(s.count * dtypeSize(s.dtype)); // a data-parallel package: one bucket
  l.addCollective(std::move(s), n);
  return llvm::Error::success();
}

llvm::Error lowerAllReduce(Lowering &l, const Node &n) {
  CollectiveStep s;
  s.bucket = l.nextBucket();
  s.dtype = n.operand(0)->dtype();
  uint64_t total = 0;
  for (unsigned i = 0; i < n.numOperands(); ++i) {
    uint64_t bytes = n.operand(i)->type().byteSize();
    s.sources.push_back(l.bufferOf(n.operand(i)));
    s.offsets.push_back(total);
    s.sizes.push_back(bytes);
    total += arenaAligned(bytes);
  }
  s.staging = l.temp(std::max<uint64_t>(total, 1), "all-reduce bucket " + std::to_string(s.bucket));
  s.count = total / dtypeSize(s.dtype);
  for (unsigned i = 0; i < n.numResults(); ++i)
    l.bind(n.result(i), BufferRef{s.staging.buffer, s.staging.offset + s.offsets[i]});
  l.setBucketBytes(static_cast<uint64_t>(n.attrInt("bucket_bytes")));
  l.addCollective(std::move(s), n);
  return llvm::Error::success();
}

} // namespace

void registerCollectiveLowerings(LoweringRegistry &r) {
  r.op(OpKind::AllReduce, lowerAllReduce);
  for (OpKind k : {OpKind::ReduceScatter, OpKind::AllGather, OpKind::RankShard})
    r.op(k, lowerSharded);
}

} // namespace dlc::codegen
