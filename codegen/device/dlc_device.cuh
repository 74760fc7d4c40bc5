// dlc device helpers: included by every generated kernel source, compiled by NVRTC
// for the GPU and by the host compiler (with dlc_emu_prelude.h) for emu.
#pragma once

#ifndef DLC_EMU
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

#ifndef DLC_EMU
// Dynamic shared memory: one raw declaration shared by all kernels, typed per use.
#define DLC_DYNAMIC_SMEM(T, name)                                                                  \
  extern __shared__ __align__(16) unsigned char dlc_dynamic_smem[];                                \
  T *name = reinterpret_cast<T *>(dlc_dynamic_smem)
// Static shared memory, declared in a kernel: `DLC_SHARED(T, name, [N][M]);` is
// `__shared__ T name[N][M];`, aligned to `A` bytes with DLC_SHARED_ALIGNED. Kernels
// never write `__shared__` themselves: emu (dlc_emu_prelude.h) maps these to storage
// of the block being run.
#define DLC_SHARED_ALIGNED(A, T, name, dims)                                                       \
  __shared__ __align__(A)                                                                          \
  T name dims
#define DLC_SHARED(T, name, dims) __shared__ T name dims
#endif

#include "Philox.h"
#include "dlc_params.h"

/// A grid-stride loop over [0, n) with index type I.
#define DLC_GRID_STRIDE(i, n)                                                                      \
  for (I i =                                                                                       \
           static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x);  \
       i < (n); i += static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x))

