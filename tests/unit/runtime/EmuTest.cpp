// The emu backend runs real CUDA source: barriers, warp collectives, traps, and the
// launch limits a GPU would enforce.
#include "RuntimeTestUtil.h"

#include <numeric>

using namespace dlc;
using dlc::test::buildTestPackage;
using dlc::test::runOnEmu;
using dlc::test::TestLaunch;

namespace {
const char *kCollectives = R"(
extern "C" __global__ void collectives(float *in, float *sum, float *shfl, float *ballot) {
  DLC_SHARED(float, smem, [32]);
  float v = in[threadIdx.x];
  float s = dlc::blockReduce(v, dlc::SumOp(), 0.0f, smem);
  if (threadIdx.x == 0) sum[blockIdx.x] = s;
  float down = __shfl_down_sync(0xffffffffu, v, 1);
  float up = __shfl_up_sync(0xffffffffu, v, 2);
  float x = __shfl_xor_sync(0xffffffffu, v, 5);
  shfl[threadIdx.x * 3 + 0] = down;
  shfl[threadIdx.x * 3 + 1] = up;
  shfl[threadIdx.x * 3 + 2] = x;
  unsigned b = __ballot_sync(0xffffffffu, ((int)v) % 3 == 0);
  if ((threadIdx.x & 31) == 0) ballot[threadIdx.x >> 5] = (float)(b & 0xffffu);
}
)";
} // namespace

TEST(Emu, BlockReductionShufflesAndBallot) {
  auto pkg = buildTestPackage(kCollectives, {{"in", 64}, {"sum", 1}, {"shfl", 192}, {"ballot", 2}},
                              {TestLaunch{"collectives", {1, 1, 1}, {64, 1, 1}, 0, {0, 1, 2, 3}}});
  std::vector<float> in(64);
  std::iota(in.begin(), in.end(), 0.0f);
  auto r = runOnEmu(pkg, {in}, {"sum", "shfl", "ballot"});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ((*r)[0][0], 64.0f * 63.0f / 2.0f);
  for (int t = 0; t < 64; ++t) {
    int lane = t & 31, base = t - lane;
    float down = lane + 1 < 32 ? in[t + 1] : in[t];
    float up = lane >= 2 ? in[t - 2] : in[t];
    float x = in[base + (lane ^ 5)];
    EXPECT_EQ((*r)[1][t * 3 + 0], down) << t;
    EXPECT_EQ((*r)[1][t * 3 + 1], up) << t;
    EXPECT_EQ((*r)[1][t * 3 + 2], x) << t;
  }
  for (int w = 0; w < 2; ++w) {
    unsigned expect = 0;
    for (int l = 0; l < 16; ++l)
      if (static_cast<int>(in[w * 32 + l]) % 3 == 0)
        expect |= 1u << l;
    EXPECT_EQ((*r)[2][w], static_cast<float>(expect)) << w;
  }
}

