// The kernel library's convolutions on the emu backend against the reference
// interpreter (KernelLibraryTest.cpp has the other kernel kinds): the CUDA-core, WMMA
// and cp.async/ldmatrix/mma.sync implicit GEMMs, channels-first and channels-last, the
// direct and transposed kernels, at odd extents and with 32- and 64-bit indices.
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
#include <random>
#include <set>
#include <tuple>

using namespace dlc;
using namespace dlc::test;

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

// Depthwise convolutions with constant weights: conv_depthwise, V channels per thread
// (16-byte loads where the channels and the address allow, fewer where the filter
// would not fit 64 FP32 registers or the input is a graph input), the filter in registers;
// windows cut at every edge, strides, dilations, bias, a fused ReLU6, 1D windows.
TEST(KernelLibrary, DepthwiseConvolution) {
  // Graph inputs (x, u, v, q: one channel per thread, a caller may bind them anywhere).
  const std::string dw =
      R"(graph @g(%x: f16[2,9,7,24], %u: f32[1,11,9,20], %v: bf16[1,6,10,12], %q: f16[2,1,13,16]) -> ("a": f16[2,5,4,24], "b": f32[1,11,9,20], "c": bf16[1,6,10,12], "d": f16[2,1,7,16]) {
  %w1 = )" +
      randomConst(ir::DType::F16, {24, 3, 3, 1}, 11) + R"(
  %b1 = )" +
      randomConst(ir::DType::F16, {24}, 12) + R"(
  %w2 = )" +
      randomConst(ir::DType::F32, {20, 5, 5, 1}, 13) + R"(
  %w3 = )" +
      randomConst(ir::DType::BF16, {12, 7, 7, 1}, 14) + R"(
  %w4 = )" +
      randomConst(ir::DType::F16, {16, 1, 3, 1}, 15) + R"(
  %c1 = Conv(%x, %w1, %b1) {channels_last = 1, group = 24, pads = [1, 1, 1, 1], strides = [2, 2]} : f16[2,5,4,24]
  %lo = const f16[] dense<[0.0]>
  %hi = const f16[] dense<[6.0]>
  %a = Clip(%c1, %lo, %hi) : f16[2,5,4,24]
  %b = Conv(%u, %w2) {channels_last = 1, group = 20, pads = [4, 4, 4, 4], dilations = [2, 2]} : f32[1,11,9,20]
  %c = Conv(%v, %w3) {channels_last = 1, group = 12, pads = [3, 3, 3, 3]} : bf16[1,6,10,12]
  %d = Conv(%q, %w4) {channels_last = 1, group = 16, pads = [0, 1, 0, 1], strides = [1, 2]} : f16[2,1,7,16]
  return %a, %b, %c, %d
})";
  KernelCase inputs{"nhwc depthwise of graph inputs",
                    dw.c_str(),
                    {"dlc::conv_depthwise"},
                    {},
                    2,
                    true,
                    2e-2,
                    false,
                    {"dlc::conv_direct"}};
  inputs.sourceHas = "dlc::conv_depthwise<7, 7, 1,";
  check(inputs);
  // An intermediate (a ReLU with three users, not fused) with enough positions to keep
  // threads for the whole GPU at 8 FP16 channels per thread: 16-byte loads for a 1x7
  // filter; 3x3 and 5x5 ones hold 4 and 2 channels (their filters within 64 registers).
  const std::string wide =
      R"(graph @g(%x: f16[1,80,80,96]) -> ("y": f16[1,80,80,96], "t": f16[1,80,80,96], "h": f16[1,80,80,96]) {
  %w = )" +
      randomConst(ir::DType::F16, {96, 3, 3, 1}, 17) + R"(
  %w5 = )" +
      randomConst(ir::DType::F16, {96, 5, 5, 1}, 18) + R"(
  %w7 = )" +
      randomConst(ir::DType::F16, {96, 1, 7, 1}, 20) + R"(
  %b = )" +
      randomConst(ir::DType::F16, {96}, 19) + R"(
  %r = Relu(%x) : f16[1,80,80,96]
  %y = Conv(%r, %w, %b) {channels_last = 1, group = 96, pads = [1, 1, 1, 1]} : f16[1,80,80,96]
  %t = Conv(%r, %w5) {channels_last = 1, group = 96, pads = [2, 2, 2, 2]} : f16[1,80,80,96]
  %h = Conv(%r, %w7) {channels_last = 1, group = 96, pads = [0, 3, 0, 3]} : f16[1,80,80,96]
  return %y, %t, %h
})";
  KernelCase vec{"nhwc depthwise, 8, 4 and 2 channels per thread",
                 wide.c_str(),
                 {"dlc::conv_depthwise"},
                 {},
                 2,
                 true,
                 2e-2,
                 false,
                 {"dlc::conv_direct"}};
  vec.sourceHas = "dlc::conv_depthwise<1, 7, 8,";
  check(vec);
  for (const char *other : {"dlc::conv_depthwise<3, 3, 4,", "dlc::conv_depthwise<5, 5, 2,"}) {
    vec.sourceHas = other;
    run(vec, false);
  }
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
  // Constant weights whose channels are not whole chunks (an RGB stem) are padded when
  // the package is compiled: one conv_pack launch (the input's), not two.
  const std::string constStem =
      R"(graph @g(%x: f16[1,9,8,3]) -> ("y": f16[1,5,4,10]) {
  %w = )" +
      randomConst(ir::DType::F16, {10, 3, 3, 3}, 7) + R"(
  %y = Conv(%x, %w) {channels_last = 1, pads = [1, 1, 1, 1], strides = [2, 2]} : f16[1,5,4,10]
  return %y
})";
  KernelCase stem{"nhwc f16 stem with constant weights, 3 -> 10 channels",
                  constStem.c_str(),
                  {"dlc::conv_fprop_mma", "dlc::conv_pack"},
                  {},
                  2,
                  true,
                  4e-3};
  stem.launches = 2;
  check(stem);
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
         "32x32/32x32",
         "dlc::ConvMmaTile<32, 32, 32, 32, 4, 64>"});
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

