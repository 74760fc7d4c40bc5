// Normalizations over rows: LayerNormalization, InstanceNormalization and
// GroupNormalization (one block per row, or one thread per short row): the mean, the
// variance around it (two passes, FP32 or wider accumulation), then the normalized,
// scaled row through the epilogue. BatchNormalization in training mode and LRN have
// kernels of their own (no fusion).
#pragma once

#include "dlc_device.cuh"

namespace dlc {

template <class X, class Out> struct NormArgs {
  NormShape s;
  typename X::Params x;
  typename Out::Params out;
};

template <bool Short, class I, class PT, class ST, class X, class Out>
__global__ void __launch_bounds__(256) row_norm(const NormArgs<X, Out> a) {
  typedef typename Accum<typename X::Value, false>::type T; // float, or double for f64
  const NormShape &s = a.s;
  const PT *scale = static_cast<const PT *>(s.scale), *bias = static_cast<const PT *>(s.bias);
  const I len = static_cast<I>(s.len);
  auto param = [&](I row, I j) {
    return s.rowMod.mod(row) * static_cast<I>(s.rowMul) + s.param.offset(j);
  };
  auto value = [&](I row, I j, T m, T inv) {
    const I at = param(row, j);
    T v = (static_cast<T>(X::load(a.x, row * len + j)) - m) * inv * ld<T>(scale, at);
    return bias ? v + ld<T>(bias, at) : v;
  };
  auto stats = [&](I row, T m, T inv) {
    if (s.mean)
      st(static_cast<ST *>(s.mean), row, m);
    if (s.invStd)
      st(static_cast<ST *>(s.invStd), row, inv);
  };
  if (Short) {
    const I step = static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x);
    for (I row =
             static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x);
         row < static_cast<I>(s.rows); row += step) {
      T m = T(0);
      for (I j = 0; j < len; ++j)
        m += static_cast<T>(X::load(a.x, row * len + j));
      m /= static_cast<T>(len);
      T v = T(0);
      for (I j = 0; j < len; ++j) {
        const T d = static_cast<T>(X::load(a.x, row * len + j)) - m;
        v += d * d;
      }
      const T inv = T(1) / sqrt_(v / static_cast<T>(len) + static_cast<T>(s.eps));
      for (I j = 0; j < len; ++j)
        Out::store(a.out, row * len + j, value(row, j, m, inv));
      stats(row, m, inv);
    }
    return;
  }
  DLC_SHARED(T, smem, [32]);
  for (I row = static_cast<I>(blockIdx.x); row < static_cast<I>(s.rows);
       row += static_cast<I>(gridDim.x)) {
    T m = T(0);
    for (I j = static_cast<I>(threadIdx.x); j < len; j += static_cast<I>(blockDim.x))
      m += static_cast<T>(X::load(a.x, row * len + j));
    m = blockReduce(m, SumOp(), T(0), smem) / static_cast<T>(len);
    T v = T(0);
    for (I j = static_cast<I>(threadIdx.x); j < len; j += static_cast<I>(blockDim.x)) {
      const T d = static_cast<T>(X::load(a.x, row * len + j)) - m;
      v += d * d;
    }
    v = blockReduce(v, SumOp(), T(0), smem);
    const T inv = T(1) / sqrt_(v / static_cast<T>(len) + static_cast<T>(s.eps));
    for (I j = static_cast<I>(threadIdx.x); j < len; j += static_cast<I>(blockDim.x))
      Out::store(a.out, row * len + j, value(row, j, m, inv));
    if (threadIdx.x == 0)
      stats(row, m, inv);
  }
}

/// BatchNormalization in training mode: one block per channel computes the batch
/// mean and variance, normalizes, and updates the running statistics.
template <class I, class DT>
__global__ void __launch_bounds__(256) batchnorm_train(const ChannelShape s) {
  const DT *x = static_cast<const DT *>(s.x);
  DT *y = static_cast<DT *>(s.y);
  const I C = static_cast<I>(s.C), S = static_cast<I>(s.S), cnt = static_cast<I>(s.N) * S;
  DLC_SHARED(float, smem, [32]);
  for (I c = static_cast<I>(blockIdx.x); c < C; c += static_cast<I>(gridDim.x)) {
    auto at = [&](I j) {
      I n = j;
      const I sp = s.dS.split(n);
      return (n * C + c) * S + sp;
    };
    float m = 0;
    for (I j = static_cast<I>(threadIdx.x); j < cnt; j += static_cast<I>(blockDim.x))
      m += ld<float>(x, at(j));
    m = blockReduce(m, SumOp(), 0.0f, smem) / static_cast<float>(cnt);
    float v = 0;
    for (I j = static_cast<I>(threadIdx.x); j < cnt; j += static_cast<I>(blockDim.x)) {
      const float d = ld<float>(x, at(j)) - m;
      v += d * d;
    }
    v = blockReduce(v, SumOp(), 0.0f, smem) / static_cast<float>(cnt);
    const float inv = 1.0f / sqrtf(v + static_cast<float>(s.eps));
    const float sc = ld<float>(static_cast<const DT *>(s.scale), c),
                bi = ld<float>(static_cast<const DT *>(s.bias), c);
    for (I j = static_cast<I>(threadIdx.x); j < cnt; j += static_cast<I>(blockDim.x))
      st(y, at(j), (ld<float>(x, at(j)) - m) * inv * sc + bi);
    if (threadIdx.x == 0) {
      const float mom = static_cast<float>(s.momentum);
      st(static_cast<DT *>(s.runMean), c,
         ld<float>(static_cast<const DT *>(s.mean), c) * mom + m * (1.0f - mom));
      st(static_cast<DT *>(s.runVar), c,
         ld<float>(static_cast<const DT *>(s.var), c) * mom + v * (1.0f - mom));
    }
  }
}

/// LRN: y = x / (bias + alpha / size * sum of squares over the channel window)^beta.
template <class I, class DT> __global__ void __launch_bounds__(256) lrn(const ChannelShape s) {
  const DT *x = static_cast<const DT *>(s.x);
  DT *y = static_cast<DT *>(s.y);
  const I C = static_cast<I>(s.C), S = static_cast<I>(s.S);
  const I step = static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x);
  for (I i = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x);
       i < static_cast<I>(s.total); i += step) {
    I r = i;
    const I sp = s.dS.split(r), c = s.dC.split(r), nb = r;
    double sq = 0;
    const I lo = c - static_cast<I>(s.lo) < 0 ? 0 : c - static_cast<I>(s.lo);
    const I hi = c + static_cast<I>(s.hi) > C - 1 ? C - 1 : c + static_cast<I>(s.hi);
    for (I k = lo; k <= hi; ++k) {
      const double v = ld<double>(x, (nb * C + k) * S + sp);
      sq += v * v;
    }
    st(y, i, ld<double>(x, i) / pow(s.bias0 + s.alpha / s.size * sq, s.beta));
  }
}

} // namespace dlc