namespace dlc {

/// Index types of the library's kernels (template parameter I): 32-bit where every
/// index a kernel computes fits, else 64-bit. Named so that instantiations say which.
typedef int idx32;
typedef long long idx64;

/// Data errors. A kernel that meets bad data (an index out of range) ORs a code into
/// its launch's check word and goes on with a safe value; the runtime reports the
/// launch's node after the run. (A trap would end the whole CUDA context.)
enum DataError : unsigned { kErrIndexRange = 1u };
DLC_HD void reportDataError(unsigned *err, unsigned code) {
  if (err)
    atomicOr(err, code);
}

//===----------------------------------------------------------------------===//
// Conversions between storage and compute types. Float -> integer saturates and
// maps NaN to 0, like the reference interpreter; float -> half rounds to nearest.
//===----------------------------------------------------------------------===//

template <class To, class From> struct Cvt {
  static __device__ __forceinline__ To run(From v) { return static_cast<To>(v); }
};
template <class I, class F> __device__ __forceinline__ I satToInt(F v, I lo, I hi) {
  return v != v ? I(0) : (v <= F(lo) ? lo : (v >= F(hi) ? hi : static_cast<I>(v)));
}
#define DLC_SAT(I, LO, HI)                                                                         \
  template <> struct Cvt<I, float> {                                                               \
    static __device__ __forceinline__ I run(float v) { return satToInt<I, float>(v, LO, HI); }     \
  };                                                                                               \
  template <> struct Cvt<I, double> {                                                              \
    static __device__ __forceinline__ I run(double v) { return satToInt<I, double>(v, LO, HI); }   \
  };
DLC_SAT(signed char, -128, 127)
DLC_SAT(unsigned char, 0, 255)
DLC_SAT(short, -32768, 32767)
DLC_SAT(unsigned short, 0, 65535)
DLC_SAT(int, (-2147483647 - 1), 2147483647)
DLC_SAT(unsigned, 0u, 4294967295u)
DLC_SAT(long long, (-9223372036854775807LL - 1), 9223372036854775807LL)
DLC_SAT(unsigned long long, 0ull, 18446744073709551615ull)
#undef DLC_SAT
template <> struct Cvt<bool, float> {
  static __device__ __forceinline__ bool run(float v) { return v != 0.0f; }
};
template <> struct Cvt<bool, double> {
  static __device__ __forceinline__ bool run(double v) { return v != 0.0; }
};
template <class From> struct Cvt<__half, From> {
  static __device__ __forceinline__ __half run(From v) {
    return __float2half_rn(static_cast<float>(v));
  }
};
template <class From> struct Cvt<__nv_bfloat16, From> {
  static __device__ __forceinline__ __nv_bfloat16 run(From v) {
    return __float2bfloat16_rn(static_cast<float>(v));
  }
};
template <class To> struct Cvt<To, __half> {
  static __device__ __forceinline__ To run(__half v) {
    return Cvt<To, float>::run(__half2float(v));
  }
};
template <class To> struct Cvt<To, __nv_bfloat16> {
  static __device__ __forceinline__ To run(__nv_bfloat16 v) {
    return Cvt<To, float>::run(__bfloat162float(v));
  }
};
template <> struct Cvt<__half, __half> {
  static __device__ __forceinline__ __half run(__half v) { return v; }
};
template <> struct Cvt<__nv_bfloat16, __nv_bfloat16> {
  static __device__ __forceinline__ __nv_bfloat16 run(__nv_bfloat16 v) { return v; }
};
template <> struct Cvt<__half, __nv_bfloat16> {
  static __device__ __forceinline__ __half run(__nv_bfloat16 v) {
    return __float2half_rn(__bfloat162float(v));
  }
};
template <> struct Cvt<__nv_bfloat16, __half> {
  static __device__ __forceinline__ __nv_bfloat16 run(__half v) {
    return __float2bfloat16_rn(__half2float(v));
  }
};

/// float8 storage types (ONNX's float8e4m3fn and float8e5m2): a byte of bits, converted
/// through FP32. To float8: rounded to nearest even, saturated to the largest finite
/// value (448, 57344) as ONNX's saturate=1, NaN as 0x7f. The same arithmetic on every
/// architecture and on emu (Half.h's host conversion reaches the same bits from the
/// value instead).
struct f8e4m3 {
  unsigned char bits;
};
struct f8e5m2 {
  unsigned char bits;
};
/// Float8 bits of f with M mantissa bits and exponent bias B, largest finite bits
/// `maxBits` (as an FP32 bit pattern, `maxF32`).
template <int M, int B>
DLC_HD unsigned char floatToF8Bits(float f, unsigned maxF32, unsigned char maxBits) {
  const unsigned u = __float_as_uint(f), a = u & 0x7fffffffu;
  const unsigned char sign = static_cast<unsigned char>((u >> 24) & 0x80u);
  if (a > 0x7f800000u) // NaN
    return static_cast<unsigned char>(sign | 0x7fu);
  if (a >= maxF32) // at or beyond the largest finite value, infinity included
    return static_cast<unsigned char>(sign | maxBits);
  if (a < static_cast<unsigned>(128 - B) << 23) {
    // Below the smallest normal 2^(1-B): add 2^(1-B+23-M... ) so that the FP32 add
    // rounds to a multiple of the smallest subnormal 2^(1-B-M), nearest even; the
    // difference of the bits counts them (2^M of them is the smallest normal).
    const float magic = __uint_as_float(static_cast<unsigned>(128 - B + 23 - M) << 23);
    return static_cast<unsigned char>(
        sign | (__float_as_uint(__uint_as_float(a) + magic) - __float_as_uint(magic)));
  }
  // Normal: rebias the exponent and round the mantissa to M bits, nearest even.
  const unsigned odd = (a >> (23 - M)) & 1u;
  const unsigned r = a - (static_cast<unsigned>(127 - B) << 23) + (1u << (22 - M)) - 1u + odd;
  return static_cast<unsigned char>(sign | (r >> (23 - M)));
}
/// The value of float8 bits with M mantissa bits, bias B; e4m3fn has no infinity and
/// one NaN (S.1111.111), e5m2 IEEE's (S.11111.xx).
template <int M, int B, bool IEEE> DLC_HD float f8BitsToFloat(unsigned char b) {
  const unsigned sign = static_cast<unsigned>(b & 0x80u) << 24, e = (b & 0x7fu) >> M,
                 m = b & ((1u << M) - 1u);
  if (IEEE ? e == (1u << (7 - M)) - 1u : (b & 0x7fu) == 0x7fu)
    return __uint_as_float(sign | 0x7f800000u | (IEEE && m == 0 ? 0u : 0x400000u));
  if (e == 0) // subnormal: m * 2^(1-B-M), exact in FP32
    return __uint_as_float(
        sign | __float_as_uint(static_cast<float>(m) * __uint_as_float((128u - B - M) << 23)));
  return __uint_as_float(sign | ((e + 127u - B) << 23) | (m << (23 - M)));
}
/// FP32 to float8 bits. On sm_89 and later one cvt.rn.satfinite.{e4m3,e5m2}x2.f32 (PTX
/// ISA: round to nearest even, finite values beyond the largest and infinities
/// saturated to it, NaN to NaN); elsewhere, and on emu, the same from the float's bits.
template <bool E5M2> __device__ __forceinline__ unsigned char floatToF8(float f) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  unsigned short r; // (a, b -> the high byte from a, the low from b)
  if constexpr (E5M2)
    asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;\n" : "=h"(r) : "f"(0.0f), "f"(f));
  else
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(r) : "f"(0.0f), "f"(f));
  return static_cast<unsigned char>(r & 0xffu);
