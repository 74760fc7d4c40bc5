//===- Linalg.cpp - MatMul and Gemm as library GEMM calls -----------------===//
//
// Floating-point products become GEMM steps (cuBLASLt on the GPU, OpenBLAS on
// emu), batched with strides when the batch dims allow it; batch dims that only
// broadcast partially are materialized first. Integer products (rare) get a plain
// kernel.
//===----------------------------------------------------------------------===//
#include "EmitterUtils.h"

namespace dlc::codegen {

using namespace ir;

namespace {

bool gemmType(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::F64;
}

/// Copies `v` broadcast to shape `to` into a new temporary.
BufferRef materializeBroadcast(Lowering &l, const Node &n, const Value *v, const Shape &to,
                               const std::string &what) {
  TensorType t(v->dtype(), to);
  BufferRef dst = l.temp(t.byteSize(), v->name() + "." + what);
  KernelBuilder kb(l, n, "bcast_" + what);
  std::string ip = kb.pointerTo(v), op = kb.pointer(v->dtype(), dst, false);
  int64_t total = t.numElements();
  {
    CodeStream::Block loop(kb.body(), gridStrideLoop("i", ll(total)));
    IndexMapper im(to);
    im.emitCoords(kb.body(), "i", "c");
    kb.body().line(op + "[i] = " + ip + "[" + im.broadcastIndex(v->shape(), "c") + "];");
  }
  uint64_t grid;
  uint32_t block;
  elementwiseLaunchShape(total, grid, block);
  kb.launch(grid, block);
  return dst;
}

/// Naive kernel for integer matrix products: one thread per output element.
void emitIntMatMul(Lowering &l, const Node &n, int64_t batch, int64_t m, int64_t k, int64_t nn,
                   int64_t strideA, int64_t strideB) {
  const Value *a = n.operand(0), *b = n.operand(1), *out = n.result();
  KernelBuilder kb(l, n, "int");
  std::string pa = kb.pointerTo(a), pb = kb.pointerTo(b), po = kb.outputPointer(out);
  std::string ct = computeType(out->dtype());
  int64_t total = batch * m * nn;
  {
    CodeStream::Block loop(kb.body(), gridStrideLoop("i", ll(total)));
    CodeStream &bd = kb.body();
    bd.line("const long long j = i % " + ll(nn) + ", r = (i / " + ll(nn) + ") % " + ll(m) +
            ", bt = i / " + ll(m * nn) + ";");
    bd.line(ct + " acc = 0;");
    bd.line("for (long long p = 0; p < " + ll(k) + "; ++p) acc += dlc::ld<" + ct + ">(" + pa +
            ", bt * " + ll(strideA) + " + r * " + ll(k) + " + p) * dlc::ld<" + ct + ">(" + pb +
            ", bt * " + ll(strideB) + " + p * " + ll(nn) + " + j);");
    bd.line("dlc::st(" + po + ", i, acc);");
  }
  uint64_t grid;
  uint32_t block;
  elementwiseLaunchShape(total, grid, block);
  kb.launch(grid, block);
}

llvm::Error lowerMatMul(Lowering &l, const Node &n) {
  const Value *a = n.operand(0), *b = n.operand(1), *out = n.result();
  Shape as = a->shape(), bs = b->shape();
  if (as.size() == 1)
    as.insert(as.begin(), 1);
  if (bs.size() == 1)
    bs.push_back(1);
  int64_t m = as[as.size() - 2], k = as.back(), nn = bs.back();
  Shape aB(as.begin(), as.end() - 2), bB(bs.begin(), bs.end() - 2);
  size_t rank = std::max(aB.size(), bB.size());
  Shape outB(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - aB.size() ? 1 : aB[i - (rank - aB.size())];
    int64_t db = i < rank - bB.size() ? 1 : bB[i - (rank - bB.size())];
    outB[i] = da == 1 ? db : da;
  }
  int64_t batch = product(outB), aBatch = product(aB), bBatch = product(bB);
  BufferRef c = l.allocate(out);
  if (batch * m * nn == 0)
    return llvm::Error::success();
  BufferRef ra = l.bufferOf(a), rb = l.bufferOf(b);
  auto padded = [&](const Shape &s) {
    Shape r(rank - s.size(), 1);
    r.insert(r.end(), s.begin(), s.end());
    return r;
  };
  int64_t strideA = m * k, strideB = k * nn;
  if (bBatch == 1 && aBatch == batch) {
    // B is shared: fold A's batch into M (one plain GEMM).
    m *= batch;
    batch = 1;
    strideA = strideB = 0;
  } else {
    if (aBatch == 1)
      strideA = 0;
    else if (padded(aB) != outB) {
      Shape full = outB;
      full.push_back(as[as.size() - 2]);
      full.push_back(k);
      ra = materializeBroadcast(l, n, a, full, "a");
    }
    if (bBatch == 1)
      strideB = 0;
    else if (padded(bB) != outB) {
      Shape full = outB;
      full.push_back(k);
      full.push_back(nn);
      rb = materializeBroadcast(l, n, b, full, "b");
    }
  }
  if (!gemmType(out->dtype())) {
    emitIntMatMul(l, n, batch, m, k, nn, strideA, strideB);
    return llvm::Error::success();
  }
  GemmStep g;
  g.dtype = out->dtype();
  g.m = m;
  g.n = nn;
  g.k = k;
  g.batch = batch;
  g.a = ra;
  g.b = rb;
  g.c = c;
  g.lda = k;
  g.ldb = nn;
  g.ldc = nn;
  g.strideA = strideA;
  g.strideB = strideB;
  g.strideC = batch > 1 ? m * nn : 0;
  g.alpha = 1;
  g.beta = 0;
  if (const auto &ep = l.gemmEpilogue()) {
    if (ep->bias)
      g.bias = l.bufferOf(ep->bias);
    if (ep->residual) {
      g.cIn = l.bufferOf(ep->residual);
      g.beta = 1;
    }
    g.activation = ep->activation;
  }
  l.addGemm(g, n);
  return llvm::Error::success();
}

/// Gemm: Y = C (broadcast, if given), then Y = alpha * op(A) op(B) + beta * Y.
llvm::Error lowerGemm(Lowering &l, const Node &n) {
  const Value *a = n.operand(0), *b = n.operand(1), *cIn = n.operand(2), *out = n.result();
  bool ta = n.attrInt("transA") != 0, tb = n.attrInt("transB") != 0;
  int64_t m = out->shape()[0], nn = out->shape()[1], k = ta ? a->shape()[0] : a->shape()[1];
  BufferRef y = l.allocate(out);
  if (m * nn == 0)
    return llvm::Error::success();
  float beta = n.attrFloat("beta");
  if (cIn && beta != 0.0f) {
    KernelBuilder kb(l, n, "init");
    std::string ip = kb.pointerTo(cIn), op = kb.outputPointer(out);
    {
      CodeStream::Block loop(kb.body(), gridStrideLoop("i", ll(m * nn)));
      IndexMapper im(out->shape());
      im.emitCoords(kb.body(), "i", "c");
      kb.body().line(op + "[i] = " + ip + "[" + im.broadcastIndex(cIn->shape(), "c") + "];");
    }
    uint64_t grid;
    uint32_t block;
    elementwiseLaunchShape(m * nn, grid, block);
    kb.launch(grid, block);
  } else {
    beta = 0;
  }
  if (!gemmType(out->dtype()))
    return errorf("Gemm on {0} is not supported by code generation", dtypeName(out->dtype()));
  GemmStep g;
  g.dtype = out->dtype();
  g.transA = ta;
  g.transB = tb;
  g.m = m;
  g.n = nn;
  g.k = k;
  g.a = l.bufferOf(a);
  g.b = l.bufferOf(b);
  g.c = y;
  g.lda = a->shape()[1];
  g.ldb = b->shape()[1];
  g.ldc = nn;
  g.alpha = n.attrFloat("alpha");
  g.beta = beta;
  l.addGemm(g, n);
  return llvm::Error::success();
}

} // namespace

llvm::Error lowerLinalg(Lowering &l, const Node &n) {
  switch (n.kind()) {
  case OpKind::MatMul: return lowerMatMul(l, n);
  case OpKind::Gemm: return lowerGemm(l, n);
  default: return errorf("no CUDA lowering for {0}", n.opName());
  }
}

} // namespace dlc::codegen
