//===- Linalg.cpp - MatMul and Gemm ----------------------------------------===//
#include "OpUtils.h"
#include "dlc/ir/FusionRules.h"
#include "dlc/ir/OpHelpers.h"
#include "dlc/ir/Philox.h"

#include <cmath>
#include <numeric>

namespace dlc::ir {
namespace {
using namespace ops;

/// The shapes of a (batched) matrix product after numpy's 1-D promotion rules.
struct MatMulDims {
  Shape batch;     // broadcast batch shape
  int64_t m, k, n; // per-matrix sizes
  Shape aBatch, bBatch;
  Shape result;
};

llvm::Expected<MatMulDims> matmulDims(const Shape &a, const Shape &b) {
  if (a.empty() || b.empty())
    return makeError("MatMul operands must have rank >= 1");
  MatMulDims d;
  Shape as = a, bs = b;
  bool aVec = as.size() == 1, bVec = bs.size() == 1;
  if (aVec)
    as.insert(as.begin(), 1);
  if (bVec)
    bs.push_back(1);
  d.m = as[as.size() - 2];
  d.k = as.back();
  d.n = bs.back();
  if (bs[bs.size() - 2] != d.k)
    return errorf("inner dimensions differ: {0} x {1}", shapeStr(a), shapeStr(b));
  d.aBatch.assign(as.begin(), as.end() - 2);
  d.bBatch.assign(bs.begin(), bs.end() - 2);
  auto batch = broadcastShapes(d.aBatch, d.bBatch);
  if (!batch)
    return batch.takeError();
  d.batch = *batch;
  d.result = d.batch;
  if (!aVec)
    d.result.push_back(d.m);
  if (!bVec)
    d.result.push_back(d.n);
  return d;
}

llvm::Error verifyMatMul(const Node &n) {
  if (auto e = requireType(n, 0, kNumeric))
    return e;
  if (auto e = requireSameType(n, 0, 1))
    return e;
  return matmulDims(n.operand(0)->shape(), n.operand(1)->shape()).takeError();
}

/// int8 operands give int32 sums (a quantized model's products after fold-qdq, as
/// MatMulInteger; ONNX's MatMul itself takes no int8).
InferResult inferMatMul(const Node &n) {
  auto d = matmulDims(n.operand(0)->shape(), n.operand(1)->shape());
  if (!d)
    return d.takeError();
  const DType t = n.operand(0)->dtype();
  return TypeList{{t == DType::I8 ? DType::I32 : t, d->result}};
}

llvm::Error refMatMul(const Node &, const Inputs &in, Outputs &out) {
  auto d = matmulDims(in[0]->shape(), in[1]->shape());
  if (!d)
    return d.takeError();
  return dispatch(in[0]->dtype(), [&](auto ct) -> llvm::Error {
    // (int8 operands compute in int64: the sums are stored as int32 modulo 2^32.)
    using CT = AccType<decltype(ct)>;
    auto a = in[0]->template toVector<CT>(), b = in[1]->template toVector<CT>();
    int64_t batches = product(d->batch), m = d->m, k = d->k, nn = d->n;
    BroadcastIndex ia(d->aBatch, d->batch), ib(d->bBatch, d->batch);
    std::vector<CT> r(static_cast<size_t>(batches * m * nn));
    for (int64_t bt = 0; bt < batches; ++bt) {
      const CT *pa = a.data() + ia(bt) * m * k;
      const CT *pb = b.data() + ib(bt) * k * nn;
      CT *pr = r.data() + bt * m * nn;
      for (int64_t i = 0; i < m; ++i)
        for (int64_t p = 0; p < k; ++p) {
          CT av = pa[i * k + p];
          for (int64_t j = 0; j < nn; ++j)
            pr[i * nn + j] += av * pb[p * nn + j];
        }
    }
    out[0] = Tensor::fromVector(out[0].type(), r);
    return ok();
  });
}

llvm::Error verifyGemm(const Node &n) {
  if (auto e = requireType(n, 0, kNumeric))
    return e;
  for (unsigned i = 1; i < n.numOperands(); ++i)
    if (auto e = requireSameType(n, 0, i))
      return e;
  if (auto e = requireRank(n, 0, 2))
    return e;
  return requireRank(n, 1, 2);
}

InferResult inferGemm(const Node &n) {
  const Shape &a = n.operand(0)->shape(), &b = n.operand(1)->shape();
  bool ta = n.attrInt("transA") != 0, tb = n.attrInt("transB") != 0;
  int64_t m = ta ? a[1] : a[0], k = ta ? a[0] : a[1];
  int64_t kb = tb ? b[1] : b[0], nn = tb ? b[0] : b[1];
  if (k != kb)
    return errorf("inner dimensions differ: A {0}{1} x B {2}{3}", shapeStr(a), ta ? "^T" : "",
                  shapeStr(b), tb ? "^T" : "");
  if (Value *c = n.operand(2)) {
    auto s = broadcastShapes(c->shape(), {m, nn});
    if (!s || *s != Shape{m, nn})
      return errorf("C of shape {0} does not broadcast to [{1},{2}]", shapeStr(c->shape()), m, nn);
  }
  return TypeList{{n.operand(0)->dtype(), {m, nn}}};
}

llvm::Error refGemm(const Node &n, const Inputs &in, Outputs &out) {
  bool ta = n.attrInt("transA") != 0, tb = n.attrInt("transB") != 0;
  double alpha = n.attrFloat("alpha"), beta = n.attrFloat("beta");
  return dispatch(in[0]->dtype(), [&](auto ct) -> llvm::Error {
    using CT = AccType<decltype(ct)>;
    auto a = in[0]->template toVector<CT>(), b = in[1]->template toVector<CT>();
    int64_t m = out[0].shape()[0], nn = out[0].shape()[1];
    int64_t k = ta ? in[0]->shape()[0] : in[0]->shape()[1];
    std::vector<CT> r(static_cast<size_t>(m * nn));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < nn; ++j) {
        CT acc = 0;
        for (int64_t p = 0; p < k; ++p)
          acc += a[ta ? p * m + i : i * k + p] * b[tb ? j * k + p : p * nn + j];
        r[i * nn + j] = static_cast<CT>(alpha * acc);
      }
    if (in.size() > 2 && in[2]) {
      auto c = in[2]->template toVector<CT>();
      BroadcastIndex ic(in[2]->shape(), out[0].shape());
      for (int64_t i = 0; i < m * nn; ++i)
        r[i] += static_cast<CT>(beta * c[ic(i)]);
    }
    out[0] = Tensor::fromVector(out[0].type(), r);
    return ok();
  });
}

/// MatMul's gradient: dA = dY B^T and dB = A^T dY over the (broadcast) batch dims,
/// with 1-D operands seen as a row (A) or a column (B) vector.
llvm::Error gradMatMul(GradBuilder &b, const Node &n) {
  Value *a = n.operand(0), *w = n.operand(1);
  Shape as = a->shape(), bs = w->shape();
  if (as.size() == 1)
    as.insert(as.begin(), 1);
  if (bs.size() == 1)
    bs.push_back(1);
  Value *a2 = b.reshape(a, as), *b2 = b.reshape(w, bs);
  // dY with the unit dims of vector operands put back: [..., M, N]
  Shape gs(n.result()->shape());
  if (a->rank() == 1)
    gs.insert(gs.end() - (w->rank() == 1 ? 0 : 1), 1);
  if (w->rank() == 1)
    gs.push_back(1);
  Value *g = b.reshape(b.grad(), gs);
  auto swapLast = [&](Value *v) {
    std::vector<int64_t> perm(v->rank());
    std::iota(perm.begin(), perm.end(), 0);
    std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
    return b.transpose(v, perm);
  };
  if (b.wants(0))
    b.accumulate(0, b.reshape(b.sumTo(b.op(OpKind::MatMul, {g, swapLast(b2)}), as), a->shape()));
  if (b.wants(1))
    b.accumulate(1, b.reshape(b.sumTo(b.op(OpKind::MatMul, {swapLast(a2), g}), bs), w->shape()));
  return ok();
}

/// Gemm: Y = alpha A' B' + beta C with A' = A or A^T and B' = B or B^T.
llvm::Error gradGemm(GradBuilder &b, const Node &n) {
  Value *a = n.operand(0), *w = n.operand(1), *g = b.grad();
  bool ta = n.attrInt("transA") != 0, tb = n.attrInt("transB") != 0;
  double alpha = n.attrFloat("alpha");
  auto T = [&](Value *v) { return b.transpose(v, {1, 0}); };
  Value *a2 = ta ? T(a) : a, *b2 = tb ? T(w) : w;
  if (b.wants(0)) { // dA' = alpha g B'^T
    Value *d = b.scale(b.op(OpKind::MatMul, {g, T(b2)}), alpha);
    b.accumulate(0, ta ? T(d) : d);
  }
  if (b.wants(1)) { // dB' = alpha A'^T g
    Value *d = b.scale(b.op(OpKind::MatMul, {T(a2), g}), alpha);
    b.accumulate(1, tb ? T(d) : d);
  }
  if (b.wants(2))
    b.accumulate(2, b.scale(g, n.attrFloat("beta")));
  return ok();
}

//===----------------------------------------------------------------------===//
// FlashAttention(Q, K, V[, bias][, step]) {scale, causal, reach, dropout, seed} -> (O,
// LSE): the attention
// that autodiff differentiates without keeping the scores (flashAttentionForGradients,
// passes/Autodiff.cpp).
// Q [..., Sq, hd], K [..., Sk, hd] (rows, not transposed), V [..., Sk, hdv], the same
// batch dims; S = scale Q K^T (+ bias, broadcast to [..., Sq, Sk], its last dim Sk:
// a padding mask, a position bias; finite values below -1e5 act as -1e5, so that a
// lowest-value mask weighs exactly 0 beside a kept key and a row it masks entirely
// stays finite), with causal = 1 the keys past query + reach masked
// (-inf); with dropout > 0, training-mode Dropout of the probabilities (pair (q, k) of
// row bh kept, scaled by 1 / (1 - dropout), where Philox's uniform number for (seed,
// step, (bh Sq + q) Sk + k) is at least dropout: the Dropout op's mask of P); O =
// softmax(S) V [..., Sq, hdv] and LSE = log(sum_j exp(S_ij)) [..., Sq] in
// FP32. A row whose keys are all masked gives O = NaN (0 / 0) and LSE = -inf, as the
// spelled-out graph does.
// FlashAttentionGrad(Q, K, V, O, dO, LSE[, bias][, step]) -> (dQ, dK, dV), from the
// scores recomputed (no gradient for the bias; Z the dropout's scaled mask, 1 without):
// P = exp(S - LSE), dV = (P Z)^T dO, dS = P (Z (dO V^T) - rowsum(dO O)), dQ = scale dS K and
// dK = scale dS^T Q; a masked (query, key) pair adds nothing (dS = 0 there even where
// a row has no key left: its O is NaN, its dQ 0). Both run on FP16/BF16 (attention_mma,
// attention_grad_mma).
//===----------------------------------------------------------------------===//

llvm::Error verifyAttentionOperands(const Node &n, unsigned count) {
  for (unsigned i = 0; i < count; ++i) {
    if (auto e = requireSameType(n, 0, i))
      return e;
    if (auto e = requireMinRank(n, i, 2))
      return e;
  }
  const DType dt = n.operand(0)->dtype();
  if (dt != DType::F16 && dt != DType::BF16)
    return errorf("{0} takes f16 or bf16 operands (the training path creates it after the "
                  "precision pass), got {1}",
                  n.opName(), dtypeName(dt));
  const Shape &q = n.operand(0)->shape(), &k = n.operand(1)->shape(), &v = n.operand(2)->shape();
  const size_t r = q.size();
  auto batch = [&](const Shape &s) { return Shape(s.begin(), s.end() - 2); };
  if (k.size() != r || v.size() != r || batch(k) != batch(q) || batch(v) != batch(q) ||
      k[r - 1] != q[r - 1] || v[r - 2] != k[r - 2])
    return errorf("Q {0}, K {1} and V {2} must be [..., Sq, hd], [..., Sk, hd] and [..., Sk, hdv] "
                  "with the same batch dims",
                  shapeStr(q), shapeStr(k), shapeStr(v));
  const double scale = n.attrFloat("scale");
  if (!(scale > 0) || std::isinf(scale))
    return errorf("scale must be a positive finite number, got {0}", scale);
  if (n.attrInt("causal") != 0 && n.attrInt("causal") != 1)
    return makeError("causal must be 0 or 1");
  const int64_t reach = n.attrInt("reach");
  if (reach < -q[r - 2] || reach > k[r - 2])
    return errorf("reach must be in [-Sq, Sk] = [{0}, {1}], got {2}", -q[r - 2], k[r - 2], reach);
  const unsigned bi = n.kind() == OpKind::FlashAttention ? 3 : 6;
  const double drop = n.attrFloat("dropout");
  if (!(drop >= 0 && drop < 1))
    return errorf("dropout must be in [0, 1), got {0}", drop);
  const Value *step = n.numOperands() > bi + 1 ? n.operand(bi + 1) : nullptr;
  if (drop > 0 && (!step || step->dtype() != DType::I64 || step->type().numElements() != 1))
    return makeError("dropout needs the step operand: an i64 scalar (the Dropout op's)");
  if (const Value *bias = n.numOperands() > bi ? n.operand(bi) : nullptr) {
    if (auto e = requireSameType(n, 0, bi))
      return e;
    Shape scores(q.begin(), q.end() - 1);
    scores.push_back(k[r - 2]);
    if (!attentionBiasView(bias->shape(), scores))
      return errorf("the bias {0} must broadcast to the scores {1}, its last dim {2}, its batch "
                    "dims in at most two strided groups",
                    shapeStr(bias->shape()), shapeStr(scores), k[r - 2]);
  }
  return ok();
}

Shape attentionRows(const Value *q) {
  return Shape(q->shape().begin(), q->shape().end() - 1);
}

llvm::Error verifyFlashAttention(const Node &n) {
  return verifyAttentionOperands(n, 3);
}

InferResult inferFlashAttention(const Node &n) {
  Shape o = n.operand(0)->shape();
  o.back() = n.operand(2)->shape().back();
  return TypeList{{n.operand(0)->dtype(), o}, {DType::F32, attentionRows(n.operand(0))}};
}

llvm::Error verifyFlashAttentionGrad(const Node &n) {
  if (auto e = verifyAttentionOperands(n, 5))
    return e;
  Shape o = n.operand(0)->shape();
  o.back() = n.operand(2)->shape().back();
  if (n.operand(3)->shape() != o || n.operand(4)->shape() != o)
    return errorf("O and dO must be {0}", shapeStr(o));
  const Value *lse = n.operand(5);
  if (lse->dtype() != DType::F32 || lse->shape() != attentionRows(n.operand(0)))
    return errorf("LSE must be f32{0}", shapeStr(attentionRows(n.operand(0))));
  return ok();
}

InferResult inferFlashAttentionGrad(const Node &n) {
  return TypeList{n.operand(0)->type(), n.operand(1)->type(), n.operand(2)->type()};
}

/// The scaled, biased, masked scores of one (batch, head): s[i * Sk + j].
struct AttentionRef {
  int64_t BH, Sq, Sk, hd, hdv;
  double scale;
  bool causal;
  int64_t reach;
  std::vector<double> bias; // (empty: none)
  AttentionBiasView view;
  float drop = 0, dropScale = 1;
  unsigned long long seed = 0, step = 0;
  AttentionRef(const Node &n, const Tensor *b, const Tensor *stepValue)
      : Sq(n.operand(0)->shape().end()[-2]), Sk(n.operand(1)->shape().end()[-2]),
        hd(n.operand(0)->shape().back()), hdv(n.operand(2)->shape().back()),
        scale(n.attrFloat("scale")), causal(n.attrInt("causal") != 0), reach(n.attrInt("reach")) {
    const Shape &qs = n.operand(0)->shape();
    BH = product(Shape(qs.begin(), qs.end() - 2));
    if (b) {
      bias = b->toVector<double>();
      Shape scores(qs.begin(), qs.end() - 1);
      scores.push_back(Sk);
      view = *attentionBiasView(b->type().shape, scores);
    }
    drop = n.attrFloat("dropout");
    if (drop > 0) {
      dropScale = 1.0f / (1.0f - drop);
      seed = static_cast<unsigned long long>(n.attrInt("seed"));
      step = static_cast<unsigned long long>(stepValue->getInt(0));
    }
  }
  /// The dropout's factor of pair (i, j) of row b: 0 or 1 / (1 - dropout).
  double keep(int64_t b, int64_t i, int64_t j) const {
    if (drop <= 0)
      return 1.0;
    const auto e = static_cast<unsigned long long>((b * Sq + i) * Sk + j);
    return philox::uniform(seed, step, e) >= drop ? static_cast<double>(dropScale) : 0.0;
  }
  std::vector<double> scores(const std::vector<double> &q, const std::vector<double> &k,
                             int64_t b) const {
    std::vector<double> s(static_cast<size_t>(Sq * Sk));
    for (int64_t i = 0; i < Sq; ++i)
      for (int64_t j = 0; j < Sk; ++j) {
        double acc = 0;
        for (int64_t d = 0; d < hd; ++d)
          acc += q[(b * Sq + i) * hd + d] * k[(b * Sk + j) * hd + d];
        double add =
            bias.empty()
                ? 0.0
                : bias[static_cast<size_t>((b / view.innerCount) * view.outer +
                                           (b % view.innerCount) * view.inner + i * view.row + j)];
        if (add != -INFINITY) // (finite values below -1e5 act as -1e5: dlc_attention.cuh)
          add = std::max(add, -1e5);
        s[i * Sk + j] = causal && j > i + reach ? -INFINITY : scale * acc + add;
      }
    return s;
  }
};

llvm::Error refFlashAttention(const Node &n, const Inputs &in, Outputs &out) {
  const AttentionRef a(n, in.size() > 3 ? in[3] : nullptr, in.size() > 4 ? in[4] : nullptr);
  auto q = in[0]->toVector<double>(), k = in[1]->toVector<double>(), v = in[2]->toVector<double>();
  std::vector<double> o(static_cast<size_t>(a.BH * a.Sq * a.hdv)),
      lse(static_cast<size_t>(a.BH * a.Sq));
  for (int64_t b = 0; b < a.BH; ++b) {
    const std::vector<double> s = a.scores(q, k, b);
    for (int64_t i = 0; i < a.Sq; ++i) {
      double m = -INFINITY, sum = 0;
      for (int64_t j = 0; j < a.Sk; ++j)
        m = std::max(m, s[i * a.Sk + j]);
      for (int64_t j = 0; j < a.Sk; ++j)
        sum += m == -INFINITY ? 0.0 : std::exp(s[i * a.Sk + j] - m);
      lse[b * a.Sq + i] = m == -INFINITY ? m : m + std::log(sum);
      for (int64_t d = 0; d < a.hdv; ++d) {
        double acc = 0;
        for (int64_t j = 0; j < a.Sk; ++j)
          acc += (m == -INFINITY ? 0.0 : std::exp(s[i * a.Sk + j] - m) * a.keep(b, i, j)) *
                 v[(b * a.Sk + j) * a.hdv + d];
        o[(b * a.Sq + i) * a.hdv + d] = acc / sum; // (0 / 0 where every key is masked)
      }
    }
  }
  out[0] = Tensor::fromVector(out[0].type(), o);
  out[1] = Tensor::fromVector(out[1].type(), lse);
  return ok();
}

llvm::Error refFlashAttentionGrad(const Node &n, const Inputs &in, Outputs &out) {
  const AttentionRef a(n, in.size() > 6 ? in[6] : nullptr, in.size() > 7 ? in[7] : nullptr);
  auto q = in[0]->toVector<double>(), k = in[1]->toVector<double>(), v = in[2]->toVector<double>(),
       o = in[3]->toVector<double>(), dO = in[4]->toVector<double>(),
       lse = in[5]->toVector<double>();
  std::vector<double> dq(q.size()), dk(k.size()), dv(v.size());
  for (int64_t b = 0; b < a.BH; ++b) {
    const std::vector<double> s = a.scores(q, k, b);
    for (int64_t i = 0; i < a.Sq; ++i) {
      const int64_t row = b * a.Sq + i;
      double D = 0;
      for (int64_t d = 0; d < a.hdv; ++d)
        D += dO[row * a.hdv + d] * o[row * a.hdv + d];
      for (int64_t j = 0; j < a.Sk; ++j) {
        // (A masked pair, -inf, contributes exactly nothing: also where its row has no
        // key left, whose LSE is -inf and whose D is NaN.)
        if (s[i * a.Sk + j] == -INFINITY)
          continue;
        const double p = std::exp(s[i * a.Sk + j] - lse[row]), z = a.keep(b, i, j);
        double dp = 0;
        for (int64_t d = 0; d < a.hdv; ++d) {
          dp += dO[row * a.hdv + d] * v[(b * a.Sk + j) * a.hdv + d];
          dv[(b * a.Sk + j) * a.hdv + d] += p * z * dO[row * a.hdv + d];
        }
        const double ds = p * (dp * z - D) * a.scale;
        for (int64_t d = 0; d < a.hd; ++d) {
          dq[row * a.hd + d] += ds * k[(b * a.Sk + j) * a.hd + d];
          dk[(b * a.Sk + j) * a.hd + d] += ds * q[row * a.hd + d];
        }
      }
    }
  }
  out[0] = Tensor::fromVector(out[0].type(), dq);
  out[1] = Tensor::fromVector(out[1].type(), dk);
  out[2] = Tensor::fromVector(out[2].type(), dv);
  return ok();
}

/// FlashAttention's gradient: one FlashAttentionGrad node (the log-sum-exp serves it
/// alone: no gradient flows through it).
llvm::Error gradFlashAttention(GradBuilder &b, const Node &n) {
  if (b.grad(1))
    return errorf("{0}: a gradient through its log-sum-exp result is not supported", n.describe());
  if (b.wants(3))
    return errorf("{0}: the gradient of its bias is not supported", n.describe());
  std::vector<Value *> operands = {n.operand(0), n.operand(1), n.operand(2),
                                   n.result(0),  b.grad(),     n.result(1)};
  for (unsigned i = 3; i < n.numOperands(); ++i) // (the bias, the step: null where absent)
    operands.push_back(n.operand(i));
  std::vector<Value *> d = b.ops(OpKind::FlashAttentionGrad, operands, n.attrs(), 3);
  for (unsigned i = 0; i < 3; ++i)
    if (b.wants(i))
      b.accumulate(i, d[i]);
  return ok();
}

/// A float MatMul is a library GEMM (cuBLASLt) that applies its own epilogue: bias,
/// residual, ReLU or tanh-GELU. Integer products have a kernel of their own.
Fusibility fusibleMatMul() {
  Fusibility f = Fusibility::anchor(/*prologue=*/false, /*epilogue=*/true);
  f.libraryEpilogue = true;
  f.opaqueWhen = [](const Node &n) { return !isFloat(n.result()->dtype()); };
  return f;
}

/// MatMulNBits(a [..., K], b u8 [N, blocks, block * bits / 8], scales [N * blocks],
/// zero points u8 [N * ceil(blocks * bits / 8)]?) {K, N, bits, block_size}.
llvm::Error verifyMatMulNBits(const Node &n) {
  if (auto e = requireType(n, 0, kFloat))
    return e;
  const int64_t K = n.attrInt("K"), N = n.attrInt("N"), bits = n.attrInt("bits"),
                block = n.attrInt("block_size");
  if (bits != 2 && bits != 4 && bits != 8)
    return errorf("bits must be 2, 4 or 8, got {0}", bits);
  if (K < 1 || N < 1 || K > (int64_t{1} << 31) || N > (int64_t{1} << 31) || block < 16 ||
      block > (int64_t{1} << 16) || (block & (block - 1)) != 0)
    return errorf("K and N must be in [1, 2^31] and block_size a power of 2 in [16, 65536], got "
                  "K {0}, N {1}, block_size {2}",
                  K, N, block);
  const Value *a = n.operand(0), *b = n.operand(1), *s = n.operand(2), *z = n.operand(3);
  if (a->rank() < 1 || a->shape().back() != K)
    return errorf("operand 0 must end in K = {0}, got {1}", K, a->type().str());
  const int64_t blocks = (K + block - 1) / block;
  if (b->dtype() != DType::U8 || b->shape() != Shape{N, blocks, block * bits / 8})
    return errorf("operand 1 must be u8[{0},{1},{2}], got {3}", N, blocks, block * bits / 8,
                  b->type().str());
  // (Kernels read the packed weights a 32-bit word at a time: a constant, aligned.)
  if (!b->isConstant())
    return errorf("operand 1 (the packed weights) must be a constant");
  if (!(s->dtype() == DType::F32 || s->dtype() == a->dtype()) || s->rank() != 1 ||
      s->shape()[0] != N * blocks)
    return errorf("operand 2 (the scales) must be [{0}] of f32 or the input's type, got {1}",
                  N * blocks, s->type().str());
  if (z && (z->dtype() != DType::U8 || z->shape() != Shape{N * ((blocks * bits + 7) / 8)}))
    return errorf("operand 3 (the zero points) must be u8[{0}], got {1}",
                  N * ((blocks * bits + 7) / 8), z->type().str());
  return ok();
}

InferResult inferMatMulNBits(const Node &n) {
  Shape s = n.operand(0)->shape();
  s.back() = n.attrInt("N");
  return TypeList{{n.operand(0)->dtype(), s}};
}

/// The dequantized weights times a, summed in double, rounded once to the result.
llvm::Error refMatMulNBits(const Node &n, const Inputs &in, Outputs &out) {
  const int64_t K = n.attrInt("K"), N = n.attrInt("N");
  const std::vector<float> w = matMulNBitsWeights(*in[1], *in[2], in.size() > 3 ? in[3] : nullptr,
                                                  K, N, n.attrInt("bits"), n.attrInt("block_size"));
  const std::vector<double> a = in[0]->toVector<double>();
  const int64_t rows = in[0]->numElements() / K;
  std::vector<double> y(static_cast<size_t>(rows * N), 0.0);
  for (int64_t m = 0; m < rows; ++m)
    for (int64_t k = 0; k < K; ++k) {
      const double av = a[static_cast<size_t>(m * K + k)];
      for (int64_t j = 0; j < N; ++j)
        y[static_cast<size_t>(m * N + j)] += av * w[static_cast<size_t>(k * N + j)];
    }
  out[0] = Tensor::fromVector(out[0].type(), y);
  return ok();
}

} // namespace

