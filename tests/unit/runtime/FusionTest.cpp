// Fused kernels on the emu backend against the reference interpreter on the
// unoptimized graph: element-wise chains with broadcasts, transposes, slices,
// concatenations and gathers; reductions, softmax and layer norm with prologues and
// epilogues; the implicit-GEMM convolution with a residual epilogue; cuBLASLt-style
// GEMM epilogues; and the fused attention kernel with a mask. Each case also checks
// that fusion happened (the number of kernel launches).
#include "dlc/codegen/Compiler.h"
#include "dlc/ir/Interpreter.h"
#include "dlc/ir/TextIR.h"
#include "dlc/passes/Pass.h"
#include "dlc/runtime/Runtime.h"

#include <gtest/gtest.h>
#include <limits>

using namespace dlc;

namespace {

struct Case {
  const char *name;
  const char *ir;
  size_t launches; // kernel launches at -O2
  size_t gemms;    // library calls at -O2
};

void check(const Case &c, rt::SessionOptions so = {}, double tol = 1e-5, ir::TensorMap given = {}) {
  SCOPED_TRACE(c.name);
  auto parsed = ir::parseGraph(c.ir, c.name);
  ASSERT_TRUE(bool(parsed)) << llvm::toString(parsed.takeError());
  std::unique_ptr<ir::Graph> g = std::move(*parsed);
  ir::TensorMap inputs = given.empty() ? ir::randomInputs(*g, 7) : given;
  auto expected = ir::interpret(*g, inputs);
  ASSERT_TRUE(bool(expected)) << llvm::toString(expected.takeError());

  passes::PassManager pm;
  passes::PassContext ctx;
  ASSERT_FALSE(bool(pm.run(*g, passes::defaultPipeline(2), ctx)));
  codegen::CompileOptions co;
  co.targets = {"emu-check"};
  auto bytes = codegen::compileGraph(*g, co);
  ASSERT_TRUE(bool(bytes)) << llvm::toString(bytes.takeError());
  auto pf = pkg::PackageFile::fromBytes(bytes->data(), bytes->size(), c.name);
  ASSERT_TRUE(pf.ok()) << pf.status().message();
  size_t launches = 0, gemms = 0;
  for (const pkg::Step *s : *(*pf)->meta().steps()) {
    launches += s->op_type() == pkg::StepKind::Launch;
    gemms += s->op_type() == pkg::StepKind::Gemm;
  }
  EXPECT_EQ(launches, c.launches);
  EXPECT_EQ(gemms, c.gemms);

  so.device = rt::DeviceKind::Emu;
  auto s = rt::Session::create(*pf, so);
  ASSERT_TRUE(s.ok()) << s.status().message();
  for (const auto &[name, t] : inputs) {
    rt::HostTensor h;
    h.dtype = static_cast<pkg::DType>(static_cast<uint8_t>(t.dtype()));
    h.shape = t.shape();
    const uint8_t *p = static_cast<const uint8_t *>(t.raw());
    h.data.assign(p, p + t.byteSize());
    ASSERT_FALSE((*s)->setInput(name, h)) << name;
  }
  ASSERT_FALSE((*s)->run());
  for (const auto &[name, want] : *expected) {
    auto got = (*s)->getOutput(name);
    ASSERT_TRUE(got.ok()) << got.status().message();
    ir::Tensor t(want.type());
    std::memcpy(t.mutableRaw(), got->data.data(), got->data.size());
    ir::Comparison cmp = ir::compareTensors(t, want, tol, tol);
    EXPECT_TRUE(cmp.ok) << name << ": " << cmp.message;
  }
}

} // namespace

TEST(Fusion, ElementwiseChainWithBroadcastTransposeAndSlice) {
  check({"chain", R"(graph @g(%x: f32[4,6], %b: f32[6]) -> ("y": f32[3,4]) {
  %a = Add(%x, %b) : f32[4,6]
  %t = Tanh(%a) : f32[4,6]
  %s = Sigmoid(%a) : f32[4,6]
  %m = Mul(%t, %s) : f32[4,6]
  %tr = Transpose(%m) {perm = [1, 0]} : f32[6,4]
  %y = Slice(%tr) {axes = [0], ends = [6], starts = [1], steps = [2]} : f32[3,4]
  return %y
})",
         1, 0});
}

TEST(Fusion, ConcatGatherAndExpandInline) {
  check({"concat", R"(graph @g(%x: f32[2,3], %z: f32[2,2], %i: i64[4]) -> ("y": f32[4,5]) {
  %e = Exp(%x) : f32[2,3]
  %n = Neg(%z) : f32[2,2]
  %c = Concat(%e, %n) {axis = 1} : f32[2,5]
  %g = Gather(%c, %i) {axis = 0} : f32[4,5]
  %y = Relu(%g) : f32[4,5]
  return %y
})",
         1, 0});
}

