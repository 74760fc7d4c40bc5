//===- ConvTiles.h - The implicit-GEMM convolution tiles and their code -*- C++ -*-===//
//
// Every tile of conv_igemm (CUDA cores) and conv_igemm_tc (tensor cores) with the
// facts of its compiled main loop (one BK stage), as codegen/Sass.h decodes the sm_90
// cubin of the tile instantiated with plain load/store functors. Tile choice
// (Conv.cpp) prices each tile with codegen::launchBounds from these facts, the model
// `dlc inspect` applies to the compiled kernels. The test
// Sass.ConvTileTableHoldsWhatTheCodeIssues (tests/unit/codegen/SassTest.cpp) compiles
// every tile and fails, printing the new rows, when a fact is off by more than 5%: a
// kernel change must update this table.
//===----------------------------------------------------------------------===//
#pragma once

#include "dlc/codegen/Sass.h"

#include <string>

namespace dlc::codegen {

struct ConvTileConfig {
  int bm, bn, tm, tn; // ConvTile<BM, BN, TM, TN> / ConvTcTile<BM, BN, WM, WN>
  int registers;      // an estimate for occupancy (ptxas reports the real count later)
  // The main loop per warp and iteration (a BK stage): issued instructions, HMMA.16816
  // (tensor tiles), FFMA (CUDA-core tiles), IMAD and ALU instructions, global loads
  // and their bytes per thread, shared/L1 cycles (codegen::sass::Mix::lsuCycles); and
  // the instructions outside loops.
  int instructions, mma, ffma, integer, loads, loadBytes;
  double lsuCycles;
  int straight;
  int stages = 0;       // conv_fprop_mma: shared-memory stages
  int cpAsyncBytes = 0; // ... and the bytes its cp.async copy per thread and iteration
  int rowBytes = 64;    // ... and the bytes of K per row of a stage (64 or 128)
};

/// conv_igemm: 256 threads, BK 16 (FP32 and FP64 operands).
inline constexpr ConvTileConfig kConvTiles[] = {
    {128, 128, 8, 8, 112, 1725, 0, 1024, 346, 16, 64, 288, 1823},
    {128, 64, 8, 4, 80, 963, 0, 512, 200, 12, 48, 216, 1031},
    {64, 128, 4, 8, 80, 1081, 0, 512, 308, 12, 48, 216, 1553},
    {64, 64, 4, 4, 56, 597, 0, 256, 170, 8, 32, 144, 863},
    {64, 32, 4, 2, 48, 347, 0, 128, 92, 6, 24, 108, 540},
    {32, 64, 2, 4, 48, 408, 0, 128, 149, 6, 24, 108, 493},
    {32, 32, 2, 2, 40, 229, 0, 64, 78, 4, 16, 72, 321},
    {16, 64, 1, 4, 40, 317, 0, 64, 142, 5, 20, 90, 219},
    {16, 32, 1, 2, 36, 175, 0, 32, 76, 3, 12, 54, 174},
};
inline constexpr int kConvBK = 16, kConvThreads = 256;

/// conv_igemm_tc (ConvTcTile<BM, BN, WM, WN>: tm, tn are the warp tile WM x WN),
/// FP16/BF16 operands, FP32 accumulators, BK 32.
inline constexpr ConvTileConfig kConvTcTiles[] = {
    {128, 64, 64, 32, 128, 1193, 32, 0, 826, 48, 96, 144, 485},
    {64, 64, 32, 32, 96, 870, 16, 0, 651, 32, 64, 96, 393},
    {32, 64, 16, 32, 72, 784, 8, 0, 607, 24, 48, 72, 269},
    {32, 32, 16, 16, 56, 436, 4, 0, 329, 16, 32, 48, 256},
};
inline constexpr int kConvTcBK = 32;

/// conv_fprop_mma (ConvMmaTile<BM, BN, WM, WN, Stages, RowBytes>: BM positions x BN
/// channels, warp tile tm x tn), FP16/BF16 operands, FP32 accumulators, BK = RowBytes / 2.
/// The tiles of 32x32 warps come in two forms: 64 bytes of K per row (BK 32), and 128
/// ("/128B", BK 64): one barrier, wait, commit and copy advance per 32 HMMA instead of
/// 16 (4.0-4.9 issued instructions per HMMA in the main loop instead of 5.6-7.1,
/// sm_90), where a K of few channels would pad a stage of 64 to waste (MobileNet's 1x1
/// layers of 16-32 channels): the model picks per layer. With 256 threads the 128-byte
/// form has 3 stages, so that two blocks still fit an A100's shared memory; the one-warp
/// 32x32 tile has only 64-byte rows (its 4 rows between a thread's chunks would break
/// the 128-byte swizzle's period of 8).
/// Measured on an H100
/// (2026-11-26, scripts/gpu_conv_bench.py): the 128x64 and 64x128 blocks run faster as
/// eight 32x32 warps than as two 64x64 warps on all three ResNet-50 3x3 layers tried
/// (by 1-23%), so the two-warp forms are not offered, nor 64x64 as two 64x32 warps
/// (64x64 is four 32x32 warps); 128x128/64x32 spilled at the 128 registers two blocks
/// per SM allow and ran slowest.
inline constexpr ConvTileConfig kConvMmaTiles[] = {
    {128, 128, 64, 64, 232, 183, 64, 0, 65, 0, 0, 99, 2614, 4, 128},
    {128, 256, 64, 64, 232, 175, 64, 0, 59, 0, 0, 91, 2268, 3, 96},
    {256, 128, 64, 64, 232, 173, 64, 0, 57, 0, 0, 91, 2521, 3, 96},
    {64, 32, 32, 32, 128, 103, 16, 0, 43, 0, 0, 59, 1201, 4, 96},
    {32, 64, 32, 32, 128, 105, 16, 0, 45, 0, 0, 59, 944, 4, 96},
    {32, 32, 32, 32, 128, 113, 16, 0, 51, 0, 0, 67, 1234, 4, 128},
    {128, 64, 32, 32, 128, 90, 16, 0, 33, 0, 0, 47, 885, 4, 48},
    {64, 128, 32, 32, 128, 102, 16, 0, 45, 0, 0, 47, 688, 4, 48},
    {64, 64, 32, 32, 128, 106, 16, 0, 48, 0, 0, 51, 901, 4, 64},
    {64, 32, 32, 32, 128, 153, 32, 0, 63, 0, 0, 115, 1839, 4, 192, 128},
    {32, 64, 32, 32, 128, 157, 32, 0, 67, 0, 0, 115, 1331, 4, 192, 128},
    {128, 64, 32, 32, 128, 127, 32, 0, 43, 0, 0, 91, 1159, 3, 96, 128},
    {64, 128, 32, 32, 128, 152, 32, 0, 68, 0, 0, 91, 883, 3, 96, 128},
    {64, 64, 32, 32, 128, 137, 32, 0, 51, 0, 0, 99, 1251, 4, 128, 128},
};

/// conv_fprop_mma with FP32 operands rounded to TF32 (m16n8k8): the same tiles, BK =
/// RowBytes / 4;
/// mma = HMMA.1688 (2048 FLOPs each), and cvt.rna.tf32 of every fragment register on
/// the integer pipe.
inline constexpr ConvTileConfig kConvMmaTf32Tiles[] = {
    {128, 128, 64, 64, 232, 345, 64, 0, 227, 0, 0, 99, 2627, 4, 128},
    {128, 256, 64, 64, 232, 337, 64, 0, 221, 0, 0, 91, 2284, 3, 96},
    {256, 128, 64, 64, 232, 335, 64, 0, 219, 0, 0, 91, 2540, 3, 96},
    {64, 32, 32, 32, 128, 185, 16, 0, 125, 0, 0, 59, 1231, 4, 96},
    {32, 64, 32, 32, 128, 187, 16, 0, 127, 0, 0, 59, 973, 4, 96},
    {32, 32, 32, 32, 128, 195, 16, 0, 133, 0, 0, 67, 1266, 4, 128},
    {128, 64, 32, 32, 128, 172, 16, 0, 115, 0, 0, 47, 911, 4, 48},
    {64, 128, 32, 32, 128, 184, 16, 0, 127, 0, 0, 47, 715, 4, 48},
    {64, 64, 32, 32, 128, 188, 16, 0, 130, 0, 0, 51, 929, 4, 64},
    {64, 32, 32, 32, 128, 299, 32, 0, 209, 0, 0, 115, 1865, 4, 192, 128},
    {32, 64, 32, 32, 128, 303, 32, 0, 213, 0, 0, 115, 1356, 4, 192, 128},
    {128, 64, 32, 32, 128, 273, 32, 0, 189, 0, 0, 91, 1185, 3, 96, 128},
    {64, 128, 32, 32, 128, 298, 32, 0, 214, 0, 0, 91, 912, 3, 96, 128},
    {64, 64, 32, 32, 128, 283, 32, 0, 197, 0, 0, 99, 1277, 4, 128, 128},
};
/// conv_fprop_mma's dynamic shared memory: Stages x (BM + BN) rows of RowBytes.
inline constexpr int convMmaSmem(const ConvTileConfig &c) {
  return c.stages * (c.bm + c.bn) * c.rowBytes;
}

/// A tile's name, "BMxBN/TMxTN", and "/128B" for conv_fprop_mma's 128-byte rows
/// (--conv-tile).
inline std::string convTileName(const ConvTileConfig &c) {
  return std::to_string(c.bm) + "x" + std::to_string(c.bn) + "/" + std::to_string(c.tm) + "x" +
         std::to_string(c.tn) + (c.rowBytes != 64 ? "/" + std::to_string(c.rowBytes) + "B" : "");
}

/// The decoded-kernel facts a tile's row stands for (one loop: the main loop). `tf32`:
/// its mma are HMMA.1688 on TF32 (half the FLOPs of an HMMA.16816, at half the rate).
/// `fp8`: float8 as sm_90 runs it (ptxas: FP16 conversions and two HMMA.16816 per
/// m16n8k32, about 10 more instructions per mma of the FP16 row: 265 against 113 for 16
/// of a 64x64 tile's k steps, SASS of 2026-11-28); sm_89's QMMA is priced as `int8`.
inline sass::KernelFacts tileFacts(const ConvTileConfig &c, bool tf32 = false, bool int8 = false,
                                   bool fp8 = false) {
  sass::KernelFacts f;
  f.arch = 90;
  sass::Loop loop;
  sass::Mix &m = loop.mix;
  m.instructions = c.instructions + (fp8 ? 10 * c.mma : 0);
  m.count[static_cast<int>(sass::Class::Tensor)] = fp8 ? 2 * c.mma : c.mma;
  // (IMMA.16832 issues as one HMMA.16816.)
  m.mmaFlops = (tf32 ? 2048 : int8 || fp8 ? 8192 : 4096) * c.mma;
  m.tensorEquiv = fp8 ? 2 * c.mma : c.mma;
  m.ffma = c.ffma;
  m.count[static_cast<int>(sass::Class::Fp32)] = c.ffma;
  m.count[static_cast<int>(sass::Class::Alu)] = c.integer;
  m.count[static_cast<int>(sass::Class::GlobalLoad)] = c.loads;
  m.globalLoadBytes = c.loadBytes;
  m.count[static_cast<int>(sass::Class::CpAsync)] = c.cpAsyncBytes / 16;
  m.cpAsyncBytes = c.cpAsyncBytes;
  m.lsuCycles = c.lsuCycles;
  f.loops.push_back(loop);
  f.mainLoop = 0;
  f.loadLoops = 1;
  f.straight.instructions = c.straight;
  f.whole = m;
  f.whole.instructions += c.straight;
  return f;
}

} // namespace dlc::codegen
