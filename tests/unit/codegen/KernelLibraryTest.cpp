// The kernel library (codegen/device/*.cuh) on the emu backend against the reference
// interpreter, one test per kernel kind, at odd extents: non-multiples of the tiles,
// length-1 dims, short and long rows. Every case runs twice: with the 32-bit index
// instantiations the code generator picks for these shapes, and with the 64-bit ones
// (LoweringOptions::wideIndices). A last case has more than 2^31 elements, where the
// code generator must pick 64-bit indices by itself.
#include "device/dlc_params.h"
#include "dlc/codegen/Compiler.h"
#include "dlc/ir/Interpreter.h"
#include "dlc/ir/TextIR.h"
#include "dlc/passes/Pass.h"
#include "dlc/runtime/Runtime.h"
#include "emitters/ConvTiles.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <gtest/gtest.h>
#include <random>
#include <regex>
#include <set>

using namespace dlc;

namespace {

struct KernelCase {
  const char *name;
  const char *ir;
  /// Library templates the package must instantiate ("dlc::conv_igemm", ...).
  std::set<std::string> templates;
  /// Inputs that must not be random (lengths, indices, NaNs).
  std::map<std::string, ir::Tensor> inputs = {};
  int opt = 2;
  bool persistentRnn = true;
  double tol = 1e-5;
  bool tf32 = false; // FP32 convolutions and GEMMs on tensor cores in TF32
  /// Library templates the package must not instantiate.
  std::set<std::string> absent = {};
  int forceConvTile = -1; // the convolutions' tile (codegen::CompileOptions::forceConvTile)
  /// Text the generated CUDA source must contain (the forced tile's instantiation).
  std::string sourceHas = "";
};

rt::HostTensor hostTensor(const ir::Tensor &t) {
  rt::HostTensor h;
  h.dtype = static_cast<pkg::DType>(static_cast<uint8_t>(t.dtype()));
  h.shape = t.shape();
  const uint8_t *p = static_cast<const uint8_t *>(t.raw());
  h.data.assign(p, p + t.byteSize());
  return h;
}

void run(const KernelCase &c, bool wide) {
  SCOPED_TRACE(std::string(c.name) + (wide ? " (64-bit indices)" : " (32-bit indices)"));
  auto parsed = ir::parseGraph(c.ir, c.name);
  ASSERT_TRUE(bool(parsed)) << llvm::toString(parsed.takeError());
  std::unique_ptr<ir::Graph> g = std::move(*parsed);
  ir::TensorMap inputs = ir::randomInputs(*g, 11);
  for (const auto &[name, t] : c.inputs)
    inputs[name] = t;
  auto expected = ir::interpret(*g, inputs);
  ASSERT_TRUE(bool(expected)) << llvm::toString(expected.takeError());

  passes::PassManager pm;
  passes::PassContext ctx;
  ASSERT_FALSE(bool(pm.run(*g, passes::defaultPipeline(c.opt), ctx)));
  codegen::CompileOptions co;
  co.targets = {"emu-check"};
  co.wideIndices = wide;
  co.persistentRnn = c.persistentRnn;
  co.tf32 = c.tf32;
  co.forceConvTile = c.forceConvTile;
  codegen::CompileReport rep;
  auto bytes = codegen::compileGraph(*g, co, &rep);
  ASSERT_TRUE(bool(bytes)) << llvm::toString(bytes.takeError());
  auto pf = pkg::PackageFile::fromBytes(bytes->data(), bytes->size(), c.name);
  ASSERT_TRUE(pf.ok()) << pf.status().message();

  std::set<std::string> used;
  for (const pkg::Kernel *k : *(*pf)->meta().kernels())
    used.insert(k->template_name()->str());
  for (const std::string &t : c.templates)
    EXPECT_TRUE(used.count(t)) << "the package does not instantiate " << t;
  for (const std::string &t : c.absent)
    EXPECT_FALSE(used.count(t)) << "the package instantiates " << t;
  // Every instantiation names its index type; these shapes get 32-bit indices unless
  // 64-bit ones are forced.
  std::regex inst(R"(template __global__ void ([\w:]+)<(.*)>\()");
  size_t count = 0;
  for (std::sregex_iterator it(rep.cudaSource.begin(), rep.cudaSource.end(), inst), end; it != end;
       ++it, ++count) {
    std::string args = (*it)[2];
    bool has64 = args.find("dlc::idx64") != std::string::npos,
         has32 = args.find("dlc::idx32") != std::string::npos;
    EXPECT_TRUE(wide ? has64 && !has32 : has32 && !has64) << (*it)[0];
  }
  EXPECT_EQ(count, (*pf)->meta().kernels()->size());
  EXPECT_NE(rep.cudaSource.find(c.sourceHas), std::string::npos) << c.sourceHas;

  rt::SessionOptions so;
  so.device = rt::DeviceKind::Emu;
  auto s = rt::Session::create(*pf, so);
  ASSERT_TRUE(s.ok()) << s.status().message();
  for (const auto &[name, t] : inputs)
    ASSERT_FALSE((*s)->setInput(name, hostTensor(t))) << name;
  Status st = (*s)->run();
  ASSERT_FALSE(st) << st.message();
  for (const auto &[name, want] : *expected) {
    auto got = (*s)->getOutput(name);
    ASSERT_TRUE(got.ok()) << got.status().message();
    ir::Tensor t(want.type());
    std::memcpy(t.mutableRaw(), got->data.data(), got->data.size());
    ir::Comparison cmp = ir::compareTensors(t, want, c.tol, c.tol);
    EXPECT_TRUE(cmp.ok) << name << ": " << cmp.message;
  }
}

void check(const KernelCase &c) {
  run(c, false);
  run(c, true);
}

/// A constant of the textual IR ("const f16[2,3] dense<0x...>") with random values in
/// [-1, 1] (fixed seed): weights that are not a graph input.
std::string randomConst(ir::DType dt, const ir::Shape &shape, unsigned seed) {
  ir::Tensor t(ir::TensorType(dt, shape));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (int64_t i = 0; i < t.numElements(); ++i)
    ir::storeElement<double>(dt, t.mutableRaw(), i, u(rng));
  std::string s = "const " + ir::TensorType(dt, shape).str() + " dense<0x";
  const uint8_t *p = static_cast<const uint8_t *>(t.raw());
  static const char *digits = "0123456789ABCDEF";
  for (size_t i = 0; i < t.byteSize(); ++i) {
    s += digits[p[i] >> 4];
    s += digits[p[i] & 15];
  }
  return s + ">";
}

ir::Tensor ints(ir::DType dt, ir::Shape shape, std::vector<int64_t> values) {
  ir::Tensor t(ir::TensorType(dt, std::move(shape)));
  for (size_t i = 0; i < values.size(); ++i)
    ir::storeElement<int64_t>(dt, t.mutableRaw(), static_cast<int64_t>(i), values[i]);
  return t;
}

} // namespace

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

