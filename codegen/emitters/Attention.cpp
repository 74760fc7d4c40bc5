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

/// The reach of a causal mask in the score chain: the largest key - query that some
/// row leaves unmasked, where the chain only scales by positive constants, casts, and
/// masks with constants that do not depend on the (batch, head): Add of a [Sq, Sk]
/// (broadcast) constant holding -inf, or Where selecting a -inf scalar by a constant
/// condition. Lowest finite values (finfo.min, as some exporters write) count as
/// masks when every row keeps a key (their exp underflows to exactly 0 beside it).
/// Sk where the chain is not that or masks nothing past the diagonal. `exact`: the
/// masks are exactly "key > query + reach"; `nodes`: then the masking nodes that do
/// nothing else (an Add whose other values are all 0, a Where), which attention_mma
/// may apply itself instead of the chain's functor.
struct CausalMask {
  int64_t reach;
  bool exact = false;
  std::set<const Node *> nodes;
};
CausalMask causalMask(const FusionGroup &g, const AttentionShape &s) {
  const int64_t Sq = s.Sq, Sk = s.Sk;
  CausalMask none;
  none.reach = Sk;
  // A mask: its constant, where (i, j) is in it (strides), and what marks a masked cell.
  struct Mask {
    const Node *node;
    const Value *c;
    int64_t si, sj;
    const Value *fill; // Where: the -inf scalar (masked where cond == whenTrue)
    bool whenTrue;
    bool onlyMasks; // an Add whose unmasked values are all 0 (set below), or a Where
  };
  std::vector<Mask> masks;
  bool finiteMask = false;
  auto isMaskValue = [&](double v) {
    if (std::isinf(v) && v < 0)
      return true;
    // FP32, FP16 and BF16's lowest finite values.
    if (v == -3.4028234663852886e38 || v == -65504.0 || v == -3.3895313892515355e38) {
      finiteMask = true;
      return true;
    }
    return false;
  };
  for (size_t k = 1; k + 1 < g.core.size(); ++k) {
    const Node &n = *g.core[k];
    const OpKind op = n.kind();
    if (op == OpKind::Cast)
      continue;
    if (op == OpKind::Mul || op == OpKind::Div) { // by a positive scalar constant
      const Value *c = n.operand(1);
      if (op == OpKind::Mul && !(c->isConstant() && c->type().numElements() == 1))
        c = n.operand(0);
      if (!c->isConstant() || c->type().numElements() != 1 ||
          !(loadElement<double>(c->dtype(), c->data().raw(), 0) > 0))
        return none;
      continue;
    }
    Mask m{&n, nullptr, 0, 0, nullptr, true, true};
    if (op == OpKind::Add) {
      for (const Value *v : n.operands())
        if (v && v->isConstant())
          m.c = v;
    } else if (op == OpKind::Where) {
      m.c = n.operand(0);
      for (int b = 1; b <= 2; ++b)
        if (n.operand(b)->isConstant() && n.operand(b)->type().numElements() == 1) {
          m.fill = n.operand(b);
          m.whenTrue = b == 1;
        }
      if (!m.fill || !isMaskValue(loadElement<double>(m.fill->dtype(), m.fill->data().raw(), 0)))
        return none;
    }
    if (!m.c || !m.c->isConstant())
      return none;
    // Broadcast from its last two dims, every other dim 1.
    const Shape &cs = m.c->shape();
    for (size_t d = 0; d + 2 < cs.size(); ++d)
      if (cs[d] != 1)
        return none;
    const int64_t r = m.c->rank(), rows = r >= 2 ? cs[r - 2] : 1, cols = r >= 1 ? cs[r - 1] : 1;
    if ((rows != 1 && rows != Sq) || (cols != 1 && cols != Sk))
      return none;
    m.si = rows == 1 ? 0 : cols;
    m.sj = cols == 1 ? 0 : 1;
    masks.push_back(m);
  }
  // (Scanning Sq x Sk cells per mask: skipped for masks beyond 64M cells.)
  if (masks.empty() || Sq * Sk > (int64_t(1) << 26))
    return none;
  std::vector<uint8_t> row(static_cast<size_t>(Sk));
  std::vector<int64_t> last(static_cast<size_t>(Sq));
  int64_t reach = -Sk;
  for (int pass = 0; pass < 2; ++pass) { // the reach, then whether the mask is exact
    bool exact = true;
    for (int64_t i = 0; i < Sq; ++i) {
      std::fill(row.begin(), row.end(), 0);
      for (Mask &m : masks) {
        const void *raw = m.c->data().raw();
        for (int64_t j = 0; j < Sk; ++j) {
          const double v = loadElement<double>(m.c->dtype(), raw, i * m.si + j * m.sj);
          const bool masked = m.fill ? (v != 0) == m.whenTrue : isMaskValue(v);
          row[static_cast<size_t>(j)] |= masked;
          if (!m.fill && !masked && v != 0)
            m.onlyMasks = false; // (a bias as well: its functor must run)
        }
      }
      if (pass == 0) {
        int64_t l = -1;
        for (int64_t j = 0; j < Sk; ++j)
          if (!row[static_cast<size_t>(j)])
            l = j;
        if (l < 0 && finiteMask) // (a row of lowest values averages every key)
          return none;
        reach = std::max(reach, l - i);
      } else {
        for (int64_t j = 0; j < Sk && exact; ++j)
          exact = (row[static_cast<size_t>(j)] != 0) == (j > i + reach);
        if (!exact)
          break;
      }
    }
    if (pass == 1) {
      CausalMask r;
      r.reach = std::min(reach, Sk);
      r.exact = exact && reach < Sk - 1;
      if (r.exact)
        for (const Mask &m : masks)
          if (m.onlyMasks)
            r.nodes.insert(m.node);
      return r;
    }
  }
  return none;
}

