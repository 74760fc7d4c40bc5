// Element-wise fusion groups: the group itself is a generated functor F with
//   template <class I> static void run(const F::Params &, I i)
// that computes and stores element i (or, for the float4 form, elements 4i..4i+3);
// this template only walks the index space.
#pragma once

#include "dlc_device.cuh"

namespace dlc {

template <class F> struct ElemArgs {
  i64 n;
  typename F::Params f;
};

/// One thread per element, grid-stride beyond the grid (at most 65536 blocks).
template <class I, class F>
__global__ void __launch_bounds__(256) elementwise(const ElemArgs<F> a) {
  const I n = static_cast<I>(a.n), step = static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x);
  for (I i = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x);
       i < n; i += step)
    F::run(a.f, i);
}

/// L update lanes of one structure in one launch (an optimizer step over every
/// parameter): F is the lane's generated functor, and each lane passes its own Params
/// (its tensors' addresses). Lane k owns blocks [blockStart[k], blockStart[k+1]), each
/// covering kMultiTensorChunk of its n[k] elements.
template <class F, int L> struct MultiTensorArgs {
  i64 blockStart[L + 1];
  i64 n[L];
  typename F::Params f[L];
};

template <class I, class F, int L>
__global__ void __launch_bounds__(256) multi_tensor(const MultiTensorArgs<F, L> a) {
  const i64 b = static_cast<i64>(blockIdx.x);
  int lo = 0, hi = L - 1; // the last lane whose first block is at most b
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (a.blockStart[mid] <= b)
      lo = mid;
    else
      hi = mid - 1;
  }
  const typename F::Params p = a.f[lo];
  const I n = static_cast<I>(a.n[lo]);
  const I begin = static_cast<I>(b - a.blockStart[lo]) * static_cast<I>(kMultiTensorChunk);
  const I end =
      n - begin < static_cast<I>(kMultiTensorChunk) ? n : begin + static_cast<I>(kMultiTensorChunk);
  for (I i = begin + static_cast<I>(threadIdx.x); i < end; i += static_cast<I>(blockDim.x))
    F::run(p, i);
}

/// A GEMM's epilogue as a kernel, for when no cuBLASLt algorithm applies it: the GEMM
/// runs without it, then D[b][r][c] = act(D[b][r][c] + bias[c]) (GemmActivation:
/// 0 none, 1 ReLU, 2 GELU in the tanh form).
template <int Act, class I, class DT>
__global__ void __launch_bounds__(256) gemm_epilogue(const GemmEpilogueShape s) {
  typedef typename Compute<DT>::type T;
  DT *d = static_cast<DT *>(s.d);
  DLC_GRID_STRIDE(i, static_cast<I>(s.total)) {
    I b = i; // becomes the batch index
    const I c = s.dCols.split(b);
    const I r = s.dRows.split(b);
    const I at = b * static_cast<I>(s.strideC) + r * static_cast<I>(s.ldc) + c;
    T v = ld<T>(d, at);
    if (s.bias)
      v += ld<T>(static_cast<const DT *>(s.bias), c);
    if (Act == 1)
      v = v > T(0) ? v : T(0);
    else if (Act == 2)
      v = gelu_(v, attr_tanh);
    st(d, at, v);
  }
}

} // namespace dlc
