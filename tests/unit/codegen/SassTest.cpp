// The SASS decoder (codegen/Sass.h) and the bounds built on it (driver/CostModel.h),
// checked against kernels compiled here by NVRTC and ptxas whose instructions are
// known from their source: inline PTX that ptxas must keep (volatile asm in loops that
// are not unrolled), loads of known widths, loops of known nesting. Expected counts
// come from the source, not from the decoder.
#include "dlc/codegen/Sass.h"

#include "Toolchain.h"
#include "dlc/codegen/Bounds.h"
#include "dlc/runtime/Calibrate.h"
#include "emitters/ConvTiles.h"

#include <cstring>
#include <gtest/gtest.h>
#include <random>

using namespace dlc;
using codegen::sass::Class;
using codegen::sass::KernelFacts;

namespace {

const char *kArchs[] = {"sm_80", "sm_86", "sm_89", "sm_90"};

std::map<std::string, KernelFacts> compile(const std::string &source, const std::string &arch,
                                           std::vector<uint8_t> *image = nullptr) {
  codegen::ToolchainOptions opts;
  opts.useCache = false;
  llvm::Expected<codegen::CompiledModule> m = codegen::compileWithNvrtc(source, arch, opts);
  EXPECT_TRUE(static_cast<bool>(m)) << (m ? "" : llvm::toString(m.takeError()));
  if (!m)
    return {};
  if (image)
    *image = m->image;
  llvm::Expected<std::map<std::string, KernelFacts>> f = codegen::sass::decodeCubin(m->image);
  EXPECT_TRUE(static_cast<bool>(f)) << (f ? "" : llvm::toString(f.takeError()));
  return f ? *f : std::map<std::string, KernelFacts>{};
}

// One iteration: a 128-bit load, a 16-byte cp.async with its commit and wait, a
// barrier, an ldmatrix.x4, two m16n8k16 FP16 MMAs and one m16n8k8 TF32 MMA.
const char *kProbe = R"(
extern "C" __global__ void probe(const uint4 *g, float *out, int n) {
  __shared__ __align__(16) unsigned short sm[4096];
  float a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(sm + threadIdx.x * 8));
#pragma unroll 1
  for (int i = 0; i < n; ++i) {
    uint4 v = g[i * blockDim.x + threadIdx.x];
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(g + i));
    asm volatile("cp.async.commit_group;");
    asm volatile("cp.async.wait_group 0;");
    __syncthreads();
    unsigned r0, r1, r2, r3;
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(s));
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(a0), "+f"(a1), "+f"(a2), "+f"(a3)
                 : "r"(r0 ^ v.x), "r"(r1 ^ v.y), "r"(r2), "r"(r3), "r"(v.z), "r"(v.w));
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(a0), "+f"(a1), "+f"(a2), "+f"(a3)
                 : "r"(r3), "r"(r2), "r"(r1), "r"(r0), "r"(v.w), "r"(v.z));
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(a0), "+f"(a1), "+f"(a2), "+f"(a3)
                 : "r"(r0), "r"(r1), "r"(r2), "r"(r3), "r"(v.x), "r"(v.y));
    __syncthreads();
  }
  out[threadIdx.x] = a0 + a1 + a2 + a3;
}
)";

} // namespace

TEST(Sass, ProbeInstructionsDecodeOnEveryArchitecture) {
  for (const char *arch : kArchs) {
    SCOPED_TRACE(arch);
    auto facts = compile(kProbe, arch);
    ASSERT_EQ(facts.count("probe"), 1u);
    const KernelFacts &f = facts.at("probe");
    ASSERT_EQ(f.loops.size(), 1u);
    ASSERT_NE(f.main(), nullptr);
    const codegen::sass::Mix &m = *f.main();
    EXPECT_EQ(m.of(Class::Tensor), 3);
    EXPECT_EQ(m.mmaFlops, 2 * 4096 + 2048);
    EXPECT_DOUBLE_EQ(m.tensorEquiv, 2 + 1.0); // TF32 m16n8k8 costs as much as FP16 m16n8k16
    EXPECT_EQ(m.globalLoadWidths, (std::map<int, int>{{16, 1}}));
    EXPECT_EQ(m.cpAsyncWidths, (std::map<int, int>{{16, 1}}));
    EXPECT_EQ(m.of(Class::Ldsm), 1);
    EXPECT_EQ(m.ldsmBytes, 16);
    // Two bar.sync, cp.async.commit_group (LDGDEPBAR) and wait_group (DEPBAR).
    EXPECT_EQ(m.of(Class::Barrier), 4);
    EXPECT_EQ(m.of(Class::Other), 0);
    EXPECT_NEAR(f.instructionsPerMma(), double(m.instructions) / 3, 1e-12);
    // Outside the loop: the store of the sum (32 bits), no tensor-core work.
    EXPECT_EQ(f.straight.globalStoreWidths, (std::map<int, int>{{4, 1}}));
    EXPECT_EQ(f.straight.of(Class::Tensor), 0);
  }
}

