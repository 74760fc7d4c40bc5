// The kernel library (codegen/device/*.cuh) on the emu backend against the reference
// interpreter, one test per kernel kind, at odd extents: non-multiples of the tiles,
// length-1 dims, short and long rows. Every case runs twice: with the 32-bit index
// instantiations the code generator picks for these shapes, and with the 64-bit ones
// (LoweringOptions::wideIndices). A last case has more than 2^31 elements, where the
// code generator must pick 64-bit indices by itself.
#include "KernelLibraryTestUtil.h"
#include "device/dlc_params.h"
#include "dlc/codegen/Compiler.h"
#include "dlc/ir/TextIR.h"
#include "dlc/package/Package.h"
#include "dlc/passes/Pass.h"
#include "dlc/runtime/Runtime.h"
#include "emitters/ConvTiles.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <gtest/gtest.h>
#include <limits>
#include <random>
#include <set>

using namespace dlc;
using namespace dlc::test;

TEST(KernelLibrary, DivmodIsExactForEveryDividendWidth) {
  std::mt19937_64 rng(5);
  std::vector<int64_t> divisors = {1,   2,    3,     7,     10,    49,      64,
                                   196, 1000, 12544, 65535, 65537, 1 << 30, (1ll << 31) - 1};
  for (int i = 0; i < 200; ++i)
    divisors.push_back(1 + static_cast<int64_t>(rng() % 100000));
  for (int64_t d : divisors) {
    Divmod dm = Divmod::make(d);
    std::vector<uint64_t> xs = {0, 1, static_cast<uint64_t>(d - 1), static_cast<uint64_t>(d),
                                (1ull << 31) - 1};
    for (int i = 0; i < 200; ++i)
      xs.push_back(rng() % (1ull << 31));
    for (uint64_t x : xs) { // 32-bit: x < 2^31
      uint32_t q = static_cast<uint32_t>(((static_cast<uint64_t>(x) * dm.m32 >> 32) + x) >> dm.s);
      ASSERT_EQ(q, x / static_cast<uint64_t>(d)) << "32-bit " << x << " / " << d;
    }
    for (int i = 0; i < 200; ++i) { // 64-bit: x < 2^63
      uint64_t x = rng() >> 1;
      uint64_t hi = static_cast<uint64_t>((static_cast<unsigned __int128>(x) * dm.m64) >> 64);
      ASSERT_EQ((hi + x) >> dm.s, x / static_cast<uint64_t>(d)) << "64-bit " << x << " / " << d;
    }
  }
}

TEST(KernelLibrary, ElementwiseScalarAndFloat4) {
  check({"chain float4",
         R"(graph @g(%x: f32[3,7,4], %b: f32[4]) -> ("y": f32[3,7,4]) {
  %a = Add(%x, %x) : f32[3,7,4]
  %t = Tanh(%a) : f32[3,7,4]
  %y = Mul(%t, %x) : f32[3,7,4]
  return %y
})",
         {"dlc::elementwise"}});
  check({"broadcast, transpose, slice, concat, gather",
         R"(graph @g(%x: f32[5,1,3], %z: f32[5,2,3], %i: i64[3]) -> ("y": f32[3,3,5]) {
  %e = Expand(%x) {shape = [5, 2, 3]} : f32[5,2,3]
  %c = Concat(%e, %z) {axis = 1} : f32[5,4,3]
  %s = Slice(%c) {axes = [1], ends = [4], starts = [1], steps = [1]} : f32[5,3,3]
  %t = Transpose(%s) {perm = [1, 2, 0]} : f32[3,3,5]
  %g = Gather(%t, %i) {axis = 0} : f32[3,3,5]
  %y = Sigmoid(%g) : f32[3,3,5]
  return %y
})",
         {"dlc::elementwise"},
         {{"i", ints(ir::DType::I64, {3}, {2, -3, 1})}}});
}

TEST(KernelLibrary, ElementwiseHalf2) {
  for (const char *dt : {"f16", "bf16"}) {
    std::string t = dt, shape = t + "[4,5]";
    std::string ir = "graph @g(%x: " + shape + ", %w: " + t + "[5,5]) -> (\"y\": " + shape +
                     ") {\n"
                     "  %m = MatMul(%x, %w) : " +
                     shape +
                     "\n"
                     "  %a = Tanh(%m) : " +
                     shape +
                     "\n"
                     "  %b = Mul(%a, %m) : " +
                     shape +
                     "\n"
                     "  %y = MatMul(%b, %w) : " +
                     shape +
                     "\n"
                     "  return %y\n}";
    check({dt, ir.c_str(), {"dlc::elementwise"}, {}, 2, true, t == "f16" ? 4e-3 : 2e-2});
    auto g = ir::parseGraph(ir, "h2");
    ASSERT_TRUE(bool(g)) << llvm::toString(g.takeError());
    passes::PassManager pm;
    passes::PassContext ctx;
    ASSERT_FALSE(bool(pm.run(**g, passes::defaultPipeline(2), ctx)));
    codegen::CompileOptions co;
    co.targets = {"compute_80"};
    co.useCache = false;
    codegen::CompileReport rep;
    auto bytes = codegen::compileGraph(**g, co, &rep);
    ASSERT_TRUE(bool(bytes)) << llvm::toString(bytes.takeError());
    const std::string vecType = t == "f16" ? "__half2" : "__nv_bfloat162";
    EXPECT_NE(rep.cudaSource.find("reinterpret_cast<const " + vecType + " *>"), std::string::npos)
        << dt << ": the element-wise group is not vectorized\n"
        << rep.cudaSource;
  }
  check({"odd f16",
         R"(graph @g(%x: f16[3,5], %w: f16[5,5]) -> ("y": f16[3,5]) {
  %m = MatMul(%x, %w) : f16[3,5]
  %a = Tanh(%m) : f16[3,5]
  %y = MatMul(%a, %w) : f16[3,5]
  return %y
})",
         {"dlc::elementwise"},
         {},
         2,
         true,
         4e-3});
}

