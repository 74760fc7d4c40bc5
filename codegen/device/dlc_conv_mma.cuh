// conv_fprop_mma: the channels-last (NHWC) implicit-GEMM convolution on tensor cores,
// in the Ampere style (sm_80+): FP16/BF16 operands (mma.sync m16n8k16) or FP32 operands
// rounded to TF32 (m16n8k8), FP32 accumulators; or INT8 operands (m16n8k32) into exact
// int32 sums (an int32 bias; split-K partial sums in the epilogue's 64-bit integers),
// which the epilogue receives as they are.
//
// The GEMM: rows are the N*P output positions, columns the M output channels, and K =
// kSize * C runs over (tap, channel), channel fastest, so that both operands are
// K-contiguous in memory: the im2col row of a position is the input's channels at each
// tap, and the weights are [M, k..., C]. A block computes a BM x BN tile; its warps
// WM x WN each, in m16n8 products (mma.sync) from fragments loaded by ldmatrix.
//
// The main loop stages RowBytes (64 or 128) bytes of K per row at a time (BK = 32 or 64
// FP16, 16 or 32 FP32 values) in a ring of Stages shared-memory stages filled by 16-byte
// cp.async (8 or 4 channels of one tap), Stages - 1 tiles ahead of the products: one
// cp.async.wait_group and one barrier per stage, placed before its last k step (a k step
// is 32 bytes of K); each k step's fragments are loaded (ldmatrix) before the previous
// step's products are issued. Each thread copies the same 16-byte column of a few rows
// of every stage: it decomposes its positions once (window origin, and which taps of its
// window are inside the image, as a bit mask) and advances its (tap, channel) by BK with
// adds, never a division; a chunk outside the image or past K is zero-filled by cp.async
// itself (ignore-src). The 16-byte chunks of row r are XOR-swizzled by (r / 2) % 4 (64-byte
// rows, two to a 128-byte line of banks) or r % 8 (128-byte rows): the 8 rows an ldmatrix
// phase reads, and the chunks a warp's cp.async writes, fall in distinct banks. 128-byte
// rows halve the per-stage work (barrier, wait, commit, the copies' advance, the loop)
// per HMMA.
//
// Grouped convolutions (group width Cg a multiple of a chunk) batch the groups into the
// grid: blockIdx.y is (group, tile of its Mg channels), and a block reads its group's
// Cg input channels of each pixel and writes only its group's channels.
//
// Requirements (the emitter checks them): channels-last, Cg a multiple of a chunk
// (8 or 4), at most 32 taps (64 with a 64-bit Mask), x and w 16-byte aligned and
// read as they are. Where they are not (C = 3 of an RGB stem, a fused prologue),
// conv_pack first writes the operand as [rows, C rounded up to a chunk] with zero
// channels: constant weights when the package is compiled, variable ones (training)
// at every run, the input through the prologue.
// The accumulators start at the bias (loaded before the main loop, so that its latency
// hides there); the epilogue applies the fused store functor on the accumulator
// fragments, or writes the split-K partial sums for conv_splitk_reduce.
#pragma once

#include "dlc_conv.cuh"
#include "dlc_mma.cuh"

