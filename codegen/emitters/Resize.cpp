//===- Resize.cpp - Resampling through compile-time tap tables -------------===//
//
// The taps (input index and weight per output coordinate and dim) come from
// ir::resizeTapTable, the same function the reference uses, and are stored as
// constant tables; the resize template sums the separable product of the taps.
//===----------------------------------------------------------------------===//
#include "../Library.h"
#include "EmitterUtils.h"
#include "dlc/ir/OpHelpers.h"

#include <cstddef>
#include <cstring>

namespace dlc::codegen {

using namespace ir;

static llvm::Error lowerResize(Lowering &l, const Node &n) {
  const Value *x = n.operand(0), *y = n.result();
  int64_t rank = x->rank(), total = y->type().numElements();
  l.allocate(y);
  if (!total)
    return llvm::Error::success();
  if (rank > kMaxRank)
    return errorf("Resize of rank {0} (code generation handles up to {1} dims)", rank, kMaxRank);
  auto table = resizeTapTable(n);
  size_t maxTaps = 1;
  for (const auto &dim : table)
    for (const auto &t : dim)
      maxTaps = std::max(maxTaps, t.size());
  ResizeShape s{};
  s.total = total;
  s.rank = rank;
  s.maxTaps = static_cast<int64_t>(maxTaps);
  s.extrapolation = n.attrFloat("extrapolation_value");
  Shape st = stridesOf(x->shape());
  LaunchArgs a;
  std::vector<std::pair<size_t, BufferRef>> tables;
  auto i32 = [](const std::vector<int32_t> &v) {
    Tensor t(TensorType(DType::I32, {static_cast<int64_t>(v.size())}));
    std::memcpy(t.mutableRaw(), v.data(), v.size() * 4);
    return t;
  };
  for (int64_t d = 0; d < rank; ++d) {
    int64_t od = y->shape()[d];
    std::vector<int32_t> idx(od * maxTaps, 0), cnt(od);
    std::vector<float> w(od * maxTaps, 0.f);
    for (int64_t o = 0; o < od; ++o) {
      cnt[o] = static_cast<int32_t>(table[d][o].size());
      for (size_t t = 0; t < table[d][o].size(); ++t) {
        idx[o * maxTaps + t] = static_cast<int32_t>(table[d][o][t].index);
        w[o * maxTaps + t] = static_cast<float>(table[d][o][t].weight);
      }
    }
    std::string tag = y->name() + ".taps" + std::to_string(d);
    tables.push_back(
        {offsetof(ResizeShape, idx) + 8 * d, l.constantBuffer(i32(idx), tag + ".index")});
    tables.push_back(
        {offsetof(ResizeShape, w) + 8 * d,
         l.constantBuffer(
             Tensor::fromVector(TensorType(DType::F32, {static_cast<int64_t>(w.size())}), w),
             tag + ".weight")});
    tables.push_back(
        {offsetof(ResizeShape, cnt) + 8 * d, l.constantBuffer(i32(cnt), tag + ".count")});
    s.xStride[d] = st[d];
    s.outDim[d] = Divmod::make(od);
  }
  a.shape(s);
  for (const auto &[offset, ref] : tables)
    a.pointer(offset, ref, 0, false);
  a.pointer(offsetof(ResizeShape, x), l.bufferOf(x), x->type().byteSize(), false);
  a.pointer(offsetof(ResizeShape, y), l.bufferOf(y), y->type().byteSize(), true);
  Instantiation inst{"dlc::resize",
                     {l.indexType(std::max(total, x->type().numElements())), cudaType(y->dtype())},
                     "dlc::ResizeShape",
                     {}};
  uint32_t k = l.instantiate(inst);
  l.launch(n, k, a, gridFor(total, 256), 256);
  return llvm::Error::success();
}

void registerResizeLowerings(LoweringRegistry &r) {
  r.op(OpKind::Resize, lowerResize);
}

} // namespace dlc::codegen
