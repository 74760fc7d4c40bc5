//===- Attention.cpp - Fused multi-head attention ---------------------------===//
//
// The group MatMul(Softmax(f(MatMul(Q, K'))), V) (FusionRules.h: attentionCore) as
// one kernel, FlashAttention-style: the score matrix never reaches memory. A block
// of 4 warps takes 4 query rows of one (batch, head); key/value tiles of 32 rows
// are staged in shared memory and shared by the warps. Each warp computes a score
// with a butterfly reduction, applies the fused score chain f (scale, mask, ...),
// and updates an online softmax (running max m, running sum l, rescaled
// accumulators), so the kernel reads Q, K and V once per block and writes only the
// output. Q, K and V are read through their fused producers (the head split's
// slices, reshapes and transposes become index arithmetic); the output is written
// through the fused epilogue (the head merge's transpose and reshape).
//===----------------------------------------------------------------------===//
#include "EmitterUtils.h"

#include "../Fused.h"

#include "dlc/ir/FusionRules.h"

namespace dlc::codegen {

using namespace ir;

llvm::Error lowerAttention(Lowering &l, const Node &mm2) {
  std::vector<Node *> core = attentionCore(mm2);
  if (core.empty())
    return makeError("the attention pattern does not match any more");
  const Node &mm1 = *core.front(), &softmax = *core.back();
  const Value *q = mm1.operand(0), *k = mm1.operand(1), *v = mm2.operand(1), *out = mm2.result();
  const Value *scores = mm1.result(), *logits = softmax.operand(0);
  const Shape &ss = scores->shape();
  int64_t rank = scores->rank(), Sq = ss[rank - 2], Sk = ss[rank - 1], hd = q->shape()[rank - 1],
          hdv = v->shape()[rank - 1];
  int64_t BH = 1;
  for (int64_t d = 0; d < rank - 2; ++d)
    BH *= ss[d];
  l.allocate(out);
  if (BH * Sq * hdv == 0)
    return llvm::Error::success();
  constexpr int kWarps = 4, kKeys = 32;
  int qr = static_cast<int>((hd + 31) / 32), vr = static_cast<int>((hdv + 31) / 32);
  KernelBuilder kb(l, mm2, "attention");
  FusedAccess fa(l, kb, l.group());
  CodeStream &b = kb.body();
  kb.setNeedsSync();
  kb.setFlops(2.0 * static_cast<double>(BH * Sq * Sk) * static_cast<double>(hd + hdv) +
              5.0 * static_cast<double>(BH * Sq * Sk));
  std::string SQ = ll(Sq), SK = ll(Sk), HD = ll(hd), HDV = ll(hdv);
  b.line("__shared__ float Ks[" + std::to_string(kKeys) + "][" + std::to_string(hd) + "];");
  b.line("__shared__ float Vs[" + std::to_string(kKeys) + "][" + std::to_string(hdv) + "];");
  b.line("const int warpId = threadIdx.x >> 5, lane = threadIdx.x & 31;");
  b.line("const long long bh = blockIdx.y, qi = (long long)blockIdx.x * " + std::to_string(kWarps) + " + warpId;");
  b.line("const bool active = qi < " + SQ + ";");
  // This warp's query row, spread over the lanes.
  b.line("float qv[" + std::to_string(qr) + "];");
  b.line("#pragma unroll");
  {
    CodeStream::Block r(b, "for (int r = 0; r < " + std::to_string(qr) + "; ++r)");
    b.line("qv[r] = 0.0f;");
    b.line("const long long d = lane + 32 * r;");
    CodeStream::Block in(b, "if (active && d < " + HD + ")");
    b.line("qv[r] = (float)" + fa.load(b, q, "(bh * " + SQ + " + qi) * " + HD + " + d") + ";");
  }
  b.line("float m = -(1.0f / 0.0f), lsum = 0.0f;");
  b.line("float acc[" + std::to_string(vr) + "] = {};");
  {
    CodeStream::Block kt(b, "for (long long kt = 0; kt < " + SK + "; kt += " + std::to_string(kKeys) + ")");
    // Stage K' (read as [hd, Sk]) and V ([Sk, hdv]) tiles; rows past Sk are zero.
    auto stage = [&](const char *tile, int64_t width, const Value *src, const std::string &index) {
      CodeStream::Block e(b, "for (int e = threadIdx.x; e < " + std::to_string(kKeys * width) +
                                 "; e += " + std::to_string(32 * kWarps) + ")");
      b.line("const int j = e / " + std::to_string(width) + ", d = e % " + std::to_string(width) + ";");
      b.line("const long long key = kt + j;");
      b.line("float staged = 0.0f;");
      {
        CodeStream::Block in(b, "if (key < " + SK + ")");
        b.line("staged = (float)" + fa.load(b, src, index) + ";");
      }
      b.line(std::string(tile) + "[j][d] = staged;");
    };
    stage("Ks", hd, k, "(bh * " + HD + " + d) * " + SK + " + key");
    stage("Vs", hdv, v, "(bh * " + SK + " + key) * " + HDV + " + d");
    b.line("__syncthreads();");
    {
      CodeStream::Block act(b, "if (active)");
      b.line("const int kn = (int)(" + SK + " - kt < " + std::to_string(kKeys) + " ? " + SK + " - kt : " +
             std::to_string(kKeys) + ");");
      CodeStream::Block j(b, "for (int j = 0; j < kn; ++j)");
      b.line("float part = 0.0f;");
      b.line("#pragma unroll");
      b.line("for (int r = 0; r < " + std::to_string(qr) + "; ++r) { const int d = lane + 32 * r; if (d < " + HD +
             ") part += qv[r] * Ks[j][d]; }");
      b.line("#pragma unroll");
      b.line("for (int o = 16; o > 0; o >>= 1) part += __shfl_xor_sync(0xffffffffu, part, o);");
      // The fused score chain (scale, mask) at this score's index.
      std::string sidx = "(bh * " + SQ + " + qi) * " + SK + " + kt + j";
      std::string x = logits == scores ? "part" : fa.loadBound(b, logits, sidx, scores, "part");
      b.line("const float x = (float)" + x + ";");
      b.line("const float mNew = fmaxf(m, x);");
      b.line("const float corr = mNew == -(1.0f / 0.0f) ? 1.0f : dlc::exp_(m - mNew);");
      b.line("const float pj = mNew == -(1.0f / 0.0f) ? 0.0f : dlc::exp_(x - mNew);");
      b.line("lsum = lsum * corr + pj;");
      b.line("#pragma unroll");
      b.line("for (int r = 0; r < " + std::to_string(vr) + "; ++r) { const int d = lane + 32 * r; if (d < " + HDV +
             ") acc[r] = acc[r] * corr + pj * Vs[j][d]; }");
      b.line("m = mNew;");
    }
    b.line("__syncthreads();");
  }
  {
    CodeStream::Block act(b, "if (active)");
    b.line("#pragma unroll");
    CodeStream::Block r(b, "for (int r = 0; r < " + std::to_string(vr) + "; ++r)");
    b.line("const long long d = lane + 32 * r;");
    CodeStream::Block in(b, "if (d < " + HDV + ")");
    fa.store(b, out, "(bh * " + SQ + " + qi) * " + HDV + " + d", "acc[r] / lsum");
  }
  kb.launch(static_cast<uint64_t>((Sq + kWarps - 1) / kWarps), 32 * kWarps, 0, static_cast<uint32_t>(BH));
  return llvm::Error::success();
}

} // namespace dlc::codegen
