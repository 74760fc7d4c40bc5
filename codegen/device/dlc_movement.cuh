// Data movement and index ops that fuse nothing: strided copies (materialized
// broadcasts, splits), Pad, the gather/scatter family, OneHot, Trilu,
// ReverseSequence, MaxUnpool, Resize, generators, integer MatMul and the
// negative log-likelihood loss. One thread per output element unless stated.
// Out-of-range indices trap (the launch fails) instead of touching memory outside
// a buffer.
#pragma once

#include "dlc_device.cuh"

namespace dlc {

/// Coordinates c[0..rank) of linear index i over dims (row-major, dims[0] outermost).
template <class I> DLC_HD void coordsOf(const Divmod *dims, i64 rank, I i, I *c) {
  for (i64 d = rank - 1; d > 0; --d)
    c[d] = dims[d].split(i);
  c[0] = i;
}

/// The element offset of coordinates c[0..rank) under strides.
template <class I> DLC_HD I offsetOf(const I *c, const i64 *strides, i64 rank) {
  I at = 0;
  for (i64 d = 0; d < rank; ++d)
    at += c[d] * static_cast<I>(strides[d]);
  return at;
}

/// An index value read from memory, wrapped (negative counts from the end) and checked:
/// out of range, it reports kErrIndexRange and reads index 0 instead.
template <class I, class IT> DLC_HD I checkedIndex(const IT *p, I at, i64 dim, unsigned *err) {
  i64 v = static_cast<i64>(p[at]);
  if (v < 0)
    v += dim;
  if (v < 0 || v >= dim) {
    reportDataError(err, kErrIndexRange);
    v = 0;
  }
  return static_cast<I>(v);
}

/// GatherElements/ScatterElements: the data offset of element i, whose coordinate on
/// the axis is read from the indices.
template <class I, class IT> DLC_HD I elementsOffset(const IndexShape &s, const IT *idx, I i) {
  I c[kMaxRank];
  coordsOf(s.dims, s.rank, i, c);
  c[s.axis] = checkedIndex(idx, i, s.axisDim, s.err);
  return offsetOf(c, s.xStride, s.rank);
}

/// GatherND/ScatterND: the data offset of index tuple t (q coordinates).
template <class I, class IT> DLC_HD I tupleOffset(const IndexShape &s, const IT *idx, I t) {
  I at = 0;
  for (i64 k = 0; k < s.q; ++k)
    at += checkedIndex(idx, t * static_cast<I>(s.q) + static_cast<I>(k), s.xDim[k], s.err) *
          static_cast<I>(s.xStride[k]);
  return at;
}

template <class I, class DT>
__global__ void __launch_bounds__(256) copy_strided(const CopyShape s) {
  const DT *x = static_cast<const DT *>(s.x);
  DT *y = static_cast<DT *>(s.y);
  DLC_GRID_STRIDE(i, static_cast<I>(s.total))
  y[i] = x[static_cast<I>(s.base) + s.map.offset(i)];
}

enum PadMode { kPadConstant, kPadEdge, kPadWrap, kPadReflect };

/// A pad's fill value: the constant operand's, else the attribute's.
template <class DT> struct PadFill {
  static DLC_HD DT get(const PadShape &s) {
    typedef typename Compute<DT>::type T;
    return s.fillPtr
               ? static_cast<const DT *>(s.fillPtr)[0]
               : cvt<DT>(IsFloating<T>::value ? static_cast<T>(s.fill) : static_cast<T>(s.fillInt));
  }
};
/// A run of channels moved whole (the last dim not padded; lowerPad): zero bytes.
template <class W, int V> struct PadFill<VecOf<W, V>> {
  static DLC_HD VecOf<W, V> get(const PadShape &) {
    VecOf<W, V> z;
    for (int k = 0; k < V; ++k)
      z.v[k] = 0;
    return z;
  }
};

/// y = x padded (Mode: constant fill, edge, wrap or reflect), one thread per element of
/// y; DT may be a VecOf run of whole channels, the shapes then counted in runs.
template <int Mode, class I, class DT>
__global__ void __launch_bounds__(256) pad(const PadShape s) {
  const DT *x = static_cast<const DT *>(s.x);
  DT *y = static_cast<DT *>(s.y);
  const DT fill = PadFill<DT>::get(s);
  DLC_GRID_STRIDE(i, static_cast<I>(s.total)) {
    I r = i, src = 0;
    bool outside = false;
    for (i64 d = s.rank - 1; d >= 0; --d) {
      const I c = d > 0 ? s.outDim[d].split(r) : r;
      const I dim = static_cast<I>(s.inDim[d]);
      I v = c - static_cast<I>(s.pad[d]);
      if (Mode == kPadConstant) {
        outside |= v < 0 || v >= dim;
      } else if (Mode == kPadEdge) {
        v = v < 0 ? 0 : (v >= dim ? dim - 1 : v);
      } else if (Mode == kPadWrap) {
        v = ((v % dim) + dim) % dim;
      } else {
        const I period = dim == 1 ? 1 : 2 * (dim - 1);
        v = ((v % period) + period) % period;
        if (v >= dim)
          v = period - v;
      }
      src += v * static_cast<I>(s.inStride[d]);
    }
    y[i] = (outside || !x) ? fill : x[src];
  }
}

enum ScatterReduction { kScatterNone, kScatterAdd, kScatterMul, kScatterMax, kScatterMin };

template <int Red, class T> DLC_HD T scatterCombine(T cur, T u) {
  if (Red == kScatterAdd)
    return cur + u;
  if (Red == kScatterMul)
    return cur * u;
  if (Red == kScatterMax)
    return cur < u ? u : cur;
  if (Red == kScatterMin)
    return u < cur ? u : cur;
  return u;
}

/// How a scatter applies its updates: a store or the reduction on one thread in index
/// order (Plain), atomic adds in parallel (Atomic: in no fixed order), or the
/// deterministic add (Fixed: --deterministic).
enum ScatterMode { kScatterPlain, kScatterAtomic, kScatterFixed };

/// The deterministic scatter-add's scale: 2^e with the largest finite |update| times
/// the update count below 2^62, so that every sum of scaled updates fits a 64-bit
/// integer (integer adds give the same bits in any order).
template <class I> __device__ __forceinline__ int scatterFixedExponent(const IndexShape &s) {
  const double m = __longlong_as_double(static_cast<long long>(*s.amax));
  if (!(m > 0.0))
    return 0;
  int em = 0, et = 0;
  frexp(m, &em);                            // m < 2^em
  frexp(static_cast<double>(s.total), &et); // total < 2^et
  return 62 - em - et;
}

/// Applies update u to y[at]: an atomic add (Atomic: scatter-add in parallel; FP32 and
/// FP64 add in their own type, FP16 and BF16 round each sum to theirs, as the one-thread
/// loop's stores do), the fixed-point add of u 2^e (Fixed; non-finite updates add into
/// s.special, where only infinities and NaN meet, in any order alike), else the
/// reduction Red on a read and a store.
template <int Red, int Mode, class DT, class I, class T>
__device__ __forceinline__ void scatterUpdate(const IndexShape &s, DT *y, I at, T u, int e) {
  if constexpr (Mode == kScatterAtomic) {
    atomicAdd(y + at, cvt<DT>(u));
  } else if constexpr (Mode == kScatterFixed) {
    const double v = static_cast<double>(u);
    if (!isnan_(v) && !isinf_(v))
      atomicAdd(reinterpret_cast<unsigned long long *>(s.fixedSum + at),
                static_cast<unsigned long long>(llrint(ldexp(v, e))));
    else
      atomicAdd(s.special + at, static_cast<float>(v));
  } else {
    st(y, at, scatterCombine<Red>(ld<T>(y, at), u));
  }
}

/// The element loop of a scatter: grid-stride in parallel, or (with a reduction that
/// is not an atomic add) one thread in index order, which is what the reference
/// computes.
template <bool Serial, class I> struct ScatterLoop {
  I first, step, end;
  DLC_HD explicit ScatterLoop(I total) {
    const bool mine = !Serial || (blockIdx.x == 0 && threadIdx.x == 0);
    first = Serial ? 0
                   : static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) +
                         static_cast<I>(threadIdx.x);
    step = Serial ? 1 : static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x);
    end = mine ? total : 0;
  }
};

