// dlc emu prelude: lets the host C++ compiler build the exact CUDA source that
// NVRTC compiles. Included (with -include) before the generated kernels when the
// emu target is built. Provides the CUDA built-ins the code generator uses; code
// generation restricts itself to what is here.
#pragma once

#define DLC_EMU 1
#include "EmuAbi.h"

#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <type_traits>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__ __restrict
// Static shared memory (DLC_SHARED, dlc_device.cuh): a reference to storage the runtime
// places per block (dlc_emu_api.static_shared), keyed by the declaration's site (one
// per template instantiation), so every access is an instrumented pointer access
// (--check) and each block of a cooperative grid has its own copy. Plain `__shared__`
// does not compile here: nothing can fall back to a per-thread static.
#define DLC_SHARED_ALIGNED(A, T, name, dims)                                                       \
  static const char dlc_emu_site_##name = 0;                                                       \
  using dlc_emu_shared_t_##name = T dims;                                                          \
  auto &name = *dlc_emu_static_shared<dlc_emu_shared_t_##name>(&dlc_emu_site_##name, A)
#define DLC_SHARED(T, name, dims) DLC_SHARED_ALIGNED(16, T, name, dims)
#define __shared__ dlc_emu_static_shared_memory_is_declared_with_DLC_SHARED
#define DLC_DYNAMIC_SMEM(T, name) T *name = static_cast<T *>(dlc_emu_cur->dynamicSmem)

extern "C" {
extern thread_local dlc_emu_thread *dlc_emu_cur;
extern const dlc_emu_api *dlc_emu_api_ptr;
}
template <class T> inline T *dlc_emu_static_shared(const char *site, unsigned align) {
  return static_cast<T *>(dlc_emu_api_ptr->static_shared(site, sizeof(T), align));
}

#define threadIdx (dlc_emu_cur->threadIdx)
#define blockIdx (dlc_emu_cur->blockIdx)
#define blockDim (dlc_emu_cur->blockDim)
#define gridDim (dlc_emu_cur->gridDim)
static constexpr int warpSize = 32;

// Each call site has its own address: the runtime checks that a block's threads meet
// at the same barrier.
#define __syncthreads()                                                                            \
  do {                                                                                             \
    static const char dlc_emu_barrier_site = 0;                                                    \
    dlc_emu_api_ptr->syncthreads(&dlc_emu_barrier_site);                                           \
  } while (0)
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  dlc_emu_api_ptr->syncwarp(mask);
}
inline void __threadfence() {
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
}
inline void __trap() {
  dlc_emu_api_ptr->trap("__trap() called");
}

// The module is built with -fsanitize=alignment and no sanitizer runtime: a load or
// store through a pointer misaligned for its type (a float4 at an address that is
// not a multiple of 16) lands here and fails the launch, as it faults on a GPU.
extern "C" {
struct dlc_emu_ubsan_type_mismatch {
  const char *file;
  unsigned line, column;
  const void *type;
  unsigned char logAlignment, kind;
};
inline void dlc_emu_misaligned(void *data, void *ptr) {
  static thread_local char msg[160];
  auto *d = static_cast<const dlc_emu_ubsan_type_mismatch *>(data);
  unsigned long long p = reinterpret_cast<unsigned long long>(ptr);
  if (!p || !d->logAlignment || p % (1ull << d->logAlignment) == 0)
    return;
  __builtin_snprintf(msg, sizeof(msg), "misaligned %u-byte-aligned access at address 0x%llx",
                     1u << d->logAlignment, p);
  dlc_emu_api_ptr->trap(msg);
}
// (The runtime's trap does not return: it leaves the emulated thread.)
void __ubsan_handle_type_mismatch_v1(void *data, void *ptr) {
  dlc_emu_misaligned(data, ptr);
}

// The module is also built with -fsanitize=kernel-address and every access as a call
// (no sanitizer runtime either): each load and store of the kernels lands in one of the
// callbacks below. Outside --check the range is empty and a callback is a compare;
// under --check, accesses to shared memory go to the runtime, which finds
// reads of never-written bytes (initcheck) and conflicting accesses of two threads with
// no barrier between them (racecheck).
unsigned long long dlc_emu_checked_base = 0, dlc_emu_checked_bytes = 0;
__attribute__((visibility("default"))) void dlc_emu_set_checked(unsigned long long base,
                                                                unsigned long long bytes) {
  dlc_emu_checked_base = base;
  dlc_emu_checked_bytes = bytes;
}
__attribute__((no_sanitize_address)) inline void dlc_emu_access(unsigned long long p,
                                                                unsigned long long n, int write) {
  if (p - dlc_emu_checked_base < dlc_emu_checked_bytes)
    dlc_emu_api_ptr->access(reinterpret_cast<const void *>(p), n, write);
}
#define DLC_EMU_ACCESS_CALLBACKS(N)                                                                \
  __attribute__((no_sanitize_address)) void __asan_load##N##_noabort(unsigned long long p) {       \
    dlc_emu_access(p, N, 0);                                                                       \
  }                                                                                                \
  __attribute__((no_sanitize_address)) void __asan_store##N##_noabort(unsigned long long p) {      \
    dlc_emu_access(p, N, 1);                                                                       \
  }