TEST(KernelLibrary, ImplicitGemmConvolution) {
  // 7 output channels and 25 positions per image: partial tiles on both GEMM axes.
  check({"conv 3x3 stride 2",
         R"(graph @g(%x: f32[2,5,9,9], %w: f32[7,5,3,3], %b: f32[7]) -> ("y": f32[2,7,5,5]) {
  %c = Conv(%x, %w, %b) {pads = [1, 1, 1, 1], strides = [2, 2]} : f32[2,7,5,5]
  %y = Relu(%c) : f32[2,7,5,5]
  return %y
})",
         {"dlc::conv_igemm"}});
  check({"pointwise conv, 1-D and length-1 dims",
         R"(graph @g(%x: f32[1,3,1,11], %w: f32[5,3,1,1]) -> ("y": f32[1,5,1,11]) {
  %y = Conv(%x, %w) : f32[1,5,1,11]
  return %y
})",
         {"dlc::conv_igemm"}});
  check({"dilated 3-D conv",
         R"(graph @g(%x: f32[1,2,5,6,7], %w: f32[3,2,2,3,2]) -> ("y": f32[1,3,4,2,6]) {
  %y = Conv(%x, %w) {dilations = [1, 2, 1], pads = [0, 0, 0, 0, 0, 0]} : f32[1,3,4,2,6]
  return %y
})",
         {"dlc::conv_igemm"}});
  // A long reduction over few outputs: split along K, partial sums reduced in order.
  check({"split-K",
         R"(graph @g(%x: f32[1,96,3,3], %w: f32[6,96,3,3], %b: f32[6]) -> ("y": f32[1,6,3,3]) {
  %y = Conv(%x, %w, %b) {pads = [1, 1, 1, 1]} : f32[1,6,3,3]
  return %y
})",
         {"dlc::conv_igemm", "dlc::conv_splitk_reduce"},
         {},
         2,
         true,
         1e-4});
}

