// Element-wise fusion groups: the group itself is a generated functor F with
//   template <class I> static void run(const F::Params &, I i)
// that computes and stores element i (or, for the float4 form, elements 4i..4i+3);
// this template only walks the index space.
#pragma once

namespace dlc {

template <class F> struct ElemArgs {
  i64 n;
  typename F::Params f;
};

/// One thread per element, grid-stride beyond the grid (at most 65536 blocks).
template <class I, class F> __global__ void __launch_bounds__(256) elementwise(const ElemArgs<F> a) {
  const I n = static_cast<I>(a.n), step = static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x);
  for (I i = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x); i < n; i += step)
    F::run(a.f, i);
}

/// A GEMM's epilogue as a kernel, for when no cuBLASLt algorithm applies it: the GEMM
/// runs without it, then D[b][r][c] = act(D[b][r][c] + bias[c]) (GemmActivation:
/// 0 none, 1 ReLU, 2 GELU in the tanh form).
template <int Act, class I, class DT> __global__ void __launch_bounds__(256) gemm_epilogue(const GemmEpilogueShape s) {
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