#else
  return E5M2 ? floatToF8Bits<2, 15>(f, 0x47600000u, 0x7b)
              : floatToF8Bits<3, 7>(f, 0x43e00000u, 0x7e);
#endif
}
/// Float8 bits to FP32. e5m2 is FP16's upper byte: that half, exactly, everywhere. e4m3
/// on sm_89 and later: cvt.rn.f16x2.e4m3x2 (exact) of the byte in both halves, then to
/// FP32; elsewhere, and on emu, from the bits.
template <bool E5M2> __device__ __forceinline__ float f8ToFloat(unsigned char b) {
  if constexpr (E5M2) {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(b << 8)));
  } else {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    unsigned h;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(h) : "h"(static_cast<unsigned short>(b * 0x101u)));
    return __half2float(__ushort_as_half(static_cast<unsigned short>(h & 0xffffu)));
#else
    return f8BitsToFloat<3, 7, false>(b);
#endif
  }
}
template <class From> struct Cvt<f8e4m3, From> {
  static __device__ __forceinline__ f8e4m3 run(From v) {
    return f8e4m3{floatToF8<false>(Cvt<float, From>::run(v))};
  }
};
template <class From> struct Cvt<f8e5m2, From> {
  static __device__ __forceinline__ f8e5m2 run(From v) {
    return f8e5m2{floatToF8<true>(Cvt<float, From>::run(v))};
  }
};
template <class To> struct Cvt<To, f8e4m3> {
  static __device__ __forceinline__ To run(f8e4m3 v) {
    return Cvt<To, float>::run(f8ToFloat<false>(v.bits));
  }
};
template <class To> struct Cvt<To, f8e5m2> {
  static __device__ __forceinline__ To run(f8e5m2 v) {
    return Cvt<To, float>::run(f8ToFloat<true>(v.bits));
  }
};
template <> struct Cvt<f8e4m3, f8e4m3> {
  static __device__ __forceinline__ f8e4m3 run(f8e4m3 v) { return v; }
};
template <> struct Cvt<f8e5m2, f8e5m2> {
  static __device__ __forceinline__ f8e5m2 run(f8e5m2 v) { return v; }
};
template <> struct Cvt<f8e4m3, f8e5m2> {
  static __device__ __forceinline__ f8e4m3 run(f8e5m2 v) {
    return Cvt<f8e4m3, float>::run(Cvt<float, f8e5m2>::run(v));
  }
};
template <> struct Cvt<f8e5m2, f8e4m3> {
  static __device__ __forceinline__ f8e5m2 run(f8e4m3 v) {
    return Cvt<f8e5m2, float>::run(Cvt<float, f8e4m3>::run(v));
  }
};
// (Between float8 and the 16-bit floats, through FP32: both partial specializations
// above match these pairs.)
#define DLC_F8_HALF(F8, H)                                                                         \
  template <> struct Cvt<F8, H> {                                                                  \
    static __device__ __forceinline__ F8 run(H v) {                                                \
      return Cvt<F8, float>::run(Cvt<float, H>::run(v));                                           \
    }                                                                                              \
  };                                                                                               \
  template <> struct Cvt<H, F8> {                                                                  \
    static __device__ __forceinline__ H run(F8 v) {                                                \
      return Cvt<H, float>::run(Cvt<float, F8>::run(v));                                           \
    }                                                                                              \
  };