// FP16/BF16 convolutions run on tensor cores (conv_igemm_tc: WMMA fragments, which
// the emu prelude implements as warp collectives): odd channel counts (3, 10: not
// multiples of 8 or 16), a fused epilogue, 1x1, and split-K. The reference rounds
// once from exact sums; the kernel sums exact products in FP32, then rounds.
TEST(KernelLibrary, TensorCoreConvolution) {
  check({"f16 conv 3x3, 3 -> 10 channels",
         R"(graph @g(%x: f16[2,3,9,9], %w: f16[10,3,3,3], %b: f16[10]) -> ("y": f16[2,10,5,5]) {
  %c = Conv(%x, %w, %b) {pads = [1, 1, 1, 1], strides = [2, 2]} : f16[2,10,5,5]
  %y = Relu(%c) : f16[2,10,5,5]
  return %y
})",
         {"dlc::conv_igemm_tc"},
         {},
         2,
         true,
         4e-3});
  check({"bf16 conv, 10 -> 3 channels",
         R"(graph @g(%x: bf16[1,10,7,7], %w: bf16[3,10,3,3]) -> ("y": bf16[1,3,5,5]) {
  %y = Conv(%x, %w) : bf16[1,3,5,5]
  return %y
})",
         {"dlc::conv_igemm_tc"},
         {},
         2,
         true,
         2e-2});
  check({"f16 pointwise conv",
         R"(graph @g(%x: f16[1,10,1,11], %w: f16[3,10,1,1]) -> ("y": f16[1,3,1,11]) {
  %y = Conv(%x, %w) : f16[1,3,1,11]
  return %y
})",
         {"dlc::conv_igemm_tc"},
         {},
         2,
         true,
         4e-3});
  check({"f16 split-K",
         R"(graph @g(%x: f16[1,2048,3,3], %w: f16[6,2048,3,3], %b: f16[6]) -> ("y": f16[1,6,3,3]) {
  %y = Conv(%x, %w, %b) {pads = [1, 1, 1, 1]} : f16[1,6,3,3]
  return %y
})",
         {"dlc::conv_igemm_tc", "dlc::conv_splitk_reduce"},
         {},
         2,
         true,
         4e-3});
}

// Channels-last (the layout pass's NHWC: x [N, H, W, C], weights [M, kh, kw, C/g]):
// the tensor-core and CUDA-core implicit GEMMs with odd channel counts, split-K, the
// direct kernel for depthwise convolutions, and window and global pooling. The
// interpreter's reference transposes to NCHW and back.
TEST(KernelLibrary, ChannelsLastConvolutionAndPooling) {
  check({"nhwc f16 conv 3x3, 3 -> 10 channels",
         R"(graph @g(%x: f16[2,9,9,3], %w: f16[10,3,3,3], %b: f16[10]) -> ("y": f16[2,5,5,10]) {
  %c = Conv(%x, %w, %b) {channels_last = 1, pads = [1, 1, 1, 1], strides = [2, 2]} : f16[2,5,5,10]
  %y = Relu(%c) : f16[2,5,5,10]
  return %y
})",
         {"dlc::conv_fprop_mma", "dlc::conv_pack"},
         {},
         2,
         true,
         4e-3});
  check({"nhwc bf16 conv, 10 -> 3 channels",
         R"(graph @g(%x: bf16[1,7,7,10], %w: bf16[3,3,3,10]) -> ("y": bf16[1,5,5,3]) {
  %y = Conv(%x, %w) {channels_last = 1} : bf16[1,5,5,3]
  return %y
})",
         {"dlc::conv_fprop_mma", "dlc::conv_pack"},
         {},
         2,
         true,
         2e-2});
  check({"nhwc f16 split-K",
         R"(graph @g(%x: f16[1,3,3,2048], %w: f16[6,3,3,2048], %b: f16[6]) -> ("y": f16[1,3,3,6]) {
  %y = Conv(%x, %w, %b) {channels_last = 1, pads = [1, 1, 1, 1]} : f16[1,3,3,6]
  return %y
})",
         {"dlc::conv_fprop_mma", "dlc::conv_splitk_reduce"},
         {},
         2,
         true,
         4e-3});
  check(
      {"nhwc f32 conv and depthwise conv",
       R"(graph @g(%x: f32[1,6,7,3], %w: f32[10,3,2,3], %d: f32[10,3,3,1]) -> ("y": f32[1,5,7,10]) {
  %c = Conv(%x, %w) {channels_last = 1, pads = [1, 0, 0, 1]} : f32[1,5,7,10]
  %y = Conv(%c, %d) {channels_last = 1, group = 10, pads = [1, 1, 1, 1]} : f32[1,5,7,10]
  return %y
})",
       {"dlc::conv_igemm", "dlc::conv_direct"}});
  check(
      {"nhwc pooling",
       R"(graph @g(%x: f32[2,5,6,10]) -> ("m": f32[2,3,3,10], "a": f32[2,3,3,10], "g": f32[2,1,1,10]) {
  %m = MaxPool(%x) {channels_last = 1, kernel_shape = [3, 3], pads = [1, 1, 1, 1], strides = [2, 2]} : f32[2,3,3,10]
  %a = AveragePool(%x) {channels_last = 1, count_include_pad = 1, kernel_shape = [3, 2], pads = [1, 0, 1, 0], strides = [2, 2]} : f32[2,3,3,10]
  %g = GlobalAveragePool(%x) {channels_last = 1} : f32[2,1,1,10]
  return %m, %a, %g
})",
       {"dlc::pool_window", "dlc::reduce"},
       {},
       1});
}

