// Reductions, the softmax family, arg-min/max, top-k and cumulative sums.
//
// reduce: output o combines x at kept.offset(o) + red.offset(r) for r < len (Contig:
// o * len + r). Short rows (<= 64) take one thread per output; long ones a block per
// output with a warp-shuffle + shared-memory reduction. Accumulation is in the compute
// type (float for f16/bf16). reduce_cols: the middle axis of [outer, len, inner] with a
// contiguous inner axis (channels-last pooling), 32 columns per block, coalesced.
// Long reductions over few outputs split each output's elements over several blocks
// (reduce_split, reduce_cols<Split>) and reduce_merge combines the partials in order.
// softmax: rows of an [outer, len, inner] view; softmax_rows: contiguous long rows in
// one pass, vector loads and stores; softmax_short_rows: contiguous rows of at most 32
// vectors, a lane group a row. SoftmaxGrad likewise: softmax_grad, softmax_grad_rows,
// softmax_grad_short_rows.
#pragma once

#include "dlc_device.cuh"

namespace dlc {

enum ReduceKind { kReduceSum, kReduceMean, kReduceMax, kReduceMin, kReduceProd };

template <int Kind> struct ReduceOp;
template <> struct ReduceOp<kReduceSum> : SumOp {
  template <class T> static DLC_HD T identity() { return T(0); }
};
template <> struct ReduceOp<kReduceMean> : ReduceOp<kReduceSum> {};
template <> struct ReduceOp<kReduceProd> : ProdOp {
  template <class T> static DLC_HD T identity() { return T(1); }
};
template <> struct ReduceOp<kReduceMax> : MaxOp {
  template <class T> static DLC_HD T identity() { return Limits<T>::lowest(); }
};
template <> struct ReduceOp<kReduceMin> : MinOp {
  template <class T> static DLC_HD T identity() { return Limits<T>::highest(); }
};

template <class X, class Out> struct ReduceArgs {
  ReduceShape s;
  typename X::Params x;
  typename Out::Params out;
};

template <int Kind, bool Short, bool Contig, class I, class X, class Out>
__global__ void __launch_bounds__(256) reduce(const ReduceArgs<X, Out> a) {
  typedef typename X::Value T;
  typedef ReduceOp<Kind> Op;
  const ReduceShape &s = a.s;
  const I len = static_cast<I>(s.len);
  auto finish = [&](T acc) { return Kind == kReduceMean && len ? acc / static_cast<T>(len) : acc; };
  if (Short) {
    const I step = static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x);
    for (I o =
             static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x);
         o < static_cast<I>(s.outCount); o += step) {
      const I base = Contig ? o * len : s.kept.offset(o);
      T acc = Op::template identity<T>();
      for (I r = 0; r < len; ++r)
        acc = Op()(acc, X::load(a.x, base + (Contig ? r : s.red.offset(r))));
      Out::store(a.out, o, finish(acc));
    }
    return;
  }
  DLC_SHARED(T, smem, [32]);
  for (I o = static_cast<I>(blockIdx.x); o < static_cast<I>(s.outCount);
       o += static_cast<I>(gridDim.x)) {
    const I base = Contig ? o * len : s.kept.offset(o);
    T acc = Op::template identity<T>();
    for (I r = static_cast<I>(threadIdx.x); r < len; r += static_cast<I>(blockDim.x))
      acc = Op()(acc, X::load(a.x, base + (Contig ? r : s.red.offset(r))));
    acc = blockReduce(acc, Op(), Op::template identity<T>(), smem);
    if (threadIdx.x == 0)
      Out::store(a.out, o, finish(acc));
  }
}

