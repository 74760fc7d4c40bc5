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
#include "dlc/ir/FusionRules.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <optional>
#include <set>

namespace dlc::codegen {

using namespace ir;

namespace {

constexpr int kCudaCoreKeys = 32; // dlc_attention.cuh: kAttentionKeys

/// The attention's FLOPs: both products, and about 5 per score (chain, softmax).
double flops(const AttentionShape &s) {
  return 2.0 * static_cast<double>(s.BH * s.Sq * s.Sk) * static_cast<double>(s.hd + s.hdv) +
         5.0 * static_cast<double>(s.BH * s.Sq * s.Sk);
}

/// An operand as attention_mma reads it (rows of contiguous values), and where.
struct MmaOperand {
  AttentionOperand o{};
  BufferRef at;
  bool packed = false;
  int64_t sourceElements = 0;
};

/// Operand x ([batch..., rows, cols], or [batch..., cols, rows] when `transposed`: K')
/// as a strided view of a value the group does not compute, whose values are
/// contiguous, every row 16-byte aligned, its batch dims at most two strided ones
/// after merging contiguous neighbours; or, where it is not that, `packed`: the
/// [BH, rows, cols] layout attention_pack writes (the caller gives it its buffer).
MmaOperand mmaOperand(Lowering &l, const Value *x, bool transposed, int64_t BH) {
  const Shape &xs = x->shape();
  const int64_t r = x->rank(), es = static_cast<int64_t>(dtypeSize(x->dtype()));
  const int64_t rowDim = transposed ? r - 1 : r - 2, colDim = transposed ? r - 2 : r - 1;
  MmaOperand m;
  auto a = stridedAccess(l, x);
  if (a && a->source->dtype() == x->dtype() && fixedAligned(l, a->source, 16) &&
      a->strides[static_cast<size_t>(colDim)] == 1 && a->offset >= 0) {
    bool ok = true;
    for (int64_t d = 0; d < r - 2; ++d)
      ok &= a->strides[static_cast<size_t>(d)] >= 0;
    const auto batch = mergeBatchDims(xs, a->strides, static_cast<size_t>(r - 2));
    const int64_t sRow = a->strides[static_cast<size_t>(rowDim)];
    ok &= batch.size() <= 2 && sRow >= 0;
    for (int64_t st : {sRow, a->offset, batch.empty() ? 0 : batch.back().second,
                       batch.size() == 2 ? batch[0].second : 0})
      ok &= (st * es) % 16 == 0;
    if (ok) {
      m.o.sRow = sRow;
      m.o.sInner = batch.empty() ? 0 : batch.back().second;
      m.o.sOuter = batch.size() == 2 ? batch[0].second : 0;
      m.o.dInner = Divmod::make(batch.empty() ? 1 : batch.back().first);
      m.at = l.bufferOf(a->source);
      m.at.offset += static_cast<uint64_t>(a->offset * es);
      m.sourceElements = a->source->type().numElements();
      return m;
    }
  }
  const int64_t rows = xs[rowDim], cols = xs[colDim];
  m.packed = true;
  m.o.sRow = cols;
  m.o.sInner = rows * cols;
  m.o.sOuter = 0;
  m.o.dInner = Divmod::make(BH);
  m.sourceElements = BH * rows * cols;
  return m;
}

/// attention_mma's configuration for one attention.
struct MmaPlan {
  int64_t HD, HDV;
  int warps, keys;
  bool tf32 = false; // FP32 operands on TF32 (4-byte elements in shared memory)
};

/// attention_mma where it applies and the model prices it faster than the CUDA-core
/// kernel on every target: FP16/BF16 operands, head sizes whole 16-byte chunks of at
/// most 256 values. `packs`: how many operands attention_pack must write first.
std::optional<MmaPlan> mmaPlan(Lowering &l, const FusionGroup &g, const AttentionShape &s,
                               int64_t sms, int packs) {
  const DType dt = g.core.front()->operand(0)->dtype();
  MmaPlan p;
  // FP32 on TF32 where TF32 is on (the inference default on sm_80+, as for GEMMs).
  p.tf32 = dt == DType::F32 && l.options().tf32;
  if ((dt != DType::F16 && dt != DType::BF16 && !p.tf32) || s.hd % 8 != 0 || s.hdv % 8 != 0)
    return std::nullopt;
  p.HD = (s.hd + 15) / 16 * 16;
  p.HDV = (s.hdv + 15) / 16 * 16;
  const int64_t most = p.tf32 ? 128 : 256;
  if (p.HD > most || p.HDV > most || l.options().attentionKernel == "cuda-core")
    return std::nullopt;
  // Head sizes above 128 (FP32: 64): 2 warps and 32 keys per tile, to keep the two K/V
  // stages within the 99 KB of shared memory a block may have on sm_86/sm_89 (and the
  // accumulators within the registers); else 4 warps and 64 keys, halved while that
  // leaves SMs idle on the largest target.
  const bool wide = std::max(p.HD, p.HDV) > (p.tf32 ? 64 : 128);
  p.warps = wide ? 2 : 4;
  p.keys = wide ? 32 : 64;
  while (p.warps > 1 && (s.Sq + 16 * p.warps - 1) / (16 * p.warps) * s.BH < sms)
    p.warps /= 2;
  if (l.options().attentionKernel == "mma")
    return p;
  // The model's comparison. The CUDA-core kernel issues about 30 + (hd + hdv) / 4 warp
  // instructions per (query, key) pair (63 at head size 64, read from its sm_90 SASS),
  // 4 per clock per SM at best; attention_mma runs its padded products at half the
  // mma.sync rate (its softmax between them), over the SMs its blocks fill, after
  // attention_pack where an operand needs it (a launch, and its operands read and
  // written once); its pipeline takes a DRAM round trip to fill and one per key tile
  // (a block's first tile and its copies' wait), which decides at small shapes, where
  // either kernel is a launch and a few loads (GPT-2 small's 16 x 16 scores: the
  // CUDA-core kernel).
  const double pairs = static_cast<double>(s.BH * s.Sq * s.Sk);
  const double es = p.tf32 ? 4.0 : 2.0;
  const double packBytes =
      packs ? 2.0 * es * static_cast<double>(s.BH * (s.Sq + 2 * s.Sk) * std::max(s.hd, s.hdv))
            : 0.0;
  const double blocks = static_cast<double>((s.Sq + 16 * p.warps - 1) / (16 * p.warps) * s.BH);
  for (const std::string &arch : l.archs()) { // (sm_90 where the targets name none)
    const GpuModel &m = gpuModelFor(arch);
    const double launch = m.launchMicros * 1e-6;
    const double tCuda = launch + pairs * (30.0 + static_cast<double>(s.hd + s.hdv) / 4.0) /
                                      (static_cast<double>(m.sms) * 4.0 * m.clockHz);
    const double fill = std::min(1.0, blocks / static_cast<double>(m.sms));
    const double tiles = static_cast<double>((s.Sk + p.keys - 1) / p.keys);
    const double tMma = (packs ? 2.0 : 1.0) * launch +
                        (1.0 + tiles) * m.dramLatencyCycles / m.clockHz +
                        packBytes / (m.dramBytesPerSecond * m.dramAchievable) +
                        2.0 * pairs * static_cast<double>(p.HD + p.HDV) /
                            (0.5 * m.tensorFlops * m.mmaSyncFraction * fill) *
                            (p.tf32 ? 2.0 : 1.0); // (TF32: half the FP16 rate)
    if (tMma >= tCuda)
      return std::nullopt;
  }
  return p;
}

/// attention_mma for shape s (its operand pointers at `at`): the score chain functor
/// fsc (applied where `chain`, else only a type), the output through fo, each row's
/// log-sum-exp to `lse` where not null.
void launchAttentionMma(Lowering &l, const Node &n, const AttentionShape &s, const MmaPlan &p,
                        const std::string &index, DType dt, bool chain, bool causal,
                        const Functor &fsc, const Functor &fo, const std::array<BufferRef, 3> &at,
                        const Value *lse, const Value *bias, const Value *step) {
  const std::string mt = cudaType(dt);
  const size_t es = dtypeSize(dt);
  const int64_t rows[3] = {s.Sq, s.Sk, s.Sk}, cols[3] = {s.hd, s.hd, s.hdv};
  const int64_t bm = 16 * p.warps, eb = static_cast<int64_t>(es); // (element bytes)
  const int smem =
      static_cast<int>(bm * (eb * p.HD + 16) + 2 * p.keys * ((eb * p.HD + 16) + (eb * p.HDV + 16)));
  std::string sn = l.functorName(fsc), on = l.functorName(fo);
  const std::string tile = "dlc::AttentionMmaTile<" + std::to_string(p.HD) + ", " +
                           std::to_string(p.HDV) + ", " + std::to_string(p.warps) + ", " +
                           std::to_string(p.keys) + (p.tf32 ? ", 4>" : ">");
  Instantiation inst{"dlc::attention_mma",
                     {tile, index, mt, chain ? "true" : "false", causal ? "true" : "false",
                      bias ? "true" : "false", step ? "true" : "false", sn, on},
                     "dlc::AttentionMmaArgs<" + sn + ", " + on + ">",
                     {sn, on}};
  inst.needsSync = true;
  inst.tensorCore = true;
  inst.tf32 = p.tf32;
  uint32_t kernel = l.instantiate(inst);
  LaunchArgs a;
  a.shape(s);
  const size_t field[3] = {offsetof(AttentionShape, q), offsetof(AttentionShape, k),
                           offsetof(AttentionShape, v)};
  for (int j = 0; j < 3; ++j)
    a.pointer(field[j] + offsetof(AttentionOperand, p), at[static_cast<size_t>(j)],
              static_cast<uint64_t>(s.BH * rows[j] * cols[j]) * es, false);
  if (lse)
    a.pointer(offsetof(AttentionShape, lse), l.bufferOf(lse), lse->type().byteSize(), true);
  if (bias)
    a.pointer(offsetof(AttentionShape, bias) + offsetof(AttentionOperand, p), l.bufferOf(bias),
              bias->type().byteSize(), false);
  if (step)
    a.pointer(offsetof(AttentionShape, step), l.bufferOf(step), step->type().byteSize(), false);
  a.functor(fsc, chain);
  a.functor(fo);
  // (The products of the key tiles a causal mask skips are not counted.)
  double visited = 0;
  for (int64_t q0 = 0; q0 < s.Sq; q0 += bm) {
    const int64_t last = std::min(q0 + bm, s.Sq) - 1,
                  keys = std::min(s.Sk, std::max<int64_t>(0, last + s.keyReach + 1));
    visited += static_cast<double>((last - q0 + 1) *
                                   std::min(s.Sk, (keys + p.keys - 1) / p.keys * p.keys));
  }
  l.launch(n, kernel, a, static_cast<uint32_t>((s.Sq + bm - 1) / bm),
           32 * static_cast<uint32_t>(p.warps), static_cast<uint32_t>(smem),
           flops(s) * visited / static_cast<double>(s.Sq * s.Sk), static_cast<uint32_t>(s.BH));
}

/// attention_pack for the operands that need it, then attention_mma.
llvm::Error lowerAttentionMma(Lowering &l, const FusionGroup &g, AttentionShape s, const MmaPlan &p,
                              MmaOperand ops[3], const std::vector<const Functor *> &f,
                              int64_t maxIndex) {
  const Node &mm2 = *g.anchor, &mm1 = *g.core.front();
  const std::string mt = cudaType(mm1.operand(0)->dtype());
  const size_t es = dtypeSize(mm1.operand(0)->dtype());
  const int64_t rows[3] = {s.Sq, s.Sk, s.Sk}, cols[3] = {s.hd, s.hd, s.hdv};
  const std::string name = mm2.result()->name();
  const char *suffix[3] = {".q_packed", ".k_packed", ".v_packed"};
  for (int j = 0; j < 3; ++j) {
    maxIndex = std::max(maxIndex, ops[j].sourceElements);
    if (ops[j].packed)
      ops[j].at = l.temp(static_cast<uint64_t>(s.BH * rows[j] * cols[j]) * es, name + suffix[j]);
  }
  if (ops[0].packed || ops[1].packed || ops[2].packed) {
    AttentionPackShape ps{};
    for (int j = 0; j < 3; ++j)
      ps.n[j] = ops[j].packed ? s.BH * rows[j] * cols[j] : 0;
    ps.Sk = s.Sk;
    ps.hd = s.hd;
    ps.dKd = Divmod::make(s.hd);
    ps.dKs = Divmod::make(s.Sk);
    std::string qn = l.functorName(*f[0]), kn = l.functorName(*f[1]), vn = l.functorName(*f[2]);
    Instantiation inst{"dlc::attention_pack",
                       {l.indexType(maxIndex), mt, qn, kn, vn},
                       "dlc::AttentionPackArgs<" + qn + ", " + kn + ", " + vn + ">",
                       {qn, kn, vn}};
    uint32_t kernel = l.instantiate(inst);
    LaunchArgs a;
    a.shape(ps);
    for (int j = 0; j < 3; ++j)
      if (ops[j].packed)
        a.pointer(offsetof(AttentionPackShape, out) + j * sizeof(void *), ops[j].at,
                  static_cast<uint64_t>(ps.n[j]) * es, true);
    for (int j = 0; j < 3; ++j)
      a.functor(*f[j], ops[j].packed);
    const uint64_t most = static_cast<uint64_t>(std::max({ps.n[0], ps.n[1], ps.n[2]}));
    l.launch(mm2, kernel, a, gridFor(most, 256), 256, 0, 0, 3);
  }
  const AttentionMask causal = attentionCausalMask(g.core, s.Sq, s.Sk);
  s.keyReach = causal.reach;
  s.q = ops[0].o;
  s.k = ops[1].o;
  s.v = ops[2].o;
  s.q.p = s.k.p = s.v.p = nullptr;
  // (core: MatMul, the chain, Softmax)
  const std::optional<AttentionChain> scale = attentionChain(g.core, causal.nodes);
  const bool chain = !scale;
  s.scale = scale ? scale->scale : 1.0f;
  // (An exact causal mask the kernel applies itself: keys past query + keyReach.)
  const bool applyCausal = !chain && causal.exact;
  std::array<BufferRef, 3> at = {ops[0].at, ops[1].at, ops[2].at};
  const size_t ownFrom = l.stepCount();
  launchAttentionMma(l, mm2, s, p, l.indexType(maxIndex), mm1.operand(0)->dtype(), chain,
                     applyCausal, *f[3], *f[4], at, nullptr, nullptr, nullptr);
  // cuDNN's scaled-dot-product attention as a tactic beside attention_mma, where it reads
  // the operands as they are: FP16/BF16 views (no attention_pack), a constant scale, no
  // mask or a top-left causal one, head sizes multiples of 8 up to 128. It writes the
  // output itself when that is the group's result; otherwise attention_finish stores
  // its result through the group's output functor.
  const DType dt = mm1.operand(0)->dtype();
  const bool noMask = s.keyReach >= s.Sk, topLeft = applyCausal && s.keyReach == 0;
  if (!l.options().vendorTactics || (dt != DType::F16 && dt != DType::BF16) || p.tf32 || chain ||
      !(noMask || topLeft) || ops[0].packed || ops[1].packed || ops[2].packed || s.hd % 8 ||
      s.hdv % 8 || s.hd > 128 || s.hdv > 128)
    return llvm::Error::success();
  // One [b, h] split of BH for all four tensors: Q's (its batch dims, or BH heads); an
  // operand with one batch dim of BH, or none (BH = 1), fits any.
  const int64_t heads = ops[0].o.dInner.d;
  CudnnSdpaStep a;
  a.dtype = dt;
  a.h = heads;
  a.b = s.BH / heads;
  a.sq = s.Sq;
  a.sk = s.Sk;
  a.d = s.hd;
  a.dv = s.hdv;
  a.scale = s.scale;
  a.causal = topLeft;
  std::array<int64_t, 4> *strides[3] = {&a.qStrides, &a.kStrides, &a.vStrides};
  for (int j = 0; j < 3; ++j) {
    const AttentionOperand &o = ops[j].o;
    if (o.dInner.d == heads)
      *strides[j] = {o.sOuter, o.sInner, o.sRow, 1};
    else if (o.dInner.d == s.BH)
      *strides[j] = {heads * o.sInner, o.sInner, o.sRow, 1};
    else if (s.BH == 1)
      *strides[j] = {0, 0, o.sRow, 1};
    else
      return llvm::Error::success();
  }
  a.q = ops[0].at;
  a.k = ops[1].at;
  a.v = ops[2].at;
  const Value *out = mm2.result();
  const uint64_t oBytes = static_cast<uint64_t>(s.BH * s.Sq * s.hdv) * es;
  const bool direct =
      g.root() == &mm2 && out->dtype() == dt && fixedAligned(l, out, 16) && !l.isInterface(out);
  a.o = direct ? l.bufferOf(out) : l.temp(oBytes, name + ".cudnn_o");
  a.oStrides = {heads * s.Sq * s.hdv, s.Sq * s.hdv, s.hdv, 1};
  a.workspaceBytes = 8 << 20;
  a.workspace = l.temp(a.workspaceBytes, name + ".cudnn_workspace");
  const uint32_t group = l.newAltGroup();
  l.markAlt(ownFrom, group, 1, pkg::TacticKind::Dlc,
            "attention_mma " + std::to_string(p.HD) + "/" + std::to_string(p.HDV) + ", " +
                std::to_string(p.warps) + " warps, " + std::to_string(p.keys) + " keys");
  const size_t vendorFrom = l.stepCount();
  l.addCudnnSdpa(a, mm2);
  if (!direct) {
    AttentionFinishShape fs{};
    fs.total = s.BH * s.Sq * s.hdv;
    const std::string on = l.functorName(*f[4]);
    uint32_t k = l.instantiate({"dlc::attention_finish",
                                {l.indexType(std::max(maxIndex, fs.total)), mt, on},
                                "dlc::AttentionFinishArgs<" + on + ">",
                                {on}});
    LaunchArgs fa;
    fa.shape(fs);
    fa.pointer(offsetof(AttentionFinishShape, o), a.o, oBytes, false);
    fa.functor(*f[4]);
    l.launch(mm2, k, fa, gridFor(static_cast<uint64_t>(fs.total), 256), 256, 0,
             static_cast<double>(fs.total));
  }
  l.markAlt(vendorFrom, group, 2, pkg::TacticKind::Cudnn,
            std::string("cuDNN graph API: scaled-dot-product attention") +
                (topLeft ? " (causal)" : "") +
                (direct ? "" : ", then attention_finish (the fused output)"));
  return llvm::Error::success();
}

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
  int64_t sms = 0;
  for (const std::string &a : l.archs())
    sms = std::max<int64_t>(sms, gpuModelFor(a).sms);
  {
    const Value *q = mm1.operand(0), *k = mm1.operand(1), *v = mm2.operand(1);
    MmaOperand ops[3] = {mmaOperand(l, q, false, s.BH), mmaOperand(l, k, true, s.BH),
                         mmaOperand(l, v, false, s.BH)};
    const int packs = ops[0].packed + ops[1].packed + ops[2].packed;
    if (auto plan = mmaPlan(l, g, s, sms, packs))
      return lowerAttentionMma(l, g, s, *plan, ops, {&*fq, &*fk, &*fv, &*fs, &*fo}, maxIndex);
  }
  // A warp per query row; 4 rows per block share the staged K/V tiles, unless that
  // leaves SMs idle on the largest target (then 2 or 1).
  int warps = 4;
  while (warps > 1 && ((s.Sq + warps - 1) / warps) * s.BH < sms)
    warps /= 2;
  // Split-KV where the rows leave most SMs idle (decoding's one query row): slices of
  // at least 128 keys, enough of them for 16 warps per SM on the largest target (its
  // loads are latency-bound: warps hide it).
  const int64_t blocks = (s.Sq + warps - 1) / warps * s.BH;
  int64_t splits = 1;
  if (blocks * 2 < sms && s.Sk >= 256) {
    splits = std::min((16 * sms + blocks * warps - 1) / (blocks * warps), s.Sk / 128);
    s.splitKeys = (s.Sk + splits - 1) / splits;
    s.splitKeys = (s.splitKeys + kCudaCoreKeys - 1) / kCudaCoreKeys * kCudaCoreKeys;
    splits = (s.Sk + s.splitKeys - 1) / s.splitKeys;
  }
  const bool split = splits > 1;
  s.splits = splits;
  const std::string index =
      l.indexType(std::max<int64_t>(maxIndex, splits * s.BH * s.Sq * (s.hdv + 2)));
  const uint64_t partialBytes =
      split ? static_cast<uint64_t>(splits * s.BH * s.Sq * (s.hdv + 2)) * sizeof(float) : 0;
  std::optional<BufferRef> partial;
  if (split)
    partial = l.temp(partialBytes, mm2.result()->name() + ".split_kv");
  Instantiation inst{
      "dlc::attention",
      {std::to_string(warps), std::to_string((s.hd + 31) / 32), std::to_string((s.hdv + 31) / 32),
       split ? "true" : "false", index, qn, kn, vn, sn, on},
      "dlc::AttentionArgs<" + qn + ", " + kn + ", " + vn + ", " + sn + ", " + on + ">",
      {qn, kn, vn, sn, on}};
  inst.needsSync = true;
  uint32_t kernel = l.instantiate(inst);
  LaunchArgs a;
  a.shape(s);
  if (split)
    a.pointer(offsetof(AttentionShape, partial), *partial, partialBytes, true);
  for (const Functor *f : {&*fq, &*fk, &*fv, &*fs})
    a.functor(*f);
  a.functor(*fo, !split);
  l.launch(mm2, kernel, a, static_cast<uint32_t>((s.Sq + warps - 1) / warps),
           32 * static_cast<uint32_t>(warps),
           static_cast<uint32_t>(kCudaCoreKeys * (s.hd + s.hdv) * sizeof(float)), flops(s),
           static_cast<uint32_t>(s.BH), static_cast<uint32_t>(splits));
  if (split) {
    Instantiation comb{
        "dlc::attention_combine", {index, on}, "dlc::AttentionCombineArgs<" + on + ">", {on}};
    uint32_t ck = l.instantiate(comb);
    LaunchArgs c;
    c.shape(s);
    c.pointer(offsetof(AttentionShape, partial), *partial, partialBytes, false);
    c.functor(*fo);
    l.launch(mm2, ck, c, gridFor(static_cast<uint64_t>(s.BH * s.Sq * s.hdv), 256), 256, 0,
             3.0 * static_cast<double>(splits * s.BH * s.Sq * s.hdv));
  }
  return llvm::Error::success();
}

//===----------------------------------------------------------------------===//
// FlashAttention and FlashAttentionGrad (training: passes' flashAttentionForGradients)
//===----------------------------------------------------------------------===//

/// The dims of a FlashAttention node's operands.
AttentionShape flashShape(const Node &n) {
  const Value *q = n.operand(0), *k = n.operand(1), *v = n.operand(2);
  const int64_t r = q->rank();
  AttentionShape s{};
  s.Sq = q->shape()[r - 2];
  s.Sk = k->shape()[r - 2];
  s.hd = q->shape()[r - 1];
  s.hdv = v->shape()[r - 1];
  s.BH = product(Shape(q->shape().begin(), q->shape().end() - 2));
  s.dHd = Divmod::make(std::max<int64_t>(s.hd, 1));
  s.dHdv = Divmod::make(std::max<int64_t>(s.hdv, 1));
  s.scale = static_cast<float>(n.attrFloat("scale"));
  s.keyReach = n.attrInt("causal") ? n.attrInt("reach") : s.Sk;
  return s;
}

/// The additive bias operand of a FlashAttention node (operand i), or null; `s.bias`
/// (or bias) describes its view.
const Value *flashBias(const Node &n, unsigned i, AttentionShape &s) {
  if (n.numOperands() <= i || !n.operand(i))
    return nullptr;
  Shape scores(n.operand(0)->shape().begin(), n.operand(0)->shape().end() - 1);
  scores.push_back(s.Sk);
  const AttentionBiasView v = *attentionBiasView(n.operand(i)->shape(), scores);
  s.bias = AttentionOperand{nullptr, v.outer, v.inner, v.row, Divmod::make(v.innerCount)};
  return n.operand(i);
}

/// The step operand of a FlashAttention node with dropout (operand i), or null; sets
/// s's seed and ratio.
const Value *flashDropout(const Node &n, unsigned i, AttentionShape &s) {
  const float ratio = n.attrFloat("dropout");
  if (!(ratio > 0) || n.numOperands() <= i || !n.operand(i))
    return nullptr;
  s.seed = n.attrInt("seed");
  s.dropout = ratio;
  s.dropScale = 1.0f / (1.0f - ratio);
  return n.operand(i);
}

/// The kernels' limits: whole 16-byte chunks of head values, at most `most`.
llvm::Error flashLimits(const Node &n, const AttentionShape &s, int64_t most) {
  if (s.hd % 8 != 0 || s.hdv % 8 != 0 || s.hd == 0 || s.hdv == 0 || s.hd > most || s.hdv > most)
    return errorf("{0}: head sizes {1} and {2} must be multiples of 8 up to {3}", n.describe(),
                  s.hd, s.hdv, most);
  if (s.BH > kMaxAttentionBatchHeads) // (a grid's y dimension)
    return errorf("{0}: {1} (batch, head) pairs, at most {2}", n.describe(), s.BH,
                  kMaxAttentionBatchHeads);
  return llvm::Error::success();
}

/// A value's buffer where it is 16-byte aligned, else (an interface value, aligned to
/// its element only) a copy in a temporary.
BufferRef alignedIn(Lowering &l, const Node &n, const Value *v) {
  if (fixedAligned(l, v, 16))
    return l.bufferOf(v);
  const BufferRef t = l.temp(v->type().byteSize(), v->name() + ".aligned");
  l.addCopy(l.bufferOf(v), t, v->type().byteSize(), n);
  return t;
}

/// Warps per block (16 rows each): 4, halved while the blocks would leave SMs idle on
/// the largest target.
int flashWarps(Lowering &l, int64_t rows, int64_t BH) {
  int64_t sms = 0;
  for (const std::string &a : l.archs())
    sms = std::max<int64_t>(sms, gpuModelFor(a).sms);
  int warps = 4;
  while (warps > 1 && (rows + 16 * warps - 1) / (16 * warps) * BH < sms)
    warps /= 2;
  return warps;
}

/// The fraction of (query, key) pairs a causal mask leaves (1 without one).
double flashVisited(const AttentionShape &s) {
  if (s.keyReach >= s.Sk || s.Sq * s.Sk == 0)
    return 1.0;
  double seen = 0;
  for (int64_t q = 0; q < s.Sq; ++q)
    seen += static_cast<double>(std::clamp<int64_t>(q + s.keyReach + 1, 0, s.Sk));
  return seen / static_cast<double>(s.Sq * s.Sk);
}

/// FlashAttention: attention_mma without a chain functor (the scale folded into its
/// exp2, the causal mask applied by the kernel), its output through a plain store, and
/// each row's log-sum-exp for the gradient.
llvm::Error lowerFlashAttention(Lowering &l, const Node &n) {
  const Value *o = n.result(0), *lse = n.result(1);
  l.allocate(o);
  l.allocate(lse);
  AttentionShape s = flashShape(n);
  if (auto e = flashLimits(n, s, kMaxAttentionHeadSize))
    return e;
  if (s.BH * s.Sq == 0)
    return llvm::Error::success();
  const DType dt = n.operand(0)->dtype();
  const int64_t HD = (s.hd + 15) / 16 * 16, HDV = (s.hdv + 15) / 16 * 16;
  const bool wide = std::max(HD, HDV) > 128;
  const int warps = wide ? 2 : flashWarps(l, s.Sq, s.BH), keys = wide ? 32 : 64;
  const int64_t rows[3] = {s.Sq, s.Sk, s.Sk}, cols[3] = {s.hd, s.hd, s.hdv};
  AttentionOperand *ops[3] = {&s.q, &s.k, &s.v};
  std::array<BufferRef, 3> at;
  for (int j = 0; j < 3; ++j) {
    *ops[j] = AttentionOperand{nullptr, 0, rows[j] * cols[j], cols[j], Divmod::make(s.BH)};
    at[static_cast<size_t>(j)] = alignedIn(l, n, n.operand(j));
  }
  auto fsc = loadFunctor(l, nullptr, n.operand(0)); // (a type: no chain to apply)
  auto fo = storeFunctor(l, nullptr, o);
  if (!fsc)
    return fsc.takeError();
  if (!fo)
    return fo.takeError();
  const MmaPlan p{HD, HDV, warps, keys};
  const Value *bias = flashBias(n, 3, s), *step = flashDropout(n, 4, s);
  launchAttentionMma(
      l, n, s, p,
      l.indexType(std::max({s.BH * s.Sq * s.hd, s.BH * s.Sk * s.hd, s.BH * s.Sk * s.hdv,
                            s.BH * s.Sq * s.hdv, bias ? bias->type().numElements() : 0})),
      dt, false, s.keyReach < s.Sk, *fsc, *fo, at, lse, bias, step);
  return llvm::Error::success();
}

/// FlashAttentionGrad: attention_grad_prep, then attention_grad_mma for dQ and for dK
/// and dV (dlc_attention.cuh).
llvm::Error lowerFlashAttentionGrad(Lowering &l, const Node &n) {
  const Value *dq = n.result(0), *dk = n.result(1), *dv = n.result(2);
  for (const Value *r : {dq, dk, dv})
    l.allocate(r);
  AttentionShape fs = flashShape(n);
  const Value *bias = flashBias(n, 6, fs), *step = flashDropout(n, 7, fs);
  if (auto e = flashLimits(n, fs, kFlashAttentionMaxHeadSize))
    return e;
  const DType dt = n.operand(0)->dtype();
  const std::string mt = cudaType(dt);
  AttentionGradShape s{};
  s.BH = fs.BH;
  s.Sq = fs.Sq;
  s.Sk = fs.Sk;
  s.hd = fs.hd;
  s.hdv = fs.hdv;
  s.SqPad = (s.Sq + 63) / 64 * 64;
  s.keyReach = fs.keyReach;
  s.scale = fs.scale;
  s.bias = fs.bias;
  s.seed = fs.seed;
  s.dropout = fs.dropout;
  s.dropScale = fs.dropScale;
  if (s.BH == 0 || (s.Sq == 0 && s.Sk == 0))
    return llvm::Error::success();
  if (s.Sq == 0 || s.Sk == 0) { // no pairs: zero gradients
    for (const Value *r : {dq, dk, dv})
      if (r->type().byteSize())
        l.addMemset(l.bufferOf(r), r->type().byteSize(), 0, n);
    return llvm::Error::success();
  }
  const std::string index = l.indexType(
      std::max({s.BH * s.Sq * s.hd, s.BH * s.Sk * s.hd, s.BH * s.Sq * s.hdv, s.BH * s.Sk * s.hdv,
                s.BH * s.SqPad, bias ? bias->type().numElements() : 0}));
  const BufferRef stats =
      l.temp(static_cast<uint64_t>(2 * s.BH * s.SqPad) * sizeof(float), n.name() + ".lse_delta");
  const BufferRef delta{stats.buffer, stats.offset + static_cast<uint64_t>(s.BH * s.SqPad) * 4};
  const uint64_t statBytes = static_cast<uint64_t>(s.BH * s.SqPad) * 4;
  BufferRef in[5];
  const size_t inField[5] = {offsetof(AttentionGradShape, q), offsetof(AttentionGradShape, k),
                             offsetof(AttentionGradShape, v), offsetof(AttentionGradShape, o),
                             offsetof(AttentionGradShape, dO)};
  for (int j = 0; j < 5; ++j)
    in[j] = alignedIn(l, n, n.operand(j));
  // Results: their buffers where aligned, else temporaries copied out afterwards.
  const Value *outs[3] = {dq, dk, dv};
  const size_t outField[3] = {offsetof(AttentionGradShape, dq), offsetof(AttentionGradShape, dk),
                              offsetof(AttentionGradShape, dv)};
  BufferRef out[3];
  for (int j = 0; j < 3; ++j)
    out[j] = fixedAligned(l, outs[j], 16)
                 ? l.bufferOf(outs[j])
                 : l.temp(outs[j]->type().byteSize(), outs[j]->name() + ".aligned");
  auto args = [&](bool prep, int kernelOut) {
    LaunchArgs a;
    a.shape(s);
    for (int j = 0; j < 5; ++j) // (the prep reads O and dO; the products all but O)
      if (prep ? j >= 3 : j != 3)
        a.pointer(inField[j], in[j], n.operand(j)->type().byteSize(), false);
    if (prep) {
      a.pointer(offsetof(AttentionGradShape, lse), l.bufferOf(n.operand(5)),
                n.operand(5)->type().byteSize(), false);
    }
    if (bias && !prep)
      a.pointer(offsetof(AttentionGradShape, bias) + offsetof(AttentionOperand, p),
                l.bufferOf(bias), bias->type().byteSize(), false);
    if (step && !prep)
      a.pointer(offsetof(AttentionGradShape, step), l.bufferOf(step), step->type().byteSize(),
                false);
    a.pointer(offsetof(AttentionGradShape, lse2), stats, statBytes, prep);
    a.pointer(offsetof(AttentionGradShape, delta), delta, statBytes, prep);
    for (int j = 0; j < 3; ++j)
      if (!prep && (j == kernelOut || (kernelOut == 1 && j == 2)))
        a.pointer(outField[j], out[j], outs[j]->type().byteSize(), true);
    return a;
  };
  {
    Instantiation inst{"dlc::attention_grad_prep", {index, mt}, "dlc::AttentionGradShape", {}};
    inst.needsSync = true;
    uint32_t k = l.instantiate(inst);
    LaunchArgs a = args(true, -1);
    const uint64_t warps = static_cast<uint64_t>(s.BH * s.SqPad);
    l.launch(n, k, a, static_cast<uint32_t>(std::min<uint64_t>((warps + 7) / 8, 65536)), 256, 0,
             2.0 * static_cast<double>(s.BH * s.Sq * s.hdv));
  }
  const int64_t HD = (s.hd + 15) / 16 * 16, HDV = (s.hdv + 15) / 16 * 16;
  const int bn = std::max(HD, HDV) > 64 ? 32 : 64;
  const bool causal = s.keyReach < s.Sk;
  const double pairs = static_cast<double>(s.BH * s.Sq * s.Sk) * flashVisited(fs);
  for (int keyMajor = 0; keyMajor < 2; ++keyMajor) {
    const int64_t rows = keyMajor ? s.Sk : s.Sq;
    const int warps = flashWarps(l, rows, s.BH);
    const std::string tile = "dlc::AttentionGradTile<" + std::to_string(HD) + ", " +
                             std::to_string(HDV) + ", " + std::to_string(warps) + ", " +
                             std::to_string(bn) + ">";
    Instantiation inst{"dlc::attention_grad_mma",
                       {tile, index, mt, causal ? "true" : "false", bias ? "true" : "false",
                        step ? "true" : "false", keyMajor ? "true" : "false"},
                       "dlc::AttentionGradShape",
                       {}};
    inst.needsSync = true;
    inst.tensorCore = true;
    uint32_t k = l.instantiate(inst);
    LaunchArgs a = args(false, keyMajor ? 1 : 0);
    const int64_t r = 16 * warps, stage = bn * ((2 * HD + 16) + (2 * HDV + 16)) + 2 * bn * 4;
    const int smem = static_cast<int>(r * ((2 * HD + 16) + (2 * HDV + 16)) + 2 * stage);
    // dQ: S, dP and dS K; dK and dV: S^T, dP^T, P^T dO and dS^T Q.
    const double flop =
        2.0 * pairs * static_cast<double>(keyMajor ? 2 * (s.hd + s.hdv) : 2 * s.hd + s.hdv);
    l.launch(n, k, a, static_cast<uint32_t>((rows + r - 1) / r), 32 * static_cast<uint32_t>(warps),
             static_cast<uint32_t>(smem), flop, static_cast<uint32_t>(s.BH));
  }
  for (int j = 0; j < 3; ++j)
    if (!fixedAligned(l, outs[j], 16))
      l.addCopy(out[j], l.bufferOf(outs[j]), outs[j]->type().byteSize(), n);
  return llvm::Error::success();
}

} // namespace

void registerAttentionLowerings(LoweringRegistry &r) {
  r.group(GroupKind::Attention, lowerAttention);
  r.op(OpKind::FlashAttention, lowerFlashAttention);
  r.op(OpKind::FlashAttentionGrad, lowerFlashAttentionGrad);
}

} // namespace dlc::codegen