DLC_EMU_ACCESS_CALLBACKS(1)
DLC_EMU_ACCESS_CALLBACKS(2)
DLC_EMU_ACCESS_CALLBACKS(4)
DLC_EMU_ACCESS_CALLBACKS(8)
DLC_EMU_ACCESS_CALLBACKS(16)
#undef DLC_EMU_ACCESS_CALLBACKS
__attribute__((no_sanitize_address)) void __asan_loadN_noabort(unsigned long long p,
                                                               unsigned long long n) {
  dlc_emu_access(p, n, 0);
}
__attribute__((no_sanitize_address)) void __asan_storeN_noabort(unsigned long long p,
                                                                unsigned long long n) {
  dlc_emu_access(p, n, 1);
}
__attribute__((no_sanitize_address)) void __asan_handle_no_return(void) {}
}

namespace dlc_emu_detail {
template <class T> unsigned long long pack(T v) {
  static_assert(sizeof(T) <= 8, "warp collectives move at most 8 bytes");
  unsigned long long u = 0;
  std::memcpy(&u, &v, sizeof(T));
  return u;
}
template <class T> T unpack(unsigned long long u) {
  T v;
  std::memcpy(&v, &u, sizeof(T));
  return v;
}
inline int lane() {
  return static_cast<int>(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) & 31;
}
} // namespace dlc_emu_detail

template <class T> T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  int l = dlc_emu_detail::lane();
  int s = (l & ~(width - 1)) + (src & (width - 1));
  return dlc_emu_detail::unpack<T>(
      dlc_emu_api_ptr->warp_exchange(dlc_emu_detail::pack(v), s, mask));
}
template <class T> T __shfl_xor_sync(unsigned mask, T v, int laneMask, int width = 32) {
  int l = dlc_emu_detail::lane();
  int s = l ^ laneMask;
  if ((s & ~(width - 1)) != (l & ~(width - 1)))
    s = l;
  return dlc_emu_detail::unpack<T>(
      dlc_emu_api_ptr->warp_exchange(dlc_emu_detail::pack(v), s, mask));
}
template <class T> T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  int l = dlc_emu_detail::lane();
  int s = l + static_cast<int>(delta);
  if ((s & ~(width - 1)) != (l & ~(width - 1)))
    s = l;
  return dlc_emu_detail::unpack<T>(
      dlc_emu_api_ptr->warp_exchange(dlc_emu_detail::pack(v), s, mask));
}
template <class T> T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  int l = dlc_emu_detail::lane();
  int s = l - static_cast<int>(delta);
  if (s < (l & ~(width - 1)))
    s = l;
  return dlc_emu_detail::unpack<T>(
      dlc_emu_api_ptr->warp_exchange(dlc_emu_detail::pack(v), s, mask));
}
inline unsigned __ballot_sync(unsigned mask, int pred) {
  return dlc_emu_api_ptr->ballot(pred, mask);
}
inline int __any_sync(unsigned mask, int pred) {
  return __ballot_sync(mask, pred) != 0;
}
inline int __all_sync(unsigned mask, int pred) {
  return __ballot_sync(mask, pred) == (mask & __ballot_sync(mask, 1));
}

