// Convolutions, channels-first (NCHW: weights [M, C/g, k...]) or channels-last
// (CL, NHWC: weights [M, k..., C/g], the im2col row index kk = tap * C + channel, so
// consecutive rows are consecutive channels in memory).
//
// conv_igemm: the implicit GEMM out[m, p] = sum_kk W[m, kk] * im2col(x)[kk, p] over
// M output channels, K = C * kSize and N * P output positions. A block computes a
// BM x BN tile with Tile::Threads threads, each TM x TN outputs (rows ty + TY * i,
// columns tx + TX * j); K is staged BK at a time in shared memory, the im2col element
// computed while staging (the column buffer never reaches memory). With splits > 1,
// blockIdx.z takes one slice of K and writes partial sums; conv_splitk_reduce adds
// them in a fixed order (deterministic) and applies the bias and epilogue. Fused
// prologue (X) and epilogue (Out) are generated functors.
//
// conv_igemm_tc: the same implicit GEMM on tensor cores for FP16/BF16 (WMMA 16x16x16,
// FP32 accumulators): A and the im2col tile B are staged in shared memory in the
// 16-bit type (padded rows: no bank conflicts, 32-byte aligned fragments), each warp
// multiplies its WM x WN part, the accumulators go through shared memory, and the
// bias and epilogue are applied per element as conv_igemm does (or the partial sums
// are written for conv_splitk_reduce).
//
// conv_direct: one thread per output (grouped convolutions, and depthwise ones that
// conv_depthwise does not take).
// conv_depthwise: channels-last depthwise convolutions, V channels per thread with
// vector loads and the filter in registers.
// conv_transpose: ConvTranspose as a gather, one thread per output.
#pragma once

#include "dlc_device.cuh"

#ifndef DLC_EMU
#include <mma.h>
#endif

