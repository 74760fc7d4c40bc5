//===- KernelLibraryTestUtil.h - The kernel library on emu against the interpreter -*- C++ -*-===//
//
// One case of the kernel-library tests (KernelLibraryTest.cpp, KernelLibraryConvTest.cpp):
// textual IR compiled for emu-check, run, and compared with the reference interpreter.
//===----------------------------------------------------------------------===//
#pragma once

#include "dlc/ir/Interpreter.h"
#include "dlc/ir/Tensor.h"

#include <map>
#include <set>
#include <string>
#include <vector>

namespace dlc::test {

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
  /// The convolutions' tile, "BMxBN/WMxWN" (codegen::CompileOptions::convTile).
  std::string convTile = "";
  /// Fused attentions' kernel, "mma" or "cuda-core" (codegen::CompileOptions).
  std::string attentionKernel = "";
  /// codegen::CompileOptions::deterministic; and then every output must come out with
  /// the same bits when the package runs again on 1 and 3 emu threads, the threads of
  /// each block in reverse and random orders.
  bool deterministic = false;
  /// Text the generated CUDA source must contain (the forced tile's instantiation).
  std::string sourceHas = "";
  /// Text it must not contain (where not empty).
  std::string sourceLacks = "";
  /// The schedule's kernel launches, where >= 0.
  int launches = -1;
  /// Runs the layout pass too (channels-last regions; MatMul <-> 1x1 Conv rewrites, with
  /// --gemm-epilogue fused).
  bool layout = false;
  /// INT8 convolutions where the cost model puts them (else always on tensor cores:
  /// the shapes here are small, to test the kernel).
  bool int8Choice = false;
};

/// Compiles the case (32-bit or 64-bit index instantiations), runs it on emu and
/// compares every output with the interpreter's.
void run(const KernelCase &c, bool wide);
/// run() with 32-bit and with 64-bit indices.
void check(const KernelCase &c);
/// A constant of the textual IR ("const f16[2,3] dense<0x...>") with random values in
/// [-1, 1] (fixed seed): weights that are not a graph input.
std::string randomConst(ir::DType dt, const ir::Shape &shape, unsigned seed);
/// A constant of the textual IR holding t.
std::string constText(const ir::Tensor &t);
/// A tensor of the given integer values.
ir::Tensor ints(ir::DType dt, ir::Shape shape, std::vector<int64_t> values);

} // namespace dlc::test