// The row form of anchor-free groups: a thread takes a run of 16 bytes along the last
// dim (8 FP16 channels of an NHWC tensor), splits its index once and reads each operand
// that varies along the run as one vector; per-row operands are read once per run. The
// groups sit between MatMuls: a graph input or output (a caller's pointer, aligned only
// to its element) is never read or written as a vector.
TEST(KernelLibrary, ElementwiseRowsMoveVectors) {
  auto rows = [](const char *name, const std::string &ir, double tol, const char *has,
                 std::map<std::string, ir::Tensor> inputs = {}) {
    KernelCase c{name, ir.c_str(), {"dlc::elementwise"}, std::move(inputs)};
    c.tol = tol;
    c.sourceHas = has;
    check(c);
  };
  rows("per-channel scale and shift, ReLU, f16",
       R"(graph @g(%x: f16[3,5,24], %w: f16[24,24]) -> ("y": f16[3,5,24]) {
  %s = )" + randomConst(ir::DType::F16, {24}, 1) +
           R"(
  %b = )" + randomConst(ir::DType::F16, {3, 5, 1}, 2) +
           R"(
  %m0 = MatMul(%x, %w) : f16[3,5,24]
  %m = Mul(%m0, %s) : f16[3,5,24]
  %a = Add(%m, %b) : f16[3,5,24]
  %r = Tanh(%a) : f16[3,5,24]
  %y = MatMul(%r, %w) : f16[3,5,24]
  return %y
})",
       2e-2, "dlc::VecOf<__half, 8>");
  // im2col of an NHWC tensor: strided spatial slices concatenated along channels.
  rows("im2col, slices and concat along channels",
       R"(graph @g(%x: f16[2,7,7,16], %w: f16[16,16], %v: f16[48,8]) -> ("y": f16[2,3,3,8]) {
  %m = MatMul(%x, %w) : f16[2,7,7,16]
  %a = Slice(%m) {axes = [1, 2], ends = [6, 6], starts = [0, 0], steps = [2, 2]} : f16[2,3,3,16]
  %b = Slice(%m) {axes = [1, 2], ends = [7, 7], starts = [1, 0], steps = [2, 2]} : f16[2,3,3,16]
  %c = Slice(%m) {axes = [1, 2], ends = [7, 7], starts = [1, 1], steps = [2, 2]} : f16[2,3,3,16]
  %k = Concat(%a, %b, %c) {axis = 3} : f16[2,3,3,48]
  %y = MatMul(%k, %v) : f16[2,3,3,8]
  return %y
})",
       2e-2, "dlc::VecOf<__half, 8>");
  // A piece of 4 channels: runs of 4.
  rows(
      "concat of 4-channel pieces, transpose keeping the last dim",
      R"(graph @g(%x: f16[2,3,4], %e: f16[4,4], %z: f16[3,2,12], %f: f16[12,12], %v: f16[16,8]) -> ("y": f16[3,2,8]) {
  %x1 = MatMul(%x, %e) : f16[2,3,4]
  %z1 = MatMul(%z, %f) : f16[3,2,12]
  %t = Transpose(%x1) {perm = [1, 0, 2]} : f16[3,2,4]
  %k = Concat(%t, %z1) {axis = 2} : f16[3,2,16]
  %y = MatMul(%k, %v) : f16[3,2,8]
  return %y
})",
      2e-2, "dlc::VecOf<__half, 4>");
  // FP32 in, FP16 out: 8 lanes of the narrower type (32 bytes of the wider).
  rows("cast",
       R"(graph @g(%x: f32[4,16], %w: f32[16,16], %s: f32[4,1], %v: f16[16,8]) -> ("y": f16[4,8]) {
  %m = MatMul(%x, %w) : f32[4,16]
  %d = Sub(%m, %s) : f32[4,16]
  %c = Cast(%d) {to = 10} : f16[4,16]
  %y = MatMul(%c, %v) : f16[4,8]
  return %y
})",
       1e-2, "dlc::VecOf<float, 8>");
  // Rows gathered by an index read once per run (an embedding lookup).
  rows("gathered rows",
       R"(graph @g(%w0: f32[10,8], %e: f32[8,8], %i: i64[2,3], %v: f32[8,4]) -> ("y": f32[2,3,4]) {
  %w = MatMul(%w0, %e) : f32[10,8]
  %g = Gather(%w, %i) {axis = 0} : f32[2,3,8]
  %s = Sigmoid(%g) : f32[2,3,8]
  %y = MatMul(%s, %v) : f32[2,3,4]
  return %y
})",
       1e-4, "dlc::VecOf<float, 4>", {{"i", ints(ir::DType::I64, {2, 3}, {0, 9, -1, 3, 3, -10})}});
  // The last dim moved: no run is contiguous, the scalar form.
  KernelCase moved{"transpose of the last dim",
                   R"(graph @g(%x: f16[8,16], %w: f16[16,16], %v: f16[8,8]) -> ("y": f16[16,8]) {
  %m = MatMul(%x, %w) : f16[8,16]
  %t = Transpose(%m) {perm = [1, 0]} : f16[16,8]
  %n = Neg(%t) : f16[16,8]
  %y = MatMul(%n, %v) : f16[16,8]
  return %y
})",
                   {"dlc::elementwise"}};
  moved.tol = 2e-2;
  moved.sourceLacks = "dlc::VecOf<";
  check(moved);
}

TEST(KernelLibrary, Pooling) {
  check({"max pool with indices",
         R"(graph @g(%x: f32[2,3,7,9]) -> ("y": f32[2,3,4,4], "i": i64[2,3,4,4]) {
  %y, %i = MaxPool(%x) {kernel_shape = [3, 3], pads = [1, 1, 1, 0], strides = [2, 2]} : f32[2,3,4,4], i64[2,3,4,4]
  return %y, %i
})",
         {"dlc::pool_window"}});
  check({"average pool counting pads",
         R"(graph @g(%x: f32[1,2,5,6]) -> ("y": f32[1,2,3,3]) {
  %y = AveragePool(%x) {count_include_pad = 1, kernel_shape = [3, 2], pads = [1, 0, 1, 0], strides = [2, 2]} : f32[1,2,3,3]
  return %y
})",
         {"dlc::pool_window"}});
  check(
      {"global pools, short and long rows",
       R"(graph @g(%x: f32[2,3,5,3], %z: f32[1,2,17,19]) -> ("a": f32[2,3,1,1], "m": f32[1,2,1,1]) {
  %a = GlobalAveragePool(%x) : f32[2,3,1,1]
  %m = GlobalMaxPool(%z) : f32[1,2,1,1]
  return %a, %m
})",
       {"dlc::reduce"}});
}