namespace dlc {

/// A tile: BM output channels x BN positions, TM x TN per thread, BK of K per stage.
template <int BM_, int BN_, int TM_, int TN_> struct ConvTile {
  static constexpr int BM = BM_, BN = BN_, TM = TM_, TN = TN_, BK = 16;
  static constexpr int TY = BM / TM, TX = BN / TN, Threads = TX * TY;
};

template <class X, class Out> struct ConvArgs {
  ConvShape s;
  typename X::Params x;
  typename Out::Params out;
};

/// One column (output position p) of the implicit im2col matrix: where its window
/// starts, decomposed once; load(kk) is element (kk, p), zero in the padding.
template <bool Pointwise, bool CL, class I> struct ConvColumn {
  bool in;
  I xBase, base0, base1, base2, op;
  __device__ __forceinline__ ConvColumn(const ConvShape &s, I p)
      : in(p < static_cast<I>(s.NP)), xBase(0), base0(0), base1(0), base2(0), op(0) {
    if (!in)
      return;
    I q = p;
    op = s.dP.split(q); // q: the image
    xBase = q * static_cast<I>(s.C) * static_cast<I>(s.inSize);
    if (!Pointwise) {
      I r = op;
      const I o2 = s.dOut2.split(r), o1 = s.dOut1.split(r);
      base0 = r * static_cast<I>(s.stride[0]) - static_cast<I>(s.pad[0]);
      base1 = o1 * static_cast<I>(s.stride[1]) - static_cast<I>(s.pad[1]);
      base2 = o2 * static_cast<I>(s.stride[2]) - static_cast<I>(s.pad[2]);
    }
  }
  template <class X>
  __device__ __forceinline__ typename X::Value load(const typename X::Params &x, const ConvShape &s,
                                                    I kk) const {
    typedef typename X::Value T;
    if (!in)
      return T(0);
    if (Pointwise)
      return X::load(x, CL ? xBase + op * static_cast<I>(s.C) + kk
                           : xBase + kk * static_cast<I>(s.inSize) + op);
    I kr = kk, ch;
    if (CL) {
      ch = s.dCg.split(kr); // kr: the tap
    } else {
      ch = s.dKSize.div(kr);
      kr -= ch * static_cast<I>(s.kSize);
    }
    const I q2 = s.dK2.split(kr), q1 = s.dK1.split(kr);
    const I i0 = base0 + kr * static_cast<I>(s.dil[0]), i1 = base1 + q1 * static_cast<I>(s.dil[1]),
            i2 = base2 + q2 * static_cast<I>(s.dil[2]);
    if (i0 >= 0 && i0 < static_cast<I>(s.in[0]) && i1 >= 0 && i1 < static_cast<I>(s.in[1]) &&
        i2 >= 0 && i2 < static_cast<I>(s.in[2])) {
      const I cell = (i0 * static_cast<I>(s.in[1]) + i1) * static_cast<I>(s.in[2]) + i2;
      return X::load(x, CL ? xBase + cell * static_cast<I>(s.C) + ch
                           : xBase + ch * static_cast<I>(s.inSize) + cell);
    }
    return T(0);
  }
};

/// Where output channel m of GEMM column pp (image q, position o) is stored.
template <bool CL, class I>
__device__ __forceinline__ I convOutIndex(const ConvShape &s, I m, I pp) {
  if (CL)
    return pp * static_cast<I>(s.M) + m;
  I q = pp;
  const I o = s.dP.split(q);
  return (q * static_cast<I>(s.M) + m) * static_cast<I>(s.P) + o;
}

/// Where split z's partial sum of channel m at GEMM column pp is kept: [z][M][NP]
/// channels-first, [z][NP][M] channels-last, so that conv_splitk_reduce reads them in the
/// order it writes the output.
template <bool CL, class I>
__device__ __forceinline__ I convPartialIndex(const ConvShape &s, I z, I m, I pp) {
  const I M = static_cast<I>(s.M), NP = static_cast<I>(s.NP);
  return CL ? (z * NP + pp) * M + m : (z * M + m) * NP + pp;
}

/// Which column of the B tile a thread stages, and its first row: channels-first,
/// adjacent threads take adjacent positions (contiguous in NCHW); channels-last,
/// adjacent threads take adjacent rows (consecutive channels, contiguous in NHWC).
template <bool CL, int NT, int BN> struct ConvStaging {
  static constexpr int RowsPerPass = NT / BN;
  int col, row0;
  __device__ __forceinline__ explicit ConvStaging(int tid)
      : col(CL ? tid / RowsPerPass : tid % BN), row0(CL ? tid % RowsPerPass : tid / BN) {}
};

/// The implicit GEMM's extents, and this block's tile origin and slice of K
/// (blockIdx.z: the split).
template <class I> struct ConvBlock {
  I pBase, mBase, M, K, NP, kBegin, kEnd;
  __device__ __forceinline__ ConvBlock(const ConvShape &s, int BM, int BN)
      : pBase(static_cast<I>(blockIdx.x) * BN), mBase(static_cast<I>(blockIdx.y) * BM),
        M(static_cast<I>(s.M)), K(static_cast<I>(s.K)), NP(static_cast<I>(s.NP)),
        kBegin(static_cast<I>(blockIdx.z) * static_cast<I>(s.kPerSplit)),
        kEnd(K - kBegin < static_cast<I>(s.kPerSplit) ? K : kBegin + static_cast<I>(s.kPerSplit)) {}
};

template <class Tile, bool Pointwise, bool CL, class I, class WT, class X, class Out>
__global__ void __launch_bounds__(Tile::Threads) conv_igemm(const ConvArgs<X, Out> a) {
  typedef typename X::Value T;
  constexpr int BM = Tile::BM, BN = Tile::BN, BK = Tile::BK, TM = Tile::TM, TN = Tile::TN;
  constexpr int TX = Tile::TX, TY = Tile::TY, NT = Tile::Threads;
  static_assert(NT % BN == 0 && (BK * BN) % NT == 0 && (BK * BM) % NT == 0, "tile shape");
  constexpr int RowsPerPass = NT / BN, BRows = BK / RowsPerPass;
  DLC_SHARED(T, As, [BK][BM]);
  DLC_SHARED(T, Bs, [BK][BN]);
  const ConvShape &s = a.s;
  const WT *w = static_cast<const WT *>(s.w);
  const int tid = threadIdx.x, tx = tid % TX, ty = tid / TX;
  const ConvBlock<I> blk(s, BM, BN);
  const I pBase = blk.pBase, mBase = blk.mBase, M = blk.M, K = blk.K, NP = blk.NP,
          kBegin = blk.kBegin, kEnd = blk.kEnd;
  // This thread stages one column of every B tile: decompose its position once.
  const ConvStaging<CL, NT, BN> stg(tid);
  const int bCol = stg.col, bRow0 = stg.row0;
  const ConvColumn<Pointwise, CL, I> col(s, pBase + bCol);
  T acc[TM][TN];
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j)
      acc[i][j] = T(0);
  for (I kBase = kBegin; kBase < kEnd; kBase += BK) {
    // A: weights [M, K] row-major, transposed into As[k][m]; adjacent threads read adjacent k.
    // (A fixed trip count, so that the loop unrolls: a stage is one loop body.)
#pragma unroll
    for (int i = 0; i < (BK * BM + NT - 1) / NT; ++i) {
      const int e = tid + i * NT;
      if ((BK * BM) % NT != 0 && e >= BK * BM)
        break;
      const int r = e / BK, c = e % BK;
      const I m = mBase + r, kk = kBase + c;
      As[c][r] = (m < M && kk < kEnd) ? ld<T>(w, m * K + kk) : T(0);
    }
    // B: the im2col tile [BK, BN].
#pragma unroll
    for (int t = 0; t < BRows; ++t) {
      const int r = bRow0 + t * RowsPerPass;
      const I kk = kBase + r;
      Bs[r][bCol] = kk < kEnd ? col.template load<X>(a.x, s, kk) : T(0);
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
      T av[TM], bv[TN];
#pragma unroll
      for (int i = 0; i < TM; ++i)
        av[i] = As[kk][ty + TY * i];
#pragma unroll
      for (int j = 0; j < TN; ++j)
        bv[j] = Bs[kk][tx + TX * j];
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j)
          acc[i][j] += av[i] * bv[j];
    }
    __syncthreads();
  }
  T *partial = static_cast<T *>(s.partial);
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const I m = mBase + ty + TY * i;
    if (m >= M)
      continue;
    const T bias = (!partial && s.bias) ? ld<T>(static_cast<const WT *>(s.bias), m) : T(0);
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      const I pp = pBase + tx + TX * j;
      if (pp >= NP)
        continue;
      if (partial)
        partial[convPartialIndex<CL>(s, static_cast<I>(blockIdx.z), m, pp)] = acc[i][j];
      else
        Out::store(a.out, convOutIndex<CL>(s, m, pp), acc[i][j] + bias);
    }
  }
}