DLC_F8_HALF(f8e4m3, __half)
DLC_F8_HALF(f8e4m3, __nv_bfloat16)
DLC_F8_HALF(f8e5m2, __half)
DLC_F8_HALF(f8e5m2, __nv_bfloat16)
#undef DLC_F8_HALF

template <class To, class From> __device__ __forceinline__ To cvt(From v) {
  return Cvt<To, From>::run(v);
}
//===----------------------------------------------------------------------===//
// Type traits of the kernel library.
//===----------------------------------------------------------------------===//

/// The compute type of a storage type, as the interpreter computes: float for
/// f32/f16/bf16, double, long long for signed and unsigned long long for unsigned
/// integers, bool.
template <class S> struct Compute { typedef float type; };
template <> struct Compute<double> { typedef double type; };
template <> struct Compute<signed char> { typedef long long type; };
template <> struct Compute<short> { typedef long long type; };
template <> struct Compute<int> { typedef long long type; };
template <> struct Compute<long long> { typedef long long type; };
template <> struct Compute<unsigned char> { typedef unsigned long long type; };
template <> struct Compute<unsigned short> { typedef unsigned long long type; };
template <> struct Compute<unsigned> { typedef unsigned long long type; };
template <> struct Compute<unsigned long long> { typedef unsigned long long type; };
template <> struct Compute<bool> { typedef bool type; };

template <class T> struct IsFloating { static constexpr bool value = false; };
template <> struct IsFloating<float> { static constexpr bool value = true; };
template <> struct IsFloating<double> { static constexpr bool value = true; };

/// An accumulator for sums of T: double for floating types when Wide, else T.
template <class T, bool Wide> struct Accum { typedef T type; };
template <> struct Accum<float, true> { typedef double type; };

/// Identities of max and min.
/// V elements of T as one aligned access (16 bytes: one LDG.128 / STG.128).
template <class T, int V> struct alignas(sizeof(T) * V) VecOf { T v[V]; };

template <class T> struct Limits;
template <> struct Limits<float> {
  static __device__ __forceinline__ float lowest() { return -__int_as_float(0x7f800000); }
  static __device__ __forceinline__ float highest() { return __int_as_float(0x7f800000); }
};
template <> struct Limits<double> {
  static __device__ __forceinline__ double lowest() {
    return -__longlong_as_double(0x7ff0000000000000LL);
  }
  static __device__ __forceinline__ double highest() {
    return __longlong_as_double(0x7ff0000000000000LL);
  }
};
template <> struct Limits<long long> {
  static __device__ __forceinline__ long long lowest() { return -9223372036854775807LL - 1; }
  static __device__ __forceinline__ long long highest() { return 9223372036854775807LL; }
};
template <> struct Limits<unsigned long long> {
  static __device__ __forceinline__ unsigned long long lowest() { return 0ull; }
  static __device__ __forceinline__ unsigned long long highest() { return 18446744073709551615ull; }
};
template <> struct Limits<bool> {
  static __device__ __forceinline__ bool lowest() { return false; }
  static __device__ __forceinline__ bool highest() { return true; }
};