namespace {
// One iteration: two m16n8k32 float8 MMAs (e4m3, e5m2).
const char *kFloat8Probe = R"(
extern "C" __global__ void f8(const uint4 *g, float *out, int n) {
  float a0 = 0, a1 = 0, a2 = 0, a3 = 0;
#pragma unroll 1
  for (int i = 0; i < n; ++i) {
    uint4 v = g[i * blockDim.x + threadIdx.x];
    asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(a0), "+f"(a1), "+f"(a2), "+f"(a3)
                 : "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "r"(v.x), "r"(v.y));
    asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e5m2.e5m2.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(a0), "+f"(a1), "+f"(a2), "+f"(a3)
                 : "r"(v.w), "r"(v.z), "r"(v.y), "r"(v.x), "r"(v.z), "r"(v.w));
  }
  out[threadIdx.x] = a0 + a1 + a2 + a3;
}
)";
} // namespace

// Float8 MMAs: sm_89 issues each as one QMMA (decoded as a tensor instruction of 8192
// FLOPs at twice FP16's rate, one HMMA.16816's issue); sm_90 has no float8 mma.sync:
// ptxas converts the operands to FP16 (F2FP) and issues two HMMA.16816 for each.
TEST(Sass, Float8MmaIsQmmaOnAdaAndTwoHmmaOnHopper) {
  auto ada = compile(kFloat8Probe, "sm_89");
  ASSERT_EQ(ada.count("f8"), 1u);
  const codegen::sass::Mix &m89 = *ada.at("f8").main();
  EXPECT_EQ(m89.of(Class::Tensor), 2);
  EXPECT_EQ(m89.mmaFlops, 2 * 8192);
  EXPECT_DOUBLE_EQ(m89.tensorEquiv, 2.0);
  auto hopper = compile(kFloat8Probe, "sm_90");
  ASSERT_EQ(hopper.count("f8"), 1u);
  const codegen::sass::Mix &m90 = *hopper.at("f8").main();
  EXPECT_EQ(m90.of(Class::Tensor), 4);
  EXPECT_EQ(m90.mmaFlops, 4 * 4096);
  EXPECT_GT(m90.instructions, m89.instructions + 8); // (the conversions)
}

TEST(Sass, LoadAndStoreWidths) {
  const char *src = R"(
extern "C" __global__ void widths(const unsigned char *b, const unsigned short *h,
                                  const unsigned *w, const uint2 *d, const uint4 *q,
                                  unsigned short *oh, uint4 *oq, int n) {
  unsigned acc = 0;
  uint4 sum = {0, 0, 0, 0};
#pragma unroll 1
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    acc += b[i] + h[i] + w[i] + d[i].x + d[i].y;
    uint4 v = q[i];
    sum.x += v.x, sum.y += v.y, sum.z += v.z, sum.w += v.w;
    oh[i] = static_cast<unsigned short>(acc);
  }
  oq[threadIdx.x] = sum;
}
)";
  for (const char *arch : kArchs) {
    SCOPED_TRACE(arch);
    auto facts = compile(src, arch);
    const KernelFacts &f = facts.at("widths");
    ASSERT_NE(f.main(), nullptr);
    EXPECT_EQ(f.main()->globalLoadWidths,
              (std::map<int, int>{{1, 1}, {2, 1}, {4, 1}, {8, 1}, {16, 1}}));
    EXPECT_EQ(f.main()->globalStoreWidths, (std::map<int, int>{{2, 1}}));
    EXPECT_EQ(f.main()->globalLoadBytes, 1 + 2 + 4 + 8 + 16);
    EXPECT_EQ(f.straight.globalStoreWidths, (std::map<int, int>{{16, 1}}));
  }
}