/// A tensor-core tile: BM x BN outputs per block, (BM / WM) x (BN / WN) warps, each
/// WM x WN in 16 x 16 fragments; K staged BK at a time.
template <int BM_, int BN_, int WM_, int WN_> struct ConvTcTile {
  static constexpr int BM = BM_, BN = BN_, WM = WM_, WN = WN_, BK = 32;
  static constexpr int WarpsN = BN / WN, Threads = (BM / WM) * WarpsN * 32, FM = WM / 16,
                       FN = WN / 16;
};

/// The K loop of conv_igemm_tc: stage the A (weights) and B (im2col) tiles in shared
/// memory, then the warps' WMMA products.
template <class Tile, bool Pointwise, bool CL, class I, class MT, class WT, class X, int LDA,
          int LDB>
__device__ __forceinline__ void convTcMainLoop(
    const typename X::Params &x, const ConvShape &s, const WT *w, MT *As, MT *Bs,
    nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> (&acc)[Tile::FM][Tile::FN],
    const ConvColumn<Pointwise, CL, I> &col, int tid, int wm, int wn, I mBase, I M, I K, I kBegin,
    I kEnd, int bRow0, int bCol) {
  typedef typename X::Value T;
  constexpr int BM = Tile::BM, BN = Tile::BN, BK = Tile::BK, NT = Tile::Threads, FM = Tile::FM,
                FN = Tile::FN;
  constexpr int RowsPerPass = NT / BN, BRows = BK / RowsPerPass;
  for (I kBase = kBegin; kBase < kEnd; kBase += BK) {
    // A: adjacent threads read adjacent k of one weight row (a fixed trip count, so
    // that the loop unrolls).
#pragma unroll
    for (int i = 0; i < (BM * BK + NT - 1) / NT; ++i) {
      const int e = tid + i * NT;
      if ((BM * BK) % NT != 0 && e >= BM * BK)
        break;
      const int r = e / BK, c = e % BK;
      const I m = mBase + r, kk = kBase + c;
      As[r * LDA + c] = Cvt<MT, T>::run((m < M && kk < kEnd) ? ld<T>(w, m * K + kk) : T(0));
    }
#pragma unroll
    for (int t = 0; t < BRows; ++t) {
      const int r = bRow0 + t * RowsPerPass;
      const I kk = kBase + r;
      Bs[r * LDB + bCol] = Cvt<MT, T>::run(kk < kEnd ? col.template load<X>(x, s, kk) : T(0));
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
      nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, MT, nvcuda::wmma::row_major>
          fa[FM];
      nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, MT, nvcuda::wmma::row_major>
          fb[FN];
#pragma unroll
      for (int i = 0; i < FM; ++i)
        nvcuda::wmma::load_matrix_sync(fa[i], As + (wm * Tile::WM + i * 16) * LDA + kk, LDA);
#pragma unroll
      for (int j = 0; j < FN; ++j)
        nvcuda::wmma::load_matrix_sync(fb[j], Bs + kk * LDB + wn * Tile::WN + j * 16, LDB);
#pragma unroll
      for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j)
          nvcuda::wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
    }
    __syncthreads();
  }
}

