//===- Index.cpp - Gather/scatter, one-hot, triangular masks, unpooling ----===//
//
// The index templates of dlc_movement.cuh, one thread per output element. Scatters
// copy the data first; a scatter without reduction writes in parallel (duplicates
// are undefined in ONNX), an add of floating-point updates in parallel with atomic
// adds (in no fixed order; with --deterministic as 64-bit fixed-point integer sums,
// the same bits in any order), any other reduction in a single thread in index order,
// which matches the reference exactly. An out-of-range index is reported through
// the launch's check word (the run fails, naming the node); the kernel reads or writes
// index 0 instead, never outside a buffer.
//===----------------------------------------------------------------------===//
#include "../Library.h"
#include "EmitterUtils.h"

#include <cstddef>
#include <functional>

namespace dlc::codegen {

using namespace ir;

namespace {

const char *scatterReduction(const std::string &r) {
  return r == "add"   ? "dlc::kScatterAdd"
         : r == "mul" ? "dlc::kScatterMul"
         : r == "max" ? "dlc::kScatterMax"
         : r == "min" ? "dlc::kScatterMin"
                      : "dlc::kScatterNone";
}

/// An IndexShape with `dims` as the coordinate space of the threads.
llvm::Expected<IndexShape> indexShape(const Shape &dims, int64_t total) {
  if (dims.size() > static_cast<size_t>(kMaxRank))
    return errorf("an index op of rank {0} (code generation handles up to {1} dims)", dims.size(),
                  kMaxRank);
  IndexShape s{};
  s.total = total;
  s.rank = static_cast<int64_t>(dims.size());
  for (int d = 0; d < kMaxRank; ++d)
    s.dims[d] = Divmod::make(d < s.rank ? dims[d] : 1);
  return s;
}

struct IndexLaunch {
  Lowering &l;
  const Node &n;
  LaunchArgs a;
  void in(size_t offset, const Value *v) {
    a.pointer(offset, l.bufferOf(v), v->type().byteSize(), false);
  }
  void out(size_t offset, const Value *v) {
    a.pointer(offset, l.bufferOf(v), v->type().byteSize(), true);
  }
  void run(const Instantiation &inst, int64_t threads) {
    uint32_t k = l.instantiate(inst);
    l.launch(n, k, a, gridFor(threads, 256), 256);
  }
};

/// Launches an IndexShape template `tmpl<extra..., I, DT, IT>` over `threads` threads:
/// `data` (x), `idx`, `upd` (if any) and the output.
void launchIndex(Lowering &l, const Node &n, const char *tmpl, std::vector<std::string> targs,
                 const IndexShape &s, const Value *data, const Value *idx, const Value *upd,
                 const Value *y, int64_t threads, bool checksIndices = true,
                 const std::function<void(LaunchArgs &)> &more = nullptr) {
  IndexLaunch il{l, n, {}};
  il.a.shape(s);
  if (more)
    more(il.a);
  if (checksIndices)
    il.a.pointer(offsetof(IndexShape, err), l.checkWord(n, "index out of range"), 4, true);
  if (data && data->type().numElements() && !upd)
    il.in(offsetof(IndexShape, x), data);
  il.in(offsetof(IndexShape, idx), idx);
  if (upd)
    il.in(offsetof(IndexShape, upd), upd);
  il.out(offsetof(IndexShape, y), y);
  int64_t maxIndex =
      std::max({s.total, s.axisDim, data->type().numElements(), y->type().numElements()});
  targs.insert(targs.end(),
               {l.indexType(maxIndex), cudaType(data->dtype()), cudaType(idx->dtype())});
  il.run({tmpl, targs, "dlc::IndexShape", {}}, threads);
}

/// ScatterElements and ScatterND: the data copied to the output, then the scatter
/// (parallel, with atomic adds for a floating-point add, or one thread in index order
/// with another reduction).
llvm::Error lowerScatter(Lowering &l, const Node &n, const char *tmpl,
                         const std::function<llvm::Expected<IndexShape>(int64_t total)> &shape,
                         int64_t total) {
  const Value *x = n.operand(0), *idx = n.operand(1), *upd = n.operand(2), *y = n.result();
  BufferRef yb = l.allocate(y);
  if (x->type().numElements())
    l.addCopy(l.bufferOf(x), yb, x->type().byteSize(), n);
  if (!total)
    return llvm::Error::success();
  auto s = shape(total);
  if (!s)
    return s.takeError();
  const char *red = scatterReduction(n.attrString("reduction"));
  // An add of floating-point updates runs in parallel with atomic adds (sm_80+ add
  // FP16 and BF16 atomically too); other reductions apply the updates in index order
  // on one thread.
  const bool atomic = std::string(red) == "dlc::kScatterAdd" && isFloat(x->dtype());
  if (atomic && l.options().deterministic) {
    // --deterministic: the largest finite |update| first, then 64-bit fixed-point sums
    // (integer atomics: the same bits in any order), then y += sum 2^-e, rounded once.
    const int64_t outs = y->type().numElements();
    BufferRef sums = l.temp(static_cast<uint64_t>(outs) * 8, y->name() + ".fixed_sum"),
              special = l.temp(static_cast<uint64_t>(outs) * 4, y->name() + ".special"),
              amax = l.temp(8, y->name() + ".amax");
    l.addMemset(sums, static_cast<uint64_t>(outs) * 8, 0, n);
    l.addMemset(special, static_cast<uint64_t>(outs) * 4, 0, n);
    l.addMemset(amax, 8, 0, n);
    IndexShape fs = *s;
    fs.depth = outs; // (scatter_fixed_finish's extent)
    auto pass = [&](const char *kernel, int64_t threads, bool updates) {
      LaunchArgs a;
      a.shape(fs);
      if (updates)
        a.pointer(offsetof(IndexShape, upd), l.bufferOf(upd), upd->type().byteSize(), false);
      else
        a.pointer(offsetof(IndexShape, y), yb, y->type().byteSize(), true);
      a.pointer(offsetof(IndexShape, amax), amax, 8, updates);
      if (!updates) {
        a.pointer(offsetof(IndexShape, fixedSum), sums, static_cast<uint64_t>(outs) * 8, false);
        a.pointer(offsetof(IndexShape, special), special, static_cast<uint64_t>(outs) * 4, false);
      }
      const int64_t maxIndex = std::max(total, outs);
      uint32_t k = l.instantiate(
          {kernel, {l.indexType(maxIndex), cudaType(x->dtype())}, "dlc::IndexShape", {}});
      l.launch(n, k, a, gridFor(static_cast<uint64_t>(threads), 256), 256);
    };
    pass("dlc::scatter_fixed_max", total, true);
    launchIndex(
        l, n, tmpl, {red, "dlc::kScatterFixed"}, *s, x, idx, upd, y, total, true,
        [&](LaunchArgs &la) {
          la.pointer(offsetof(IndexShape, fixedSum), sums, static_cast<uint64_t>(outs) * 8, true);
          la.pointer(offsetof(IndexShape, special), special, static_cast<uint64_t>(outs) * 4, true);
          la.pointer(offsetof(IndexShape, amax), amax, 8, false);
        });
    pass("dlc::scatter_fixed_finish", outs, false);
    return llvm::Error::success();
  }
  launchIndex(l, n, tmpl, {red, atomic ? "dlc::kScatterAtomic" : "dlc::kScatterPlain"}, *s, x, idx,
              upd, y, std::string(red) == "dlc::kScatterNone" || atomic ? total : 1);
  return llvm::Error::success();
}

int64_t normAxis(int64_t axis, int64_t rank) {
  return axis < 0 ? axis + rank : axis;
}

llvm::Error lowerTrilu(Lowering &l, const Node &n) {
  const Value *x = n.operand(0), *y = n.result();
  int64_t total = x->type().numElements();
  l.allocate(y);
  if (!total)
    return llvm::Error::success();
  MiscShape s{};
  s.total = total;
  s.n0 = n.attrInt("k");
  s.d0 = Divmod::make(x->shape().back());
  s.d1 = Divmod::make(x->shape()[x->rank() - 2]);
  IndexLaunch il{l, n, {}};
  il.a.shape(s);
  il.in(offsetof(MiscShape, a), x);
  il.out(offsetof(MiscShape, y), y);
  il.run({"dlc::trilu",
          {n.attrInt("upper") != 0 ? "true" : "false", l.indexType(total), cudaType(x->dtype())},
          "dlc::MiscShape",
          {}},
         total);
  return llvm::Error::success();
}

llvm::Error lowerGatherElements(Lowering &l, const Node &n) {
  const Value *x = n.operand(0), *idx = n.operand(1), *y = n.result();
  int64_t axis = normAxis(n.attrInt("axis"), x->rank()), total = y->type().numElements();
  l.allocate(y);
  if (!total)
    return llvm::Error::success();
  auto s = indexShape(y->shape(), total);
  if (!s)
    return s.takeError();
  Shape xs = stridesOf(x->shape());
  s->axis = axis;
  s->axisDim = x->shape()[axis];
  for (int64_t d = 0; d < x->rank(); ++d)
    s->xStride[d] = xs[d];
  launchIndex(l, n, "dlc::gather_elements", {}, *s, x, idx, nullptr, y, total);
  return llvm::Error::success();
}

llvm::Error lowerScatterElements(Lowering &l, const Node &n) {
  const Value *x = n.operand(0), *idx = n.operand(1);
  return lowerScatter(
      l, n, "dlc::scatter_elements",
      [&](int64_t total) -> llvm::Expected<IndexShape> {
        auto s = indexShape(idx->shape(), total);
        if (!s)
          return s.takeError();
        int64_t axis = normAxis(n.attrInt("axis"), x->rank());
        Shape xs = stridesOf(x->shape());
        s->axis = axis;
        s->axisDim = x->shape()[axis];
        for (int64_t d = 0; d < x->rank(); ++d)
          s->xStride[d] = xs[d];
        return s;
      },
      idx->type().numElements());
}

/// GatherND / ScatterND geometry: index tuples of q coordinates into data dims
/// [bdims, bdims + q), slices of the remaining dims.
llvm::Expected<IndexShape> ndShape(const Value *data, const Value *idx, int64_t bdims,
                                   int64_t total) {
  const Shape &ds = data->shape(), &is = idx->shape();
  int64_t q = is.back();
  if (q > kMaxRank)
    return errorf("index tuples of {0} coordinates (code generation handles up to {1})", q,
                  kMaxRank);
  Shape st = stridesOf(ds);
  IndexShape s{};
  s.total = total;
  s.q = q;
  int64_t slice = 1, batch = 1;
  for (size_t i = bdims + q; i < ds.size(); ++i)
    slice *= ds[i];
  for (int64_t i = 0; i < bdims; ++i)
    batch *= ds[i];
  int64_t tuples = idx->type().numElements() / std::max<int64_t>(q, 1);
  s.slice = slice;
  s.perBatch = std::max<int64_t>(tuples / std::max<int64_t>(batch, 1), 1);
  s.batchStride = bdims > 0 ? st[bdims - 1] : 0;
  for (int64_t k = 0; k < q; ++k) {
    s.xDim[k] = ds[bdims + k];
    s.xStride[k] = st[bdims + k];
  }
  s.dSlice = Divmod::make(slice);
  s.dPerBatch = Divmod::make(s.perBatch);
  return s;
}

llvm::Error lowerGatherND(Lowering &l, const Node &n) {
  const Value *x = n.operand(0), *idx = n.operand(1), *y = n.result();
  int64_t total = y->type().numElements();
  l.allocate(y);
  if (!total)
    return llvm::Error::success();
  auto s = ndShape(x, idx, n.attrInt("batch_dims"), total);
  if (!s)
    return s.takeError();
  launchIndex(l, n, "dlc::gather_nd", {}, *s, x, idx, nullptr, y, total);
  return llvm::Error::success();
}

llvm::Error lowerScatterND(Lowering &l, const Node &n) {
  const Value *x = n.operand(0), *idx = n.operand(1), *upd = n.operand(2);
  return lowerScatter(
      l, n, "dlc::scatter_nd", [&](int64_t total) { return ndShape(x, idx, 0, total); },
      upd->type().numElements());
}

llvm::Error lowerOneHot(Lowering &l, const Node &n) {
  const Value *idx = n.operand(0), *vals = n.operand(1), *y = n.result();
  int64_t rank = y->rank(), axis = normAxis(n.attrInt("axis"), rank),
          total = y->type().numElements();
  l.allocate(y);
  if (!total)
    return llvm::Error::success();
  auto s = indexShape(y->shape(), total);
  if (!s)
    return s.takeError();
  Shape ist = stridesOf(idx->shape());
  s->axis = axis;
  s->depth = n.attrInt("depth");
  for (size_t k = 0; k < ist.size(); ++k)
    s->xStride[k] = ist[k];
  launchIndex(l, n, "dlc::onehot", {}, *s, vals, idx, nullptr, y, total, false);
  return llvm::Error::success();
}

llvm::Error lowerReverseSequence(Lowering &l, const Node &n) {
  const Value *x = n.operand(0), *lens = n.operand(1), *y = n.result();
  int64_t total = x->type().numElements();
  l.allocate(y);
  if (!total)
    return llvm::Error::success();
  auto s = indexShape(x->shape(), total);
  if (!s)
    return s.takeError();
  Shape st = stridesOf(x->shape());
  s->axis = n.attrInt("time_axis");
  s->q = n.attrInt("batch_axis");
  s->axisDim = x->shape()[s->axis];
  for (int64_t d = 0; d < x->rank(); ++d)
    s->xStride[d] = st[d];
  launchIndex(l, n, "dlc::reverse_sequence", {}, *s, x, lens, nullptr, y, total, false);
  return llvm::Error::success();
}

llvm::Error lowerMaxUnpool(Lowering &l, const Node &n) {
  const Value *x = n.operand(0), *idx = n.operand(1), *y = n.result();
  // Indices address the default unpooled shape; re-address into the output shape.
  const Shape &xs = x->shape();
  int64_t k = x->rank() - 2;
  const auto &ks = n.attrInts("kernel_shape"), &strides = n.attrInts("strides"),
             &pads = n.attrInts("pads");
  Shape def{xs[0], xs[1]};
  for (int64_t i = 0; i < k; ++i)
    def.push_back((xs[2 + i] - 1) * (strides.empty() ? 1 : strides[i]) + ks[i] -
                  (pads.empty() ? 0 : pads[i] + pads[i + k]));
  BufferRef yb = l.allocate(y);
  l.addMemset(yb, y->type().byteSize(), 0, n);
  int64_t total = x->type().numElements();
  if (!total)
    return llvm::Error::success();
  auto s = indexShape(def, total);
  if (!s)
    return s.takeError();
  Shape ost = stridesOf(y->shape());
  s->axisDim = product(def);
  for (int64_t d = 0; d < y->rank(); ++d) {
    s->xDim[d] = y->shape()[d];
    s->xStride[d] = ost[d];
  }
  launchIndex(l, n, "dlc::max_unpool", {}, *s, x, idx, nullptr, y, total);
  return llvm::Error::success();
}

} // namespace

void registerIndexLowerings(LoweringRegistry &r) {
  r.op(OpKind::Trilu, lowerTrilu);
  r.op(OpKind::GatherElements, lowerGatherElements);
  r.op(OpKind::ScatterElements, lowerScatterElements);
  r.op(OpKind::GatherND, lowerGatherND);
  r.op(OpKind::ScatterND, lowerScatterND);
  r.op(OpKind::OneHot, lowerOneHot);
  r.op(OpKind::ReverseSequence, lowerReverseSequence);
  r.op(OpKind::MaxUnpool, lowerMaxUnpool);
}

} // namespace dlc::codegen
