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
// Split (split-KV, for few query rows: decoding's one): blockIdx.z takes a slice of
// the keys and writes partial results that attention_combine merges, so that a
// handful of (batch, head) rows still fill the GPU.
#pragma once

#include "dlc_device.cuh"
#include "dlc_mma.cuh"

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

template <int Warps, int QR, int VR, bool Split, class I, class Q, class K, class V, class Sc,
          class Out>
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
  // The keys of this block: all, or (Split) its slice.
  const I kBegin = Split ? static_cast<I>(blockIdx.z) * static_cast<I>(s.splitKeys) : I(0);
  const I kEnd = Split && kBegin + static_cast<I>(s.splitKeys) < Sk
                     ? kBegin + static_cast<I>(s.splitKeys)
                     : Sk;
  for (I kt = kBegin; kt < kEnd; kt += kAttentionKeys) {
    // Stage K' (read as [hd, Sk]) and V ([Sk, hdv]) tiles; rows past Sk are zero.
    for (I e = threadIdx.x; e < kAttentionKeys * hd; e += 32 * Warps) {
      I j = e;
      const I d = s.dHd.split(j), key = kt + j;
      Ks[e] = key < kEnd ? static_cast<float>(K::load(a.k, (bh * hd + d) * Sk + key)) : 0.0f;
    }
    for (I e = threadIdx.x; e < kAttentionKeys * hdv; e += 32 * Warps) {
      I j = e;
      const I d = s.dHdv.split(j), key = kt + j;
      Vs[e] = key < kEnd ? static_cast<float>(V::load(a.v, (bh * Sk + key) * hdv + d)) : 0.0f;
    }
    __syncthreads();
    if (active) {
      const int kn = static_cast<int>(kEnd - kt < kAttentionKeys ? kEnd - kt : kAttentionKeys);
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
  if (active && Split) { // this slice's unnormalized output, its max and sum
    const I rows = static_cast<I>(s.BH) * Sq, row = bh * Sq + qi, z = static_cast<I>(blockIdx.z);
#pragma unroll
    for (int r = 0; r < VR; ++r) {
      const I d = lane + 32 * r;
      if (d < hdv)
        s.partial[(z * rows + row) * hdv + d] = acc[r];
    }
    if (lane == 0) {
      float *stats = s.partial + static_cast<I>(s.splits) * rows * hdv + (z * rows + row) * 2;
      stats[0] = m;
      stats[1] = lsum;
    }
  } else if (active) {
#pragma unroll
    for (int r = 0; r < VR; ++r) {
      const I d = lane + 32 * r;
      if (d < hdv)
        Out::store(a.out, (bh * Sq + qi) * hdv + d, acc[r] / lsum);
    }
  }
}

template <class Out> struct AttentionCombineArgs {
  AttentionShape s;
  typename Out::Params out;
};

/// Split-KV's second kernel: output element (row, d) = sum_z e^(m_z - M) o_z / sum_z
/// e^(m_z - M) l_z over the splits z (M the largest m_z; a split whose keys were all
/// masked has m_z = -inf and adds nothing), through the epilogue.
template <class I, class Out>
__global__ void __launch_bounds__(256) attention_combine(const AttentionCombineArgs<Out> a) {
  const AttentionShape &s = a.s;
  const I hdv = static_cast<I>(s.hdv), rows = static_cast<I>(s.BH) * static_cast<I>(s.Sq),
          splits = static_cast<I>(s.splits);
  const float *stats = s.partial + splits * rows * hdv;
  DLC_GRID_STRIDE(i, rows * hdv) {
    I row = i;
    const I d = s.dHdv.split(row);
    float M = -(1.0f / 0.0f);
    for (I z = 0; z < splits; ++z)
      M = fmaxf(M, stats[(z * rows + row) * 2]);
    float num = 0.0f, den = 0.0f;
    for (I z = 0; z < splits; ++z) {
      const float mz = stats[(z * rows + row) * 2];
      const float w = mz == -(1.0f / 0.0f) ? 0.0f : exp_(mz - M);
      num += w * s.partial[(z * rows + row) * hdv + d];
      den += w * stats[(z * rows + row) * 2 + 1];
    }
    Out::store(a.out, i, num / den);
  }
}

//===----------------------------------------------------------------------===//
// attention_mma: the same attention on tensor cores (sm_80+), FlashAttention-2 style,
// for FP16/BF16 operands with FP32 accumulation and softmax, or FP32 operands on TF32
// (MT = float, the tile's ES = 4: m16n8k8, see the P V step).
//
// A block takes BM = 16 Warps query rows of one (batch, head); each warp owns 16 of
// them. Q's tile is copied to shared memory once; K and V tiles of BN keys stream
// through two shared-memory stages by 16-byte cp.async, the next tile's copies issued
// (after the one barrier per tile) before this tile's products. Per key tile a warp
// computes S = Q K^T (ldmatrix, mma.sync m16n8k16) into FP32 accumulators, applies
// the fused score chain (Chain) and the online softmax on them (a row's running max
// and sum over the 4 lanes that hold it; exp2 with log2(e) folded in), rescales its O
// accumulators, and adds P V: the S accumulators of two adjacent n-tiles, rounded to
// MT, are exactly the A fragment of a k16 step (lane (g, t) holds columns 2t, 2t+1 of
// rows g and g + 8 in both), and V's B fragments come from its [key][d] tile by
// ldmatrix.trans. The score matrix never leaves registers.
//
// Q, K and V are read as rows of hd contiguous MT values (s.q, s.k, s.v: strided views
// of the graph's values through the head split's slices, reshapes and transposes), or,
// where the group computes them otherwise (a fused scale, a broadcast reshaped), as
// attention_pack wrote them. hd and hdv are multiples of 8 (16-byte chunks), rounded
// up to HD, HDV (multiples of 16) with zero-filled chunks. Rows of a tile are an odd
// number of 16-byte chunks apart, so that the 8 rows an ldmatrix phase reads fall in
// distinct banks. Keys past Sk score -inf; a row whose scores are all -inf gives NaN
// (0 / 0), as the unfused graph and the CUDA-core kernel do. A chain that only scales
// by a positive constant is not a functor: s.scale multiplies log2(e) (the scores are
// then not rounded to MT between the product and the softmax, which is closer to the
// exact result than the unfused graph). Likewise an exact causal mask in the chain
// (Causal): the tiles that cross the diagonal compare key and row instead. Where the score chain
// masks every key past query + s.keyReach (a causal mask, found by the emitter), key
// tiles past the block's last row + keyReach are not visited: their scores are -inf,
// their weights exactly 0.
//===----------------------------------------------------------------------===//

template <int HD_, int HDV_, int Warps_, int BN_, int ES_ = 2> struct AttentionMmaTile {
  static constexpr int HD = HD_, HDV = HDV_, Warps = Warps_, BN = BN_;
  static constexpr int BM = 16 * Warps, Threads = 32 * Warps;
  // Row pitches in bytes (ES: the element size, 4 for FP32 operands on TF32).
  static constexpr int QPitch = ES_ * HD + 16, VPitch = ES_ * HDV + 16;
  static constexpr int QBytes = BM * QPitch, KBytes = BN * QPitch, VBytes = BN * VPitch;
  static constexpr int SmemBytes = QBytes + 2 * (KBytes + VBytes);
  static_assert(HD % 16 == 0 && HDV % 16 == 0 && BN % 16 == 0, "k16 steps, n-tile pairs");
};

template <class Sc, class Out> struct AttentionMmaArgs {
  AttentionShape s;
  typename Sc::Params sc;
  typename Out::Params out;
};

/// Operand o's rows of (batch, head) bh.
template <class I, class MT>
__device__ __forceinline__ const MT *attentionRows(const AttentionOperand &o, I bh) {
  I bo = bh;
  const I bi = o.dInner.split(bo);
  return static_cast<const MT *>(o.p) +
         (bo * static_cast<I>(o.sOuter) + bi * static_cast<I>(o.sInner));
}

/// Issues cp.async copies of rows [row0, row0 + Rows) (< rows) of len MT values, ld
/// apart, at src into shared memory at dst (Pitch bytes per row), Chunks 16-byte chunks
/// per row; rows past `rows` and chunks past `len` are zero-filled (Bounded: else the
/// caller knows every row and chunk is inside, and no predicate is computed: inlined
/// with a constant `bounded`).
template <int Rows, int Chunks, int Pitch, int Threads, class I, class MT>
__device__ __forceinline__ void attentionCopy(SmemAddr dst, const MT *src, I row0, I rows, I len,
                                              I ld, int tid, bool bounded = true) {
#pragma unroll
  for (int e0 = 0; e0 < Rows * Chunks; e0 += Threads) {
    const int e = e0 + tid;
    if ((Rows * Chunks) % Threads == 0 || e < Rows * Chunks) {
      const int r = e / Chunks, c = e - r * Chunks;
      const I row = row0 + static_cast<I>(r);
      constexpr int E = 16 / static_cast<int>(sizeof(MT)); // values per chunk
      const bool full = !bounded || (row < rows && static_cast<I>(E * c) < len);
      cpAsync16(dst + r * Pitch + 16 * c, full ? src + (row * ld + static_cast<I>(E * c)) : src,
                full);
    }
  }
}

/// An additive attention bias value in FP32 (FlashAttention's semantics, as its
/// reference): -inf as it is (a mask), finite values no lower than -1e5.
/// Lowest-value masks (BF16's and FP32's, as exporters write them) then still weigh
/// exactly 0 beside a key kept, and a row whose every key they mask stays finite (a
/// softmax of its raw scores) instead of losing its exponents to cancellation at 1e38.
template <class T> __device__ __forceinline__ float attentionBias(T b) {
  const float v = static_cast<float>(b);
  return v == -(1.0f / 0.0f) ? v : fmaxf(v, -1e5f);
}

/// Whether FlashAttention's dropout keeps pair (row, key) of bh (AttentionShape's or
/// AttentionGradShape's step, seed and ratio): the Dropout op's mask of [BH, Sq, Sk].
template <class Shape, class I>
__device__ __forceinline__ bool attentionKeep(const Shape &s, unsigned long long step, I bh, I row,
                                              I key) {
  const unsigned long long i =
      (static_cast<unsigned long long>(bh) * static_cast<unsigned long long>(s.Sq) +
       static_cast<unsigned long long>(row)) *
          static_cast<unsigned long long>(s.Sk) +
      static_cast<unsigned long long>(key);
  return philox::uniform(static_cast<unsigned long long>(s.seed), step, i) >= s.dropout;
}

/// acc += F B for one k16 step and C n-tiles (a warp): F's A fragment `fa` (the
/// rounded accumulators of an earlier product), B read transposed by ldmatrix.trans
/// from 16 rows of [row][column] values at `rows` (this lane's ldmatrix row), n-tiles
/// from column group n0 (8 values each) on.
template <class MT, int C>
__device__ __forceinline__ void mmaTransB(float (&acc)[1][C][4], const unsigned (&fa)[4],
                                          SmemAddr rows, int n0) {
  WarpFrags<1, C> f;
#pragma unroll
  for (int r = 0; r < 4; ++r)
    f.a[0][r] = fa[r];
  SmemAddr bRow[C / 2];
#pragma unroll
  for (int j = 0; j < C / 2; ++j)
    bRow[j] = rows + 16 * (n0 + 2 * j);
  warpLoadBTrans<C / 2>(f.b, bRow);
  warpTileMma<MT, 1, C>(acc, f);
}

template <class Tile, class I, class MT, bool Chain, bool Causal, bool Bias, bool Drop, class Sc,
          class Out>
__global__ void __launch_bounds__(Tile::Threads) attention_mma(const AttentionMmaArgs<Sc, Out> a) {
  constexpr int BM = Tile::BM, BN = Tile::BN, HD = Tile::HD, HDV = Tile::HDV;
  constexpr int NS = BN / 8, NO = HDV / 8; // a warp's n-tiles of S (keys) and O (values)
  // O's n-tiles in groups of NC per P V product (B fragments of at most 8 in registers).
  constexpr int NC = NO <= 8 ? NO : NO % 8 == 0 ? 8 : NO % 6 == 0 ? 6 : NO % 4 == 0 ? 4 : 2;
  constexpr int QP = Tile::QPitch, VP = Tile::VPitch, T = Tile::Threads;
  // 16-byte chunks per Q/K and V row, and 32-byte k steps of S = Q K^T (16 FP16/BF16
  // values: m16n8k16; 8 FP32 values on TF32: m16n8k8).
  constexpr bool Tf32 = sizeof(MT) == 4;
  constexpr int CQ = HD * static_cast<int>(sizeof(MT)) / 16,
                CV = HDV * static_cast<int>(sizeof(MT)) / 16, KS = CQ / 2;
  static_assert(Tile::QPitch == HD * static_cast<int>(sizeof(MT)) + 16, "the tile's element size");
  const float kNegInf = -(1.0f / 0.0f);
  const AttentionShape &s = a.s;
  const I Sq = static_cast<I>(s.Sq), Sk = static_cast<I>(s.Sk), hd = static_cast<I>(s.hd),
          hdv = static_cast<I>(s.hdv);
  const float kLog2e = 1.4426950408889634f * (Chain ? 1.0f : s.scale);
  DLC_DYNAMIC_SMEM(unsigned char, smem);
  const SmemAddr qS = smemAddr(smem), kS = qS + Tile::QBytes, vS = kS + 2 * Tile::KBytes;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  const I bh = static_cast<I>(blockIdx.y), q0 = static_cast<I>(blockIdx.x) * BM;
  const MT *qg = attentionRows<I, MT>(s.q, bh), *kg = attentionRows<I, MT>(s.k, bh),
           *vg = attentionRows<I, MT>(s.v, bh);
  const I qld = static_cast<I>(s.q.sRow), kld = static_cast<I>(s.k.sRow),
          vld = static_cast<I>(s.v.sRow);
  attentionCopy<BM, CQ, QP, T>(qS, qg, q0, Sq, hd, qld, tid);
  attentionCopy<BN, CQ, QP, T>(kS, kg, I(0), Sk, hd, kld, tid);
  attentionCopy<BN, CV, VP, T>(vS, vg, I(0), Sk, hdv, vld, tid);
  cpAsyncCommit();
  // This lane's ldmatrix rows (lane 8 i + r gives row r of matrix i): Q's A fragments
  // (rows 8 (i % 2) + r of the warp's 16, 16-byte column i / 2 of the k step), K's B
  // fragments ([key][d]: keys 8 (i / 2) + r, column i % 2) and V's ([key][d], read
  // transposed: keys 8 (i % 2) + r, d column i / 2 of the n-tile pair).
  const int r8 = lane & 7, i1 = (lane >> 3) & 1, i2 = lane >> 4;
  const SmemAddr qLd = qS + (warp * 16 + 8 * i1 + r8) * QP + 16 * i2;
  const int kLd = (8 * i2 + r8) * QP + 16 * i1, vLd = (8 * i1 + r8) * VP + 16 * i2;
  float o[NO / NC][1][NC][4]; // n-tile c NC + n in o[c][0][n]
#pragma unroll
  for (int n = 0; n < NO; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      o[n / NC][0][n % NC][e] = 0.0f;
  float m[2] = {kNegInf, kNegInf}, l[2] = {0.0f, 0.0f}; // rows g and g + 8
  const I rowG = q0 + static_cast<I>(warp * 16 + g);
  // The score rows the chain reads for rows g and g + 8 (clamped to the last row).
  I rowAt[2];
  const MT *biasAt[2]; // (Bias) the bias rows of rows g and g + 8 (clamped likewise)
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const I row = rowG + static_cast<I>(8 * h);
    rowAt[h] = bh * Sq + (row < Sq ? row : Sq - 1);
    if constexpr (Bias)
      biasAt[h] = attentionRows<I, MT>(s.bias, bh) +
                  (row < Sq ? row : Sq - 1) * static_cast<I>(s.bias.sRow);
  }
  const float biasMul = Bias ? 1.0f / s.scale : 0.0f; // (the raw scores are unscaled)
  const unsigned long long dropStep = Drop ? static_cast<unsigned long long>(*s.step) : 0ull;
  // The keys any of the block's rows leave unmasked (a causal mask: the tiles above
  // the diagonal are never read).
  const I lastRow = (q0 + BM < Sq ? q0 + BM : Sq) - 1,
          keyEnd = lastRow + static_cast<I>(s.keyReach) + 1 < Sk
                       ? lastRow + static_cast<I>(s.keyReach) + 1
                       : Sk;
  const int tiles = static_cast<int>((keyEnd + BN - 1) / BN);
  const I reach = static_cast<I>(s.keyReach);
  // Interior tiles (the steady state) need no masks, no clamps and no copy predicates:
  // every key of the tile and of the next one (copied during it) exists, no row of the
  // block masks any of them (causal), and the head sizes fill whole chunks. They come
  // first; the rest (the last tiles, the causal diagonal) take the edge form.
  int interior = 0;
  if (hd == static_cast<I>(HD) && hdv == static_cast<I>(HDV)) {
    interior = static_cast<int>(Sk / BN) - 1; // the next tile full too
    if (Causal) {
      const I unmasked = (q0 + reach + 1) / BN; // tiles no row of the block masks
      interior = q0 + reach + 1 <= 0                   ? 0
                 : unmasked < static_cast<I>(interior) ? static_cast<int>(unmasked)
                                                       : interior;
    }
    interior = interior < tiles - 1 ? (interior < 0 ? 0 : interior) : tiles - 1;
  }
  // (A lambda with a bool argument, called with constants: NVRTC takes no generic
  // lambda in a kernel, and each call is inlined with its own constant.)
  auto step = [&](int kt, const bool Edge) {
    cpAsyncWait<0>(); // tile kt has landed (this thread's copies)
    __syncthreads();  // ... everyone's; and every warp is done with tile kt - 1
    const int st = kt & 1;
    if (!Edge || kt + 1 < tiles) {
      const I next = static_cast<I>(kt + 1) * BN;
      attentionCopy<BN, CQ, QP, T>(kS + (st ^ 1) * Tile::KBytes, kg, next, Sk, hd, kld, tid, Edge);
      attentionCopy<BN, CV, VP, T>(vS + (st ^ 1) * Tile::VBytes, vg, next, Sk, hdv, vld, tid, Edge);
    }
    cpAsyncCommit();
    // S = Q K^T: KS k steps, each step's fragments loaded before the last one's products
    // are issued (TF32: the fragments rounded to nearest by warpTileLoad).
    float sc[1][NS][4];
#pragma unroll
    for (int j = 0; j < NS; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        sc[0][j][e] = 0.0f;
    const SmemAddr kTile = kS + st * Tile::KBytes + kLd;
    auto loadS = [&](WarpFrags<1, NS> &f, int ks) {
      const SmemAddr aRow[1] = {qLd + 32 * ks};
      SmemAddr bRow[NS / 2];
#pragma unroll
      for (int j = 0; j < NS / 2; ++j)
        bRow[j] = kTile + j * 16 * QP + 32 * ks;
      warpTileLoad<MT, 1, NS>(f, aRow, bRow);
    };
    WarpFrags<1, NS> f[2];
    loadS(f[0], 0);
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
      if (ks + 1 < KS)
        loadS(f[(ks + 1) & 1], ks + 1);
      warpTileMma<MT, 1, NS>(sc, f[ks & 1]);
    }
    // The score chain and the online softmax: lane (g, t) holds keys 8 j + 2 t + (e & 1)
    // of rows g (e < 2) and g + 8. The chain reads at clamped (row, key) (inside the
    // scores for every lane, so that its loads need no branch and loop-invariant ones
    // are hoisted; a row's coordinates are split once, not per key); keys past Sk,
    // only in the last tile, score -inf.
    const I key0 = static_cast<I>(kt) * BN;
    if constexpr (Chain || Bias) { // (the chain's functor, or FlashAttention's bias)
#pragma unroll
      for (int j = 0; j < NS; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          I key = key0 + static_cast<I>(8 * j + 2 * t + (e & 1));
          key = !Edge || key < Sk ? key : Sk - 1;
          if constexpr (Chain)
            sc[0][j][e] = static_cast<float>(Sc::apply2(a.sc, rowAt[e >> 1], key, sc[0][j][e]));
          else
            sc[0][j][e] = fmaf(attentionBias(biasAt[e >> 1][key]), biasMul, sc[0][j][e]);
        }
    }
    if (Edge && Causal && key0 + BN - 1 > q0 + static_cast<I>(warp * 16) + reach) {
#pragma unroll
      for (int j = 0; j < NS; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (key0 + static_cast<I>(8 * j + 2 * t + (e & 1)) >
              rowG + static_cast<I>(8 * (e >> 1)) + reach)
            sc[0][j][e] = kNegInf;
    }
    if (Edge && key0 + BN > Sk) {
#pragma unroll
      for (int j = 0; j < NS; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (key0 + static_cast<I>(8 * j + 2 * t + (e & 1)) >= Sk)
            sc[0][j][e] = kNegInf;
    }
    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int j = 0; j < NS; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        mx[e >> 1] = fmaxf(mx[e >> 1], sc[0][j][e]);
    float base[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
      base[h] = mx[h] == kNegInf ? 0.0f : mx[h] * kLog2e; // (all -inf so far: p = 0)
      const float corr = exp2Approx(m[h] * kLog2e - base[h]);
      m[h] = mx[h];
      l[h] *= corr;
#pragma unroll
      for (int n = 0; n < NO; ++n) {
        o[n / NC][0][n % NC][2 * h] *= corr;
        o[n / NC][0][n % NC][2 * h + 1] *= corr;
      }
    }
    unsigned p[Tf32 ? 1 : BN / 16][4]; // P's A fragments, one per k16 step of keys
#pragma unroll
    for (int j = 0; j < NS; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float pe = exp2Approx(fmaf(sc[0][j][e], kLog2e, -base[e >> 1]));
        l[e >> 1] += pe;
        sc[0][j][e] = pe;
        if constexpr (Drop) // (the sum keeps every weight; P V only the kept ones)
          sc[0][j][e] = attentionKeep(s, dropStep, bh, rowG + static_cast<I>(8 * (e >> 1)),
                                      key0 + static_cast<I>(8 * j + 2 * t + (e & 1)))
                            ? pe * s.dropScale
                            : 0.0f;
      }
      if constexpr (!Tf32) {
        p[j / 2][2 * (j % 2)] = packPair<MT>(sc[0][j][0], sc[0][j][1]);
        p[j / 2][2 * (j % 2) + 1] = packPair<MT>(sc[0][j][2], sc[0][j][3]);
      }
    }
    if constexpr (!Tf32) { // O += P V, k16 step by step
      const SmemAddr vTile = vS + st * Tile::VBytes + vLd;
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk)
#pragma unroll
        for (int c = 0; c < NO / NC; ++c)
          mmaTransB<MT, NC>(o[c], p[kk], vTile + kk * 16 * VP, c * NC);
    } else {
      // O += P V on TF32, a k8 step per n-tile j of S (its 8 keys), the keys of a step
      // taken in the order 0, 2, 4, 6, 1, 3, 5, 7: A's column t is key 2 t and column
      // t + 4 key 2 t + 1, so lane (g, t)'s accumulators of S are its A fragment as they
      // are (no shuffle), and its B fragment is V[2 t][n] and V[2 t + 1][n] of its
      // column n = g of each n-tile (read from shared memory, 8 t + g apart in banks:
      // no conflict). Q, K and P are rounded to nearest TF32 (P once per k8 step), V goes
      // in as FP32 bits, truncated by the tensor cores (no conversion per load).
      const float *vRows = reinterpret_cast<const float *>(smem + Tile::QBytes + 2 * Tile::KBytes +
                                                           st * Tile::VBytes);
#pragma unroll
      for (int j = 0; j < NS; ++j) {
        const float *v0 = vRows + (8 * j + 2 * t) * (VP / 4) + g, *v1 = v0 + VP / 4;
        const unsigned pa[4] = {toTf32(sc[0][j][0]), toTf32(sc[0][j][2]), toTf32(sc[0][j][1]),
                                toTf32(sc[0][j][3])}; // (rounded: unbiased against l)
#pragma unroll
        for (int c = 0; c < NO / NC; ++c) {
          WarpFrags<1, NC> f; // (V as FP32 bits: the tensor cores ignore the low 13)
#pragma unroll
          for (int r = 0; r < 4; ++r)
            f.a[0][r] = pa[r];
#pragma unroll
          for (int jj = 0; jj < NC / 2; ++jj) {
            const int n = 8 * (c * NC + 2 * jj);
            f.b[jj][0] = __float_as_uint(v0[n]);
            f.b[jj][1] = __float_as_uint(v1[n]);
            f.b[jj][2] = __float_as_uint(v0[n + 8]);
            f.b[jj][3] = __float_as_uint(v1[n + 8]);
          }
          warpTileMma<MT, 1, NC>(o[c], f);
        }
      }
    }
  };
  int kt = 0;
  for (; kt < interior; ++kt)
    step(kt, false);
  for (; kt < tiles; ++kt)
    step(kt, true);
  cpAsyncWait<0>(); // (the last, empty group)
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
  }
#pragma unroll
  for (int n = 0; n < NO; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const I row = rowG + static_cast<I>(8 * (e >> 1)),
              d = static_cast<I>(8 * n + 2 * t + (e & 1));
      if (row < Sq && d < hdv)
        Out::store(a.out, (bh * Sq + row) * hdv + d, o[n / NC][0][n % NC][e] / l[e >> 1]);
    }
  if (s.lse && t == 0) { // (FlashAttention) ln(sum_j e^(scaled score j)), from log2 units
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const I row = rowG + static_cast<I>(8 * h);
      if (row < Sq)
        s.lse[bh * Sq + row] =
            m[h] == kNegInf ? kNegInf : (m[h] * kLog2e + log2f(l[h])) * 0.6931471805599453f;
    }
  }
}