TEST(Fusion, SoftmaxWithScaleMaskPrologueAndEpilogue) {
  check({"softmax", R"(graph @g(%q: f32[2,4,40], %mask: f32[4,40]) -> ("o": f32[2,4,40]) {
  %scale = const f32[] dense<[0.25]>
  %s = Mul(%q, %scale) : f32[2,4,40]
  %m = Add(%s, %mask) : f32[2,4,40]
  %p = Softmax(%m) {axis = -1} : f32[2,4,40]
  %o = Mul(%p, %q) : f32[2,4,40]
  return %o
})",
         1, 0});
  check({"long softmax", R"(graph @g(%q: f32[3,300]) -> ("o": f32[3,300]) {
  %e = Exp(%q) : f32[3,300]
  %p = LogSoftmax(%e) {axis = 1} : f32[3,300]
  %o = Neg(%p) : f32[3,300]
  return %o
})",
         1, 0});
}

TEST(Fusion, ReductionAndLayerNormWithNeighbours) {
  check({"reduce", R"(graph @g(%x: f32[4,100]) -> ("y": f32[4,1]) {
  %a = Abs(%x) : f32[4,100]
  %r = ReduceMean(%a) {axes = [1], keepdims = 1} : f32[4,1]
  %y = Sqrt(%r) : f32[4,1]
  return %y
})",
         1, 0});
  check(
      {"layernorm",
       R"(graph @g(%x: f32[2,3,96], %r: f32[2,3,96], %w: f32[96], %b: f32[96]) -> ("y": f32[2,3,96]) {
  %s = Add(%x, %r) : f32[2,3,96]
  %n = LayerNormalization(%s, %w, %b) {axis = -1} : f32[2,3,96]
  %y = Relu(%n) : f32[2,3,96]
  return %y
})",
       1, 0});
}

TEST(Fusion, RmsNormalizationLegalizedAndFused) {
  // In FP32 (FP16, BF16) RMSNormalization is the row_norm kernel's RMS form, the
  // residual Add fused in as its prologue: one kernel.
  check({"rmsnorm",
         R"(graph @g(%x: f32[2,3,96], %r: f32[2,3,96], %w: f32[96]) -> ("y": f32[2,3,96]) {
  %s = Add(%x, %r) : f32[2,3,96]
  %n = RMSNormalization(%s, %w) {epsilon = 1.0e-06} : f32[2,3,96]
  return %n
})",
         1, 0});
  // In FP64 it has no kernel: `legalize` writes its function body, whose mean of
  // squares is a reduction with the square as its prologue and the epsilon and square
  // root as its epilogue, and whose scaling is one element-wise kernel. The residual
  // Add feeds both, so it is a kernel of its own (fusion never duplicates a producer).
  check({"rmsnorm f64",
         R"(graph @g(%x: f64[2,3,96], %r: f64[2,3,96], %w: f64[96]) -> ("y": f64[2,3,96]) {
  %s = Add(%x, %r) : f64[2,3,96]
  %n = RMSNormalization(%s, %w) {epsilon = 1.0e-06} : f64[2,3,96]
  return %n
})",
         3, 0});
}

// INT64_MIN % -1 traps on x86: the emu kernel (and the GPU's) gives 0, as the reference.
TEST(Fusion, Int64ModOfTheMinimumByMinusOneIsZero) {
  auto i64 = [](std::vector<int64_t> v) {
    return ir::Tensor::fromVector(ir::TensorType(ir::DType::I64, {int64_t(v.size())}), v);
  };
  const int64_t lo = std::numeric_limits<int64_t>::min();
  check({"mod", R"(graph @g(%a: i64[4], %b: i64[4]) -> ("m": i64[4], "f": i64[4]) {
  %m = Mod(%a, %b) : i64[4]
  %f = Mod(%a, %b) {fmod = 1} : i64[4]
  return %m, %f
})",
         2, 0},
        {}, 0, {{"a", i64({lo, lo, 9, -9})}, {"b", i64({-1, 0, -1, 4})}});
}

TEST(Fusion, ConvolutionWithResidualEpilogue) {
  check(
      {"conv",
       R"(graph @g(%x: f32[2,5,9,9], %w: f32[7,5,3,3], %b: f32[7], %res: f32[2,7,5,5]) -> ("y": f32[2,7,5,5]) {
  %c = Conv(%x, %w, %b) {pads = [1, 1, 1, 1], strides = [2, 2]} : f32[2,7,5,5]
  %rr = Relu(%res) : f32[2,7,5,5]
  %s = Add(%c, %rr) : f32[2,7,5,5]
  %y = Relu(%s) : f32[2,7,5,5]
  return %y
})",
       1, 0});
}

