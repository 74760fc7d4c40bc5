//===- GpuModel.cpp - GPU profiles, occupancy and SM fill ----------------===//
#include "dlc/codegen/GpuModel.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <type_traits>

namespace dlc::codegen {

// Sources. Peaks, SM counts, clocks, memory sizes and bandwidths: NVIDIA's data sheets
// and architecture whitepapers (A100: "NVIDIA A100 Tensor Core GPU Architecture", 2020,
// SXM4 80 GB at 1410 MHz; A10 and L4: product data sheets, 1695 and 2040 MHz boost;
// H100: "NVIDIA H100 Tensor Core GPU Architecture", SXM5, 1980 MHz max boost; H200:
// data sheet, the H100's SM with 141 GB HBM3e at 4.8 TB/s). The per-clock pipe rates
// are those peaks divided by SMs x clock x FLOPs per warp instruction, and agree with
// the whitepapers' per-SM unit counts (A100: 64 FP32 lanes, 2 warp FFMA per clock;
// GA10x, AD10x, GH100: 128, 4), 16 special-function lanes per SM (0.5 MUFU per clock).
// mmaSyncFraction: Hopper's dense FP16 peak needs wgmma; mma.sync reached 0.65 of it on
// an H100 (`dlc calibrate`; the H100's measured rows below are marked). Estimates, until `dlc
// calibrate` replaces them with measurements (docs/ARCHITECTURE.md "Kernel facts and bounds"): the
// achievable DRAM fraction (STREAM-like copies reach 85-90% of the data sheet), L2 bandwidth, load
// latencies, launch and graph-node overheads, and cuBLASLt's large-GEMM efficiency. The per-run
// overhead (a CUDA graph's launch and the host waking up at its end) is sized by the H200 GPU kit
// run: the digits model measured 21.8 us of compute median for 5 steps of about 2 us each.
const std::vector<GpuModel> &gpuModels() {
  static const std::vector<GpuModel> models = [] {
    GpuModel a100{.name = "A100",
                  .arch = "sm_80",
                  .sms = 108,
                  .maxThreadsPerSm = 2048,
                  .maxBlocksPerSm = 32,
                  .regsPerSm = 65536,
                  .smemPerSm = 164 * 1024,
                  .clockHz = 1.41e9,
                  .fp32Flops = 19.5e12,
                  .tensorFlops = 312e12,
                  .tf32Flops = 156e12,
                  .mmaSyncFraction = 1.0,
                  .fp32PerClock = 2,   // 64 FP32 lanes per SM
                  .fp16x2PerClock = 4, // 78 TFLOP/s FP16 (non-tensor)
                  .fp64PerClock = 1,   // 9.7 TFLOP/s
                  .intPerClock = 2,
                  .mufuPerClock = 0.5,
                  .lsuBytesPerClock = 128,
                  .dramBytesPerSecond = 2039e9,
                  .dramAchievable = 0.87,
                  .l2BytesPerSecond = 4.0e12,
                  .l2Bytes = 40e6,
                  .l2LatencyCycles = 200,
                  .dramLatencyCycles = 480,
                  .launchMicros = 2.0,
                  .graphNodeMicros = 1.0,
                  .runOverheadMicros = 10.0,
                  .libraryEfficiency = 0.85,
                  .linkBytesPerSecond = 300e9, // NVLink 3, each direction
                  .source = "data sheet and estimates"};
    GpuModel a10 = a100;
    a10.name = "A10";
    a10.arch = "sm_86";
    a10.sms = 72;
    a10.maxThreadsPerSm = 1536;
    a10.maxBlocksPerSm = 16;
    a10.smemPerSm = 100 * 1024;
    a10.clockHz = 1.695e9;
    a10.fp32Flops = 31.2e12;
    a10.tensorFlops = 125e12;
    a10.tf32Flops = 62.5e12;
    a10.fp32PerClock = 4;   // 128 FP32 lanes per SM
    a10.fp16x2PerClock = 2; // FP16 (non-tensor) at the FP32 rate
    a10.fp64PerClock = 0.0625;
    a10.dramBytesPerSecond = 600e9;
    a10.dramAchievable = 0.85;
    a10.l2BytesPerSecond = 1.5e12;
    a10.l2Bytes = 6e6;
    a10.libraryEfficiency = 0.80;
    a10.linkBytesPerSecond = 32e9; // PCIe 4 x16
    GpuModel l4 = a10;
    l4.name = "L4";
    l4.arch = "sm_89";
    l4.sms = 58;
    l4.maxBlocksPerSm = 24;
    l4.clockHz = 2.04e9;
    l4.fp32Flops = 30.3e12;
    l4.tensorFlops = 121e12;
    l4.tf32Flops = 60e12;
    l4.dramBytesPerSecond = 300e9;
    l4.l2Bytes = 48e6;
    GpuModel h100 = a100;
    h100.name = "H100";
    h100.arch = "sm_90";
    h100.sms = 132;
    h100.smemPerSm = 228 * 1024;
    h100.clockHz = 1.98e9;
    h100.fp32Flops = 66.9e12;
    h100.tensorFlops = 989e12;
    h100.tf32Flops = 495e12;
    // Measured by `dlc calibrate` on an H100 80GB HBM3 (SXM, driver 580.159.04,
    // 2026-11-26): mma.sync m16n8k16 at 0.60 per clock per SM (642 TFLOP/s, 0.65 of
    // the wgmma peak), HFMA2 at 1.97 per clock (half the data sheet's non-tensor FP16
    // rate), a 2 x 256 MiB copy at 2.80 TB/s, L2 reads at 6.7 TB/s, dependent loads
    // 334 (L2) and 690 (DRAM) cycles, launches 3.1-4.6 us apart (median of three runs
    // 3.3), CUDA-graph nodes 0.79 us, a graph run's overhead 6.1-7.4 us.
    h100.mmaSyncFraction = 0.65;
    h100.fp32PerClock = 4;
    h100.fp16x2PerClock = 2;
    h100.fp64PerClock = 2; // 33.5 TFLOP/s
    h100.dramBytesPerSecond = 3350e9;
    h100.dramAchievable = 0.84;
    h100.l2BytesPerSecond = 6.7e12;
    h100.l2Bytes = 50e6;
    h100.l2LatencyCycles = 334;
    h100.dramLatencyCycles = 690;
    h100.launchMicros = 3.3;
    h100.graphNodeMicros = 0.79;
    h100.runOverheadMicros = 6.5;
    h100.libraryEfficiency = 0.70;
    h100.linkBytesPerSecond = 450e9; // NVLink 4, each direction
    GpuModel h200 = h100;
    h200.name = "H200";
    h200.dramBytesPerSecond = 4800e9; // HBM3e
    // Measured by `dlc calibrate` on an H200 (SXM, driver 580.159.04, 2026-11-27):
    // mma.sync m16n8k16 at 0.59 per clock per SM, HFMA2 at 1.95 per clock, a 2 x 256
    // MiB copy at 3.84 TB/s (0.80 of the data sheet's 4.8), L2 reads at 8.1 TB/s,
    // dependent loads 335 (L2) and 671 (DRAM) cycles, launches 3.1 us apart, CUDA-graph
    // nodes 0.51 us, a graph run's overhead 5.8 us; 60 MB of L2 (PyTorch's report).
    h200.mmaSyncFraction = 0.64;
    h200.dramAchievable = 0.80;
    h200.l2BytesPerSecond = 8.1e12;
    h200.l2Bytes = 60e6;
    h200.l2LatencyCycles = 335;
    h200.dramLatencyCycles = 671;
    h200.launchMicros = 3.1;
    h200.graphNodeMicros = 0.51;
    h200.runOverheadMicros = 5.8;
    return std::vector<GpuModel>{a100, a10, l4, h100, h200};
  }();
  return models;
}

const GpuModel &gpuModelFor(const std::string &arch) {
  for (const GpuModel &g : gpuModels())
    if (arch == g.arch)
      return g;
  return gpuModels()[3];
}

const GpuModel *gpuModelNamed(const std::string &name) {
  for (const GpuModel &g : gpuModels())
    if (name == g.name)
      return &g;
  return nullptr;
}

std::vector<const GpuModel *> reportedGpus() {
  return {&gpuModels()[0], &gpuModels()[3]};
}

namespace {

/// Every numeric field of a profile by its JSON name, with the range a file may give
/// it (wide, but no zero rates, no NaN or infinity, counts that fit an int).
template <typename F> void forEachField(GpuModel &g, F &&f) {
  f("sms", g.sms, 1, 1e5);
  f("max_threads_per_sm", g.maxThreadsPerSm, 32, 1e5);
  f("max_blocks_per_sm", g.maxBlocksPerSm, 1, 1e4);
  f("registers_per_sm", g.regsPerSm, 256, 1e8);
  f("shared_memory_per_sm", g.smemPerSm, 1024, 1e9);
  f("clock_hz", g.clockHz, 1e7, 1e11);
  f("fp32_flops", g.fp32Flops, 1e9, 1e18);
  f("tensor_flops", g.tensorFlops, 1e9, 1e18);
  f("tf32_flops", g.tf32Flops, 1e9, 1e18);
  f("mma_sync_fraction", g.mmaSyncFraction, 1e-3, 10);
  f("fp32_per_clock", g.fp32PerClock, 1e-3, 1e3);
  f("fp16x2_per_clock", g.fp16x2PerClock, 1e-3, 1e3);
  f("fp64_per_clock", g.fp64PerClock, 1e-3, 1e3);
  f("int_per_clock", g.intPerClock, 1e-3, 1e3);
  f("mufu_per_clock", g.mufuPerClock, 1e-3, 1e3);
  f("lsu_bytes_per_clock", g.lsuBytesPerClock, 1, 1e5);
  f("dram_bytes_per_second", g.dramBytesPerSecond, 1e8, 1e15);
  f("dram_achievable", g.dramAchievable, 1e-3, 10);
  f("l2_bytes_per_second", g.l2BytesPerSecond, 1e8, 1e15);
  f("l2_bytes", g.l2Bytes, 1e3, 1e12);
  f("l2_latency_cycles", g.l2LatencyCycles, 1, 1e6);
  f("dram_latency_cycles", g.dramLatencyCycles, 1, 1e6);
  f("launch_us", g.launchMicros, 1e-3, 1e6);
  f("graph_node_us", g.graphNodeMicros, 1e-3, 1e6);
  f("run_overhead_us", g.runOverheadMicros, 1e-3, 1e6);
  f("library_efficiency", g.libraryEfficiency, 1e-3, 10);
  f("link_bytes_per_second", g.linkBytesPerSecond, 1e6, 1e15);
}

llvm::Error profileError(const std::string &path, const std::string &why) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), "GPU profile '%s': %s",
                                 path.c_str(), why.c_str());
}

} // namespace

