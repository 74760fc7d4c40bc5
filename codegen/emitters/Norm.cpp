//===- Norm.cpp - Batch, layer, instance and group normalization, LRN ------===//
//
// Inference BatchNormalization is a per-channel affine map (a one-node fusion
// group). LayerNormalization, RMSNormalization (where legalize keeps it),
// InstanceNormalization and GroupNormalization are the row_norm template: rows of contiguous
// elements, the scale/bias element of (row, j) given by a strided view of j plus a per-row term;
// rows longer than 64 take row_norm_rows (one read, vector accesses) for LayerNorm with unbroadcast
// parameters and for group/instance norm. BatchNormalization in training mode and LRN have their
// own kernels.
//===----------------------------------------------------------------------===//
#include "../Fused.h"
#include "EmitterUtils.h"

#include <cstddef>

namespace dlc::codegen {

using namespace ir;

namespace {

struct RowNorm {
  NormShape s{};
  const Value *x, *scale, *bias, *y, *meanOut = nullptr, *invOut = nullptr;
  /// The scale and bias hold element j of every row at j (LayerNorm without
  /// broadcasting): row_norm_rows may read them V at a time.
  bool contiguousParams = false;
  /// Group/instance norm: elements per channel (a row is channels x channelSize), so
  /// row_norm_rows reads one parameter per vector when V divides it.
  int64_t channelSize = 0;
  /// RMSNormalization: no mean (x / sqrt(mean(x^2) + eps) * scale).
  bool rms = false;
};

llvm::Error emitRowNorm(Lowering &l, const Node &n, RowNorm &r) {
  const Value *stat = r.meanOut ? r.meanOut : r.invOut;
  auto io = anchorFunctors(l, r.x, r.y);
  if (!io)
    return io.takeError();
  Functor &fx = io->in, &fo = io->out;
  std::string xn = io->inName, on = io->outName;
  bool isShort = r.s.len <= 64;
  double flops = 8.0 * static_cast<double>(r.s.rows * r.s.len);
  std::string statType = stat ? cudaType(stat->dtype()) : "float";
  // The arguments both kernels take: the parameters and the statistics outputs.
  auto args = [&]() {
    LaunchArgs a;
    a.shape(r.s);
    a.pointer(offsetof(NormShape, scale), l.bufferOf(r.scale), r.scale->type().byteSize(), false);
    if (r.bias)
      a.pointer(offsetof(NormShape, bias), l.bufferOf(r.bias), r.bias->type().byteSize(), false);
    if (r.meanOut)
      a.pointer(offsetof(NormShape, mean), l.bufferOf(r.meanOut), r.meanOut->type().byteSize(),
                true);
    if (r.invOut)
      a.pointer(offsetof(NormShape, invStd), l.bufferOf(r.invOut), r.invOut->type().byteSize(),
                true);
    return a;
  };
  // Long rows of an input read as it is: row_norm_rows, V elements at a time, the
  // parameters along the row (read V at a time too: aligned) or one per vector (group
  // and instance norm: V divides the channel size).
  const bool perChannel = !r.contiguousParams;
  const uint64_t ps = dtypeSize(r.scale->dtype());
  std::optional<RowAccess> ra;
  if (!isShort && (r.contiguousParams || r.channelSize > 0) && r.scale->dtype() != DType::F64)
    ra = rowAccess(l, r.x, r.y, r.s.len, [&](int64_t vec) {
      return perChannel ? r.channelSize % vec == 0
                        : fixedAligned(l, r.scale, vec * ps) &&
                              (!r.bias || fixedAligned(l, r.bias, vec * ps));
    });
  if (ra) {
    Instantiation inst{"dlc::row_norm_rows",
                       {std::to_string(ra->vec), std::to_string(RowAccess::kCached),
                        ra->rawOut ? "true" : "false", perChannel ? "true" : "false",
                        r.rms ? "true" : "false", l.indexType(r.x->type().numElements()),
                        cudaType(r.x->dtype()), cudaType(r.scale->dtype()), statType, xn, on},
                       "dlc::NormArgs<" + xn + ", " + on + ">",
                       {xn, on}};
    inst.needsSync = true;
    uint32_t k = l.instantiate(inst);
    LaunchArgs a = args();
    a.pointer(offsetof(NormShape, x), l.bufferOf(r.x), r.x->type().byteSize(), false);
    if (ra->rawOut)
      a.pointer(offsetof(NormShape, y), l.bufferOf(r.y), r.y->type().byteSize(), true);
    a.functor(fx, false);
    a.functor(fo, !ra->rawOut);
    l.launch(n, k, a, static_cast<uint32_t>(std::min<int64_t>(r.s.rows, 1 << 20)),
             blockFor(r.s.len / ra->vec), 0, flops);
    return llvm::Error::success();
  }
  Instantiation inst{"dlc::row_norm",
                     {isShort ? "true" : "false", r.rms ? "true" : "false",
                      l.indexType(r.x->type().numElements()), cudaType(r.scale->dtype()), statType,
                      xn, on},
                     "dlc::NormArgs<" + xn + ", " + on + ">",
                     {xn, on}};
  inst.needsSync = !isShort;
  uint32_t k = l.instantiate(inst);
  LaunchArgs a = args();
  a.functor(fx);
  a.functor(fo);
  if (isShort)
    l.launch(n, k, a, gridFor(r.s.rows, 256), 256, 0, flops);
  else
    l.launch(n, k, a, static_cast<uint32_t>(std::min<int64_t>(r.s.rows, 1 << 20)), 256, 0, flops);
  return llvm::Error::success();
}

llvm::Error lowerLayerNorm(Lowering &l, const Node &n) {
  const bool rms = n.kind() == OpKind::RMSNormalization;
  const Value *x = n.operand(0);
  int64_t rank = x->rank(), axis = n.attrInt("axis");
  if (axis < 0)
    axis += rank;
  Shape norm(x->shape().begin() + axis, x->shape().end());
  RowNorm r;
  r.s.len = product(norm);
  r.s.rows = r.s.len ? x->type().numElements() / r.s.len : 0;
  r.s.eps = n.attrFloat("epsilon");
  r.x = x;
  r.scale = n.operand(1);
  r.bias = rms ? nullptr : n.operand(2);
  r.rms = rms;
  r.y = n.result(0);
  l.allocate(r.y);
  if (n.numResults() > 1)
    l.allocate(r.meanOut = n.result(1));
  if (n.numResults() > 2)
    l.allocate(r.invOut = n.result(2));
  if (r.s.rows == 0 || r.s.len == 0)
    return llvm::Error::success();
  if (r.bias && r.bias->shape() != r.scale->shape())
    return makeError("LayerNormalization with differently broadcast scale and bias");
  // The parameters broadcast over the normalized shape: j decomposed over it, with the
  // scale's strides (0 where it broadcasts).
  const Shape &ps = r.scale->shape();
  Shape pst = stridesOf(ps);
  std::vector<int64_t> strides(norm.size(), 0);
  size_t off = norm.size() - std::min(norm.size(), ps.size());
  for (size_t d = off; d < norm.size(); ++d)
    if (ps[d - off] != 1)
      strides[d] = pst[d - off];
  auto view = stridedView(norm, strides);
  if (!view)
    return view.takeError();
  r.s.param = *view;
  r.s.rowMod = Divmod::make(1);
  r.contiguousParams = product(ps) == r.s.len;
  return emitRowNorm(l, n, r);
}

llvm::Error lowerChannelNorm(Lowering &l, const Node &n) {
  const Value *x = n.operand(0);
  int64_t N = x->shape()[0], C = x->shape()[1],
          S = x->type().numElements() / std::max<int64_t>(N * C, 1);
  int64_t G = n.kind() == OpKind::GroupNormalization ? n.attrInt("num_groups") : C, cpg = C / G;
  RowNorm r;
  r.s.rows = N * G;
  r.s.len = cpg * S;
  r.s.eps = n.attrFloat("epsilon");
  r.x = x;
  r.scale = n.operand(1);
  r.bias = n.operand(2);
  r.y = n.result();
  l.allocate(r.y);
  if (r.s.rows == 0 || r.s.len == 0)
    return llvm::Error::success();
  // Parameter (row % G) * cpg + j / S: channel within the group from j.
  r.s.rowMod = Divmod::make(G);
  r.s.rowMul = cpg;
  r.s.param = llvm::cantFail(stridedView({cpg, S}, {1, 0}));
  r.channelSize = S;
  return emitRowNorm(l, n, r);
}

/// Training-mode BatchNormalization (the inference form is element-wise: Lowering
/// inlines it).
llvm::Error lowerBatchNorm(Lowering &l, const Node &n) {
  const Value *x = n.operand(0), *y = n.result(0);
  int64_t N = x->shape()[0], C = x->shape()[1],
          S = x->type().numElements() / std::max<int64_t>(N * C, 1);
  int64_t total = x->type().numElements();
  l.allocate(y);
  for (unsigned i = 1; i < n.numResults(); ++i)
    l.allocate(n.result(i));
  if (total == 0)
    return llvm::Error::success();
  ChannelShape s{};
  s.N = N;
  s.C = C;
  s.S = S;
  s.total = total;
  s.eps = n.attrFloat("epsilon");
  s.momentum = n.attrFloat("momentum");
  s.dS = Divmod::make(S);
  s.dC = Divmod::make(C);
  Instantiation inst{
      "dlc::batchnorm_train", {l.indexType(total), cudaType(x->dtype())}, "dlc::ChannelShape", {}};
  inst.needsSync = true;
  uint32_t k = l.instantiate(inst);
  LaunchArgs a;
  a.shape(s);
  auto in = [&](size_t offset, const Value *v) {
    a.pointer(offset, l.bufferOf(v), v->type().byteSize(), false);
  };
  auto out = [&](size_t offset, const Value *v) {
    a.pointer(offset, l.bufferOf(v), v->type().byteSize(), true);
  };
  in(offsetof(ChannelShape, x), x);
  in(offsetof(ChannelShape, scale), n.operand(1));
  in(offsetof(ChannelShape, bias), n.operand(2));
  in(offsetof(ChannelShape, mean), n.operand(3));
  in(offsetof(ChannelShape, var), n.operand(4));
  out(offsetof(ChannelShape, y), y);
  // The running statistics are optional results; the kernel writes them anyway.
  uint64_t statBytes = static_cast<uint64_t>(C) * dtypeSize(x->dtype());
  for (auto [offset, i] :
       {std::pair{offsetof(ChannelShape, runMean), 1u}, {offsetof(ChannelShape, runVar), 2u}})
    a.pointer(offset,
              i < n.numResults() ? l.bufferOf(n.result(i))
                                 : l.temp(statBytes, n.name() + ".running_stat"),
              statBytes, true);
  l.launch(n, k, a, static_cast<uint32_t>(std::min<int64_t>(C, 1 << 20)), 256, 0, 4.0 * total);
  return llvm::Error::success();
}

llvm::Error lowerLRN(Lowering &l, const Node &n) {
  const Value *x = n.operand(0), *y = n.result();
  int64_t N = x->shape()[0], C = x->shape()[1],
          S = x->type().numElements() / std::max<int64_t>(N * C, 1);
  int64_t total = x->type().numElements(), size = n.attrInt("size");
  l.allocate(y);
  if (total == 0)
    return llvm::Error::success();
  ChannelShape s{};
  s.N = N;
  s.C = C;
  s.S = S;
  s.total = total;
  s.lo = (size - 1) / 2;
  s.hi = (size - 1) - s.lo;
  s.alpha = n.attrFloat("alpha");
  s.beta = n.attrFloat("beta");
  s.bias0 = n.attrFloat("bias");
  s.size = static_cast<double>(size);
  s.dS = Divmod::make(S);
  s.dC = Divmod::make(C);
  Instantiation inst{
      "dlc::lrn", {l.indexType(total), cudaType(x->dtype())}, "dlc::ChannelShape", {}};
  uint32_t k = l.instantiate(inst);
  LaunchArgs a;
  a.shape(s);
  a.pointer(offsetof(ChannelShape, x), l.bufferOf(x), x->type().byteSize(), false);
  a.pointer(offsetof(ChannelShape, y), l.bufferOf(y), y->type().byteSize(), true);
  l.launch(n, k, a, gridFor(total, 256), 256, 0, static_cast<double>(total * size * 2));
  return llvm::Error::success();
}

/// LayerNormGrad: layer_norm_grad, a block per row, x, dy, the scale and dx V at a time
/// where all four allow it.
llvm::Error lowerLayerNormGrad(Lowering &l, const Node &n) {
  const Value *x = n.operand(0), *dy = n.operand(1), *scale = n.operand(2);
  const Value *dx = n.result(0), *mean = n.result(1), *rstd = n.result(2);
  for (const Value *r : {dx, mean, rstd})
    l.allocate(r);
  const int64_t len = product(scale->shape());
  const int64_t rows = len ? x->type().numElements() / len : 0;
  if (rows == 0 || len == 0)
    return llvm::Error::success();
  const int64_t vec = vectorRun(l, {x, dy, scale, dx}, len, 16 / dtypeSize(x->dtype()));
  NormShape s{};
  s.rows = rows;
  s.len = len;
  s.eps = n.attrFloat("epsilon");
  Instantiation inst{"dlc::layer_norm_grad",
                     {std::to_string(vec), std::to_string(RowAccess::kCachedPair),
                      l.indexType(x->type().numElements()), cudaType(x->dtype())},
                     "dlc::NormShape",
                     {}};
  inst.needsSync = true;
  uint32_t k = l.instantiate(inst);
  LaunchArgs a;
  a.shape(s);
  a.pointer(offsetof(NormShape, x), l.bufferOf(x), x->type().byteSize(), false);
  a.pointer(offsetof(NormShape, dy), l.bufferOf(dy), dy->type().byteSize(), false);
  a.pointer(offsetof(NormShape, scale), l.bufferOf(scale), scale->type().byteSize(), false);
  a.pointer(offsetof(NormShape, y), l.bufferOf(dx), dx->type().byteSize(), true);
  a.pointer(offsetof(NormShape, mean), l.bufferOf(mean), mean->type().byteSize(), true);
  a.pointer(offsetof(NormShape, invStd), l.bufferOf(rstd), rstd->type().byteSize(), true);
  l.launch(n, k, a, static_cast<uint32_t>(std::min<int64_t>(rows, 1 << 20)), blockFor(len / vec), 0,
           12.0 * static_cast<double>(x->type().numElements()));
  return llvm::Error::success();
}

} // namespace

void registerNormLowerings(LoweringRegistry &r) {
  r.op(OpKind::BatchNormalization, lowerBatchNorm);
  r.op(OpKind::LayerNormalization, lowerLayerNorm);
  r.op(OpKind::LayerNormGrad, lowerLayerNormGrad);
  r.op(OpKind::RMSNormalization, lowerLayerNorm); // (the nodes legalize keeps)
  r.op(OpKind::InstanceNormalization, lowerChannelNorm);
  r.op(OpKind::GroupNormalization, lowerChannelNorm);
  r.op(OpKind::LRN, lowerLRN);
}

} // namespace dlc::codegen
