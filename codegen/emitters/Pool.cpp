//===- Pool.cpp - Max/average pooling and global pooling ------------------===//
//
// Window pooling is the pool_window template (one thread per output, the window
// normalized to 3-D like the reference), MaxPool's gradient pool_max_grad (a gather
// over the windows that cover each input element); global pooling is a reduction over the
// spatial dims of each (n, c) (the reduce template, contiguous rows).
//===----------------------------------------------------------------------===//
#include "../Fused.h"
#include "Window.h"

#include <cstddef>

namespace dlc::codegen {

using namespace ir;

llvm::Error lowerGlobalReduction(Lowering &l, const Node &n, const Value *x, const Value *out,
                                 int64_t images, int64_t channels, int64_t len, bool channelsLast,
                                 const char *kind);

namespace {

llvm::Error lowerWindowPool(Lowering &l, const Node &n) {
  const Value *x = n.operand(0), *y = n.result(0);
  bool isMax = n.kind() == OpKind::MaxPool, cl = n.attrInt("channels_last") != 0;
  const Shape xs = cl ? channelsFirst(x) : x->shape();
  Window3 w = windowOf(n, xs, cl ? channelsFirst(y) : y->shape(), n.attrInts("kernel_shape"));
  l.allocate(y);
  bool withIdx = n.numResults() > 1;
  if (withIdx)
    l.allocate(n.result(1));
  int64_t total = y->type().numElements();
  if (total == 0)
    return llvm::Error::success();
  PoolShape s{};
  s.total = total;
  setWindow(s, w);
  for (int d = 0; d < 3; ++d)
    s.padEnd[d] = w.padE[d];
  s.inSize = w.inSize();
  s.outSize = w.outSize();
  s.countIncludePad = !isMax && n.attrInt("count_include_pad") != 0;
  s.columnMajor = isMax && n.attrInt("storage_order") == 1;
  s.spatialRank = x->rank() - 2;
  s.dOut2 = Divmod::make(w.out[2]);
  s.dOut1 = Divmod::make(w.out[1]);
  s.dOut0 = Divmod::make(w.out[0]);
  s.dIn2 = Divmod::make(w.in[2]);
  s.dIn1 = Divmod::make(w.in[1]);
  s.C = xs[1];
  s.dC = Divmod::make(xs[1]);
  auto io = anchorFunctors(l, x, y);
  if (!io)
    return io.takeError();
  Functor &fx = io->in, &fo = io->out;
  std::string xn = io->inName, on = io->outName;
  int64_t maxIndex = std::max(x->type().numElements(), total);
  Instantiation inst{
      "dlc::pool_window",
      {isMax ? "true" : "false", cl ? "true" : "false", l.indexType(maxIndex), xn, on},
      "dlc::PoolArgs<" + xn + ", " + on + ">",
      {xn, on}};
  uint32_t k = l.instantiate(inst);
  LaunchArgs a;
  a.shape(s);
  if (withIdx)
    a.pointer(offsetof(PoolShape, indices), l.bufferOf(n.result(1)), n.result(1)->type().byteSize(),
              true);
  a.functor(fx);
  a.functor(fo);
  l.launch(n, k, a, gridFor(total, 256), 256, 0, static_cast<double>(total * w.kSize()));
  return llvm::Error::success();
}

/// MaxPoolGrad: pool_max_grad over the input's elements (channels-last: runs of 16
/// bytes of channels where C and the buffers allow), dx stored through the epilogue.
llvm::Error lowerMaxPoolGrad(Lowering &l, const Node &n) {
  const Value *x = n.operand(0), *dy = n.operand(1), *dx = n.result();
  bool cl = n.attrInt("channels_last") != 0;
  const Shape xs = cl ? channelsFirst(x) : x->shape();
  Window3 w = windowOf(n, xs, cl ? channelsFirst(dy) : dy->shape(), n.attrInts("kernel_shape"));
  l.allocate(dx);
  const int64_t total = x->type().numElements();
  if (total == 0)
    return llvm::Error::success();
  const int64_t es = static_cast<int64_t>(dtypeSize(x->dtype()));
  // (x and dY have one dtype: the verifier checks it)
  const int64_t runs = cl ? vectorRun(l, {x, dy}, xs[1], std::min<int64_t>(8, 16 / es)) : 1;
  PoolShape s{};
  s.total = total / runs;
  setWindow(s, w);
  s.inSize = w.inSize();
  s.outSize = w.outSize();
  s.spatialRank = x->rank() - 2;
  s.dIn2 = Divmod::make(w.in[2]);
  s.dIn1 = Divmod::make(w.in[1]);
  s.dIn0 = Divmod::make(w.in[0]);
  s.C = xs[1];
  s.dC = Divmod::make(xs[1] / runs);
  auto out = storeFunctor(l, l.group(), dx);
  if (!out)
    return out.takeError();
  std::string on = l.functorName(*out);
  Instantiation inst{"dlc::pool_max_grad",
                     {cl ? "true" : "false", std::to_string(runs),
                      l.indexType(std::max(total, dy->type().numElements())), cudaType(x->dtype()),
                      on},
                     "dlc::PoolGradArgs<" + on + ">",
                     {on}};
  uint32_t k = l.instantiate(inst);
  LaunchArgs a;
  a.shape(s);
  a.pointer(offsetof(PoolShape, x), l.bufferOf(x), x->type().byteSize(), false);
  a.pointer(offsetof(PoolShape, dy), l.bufferOf(dy), dy->type().byteSize(), false);
  a.functor(*out);
  l.launch(n, k, a, gridFor(s.total, 256), 256, 0,
           static_cast<double>(dy->type().numElements() * w.kSize()));
  return llvm::Error::success();
}

llvm::Error lowerGlobalPool(Lowering &l, const Node &n) {
  const Value *x = n.operand(0), *y = n.result();
  bool cl = n.attrInt("channels_last") != 0;
  const Shape xs = cl ? channelsFirst(x) : x->shape();
  int64_t nc = xs[0] * xs[1];
  int64_t len = nc ? x->type().numElements() / nc : 0;
  return lowerGlobalReduction(l, n, x, y, xs[0], xs[1], len, cl,
                              n.kind() == OpKind::GlobalMaxPool ? "dlc::kReduceMax"
                                                                : "dlc::kReduceMean");
}

} // namespace

void registerPoolLowerings(LoweringRegistry &r) {
  r.op(OpKind::MaxPool, lowerWindowPool);
  r.op(OpKind::AveragePool, lowerWindowPool);
  r.op(OpKind::GlobalAveragePool, lowerGlobalPool);
  r.op(OpKind::GlobalMaxPool, lowerGlobalPool);
  r.op(OpKind::MaxPoolGrad, lowerMaxPoolGrad);
}

} // namespace dlc::codegen
