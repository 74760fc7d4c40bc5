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
    A acc = IsMax ? Limits<A>::lowest() : A(0);
    I bestCell = -1, count = 0;
    forEachWindowTap(s, o0, o1, o2, [&](I cell, I) {
      const A v = static_cast<A>(X::load(a.x, base + cell * cs));
      if (IsMax) {
        if (bestCell < 0)
          bestCell = cell;
        if (v > acc) {
          acc = v;
          bestCell = cell;
        }
      } else {
        acc += v;
        ++count;
      }
    });
    if (IsMax) {
      if (bestCell < 0)
        bestCell = 0;
      Out::store(a.out, i, static_cast<T>(acc));
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

} // namespace dlc