TEST(Emu, OversizedBlockFailsLikeOnAGpu) {
  auto pkg =
      buildTestPackage(kCollectives, {{"in", 2048}, {"sum", 1}, {"shfl", 6144}, {"ballot", 64}},
                       {TestLaunch{"collectives", {1, 1, 1}, {2048, 1, 1}, 0, {0, 1, 2, 3}}});
  auto r = runOnEmu(pkg, {}, {"sum"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::LaunchFailure);
  EXPECT_NE(r.status().message().find(
                "launch of kernel 'collectives' would fail on a GPU: a block of 2048 "
                "threads exceeds the limit of 1024"),
            std::string::npos)
      << r.status().message();
}

TEST(Emu, GridYLimitIsEnforced) {
  auto pkg =
      buildTestPackage(kCollectives, {{"in", 64}, {"sum", 1}, {"shfl", 192}, {"ballot", 2}},
                       {TestLaunch{"collectives", {1, 70000, 1}, {32, 1, 1}, 0, {0, 1, 2, 3}}});
  auto r = runOnEmu(pkg, {}, {"sum"});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(
      r.status().message().find("grid dimensions (1, 70000, 1) exceed (2^31-1, 65535, 65535)"),
      std::string::npos)
      << r.status().message();
}

TEST(Emu, SharedMemoryOverTheArchitectureLimitFails) {
  const char *src = R"(
extern "C" __global__ void dyn(float *out) {
  DLC_DYNAMIC_SMEM(float, s);
  s[threadIdx.x] = threadIdx.x;
  __syncthreads();
  out[threadIdx.x] = s[31 - threadIdx.x];
}
)";
  // sm_86 allows 99 KB per block with the opt-in; ask for 120 KB.
  auto pkg = buildTestPackage(
      src, {{"out", 32}}, {TestLaunch{"dyn", {1, 1, 1}, {32, 1, 1}, 120 * 1024, {0}}}, {"sm_86"});
  auto r = runOnEmu(pkg, {}, {"out"});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(
      r.status().message().find("sm_86: 122880 bytes of shared memory per block exceed 101376"),
      std::string::npos)
      << r.status().message();
  // Within the limit it runs, and dynamic shared memory is shared by the block.
  auto ok = buildTestPackage(src, {{"out", 32}},
                             {TestLaunch{"dyn", {1, 1, 1}, {32, 1, 1}, 128, {0}}}, {"sm_86"});
  auto r2 = runOnEmu(ok, {}, {"out"});
  ASSERT_TRUE(r2.ok()) << r2.status().message();
  for (int i = 0; i < 32; ++i)
    EXPECT_EQ((*r2)[0][i], 31 - i);
}

TEST(Emu, MismatchedCollectivesAreADeadlockError) {
  const char *src = R"(
extern "C" __global__ void diverge(float *out) {
  if (threadIdx.x < 16) out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
  else __syncthreads();
}
)";
  auto pkg =
      buildTestPackage(src, {{"out", 32}}, {TestLaunch{"diverge", {1, 1, 1}, {32, 1, 1}, 0, {0}}});
  auto r = runOnEmu(pkg, {}, {"out"});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("deadlock"), std::string::npos) << r.status().message();
}

TEST(Emu, TrapFailsTheLaunch) {
  const char *src = R"(
extern "C" __global__ void trapper(float *out) {
  if (threadIdx.x == 5) __trap();
  out[threadIdx.x] = 1.0f;
}
)";
  for (bool sync : {true, false}) {
    TestLaunch l{"trapper", {2, 1, 1}, {32, 1, 1}, 0, {0}, sync};
    auto pkg = buildTestPackage(src, {{"out", 32}}, {l});
    auto r = runOnEmu(pkg, {}, {"out"});
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("kernel trap"), std::string::npos) << r.status().message();
  }
}

TEST(Emu, BarrierInAKernelDeclaredBarrierFreeIsCaught) {
  const char *src = R"(
extern "C" __global__ void sneaky(float *out) {
  __syncthreads();
  out[threadIdx.x] = 2.0f;
}
)";
  TestLaunch l{"sneaky", {1, 1, 1}, {32, 1, 1}, 0, {0}, /*needsSync=*/false};
  auto r = runOnEmu(buildTestPackage(src, {{"out", 32}}, {l}), {}, {"out"});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("compiled as barrier-free"), std::string::npos)
      << r.status().message();
}

//===----------------------------------------------------------------------===//
// Emu as a sanitizer: what a GPU (or compute-sanitizer) would catch, emu catches,
// naming the kernel.
//===----------------------------------------------------------------------===//

TEST(EmuCheck, MisalignedFloat4LoadFaults) {
  const char *src = R"(
extern "C" __global__ void misaligned_load(float *x, float *out) {
  // x + 1 is 4-byte aligned only: a float4 load from it faults on a GPU.
  const float4 v = reinterpret_cast<const float4 *>(x + 1)[threadIdx.x];
  out[threadIdx.x] = v.x + v.y + v.z + v.w;
}
extern "C" __global__ void aligned_load(float *x, float *out) {
  const float4 v = reinterpret_cast<const float4 *>(x)[threadIdx.x];
  out[threadIdx.x] = v.x + v.y + v.z + v.w;
}
)";
  for (bool sync : {true, false}) {
    auto bad =
        buildTestPackage(src, {{"x", 64}, {"out", 8}},
                         {TestLaunch{"misaligned_load", {1, 1, 1}, {8, 1, 1}, 0, {0, 1}, sync}});
    auto r = runOnEmu(bad, {std::vector<float>(64, 1.0f)}, {"out"});
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("kernel 'misaligned_load'"), std::string::npos)
        << r.status().message();
    EXPECT_NE(r.status().message().find("misaligned 16-byte-aligned access"), std::string::npos)
        << r.status().message();
  }
  auto good =
      buildTestPackage(src, {{"x", 64}, {"out", 8}},
                       {TestLaunch{"aligned_load", {1, 1, 1}, {8, 1, 1}, 0, {0, 1}, false}});
  auto r = runOnEmu(good, {std::vector<float>(64, 1.0f)}, {"out"});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ((*r)[0][7], 4.0f);
}