template <class Tile, bool Pointwise, bool CL, class I, class MT, class WT, class X, class Out>
__global__ void __launch_bounds__(Tile::Threads) conv_igemm_tc(const ConvArgs<X, Out> a) {
  typedef typename X::Value T; // float
  constexpr int BM = Tile::BM, BN = Tile::BN, BK = Tile::BK, NT = Tile::Threads, FM = Tile::FM,
                FN = Tile::FN;
  // Row pitches: multiples of 16 bytes (WMMA's ldm) that shift banks row to row.
  constexpr int LDA = BK + 8, LDB = BN + 8, LDC = BN + 4;
  static_assert(NT % BN == 0 && (BK * BN) % NT == 0 && BM % Tile::WM == 0 && BN % Tile::WN == 0,
                "tile shape");
  constexpr int RowsPerPass = NT / BN, BRows = BK / RowsPerPass;
  // The accumulators reuse the staging buffers once the K loop is done.
  constexpr int ABytes = BM * LDA * int(sizeof(MT)), BBytes = BK * LDB * int(sizeof(MT)),
                CBytes = BM * LDC * 4;
  constexpr int Bytes = ABytes + BBytes > CBytes ? ABytes + BBytes : CBytes;
  DLC_SHARED_ALIGNED(32, unsigned char, smem, [Bytes]);
  MT *As = reinterpret_cast<MT *>(smem);          // weights, [m][k]
  MT *Bs = reinterpret_cast<MT *>(smem + ABytes); // im2col, [k][p]
  float *Cs = reinterpret_cast<float *>(smem);    // accumulators, [m][p]
  const ConvShape &s = a.s;
  const WT *w = static_cast<const WT *>(s.w);
  const int tid = threadIdx.x, warp = tid / 32, wm = warp / Tile::WarpsN, wn = warp % Tile::WarpsN;
  const ConvBlock<I> blk(s, BM, BN);
  const I pBase = blk.pBase, mBase = blk.mBase, M = blk.M, K = blk.K, NP = blk.NP,
          kBegin = blk.kBegin, kEnd = blk.kEnd;
  const ConvStaging<CL, NT, BN> stg(tid);
  const int bCol = stg.col, bRow0 = stg.row0;
  const ConvColumn<Pointwise, CL, I> col(s, pBase + bCol);
  nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> acc[FM][FN];
#pragma unroll
  for (int i = 0; i < FM; ++i)
#pragma unroll
    for (int j = 0; j < FN; ++j)
      nvcuda::wmma::fill_fragment(acc[i][j], 0.0f);
  convTcMainLoop<Tile, Pointwise, CL, I, MT, WT, X, LDA, LDB>(
      a.x, s, w, As, Bs, acc, col, tid, wm, wn, mBase, M, K, kBegin, kEnd, bRow0, bCol);
#pragma unroll
  for (int i = 0; i < FM; ++i)
#pragma unroll
    for (int j = 0; j < FN; ++j)
      nvcuda::wmma::store_matrix_sync(Cs + (wm * Tile::WM + i * 16) * LDC + wn * Tile::WN + j * 16,
                                      acc[i][j], LDC, nvcuda::wmma::mem_row_major);
  __syncthreads();
  T *partial = static_cast<T *>(s.partial);
  // Adjacent threads store adjacent positions of one output channel (channels-last:
  // adjacent channels of one position, in the output and the partial sums alike).
  for (int e = tid; e < BM * BN; e += NT) {
    const int r = CL ? e % BM : e / BN, c = CL ? e / BM : e % BN;
    const I m = mBase + r, pp = pBase + c;
    if (m >= M || pp >= NP)
      continue;
    const T v = Cs[r * LDC + c];
    if (partial)
      partial[convPartialIndex<CL>(s, static_cast<I>(blockIdx.z), m, pp)] = v;
    else
      Out::store(a.out, convOutIndex<CL>(s, m, pp),
                 v + (s.bias ? ld<T>(static_cast<const WT *>(s.bias), m) : T(0)));
  }
}