namespace {
/// n values spread over the whole int8 (or int32 bias) range, from a fixed LCG.
std::vector<int64_t> spread(size_t n, int64_t lo, int64_t hi, uint32_t seed) {
  std::vector<int64_t> v(n);
  for (size_t i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    v[i] = lo + static_cast<int64_t>((seed >> 8) % static_cast<uint32_t>(hi - lo + 1));
  }
  return v;
}
ir::Tensor int8s(ir::Shape shape, uint32_t seed) {
  return ints(ir::DType::I8, shape,
              spread(ir::TensorType(ir::DType::I8, shape).numElements(), -128, 127, seed));
}
} // namespace

// INT8 convolutions (a quantized model's, after fold-qdq: int8 input and weights, an
// int32 bias, int32 sums) run conv_fprop_mma on m16n8k32 products into int32
// accumulators: exact, so the results equal the interpreter's bit for bit. Operands
// over the whole int8 range; positions and channels cut at both edges; several tiles of
// K (64 channels x 9 taps); channels not whole 16-byte chunks (packed); the epilogue
// (the requantization fold-qdq writes) fused.
TEST(KernelLibrary, Int8MmaSyncConvolution) {
  KernelCase c{
      "nhwc i8 3x3 s2, 32 -> 10 channels, int32 bias",
      R"(graph @g(%x: i8[2,9,9,32], %w: i8[10,3,3,32], %b: i32[10]) -> ("y": i32[2,5,5,10]) {
  %y = Conv(%x, %w, %b) {channels_last = 1, pads = [1, 1, 1, 1], strides = [2, 2]} : i32[2,5,5,10]
  return %y
})",
      {"dlc::conv_fprop_mma"},
      {{"x", int8s({2, 9, 9, 32}, 1)},
       {"w", int8s({10, 3, 3, 32}, 2)},
       {"b", ints(ir::DType::I32, {10}, spread(10, -1000000, 1000000, 3))}},
      2,
      true,
      0,
      false,
      {"dlc::conv_direct"}};
  check(c);
  check({"nhwc i8 3x3 over 64 channels (several stages), 70 output channels",
         R"(graph @g(%x: i8[1,7,6,64], %w: i8[70,3,3,64]) -> ("y": i32[1,7,6,70]) {
  %y = Conv(%x, %w) {channels_last = 1, pads = [1, 1, 1, 1]} : i32[1,7,6,70]
  return %y
})",
         {"dlc::conv_fprop_mma"},
         {{"x", int8s({1, 7, 6, 64}, 4)}, {"w", int8s({70, 3, 3, 64}, 5)}},
         2,
         true,
         0});
  // An int8 MatMul by constant weights (K whole 16-byte chunks): with the layout pass, a
  // 1x1 channels-last convolution on conv_fprop_mma; of two activations, matmul_int.
  const std::string mmConst = R"(graph @g(%a: i8[5,48]) -> ("y": i32[5,7]) {
  %r = Relu(%a) : i8[5,48]
  %b = )" + constText(int8s({48, 7}, 11)) +
                              R"(
  %y = MatMul(%r, %b) : i32[5,7]
  return %y
})";
  KernelCase mm{"i8 MatMul by constant weights as a 1x1 convolution",
                mmConst.c_str(),
                {"dlc::conv_fprop_mma"},
                {{"a", int8s({5, 48}, 12)}},
                2,
                true,
                0,
                false,
                {"dlc::matmul_int"}};
  mm.layout = true;
  check(mm);
  check({"i8 MatMul of two activations",
         R"(graph @g(%a: i8[2,5,48], %b: i8[2,48,7]) -> ("y": i32[2,5,7]) {
  %y = MatMul(%a, %b) : i32[2,5,7]
  return %y
})",
         {"dlc::matmul_int"},
         {{"a", int8s({2, 5, 48}, 13)}, {"b", int8s({2, 48, 7}, 14)}},
         2,
         true,
         0});
  // K = 4608 over 9 positions: split-K, the partial sums exact, the reduction adding
  // the int32 bias.
  check({"nhwc i8 split-K over 512 channels",
         R"(graph @g(%v: i8[1,3,3,512], %u: i8[6,3,3,512], %b: i32[6]) -> ("z": i32[1,3,3,6]) {
  %z = Conv(%v, %u, %b) {channels_last = 1, pads = [1, 1, 1, 1]} : i32[1,3,3,6]
  return %z
})",
         {"dlc::conv_fprop_mma", "dlc::conv_splitk_reduce"},
         {{"v", int8s({1, 3, 3, 512}, 15)},
          {"u", int8s({6, 3, 3, 512}, 16)},
          {"b", ints(ir::DType::I32, {6}, spread(6, -1000000, 1000000, 17))}},
         2,
         true,
         0});
  // Channels-first (the layout pass not run): conv_direct, the int32 bias read as such.
  check({"nchw i8 3x3, int32 bias",
         R"(graph @g(%x: i8[1,5,6,7], %w: i8[4,5,3,3], %b: i32[4]) -> ("y": i32[1,4,6,7]) {
  %y = Conv(%x, %w, %b) {pads = [1, 1, 1, 1]} : i32[1,4,6,7]
  return %y
})",
         {"dlc::conv_direct"},
         {{"x", int8s({1, 5, 6, 7}, 8)},
          {"w", int8s({4, 5, 3, 3}, 9)},
          {"b", ints(ir::DType::I32, {4}, spread(4, -1000000, 1000000, 10))}},
         2,
         true,
         0});
  check({"nhwc i8 pointwise, 3 -> 12 channels (packed to 16), requantized",
         R"(graph @g(%x: i8[1,13,11,3], %w: i8[12,1,1,3]) -> ("y": i8[1,13,11,12]) {
  %m = const f32[] dense<[0.01]>
  %c = Conv(%x, %w) {channels_last = 1} : i32[1,13,11,12]
  %r = Relu(%c) : i32[1,13,11,12]
  %f = Cast(%r) {to = "f32"} : f32[1,13,11,12]
  %y = QuantizeLinear(%f, %m) {multiply = 1, to = "i8"} : i8[1,13,11,12]
  return %y
})",
         {"dlc::conv_fprop_mma", "dlc::conv_pack"},
         {{"x", int8s({1, 13, 11, 3}, 6)}, {"w", int8s({12, 1, 1, 3}, 7)}},
         2,
         true,
         0});
}

