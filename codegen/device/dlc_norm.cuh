// Normalizations over rows: LayerNormalization, InstanceNormalization and
// GroupNormalization (one block per row, or one thread per short row): the mean, the
// variance around it (two passes, FP32 or wider accumulation), then the normalized,
// scaled row through the epilogue. Rms (RMSNormalization): no mean, the mean of
// squares in one pass, no bias. row_norm_rows: rows longer than 64 read once into
// registers, 16-byte loads and stores. BatchNormalization in training mode and LRN have
// kernels of their own (no fusion).
#pragma once

#include "dlc_device.cuh"

namespace dlc {

template <class X, class Out> struct NormArgs {
  NormShape s;
  typename X::Params x;
  typename Out::Params out;
};

template <bool Short, bool Rms, class I, class PT, class ST, class X, class Out>
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
      if (!Rms) {
        for (I j = 0; j < len; ++j)
          m += static_cast<T>(X::load(a.x, row * len + j));
        m /= static_cast<T>(len);
      }
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
    if (!Rms) {
      for (I j = static_cast<I>(threadIdx.x); j < len; j += static_cast<I>(blockDim.x))
        m += static_cast<T>(X::load(a.x, row * len + j));
      m = blockReduce(m, SumOp(), T(0), smem) / static_cast<T>(len);
    }
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

/// LayerNormalization of contiguous rows longer than 64 whose scale and bias cover the
/// row (no broadcasting; read V at a time), and GroupNormalization/InstanceNormalization
/// rows (PerChannel: each vector within one channel, whose scale and bias it reads
/// once): a block per row, x read as it is (no fused prologue) V
/// elements at a time (16 bytes where the row length and addresses allow), the first R
/// vectors of each thread kept in registers: the mean, then the variance around it from
/// the registers, so rows up to R * blockDim * V elements are read once (longer ones
/// re-read the rest). RawOut: written V at a time as it is (no fused epilogue), else
/// through Out.
template <int V, int R, bool RawOut, bool PerChannel, bool Rms, class I, class MT, class PT,
          class ST, class X, class Out>
__global__ void __launch_bounds__(256) row_norm_rows(const NormArgs<X, Out> a) {
  typedef VecOf<PT, V> PVec;
  const NormShape &s = a.s;
  const PT *scale = static_cast<const PT *>(s.scale), *bias = static_cast<const PT *>(s.bias);
  const I len = static_cast<I>(s.len);
  DLC_SHARED(float, smem, [32]);
  for (I row = static_cast<I>(blockIdx.x); row < static_cast<I>(s.rows);
       row += static_cast<I>(gridDim.x)) {
    CachedRow<V, R, I, MT> x(static_cast<const MT *>(s.x) + row * len, len);
    // The sum (Rms: of squares) on the first walk; then the variance around the mean.
    float sum = 0.f;
    x.fill([&](const float(&v)[V]) {
#pragma unroll
      for (int q = 0; q < V; ++q)
        sum += Rms ? v[q] * v[q] : v[q];
    });
    sum = blockReduce(sum, SumOp(), 0.f, smem);
    const float m = Rms ? 0.f : sum / static_cast<float>(len);
    float var = sum;
    if (!Rms) {
      var = 0.f;
      x.each([&](I, const float(&v)[V]) {
#pragma unroll
        for (int q = 0; q < V; ++q)
          var += (v[q] - m) * (v[q] - m);
      });
      var = blockReduce(var, SumOp(), 0.f, smem);
    }
    const float inv = 1.f / sqrt_(var / static_cast<float>(len) + static_cast<float>(s.eps));
    x.each([&](I j, const float(&v)[V]) {
      float sc[V], bi[V];
      if (PerChannel) { // one channel's parameters for the whole vector
        const I at = s.rowMod.mod(row) * static_cast<I>(s.rowMul) + s.param.offset(j * V);
        const float c = ld<float>(scale, at), d = bias ? ld<float>(bias, at) : 0.f;
#pragma unroll
        for (int q = 0; q < V; ++q) {
          sc[q] = c;
          bi[q] = d;
        }
      } else {
        const PVec pv = reinterpret_cast<const PVec *>(scale)[j];
        PVec bv;
        if (bias)
          bv = reinterpret_cast<const PVec *>(bias)[j];
#pragma unroll
        for (int q = 0; q < V; ++q) {
          sc[q] = Cvt<float, PT>::run(pv.v[q]);
          bi[q] = bias ? Cvt<float, PT>::run(bv.v[q]) : 0.f;
        }
      }
      float o[V];
#pragma unroll
      for (int q = 0; q < V; ++q)
        o[q] = (v[q] - m) * inv * sc[q] + bi[q];
      storeRow<RawOut, MT, Out>(s.y, a.out, row * len + j * V, o);
    });
    if (threadIdx.x == 0) {
      if (s.mean)
        st(static_cast<ST *>(s.mean), row, m);
      if (s.invStd)
        st(static_cast<ST *>(s.invStd), row, inv);
    }
  }
}

/// LayerNormalization's input gradient along contiguous rows (LayerNormGrad), a block
/// per row: with xhat = (x - mean) rstd and gs = dy scale,
/// dx = rstd (gs - mean(gs) - xhat mean(gs xhat)); the row's mean and rstd are written
/// too (the scale's gradient sums dy xhat over the rows). x, dy and the scale are read
/// V at a time (16 bytes where the row length and addresses allow), x and dy once
/// (CachedRows); the statistics are FP32 block reductions: the mean, the variance
/// around it, then the two sums.
template <int V, int R, class I, class MT>
__global__ void __launch_bounds__(256) layer_norm_grad(const NormShape s) {
  typedef VecOf<MT, V> Vec;
  const I len = static_cast<I>(s.len);
  const float count = static_cast<float>(s.len);
  const Vec *scale = static_cast<const Vec *>(s.scale);
  DLC_SHARED(float, smem, [32]);
  for (I row = static_cast<I>(blockIdx.x); row < static_cast<I>(s.rows);
       row += static_cast<I>(gridDim.x)) {
    const MT *rows[2] = {static_cast<const MT *>(s.x) + row * len,
                         static_cast<const MT *>(s.dy) + row * len};
    CachedRows<2, V, R, I, MT> xg(rows, len); // [0]: x, [1]: dy
    float sum = 0.f;
    xg.fill([&](I, const float(&v)[2][V]) {
#pragma unroll
      for (int q = 0; q < V; ++q)
        sum += v[0][q];
    });
    const float mean = blockReduce(sum, SumOp(), 0.f, smem) / count;
    float var = 0.f;
    xg.each([&](I, const float(&v)[2][V]) {
#pragma unroll
      for (int q = 0; q < V; ++q)
        var += (v[0][q] - mean) * (v[0][q] - mean);
    });
    const float rstd =
        1.f / sqrt_(blockReduce(var, SumOp(), 0.f, smem) / count + static_cast<float>(s.eps));
    auto scaled = [&](I j, const float(&g)[V], float(&gs)[V]) {
      const Vec p = scale[j];
#pragma unroll
      for (int q = 0; q < V; ++q)
        gs[q] = g[q] * Cvt<float, MT>::run(p.v[q]);
    };
    float sg = 0.f, sgx = 0.f;
    xg.each([&](I j, const float(&v)[2][V]) {
      float gs[V];
      scaled(j, v[1], gs);
#pragma unroll
      for (int q = 0; q < V; ++q) {
        sg += gs[q];
        sgx += gs[q] * ((v[0][q] - mean) * rstd);
      }
    });
    const float mg = blockReduce(sg, SumOp(), 0.f, smem) / count;
    const float mgx = blockReduce(sgx, SumOp(), 0.f, smem) / count;
    Vec *dx = reinterpret_cast<Vec *>(static_cast<MT *>(s.y) + row * len);
    xg.each([&](I j, const float(&v)[2][V]) {
      float gs[V];
      scaled(j, v[1], gs);
      Vec w;
#pragma unroll
      for (int q = 0; q < V; ++q)
        w.v[q] = Cvt<MT, float>::run(rstd * (gs[q] - mg - (v[0][q] - mean) * rstd * mgx));
      dx[j] = w;
    });
    if (threadIdx.x == 0) {
      static_cast<MT *>(s.mean)[row] = Cvt<MT, float>::run(mean);
      static_cast<MT *>(s.invStd)[row] = Cvt<MT, float>::run(rstd);
    }
  }
}

} // namespace dlc