//===----------------------------------------------------------------------===//
// FlashAttentionGrad on tensor cores (sm_80+), FlashAttention-2 style: the
// probabilities are recomputed from the forward's log-sum-exp, P = exp(S - LSE), and
// never stored. attention_grad_prep writes the rows' LSE in log2 units and D =
// rowsum(dO O); attention_grad_mma then runs twice, without atomics (deterministic):
//   - KeyMajor = false, dQ: a block owns R = 16 Warps query rows (Q and dO tiles in
//     shared memory) and streams key tiles (K, V): S = Q K^T and dP = dO V^T, dS =
//     P (dP - D), dQ += dS K;
//   - KeyMajor = true, dK and dV: a block owns R key rows (K, V) and streams query
//     tiles (Q, dO, with their LSE and D): S^T = K Q^T and dP^T = V dO^T, dV += P^T dO,
//     dK += dS^T Q.
// Both are the forward's two shapes of product: X = A B^T with A and B rows of
// contiguous head values in shared memory (ldmatrix, as Q K^T), and Acc += F B with F
// the previous products' accumulators rounded to MT (exactly the A fragments of the
// k16 steps, as P in P V) and B read transposed (ldmatrix.trans, as V). Streamed
// tiles go through two shared-memory stages by cp.async, the next tile's copies
// issued after the one barrier per tile. Interior tiles (full, unmasked) take a form
// without masks or copy predicates; the others (the causal diagonal, the last ones)
// the edge form. dQ = scale dS K, dK = scale dS^T Q, dV = P^T dO.
//===----------------------------------------------------------------------===//