namespace {
/// Random float8 bytes (e4m3fn, or e5m2), finite: NaN and infinity patterns replaced.
ir::Tensor float8s(ir::DType t, ir::Shape shape, uint32_t seed) {
  ir::Tensor r(ir::TensorType(t, shape));
  auto *p = static_cast<uint8_t *>(r.mutableRaw());
  std::vector<int64_t> v = spread(static_cast<size_t>(r.numElements()), 0, 255, seed);
  const int nanExp = t == ir::DType::F8E5M2 ? 0x7c : 0x7f;
  for (size_t i = 0; i < v.size(); ++i)
    p[i] = static_cast<uint8_t>((v[i] & 0x7f) >= nanExp ? v[i] & 0xb8 : v[i]);
  return r;
}
} // namespace

// Float8 convolutions (an FP8 QDQ model's, after fold-qdq: e4m3 or e5m2 input and
// weights, FP32 sums) run conv_fprop_mma's 8-bit tiles on m16n8k32 float8 products (on
// emu the PTX instruction's semantics: exact products, summed in FP32): random bytes over
// the whole range, subnormals included; positions and channels cut at both edges;
// several stages of K; channels not whole 16-byte chunks (packed).
TEST(KernelLibrary, Float8MmaSyncConvolution) {
  check({"nhwc e4m3 3x3 s2, 32 -> 10 channels",
         R"(graph @g(%x: f8e4m3[2,9,9,32], %w: f8e4m3[10,3,3,32]) -> ("y": f32[2,5,5,10]) {
  %y = Conv(%x, %w) {channels_last = 1, pads = [1, 1, 1, 1], strides = [2, 2]} : f32[2,5,5,10]
  return %y
})",
         {"dlc::conv_fprop_mma"},
         {{"x", float8s(ir::DType::F8E4M3, {2, 9, 9, 32}, 31)},
          {"w", float8s(ir::DType::F8E4M3, {10, 3, 3, 32}, 32)}},
         2,
         true,
         1e-5,
         false,
         {"dlc::conv_direct"}});
  check({"nhwc e5m2 3x3 over 64 channels, 70 output channels",
         R"(graph @g(%x: f8e5m2[1,7,6,64], %w: f8e5m2[70,3,3,64]) -> ("y": f32[1,7,6,70]) {
  %y = Conv(%x, %w) {channels_last = 1, pads = [1, 1, 1, 1]} : f32[1,7,6,70]
  return %y
})",
         {"dlc::conv_fprop_mma"},
         {{"x", float8s(ir::DType::F8E5M2, {1, 7, 6, 64}, 33)},
          {"w", float8s(ir::DType::F8E5M2, {70, 3, 3, 64}, 34)}},
         2,
         true,
         1e-4}); // (e5m2 spans 2^-16..57344: FP32 sums of 576 products cancel)
  check({"nhwc e4m3 3x3, 7 channels (packed to 16)",
         R"(graph @g(%x: f8e4m3[1,5,6,7], %w: f8e4m3[12,3,3,7]) -> ("y": f32[1,5,6,12]) {
  %y = Conv(%x, %w) {channels_last = 1, pads = [1, 1, 1, 1]} : f32[1,5,6,12]
  return %y
})",
         {"dlc::conv_fprop_mma", "dlc::conv_pack"},
         {{"x", float8s(ir::DType::F8E4M3, {1, 5, 6, 7}, 35)},
          {"w", float8s(ir::DType::F8E4M3, {12, 3, 3, 7}, 36)}},
         2,
         true,
         1e-5});
}

