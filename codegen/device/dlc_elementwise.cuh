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

} // namespace dlc