TEST(Sass, BackwardBranchesAreLoops) {
  // Two loops one after the other, each reading global memory, and a nest: the inner
  // loop of the nest is its main loop (the most FFMAs). The two top-level loops are two
  // passes over x; the nest's inner loop is a group of its own, and groups count as
  // alternatives (ptxas's loop versions), so the kernel makes two passes.
  const char *src = R"(
extern "C" __global__ void loops(const float *x, float *y, int n, int m) {
  float s = 0, t = 1;
#pragma unroll 1
  for (int i = threadIdx.x; i < n; i += blockDim.x) s += x[i];
#pragma unroll 1
  for (int i = threadIdx.x; i < n; i += blockDim.x) t *= x[i] + s;
#pragma unroll 1
  for (int j = 0; j < m; ++j) {
    float a = x[j];
#pragma unroll 1
    for (int k = 0; k < m; ++k) a = fmaf(a, x[k], t), a = fmaf(a, s, t);
    y[j] = a;
  }
}
)";
  for (const char *arch : kArchs) {
    SCOPED_TRACE(arch);
    auto facts = compile(src, arch);
    const KernelFacts &f = facts.at("loops");
    ASSERT_EQ(f.loops.size(), 4u);
    int innermost = 0;
    for (const codegen::sass::Loop &l : f.loops)
      innermost += l.innermost;
    EXPECT_EQ(innermost, 3);
    ASSERT_NE(f.main(), nullptr);
    EXPECT_TRUE(f.loops[static_cast<size_t>(f.mainLoop)].innermost);
    EXPECT_EQ(f.main()->ffma, 2);
    EXPECT_EQ(f.loadLoops, 2);
  }
}

// The issue's self-check: the same elementwise work written badly (16-bit loads, two
// integer divisions per element) and well (128-bit loads, no division). The facts
// must show the difference, and the model must rank them.
const char *kBadAndGood = R"(
#include <cuda_fp16.h>
extern "C" __global__ void bad(const __half *x, __half *y, int n, int c, int hw) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    int ch = (i / hw) % c;
    y[i] = __float2half(__half2float(x[i]) * (1.0f + ch));
  }
}
extern "C" __global__ void good(const uint4 *x, uint4 *y, int n8, __half2 scale) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n8; i += gridDim.x * blockDim.x) {
    uint4 v = x[i];
    __half2 *h = reinterpret_cast<__half2 *>(&v);
    for (int k = 0; k < 4; ++k)
      h[k] = __hmul2(h[k], scale);
    y[i] = v;
  }
}
)";

TEST(Sass, TheModelRanksAGoodKernelAboveABadOne) {
  auto facts = compile(kBadAndGood, "sm_90");
  ASSERT_TRUE(facts.count("bad") && facts.count("good"));
  const KernelFacts &bad = facts.at("bad"), &good = facts.at("good");
  ASSERT_NE(bad.main(), nullptr);
  ASSERT_NE(good.main(), nullptr);
  for (const auto &[bytes, count] : bad.main()->globalLoadWidths)
    EXPECT_EQ(bytes, 2) << count;
  for (const auto &[bytes, count] : good.main()->globalLoadWidths)
    EXPECT_EQ(bytes, 16) << count;
  // Integer division is a reciprocal on the MUFU pipe with conversions around it (ptxas
  // hoists what it can of a loop-invariant divisor), then IMAD.HI and fix-ups.
  EXPECT_GE(bad.main()->of(Class::Mufu), 1);
  EXPECT_GE(bad.main()->of(Class::Convert), 1);
  EXPECT_EQ(good.main()->of(Class::Mufu), 0);
  // Integer work per byte loaded: the divisions cost tens of instructions per element.
  double badPerByte = double(bad.main()->integerOps()) / bad.main()->globalLoadBytes;
  double goodPerByte = double(good.main()->integerOps()) / good.main()->globalLoadBytes;
  EXPECT_GT(badPerByte, 10 * goodPerByte);

  // 16M halves in and out on H100, four blocks of 256 threads per SM.
  const codegen::GpuModel &h100 = *codegen::gpuModelNamed("H100");
  codegen::LaunchShape s;
  s.blocks = 4 * 132;
  s.threads = 256;
  s.blocksPerSm = 4;
  s.fill = 1;
  s.bytesRead = s.bytesWritten = 2.0 * (1 << 24);
  s.flops = 1 << 24;
  codegen::Bounds b = codegen::launchBounds(h100, &bad, s),
                  g = codegen::launchBounds(h100, &good, s);
  EXPECT_EQ(b.memory, g.memory); // the same bytes
  EXPECT_EQ(g.limit, "memory");
  EXPECT_EQ(b.limit, "issue");
  EXPECT_GT(b.worst(), 1.5 * g.worst());
  // The memory bound is the bytes at the profile's achievable bandwidth (2.80 TB/s measured).
  EXPECT_NEAR(g.memory, 1e6 * 4.0 * (1 << 24) / (3350e9 * 0.84), 1e-9);
}