template <class I, class DT, class IT>
__global__ void __launch_bounds__(256) gather_elements(const IndexShape s) {
  const DT *x = static_cast<const DT *>(s.x);
  const IT *idx = static_cast<const IT *>(s.idx);
  DLC_GRID_STRIDE(i, static_cast<I>(s.total)) {
    static_cast<DT *>(s.y)[i] = x[elementsOffset(s, idx, i)];
  }
}

/// ScatterElements (y holds a copy of x already). Without a reduction the writes run
/// in parallel (duplicate indices are undefined in ONNX); an add with Atomic (floating
/// types: MaxPool's and Gather's gradients) runs in parallel with atomic adds, whose
/// order is not fixed; any other reduction runs on a single thread in index order, as
/// the reference does.
template <int Red, int Mode, class I, class DT, class IT>
__global__ void __launch_bounds__(256) scatter_elements(const IndexShape s) {
  typedef typename Compute<DT>::type T;
  const IT *idx = static_cast<const IT *>(s.idx);
  const DT *upd = static_cast<const DT *>(s.upd);
  DT *y = static_cast<DT *>(s.y);
  const int e = Mode == kScatterFixed ? scatterFixedExponent<I>(s) : 0;
  ScatterLoop<Red != kScatterNone && Mode == kScatterPlain, I> loop(static_cast<I>(s.total));
  for (I i = loop.first; i < loop.end; i += loop.step) {
    scatterUpdate<Red, Mode>(s, y, elementsOffset(s, idx, i), ld<T>(upd, i), e);
  }
}

