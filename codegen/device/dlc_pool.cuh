// Max and average pooling over a window (spatial dims normalized to 3), one thread
// per output, reading through the fused prologue X and storing through Out;
// channels-first (NCHW) or channels-last (CL: NHWC, no indices). Global pooling is a
// reduction (dlc_reduce.cuh).
#pragma once

#include "dlc_device.cuh"

namespace dlc {

template <class X, class Out> struct PoolArgs {
  PoolShape s;
  typename X::Params x;
  typename Out::Params out;
};

/// A window's maximum and its cell: the first of equal maxima in window order (NaN never
/// wins; a window of NaNs keeps its first cell and -inf), as MaxPool's reference picks
/// it. pool_window and pool_max_grad find it alike.
template <class A, class I> struct WindowMax {
  A best;
  I cell;
  __device__ __forceinline__ WindowMax() : best(Limits<A>::lowest()), cell(-1) {}
  __device__ __forceinline__ void take(A v, I c) {
    if (cell < 0)
      cell = c;
    if (v > best) {
      best = v;
      cell = c;
    }
  }
};

template <bool IsMax, bool CL, class I, class X, class Out>
__global__ void __launch_bounds__(256) pool_window(const PoolArgs<X, Out> a) {
  typedef typename X::Value T;
  typedef typename Accum<T, !IsMax>::type A; // averages sum in double, as the reference
  const PoolShape &s = a.s;
  const I step = static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x);
  for (I i = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x);
       i < static_cast<I>(s.total); i += step) {
    I r = i, ch = 0;
    if (CL)
      ch = s.dC.split(r);
    const I o2 = s.dOut2.split(r), o1 = s.dOut1.split(r), o0 = s.dOut0.split(r);
    // r: the image (CL) or the image's channel; a cell's element is base + cell * cs.
    const I cs = CL ? static_cast<I>(s.C) : I(1);
    const I base = CL ? r * static_cast<I>(s.inSize) * cs + ch : r * static_cast<I>(s.inSize);
    const I o[3] = {o0, o1, o2};
    WindowMax<A, I> max;
    A acc = A(0);
    I count = 0;
    forEachWindowTap(s, o0, o1, o2, [&](I cell, I) {
      const A v = static_cast<A>(X::load(a.x, base + cell * cs));
      if (IsMax) {
        max.take(v, cell);
      } else {
        acc += v;
        ++count;
      }
    });
    if (IsMax) {
      const I bestCell = max.cell < 0 ? I(0) : max.cell;
      Out::store(a.out, i, static_cast<T>(max.best));
      if (s.indices) {
        I flat = bestCell;
        if (s.columnMajor) {
          // The spatial index in column-major order over the real spatial dims.
          I cr = bestCell;
          I cc[3];
          cc[2] = s.dIn2.split(cr);
          cc[1] = s.dIn1.split(cr);
          cc[0] = cr;
          I cm = 0, mult = 1;
          for (int d = 3 - static_cast<int>(s.spatialRank); d < 3; ++d) {
            cm += cc[d] * mult;
            mult *= static_cast<I>(s.in[d]);
          }
          flat = cm;
        }
        static_cast<i64 *>(s.indices)[i] = static_cast<i64>(base + flat);
      }
    } else {
      if (s.countIncludePad) {
        // Window cells inside [-padBegin, in + padEnd), as the reference counts them.
        count = 1;
#pragma unroll
        for (int d = 0; d < 3; ++d) {
          const I st = o[d] * static_cast<I>(s.stride[d]) - static_cast<I>(s.pad[d]);
          I en = st + (static_cast<I>(s.k[d]) - 1) * static_cast<I>(s.dil[d]) + 1;
          const I lim = static_cast<I>(s.in[d]) + static_cast<I>(s.padEnd[d]);
          en = en < lim ? en : lim;
          count *= (en - st + static_cast<I>(s.dil[d]) - 1) / static_cast<I>(s.dil[d]);
        }
      }
      Out::store(a.out, i, static_cast<T>(count ? acc / static_cast<A>(count) : A(0)));
    }
  }
}

