// PTX's warp-level matrix instructions and asynchronous copies (sm_80+), as inline
// PTX on the GPU and as the emu prelude's emulation of their documented per-lane
// semantics (dlc_emu_prelude.h, namespace dlc_emu_ptx) on emu.
//
//   cpAsync16        cp.async.cg.shared.global, 16 bytes, zero-filled (ignore-src) when !full
//   cpAsyncCommit    cp.async.commit_group
//   cpAsyncWait<N>   cp.async.wait_group N
//   ldmatrix<N, T>   ldmatrix.sync.aligned.m8n8.x{1,2,4}{.trans}.shared.b16
//   mma16816<MT>     mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32
//   mma1688Tf32      mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32
//   mma16832S8       mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32
//   mma16832F8<E5M2> mma.sync.aligned.m16n8k32.row.col.f32.{e4m3,e5m2}.{e4m3,e5m2}.f32 on sm_89
//                    and later (ptxas turns it into FP16 conversions and two HMMA.16816 on
//                    sm_90: native FP8 there is wgmma's); on sm_80 and sm_86 the same two
//                    m16n8k16 FP16 products of the exactly converted operands
//   toTf32           cvt.rna.tf32.f32
//   warpTileLoad     a warp's A and B fragments of an MI x NI tile for one k step:
//                    ldmatrix.x4 each (on emu one warp operation for all of them)
//   warpTileMma      the tile's MI x NI m16n8 products from those fragments (on emu
//                    one warp operation), so that a k step's loads overlap the last
//                    one's products; int accumulators with INT8 operands
//   MmaAcc<MT>       the accumulator type of MT's products (float; int for INT8)
//   warpLoadBTrans   B fragments of a k step from a [k][n] tile: ldmatrix.x4.trans
//                    each pair of n-tiles (on emu one warp operation)
//   exp2Approx       ex2.approx.ftz.f32
//   packPair         two FP32 values as a 16-bit pair (an A fragment register)
//
// Shared-memory operands are SmemAddr: a 32-bit shared-window address on the GPU (what
// ldmatrix and cp.async take), the pointer itself on emu; both advance by byte offsets.
#pragma once

#include "dlc_device.cuh"

namespace dlc {

#ifdef DLC_EMU
typedef unsigned long long SmemAddr;
__device__ __forceinline__ SmemAddr smemAddr(const void *p) {
  return reinterpret_cast<SmemAddr>(p);
}
#else
typedef unsigned SmemAddr;
__device__ __forceinline__ SmemAddr smemAddr(const void *p) {
  return static_cast<SmemAddr>(__cvta_generic_to_shared(p));
}
#endif

/// Copies 16 bytes from global `src` to shared `dst` asynchronously; when `full` is 0,
/// writes 16 zero bytes instead and reads nothing (cp.async's ignore-src predicate), so
/// `src` need only be some valid address. (`full` is any word, nonzero to copy: a mask
/// AND becomes the predicate in one instruction, with no select of a src-size.)
__device__ __forceinline__ void cpAsync16(SmemAddr dst, const void *src, unsigned full) {
#ifdef DLC_EMU
  dlc_emu_api_ptr->cp_async(reinterpret_cast<void *>(dst), src, 16, full ? 16 : 0);
#else
  asm volatile("{\n .reg .pred ignore;\n setp.eq.u32 ignore, %2, 0;\n"
               " cp.async.cg.shared.global [%0], [%1], 16, ignore;\n}\n" ::"r"(dst),
               "l"(src), "r"(full));
#endif
}
__device__ __forceinline__ void cpAsyncCommit() {
#ifdef DLC_EMU
  dlc_emu_api_ptr->cp_async_commit();
#else
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
/// Waits until at most N of this thread's committed groups are pending.
template <int N> __device__ __forceinline__ void cpAsyncWait() {
#ifdef DLC_EMU
  dlc_emu_api_ptr->cp_async_wait(N);
#else
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

/// ldmatrix of Num (1, 2, 4) 8x8 matrices of 16-bit elements; lane 8 i + j gives the
/// address of row j of matrix i.
template <int Num, bool Trans>
__device__ __forceinline__ void ldmatrix(unsigned (&r)[Num], SmemAddr addr) {
  static_assert(Num == 1 || Num == 2 || Num == 4, "ldmatrix loads 1, 2 or 4 matrices");
#ifdef DLC_EMU
  dlc_emu_ptx::ldmatrix<Num, Trans>(r, addr);
#else
  if constexpr (Num == 1) {
    if constexpr (Trans)
      asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n"
                   : "=r"(r[0])
                   : "r"(addr));
    else
      asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n"
                   : "=r"(r[0])
                   : "r"(addr));
  } else if constexpr (Num == 2) {
    if constexpr (Trans)
      asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                   : "=r"(r[0]), "=r"(r[1])
                   : "r"(addr));
    else
      asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
                   : "=r"(r[0]), "=r"(r[1])
                   : "r"(addr));
  } else {
    if constexpr (Trans)
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                   : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                   : "r"(addr));
    else
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                   : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                   : "r"(addr));
  }
