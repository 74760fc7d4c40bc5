//===- Linalg.cpp - MatMul and Gemm ----------------------------------------===//
#include "OpUtils.h"

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

InferResult inferMatMul(const Node &n) {
  auto d = matmulDims(n.operand(0)->shape(), n.operand(1)->shape());
  if (!d)
    return d.takeError();
  return TypeList{{n.operand(0)->dtype(), d->result}};
}

llvm::Error refMatMul(const Node &, const Inputs &in, Outputs &out) {
  auto d = matmulDims(in[0]->shape(), in[1]->shape());
  if (!d)
    return d.takeError();
  return dispatch(in[0]->dtype(), [&](auto ct) -> llvm::Error {
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

/// A float MatMul is a library GEMM (cuBLASLt) that applies its own epilogue: bias,
/// residual, ReLU or tanh-GELU. Integer products have a kernel of their own.
Fusibility fusibleMatMul() {
  Fusibility f = Fusibility::anchor(/*prologue=*/false, /*epilogue=*/true);
  f.libraryEpilogue = true;
  f.opaqueWhen = [](const Node &n) { return !isFloat(n.result()->dtype()); };
  return f;
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
  t[OpKind::MatMul].gradient = gradMatMul;
  t[OpKind::Gemm].gradient = gradGemm;
}

} // namespace dlc::ir