// Where the cost model chooses: a small channels-last INT8 convolution at batch 1 (the
// digits CNN's first layer: one input channel, packed to 16, tiles far wider than its
// 8 output channels) stays on conv_direct's int32 arithmetic, exact. (A ResNet-sized
// one goes to tensor cores: CostModel.Int8ConvolutionsRunOnIntegerTensorCores.)
TEST(KernelLibrary, Int8ConvolutionsWhereTheModelPricesThem) {
  KernelCase small{
      "nhwc i8 3x3, 1 -> 8 channels, 8x8, int32 bias",
      R"(graph @g(%x: i8[1,8,8,1], %w: i8[8,3,3,1], %b: i32[8]) -> ("y": i32[1,8,8,8]) {
  %y = Conv(%x, %w, %b) {channels_last = 1, pads = [1, 1, 1, 1]} : i32[1,8,8,8]
  return %y
})",
      {"dlc::conv_direct"},
      {{"x", int8s({1, 8, 8, 1}, 21)},
       {"w", int8s({8, 3, 3, 1}, 22)},
       {"b", ints(ir::DType::I32, {8}, spread(8, -1000000, 1000000, 23))}},
      2,
      true,
      0,
      false,
      {"dlc::conv_fprop_mma", "dlc::conv_pack"}};
  small.int8Choice = true;
  check(small);
}