#endif
}

template <class MT> struct MmaKind;
template <> struct MmaKind<__half> { static constexpr int value = 0; };
template <> struct MmaKind<__nv_bfloat16> { static constexpr int value = 1; };
template <> struct MmaKind<float> { static constexpr int value = 2; };       // TF32
template <> struct MmaKind<signed char> { static constexpr int value = 3; }; // s8, k32
template <> struct MmaKind<f8e4m3> { static constexpr int value = 4; };      // e4m3, k32
template <> struct MmaKind<f8e5m2> { static constexpr int value = 5; };      // e5m2, k32
/// The accumulators of MT's products: FP32, or exact int32 sums of INT8 products; and
/// the type of a bias added to them (the operands', or int32 sums).
template <class MT> struct MmaAccOf {
  typedef float type;
  typedef MT bias;
};
template <> struct MmaAccOf<signed char> {
  typedef int type;
  typedef int bias;
};
template <> struct MmaAccOf<f8e4m3> {
  typedef float type;
  typedef float bias;
};
template <> struct MmaAccOf<f8e5m2> {
  typedef float type;
  typedef float bias;
};
template <class MT> using MmaAcc = typename MmaAccOf<MT>::type;

/// d += a b over a 16 x 8 tile, k 16, 16-bit MT operands, FP32 accumulators.
template <class MT>
__device__ __forceinline__ void mma16816(float (&d)[4], const unsigned (&a)[4],
                                         const unsigned (&b)[2]) {
#ifdef DLC_EMU
  dlc_emu_ptx::mma<MmaKind<MT>::value>(d, a, b);
#else
  if constexpr (MmaKind<MT>::value == 0)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

/// d += a b over a 16 x 8 tile, k 8, TF32 operands (FP32 bits, see toTf32).
__device__ __forceinline__ void mma1688Tf32(float (&d)[4], const unsigned (&a)[4],
                                            const unsigned (&b)[2]) {
#ifdef DLC_EMU
  dlc_emu_ptx::mma<2>(d, a, b);
#else
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, "
               "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

/// d += a b over a 16 x 8 tile, k 32, INT8 operands, int32 accumulators (wrapping, as
/// mma.sync without .satfinite): the fragments hold 4 bytes of K per register where
/// m16n8k16 holds 2 halves, the same bytes, so ldmatrix loads them alike.
__device__ __forceinline__ void mma16832S8(int (&d)[4], const unsigned (&a)[4],
                                           const unsigned (&b)[2]) {
#ifdef DLC_EMU
  dlc_emu_ptx::mmaS8(d, a, b);
#else
  asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, "
               "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
               : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

/// Two FP16 values (lo, hi) of the float8 bytes `sel` picks from r (__byte_perm's
/// selector: bytes 0 and 1, or 2 and 3, into the upper byte of each half): e5m2 is FP16's
/// upper byte; e4m3's sign, exponent and mantissa move down one bit and the product by
/// 2^8 rebiases the exponent (7 -> 15), exactly, subnormals included (NaN excepted).
template <bool E5M2> __device__ __forceinline__ unsigned f8PairToHalf2(unsigned r, unsigned sel) {
  const unsigned v = __byte_perm(r, 0u, sel);
  if constexpr (E5M2)
    return v;
  const unsigned h = (v & 0x80008000u) | ((v >> 1) & 0x3f803f80u);
  const __half2 p = __hmul2(*reinterpret_cast<const __half2 *>(&h), __float2half2_rn(256.0f));
  return *reinterpret_cast<const unsigned *>(&p);
}

/// mma16832F8 where float8 has no tensor-core instruction (sm_80, sm_86): lane (g, t)'s
/// bytes 0-1 and 2-3 of each register are K 4t..4t+1 and 4t+2..4t+3 (and 16 more in
/// registers 2-3 of A, 1 of B); as m16n8k16's K 2t..2t+1 and 2t+8..2t+9 of A and B
/// alike, each pair of K meets its own pair, so two FP16 products of the converted halves
/// sum the same 32 products.
template <bool E5M2>
__device__ __forceinline__ void mma16832F8ViaF16(float (&d)[4], const unsigned (&a)[4],
                                                 const unsigned (&b)[2]) {
  for (int h = 0; h < 2; ++h) {
    const unsigned ah[4] = {
        f8PairToHalf2<E5M2>(a[2 * h], 0x1404u), f8PairToHalf2<E5M2>(a[2 * h + 1], 0x1404u),
        f8PairToHalf2<E5M2>(a[2 * h], 0x3424u), f8PairToHalf2<E5M2>(a[2 * h + 1], 0x3424u)};
    const unsigned bh[2] = {f8PairToHalf2<E5M2>(b[h], 0x1404u), f8PairToHalf2<E5M2>(b[h], 0x3424u)};
    mma16816<__half>(d, ah, bh);
  }
}

/// d += a b over a 16 x 8 tile, k 32, float8 operands (e4m3, or e5m2 with E5M2), FP32
/// accumulators; the fragments hold 4 bytes of K per register, as mma16832S8's.
template <bool E5M2>
__device__ __forceinline__ void mma16832F8(float (&d)[4], const unsigned (&a)[4],
                                           const unsigned (&b)[2]) {
#ifdef DLC_EMU
  dlc_emu_ptx::mma<E5M2 ? 5 : 4>(d, a, b);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  if constexpr (E5M2)
    asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e5m2.e5m2.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  else
    asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  mma16832F8ViaF16<E5M2>(d, a, b);
#endif
}

/// FP32 -> TF32 (cvt.rna.tf32.f32): the nearest value with 10 mantissa bits, ties away
/// from zero, as FP32 bits with the low 13 bits zero; infinities and NaN kept.
__device__ __forceinline__ unsigned toTf32(float f) {
#ifdef DLC_EMU
  return dlc_emu_ptx::rnaTf32(__float_as_uint(f));
#else
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(f));
  return r;
#endif
}

/// A warp's operand fragments of an MI x NI tile of m16n8 products for one k step (32
/// bytes of K: k16 of FP16/BF16, k8 of TF32, k32 of INT8 and float8): lane (g, t)'s registers of A
/// fragment i and of the B fragments of n-tiles 2 j and 2 j + 1 (registers 0-1 and 2-3).
template <int MI, int NI> struct WarpFrags {
  static_assert(NI % 2 == 0, "n-tiles come in pairs");
  unsigned a[MI][4], b[NI / 2][4];
};

/// Loads a k step's fragments: lane l gives aRow[i], the address of its row of A
/// fragment i's ldmatrix.x4 (rows 0-7 then 8-15 of the first 16 bytes of K, then of the
/// next 16), and bRow[j], that of the B fragments of n-tiles 2 j and 2 j + 1 (stored
/// [n][k]: n 0-7 of the first 16 bytes, of the next, then n 8-15 likewise). FP32
/// operands (MT float) are rounded to TF32 (cvt.rna) on the way: ldmatrix of 32-bit
/// elements as pairs of 16-bit ones gives lane (g, t) element t of row g, which is the
/// m16n8k8 TF32 fragment. On emu one warp operation.
template <class MT, int MI, int NI>
__device__ __forceinline__ void warpTileLoad(WarpFrags<MI, NI> &f, const SmemAddr (&aRow)[MI],
                                             const SmemAddr (&bRow)[NI / 2]) {
#ifdef DLC_EMU
  dlc_emu_ptx::FragLane<MI, NI> me;
  for (int i = 0; i < MI; ++i)
    me.aRow[i] = aRow[i];
  for (int j = 0; j < NI / 2; ++j)
    me.bRow[j] = bRow[j];
  me.a = f.a;
  me.b = f.b;
  dlc_emu_ptx::warpOp(&me, dlc_emu_ptx::fragLoadOp<MI, NI, MmaKind<MT>::value>);
#else
#pragma unroll
  for (int i = 0; i < MI; ++i)
    ldmatrix<4, false>(f.a[i], aRow[i]);
#pragma unroll
  for (int j = 0; j < NI / 2; ++j)
    ldmatrix<4, false>(f.b[j], bRow[j]);
  if constexpr (MmaKind<MT>::value == 2) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
#pragma unroll
      for (int i = 0; i < MI; ++i)
        f.a[i][r] = toTf32(__uint_as_float(f.a[i][r]));
#pragma unroll
      for (int j = 0; j < NI / 2; ++j)
        f.b[j][r] = toTf32(__uint_as_float(f.b[j][r]));
    }
  }
#endif
}

