// Recurrent layers (LSTM, GRU). X W^T for all time steps is one GEMM beforehand (xw).
//
// Per-step schedule: for each step a GEMM computes h R^T (hr), then one cell kernel
// applies the gates (GRU without linear_before_reset: two stages around a second
// GEMM); h ping-pongs between two buffers.
//
// Persistent kernels (cuDNN's persistent RNN): one cooperative launch runs every time
// step. Block b owns `units` hidden units; their rows of R stay in shared memory for
// the whole sequence, stored [gate][k][unit] so that a warp's lanes read adjacent
// words. A thread owns one (batch row, unit): it keeps c in a register, computes its
// gates from h_{t-1} (staged in shared memory), writes h_t, and the grid meets at a
// barrier before the next step. sequence_lens freezes a row's state after its length.
#pragma once

#include "dlc_device.cuh"

namespace dlc {

enum RnnActivation {
  kActSigmoid,
  kActTanh,
  kActRelu,
  kActHardSigmoid,
  kActLeakyRelu,
  kActThresholdedRelu,
  kActScaledTanh,
  kActAffine,
  kActElu,
  kActSoftsign,
  kActSoftplus
};

template <int A, class T> DLC_HD T rnnAct(T v, double alpha, double beta) {
  const T al = static_cast<T>(alpha), be = static_cast<T>(beta);
  if (A == kActSigmoid)
    return T(1) / (T(1) + exp_(-v));
  if (A == kActTanh)
    return tanh_(v);
  if (A == kActRelu)
    return v > T(0) ? v : T(0);
  if (A == kActHardSigmoid) {
    const T h = al * v + be;
    return h < T(0) ? T(0) : (h > T(1) ? T(1) : h);
  }
  if (A == kActLeakyRelu)
    return v < T(0) ? al * v : v;
  if (A == kActThresholdedRelu)
    return v > al ? v : T(0);
  if (A == kActScaledTanh)
    return al * tanh_(be * v);
  if (A == kActAffine)
    return al * v + be;
  if (A == kActElu)
    return v < T(0) ? al * (exp_(v) - T(1)) : v;
  if (A == kActSoftsign)
    return v / (T(1) + fabs_(v));
  return log1p_(exp_(v)); // kActSoftplus
}

/// Per-row helpers shared by the step and persistent kernels.
template <class I> struct RnnIndex {
  const RnnShape &s;
  DLC_HD I xwRow(I b, I t) const {
    return s.batchFirst ? b * static_cast<I>(s.S) + t : t * static_cast<I>(s.B) + b;
  }
  DLC_HD I y(I b, I t, I h) const {
    const I S = static_cast<I>(s.S), B = static_cast<I>(s.B), H = static_cast<I>(s.H),
            D = static_cast<I>(s.dirs);
    return s.batchFirst ? ((b * S + t) * D + static_cast<I>(s.dir)) * H + h
                        : ((t * D + static_cast<I>(s.dir)) * B + b) * H + h;
  }
  DLC_HD I state(I b, I h) const {
    const I B = static_cast<I>(s.B), H = static_cast<I>(s.H), D = static_cast<I>(s.dirs);
    return s.batchFirst ? (b * D + static_cast<I>(s.dir)) * H + h
                        : (static_cast<I>(s.dir) * B + b) * H + h;
  }
  DLC_HD I len(I b) const {
    if (!s.lens)
      return static_cast<I>(s.S);
    const I l = static_cast<I>(static_cast<const int *>(s.lens)[b]);
    return l < 0 ? 0 : (l > static_cast<I>(s.S) ? static_cast<I>(s.S) : l);
  }
  /// Bias of gate g, unit h: input (Wb) or recurrent (Rb) half.
  template <class T, class DT> DLC_HD T bias(I g, I h, bool recurrent) const {
    if (!s.bias)
      return T(0);
    return ld<T>(static_cast<const DT *>(s.bias),
                 (recurrent ? static_cast<I>(s.G) : 0) * static_cast<I>(s.H) +
                     g * static_cast<I>(s.H) + h);
  }
  /// Gate g's input half for unit h of batch row b at time t: x W^T (xw) plus Wb.
  template <class T, class DT> DLC_HD T gateInput(const DT *xw, I b, I t, I g, I h) const {
    const I H = static_cast<I>(s.H);
    return ld<T>(xw, xwRow(b, t) * static_cast<I>(s.G) * H + g * H + h) + bias<T, DT>(g, h, false);
  }
  /// Gate g's recurrent half from the per-step GEMM's h R^T (hr, [B][G*H]) plus Rb.
  template <class T, class DT> DLC_HD T gateRecurrent(const DT *hr, I b, I g, I h) const {
    const I H = static_cast<I>(s.H);
    return ld<T>(hr, (b * static_cast<I>(s.G) + g) * H + h) + bias<T, DT>(g, h, true);
  }
  /// Element i of the [B][H] state in the per-step schedule: its row and unit, the
  /// time it is at this step, and whether the row's sequence is still running.
  struct Step {
    I b, h, t;
    bool live;
  };
  DLC_HD Step step(I i) const {
    I b = i;
    const I h = s.dH.split(b), l = len(b), k = static_cast<I>(s.step);
    return Step{b, h, s.reverse ? l - 1 - k : k, k < l};
  }
  template <class T> DLC_HD T clip(T v) const {
    if (s.clip <= 0)
      return v;
    const T c = static_cast<T>(s.clip);
    return v < -c ? -c : (v > c ? c : v);
  }
};

/// The initial state of one direction: h (hNext) and c from initial_h/c, or zeros.
template <class I, class DT> __global__ void __launch_bounds__(256) rnn_init(const RnnShape s) {
  RnnIndex<I> ix{s};
  const I BH = static_cast<I>(s.B) * static_cast<I>(s.H);
  DLC_GRID_STRIDE(i, BH) {
    I b = i;
    const I h = s.dH.split(b);
    static_cast<DT *>(s.hNext)[i] =
        s.h0 ? static_cast<const DT *>(s.h0)[ix.state(b, h)] : cvt<DT>(0.0f);
    if (s.c)
      static_cast<DT *>(s.c)[i] =
          s.c0 ? static_cast<const DT *>(s.c0)[ix.state(b, h)] : cvt<DT>(0.0f);
  }
}

/// The final states of one direction: Y_h from h (hCur), Y_c from c.
template <class I, class DT> __global__ void __launch_bounds__(256) rnn_final(const RnnShape s) {
  RnnIndex<I> ix{s};
  const I BH = static_cast<I>(s.B) * static_cast<I>(s.H);
  DLC_GRID_STRIDE(i, BH) {
    I b = i;
    const I h = s.dH.split(b);
    if (s.yh)
      static_cast<DT *>(s.yh)[ix.state(b, h)] = static_cast<const DT *>(s.hCur)[i];
    if (s.yc)
      static_cast<DT *>(s.yc)[ix.state(b, h)] = static_cast<const DT *>(s.c)[i];
  }
}

/// The LSTM cell for gate pre-activations gx (from xw) and gh (from h R^T, or the
/// persistent kernel's dot products); ONNX gate order i, o, f, c. Returns h and
/// updates c.
template <int A0, int A1, int A2, class T, class I, class DT>
DLC_HD T lstmCell(const RnnIndex<I> &ix, I h, const T *g, T &c) {
  const RnnShape &s = ix.s;
  const DT *peep = static_cast<const DT *>(s.peep);
  const I H = static_cast<I>(s.H);
  const T pi = peep ? ld<T>(peep, h) * c : T(0), pf = peep ? ld<T>(peep, 2 * H + h) * c : T(0);
  const T ig = rnnAct<A0>(ix.clip(g[0] + pi), s.alpha[0], s.beta[0]);
  const T fg = s.coupled ? T(1) - ig : rnnAct<A0>(ix.clip(g[2] + pf), s.alpha[0], s.beta[0]);
  const T cg = rnnAct<A1>(ix.clip(g[3]), s.alpha[1], s.beta[1]);
  c = fg * c + ig * cg;
  const T po = peep ? ld<T>(peep, H + h) * c : T(0);
  const T og = rnnAct<A0>(ix.clip(g[1] + po), s.alpha[0], s.beta[0]);
  return og * rnnAct<A2>(c, s.alpha[2], s.beta[2]);
}

/// One LSTM step (per-step schedule).
template <int A0, int A1, int A2, class I, class DT>
__global__ void __launch_bounds__(256) lstm_cell(const RnnShape s) {
  typedef typename Compute<DT>::type T;
  RnnIndex<I> ix{s};
  const I BH = static_cast<I>(s.B) * static_cast<I>(s.H);
  const DT *xw = static_cast<const DT *>(s.xw), *hr = static_cast<const DT *>(s.hr);
  DT *next = static_cast<DT *>(s.hNext);
  const DT *cur = static_cast<const DT *>(s.hCur);
  DLC_GRID_STRIDE(i, BH) {
    const typename RnnIndex<I>::Step r = ix.step(i);
    const I b = r.b, h = r.h, t = r.t;
    if (!r.live) {
      next[i] = cur[i];
      continue;
    }
    T g[4];
#pragma unroll
    for (int k = 0; k < 4; ++k)
      g[k] = ix.template gateInput<T, DT>(xw, b, t, k, h) +
             ix.template gateRecurrent<T, DT>(hr, b, k, h);
    T c = ld<T>(static_cast<const DT *>(s.c), i);
    const T hn = lstmCell<A0, A1, A2, T, I, DT>(ix, h, g, c);
    st(static_cast<DT *>(s.c), i, c);
    st(next, i, hn);
    st(static_cast<DT *>(s.y), ix.y(b, t, h), hn);
  }
}

/// One GRU step (per-step schedule; ONNX gate order z, r, h). Stage 0: with
/// linear_before_reset. Without it, stage 1 writes z (into hNext) and r * h, a GEMM
/// computes (r * h) Rh^T, and stage 2 finishes.
template <int A0, int A1, int Stage, class I, class DT>
__global__ void __launch_bounds__(256) gru_cell(const RnnShape s) {
  typedef typename Compute<DT>::type T;
  RnnIndex<I> ix{s};
  const I BH = static_cast<I>(s.B) * static_cast<I>(s.H);
  const DT *xw = static_cast<const DT *>(s.xw), *hr = static_cast<const DT *>(s.hr);
  DT *next = static_cast<DT *>(s.hNext);
  const DT *cur = static_cast<const DT *>(s.hCur);
  DLC_GRID_STRIDE(i, BH) {
    const typename RnnIndex<I>::Step r = ix.step(i);
    const I b = r.b, h = r.h, t = r.t;
    const T hp = ld<T>(cur, i);
    if (!r.live) {
      if (Stage != 2)
        next[i] = cur[i];
      if (Stage == 1)
        st(static_cast<DT *>(s.rh), i, T(0));
      continue;
    }
    auto gx = [&](int k) { return ix.template gateInput<T, DT>(xw, b, t, k, h); };
    auto gh = [&](int k) { return ix.template gateRecurrent<T, DT>(hr, b, k, h); };
    if (Stage == 2) {
      const T zg = ld<T>(next, i);
      const T rh = ld<T>(static_cast<const DT *>(s.rhR), i) + ix.template bias<T, DT>(2, h, true);
      const T hh = rnnAct<A1>(ix.clip(gx(2) + rh), s.alpha[1], s.beta[1]);
      const T hn = (T(1) - zg) * hh + zg * hp;
      st(next, i, hn);
      st(static_cast<DT *>(s.y), ix.y(b, t, h), hn);
      continue;
    }
    const T zg = rnnAct<A0>(ix.clip(gx(0) + gh(0)), s.alpha[0], s.beta[0]);
    const T rg = rnnAct<A0>(ix.clip(gx(1) + gh(1)), s.alpha[0], s.beta[0]);
    if (Stage == 1) {
      st(static_cast<DT *>(s.rh), i, rg * hp);
      st(next, i, zg);
      continue;
    }
    const T hh = rnnAct<A1>(ix.clip(gx(2) + rg * gh(2)), s.alpha[1], s.beta[1]);
    const T hn = (T(1) - zg) * hh + zg * hp;
    st(next, i, hn);
    st(static_cast<DT *>(s.y), ix.y(b, t, h), hn);
  }
}

/// Grid-wide barrier of a cooperative launch (every block resident). The counter
/// resets itself; the generation word only grows, so the state stays valid between
/// launches. Emu runs the blocks as fibers and releases them together.
DLC_HD void gridSync(void *state) {
#ifdef DLC_EMU
  (void)state;
  dlc_emu_gridsync();
#else
  unsigned *count = static_cast<unsigned *>(state);
  volatile unsigned *generation = count + 1;
  const unsigned blocks = gridDim.x * gridDim.y * gridDim.z;
  __syncthreads();
  if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {
    const unsigned g = *generation;
    __threadfence();
    if (atomicAdd(count, 1u) == blocks - 1) {
      atomicExch(count, 0u);
      __threadfence();
      atomicAdd(count + 1, 1u);
    } else {
      while (*generation == g) {
      }
    }
    __threadfence();
  }
  __syncthreads();
#endif
}

/// Persistent kernels: stages the block's slice of R (G gates, units u0 .. u0+U) in
/// shared memory as Rs[g][k][u] = R[g * H + u0 + u][k]; rows past H are zero.
template <class T, class I, class DT>
__device__ void stageRecurrentWeights(T *Rs, const DT *R, int G, I H, I U, I u0) {
  for (I e = threadIdx.x; e < G * H * U; e += blockDim.x) {
    I r = e;
    const I u = r % U;
    r /= U;
    const I k = r % H, g = r / H;
    Rs[e] = u0 + u < H ? ld<T>(R, (g * H + u0 + u) * H + k) : T(0);
  }
}

/// Stages the [B][H] state (h_{t-1} or r * h) in shared memory for every block thread.
template <class T, class I, class DT> __device__ void stageState(T *hs, const DT *src, I n) {
  for (I e = threadIdx.x; e < n; e += blockDim.x)
    hs[e] = ld<T>(src, e);
  __syncthreads();
}

/// Gate g's recurrent dot product for unit u of the block and batch row b.
template <class T, class I>
__device__ T recurrentDot(const T *Rs, const T *hs, int g, I H, I U, I u, I b) {
  T d = T(0);
  for (I j = 0; j < H; ++j)
    d += Rs[(g * H + j) * U + u] * hs[b * H + j];
  return d;
}

/// Persistent LSTM: every step of one direction in one cooperative launch.
/// Dynamic shared memory: R rows [4][H][units], then h_{t-1} [B][H].
template <int A0, int A1, int A2, class I, class DT>
__global__ void __launch_bounds__(256) lstm_persistent(const RnnShape s) {
  typedef typename Compute<DT>::type T;
  RnnIndex<I> ix{s};
  DLC_DYNAMIC_SMEM(T, smem);
  const I H = static_cast<I>(s.H), B = static_cast<I>(s.B), U = static_cast<I>(s.units);
  T *Rs = smem, *hs = smem + 4 * H * U;
  const I u0 = static_cast<I>(blockIdx.x) * U;
  const DT *R = static_cast<const DT *>(s.R), *xw = static_cast<const DT *>(s.xw);
  stageRecurrentWeights(Rs, R, 4, H, U, u0);
  const I u = static_cast<I>(threadIdx.x) % U, b = static_cast<I>(threadIdx.x) / U, h = u0 + u;
  const bool mine = b < B && h < H;
  const I len = mine ? ix.len(b) : 0;
  T c = mine ? ld<T>(static_cast<const DT *>(s.c), b * H + h) : T(0);
  const DT *cur = static_cast<const DT *>(s.hCur);
  DT *next = static_cast<DT *>(s.hNext);
  for (I step = 0; step < static_cast<I>(s.S); ++step) {
    stageState(hs, cur, B * H);
    if (mine) {
      if (step >= len) {
        next[b * H + h] = cur[b * H + h];
      } else {
        const I t = s.reverse ? len - 1 - step : step;
        T g[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          g[k] = ix.template gateInput<T, DT>(xw, b, t, k, h) +
                 recurrentDot(Rs, hs, k, H, U, u, b) + ix.template bias<T, DT>(k, h, true);
        }
        const T hn = lstmCell<A0, A1, A2, T, I, DT>(ix, h, g, c);
        st(next, b * H + h, hn);
        st(static_cast<DT *>(s.y), ix.y(b, t, h), hn);
      }
    }
    gridSync(s.barrier);
    const DT *tmp = cur;
    cur = next;
    next = const_cast<DT *>(tmp);
  }
  if (mine)
    st(static_cast<DT *>(s.c), b * H + h, c);
}

/// Persistent GRU. With linear_before_reset one phase per step; without it, r * h
/// must be complete before (r * h) Rh^T: a second barrier per step.
/// Dynamic shared memory: R rows [3][H][units], then h_{t-1} (or r * h) [B][H].
template <int A0, int A1, class I, class DT>
__global__ void __launch_bounds__(256) gru_persistent(const RnnShape s) {
  typedef typename Compute<DT>::type T;
  RnnIndex<I> ix{s};
  DLC_DYNAMIC_SMEM(T, smem);
  const I H = static_cast<I>(s.H), B = static_cast<I>(s.B), U = static_cast<I>(s.units);
  T *Rs = smem, *hs = smem + 3 * H * U;
  const I u0 = static_cast<I>(blockIdx.x) * U;
  const DT *R = static_cast<const DT *>(s.R), *xw = static_cast<const DT *>(s.xw);
  stageRecurrentWeights(Rs, R, 3, H, U, u0);
  const I u = static_cast<I>(threadIdx.x) % U, b = static_cast<I>(threadIdx.x) / U, h = u0 + u;
  const bool mine = b < B && h < H;
  const I len = mine ? ix.len(b) : 0;
  const DT *cur = static_cast<const DT *>(s.hCur);
  DT *next = static_cast<DT *>(s.hNext);
  DT *rh = static_cast<DT *>(s.rh);
  auto dot = [&](int k) { return recurrentDot(Rs, hs, k, H, U, u, b); };
  for (I step = 0; step < static_cast<I>(s.S); ++step) {
    stageState(hs, cur, B * H);
    const bool live = mine && step < len;
    const I t = live ? (s.reverse ? len - 1 - step : step) : 0;
    auto gx = [&](int k) { return ix.template gateInput<T, DT>(xw, b, t, k, h); };
    const T hp = mine ? hs[b * H + h] : T(0);
    T zg = T(0), hn = hp;
    if (live) {
      zg = rnnAct<A0>(ix.clip(gx(0) + dot(0) + ix.template bias<T, DT>(0, h, true)), s.alpha[0],
                      s.beta[0]);
      const T rg = rnnAct<A0>(ix.clip(gx(1) + dot(1) + ix.template bias<T, DT>(1, h, true)),
                              s.alpha[0], s.beta[0]);
      if (s.linearBeforeReset) {
        const T hh =
            rnnAct<A1>(ix.clip(gx(2) + rg * (dot(2) + ix.template bias<T, DT>(2, h, true))),
                       s.alpha[1], s.beta[1]);
        hn = (T(1) - zg) * hh + zg * hp;
      } else {
        st(rh, b * H + h, rg * hp);
      }
    }
    if (!s.linearBeforeReset) {
      if (mine && !live)
        st(rh, b * H + h, T(0));
      gridSync(s.barrier); // every r * h written
      stageState(hs, static_cast<const DT *>(rh), B * H);
      if (live) {
        const T hh = rnnAct<A1>(ix.clip(gx(2) + dot(2) + ix.template bias<T, DT>(2, h, true)),
                                s.alpha[1], s.beta[1]);
        hn = (T(1) - zg) * hh + zg * hp;
      }
    }
    if (mine) {
      st(next, b * H + h, hn);
      if (live)
        st(static_cast<DT *>(s.y), ix.y(b, t, h), hn);
    }
    gridSync(s.barrier);
    const DT *tmp = cur;
    cur = next;
    next = const_cast<DT *>(tmp);
  }
}

} // namespace dlc
