//===- GpuModel.h - What dlc assumes about each GPU architecture -*- C++ -*-===//
//
// A model, not a measurement. Tile choice (codegen) and the cost model of
// `dlc inspect` use the same numbers: SM count, occupancy limits, peaks and DRAM
// bandwidth of one representative GPU per compiled architecture.
//
//   sm_80  A100-SXM4-80GB  108 SMs  19.5 TFLOP/s FP32   312 FP16 TC   156 TF32 TC  2039 GB/s
//   sm_86  A10              72 SMs  31.2                125            62.5          600
//   sm_89  L4               58 SMs  30.3                121            60            300
//   sm_90  H100-SXM5       132 SMs  66.9                989           495           3350
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dlc::codegen {

struct GpuModel {
  const char *name; // "A100"
  const char *arch; // "sm_80"
  int sms;
  int maxThreadsPerSm, maxBlocksPerSm, regsPerSm, smemPerSm; // smem: usable bytes per SM
  double fp32Flops;                                          // CUDA-core peak, FLOP/s
  double tensorFlops; // FP16/BF16 tensor-core peak (dense), FLOP/s
  double tf32Flops;   // TF32 tensor-core peak (dense), FLOP/s
  double dramBytesPerSecond;
  double launchMicros;       // per kernel launch or library call (back to back on a stream)
  double linkBytesPerSecond; // GPU-to-GPU in one machine, each direction (NVLink, else PCIe)
};

/// One model per GPU architecture dlc compiles for (sm_80, sm_86, sm_89, sm_90).
const std::vector<GpuModel> &gpuModels();
/// The model of an architecture ("sm_86"); sm_90's for names it does not know.
const GpuModel &gpuModelFor(const std::string &arch);
/// The models `dlc inspect` reports: A100 and H100.
std::vector<const GpuModel *> reportedGpus();

/// Resident blocks per SM for a kernel (threads per block, registers per thread,
/// shared memory per block), as the hardware limits allow; at least 1.
int blocksPerSm(const GpuModel &g, int threads, int registers, int smemBytes);

/// The fraction of SM-time that has work: waves of `blocks` over SMs x blocksPerSm
/// slots, each wave counting the SMs that receive a block (a tail wave fills fewer).
double smFill(const GpuModel &g, uint64_t blocks, int blocksPerSm);

/// Modeled time of one launch: max(flops / (peak x SM fill), bytes / bandwidth)
/// plus the launch overhead, in microseconds. `peak`: the arithmetic peak that applies
/// (fp32Flops, tensorFlops or tf32Flops; 0: fp32Flops).
double modeledMicros(const GpuModel &g, double flops, double bytes, double fill, double peak = 0);

} // namespace dlc::codegen
