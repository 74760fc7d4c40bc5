//===- Reduce.cpp - Reductions, softmax family, arg/top-k, cumulative sums -===//
//
// The templates of dlc_reduce.cuh: Reduce* over any set of axes (a kept view and a
// reduced view, strided; contiguous rows skip the index arithmetic), short rows (<= 64)
// with a thread per output and long ones with a block per output; reduce_cols where the
// kept axes after the reduced ones are at least 16 wide (channels-last pooling); the softmax family
// over an [outer, len, inner] view; ArgMax/ArgMin, TopK and CumSum without fusion.
//===----------------------------------------------------------------------===//
#include "../Fused.h"
#include "EmitterUtils.h"

#include <cstddef>

namespace dlc::codegen {

using namespace ir;

namespace {

constexpr int64_t kShortReduction = 64;

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

const char *reduceKind(OpKind k) {
  switch (k) {
  case OpKind::ReduceSum:
    return "dlc::kReduceSum";
  case OpKind::ReduceMean:
    return "dlc::kReduceMean";
  case OpKind::ReduceMax:
    return "dlc::kReduceMax";
  case OpKind::ReduceMin:
    return "dlc::kReduceMin";
  case OpKind::ReduceProd:
    return "dlc::kReduceProd";
  default:
    return nullptr;
  }
}

/// Columns at least this wide take reduce_cols (a warp per 32 adjacent columns).
constexpr int64_t kColumnReduction = 16;

/// How many chunks a reduction splits each output's `len` elements into, given
/// `units` blocks without a split: enough for ~512 blocks (4 per SM on the largest
/// GPUs), each chunk at least `minChunk` long; 1 (no split) when the units already fill
/// two blocks per SM or fewer than 4 chunks would do.
int64_t reductionSplits(int64_t units, int64_t len, int64_t minChunk) {
  constexpr int64_t kFillBlocks = 512, kEnoughUnits = 264, kMinSplits = 4;
  if (units >= kEnoughUnits)
    return 1;
  int64_t splits = std::min(ceilDiv(kFillBlocks, units), len / minChunk);
  // (Two or three chunks do not pay for the merge's launch.)
  return splits >= kMinSplits ? splits : 1;
}

/// Launches the reduce template: x viewed as kept x reduced; or reduce_cols when x is
/// [outer, len, inner] reduced over len with s.inner >= kColumnReduction, and either
/// enough column tiles (32) to spread, short columns (128), or long enough columns to
/// split. A long reduction over few outputs is split: reduce_split (or reduce_cols
/// with Split) writes each chunk's partial result, reduce_merge combines them.
llvm::Error emitReduce(Lowering &l, const Node &n, const Value *x, const Value *out, ReduceShape s,
                       bool contig, const char *kind) {
  bool isShort = s.len <= kShortReduction;
  int64_t maxIndex = std::max(x->type().numElements(), out->type().numElements());
  double flops = static_cast<double>(x->type().numElements());
  bool columns = s.inner >= kColumnReduction;
  // Columns in runs of `runs` per thread where the prologue reads them as vectors.
  int runs = columns ? loadRunLanes(l, l.group(), x, s.inner) : 0;
  const int64_t tiles =
      s.inner ? s.outCount / s.inner * ceilDiv(s.inner, 32 * std::max(runs, 1)) : 0;
  // Column chunks of at least 256 rows (32 per slice); rows of at least 4096 elements
  // (16 per thread).
  s.splits =
      isShort ? 1 : reductionSplits(columns ? tiles : s.outCount, s.len, columns ? 256 : 4096);
  s.chunk = ceilDiv(s.len, s.splits);
  const bool split = s.splits > 1;
  // (Few column tiles over long columns without a split: a block per output walks them
  // in parallel; reduce_cols would leave each tile's 8 slices to walk len / 8 rows alone.)
  const bool cols = columns && (tiles >= 32 || s.len <= 128 || split);
  if (!cols)
    runs = 0;
  auto io = anchorFunctors(l, x, out, runs);
  if (!io)
    return io.takeError();
  Functor &fx = io->in, &fo = io->out;
  std::string xn = io->inName, on = io->outName;
  std::optional<BufferRef> partial;
  // The partials in the compute type: float for FP32/FP16/BF16, else at most 8 bytes.
  const bool floatAcc = isFloat(x->dtype()) && x->dtype() != DType::F64;
  uint64_t partialBytes = static_cast<uint64_t>(s.outCount * s.splits) * (floatAcc ? 4 : 8);
  if (s.splits > 1)
    partial = l.temp(partialBytes, out->name() + ".partial");
  // Stage 1 reads x and writes the partials (not through Out); the merge reads the
  // partials and stores through Out (not reading x).
  enum Stage { Whole, Split, Merge };
  auto args = [&](Stage stage) {
    LaunchArgs a;
    a.shape(s);
    if (partial)
      a.pointer(offsetof(ReduceShape, partial), *partial, partialBytes, stage == Split);
    a.functor(fx, stage != Merge);
    a.functor(fo, stage != Split);
    return a;
  };
  auto instantiate = [&](const char *name, std::vector<std::string> params, bool sync) {
    Instantiation inst{
        name, std::move(params), "dlc::ReduceArgs<" + xn + ", " + on + ">", {xn, on}};
    inst.needsSync = sync;
    return l.instantiate(inst);
  };
  const std::string index =
      l.indexType(std::max(maxIndex + (cols ? s.inner * 8 : 0), s.outCount * s.splits));
  if (split || cols) {
    LaunchArgs a = args(split ? Split : Whole);
    if (cols)
      l.launch(n,
               instantiate("dlc::reduce_cols",
                           {kind, split ? "true" : "false", std::to_string(std::max(runs, 1)),
                            index, xn, on},
                           true),
               a, static_cast<uint32_t>(std::min<int64_t>(tiles * s.splits, 1 << 20)), 256, 0,
               flops);
    else
      l.launch(
          n,
          instantiate("dlc::reduce_split", {kind, contig ? "true" : "false", index, xn, on}, true),
          a, static_cast<uint32_t>(std::min<int64_t>(s.outCount * s.splits, 1 << 20)), 256, 0,
          flops);
    if (split) {
      LaunchArgs m = args(Merge);
      l.launch(n, instantiate("dlc::reduce_merge", {kind, index, xn, on}, true), m,
               static_cast<uint32_t>(s.outCount), blockFor(s.splits), 0,
               static_cast<double>(s.outCount * s.splits));
    }
    return llvm::Error::success();
  }
  uint32_t k = instantiate(
      "dlc::reduce", {kind, isShort ? "true" : "false", contig ? "true" : "false", index, xn, on},
      !isShort);
  LaunchArgs a = args(Whole);
  if (isShort)
    l.launch(n, k, a, gridFor(s.outCount, 256), 256, 0, flops);
  else
    l.launch(n, k, a, static_cast<uint32_t>(std::min<int64_t>(s.outCount, 1 << 20)),
             blockFor(s.len), 0, flops);
  return llvm::Error::success();
}

llvm::Error lowerReduction(Lowering &l, const Node &n) {
  const Value *x = n.operand(0), *out = n.result();
  const char *kind = reduceKind(n.kind());
  if (!kind)
    return errorf("no CUDA lowering for {0}", n.opName());
  std::vector<bool> red = reducedAxes(n);
  Shape xs = x->shape(), st = stridesOf(xs);
  Shape kept, reduced;
  std::vector<int64_t> keptStride, reducedStride;
  bool contig = true, seenRed = false;
  for (size_t d = 0; d < xs.size(); ++d) {
    if (red[d]) {
      reduced.push_back(xs[d]);
      reducedStride.push_back(st[d]);
      seenRed = true;
    } else {
      kept.push_back(xs[d]);
      keptStride.push_back(st[d]);
      contig &= !seenRed || xs[d] == 1;
    }
  }
  l.allocate(out);
  ReduceShape s{};
  s.outCount = product(kept);
  s.len = product(reduced);
  if (s.outCount == 0)
    return llvm::Error::success();
  auto kv = stridedView(kept, keptStride);
  if (!kv)
    return kv.takeError();
  auto rv = stridedView(reduced, reducedStride);
  if (!rv)
    return rv.takeError();
  s.kept = *kv;
  s.red = *rv;
  // One run of reduced axes (size-1 axes aside) with kept axes after it: the columns
  // of [outer, len, inner].
  int64_t first = -1, last = -1;
  bool oneRun = true;
  for (size_t d = 0; d < xs.size(); ++d) {
    if (!red[d] || xs[d] == 1)
      continue;
    if (first < 0)
      first = static_cast<int64_t>(d);
    else if (last + 1 != static_cast<int64_t>(d))
      oneRun = false;
    last = static_cast<int64_t>(d);
  }
  if (oneRun && first >= 0)
    s.inner = product(Shape(xs.begin() + last + 1, xs.end()));
  return emitReduce(l, n, x, out, s, contig, kind);
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
  AxisShape shape() const {
    AxisShape a{};
    a.rows = outer * inner;
    a.len = len;
    a.inner = inner;
    a.dInner = Divmod::make(inner);
    a.dLen = Divmod::make(len);
    return a;
  }
};

int64_t axisOf(const Node &n) {
  int64_t a = n.attrInt("axis"), r = n.operand(0)->rank();
  return a < 0 ? a + r : a;
}

/// The lanes per row of the short-row kernels (softmax_short_rows,
/// softmax_grad_short_rows): a power of two holding the row's len / vec vectors; 0 when
/// that is more than a warp.
int shortRowLanes(int64_t len, int64_t vec) {
  int64_t vectors = (len + vec - 1) / vec, g = 1;
  while (g < vectors)
    g *= 2;
  return g <= 32 ? static_cast<int>(g) : 0;
}

/// Grid and block of a short-row kernel: 256 threads, 256 / lanes rows a block, at most
/// 65536 blocks (a grid-stride step of at most 2^24 rows: the headroom 32-bit indices
/// keep past the end).
std::pair<uint32_t, uint32_t> shortRowLaunch(int64_t rows, int lanes) {
  const int64_t perBlock = 256 / lanes;
  return {static_cast<uint32_t>(std::min<int64_t>((rows + perBlock - 1) / perBlock, 65536)), 256u};
}

/// Softmax, LogSoftmax, Hardmax along `axis`: max, sum of exponentials, write.
llvm::Error lowerSoftmaxLike(Lowering &l, const Node &n) {
  const Value *x = n.operand(0), *out = n.result();
  AxisView v(x->shape(), axisOf(n));
  l.allocate(out);
  int64_t rows = v.outer * v.inner;
  if (rows == 0 || v.len == 0)
    return llvm::Error::success();
  const char *kind = n.kind() == OpKind::Hardmax      ? "dlc::kHardmax"
                     : n.kind() == OpKind::LogSoftmax ? "dlc::kLogSoftmax"
                                                      : "dlc::kSoftmax";
  bool isShort = n.kind() == OpKind::Hardmax || v.len <= kShortReduction;
  auto io = anchorFunctors(l, x, out);
  if (!io)
    return io.takeError();
  Functor &fx = io->in, &fo = io->out;
  std::string xn = io->inName, on = io->outName;
  double flops = 5.0 * static_cast<double>(x->type().numElements());
  // Contiguous rows of an input read as it is: softmax_rows (long ones, a block a row)
  // or softmax_short_rows (up to 32 vectors, a lane group a row), V elements at a time.
  std::optional<RowAccess> ra;
  if (n.kind() != OpKind::Hardmax && v.inner == 1)
    ra = rowAccess(l, x, out, v.len);
  const DType dt = x->dtype();
  if (n.kind() != OpKind::Hardmax && v.inner == 1 && isShort &&
      (dt == DType::F32 || dt == DType::F16 || dt == DType::BF16)) {
    // A lane group a row (FP32 math, as the other row kernels): x as it is, V at a time;
    // or through the prologue, each lane V consecutive values (the fewest that keep a
    // row within a warp).
    int64_t vec = ra ? ra->vec : 1;
    while (!ra && vec < 8 && v.len / vec > 32 && v.len % (2 * vec) == 0)
      vec *= 2;
    if (int lanes = shortRowLanes(v.len, vec)) {
      const bool rawOut = ra && ra->rawOut;
      Instantiation inst{"dlc::softmax_short_rows",
                         {kind, std::to_string(vec), std::to_string(lanes), ra ? "true" : "false",
                          rawOut ? "true" : "false", l.indexType(x->type().numElements()),
                          cudaType(x->dtype()), xn, on},
                         "dlc::AxisArgs<" + xn + ", " + on + ">",
                         {xn, on}};
      inst.needsSync = true; // (warp shuffles)
      uint32_t k = l.instantiate(inst);
      LaunchArgs a;
      a.shape(v.shape());
      if (ra)
        a.pointer(offsetof(AxisShape, x), l.bufferOf(x), x->type().byteSize(), false);
      if (rawOut)
        a.pointer(offsetof(AxisShape, y), l.bufferOf(out), out->type().byteSize(), true);
      a.functor(fx, !ra);
      a.functor(fo, !rawOut);
      auto [grid, block] = shortRowLaunch(rows, lanes);
      l.launch(n, k, a, grid, block, 0, flops);
      return llvm::Error::success();
    }
  }
  if (ra && !isShort) {
    const int64_t vec = ra->vec;
    const bool rawOut = ra->rawOut;
    Instantiation inst{"dlc::softmax_rows",
                       {kind, std::to_string(vec), std::to_string(RowAccess::kCached),
                        rawOut ? "true" : "false", l.indexType(x->type().numElements()),
                        cudaType(x->dtype()), xn, on},
                       "dlc::AxisArgs<" + xn + ", " + on + ">",
                       {xn, on}};
    inst.needsSync = true;
    uint32_t k = l.instantiate(inst);
    LaunchArgs a;
    a.shape(v.shape());
    a.pointer(offsetof(AxisShape, x), l.bufferOf(x), x->type().byteSize(), false);
    if (rawOut)
      a.pointer(offsetof(AxisShape, y), l.bufferOf(out), out->type().byteSize(), true);
    a.functor(fx, false);
    a.functor(fo, !rawOut);
    l.launch(n, k, a, static_cast<uint32_t>(std::min<int64_t>(rows, 1 << 20)),
             blockFor(v.len / vec), 0, flops);
    return llvm::Error::success();
  }
  Instantiation inst{
      "dlc::softmax",
      {kind, isShort ? "true" : "false", l.indexType(x->type().numElements()), xn, on},
      "dlc::AxisArgs<" + xn + ", " + on + ">",
      {xn, on}};
  inst.needsSync = !isShort;
  uint32_t k = l.instantiate(inst);
  LaunchArgs a;
  a.shape(v.shape());
  a.functor(fx);
  a.functor(fo);
  if (isShort)
    l.launch(n, k, a, gridFor(rows, 256), 256, 0, flops);
  else
    l.launch(n, k, a, static_cast<uint32_t>(std::min<int64_t>(rows, 1 << 20)), blockFor(v.len), 0,
             flops);
  return llvm::Error::success();
}

/// SoftmaxGrad: the row's sum of dy y (LogSoftmax's: of dy), then dx through the
/// epilogue. Contiguous rows whose y and dy are read as they are take
/// softmax_grad_short_rows (at most 32 vectors: a lane group a row) or softmax_grad_rows
/// (longer than 64: a block a row), both V elements at a time, each read once; others
/// (strided rows, short rows of more than 32 vectors) softmax_grad.
llvm::Error lowerSoftmaxGrad(Lowering &l, const Node &n) {
  const Value *y = n.operand(0), *dy = n.operand(1), *out = n.result();
  AxisView v(y->shape(), axisOf(n));
  l.allocate(out);
  const int64_t rows = v.outer * v.inner;
  if (rows == 0 || v.len == 0)
    return llvm::Error::success();
  auto fo = storeFunctor(l, l.group(), out);
  if (!fo)
    return fo.takeError();
  const std::string on = l.functorName(*fo), args = "dlc::SoftmaxGradArgs<" + on + ">";
  const std::string log = n.attrInt("log") != 0 ? "true" : "false";
  const std::string index = l.indexType(y->type().numElements()), mt = cudaType(y->dtype());
  const bool isShort = v.len <= kShortReduction;
  std::optional<RowAccess> ra;
  if (v.inner == 1)
    ra = rowAccess(l, y, out, v.len, [&](int64_t vec) {
      return fixedAligned(l, dy, static_cast<uint64_t>(vec) * dtypeSize(dy->dtype()));
    });
  const int lanes = ra && isShort ? shortRowLanes(v.len, ra->vec) : 0;
  if (isShort && !lanes)
    ra.reset(); // softmax_grad, a thread a row
  const bool rawOut = ra && ra->rawOut;
  const std::string raw = rawOut ? "true" : "false";
  Instantiation inst =
      lanes
          ? Instantiation{"dlc::softmax_grad_short_rows",
                          {log, std::to_string(ra->vec), std::to_string(lanes), raw, index, mt, on},
                          args,
                          {on}}
      : ra ? Instantiation{"dlc::softmax_grad_rows",
                           {log, std::to_string(ra->vec), std::to_string(RowAccess::kCachedPair),
                            raw, index, mt, on},
                           args,
                           {on}}
           : Instantiation{
                 "dlc::softmax_grad", {log, isShort ? "true" : "false", index, mt, on}, args, {on}};
  inst.needsSync = lanes || !isShort; // (warp shuffles, block reductions)
  uint32_t k = l.instantiate(inst);
  LaunchArgs a;
  a.shape(v.shape());
  a.pointer(offsetof(AxisShape, x), l.bufferOf(y), y->type().byteSize(), false);
  a.pointer(offsetof(AxisShape, dy), l.bufferOf(dy), dy->type().byteSize(), false);
  if (rawOut)
    a.pointer(offsetof(AxisShape, y), l.bufferOf(out), out->type().byteSize(), true);
  a.functor(*fo, !rawOut);
  auto [grid, block] =
      lanes ? shortRowLaunch(rows, lanes)
      : isShort
          ? std::pair<uint32_t, uint32_t>{gridFor(rows, 256), 256u}
          : std::pair<uint32_t, uint32_t>{static_cast<uint32_t>(std::min<int64_t>(rows, 1 << 20)),
                                          blockFor(v.len / (ra ? ra->vec : 1))};
  l.launch(n, k, a, grid, block, 0, 4.0 * static_cast<double>(y->type().numElements()));
  return llvm::Error::success();
}

/// An AxisIo launch (no fusion): x and the first result, plus TopK's second.
void launchAxisIo(Lowering &l, const Node &n, const Instantiation &inst, const AxisShape &s,
                  int64_t threads) {
  uint32_t k = l.instantiate(inst);
  LaunchArgs a;
  a.shape(s);
  if (n.numResults() > 1)
    a.pointer(offsetof(AxisShape, out2), l.bufferOf(n.result(1)), n.result(1)->type().byteSize(),
              true);
  a.slot(l.bufferOf(n.operand(0)), n.operand(0)->type().byteSize(), false);
  a.slot(l.bufferOf(n.result(0)), n.result(0)->type().byteSize(), true);
  l.launch(n, k, a, gridFor(threads, 256), 256, 0,
           static_cast<double>(n.operand(0)->type().numElements()));
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
  Instantiation inst{"dlc::argminmax",
                     {isMax ? "true" : "false", last ? "true" : "false",
                      l.indexType(x->type().numElements()), cudaType(x->dtype())},
                     "dlc::AxisIo",
                     {}};
  launchAxisIo(l, n, inst, v.shape(), rows);
  return llvm::Error::success();
}

/// TopK by rank (NaN-safe total order; see dlc_reduce.cuh).
llvm::Error lowerTopK(Lowering &l, const Node &n) {
  const Value *x = n.operand(0);
  AxisView v(x->shape(), axisOf(n));
  l.allocate(n.result(0));
  l.allocate(n.result(1));
  int64_t total = v.outer * v.len * v.inner, k = n.attrInt("k");
  if (total == 0 || k == 0)
    return llvm::Error::success();
  AxisShape s = v.shape();
  s.k = k;
  Instantiation inst{
      "dlc::topk",
      {n.attrInt("largest") != 0 ? "true" : "false", l.indexType(total), cudaType(x->dtype())},
      "dlc::AxisIo",
      {}};
  launchAxisIo(l, n, inst, s, total);
  return llvm::Error::success();
}

llvm::Error lowerCumSum(Lowering &l, const Node &n) {
  const Value *x = n.operand(0), *out = n.result();
  AxisView v(x->shape(), axisOf(n));
  l.allocate(out);
  int64_t rows = v.outer * v.inner;
  if (rows == 0 || v.len == 0)
    return llvm::Error::success();
  Instantiation inst{"dlc::cumsum",
                     {n.attrInt("exclusive") != 0 ? "true" : "false",
                      n.attrInt("reverse") != 0 ? "true" : "false",
                      l.indexType(x->type().numElements()), cudaType(x->dtype())},
                     "dlc::AxisIo",
                     {}};
  launchAxisIo(l, n, inst, v.shape(), rows);
  return llvm::Error::success();
}

} // namespace

/// Global pooling: each (image, channel) reduced over its `len` positions, which are
/// contiguous (channels-first) or `channels` apart (channels-last).
llvm::Error lowerGlobalReduction(Lowering &l, const Node &n, const Value *x, const Value *out,
                                 int64_t images, int64_t channels, int64_t len, bool channelsLast,
                                 const char *kind) {
  l.allocate(out);
  int64_t rows = images * channels;
  if (rows == 0)
    return llvm::Error::success();
  ReduceShape s{};
  s.outCount = rows;
  s.len = len;
  if (channelsLast) {
    s.kept = llvm::cantFail(stridedView({images, channels}, {len * channels, 1}));
    s.red = llvm::cantFail(stridedView({len}, {channels}));
    s.inner = channels;
  } else {
    s.kept = llvm::cantFail(stridedView({rows}, {len}));
    s.red = llvm::cantFail(stridedView({len}, {1}));
  }
  return emitReduce(l, n, x, out, s, !channelsLast || channels == 1, kind);
}

void registerReduceLowerings(LoweringRegistry &r) {
  for (OpKind k : {OpKind::ReduceMean, OpKind::ReduceSum, OpKind::ReduceMax, OpKind::ReduceMin,
                   OpKind::ReduceProd})
    r.op(k, lowerReduction);
  for (OpKind k : {OpKind::Softmax, OpKind::LogSoftmax, OpKind::Hardmax})
    r.op(k, lowerSoftmaxLike);
  r.op(OpKind::SoftmaxGrad, lowerSoftmaxGrad);
  r.op(OpKind::ArgMax, lowerArg);
  r.op(OpKind::ArgMin, lowerArg);
  r.op(OpKind::TopK, lowerTopK);
  r.op(OpKind::CumSum, lowerCumSum);
}

} // namespace dlc::codegen