/// Stage 1 of a split reduction (few outputs, long rows: a block per output would leave
/// most SMs idle): block b = o * splits + j combines the j-th chunk of output o's
/// elements into partial[b] in the compute type.
template <int Kind, bool Contig, class I, class X, class Out>
__global__ void __launch_bounds__(256) reduce_split(const ReduceArgs<X, Out> a) {
  typedef typename X::Value T;
  typedef ReduceOp<Kind> Op;
  const ReduceShape &s = a.s;
  const I len = static_cast<I>(s.len), splits = static_cast<I>(s.splits),
          chunk = static_cast<I>(s.chunk);
  T *part = static_cast<T *>(s.partial);
  DLC_SHARED(T, smem, [32]);
  for (I b = static_cast<I>(blockIdx.x); b < static_cast<I>(s.outCount) * splits;
       b += static_cast<I>(gridDim.x)) {
    const I o = b / splits, first = (b - o * splits) * chunk;
    const I base = Contig ? o * len : s.kept.offset(o),
            end = first + chunk < len ? first + chunk : len;
    T acc = Op::template identity<T>();
    for (I r = first + static_cast<I>(threadIdx.x); r < end; r += static_cast<I>(blockDim.x))
      acc = Op()(acc, X::load(a.x, base + (Contig ? r : s.red.offset(r))));
    acc = blockReduce(acc, Op(), Op::template identity<T>(), smem);
    if (threadIdx.x == 0)
      part[b] = acc;
  }
}

/// Stage 2 of a split reduction: a block per output, thread t combining partials t,
/// t + blockDim, ... and the threads meeting in blockReduce's fixed tree (the result
/// does not depend on the blocks' timing), stored through Out.
template <int Kind, class I, class X, class Out>
__global__ void __launch_bounds__(256) reduce_merge(const ReduceArgs<X, Out> a) {
  typedef typename X::Value T;
  typedef ReduceOp<Kind> Op;
  const ReduceShape &s = a.s;
  const I splits = static_cast<I>(s.splits);
  const T *part = static_cast<const T *>(s.partial);
  DLC_SHARED(T, smem, [32]);
  for (I o = static_cast<I>(blockIdx.x); o < static_cast<I>(s.outCount);
       o += static_cast<I>(gridDim.x)) {
    T acc = Op::template identity<T>();
    for (I j = static_cast<I>(threadIdx.x); j < splits; j += static_cast<I>(blockDim.x))
      acc = Op()(acc, part[o * splits + j]);
    acc = blockReduce(acc, Op(), Op::template identity<T>(), smem);
    if (Kind == kReduceMean && s.len)
      acc = acc / static_cast<T>(s.len);
    if (threadIdx.x == 0)
      Out::store(a.out, o, acc);
  }
}

/// A reduction over the middle axis of [outer, len, inner] with inner contiguous (NHWC
/// global pooling; ReduceMean over H and W; BatchNorm's statistics): output (p, c) at
/// p * inner + c. A block takes 32 V adjacent columns and 8 slices of the rows: each
/// warp reads 32 V consecutive elements per row (V > 1: a run of V columns per thread
/// through X::loadRun, one index split and vector loads per run), walking the rows by
/// adding a stride (no index division per element); the slices' partial results meet
/// in shared memory. Split: block t * splits + j takes the j-th chunk of the rows and
/// writes its partials for reduce_merge.
template <int Kind, bool Split, int V, class I, class X, class Out>
__global__ void __launch_bounds__(256) reduce_cols(const ReduceArgs<X, Out> a) {
  typedef typename X::Value T;
  typedef ReduceOp<Kind> Op;
  constexpr int kSlices = 8, kCols = 32 * V;
  const ReduceShape &s = a.s;
  const I len = static_cast<I>(s.len), inner = static_cast<I>(s.inner),
          outer = static_cast<I>(s.outCount) / inner, tilesPerRow = (inner + kCols - 1) / kCols;
  const I splits = Split ? static_cast<I>(s.splits) : 1,
          chunk = Split ? static_cast<I>(s.chunk) : len;
  const I lane = static_cast<I>(threadIdx.x) & 31, slice = static_cast<I>(threadIdx.x) >> 5;
  DLC_SHARED(T, part, [kSlices][kCols]);
  for (I b = static_cast<I>(blockIdx.x); b < outer * tilesPerRow * splits;
       b += static_cast<I>(gridDim.x)) {
    const I t = Split ? b / splits : b, first = Split ? (b - t * splits) * chunk : 0;
    const I p = t / tilesPerRow, c = (t - p * tilesPerRow) * kCols + lane * V;
    const I end = Split && first + chunk < len ? first + chunk : len;
    T acc[V];
#pragma unroll
    for (int k = 0; k < V; ++k)
      acc[k] = Op::template identity<T>();
    if (c < inner) { // (inner is a multiple of V: a run is whole)
      const I step = kSlices * inner;
      I at = (p * len + first + slice) * inner + c;
#pragma unroll 4
      for (I r = first + slice; r < end; r += kSlices, at += step) {
        if constexpr (V == 1) {
          acc[0] = Op()(acc[0], X::load(a.x, at));
        } else {
          T v[V];
          X::loadRun(a.x, at, v);
#pragma unroll
          for (int k = 0; k < V; ++k)
            acc[k] = Op()(acc[k], v[k]);
        }
      }
    }
#pragma unroll
    for (int k = 0; k < V; ++k)
      part[slice][lane * V + k] = acc[k];
    __syncthreads();
    if (slice == 0 && c < inner) {
#pragma unroll
      for (int k = 0; k < V; ++k) {
#pragma unroll
        for (int j = 1; j < kSlices; ++j)
          acc[k] = Op()(acc[k], part[j][lane * V + k]);
        if (Split) {
          static_cast<T *>(s.partial)[(p * inner + c + k) * splits + (b - t * splits)] = acc[k];
        } else {
          if (Kind == kReduceMean && len)
            acc[k] = acc[k] / static_cast<T>(len);
          Out::store(a.out, p * inner + c + k, acc[k]);
        }
      }
    }
    __syncthreads();
  }
}