TEST(EmuCheck, ShuffleWithAnExitedPartnerIsCaught) {
  const char *src = R"(
extern "C" __global__ void exited_partner(float *out) {
  float v = threadIdx.x;
  if (threadIdx.x >= 16)
    return; // lanes 16..31 exit, but the mask below still names them
  v += __shfl_down_sync(0xffffffffu, v, 1);
  out[threadIdx.x] = v;
}
extern "C" __global__ void half_warp(float *out) {
  float v = threadIdx.x;
  if (threadIdx.x >= 16)
    return;
  v += __shfl_down_sync(0x0000ffffu, v, 1, 16); // the mask names exactly the live lanes
  out[threadIdx.x] = v;
}
)";
  auto bad = buildTestPackage(src, {{"out", 32}},
                              {TestLaunch{"exited_partner", {1, 1, 1}, {32, 1, 1}, 0, {0}}});
  auto r = runOnEmu(bad, {}, {"out"});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("kernel 'exited_partner'"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("which has exited"), std::string::npos)
      << r.status().message();
  auto good = buildTestPackage(src, {{"out", 32}},
                               {TestLaunch{"half_warp", {1, 1, 1}, {32, 1, 1}, 0, {0}}});
  auto g = runOnEmu(good, {}, {"out"});
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ((*g)[0][0], 1.0f);   // 0 + 1
  EXPECT_EQ((*g)[0][14], 29.0f); // 14 + 15
  EXPECT_EQ((*g)[0][15], 30.0f); // lane 15 has no lane 16 in a width-16 segment: its own value
}

TEST(EmuCheck, ThreadsAtDifferentBarriersAreCaught) {
  const char *src = R"(
extern "C" __global__ void split_barrier(float *out) {
  if (threadIdx.x < 16) {
    out[threadIdx.x] = 1.0f;
    __syncthreads();
  } else {
    __syncthreads();
    out[threadIdx.x] = 2.0f;
  }
}
)";
  auto pkg = buildTestPackage(src, {{"out", 32}},
                              {TestLaunch{"split_barrier", {1, 1, 1}, {32, 1, 1}, 0, {0}}});
  auto r = runOnEmu(pkg, {}, {"out"});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("kernel 'split_barrier'"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("different __syncthreads"), std::string::npos)
      << r.status().message();
}

TEST(EmuCheck, ThreadOrderExposesAMissingBarrier) {
  // Each thread writes its slot and reads its neighbour's without a barrier between:
  // the result depends on the order in which threads run, as on a GPU.
  const char *src = R"(
extern "C" __global__ void racy_neighbour(float *out) {
  DLC_SHARED(float, s, [32]);
  s[threadIdx.x] = threadIdx.x + 1.0f;
  out[threadIdx.x] = s[(threadIdx.x + 1) % 32];
  __syncthreads();
  s[threadIdx.x] = 0.0f; // the next block starts from zeros in either order
}
)";
  auto pkg = buildTestPackage(src, {{"out", 32}},
                              {TestLaunch{"racy_neighbour", {1, 1, 1}, {32, 1, 1}, 0, {0}}});
  // Without --check (which reports the race itself: MissingSyncthreadsIsARace).
  dlc::test::ScopedEnv noCheck("DLC_EMU_CHECK", "0");
  rt::SessionOptions forward, reverse;
  reverse.emuThreadOrder = rt::SessionOptions::ThreadOrder::Reverse;
  auto f = runOnEmu(pkg, {}, {"out"}, forward);
  auto r = runOnEmu(pkg, {}, {"out"}, reverse);
  ASSERT_TRUE(f.ok() && r.ok());
  EXPECT_EQ((*f)[0][0], 0.0f); // thread 0 ran first: thread 1 had not written yet
  EXPECT_EQ((*r)[0][0], 2.0f); // thread 1 ran before thread 0
  EXPECT_NE((*f)[0], (*r)[0]);
}