/// GatherND: output i = (tuple t, element j of the slice); batch dims offset the data.
template <class I, class DT, class IT>
__global__ void __launch_bounds__(256) gather_nd(const IndexShape s) {
  const DT *x = static_cast<const DT *>(s.x);
  const IT *idx = static_cast<const IT *>(s.idx);
  DLC_GRID_STRIDE(i, static_cast<I>(s.total)) {
    I t = i;
    const I j = s.dSlice.split(t);
    const I base = s.dPerBatch.div(t) * static_cast<I>(s.batchStride) + tupleOffset(s, idx, t);
    static_cast<DT *>(s.y)[i] = x[base + j];
  }
}

/// ScatterND, as scatter_elements (Mode: how an add runs in parallel).
template <int Red, int Mode, class I, class DT, class IT>
__global__ void __launch_bounds__(256) scatter_nd(const IndexShape s) {
  typedef typename Compute<DT>::type T;
  const IT *idx = static_cast<const IT *>(s.idx);
  const DT *upd = static_cast<const DT *>(s.upd);
  DT *y = static_cast<DT *>(s.y);
  const int e = Mode == kScatterFixed ? scatterFixedExponent<I>(s) : 0;
  ScatterLoop<Red != kScatterNone && Mode == kScatterPlain, I> loop(static_cast<I>(s.total));
  for (I i = loop.first; i < loop.end; i += loop.step) {
    I t = i;
    const I j = s.dSlice.split(t);
    scatterUpdate<Red, Mode>(s, y, j + tupleOffset(s, idx, t), ld<T>(upd, i), e);
  }
}

/// The deterministic scatter-add's first pass: the largest finite |update| (an atomic
/// max of non-negative FP64 bits, which order as the values do).
template <class I, class DT>
__global__ void __launch_bounds__(256) scatter_fixed_max(const IndexShape s) {
  typedef typename Compute<DT>::type T;
  const DT *upd = static_cast<const DT *>(s.upd);
  double m = 0.0;
  DLC_GRID_STRIDE(i, static_cast<I>(s.total)) {
    const double v = fabs(static_cast<double>(ld<T>(upd, i)));
    if (!isnan_(v) && !isinf_(v))
      m = fmax(m, v);
  }
  if (m > 0.0)
    atomicMax(s.amax, static_cast<unsigned long long>(__double_as_longlong(m)));
}

/// Its last pass, over the output's s.depth elements: y += the fixed-point sum 2^-e
/// and the non-finite sum (any NaN as the canonical one), added in FP64 and rounded
/// to the output's compute type (FP32 or FP64; FP16 and BF16 round once more).
template <class I, class DT>
__global__ void __launch_bounds__(256) scatter_fixed_finish(const IndexShape s) {
  typedef typename Compute<DT>::type T;
  DT *y = static_cast<DT *>(s.y);
  const int e = scatterFixedExponent<I>(s);
  DLC_GRID_STRIDE(i, static_cast<I>(s.depth)) {
    const long long q = s.fixedSum[i];
    const float sp = s.special[i];
    if (q == 0 && sp == 0.0f)
      continue;
    double v = static_cast<double>(ld<T>(y, i)) + ldexp(static_cast<double>(q), -e) +
               static_cast<double>(sp);
    if (isnan_(v))
      v = __longlong_as_double(0x7ff8000000000000ll);
    st(y, i, static_cast<T>(v));
  }
}