/// A k step of a warp's MI x NI tile: acc[i][j] += A_i B_j for every (i, j), from
/// fragments warpTileLoad loaded (on emu one warp operation).
template <class MT, int MI, int NI>
__device__ __forceinline__ void warpTileMma(MmaAcc<MT> (&acc)[MI][NI][4],
                                            const WarpFrags<MI, NI> &f) {
#ifdef DLC_EMU
  dlc_emu_ptx::TileLane<MI, NI, MmaAcc<MT>> me{f.a, f.b, &acc[0][0][0]};
  dlc_emu_ptx::warpOp(&me, dlc_emu_ptx::tileOp<MI, NI, MmaKind<MT>::value>);
#else
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NI; ++j) {
      const unsigned bj[2] = {f.b[j / 2][2 * (j % 2)], f.b[j / 2][2 * (j % 2) + 1]};
      if constexpr (MmaKind<MT>::value == 3)
        mma16832S8(acc[i][j], f.a[i], bj);
      else if constexpr (MmaKind<MT>::value >= 4)
        mma16832F8<MmaKind<MT>::value == 5>(acc[i][j], f.a[i], bj);
      else if constexpr (MmaKind<MT>::value == 2)
        mma1688Tf32(acc[i][j], f.a[i], bj);
      else
        mma16816<MT>(acc[i][j], f.a[i], bj);
    }