// An integer product on CUDA cores (one thread per output, K multiply-adds in a loop
// whose trip count is a run-time argument): the model counts its main loop's IMADs as
// the multiply-adds, so the K loop is priced K times over, not once (the bytes it
// reads are few: its operands are reused from cache).
const char *kIntDot = R"(
extern "C" __global__ void dot(const signed char *a, const signed char *b, int *y, int m, int k,
                               int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= m * n)
    return;
  const int row = i / n, col = i % n;
  int acc = 0;
  for (int p = 0; p < k; ++p)
    acc += a[row * k + p] * b[p * n + col];
  y[i] = acc;
}
)";

TEST(Sass, IntegerMultiplyAddsSetTheLoopCount) {
  auto facts = compile(kIntDot, "sm_90");
  ASSERT_TRUE(facts.count("dot"));
  const KernelFacts &f = facts.at("dot");
  ASSERT_NE(f.main(), nullptr);
  ASSERT_GE(f.main()->of(Class::IntMad), 1);
  // 128 x 3072 outputs of K = 768 on H100: 0.6 G multiply-adds.
  const codegen::GpuModel &h100 = *codegen::gpuModelNamed("H100");
  codegen::LaunchShape s;
  s.blocks = 128 * 3072 / 256;
  s.threads = 256;
  s.fill = 1;
  s.bytesRead = 128.0 * 768 + 768.0 * 3072;
  s.bytesWritten = 4.0 * 128 * 3072;
  s.flops = 2.0 * 128 * 768 * 3072;
  s.integer = true;
  const codegen::Bounds b = codegen::launchBounds(h100, &f, s);
  // At most 2 * IMADs * 32 multiply-adds a warp-iteration: at least this many issue
  // cycles, at 4 instructions a cycle per SM.
  const double perIter = 2.0 * f.main()->of(Class::IntMad) * 32;
  const double floorUs =
      1e6 * (s.flops / perIter) * f.main()->instructions / (4.0 * h100.sms * h100.clockHz);
  EXPECT_GE(b.issue, 0.99 * floorUs);
  EXPECT_GT(b.issue, 10.0); // (priced as one loop iteration per thread: under 1 us)
}

