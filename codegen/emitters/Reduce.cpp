//===- Reduce.cpp - Reductions, softmax family, arg/top-k, cumulative sums -===//
//
// Long reductions use one block per output element: threads stride over the
// reduced positions, then a warp-shuffle + shared-memory block reduction (FP32
// accumulation for f16/bf16). Short ones (<= 64 elements) use one thread per
// output and no synchronization. Softmax-like ops reduce along one axis, viewed
// as [outer, len, inner].
//===----------------------------------------------------------------------===//
#include "EmitterUtils.h"

#include "../Fused.h"

namespace dlc::codegen {

using namespace ir;

namespace {

constexpr int64_t kShortReduction = 64;

uint32_t blockFor(int64_t len) {
  uint32_t b = 32;
  while (b < 256 && b < len)
    b *= 2;
  return b;
}

/// Splits x's dims into kept (output) and reduced ones; returns index expressions
/// for an output linear index `o` and a reduction linear index `r`.
struct ReduceView {
  Shape kept, reduced;
  std::vector<int64_t> keptStride, reducedStride; // strides into x
  int64_t outCount = 1, len = 1;

  ReduceView(const Shape &x, const std::vector<bool> &red) {
    Shape st = stridesOf(x);
    for (size_t d = 0; d < x.size(); ++d) {
      if (red[d]) {
        reduced.push_back(x[d]);
        reducedStride.push_back(st[d]);
        len *= x[d];
      } else {
        kept.push_back(x[d]);
        keptStride.push_back(st[d]);
        outCount *= x[d];
      }
    }
  }
  /// Declares `name` = input offset of output element `o`.
  void emitBase(CodeStream &b, const std::string &o, const std::string &name) const {
    IndexMapper im(kept);
    im.emitCoords(b, o, "k");
    b.line("const long long " + name + " = " + im.dot(keptStride, "k") + ";");
  }
  /// Expression of the offset of reduction position `r` (declares coords first).
  std::string emitInner(CodeStream &b, const std::string &r) const {
    IndexMapper im(reduced);
    im.emitCoords(b, r, "q");
    return im.dot(reducedStride, "q");
  }
};

std::vector<bool> reducedAxes(const Node &n) {
  int64_t rank = n.operand(0)->rank();
  std::vector<bool> red(rank, false);
  const auto &axes = n.attrInts("axes");
  if (axes.empty()) {
    if (n.attrInt("noop_with_empty_axes") == 0)
      red.assign(rank, true);
  } else {
    for (int64_t a : axes)
      red[a < 0 ? a + rank : a] = true;
  }
  return red;
}

llvm::Error lowerReduction(Lowering &l, const Node &n) {
  const Value *x = n.operand(0), *out = n.result();
  ReduceView rv(x->shape(), reducedAxes(n));
  l.allocate(out);
  if (rv.outCount == 0)
    return llvm::Error::success();
  DType dt = x->dtype();
  std::string ct = computeType(dt);
  std::string op, identity;
  switch (n.kind()) {
  case OpKind::ReduceSum:
  case OpKind::ReduceMean: op = "dlc::SumOp()"; identity = "(" + ct + ")0"; break;
  case OpKind::ReduceProd: op = "dlc::ProdOp()"; identity = "(" + ct + ")1"; break;
  case OpKind::ReduceMax:
    op = "dlc::MaxOp()";
    identity = isFloat(dt) ? "-(" + ct + ")(1.0 / 0.0)" : (isSignedInt(dt) ? "(-9223372036854775807LL - 1)" : "0ULL");
    break;
  case OpKind::ReduceMin:
    op = "dlc::MinOp()";
    identity = isFloat(dt) ? "(" + ct + ")(1.0 / 0.0)"
                           : (isSignedInt(dt) ? "9223372036854775807LL" : "18446744073709551615ULL");
    break;
  default: return errorf("no CUDA lowering for {0}", n.opName());
  }
  bool mean = n.kind() == OpKind::ReduceMean;
  KernelBuilder kb(l, n, "");
  FusedAccess fa(l, kb, l.group());
  CodeStream &b = kb.body();
  std::string finish = mean && rv.len ? "acc / (" + ct + ")" + ll(rv.len) : "acc";
  kb.setFlops(static_cast<double>(x->type().numElements()));
  if (rv.len <= kShortReduction) {
    {
      CodeStream::Block loop(b, gridStrideLoop("o", ll(rv.outCount)));
      rv.emitBase(b, "o", "base");
      b.line(ct + " acc = " + identity + ";");
      {
        CodeStream::Block inner(b, "for (long long r = 0; r < " + ll(rv.len) + "; ++r)");
        std::string off = rv.emitInner(b, "r");
        b.line("acc = " + op + "(acc, " + fa.load(b, x, "base + " + off) + ");");
      }
      fa.store(b, out, "o", finish);
    }
    uint64_t grid;
    uint32_t block;
    elementwiseLaunchShape(rv.outCount, grid, block);
    kb.launch(grid, block);
    return llvm::Error::success();
  }
  uint32_t block = blockFor(rv.len);
  kb.setNeedsSync();
  b.line("__shared__ " + ct + " smem[32];");
  b.line("const long long o = blockIdx.x;");
  rv.emitBase(b, "o", "base");
  b.line(ct + " acc = " + identity + ";");
  {
    CodeStream::Block inner(b, "for (long long r = threadIdx.x; r < " + ll(rv.len) + "; r += blockDim.x)");
    std::string off = rv.emitInner(b, "r");
    b.line("acc = " + op + "(acc, " + fa.load(b, x, "base + " + off) + ");");
  }
  b.line("acc = dlc::blockReduce(acc, " + op + ", " + identity + ", smem);");
  {
    CodeStream::Block first(b, "if (threadIdx.x == 0)");
    fa.store(b, out, "o", finish);
  }
  kb.launch(rv.outCount, block);
  return llvm::Error::success();
}

/// [outer, len, inner] view of a one-axis op.
struct AxisView {
  int64_t outer = 1, len = 1, inner = 1;
  AxisView(const Shape &s, int64_t axis) {
    for (int64_t i = 0; i < axis; ++i)
      outer *= s[i];
    len = s[axis];
    for (size_t i = axis + 1; i < s.size(); ++i)
      inner *= s[i];
  }
};

int64_t axisOf(const Node &n) {
  int64_t a = n.attrInt("axis"), r = n.operand(0)->rank();
  return a < 0 ? a + r : a;
}

/// Softmax, LogSoftmax, Hardmax along `axis`: max, sum of exponentials, write.
llvm::Error lowerSoftmaxLike(Lowering &l, const Node &n) {
  const Value *x = n.operand(0), *out = n.result();
  AxisView v(x->shape(), axisOf(n));
  l.allocate(out);
  int64_t rows = v.outer * v.inner;
  if (rows == 0 || v.len == 0)
    return llvm::Error::success();
  std::string ct = computeType(x->dtype());
  KernelBuilder kb(l, n, "");
  FusedAccess fa(l, kb, l.group());
  CodeStream &b = kb.body();
  kb.setFlops(5.0 * static_cast<double>(x->type().numElements()));
  std::string at = "(row / " + ll(v.inner) + ") * " + ll(v.len * v.inner) + " + row % " + ll(v.inner);
  std::string idx = "base + j * " + ll(v.inner);
  bool hard = n.kind() == OpKind::Hardmax, log = n.kind() == OpKind::LogSoftmax;
  auto ld = [&](const std::string &i) { return fa.load(b, x, i); };
  // Each pass over the row re-evaluates x (and any fused prologue) in its own loop.
  auto rowLoop = [&](const std::string &head, const std::function<void()> &body) {
    CodeStream::Block loop(b, head);
    body();
  };
  if (hard || v.len <= kShortReduction) {
    // One thread per row; Hardmax keeps the first maximum.
    {
      CodeStream::Block loop(b, gridStrideLoop("row", ll(rows)));
      b.line("const long long base = " + at + ";");
      std::string len = ll(v.len);
      if (hard) {
        b.line("long long best = 0;");
        b.line(ct + " bestv = " + ld("base") + ";");
        rowLoop("for (long long j = 1; j < " + len + "; ++j)", [&] {
          std::string w = ld(idx);
          b.line("if (" + w + " > bestv) { bestv = " + w + "; best = j; }");
        });
        rowLoop("for (long long j = 0; j < " + len + "; ++j)",
                [&] { fa.store(b, out, idx, "(" + ct + ")(j == best ? 1 : 0)"); });
      } else {
        b.line(ct + " m = -(" + ct + ")(1.0 / 0.0);");
        rowLoop("for (long long j = 0; j < " + len + "; ++j)", [&] { b.line("m = dlc::maxNan(m, " + ld(idx) + ");"); });
        b.line(ct + " s = 0;");
        rowLoop("for (long long j = 0; j < " + len + "; ++j)", [&] { b.line("s += dlc::exp_(" + ld(idx) + " - m);"); });
        if (log)
          b.line("const " + ct + " ls = dlc::log_(s);");
        rowLoop("for (long long j = 0; j < " + len + "; ++j)", [&] {
          std::string w = ld(idx);
          fa.store(b, out, idx, log ? w + " - m - ls" : "dlc::exp_(" + w + " - m) / s");
        });
      }
    }
    uint64_t grid;
    uint32_t block;
    elementwiseLaunchShape(rows, grid, block);
    kb.launch(grid, block);
    return llvm::Error::success();
  }
  kb.setNeedsSync();
  std::string len = ll(v.len);
  b.line("__shared__ " + ct + " smem[32];");
  b.line("const long long row = blockIdx.x;");
  b.line("const long long base = " + at + ";");
  b.line(ct + " m = -(" + ct + ")(1.0 / 0.0);");
  rowLoop("for (long long j = threadIdx.x; j < " + len + "; j += blockDim.x)",
          [&] { b.line("m = dlc::maxNan(m, " + ld(idx) + ");"); });
  b.line("m = dlc::blockReduce(m, dlc::MaxOp(), -(" + ct + ")(1.0 / 0.0), smem);");
  b.line(ct + " s = 0;");
  rowLoop("for (long long j = threadIdx.x; j < " + len + "; j += blockDim.x)",
          [&] { b.line("s += dlc::exp_(" + ld(idx) + " - m);"); });
  b.line("s = dlc::blockReduce(s, dlc::SumOp(), (" + ct + ")0, smem);");
  if (log)
    b.line("const " + ct + " ls = dlc::log_(s);");
  rowLoop("for (long long j = threadIdx.x; j < " + len + "; j += blockDim.x)", [&] {
    std::string w = ld(idx);
    fa.store(b, out, idx, log ? w + " - m - ls" : "dlc::exp_(" + w + " - m) / s");
  });
  kb.launch(rows, blockFor(v.len));
  return llvm::Error::success();
}

/// ArgMax / ArgMin: one thread per output, the reference's scan order and ties.
llvm::Error lowerArg(Lowering &l, const Node &n) {
  const Value *x = n.operand(0), *out = n.result();
  AxisView v(x->shape(), axisOf(n));
  l.allocate(out);
  int64_t rows = v.outer * v.inner;
  if (rows == 0)
    return llvm::Error::success();
  bool isMax = n.kind() == OpKind::ArgMax, last = n.attrInt("select_last_index") != 0;
  std::string ct = computeType(x->dtype());
  KernelBuilder kb(l, n, "");
  std::string ip = kb.pointerTo(x), op = kb.outputPointer(out);
  CodeStream &b = kb.body();
  {
    CodeStream::Block loop(b, gridStrideLoop("row", ll(rows)));
    b.line("const long long base = (row / " + ll(v.inner) + ") * " + ll(v.len * v.inner) + " + row % " +
           ll(v.inner) + ";");
    b.line("long long best = 0;");
    b.line(ct + " bv = dlc::ld<" + ct + ">(" + ip + ", base);");
    std::string cmp = isMax ? ">" : "<";
    b.line("for (long long j = 1; j < " + ll(v.len) + "; ++j) { const " + ct + " w = dlc::ld<" + ct + ">(" +
           ip + ", base + j * " + ll(v.inner) + "); if (w " + cmp + " bv" + (last ? " || w == bv" : "") +
           ") { bv = w; best = j; } }");
    b.line(op + "[row] = best;");
  }
  uint64_t grid;
  uint32_t block;
  elementwiseLaunchShape(rows, grid, block);
  kb.launch(grid, block);
  return llvm::Error::success();
}

/// TopK by rank: element j of a row goes to position rank(j) when rank(j) < k, where
/// rank counts the elements that precede it (better value, or equal and lower index).
llvm::Error lowerTopK(Lowering &l, const Node &n) {
  const Value *x = n.operand(0);
  AxisView v(x->shape(), axisOf(n));
  int64_t k = n.attrInt("k");
  bool largest = n.attrInt("largest") != 0;
  l.allocate(n.result(0));
  l.allocate(n.result(1));
  int64_t total = v.outer * v.len * v.inner;
  if (total == 0 || k == 0)
    return llvm::Error::success();
  std::string ct = computeType(x->dtype());
  KernelBuilder kb(l, n, "");
  std::string ip = kb.pointerTo(x), vo = kb.outputPointer(n.result(0)), io = kb.outputPointer(n.result(1));
  CodeStream &b = kb.body();
  std::string better = largest ? ">" : "<";
  {
    CodeStream::Block loop(b, gridStrideLoop("e", ll(total)));
    b.line("const long long o = e / " + ll(v.len * v.inner) + ", j = (e / " + ll(v.inner) + ") % " +
           ll(v.len) + ", in = e % " + ll(v.inner) + ";");
    b.line("const long long base = o * " + ll(v.len * v.inner) + " + in;");
    b.line("const " + ct + " me = dlc::ld<" + ct + ">(" + ip + ", base + j * " + ll(v.inner) + ");");
    b.line("long long rank = 0;");
    b.line("for (long long t = 0; t < " + ll(v.len) + "; ++t) { const " + ct + " w = dlc::ld<" + ct + ">(" +
           ip + ", base + t * " + ll(v.inner) + "); rank += (w " + better + " me) || (w == me && t < j); }");
    b.line("if (rank < " + ll(k) + ") { const long long dst = o * " + ll(k * v.inner) + " + rank * " +
           ll(v.inner) + " + in; " + vo + "[dst] = " + ip + "[base + j * " + ll(v.inner) + "]; " + io +
           "[dst] = j; }");
  }
  uint64_t grid;
  uint32_t block;
  elementwiseLaunchShape(total, grid, block);
  kb.launch(grid, block);
  return llvm::Error::success();
}

llvm::Error lowerCumSum(Lowering &l, const Node &n) {
  const Value *x = n.operand(0), *out = n.result();
  AxisView v(x->shape(), axisOf(n));
  l.allocate(out);
  int64_t rows = v.outer * v.inner;
  if (rows == 0 || v.len == 0)
    return llvm::Error::success();
  bool exclusive = n.attrInt("exclusive") != 0, reverse = n.attrInt("reverse") != 0;
  DType dt = x->dtype();
  std::string acct = isFloat(dt) ? "double" : computeType(dt);
  KernelBuilder kb(l, n, "");
  std::string ip = kb.pointerTo(x), op = kb.outputPointer(out);
  CodeStream &b = kb.body();
  {
    CodeStream::Block loop(b, gridStrideLoop("row", ll(rows)));
    b.line("const long long base = (row / " + ll(v.inner) + ") * " + ll(v.len * v.inner) + " + row % " +
           ll(v.inner) + ";");
    b.line(acct + " acc = 0;");
    CodeStream::Block inner(b, "for (long long s = 0; s < " + ll(v.len) + "; ++s)");
    b.line("const long long j = " + std::string(reverse ? ll(v.len - 1) + " - s" : "s") + ";");
    b.line("const long long at = base + j * " + ll(v.inner) + ";");
    b.line("const " + acct + " w = dlc::ld<" + acct + ">(" + ip + ", at);");
    if (exclusive)
      b.line("dlc::st(" + op + ", at, acc); acc += w;");
    else
      b.line("acc += w; dlc::st(" + op + ", at, acc);");
  }
  uint64_t grid;
  uint32_t block;
  elementwiseLaunchShape(rows, grid, block);
  kb.launch(grid, block);
  return llvm::Error::success();
}

} // namespace

llvm::Error lowerReduce(Lowering &l, const Node &n) {
  switch (n.kind()) {
  case OpKind::ReduceMean:
  case OpKind::ReduceSum:
  case OpKind::ReduceMax:
  case OpKind::ReduceMin:
  case OpKind::ReduceProd: return lowerReduction(l, n);
  case OpKind::Softmax:
  case OpKind::LogSoftmax:
  case OpKind::Hardmax: return lowerSoftmaxLike(l, n);
  case OpKind::ArgMax:
  case OpKind::ArgMin: return lowerArg(l, n);
  case OpKind::TopK: return lowerTopK(l, n);
  case OpKind::CumSum: return lowerCumSum(l, n);
  default: return errorf("no CUDA lowering for {0}", n.opName());
  }
}

} // namespace dlc::codegen
