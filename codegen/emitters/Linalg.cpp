//===- Linalg.cpp - MatMul and Gemm as library GEMM calls -----------------===//
//
// Floating-point products become GEMM steps (cuBLASLt on the GPU, OpenBLAS on
// emu), batched with strides when the batch dims allow it; batch dims that only
// broadcast partially are materialized first. Integer products (rare) get a plain
// kernel.
//===----------------------------------------------------------------------===//
#include "../Library.h"
#include "EmitterUtils.h"

#include <cstddef>

namespace dlc::codegen {

using namespace ir;

namespace {

bool gemmType(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::F64;
}

/// Numpy-broadcast strides of a tensor of shape `in` viewed as shape `to`.
std::vector<int64_t> broadcastStrides(const Shape &in, const Shape &to) {
  std::vector<int64_t> s(to.size(), 0);
  Shape st = stridesOf(in);
  size_t off = to.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i)
    s[off + i] = in[i] == 1 ? 0 : st[i];
  return s;
}

/// Copies `v` broadcast to shape `to` into a new temporary.
llvm::Expected<BufferRef> materializeBroadcast(Lowering &l, const Node &n, const Value *v,
                                               const Shape &to, const std::string &what) {
  TensorType t(v->dtype(), to);
  BufferRef dst = l.temp(t.byteSize(), v->name() + "." + what);
  if (auto e = emitStridedCopy(l, n, v, 0, dst, t.byteSize(), to, broadcastStrides(v->shape(), to)))
    return e;
  return dst;
}

/// Integer matrix products: the matmul_int template, one thread per output element.
void emitIntMatMul(Lowering &l, const Node &n, int64_t batch, int64_t m, int64_t k, int64_t nn,
                   int64_t strideA, int64_t strideB) {
  const Value *a = n.operand(0), *b = n.operand(1), *out = n.result();
  int64_t total = batch * m * nn;
  MiscShape s{};
  s.total = total;
  s.n0 = m;
  s.n1 = k;
  s.n2 = nn;
  s.n3 = strideA;
  s.n4 = strideB;
  s.d0 = Divmod::make(nn);
  s.d1 = Divmod::make(m);
  LaunchArgs args;
  args.shape(s);
  args.pointer(offsetof(MiscShape, a), l.bufferOf(a), a->type().byteSize(), false);
  args.pointer(offsetof(MiscShape, b), l.bufferOf(b), b->type().byteSize(), false);
  args.pointer(offsetof(MiscShape, y), l.bufferOf(out), out->type().byteSize(), true);
  int64_t maxIndex = std::max({total, a->type().numElements(), b->type().numElements(),
                               batch * strideA + m * k, batch * strideB + k * nn});
  std::vector<std::string> targs = {l.indexType(maxIndex), cudaType(out->dtype())};
  if (a->dtype() != out->dtype()) // (int8 operands, int32 sums)
    targs.push_back(cudaType(a->dtype()));
  Instantiation inst{"dlc::matmul_int", targs, "dlc::MiscShape", {}};
  inst.integer = true;
  uint32_t kernel = l.instantiate(inst);
  l.launch(n, kernel, args, gridFor(total, 256), 256, 0, 2.0 * total * k);
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
      auto r = materializeBroadcast(l, n, a, full, "a");
      if (!r)
        return r.takeError();
      ra = *r;
    }
    if (bBatch == 1)
      strideB = 0;
    else if (padded(bB) != outB) {
      Shape full = outB;
      full.push_back(k);
      full.push_back(nn);
      auto r = materializeBroadcast(l, n, b, full, "b");
      if (!r)
        return r.takeError();
      rb = *r;
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
  // A GEMM-epilogue group: the library applies bias, residual and activation.
  if (const FusionGroup *fg = l.group(); fg && fg->kind == GroupKind::GemmEpilogue) {
    if (fg->bias)
      g.bias = l.bufferOf(fg->bias);
    if (fg->residual) {
      g.cIn = l.bufferOf(fg->residual);
      g.beta = 1;
    }
    g.activation = fg->activation == GemmEpilogueOp::Relu       ? pkg::GemmActivation::Relu
                   : fg->activation == GemmEpilogueOp::GeluTanh ? pkg::GemmActivation::GeluTanh
                                                                : pkg::GemmActivation::None;
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
    if (auto e = emitStridedCopy(l, n, cIn, 0, l.bufferOf(out), out->type().byteSize(),
                                 out->shape(), broadcastStrides(cIn->shape(), out->shape())))
      return e;
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

/// MatMulNBits: matmul_nbits, a warp per column and up to 4 rows per launch row, the
/// weights read as they are packed (16-byte loads where a column is whole 16 bytes).
llvm::Error lowerMatMulNBits(Lowering &l, const Node &n) {
  const Value *a = n.operand(0), *b = n.operand(1), *sc = n.operand(2), *z = n.operand(3),
              *out = n.result();
  const int64_t K = n.attrInt("K"), N = n.attrInt("N"), bits = n.attrInt("bits"),
                block = n.attrInt("block_size"), blocks = (K + block - 1) / block,
                rows = a->type().numElements() / K;
  l.allocate(out);
  if (rows == 0)
    return llvm::Error::success();
  NBitsShape s{};
  s.rows = rows;
  s.K = K;
  s.N = N;
  s.blocks = blocks;
  s.block = block;
  s.rowWords = blocks * block * bits / 8 / 4;
  s.zpBytes = (blocks * bits + 7) / 8;
  for (int64_t words = block * bits / 32; words > 1; words >>= 1) // (block is a power of 2)
    ++s.blockShift;
  const int vec = s.rowWords % 4 == 0 && fixedAligned(l, b, 16) ? 4 : 1;
  // (A word's 32 / bits activations in one load: K whole words, and a aligned to them.)
  const int64_t perWord = 32 / bits;
  const bool avec = K % perWord == 0 &&
                    fixedAligned(l, a, static_cast<uint64_t>(perWord * dtypeSize(a->dtype())));
  const int64_t mr = rows >= 4 ? 4 : rows >= 2 ? 2 : 1;
  LaunchArgs args;
  args.shape(s);
  args.pointer(offsetof(NBitsShape, a), l.bufferOf(a), a->type().byteSize(), false);
  args.pointer(offsetof(NBitsShape, b), l.bufferOf(b), b->type().byteSize(), false);
  args.pointer(offsetof(NBitsShape, scales), l.bufferOf(sc), sc->type().byteSize(), false);
  if (z)
    args.pointer(offsetof(NBitsShape, zeros), l.bufferOf(z), z->type().byteSize(), false);
  args.pointer(offsetof(NBitsShape, y), l.bufferOf(out), out->type().byteSize(), true);
  const int64_t maxIndex =
      std::max({a->type().numElements(), out->type().numElements(), N * s.rowWords, N * blocks});
  Instantiation inst{"dlc::matmul_nbits",
                     {std::to_string(bits), std::to_string(mr), std::to_string(vec),
                      avec ? "true" : "false", (block * bits / 32) % vec == 0 ? "true" : "false",
                      l.indexType(maxIndex), cudaType(a->dtype()), cudaType(sc->dtype())},
                     "dlc::NBitsShape",
                     {}};
  inst.needsSync = true; // (the warp reduction)
  uint32_t kernel = l.instantiate(inst);
  // (8 warps, 8 columns, per block; a launch row per mr rows.)
  const int64_t rowTiles = (rows + mr - 1) / mr;
  if (rowTiles > 65535)
    return makeError("MatMulNBits with " + std::to_string(rows) + " rows: too many for a launch");
  l.launch(n, kernel, args, static_cast<uint32_t>((N + 7) / 8), 256, 0,
           2.0 * static_cast<double>(rows) * static_cast<double>(K) * static_cast<double>(N),
           static_cast<uint32_t>(rowTiles));
  return llvm::Error::success();
}

} // namespace

void registerLinalgLowerings(LoweringRegistry &r) {
  r.op(OpKind::MatMulNBits, lowerMatMulNBits);
  r.op(OpKind::MatMul, lowerMatMul);
  r.op(OpKind::Gemm, lowerGemm);
}

} // namespace dlc::codegen