TEST(Sass, DamagedCubinsAreErrorsNotCrashes) {
  std::vector<uint8_t> image;
  auto facts = compile(kBadAndGood, "sm_80", &image);
  ASSERT_FALSE(facts.empty());
  EXPECT_EQ(codegen::sass::cubinArch(image), 80);
  auto expectError = [](std::vector<uint8_t> b, const char *what) {
    llvm::Expected<std::map<std::string, KernelFacts>> f = codegen::sass::decodeCubin(b);
    ASSERT_FALSE(static_cast<bool>(f));
    EXPECT_NE(llvm::toString(f.takeError()).find(what), std::string::npos);
  };
  expectError({}, "not a CUDA cubin");
  expectError(std::vector<uint8_t>(image.begin(), image.begin() + 100), "damaged");
  std::vector<uint8_t> sm75 = image;
  sm75[49] = 75; // e_flags' SM field (ELF ABI 8)
  expectError(sm75, "sm_75");
  // A text section that overlaps another is refused (each would be analyzed again).
  {
    // Find the section header table and point the second .text section at the first's
    // offset.
    uint64_t shoff;
    uint16_t shentsize, shnum;
    std::memcpy(&shoff, image.data() + 0x28, 8);
    std::memcpy(&shentsize, image.data() + 0x3a, 2);
    std::memcpy(&shnum, image.data() + 0x3c, 2);
    std::vector<size_t> texts; // header offsets of sections with code (SHT_PROGBITS, size > 0,
                               // executable)
    for (uint16_t i = 0; i < shnum; ++i) {
      size_t h = shoff + size_t(i) * shentsize;
      uint64_t flags;
      std::memcpy(&flags, image.data() + h + 8, 8);
      if (flags & 4) // SHF_EXECINSTR
        texts.push_back(h);
    }
    ASSERT_GE(texts.size(), 2u); // bad and good
    std::vector<uint8_t> overlap = image;
    std::memcpy(overlap.data() + texts[1] + 0x18, image.data() + texts[0] + 0x18, 8);
    expectError(overlap, "overlapping text sections");
  }
  // Code made of backward branches: the loops stop at the budget, quickly.
  {
    std::vector<codegen::sass::Instr> code(1 << 16);
    for (size_t i = 0; i < code.size(); ++i) {
      code[i].opcode = 0x147;
      code[i].cls = Class::Branch;
      code[i].branchTarget = 0; // each branch closes a loop from the start
    }
    codegen::sass::Budget budget;
    KernelFacts f;
    codegen::sass::finishFacts(f, code, budget);
    EXPECT_LE(f.loops.size(), 4096u);
    EXPECT_TRUE(f.truncated); // the cost model will not price from these facts
    EXPECT_EQ(f.whole.of(Class::Branch), 1 << 16);
    size_t visited = 0;
    for (const codegen::sass::Loop &l : f.loops)
      visited += static_cast<size_t>((l.end - l.begin) / 16 + 1);
    EXPECT_LE(visited, size_t(1) << 27);
  }
  // Random damage decodes or fails; it never reads outside the image.
  std::mt19937 rng(7);
  for (int i = 0; i < 2000; ++i) {
    std::vector<uint8_t> b = image;
    for (int k = 0; k < 8; ++k)
      b[rng() % b.size()] = static_cast<uint8_t>(rng());
    llvm::Expected<std::map<std::string, KernelFacts>> f = codegen::sass::decodeCubin(b);
    if (!f)
      llvm::consumeError(f.takeError());
  }
}

TEST(GpuProfiles, EveryProfileIsConsistentWithItsDataSheetPeaks) {
  for (const codegen::GpuModel &g : codegen::gpuModels()) {
    SCOPED_TRACE(g.name);
    // FP32 peak = SMs x clock x FFMA per clock x 32 lanes x 2 FLOPs, within 1%.
    EXPECT_NEAR(g.sms * g.clockHz * g.fp32PerClock * 64 / g.fp32Flops, 1.0, 0.01);
    EXPECT_GT(g.hmmaPerClock(), 0);
    EXPECT_LE(g.dramAchievable, 1.0);
  }
  EXPECT_EQ(codegen::gpuModelFor("sm_90").name, "H100");
  EXPECT_NEAR(codegen::gpuModelNamed("H200")->dramBytesPerSecond, 4.8e12, 1);
}

TEST(Sass, CalibrationKernelsIssueWhatTheyMeasure) {
  // `dlc calibrate` divides work by time: the work must be what the code issues.
  for (const char *arch : {"sm_80", "sm_90"}) {
    SCOPED_TRACE(arch);
    auto facts = compile(rt::calibrationKernelSource(), arch);
    auto main = [&](const char *k) -> const codegen::sass::Mix & {
      static const codegen::sass::Mix none;
      auto f = facts.find(k);
      EXPECT_TRUE(f != facts.end() && f->second.main()) << k;
      return f != facts.end() && f->second.main() ? *f->second.main() : none;
    };
    // 64 FFMA per iteration and little else (the loop counter and branch).
    EXPECT_EQ(main("dlc_cal_ffma").ffma, 64);
    EXPECT_LE(main("dlc_cal_ffma").instructions, 64 + 4);
    EXPECT_EQ(main("dlc_cal_hfma2").hfma2, 64);
    EXPECT_LE(main("dlc_cal_hfma2").instructions, 64 + 4);
    EXPECT_EQ(main("dlc_cal_mma").of(Class::Tensor), 8);
    EXPECT_EQ(main("dlc_cal_mma").mmaFlops, 8 * 4096);
    EXPECT_EQ(main("dlc_cal_copy").globalLoadWidths, (std::map<int, int>{{16, 1}}));
    EXPECT_EQ(main("dlc_cal_copy").globalStoreWidths, (std::map<int, int>{{16, 1}}));
    EXPECT_EQ(main("dlc_cal_l2").globalLoadWidths.count(16), 1u);
    EXPECT_EQ(main("dlc_cal_chase").globalLoadWidths, (std::map<int, int>{{4, 1}}));
  }
}