// MaxPool's gradient (MaxPoolGrad): a gather over the windows that cover each input
// element, the maximum found again in x. Overlapping windows with pads (ReLU zeros make
// ties: the first maximum in window order takes the gradient, as the forward picks it),
// dilation with ceil_mode, 1-D; channels-last in runs of 8 FP16 channels (behind
// MatMuls: a graph input is never read as a vector), and a ReLU gradient fused after it.
TEST(KernelLibrary, MaxPoolGradientGathers) {
  check(
      {"max pool gradient, NCHW",
       R"(graph @g(%x0: f32[2,3,7,9], %dy: f32[2,3,4,4], %z: f32[1,2,9,8], %dz: f32[1,2,3,3], %u: f32[2,2,11], %du: f32[2,2,5]) -> ("dx": f32[2,3,7,9], "dz2": f32[1,2,9,8], "du2": f32[2,2,11]) {
  %x = Relu(%x0) : f32[2,3,7,9]
  %dx = MaxPoolGrad(%x, %dy) {kernel_shape = [3, 3], pads = [1, 1, 1, 0], strides = [2, 2]} : f32[2,3,7,9]
  %dz2 = MaxPoolGrad(%z, %dz) {ceil_mode = 1, dilations = [2, 2], kernel_shape = [2, 3], strides = [3, 2]} : f32[1,2,9,8]
  %du2 = MaxPoolGrad(%u, %du) {kernel_shape = [3], pads = [1, 1], strides = [2]} : f32[2,2,11]
  return %dx, %dz2, %du2
})",
       {"dlc::pool_max_grad"}});
  const std::string nhwc =
      R"(graph @g(%x: f16[2,7,9,16], %w: f16[16,16], %dy: f16[2,4,5,16], %r: f16[2,7,9,16]) -> ("g": f16[2,7,9,16]) {
  %m = MatMul(%x, %w) : f16[2,7,9,16]
  %h = Relu(%m) : f16[2,7,9,16]
  %d = MatMul(%dy, %w) : f16[2,4,5,16]
  %dx = MaxPoolGrad(%h, %d) {channels_last = 1, kernel_shape = [3, 3], pads = [1, 1, 1, 1], strides = [2, 2]} : f16[2,7,9,16]
  %zero = const f16[] dense<[0.0]>
  %pos = Greater(%r, %zero) : bool[2,7,9,16]
  %gr = Where(%pos, %dx, %zero) : f16[2,7,9,16]
  %g = MatMul(%gr, %w) : f16[2,7,9,16]
  return %g
})";
  KernelCase cl{
      "max pool gradient, NHWC runs, ReLU gradient fused", nhwc.c_str(), {"dlc::pool_max_grad"}};
  cl.tol = 2e-2;
  cl.sourceHas = "dlc::pool_max_grad<true, 8,";
  cl.launches = 1; // the gradient with the Where fused (the MatMuls are library calls)
  check(cl);
}

TEST(KernelLibrary, Reductions) {
  check({"middle axes, strided views",
         R"(graph @g(%x: f32[3,5,4,7]) -> ("s": f32[3,1,4,1], "p": f32[1,5,4,1]) {
  %s = ReduceSum(%x) {axes = [1, 3], keepdims = 1} : f32[3,1,4,1]
  %p = ReduceMax(%x) {axes = [0, 3], keepdims = 1} : f32[1,5,4,1]
  return %s, %p
})",
         {"dlc::reduce"}});
  check({"long rows: block per output",
         R"(graph @g(%x: f32[3,300]) -> ("m": f32[3], "n": f32[3], "q": f32[300]) {
  %m = ReduceMean(%x) {axes = [1], keepdims = 0} : f32[3]
  %n = ReduceMin(%x) {axes = [1], keepdims = 0} : f32[3]
  %q = ReduceProd(%x) {axes = [0], keepdims = 0} : f32[300]
  return %m, %n, %q
})",
         {"dlc::reduce"},
         {},
         2,
         true,
         1e-4});
  check({"integer max",
         R"(graph @g(%x: i64[4,70]) -> ("m": i64[4,1]) {
  %m = ReduceMax(%x) {axes = [1], keepdims = 1} : i64[4,1]
  return %m
})",
         {"dlc::reduce"}});
}

// Reductions over the middle of [outer, len, inner] with inner >= 16 take reduce_cols
// when the columns are short or spread over enough tiles: columns cut at a warp's edge
// (33, 40, 48), rows longer than a block's 8 slices, a fused Relu prologue, FP16
// accumulated in FP32, and channels-last global pooling.
TEST(KernelLibrary, ColumnReductions) {
  check(
      {"columns of [outer, len, inner]",
       R"(graph @g(%x: f32[3,120,48], %y: f32[2,3,9,33], %z: f32[100,20]) -> ("a": f32[3,48], "b": f32[2,1,1,33], "c": f32[20], "d": f32[3,1,48]) {
  %a = ReduceMax(%x) {axes = [1], keepdims = 0} : f32[3,48]
  %b = ReduceSum(%y) {axes = [1, 2], keepdims = 1} : f32[2,1,1,33]
  %c = ReduceMean(%z) {axes = [0], keepdims = 0} : f32[20]
  %r = Relu(%x) : f32[3,120,48]
  %d = ReduceMin(%r) {axes = [1], keepdims = 1} : f32[3,1,48]
  return %a, %b, %c, %d
})",
       {"dlc::reduce_cols"},
       {},
       2,
       true,
       1e-4,
       false,
       {"dlc::reduce"}});
  // Columns of 129-511 rows in few tiles stay on a block per output (too short to split).
  check({"long columns, few tiles",
         R"(graph @g(%z: f32[300,20]) -> ("c": f32[20]) {
  %c = ReduceSum(%z) {axes = [0], keepdims = 0} : f32[20]
  return %c
})",
         {"dlc::reduce"},
         {},
         2,
         true,
         1e-4,
         false,
         {"dlc::reduce_cols"}});
  check({"nhwc f16 global pools over 40 channels",
         R"(graph @g(%x: f16[2,5,7,40]) -> ("a": f16[2,1,1,40], "m": f16[2,1,1,40]) {
  %a = GlobalAveragePool(%x) {channels_last = 1} : f16[2,1,1,40]
  %m = GlobalMaxPool(%x) {channels_last = 1} : f16[2,1,1,40]
  return %a, %m
})",
         {"dlc::reduce_cols"},
         {},
         2,
         true,
         4e-3,
         false,
         {"dlc::reduce"}});
}