template <class X, class Out> struct AxisArgs {
  AxisShape s;
  typename X::Params x;
  typename Out::Params out;
};

/// Row addressing of an AxisShape: row r's element j is at base(r) + j * inner.
template <class I> struct AxisRows {
  I len, inner;
  const AxisShape &s;
  DLC_HD explicit AxisRows(const AxisShape &shape)
      : len(static_cast<I>(shape.len)), inner(static_cast<I>(shape.inner)), s(shape) {}
  DLC_HD I rows() const { return static_cast<I>(s.rows); }
  /// The first element of row r, [outer, len, inner] with r = outer * inner + in.
  DLC_HD I base(I r) const {
    const I in = s.dInner.split(r);
    return r * len * inner + in;
  }
};

enum SoftmaxKind { kSoftmax, kLogSoftmax, kHardmax };

/// Softmax and LogSoftmax of contiguous rows longer than 64 (inner = 1), a block per
/// row, x read as it is (no fused prologue) V elements at a time (16 bytes where the
/// row length and addresses allow). One pass keeps a running max and a sum rescaled to
/// it (online softmax); the first R vectors of each thread stay in registers, so rows up
/// to R * blockDim * V elements are read once and written once (longer ones re-read the
/// rest). RawOut: written V at a time as it is (no fused epilogue), else through Out.
template <int Kind, int V, int R, bool RawOut, class I, class MT, class X, class Out>
__global__ void __launch_bounds__(256) softmax_rows(const AxisArgs<X, Out> a) {
  const AxisShape &s = a.s;
  const I len = static_cast<I>(s.len);
  DLC_SHARED(float, smem, [32]);
  // exp(a - b) with exp(-inf - -inf) = 0: a thread whose values so far are all -inf
  // (a masked part of the row) has added nothing yet. (+inf still gives NaN, and a row
  // of -inf NaN, as the three-pass kernel and PyTorch do.)
  auto expDiff = [](float a, float b) {
    return a == b && isinf_(a) && a < 0.f ? 0.f : exp_(a - b);
  };
  const float minusInf = Limits<float>::lowest();
  for (I row = static_cast<I>(blockIdx.x); row < static_cast<I>(s.rows);
       row += static_cast<I>(gridDim.x)) {
    CachedRow<V, R, I, MT> x(static_cast<const MT *>(s.x) + row * len, len);
    float m = Limits<float>::lowest(), sum = 0.f;
    x.fill([&](const float(&v)[V]) { // the running max and the sum rescaled to it
      float nm = m;
#pragma unroll
      for (int q = 0; q < V; ++q)
        nm = maxNan(nm, v[q]);
      if (nm == minusInf) // every value so far -inf: nothing to add (v - nm would be NaN)
        return;
      float add = 0.f;
#pragma unroll
      for (int q = 0; q < V; ++q)
        add += exp_(v[q] - nm);
      sum = sum * exp_(m - nm) + add; // (exp(-inf) = 0 while m is still -inf)
      m = nm;
    });
    const float M = blockReduce(m, MaxOp(), Limits<float>::lowest(), smem);
    sum *= expDiff(m, M);
    const float S = blockReduce(sum, SumOp(), 0.f, smem), ls = log_(S);
    x.each([&](I j, const float(&v)[V]) {
      float o[V];
#pragma unroll
      for (int q = 0; q < V; ++q)
        o[q] = Kind == kLogSoftmax ? v[q] - M - ls : exp_(v[q] - M) / S;
      storeRow<RawOut, MT, Out>(s.y, a.out, row * len + j * V, o);
    });
  }
}