/// Split-K: sums the partial products of every split in order, adds the bias and
/// applies the epilogue. One thread per output, in the output's order (channels fastest
/// channels-last): reads and writes coalesced. (BT: the bias's type, int32 with int8
/// weights, whose partial sums are exact integers.)
template <bool CL, class I, class WT, class X, class Out, class BT = WT>
__global__ void __launch_bounds__(256) conv_splitk_reduce(const ConvArgs<X, Out> a) {
  typedef typename X::Value T;
  const ConvShape &s = a.s;
  const T *partial = static_cast<const T *>(s.partial);
  const I total = static_cast<I>(s.M) * static_cast<I>(s.NP), MNP = total;
  const I step = static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x);
  for (I e = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x);
       e < total; e += step) {
    I m = e, pp = e;
    if (CL)
      m = s.dM.split(pp);
    else
      pp = s.dNP.split(m);
    T acc = s.bias ? ld<T>(static_cast<const BT *>(s.bias), m) : T(0);
    for (I z = 0; z < static_cast<I>(s.splits); ++z)
      acc += partial[z * MNP + e];
    Out::store(a.out, convOutIndex<CL>(s, m, pp), acc);
  }
}

/// A vendor convolution's result finished as the layer's own kernels finish theirs
/// (a cuDNN tactic, pkg::CudnnConv): y0 = s.partial, [N*P][M] channels-last of type YT,
/// plus the bias, through the fused epilogue. One thread per output, in its order.
template <class I, class YT, class WT, class X, class Out>
__global__ void __launch_bounds__(256) conv_finish(const ConvArgs<X, Out> a) {
  typedef typename X::Value T;
  const ConvShape &s = a.s;
  const YT *y0 = static_cast<const YT *>(s.partial);
  const I total = static_cast<I>(s.M) * static_cast<I>(s.NP);
  const I step = static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x);
  for (I e = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x);
       e < total; e += step) {
    I pp = e;
    const I m = s.dM.split(pp);
    T acc = ld<T>(y0, e);
    if (s.bias)
      acc += ld<T>(static_cast<const WT *>(s.bias), m);
    Out::store(a.out, convOutIndex<true>(s, m, pp), acc);
  }
}