// Column reductions read runs of 8 (or 4, 2) adjacent columns per thread where the
// prologue reads them as vectors (BatchNorm's channels-last statistics): a fused
// prologue with a per-channel operand, whole and split columns, f16 and f32, 20 columns
// in runs of 4. Behind MatMuls: a graph input is never read as a vector.
TEST(KernelLibrary, ColumnReductionsReadRuns) {
  const std::string text =
      R"(graph @g(%x: f16[2,5,7,40], %w: f16[40,40], %u: f32[1100,24], %e: f32[24,24], %v: f16[3,6,20], %f: f16[20,20]) -> ("s": f32[1,1,1,40], "q": f32[24], "m": f16[3,20]) {
  %mu = )" +
      randomConst(ir::DType::F16, {40}, 3) + R"(
  %a = MatMul(%x, %w) : f16[2,5,7,40]
  %d = Sub(%a, %mu) : f16[2,5,7,40]
  %d32 = Cast(%d) {to = 1} : f32[2,5,7,40]
  %sq = Mul(%d32, %d32) : f32[2,5,7,40]
  %s = ReduceSum(%sq) {axes = [0, 1, 2], keepdims = 1} : f32[1,1,1,40]
  %b = MatMul(%u, %e) : f32[1100,24]
  %q = ReduceSum(%b) {axes = [0], keepdims = 0} : f32[24]
  %c = MatMul(%v, %f) : f16[3,6,20]
  %m = ReduceMax(%c) {axes = [1], keepdims = 0} : f16[3,20]
  return %s, %q, %m
})";
  KernelCase c{"column runs", text.c_str(), {"dlc::reduce_cols"}};
  c.tol = 2e-2;
  c.deterministic = true;
  c.sourceHas = "dlc::reduce_cols<dlc::kReduceSum, false, 8,";
  check(c);
  c.sourceHas = "dlc::reduce_cols<dlc::kReduceSum, true, 8,"; // f32 in runs of 8: 32 bytes
  check(c);
  c.sourceHas = "dlc::reduce_cols<dlc::kReduceMax, false, 4,";
  check(c);
}

// Long reductions over few outputs (training's loss-scale overflow checks: a gradient's
// max to one value; bias gradients: columns of N*H*W rows) split each output's elements
// over several blocks (at least 4 chunks), and reduce_merge combines them in order: contiguous rows
// (a scalar max, two sums, an FP16 mean, an integer max), strided rows (inner 3),
// columns cut into chunks that are not multiples of the 8 row slices, with a fused
// prologue and epilogue. The same bits on every thread order (deterministic).
TEST(KernelLibrary, LongReductionsOverFewOutputsAreSplit) {
  check(
      {"split rows and columns",
       R"(graph @g(%x: f32[3,17003], %hx: f16[20001], %ix: i64[20011], %tx: f32[17001,3], %zx: f32[1100,20], %y: f16[2,1031,40]) -> ("m": f32[], "s": f32[3,1], "h": f16[], "i": i64[], "t": f32[3], "z": f32[20], "y": f16[2,40]) {
  %m = ReduceMax(%x) {keepdims = 0} : f32[]
  %s = ReduceSum(%x) {axes = [1], keepdims = 1} : f32[3,1]
  %h = ReduceMean(%hx) {keepdims = 0} : f16[]
  %i = ReduceMax(%ix) {keepdims = 0} : i64[]
  %t = ReduceSum(%tx) {axes = [0], keepdims = 0} : f32[3]
  %z = ReduceSum(%zx) {axes = [0], keepdims = 0} : f32[20]
  %r = Relu(%y) : f16[2,1031,40]
  %u = ReduceMean(%r) {axes = [1], keepdims = 0} : f16[2,40]
  %two = const f16[] dense<[2.0]>
  %y2 = Mul(%u, %two) : f16[2,40]
  return %m, %s, %h, %i, %t, %z, %y2
})",
       {"dlc::reduce_split", "dlc::reduce_merge", "dlc::reduce_cols"},
       {},
       2,
       true,
       4e-3,
       false,
       {"dlc::reduce"},
       "",
       "",
       true,
       "dlc::reduce_cols<dlc::kReduceMean, true"});
}

TEST(KernelLibrary, ArgTopKCumSum) {
  ir::Tensor withNaN = ir::randomTensor(ir::TensorType(ir::DType::F32, {2, 7}), 3);
  static_cast<float *>(withNaN.mutableRaw())[2] = NAN;
  static_cast<float *>(withNaN.mutableRaw())[9] = NAN;
  check({"argmax, argmin (last)",
         R"(graph @g(%x: f32[3,5,2]) -> ("a": i64[3,1,2], "b": i64[3,2]) {
  %a = ArgMax(%x) {axis = 1, keepdims = 1} : i64[3,1,2]
  %b = ArgMin(%x) {axis = 1, keepdims = 0, select_last_index = 1} : i64[3,2]
  return %a, %b
})",
         {"dlc::argminmax"}});
  // With NaN (largest: NaN first, as PyTorch orders): every slot of the output written.
  check({"topk with NaN",
         R"(graph @g(%x: f32[2,7]) -> ("v": f32[2,3], "i": i64[2,3]) {
  %v, %i = TopK(%x) {axis = 1, k = 3} : f32[2,3], i64[2,3]
  return %v, %i
})",
         {"dlc::topk"},
         {{"x", withNaN}}});
  check({"cumsum reverse exclusive",
         R"(graph @g(%x: f32[4,6,2]) -> ("y": f32[4,6,2]) {
  %y = CumSum(%x) {axis = 1, exclusive = 1, reverse = 1} : f32[4,6,2]
  return %y
})",
         {"dlc::cumsum"}});
}

