// dlc kernel-library parameters: the structs a launch passes to a library kernel.
//
// This header is compiled three ways: by NVRTC and by the host compiler for emu (as
// part of the kernels), and by the code generator itself, which fills the structs
// and writes their bytes into the launch's parameter buffer. One definition gives
// one layout on both sides: every field is 8 bytes (i64, u64, a pointer) or a Divmod
// (24 bytes, 8-aligned), so the layout has no padding and is the same under the
// x86-64 and NVPTX64 ABIs. Pointers are written by the runtime (relocations); the
// code generator leaves them null.
#pragma once

#if defined(__CUDACC__) || defined(DLC_EMU)
#define DLC_DEVICE_SIDE 1
#define DLC_HD __device__ __forceinline__
#else
#include <cstdint>
#endif

namespace dlc {

#ifdef DLC_DEVICE_SIDE
typedef long long i64;
typedef unsigned long long u64;
#else
// The host's 64-bit types (long on x86-64 Linux): the same size and alignment.
typedef std::int64_t i64;
typedef std::uint64_t u64;
#endif

/// Division by a divisor fixed at launch (d >= 1) with a multiply and a shift
/// (Granlund and Montgomery, "Division by invariant integers using multiplication",
/// 1994; Hacker's Delight 10-9): q = (mulhi(x, m) + x) >> s, where s = ceil(log2 d)
/// and m = floor(2^N (2^s - d) / d) + 1 for N-bit arithmetic. Exact for
/// 0 <= x < 2^(N-1) (so the sum cannot overflow): 32-bit kernels keep every index
/// below 2^31, 64-bit kernels below 2^63.
struct Divmod {
  i64 d;
  u64 m64;
  unsigned m32, s;

#ifdef DLC_DEVICE_SIDE
  DLC_HD int div(int x) const {
    return static_cast<int>((__umulhi(static_cast<unsigned>(x), m32) + static_cast<unsigned>(x)) >>
                            s);
  }
  DLC_HD i64 div(i64 x) const {
    return static_cast<i64>((__umul64hi(static_cast<u64>(x), m64) + static_cast<u64>(x)) >> s);
  }
  template <class I> DLC_HD I mod(I x) const {
    return x - div(x) * static_cast<I>(d);
  }
  /// x becomes x / d; returns x % d.
  template <class I> DLC_HD I split(I &x) const {
    I q = div(x);
    I r = x - q * static_cast<I>(d);
    x = q;
    return r;
  }
#else
  static Divmod make(i64 divisor) {
    Divmod r{};
    r.d = divisor < 1 ? 1 : divisor;
    unsigned s = 0;
    while (s < 63 && (i64(1) << s) < r.d)
      ++s;
    r.s = s;
    unsigned __int128 one = 1;
    r.m64 = static_cast<u64>(
        ((one << 64) * ((one << s) - static_cast<u64>(r.d))) / static_cast<u64>(r.d) + 1);
    // The 32-bit magic exists only for divisors a 32-bit kernel can see.
    if (r.d < (i64(1) << 31))
      r.m32 = static_cast<unsigned>(
          (((u64(1) << 32) * ((u64(1) << s) - static_cast<u64>(r.d))) / static_cast<u64>(r.d)) + 1);
    return r;
  }
#endif
};
static_assert(sizeof(Divmod) == 24, "Divmod layout");

/// The largest rank a strided view handles.
inline constexpr int kMaxRank = 8;
/// Elements one block of a multi-tensor kernel covers (dlc_elementwise.cuh).
inline constexpr int kMultiTensorChunk = 1024;

/// An element's offset from its linear index in a shape of up to kMaxRank dims, with
/// a stride per dim (0 broadcasts): offset(i) = sum_d coord_d(i) * stride[d]. Dims
/// are right-aligned: dim kMaxRank - 1 is the innermost; unused leading dims have
/// extent 1.
struct Strided {
  i64 rank;
  Divmod ext[kMaxRank];
  i64 stride[kMaxRank];
#ifdef DLC_DEVICE_SIDE
  template <class I> DLC_HD I offset(I i) const {
    I off = 0;
#pragma unroll
    for (int d = kMaxRank - 1; d >= 0; --d)
      if (d >= kMaxRank - rank)
        off += ext[d].split(i) * static_cast<I>(stride[d]);
    return off;
  }
#endif
};

//===----------------------------------------------------------------------===//
// Convolution (NCHW, spatial dims normalized to 3 with leading 1s).
//===----------------------------------------------------------------------===//

struct ConvShape {
  const void *w;    // [M, C/groups, k0, k1, k2]
  const void *bias; // [M], or null
  void *partial;    // split-K: [splits, M, N*P] partial sums, else null
  i64 N, C, M, Cg, Mg;
  i64 in[3], out[3], k[3], stride[3], dil[3], pad[3];
  i64 K;         // Cg * kSize: the GEMM's reduction length
  i64 P;         // output positions per image
  i64 NP;        // N * P: the GEMM's columns
  i64 inSize;    // input positions per channel
  i64 kSize;     // k0 * k1 * k2
  i64 kPerSplit; // reduction slice per split (a multiple of the tile's BK)
  i64 splits;
  Divmod dKSize, dK2, dK1, dP, dNP, dOut2, dOut1, dOut0, dM, dMg;
  Divmod dCg;    // channels-last: K is (tap, channel), channel fastest
  const void *x; // the input, for kernels that copy it as it is (conv_fprop_mma), else null
};

/// conv_pack: an operand of conv_fprop_mma rewritten as [rows, Cp], channels padded with
/// zeros to a multiple of 8 (Cp >= C) and any fused prologue applied.
struct ConvPackShape {
  void *out;        // [rows, Cp]
  const void *w;    // the source [rows, C] read as it is (weights), or null: through X
  i64 C, Cp, total; // total = rows * Cp
  Divmod dCp;
};

/// ConvTranspose as a gather: y[n, m, y] = b[m] + sum x[n, c, (y + pad - k * dil) / stride] * w[c,
/// m % Mg, k].
struct ConvTransposeShape {
  const void *w;    // [C, Mg, k0, k1, k2]
  const void *bias; // [M], or null
  i64 N, C, M, Cg, Mg, total;
  // The gather view's window: "in" is ConvTranspose's output, "out" its input.
  i64 in[3], out[3], k[3], stride[3], dil[3], pad[3];
  i64 ySize, xSize, kSize;
  Divmod dY2, dY1, dY0, dM, dMg, dStride[3];
};

//===----------------------------------------------------------------------===//
// Pooling
//===----------------------------------------------------------------------===//

struct PoolShape {
  void *indices;      // MaxPool's second output (int64), or null
  const void *x, *dy; // MaxPoolGrad's operands (pool_max_grad)
  i64 total;          // output elements (pool_max_grad: runs of input elements)
  i64 in[3], out[3], k[3], stride[3], dil[3], pad[3], padEnd[3];
  i64 inSize, outSize;
  i64 countIncludePad, columnMajor, spatialRank;
  i64 C; // channels (channels-last pooling)
  // pool_max_grad: dC splits the channel runs, dIn0 the input's first spatial dim
  Divmod dOut2, dOut1, dOut0, dIn2, dIn1, dIn0, dC;
};

//===----------------------------------------------------------------------===//
// Reductions, softmax, arg/top-k, cumulative sums
//===----------------------------------------------------------------------===//

/// Reduce*: output element o reads x at kept.offset(o) + red.offset(r), r < len.
/// reduce_cols: x is [outCount / inner, len, inner] (kept and red unused).
struct ReduceShape {
  i64 outCount, len, inner;
  Strided kept, red;
  // A split reduction (reduce_split / reduce_cols<Split>, then reduce_merge): each
  // output's elements in `splits` chunks of `chunk`, partials [outCount][splits] in the
  // compute type.
  void *partial;
  i64 splits, chunk;
};

/// A one-axis op over rows: element j of row r is at (r / inner) * len * inner + r % inner + j *
/// inner.
struct AxisShape {
  void *out2; // TopK: the indices output (int64)
  i64 rows, len, inner, k;
  Divmod dInner, dLen;
  const void *x;  // softmax_rows: the input read as it is (SoftmaxGrad: y)
  void *y;        // softmax_rows: the output written as it is, or null (through Out)
  const void *dy; // SoftmaxGrad: the output gradient
};

//===----------------------------------------------------------------------===//
// Normalization
//===----------------------------------------------------------------------===//

/// Rows of `len` contiguous elements; the scale/bias element of (row, j) is
/// (row % rowMod) * rowMul + param.offset(j).
struct NormShape {
  const void *scale, *bias; // bias may be null
  void *mean, *invStd;      // optional statistics outputs (one per row)
  i64 rows, len, rowMul;
  double eps;
  Divmod rowMod;
  Strided param;
  const void *x;  // row_norm_rows: the input read as it is (LayerNormGrad: x)
  void *y;        // row_norm_rows: the output written as it is, or null (through Out)
  const void *dy; // LayerNormGrad: the output gradient (y is dx)
};

/// BatchNormalization in training mode: batch statistics per channel, running
/// statistics updated; LRN: a window over channels.
struct ChannelShape {
  const void *x, *scale, *bias, *mean, *var;
  void *y, *runMean, *runVar;
  i64 N, C, S, total, lo, hi;
  double eps, momentum, alpha, beta, bias0, size;
  Divmod dS, dC;
};

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

/// An operand of attention_mma: row r of (batch, head) bh = bo inner + bi (dInner
/// splits it) at element bo sOuter + bi sInner + r sRow of p, its values contiguous.
struct AttentionOperand {
  const void *p;
  i64 sOuter, sInner, sRow;
  Divmod dInner;
};

struct AttentionShape {
  i64 BH, Sq, Sk, hd, hdv;
  Divmod dHd, dHdv;
  // attention_mma: keys past query row + keyReach are masked for every row (a causal
  // mask: 0, or Sk - Sq), so the key tiles past a block's last row + keyReach are
  // skipped (Sk: none are).
  i64 keyReach;
  // attention_mma without a chain functor: the scores' scale (a chain that only
  // multiplies by a positive constant), folded into the softmax's exp2.
  float scale, unused;
  // attention with Split (split-KV, for few query rows): block z takes keys [z
  // splitKeys, (z + 1) splitKeys) and writes its unnormalized output and (max, sum) to
  // partial ([splits][BH Sq][hdv], then [splits][BH Sq][2], FP32); attention_combine
  // merges the splits.
  i64 splits, splitKeys;
  float *partial;
  // attention_mma: Q [BH, Sq, hd], K [BH, Sk, hd] and V [BH, Sk, hdv], as views of the
  // graph's values (the head split's slices and transposes) or as attention_pack
  // wrote them.
  AttentionOperand q, k, v;
  // attention_mma (FlashAttention): where not null, each row's log-sum-exp of its
  // scaled scores ([BH, Sq], natural log; -inf where every key is masked).
  float *lse;
  // attention_mma with Bias (FlashAttention's additive bias): element (bh, row, key) at
  // row * sRow + key of bias's rows for bh (a broadcast view: strides may be 0).
  AttentionOperand bias;
  // With Drop (FlashAttention's dropout): pair (row, key) of bh is kept, scaled by
  // dropScale, where Philox's uniform number for (seed, *step, (bh Sq + row) Sk + key)
  // is at least dropout (the Dropout op's mask of the probabilities).
  const i64 *step;
  i64 seed;
  float dropout, dropScale;
};

/// FlashAttentionGrad: attention_grad_prep then attention_grad_mma twice (dQ; dK and
/// dV). Q, K, V, O and dO are contiguous [BH, rows, hd or hdv] MT; keys past query +
/// keyReach are masked (causal; Sk: none); an additive bias is added to the scaled
/// scores. lse2 and delta ([BH, SqPad], SqPad a
/// multiple of 64) are the prep's: LSE log2(e) (+inf past Sq, so that those rows'
/// probabilities are 0) and rowsum(dO O).
struct AttentionGradShape {
  i64 BH, Sq, Sk, hd, hdv, SqPad, keyReach;
  float scale, unused;
  const void *q, *k, *v, *o, *dO;
  const float *lse;
  float *lse2, *delta;
  void *dq, *dk, *dv;
  AttentionOperand bias; // (with Bias: as AttentionShape::bias)
  const i64 *step;       // (with Drop: as AttentionShape's)
  i64 seed;
  float dropout, dropScale;
};

/// attention_finish: a vendor attention's output o ([BH, Sq, hdv] contiguous, `total`
/// elements) through the fused group's output functor (a cuDNN tactic).
struct AttentionFinishShape {
  const void *o;
  i64 total;
};

/// attention_pack: operand j (0 Q, 1 K, 2 V) as attention_mma reads it, n[j] elements
/// to out[j] (null: not packed). K is read transposed (the graph's K' is [BH, hd, Sk]):
/// element (bh, key, d) from (bh, d, key), dKd and dKs splitting d and key.
struct AttentionPackShape {
  i64 n[3];
  void *out[3];
  i64 Sk, hd;
  Divmod dKd, dKs;
};

//===----------------------------------------------------------------------===//
// Recurrent cells (LSTM, GRU): one time step, or all of them (persistent kernel)
//===----------------------------------------------------------------------===//

struct RnnShape {
  const void *xw;   // [S*B (in X's order), G*H]: X W^T for every step
  const void *hr;   // [B, G*H]: h R^T of this step (per-step schedule)
  const void *bias; // [2*G*H] of this direction (Wb then Rb), or null
  const void *peep; // LSTM peepholes [3*H] of this direction, or null
  const void *lens; // sequence_lens [B] (int32), or null
  const void *R;    // persistent kernel: R of this direction [G*H, H]
  const void *hCur; // h of the previous step [B, H]
  void *hNext;      // h of this step [B, H]
  void *c;          // LSTM cell state [B, H]
  void *y;          // Y
  void *rh;         // GRU without linear_before_reset: r * h (stage 1 -> GEMM -> stage 2)
  const void *rhR;  // ... and (r * h) Rh^T
  void *barrier;    // persistent kernel: grid barrier state (2 x u32, zeroed)
  const void *h0;   // initial_h [dirs, B, H] (or [B, dirs, H]), or null
  const void *c0;   // initial_c, or null
  void *yh, *yc;    // Y_h, Y_c (final states), or null
  i64 S, B, H, G, dirs, dir, reverse, batchFirst, step;
  i64 units; // persistent kernel: hidden units per block
  i64 coupled, linearBeforeReset;
  double clip; // 0: none
  double alpha[3], beta[3];
  Divmod dH;
};

//===----------------------------------------------------------------------===//
// Data movement and index ops
//===----------------------------------------------------------------------===//

/// y[i] = x[map.offset(i) + base] for i < total (transposes, broadcasts, slices, splits).
struct CopyShape {
  const void *x;
  void *y;
  i64 total, base;
  Strided map;
};

/// Pad: output coordinates minus `pads` give the input coordinates (per mode).
struct PadShape {
  const void *x, *fillPtr; // fillPtr: a one-element constant-value tensor, or null
  void *y;
  i64 total, rank;
  double fill;
  i64 fillInt;
  i64 inDim[kMaxRank], inStride[kMaxRank], pad[kMaxRank];
  Divmod outDim[kMaxRank];
};

/// Gather/scatter families: coordinates of the index tensor's (or output's) element
/// decompose over `dims`; `xStride` strides into the data.
struct IndexShape {
  const void *x, *idx, *upd;
  void *y;
  unsigned *err; // the launch's check word (dlc_device.cuh: reportDataError)
  // The deterministic scatter-add (--deterministic): per output element a 64-bit
  // fixed-point sum and an FP32 sum of the non-finite updates, and a bound on the
  // largest finite |update| as FP64 bits.
  long long *fixedSum;
  float *special;
  unsigned long long *amax;
  i64 total, rank, axis, axisDim, q, slice, perBatch, batchStride, depth;
  i64 xStride[kMaxRank], xDim[kMaxRank];
  Divmod dims[kMaxRank], dSlice, dPerBatch;
};

/// Resize through tap tables (per output dim: count, input index and weight per tap).
struct ResizeShape {
  const void *x, *idx[kMaxRank], *w[kMaxRank], *cnt[kMaxRank];
  void *y;
  i64 total, rank, maxTaps;
  double extrapolation;
  i64 xStride[kMaxRank];
  Divmod outDim[kMaxRank];
};

/// Generators and small ops over one output: ConstantOfShape, Range, Trilu,
/// OneHot, ReverseSequence, MaxUnpool, integer MatMul, NegativeLogLikelihoodLoss.
/// A GEMM's bias and activation as a kernel (dlc_elementwise.cuh: gemm_epilogue).
struct GemmEpilogueShape {
  void *d;
  const void *bias; // null: none
  i64 total, ldc, strideC;
  Divmod dCols, dRows;
};

/// MatMulNBits (dlc_quant.cuh): a [rows, K], b the packed columns (rowWords 32-bit
/// words each), scales [N, blocks], zeros (null: none) zpBytes per column, y [rows, N].
struct NBitsShape {
  const void *a, *b, *scales, *zeros;
  void *y;
  i64 rows, K, N, blocks, block, rowWords, zpBytes, blockShift; // words per block: 1 << it
};

struct MiscShape {
  const void *a, *b, *c;
  void *y;
  unsigned *err; // the launch's check word, where the kernel checks its data
  i64 total, n0, n1, n2, n3, n4, n5;
  double f0, f1;
  Divmod d0, d1, d2;
  Strided map;
};

} // namespace dlc
