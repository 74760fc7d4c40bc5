// Fused multi-head attention: MatMul(Softmax(f(MatMul(Q, K'))), V) in one kernel,
// FlashAttention-style: the score matrix never reaches memory. A block of Warps
// warps (1, 2 or 4: fewer when the rows would not fill the GPU) takes one query row
// per warp of one (batch, head); key/value tiles of 32 rows are staged in
// (dynamic) shared memory and shared by the warps. Each warp computes a score with a
// butterfly reduction, applies the fused score chain Sc (scale, mask, ...) and
// updates an online softmax (running max, running sum, rescaled accumulators). Q, K
// and V are read through their fused producers (the head split's slices, reshapes
// and transposes); the output goes through the fused epilogue (the head merge).
// QR and VR: head sizes in chunks of 32 (a lane holds one element per chunk).
#pragma once

#include "dlc_device.cuh"

namespace dlc {

template <class Q, class K, class V, class Sc, class Out> struct AttentionArgs {
  AttentionShape s;
  typename Q::Params q;
  typename K::Params k;
  typename V::Params v;
  typename Sc::Params sc;
  typename Out::Params out;
};

inline constexpr int kAttentionKeys = 32;

template <int Warps, int QR, int VR, class I, class Q, class K, class V, class Sc, class Out>
__global__ void __launch_bounds__(32 * Warps) attention(const AttentionArgs<Q, K, V, Sc, Out> a) {
  const AttentionShape &s = a.s;
  const I Sq = static_cast<I>(s.Sq), Sk = static_cast<I>(s.Sk), hd = static_cast<I>(s.hd),
          hdv = static_cast<I>(s.hdv);
  DLC_DYNAMIC_SMEM(float, smem);
  float *Ks = smem, *Vs = smem + kAttentionKeys * hd; // [32][hd], [32][hdv]
  const int warpId = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const I bh = static_cast<I>(blockIdx.y), qi = static_cast<I>(blockIdx.x) * Warps + warpId;
  const bool active = qi < Sq;
  float qv[QR];
#pragma unroll
  for (int r = 0; r < QR; ++r) {
    qv[r] = 0.0f;
    const I d = lane + 32 * r;
    if (active && d < hd)
      qv[r] = static_cast<float>(Q::load(a.q, (bh * Sq + qi) * hd + d));
  }
  float m = -(1.0f / 0.0f), lsum = 0.0f, acc[VR];
#pragma unroll
  for (int r = 0; r < VR; ++r)
    acc[r] = 0.0f;
  for (I kt = 0; kt < Sk; kt += kAttentionKeys) {
    // Stage K' (read as [hd, Sk]) and V ([Sk, hdv]) tiles; rows past Sk are zero.
    for (I e = threadIdx.x; e < kAttentionKeys * hd; e += 32 * Warps) {
      I j = e;
      const I d = s.dHd.split(j), key = kt + j;
      Ks[e] = key < Sk ? static_cast<float>(K::load(a.k, (bh * hd + d) * Sk + key)) : 0.0f;
    }
    for (I e = threadIdx.x; e < kAttentionKeys * hdv; e += 32 * Warps) {
      I j = e;
      const I d = s.dHdv.split(j), key = kt + j;
      Vs[e] = key < Sk ? static_cast<float>(V::load(a.v, (bh * Sk + key) * hdv + d)) : 0.0f;
    }
    __syncthreads();
    if (active) {
      const int kn = static_cast<int>(Sk - kt < kAttentionKeys ? Sk - kt : kAttentionKeys);
      for (int j = 0; j < kn; ++j) {
        float part = 0.0f;
#pragma unroll
        for (int r = 0; r < QR; ++r) {
          const int d = lane + 32 * r;
          if (d < hd)
            part += qv[r] * Ks[j * hd + d];
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
          part += __shfl_xor_sync(0xffffffffu, part, o);
        const float x = static_cast<float>(Sc::apply(a.sc, (bh * Sq + qi) * Sk + kt + j, part));
        const float mNew = fmaxf(m, x);
        const float corr = mNew == -(1.0f / 0.0f) ? 1.0f : exp_(m - mNew);
        const float pj = mNew == -(1.0f / 0.0f) ? 0.0f : exp_(x - mNew);
        lsum = lsum * corr + pj;
#pragma unroll
        for (int r = 0; r < VR; ++r) {
          const int d = lane + 32 * r;
          if (d < hdv)
            acc[r] = acc[r] * corr + pj * Vs[j * hdv + d];
        }
        m = mNew;
      }
    }
    __syncthreads();
  }
  if (active) {
#pragma unroll
    for (int r = 0; r < VR; ++r) {
      const I d = lane + 32 * r;
      if (d < hdv)
        Out::store(a.out, (bh * Sq + qi) * hdv + d, acc[r] / lsum);
    }
  }
}

} // namespace dlc