namespace {
// LSTM: 4 batch rows, 80 hidden units: the persistent kernel takes 64 units per block,
// so two blocks meet at the grid barrier every step. Bidirectional, with lengths.
const char *kLstm =
    R"(graph @g(%x: f32[6,4,3], %w: f32[2,320,3], %r: f32[2,320,80], %b: f32[2,640], %lens: i32[4], %h0: f32[2,4,80], %c0: f32[2,4,80]) -> ("y": f32[6,2,4,80], "h": f32[2,4,80], "c": f32[2,4,80]) {
  %y, %h, %c = LSTM(%x, %w, %r, %b, %lens, %h0, %c0) {direction = "bidirectional", hidden_size = 80} : f32[6,2,4,80], f32[2,4,80], f32[2,4,80]
  return %y, %h, %c
})";
// GRU without linear_before_reset (two barriers per step in the persistent kernel).
const char *kGru =
    R"(graph @g(%x: f32[2,5,3], %w: f32[1,15,3], %r: f32[1,15,5], %b: f32[1,30]) -> ("y": f32[2,1,5,5], "h": f32[1,2,5]) {
  %y, %h = GRU(%x, %w, %r, %b) {hidden_size = 5, layout = 1} : f32[2,1,5,5], f32[1,2,5]
  return %y, %h
})";
const char *kGruLbr =
    R"(graph @g(%x: f32[7,2,3], %w: f32[1,18,3], %r: f32[1,18,6]) -> ("y": f32[7,1,2,6]) {
  %y, %h = GRU(%x, %w, %r) {hidden_size = 6, linear_before_reset = 1, direction = "reverse"} : f32[7,1,2,6], f32[1,2,6]
  return %y
})";
} // namespace

TEST(KernelLibrary, PersistentRecurrentKernels) {
  ir::Tensor lens = ints(ir::DType::I32, {4}, {6, 3, 0, 5});
  check({"lstm persistent",
         kLstm,
         {"dlc::lstm_persistent", "dlc::rnn_init", "dlc::rnn_final"},
         {{"lens", lens}},
         2,
         true,
         1e-4});
  check({"gru persistent", kGru, {"dlc::gru_persistent"}, {}, 2, true, 1e-4});
  check(
      {"gru persistent, linear before reset", kGruLbr, {"dlc::gru_persistent"}, {}, 2, true, 1e-4});
}

TEST(KernelLibrary, PerStepRecurrentKernels) {
  ir::Tensor lens = ints(ir::DType::I32, {4}, {6, 3, 0, 5});
  check({"lstm per step", kLstm, {"dlc::lstm_cell"}, {{"lens", lens}}, 2, false, 1e-4});
  check({"gru per step", kGru, {"dlc::gru_cell"}, {}, 2, false, 1e-4});
  check({"gru per step, linear before reset", kGruLbr, {"dlc::gru_cell"}, {}, 2, false, 1e-4});
}

TEST(KernelLibrary, PadAndSplit) {
  check(
      {"pad modes",
       R"(graph @g(%x: f32[3,4,5]) -> ("c": f32[5,4,8], "e": f32[3,6,5], "r": f32[3,4,9], "w": f32[3,4,11]) {
  %c = Pad(%x) {pads = [1, 0, 2, 1, 0, 1]} : f32[5,4,8]
  %e = Pad(%x) {mode = "edge", pads = [0, 1, 0, 0, 1, 0]} : f32[3,6,5]
  %r = Pad(%x) {mode = "reflect", pads = [0, 0, 2, 0, 0, 2]} : f32[3,4,9]
  %w = Pad(%x) {mode = "wrap", pads = [0, 0, 3, 0, 0, 3]} : f32[3,4,11]
  return %c, %e, %r, %w
})",
       {"dlc::pad"}});
  // The last dim not padded: whole runs of channels per thread (16 bytes of f16, 8 of
  // f32 with 6 channels), in every mode; a non-zero fill keeps one element per thread.
  // Between MatMuls: a graph input or output is never moved in runs.
  for (const char *fill : {"", "%v = const f16[] dense<[0.5]>"}) {
    std::string ir =
        std::string(
            R"(graph @g(%x: f16[2,3,4,8], %w: f16[8,8], %u: f32[2,3,6], %e: f32[6,6]) -> ("c": f16[2,6,6,8], "r": f16[2,3,8,8], "w": f32[2,5,6]) {
  )") + fill +
        R"(
  %m = MatMul(%x, %w) : f16[2,3,4,8]
  %n = MatMul(%u, %e) : f32[2,3,6]
  %c0 = Pad(%m)" +
        (*fill ? ", %v" : "") +
        R"() {pads = [0, 1, 2, 0, 0, 2, 0, 0]} : f16[2,6,6,8]
  %r0 = Pad(%m) {mode = "reflect", pads = [0, 0, 2, 0, 0, 0, 2, 0]} : f16[2,3,8,8]
  %w0 = Pad(%n) {mode = "wrap", pads = [0, 1, 0, 0, 1, 0]} : f32[2,5,6]
  %c = MatMul(%c0, %w) : f16[2,6,6,8]
  %r = MatMul(%r0, %w) : f16[2,3,8,8]
  %w1 = MatMul(%w0, %e) : f32[2,5,6]
  return %c, %r, %w1
})";
    KernelCase runs{
        *fill ? "pad, non-zero fill" : "pads of whole channel runs", ir.c_str(), {"dlc::pad"}};
    runs.tol = 2e-2;
    // The f16 constant pad: scalar with the fill, else in runs; the f32 wrap in runs.
    runs.sourceHas = *fill ? "__half>(dlc::PadShape)" : "dlc::VecOf<unsigned, 4>>(dlc::PadShape)";
    runs.sourceLacks = *fill ? "" : "__half>(dlc::PadShape)";
    check(runs);
    runs.sourceHas = "dlc::VecOf<unsigned, 2>>(dlc::PadShape)";
    check(runs);
  }
  // At -O0 Split stays Split (canonicalize would turn it into slices).
  check({"split",
         R"(graph @g(%x: f32[3,7,2]) -> ("a": f32[3,2,2], "b": f32[3,5,2]) {
  %a, %b = Split(%x) {axis = 1, split = [2, 5]} : f32[3,2,2], f32[3,5,2]
  return %a, %b
})",
         {"dlc::copy_strided"},
         {},
         0});
}