/// OneHot: y = values[index == coordinate along axis]; xStride strides the indices.
template <class I, class DT, class IT>
__global__ void __launch_bounds__(256) onehot(const IndexShape s) {
  const IT *idx = static_cast<const IT *>(s.idx);
  const DT *vals = static_cast<const DT *>(s.x);
  DLC_GRID_STRIDE(i, static_cast<I>(s.total)) {
    I c[kMaxRank];
    coordsOf(s.dims, s.rank, i, c);
    I at = 0;
    for (i64 d = 0, k = 0; d < s.rank; ++d)
      if (d != s.axis)
        at += c[d] * static_cast<I>(s.xStride[k++]);
    i64 v = static_cast<i64>(ld<double>(idx, at));
    if (v < 0)
      v += s.depth;
    static_cast<DT *>(s.y)[i] = vals[v == static_cast<i64>(c[s.axis]) ? 1 : 0];
  }
}

/// ReverseSequence: axis = time axis, q = batch axis; `idx` holds the lengths.
template <class I, class DT, class IT>
__global__ void __launch_bounds__(256) reverse_sequence(const IndexShape s) {
  const DT *x = static_cast<const DT *>(s.x);
  const IT *lens = static_cast<const IT *>(s.idx);
  DLC_GRID_STRIDE(i, static_cast<I>(s.total)) {
    I c[kMaxRank];
    coordsOf(s.dims, s.rank, i, c);
    i64 len = static_cast<i64>(lens[c[s.q]]);
    len = len < 0 ? 0 : (len > s.axisDim ? s.axisDim : len);
    const I ct = c[s.axis];
    c[s.axis] = ct < static_cast<I>(len) ? static_cast<I>(len) - 1 - ct : ct;
    const I src = offsetOf(c, s.xStride, s.rank);
    static_cast<DT *>(s.y)[i] = x[src];
  }
}

/// MaxUnpool (y zeroed first): indices address the default unpooled shape (dims);
/// xDim/xStride are the output's dims and strides.
template <class I, class DT, class IT>
__global__ void __launch_bounds__(256) max_unpool(const IndexShape s) {
  const DT *x = static_cast<const DT *>(s.x);
  const IT *idx = static_cast<const IT *>(s.idx);
  DLC_GRID_STRIDE(i, static_cast<I>(s.total)) {
    i64 t = static_cast<i64>(idx[i]);
    if (t < 0 || t >= s.axisDim) {
      reportDataError(s.err, kErrIndexRange);
      continue;
    }
    I c[kMaxRank];
    coordsOf(s.dims, s.rank, static_cast<I>(t), c);
    I at = 0;
    bool inside = true;
    for (i64 d = 0; d < s.rank; ++d) {
      inside &= c[d] < static_cast<I>(s.xDim[d]);
      at += c[d] * static_cast<I>(s.xStride[d]);
    }
    if (inside)
      static_cast<DT *>(s.y)[at] = x[i];
  }
}

/// Resize: the separable sum over each output coordinate's taps (tables built at
/// compile time by the same function as the reference).
template <class I, class DT> __global__ void __launch_bounds__(256) resize(const ResizeShape s) {
  const DT *x = static_cast<const DT *>(s.x);
  DLC_GRID_STRIDE(i, static_cast<I>(s.total)) {
    I c[kMaxRank];
    coordsOf(s.outDim, s.rank, i, c);
    int n[kMaxRank];
    bool outside = false;
    for (i64 d = 0; d < s.rank; ++d) {
      n[d] = static_cast<const int *>(s.cnt[d])[c[d]];
      outside |= n[d] == 0;
    }
    float acc = 0;
    if (!outside) {
      int t[kMaxRank] = {0};
      for (;;) { // every combination of taps, the last dim fastest
        float w = 1;
        I off = 0;
        for (i64 d = 0; d < s.rank; ++d) {
          const I at = c[d] * static_cast<I>(s.maxTaps) + t[d];
          w *= static_cast<const float *>(s.w[d])[at];
          off +=
              static_cast<I>(static_cast<const int *>(s.idx[d])[at]) * static_cast<I>(s.xStride[d]);
        }
        acc += w * ld<float>(x, off);
        i64 d = s.rank - 1;
        while (d >= 0 && ++t[d] == n[d])
          t[d--] = 0;
        if (d < 0)
          break;
      }
    } else {
      acc = static_cast<float>(s.extrapolation);
    }
    st(static_cast<DT *>(s.y), i, IsFloating<typename Compute<DT>::type>::value ? acc : rintf(acc));
  }
}