/// The positive constant a score chain of only Mul or Div by a scalar constant (and
/// Casts, and the masking nodes of an exact causal mask, which attention_mma applies
/// itself) scales by, which attention_mma folds into its softmax; none for any other
/// chain.
std::optional<float> chainScale(const FusionGroup &g, const std::set<const Node *> &masks) {
  double scale = 1;
  bool any = false;
  for (size_t k = 1; k + 1 < g.core.size(); ++k) {
    const Node &n = *g.core[k];
    any = true;
    if (n.kind() == OpKind::Cast || masks.count(&n))
      continue;
    if (n.kind() != OpKind::Mul && n.kind() != OpKind::Div)
      return std::nullopt;
    const Value *c = n.operand(1), *x = n.operand(0);
    if (n.kind() == OpKind::Mul && (!c->isConstant() || c->type().numElements() != 1))
      std::swap(c, x);
    if (!c->isConstant() || c->type().numElements() != 1 || x->isConstant())
      return std::nullopt;
    const double v = loadElement<double>(c->dtype(), c->data().raw(), 0);
    if (!(v > 0) || std::isinf(v))
      return std::nullopt;
    scale = n.kind() == OpKind::Mul ? scale * v : scale / v;
  }
  if (!any)
    return std::nullopt;
  return static_cast<float>(scale);
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
    std::vector<std::pair<int64_t, int64_t>> batch; // (size, stride), merged
    bool ok = true;
    for (int64_t d = 0; d < r - 2; ++d) {
      const int64_t n = xs[d], st = a->strides[static_cast<size_t>(d)];
      ok &= st >= 0;
      if (n == 1)
        continue;
      if (!batch.empty() && batch.back().second == n * st) {
        batch.back().first *= n;
        batch.back().second = st;
      } else {
        batch.push_back({n, st});
      }
    }
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
};