/// A loop's instructions by class, for failure messages.
std::string mixText(const codegen::sass::Mix &m) {
  std::string out;
  for (int k = 0; k < static_cast<int>(Class::Count); ++k)
    if (m.count[k])
      out += std::string(out.empty() ? "" : " ") + codegen::sass::className(static_cast<Class>(k)) +
             "=" + std::to_string(m.count[k]);
  return out;
}

// Tile choice prices conv tiles from the facts in ConvTiles.h: they must be what the
// tiles' code issues. Each tile is instantiated here with plain load/store functors
// (a convolution without fused work), compiled for sm_90 and decoded.
TEST(Sass, ConvTileTableHoldsWhatTheCodeIssues) {
  std::string src = R"(#include "dlc_kernels.cuh"
struct XH { typedef float Value; struct Params { const __half *__restrict__ a0; };
  template <class I> static __device__ __forceinline__ Value load(const Params &P, I i) {
    return dlc::ld<float>(P.a0, i); } };
struct YH { typedef float Value; struct Params { __half *__restrict__ a0; };
  template <class I> static __device__ __forceinline__ void store(const Params &P, I i, Value v) {
    dlc::st(P.a0, i, v); }
  template <class I> static __device__ __forceinline__ void store2(const Params &P, I i, Value v0,
    Value v1) { dlc::st2(P.a0, i, v0, v1); } };
struct XF { typedef float Value; struct Params { const float *__restrict__ a0; };
  template <class I> static __device__ __forceinline__ Value load(const Params &P, I i) {
    return dlc::ld<float>(P.a0, i); } };
struct YF { typedef float Value; struct Params { float *__restrict__ a0; };
  template <class I> static __device__ __forceinline__ void store(const Params &P, I i, Value v) {
    dlc::st(P.a0, i, v); }
  template <class I> static __device__ __forceinline__ void store2(const Params &P, I i, Value v0,
    Value v1) { dlc::st2(P.a0, i, v0, v1); } };
)";
  auto tile = [](const codegen::ConvTileConfig &c) {
    return std::to_string(c.bm) + ", " + std::to_string(c.bn) + ", " + std::to_string(c.tm) + ", " +
           std::to_string(c.tn);
  };
  std::vector<std::pair<std::string, const codegen::ConvTileConfig *>> kernels;
  // Each instantiation is found by its tile in the mangled name.
  auto mangled = [](const char *kind, const codegen::ConvTileConfig &c) {
    return std::string(kind) + "ILi" + std::to_string(c.bm) + "ELi" + std::to_string(c.bn) + "ELi" +
           std::to_string(c.tm) + "ELi" + std::to_string(c.tn) + "EE";
  };
  for (const codegen::ConvTileConfig &c : codegen::kConvTcTiles) {
    src += "template __global__ void dlc::conv_igemm_tc<dlc::ConvTcTile<" + tile(c) +
           ">, false, true, dlc::idx32, __half, __half, XH, YH>(dlc::ConvArgs<XH, YH>);\n";
    kernels.emplace_back(mangled("10ConvTcTile", c), &c);
  }
  // conv_fprop_mma in FP16 and TF32, storing channel pairs (the mangled name's
  // "i6__halfj" / "ifj": the index, operand and mask types).
  for (bool tf32 : {false, true})
    for (const codegen::ConvTileConfig &c :
         tf32 ? codegen::kConvMmaTf32Tiles : codegen::kConvMmaTiles) {
      const std::string stages = std::to_string(c.stages), rows = std::to_string(c.rowBytes);
      src += "template __global__ void dlc::conv_fprop_mma<dlc::ConvMmaTile<" + tile(c) + ", " +
             stages + ", " + rows + ">, dlc::idx32, " +
             (tf32 ? "float, unsigned, true, XF, YF>(dlc::ConvArgs<XF, YF>"
                   : "__half, unsigned, true, XH, YH>(dlc::ConvArgs<XH, YH>") +
             ");\n";
      std::string name = mangled("11ConvMmaTile", c);
      kernels.emplace_back(name.substr(0, name.size() - 2) + "ELi" + stages + "ELi" + rows +
                               "EEEi" + (tf32 ? "fj" : "6__halfj"),
                           &c);
    }
  for (const codegen::ConvTileConfig &c : codegen::kConvTiles) {
    src += "template __global__ void dlc::conv_igemm<dlc::ConvTile<" + tile(c) +
           ">, false, false, dlc::idx32, float, XF, YF>(dlc::ConvArgs<XF, YF>);\n";
    kernels.emplace_back(mangled("8ConvTile", c), &c);
  }
  auto decoded = compile(src, "sm_90");
  ASSERT_GE(decoded.size(), kernels.size()); // (and the device functions they call)
  std::map<std::string, KernelFacts> facts;
  for (const auto &[name, c] : kernels)
    for (const auto &[symbol, f] : decoded)
      if (symbol.find(name) != std::string::npos)
        facts[name] = f;
  auto near = [](double table, double code) {
    return std::abs(table - code) <= 0.05 * std::max(std::abs(code), 1.0);
  };
  for (const auto &[name, c] : kernels) {
    ASSERT_EQ(facts.count(name), 1u) << name;
    const KernelFacts &f = facts.at(name);
    ASSERT_NE(f.main(), nullptr) << name;
    const codegen::sass::Mix &m = *f.main();
    int integer = m.of(Class::IntMad) + m.of(Class::Alu);
    bool ok = near(c->instructions, m.instructions) && c->mma == m.of(Class::Tensor) &&
              c->ffma == m.ffma && near(c->integer, integer) &&
              near(c->loads, m.of(Class::GlobalLoad)) && near(c->loadBytes, m.globalLoadBytes) &&
              near(c->lsuCycles, m.lsuCycles) && near(c->straight, f.straight.instructions) &&
              near(c->cpAsyncBytes, m.cpAsyncBytes);
    EXPECT_TRUE(ok) << name << ": codegen/emitters/ConvTiles.h should read\n    {" << c->bm << ", "
                    << c->bn << ", " << c->tm << ", " << c->tn << ", " << c->registers << ", "
                    << m.instructions << ", " << m.of(Class::Tensor) << ", " << m.ffma << ", "
                    << integer << ", " << m.of(Class::GlobalLoad) << ", " << m.globalLoadBytes
                    << ", " << m.lsuCycles << ", " << f.straight.instructions
                    << (c->stages ? ", " + std::to_string(c->stages) + ", " +
                                        std::to_string(m.cpAsyncBytes) +
                                        (c->rowBytes != 64 ? ", " + std::to_string(c->rowBytes)
                                                           : std::string())
                                  : std::string())
                    << "},"
                    << "\n  (main loop: " << mixText(m) << ")";
  }
}

