//===- Norm.cpp - Batch, layer, instance and group normalization, LRN ------===//
//
// Inference BatchNormalization is a per-channel affine map (one element-wise
// kernel). The other normalizations reduce over rows: one block per row (or one
// thread per short row) computes the mean, then the variance around it (two
// passes, FP32 accumulation), then writes the normalized, scaled row.
//===----------------------------------------------------------------------===//
#include "EmitterUtils.h"

#include "../Fused.h"

namespace dlc::codegen {

using namespace ir;

namespace {

/// Emits y = (x - mean) * invstd * scale + bias over rows of `len` elements.
/// scaleIdx/biasIdx map (row, j) to the parameter index; optional mean/invstd outputs.
struct RowNorm {
  int64_t rows, len;
  double eps;
  std::string scaleIdx, biasIdx; // expressions in `row` and `j`
  const Value *x, *scale, *bias, *y, *meanOut = nullptr, *invOut = nullptr;
};

void emitRowNorm(Lowering &l, const Node &n, const RowNorm &r) {
  std::string ct = computeType(r.x->dtype());
  KernelBuilder kb(l, n, "");
  FusedAccess fa(l, kb, l.group());
  std::string sp = kb.pointerTo(r.scale);
  std::string bp = r.bias ? kb.pointerTo(r.bias) : "";
  std::string mp = r.meanOut ? kb.outputPointer(r.meanOut) : "";
  std::string vp = r.invOut ? kb.outputPointer(r.invOut) : "";
  CodeStream &b = kb.body();
  kb.setFlops(8.0 * r.rows * r.len);
  std::string len = ll(r.len);
  auto x = [&]() { return "(float)" + fa.load(b, r.x, "base + j"); };
  auto write = [&](const std::string &loopHead) {
    CodeStream::Block loop(b, loopHead);
    std::string v = "(" + x() + " - m) * inv * dlc::ld<float>(" + sp + ", " + r.scaleIdx + ")";
    if (r.bias)
      v += " + dlc::ld<float>(" + bp + ", " + r.biasIdx + ")";
    fa.store(b, r.y, "base + j", v);
  };
  auto stats = [&](const std::string &guard) {
    if (r.meanOut)
      b.line(guard + "dlc::st(" + mp + ", row, m);");
    if (r.invOut)
      b.line(guard + "dlc::st(" + vp + ", row, inv);");
  };
  if (r.len <= 64) {
    {
      CodeStream::Block loop(b, gridStrideLoop("row", ll(r.rows)));
      b.line("const long long base = row * " + len + ";");
      b.line("float m = 0;");
      {
        CodeStream::Block l1(b, "for (long long j = 0; j < " + len + "; ++j)");
        b.line("m += " + x() + ";");
      }
      b.line("m /= (float)" + len + ";");
      b.line("float v = 0;");
      {
        CodeStream::Block l2(b, "for (long long j = 0; j < " + len + "; ++j)");
        b.line("const float d = " + x() + " - m; v += d * d;");
      }
      b.line("const float inv = 1.0f / sqrtf(v / (float)" + len + " + " + literal(DType::F32, r.eps) + ");");
      write("for (long long j = 0; j < " + len + "; ++j)");
      stats("");
    }
    uint64_t grid;
    uint32_t block;
    elementwiseLaunchShape(r.rows, grid, block);
    kb.launch(grid, block);
    return;
  }
  kb.setNeedsSync();
  b.line("__shared__ float smem[32];");
  b.line("const long long row = blockIdx.x;");
  b.line("const long long base = row * " + len + ";");
  b.line("float m = 0;");
  {
    CodeStream::Block l1(b, "for (long long j = threadIdx.x; j < " + len + "; j += blockDim.x)");
    b.line("m += " + x() + ";");
  }
  b.line("m = dlc::blockReduce(m, dlc::SumOp(), 0.0f, smem) / (float)" + len + ";");
  b.line("float v = 0;");
  {
    CodeStream::Block l2(b, "for (long long j = threadIdx.x; j < " + len + "; j += blockDim.x)");
    b.line("const float d = " + x() + " - m; v += d * d;");
  }
  b.line("v = dlc::blockReduce(v, dlc::SumOp(), 0.0f, smem);");
  b.line("const float inv = 1.0f / sqrtf(v / (float)" + len + " + " + literal(DType::F32, r.eps) + ");");
  write("for (long long j = threadIdx.x; j < " + len + "; j += blockDim.x)");
  stats("if (threadIdx.x == 0) ");
  kb.launch(r.rows, 256);
}

llvm::Error lowerLayerNorm(Lowering &l, const Node &n) {
  const Value *x = n.operand(0);
  int64_t rank = x->rank(), axis = n.attrInt("axis");
  if (axis < 0)
    axis += rank;
  Shape norm(x->shape().begin() + axis, x->shape().end());
  RowNorm r;
  r.len = product(norm);
  r.rows = r.len ? x->type().numElements() / r.len : 0;
  r.eps = n.attrFloat("epsilon");
  r.x = x;
  r.scale = n.operand(1);
  r.bias = n.operand(2);
  r.y = n.result(0);
  l.allocate(r.y);
  if (n.numResults() > 1)
    l.allocate(r.meanOut = n.result(1));
  if (n.numResults() > 2)
    l.allocate(r.invOut = n.result(2));
  if (r.rows == 0 || r.len == 0)
    return llvm::Error::success();
  // The parameters broadcast over the normalized shape; index them from j.
  IndexMapper im(norm);
  auto paramIndex = [&](const Value *p) -> std::string {
    if (!p)
      return "0";
    if (p->shape() == norm)
      return "j";
    if (p->type().numElements() == 1)
      return "0";
    // General broadcast: decompose j with the normalized shape's strides.
    std::string s;
    Shape ns = stridesOf(norm), ps = stridesOf(p->shape());
    size_t off = norm.size() - p->shape().size();
    for (size_t d = off; d < norm.size(); ++d)
      if (p->shape()[d - off] != 1)
        s += (s.empty() ? "" : " + ") + std::string("((j / ") + ll(ns[d]) + ") % " + ll(norm[d]) + ") * " +
             ll(ps[d - off]);
    return s.empty() ? "0" : s;
  };
  r.scaleIdx = paramIndex(r.scale);
  r.biasIdx = paramIndex(r.bias);
  emitRowNorm(l, n, r);
  return llvm::Error::success();
}

llvm::Error lowerChannelNorm(Lowering &l, const Node &n) {
  const Value *x = n.operand(0);
  int64_t N = x->shape()[0], C = x->shape()[1], S = x->type().numElements() / std::max<int64_t>(N * C, 1);
  int64_t G = n.kind() == OpKind::GroupNormalization ? n.attrInt("num_groups") : C, cpg = C / G;
  RowNorm r;
  r.rows = N * G;
  r.len = cpg * S;
  r.eps = n.attrFloat("epsilon");
  r.x = x;
  r.scale = n.operand(1);
  r.bias = n.operand(2);
  r.y = n.result();
  l.allocate(r.y);
  if (r.rows == 0 || r.len == 0)
    return llvm::Error::success();
  r.scaleIdx = r.biasIdx = "(row % " + ll(G) + ") * " + ll(cpg) + " + j / " + ll(S);
  emitRowNorm(l, n, r);
  return llvm::Error::success();
}

llvm::Error lowerBatchNorm(Lowering &l, const Node &n) {
  if (n.attrInt("training_mode") == 0) // a per-channel affine map: a one-node fusion group
    return lowerInlineNode(l, n);
  const Value *x = n.operand(0), *y = n.result(0);
  int64_t N = x->shape()[0], C = x->shape()[1], S = x->type().numElements() / std::max<int64_t>(N * C, 1);
  int64_t total = x->type().numElements();
  l.allocate(y);
  bool training = n.attrInt("training_mode") != 0;
  if (training) {
    l.allocate(n.result(1));
    l.allocate(n.result(2));
  }
  if (total == 0)
    return llvm::Error::success();
  std::string eps = literal(DType::F32, n.attrFloat("epsilon"));
  KernelBuilder kb(l, n, "");
  std::string xp = kb.pointerTo(x), sp = kb.pointerTo(n.operand(1)), bp = kb.pointerTo(n.operand(2)),
              mp = kb.pointerTo(n.operand(3)), vp = kb.pointerTo(n.operand(4)), yp = kb.outputPointer(y);
  CodeStream &b = kb.body();
  kb.setFlops(4.0 * total);

  // Training: batch statistics per channel (one block per channel), running stats updated.
  std::string rmp = kb.outputPointer(n.result(1)), rvp = kb.outputPointer(n.result(2));
  std::string mom = literal(DType::F32, n.attrFloat("momentum"));
  kb.setNeedsSync();
  int64_t cnt = N * S;
  b.line("__shared__ float smem[32];");
  b.line("const long long c = blockIdx.x;");
  std::string at = "(j / " + ll(S) + ") * " + ll(C * S) + " + c * " + ll(S) + " + j % " + ll(S);
  b.line("float m = 0;");
  b.line("for (long long j = threadIdx.x; j < " + ll(cnt) + "; j += blockDim.x) m += dlc::ld<float>(" + xp + ", " + at + ");");
  b.line("m = dlc::blockReduce(m, dlc::SumOp(), 0.0f, smem) / (float)" + ll(cnt) + ";");
  b.line("float v = 0;");
  b.line("for (long long j = threadIdx.x; j < " + ll(cnt) + "; j += blockDim.x) { const float d = dlc::ld<float>(" + xp +
         ", " + at + ") - m; v += d * d; }");
  b.line("v = dlc::blockReduce(v, dlc::SumOp(), 0.0f, smem) / (float)" + ll(cnt) + ";");
  b.line("const float inv = 1.0f / sqrtf(v + " + eps + ");");
  b.line("for (long long j = threadIdx.x; j < " + ll(cnt) + "; j += blockDim.x) dlc::st(" + yp + ", " + at +
         ", (dlc::ld<float>(" + xp + ", " + at + ") - m) * inv * dlc::ld<float>(" + sp + ", c) + dlc::ld<float>(" + bp + ", c));");
  b.line("if (threadIdx.x == 0) { dlc::st(" + rmp + ", c, dlc::ld<float>(" + mp + ", c) * " + mom + " + m * (1.0f - " + mom +
         ")); dlc::st(" + rvp + ", c, dlc::ld<float>(" + vp + ", c) * " + mom + " + v * (1.0f - " + mom + ")); }");
  kb.launch(C, 256);
  return llvm::Error::success();
}

llvm::Error lowerLRN(Lowering &l, const Node &n) {
  const Value *x = n.operand(0), *y = n.result();
  int64_t N = x->shape()[0], C = x->shape()[1], S = x->type().numElements() / std::max<int64_t>(N * C, 1);
  int64_t total = x->type().numElements(), size = n.attrInt("size");
  int64_t lo = (size - 1) / 2, hi = (size - 1) - lo;
  l.allocate(y);
  if (total == 0)
    return llvm::Error::success();
  KernelBuilder kb(l, n, "");
  std::string xp = kb.pointerTo(x), yp = kb.outputPointer(y);
  CodeStream &b = kb.body();
  {
    CodeStream::Block loop(b, gridStrideLoop("i", ll(total)));
    b.line("const long long s = i % " + ll(S) + ", c = (i / " + ll(S) + ") % " + ll(C) + ", nb = i / " + ll(C * S) + ";");
    b.line("double sq = 0;");
    b.line("for (long long k = (c - " + ll(lo) + " < 0 ? 0 : c - " + ll(lo) + "); k <= (c + " + ll(hi) + " > " +
           ll(C - 1) + " ? " + ll(C - 1) + " : c + " + ll(hi) + "); ++k) { const double v = dlc::ld<double>(" + xp +
           ", (nb * " + ll(C) + " + k) * " + ll(S) + " + s); sq += v * v; }");
    b.line("dlc::st(" + yp + ", i, dlc::ld<double>(" + xp + ", i) / pow(" + literal(DType::F64, n.attrFloat("bias")) +
           " + " + literal(DType::F64, n.attrFloat("alpha")) + " / " + literal(DType::F64, static_cast<double>(size)) + " * sq, " +
           literal(DType::F64, n.attrFloat("beta")) + "));");
  }
  uint64_t grid;
  uint32_t block;
  elementwiseLaunchShape(total, grid, block);
  kb.launch(grid, block);
  return llvm::Error::success();
}

} // namespace

llvm::Error lowerNorm(Lowering &l, const Node &n) {
  switch (n.kind()) {
  case OpKind::BatchNormalization: return lowerBatchNorm(l, n);
  case OpKind::LayerNormalization: return lowerLayerNorm(l, n);
  case OpKind::InstanceNormalization:
  case OpKind::GroupNormalization: return lowerChannelNorm(l, n);
  case OpKind::LRN: return lowerLRN(l, n);
  default: return errorf("no CUDA lowering for {0}", n.opName());
  }
}

} // namespace dlc::codegen