llvm::Expected<GpuModel> loadGpuProfile(const std::string &path) {
  auto buf = llvm::MemoryBuffer::getFile(path, /*IsText=*/true);
  if (!buf)
    return profileError(path, buf.getError().message());
  if ((*buf)->getBufferSize() > (1 << 20))
    return profileError(path, "larger than 1 MiB; not a profile");
  llvm::Expected<llvm::json::Value> v = llvm::json::parse((*buf)->getBuffer());
  if (!v)
    return profileError(path, "not JSON: " + llvm::toString(v.takeError()));
  const llvm::json::Object *o = v->getAsObject();
  if (!o)
    return profileError(path, "not a JSON object");
  auto name = o->getString("name");
  auto arch = o->getString("arch");
  if (!name || !arch || name->empty())
    return profileError(path, "needs \"name\" and \"arch\" strings");
  const GpuModel *base = gpuModelNamed(name->str());
  if (!base)
    for (const GpuModel &g : gpuModels())
      if (g.arch == *arch) {
        base = &g;
        break;
      }
  if (!base)
    return profileError(path, "architecture '" + arch->str() +
                                  "' has no built-in profile to start from (sm_80, sm_86, "
                                  "sm_89, sm_90)");
  GpuModel g = *base;
  g.name = name->str();
  g.arch = arch->str();
  if (auto s = o->getString("source"))
    g.source = s->str();
  std::string bad;
  std::vector<std::string> known = {"name", "arch", "source"};
  forEachField(g, [&](const char *key, auto &field, double lo, double hi) {
    known.push_back(key);
    if (const llvm::json::Value *x = o->get(key)) {
      using T = std::remove_reference_t<decltype(field)>;
      auto d = x->getAsNumber();
      if (!d || !std::isfinite(*d) || *d < lo || *d > hi ||
          (std::is_integral_v<T> && *d != std::floor(*d))) {
        char buf[160];
        std::snprintf(buf, sizeof buf, "\"%s\" must be a%s number from %g to %g", key,
                      std::is_integral_v<T> ? "n integer" : "", lo, hi);
        bad = buf;
      } else
        field = static_cast<T>(*d);
    }
  });
  // What `dlc calibrate` measures against the data sheet: mma.sync per clock per SM
  // (the fraction of the tensor-core peak it reaches) and a streaming copy's bandwidth
  // (the achievable fraction of the data sheet's).
  for (const char *key : {"hmma_per_clock", "dram_measured_bytes_per_second"}) {
    known.push_back(key);
    const llvm::json::Value *x = o->get(key);
    if (!x)
      continue;
    auto d = x->getAsNumber();
    if (!d || !std::isfinite(*d) || *d < 1e-6 || *d > 1e18) {
      bad = std::string("\"") + key + "\" must be a number from 1e-6 to 1e18";
      break;
    }
    if (std::string(key) == "hmma_per_clock")
      g.mmaSyncFraction = *d * g.sms * g.clockHz * 4096.0 / g.tensorFlops;
    else
      g.dramAchievable = *d / g.dramBytesPerSecond;
  }
  if (!bad.empty())
    return profileError(path, bad);
  for (const auto &kv : *o)
    if (std::find(known.begin(), known.end(), kv.first.str()) == known.end())
      return profileError(path, "unknown field \"" + kv.first.str() + "\"");
  if (!(g.mmaSyncFraction > 0 && g.mmaSyncFraction <= 10 && g.dramAchievable > 0 &&
        g.dramAchievable <= 10))
    return profileError(path, "the measured rates put mma.sync or DRAM at an implausible "
                              "fraction of the data sheet's peak");
  return g;
}