template <int HD_, int HDV_, int Warps_, int BN_> struct AttentionGradTile {
  static constexpr int HD = HD_, HDV = HDV_, Warps = Warps_, BN = BN_;
  static constexpr int R = 16 * Warps, Threads = 32 * Warps;
  static constexpr int P1 = 2 * HD + 16, P2 = 2 * HDV + 16; // row pitches (bytes)
  static constexpr int Own1Bytes = R * P1, Own2Bytes = R * P2;
  static constexpr int Str1Bytes = BN * P1, Str2Bytes = BN * P2, StatBytes = 2 * BN * 4;
  static constexpr int StageBytes = Str1Bytes + Str2Bytes + StatBytes;
  static constexpr int SmemBytes = Own1Bytes + Own2Bytes + 2 * StageBytes;
  static_assert(HD % 16 == 0 && HDV % 16 == 0 && BN % 16 == 0 && 64 % BN == 0, "tile sizes");
};

/// Per row (bh, q) of [BH, SqPad], a warp: lse2 = LSE log2(e) and delta = sum_d dO O
/// (FP32) where q < Sq, else +inf and 0.
template <class I, class MT>
__global__ void __launch_bounds__(256) attention_grad_prep(const AttentionGradShape s) {
  const I rows = static_cast<I>(s.BH) * static_cast<I>(s.SqPad), Sq = static_cast<I>(s.Sq),
          pad = static_cast<I>(s.SqPad), hdv = static_cast<I>(s.hdv);
  const int lane = threadIdx.x & 31;
  const I warps = static_cast<I>(gridDim.x) * 8;
  for (I w = static_cast<I>(blockIdx.x) * 8 + static_cast<I>(threadIdx.x >> 5); w < rows;
       w += warps) {
    I bh = w;
    const I q = bh % pad;
    bh /= pad;
    float d = 0.0f;
    if (q < Sq) {
      const MT *o = static_cast<const MT *>(s.o) + (bh * Sq + q) * hdv,
               *g = static_cast<const MT *>(s.dO) + (bh * Sq + q) * hdv;
      for (I c = lane; c < hdv / 8; c += 32) { // 16-byte chunks (hdv a multiple of 8)
        const VecOf<MT, 8> ov = *reinterpret_cast<const VecOf<MT, 8> *>(o + 8 * c),
                           gv = *reinterpret_cast<const VecOf<MT, 8> *>(g + 8 * c);
#pragma unroll
        for (int j = 0; j < 8; ++j)
          d += static_cast<float>(ov.v[j]) * static_cast<float>(gv.v[j]);
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
      d += __shfl_xor_sync(0xffffffffu, d, o);
    if (lane == 0) {
      s.delta[w] = d;
      s.lse2[w] = q < Sq ? s.lse[bh * Sq + q] * 1.4426950408889634f : 1.0f / 0.0f;
    }
  }
}

template <class Tile, class I, class MT, bool Causal, bool Bias, bool Drop, bool KeyMajor>
__global__ void __launch_bounds__(Tile::Threads) attention_grad_mma(const AttentionGradShape s) {
  constexpr int R = Tile::R, BN = Tile::BN, HD = Tile::HD, HDV = Tile::HDV, T = Tile::Threads;
  constexpr int P1 = Tile::P1, P2 = Tile::P2;
  constexpr int NS = BN / 8, N1 = HD / 8, N2 = HDV / 8;
  // Accumulator n-tiles in groups of at most 8 per product (their B fragments).
  constexpr int C1 = N1 <= 8 ? N1 : N1 % 8 == 0 ? 8 : N1 % 6 == 0 ? 6 : N1 % 4 == 0 ? 4 : 2;
  constexpr int C2 = N2 <= 8 ? N2 : N2 % 8 == 0 ? 8 : N2 % 6 == 0 ? 6 : N2 % 4 == 0 ? 4 : 2;
  const I Sq = static_cast<I>(s.Sq), Sk = static_cast<I>(s.Sk), hd = static_cast<I>(s.hd),
          hdv = static_cast<I>(s.hdv), pad = static_cast<I>(s.SqPad),
          reach = static_cast<I>(s.keyReach);
  const float c = s.scale * 1.4426950408889634f;
  DLC_DYNAMIC_SMEM(unsigned char, smem);
  const SmemAddr own1 = smemAddr(smem), own2 = own1 + Tile::Own1Bytes, str = own2 + Tile::Own2Bytes;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  const I bh = static_cast<I>(blockIdx.y), r0 = static_cast<I>(blockIdx.x) * R;
  const MT *qg = static_cast<const MT *>(s.q) + bh * Sq * hd,
           *kg = static_cast<const MT *>(s.k) + bh * Sk * hd,
           *vg = static_cast<const MT *>(s.v) + bh * Sk * hdv,
           *dog = static_cast<const MT *>(s.dO) + bh * Sq * hdv;
  const MT *a1 = KeyMajor ? kg : qg, *a2 = KeyMajor ? vg : dog, *b1 = KeyMajor ? qg : kg,
           *b2 = KeyMajor ? dog : vg;
  const I ownRows = KeyMajor ? Sk : Sq, strRows = KeyMajor ? Sq : Sk;
  const float *lse2 = s.lse2 + bh * pad, *delta = s.delta + bh * pad;
  attentionCopy<R, HD / 8, P1, T>(own1, a1, r0, ownRows, hd, hd, tid);
  attentionCopy<R, HDV / 8, P2, T>(own2, a2, r0, ownRows, hdv, hdv, tid);
  auto copyStream = [&](int kt, int st, const bool Edge) {
    const I row0 = static_cast<I>(kt) * BN;
    const SmemAddr base = str + st * Tile::StageBytes;
    attentionCopy<BN, HD / 8, P1, T>(base, b1, row0, strRows, hd, hd, tid, Edge);
    attentionCopy<BN, HDV / 8, P2, T>(base + Tile::Str1Bytes, b2, row0, strRows, hdv, hdv, tid,
                                      Edge);
    if (KeyMajor && tid < BN / 2) { // the tile's LSE and D (inside the padded rows)
      const int which = tid / (BN / 4), ch = tid % (BN / 4);
      cpAsync16(base + Tile::Str1Bytes + Tile::Str2Bytes + which * 4 * BN + 16 * ch,
                (which ? delta : lse2) + row0 + 4 * ch, 1u);
    }
  };
  // The streamed tiles: [first, tiles), edge ones before edgeEnd and from interiorEnd.
  int first = 0, tiles, edgeEnd = 0, interiorEnd = 0;
  const bool whole = hd == static_cast<I>(HD) && hdv == static_cast<I>(HDV);
  if (!KeyMajor) { // keys up to the block's last row + reach
    const I last = (r0 + R < Sq ? r0 + R : Sq) - 1;
    const I keyEnd = !Causal ? Sk : last + reach + 1 < Sk ? last + reach + 1 : Sk;
    tiles = keyEnd <= 0 ? 0 : static_cast<int>((keyEnd + BN - 1) / BN);
    if (whole) {
      interiorEnd = static_cast<int>(Sk / BN) - 1;
      if (Causal) { // tiles whose keys every row of the block sees
        const I seen = r0 + reach + 1 <= 0 ? I(0) : (r0 + reach + 1) / BN;
        interiorEnd = seen < static_cast<I>(interiorEnd) ? static_cast<int>(seen) : interiorEnd;
      }
    }
  } else { // queries from the block's first key - reach
    tiles = static_cast<int>((Sq + BN - 1) / BN);
    if (Causal) {
      const I q0 = r0 - reach;
      first = q0 <= 0 ? 0 : q0 >= Sq ? tiles : static_cast<int>(q0 / BN);
      // Tiles before edgeEnd hold a query that masks one of the block's keys.
      const I diag = r0 + R - 1 - reach; // a tile from q >= diag masks none
      edgeEnd = diag <= 0 ? 0 : static_cast<int>((diag + BN - 1) / BN);
      edgeEnd = edgeEnd < first ? first : edgeEnd > tiles ? tiles : edgeEnd;
    }
    if (whole)
      interiorEnd = static_cast<int>(Sq / BN) - 1;
  }
  interiorEnd = interiorEnd > tiles - 1 ? tiles - 1 : interiorEnd;
  if (tiles > first)
    copyStream(first, first & 1, true);
  cpAsyncCommit();
  // ldmatrix rows of this lane (as attention_mma): A fragments of the owned rows,
  // B fragments of streamed rows ([row][d], 8 (i / 2) + r, column i % 2), and
  // transposed B fragments of streamed rows (rows 8 (i % 2) + r, column i / 2).
  const int r8 = lane & 7, i1 = (lane >> 3) & 1, i2 = lane >> 4;
  const SmemAddr aLd1 = own1 + (warp * 16 + 8 * i1 + r8) * P1 + 16 * i2,
                 aLd2 = own2 + (warp * 16 + 8 * i1 + r8) * P2 + 16 * i2;
  const int bLd1 = (8 * i2 + r8) * P1 + 16 * i1, bLd2 = (8 * i2 + r8) * P2 + 16 * i1,
            tLd1 = (8 * i1 + r8) * P1 + 16 * i2, tLd2 = (8 * i1 + r8) * P2 + 16 * i2;
  float acc1[N1 / C1][1][C1][4], acc2[KeyMajor ? N2 / C2 : 1][1][C2][4];
#pragma unroll
  for (int n = 0; n < N1; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      acc1[n / C1][0][n % C1][e] = 0.0f;
  if constexpr (KeyMajor) {
#pragma unroll
    for (int n = 0; n < N2; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        acc2[n / C2][0][n % C2][e] = 0.0f;
  }
  const I rowG = r0 + static_cast<I>(warp * 16 + g); // this lane's owned rows: g, g + 8
  // (Bias) the bias of (query, key) at biasG + query * biasRow + key, the owned rows
  // clamped to the last one.
  const MT *biasG = Bias ? attentionRows<I, MT>(s.bias, bh) : nullptr;
  const I biasRow = Bias ? static_cast<I>(s.bias.sRow) : I(0);
  const unsigned long long dropStep = Drop ? static_cast<unsigned long long>(*s.step) : 0ull;
  I ownAt[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const I row = rowG + static_cast<I>(8 * h);
    ownAt[h] = row < ownRows ? row : ownRows - 1;
  }
  float rowL[2] = {0.0f, 0.0f}, rowD[2] = {0.0f, 0.0f};
  if constexpr (!KeyMajor) {
#pragma unroll
    for (int h = 0; h < 2; ++h) { // (inside the padded rows: R divides 64)
      rowL[h] = lse2[rowG + 8 * h];
      rowD[h] = delta[rowG + 8 * h];
    }
  }
  // X = A B^T over Kd / 16 k steps: the owned rows at aLd, the streamed at bTile.
  auto product = [&](float(&x)[1][NS][4], SmemAddr aLd, SmemAddr bTile, const int Steps,
                     const int Pitch) {
#pragma unroll
    for (int j = 0; j < NS; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        x[0][j][e] = 0.0f;
    WarpFrags<1, NS> f;
#pragma unroll
    for (int ks = 0; ks < Steps; ++ks) {
      const SmemAddr aRow[1] = {aLd + 32 * ks};
      SmemAddr bRow[NS / 2];
#pragma unroll
      for (int j = 0; j < NS / 2; ++j)
        bRow[j] = bTile + j * 16 * Pitch + 32 * ks;
      warpTileLoad<MT, 1, NS>(f, aRow, bRow);
      warpTileMma<MT, 1, NS>(x, f);
    }
  };
  auto step = [&](int kt, const bool Edge) {
    cpAsyncWait<0>(); // tile kt has landed (this thread's copies)
    __syncthreads();  // ... everyone's; and every warp is done with tile kt - 1
    const int st = kt & 1;
    if (!Edge || kt + 1 < tiles)
      copyStream(kt + 1, st ^ 1, Edge);
    cpAsyncCommit();
    const SmemAddr s1 = str + st * Tile::StageBytes, s2 = s1 + Tile::Str1Bytes;
    float x[1][NS][4], y[1][NS][4];
    product(x, aLd1, s1 + bLd1, HD / 16, P1);
    product(y, aLd2, s2 + bLd2, HDV / 16, P2);
    const float *stats =
        reinterpret_cast<const float *>(smem + Tile::Own1Bytes + Tile::Own2Bytes +
                                        st * Tile::StageBytes + Tile::Str1Bytes + Tile::Str2Bytes);
    const I col0 = static_cast<I>(kt) * BN;
    unsigned pA[BN / 16][4], dA[BN / 16][4]; // P's and dS's A fragments per k16 step
#pragma unroll
    for (int j = 0; j < NS; ++j) {
      float p[4], ds[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = 8 * j + 2 * t + (e & 1);
        const float L = KeyMajor ? stats[col] : rowL[e >> 1],
                    D = KeyMajor ? stats[BN + col] : rowD[e >> 1];
        // (query, key) of this element
        const I q = KeyMajor ? col0 + static_cast<I>(col) : rowG + static_cast<I>(8 * (e >> 1)),
                key = KeyMajor ? rowG + static_cast<I>(8 * (e >> 1)) : col0 + static_cast<I>(col);
        bool masked = Edge && ((!KeyMajor && key >= Sk) || (Causal && key > q + reach));
        float base = -L;
        if constexpr (Bias) { // (streamed rows past the end, only in edge tiles: clamped)
          const I sc = !Edge || col0 + static_cast<I>(col) < strRows ? col0 + static_cast<I>(col)
                                                                     : strRows - 1;
          const I qb = KeyMajor ? sc : ownAt[e >> 1], kb = KeyMajor ? ownAt[e >> 1] : sc;
          const float bv = attentionBias(biasG[qb * biasRow + kb]);
          masked |= bv == -(1.0f / 0.0f); // (a -inf bias masks: also rows with no key left)
          base = fmaf(bv, 1.4426950408889634f, base);
        }
        p[e] = masked ? 0.0f : exp2Approx(fmaf(x[0][j][e], c, base));
        // (masked: exactly 0, also where the row has no key left and D is NaN)
        if constexpr (Drop) { // dP = Z (dO V^T); dV takes P Z
          const float z = attentionKeep(s, dropStep, bh, q, key) ? s.dropScale : 0.0f;
          ds[e] = masked ? 0.0f : p[e] * (y[0][j][e] * z - D);
          p[e] *= z;
        } else {
          ds[e] = masked ? 0.0f : p[e] * (y[0][j][e] - D);
        }
      }
      if constexpr (KeyMajor) {
        pA[j / 2][2 * (j % 2)] = packPair<MT>(p[0], p[1]);
        pA[j / 2][2 * (j % 2) + 1] = packPair<MT>(p[2], p[3]);
      }
      dA[j / 2][2 * (j % 2)] = packPair<MT>(ds[0], ds[1]);
      dA[j / 2][2 * (j % 2) + 1] = packPair<MT>(ds[2], ds[3]);
    }
    // Acc += F B, B the streamed rows read transposed, k16 step by step.
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
#pragma unroll
      for (int cg = 0; cg < N1 / C1; ++cg) // dQ += dS K, or dK += dS^T Q
        mmaTransB<MT, C1>(acc1[cg], dA[kk], s1 + tLd1 + kk * 16 * P1, cg * C1);
      if constexpr (KeyMajor) {
#pragma unroll
        for (int cg = 0; cg < N2 / C2; ++cg) // dV += P^T dO
          mmaTransB<MT, C2>(acc2[cg], pA[kk], s2 + tLd2 + kk * 16 * P2, cg * C2);
      }
    }
  };
  int kt = first;
  for (; kt < edgeEnd; ++kt)
    step(kt, true);
  for (; kt < interiorEnd; ++kt)
    step(kt, false);
  for (; kt < tiles; ++kt)
    step(kt, true);
  cpAsyncWait<0>(); // (the last, empty group)
  // The owned rows' results, two adjacent values a store.
  MT *o1 = static_cast<MT *>(KeyMajor ? s.dk : s.dq) + bh * ownRows * hd;
#pragma unroll
  for (int n = 0; n < N1; ++n)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const I row = rowG + static_cast<I>(8 * h), d = static_cast<I>(8 * n + 2 * t);
      if (row < ownRows && d < hd)
        *reinterpret_cast<unsigned *>(o1 + row * hd + d) = packPair<MT>(
            acc1[n / C1][0][n % C1][2 * h] * s.scale, acc1[n / C1][0][n % C1][2 * h + 1] * s.scale);
    }
  if constexpr (KeyMajor) {
    MT *o2 = static_cast<MT *>(s.dv) + bh * Sk * hdv;
#pragma unroll
    for (int n = 0; n < N2; ++n)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const I row = rowG + static_cast<I>(8 * h), d = static_cast<I>(8 * n + 2 * t);
        if (row < Sk && d < hdv)
          *reinterpret_cast<unsigned *>(o2 + row * hdv + d) =
              packPair<MT>(acc2[n / C2][0][n % C2][2 * h], acc2[n / C2][0][n % C2][2 * h + 1]);
      }
  }
}

template <class Q, class K, class V> struct AttentionPackArgs {
  AttentionPackShape s;
  typename Q::Params q;
  typename K::Params k;
  typename V::Params v;
};

template <class Out> struct AttentionFinishArgs {
  AttentionFinishShape s;
  typename Out::Params out;
};

/// A vendor attention's output (cuDNN's, a tactic) stored as attention_mma stores its
/// own: element (bh, row, d) at (bh Sq + row) hdv + d through the group's functor.
template <class I, class MT, class Out>
__global__ void __launch_bounds__(256) attention_finish(const AttentionFinishArgs<Out> a) {
  const MT *o = static_cast<const MT *>(a.s.o);
  DLC_GRID_STRIDE(i, static_cast<I>(a.s.total))
  Out::store(a.out, i, ld<float>(o, i));
}

/// Writes attention_mma's operands through their fused producers: blockIdx.y picks Q,
/// K or V (skipped when s.out is null), each [BH, S, hd] contiguous MT.
template <class I, class MT, class Q, class K, class V>
__global__ void __launch_bounds__(256) attention_pack(const AttentionPackArgs<Q, K, V> a) {
  const AttentionPackShape &s = a.s;
  const int j = static_cast<int>(blockIdx.y);
  MT *out = static_cast<MT *>(s.out[j]);
  if (!out)
    return;
  DLC_GRID_STRIDE(i, static_cast<I>(s.n[j])) {
    float v;
    if (j == 0) {
      v = static_cast<float>(Q::load(a.q, i));
    } else if (j == 2) {
      v = static_cast<float>(V::load(a.v, i));
    } else { // element (bh, key, d) of K is (bh, d, key) of K'
      I r = i;
      const I d = s.dKd.split(r), key = s.dKs.split(r);
      v = static_cast<float>(
          K::load(a.k, (r * static_cast<I>(s.hd) + d) * static_cast<I>(s.Sk) + key));
    }
    out[i] = Cvt<MT, float>::run(v);
  }
}

} // namespace dlc