/// Calls f(cell, tap) for every tap of a 3-D window whose input position lies inside
/// the input: cell is the input position's offset within its channel, tap the tap's
/// index in the kernel. S has in/k/stride/dil/pad arrays (ConvShape, PoolShape).
template <class I, class S, class F>
__device__ __forceinline__ void forEachWindowTap(const S &s, I o0, I o1, I o2, F f) {
  for (I k0 = 0; k0 < static_cast<I>(s.k[0]); ++k0) {
    const I i0 =
        o0 * static_cast<I>(s.stride[0]) + k0 * static_cast<I>(s.dil[0]) - static_cast<I>(s.pad[0]);
    if (i0 < 0 || i0 >= static_cast<I>(s.in[0]))
      continue;
    for (I k1 = 0; k1 < static_cast<I>(s.k[1]); ++k1) {
      const I i1 = o1 * static_cast<I>(s.stride[1]) + k1 * static_cast<I>(s.dil[1]) -
                   static_cast<I>(s.pad[1]);
      if (i1 < 0 || i1 >= static_cast<I>(s.in[1]))
        continue;
      for (I k2 = 0; k2 < static_cast<I>(s.k[2]); ++k2) {
        const I i2 = o2 * static_cast<I>(s.stride[2]) + k2 * static_cast<I>(s.dil[2]) -
                     static_cast<I>(s.pad[2]);
        if (i2 < 0 || i2 >= static_cast<I>(s.in[2]))
          continue;
        f((i0 * static_cast<I>(s.in[1]) + i1) * static_cast<I>(s.in[2]) + i2,
          (k0 * static_cast<I>(s.k[1]) + k1) * static_cast<I>(s.k[2]) + k2);
      }
    }
  }
}

/// Loads element i as compute type C.
template <class C, class S, class I> __device__ __forceinline__ C ld(const S *p, I i) {
  return cvt<C>(p[i]);
}
/// Stores compute value v as element i.
template <class S, class C, class I> __device__ __forceinline__ void st(S *p, I i, C v) {
  p[i] = cvt<S>(v);
}
/// Stores compute values a and b as elements i and i + 1 in one access (p + i aligned
/// to two elements).
template <class S, class C, class I> __device__ __forceinline__ void st2(S *p, I i, C a, C b) {
  VecOf<S, 2> w;
  w.v[0] = cvt<S>(a);
  w.v[1] = cvt<S>(b);
  *reinterpret_cast<VecOf<S, 2> *>(p + i) = w;
}

//===----------------------------------------------------------------------===//
// Math on float and double (element-wise expression templates call these).
//===----------------------------------------------------------------------===//

#define DLC_MATH1(NAME, F32, F64)                                                                  \
  __device__ __forceinline__ float NAME(float x) {                                                 \
    return F32(x);                                                                                 \
  }                                                                                                \
  __device__ __forceinline__ double NAME(double x) {                                               \
    return F64(x);                                                                                 \
  }
DLC_MATH1(exp_, expf, exp)
DLC_MATH1(log_, logf, log)
DLC_MATH1(sqrt_, sqrtf, sqrt)
DLC_MATH1(erf_, erff, erf)
DLC_MATH1(tanh_, tanhf, tanh)
DLC_MATH1(sin_, sinf, sin)
DLC_MATH1(cos_, cosf, cos)
DLC_MATH1(tan_, tanf, tan)
DLC_MATH1(asin_, asinf, asin)
DLC_MATH1(acos_, acosf, acos)
DLC_MATH1(atan_, atanf, atan)
DLC_MATH1(sinh_, sinhf, sinh)
DLC_MATH1(cosh_, coshf, cosh)
DLC_MATH1(asinh_, asinhf, asinh)
DLC_MATH1(acosh_, acoshf, acosh)
DLC_MATH1(atanh_, atanhf, atanh)
DLC_MATH1(floor_, floorf, floor)
DLC_MATH1(ceil_, ceilf, ceil)
DLC_MATH1(rint_, rintf, rint)
DLC_MATH1(fabs_, fabsf, fabs)
DLC_MATH1(log1p_, log1pf, log1p)
#undef DLC_MATH1
__device__ __forceinline__ float pow_(float a, float b) {
  return powf(a, b);
}
__device__ __forceinline__ double pow_(double a, double b) {
  return pow(a, b);
}
__device__ __forceinline__ float fmod_(float a, float b) {
  return fmodf(a, b);
}
__device__ __forceinline__ double fmod_(double a, double b) {
  return fmod(a, b);
}
template <class T> __device__ __forceinline__ bool isnan_(T x) {
  return x != x;
}
template <class T> __device__ __forceinline__ bool isinf_(T x) {
  return x == T(1) / T(0) || x == -T(1) / T(0);
}
template <class T> __device__ __forceinline__ T minNan(T a, T b) {
  return (a != a || b != b) ? (a != a ? a : b) : (a < b ? a : b);
}
template <class T> __device__ __forceinline__ T maxNan(T a, T b) {
  return (a != a || b != b) ? (a != a ? a : b) : (a > b ? a : b);
}
template <class T> __device__ __forceinline__ T softplus_(T x) {
  return x > T(30) ? x : log1p_(exp_(x));
}
/// Integer division truncating toward zero; division by zero gives 0 (never traps).
template <class T> __device__ __forceinline__ T idiv(T a, T b) {
  return b == T(0) ? T(0) : ((b == T(-1) && a == T(u64(1) << (sizeof(T) * 8 - 1))) ? a : T(a / b));
}
template <class T> __device__ __forceinline__ T udiv(T a, T b) {
  return b == T(0) ? T(0) : T(a / b);
}
/// Integer modulo with the sign of the divisor (Python semantics; fmod = 0).
// x % 0 is 0 here (ONNX leaves it undefined; no trap), and x % -1 is 0 (the hardware's
// INT_MIN % -1 traps on x86).
template <class T> __device__ __forceinline__ bool modByZeroOrMinusOne(T b) {
  return b == T(0) || (T(-1) < T(0) && b == T(-1));
}
template <class T> __device__ __forceinline__ T imodFloor(T a, T b) {
  if (modByZeroOrMinusOne(b))
    return T(0);
  T m = a % b;
  return (m != T(0) && ((m < T(0)) != (b < T(0)))) ? T(m + b) : m;
}
template <class T> __device__ __forceinline__ T imodTrunc(T a, T b) {
  return modByZeroOrMinusOne(b) ? T(0) : T(a % b);
}

