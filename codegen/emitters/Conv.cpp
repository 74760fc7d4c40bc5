//===- Conv.cpp - Convolutions through the kernel library -------------------===//
//
// Floating-point Conv is an implicit GEMM: channels-last FP16/BF16 (and FP32 with
// --tf32), grouped too when each group is whole 16-byte chunks of channels, on
// conv_fprop_mma (dlc_conv_mma.cuh: cp.async, ldmatrix, mma.sync), after conv_pack
// where an operand cannot be copied as it is; other FP16/BF16 convolutions on
// conv_igemm_tc (WMMA), FP32/FP64 on conv_igemm (dlc_conv.cuh). The tile and the split
// of K are chosen per GPU architecture by the model `dlc inspect` uses
// (codegen/Bounds.h): each tile's main loop, as decoded from its SASS (ConvTiles.h),
// run over the padded work at the GPU profile's issue rates, with SM fill, waves and
// load latency; plus the split-K reduction's traffic and launch. Other grouped and
// depthwise convolutions use the direct kernel; ConvTranspose the gather kernel. Bias
// and the fused epilogue (activation, residual add, ...) are applied as each output is
// stored.
//===----------------------------------------------------------------------===//
#include "../Fused.h"
#include "ConvTiles.h"
#include "Window.h"
#include "dlc/codegen/Bounds.h"
#include "dlc/codegen/Compiler.h"
#include "dlc/codegen/GpuModel.h"

#include <cmath>
#include <cstddef>
#include <cstring>
#include <functional>
#include <set>