/// Reduces v over the G lanes (a power of two, aligned) of a warp's lane group.
template <int G, class T, class Op> __device__ __forceinline__ T groupReduce(T v, Op op) {
#pragma unroll
  for (int o = G / 2; o > 0; o >>= 1)
    v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/// A row of at most G vectors of V values (G a power of two up to 32): G lanes a row,
/// 32 / G rows a warp, each lane one vector (lanes past the row's len / V vectors hold
/// none). The short-row kernels read it once, V at a time, and reduce it by shuffles
/// within the lane group.
template <int V, int G, class I, class MT> struct ShortRow {
  I row, e; // the lane's row, and its vector's first element
  bool have;
  __device__ __forceinline__ ShortRow(I row0, const AxisShape &s) {
    const int sub = static_cast<int>(threadIdx.x) & (G - 1);
    row = row0 + static_cast<I>(threadIdx.x / G);
    e = row * static_cast<I>(s.len) + static_cast<I>(sub * V);
    have = row < static_cast<I>(s.rows) && static_cast<I>(sub * V) < static_cast<I>(s.len);
  }
  __device__ __forceinline__ void load(const void *p, float (&v)[V], float none) const {
    if (have) {
      const VecOf<MT, V> t =
          *reinterpret_cast<const VecOf<MT, V> *>(static_cast<const MT *>(p) + e);
#pragma unroll
      for (int q = 0; q < V; ++q)
        v[q] = Cvt<float, MT>::run(t.v[q]);
    } else {
#pragma unroll
      for (int q = 0; q < V; ++q)
        v[q] = none;
    }
  }
};

/// Softmax and LogSoftmax of contiguous rows of at most 32 V values (inner = 1): a lane
/// group per row (ShortRow), one read and one write. RawIn: x read as it is, V at a
/// time; else its V values through the prologue X. RawOut: written V at a time as it
/// is, else through Out.
template <int Kind, int V, int G, bool RawIn, bool RawOut, class I, class MT, class X, class Out>
__global__ void __launch_bounds__(256) softmax_short_rows(const AxisArgs<X, Out> a) {
  const AxisShape &s = a.s;
  const I perBlock = static_cast<I>(blockDim.x / G);
  for (I row0 = static_cast<I>(blockIdx.x) * perBlock; row0 < static_cast<I>(s.rows);
       row0 += static_cast<I>(gridDim.x) * perBlock) {
    const ShortRow<V, G, I, MT> r(row0, s);
    float v[V], m = Limits<float>::lowest(), sum = 0.f;
    if (RawIn) {
      r.load(s.x, v, Limits<float>::lowest());
    } else {
#pragma unroll
      for (int q = 0; q < V; ++q)
        v[q] = r.have ? static_cast<float>(X::load(a.x, r.e + static_cast<I>(q)))
                      : Limits<float>::lowest();
    }
#pragma unroll
    for (int q = 0; q < V; ++q)
      m = maxNan(m, v[q]);
    m = groupReduce<G>(m, MaxOp());
    float e[V]; // the exponentials, kept for the writes (each computed once)
#pragma unroll
    for (int q = 0; q < V; ++q) {
      e[q] = r.have ? exp_(v[q] - m) : 0.f;
      sum += e[q];
    }
    sum = groupReduce<G>(sum, SumOp());
    const float ls = log_(sum), inv = 1.f / sum;
    if (r.have) {
      float o[V];
#pragma unroll
      for (int q = 0; q < V; ++q)
        o[q] = Kind == kLogSoftmax ? v[q] - m - ls : e[q] * inv;
      storeRow<RawOut, MT, Out>(s.y, a.out, r.e, o);
    }
  }
}

/// Softmax, LogSoftmax, Hardmax along the middle axis of [outer, len, inner]: the max,
/// the sum of exponentials, then the writes; each pass re-reads x through X.
template <int Kind, bool Short, class I, class X, class Out>
__global__ void __launch_bounds__(256) softmax(const AxisArgs<X, Out> a) {
  typedef typename X::Value T;
  const AxisRows<I> ax(a.s);
  const I len = ax.len, inner = ax.inner;
  if (Kind == kHardmax || Short) {
    DLC_GRID_STRIDE(row, ax.rows()) {
      const I base = ax.base(row);
      if (Kind == kHardmax) { // the first maximum
        I best = 0;
        T bestv = X::load(a.x, base);
        for (I j = 1; j < len; ++j) {
          const T v = X::load(a.x, base + j * inner);
          if (v > bestv) {
            bestv = v;
            best = j;
          }
        }
        for (I j = 0; j < len; ++j)
          Out::store(a.out, base + j * inner, static_cast<T>(j == best ? 1 : 0));
        continue;
      }
      T m = Limits<T>::lowest();
      for (I j = 0; j < len; ++j)
        m = maxNan(m, X::load(a.x, base + j * inner));
      T sum = T(0);
      for (I j = 0; j < len; ++j)
        sum += exp_(X::load(a.x, base + j * inner) - m);
      const T ls = log_(sum);
      for (I j = 0; j < len; ++j) {
        const T v = X::load(a.x, base + j * inner);
        Out::store(a.out, base + j * inner, Kind == kLogSoftmax ? v - m - ls : exp_(v - m) / sum);
      }
    }
    return;
  }
  DLC_SHARED(T, smem, [32]);
  for (I row = static_cast<I>(blockIdx.x); row < ax.rows(); row += static_cast<I>(gridDim.x)) {
    const I base = ax.base(row);
    T m = Limits<T>::lowest();
    for (I j = static_cast<I>(threadIdx.x); j < len; j += static_cast<I>(blockDim.x))
      m = maxNan(m, X::load(a.x, base + j * inner));
    m = blockReduce(m, MaxOp(), Limits<T>::lowest(), smem);
    T sum = T(0);
    for (I j = static_cast<I>(threadIdx.x); j < len; j += static_cast<I>(blockDim.x))
      sum += exp_(X::load(a.x, base + j * inner) - m);
    sum = blockReduce(sum, SumOp(), T(0), smem);
    const T ls = log_(sum);
    for (I j = static_cast<I>(threadIdx.x); j < len; j += static_cast<I>(blockDim.x)) {
      const T v = X::load(a.x, base + j * inner);
      Out::store(a.out, base + j * inner, Kind == kLogSoftmax ? v - m - ls : exp_(v - m) / sum);
    }
  }
}

template <class Out> struct SoftmaxGradArgs {
  AxisShape s; // x: y, dy: the output gradient (both read as they are)
  typename Out::Params out;
};

/// SoftmaxGrad's row term: dy y (Log: dy), summed over the row.
template <bool Log> DLC_HD float softmaxGradTerm(float y, float g) {
  return Log ? g : g * y;
}
/// SoftmaxGrad's element from the row's sum: y (dy - sum) (Log: dy - exp(y) sum).
template <bool Log> DLC_HD float softmaxGradOut(float y, float g, float sum) {
  return Log ? g - exp_(y) * sum : y * (g - sum);
}

/// SoftmaxGrad along contiguous rows longer than 64 (inner = 1), a block per row, y and
/// dy read V elements at a time (16 bytes where the row length and addresses allow).
/// The first R vectors of each operand per thread stay in registers between the row's
/// sum and the writes, so rows up to R * blockDim * V elements are read once (longer
/// ones re-read the rest). RawOut: dx written V at a time as it is, else through Out.
template <bool Log, int V, int R, bool RawOut, class I, class MT, class Out>
__global__ void __launch_bounds__(256) softmax_grad_rows(const SoftmaxGradArgs<Out> a) {
  const AxisShape &s = a.s;
  const I len = static_cast<I>(s.len);
  DLC_SHARED(float, smem, [32]);
  for (I row = static_cast<I>(blockIdx.x); row < static_cast<I>(s.rows);
       row += static_cast<I>(gridDim.x)) {
    const MT *rows[2] = {static_cast<const MT *>(s.x) + row * len,
                         static_cast<const MT *>(s.dy) + row * len};
    CachedRows<2, V, R, I, MT> yg(rows, len); // [0]: y, [1]: dy
    float sum = 0.f;
    yg.fill([&](I, const float(&v)[2][V]) {
#pragma unroll
      for (int q = 0; q < V; ++q)
        sum += softmaxGradTerm<Log>(v[0][q], v[1][q]);
    });
    const float S = blockReduce(sum, SumOp(), 0.f, smem);
    yg.each([&](I j, const float(&v)[2][V]) {
      float o[V];
#pragma unroll
      for (int q = 0; q < V; ++q)
        o[q] = softmaxGradOut<Log>(v[0][q], v[1][q], S);
      storeRow<RawOut, MT, Out>(s.y, a.out, row * len + j * V, o);
    });
  }
}

/// SoftmaxGrad along contiguous rows of at most 32 V values: a lane group per row
/// (ShortRow), y and dy read once, V at a time.
template <bool Log, int V, int G, bool RawOut, class I, class MT, class Out>
__global__ void __launch_bounds__(256) softmax_grad_short_rows(const SoftmaxGradArgs<Out> a) {
  const AxisShape &s = a.s;
  const I perBlock = static_cast<I>(blockDim.x / G);
  for (I row0 = static_cast<I>(blockIdx.x) * perBlock; row0 < static_cast<I>(s.rows);
       row0 += static_cast<I>(gridDim.x) * perBlock) {
    const ShortRow<V, G, I, MT> r(row0, s);
    float y[V], g[V], sum = 0.f;
    r.load(s.x, y, 0.f);
    r.load(s.dy, g, 0.f);
#pragma unroll
    for (int q = 0; q < V; ++q)
      sum += softmaxGradTerm<Log>(y[q], g[q]);
    sum = groupReduce<G>(sum, SumOp());
    if (r.have) {
      float o[V];
#pragma unroll
      for (int q = 0; q < V; ++q)
        o[q] = softmaxGradOut<Log>(y[q], g[q], sum);
      storeRow<RawOut, MT, Out>(s.y, a.out, r.e, o);
    }
  }
}

/// SoftmaxGrad along the middle axis of [outer, len, inner]: a thread per row (Short)
/// or a block per row; y and dy are read for the sum, then again for the writes.
template <bool Log, bool Short, class I, class MT, class Out>
__global__ void __launch_bounds__(256) softmax_grad(const SoftmaxGradArgs<Out> a) {
  const AxisRows<I> ax(a.s);
  const I len = ax.len, inner = ax.inner;
  const MT *y = static_cast<const MT *>(a.s.x), *g = static_cast<const MT *>(a.s.dy);
  auto term = [&](I e) { return softmaxGradTerm<Log>(ld<float>(y, e), ld<float>(g, e)); };
  auto write = [&](I e, float sum) {
    Out::store(a.out, e,
               static_cast<typename Out::Value>(
                   softmaxGradOut<Log>(ld<float>(y, e), ld<float>(g, e), sum)));
  };
  if (Short) {
    DLC_GRID_STRIDE(row, ax.rows()) {
      const I base = ax.base(row);
      float sum = 0.f;
      for (I j = 0; j < len; ++j)
        sum += term(base + j * inner);
      for (I j = 0; j < len; ++j)
        write(base + j * inner, sum);
    }
    return;
  }
  DLC_SHARED(float, smem, [32]);
  for (I row = static_cast<I>(blockIdx.x); row < ax.rows(); row += static_cast<I>(gridDim.x)) {
    const I base = ax.base(row);
    float sum = 0.f;
    for (I j = static_cast<I>(threadIdx.x); j < len; j += static_cast<I>(blockDim.x))
      sum += term(base + j * inner);
    sum = blockReduce(sum, SumOp(), 0.f, smem);
    for (I j = static_cast<I>(threadIdx.x); j < len; j += static_cast<I>(blockDim.x))
      write(base + j * inner, sum);
  }
}

/// Plain pointers for ops that fuse nothing: an input and one or two outputs.
struct AxisIo {
  AxisShape s;
  const void *x;
  void *y;
};

/// ArgMax / ArgMin: one thread per row, the reference's scan order and ties.
template <bool IsMax, bool Last, class I, class XT>
__global__ void __launch_bounds__(256) argminmax(const AxisIo a) {
  typedef typename Compute<XT>::type T;
  const AxisRows<I> ax(a.s);
  const XT *x = static_cast<const XT *>(a.x);
  const I len = ax.len, inner = ax.inner;
  DLC_GRID_STRIDE(row, ax.rows()) {
    const I base = ax.base(row);
    I best = 0;
    T bv = ld<T>(x, base);
    for (I j = 1; j < len; ++j) {
      const T v = ld<T>(x, base + j * inner);
      if (IsMax ? (v > bv || (Last && v == bv)) : (v < bv || (Last && v == bv))) {
        bv = v;
        best = j;
      }
    }
    static_cast<i64 *>(a.y)[row] = static_cast<i64>(best);
  }
}

/// Total order for top-k: NaN above every number (as PyTorch sorts), so that ranks
/// are a permutation and every output slot is written.
template <class T> DLC_HD bool topkBefore(T a, T b, bool largest) {
  const bool an = isnan_(a), bn = isnan_(b);
  if (an || bn)
    return largest ? (an && !bn) : (bn && !an);
  return largest ? a > b : a < b;
}
template <class T> DLC_HD bool topkSame(T a, T b) {
  return (isnan_(a) && isnan_(b)) || a == b;
}

/// TopK by rank: element j of a row goes to position rank(j) when rank(j) < k, where
/// rank counts the elements before it (better value, or equal and lower index).
template <bool Largest, class I, class XT>
__global__ void __launch_bounds__(256) topk(const AxisIo a) {
  typedef typename Compute<XT>::type T;
  const AxisShape &s = a.s;
  const XT *x = static_cast<const XT *>(a.x);
  XT *values = static_cast<XT *>(a.y);
  i64 *indices = static_cast<i64 *>(s.out2);
  const I len = static_cast<I>(s.len), inner = static_cast<I>(s.inner), k = static_cast<I>(s.k);
  const I total = static_cast<I>(s.rows) * len;
  DLC_GRID_STRIDE(e, total) {
    I r = e;
    const I in = s.dInner.split(r), j = s.dLen.split(r), o = r;
    const I base = o * len * inner + in;
    const T me = ld<T>(x, base + j * inner);
    I rank = 0;
    for (I t = 0; t < len; ++t) {
      const T w = ld<T>(x, base + t * inner);
      rank += topkBefore(w, me, Largest) || (topkSame(w, me) && t < j);
    }
    if (rank < k) {
      const I dst = o * k * inner + rank * inner + in;
      values[dst] = x[base + j * inner];
      indices[dst] = static_cast<i64>(j);
    }
  }
}

/// CumSum along the axis, one thread per row (sequential, in double for floats).
template <bool Exclusive, bool Reverse, class I, class XT>
__global__ void __launch_bounds__(256) cumsum(const AxisIo a) {
  typedef typename Accum<typename Compute<XT>::type, true>::type A;
  const AxisRows<I> ax(a.s);
  const XT *x = static_cast<const XT *>(a.x);
  XT *y = static_cast<XT *>(a.y);
  const I len = ax.len, inner = ax.inner;
  DLC_GRID_STRIDE(row, ax.rows()) {
    const I base = ax.base(row);
    A acc = A(0);
    for (I t = 0; t < len; ++t) {
      const I at = base + (Reverse ? len - 1 - t : t) * inner;
      const A w = ld<A>(x, at);
      if (Exclusive) {
        st(y, at, acc);
        acc += w;
      } else {
        acc += w;
        st(y, at, acc);
      }
    }
  }
}

} // namespace dlc
