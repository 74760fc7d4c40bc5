//===- Sass.h - What a kernel's machine code does, read from its cubin -*- C++ -*-===//
//
// A cubin is an ELF file; each kernel's SASS is its `.text.<symbol>` section, 16 bytes
// per instruction on sm_80 ... sm_90 (Ampere, Ada, Hopper). This decodes only what the
// cost model needs: each instruction's class (from the 9-bit opcode in bits 0-8), the
// access width of loads and stores (bits 73-75), the shape and type of tensor-core
// instructions, and the targets of branches (a signed offset from the next
// instruction: bytes in bits 32-63 up to sm_89; 4-byte units in bits 16-23 and 34-63 on
// sm_90). No disassembler ships with the toolkit; every field was found by compiling
// PTX probes that differ in one instruction with ptxas for sm_80, sm_86, sm_89 and
// sm_90 and comparing the cubins, and tests/unit/codegen/SassTest.cpp checks each one
// against kernels compiled by NVRTC in the test itself (docs/ARCHITECTURE.md, "Kernel
// facts and bounds").
//
// From the decoded code, per kernel: the loops (backward branches); the main loop (the
// most tensor-core FLOPs per iteration, else the most FP arithmetic, a nested loop
// before the loop around it, then the most global-load bytes) and its instruction mix
// per iteration; the instructions outside loops; and the passes over the data.
//===----------------------------------------------------------------------===//
#pragma once

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dlc::codegen::sass {

/// The execution resource an instruction uses (what the cost model prices).
enum class Class : uint8_t {
  Tensor,      // HMMA, IMMA (mma.sync)
  Fp32,        // FFMA, FMUL, FADD
  Fp16x2,      // HFMA2, HADD2, HMUL2
  Fp64,        // DFMA, DADD, DMUL
  Mufu,        // MUFU (ex2, rcp, rsqrt, ...)
  Convert,     // F2F, F2I, I2F, I2FP, F2FP
  IntMad,      // IMAD and its forms (integer multiply-add, also moves and shifts by ptxas)
  Alu,         // IADD3, LOP3, SHF, LEA, ISETP, SEL, MOV, PRMT, float compares, ...
  Uniform,     // the uniform datapath (U* instructions, S2UR), S2R, LDC: once per warp
  GlobalLoad,  // LDG, LD
  GlobalStore, // STG, ST
  LocalMemory, // LDL, STL (spills, local arrays)
  SharedLoad,  // LDS
  SharedStore, // STS
  Ldsm,        // LDSM (ldmatrix)
  CpAsync,     // LDGSTS (cp.async)
  Atomic,      // ATOMG, RED, ATOMS
  Shuffle,     // SHFL
  Barrier,     // BAR, MEMBAR, DEPBAR, LDGDEPBAR
  Branch,      // BRA, EXIT, BSSY, BSYNC, ... (control)
  Nop,         // NOP (padding; not issued work)
  Other,       // an opcode not in the table
  Count
};
const char *className(Class c);

struct Instr {
  uint16_t opcode = 0; // bits 0-8
  Class cls = Class::Other;
  uint8_t bytes = 0;         // loads, stores, cp.async, ldmatrix: bytes per thread
  uint16_t mmaFlops = 0;     // tensor: multiply-add FLOPs per warp (4096 for m16n8k16)
  bool tf32 = false;         // tensor: TF32 operands (half the FP16 rate)
  bool integerMma = false;   // tensor: IMMA (s8/u8)
  bool fp8Mma = false;       // tensor: QMMA (sm_89's e4m3/e5m2)
  int64_t branchTarget = -1; // BRA: the target's byte offset in the section
};

/// One 128-bit instruction of an sm_80 ... sm_90 cubin (`arch`: 80 ... 90; branch
/// offsets are encoded differently on sm_90).
Instr decode(uint64_t lo, uint64_t hi, int arch);

/// Instruction counts of a range of code (a loop's body: per iteration).
struct Mix {
  int instructions = 0; // issued (NOPs excluded)
  int count[static_cast<int>(Class::Count)] = {};
  int64_t mmaFlops = 0; // tensor FLOPs per warp per pass over the range
  /// Tensor-core time in HMMA.16816 FP16 equivalents (TF32 at half, IMMA.16832 at the
  /// FP16 rate: the data sheets' dense ratios).
  double tensorEquiv = 0;
  /// Shared-memory/L1 pipe time at 128 bytes per clock: max(1, 32 x bytes / 128) per
  /// load, store, ldmatrix, cp.async, atomic and shuffle.
  double lsuCycles = 0;
  int ffma = 0, hfma2 = 0; // fused multiply-adds (2 FLOPs per lane, 4 for HFMA2)
  /// Bytes per thread by class and width: loads/stores as {width: count}.
  std::map<int, int> globalLoadWidths, globalStoreWidths, sharedLoadWidths, sharedStoreWidths,
      cpAsyncWidths;
  int64_t globalLoadBytes = 0, globalStoreBytes = 0, sharedBytes = 0, cpAsyncBytes = 0;
  int64_t ldsmBytes = 0;
  int of(Class c) const { return count[static_cast<int>(c)]; }
  /// Integer overhead: IMAD, ALU and uniform instructions.
  int integerOps() const { return of(Class::IntMad) + of(Class::Alu) + of(Class::Uniform); }
  void add(const Instr &i);
};

struct Loop {
  int64_t begin = 0, end = 0; // byte offsets: the target and the backward branch (inclusive)
  bool innermost = true;
  Mix mix;
};

struct KernelFacts {
  std::string symbol;
  int arch = 0; // 80, 86, 89, 90
  Mix whole;    // every instruction once
  Mix straight; // instructions outside every loop
  std::vector<Loop> loops;
  int mainLoop = -1; // index into loops; -1: no loop
  int loadLoops = 0; // passes over the data: see passesOverData in Sass.cpp
  /// Loops were left out (the work budget ran out): the facts are incomplete, and the
  /// cost model does not price from them.
  bool truncated = false;
  const Mix *main() const { return mainLoop >= 0 ? &loops[mainLoop].mix : nullptr; }
  /// Issued instructions per tensor-core instruction in the main loop (0: none).
  double instructionsPerMma() const;
};

/// The work a decoder may do on one package, whatever its contents: loops found and
/// instructions counted into loop mixes. A kernel whose loops do not fit is marked
/// `truncated` (a kernel of ours has a few dozen loops of a few hundred instructions).
struct Budget {
  size_t loops = size_t(1) << 16, visits = size_t(1) << 27;
};

/// Completes `f` (its symbol and arch set) from a kernel's code, one Instr per 16
/// bytes, whose branches carry absolute targets (branchTarget; -1: not a branch): the
/// whole mix, loops, main loop, code outside loops and passes over the data, within
/// `budget` (and at most 4096 loops per kernel).
void finishFacts(KernelFacts &f, const std::vector<Instr> &code, Budget &budget);

/// The facts of every kernel in a cubin, by symbol. Errors: not an ELF file, not a
/// CUDA cubin, or an architecture this decoder does not know (its opcodes may differ).
/// Text sections must not overlap. `budget`: shared by the modules of one package.
llvm::Expected<std::map<std::string, KernelFacts>> decodeCubin(llvm::ArrayRef<uint8_t> image,
                                                               Budget &budget);
llvm::Expected<std::map<std::string, KernelFacts>> decodeCubin(llvm::ArrayRef<uint8_t> image);

/// The facts of every .entry of a PTX module (arch 0): its statements classified as
/// the SASS classes they become (ptxas unrolls and expands them, so counts are the
/// PTX's). For GPUs whose architecture has no cubin in a package.
std::map<std::string, KernelFacts> analyzePtx(llvm::StringRef ptx, Budget &budget);

/// The architecture a cubin was compiled for (80 for sm_80), or 0.
int cubinArch(llvm::ArrayRef<uint8_t> image);

/// Whether decode() knows the opcodes of this architecture (sm_80 ... sm_90).
bool decodable(int arch);

/// "HMMA 4, FFMA 0, LDG.16 x8, ..." : a one-line summary of a mix.
std::string describe(const Mix &m);

} // namespace dlc::codegen::sass