// Channels-last FP16/BF16 convolutions whose channels come in 16-byte chunks run
// conv_fprop_mma (cp.async stages, ldmatrix, mma.sync; emu emulates each per the PTX
// ISA): odd positions and output channels (tiles cut at both edges), fewer channels than
// a stage's K (several taps per stage), strides, dilations, 3-D windows, a pointwise
// conv, the fused epilogue, and more than one tile of K.
TEST(KernelLibrary, MmaSyncConvolution) {
  check({"nhwc f16 3x3 s2, 16 -> 10 channels, bias and relu",
         R"(graph @g(%x: f16[2,9,9,16], %w: f16[10,3,3,16], %b: f16[10]) -> ("y": f16[2,5,5,10]) {
  %c = Conv(%x, %w, %b) {channels_last = 1, pads = [1, 1, 1, 1], strides = [2, 2]} : f16[2,5,5,10]
  %y = Relu(%c) : f16[2,5,5,10]
  return %y
})",
         {"dlc::conv_fprop_mma"},
         {},
         2,
         true,
         4e-3});
  check({"nhwc bf16 5x3 dilated, 24 -> 70 channels",
         R"(graph @g(%x: bf16[1,11,7,24], %w: bf16[70,5,3,24]) -> ("y": bf16[1,5,5,70]) {
  %y = Conv(%x, %w) {channels_last = 1, dilations = [2, 1], pads = [1, 0, 0, 0]} : bf16[1,5,5,70]
  return %y
})",
         {"dlc::conv_fprop_mma"},
         {},
         2,
         true,
         2e-2});
  check(
      {"nhwc f16 pointwise, 8 -> 130 channels over 143 positions",
       R"(graph @g(%x: f16[1,13,11,8], %w: f16[130,1,1,8], %b: f16[130]) -> ("y": f16[1,13,11,130]) {
  %y = Conv(%x, %w, %b) {channels_last = 1} : f16[1,13,11,130]
  return %y
})",
       {"dlc::conv_fprop_mma"},
       {},
       2,
       true,
       4e-3});
  check({"nhwc f16 3-D, 3x3x3 window",
         R"(graph @g(%x: f16[1,4,5,6,8], %w: f16[12,3,3,3,8]) -> ("y": f16[1,4,5,6,12]) {
  %y = Conv(%x, %w) {channels_last = 1, pads = [1, 1, 1, 1, 1, 1]} : f16[1,4,5,6,12]
  return %y
})",
         {"dlc::conv_fprop_mma"},
         {},
         2,
         true,
         4e-3});
  // Channels not a multiple of 8 (an RGB stem: 7x7, 49 taps, a 64-bit tap mask):
  // conv_pack rewrites the operands first.
  check({"nhwc f16 7x7 s2 stem, 3 -> 10 channels",
         R"(graph @g(%x: f16[1,13,11,3], %w: f16[10,7,7,3], %b: f16[10]) -> ("y": f16[1,7,6,10]) {
  %y = Conv(%x, %w, %b) {channels_last = 1, pads = [3, 3, 3, 3], strides = [2, 2]} : f16[1,7,6,10]
  return %y
})",
         {"dlc::conv_fprop_mma", "dlc::conv_pack"},
         {},
         2,
         true,
         4e-3});
  // A view into an intermediate (Split along the batch: the second image's offset), read
  // as it is; and a graph input, which a caller may bind anywhere: packed.
  check({"nhwc f16 conv of a split's second part",
         R"(graph @g(%x: f16[3,5,6,16], %w: f16[9,3,3,16]) -> ("y": f16[2,5,6,9]) {
  %r = Relu(%x) : f16[3,5,6,16]
  %a, %v = Split(%r) {axis = 0, split = [1, 2]} : f16[1,5,6,16], f16[2,5,6,16]
  %y = Conv(%v, %w) {channels_last = 1, pads = [1, 1, 1, 1]} : f16[2,5,6,9]
  return %y
})",
         {"dlc::conv_fprop_mma"},
         {},
         2,
         true,
         4e-3});
  // FP32 with --tf32: the same kernel on m16n8k8 TF32 products (operands rounded by
  // cvt.rna), 4 channels per 16-byte chunk; C = 3 is packed to 4. TF32 keeps 10 bits of
  // mantissa: the tolerance is that of a 2^-11 relative error per operand.
  check({"nhwc f32 tf32 3x3 s2, 12 -> 20 channels, bias and relu",
         R"(graph @g(%x: f32[2,9,7,12], %w: f32[20,3,3,12], %b: f32[20]) -> ("y": f32[2,5,4,20]) {
  %c = Conv(%x, %w, %b) {channels_last = 1, pads = [1, 1, 1, 1], strides = [2, 2]} : f32[2,5,4,20]
  %y = Relu(%c) : f32[2,5,4,20]
  return %y
})",
         {"dlc::conv_fprop_mma"},
         {},
         2,
         true,
         3e-3,
         true});
  check({"nhwc f32 tf32 3 -> 70 channels",
         R"(graph @g(%x: f32[1,9,9,3], %w: f32[70,3,3,3]) -> ("y": f32[1,9,9,70]) {
  %y = Conv(%x, %w) {channels_last = 1, pads = [1, 1, 1, 1]} : f32[1,9,9,70]
  return %y
})",
         {"dlc::conv_fprop_mma", "dlc::conv_pack"},
         {},
         2,
         true,
         3e-3,
         true});
  // K = 4608: outputs of magnitude ~20 carry TF32's 2^-11 relative error per product,
  // about 1e-2 absolute.
  check({"nhwc f32 tf32 split-K over 512 channels",
         R"(graph @g(%v: f32[1,3,3,512], %u: f32[6,3,3,512]) -> ("z": f32[1,3,3,6]) {
  %z = Conv(%v, %u) {channels_last = 1, pads = [1, 1, 1, 1]} : f32[1,3,3,6]
  return %z
})",
         {"dlc::conv_fprop_mma", "dlc::conv_splitk_reduce"},
         {},
         2,
         true,
         3e-2,
         true});
  // Weights that are constants (a model's initializers): read as they are.
  const std::string constW =
      R"(graph @g(%x: f16[2,5,7,16]) -> ("y": f16[2,5,7,24]) {
  %w = )" +
      randomConst(ir::DType::F16, {24, 3, 3, 16}, 5) + R"(
  %r = Relu(%x) : f16[2,5,7,16]
  %y = Conv(%r, %w) {channels_last = 1, pads = [1, 1, 1, 1]} : f16[2,5,7,24]
  return %y
})";
  check({"nhwc f16 conv with constant weights",
         constW.c_str(),
         {"dlc::conv_fprop_mma"},
         {},
         2,
         true,
         4e-3,
         false,
         {"dlc::conv_pack"}});
  // Grouped convolutions on tensor cores: groups batched into the grid (blockIdx.y), each
  // block reading its group's channels; depthwise ones stay direct.
  check({"nhwc f16 grouped, 4 groups of 16 -> 12 channels",
         R"(graph @g(%x: f16[2,7,6,64], %w: f16[48,3,3,16], %b: f16[48]) -> ("y": f16[2,7,6,48]) {
  %r = Relu(%x) : f16[2,7,6,64]
  %y = Conv(%r, %w, %b) {channels_last = 1, group = 4, pads = [1, 1, 1, 1]} : f16[2,7,6,48]
  return %y
})",
         {"dlc::conv_fprop_mma"},
         {},
         2,
         true,
         4e-3,
         false,
         {"dlc::conv_direct"}});
  check({"nhwc bf16 grouped s2 of a graph input, 3 groups of 8 -> 10 channels",
         R"(graph @g(%x: bf16[1,9,11,24], %w: bf16[30,3,3,8]) -> ("y": bf16[1,5,6,30]) {
  %y = Conv(%x, %w) {channels_last = 1, group = 3, pads = [1, 1, 1, 1], strides = [2, 2]} : bf16[1,5,6,30]
  return %y
})",
         {"dlc::conv_fprop_mma", "dlc::conv_pack"},
         {},
         2,
         true,
         2e-2});
  check({"nhwc f32 tf32 grouped, 2 groups of 4 -> 8 channels",
         R"(graph @g(%x: f32[1,6,5,8], %w: f32[16,3,3,4]) -> ("y": f32[1,6,5,16]) {
  %y = Conv(%x, %w) {channels_last = 1, group = 2, pads = [1, 1, 1, 1]} : f32[1,6,5,16]
  return %y
})",
         {"dlc::conv_fprop_mma"},
         {},
         2,
         true,
         3e-3,
         true});
  // More than one tile of channels per group (Mg 72 on the 32x32 tile), and split-K
  // over a group's 512 channels.
  const codegen::ConvTileConfig &t32 =
      codegen::kConvMmaTiles[std::size(codegen::kConvMmaTiles) - 1];
  ASSERT_EQ(t32.bn, 32);
  check({"nhwc f16 grouped, 2 groups of 72 channels on 32-channel tiles",
         R"(graph @g(%x: f16[1,5,6,16], %w: f16[144,3,3,8]) -> ("y": f16[1,5,6,144]) {
  %r = Relu(%x) : f16[1,5,6,16]
  %y = Conv(%r, %w) {channels_last = 1, group = 2, pads = [1, 1, 1, 1]} : f16[1,5,6,144]
  return %y
})",
         {"dlc::conv_fprop_mma"},
         {},
         2,
         true,
         4e-3,
         false,
         {},
         static_cast<int>(std::size(codegen::kConvMmaTiles)) - 1,
         "dlc::ConvMmaTile<32, 32, 32, 32, 4>"});
  check(
      {"nhwc f16 grouped split-K, 2 groups of 512 channels",
       R"(graph @g(%x: f16[1,3,3,1024], %w: f16[16,3,3,512], %b: f16[16]) -> ("y": f16[1,3,3,16]) {
  %r = Relu(%x) : f16[1,3,3,1024]
  %y = Conv(%r, %w, %b) {channels_last = 1, group = 2, pads = [1, 1, 1, 1]} : f16[1,3,3,16]
  return %y
})",
       {"dlc::conv_fprop_mma", "dlc::conv_splitk_reduce"},
       {},
       2,
       true,
       4e-3});
  check({"nhwc f16 depthwise stays direct",
         R"(graph @g(%x: f16[1,6,5,16], %w: f16[16,3,3,1]) -> ("y": f16[1,6,5,16]) {
  %y = Conv(%x, %w) {channels_last = 1, group = 16, pads = [1, 1, 1, 1]} : f16[1,6,5,16]
  return %y
})",
         {"dlc::conv_direct"},
         {},
         2,
         true,
         4e-3,
         false,
         {"dlc::conv_fprop_mma"}});
  check({"nhwc f16 conv of a graph input",
         R"(graph @g(%x: f16[1,5,6,16], %w: f16[9,3,3,16]) -> ("y": f16[1,5,6,9]) {
  %y = Conv(%x, %w) {channels_last = 1, pads = [1, 1, 1, 1]} : f16[1,5,6,9]
  return %y
})",
         {"dlc::conv_fprop_mma", "dlc::conv_pack"},
         {},
         2,
         true,
         4e-3});
  check({"nhwc f16 K of 18 stages, 64 -> 64 channels",
         R"(graph @g(%x: f16[1,6,5,64], %w: f16[64,3,3,64]) -> ("y": f16[1,6,5,64]) {
  %y = Conv(%x, %w) {channels_last = 1, pads = [1, 1, 1, 1]} : f16[1,6,5,64]
  return %y
})",
         {"dlc::conv_fprop_mma"},
         {},
         2,
         true,
         4e-3});
}