#endif
}

/// The B fragments of NP pairs of n-tiles for one k16 step, from a tile stored [k][n]
/// (k rows of 16-bit n values: attention's V): ldmatrix.x4.trans, lane 8 i + r giving
/// bRow[j], the address of row k = 8 (i % 2) + r at n = 16 j + 8 (i / 2). Registers 0-1
/// of b[j] are n-tile 2 j's fragment, 2-3 n-tile 2 j + 1's, as in WarpFrags.
template <int NP>
__device__ __forceinline__ void warpLoadBTrans(unsigned (&b)[NP][4], const SmemAddr (&bRow)[NP]) {
#ifdef DLC_EMU
  dlc_emu_ptx::TransLane<NP> me;
  for (int j = 0; j < NP; ++j)
    me.bRow[j] = bRow[j];
  me.b = b;
  dlc_emu_ptx::warpOp(&me, dlc_emu_ptx::transLoadOp<NP>);
#else
#pragma unroll
  for (int j = 0; j < NP; ++j)
    ldmatrix<4, true>(b[j], bRow[j]);
#endif
}

/// 2^x as ex2.approx.ftz (MUFU.EX2 alone: results below 2^-126 flush to 0); exp2f on
/// emu.
__device__ __forceinline__ float exp2Approx(float x) {
#ifdef DLC_EMU
  return exp2f(x);
#else
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
#endif
}

/// (lo, hi) rounded to MT (FP16 or BF16, to nearest even) in one register, lo in the low
/// half: the A fragment register of two adjacent columns.
template <class MT> __device__ __forceinline__ unsigned packPair(float lo, float hi) {
#ifdef DLC_EMU
  const MT a = Cvt<MT, float>::run(lo), b = Cvt<MT, float>::run(hi);
  unsigned short x, y;
  std::memcpy(&x, &a, 2);
  std::memcpy(&y, &b, 2);
  return x | (static_cast<unsigned>(y) << 16);
#else
  if constexpr (MmaKind<MT>::value == 0) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const unsigned *>(&h);
  } else {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const unsigned *>(&h);
  }
#endif
}

} // namespace dlc
