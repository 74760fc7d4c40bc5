//===- CalibrationKernels.cpp - The microbenchmarks of `dlc calibrate` -----===//
//
// CUDA C++ that `dlc calibrate` compiles (NVRTC, for the GPU at hand) and
// rt::calibrate() times. Every kernel's first parameter is `out`, where thread 0 of
// block 0 leaves what it measured with clock64 (cycles) or a sink that keeps the
// compiler from dropping the work. Each throughput kernel runs one wave (the grid the
// caller launches fits on the GPU at once), so elapsed time x SMs is SM-time.
//===----------------------------------------------------------------------===//
#include "dlc/runtime/Calibrate.h"

namespace dlc::rt {

const char *calibrationKernelSource() {
  return R"CUDA(
#include <cuda_fp16.h>
typedef unsigned long long u64;

// 8 independent FFMA chains per thread, 8 per chain per iteration: 64 FFMA. out[0]:
// clock64 ticks of block 0, from before its first warp starts to after its last warp
// ends: one warp's own span undercounts (on an H100 thread 0's warp, favoured by its
// scheduler, finished in 0.42 of the kernel's time).
extern "C" __global__ void dlc_cal_ffma(u64 *out, float seed, int iters) {
  __shared__ u64 start;
  float a[8];
  for (int k = 0; k < 8; ++k) a[k] = seed + k + threadIdx.x;
  if (threadIdx.x == 0) start = clock64();
  __syncthreads();
#pragma unroll 1
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int r = 0; r < 8; ++r)
#pragma unroll
      for (int k = 0; k < 8; ++k) a[k] = fmaf(a[k], 0.9999f, 0.0001f);
  }
  __syncthreads();
  float s = 0;
  for (int k = 0; k < 8; ++k) s += a[k];
  if (threadIdx.x == 0 && blockIdx.x == 0) out[0] = clock64() - start;
  if (s == 12345.f) out[1] = 1;
}

// The same with packed halves: 64 HFMA2 per iteration.
extern "C" __global__ void dlc_cal_hfma2(u64 *out, float seed, int iters) {
  __half2 a[8];
  for (int k = 0; k < 8; ++k) a[k] = __float2half2_rn(seed + k);
  const __half2 m = __float2half2_rn(0.999f), c = __float2half2_rn(0.001f);
#pragma unroll 1
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int r = 0; r < 8; ++r)
#pragma unroll
      for (int k = 0; k < 8; ++k) a[k] = __hfma2(a[k], m, c);
  }
  float s = 0;
  for (int k = 0; k < 8; ++k) s += __low2float(a[k]) + __high2float(a[k]);
  if (s == 12345.f) out[1] = 1;
}

// 8 independent m16n8k16 FP16 MMAs with FP32 accumulators per warp and iteration.
extern "C" __global__ void dlc_cal_mma(u64 *out, unsigned seed, int iters) {
  float acc[8][4];
  for (int k = 0; k < 8; ++k)
    for (int j = 0; j < 4; ++j) acc[k][j] = 0;
  unsigned a0 = seed ^ threadIdx.x, a1 = a0 * 3, a2 = a0 * 5, a3 = a0 * 7, b0 = a0 + 1, b1 = a0 + 2;
#pragma unroll 1
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int k = 0; k < 8; ++k)
      asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                   "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                   : "+f"(acc[k][0]), "+f"(acc[k][1]), "+f"(acc[k][2]), "+f"(acc[k][3])
                   : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
  float s = 0;
  for (int k = 0; k < 8; ++k) s += acc[k][0] + acc[k][1] + acc[k][2] + acc[k][3];
  if (s == 12345.f) out[1] = 1;
}

// A streaming copy with 128-bit accesses (DRAM bandwidth: bytes read + written).
extern "C" __global__ void dlc_cal_copy(u64 *out, const uint4 *in, uint4 *dst, u64 n) {
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
    dst[i] = in[i];
}

// Reads of a buffer that fits in L2, `reps` times (L2 bandwidth).
extern "C" __global__ void dlc_cal_l2(u64 *out, const uint4 *in, u64 n, int reps) {
  unsigned x = 0;
#pragma unroll 1
  for (int r = 0; r < reps; ++r)
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
      uint4 v = __ldcg(in + i);
      x ^= v.x ^ v.y ^ v.z ^ v.w;
    }
  if (x == 0x12345678u) out[1] = x;
}

// A ring with a stride of `stride` elements (pointer chasing).
extern "C" __global__ void dlc_cal_ring(u64 *out, unsigned *next, unsigned n, unsigned stride) {
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    next[i] = (unsigned)(((u64)i + stride) % n);
}

// One thread follows the ring: a warm-up pass, then `steps` dependent loads timed;
// out[0] = cycles per load.
extern "C" __global__ void dlc_cal_chase(u64 *out, const unsigned *next, int steps) {
  unsigned j = 0;
#pragma unroll 1
  for (int i = 0; i < steps; ++i) j = __ldcg(next + j);
  u64 t0 = clock64();
#pragma unroll 1
  for (int i = 0; i < steps; ++i) j = __ldcg(next + j);
  u64 t1 = clock64();
  out[0] = (t1 - t0) / (u64)steps;
  out[1] = j;
}

extern "C" __global__ void dlc_cal_empty(u64 *out) {}
)CUDA";
}

} // namespace dlc::rt