namespace dlc::codegen {

using namespace ir;

namespace {

Shape spatialKernel(const Value *w) {
  return Shape(w->shape().begin() + 2, w->shape().end());
}

bool isChannelsLast(const Node &n) {
  return n.attrInt("channels_last") != 0;
}

/// The tiles of one kernel: CUDA-core (conv_igemm), tensor-core through WMMA
/// (conv_igemm_tc: BM channels x BN positions), or through cp.async, ldmatrix and
/// mma.sync (conv_fprop_mma: BM positions x BN channels).
struct ConvFamily {
  enum Kind { CudaCore, Wmma, Mma };
  const ConvTileConfig *tiles;
  int count;
  Kind kind;
  bool tf32 = false; // conv_fprop_mma on FP32 operands: K per stage is RowBytes / 4
  bool int8 = false; // ... on INT8 operands: RowBytes (int32 sums, 64-bit partial sums)
  bool fp8 = false;  // ... on float8 operands: RowBytes (FP32 sums)
  bool tensor() const { return kind != CudaCore; }
  /// K per stage (elements).
  int bk(const ConvTileConfig &c) const {
    return kind == CudaCore ? kConvBK
           : kind == Wmma   ? kConvTcBK
                            : c.rowBytes / (tf32          ? 4
                                            : int8 || fp8 ? 1
                                                          : 2);
  }
  int threads(const ConvTileConfig &c) const {
    return tensor() ? (c.bm / c.tm) * (c.bn / c.tn) * 32 : kConvThreads;
  }
  int smem(const ConvTileConfig &c, size_t accBytes) const {
    if (kind == CudaCore)
      return 2 * kConvBK * (c.bm + c.bn) * static_cast<int>(accBytes);
    if (kind == Mma)
      return convMmaSmem(c);
    return std::max(c.bm * (kConvTcBK + 8) * 2 + kConvTcBK * (c.bn + 8) * 2, c.bm * (c.bn + 4) * 4);
  }
  /// The output channels and positions of one tile.
  int64_t channels(const ConvTileConfig &c) const { return kind == Mma ? c.bn : c.bm; }
  int64_t positions(const ConvTileConfig &c) const { return kind == Mma ? c.bm : c.bn; }
  const char *kernel() const {
    return kind == CudaCore ? "dlc::conv_igemm"
           : kind == Wmma   ? "dlc::conv_igemm_tc"
                            : "dlc::conv_fprop_mma";
  }
  std::string tile(const ConvTileConfig &c) const {
    std::string t = std::string(kind == CudaCore ? "dlc::ConvTile<"
                                : kind == Wmma   ? "dlc::ConvTcTile<"
                                                 : "dlc::ConvMmaTile<") +
                    std::to_string(c.bm) + ", " + std::to_string(c.bn) + ", " +
                    std::to_string(c.tm) + ", " + std::to_string(c.tn);
    return t +
           (kind == Mma ? ", " + std::to_string(c.stages) + ", " + std::to_string(c.rowBytes)
                        : std::string()) +
           ">";
  }
};
constexpr ConvFamily kCudaCoreConv{kConvTiles, static_cast<int>(std::size(kConvTiles)),
                                   ConvFamily::CudaCore};
constexpr ConvFamily kTensorCoreConv{kConvTcTiles, static_cast<int>(std::size(kConvTcTiles)),
                                     ConvFamily::Wmma};
constexpr ConvFamily kMmaConv{kConvMmaTiles, static_cast<int>(std::size(kConvMmaTiles)),
                              ConvFamily::Mma};
constexpr ConvFamily kMmaTf32Conv{kConvMmaTf32Tiles, static_cast<int>(std::size(kConvMmaTf32Tiles)),
                                  ConvFamily::Mma, true};
// (The FP16 tiles' code: a k step is 32 bytes of K either way, the same ldmatrix and
// as many mma.sync, each m16n8k32.)
constexpr ConvFamily kMmaInt8Conv{kConvMmaTiles, static_cast<int>(std::size(kConvMmaTiles)),
                                  ConvFamily::Mma, false, true};
constexpr ConvFamily kMmaFp8Conv{
    kConvMmaTiles, static_cast<int>(std::size(kConvMmaTiles)), ConvFamily::Mma, false, false, true};
constexpr int64_t kSplits[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32};

struct ConvPlan {
  int tile = 0;
  int64_t splits = 1, kPerSplit = 0;
  bool operator==(const ConvPlan &o) const {
    return tile == o.tile && splits == o.splits && kPerSplit == o.kPerSplit;
  }
};

/// A tile whose kernel exists already costs no compile time: it wins unless another
/// is modeled this much faster (fewer unique kernels, a faster compile).
constexpr double kReuseAdvantage = 0.9;

/// The tile and split-K factor with the least modeled time on `arch`, among those that
/// launch at least one block per SM when any does; `known(t)` says whether tile t's
/// kernel is instantiated already; `exclude`: a tile not to consider (-1: none);
/// `operandBytes`: the input's and the weights' bytes. The time of
/// a plan is codegen::launchBounds of the tile's main loop (ConvTiles.h) over the padded work, the
/// same model `dlc inspect` applies to the compiled kernel.
ConvPlan chooseConvPlan(const ConvFamily &fam, int64_t M, int64_t NP, int64_t K, int64_t groups,
                        const GpuModel &g, size_t accBytes, double operandBytes,
                        const std::function<bool(int)> &known, int force, double *timeOut = nullptr,
                        Bounds *boundsOut = nullptr, int exclude = -1) {
  ConvPlan best;
  double bestTime = INFINITY;
  bool bestFills = false;
  const double achievable = g.dramBytesPerSecond * g.dramAchievable;
  for (int t = 0; t < fam.count; ++t) {
    if ((force >= 0 && force < fam.count && t != force) || t == exclude)
      continue;
    const ConvTileConfig &c = fam.tiles[t];
    const int BK = fam.bk(c);
    // (Float8 is one QMMA per m16n8k32 on sm_89, as INT8's IMMA; elsewhere converted.)
    const bool qmma = fam.fp8 && g.arch == "sm_89";
    const sass::KernelFacts facts = tileFacts(c, fam.tf32, fam.int8 || qmma, fam.fp8 && !qmma);
    int64_t tiles = groups * ceilDiv(M / groups, fam.channels(c)) * ceilDiv(NP, fam.positions(c));
    int perSm = blocksPerSm(g, fam.threads(c), c.registers, fam.smem(c, accBytes));
    for (int64_t s : kSplits) {
      int64_t kPer = ceilDiv(ceilDiv(K, s), BK) * BK;
      int64_t splits = ceilDiv(K, kPer);
      if (splits != s || (s > 1 && kPer < 2 * BK))
        continue;
      uint64_t blocks = static_cast<uint64_t>(tiles * splits);
      LaunchShape ls;
      ls.blocks = blocks;
      ls.threads = fam.threads(c);
      ls.blocksPerSm = perSm;
      ls.fill = smFill(g, blocks, perSm);
      ls.flops =
          2.0 * static_cast<double>(tiles) * c.bm * c.bn * static_cast<double>(splits * kPer);
      ls.bytesRead = operandBytes; // the input and the weights, each once (as inspect counts)
      ls.bytesWritten = static_cast<double>(splits * M * NP) * accBytes;
      const Bounds bounds = launchBounds(g, &facts, ls);
      double time = bounds.worst() * 1e-6;
      // The partial sums read back by conv_splitk_reduce, a launch of its own: it moved
      // 16 MB in 10.7 us on an H100 (half the achievable DRAM rate), and no launch took
      // under ~4 us there (2026-11-26, Nsight Compute).
      if (splits > 1)
        time += std::max(static_cast<double>(splits * M * NP) * accBytes / (0.5 * achievable),
                         g.launchMicros * 1e-6) +
                g.graphNodeMicros * 1e-6;
      if (known(t))
        time *= kReuseAdvantage;
      bool fills = blocks >= static_cast<uint64_t>(g.sms);
      if ((fills && !bestFills) || (fills == bestFills && time < bestTime * 0.999)) {
        bestTime = time;
        bestFills = fills;
        best = {t, splits, splits > 1 ? kPer : ceilDiv(K, BK) * BK};
        if (boundsOut)
          *boundsOut = bounds;
      }
    }
  }
  if (timeOut)
    *timeOut = bestTime;
  return best;
}

ConvShape convShape(const Window3 &w, int64_t M, int64_t groups) {
  ConvShape s{};
  s.N = w.N;
  s.C = w.C;
  s.M = M;
  s.Cg = w.C / groups;
  s.Mg = M / groups;
  setWindow(s, w);
  s.kSize = w.kSize();
  s.K = s.Cg * s.kSize;
  s.P = w.outSize();
  s.NP = w.N * s.P;
  s.inSize = w.inSize();
  s.kPerSplit = s.K;
  s.splits = 1;
  s.dKSize = Divmod::make(s.kSize);
  s.dK2 = Divmod::make(w.k[2]);
  s.dK1 = Divmod::make(w.k[1]);
  s.dP = Divmod::make(s.P);
  s.dNP = Divmod::make(s.NP);
  s.dOut2 = Divmod::make(w.out[2]);
  s.dOut1 = Divmod::make(w.out[1]);
  s.dOut0 = Divmod::make(w.out[0]);
  s.dM = Divmod::make(M);
  s.dMg = Divmod::make(s.Mg);
  s.dCg = Divmod::make(s.Cg);
  return s;
}

llvm::Error lowerConvForward(Lowering &l, const Node &n) {
  const Value *x = n.operand(0), *wt = n.operand(1), *b = n.operand(2), *y = n.result();
  const bool cl = isChannelsLast(n);
  const Shape xs = cl ? channelsFirst(x) : x->shape(), ws = cl ? channelsFirst(wt) : wt->shape();
  Window3 w = windowOf(n, xs, cl ? channelsFirst(y) : y->shape(), Shape(ws.begin() + 2, ws.end()));
  int64_t M = ws[0], groups = n.attrInt("group");
  const std::string layout = cl ? "true" : "false";
  l.allocate(y);
  if (y->type().numElements() == 0)
    return llvm::Error::success();
  DType dt = y->dtype();
  bool floating = dt == DType::F32 || dt == DType::F16 || dt == DType::BF16 || dt == DType::F64;
  ConvShape s = convShape(w, M, groups);
  // FP16/BF16 operands, and FP32 ones with --tf32: tensor cores (FP32 accumulators).
  // Channels-last: cp.async, ldmatrix and mma.sync (conv_fprop_mma), which copies whole
  // 16-byte chunks of channels as they are; an operand that is not that is first
  // rewritten by conv_pack, channels padded to a whole chunk: C = 3, a fused prologue,
  // an unaligned view, or a graph input or output (a caller may bind those at any
  // element-aligned address: Session::bindDevice).
  auto reduced = [](DType t) { return t == DType::F16 || t == DType::BF16; };
  const bool tensor = reduced(x->dtype()) && reduced(wt->dtype()) && x->dtype() == wt->dtype();
  const bool tf32 = l.options().tf32 && x->dtype() == DType::F32 && wt->dtype() == DType::F32;
  // INT8 operands (a quantized model's, fold-qdq): m16n8k32 into exact int32 sums.
  const bool int8 = x->dtype() == DType::I8 && wt->dtype() == DType::I8 && dt == DType::I32;
  // Float8 operands (an FP8 QDQ model's, fold-qdq): m16n8k32 e4m3/e5m2 into FP32 sums (no
  // bias: fold-qdq adds it after the scale), on the same 8-bit tiles as INT8.
  const bool fp8 = isFloat8(x->dtype()) && wt->dtype() == x->dtype() && dt == DType::F32 && !b;
  // Grouped convolutions too, when each group is whole 16-byte chunks of channels and
  // has at least 8 output channels (depthwise ones stay direct).
  const int64_t chunk = 16 / static_cast<int64_t>(dtypeSize(x->dtype()));
  // (blockIdx.y holds every group's channel tiles: at most 65535 of the narrowest.)
  bool mma = (tensor || tf32 || int8 || fp8) && cl && s.kSize <= 64 &&
             (!b || b->dtype() == (int8 ? DType::I32 : wt->dtype())) &&
             (groups == 1 || (s.Cg % chunk == 0 && s.Mg >= 8)) &&
             groups * ceilDiv(s.Mg, 32) <= 65535;
  // The operands conv_pack rewrites first (above), asked only on the mma path: bufferOf
  // would put constant weights that another kernel repacks into the package.
  auto xNeedsPack = [&] {
    return s.C % chunk != 0 || (l.group() && l.group()->computes(x)) || !fixedAligned(l, x, 16);
  };
  auto wNeedsPack = [&] { return s.C % chunk != 0 || !fixedAligned(l, wt, 16); };
  // TF32 and INT8 tensor cores are a choice, not a necessity: FP32 operands stay on the
  // CUDA-core implicit GEMM, INT8 ones on conv_direct's int32 arithmetic, where the
  // model prices that faster on every planned architecture (small layers at batch 1,
  // where tensor cores pay for operand padding, packing launches and wide tiles), unless
  // TF32 was asked for explicitly (tf32Everywhere: dlc compile --tf32; tests force INT8
  // with int8TensorCoresEverywhere) or a tile named.
  // (conv_direct has no plan of its own to ask: it is priced as the CUDA-core implicit
  // GEMM of the same sizes times kDirectMargin, as it does the same arithmetic with
  // less reuse, so that INT8 leaves tensor cores only where they lose by that much.)
  if (mma && (tf32 || int8) && groups == 1 && !(tf32 && l.options().tf32Everywhere) &&
      !(int8 && l.options().int8TensorCoresEverywhere) && l.options().convTile.empty()) {
    const int64_t Cp = (s.C + chunk - 1) / chunk * chunk;
    const double operandBytes =
        static_cast<double>(x->type().numElements() + wt->type().numElements()) *
        static_cast<double>(dtypeSize(x->dtype()));
    // (The conv_pack launches the tensor-core kernel would need first; constant weights
    // are packed when compiling.)
    const int packs = xNeedsPack() + (!wt->isConstant() && wNeedsPack());
    bool cudaCoreEverywhere = true;
    for (const std::string &arch : l.options().archs) { // (sm_90 where the targets name none)
      double tMma = 0, tCuda = 0;
      auto never = [](int) { return false; };
      chooseConvPlan(int8 ? kMmaInt8Conv : kMmaTf32Conv, M, s.NP, s.kSize * Cp, 1,
                     gpuModelFor(arch), int8 ? 8 : 4, operandBytes, never, -1, &tMma);
      chooseConvPlan(kCudaCoreConv, M, s.NP, s.K, 1, gpuModelFor(arch), 4, operandBytes, never, -1,
                     &tCuda);
      tMma += packs * gpuModelFor(arch).launchMicros * 1e-6; // (a launch's floor each)
      constexpr double kDirectMargin = 2.0;
      cudaCoreEverywhere &= (int8 ? kDirectMargin : 1.0) * tCuda < tMma;
    }
    if (cudaCoreEverywhere)
      mma = false;
  }
  // The prologue and epilogue functors. conv_fprop_mma stores a lane's two adjacent
  // channels at once (Out::store2) where every pair is whole and starts at an even index
  // (M and the group width even): one access where the output's buffer holds aligned
  // pairs, else two.
  const bool pairs = mma && M % 2 == 0 && s.Mg % 2 == 0;
  const Value *outV = l.group() ? l.group()->root()->result() : y;
  auto fin = loadFunctor(l, l.group(), x);
  if (!fin)
    return fin.takeError();
  auto fout =
      pairs ? storePairFunctor(l, l.group(), y, fixedAligned(l, outV, 2 * dtypeSize(outV->dtype())))
            : storeFunctor(l, l.group(), y);
  if (!fout)
    return fout.takeError();
  Functor &fx = *fin, &fo = *fout;
  const std::string xn = l.functorName(fx), on = l.functorName(fo), wtype = cudaType(wt->dtype()),
                    argsType = "dlc::ConvArgs<" + xn + ", " + on + ">";
  const bool packX = mma && xNeedsPack(), packW = mma && wNeedsPack();
  const int64_t C = s.C, Cp = (s.C + chunk - 1) / chunk * chunk, pixels = w.N * w.inSize(),
                Cg = s.Cg; // (Cp == C unless there is one group: then Cg == C)
  std::optional<BufferRef> xPacked, wPacked;
  if (mma && Cp != C) { // (one group: a group is whole chunks)
    s.C = s.Cg = Cp;
    s.K = s.kSize * Cp;
    s.kPerSplit = s.K;
    s.dCg = Divmod::make(Cp);
  }
  auto pack = [&](bool isX) {
    // x: [pixels, C]; the weights: [M * taps, Cg].
    const int64_t from = isX ? C : Cg, to = isX ? Cp : (Cp != C ? Cp : Cg);
    const uint64_t rows = static_cast<uint64_t>(isX ? pixels : M * s.kSize),
                   bytes = rows * static_cast<uint64_t>(to) * dtypeSize(x->dtype());
    if (!isX && wt->isConstant()) { // constant weights: packed here, once
      const size_t es = dtypeSize(wt->dtype());
      Tensor packed(TensorType(wt->dtype(), {static_cast<int64_t>(rows), to}));
      const auto *src = static_cast<const uint8_t *>(wt->data().raw());
      auto *dst = static_cast<uint8_t *>(packed.mutableRaw());
      for (uint64_t r = 0; r < rows; ++r)
        std::memcpy(dst + r * to * es, src + r * from * es, from * es);
      return l.constantBuffer(packed, n.result()->name() + ".w_packed");
    }
    BufferRef dst = l.temp(bytes, n.result()->name() + (isX ? ".x_packed" : ".w_packed"));
    ConvPackShape ps{};
    ps.C = from;
    ps.Cp = to;
    ps.total = static_cast<int64_t>(rows) * to;
    ps.dCp = Divmod::make(to);
    Instantiation inst{"dlc::conv_pack",
                       {l.indexType(std::max<int64_t>(ps.total, static_cast<int64_t>(rows) * from)),
                        cudaType(x->dtype()), xn},
                       "dlc::ConvPackArgs<" + xn + ">",
                       {xn}};
    uint32_t k = l.instantiate(inst);
    LaunchArgs a;
    a.shape(ps);
    a.pointer(offsetof(ConvPackShape, out), dst, bytes, true);
    if (!isX)
      a.pointer(offsetof(ConvPackShape, w), l.bufferOf(wt), wt->type().byteSize(), false);
    a.functor(fx, isX);
    l.launch(n, k, a, gridFor(static_cast<uint64_t>(ps.total), 256), 256, 0, 0);
    return dst;
  };
  if (packX)
    xPacked = pack(true);
  if (packW)
    wPacked = pack(false);
  // The arguments of the GEMM kernel and of the split-K reduction are the same struct;
  // what each launch touches (the cost model's traffic) differs.
  enum Role { Whole, SplitGemm, SplitReduce };
  auto args = [&](const ConvShape &shape, std::optional<BufferRef> partial, uint64_t partialBytes,
                  Role role) {
    LaunchArgs a;
    a.shape(shape);
    a.pointer(offsetof(ConvShape, w), wPacked ? *wPacked : l.bufferOf(wt),
              static_cast<uint64_t>(M * s.K) * dtypeSize(wt->dtype()), false, role != SplitReduce);
    if (b)
      a.pointer(offsetof(ConvShape, bias), l.bufferOf(b), b->type().byteSize(), false,
                role != SplitGemm);
    if (partial)
      a.pointer(offsetof(ConvShape, partial), *partial, partialBytes, role == SplitGemm);
    if (mma) // the kernel copies x as it is
      a.pointer(offsetof(ConvShape, x), xPacked ? *xPacked : l.bufferOf(x),
                static_cast<uint64_t>(pixels * s.C) * dtypeSize(x->dtype()), false,
                role != SplitReduce);
    a.functor(fx, !mma && role != SplitReduce);
    a.functor(fo, role != SplitGemm);
    return a;
  };
  double flops =
      2.0 * static_cast<double>(M) * static_cast<double>(s.NP) * static_cast<double>(s.K);
  int64_t maxIndex = std::max({x->type().numElements(), y->type().numElements(),
                               wt->type().numElements(), s.K * s.NP, pixels * s.C, M * s.K});
  // Depthwise, channels-last, with constant weights and a window of at most 7x7 in the
  // last two dimensions: conv_depthwise, its weights repacked here as [taps, C].
  const bool depthwise = cl && groups > 1 && groups == s.C && M == groups && wt->isConstant() &&
                         (dt == DType::F32 || dt == DType::F16 || dt == DType::BF16) &&
                         x->dtype() == wt->dtype() && (!b || b->dtype() == wt->dtype()) &&
                         w.k[0] == 1 && w.in[0] == 1 && w.out[0] == 1 && w.k[1] <= 7 &&
                         w.k[2] <= 7 && !(l.group() && l.group()->computes(x));
  if (depthwise) {
    const int64_t es = static_cast<int64_t>(dtypeSize(x->dtype())), taps = w.k[1] * w.k[2];
    // V channels per thread: 16 bytes where the channel count and the input's address
    // allow (a graph input may be bound at any element-aligned address), the filter
    // slice within 64 FP32 registers (3x3 FP16 at V = 8 took 148 registers, one block
    // per SM; at V = 4, 83 and three: the model prices them alike at batch 32), and
    // enough threads left to fill the largest GPU twice over (132 SMs x 512: small
    // layers at batch 1 want threads more than width).
    constexpr int64_t kFillThreads = 132 * 512;
    int64_t v = 16 / es;
    while (v > 1 &&
           (s.C % v != 0 || taps * v > 64 || !fixedAligned(l, x, static_cast<uint64_t>(v * es)) ||
            s.NP * s.C / v < kFillThreads))
      v /= 2;
    Tensor packed(TensorType(wt->dtype(), {taps, s.C}));
    const auto *src = static_cast<const uint8_t *>(wt->data().raw());
    auto *dst = static_cast<uint8_t *>(packed.mutableRaw());
    for (int64_t m = 0; m < s.C; ++m)
      for (int64_t t = 0; t < taps; ++t)
        std::memcpy(dst + (t * s.C + m) * es, src + (m * taps + t) * es, es);
    BufferRef wTaps = l.constantBuffer(packed, n.result()->name() + ".w_taps");
    // (Tap offsets from a window's corner, which may lie in the padding: signed indices
    // with this much headroom.)
    const int64_t reach = ((w.k[1] - 1) * w.dil[1] * w.in[2] + (w.k[2] - 1) * w.dil[2] +
                           w.padB[1] * w.in[2] + w.padB[2]) *
                          s.C;
    Instantiation inst{"dlc::conv_depthwise",
                       {std::to_string(w.k[1]), std::to_string(w.k[2]), std::to_string(v),
                        l.indexType(maxIndex + reach), cudaType(x->dtype()), xn, on},
                       argsType,
                       {xn, on}};
    uint32_t k = l.instantiate(inst);
    LaunchArgs a;
    a.shape(s);
    a.pointer(offsetof(ConvShape, w), wTaps, packed.byteSize(), false);
    if (b)
      a.pointer(offsetof(ConvShape, bias), l.bufferOf(b), b->type().byteSize(), false);
    a.pointer(offsetof(ConvShape, x), l.bufferOf(x), x->type().byteSize(), false);
    a.functor(fx, false);
    a.functor(fo);
    // (At least C / V threads: each keeps one channel vector.)
    const int64_t cv = s.C / v,
                  blocks =
                      std::max(ceilDiv(cv, 256), std::min<int64_t>(ceilDiv(s.NP * cv, 256), 65535));
    l.launch(n, k, a, static_cast<uint32_t>(blocks), 256, 0, flops);
    return llvm::Error::success();
  }
  // (Float8 operands off the mma path, NCHW or too wide a window: conv_direct, or
  // conv_depthwise where it applies, which load them through their compute type, FP32.)
  if ((groups != 1 && !mma) || ((!floating || fp8) && !mma)) {
    std::vector<std::string> targs = {layout, l.indexType(maxIndex), wtype, xn, on};
    if (b && b->dtype() != wt->dtype()) // (an int32 bias of int8 weights)
      targs.push_back(cudaType(b->dtype()));
    Instantiation inst{"dlc::conv_direct", targs, argsType, {xn, on}};
    inst.integer = !floating;
    uint32_t k = l.instantiate(inst);
    LaunchArgs a = args(s, std::nullopt, 0, Whole);
    l.launch(n, k, a, gridFor(y->type().numElements(), 256), 256, 0, flops);
    return llvm::Error::success();
  }
  // (Split-K partial sums in the epilogue's compute type: 64-bit for int32 sums.)
  size_t accBytes = dt == DType::F64 || (int8 && mma) ? 8 : 4;
  const ConvFamily &fam = mma      ? (tf32   ? kMmaTf32Conv
                                      : int8 ? kMmaInt8Conv
                                      : fp8  ? kMmaFp8Conv
                                             : kMmaConv)
                          : tensor ? kTensorCoreConv
                                   : kCudaCoreConv;
  bool pointwise = w.kSize() == 1 && s.P == s.inSize;
  for (int d = 0; d < 3; ++d)
    pointwise &= w.stride[d] == 1 && w.padB[d] == 0;
  auto igemm = [&](int t, int64_t splits) {
    const ConvTileConfig &c = fam.tiles[t];
    std::string index = l.indexType(std::max(maxIndex, splits * M * s.NP));
    std::vector<std::string> targs = {fam.tile(c)};
    if (fam.kind == ConvFamily::Mma) {
      targs.insert(targs.end(),
                   {index, cudaType(x->dtype()), s.kSize > 32 ? "unsigned long long" : "unsigned",
                    pairs ? "true" : "false", xn, on});
    } else {
      targs.insert(targs.end(), {pointwise ? "true" : "false", layout, index});
      if (tensor)
        targs.push_back(cudaType(x->dtype()));
      targs.insert(targs.end(), {wtype, xn, on});
    }
    Instantiation inst{fam.kernel(), targs, argsType, {xn, on}};
    inst.needsSync = true;
    inst.tensorCore = tensor || mma;
    inst.tf32 = mma && tf32;
    inst.integer = int8;
    inst.fp8 = mma && fp8;
    return inst;
  };
  int forced = -1;
  for (int t = 0; !l.options().convTile.empty() && t < fam.count; ++t)
    if (convTileName(fam.tiles[t]) == l.options().convTile)
      forced = t;
  const double operandBytes =
      static_cast<double>(x->type().numElements()) * static_cast<double>(dtypeSize(x->dtype())) +
      static_cast<double>(wt->type().numElements()) * static_cast<double>(dtypeSize(wt->dtype()));
  auto plans = l.perArch<ConvPlan>([&](const std::string &arch) {
    return chooseConvPlan(
        fam, M, s.NP, s.K, groups, gpuModelFor(arch), accBytes, operandBytes,
        [&](int t) { return l.instantiated(igemm(t, 1)); }, forced);
  });
  // With tactics (timed on the GPU), a second tile of ours where the model rates the
  // best other tile within kRunnerUp of the best, on layers it prices at kWorthTiming
  // or more (below, a launch's overhead and the timing's noise decide): the model
  // ranks tiles, the GPU decides between close ones. (tile -1: no runner-up on that
  // architecture.)
  constexpr double kRunnerUp = 1.25, kWorthTiming = 10e-6;
  std::vector<std::pair<ConvPlan, std::vector<std::string>>> runnerUp;
  if (l.options().secondTiles && forced < 0 && fam.count > 1) {
    runnerUp = l.perArch<ConvPlan>([&](const std::string &arch) {
      const GpuModel &g = gpuModelFor(arch);
      auto known = [&](int t) { return l.instantiated(igemm(t, 1)); };
      double best = 0, second = 0;
      ConvPlan b =
          chooseConvPlan(fam, M, s.NP, s.K, groups, g, accBytes, operandBytes, known, -1, &best);
      ConvPlan r = chooseConvPlan(fam, M, s.NP, s.K, groups, g, accBytes, operandBytes, known, -1,
                                  &second, nullptr, b.tile);
      if (!(second <= kRunnerUp * best) || best < kWorthTiming || r.tile == b.tile)
        r.tile = -1;
      return r;
    });
    if (std::all_of(runnerUp.begin(), runnerUp.end(),
                    [](const auto &p) { return p.first.tile < 0; }))
      runnerUp.clear();
  }
  // The split-K partial sums (a temporary of this node's steps), sized for the largest
  // plan.
  int64_t partialElems = 0;
  for (const auto *ps : {&plans, &runnerUp})
    for (const auto &[plan, archs] : *ps)
      if (plan.tile >= 0 && plan.splits > 1)
        partialElems = std::max(partialElems, plan.splits * M * s.NP);
  std::optional<BufferRef> partial;
  if (partialElems)
    partial =
        l.temp(static_cast<uint64_t>(partialElems) * accBytes, n.result()->name() + ".partial");
  // Our kernels for a set of per-architecture plans; returns their description.
  auto emitOwn = [&](const std::vector<std::pair<ConvPlan, std::vector<std::string>>> &set) {
    std::string desc;
    for (const auto &[plan, archs] : set) {
      if (plan.tile < 0)
        continue;
      const ConvTileConfig &c = fam.tiles[plan.tile];
      desc += std::string(desc.empty() ? "" : "; ") + std::string(fam.kernel()).substr(5) + " " +
              convTileName(c) + (plan.splits > 1 ? " split-K " + std::to_string(plan.splits) : "") +
              (archs.empty() ? "" : " (" + llvm::join(archs, ", ") + ")");
      std::string index = l.indexType(std::max(maxIndex, plan.splits * M * s.NP));
      uint32_t k = l.instantiate(igemm(plan.tile, plan.splits));
      ConvShape ps = s;
      ps.splits = plan.splits;
      ps.kPerSplit = plan.kPerSplit;
      uint64_t partialBytes = static_cast<uint64_t>(plan.splits * M * s.NP) * accBytes;
      LaunchArgs a = args(ps, plan.splits > 1 ? partial : std::nullopt, partialBytes,
                          plan.splits > 1 ? SplitGemm : Whole);
      l.launch(n, k, a, static_cast<uint32_t>(ceilDiv(s.NP, fam.positions(c))),
               static_cast<uint32_t>(fam.threads(c)),
               fam.kind == ConvFamily::Mma ? static_cast<uint32_t>(fam.smem(c, accBytes)) : 0,
               flops, static_cast<uint32_t>(groups * ceilDiv(s.Mg, fam.channels(c))),
               static_cast<uint32_t>(plan.splits), archs);
      if (plan.splits > 1) {
        std::vector<std::string> rargs = {layout, index, wtype, xn, on};
        if (b && b->dtype() != wt->dtype()) // (an int32 bias of int8 weights)
          rargs.push_back(cudaType(b->dtype()));
        Instantiation red{"dlc::conv_splitk_reduce", rargs, argsType, {xn, on}};
        red.integer = int8;
        uint32_t rk = l.instantiate(red);
        LaunchArgs ra = args(ps, partial, partialBytes, SplitReduce);
        l.launch(n, rk, ra, gridFor(static_cast<uint64_t>(M * s.NP), 256), 256, 0,
                 static_cast<double>(plan.splits * M * s.NP), 1, 1, archs);
      }
    }
    return desc;
  };
  const size_t ownFrom = l.stepCount();
  const std::string ownDesc = emitOwn(plans);
  // The layer's tactic group, made when it has a second candidate.
  uint32_t group = 0;
  uint8_t nextAlt = 2;
  auto alternatives = [&] {
    if (!group) {
      group = l.newAltGroup();
      l.markAlt(ownFrom, group, 1, pkg::TacticKind::Dlc, ownDesc);
    }
  };
  if (!runnerUp.empty()) {
    alternatives();
    const size_t from = l.stepCount();
    const std::string desc = emitOwn(runnerUp);
    l.markAlt(from, group, nextAlt++, pkg::TacticKind::Dlc, desc);
  }
  // cuDNN as a tactic beside our kernels (pkg::CudnnConv), where it reads the operands
  // as they are: 16-bit channels-last tensors, whole 16-byte chunks of channels, no
  // fused prologue. It writes the layer's output itself, with the bias and a ReLU in
  // its own fusion, when that is the whole layer (the op table's GEMM-epilogue class
  // says which member is a ReLU); otherwise conv_finish adds the bias and applies the
  // group's epilogue to its result.
  if (l.options().vendorTactics && tensor && mma && !packX && !packW && xs.size() >= 4 &&
      xs.size() <= 5) {
    const size_t nd = xs.size() - 2, es = dtypeSize(dt);
    const uint64_t yBytes = static_cast<uint64_t>(M * s.NP) * es;
    const FusionGroup *fg = l.group();
    const bool relu = fg && fg->prologue.empty() && fg->nodes.size() == 2 &&
                      fg->epilogue.size() == 1 &&
                      fg->epilogue[0]->def().fusibility.gemmEpilogue == GemmEpilogueOp::Relu &&
                      fg->epilogue[0]->operand(0) == y && outV->dtype() == dt;
    // (cuDNN is told every tensor is 16-byte aligned: a bias that is not, a graph input
    // for one, goes through conv_finish.)
    const bool direct =
        (!fg || relu) && fixedAligned(l, outV, 16) && (!b || fixedAligned(l, b, 16));
    CudnnConvStep v;
    v.dtype = dt;
    v.x = l.bufferOf(x);
    v.w = l.bufferOf(wt);
    v.y = direct ? l.bufferOf(outV) : l.temp(yBytes, n.result()->name() + ".cudnn_y");
    if (direct && b)
      v.bias = l.bufferOf(b);
    v.relu = direct && relu;
    v.n = w.N;
    v.c = s.C;
    v.k = M;
    v.groups = groups;
    for (size_t d = 3 - nd; d < 3; ++d) {
      v.in.push_back(w.in[d]);
      v.out.push_back(w.out[d]);
      v.kernel.push_back(w.k[d]);
      v.stride.push_back(w.stride[d]);
      v.dilation.push_back(w.dil[d]);
      v.padBegin.push_back(w.padB[d]);
      v.padEnd.push_back(w.padE[d]);
    }
    // Engines that need more workspace than this are passed over.
    v.workspaceBytes = std::clamp<uint64_t>(2 * yBytes, 4 << 20, 64 << 20);
    v.workspace = l.temp(v.workspaceBytes, n.result()->name() + ".cudnn_workspace");
    alternatives();
    const size_t vendorFrom = l.stepCount();
    l.addCudnnConv(v, n);
    if (!direct) {
      ConvShape fs = s;
      fs.splits = 1;
      fs.kPerSplit = s.K;
      uint32_t k = l.instantiate({"dlc::conv_finish",
                                  {l.indexType(maxIndex), cudaType(dt), wtype, xn, on},
                                  argsType,
                                  {xn, on}});
      LaunchArgs a = args(fs, v.y, yBytes, SplitReduce);
      l.launch(n, k, a, gridFor(static_cast<uint64_t>(M * s.NP), 256), 256, 0,
               static_cast<double>(M * s.NP));
    }
    l.markAlt(vendorFrom, group, nextAlt++, pkg::TacticKind::Cudnn,
              std::string("cuDNN graph API: convolution forward") + (v.bias ? " + bias" : "") +
                  (v.relu ? " + ReLU" : "") +
                  (direct ? "" : ", then conv_finish (bias and fused epilogue)"));
  }
  return llvm::Error::success();
}

llvm::Error lowerConvTranspose(Lowering &l, const Node &n) {
  const Value *x = n.operand(0), *wt = n.operand(1), *b = n.operand(2), *y = n.result();
  // The window's "in" is ConvTranspose's output and "out" its input (the gather view).
  Window3 w = windowOf(n, y->shape(), x->shape(), spatialKernel(wt));
  int64_t groups = n.attrInt("group"), total = y->type().numElements();
  l.allocate(y);
  if (total == 0)
    return llvm::Error::success();
  ConvTransposeShape s{};
  s.N = w.N;
  s.C = x->shape()[1];
  s.Cg = s.C / groups;
  s.Mg = wt->shape()[1];
  s.M = s.Mg * groups;
  s.total = total;
  setWindow(s, w);
  for (int d = 0; d < 3; ++d)
    s.dStride[d] = Divmod::make(w.stride[d]);
  s.ySize = w.inSize();
  s.xSize = w.outSize();
  s.kSize = w.kSize();
  s.dY2 = Divmod::make(w.in[2]);
  s.dY1 = Divmod::make(w.in[1]);
  s.dY0 = Divmod::make(w.in[0]);
  s.dM = Divmod::make(s.M);
  s.dMg = Divmod::make(s.Mg);
  auto foOr = storeFunctor(l, l.group(), y);
  if (!foOr)
    return foOr.takeError();
  Functor &fo = *foOr;
  std::string on = l.functorName(fo);
  int64_t maxIndex = std::max({x->type().numElements(), total, wt->type().numElements()});
  Instantiation inst{"dlc::conv_transpose",
                     {l.indexType(maxIndex), cudaType(x->dtype()), on},
                     "dlc::ConvTransposeArgs<" + on + ">",
                     {on}};
  uint32_t k = l.instantiate(inst);
  LaunchArgs a;
  a.shape(s);
  a.pointer(offsetof(ConvTransposeShape, w), l.bufferOf(wt), wt->type().byteSize(), false);
  if (b)
    a.pointer(offsetof(ConvTransposeShape, bias), l.bufferOf(b), b->type().byteSize(), false);
  a.slot(l.bufferOf(x), x->type().byteSize(), false);
  a.functor(fo);
  l.launch(n, k, a, gridFor(total, 256), 256, 0, 2.0 * x->type().numElements() * s.Mg * w.kSize());
  return llvm::Error::success();
}

} // namespace

std::vector<std::string> convTileNames() {
  std::set<std::string> names;
  for (const ConvFamily *f : {&kCudaCoreConv, &kTensorCoreConv, &kMmaConv, &kMmaTf32Conv})
    for (int t = 0; t < f->count; ++t)
      names.insert(convTileName(f->tiles[t]));
  return {names.begin(), names.end()};
}

bool ownGemmIsFaster(const GpuModel &g, int64_t rows, int64_t K, int64_t N, DType dt) {
  const double es = static_cast<double>(dtypeSize(dt)),
               operandBytes = static_cast<double>(rows * K + K * N) * es,
               outBytes = static_cast<double>(rows * N) * es;
  // Both routes run a main loop over the same K; the library's model has no latency
  // bound, so each side is priced by its issue and memory bounds (our latency chain is
  // one cuBLASLt's kernel has too), the library's route plus what it adds: a kernel
  // for the epilogue, a graph node and a pass over the output.
  double own = 0;
  Bounds ob;
  chooseConvPlan(
      kMmaConv, N, rows, K, 1, g, 4, operandBytes, [](int) { return false; }, -1, &own, &ob);
  own = own * 1e6 - ob.worst() + std::max(ob.issue, ob.memory);
  LibraryGemm lg;
  lg.m = static_cast<uint64_t>(rows);
  lg.n = static_cast<uint64_t>(N);
  lg.k = static_cast<uint64_t>(K);
  lg.bytes = operandBytes + outBytes;
  lg.tensor = true;
  const Bounds lb = libraryGemmBounds(g, lg);
  const double library = std::max(lb.issue, lb.memory) + g.graphNodeMicros +
                         1e6 * 2 * outBytes / (g.dramBytesPerSecond * g.dramAchievable);
  return own < library;
}

bool ownGemmIsFaster(const std::vector<std::string> &targets, int64_t rows, int64_t K, int64_t N,
                     DType dt) {
  std::vector<std::string> archs = cubinArchs(targets.empty() ? defaultGpuTargets() : targets);
  if (archs.empty())
    archs = {"sm_90"};
  return std::all_of(archs.begin(), archs.end(), [&](const std::string &arch) {
    return ownGemmIsFaster(gpuModelFor(arch), rows, K, N, dt);
  });
}

void registerConvLowerings(LoweringRegistry &r) {
  r.op(OpKind::Conv, lowerConvForward);
  r.op(OpKind::ConvTranspose, lowerConvTranspose);
}

} // namespace dlc::codegen