// Every tile of conv_fprop_mma (ConvTiles.h), FP16 and TF32, on one shape that cuts
// each at both edges: 143 positions, 40 channels, K = 216 over 24 channels (in FP16
// several taps per stage). The cost model would pick only a few of them for small shapes.
TEST(KernelLibrary, MmaSyncConvolutionEveryTile) {
  const char *f16 =
      R"(graph @g(%x: f16[1,13,11,24], %w: f16[40,3,3,24], %b: f16[40]) -> ("y": f16[1,13,11,40]) {
  %y = Conv(%x, %w, %b) {channels_last = 1, pads = [1, 1, 1, 1]} : f16[1,13,11,40]
  return %y
})";
  const char *f32 =
      R"(graph @g(%x: f32[1,13,11,24], %w: f32[40,3,3,24], %b: f32[40]) -> ("y": f32[1,13,11,40]) {
  %y = Conv(%x, %w, %b) {channels_last = 1, pads = [1, 1, 1, 1]} : f32[1,13,11,40]
  return %y
})";
  for (int t = 0; t < static_cast<int>(std::size(codegen::kConvMmaTiles)); ++t) {
    const codegen::ConvTileConfig &c = codegen::kConvMmaTiles[t];
    const std::string name = "tile " + std::to_string(c.bm) + "x" + std::to_string(c.bn) +
                             " warp " + std::to_string(c.tm) + "x" + std::to_string(c.tn) + ", " +
                             std::to_string(c.stages) + " stages";
    const std::string inst = "dlc::ConvMmaTile<" + std::to_string(c.bm) + ", " +
                             std::to_string(c.bn) + ", " + std::to_string(c.tm) + ", " +
                             std::to_string(c.tn) + ", " + std::to_string(c.stages) + ">";
    run({name.c_str(), f16, {"dlc::conv_fprop_mma"}, {}, 2, true, 4e-3, false, {}, t, inst}, false);
    if (t % 3 == 0) // TF32 (a third of them): 2^-11 per operand over K = 216, ~4 sigma
      run({(name + " tf32").c_str(),
           f32,
           {"dlc::conv_fprop_mma"},
           {},
           2,
           true,
           1e-2,
           true,
           {},
           t,
           inst},
          false);
  }
}

