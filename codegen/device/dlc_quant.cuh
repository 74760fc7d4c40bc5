// Quantized products of the kernel library: MatMulNBits, ONNX Runtime's weight-only
// quantized GEMM (LLM exports), with its 2-, 4- or 8-bit weights dequantized as they are
// read.
#pragma once

#include "dlc_device.cuh"

namespace dlc {

/// y[m, n] = sum_k a[m, k] * w[k, n] for few rows m (decoding: a GEMV, bound by reading
/// the weights), w = (q - zero) * scale from column n's packed row of Bits-bit values
/// (low bits first), a scale and a zero point (2^(Bits-1) where the model gives none)
/// per block of K. A block of K is whole 32-bit words (block_size >= 16 values), so a
/// word has one scale: the word's sum of (q - zero) * a is scaled once (FP32 throughout;
/// the reference rounds each weight first, a difference of FP32 rounding). One warp per
/// column and MR rows: each lane reads V words at a time (a warp 128 * V contiguous
/// bytes; SB: a block is whole vectors, one scale per vector), with AV a word's
/// activations in one vector load per row, keeps MR sums, and a warp reduction ends;
/// the last block's values past K are skipped.
/// One 32-bit word of matmul_nbits: its kPer values (q - zero, exact in FP32) times the
/// activations, summed per row, then times the block's scale, into acc. Full: every
/// value lies within K (else the ones past K are skipped); AV: the activations in one
/// vector load per row.
template <int Bits, int MR, bool Full, bool AV, class I, class T>
__device__ __forceinline__ void nbitsWord(float (&acc)[MR], unsigned bits, float bias, float scale,
                                          const T *a, const I (&row)[MR], I k0, I K) {
  constexpr int kPer = 32 / Bits, kPerByte = 8 / Bits;
  // The values by plane: plane p holds value j = 4 * ... in byte j / kPerByte where j %
  // kPerByte == p (each byte's p-th field, masked: one shift and one mask for 4 values).
  constexpr unsigned kByteMask = ((1u << Bits) - 1u) * 0x01010101u;
  unsigned plane[kPerByte];
#pragma unroll
  for (int p = 0; p < kPerByte; ++p)
    plane[p] = Bits == 8 ? bits : (bits >> (p * Bits)) & kByteMask;
  // float(q) as 2^23 + q (one byte permute puts q under 2^23's exponent bytes 0x4B0000),
  // minus 2^23 + zero (bias): q - zero exactly.
  auto value = [&](int j) {
    const unsigned f = __byte_perm(plane[j % kPerByte], 0x4B000000u, 0x7650u | (j / kPerByte));
    return __int_as_float(static_cast<int>(f)) - bias;
  };
  float part[MR];
#pragma unroll
  for (int r = 0; r < MR; ++r)
    part[r] = 0.0f;
  if constexpr (Full && AV) {
    VecOf<T, kPer> x[MR];
#pragma unroll
    for (int r = 0; r < MR; ++r)
      x[r] = *reinterpret_cast<const VecOf<T, kPer> *>(a + row[r] + k0);
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const float q = value(j);
#pragma unroll
      for (int r = 0; r < MR; ++r)
        part[r] += q * cvt<float>(x[r].v[j]);
    }
  } else {
#pragma unroll
    for (int j = 0; j < kPer; ++j)
      if (Full || k0 + j < K) {
        const float q = value(j);
#pragma unroll
        for (int r = 0; r < MR; ++r)
          part[r] += q * ld<float>(a, row[r] + k0 + j);
      }
  }
#pragma unroll
  for (int r = 0; r < MR; ++r)
    acc[r] += part[r] * scale;
}

template <int Bits, int MR, int V, bool AV, bool SB, class I, class T, class ST>
__global__ void __launch_bounds__(256) matmul_nbits(const NBitsShape s) {
  constexpr int kPer = 32 / Bits; // values per word
  constexpr unsigned kMask = (1u << Bits) - 1u;
  const int lane = threadIdx.x & 31;
  const I n = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x >> 5) +
              static_cast<I>(threadIdx.x >> 5);
  const I N = static_cast<I>(s.N), K = static_cast<I>(s.K), rows = static_cast<I>(s.rows);
  if (n >= N) // (n is the warp's: the whole warp leaves)
    return;
  const I m0 = static_cast<I>(blockIdx.y) * MR, rowWords = static_cast<I>(s.rowWords);
  const int blockShift = static_cast<int>(s.blockShift); // (words per block, a power of 2)
  const T *a = static_cast<const T *>(s.a);
  const unsigned *col = static_cast<const unsigned *>(s.b) + n * rowWords;
  const ST *scales = static_cast<const ST *>(s.scales) + n * static_cast<I>(s.blocks);
  const unsigned char *zeros =
      s.zeros ? static_cast<const unsigned char *>(s.zeros) + n * static_cast<I>(s.zpBytes)
              : nullptr;
  // (Rows past the last are computed on the last one and not stored.)
  I row[MR];
  for (int r = 0; r < MR; ++r)
    row[r] = (m0 + r < rows ? m0 + r : rows - 1) * K;
  float acc[MR];
  for (int r = 0; r < MR; ++r)
    acc[r] = 0.0f;
  // The block's scale, and 2^23 + its zero point (2^(Bits-1) where there is none).
  auto block = [&](I w, float &scale, float &bias) {
    const I kb = w >> blockShift;
    scale = ld<float>(scales, kb);
    unsigned zero = 1u << (Bits - 1);
    if (zeros)
      zero = (zeros[(kb * Bits) >> 3] >> ((kb * Bits) & 7)) & kMask;
    bias = __int_as_float(static_cast<int>(0x4B000000u | zero));
  };
  // Whole vectors of words within K, then the rest a word at a time (the last block's
  // padding past K).
  const I fullWords = K / kPer, vectors = fullWords / V * V;
  for (I w0 = static_cast<I>(lane) * V; w0 < vectors; w0 += 32 * V) {
    const VecOf<unsigned, V> words = *reinterpret_cast<const VecOf<unsigned, V> *>(col + w0);
    float scale, bias;
    if (SB) // (SB: a block is whole vectors, so the vector's words share one block)
      block(w0, scale, bias);
#pragma unroll
    for (int v = 0; v < V; ++v) {
      if (!SB)
        block(w0 + v, scale, bias);
      nbitsWord<Bits, MR, true, AV>(acc, words.v[v], bias, scale, a, row, (w0 + v) * kPer, K);
    }
  }
  for (I w = vectors + static_cast<I>(lane); w < rowWords && w * kPer < K; w += 32) {
    float scale, bias;
    block(w, scale, bias);
    nbitsWord<Bits, MR, false, false>(acc, col[w], bias, scale, a, row, w * kPer, K);
  }
  T *y = static_cast<T *>(s.y);
#pragma unroll
  for (int r = 0; r < MR; ++r) {
    const float sum = warpReduce(acc[r], SumOp());
    if (lane == 0 && m0 + r < rows)
      st(y, (m0 + r) * N + n, sum);
  }
}

} // namespace dlc
