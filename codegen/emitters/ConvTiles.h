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
};

/// conv_igemm: 256 threads, BK 16 (FP32 and FP64 operands).
inline constexpr ConvTileConfig kConvTiles[] = {
    {128, 128, 8, 8, 112, 1891, 0, 1024, 385, 15, 60, 286, 1714},
    {128, 64, 8, 4, 80, 1075, 0, 512, 233, 11, 44, 214, 997},
    {64, 128, 4, 8, 80, 1287, 0, 512, 365, 15, 60, 222, 1525},
    {64, 64, 4, 4, 56, 759, 0, 256, 237, 11, 44, 150, 840},
    {64, 32, 4, 2, 48, 470, 0, 128, 157, 9, 36, 114, 519},
    {32, 64, 2, 4, 48, 593, 0, 128, 231, 11, 44, 118, 474},
    {32, 32, 2, 2, 40, 375, 0, 64, 155, 9, 36, 82, 319},
    {16, 64, 1, 4, 40, 516, 0, 64, 234, 11, 44, 102, 213},
    {16, 32, 1, 2, 36, 327, 0, 32, 155, 9, 36, 66, 180},
};
inline constexpr int kConvBK = 16, kConvThreads = 256;

/// conv_igemm_tc (ConvTcTile<BM, BN, WM, WN>: tm, tn are the warp tile WM x WN),
/// FP16/BF16 operands, FP32 accumulators, BK 32.
inline constexpr ConvTileConfig kConvTcTiles[] = {
    {128, 64, 64, 32, 128, 1125, 32, 0, 670, 23, 46, 94, 284},
    {64, 64, 32, 32, 96, 1076, 16, 0, 638, 23, 46, 78, 235},
    {32, 64, 16, 32, 72, 1073, 8, 0, 645, 23, 46, 70, 197},
    {32, 32, 16, 16, 56, 617, 4, 0, 374, 15, 30, 46, 196},
};
inline constexpr int kConvTcBK = 32;

/// The decoded-kernel facts a tile's row stands for (one loop: the main loop).
inline sass::KernelFacts tileFacts(const ConvTileConfig &c) {
  sass::KernelFacts f;
  f.arch = 90;
  sass::Loop loop;
  sass::Mix &m = loop.mix;
  m.instructions = c.instructions;
  m.count[static_cast<int>(sass::Class::Tensor)] = c.mma;
  m.mmaFlops = 4096 * c.mma;
  m.tensorEquiv = c.mma;
  m.ffma = c.ffma;
  m.count[static_cast<int>(sass::Class::Fp32)] = c.ffma;
  m.count[static_cast<int>(sass::Class::Alu)] = c.integer;
  m.count[static_cast<int>(sass::Class::GlobalLoad)] = c.loads;
  m.globalLoadBytes = c.loadBytes;
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
