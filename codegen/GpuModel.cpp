//===- GpuModel.cpp - Representative GPUs, occupancy and SM fill ----------===//
#include "dlc/codegen/GpuModel.h"

#include <algorithm>
#include <cmath>

namespace dlc::codegen {

const std::vector<GpuModel> &gpuModels() {
  // Data-sheet peaks (dense) and bandwidths; shared memory per SM as a kernel can use it.
  // Links: NVLink 3 (A100 SXM) and 4 (H100 SXM) per direction; PCIe 4 x16 for A10 and L4.
  static const std::vector<GpuModel> models = {
      {"A100", "sm_80", 108, 2048, 32, 65536, 164 * 1024, 19.5e12, 312e12, 156e12, 2039e9, 2.0,
       300e9},
      {"A10", "sm_86", 72, 1536, 16, 65536, 100 * 1024, 31.2e12, 125e12, 62.5e12, 600e9, 2.0, 32e9},
      {"L4", "sm_89", 58, 1536, 24, 65536, 100 * 1024, 30.3e12, 121e12, 60e12, 300e9, 2.0, 32e9},
      {"H100", "sm_90", 132, 2048, 32, 65536, 228 * 1024, 66.9e12, 989e12, 495e12, 3350e9, 2.0,
       450e9},
  };
  return models;
}

const GpuModel &gpuModelFor(const std::string &arch) {
  for (const GpuModel &g : gpuModels())
    if (arch == g.arch)
      return g;
  return gpuModels().back();
}

std::vector<const GpuModel *> reportedGpus() {
  return {&gpuModels()[0], &gpuModels()[3]};
}

int blocksPerSm(const GpuModel &g, int threads, int registers, int smemBytes) {
  threads = std::max(threads, 1);
  int warps = (threads + 31) / 32;
  int byThreads = g.maxThreadsPerSm / (warps * 32);
  // Registers are allocated per warp in units of 256 (8 per thread).
  int regs = std::max(8, (registers + 7) / 8 * 8);
  int byRegs = g.regsPerSm / (regs * warps * 32);
  int bySmem = smemBytes > 0 ? g.smemPerSm / smemBytes : g.maxBlocksPerSm;
  return std::max(1, std::min({byThreads, byRegs, bySmem, g.maxBlocksPerSm}));
}

double smFill(const GpuModel &g, uint64_t blocks, int perSm) {
  if (blocks == 0)
    return 0;
  uint64_t slots = static_cast<uint64_t>(g.sms) * static_cast<uint64_t>(std::max(perSm, 1));
  uint64_t waves = (blocks + slots - 1) / slots;
  uint64_t tail = blocks - (waves - 1) * slots;
  double busy =
      static_cast<double>(waves - 1) * g.sms + static_cast<double>(std::min<uint64_t>(tail, g.sms));
  return busy / (static_cast<double>(waves) * g.sms);
}

double modeledMicros(const GpuModel &g, double flops, double bytes, double fill, double peak) {
  double p = (peak > 0 ? peak : g.fp32Flops) * std::max(fill, 1e-6);
  return 1e6 * std::max(flops / p, bytes / g.dramBytesPerSecond) + g.launchMicros;
}

} // namespace dlc::codegen