TEST(KernelLibrary, GatherScatterFamily) {
  check({"gather elements, scatter elements (add)",
         R"(graph @g(%x: f32[3,4], %i: i64[2,4], %u: f32[2,4]) -> ("g": f32[2,4], "s": f32[3,4]) {
  %g = GatherElements(%x, %i) {axis = 0} : f32[2,4]
  %s = ScatterElements(%x, %i, %u) {axis = 0, reduction = "add"} : f32[3,4]
  return %g, %s
})",
         {"dlc::gather_elements", "dlc::scatter_elements"},
         {{"i", ints(ir::DType::I64, {2, 4}, {0, 2, -1, 1, 1, 1, 0, 2})}}});
  check(
      {"gather nd, scatter nd",
       R"(graph @g(%x: f32[3,4,2], %i: i64[5,2], %u: f32[2,2]) -> ("g": f32[5,2], "s": f32[3,4,2]) {
  %g = GatherND(%x, %i) : f32[5,2]
  %j = Slice(%i) {axes = [0], ends = [2], starts = [0]} : i64[2,2]
  %s = ScatterND(%x, %j, %u) : f32[3,4,2]
  return %g, %s
})",
       {"dlc::gather_nd", "dlc::scatter_nd"},
       {{"i", ints(ir::DType::I64, {5, 2}, {0, 1, 2, 3, -1, 0, 1, 2, 2, 0})}}});
  check(
      {"one hot, trilu, reverse sequence",
       R"(graph @g(%i: i64[2,3], %v: f32[2], %x: f32[2,4,5], %s: f32[4,3,2], %l: i64[3]) -> ("o": f32[2,5,3], "t": f32[2,4,5], "r": f32[4,3,2]) {
  %o = OneHot(%i, %v) {axis = 1, depth = 5} : f32[2,5,3]
  %t = Trilu(%x) {k = 1} : f32[2,4,5]
  %r = ReverseSequence(%s, %l) {batch_axis = 1, time_axis = 0} : f32[4,3,2]
  return %o, %t, %r
})",
       {"dlc::onehot", "dlc::trilu", "dlc::reverse_sequence"},
       {{"i", ints(ir::DType::I64, {2, 3}, {0, 4, -1, 2, 7, 1})},
        {"l", ints(ir::DType::I64, {3}, {4, 1, 3})}}});
}

// Scatter-add of floating-point updates runs in parallel with atomic adds (MaxPool's
// and Gather's gradients): many updates to each element, from many blocks (emu runs
// blocks on several threads), in FP32, FP16 and BF16, ScatterElements and ScatterND; a
// multiply stays on one thread, in index order.
TEST(KernelLibrary, ScatterAddRunsInParallelWithAtomics) {
  std::vector<int64_t> rows(256 * 64), cells(512 * 2);
  for (size_t k = 0; k < rows.size(); ++k)
    rows[k] = static_cast<int64_t>((k * 7 + k / 64) % 4) - (k % 3 == 0 ? 4 : 0); // -4..3
  for (size_t k = 0; k < cells.size(); ++k)
    cells[k] = static_cast<int64_t>(k % 2 ? (k * 5) % 6 : (k * 3) % 4);
  check({"scatter elements add f32, 64 updates per element",
         R"(graph @g(%x: f32[4,64], %i: i64[256,64], %u: f32[256,64]) -> ("s": f32[4,64]) {
  %s = ScatterElements(%x, %i, %u) {axis = 0, reduction = "add"} : f32[4,64]
  return %s
})",
         {"dlc::scatter_elements"},
         {{"i", ints(ir::DType::I64, {256, 64}, rows)}},
         2,
         true,
         1e-4,
         false,
         {},
         "",
         "dlc::scatter_elements<dlc::kScatterAdd, dlc::kScatterAtomic,"});
  check(
      {"scatter elements add f16 and bf16",
       R"(graph @g(%x: f16[4,64], %y: bf16[4,64], %i: i64[256,64], %u: f16[256,64], %v: bf16[256,64]) -> ("s": f16[4,64], "t": bf16[4,64]) {
  %s = ScatterElements(%x, %i, %u) {axis = 0, reduction = "add"} : f16[4,64]
  %t = ScatterElements(%y, %i, %v) {axis = 0, reduction = "add"} : bf16[4,64]
  return %s, %t
})",
       {"dlc::scatter_elements"},
       {{"i", ints(ir::DType::I64, {256, 64}, rows)}},
       2,
       true,
       0.15,
       false,
       {},
       "",
       "dlc::scatter_elements<dlc::kScatterAdd, dlc::kScatterAtomic,"});
  check(
      {"scatter nd add f32 (whole rows, duplicates), mul on one thread",
       R"(graph @g(%x: f32[4,6,8], %i: i64[512,2], %u: f32[512,8], %w: i64[3,1], %m: f32[3,6,8]) -> ("s": f32[4,6,8], "p": f32[4,6,8]) {
  %s = ScatterND(%x, %i, %u) {reduction = "add"} : f32[4,6,8]
  %p = ScatterND(%x, %w, %m) {reduction = "mul"} : f32[4,6,8]
  return %s, %p
})",
       {"dlc::scatter_nd"},
       {{"i", ints(ir::DType::I64, {512, 2}, cells)},
        {"w", ints(ir::DType::I64, {3, 1}, {1, 3, 1})}},
       2,
       true,
       1e-4,
       false,
       {},
       "",
       "dlc::scatter_nd<dlc::kScatterMul, dlc::kScatterPlain,"});
}