/// Direct convolution, one thread per output: grouped and depthwise convolutions,
/// and integer types (BT: the bias's type, int32 with int8 weights).
template <bool CL, class I, class WT, class X, class Out, class BT = WT>
__global__ void __launch_bounds__(256) conv_direct(const ConvArgs<X, Out> a) {
  typedef typename X::Value T;
  const ConvShape &s = a.s;
  const WT *w = static_cast<const WT *>(s.w);
  const I total = static_cast<I>(s.N) * static_cast<I>(s.M) * static_cast<I>(s.P);
  const I step = static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x);
  for (I i = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x);
       i < total; i += step) {
    I r = i;
    I o2, o1, o0, m;
    if (CL) {
      m = s.dM.split(r);
      o2 = s.dOut2.split(r), o1 = s.dOut1.split(r), o0 = s.dOut0.split(r);
    } else {
      o2 = s.dOut2.split(r), o1 = s.dOut1.split(r), o0 = s.dOut0.split(r), m = s.dM.split(r);
    }
    const I nb = r, g = s.dMg.div(m);
    T acc = s.bias ? ld<T>(static_cast<const BT *>(s.bias), m) : T(0);
    if (CL) { // x [N, D..., C], w [M, k..., Cg]
      const I xb = nb * static_cast<I>(s.inSize) * static_cast<I>(s.C) + g * static_cast<I>(s.Cg);
      const I wb = m * static_cast<I>(s.kSize) * static_cast<I>(s.Cg);
      forEachWindowTap(s, o0, o1, o2, [&](I cell, I tap) {
        for (I c = 0; c < static_cast<I>(s.Cg); ++c)
          acc += X::load(a.x, xb + cell * static_cast<I>(s.C) + c) *
                 ld<T>(w, wb + tap * static_cast<I>(s.Cg) + c);
      });
      Out::store(a.out, i, acc);
      continue;
    }
    for (I c = 0; c < static_cast<I>(s.Cg); ++c) {
      const I xb =
          (nb * static_cast<I>(s.C) + g * static_cast<I>(s.Cg) + c) * static_cast<I>(s.inSize);
      const I wb = (m * static_cast<I>(s.Cg) + c) * static_cast<I>(s.kSize);
      forEachWindowTap(s, o0, o1, o2,
                       [&](I cell, I tap) { acc += X::load(a.x, xb + cell) * ld<T>(w, wb + tap); });
    }
    Out::store(a.out, i, acc);
  }
}

/// Depthwise convolution, channels-last (1D or 2D windows of at most 7x7): x [N, H, W, C]
/// read as it is from s.x, weights repacked when compiling as [KH * KW, C]. A thread
/// keeps V adjacent channels (V-wide loads: 16 bytes for FP32 3x3) and their filter
/// and bias in FP32 registers, and walks output positions g / (C / V), + threads /
/// (C / V), ...: two divisions per position, none per tap. Out-of-window taps are
/// skipped; results go through the fused store functor per channel.
template <int KH, int KW, int V, class I, class MT, class X, class Out>
__global__ void __launch_bounds__(256) conv_depthwise(const ConvArgs<X, Out> a) {
  typedef typename Out::Value T;
  typedef VecOf<MT, V> Vec;
  const ConvShape &s = a.s;
  const MT *x = static_cast<const MT *>(s.x);
  const MT *w = static_cast<const MT *>(s.w);
  const I C = static_cast<I>(s.C), CV = C / V;
  const I threads = static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x);
  const I g = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x);
  const I pstep = threads / CV; // the emitter launches at least C / V threads
  if (g >= pstep * CV)
    return;
  const I c0 = (g % CV) * V;
  float wr[KH * KW][V], bias[V];
#pragma unroll
  for (int t = 0; t < KH * KW; ++t) {
    const Vec wv = *reinterpret_cast<const Vec *>(w + static_cast<I>(t) * C + c0);
#pragma unroll
    for (int j = 0; j < V; ++j)
      wr[t][j] = Cvt<float, MT>::run(wv.v[j]);
  }
#pragma unroll
  for (int j = 0; j < V; ++j)
    bias[j] = s.bias ? Cvt<float, MT>::run(static_cast<const MT *>(s.bias)[c0 + j]) : 0.f;
  const I in1 = static_cast<I>(s.in[1]), in2 = static_cast<I>(s.in[2]);
  const I st1 = static_cast<I>(s.stride[1]), st2 = static_cast<I>(s.stride[2]);
  const I dl1 = static_cast<I>(s.dil[1]), dl2 = static_cast<I>(s.dil[2]);
  const I pd1 = static_cast<I>(s.pad[1]), pd2 = static_cast<I>(s.pad[2]);
  const I imageElems = static_cast<I>(s.inSize) * C;
  // Each tap's offset from the window's corner, once per thread (indices are signed: the
  // corner may lie in the padding, only in-window taps are read).
  I tapOff[KH * KW];
#pragma unroll
  for (int kh = 0; kh < KH; ++kh)