// Helpers named by the element-wise expression templates of the op table.
enum {
  attr_none = 0,
  attr_tanh = 1,
  attr_LEFT = 2,
  attr_RIGHT = 3,
  attr_u8 = 4,
  attr_i8 = 5,
  attr_f8e4m3 = 6,
  attr_f8e5m2 = 7
};
struct None {};
template <class T> __device__ __forceinline__ T stdmin(T a, T b) {
  return (b < a) ? b : a;
}
template <class T> __device__ __forceinline__ T stdmax(T a, T b) {
  return (a < b) ? b : a;
}
__device__ __forceinline__ float div_(float a, float b) {
  return a / b;
}
__device__ __forceinline__ double div_(double a, double b) {
  return a / b;
}
__device__ __forceinline__ long long div_(long long a, long long b) {
  return idiv(a, b);
}
__device__ __forceinline__ u64 div_(u64 a, u64 b) {
  return udiv(a, b);
}
template <class B> __device__ __forceinline__ float pow_(float a, B b) {
  return powf(a, static_cast<float>(b));
}
template <class B> __device__ __forceinline__ double pow_(double a, B b) {
  return pow(a, static_cast<double>(b));
}
template <class B> __device__ __forceinline__ double pow_(long long a, B b) {
  return pow(static_cast<double>(a), static_cast<double>(b));
}
template <class B> __device__ __forceinline__ double pow_(u64 a, B b) {
  return pow(static_cast<double>(a), static_cast<double>(b));
}
__device__ __forceinline__ float mod_(float a, float b, long long) {
  return fmodf(a, b);
}
__device__ __forceinline__ double mod_(double a, double b, long long) {
  return fmod(a, b);
}
__device__ __forceinline__ long long mod_(long long a, long long b, long long fmodMode) {
  return fmodMode ? imodTrunc(a, b) : imodFloor(a, b);
}
__device__ __forceinline__ u64 mod_(u64 a, u64 b, long long) {
  return imodTrunc(a, b);
}
__device__ __forceinline__ u64 shift_(u64 a, u64 b, int dir) {
  return b >= 64 ? 0 : (dir == attr_LEFT ? a << b : a >> b);
}
template <class T> __device__ __forceinline__ T clip_(T x, None, None) {
  return x;
}
template <class T> __device__ __forceinline__ T clip_(T x, T lo, None) {
  return x < lo ? lo : x;
}
template <class T> __device__ __forceinline__ T clip_(T x, None, T hi) {
  return x > hi ? hi : x;
}
template <class T> __device__ __forceinline__ T clip_(T x, T lo, T hi) {
  return x < lo ? lo : (x > hi ? hi : x);
}
/// QuantizeLinear (ir/ops/Quantize.cpp has the reference): round(x / scale), or
/// round(x * scale) with `multiply` (a requantization), half to even, plus the zero
/// point, saturated to the range of `to` (u8 or i8; NaN gives its lowest value), in
/// FP32 as ONNX Runtime computes it. To float8 (zero point 0), x / scale as it is: the
/// store to the float8 result rounds and saturates it (Cvt<f8e4m3>).
template <class X, class S, class Z>
__device__ __forceinline__ float quantize_(X x, S scale, Z zp, int to, int multiply) {
  const float xf = static_cast<float>(x), sf = static_cast<float>(scale);
  const float r = multiply ? xf * sf : xf / sf;
  if (to == attr_f8e4m3 || to == attr_f8e5m2)
    return r;
  const float lo = to == attr_u8 ? 0.0f : -128.0f, hi = to == attr_u8 ? 255.0f : 127.0f;
  const float v = rint_(r) + static_cast<float>(zp);
  return v >= lo ? (v <= hi ? v : hi) : lo;
}
template <class X, class S>
__device__ __forceinline__ float quantize_(X x, S scale, None, int to, int multiply) {
  return quantize_(x, scale, 0, to, multiply);
}
/// DequantizeLinear: (x - zero point) in integers, then times the scale in FP32. A
/// float8 x arrives as its FP32 value (its compute type; no zero point).
template <class X, class S, class Z>
__device__ __forceinline__ float dequantize_(X x, S scale, Z zp) {
  if (IsFloating<X>::value)
    return static_cast<float>(x) * static_cast<float>(scale);
  return static_cast<float>(static_cast<long long>(x) - static_cast<long long>(zp)) *
         static_cast<float>(scale);
}
template <class X, class S> __device__ __forceinline__ float dequantize_(X x, S scale, None) {
  return dequantize_(x, scale, 0);
}
/// Training-mode Dropout (ir/ops/Elementwise.cpp has the reference): x / (1 - ratio)
/// where Philox's uniform number for (seed, step, element) is at least ratio, else 0.
template <class T, class I>
__device__ __forceinline__ T dropout_(T x, long long step, long long seed, float ratio, I index) {
  float u =
      philox::uniform(static_cast<unsigned long long>(seed), static_cast<unsigned long long>(step),
                      static_cast<unsigned long long>(index));
  return u >= ratio ? x * T(1.0f / (1.0f - ratio)) : T(0);
}
template <class T> __device__ __forceinline__ T gelu_(T x, int approx) {
  if (approx == attr_tanh) {
    const T c = sqrt_(T(2) / T(3.14159265358979323846));
    return T(0.5) * x * (T(1) + tanh_(c * (x + T(0.044715) * x * x * x)));
  }
  return T(0.5) * x * (T(1) + erf_(x / sqrt_(T(2))));
}