TEST(EmuCheck, ATrapIsStickyForTheSession) {
  const char *src = R"(
extern "C" __global__ void trap_once(float *out) {
  if (out[0] == 0.0f) __trap();
  out[threadIdx.x] = 1.0f;
}
)";
  auto bytes = buildTestPackage(src, {{"out", 32}},
                                {TestLaunch{"trap_once", {1, 1, 1}, {32, 1, 1}, 0, {0}, false}});
  auto pf = pkg::PackageFile::fromBytes(bytes.data(), bytes.size(), "sticky.dlc");
  ASSERT_TRUE(pf.ok());
  rt::SessionOptions so;
  so.device = rt::DeviceKind::Emu;
  so.allowHostCode = true; // the test's own kernel, in a package it built unsigned
  auto s = rt::Session::create(*pf, so);
  ASSERT_TRUE(s.ok());
  std::vector<float> zeros(32, 0.0f), ones(32, 1.0f);
  ASSERT_FALSE(bool((*s)->setInputBytes("out", zeros.data(), 128)));
  Status first = (*s)->run();
  ASSERT_TRUE(bool(first));
  EXPECT_NE(first.message().find("kernel 'trap_once'"), std::string::npos) << first.message();
  // Good data does not revive the context: every later call fails with the first error.
  Status again = (*s)->setInputBytes("out", ones.data(), 128);
  ASSERT_TRUE(bool(again));
  EXPECT_EQ(again.message(), first.message());
  EXPECT_TRUE(bool((*s)->run()));
  EXPECT_FALSE((*s)->getOutput("out").ok());
}

// Shared-memory initcheck and racecheck (--check): each access to the block's shared
// memory is tracked per byte, with the barrier epoch of its writer and readers.
namespace {
rt::SessionOptions checked() {
  rt::SessionOptions o;
  o.check = true;
  return o;
}
} // namespace

TEST(EmuCheck, MissingSyncthreadsIsARace) {
  const char *src = R"(
extern "C" __global__ void missing_barrier(float *out) {
  DLC_SHARED(float, s, [64]);
  s[threadIdx.x] = 0.0f;
  __syncthreads();
  s[threadIdx.x] = threadIdx.x + 1.0f;
  // a __syncthreads belongs here: thread t reads what thread t+1 wrote
  out[threadIdx.x] = s[(threadIdx.x + 1) % 64];
}
extern "C" __global__ void with_barrier(float *out) {
  DLC_SHARED(float, s, [64]);
  s[threadIdx.x] = threadIdx.x + 1.0f;
  __syncthreads();
  out[threadIdx.x] = s[(threadIdx.x + 1) % 64];
}
)";
  // The race shows in either thread order: forward, thread 0 reads before thread 1
  // writes (caught at the write); reverse, after it (caught at the read).
  for (auto order :
       {rt::SessionOptions::ThreadOrder::Forward, rt::SessionOptions::ThreadOrder::Reverse}) {
    rt::SessionOptions o = checked();
    o.emuThreadOrder = order;
    auto bad = buildTestPackage(src, {{"out", 64}},
                                {TestLaunch{"missing_barrier", {2, 1, 1}, {64, 1, 1}, 0, {0}}});
    auto r = runOnEmu(bad, {}, {"out"}, o);
    ASSERT_FALSE(r.ok());
    const std::string &m = r.status().message();
    EXPECT_NE(m.find("kernel 'missing_barrier'"), std::string::npos) << m;
    EXPECT_NE(m.find("shared memory race"), std::string::npos) << m;
    EXPECT_NE(m.find(order == rt::SessionOptions::ThreadOrder::Forward ? "write after read"
                                                                       : "read after write"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("no __syncthreads between"), std::string::npos) << m;
  }
  auto good = buildTestPackage(src, {{"out", 64}},
                               {TestLaunch{"with_barrier", {2, 1, 1}, {64, 1, 1}, 0, {0}}});
  auto g = runOnEmu(good, {}, {"out"}, checked());
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ((*g)[0][0], 2.0f);
  EXPECT_EQ((*g)[0][63], 1.0f);
}

