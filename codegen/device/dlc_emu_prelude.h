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
inline int atomicMax(int *a, int v) {
  return dlc_emu_atomic_cas_loop<int>(a, v, [](int x, int y) { return x > y ? x : y; });
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
