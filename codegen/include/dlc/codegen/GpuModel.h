//===- GpuModel.h - What dlc assumes about each GPU -------------*- C++ -*-===//
//
// A model, not a measurement: one profile per GPU (A100, A10, L4, H100, H200), the
// only place dlc keeps hardware numbers. Tile choice (codegen), the cost model of
// `dlc inspect` and its per-kernel bounds read them from here; `dlc inspect
// --gpu-profile FILE` replaces a profile with one that `dlc calibrate` measured.
// Each number's source is in GpuModel.cpp beside it.
//===----------------------------------------------------------------------===//
#pragma once

#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dlc::codegen {

struct GpuModel {
  std::string name; // "A100"
  std::string arch; // "sm_80"
  int sms;
  int maxThreadsPerSm, maxBlocksPerSm, regsPerSm, smemPerSm; // smem: usable bytes per SM
  double clockHz;     // the SM clock the per-clock rates below are counted at
  double fp32Flops;   // CUDA-core peak, FLOP/s
  double tensorFlops; // FP16/BF16 tensor-core peak (dense), FLOP/s
  double tf32Flops;   // TF32 tensor-core peak (dense), FLOP/s
  /// The fraction of tensorFlops that mma.sync (warp-level HMMA, what dlc's kernels
  /// issue) can reach: 1 on Ampere and Ada; Hopper reaches its peak only with wgmma.
  double mmaSyncFraction;
  // Warp instructions per clock per SM by pipe (4 schedulers issue one each).
  double fp32PerClock;   // FFMA, FMUL, FADD
  double fp16x2PerClock; // HFMA2, HADD2, HMUL2
  double fp64PerClock;
  double intPerClock;        // IMAD and the integer ALU (IADD3, LOP3, SHF, ISETP, ...)
  double mufuPerClock;       // MUFU and conversions
  double lsuBytesPerClock;   // shared memory / L1 bytes per clock per SM
  double dramBytesPerSecond; // data sheet
  double dramAchievable;     // the fraction a streaming kernel reaches
  double l2BytesPerSecond;   // achievable, whole chip
  double l2Bytes;
  double l2LatencyCycles, dramLatencyCycles; // a dependent load that hits L2 / misses
  double launchMicros;       // per kernel launch or library call (back to back on a stream)
  double graphNodeMicros;    // per kernel node of a CUDA graph
  double runOverheadMicros;  // per run: the graph's launch and the host's synchronization
  double libraryEfficiency;  // the fraction of peak cuBLASLt reaches on large GEMMs
  double linkBytesPerSecond; // GPU-to-GPU in one machine, each direction (NVLink, else PCIe)
  /// Tensor-core main loops (mma.sync fed by ldmatrix and cp.async) issue at most
  /// mmaIssuePeak x min(1, w / mmaWarpsToHide)^mmaIssueExponent instructions per
  /// scheduler and clock with w resident warps per scheduler: each warp mostly waits on
  /// its own loads, barriers and products. Fitted on an H100 (launchBounds says where).
  double mmaIssuePeak = 0.52, mmaWarpsToHide = 8, mmaIssueExponent = 0.55;
  std::string source; // "data sheet" or what measured it (dlc calibrate)

  /// HMMA.16816 (FP16, m16n8k16: 4096 FLOPs) per clock per SM that mma.sync sustains.
  double hmmaPerClock() const { return tensorFlops * mmaSyncFraction / (sms * clockHz * 4096.0); }
};

/// The built-in profiles: A100, A10, L4, H100, H200.
const std::vector<GpuModel> &gpuModels();
/// The profile dlc plans an architecture's tiles for ("sm_86": A10); sm_90's (H100)
/// for names it does not know.
const GpuModel &gpuModelFor(const std::string &arch);
/// A built-in profile by name ("H200"), or null.
const GpuModel *gpuModelNamed(const std::string &name);
/// The profiles `dlc inspect` reports by default: A100 and H100.
std::vector<const GpuModel *> reportedGpus();

/// A profile from a JSON file (what `dlc calibrate` writes): an object with "name"
/// and "arch" and any of the fields above by their snake_case names ("clock_hz",
/// "dram_bytes_per_second", ...); fields it leaves out come from the built-in profile
/// of the same name, else of the same architecture. Two measured fields set fractions
/// of the data-sheet peaks: "hmma_per_clock" (mma.sync m16n8k16 per clock per SM) sets
/// mmaSyncFraction, "dram_measured_bytes_per_second" sets dramAchievable. Unknown
/// fields are an error.
llvm::Expected<GpuModel> loadGpuProfile(const std::string &path);
/// The same profile as JSON text (every field).
std::string gpuProfileJson(const GpuModel &g);

/// Resident blocks per SM for a kernel (threads per block, registers per thread,
/// shared memory per block), as the hardware limits allow; at least 1.
int blocksPerSm(const GpuModel &g, int threads, int registers, int smemBytes);

/// The fraction of SM-time that has work: waves of `blocks` over SMs x blocksPerSm
/// slots, each wave counting the SMs that receive a block (a tail wave fills fewer).
double smFill(const GpuModel &g, uint64_t blocks, int blocksPerSm);

/// The peak-rate estimate, for launches whose code cannot be read (no cubin for the
/// architecture): max(flops / (peak x SM fill), bytes / achievable bandwidth) plus the
/// launch overhead, in microseconds. `peak`: fp32Flops, tensorFlops or tf32Flops (0:
/// fp32Flops).
double modeledMicros(const GpuModel &g, double flops, double bytes, double fill, double peak = 0);

} // namespace dlc::codegen