TEST(Fusion, GemmLibraryEpilogueAndKernelEpilogue) {
  check({"gemm bias residual relu",
         R"(graph @g(%x: f32[3,5,8], %w: f32[8,8], %b: f32[8]) -> ("y": f32[3,5,8]) {
  %m = MatMul(%x, %w) : f32[3,5,8]
  %a = Add(%b, %m) : f32[3,5,8]
  %r = Add(%a, %x) : f32[3,5,8]
  %y = Relu(%r) : f32[3,5,8]
  return %y
})",
         0, 1});
  check({"gemm gelu", R"(graph @g(%x: f32[4,8], %w: f32[8,6], %b: f32[6]) -> ("y": f32[4,6]) {
  %m = MatMul(%x, %w) : f32[4,6]
  %a = Add(%m, %b) : f32[4,6]
  %y = Gelu(%a) : f32[4,6]
  return %y
})",
         1, 1});
}

TEST(Fusion, AttentionIsOneKernel) {
  // Head size 40 (two lanes per element for some lanes) and 37 keys (two key tiles).
  check({"attention", R"(graph @g(%qkv: f32[2,37,240], %mask: f32[37,37]) -> ("y": f32[2,37,80]) {
  %q = Slice(%qkv) {axes = [2], ends = [80], starts = [0]} : f32[2,37,80]
  %k = Slice(%qkv) {axes = [2], ends = [160], starts = [80]} : f32[2,37,80]
  %v = Slice(%qkv) {axes = [2], ends = [240], starts = [160]} : f32[2,37,80]
  %qr = Reshape(%q) {shape = [2, 37, 2, 40]} : f32[2,37,2,40]
  %kr = Reshape(%k) {shape = [2, 37, 2, 40]} : f32[2,37,2,40]
  %vr = Reshape(%v) {shape = [2, 37, 2, 40]} : f32[2,37,2,40]
  %qh = Transpose(%qr) {perm = [0, 2, 1, 3]} : f32[2,2,37,40]
  %kt = Transpose(%kr) {perm = [0, 2, 3, 1]} : f32[2,2,40,37]
  %vh = Transpose(%vr) {perm = [0, 2, 1, 3]} : f32[2,2,37,40]
  %scale = const f32[] dense<[0.158]>
  %qs = Mul(%qh, %scale) : f32[2,2,37,40]
  %s = MatMul(%qs, %kt) : f32[2,2,37,37]
  %sm = Add(%s, %mask) : f32[2,2,37,37]
  %p = Softmax(%sm) {axis = -1} : f32[2,2,37,37]
  %o = MatMul(%p, %vh) : f32[2,2,37,40]
  %ot = Transpose(%o) {perm = [0, 2, 1, 3]} : f32[2,37,2,40]
  %y = Reshape(%ot) {shape = [2, 37, 80]} : f32[2,37,80]
  return %y
})",
         1, 0});
}

// GEMMs in 16-bit storage on emu, as cuBLASLt runs them (CUBLAS_COMPUTE_32F): float
// products and sums, one rounding to the storage type.
TEST(Fusion, HalfAndBFloat16GemmsRunOnEmu) {
  for (const char *dt : {"f16", "bf16"}) {
    std::string ir = R"(graph @g(%a: T[2,3,17], %b: T[2,17,9]) -> ("y": T[2,3,9]) {
  %y = MatMul(%a, %b) : T[2,3,9]
  return %y
})";
    for (size_t at; (at = ir.find('T')) != std::string::npos;)
      ir.replace(at, 1, dt);
    check({dt, ir.c_str(), 0, 1}, {}, std::string(dt) == "f16" ? 2e-3 : 2e-2);
  }
}

// The GEMM epilogue as the package's fallback kernel (what a GPU runs when no
// cuBLASLt algorithm applies bias + activation) gives the library's result.
TEST(Fusion, GemmEpilogueFallbackKernelMatches) {
  rt::SessionOptions so;
  so.gemmEpilogueKernel = true;
  check({"relu", R"(graph @g(%x: f32[5,24], %w: f32[24,13], %b: f32[13]) -> ("y": f32[5,13]) {
  %h = MatMul(%x, %w) : f32[5,13]
  %hb = Add(%h, %b) : f32[5,13]
  %y = Relu(%hb) : f32[5,13]
  return %y
})",
         0, 1},
        so);
}