/// MaxPool's input gradient (MaxPoolGrad): a thread per input element, or (CL) per
/// run of V adjacent channels read as one vector. Input cell p receives, from each
/// window that covers it (at most ceil(k / stride) per dim, found without division per
/// window), that window's output gradient when p is the window's maximum: the first of
/// equal maxima in window order, found again in the stored x as pool_window finds it
/// (a forward that compared a fused prologue's unrounded values may break an FP16 tie
/// the other way: the gradient then goes to the other, equal, element). A gather: no
/// atomics, no indices tensor, the same sums in every run.
template <class Out> struct PoolGradArgs {
  PoolShape s;
  typename Out::Params out;
};

template <bool CL, int V, class I, class MT, class Out>
__global__ void __launch_bounds__(256) pool_max_grad(const PoolGradArgs<Out> a) {
  typedef typename Out::Value T;
  typedef typename Compute<MT>::type C; // float for FP16/BF16
  typedef VecOf<MT, V> Vec;
  const PoolShape &s = a.s;
  const MT *x = static_cast<const MT *>(s.x), *dy = static_cast<const MT *>(s.dy);
  const I step = static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x);
  for (I i = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x);
       i < static_cast<I>(s.total); i += step) {
    I r = i, ch = 0;
    if (CL)
      ch = s.dC.split(r) * V;
    const I p2 = s.dIn2.split(r), p1 = s.dIn1.split(r), p0 = s.dIn0.split(r);
    // r: the image (CL) or the image's channel.
    const I cs = CL ? static_cast<I>(s.C) : I(1);
    const I base = CL ? r * static_cast<I>(s.inSize) * cs + ch : r * static_cast<I>(s.inSize);
    const I outBase = CL ? r * static_cast<I>(s.outSize) * cs + ch : r * static_cast<I>(s.outSize);
    const I me = (p0 * static_cast<I>(s.in[1]) + p1) * static_cast<I>(s.in[2]) + p2;
    const I p[3] = {p0, p1, p2};
    I lo[3], hi[3];
#pragma unroll
    for (int d = 0; d < 3; ++d) { // windows o with o * stride - pad + t * dil = p, t < k
      const I st = static_cast<I>(s.stride[d]), top = p[d] + static_cast<I>(s.pad[d]);
      const I first = top - (static_cast<I>(s.k[d]) - 1) * static_cast<I>(s.dil[d]);
      lo[d] = first > 0 ? (first + st - 1) / st : I(0);
      hi[d] = top / st;
      if (hi[d] > static_cast<I>(s.out[d]) - 1)
        hi[d] = static_cast<I>(s.out[d]) - 1;
    }
    C acc[V];
#pragma unroll
    for (int j = 0; j < V; ++j)
      acc[j] = C(0);
    // Window o's taps land on p in dim d (o in [lo, hi], dilation steps).
    auto onTap = [&](int d, I o) {
      return (p[d] + static_cast<I>(s.pad[d]) - o * static_cast<I>(s.stride[d])) %
                 static_cast<I>(s.dil[d]) ==
             0;
    };
    for (I o0 = lo[0]; o0 <= hi[0]; ++o0) {
      if (!onTap(0, o0))
        continue;
      for (I o1 = lo[1]; o1 <= hi[1]; ++o1) {
        if (!onTap(1, o1))
          continue;
        for (I o2 = lo[2]; o2 <= hi[2]; ++o2) {
          if (!onTap(2, o2))
            continue;
          WindowMax<C, I> max[V];
          forEachWindowTap(s, o0, o1, o2, [&](I cell, I) {
            const Vec v = *reinterpret_cast<const Vec *>(x + base + cell * cs);
#pragma unroll
            for (int j = 0; j < V; ++j)
              max[j].take(Cvt<C, MT>::run(v.v[j]), cell);
          });
          const I o = (o0 * static_cast<I>(s.out[1]) + o1) * static_cast<I>(s.out[2]) + o2;
          const Vec g = *reinterpret_cast<const Vec *>(dy + outBase + o * cs);
#pragma unroll
          for (int j = 0; j < V; ++j)
            if (max[j].cell == me)
              acc[j] += Cvt<C, MT>::run(g.v[j]);
        }
      }
    }
#pragma unroll
    for (int j = 0; j < V; ++j)
      Out::store(a.out, i * V + j, static_cast<T>(acc[j]));
  }
}

} // namespace dlc