// What runs on a GPU: the FP16 convolution's PTX multiplies on tensor cores.
TEST(KernelLibrary, TensorCoreConvolutionPtxUsesMma) {
  for (const char *dt : {"f16", "bf16"}) {
    std::string ir = std::string(R"(graph @g(%x: )") + dt + R"([1,10,9,9], %w: )" + dt +
                     R"([10,10,3,3]) -> ("y": )" + dt + R"([1,10,7,7]) {
  %y = Conv(%x, %w) : )" +
                     dt + R"([1,10,7,7]
  return %y
})";
    auto g = ir::parseGraph(ir, "tc");
    ASSERT_TRUE(bool(g)) << llvm::toString(g.takeError());
    codegen::CompileOptions co;
    co.targets = {"compute_80"};
    co.useCache = false;
    auto bytes = codegen::compileGraph(**g, co);
    ASSERT_TRUE(bool(bytes)) << llvm::toString(bytes.takeError());
    auto pf = pkg::PackageFile::fromBytes(bytes->data(), bytes->size(), "tc");
    ASSERT_TRUE(pf.ok()) << pf.status().message();
    std::string ptx;
    for (const pkg::Module *m : *(*pf)->meta().modules())
      if (m->kind() == pkg::ModuleKind::Ptx)
        ptx.append(reinterpret_cast<const char *>((*pf)->section(m->data())), m->data()->size());
    EXPECT_NE(ptx.find("wmma.mma.sync"), std::string::npos) << dt << ": no WMMA in the PTX";
    EXPECT_NE(ptx.find(std::string(".") + dt), std::string::npos)
        << dt << ": the MMA is not on " << dt;
    bool tc = false;
    for (const pkg::Kernel *k : *(*pf)->meta().kernels())
      tc |= k->tensor_core();
    EXPECT_TRUE(tc) << "no kernel declares tensor cores";
  }
}