TEST(EmuCheck, TwoWritersInOneEpochAreARace) {
  const char *src = R"(
extern "C" __global__ void two_writers(float *out) {
  DLC_SHARED(float, s, [1]);
  s[0] = threadIdx.x; // every thread writes the same word
  __syncthreads();
  out[threadIdx.x] = s[0];
}
)";
  auto pkg = buildTestPackage(src, {{"out", 32}},
                              {TestLaunch{"two_writers", {1, 1, 1}, {32, 1, 1}, 0, {0}}});
  auto r = runOnEmu(pkg, {}, {"out"}, checked());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("write after write"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("kernel 'two_writers'"), std::string::npos)
      << r.status().message();
}

TEST(EmuCheck, UninitialisedSharedReadIsCaught) {
  const char *src = R"(
extern "C" __global__ void uninit_shared(float *out) {
  DLC_SHARED(float, s, [64]);
  if (threadIdx.x < 32) s[threadIdx.x] = 1.0f; // half the array
  __syncthreads();
  out[threadIdx.x] = s[63 - threadIdx.x];      // thread 0 reads s[63]: never written
}
extern "C" __global__ void uninit_dynamic(float *out) {
  DLC_DYNAMIC_SMEM(float, s);
  s[threadIdx.x] = 2.0f;
  __syncthreads();
  out[threadIdx.x] = s[threadIdx.x + 1];       // the last thread reads one past what was written
}
)";
  auto pkg = buildTestPackage(src, {{"out", 64}},
                              {TestLaunch{"uninit_shared", {1, 1, 1}, {64, 1, 1}, 0, {0}}});
  auto r = runOnEmu(pkg, {}, {"out"}, checked());
  ASSERT_FALSE(r.ok());
  const std::string &m = r.status().message();
  EXPECT_NE(m.find("kernel 'uninit_shared'"), std::string::npos) << m;
  EXPECT_NE(m.find("uninitialised shared memory read"), std::string::npos) << m;
  EXPECT_NE(m.find("thread (0,0,0) of block (0,0,0) reads 4 bytes"), std::string::npos) << m;
  EXPECT_NE(m.find("static shared memory"), std::string::npos) << m;

  auto dyn = buildTestPackage(src, {{"out", 64}},
                              {TestLaunch{"uninit_dynamic", {1, 1, 1}, {32, 1, 1}, 33 * 4, {0}}});
  auto d = runOnEmu(dyn, {}, {"out"}, checked());
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("thread (31,0,0)"), std::string::npos)
      << d.status().message();
  EXPECT_NE(d.status().message().find("at offset 128 of dynamic shared memory"), std::string::npos)
      << d.status().message();
}

TEST(EmuCheck, WarpSynchronousExchangeWithSyncwarpIsNotARace) {
  // Lanes exchange through shared memory, ordered by __syncwarp: legal, not reported.
  const char *src = R"(
extern "C" __global__ void warp_exchange(float *out) {
  DLC_SHARED(float, s, [64]);
  s[threadIdx.x] = threadIdx.x;
  __syncwarp();
  float v = s[threadIdx.x ^ 1];
  __syncwarp();
  s[threadIdx.x] = v * 2.0f;
  __syncwarp();
  out[threadIdx.x] = s[threadIdx.x ^ 1];
}
)";
  auto pkg = buildTestPackage(src, {{"out", 64}},
                              {TestLaunch{"warp_exchange", {1, 1, 1}, {64, 1, 1}, 0, {0}}});
  auto r = runOnEmu(pkg, {}, {"out"}, checked());
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ((*r)[0][0], 0.0f); // lane 0 gets lane 1's doubled copy of lane 0
  EXPECT_EQ((*r)[0][5], 10.0f);
  EXPECT_EQ((*r)[0][40], 80.0f);
}