// --deterministic: the same scatter-adds as 64-bit fixed-point sums (scatter_fixed_max,
// the scatter, scatter_fixed_finish), whose bits must not change with the emu thread
// count or order; with infinities and a NaN among the updates, and in FP16.
TEST(KernelLibrary, DeterministicScatterAddGivesTheSameBitsInAnyOrder) {
  std::vector<int64_t> rows(256 * 64), cells(512 * 2);
  for (size_t k = 0; k < rows.size(); ++k)
    rows[k] = static_cast<int64_t>((k * 7 + k / 64) % 4) - (k % 3 == 0 ? 4 : 0);
  for (size_t k = 0; k < cells.size(); ++k)
    cells[k] = static_cast<int64_t>(k % 2 ? (k * 5) % 6 : (k * 3) % 4);
  ir::Tensor u = ir::randomTensor(ir::TensorType(ir::DType::F32, {256, 64}), 9, -1e3, 1e3);
  ir::storeElement<double>(ir::DType::F32, u.mutableRaw(), 5,
                           std::numeric_limits<double>::infinity()); // row 3, column 5
  ir::storeElement<double>(ir::DType::F32, u.mutableRaw(), 64 * 9 + 7,
                           std::numeric_limits<double>::quiet_NaN());
  KernelCase k{
      "deterministic scatter elements add, f32 and f16",
      R"(graph @g(%x: f32[4,64], %h: f16[4,64], %i: i64[256,64], %u: f32[256,64], %v: f16[256,64]) -> ("s": f32[4,64], "t": f16[4,64]) {
  %s = ScatterElements(%x, %i, %u) {axis = 0, reduction = "add"} : f32[4,64]
  %t = ScatterElements(%h, %i, %v) {axis = 0, reduction = "add"} : f16[4,64]
  return %s, %t
})",
      {"dlc::scatter_elements", "dlc::scatter_fixed_max", "dlc::scatter_fixed_finish"},
      {{"i", ints(ir::DType::I64, {256, 64}, rows)}, {"u", u}},
      2,
      true,
      1e-5};
  k.sourceHas = "dlc::scatter_elements<dlc::kScatterAdd, dlc::kScatterFixed,";
  k.deterministic = true;
  // (FP16 sums of 64 updates: the interpreter rounds after each add, this once.)
  k.tol = 2e-2;
  check(k);
  KernelCase nd{"deterministic scatter nd add",
                R"(graph @g(%x: f32[4,6,8], %i: i64[512,2], %u: f32[512,8]) -> ("s": f32[4,6,8]) {
  %s = ScatterND(%x, %i, %u) {reduction = "add"} : f32[4,6,8]
  return %s
})",
                {"dlc::scatter_nd", "dlc::scatter_fixed_max", "dlc::scatter_fixed_finish"},
                {{"i", ints(ir::DType::I64, {512, 2}, cells)}},
                2,
                true,
                1e-5};
  nd.deterministic = true;
  check(nd);
}

TEST(KernelLibrary, ResizeUnpoolFill) {
  check({"resize linear",
         R"(graph @g(%x: f32[1,2,3,5]) -> ("y": f32[1,2,7,4]) {
  %y = Resize(%x) {mode = "linear", scales = [1.0, 1.0, 2.3333333, 0.8], sizes = [1, 2, 7, 4]} : f32[1,2,7,4]
  return %y
})",
         {"dlc::resize"}});
  check({"max unpool",
         R"(graph @g(%x: f32[1,1,2,2], %i: i64[1,1,2,2]) -> ("y": f32[1,1,4,4]) {
  %y = MaxUnpool(%x, %i) {kernel_shape = [2, 2], strides = [2, 2]} : f32[1,1,4,4]
  return %y
})",
         {"dlc::max_unpool"},
         {{"i", ints(ir::DType::I64, {1, 1, 2, 2}, {0, 3, 10, 15})}}});
  check(
      {"range, constant of shape, integer matmul",
       R"(graph @g(%a: i32[2,3,4], %b: i32[2,4,5]) -> ("r": f32[7], "c": i64[2,3], "m": i32[2,3,5]) {
  %s = const f32[] dense<[0.5]>
  %l = const f32[] dense<[4.0]>
  %d = const f32[] dense<[0.5]>
  %r = Range(%s, %l, %d) : f32[7]
  %c = ConstantOfShape() {shape = [2, 3], value = i64[1] dense<[7]>} : i64[2,3]
  %m = MatMul(%a, %b) : i32[2,3,5]
  return %r, %c, %m
})",
       {"dlc::fill", "dlc::matmul_int"},
       {},
       0});
}

// MatMulNBits, its weights packed and dequantized by matmul_nbits as it reads them,
// against the interpreter (dequantize, then a product in double). The packed weights
// are constants (as the importer gives them), random bytes; activations a Relu's
// (aligned: a word's activations in one load) or a graph input's (one at a time):
//  - 4-bit, packed zero points, K = 40 in blocks of 16 (the last block half padding);
//  - 4-bit, K = 70 and 72 in blocks of 32: 16-byte loads for 8 words, then the tail loop
//    (a word partly past K, or whole), the padding words skipped;
//  - 4-bit, one row (MR = 1) of a Relu's activations, K = 64;
//  - 2-bit without zero points, K = 64 in blocks of 32, and K = 33 in blocks of 16 (a
//    tail word with one value);
//  - 8-bit with FP16 activations, 5 rows (a tile of 4 rows and one of 1).
TEST(KernelLibrary, MatMulNBitsDequantizesAsItReads) {
  auto bytes = [](ir::Shape shape, uint32_t seed) {
    std::vector<int64_t> v;
    uint32_t x = seed * 2654435761u + 1;
    for (int64_t i = 0, e = ir::TensorType(ir::DType::U8, shape).numElements(); i < e; ++i) {
      x = x * 1664525u + 1013904223u;
      v.push_back(x >> 24);
    }
    return ints(ir::DType::U8, shape, v);
  };
  struct Case {
    const char *name;
    int64_t rows, K, N, bits, block;
    bool zeros, relu;
    const char *type;
    const char *sourceHas;
  };
  const Case cases[] = {
      {"4-bit, zero points, K = 40 in blocks of 16", 6, 40, 6, 4, 16, true, false, "f32", ""},
      {"4-bit, K = 70 in blocks of 32: a partial tail word", 3, 70, 5, 4, 32, true, false, "f32",
       "dlc::matmul_nbits<4, 2, 4, false, true, "},
      {"4-bit, K = 72 in blocks of 32: a whole tail word", 2, 72, 3, 4, 32, false, false, "f32",
       ""},
      {"4-bit, one row, vector activations", 1, 64, 7, 4, 32, true, true, "f32",
       "dlc::matmul_nbits<4, 1, 4, true, true, "},
      {"2-bit, K = 64 in blocks of 32, vector activations", 3, 64, 5, 2, 32, false, true, "f32",
       "dlc::matmul_nbits<2, 2, 4, true, false, "},
      {"2-bit, K = 33 in blocks of 16: one value in the tail word", 2, 33, 4, 2, 16, true, false,
       "f32", ""},
      {"8-bit, FP16 activations, 5 rows", 5, 32, 3, 8, 16, false, false, "f16", ""},
  };
  for (const Case &c : cases) {
    const int64_t blocks = (c.K + c.block - 1) / c.block, zpBytes = (blocks * c.bits + 7) / 8;
    const std::string t = c.type, rows = std::to_string(c.rows), K = std::to_string(c.K),
                      N = std::to_string(c.N);
    std::string ir = "graph @g(%a: " + t + "[" + rows + "," + K + "]) -> (\"y\": " + t + "[" +
                     rows + "," + N + "]) {\n";
    ir +=
        "  %b = " + constText(bytes({c.N, blocks, c.block * c.bits / 8}, 7 * c.K + c.bits)) + "\n";
    ir += "  %s = " +
          randomConst(t == "f16" ? ir::DType::F16 : ir::DType::F32, {c.N * blocks},
                      static_cast<unsigned>(c.K)) +
          "\n";
    if (c.zeros)
      ir += "  %z = " + constText(bytes({c.N * zpBytes}, static_cast<uint32_t>(c.N))) + "\n";
    std::string x = "%a";
    if (c.relu) {
      ir += "  %r = Relu(%a) : " + t + "[" + rows + "," + K + "]\n";
      x = "%r";
    }
    ir += "  %y = MatMulNBits(" + x + ", %b, %s" + (c.zeros ? ", %z" : "") + ") {K = " + K +
          ", N = " + N + ", bits = " + std::to_string(c.bits) +
          ", block_size = " + std::to_string(c.block) + "} : " + t + "[" + rows + "," + N +
          "]\n  return %y\n}";
    KernelCase k{c.name, ir.c_str(), {"dlc::matmul_nbits"}};
    k.tol = t == "f16" ? 4e-3 : 1e-4;
    k.sourceHas = c.sourceHas;
    check(k);
  }
}