// FP16/BF16 element-wise groups between two kernels (here two GEMMs; arena buffers,
// 4-byte aligned) move __half2 / __nv_bfloat162 pairs. An odd element count falls
// back to one element per thread.
TEST(KernelLibrary, ElementwiseHalf2) {
  for (const char *dt : {"f16", "bf16"}) {
    std::string t = dt, shape = t + "[4,6]";
    std::string ir = "graph @g(%x: " + shape + ", %w: " + t + "[6,6]) -> (\"y\": " + shape +
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

TEST(KernelLibrary, DirectAndTransposedConvolution) {
  check({"depthwise",
         R"(graph @g(%x: f32[1,6,7,5], %w: f32[6,1,3,3], %b: f32[6]) -> ("y": f32[1,6,7,5]) {
  %y = Conv(%x, %w, %b) {group = 6, pads = [1, 1, 1, 1]} : f32[1,6,7,5]
  return %y
})",
         {"dlc::conv_direct"}});
  check({"grouped",
         R"(graph @g(%x: f32[2,4,5,5], %w: f32[6,2,2,2]) -> ("y": f32[2,6,4,4]) {
  %y = Conv(%x, %w) {group = 2} : f32[2,6,4,4]
  return %y
})",
         {"dlc::conv_direct"}});
  check({"conv transpose",
         R"(graph @g(%x: f32[1,4,3,5], %w: f32[4,3,3,3], %b: f32[3]) -> ("y": f32[1,3,7,11]) {
  %y = ConvTranspose(%x, %w, %b) {strides = [2, 2]} : f32[1,3,7,11]
  return %y
})",
         {"dlc::conv_transpose"}});
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