/// ConstantOfShape (value f0 / n0) and Range (start f0 / n0, delta f1 / n1).
template <bool IsRange, class I, class DT>
__global__ void __launch_bounds__(256) fill(const MiscShape s) {
  typedef typename Compute<DT>::type T;
  DT *y = static_cast<DT *>(s.y);
  DLC_GRID_STRIDE(i, static_cast<I>(s.total)) {
    if (IsFloating<T>::value)
      st(y, i, IsRange ? s.f0 + static_cast<double>(i) * s.f1 : s.f0);
    else
      st(y, i, static_cast<T>(IsRange ? s.n0 + static_cast<i64>(i) * s.n1 : s.n0));
  }
}

/// Trilu: keep element (r, c) where c - r >= k (upper) or <= k (lower).
template <bool Upper, class I, class DT>
__global__ void __launch_bounds__(256) trilu(const MiscShape s) {
  const DT *x = static_cast<const DT *>(s.a);
  DLC_GRID_STRIDE(i, static_cast<I>(s.total)) {
    I r = i;
    const I c = s.d0.split(r), row = s.d1.mod(r);
    const i64 diff = static_cast<i64>(c) - static_cast<i64>(row);
    static_cast<DT *>(s.y)[i] = (Upper ? diff >= s.n0 : diff <= s.n0) ? x[i] : cvt<DT>(0.0f);
  }
}

/// Integer matrix product [batch, m, k] x [batch, k, n]: one thread per output.
template <class I, class DT, class AT = DT>
__global__ void __launch_bounds__(256) matmul_int(const MiscShape s) {
  typedef typename Compute<DT>::type T; // (int8 operands AT: int32 sums DT)
  const AT *a = static_cast<const AT *>(s.a), *b = static_cast<const AT *>(s.b);
  const I m = static_cast<I>(s.n0), k = static_cast<I>(s.n1), n = static_cast<I>(s.n2);
  DLC_GRID_STRIDE(i, static_cast<I>(s.total)) {
    I r = i;
    const I j = s.d0.split(r), row = s.d1.split(r), bt = r;
    T acc = T(0);
    for (I p = 0; p < k; ++p)
      acc += ld<T>(a, bt * static_cast<I>(s.n3) + row * k + p) *
             ld<T>(b, bt * static_cast<I>(s.n4) + p * n + j);
    st(static_cast<DT *>(s.y), i, acc);
    (void)m;
  }
}

/// NegativeLogLikelihoodLoss: x [N, C, D...], target [N, D...], optional weight [C].
/// n0 = C, n1 = D, n2 = ignore_index; d0 divides by D. Reduction none: one thread per
/// element; sum/mean: one block, accumulating loss and weight in double.
template <int Reduction, class I, class DT, class TT>
__global__ void __launch_bounds__(256) nll_loss(const MiscShape s) {
  const DT *x = static_cast<const DT *>(s.a), *w = static_cast<const DT *>(s.c);
  const TT *target = static_cast<const TT *>(s.b);
  auto term = [&](I e, double &wt) {
    const i64 tg = static_cast<i64>(target[e]);
    wt = 0;
    if (tg == s.n2)
      return 0.0;
    if (tg < 0 || tg >= s.n0) {
      reportDataError(s.err, kErrIndexRange);
      return 0.0;
    }
    I bb = e;
    const I dd = s.d0.split(bb);
    wt = w ? ld<double>(w, static_cast<I>(tg)) : 1.0;
    return -ld<double>(x, (bb * static_cast<I>(s.n0) + static_cast<I>(tg)) * static_cast<I>(s.n1) +
                              dd) *
           wt;
  };
  if (Reduction == 0) {
    DLC_GRID_STRIDE(e, static_cast<I>(s.total)) {
      double wt;
      st(static_cast<DT *>(s.y), e, term(e, wt));
    }
    return;
  }
  DLC_SHARED(double, smem, [32]);
  double total = 0, weights = 0;
  for (I e = static_cast<I>(threadIdx.x); e < static_cast<I>(s.total);
       e += static_cast<I>(blockDim.x)) {
    double wt;
    total += term(e, wt);
    weights += wt;
  }
  total = blockReduce(total, SumOp(), 0.0, smem);
  weights = blockReduce(weights, SumOp(), 0.0, smem);
  if (threadIdx.x == 0)
    st(static_cast<DT *>(s.y), 0, Reduction == 1 ? total : total / weights);
}

} // namespace dlc