// More than 2^31 elements: the code generator must choose 64-bit indices on its own.
// The input is 2 GiB of u8 (the run needs ~5 GiB of memory; skipped with less).
TEST(KernelLibrary, MoreThan2To31ElementsTake64BitIndices) {
  constexpr int64_t n = (int64_t{1} << 31) + 100;
  long availableKb = 0;
  {
    std::ifstream meminfo("/proc/meminfo");
    for (std::string key; meminfo >> key;) {
      long v;
      meminfo >> v;
      if (key == "MemAvailable:")
        availableKb = v;
      meminfo.ignore(1 << 10, '\n');
    }
  }
  if (availableKb < 6l * 1024 * 1024)
    GTEST_SKIP() << "needs 6 GiB of free memory, " << availableKb / 1024 << " MiB available";
  std::string ir = "graph @big(%x: u8[" + std::to_string(n) +
                   "]) -> (\"y\": u8[40]) {\n  %y = Slice(%x) {axes = [0], ends = [" +
                   std::to_string(n) + "], starts = [" + std::to_string(n - 80) +
                   "], steps = [2]} : u8[40]\n  return %y\n}";
  auto g = ir::parseGraph(ir, "big");
  ASSERT_TRUE(bool(g)) << llvm::toString(g.takeError());
  codegen::CompileOptions co;
  co.targets = {"emu-check"};
  codegen::CompileReport rep;
  auto bytes = codegen::compileGraph(**g, co, &rep);
  ASSERT_TRUE(bool(bytes)) << llvm::toString(bytes.takeError());
  EXPECT_NE(rep.cudaSource.find("dlc::elementwise<dlc::idx64,"), std::string::npos)
      << rep.cudaSource;
  auto pf = pkg::PackageFile::fromBytes(bytes->data(), bytes->size(), "big");
  ASSERT_TRUE(pf.ok()) << pf.status().message();
  rt::SessionOptions so;
  so.device = rt::DeviceKind::Emu;
  auto s = rt::Session::create(*pf, so);
  ASSERT_TRUE(s.ok()) << s.status().message();
  std::vector<uint8_t> x(static_cast<size_t>(n));
  for (int64_t i = n - 100; i < n; ++i)
    x[i] = static_cast<uint8_t>(i % 251);
  ASSERT_FALSE((*s)->setInputBytes("x", x.data(), x.size()));
  x = {};
  ASSERT_FALSE((*s)->run());
  auto y = (*s)->getOutput("y");
  ASSERT_TRUE(y.ok());
  for (int64_t i = 0; i < 40; ++i)
    EXPECT_EQ(y->data[i], static_cast<uint8_t>((n - 80 + 2 * i) % 251)) << i;
}

// A fused kernel whose parameters would exceed the package's limit (every view it
// reads is a parameter: here 60 strided slices concatenated) is one compile error
// naming the node, never a package the runtime refuses.
TEST(KernelLibrary, AKernelOverTheParameterLimitIsACompileError) {
  std::string ir = "graph @g(%x: f32[2,3,70]) -> (\"y\": f32[2,180,10]) {\n";
  std::string cat = "  %y = Concat(";
  for (int i = 0; i < 60; ++i) {
    ir += "  %s" + std::to_string(i) + " = Slice(%x) {axes = [2], starts = [" + std::to_string(i) +
          "], ends = [" + std::to_string(i + 10) + "]} : f32[2,3,10]\n";
    cat += (i ? ", %s" : "%s") + std::to_string(i);
  }
  ir += cat + ") {axis = 1} : f32[2,180,10]\n  return %y\n}";
  auto g = ir::parseGraph(ir, "g");
  ASSERT_TRUE(bool(g)) << llvm::toString(g.takeError());
  passes::PassManager pm;
  passes::PassContext ctx;
  ASSERT_FALSE(bool(pm.run(**g, passes::defaultPipeline(2, false, false), ctx)));
  codegen::CompileOptions co;
  co.targets = {"emu"};
  co.useCache = false;
  auto bytes = codegen::compileGraph(**g, co);
  ASSERT_FALSE(bool(bytes));
  std::string e = llvm::toString(bytes.takeError());
  EXPECT_NE(e.find("bytes of parameters, over the package's limit of 4096"), std::string::npos)
      << e;
}