TEST(KernelLibrary, SoftmaxFamily) {
  check({"softmax over a middle axis",
         R"(graph @g(%x: f32[2,9,3]) -> ("y": f32[2,9,3], "l": f32[2,9,3], "h": f32[2,9,3]) {
  %y = Softmax(%x) {axis = 1} : f32[2,9,3]
  %l = LogSoftmax(%x) {axis = 1} : f32[2,9,3]
  %h = Hardmax(%x) {axis = 1} : f32[2,9,3]
  return %y, %l, %h
})",
         {"dlc::softmax"}});
  check({"long rows",
         R"(graph @g(%x: f32[3,257]) -> ("y": f32[3,257]) {
  %y = Softmax(%x) {axis = 1} : f32[3,257]
  return %y
})",
         {"dlc::softmax"}});
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

TEST(KernelLibrary, Normalizations) {
  check(
      {"layer norm, broadcast scale, short and long rows",
       R"(graph @g(%x: f32[3,2,5], %s: f32[5], %b: f32[5], %z: f32[2,130], %zs: f32[130]) -> ("y": f32[3,2,5], "w": f32[2,130]) {
  %y = LayerNormalization(%x, %s, %b) {axis = 1} : f32[3,2,5]
  %w = LayerNormalization(%z, %zs) {axis = -1} : f32[2,130]
  return %y, %w
})",
       {"dlc::row_norm"},
       {},
       2,
       true,
       1e-4});
  check(
      {"group and instance norm",
       R"(graph @g(%x: f32[2,6,3,5], %s: f32[6], %b: f32[6]) -> ("g": f32[2,6,3,5], "i": f32[2,6,3,5]) {
  %g = GroupNormalization(%x, %s, %b) {num_groups = 3} : f32[2,6,3,5]
  %i = InstanceNormalization(%x, %s, %b) : f32[2,6,3,5]
  return %g, %i
})",
       {"dlc::row_norm"},
       {},
       2,
       true,
       1e-4});
  check(
      {"batch norm training, LRN",
       R"(graph @g(%x: f32[3,4,5], %s: f32[4], %b: f32[4], %m: f32[4], %v: f32[4]) -> ("y": f32[3,4,5], "rm": f32[4], "rv": f32[4], "l": f32[3,4,5]) {
  %y, %rm, %rv = BatchNormalization(%x, %s, %b, %m, %v) {training_mode = 1} : f32[3,4,5], f32[4], f32[4]
  %l = LRN(%x) {size = 3} : f32[3,4,5]
  return %y, %rm, %rv, %l
})",
       {"dlc::batchnorm_train", "dlc::lrn"},
       {{"v", ir::randomTensor(ir::TensorType(ir::DType::F32, {4}), 5, 0.5, 1.5)}},
       2,
       true,
       1e-4});
}

TEST(KernelLibrary, Attention) {
  // Head size 72 (three chunks of 32 lanes, the last partial), 70 keys (three key
  // tiles, the last partial), 3 heads, one sequence.
  check({"attention",
         R"(graph @g(%qkv: f32[1,70,648], %mask: f32[70,70]) -> ("y": f32[1,70,216]) {
  %q = Slice(%qkv) {axes = [2], ends = [216], starts = [0]} : f32[1,70,216]
  %k = Slice(%qkv) {axes = [2], ends = [432], starts = [216]} : f32[1,70,216]
  %v = Slice(%qkv) {axes = [2], ends = [648], starts = [432]} : f32[1,70,216]
  %qr = Reshape(%q) {shape = [1, 70, 3, 72]} : f32[1,70,3,72]
  %kr = Reshape(%k) {shape = [1, 70, 3, 72]} : f32[1,70,3,72]
  %vr = Reshape(%v) {shape = [1, 70, 3, 72]} : f32[1,70,3,72]
  %qh = Transpose(%qr) {perm = [0, 2, 1, 3]} : f32[1,3,70,72]
  %kt = Transpose(%kr) {perm = [0, 2, 3, 1]} : f32[1,3,72,70]
  %vh = Transpose(%vr) {perm = [0, 2, 1, 3]} : f32[1,3,70,72]
  %scale = const f32[] dense<[0.118]>
  %qs = Mul(%qh, %scale) : f32[1,3,70,72]
  %s = MatMul(%qs, %kt) : f32[1,3,70,70]
  %sm = Add(%s, %mask) : f32[1,3,70,70]
  %p = Softmax(%sm) {axis = -1} : f32[1,3,70,70]
  %o = MatMul(%p, %vh) : f32[1,3,70,72]
  %ot = Transpose(%o) {perm = [0, 2, 1, 3]} : f32[1,70,3,72]
  %y = Reshape(%ot) {shape = [1, 70, 216]} : f32[1,70,216]
  return %y
})",
         {"dlc::attention"},
         {},
         2,
         true,
         1e-4});
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