// Atomics: blocks run on several OS threads, so these are real atomics.
template <class T> T dlc_emu_atomic_cas_loop(T *addr, T val, T (*op)(T, T)) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "atomic width");
  using U = std::conditional_t<sizeof(T) == 4, unsigned, unsigned long long>;
  U *a = reinterpret_cast<U *>(addr);
  U old = __atomic_load_n(a, __ATOMIC_SEQ_CST);
  for (;;) {
    T cur;
    std::memcpy(&cur, &old, sizeof(T));
    T next = op(cur, val);
    U n;
    std::memcpy(&n, &next, sizeof(T));
    if (__atomic_compare_exchange_n(a, &old, n, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
      return cur;
  }
}
inline float atomicAdd(float *a, float v) {
  return dlc_emu_atomic_cas_loop<float>(a, v, [](float x, float y) { return x + y; });
}
inline double atomicAdd(double *a, double v) {
  return dlc_emu_atomic_cas_loop<double>(a, v, [](double x, double y) { return x + y; });
}
inline int atomicAdd(int *a, int v) {
  return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);
}
inline unsigned atomicAdd(unsigned *a, unsigned v) {
  return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);
}
inline unsigned atomicOr(unsigned *a, unsigned v) {
  return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST);
}
inline unsigned long long atomicAdd(unsigned long long *a, unsigned long long v) {
  return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);
}
// 16-bit atomic adds (FP16, BF16) under one lock: a CAS on the 32-bit word around the
// element could reach past the end of an allocation.
template <class H> H dlc_emu_atomic_add16(H *a, H v, H (*add)(H, H)) {
  static int lock = 0;
  while (__atomic_exchange_n(&lock, 1, __ATOMIC_ACQUIRE))
    ;
  const H old = *a;
  *a = add(old, v);
  __atomic_store_n(&lock, 0, __ATOMIC_RELEASE);
  return old;
}
inline __half atomicAdd(__half *a, __half v) {
  return dlc_emu_atomic_add16<__half>(
      a, v, [](__half x, __half y) { return __float2half(__half2float(x) + __half2float(y)); });
}
inline __nv_bfloat16 atomicAdd(__nv_bfloat16 *a, __nv_bfloat16 v) {
  return dlc_emu_atomic_add16<__nv_bfloat16>(a, v, [](__nv_bfloat16 x, __nv_bfloat16 y) {
    return __float2bfloat16(__bfloat162float(x) + __bfloat162float(y));
  });
}
inline int atomicMax(int *a, int v) {
  return dlc_emu_atomic_cas_loop<int>(a, v, [](int x, int y) { return x > y ? x : y; });
}
inline unsigned long long atomicMax(unsigned long long *a, unsigned long long v) {
  return dlc_emu_atomic_cas_loop<unsigned long long>(
      a, v, [](unsigned long long x, unsigned long long y) { return x > y ? x : y; });
}
inline unsigned atomicMax(unsigned *a, unsigned v) {
  return dlc_emu_atomic_cas_loop<unsigned>(a, v,
                                           [](unsigned x, unsigned y) { return x > y ? x : y; });
}
inline int atomicMin(int *a, int v) {
  return dlc_emu_atomic_cas_loop<int>(a, v, [](int x, int y) { return x < y ? x : y; });
}
inline int atomicCAS(int *a, int cmp, int v) {
  __atomic_compare_exchange_n(a, &cmp, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return cmp;
}
inline unsigned long long atomicCAS(unsigned long long *a, unsigned long long cmp,
                                    unsigned long long v) {
  __atomic_compare_exchange_n(a, &cmp, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return cmp;
}
inline int atomicExch(int *a, int v) {
  return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST);
}

/// The grid barrier of cooperative launches (dlc::gridSync).
inline void dlc_emu_gridsync() {
  dlc_emu_api_ptr->gridsync();
}

// Integer and bit intrinsics.
inline unsigned __umulhi(unsigned a, unsigned b) {
  return static_cast<unsigned>((static_cast<unsigned long long>(a) * b) >> 32);
}
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
  return static_cast<unsigned long long>((static_cast<unsigned __int128>(a) * b) >> 64);
}
/// PRMT: byte n of the result is byte (s >> 4n) & 7 of the eight bytes y:x (0-3 x's,
/// 4-7 y's), as CUDA's __byte_perm (no sign replication: selector bit 3 is not used).
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
  const unsigned long long b = (static_cast<unsigned long long>(y) << 32) | x;
  unsigned r = 0;
  for (int n = 0; n < 4; ++n)
    r |= static_cast<unsigned>((b >> (8 * ((s >> (4 * n)) & 7))) & 0xFF) << (8 * n);
  return r;
}
inline float __int_as_float(int i) {
  float f;
  std::memcpy(&f, &i, 4);
  return f;
}
inline int __float_as_int(float f) {
  int i;
  std::memcpy(&i, &f, 4);
  return i;
}
inline double __longlong_as_double(long long i) {
  double d;
  std::memcpy(&d, &i, 8);
  return d;
}
inline long long __double_as_longlong(double d) {
  long long i;
  std::memcpy(&i, &d, 8);
  return i;
}

