//===- Bounds.cpp - Issue, memory and latency bounds of one launch --------===//
#include "dlc/codegen/Bounds.h"

#include <cmath>

namespace dlc::codegen {

namespace {

using sass::Class;
using sass::Mix;

double classCount(const Mix &m, Class c) {
  return static_cast<double>(m.of(c));
}

} // namespace

Bounds launchBounds(const GpuModel &g, const sass::KernelFacts *f, const LaunchShape &s) {
  Bounds b;
  double achievable = g.dramBytesPerSecond * g.dramAchievable;
  double bytes = s.bytesRead + s.bytesWritten;
  if (!f) {
    double peak = s.tf32                  ? g.tf32Flops * g.mmaSyncFraction
                  : s.tensor && s.integer ? 2 * g.tensorFlops * g.mmaSyncFraction
                  : s.tensor              ? g.tensorFlops * g.mmaSyncFraction
                                          : g.fp32Flops;
    b.issue = 1e6 * s.flops / (peak * std::max(s.fill, 1e-6));
    b.memory = 1e6 * bytes / achievable;
    b.limit = b.issue >= b.memory ? "peak" : "memory";
    return b;
  }
  const Mix *main = f->main();
  const Mix &straight = f->straight;
  int threads = std::clamp(s.threads, 1, 1 << 20);
  double lanes = std::min(threads, 32);
  double warps = static_cast<double>(s.blocks) * ((threads + 31) / 32);
  // Warp-iterations of the main loop: as many as the launch's FLOPs need, or its bytes
  // when the loop reads more than its arithmetic accounts for.
  double iterations = 0;
  if (main) {
    // (An integer kernel on CUDA cores multiplies and adds with IMAD; its count also
    // holds address arithmetic, so this errs towards more work per iteration, fewer
    // iterations.)
    double fmaFlops = (2.0 * main->ffma + 4.0 * main->hfma2 +
                       (s.integer && !s.tensor ? 2.0 * classCount(*main, Class::IntMad) : 0.0)) *
                      lanes;
    double perIterFlops = main->mmaFlops > 0 ? main->mmaFlops : fmaFlops;
    double perIterBytes = (main->globalLoadBytes + main->cpAsyncBytes) * lanes;
    if (perIterFlops > 0)
      iterations = s.flops / perIterFlops;
    if (perIterBytes > 0)
      iterations = std::max(iterations, s.bytesRead / perIterBytes);
  }
  auto total = [&](Class c) {
    return iterations * (main ? classCount(*main, c) : 0.0) + warps * classCount(straight, c);
  };
  double instructions =
      iterations * (main ? main->instructions : 0) + warps * straight.instructions;
  double tensor = iterations * (main ? main->tensorEquiv : 0) + warps * straight.tensorEquiv;
  double lsu = iterations * (main ? main->lsuCycles : 0) + warps * straight.lsuCycles;
  // Cycles summed over all SMs, by pipe; the busiest pipe (or issue itself) limits.
  double cycles =
      std::max({instructions / 4.0, tensor / std::max(g.hmmaPerClock(), 1e-9),
                total(Class::Fp32) / g.fp32PerClock, total(Class::Fp16x2) / g.fp16x2PerClock,
                total(Class::Fp64) / g.fp64PerClock,
                (total(Class::IntMad) + total(Class::Alu)) / g.intPerClock,
                (total(Class::Mufu) + total(Class::Convert)) / g.mufuPerClock,
                lsu * 128.0 / g.lsuBytesPerClock});
  // A tensor-core main loop: its warps' own chains (ldmatrix, cp.async waits, barriers)
  // leave the schedulers idle unless many warps are resident. Fitted to conv_fprop_mma
  // on an H100 (2026-11-26, Nsight Compute kernel times of ResNet-50's 3x3 convolutions
  // at batch 32 (64 channels at 56x56, 128 at 28x28, 256 at 14x14) on the tiles
  // 128x64/64x64 (since dropped), 128x64/32x32 and 128x128/64x64: seven launches of 39-72 us,
  // issuing 0.16-0.37 instructions per scheduler and clock at 1-4 warps per scheduler; this bound
  // is within 25% of each).
  if (main && main->tensorEquiv > 0 && warps > 0) {
    double warpsPerBlock = (threads + 31) / 32;
    double resident = std::min<double>(std::max(s.blocksPerSm, 1),
                                       std::ceil(static_cast<double>(s.blocks) / g.sms));
    double perScheduler = resident * warpsPerBlock / 4.0;
    double ipc = g.mmaIssuePeak *
                 std::pow(std::min(1.0, perScheduler / g.mmaWarpsToHide), g.mmaIssueExponent);
    cycles = std::max(cycles, instructions / (4.0 * std::max(ipc, 1e-3)));
  }
  double busySms = g.sms * std::max(s.fill, 1e-6);
  b.issue = 1e6 * cycles / busySms / g.clockHz;
  // Passes over the data: a kernel without tensor-core work and with little arithmetic
  // per byte reads its input once per loop that loads it (softmax: max, sum, write).
  int passes = 1;
  if (f->whole.mmaFlops == 0 && s.flops <= 8 * s.bytesRead)
    passes = std::max(1, f->loadLoops);
  double reread = (passes - 1) * s.bytesRead;
  double rereadRate = s.bytesRead * passes <= g.l2Bytes / 2 ? g.l2BytesPerSecond : achievable;
  b.memory = 1e6 * (bytes / achievable + reread / rereadRate);
  // Each warp's own chain, wave after wave: a loop that waits for its own loads (no
  // cp.async pipeline) pays at least an L2 hit per iteration.
  double waves = std::ceil(static_cast<double>(s.blocks) /
                           (static_cast<double>(g.sms) * std::max(s.blocksPerSm, 1)));
  double perIteration = 0;
  if (main) {
    bool waitsOnLoads =
        main->of(Class::GlobalLoad) + main->of(Class::Atomic) + main->of(Class::LocalMemory) > 0;
    bool pipelined = main->of(Class::CpAsync) > 0;
    perIteration = main->instructions + (waitsOnLoads && !pipelined ? g.l2LatencyCycles : 0);
  }
  double chain = (warps > 0 ? iterations / warps : 0) * perIteration + straight.instructions +
                 (straight.of(Class::GlobalLoad) ? g.dramLatencyCycles : 0);
  b.latency = 1e6 * waves * chain / g.clockHz;
  for (double *x : {&b.issue, &b.memory, &b.latency})
    if (!std::isfinite(*x) || *x < 0)
      *x = 0; // damaged inputs: no bound rather than NaN in the report
  double worst = b.worst();
  b.limit = worst == b.issue ? "issue" : worst == b.memory ? "memory" : "latency";
  return b;
}

Bounds libraryGemmBounds(const GpuModel &g, const LibraryGemm &gm, double *fillOut) {
  // cuBLASLt splits K when the output tiles leave SMs idle.
  uint64_t blocks = ((gm.m + 127) / 128) * ((gm.n + 127) / 128) * gm.batch;
  if (blocks && blocks < static_cast<uint64_t>(g.sms))
    blocks *= std::min<uint64_t>((g.sms + blocks - 1) / blocks, std::max<uint64_t>(1, gm.k / 256));
  const double fill = smFill(g, blocks, 1);
  if (fillOut)
    *fillOut = fill;
  const double peak = gm.tf32 ? g.tf32Flops : gm.tensor ? g.tensorFlops : g.fp32Flops;
  const double k = static_cast<double>(gm.k), flops = 2.0 * static_cast<double>(gm.batch) *
                                                      static_cast<double>(gm.m) *
                                                      static_cast<double>(gm.n) * k;
  Bounds b;
  b.issue = 1e6 * flops / (peak * g.libraryEfficiency * k / (k + 128.0) * std::max(fill, 1e-6));
  b.memory = 1e6 * gm.bytes / (g.dramBytesPerSecond * g.dramAchievable);
  b.limit = "library";
  return b;
}

} // namespace dlc::codegen