std::string gpuProfileJson(const GpuModel &g) {
  llvm::json::Object o{{"name", g.name}, {"arch", g.arch}, {"source", g.source}};
  GpuModel copy = g;
  forEachField(copy, [&](const char *key, auto &field, double, double) {
    o[key] = static_cast<double>(field);
  });
  std::string s;
  llvm::raw_string_ostream os(s);
  os << llvm::formatv("{0:2}", llvm::json::Value(std::move(o))) << "\n";
  return s;
}

int blocksPerSm(const GpuModel &g, int threads, int registers, int smemBytes) {
  // 64-bit, clamped: a damaged package's block size or register count must not
  // overflow (or divide by zero).
  int64_t t = std::clamp<int64_t>(threads, 1, 1 << 20);
  int64_t warps = (t + 31) / 32;
  int64_t byThreads = g.maxThreadsPerSm / (warps * 32);
  // Registers are allocated per warp in units of 256 (8 per thread).
  int64_t regs = std::max<int64_t>(8, (std::clamp(registers, 0, 1 << 16) + 7) / 8 * 8);
  int64_t byRegs = g.regsPerSm / (regs * warps * 32);
  int64_t bySmem = smemBytes > 0 ? g.smemPerSm / smemBytes : g.maxBlocksPerSm;
  return static_cast<int>(
      std::max<int64_t>(1, std::min<int64_t>({byThreads, byRegs, bySmem, g.maxBlocksPerSm})));
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
  return 1e6 * std::max(flops / p, bytes / (g.dramBytesPerSecond * g.dramAchievable)) +
         g.launchMicros;
}

} // namespace dlc::codegen
