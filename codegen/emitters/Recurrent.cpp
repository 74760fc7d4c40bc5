//===- Recurrent.cpp - LSTM and GRU -----------------------------------------===//
//
// Per direction: one GEMM computes X W^T for all time steps. Then, when the
// recurrent weights of every block's hidden units fit in shared memory and the grid
// can be resident at once on some target GPU, one cooperative launch of the
// persistent kernel runs every step (dlc_rnn.cuh); and, as its alternative (or alone),
// per step, a GEMM computes h R^T and a cell kernel applies the gates (GRU without
// linear_before_reset: two stages around a second GEMM), with h ping-ponging between
// two buffers. The package carries both (StepDesc::alt 1 and 2); the session runs the
// persistent one only where the device at hand holds its whole grid (occupancy), so
// that a GPU with fewer SMs than the targets (an A30, a MIG slice, an MPS limit) runs
// the per-step schedule instead of failing.
// sequence_lens freezes a batch entry's state after its length (Y stays zero).
//===----------------------------------------------------------------------===//
#include "../Library.h"
#include "EmitterUtils.h"
#include "dlc/codegen/GpuModel.h"
#include "dlc/ir/OpHelpers.h"

#include <cstddef>

namespace dlc::codegen {

using namespace ir;

namespace {

/// Shared memory a persistent block may use on every target (the smallest opt-in
/// limit among sm_80..sm_90 is sm_86/sm_89's 99 KB).
constexpr int64_t kPersistentSmem = 96 * 1024;

} // namespace

static llvm::Error lowerRecurrent(Lowering &l, const Node &n) {
  bool lstm = n.kind() == OpKind::LSTM;
  const Value *x = n.operand(0), *W = n.operand(1), *R = n.operand(2), *Bv = n.operand(3),
              *lens = n.operand(4), *h0 = n.operand(5), *c0 = lstm ? n.operand(6) : nullptr,
              *P = lstm ? n.operand(7) : nullptr;
  DType dt = x->dtype();
  if (dt != DType::F32 && dt != DType::F64)
    return errorf("{0} on {1} is not supported by code generation", n.opName(), dtypeName(dt));
  bool batchFirst = n.attrInt("layout") == 1;
  const std::string &dir = n.attrString("direction");
  int64_t dirs = dir == "bidirectional" ? 2 : 1, H = n.attrInt("hidden_size"), G = lstm ? 4 : 3;
  int64_t S = batchFirst ? x->shape()[1] : x->shape()[0],
          B = batchFirst ? x->shape()[0] : x->shape()[1], I = x->shape()[2];
  bool lbr = !lstm && n.attrInt("linear_before_reset") != 0;
  int acts = lstm ? 3 : 2;
  auto activations = rnnActivations(n);
  if (!activations)
    return activations.takeError();
  size_t es = dtypeSize(dt);
  std::string dtype = cudaType(dt);

  const Value *Y = n.result(0), *Yh = n.numResults() > 1 ? n.result(1) : nullptr,
              *Yc = n.numResults() > 2 ? n.result(2) : nullptr;
  BufferRef yb = l.allocate(Y);
  l.addMemset(yb, Y->type().byteSize(), 0, n);
  if (Yh)
    l.allocate(Yh);
  if (Yc)
    l.allocate(Yc);
  if (S == 0 || B == 0)
    return llvm::Error::success();
  BufferRef xw = l.temp(S * B * G * H * es, Y->name() + ".xw");
  BufferRef hs[2] = {l.temp(B * H * es, Y->name() + ".h0"), l.temp(B * H * es, Y->name() + ".h1")};
  BufferRef cs = l.temp(B * H * es, Y->name() + ".c");

  // Persistent kernel: `units` hidden units per block, one thread per (batch row, unit).
  int64_t units = std::min<int64_t>(H, 256 / std::max<int64_t>(B, 1));
  while (units > 0 && (G * H * units + B * H) * static_cast<int64_t>(es) > kPersistentSmem)
    --units;
  // The most blocks any target holds at once (by shared memory, one per SM at least).
  const int64_t blockSmem = (G * H * units + B * H) * static_cast<int64_t>(es);
  int64_t maxResident = 0;
  for (const std::string &a : l.archs()) {
    const GpuModel &m = gpuModelFor(a);
    maxResident = std::max<int64_t>(
        maxResident, m.sms * std::clamp<int64_t>(m.smemPerSm / std::max<int64_t>(blockSmem, 1), 1,
                                                 m.maxBlocksPerSm));
  }
  int64_t blocks = units > 0 ? (H + units - 1) / units : 0;
  const bool persistent =
      l.options().persistentRnn && units > 0 && B <= 256 && blocks <= maxResident;
  BufferRef hr, rhIn, rhOut, barrier;
  hr = l.temp(B * G * H * es, Y->name() + ".hr");
  if (!lstm && !lbr) {
    rhIn = l.temp(B * H * es, Y->name() + ".rh");
    rhOut = l.temp(B * H * es, Y->name() + ".rhR");
  }
  if (persistent)
    barrier = l.temp(8, Y->name() + ".barrier");
  int64_t maxIndex =
      std::max({x->type().numElements(), Y->type().numElements(), S * B * G * H, G * H * H});

  for (int64_t d = 0; d < dirs; ++d) {
    std::vector<std::string> targs;
    RnnShape s{};
    for (int k = 0; k < acts; ++k) {
      const RnnActivation &a = (*activations)[d * acts + k];
      targs.push_back("dlc::kAct" + a.name);
      s.alpha[k] = a.alpha;
      s.beta[k] = a.beta;
    }
    targs.push_back(l.indexType(maxIndex));
    targs.push_back(dtype);
    s.S = S;
    s.B = B;
    s.H = H;
    s.G = G;
    s.dirs = dirs;
    s.dir = d;
    s.reverse = dir == "reverse" || d == 1;
    s.batchFirst = batchFirst;
    s.coupled = lstm && n.attrInt("input_forget") != 0;
    s.linearBeforeReset = lbr;
    s.clip = n.attrFloat("clip");
    s.units = units;
    s.dH = Divmod::make(H);
    BufferRef wRef = l.bufferOf(W), rRef = l.bufferOf(R);
    wRef.offset += d * G * H * I * es;
    rRef.offset += d * G * H * H * es;
    // The pointers of one launch; hCur/hNext/step vary per launch. `pers`: the
    // persistent kernel's.
    auto args = [&](const RnnShape &shape, BufferRef cur, BufferRef next, bool pers) {
      LaunchArgs a;
      a.shape(shape);
      auto ptr = [&](size_t off, BufferRef r, uint64_t bytes, bool write) {
        a.pointer(off, r, bytes, write);
      };
      ptr(offsetof(RnnShape, xw), xw, S * B * G * H * es, false);
      if (!pers)
        ptr(offsetof(RnnShape, hr), hr, B * G * H * es, false);
      if (Bv) {
        BufferRef b = l.bufferOf(Bv);
        b.offset += d * 2 * G * H * es;
        ptr(offsetof(RnnShape, bias), b, 2 * G * H * es, false);
      }
      if (P) {
        BufferRef p = l.bufferOf(P);
        p.offset += d * 3 * H * es;
        ptr(offsetof(RnnShape, peep), p, 3 * H * es, false);
      }
      if (lens)
        ptr(offsetof(RnnShape, lens), l.bufferOf(lens), lens->type().byteSize(), false);
      ptr(offsetof(RnnShape, R), rRef, G * H * H * es, false);
      ptr(offsetof(RnnShape, hCur), cur, B * H * es, false);
      ptr(offsetof(RnnShape, hNext), next, B * H * es, true);
      ptr(offsetof(RnnShape, c), cs, B * H * es, true);
      ptr(offsetof(RnnShape, y), yb, Y->type().byteSize(), true);
      if (!lstm && !lbr) {
        ptr(offsetof(RnnShape, rh), rhIn, B * H * es, true);
        if (!pers)
          ptr(offsetof(RnnShape, rhR), rhOut, B * H * es, false);
      }
      if (pers)
        ptr(offsetof(RnnShape, barrier), barrier, 8, true);
      if (h0)
        ptr(offsetof(RnnShape, h0), l.bufferOf(h0), h0->type().byteSize(), false);
      if (c0)
        ptr(offsetof(RnnShape, c0), l.bufferOf(c0), c0->type().byteSize(), false);
      if (Yh)
        ptr(offsetof(RnnShape, yh), l.bufferOf(Yh), Yh->type().byteSize(), true);
      if (Yc)
        ptr(offsetof(RnnShape, yc), l.bufferOf(Yc), Yc->type().byteSize(), true);
      return a;
    };
    auto plain = [&](const char *tmpl, bool sync = false) {
      Instantiation inst{tmpl, {l.indexType(maxIndex), dtype}, "dlc::RnnShape", {}};
      inst.needsSync = sync;
      return l.instantiate(inst);
    };

    // X W^T for all steps: [S*B, I] x [I, G*H] (X rows in its own order).
    GemmStep g;
    g.dtype = dt;
    g.transB = true;
    g.m = S * B;
    g.n = G * H;
    g.k = I;
    g.a = l.bufferOf(x);
    g.b = wRef;
    g.c = xw;
    g.lda = I;
    g.ldb = I;
    g.ldc = G * H;
    l.addGemm(g, n);

    // The persistent kernel and, as its alternative, the per-step schedule.
    const uint32_t group = persistent ? l.newAltGroup() : 0;
    size_t from = l.stepCount();
    if (persistent) {
      LaunchArgs init = args(s, hs[1], hs[0], true);
      l.launch(n, plain("dlc::rnn_init"), init, gridFor(B * H, 256), 256);
      l.addMemset(barrier, 8, 0, n);
      Instantiation inst{
          lstm ? "dlc::lstm_persistent" : "dlc::gru_persistent", targs, "dlc::RnnShape", {}};
      inst.cooperative = true;
      uint32_t k = l.instantiate(inst);
      LaunchArgs a = args(s, hs[0], hs[1], true);
      uint32_t threads = static_cast<uint32_t>((units * B + 31) / 32 * 32);
      uint32_t smem = static_cast<uint32_t>(blockSmem);
      l.launch(n, k, a, static_cast<uint32_t>(blocks), threads, smem, 2.0 * S * B * G * H * H);
      l.markAlt(from, group, 1);
      from = l.stepCount();
    }
    {
      LaunchArgs init = args(s, hs[1], hs[0], false);
      l.launch(n, plain("dlc::rnn_init"), init, gridFor(B * H, 256), 256);
      uint32_t cell = 0, cell2 = 0;
      std::vector<std::string> t1 = targs, t2 = targs;
      if (lstm) {
        cell = l.instantiate({"dlc::lstm_cell", targs, "dlc::RnnShape", {}});
      } else {
        t1.insert(t1.begin() + 2, lbr ? "0" : "1");
        cell = l.instantiate({"dlc::gru_cell", t1, "dlc::RnnShape", {}});
        if (!lbr) {
          t2.insert(t2.begin() + 2, "2");
          cell2 = l.instantiate({"dlc::gru_cell", t2, "dlc::RnnShape", {}});
        }
      }
      for (int64_t st = 0; st < S; ++st) {
        BufferRef cur = hs[st % 2], next = hs[(st + 1) % 2];
        GemmStep hg;
        hg.dtype = dt;
        hg.transB = true;
        hg.m = B;
        hg.n = G * H;
        hg.k = H;
        hg.a = cur;
        hg.b = rRef;
        hg.c = hr;
        hg.lda = H;
        hg.ldb = H;
        hg.ldc = G * H;
        l.addGemm(hg, n);
        RnnShape ss = s;
        ss.step = st;
        LaunchArgs a = args(ss, cur, next, false);
        l.launch(n, cell, a, gridFor(B * H, 256), 256, 0, 10.0 * B * H);
        if (!lstm && !lbr) {
          // GRU stage 2 (without linear_before_reset): hh = g(xh + (r*h) Rh^T + Rbh).
          GemmStep rg;
          rg.dtype = dt;
          rg.transB = true;
          rg.m = B;
          rg.n = H;
          rg.k = H;
          rg.a = rhIn;
          rg.b = rRef;
          rg.b.offset += 2 * H * H * es;
          rg.c = rhOut;
          rg.lda = H;
          rg.ldb = H;
          rg.ldc = H;
          l.addGemm(rg, n);
          LaunchArgs a2 = args(ss, cur, next, false);
          l.launch(n, cell2, a2, gridFor(B * H, 256), 256, 0, 5.0 * B * H);
        }
      }
      if (persistent)
        l.markAlt(from, group, 2);
    }
    // Final states of this direction.
    if (Yh || Yc) {
      LaunchArgs fin = args(s, hs[S % 2], hs[(S + 1) % 2], false);
      l.launch(n, plain("dlc::rnn_final"), fin, gridFor(B * H, 256), 256);
    }
  }
  return llvm::Error::success();
}

void registerRecurrentLowerings(LoweringRegistry &r) {
  r.op(OpKind::LSTM, lowerRecurrent);
  r.op(OpKind::GRU, lowerRecurrent);
}

} // namespace dlc::codegen