#pragma unroll
    for (int kw = 0; kw < KW; ++kw)
      tapOff[kh * KW + kw] = (kh * dl1 * in2 + kw * dl2) * C;
  const I lastH = (KH - 1) * dl1, lastW = (KW - 1) * dl2;
  for (I p = g / CV; p < static_cast<I>(s.NP); p += pstep) {
    I r = p;
    const I o2 = s.dOut2.split(r), o1 = s.dOut1.split(r); // r: the image (out[0] is 1)
    const I h0 = o1 * st1 - pd1, w0 = o2 * st2 - pd2;
    const I corner = r * imageElems + (h0 * in2 + w0) * C + c0;
    float acc[V];
#pragma unroll
    for (int j = 0; j < V; ++j)
      acc[j] = bias[j];
    auto tap = [&](int t) {
      const Vec xv = *reinterpret_cast<const Vec *>(x + (corner + tapOff[t]));
#pragma unroll
      for (int j = 0; j < V; ++j)
        acc[j] += Cvt<float, MT>::run(xv.v[j]) * wr[t][j];
    };
    if (h0 >= 0 && w0 >= 0 && h0 + lastH < in1 && w0 + lastW < in2) { // inside: no checks
#pragma unroll
      for (int t = 0; t < KH * KW; ++t)
        tap(t);
    } else {
#pragma unroll
      for (int kh = 0; kh < KH; ++kh) {
        const I h = h0 + kh * dl1;
#pragma unroll
        for (int kw = 0; kw < KW; ++kw) {
          const I ww = w0 + kw * dl2;
          if (h >= 0 && h < in1 && ww >= 0 && ww < in2)
            tap(kh * KW + kw);
        }
      }
    }
#pragma unroll
    for (int j = 0; j < V; ++j)
      Out::store(a.out, p * C + c0 + j, static_cast<T>(acc[j]));
  }
}

template <class Out> struct ConvTransposeArgs {
  ConvTransposeShape s;
  const void *x;
  typename Out::Params out;
};

/// ConvTranspose as a gather: each output sums the inputs whose window covers it.
template <class I, class XT, class Out>
__global__ void __launch_bounds__(256) conv_transpose(const ConvTransposeArgs<Out> a) {
  typedef typename Out::Value T;
  const ConvTransposeShape &s = a.s;
  const XT *x = static_cast<const XT *>(a.x);
  const XT *w = static_cast<const XT *>(s.w);
  const I step = static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x);
  for (I i = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x);
       i < static_cast<I>(s.total); i += step) {
    I r = i;
    const I y2 = s.dY2.split(r), y1 = s.dY1.split(r), y0 = s.dY0.split(r), m = s.dM.split(r);
    const I nb = r, g = s.dMg.div(m), mm = m - g * static_cast<I>(s.Mg);
    const I y[3] = {y0, y1, y2};
    T acc = s.bias ? ld<T>(static_cast<const XT *>(s.bias), m) : T(0);
    for (I c = g * static_cast<I>(s.Cg); c < (g + 1) * static_cast<I>(s.Cg); ++c)
      for (I k0 = 0; k0 < static_cast<I>(s.k[0]); ++k0)
        for (I k1 = 0; k1 < static_cast<I>(s.k[1]); ++k1)
          for (I k2 = 0; k2 < static_cast<I>(s.k[2]); ++k2) {
            const I kk[3] = {k0, k1, k2};
            I xi[3];
            bool inside = true;
#pragma unroll
            for (int d = 0; d < 3; ++d) {
              I t = y[d] + static_cast<I>(s.pad[d]) - kk[d] * static_cast<I>(s.dil[d]);
              if (t < 0) {
                inside = false;
                break;
              }
              const I rem = s.dStride[d].split(t);
              inside &= rem == 0 && t < static_cast<I>(s.out[d]);
              xi[d] = t;
            }
            if (!inside)
              continue;
            acc +=
                ld<T>(x, (nb * static_cast<I>(s.C) + c) * static_cast<I>(s.xSize) +
                             (xi[0] * static_cast<I>(s.out[1]) + xi[1]) * static_cast<I>(s.out[2]) +
                             xi[2]) *
                ld<T>(w, (c * static_cast<I>(s.Mg) + mm) * static_cast<I>(s.kSize) +
                             (k0 * static_cast<I>(s.k[1]) + k1) * static_cast<I>(s.k[2]) + k2);
          }
    Out::store(a.out, i, acc);
  }
}

} // namespace dlc