void defineLinalgOps(OpTable &t) {
  t.def(OpKind::MatMul)
      .operands(2)
      .fusible(fusibleMatMul())
      .fp16(Fp16Policy::Allow)
      .layout(LayoutRule::fixed())
      .verify(verifyMatMul)
      .infer(inferMatMul)
      .reference(refMatMul);
  t.def(OpKind::MatMulNBits)
      .operands(3, 4)
      .attr("K", AttrKind::Int)
      .attr("N", AttrKind::Int)
      .attr("bits", AttrKind::Int, int64_t{4})
      .attr("block_size", AttrKind::Int)
      .fusible(Fusibility::opaque())
      .fp16(Fp16Policy::Allow)
      .fp32Operands(0b100) // the scales as the file gives them, also in a reduced node
      .layout(LayoutRule::fixed())
      .verify(verifyMatMulNBits)
      .infer(inferMatMulNBits)
      .reference(refMatMulNBits);
  t.def(OpKind::Gemm)
      .operands(2, 3)
      .attr("alpha", AttrKind::Float, 1.0f)
      .attr("beta", AttrKind::Float, 1.0f)
      .attr("transA", AttrKind::Int, int64_t{0})
      .attr("transB", AttrKind::Int, int64_t{0})
      .fusible(Fusibility::opaque())
      .fp16(Fp16Policy::Allow)
      .layout(LayoutRule::fixed())
      .verify(verifyGemm)
      .infer(inferGemm)
      .reference(refGemm);
  for (OpKind k : {OpKind::FlashAttention, OpKind::FlashAttentionGrad})
    t.def(k)
        .operands(k == OpKind::FlashAttention ? 3 : 6, k == OpKind::FlashAttention ? 5 : 8)
        .results(k == OpKind::FlashAttention ? 2 : 3)
        .attr("scale", AttrKind::Float, 1.0f)
        .attr("causal", AttrKind::Int, int64_t{0})
        .attr("reach", AttrKind::Int, int64_t{0})
        .attr("dropout", AttrKind::Float, 0.0f)
        .attr("seed", AttrKind::Int, int64_t{0})
        .fusible(Fusibility::opaque())
        .fp16(Fp16Policy::Follow) // (created in FP16/BF16, after the precision pass)
        .layout(LayoutRule::fixed())
        .verify(k == OpKind::FlashAttention ? verifyFlashAttention : verifyFlashAttentionGrad)
        .infer(k == OpKind::FlashAttention ? inferFlashAttention : inferFlashAttentionGrad)
        .reference(k == OpKind::FlashAttention ? refFlashAttention : refFlashAttentionGrad);
  t[OpKind::FlashAttention].gradient = gradFlashAttention;
  t[OpKind::MatMul].gradient = gradMatMul;
  t[OpKind::Gemm].gradient = gradGemm;
}

} // namespace dlc::ir