// Device math that the host library lacks.
inline float __expf(float x) {
  return expf(x);
}
inline float __logf(float x) {
  return logf(x);
}
inline float __fdividef(float a, float b) {
  return a / b;
}
inline float rsqrtf(float x) {
  return 1.0f / sqrtf(x);
}
inline float __uint_as_float(unsigned u) {
  return __int_as_float(static_cast<int>(u));
}
inline unsigned __float_as_uint(float f) {
  return static_cast<unsigned>(__float_as_int(f));
}
inline double rsqrt(double x) {
  return 1.0 / sqrt(x);
}
inline float __saturatef(float x) {
  return x < 0.f ? 0.f : (x > 1.f ? 1.f : x);
}
inline int min(int a, int b) {
  return a < b ? a : b;
}
inline int max(int a, int b) {
  return a > b ? a : b;
}
inline long long min(long long a, long long b) {
  return a < b ? a : b;
}
inline long long max(long long a, long long b) {
  return a > b ? a : b;
}
inline unsigned long long min(unsigned long long a, unsigned long long b) {
  return a < b ? a : b;
}
inline unsigned long long max(unsigned long long a, unsigned long long b) {
  return a > b ? a : b;
}
template <class T> inline T __ldg(const T *p) {
  return *p;
}
inline __half hexp(__half a) {
  return __float2half(expf(__half2float(a)));
}
inline __half hlog(__half a) {
  return __float2half(logf(__half2float(a)));
}
inline __half hsqrt(__half a) {
  return __float2half(sqrtf(__half2float(a)));
}
inline __half __hfma(__half a, __half b, __half c) {
  return __float2half(fmaf(__half2float(a), __half2float(b), __half2float(c)));
}

// nvcuda::wmma (mma.h) for 16x16x16 tiles, as warp-collective operations with the
// semantics of the hardware's: A and B fragments (half or bfloat16) hold the whole
// tile in every lane (each lane reads all of it, as a warp reads it together), the
// FP32 accumulator is distributed over the lanes (lane l owns row-major elements
// l, l + 32, ..., l + 224), so mma_sync computes each lane's 8 sums in FP32 from
// exact products, and store_matrix_sync writes each element once. No lane reads
// another lane's registers, so the warp need not meet (a fiber switch per call
// would make FP16 CNNs several times slower on emu); the race checker still sees
// every shared-memory access.
namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

namespace dlc_emu_detail {
inline int lane() {
  return static_cast<int>(
      (threadIdx.x + threadIdx.y * blockDim.x + threadIdx.z * blockDim.x * blockDim.y) % 32);
}
template <class T> inline float toFloat(T v) {
  return static_cast<float>(v);
}
} // namespace dlc_emu_detail

template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment;
template <int M, int N, int K, class T, class Layout>
struct fragment<matrix_a, M, N, K, T, Layout> {
  static_assert(M == 16 && N == 16 && K == 16, "emu wmma: 16x16x16 tiles only");
  static constexpr int num_elements = 256;
  float x[256]; // [row][k], converted once from T
};
template <int M, int N, int K, class T, class Layout>
struct fragment<matrix_b, M, N, K, T, Layout> {
  static_assert(M == 16 && N == 16 && K == 16, "emu wmma: 16x16x16 tiles only");
  static constexpr int num_elements = 256;
  float x[256]; // [k][col]
};
template <int M, int N, int K> struct fragment<accumulator, M, N, K, float, void> {
  static_assert(M == 16 && N == 16 && K == 16, "emu wmma: 16x16x16 tiles only");
  static constexpr int num_elements = 8;
  float x[8]; // this lane's elements: row-major index lane + 32 i
};

template <class Frag> inline void fill_fragment(Frag &f, float v) {
  for (int i = 0; i < Frag::num_elements; ++i)
    f.x[i] = v;
}

/// A (row_major: element (r, k) at p[r * ldm + k]) or B (row_major: (k, c) at p[k * ldm + c]).
template <class Use, class T, class Layout>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout> &f, const T *p, unsigned ldm) {
  constexpr bool colMajor = std::is_same<Layout, col_major>::value;
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c)
      f.x[r * 16 + c] = dlc_emu_detail::toFloat(colMajor ? p[c * ldm + r] : p[r * ldm + c]);
}

template <class TA, class LA, class TB, class LB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float, void> &d,
                     const fragment<matrix_a, 16, 16, 16, TA, LA> &a,
                     const fragment<matrix_b, 16, 16, 16, TB, LB> &b,
                     const fragment<accumulator, 16, 16, 16, float, void> &c) {
  const int l = dlc_emu_detail::lane();
  for (int i = 0; i < 8; ++i) {
    const int e = l + 32 * i, r = e / 16, col = e % 16;
    float s = c.x[i];
    for (int k = 0; k < 16; ++k) // products of 16-bit values are exact in FP32
      s = fmaf(a.x[r * 16 + k], b.x[k * 16 + col], s);
    d.x[i] = s;
  }
}

inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float, void> &f,
                              unsigned ldm, layout_t layout) {
  const int l = dlc_emu_detail::lane();
  for (int i = 0; i < 8; ++i) {
    const int e = l + 32 * i, r = e / 16, c = e % 16;
    p[layout == mem_row_major ? r * ldm + c : c * ldm + r] = f.x[i];
  }
}
} // namespace wmma
} // namespace nvcuda

// PTX's warp-level matrix instructions (ldmatrix, mma.sync) and cp.async, as the PTX
// ISA documents them per lane (dlc_mma.cuh calls these on emu). A warp-wide operation
// runs once for the warp (dlc_emu_api.warp_op): the last lane to arrive reads every
// lane's operands, computes all 32 lanes' results and hands them back.
namespace dlc_emu_ptx {
using u64 = unsigned long long;

inline void asLane(int lane) {
  if (dlc_emu_checked_bytes) // only --check attributes accesses
    dlc_emu_api_ptr->access_as_lane(lane);
}

/// ldmatrix.sync.aligned.m8n8.x{num}{.trans}.shared.b16 for a warp: row j of matrix i
/// is 16 bytes at addr[8 i + j]; lane l receives in r[l][i] the elements (l / 4,
/// 2 (l % 4)) and (l / 4, 2 (l % 4) + 1) of matrix i (transposed with .trans: (2 (l % 4),
/// l / 4) and (2 (l % 4) + 1, l / 4)), the first in the low half.
inline void ldmatrixWarp(const u64 *addr, int num, bool trans, unsigned (*r)[4]) {
  unsigned short m[4][8][8];
  for (int i = 0; i < num; ++i)
    for (int j = 0; j < 8; ++j) {
      const u64 a = addr[8 * i + j];
      if (a % 16)
        dlc_emu_api_ptr->trap("ldmatrix: a row address that is not 16-byte aligned");
      asLane(8 * i + j);
      const u64 *p = reinterpret_cast<const u64 *>(a);
      const u64 lo = p[0], hi = p[1];
      for (int c = 0; c < 4; ++c) {
        m[i][j][c] = static_cast<unsigned short>(lo >> (16 * c));
        m[i][j][4 + c] = static_cast<unsigned short>(hi >> (16 * c));
      }
    }
  asLane(-1);
  for (int l = 0; l < 32; ++l)
    for (int i = 0; i < num; ++i) {
      const int g = l / 4, c = 2 * (l % 4);
      const unsigned e0 = trans ? m[i][c][g] : m[i][g][c],
                     e1 = trans ? m[i][c + 1][g] : m[i][g][c + 1];
      r[l][i] = e0 | (e1 << 16);
    }
}

inline float halfBits(unsigned short h, bool bf16) {
  if (bf16) {
    const unsigned u = static_cast<unsigned>(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  __half x;
  std::memcpy(&x, &h, 2);
  return __half2float(x);
}

/// D = A B + D over one 16 x 8 tile (m16n8k16 with 16-bit A and B, or m16n8k8 with
/// TF32), from the per-lane fragments: A[r][k], B[k][n] gathered by the PTX ISA's
/// fragment tables (groupID g = lane / 4, t = lane % 4), D[g + 8 (i / 2)][2 t + i % 2]
/// in d[lane][i]. Each element is D plus the exact products summed in double and
/// rounded once to FP32 (the tensor core's adder keeps more than FP32; the rounding
/// of its adder tree is not documented).
template <int KMax>
inline void mmaTile(const double (&A)[16][KMax], const double (&B)[KMax][8], int K, float (*d)[4]) {
  for (int l = 0; l < 32; ++l)
    for (int i = 0; i < 4; ++i) {
      const int row = l / 4 + 8 * (i / 2), col = 2 * (l % 4) + i % 2;
      double s = d[l][i];
      for (int k = 0; k < K; ++k)
        s += A[row][k] * B[k][col];
      d[l][i] = static_cast<float>(s);
    }
}
/// mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32, D += A B: lane
/// (g, t) holds A (g, 2t..2t+1), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..) in a[0..3] and
/// B (2t..2t+1, g), (2t+8..2t+9, g) in b[0..1].
inline void mma16816Warp(bool bf16, const unsigned (*a)[4], const unsigned (*b)[2], float (*d)[4]) {
  double A[16][16], B[16][8];
  for (int l = 0; l < 32; ++l) {
    const int g = l / 4, t = l % 4;
    for (int h = 0; h < 2; ++h) {
      A[g][2 * t + h] = halfBits(static_cast<unsigned short>(a[l][0] >> (16 * h)), bf16);
      A[g + 8][2 * t + h] = halfBits(static_cast<unsigned short>(a[l][1] >> (16 * h)), bf16);
      A[g][2 * t + 8 + h] = halfBits(static_cast<unsigned short>(a[l][2] >> (16 * h)), bf16);
      A[g + 8][2 * t + 8 + h] = halfBits(static_cast<unsigned short>(a[l][3] >> (16 * h)), bf16);
      B[2 * t + h][g] = halfBits(static_cast<unsigned short>(b[l][0] >> (16 * h)), bf16);
      B[2 * t + 8 + h][g] = halfBits(static_cast<unsigned short>(b[l][1] >> (16 * h)), bf16);
    }
  }
  mmaTile(A, B, 16, d);
}
/// cvt.rna.tf32.f32 on FP32 bits: the nearest value with 10 mantissa bits, ties away
/// from zero, the low 13 bits zero; infinities kept, NaN stays a (quiet) NaN.
inline unsigned rnaTf32(unsigned u) {
  if ((u & 0x7f800000u) == 0x7f800000u)
    return (u & 0x7fffffu) ? (u | 0x400000u) & 0xffffe000u : u;
  return (u + 0x1000u) & 0xffffe000u;
}
/// A TF32 operand: the FP32 bits with the low 13 mantissa bits ignored.
inline double tf32Bits(unsigned u) {
  u &= 0xffffe000u;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
/// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32, D += A B: lane (g, t) holds A
/// (g, t), (g+8, t), (g, t+4), (g+8, t+4) in a[0..3], B (t, g), (t+4, g) in b[0..1].
inline void mma1688Tf32Warp(const unsigned (*a)[4], const unsigned (*b)[2], float (*d)[4]) {
  double A[16][16], B[16][8];
  for (int l = 0; l < 32; ++l) {
    const int g = l / 4, t = l % 4;
    A[g][t] = tf32Bits(a[l][0]);
    A[g + 8][t] = tf32Bits(a[l][1]);
    A[g][t + 4] = tf32Bits(a[l][2]);
    A[g + 8][t + 4] = tf32Bits(a[l][3]);
    B[t][g] = tf32Bits(b[l][0]);
    B[t + 4][g] = tf32Bits(b[l][1]);
  }
  mmaTile(A, B, 8, d);
}

/// mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32, D += A B: lane (g, t) holds A
/// (g, 4t..4t+3), (g+8, 4t..), (g, 4t+16..), (g+8, 4t+16..) in a[0..3], one signed byte
/// each, lowest first, and B (4t..4t+3, g), (4t+16..4t+19, g) in b[0..1]; D as m16n8k16's.
/// The sums are exact, and wrap modulo 2^32 as int32 additions without .satfinite do.
inline void mma16832S8Warp(const unsigned (*a)[4], const unsigned (*b)[2], int (*d)[4]) {
  int A[16][32], B[32][8];
  auto byte = [](unsigned r, int i) {
    return static_cast<int>(static_cast<signed char>(r >> (8 * i)));
  };
  for (int l = 0; l < 32; ++l) {
    const int g = l / 4, t = l % 4;
    for (int i = 0; i < 4; ++i) {
      A[g][4 * t + i] = byte(a[l][0], i);
      A[g + 8][4 * t + i] = byte(a[l][1], i);
      A[g][4 * t + 16 + i] = byte(a[l][2], i);
      A[g + 8][4 * t + 16 + i] = byte(a[l][3], i);
      B[4 * t + i][g] = byte(b[l][0], i);
      B[4 * t + 16 + i][g] = byte(b[l][1], i);
    }
  }
  for (int l = 0; l < 32; ++l)
    for (int i = 0; i < 4; ++i) {
      const int row = l / 4 + 8 * (i / 2), col = 2 * (l % 4) + i % 2;
      unsigned s = static_cast<unsigned>(d[l][i]);
      for (int k = 0; k < 32; ++k)
        s += static_cast<unsigned>(A[row][k] * B[k][col]);
      d[l][i] = static_cast<int>(s);
    }
}

/// The value of a float8 byte (e4m3fn, or e5m2), from the formats' definitions.
inline double f8Value(unsigned b, bool e5m2) {
  const int mant = e5m2 ? 2 : 3, bias = e5m2 ? 15 : 7, e = (b & 0x7f) >> mant,
            m = b & ((1 << mant) - 1);
  double v;
  if (e5m2 ? e == 31 : (b & 0x7f) == 0x7f)
    v = e5m2 && m == 0 ? INFINITY : NAN;
  else
    v = e == 0 ? std::ldexp(m, 1 - bias - mant) : std::ldexp((1 << mant) + m, e - bias - mant);
  return (b & 0x80) ? -v : v;
}
/// mma.sync.aligned.m16n8k32.row.col.f32.{e4m3,e5m2}.{e4m3,e5m2}.f32, D += A B: the
/// fragments as m16n8k32's s8 (one float8 byte each), D as m16n8k16's (mmaTile's sums).
inline void mma16832F8Warp(bool e5m2, const unsigned (*a)[4], const unsigned (*b)[2],
                           float (*d)[4]) {
  double A[16][32], B[32][8];
  for (int l = 0; l < 32; ++l) {
    const int g = l / 4, t = l % 4;
    for (int i = 0; i < 4; ++i) {
      auto byte = [&](unsigned r) { return f8Value((r >> (8 * i)) & 0xffu, e5m2); };
      A[g][4 * t + i] = byte(a[l][0]);
      A[g + 8][4 * t + i] = byte(a[l][1]);
      A[g][4 * t + 16 + i] = byte(a[l][2]);
      A[g + 8][4 * t + 16 + i] = byte(a[l][3]);
      B[4 * t + i][g] = byte(b[l][0]);
      B[4 * t + 16 + i][g] = byte(b[l][1]);
    }
  }
  mmaTile(A, B, 32, d);
}

template <class Lane> inline Lane &lane(void *const *lanes, int l) {
  return *static_cast<Lane *>(lanes[l]);
}
inline void warpOp(void *operands, void (*op)(void *const *, unsigned)) {
  dlc_emu_api_ptr->warp_op(operands, 0xffffffffu, op);
}

struct LdsmLane {
  u64 addr;
  unsigned r[4];
};
template <int Num, bool Trans> void ldsmOp(void *const *lanes, unsigned) {
  u64 addr[32];
  unsigned r[32][4];
  for (int l = 0; l < 32; ++l)
    addr[l] = lane<LdsmLane>(lanes, l).addr;
  ldmatrixWarp(addr, Num, Trans, r);
  for (int l = 0; l < 32; ++l)
    for (int i = 0; i < Num; ++i)
      lane<LdsmLane>(lanes, l).r[i] = r[l][i];
}
template <int Num, bool Trans> inline void ldmatrix(unsigned *r, u64 addr) {
  LdsmLane me{addr, {}};
  warpOp(&me, ldsmOp<Num, Trans>);
  for (int i = 0; i < Num; ++i)
    r[i] = me.r[i];
}

struct MmaLane {
  unsigned a[4], b[2];
  float d[4];
};
template <int Kind>
void mmaOp(void *const *lanes, unsigned) { // 0 f16, 1 bf16, 2 tf32, 4 e4m3, 5 e5m2
  unsigned a[32][4], b[32][2];
  float d[32][4];
  for (int l = 0; l < 32; ++l) {
    const MmaLane &x = lane<MmaLane>(lanes, l);
    std::memcpy(a[l], x.a, sizeof(x.a));
    std::memcpy(b[l], x.b, sizeof(x.b));
    std::memcpy(d[l], x.d, sizeof(x.d));
  }
  if (Kind >= 4)
    mma16832F8Warp(Kind == 5, a, b, d);
  else if (Kind == 2)
    mma1688Tf32Warp(a, b, d);
  else
    mma16816Warp(Kind == 1, a, b, d);
  for (int l = 0; l < 32; ++l)
    std::memcpy(lane<MmaLane>(lanes, l).d, d[l], sizeof(d[l]));
}
struct MmaS8Lane {
  unsigned a[4], b[2];
  int d[4];
};
inline void mmaS8Op(void *const *lanes, unsigned) {
  unsigned a[32][4], b[32][2];
  int d[32][4];
  for (int l = 0; l < 32; ++l) {
    const MmaS8Lane &x = lane<MmaS8Lane>(lanes, l);
    std::memcpy(a[l], x.a, sizeof(x.a));
    std::memcpy(b[l], x.b, sizeof(x.b));
    std::memcpy(d[l], x.d, sizeof(x.d));
  }
  mma16832S8Warp(a, b, d);
  for (int l = 0; l < 32; ++l)
    std::memcpy(lane<MmaS8Lane>(lanes, l).d, d[l], sizeof(d[l]));
}
inline void mmaS8(int *d, const unsigned *a, const unsigned *b) {
  MmaS8Lane me;
  std::memcpy(me.a, a, sizeof(me.a));
  std::memcpy(me.b, b, sizeof(me.b));
  std::memcpy(me.d, d, sizeof(me.d));
  warpOp(&me, mmaS8Op);
  std::memcpy(d, me.d, sizeof(me.d));
}
template <int Kind> inline void mma(float *d, const unsigned *a, const unsigned *b) {
  MmaLane me;
  std::memcpy(me.a, a, sizeof(me.a));
  std::memcpy(me.b, b, sizeof(me.b));
  std::memcpy(me.d, d, sizeof(me.d));
  warpOp(&me, mmaOp<Kind>);
  std::memcpy(d, me.d, sizeof(me.d));
}

/// A warp's fragments of an MI x NI tile of m16n8 products for one k step
/// (dlc::WarpFrags): lane l's registers of A fragment i and of the B fragments of n-tiles
/// 2 jj and 2 jj + 1.
template <int MI, int NI> struct FragLane {
  u64 aRow[MI], bRow[NI / 2];
  unsigned (*a)[4], (*b)[4]; // [MI][4], [NI / 2][4]
};
/// dlc::warpTileLoad: the A fragments by ldmatrix.x4 at aRow[i], the B fragments by
/// ldmatrix.x4 at bRow[jj]; Kind 2 (TF32) rounds every register by cvt.rna.tf32.
template <int MI, int NI, int Kind> void fragLoadOp(void *const *lanes, unsigned) {
  unsigned r[32][4];
  u64 addr[32];
  for (int i = 0; i < MI + NI / 2; ++i) { // the A fragments, then the B pairs
    const bool isA = i < MI;
    const int k = isA ? i : i - MI;
    for (int l = 0; l < 32; ++l) {
      const FragLane<MI, NI> &x = lane<FragLane<MI, NI>>(lanes, l);
      addr[l] = isA ? x.aRow[k] : x.bRow[k];
    }
    ldmatrixWarp(addr, 4, false, r);
    for (int l = 0; l < 32; ++l) {
      const FragLane<MI, NI> &x = lane<FragLane<MI, NI>>(lanes, l);
      unsigned *dst = isA ? x.a[k] : x.b[k];
      for (int e = 0; e < 4; ++e)
        dst[e] = Kind == 2 ? rnaTf32(r[l][e]) : r[l][e];
    }
  }
}
template <int NP> struct TransLane {
  u64 bRow[NP];
  unsigned (*b)[4]; // [NP][4]
};
/// dlc::warpLoadBTrans: ldmatrix.x4.trans at bRow[j] for each pair j, as one warp
/// operation.
template <int NP> void transLoadOp(void *const *lanes, unsigned) {
  unsigned r[32][4];
  u64 addr[32];
  for (int j = 0; j < NP; ++j) {
    for (int l = 0; l < 32; ++l)
      addr[l] = lane<TransLane<NP>>(lanes, l).bRow[j];
    ldmatrixWarp(addr, 4, true, r);
    for (int l = 0; l < 32; ++l)
      std::memcpy(lane<TransLane<NP>>(lanes, l).b[j], r[l], sizeof(r[l]));
  }
}
template <int MI, int NI, class Acc = float> struct TileLane {
  const unsigned (*a)[4], (*b)[4]; // [MI][4], [NI / 2][4]
  Acc *acc;                        // [MI][NI][4]
};
/// dlc::warpTileMma: acc[i][j] += A_i B_j for every (i, j) (Kind 0, 1: m16n8k16 f16,
/// bf16; 2: m16n8k8 tf32; 3: m16n8k32 s8 into int accumulators; 4, 5: m16n8k32 e4m3,
/// e5m2), as one warp operation.
template <int MI, int NI, int Kind> void tileOp(void *const *lanes, unsigned) {
  typedef typename std::conditional<Kind == 3, int, float>::type Acc;
  typedef TileLane<MI, NI, Acc> Lane;
  unsigned a[32][4], b[32][2];
  Acc d[32][4];
  for (int i = 0; i < MI; ++i)
    for (int j = 0; j < NI; ++j) {
      for (int l = 0; l < 32; ++l) {
        const Lane &x = lane<Lane>(lanes, l);
        std::memcpy(a[l], x.a[i], sizeof(a[l]));
        b[l][0] = x.b[j / 2][2 * (j % 2)];
        b[l][1] = x.b[j / 2][2 * (j % 2) + 1];
        std::memcpy(d[l], x.acc + (i * NI + j) * 4, sizeof(d[l]));
      }
      if constexpr (Kind == 3)
        mma16832S8Warp(a, b, d);
      else if constexpr (Kind >= 4)
        mma16832F8Warp(Kind == 5, a, b, d);
      else if constexpr (Kind == 2)
        mma1688Tf32Warp(a, b, d);
      else
        mma16816Warp(Kind == 1, a, b, d);
      for (int l = 0; l < 32; ++l)
        std::memcpy(lane<Lane>(lanes, l).acc + (i * NI + j) * 4, d[l], sizeof(d[l]));
    }
}
} // namespace dlc_emu_ptx
