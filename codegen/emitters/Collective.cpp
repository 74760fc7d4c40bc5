//===- Collective.cpp - All-reduce of a bucket of gradients ----------------===//
//
// AllReduce(g1..gk) becomes one AllReduceStep: the gradients are packed into one
// arena buffer (each at an arena-aligned offset, so that kernels reading them keep
// their vector loads), and the results are views into that buffer, which the runtime
// averages over the ranks. The optimizer reads the averaged gradients in place; the
// wait comes right before the first step that reads the bucket
// (Lowering::addCollectiveWaits).
//===----------------------------------------------------------------------===//
#include "EmitterUtils.h"

#include "../MemoryPlan.h"

namespace dlc::codegen {

using namespace ir;

llvm::Error lowerCollective(Lowering &l, const Node &n) {
  if (n.kind() != OpKind::AllReduce)
    return errorf("no lowering for {0}", n.opName());
  AllReduceStep s;
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
  l.addAllReduce(std::move(s), n);
  return llvm::Error::success();
}

} // namespace dlc::codegen