//===----------------------------------------------------------------------===//
// Reductions: warp shuffles, then one value per warp through shared memory.
// Accumulation is in the compute type (float for f16/bf16).
//===----------------------------------------------------------------------===//

struct SumOp {
  template <class T> __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};
struct MaxOp {
  template <class T> __device__ __forceinline__ T operator()(T a, T b) const {
    return maxNan(a, b);
  }
};
struct MinOp {
  template <class T> __device__ __forceinline__ T operator()(T a, T b) const {
    return minNan(a, b);
  }
};
struct ProdOp {
  template <class T> __device__ __forceinline__ T operator()(T a, T b) const { return a * b; }
};

template <class T, class Op> __device__ __forceinline__ T warpReduce(T v, Op op) {
  for (int o = 16; o > 0; o >>= 1)
    v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/// Reduces v over the block (blockDim.x a multiple of 32, at most 1024); every
/// thread gets the result. `smem` holds 32 values of T.
template <class T, class Op>
__device__ __forceinline__ T blockReduce(T v, Op op, T identity, T *smem) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warpReduce(v, op);
  __syncthreads(); // smem may still be read from a previous reduction
  if (lane == 0)
    smem[warp] = v;
  __syncthreads();
  int warps = (blockDim.x + 31) >> 5;
  v = lane < warps ? smem[lane] : identity;
  return warpReduce(v, op);
}