// conv_fprop_mma stores adjacent output channels as one paired store (Out::store2 ->
// dlc::st2) where the output buffer is the package's (aligned pairs: %r, %gr below),
// and one at a time where a channel pair starts at an odd index (group 1 of %g starts
// at channel 9) or the output is a graph output a caller may bind anywhere (y, z). Emu
// is built with -fsanitize=alignment: a misaligned pair would trap.
TEST(KernelLibrary, MmaSyncConvolutionStoresChannelPairs) {
  const std::string ir =
      R"(graph @g(%x: f16[2,7,9,16]) -> ("y": f16[2,7,9,8], "z": f16[2,7,9,8]) {
  %w1 = )" +
      randomConst(ir::DType::F16, {10, 3, 3, 16}, 31) +
      R"(
  %b1 = )" +
      randomConst(ir::DType::F16, {10}, 32) +
      R"(
  %w2 = )" +
      randomConst(ir::DType::F16, {18, 3, 3, 8}, 33) +
      R"(
  %wa = )" +
      randomConst(ir::DType::F16, {8, 1, 1, 10}, 34) +
      R"(
  %wb = )" +
      randomConst(ir::DType::F16, {8, 1, 1, 18}, 35) +
      R"(
  %p = Relu(%x) : f16[2,7,9,16]
  %c = Conv(%p, %w1, %b1) {channels_last = 1, pads = [1, 1, 1, 1]} : f16[2,7,9,10]
  %r = Relu(%c) : f16[2,7,9,10]
  %g = Conv(%p, %w2) {channels_last = 1, group = 2, pads = [1, 1, 1, 1]} : f16[2,7,9,18]
  %gr = Relu(%g) : f16[2,7,9,18]
  %y = Conv(%r, %wa) {channels_last = 1} : f16[2,7,9,8]
  %z = Conv(%gr, %wb) {channels_last = 1} : f16[2,7,9,8]
  return %y, %z
})";
  KernelCase c{
      "nhwc f16 convolutions into the package's buffers", ir.c_str(), {"dlc::conv_fprop_mma"}};
  c.tol = 4e-3;
  c.sourceHas = "dlc::st2(";
  check(c);
  // Into a graph output (a caller may bind it anywhere), and through a permuting
  // epilogue (a fused Transpose) into the package's buffer: two stores a pair, never one
  // paired access.
  for (const char *ir2 :
       {R"(graph @g(%x: f16[2,7,9,16], %w: f16[10,3,3,16]) -> ("y": f16[2,7,9,10]) {
  %p = Relu(%x) : f16[2,7,9,16]
  %y = Conv(%p, %w) {channels_last = 1, pads = [1, 1, 1, 1]} : f16[2,7,9,10]
  return %y
})",
        R"(graph @g(%x: f16[2,7,9,16], %w: f16[10,3,3,16]) -> ("y": f16[2,10,7,9]) {
  %p = Relu(%x) : f16[2,7,9,16]
  %c = Conv(%p, %w) {channels_last = 1, pads = [1, 1, 1, 1]} : f16[2,7,9,10]
  %t = Transpose(%c) {perm = [0, 3, 1, 2]} : f16[2,10,7,9]
  %y = Softmax(%t) {axis = 3} : f16[2,10,7,9]
  return %y
})"}) {
    KernelCase o{"nhwc f16 pairs stored one by one", ir2, {"dlc::conv_fprop_mma"}};
    o.tol = 4e-3;
    o.sourceHas = "store2(";
    o.sourceLacks = "dlc::st2(";
    check(o);
  }
}