namespace dlc {

/// BM positions x BN channels per block, (BM / WM) x (BN / WN) warps, Stages stages of
/// RowBytes (64 or 128) bytes of K per row.
template <int BM_, int BN_, int WM_, int WN_, int Stages_, int RowBytes_ = 64> struct ConvMmaTile {
  static constexpr int BM = BM_, BN = BN_, WM = WM_, WN = WN_, Stages = Stages_;
  static constexpr int WarpsM = BM / WM, WarpsN = BN / WN, Threads = WarpsM * WarpsN * 32;
  static constexpr int MI = WM / 16, NI = WN / 8; // m16n8 tiles per warp
  // Eight warps of at most 64x32 keep two blocks per SM (sixteen warps): ptxas holds
  // them to 128 registers.
  static constexpr int MinBlocks = Threads == 256 && WM * WN <= 64 * 32 ? 2 : 1;
  // One row of a stage: Chunks 16-byte chunks of K, read in KSteps k steps of 32 bytes.
  static constexpr int RowBytes = RowBytes_, Chunks = RowBytes / 16, KSteps = RowBytes / 32;
  static constexpr int StageBytes = (BM + BN) * RowBytes, SmemBytes = Stages * StageBytes;
  static constexpr int RowStep = Threads / Chunks; // rows between a thread's chunks
  static constexpr int ARows = BM / RowStep, BRows = BN / RowStep;
  static_assert(RowBytes == 64 || RowBytes == 128, "rows of 64 or 128 bytes");
  static_assert(BM % WM == 0 && BN % WN == 0 && WM % 16 == 0 && WN % 16 == 0, "warp tile");
  static_assert(BM % RowStep == 0 && BN % RowStep == 0 && RowStep % 8 == 0, "copy rows");
  static_assert(Stages >= 2, "a pipeline needs two stages");
  /// The swizzle of chunk j of row r: chunk j ^ swizzle(r). The 8 rows an ldmatrix phase
  /// reads, and the rows a warp's cp.async write, then fall in distinct banks (two
  /// 64-byte rows share a 128-byte line of banks: rows pair up).
  static __device__ __forceinline__ int swizzle(int r) { return (r / (8 / Chunks)) % Chunks; }
};

/// One thread's share of filling a stage: its 16-byte column of ARows positions (the
/// im2col rows) and BRows output channels (the weight rows), and where in K it is.
/// Which taps of a position's window lie inside the image is a mask computed once
/// (bit tap: kSize <= 32 bits of Mask, 64 for unsigned long long), so that a copy's
/// predicate is one AND.
template <class Tile, class I, class MT, class Mask> struct ConvMmaLoader {
  static constexpr int ARows = Tile::ARows, BRows = Tile::BRows;
  // Channels per 16-byte chunk, and K per stage, in elements.
  static constexpr int Elems = 16 / int(sizeof(MT)), BK = Tile::RowBytes / int(sizeof(MT));
  const MT *x, *w;
  I aOff[ARows];      // each position's window origin in x (may be < 0)
  Mask aMask[ARows];  // bit t: tap t of the window is inside the image
  unsigned bMask;     // bit r: weight row r is a channel (of the block's group)
  I wOff, wRows;      // this thread's chunk of weight row 0, and the rows' spacing
  I k, kEnd;          // this thread's chunk of K, and the split's end
  int c, t1, t2, tap; // k as (tap (t0, t1, t2), its index; channel c of the group)
  int Cg, k1, k2;
  I tapOff;              // the tap's offset in x, plus c
  I step2, wrap2, wrap1; // tapOff's change as t2 advances, as t2 wraps, as t1 wraps
  Mask bit;              // 1 << tap, 0 past kEnd
  SmemAddr sts;          // this thread's chunk in a stage's A rows

  /// Rows pBase... and channels mBase... (< mEnd) of the group whose input channels
  /// start at cBase.
  __device__ __forceinline__ ConvMmaLoader(const ConvShape &s, I pBase, I mBase, I mEnd, I cBase,
                                           I kBegin, I kEnd_, int tid, SmemAddr base)
      : x(static_cast<const MT *>(s.x)), w(static_cast<const MT *>(s.w)), kEnd(kEnd_) {
    const int j = tid % Tile::Chunks, row = tid / Tile::Chunks;
    sts = base + row * Tile::RowBytes + ((j ^ Tile::swizzle(row)) << 4);
    const I C_ = static_cast<I>(s.C), K = static_cast<I>(s.K);
    const int in0 = static_cast<int>(s.in[0]), in1 = static_cast<int>(s.in[1]),
              in2 = static_cast<int>(s.in[2]), k1_ = static_cast<int>(s.k[1]),
              k2_ = static_cast<int>(s.k[2]), kSize = static_cast<int>(s.kSize),
              dil0 = static_cast<int>(s.dil[0]), dil1 = static_cast<int>(s.dil[1]),
              dil2 = static_cast<int>(s.dil[2]);
#pragma unroll
    for (int r = 0; r < ARows; ++r) {
      I p = pBase + row + r * Tile::RowStep;
      aOff[r] = 0;
      aMask[r] = 0; // a position past the end reads zeros
      if (p < static_cast<I>(s.NP)) {
        I o = s.dP.split(p); // p: the image
        const I o2 = s.dOut2.split(o), o1 = s.dOut1.split(o);
        const int h0 = static_cast<int>(o * static_cast<I>(s.stride[0]) - static_cast<I>(s.pad[0])),
                  h1 =
                      static_cast<int>(o1 * static_cast<I>(s.stride[1]) - static_cast<I>(s.pad[1])),
                  h2 =
                      static_cast<int>(o2 * static_cast<I>(s.stride[2]) - static_cast<I>(s.pad[2]));
        aOff[r] =
            (p * static_cast<I>(s.inSize) +
             (static_cast<I>(h0) * static_cast<I>(in1) + static_cast<I>(h1)) * static_cast<I>(in2) +
             static_cast<I>(h2)) *
                C_ +
            cBase;
        // Tap by tap, the window's coordinates carried along with adds.
        int q1 = 0, q2 = 0, i0 = h0, i1 = h1, i2 = h2;
        for (int t = 0; t < kSize; ++t) {
          if (static_cast<unsigned>(i0) < static_cast<unsigned>(in0) &&
              static_cast<unsigned>(i1) < static_cast<unsigned>(in1) &&
              static_cast<unsigned>(i2) < static_cast<unsigned>(in2))
            aMask[r] |= Mask(1) << t;
          i2 += dil2;
          if (++q2 == k2_) {
            q2 = 0;
            i2 = h2;
            i1 += dil1;
            if (++q1 == k1_) {
              q1 = 0;
              i1 = h1;
              i0 += dil0;
            }
          }
        }
      }
    }
    k = kBegin + Elems * j;
    I kt = k;
    c = static_cast<int>(s.dCg.split(kt));
    tap = static_cast<int>(kt);
    t2 = static_cast<int>(s.dK2.split(kt));
    t1 = static_cast<int>(s.dK1.split(kt));
    const I t0 = kt;
    Cg = static_cast<int>(s.Cg);
    k1 = k1_;
    k2 = k2_;
    // The offset of a tap's displacement: dStep0 t0 + dStep1 t1 + dStep2 t2.
    const I dStep2 = static_cast<I>(s.dil[2]) * C_,
            dStep1 = static_cast<I>(s.dil[1]) * static_cast<I>(in2) * C_,
            dStep0 = static_cast<I>(s.dil[0]) * static_cast<I>(in1) * static_cast<I>(in2) * C_;
    tapOff =
        t0 * dStep0 + static_cast<I>(t1) * dStep1 + static_cast<I>(t2) * dStep2 + static_cast<I>(c);
    step2 = dStep2 - static_cast<I>(Cg);
    wrap2 = dStep1 - static_cast<I>(k2) * dStep2;
    wrap1 = dStep0 - static_cast<I>(k1) * dStep1;
    bit = k < kEnd ? Mask(1) << tap : Mask(0);
    bMask = 0;
#pragma unroll
    for (int r = 0; r < BRows; ++r)
      if (mBase + row + r * Tile::RowStep < mEnd)
        bMask |= 1u << r;
    wRows = static_cast<I>(Tile::RowStep) * K;
    wOff = (mBase + row) * K + k;
  }

  /// A mask as cpAsync16's word: nonzero where it is (32-bit masks as they are).
  static __device__ __forceinline__ unsigned word(Mask m) {
    if constexpr (sizeof(Mask) <= sizeof(unsigned))
      return static_cast<unsigned>(m);
    else
      return m != 0;
  }

  /// Issues this thread's copies into the stage at byte offset `stage` from the base.
  __device__ __forceinline__ void load(int stage) const {
    const SmemAddr dst = sts + stage;
#pragma unroll
    for (int r = 0; r < ARows; ++r) // (an ignored source is not read: any address will do)
      cpAsync16(dst + r * Tile::RowStep * Tile::RowBytes, x + (aOff[r] + tapOff),
                word(aMask[r] & bit));
#pragma unroll
    for (int r = 0; r < BRows; ++r)
      cpAsync16(dst + (Tile::BM + r * Tile::RowStep) * Tile::RowBytes, w + (wOff + r * wRows),
                bit != 0 && ((bMask >> r) & 1u));
  }

  /// Moves this thread's chunk BK further along K: adds, and a carry into the next tap
  /// (several when Cg < BK).
  __device__ __forceinline__ void advance() {
    k += BK;
    wOff += BK;
    c += BK;
    tapOff += BK;
    while (c >= Cg) {
      c -= Cg;
      ++tap;
      tapOff += step2;
      if (++t2 == k2) {
        t2 = 0;
        tapOff += wrap2;
        if (++t1 == k1) {
          t1 = 0;
          tapOff += wrap1;
        }
      }
    }
    bit = k < kEnd ? Mask(1) << tap : Mask(0);
  }
};

template <class Tile, class I, class MT, class Mask, bool Pairs, class X, class Out>
__global__ void __launch_bounds__(Tile::Threads, Tile::MinBlocks)
    conv_fprop_mma(const ConvArgs<X, Out> a) {
  typedef typename Out::Value T; // the compute type (float; int for INT8)
  typedef MmaAcc<MT> Acc;
  constexpr int BM = Tile::BM, BN = Tile::BN, Stages = Tile::Stages;
  constexpr int BK = ConvMmaLoader<Tile, I, MT, Mask>::BK; // K per stage, in elements
  constexpr int MI = Tile::MI, NI = Tile::NI, RowBytes = Tile::RowBytes;
  DLC_DYNAMIC_SMEM(unsigned char, smem);
  const ConvShape &s = a.s;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp % Tile::WarpsM, wn = warp / Tile::WarpsM;
  const ConvBlock<I> blk(s, BN, BM); // (for its slice of K)
  // blockIdx.y: the group, then the tile of its Mg output channels (one division, once).
  const int perGroup = static_cast<int>((s.Mg + BN - 1) / BN),
            group = static_cast<int>(blockIdx.y) / perGroup,
            mTile = static_cast<int>(blockIdx.y) - group * perGroup;
  const I pBase = static_cast<I>(blockIdx.x) * BM,
          mFirst = static_cast<I>(group) * static_cast<I>(s.Mg),
          mBase = mFirst + static_cast<I>(mTile) * BN, mEnd = mFirst + static_cast<I>(s.Mg);
  const SmemAddr base = smemAddr(smem);
  ConvMmaLoader<Tile, I, MT, Mask> copier(s, pBase, mBase, mEnd,
                                          static_cast<I>(group) * static_cast<I>(s.Cg), blk.kBegin,
                                          blk.kEnd, tid, base);
  // Where this lane's ldmatrix rows lie in a stage, for each 32-byte half of a row (a k
  // step): A rows (lanes 0-7 rows 0-7 of the first 16 bytes, lanes 8-15 rows 8-15, lanes
  // 16-31 the same of the next 16) and B rows (lanes 0-7 channels 0-7 of the first 16
  // bytes, 8-15 of the next, 16-31 channels 8-15).
  // (Rows 16 apart share a swizzle.)
  constexpr int KSteps = Tile::KSteps;
  const int ar = (lane & 7) + (lane & 8), br = (lane & 7) + ((lane >> 4) << 3);
  SmemAddr aLd[KSteps], bLd[KSteps];
#pragma unroll
  for (int ks = 0; ks < KSteps; ++ks) {
    aLd[ks] = base + (wm * Tile::WM + ar) * RowBytes +
              (((2 * ks + (lane >> 4)) ^ Tile::swizzle(ar)) << 4);
    bLd[ks] = base + (BM + wn * Tile::WN + br) * RowBytes +
              (((2 * ks + ((lane >> 3) & 1)) ^ Tile::swizzle(br)) << 4);
  }
  // The accumulators start at the bias (lane (g, t) of n-tile j holds channels 2t and
  // 2t + 1 of its rows): its loads are issued before the main loop, not waited for
  // after it. Split-K partial sums start at 0 (conv_splitk_reduce adds the bias).
  T *partial = static_cast<T *>(s.partial);
  const int g = lane >> 2, t = lane & 3;
  Acc acc[MI][NI][4];
#pragma unroll
  for (int j = 0; j < NI; ++j) {
    const I m0 = mBase + wn * Tile::WN + 8 * j + 2 * t;
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const Acc b = (!partial && s.bias && m0 + e < mEnd)
                        ? ld<Acc>(static_cast<const typename MmaAccOf<MT>::bias *>(s.bias), m0 + e)
                        : Acc(0);
#pragma unroll
      for (int i = 0; i < MI; ++i)
        acc[i][j][e] = acc[i][j][e + 2] = b;
    }
  }
  const int tiles = static_cast<int>((blk.kEnd - blk.kBegin + BK - 1) / BK);
  // The prologue: the first Stages - 1 tiles in flight.
#pragma unroll
  for (int st = 0; st < Stages - 1; ++st) {
    if (st < tiles) {
      copier.load(st * Tile::StageBytes);
      copier.advance();
    }
    cpAsyncCommit();
  }
  // The stages read and written, as byte offsets from the base.
  constexpr int Ring = Stages * Tile::StageBytes;
  int readStage = 0, writeStage = (Stages - 1) * Tile::StageBytes;
  // A k step's fragments, by the lane's ldmatrix rows: step ks of the stage at `stage`.
  auto loadStep = [&](WarpFrags<MI, NI> &f, int stage, int ks) {
    SmemAddr aRow[MI], bRow[NI / 2];
#pragma unroll
    for (int i = 0; i < MI; ++i)
      aRow[i] = aLd[ks] + stage + i * 16 * RowBytes;
#pragma unroll
    for (int j = 0; j < NI / 2; ++j)
      bRow[j] = bLd[ks] + stage + j * 16 * RowBytes;
    warpTileLoad<MT, MI, NI>(f, aRow, bRow);
  };
  // Software-pipelined as the CUTLASS multistage main loop: a k step's products are
  // issued after the next step's fragment loads, and the wait for the next stage comes
  // between a stage's two steps, so neither ldmatrix's latency nor the barrier stalls
  // the tensor cores with nothing queued.
  WarpFrags<MI, NI> frag[2];
  cpAsyncWait<Stages - 2>(); // tile 0 has landed (this thread's copies)
  __syncthreads();           // ... everyone's
  if (tiles > 0)
    loadStep(frag[0], readStage, 0);
  for (int kt = 0; kt < tiles; ++kt) {
#pragma unroll
    for (int ks = 0; ks < KSteps - 1; ++ks) {
      loadStep(frag[(ks + 1) & 1], readStage, ks + 1);
      if (ks == 0) {
        // Tile kt + Stages - 1 into the stage tile kt - 1 was read from: every warp
        // passed the barrier after its last ldmatrix there.
        if (kt + Stages - 1 < tiles) {
          copier.load(writeStage);
          copier.advance();
        }
        cpAsyncCommit();
      }
      warpTileMma<MT, MI, NI>(acc, frag[ks & 1]);
    }
    cpAsyncWait<Stages - 2>(); // tile kt + 1 has landed (this thread's copies)
    __syncthreads();           // ... everyone's; and stage kt is read by all
    const int next = readStage + Tile::StageBytes == Ring ? 0 : readStage + Tile::StageBytes;
    // (After the last tile, a harmless reload of its stage: unconditional loads keep
    // the fragments in place, where a branch around them costs register copies.)
    loadStep(frag[KSteps & 1], kt + 1 < tiles ? next : readStage, 0);
    readStage = next;
    writeStage = writeStage + Tile::StageBytes == Ring ? 0 : writeStage + Tile::StageBytes;
    warpTileMma<MT, MI, NI>(acc, frag[(KSteps - 1) & 1]);
  }
  // The epilogue, on the fragments: lane (g, t) of m16n8 tile (i, j) holds positions
  // g and g + 8 of channels 2t and 2t + 1, adjacent in the output: with Pairs (M and
  // the group width even, so every pair is whole and starts at an even index) one
  // Out::store2 each.
  const I M = static_cast<I>(s.M), NP = static_cast<I>(s.NP);
#pragma unroll
  for (int j = 0; j < NI; ++j) {
    const I m0 = mBase + wn * Tile::WN + 8 * j + 2 * t;
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const I p = pBase + wm * Tile::WM + 16 * i + g + 8 * h;
        if (p >= NP || m0 >= mEnd) // (mEnd <= M: the end of the block's group)
          continue;
        const Acc v0 = acc[i][j][2 * h], v1 = acc[i][j][2 * h + 1];
        const bool both = m0 + 1 < mEnd;
        if (partial) {
          partial[convPartialIndex<true>(s, static_cast<I>(blockIdx.z), m0, p)] = v0;
          if (both)
            partial[convPartialIndex<true>(s, static_cast<I>(blockIdx.z), m0 + 1, p)] = v1;
          continue;
        }
        const I o = p * M + m0;
        if constexpr (Pairs) {
          Out::store2(a.out, o, v0, v1);
        } else {
          Out::store(a.out, o, v0);
          if (both)
            Out::store(a.out, o + 1, v1);
        }
      }
  }
}

template <class X> struct ConvPackArgs {
  ConvPackShape s;
  typename X::Params x;
};

/// conv_fprop_mma's operand [rows, C] as [rows, Cp]: channel c of row r is the source's
/// (through X, the fused prologue, when s.w is null), zero for c >= C.
template <class I, class MT, class X>
__global__ void __launch_bounds__(256) conv_pack(const ConvPackArgs<X> a) {
  typedef typename X::Value T;
  const ConvPackShape &s = a.s;
  MT *out = static_cast<MT *>(s.out);
  const MT *w = static_cast<const MT *>(s.w);
  DLC_GRID_STRIDE(i, static_cast<I>(s.total)) {
    I r = i;
    const I c = s.dCp.split(r), src = r * static_cast<I>(s.C) + c;
    T v = T(0);
    if (c < static_cast<I>(s.C))
      v = w ? ld<T>(w, src) : X::load(a.x, src);
    out[i] = Cvt<MT, T>::run(v);
  }
}

} // namespace dlc
