//===- Attention.cpp - Fused multi-head attention ---------------------------===//
//
// An attention group (the fusion pass's record: the second MatMul anchors, its core
// is the first MatMul, the score chain and the Softmax) as the attention template
// of dlc_attention.cuh: Q, K and V read through load functors
// (the head split's slices, reshapes and transposes), the score chain f as a functor
// of the raw score, the output through the epilogue (the head merge).
//===----------------------------------------------------------------------===//
#include "../Fused.h"
#include "EmitterUtils.h"
#include "dlc/codegen/GpuModel.h"

namespace dlc::codegen {

using namespace ir;

namespace {

llvm::Error lowerAttention(Lowering &l, const FusionGroup &g) {
  const Node &mm2 = *g.anchor, &mm1 = *g.core.front(), &softmax = *g.core.back();
  const Value *q = mm1.operand(0), *k = mm1.operand(1), *v = mm2.operand(1), *out = mm2.result();
  const Value *scores = mm1.result(), *logits = softmax.operand(0);
  const Shape &ss = scores->shape();
  int64_t rank = scores->rank();
  AttentionShape s{};
  s.Sq = ss[rank - 2];
  s.Sk = ss[rank - 1];
  s.hd = q->shape()[rank - 1];
  s.hdv = v->shape()[rank - 1];
  s.BH = 1;
  for (int64_t d = 0; d < rank - 2; ++d)
    s.BH *= ss[d];
  s.dHd = Divmod::make(s.hd);
  s.dHdv = Divmod::make(s.hdv);
  l.allocate(out);
  if (s.BH * s.Sq * s.hdv == 0)
    return llvm::Error::success();
  auto fq = loadFunctor(l, &g, q), fk = loadFunctor(l, &g, k), fv = loadFunctor(l, &g, v),
       fs = boundFunctor(l, &g, logits, scores), fo = storeFunctor(l, &g, out);
  for (auto *f : {&fq, &fk, &fv, &fs, &fo})
    if (!*f)
      return f->takeError();
  std::string qn = l.functorName(*fq), kn = l.functorName(*fk), vn = l.functorName(*fv),
              sn = l.functorName(*fs), on = l.functorName(*fo);
  int64_t maxIndex =
      std::max({q->type().numElements(), k->type().numElements(), v->type().numElements(),
                out->type().numElements(), s.BH * s.Sq * s.Sk});
  // A warp per query row; 4 rows per block share the staged K/V tiles, unless that
  // leaves SMs idle on the largest target (then 2 or 1).
  int64_t sms = 0;
  for (const std::string &a : l.archs())
    sms = std::max<int64_t>(sms, gpuModelFor(a).sms);
  int warps = 4;
  while (warps > 1 && ((s.Sq + warps - 1) / warps) * s.BH < sms)
    warps /= 2;
  Instantiation inst{"dlc::attention",
                     {std::to_string(warps), std::to_string((s.hd + 31) / 32),
                      std::to_string((s.hdv + 31) / 32), l.indexType(maxIndex), qn, kn, vn, sn, on},
                     "dlc::AttentionArgs<" + qn + ", " + kn + ", " + vn + ", " + sn + ", " + on +
                         ">",
                     {qn, kn, vn, sn, on}};
  inst.needsSync = true;
  uint32_t kernel = l.instantiate(inst);
  LaunchArgs a;
  a.shape(s);
  for (const Functor *f : {&*fq, &*fk, &*fv, &*fs, &*fo})
    a.functor(*f);
  constexpr int kKeys = 32;
  double flops = 2.0 * static_cast<double>(s.BH * s.Sq * s.Sk) * static_cast<double>(s.hd + s.hdv) +
                 5.0 * static_cast<double>(s.BH * s.Sq * s.Sk);
  l.launch(mm2, kernel, a, static_cast<uint32_t>((s.Sq + warps - 1) / warps),
           32 * static_cast<uint32_t>(warps),
           static_cast<uint32_t>(kKeys * (s.hd + s.hdv) * sizeof(float)), flops,
           static_cast<uint32_t>(s.BH));
  return llvm::Error::success();
}

} // namespace

void registerAttentionLowerings(LoweringRegistry &r) {
  r.group(GroupKind::Attention, lowerAttention);
}

} // namespace dlc::codegen