// A MatMul by constant weights whose epilogue cuBLASLt cannot apply (bias + ReLU6,
// exact GELU) runs as a 1x1 channels-last convolution (the layout pass): one
// conv_fprop_mma launch stores through the whole epilogue, after the ReLU producing A
// (no GEMM step, no conv_pack, no separate element-wise kernel). Rank 3 reads A as it
// is; rank 2 through a reshape. Odd rows (14, 13) and 40 / 20 output columns.
TEST(KernelLibrary, MatMulWithAnEpilogueOnTheImplicitGemm) {
  const std::string rank3 =
      R"(graph @g(%x: f16[2,7,24]) -> ("y": f16[2,7,40]) {
  %w = )" +
      randomConst(ir::DType::F16, {24, 40}, 21) +
      R"(
  %b = )" +
      randomConst(ir::DType::F16, {40}, 22) +
      R"(
  %lo = const f16[] dense<[0.0]>
  %hi = const f16[] dense<[0.5]>
  %p = Relu(%x) : f16[2,7,24]
  %m = MatMul(%p, %w) : f16[2,7,40]
  %a = Add(%m, %b) : f16[2,7,40]
  %y = Clip(%a, %lo, %hi) : f16[2,7,40]
  return %y
})";

  const std::string rank2 =
      R"(graph @g(%x: bf16[13,16]) -> ("y": bf16[13,20]) {
  %w = )" +
      randomConst(ir::DType::BF16, {16, 20}, 23) +
      R"(
  %p = Relu(%x) : bf16[13,16]
  %m = MatMul(%p, %w) : bf16[13,20]
  %y = Gelu(%m) : bf16[13,20]
  return %y
})";
  for (auto [name, ir, tol] : {std::tuple{"f16 [2,7,24] x [24,40] + bias, clip", &rank3, 4e-3},
                               std::tuple{"bf16 [13,16] x [16,20], exact gelu", &rank2, 2e-2}}) {
    KernelCase c{name, ir->c_str(), {"dlc::conv_fprop_mma"}};
    c.tol = tol;
    c.absent = {"dlc::conv_pack"};
    c.layout = true;
    c.launches = 2;
    check(c);
  }
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
    const std::string tile = codegen::convTileName(c),
                      name = "tile " + tile + ", " + std::to_string(c.stages) + " stages";
    const std::string inst = "dlc::ConvMmaTile<" + std::to_string(c.bm) + ", " +
                             std::to_string(c.bn) + ", " + std::to_string(c.tm) + ", " +
                             std::to_string(c.tn) + ", " + std::to_string(c.stages) + ", " +
                             std::to_string(c.rowBytes) + ">";
    run({name.c_str(), f16, {"dlc::conv_fprop_mma"}, {}, 2, true, 4e-3, false, {}, tile, inst},
        false);
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
           tile,
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
  // A stride product over 4 keeps the gather (zero-stuffing would multiply the work).
  check({"conv transpose",
         R"(graph @g(%x: f32[1,4,3,5], %w: f32[4,3,3,3], %b: f32[3]) -> ("y": f32[1,3,10,16]) {
  %y = ConvTranspose(%x, %w, %b) {strides = [3, 3], output_padding = [1, 1]} : f32[1,3,10,16]
  return %y
})",
         {"dlc::conv_transpose"}});
  // Canonicalize's convolution forms (a convolution's input gradient): stride 1 by a
  // computed, flipped weight; stride 2 zero-stuffed; a 1x1 stride-2 kernel convolved
  // first; in FP16 channels-last on tensor cores.
  check(
      {"conv transpose as convolutions",
       R"(graph @g(%x: f32[2,8,5,6], %w: f32[8,8,3,3], %b: f32[8], %w1: f32[8,16,1,1]) -> ("a": f32[2,8,5,6], "s": f32[2,8,10,12], "p": f32[2,16,9,11]) {
  %a = ConvTranspose(%x, %w, %b) {pads = [1, 1, 1, 1]} : f32[2,8,5,6]
  %s = ConvTranspose(%x, %w) {strides = [2, 2], pads = [1, 1, 1, 1], output_padding = [1, 1]} : f32[2,8,10,12]
  %p = ConvTranspose(%x, %w1) {strides = [2, 2]} : f32[2,16,9,11]
  return %a, %s, %p
})",
       {"dlc::conv_igemm"},
       {},
       2,
       true,
       1e-4,
       false,
       {"dlc::conv_transpose"}});
  check(
      {"conv transpose as convolutions, fp16 channels-last",
       R"(graph @g(%x: f16[2,8,5,6], %w: f16[8,8,3,3], %b: f16[8]) -> ("a": f16[2,8,5,6], "s": f16[2,8,10,12]) {
  %a = ConvTranspose(%x, %w, %b) {pads = [1, 1, 1, 1]} : f16[2,8,5,6]
  %s = ConvTranspose(%x, %w) {strides = [2, 2], pads = [1, 1, 1, 1], output_padding = [1, 1]} : f16[2,8,10,12]
  return %a, %s
})",
       {"dlc::conv_fprop_mma"},
       {},
       2,
       true,
       2e-2,
       false,
       {"dlc::conv_transpose"},
       "",
       "",
       false,
       "",
       "",
       -1,
       true});
}