/// A block's walk over K contiguous rows of `len` values of MT each (x, dy, ...), V at
/// a time (len a multiple of V, each row 16-byte aligned where V * sizeof(MT) is):
/// thread t takes vectors t, t + blockDim, ... of every row; its first R stay in
/// registers (FP32), later ones are read again on each walk. The row kernels
/// (softmax_rows, row_norm_rows, softmax_grad_rows, layer_norm_grad_rows) read their
/// rows once when each has at most R * blockDim * V values.
template <int K, int V, int R, class I, class MT> struct CachedRows {
  typedef VecOf<MT, V> Vec;
  const Vec *x[K];
  I nv, B, tid;
  float cache[R][K][V];
  __device__ __forceinline__ CachedRows(const MT *const (&rows)[K], I len)
      : nv(len / V), B(static_cast<I>(blockDim.x)), tid(static_cast<I>(threadIdx.x)) {
#pragma unroll
    for (int k = 0; k < K; ++k)
      x[k] = reinterpret_cast<const Vec *>(rows[k]);
  }
  __device__ __forceinline__ void load(I j, float (&v)[K][V]) const {
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const Vec t = x[k][j];
#pragma unroll
      for (int q = 0; q < V; ++q)
        v[k][q] = Cvt<float, MT>::run(t.v[q]);
    }
  }
  /// The first walk: loads this thread's vectors (caching the first R), f(j, v) on each
  /// (vector j of the rows).
  template <class F> __device__ __forceinline__ void fill(F f) {
#pragma unroll
    for (int r = 0; r < R; ++r)
      if (tid + r * B < nv) {
        load(tid + r * B, cache[r]);
        f(tid + r * B, cache[r]);
      }
    for (I j = tid + R * B; j < nv; j += B) {
      float v[K][V];
      load(j, v);
      f(j, v);
    }
  }
  /// Another walk: f(j, v) on each of this thread's vectors.
  template <class F> __device__ __forceinline__ void each(F f) const {
#pragma unroll
    for (int r = 0; r < R; ++r)
      if (tid + r * B < nv)
        f(tid + r * B, cache[r]);
    for (I j = tid + R * B; j < nv; j += B) {
      float v[K][V];
      load(j, v);
      f(j, v);
    }
  }
};

/// One row: fill's f(v) and each's f(j, v) take the row's V values.
template <int V, int R, class I, class MT> struct CachedRow : CachedRows<1, V, R, I, MT> {
  typedef CachedRows<1, V, R, I, MT> Base;
  __device__ __forceinline__ CachedRow(const MT *row, I len) : Base({row}, len) {}
  template <class F> __device__ __forceinline__ void fill(F f) {
    Base::fill([&](I, const float(&v)[1][V]) { f(v[0]); });
  }
  template <class F> __device__ __forceinline__ void each(F f) const {
    Base::each([&](I j, const float(&v)[1][V]) { f(j, v[0]); });
  }
};

/// Stores V values at element e of a row kernel's output: as MT, V at a time into `y`
/// (Raw: no fused epilogue, the output aligned), else one by one through Out.
template <bool Raw, class MT, class Out, int V, class I>
__device__ __forceinline__ void storeRow(void *y, const typename Out::Params &out, I e,
                                         const float (&o)[V]) {
  if (Raw) {
    VecOf<MT, V> w;
#pragma unroll
    for (int q = 0; q < V; ++q)
      w.v[q] = Cvt<MT, float>::run(o[q]);
    *reinterpret_cast<VecOf<MT, V> *>(static_cast<MT *>(y) + e) = w;
  } else {
#pragma unroll
    for (int q = 0; q < V; ++q)
      Out::store(out, e + q, static_cast<typename Out::Value>(o[q]));
  }
}

} // namespace dlc