/// attention_mma where it applies and the model prices it faster than the CUDA-core
/// kernel on every target: FP16/BF16 operands, head sizes whole 16-byte chunks of at
/// most 256 values. `packs`: how many operands attention_pack must write first.
std::optional<MmaPlan> mmaPlan(Lowering &l, const FusionGroup &g, const AttentionShape &s,
                               int64_t sms, int packs) {
  const DType dt = g.core.front()->operand(0)->dtype();
  if ((dt != DType::F16 && dt != DType::BF16) || s.hd % 8 != 0 || s.hdv % 8 != 0)
    return std::nullopt;
  MmaPlan p;
  p.HD = (s.hd + 15) / 16 * 16;
  p.HDV = (s.hdv + 15) / 16 * 16;
  if (p.HD > 256 || p.HDV > 256 || l.options().attentionKernel == "cuda-core")
    return std::nullopt;
  // Head sizes above 128: 2 warps and 32 keys per tile, to keep the two K/V stages
  // within the 99 KB of shared memory a block may have on sm_86/sm_89 (and the
  // accumulators within the registers); else 4 warps and 64 keys, halved while that
  // leaves SMs idle on the largest target.
  const bool wide = std::max(p.HD, p.HDV) > 128;
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
  const double packBytes =
      packs ? 2.0 * 2.0 * static_cast<double>(s.BH * (s.Sq + 2 * s.Sk) * std::max(s.hd, s.hdv))
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
                            (0.5 * m.tensorFlops * m.mmaSyncFraction * fill);
    if (tMma >= tCuda)
      return std::nullopt;
  }
  return p;
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
  const CausalMask causal = causalMask(g, s);
  s.keyReach = causal.reach;
  s.q = ops[0].o;
  s.k = ops[1].o;
  s.v = ops[2].o;
  s.q.p = s.k.p = s.v.p = nullptr;
  // (core: MatMul, the chain, Softmax)
  const std::optional<float> scale = chainScale(g, causal.nodes);
  const bool chain = g.core.size() > 2 && !scale;
  s.scale = scale.value_or(1.0f);
  // (An exact causal mask the kernel applies itself: keys past query + keyReach.)
  const bool applyCausal = !chain && causal.exact;
  const int64_t bm = 16 * p.warps;
  const int smem =
      static_cast<int>(bm * (2 * p.HD + 16) + 2 * p.keys * ((2 * p.HD + 16) + (2 * p.HDV + 16)));
  std::string sn = l.functorName(*f[3]), on = l.functorName(*f[4]);
  const std::string tile = "dlc::AttentionMmaTile<" + std::to_string(p.HD) + ", " +
                           std::to_string(p.HDV) + ", " + std::to_string(p.warps) + ", " +
                           std::to_string(p.keys) + ">";
  Instantiation inst{"dlc::attention_mma",
                     {tile, l.indexType(maxIndex), mt, chain ? "true" : "false",
                      applyCausal ? "true" : "false", sn, on},
                     "dlc::AttentionMmaArgs<" + sn + ", " + on + ">",
                     {sn, on}};
  inst.needsSync = true;
  inst.tensorCore = true;
  uint32_t kernel = l.instantiate(inst);
  LaunchArgs a;
  a.shape(s);
  const size_t field[3] = {offsetof(AttentionShape, q), offsetof(AttentionShape, k),
                           offsetof(AttentionShape, v)};
  for (int j = 0; j < 3; ++j)
    a.pointer(field[j] + offsetof(AttentionOperand, p), ops[j].at,
              static_cast<uint64_t>(s.BH * rows[j] * cols[j]) * es, false);
  a.functor(*f[3], chain);
  a.functor(*f[4]);
  // (The products of the key tiles a causal mask skips are not counted.)
  double visited = 0;
  for (int64_t q0 = 0; q0 < s.Sq; q0 += bm) {
    const int64_t last = std::min(q0 + bm, s.Sq) - 1,
                  keys = std::min(s.Sk, std::max<int64_t>(0, last + s.keyReach + 1));
    visited += static_cast<double>((last - q0 + 1) *
                                   std::min(s.Sk, (keys + p.keys - 1) / p.keys * p.keys));
  }
  l.launch(mm2, kernel, a, static_cast<uint32_t>((s.Sq + bm - 1) / bm),
           32 * static_cast<uint32_t>(p.warps), static_cast<uint32_t>(smem),
           flops(s) * visited / static_cast<double>(s.Sq * s.Sk), static_cast<uint32_t>(s.BH));
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

} // namespace

void registerAttentionLowerings(LoweringRegistry &r) {
  r.group(GroupKind::Attention, lowerAttention);
}

} // namespace dlc::codegen
