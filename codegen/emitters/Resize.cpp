//===- Resize.cpp - Resampling through compile-time tap tables -------------===//
//
// The taps (input index and weight per output coordinate and dim) come from
// ir::resizeTapTable, the same function the reference uses, and are stored as
// constant tables; the kernel sums the separable product of the taps.
//===----------------------------------------------------------------------===//
#include "EmitterUtils.h"

#include "dlc/ir/OpHelpers.h"

#include <cstring>

namespace dlc::codegen {

using namespace ir;

llvm::Error lowerResize(Lowering &l, const Node &n) {
  const Value *x = n.operand(0), *y = n.result();
  int64_t rank = x->rank(), total = y->type().numElements();
  l.allocate(y);
  if (!total)
    return llvm::Error::success();
  auto table = resizeTapTable(n);
  size_t maxTaps = 1;
  for (const auto &dim : table)
    for (const auto &t : dim)
      maxTaps = std::max(maxTaps, t.size());
  KernelBuilder kb(l, n, "");
  std::string xp = kb.pointerTo(x), yp = kb.outputPointer(y);
  std::vector<std::string> idxTab(rank), wTab(rank), cntTab(rank);
  for (int64_t d = 0; d < rank; ++d) {
    int64_t od = y->shape()[d];
    std::vector<int32_t> idx(od * maxTaps, 0), cnt(od);
    std::vector<float> w(od * maxTaps, 0.f);
    for (int64_t o = 0; o < od; ++o) {
      cnt[o] = static_cast<int64_t>(table[d][o].size());
      for (size_t t = 0; t < table[d][o].size(); ++t) {
        idx[o * maxTaps + t] = table[d][o][t].index;
        w[o * maxTaps + t] = static_cast<float>(table[d][o][t].weight);
      }
    }
    std::string tag = y->name() + ".taps" + std::to_string(d);
    auto i32 = [](const std::vector<int32_t> &v, int64_t n) {
      Tensor t(TensorType(DType::I32, {n}));
      std::memcpy(t.mutableRaw(), v.data(), v.size() * 4);
      return t;
    };
    idxTab[d] = kb.pointer(DType::I32, l.constantBuffer(i32(idx, od * int64_t(maxTaps)), tag + ".index"), true);
    wTab[d] = kb.pointer(DType::F32, l.constantBuffer(Tensor::fromVector(TensorType(DType::F32, {od * int64_t(maxTaps)}), w), tag + ".weight"), true);
    cntTab[d] = kb.pointer(DType::I32, l.constantBuffer(i32(cnt, od), tag + ".count"), true);
  }
  Shape st = stridesOf(x->shape());
  CodeStream &b = kb.body();
  std::string extrapolation = literal(DType::F32, n.attrFloat("extrapolation_value"));
  {
    CodeStream::Block loop(b, gridStrideLoop("i", ll(total)));
    IndexMapper(y->shape()).emitCoords(b, "i", "c");
    b.line("bool outside = false;");
    for (int64_t d = 0; d < rank; ++d)
      b.line("const int n" + std::to_string(d) + " = " + cntTab[d] + "[c" + std::to_string(d) + "]; outside |= n" +
             std::to_string(d) + " == 0;");
    b.line("float acc = 0;");
    b.line("if (!outside) {");
    for (int64_t d = 0; d < rank; ++d) {
      std::string t = "t" + std::to_string(d), c = "c" + std::to_string(d), m = ll(static_cast<int64_t>(maxTaps));
      b.line("for (int " + t + " = 0; " + t + " < n" + std::to_string(d) + "; ++" + t + ") {");
      b.line("const long long x" + std::to_string(d) + " = " + idxTab[d] + "[" + c + " * " + m + " + " + t + "];");
      b.line("const float w" + std::to_string(d) + " = " + wTab[d] + "[" + c + " * " + m + " + " + t + "]" +
             (d ? " * w" + std::to_string(d - 1) : "") + ";");
    }
    std::string off;
    for (int64_t d = 0; d < rank; ++d)
      off += (d ? " + " : "") + std::string("x") + std::to_string(d) + " * " + ll(st[d]);
    b.line("acc += w" + std::to_string(rank - 1) + " * dlc::ld<float>(" + xp + ", " + off + ");");
    b.line(std::string(rank, '}') + "}");
    b.line("else acc = " + extrapolation + ";");
    if (isFloat(y->dtype()))
      b.line("dlc::st(" + yp + ", i, acc);");
    else
      b.line("dlc::st(" + yp + ", i, rintf(acc));");
  }
  uint64_t grid;
  uint32_t block;
  elementwiseLaunchShape(total, grid, block);
  kb.launch(grid, block);
  return llvm::Error::success();
}

} // namespace dlc::codegen