// Where a package has no cubin for a GPU, the model reads its PTX: the probe's PTX
// statements classify as the SASS they become.
TEST(Sass, PtxStatementsClassifyAsTheirSass) {
  codegen::ToolchainOptions opts;
  opts.useCache = false;
  llvm::Expected<codegen::CompiledModule> m = codegen::compileWithNvrtc(kProbe, "compute_80", opts);
  ASSERT_TRUE(static_cast<bool>(m)) << llvm::toString(m.takeError());
  std::string ptx(m->image.begin(), m->image.end());
  codegen::sass::Budget budget;
  auto facts = codegen::sass::analyzePtx(ptx.c_str(), budget);
  ASSERT_EQ(facts.count("probe"), 1u);
  const KernelFacts &f = facts.at("probe");
  ASSERT_EQ(f.loops.size(), 1u);
  ASSERT_NE(f.main(), nullptr);
  const codegen::sass::Mix &mix = *f.main();
  EXPECT_EQ(mix.of(Class::Tensor), 3);
  EXPECT_EQ(mix.mmaFlops, 2 * 4096 + 2048);
  EXPECT_EQ(mix.globalLoadWidths, (std::map<int, int>{{16, 1}}));
  EXPECT_EQ(mix.cpAsyncWidths, (std::map<int, int>{{16, 1}}));
  EXPECT_EQ(mix.of(Class::Ldsm), 1);
  EXPECT_EQ(mix.of(Class::Barrier), 4);
  EXPECT_EQ(f.straight.globalStoreWidths, (std::map<int, int>{{4, 1}}));
  // Damaged text: whatever is found, nothing is read outside it.
  for (llvm::StringRef bad : {".entry", ".entry x(", ".entry x() {",
                              ".entry x() { bra L; L: ", ".entry y() { L: L: bra L; }"})
    codegen::sass::analyzePtx(bad, budget);
}
