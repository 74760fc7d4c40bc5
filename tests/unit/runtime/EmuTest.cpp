// The emu backend runs real CUDA source: barriers, warp collectives, traps, and the
// launch limits a GPU would enforce.
#include "RuntimeTestUtil.h"
#include "dlc/support/Half.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

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

// PTX's warp-level matrix instructions on emu (dlc_mma.cuh over dlc_emu_prelude.h),
// checked against the fragment layouts of the PTX ISA ("Warp-level matrix fragment"
// figures for ldmatrix and mma.m16n8k16 / m16n8k8), with expectations worked out by
// hand from those tables: lane l = 4 g + t.
namespace {
const char *kLdmatrix = R"(
#include "dlc_mma.cuh"
extern "C" __global__ void ldsm(float *out) {
  DLC_SHARED_ALIGNED(16, unsigned short, tile, [256]);
  for (int i = threadIdx.x; i < 256; i += 32) tile[i] = (unsigned short)i; // matrix i/64, row, col
  __syncthreads();
  const int l = threadIdx.x;
  unsigned r4[4], t4[4], r2[2], r1[1];
  // x4: lane 8 i + j gives row j of stored matrix 3 - i (so matrix i of the result is
  // stored matrix 3 - i).
  const dlc::SmemAddr a = dlc::smemAddr(&tile[((3 - l / 8) * 8 + l % 8) * 8]);
  dlc::ldmatrix<4, false>(r4, a);
  dlc::ldmatrix<4, true>(t4, a);
  dlc::ldmatrix<2, false>(r2, dlc::smemAddr(&tile[(l % 16) * 8]));
  dlc::ldmatrix<1, true>(r1, dlc::smemAddr(&tile[(l % 8) * 8]));
  float *o = out + l * 11;
  for (int i = 0; i < 4; ++i) { o[i] = (float)r4[i]; o[4 + i] = (float)t4[i]; }
  o[8] = (float)r2[0]; o[9] = (float)r2[1]; o[10] = (float)r1[0];
}
)";

// Two 16-bit values as ldmatrix and mma hold them in a 32-bit register (the first in
// the low half).
float pair(unsigned lo, unsigned hi) {
  return static_cast<float>(lo | (hi << 16));
}
} // namespace

TEST(Emu, LdmatrixFollowsThePtxFragmentLayout) {
  auto pkg = buildTestPackage(kLdmatrix, {{"out", 32 * 11}},
                              {TestLaunch{"ldsm", {1, 1, 1}, {32, 1, 1}, 0, {0}}});
  auto r = runOnEmu(pkg, {}, {"out"});
  ASSERT_TRUE(r.ok()) << r.status().message();
  const std::vector<float> &o = (*r)[0];
  auto at = [&](int lane, int k) { return o[lane * 11 + k]; };
  // Element (row, col) of stored matrix m is m * 64 + row * 8 + col.
  // Lane 0 (row 0, cols 0-1); result matrix 0 is stored matrix 3: 192, 193.
  EXPECT_EQ(at(0, 0), pair(192, 193));
  // Lane 5 (row 1, cols 2-3): matrix 1 = stored 2: 128 + 8 + 2.
  EXPECT_EQ(at(5, 1), pair(138, 139));
  // Lane 31 (row 7, cols 6-7) of matrix 3 = stored 0: 62, 63.
  EXPECT_EQ(at(31, 3), pair(62, 63));
  // .trans: lane 5 holds (row 2, col 1) and (row 3, col 1); matrix 0 = stored 3.
  EXPECT_EQ(at(5, 4), pair(192 + 17, 192 + 25));
  // .trans, lane 31: (6, 7), (7, 7) of matrix 3 = stored 0.
  EXPECT_EQ(at(31, 7), pair(55, 63));
  // x2 in order: lane 9 (row 2, cols 2-3) of matrices 0 and 1.
  EXPECT_EQ(at(9, 8), pair(18, 19));
  EXPECT_EQ(at(9, 9), pair(64 + 18, 64 + 19));
  // x1 .trans: lane 14 (g 3, t 2) holds (4, 3), (5, 3).
  EXPECT_EQ(at(14, 10), pair(35, 43));
  // And every lane, by the table's formula.
  for (int l = 0; l < 32; ++l)
    for (int i = 0; i < 4; ++i) {
      const unsigned g = l / 4, c = 2 * (l % 4), m = (3 - i) * 64;
      EXPECT_EQ(at(l, i), pair(m + g * 8 + c, m + g * 8 + c + 1)) << l << " " << i;
      EXPECT_EQ(at(l, 4 + i), pair(m + c * 8 + g, m + (c + 1) * 8 + g)) << l << " " << i;
    }
}

namespace {
// attention_mma's B fragments of V (warpLoadBTrans: ldmatrix.x4.trans per pair of
// n-tiles, one warp operation for all pairs) and its P fragments (packPair).
const char *kTransPairs = R"(
#include "dlc_mma.cuh"
extern "C" __global__ void trans(float *out) {
  DLC_SHARED_ALIGNED(16, unsigned short, tile, [16 * 32]); // [k 16][n 32]: k * 32 + n
  for (int i = threadIdx.x; i < 512; i += 32) tile[i] = (unsigned short)i;
  __syncthreads();
  const int l = threadIdx.x;
  // Pair j: lane 8 i + r gives row k = 8 (i % 2) + r at n = 16 j + 8 (i / 2).
  dlc::SmemAddr rows[2];
  for (int j = 0; j < 2; ++j)
    rows[j] = dlc::smemAddr(&tile[(8 * ((l / 8) % 2) + l % 8) * 32 + 16 * j + 8 * (l / 16)]);
  unsigned b[2][4];
  dlc::warpLoadBTrans<2>(b, rows);
  for (int j = 0; j < 2; ++j)
    for (int i = 0; i < 4; ++i) out[l * 9 + 4 * j + i] = (float)b[j][i];
  out[l * 9 + 8] = (float)dlc::packPair<__half>(1.0f, -2.0f + l / 4096.0f);
}
)";
} // namespace

TEST(Emu, BatchedTransposedLdmatrixGivesMmaBFragments) {
  auto pkg = buildTestPackage(kTransPairs, {{"out", 32 * 9}},
                              {TestLaunch{"trans", {1, 1, 1}, {32, 1, 1}, 0, {0}}});
  auto r = runOnEmu(pkg, {}, {"out"});
  ASSERT_TRUE(r.ok()) << r.status().message();
  const std::vector<float> &o = (*r)[0];
  // mma.m16n8k16's B fragment (the PTX ISA's table): lane (g, t) holds B(2t, g),
  // B(2t + 1, g) in register 0 and B(2t + 8, g), B(2t + 9, g) in register 1; n-tile
  // 2 j + h of pair j is n = 16 j + 8 h + g. B(k, n) is stored at k * 32 + n.
  for (int l = 0; l < 32; ++l) {
    const unsigned g = l / 4, t = l % 4;
    for (int j = 0; j < 2; ++j)
      for (int h = 0; h < 2; ++h) {
        const unsigned n = 16 * j + 8 * h + g;
        EXPECT_EQ(o[l * 9 + 4 * j + 2 * h], pair(2 * t * 32 + n, (2 * t + 1) * 32 + n)) << l;
        EXPECT_EQ(o[l * 9 + 4 * j + 2 * h + 1], pair((2 * t + 8) * 32 + n, (2 * t + 9) * 32 + n))
            << l;
      }
  }
  // packPair<__half>(1, -2): 0x3C00 in the low half, 0xC000 in the high one (lane 0;
  // -2 + 1/4096 rounds to -2 in FP16 too: lane 1).
  EXPECT_EQ(o[8], static_cast<float>(0x3C00u | (0xC000u << 16)));
  EXPECT_EQ(o[9 + 8], static_cast<float>(0x3C00u | (0xC000u << 16)));
}

namespace {
// mma.sync with fragments built from the PTX ISA's tables in the kernel: A (16 x K)
// and B (K x 8) are functions of (row, col), packed per lane as the tables place them.
const char *kMma = R"(
#include "dlc_mma.cuh"
__device__ unsigned bits16(float v, bool bf) {
  unsigned short u;
  if (bf) { __nv_bfloat16 h = __float2bfloat16(v); memcpy(&u, &h, 2); }
  else { __half h = __float2half(v); memcpy(&u, &h, 2); }
  return u;
}
__device__ unsigned pack(float lo, float hi, bool bf) { return bits16(lo, bf) | (bits16(hi, bf) << 16); }
__device__ float A(int c, int r, int k) { return c == 0 ? (r == k ? 1.f : 0.f) : (float)(r * 16 + k); }
__device__ float B(int c, int k, int n) { return c == 0 ? (float)(k * 8 + n) : (k == n + 8 ? 1.f : 0.f); }
__device__ float AT(int r, int k) { return r == k ? 1.0f + 1.0f / 4096 : 0.f; } // 1 + 2^-12: not TF32
__device__ float BT(int k, int n) { return (float)(k * 8 + n) + 0.5f; }
__device__ unsigned f32(float v) { unsigned u; memcpy(&u, &v, 4); return u; }
extern "C" __global__ void mma(float *out) {
  const int l = threadIdx.x, g = l / 4, t = l % 4;
  for (int c = 0; c < 3; ++c) { // 0, 1: f16 cases; 2: the bf16 form of case 1
    const bool bf = c == 2;
    const int cs = c == 2 ? 1 : c;
    unsigned a[4] = {pack(A(cs, g, 2 * t), A(cs, g, 2 * t + 1), bf),
                     pack(A(cs, g + 8, 2 * t), A(cs, g + 8, 2 * t + 1), bf),
                     pack(A(cs, g, 2 * t + 8), A(cs, g, 2 * t + 9), bf),
                     pack(A(cs, g + 8, 2 * t + 8), A(cs, g + 8, 2 * t + 9), bf)};
    unsigned b[2] = {pack(B(cs, 2 * t, g), B(cs, 2 * t + 1, g), bf),
                     pack(B(cs, 2 * t + 8, g), B(cs, 2 * t + 9, g), bf)};
    float d[4] = {0.5f, 0.5f, 0.5f, 0.5f};
    if (bf) dlc::mma16816<__nv_bfloat16>(d, a, b);
    else dlc::mma16816<__half>(d, a, b);
    for (int i = 0; i < 4; ++i) out[(c * 32 + l) * 4 + i] = d[i];
  }
  unsigned a[4] = {f32(AT(g, t)), f32(AT(g + 8, t)), f32(AT(g, t + 4)), f32(AT(g + 8, t + 4))};
  unsigned b[2] = {f32(BT(t, g)), f32(BT(t + 4, g))};
  float d[4] = {0, 0, 0, 0};
  dlc::mma1688Tf32(d, a, b);
  for (int i = 0; i < 4; ++i) out[(3 * 32 + l) * 4 + i] = d[i];
  const float probes[4] = {1.0f + 1.0f / 2048, 1.0f + 1.0f / 2048 - 1.0f / 1048576, -1.0f - 3.0f / 2048, 1.0f + 3.0f / 8192};
  for (int i = 0; i < 4; ++i) {
    const unsigned r = dlc::toTf32(probes[i]);
    float f; memcpy(&f, &r, 4);
    out[4 * 32 * 4 + l * 4 + i] = f;
  }
}
)";
} // namespace

TEST(Emu, MmaSyncFollowsThePtxFragmentLayout) {
  auto pkg = buildTestPackage(kMma, {{"out", 5 * 32 * 4}},
                              {TestLaunch{"mma", {1, 1, 1}, {32, 1, 1}, 0, {0}}});
  auto r = runOnEmu(pkg, {}, {"out"});
  ASSERT_TRUE(r.ok()) << r.status().message();
  const std::vector<float> &o = (*r)[0];
  auto d = [&](int c, int lane, int i) { return o[(c * 32 + lane) * 4 + i]; };
  // Case 0: A = I, B(k, n) = 8 k + n, D = 0.5 + B(row, col); lane (g, t) holds rows g,
  // g + 8 and cols 2t, 2t + 1.
  EXPECT_EQ(d(0, 0, 0), 0.5f);
  EXPECT_EQ(d(0, 0, 3), 65.5f);   // (8, 1)
  EXPECT_EQ(d(0, 5, 0), 10.5f);   // g 1, t 1: (1, 2)
  EXPECT_EQ(d(0, 5, 2), 74.5f);   // (9, 2)
  EXPECT_EQ(d(0, 31, 1), 63.5f);  // (7, 7)
  EXPECT_EQ(d(0, 31, 3), 127.5f); // (15, 7)
  // Case 1: A(r, k) = 16 r + k, B picks k = n + 8: D = 0.5 + 16 r + n + 8 (A's k 8-15
  // halves, registers a2 and a3).
  EXPECT_EQ(d(1, 5, 0), 26.5f);   // (1, 2)
  EXPECT_EQ(d(1, 5, 3), 155.5f);  // (9, 3)
  EXPECT_EQ(d(1, 30, 2), 252.5f); // g 7, t 2: (15, 4): 240 + 4 + 8
  for (int l = 0; l < 32; ++l)
    for (int i = 0; i < 4; ++i) {
      const int row = l / 4 + 8 * (i / 2), col = 2 * (l % 4) + i % 2;
      EXPECT_EQ(d(0, l, i), 0.5f + row * 8 + col) << l << " " << i;
      EXPECT_EQ(d(1, l, i), 0.5f + row * 16 + col + 8) << l << " " << i;
      EXPECT_EQ(d(2, l, i), d(1, l, i)) << "bf16 " << l << " " << i; // exact in bf16 too
    }
  // TF32 m16n8k8: A (16 x 8) = (1 + 2^-12) I, which TF32 reads as I (the low 13 bits
  // ignored); B(k, n) = 8 k + n + 0.5. Rows 8-15 of A are zero.
  EXPECT_EQ(d(3, 0, 0), 0.5f);   // (0, 0)
  EXPECT_EQ(d(3, 5, 0), 10.5f);  // (1, 2)
  EXPECT_EQ(d(3, 31, 1), 63.5f); // (7, 7)
  EXPECT_EQ(d(3, 5, 2), 0.0f);   // (9, 2)
  EXPECT_EQ(d(3, 31, 3), 0.0f);  // (15, 7)
  // Rounding to TF32 (cvt.rna): a tie goes away from zero, less than a tie down.
  auto tf = [&](int lane, int i) { return o[4 * 32 * 4 + lane * 4 + i]; };
  EXPECT_EQ(tf(3, 0), 1.0f + 1.0f / 1024);
  EXPECT_EQ(tf(3, 1), 1.0f);
  EXPECT_EQ(tf(3, 2), -1.0f - 2.0f / 1024);
  EXPECT_EQ(tf(3, 3), 1.0f);
}

namespace {
// mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32: lane (g, t) packs A (g, 4t..4t+3),
// (g+8, 4t..), (g, 4t+16..), (g+8, 4t+16..) and B (4t..4t+3, g), (4t+16..4t+19, g), one
// signed byte each, the lowest element in the lowest byte (the PTX ISA's tables).
const char *kMmaS8 = R"(
#include "dlc_mma.cuh"
__device__ int A(int c, int r, int k) {
  return c == 0 ? (r == k ? 1 : 0) : c == 1 ? (r * 32 + k) % 256 - 128 : -128;
}
__device__ int B(int c, int k, int n) {
  return c == 0 ? k * 8 + n - 128 : c == 1 ? (k == n + 16 ? 1 : 0) : -128;
}
__device__ unsigned pack4(int c, bool isA, int r, int k) { // 4 bytes along K from (r, k)
  unsigned u = 0;
  for (int i = 0; i < 4; ++i)
    u |= (static_cast<unsigned>(isA ? A(c, r, k + i) : B(c, k + i, r)) & 0xffu) << (8 * i);
  return u;
}
extern "C" __global__ void mmas8(float *out) {
  const int l = threadIdx.x, g = l / 4, t = l % 4;
  for (int c = 0; c < 3; ++c) {
    unsigned a[4] = {pack4(c, true, g, 4 * t), pack4(c, true, g + 8, 4 * t),
                     pack4(c, true, g, 4 * t + 16), pack4(c, true, g + 8, 4 * t + 16)};
    unsigned b[2] = {pack4(c, false, g, 4 * t), pack4(c, false, g, 4 * t + 16)};
    int d[4];
    for (int i = 0; i < 4; ++i) d[i] = c == 0 ? 1000 : c == 1 ? 0 : 2147383647;
    dlc::mma16832S8(d, a, b);
    for (int i = 0; i < 4; ++i) { // as two exact halves
      out[((c * 32 + l) * 4 + i) * 2] = static_cast<float>(d[i] >> 16);
      out[((c * 32 + l) * 4 + i) * 2 + 1] = static_cast<float>(d[i] & 0xffff);
    }
  }
}
)";
} // namespace

TEST(Emu, IntegerMmaSyncFollowsThePtxFragmentLayout) {
  auto pkg = buildTestPackage(kMmaS8, {{"out", 3 * 32 * 4 * 2}},
                              {TestLaunch{"mmas8", {1, 1, 1}, {32, 1, 1}, 0, {0}}});
  auto r = runOnEmu(pkg, {}, {"out"});
  ASSERT_TRUE(r.ok()) << r.status().message();
  const std::vector<float> &o = (*r)[0];
  auto d = [&](int c, int lane, int i) {
    const size_t at = ((c * 32 + lane) * 4 + i) * 2;
    return static_cast<int>(static_cast<unsigned>(static_cast<int>(o[at])) << 16 |
                            static_cast<unsigned>(o[at + 1]));
  };
  // Case 0: A = I (16 x 32), B(k, n) = 8 k + n - 128, D = 1000 + B(row, col).
  EXPECT_EQ(d(0, 0, 0), 1000 - 128);             // (0, 0)
  EXPECT_EQ(d(0, 5, 2), 1000 + 9 * 8 + 2 - 128); // g 1, t 1, i 2: (9, 2)
  EXPECT_EQ(d(0, 31, 3), 1000 + 15 * 8 + 7 - 128);
  // Case 1: A(r, k) = (32 r + k) % 256 - 128, B picks k = n + 16 (A's bytes 16-31, its
  // registers a2 and a3; B's register b1): D = A(row, col + 16).
  EXPECT_EQ(d(1, 0, 0), 16 - 128);                    // (0, 0): A(0, 16)
  EXPECT_EQ(d(1, 30, 3), (15 * 32 + 21) % 256 - 128); // g 7, t 2, i 3: (15, 5)
  for (int l = 0; l < 32; ++l)
    for (int i = 0; i < 4; ++i) {
      const int row = l / 4 + 8 * (i / 2), col = 2 * (l % 4) + i % 2;
      EXPECT_EQ(d(0, l, i), 1000 + row * 8 + col - 128) << l << " " << i;
      EXPECT_EQ(d(1, l, i), (row * 32 + col + 16) % 256 - 128) << l << " " << i;
      // Case 2: 32 products of -128 * -128 = 524288 added to 2^31 - 1 - 100000 wrap
      // around modulo 2^32 (no .satfinite): 2147907935 - 2^32.
      EXPECT_EQ(d(2, l, i), -2147059361) << l << " " << i;
    }
}

namespace {
// mma.sync.aligned.m16n8k32.row.col.f32.{e4m3,e5m2}.{e4m3,e5m2}.f32: the fragments of
// m16n8k32's 8-bit types (as s8's above), one float8 byte each.
const char *kMmaF8 = R"(
#include "dlc_mma.cuh"
// Bytes: e4m3 1.0 = 0x38, e5m2 1.0 = 0x3C; 0x38 + m is 1 + m/8 in e4m3, 0x3C + m is
// 1 + m/4 in e5m2; 0x01 is e4m3's smallest subnormal 2^-9, 0x7E its largest 448.
__device__ unsigned A(int c, int r, int k) {
  return c == 0 ? (r == k ? 0x38 : 0) : c == 1 ? 0x3C + (r + k) % 4 : c == 2 ? 0x01 : 0xB8;
}
__device__ unsigned B(int c, int k, int n) {
  return c == 0 ? 0x38 + (k + n) % 8 : c == 1 ? (k == n + 16 ? 0x3C : 0) : c == 2 ? 0x7E : 0x40;
}
__device__ unsigned pack4(int c, bool isA, int r, int k) { // 4 bytes along K from (r, k)
  unsigned u = 0;
  for (int i = 0; i < 4; ++i)
    u |= (isA ? A(c, r, k + i) : B(c, k + i, r)) << (8 * i);
  return u;
}
extern "C" __global__ void mmaf8(float *out) {
  const int l = threadIdx.x, g = l / 4, t = l % 4;
  for (int c = 0; c < 4; ++c) {
    unsigned a[4] = {pack4(c, true, g, 4 * t), pack4(c, true, g + 8, 4 * t),
                     pack4(c, true, g, 4 * t + 16), pack4(c, true, g + 8, 4 * t + 16)};
    unsigned b[2] = {pack4(c, false, g, 4 * t), pack4(c, false, g, 4 * t + 16)};
    float d[4], e[4]; // e: sm_80's path, two FP16 products of the converted operands
    for (int i = 0; i < 4; ++i) d[i] = e[i] = c == 0 ? 100.0f : c == 2 ? -0.5f : 0.0f;
    if (c == 1) {
      dlc::mma16832F8<true>(d, a, b);
      dlc::mma16832F8ViaF16<true>(e, a, b);
    } else {
      dlc::mma16832F8<false>(d, a, b);
      dlc::mma16832F8ViaF16<false>(e, a, b);
    }
    for (int i = 0; i < 4; ++i) {
      out[(c * 32 + l) * 4 + i] = d[i];
      out[512 + (c * 32 + l) * 4 + i] = e[i];
    }
  }
}
)";
} // namespace

TEST(Emu, Float8MmaSyncFollowsThePtxFragmentLayout) {
  auto pkg = buildTestPackage(kMmaF8, {{"out", 2 * 4 * 32 * 4}},
                              {TestLaunch{"mmaf8", {1, 1, 1}, {32, 1, 1}, 0, {0}}});
  auto r = runOnEmu(pkg, {}, {"out"});
  ASSERT_TRUE(r.ok()) << r.status().message();
  const std::vector<float> &o = (*r)[0];
  auto d = [&](int c, int lane, int i) { return o[(c * 32 + lane) * 4 + i]; };
  // Case 0 (e4m3): A = I (16 x 32), B(k, n) = 1 + ((k + n) % 8) / 8, D = 100 + B(row, col).
  EXPECT_EQ(d(0, 0, 0), 101.0f);                // (0, 0): 1
  EXPECT_EQ(d(0, 5, 2), 100.0f + 1 + 3 / 8.0f); // g 1, t 1, i 2: (9, 2), (9 + 2) % 8 = 3
  for (int l = 0; l < 32; ++l)
    for (int i = 0; i < 4; ++i) {
      const int row = l / 4 + 8 * (i / 2), col = 2 * (l % 4) + i % 2;
      EXPECT_EQ(d(0, l, i), 100.0f + 1 + ((row + col) % 8) / 8.0f) << l << " " << i;
      // Case 1 (e5m2): B picks k = n + 16 (A's registers a2 and a3, B's b1): D = A(row,
      // col + 16) = 1 + ((row + col + 16) % 4) / 4.
      EXPECT_EQ(d(1, l, i), 1 + ((row + col + 16) % 4) / 4.0f) << l << " " << i;
      // Case 2: 32 products of 2^-9 (a subnormal) by 448, 0.875 each, from -0.5: 27.5.
      EXPECT_EQ(d(2, l, i), 27.5f) << l << " " << i;
      // Case 3: 32 products of -1 by 2 (0xB8, 0x40): -64.
      EXPECT_EQ(d(3, l, i), -64.0f) << l << " " << i;
      // sm_80's and sm_86's path (these sums are exact either way): the same.
      for (int c = 0; c < 4; ++c)
        EXPECT_EQ(o[512 + (c * 32 + l) * 4 + i], d(c, l, i)) << c << " " << l << " " << i;
    }
}

namespace {
// PRMT (__byte_perm, which matmul_nbits unpacks weights with): byte n of the result is
// byte s[4n+2:4n] of y:x.
const char *kBytePerm = R"(
extern "C" __global__ void perm(float *out) {
  const unsigned r[3] = {__byte_perm(0x03020100u, 0x07060504u, 0x7651u),
                         __byte_perm(0x12345678u, 0x4B000000u, 0x7652u),
                         __byte_perm(0x12345678u, 0xAABBCCDDu, 0x0123u)};
  for (int i = 0; i < 3; ++i) { // as two exact halves
    out[2 * i] = static_cast<float>(r[i] >> 16);
    out[2 * i + 1] = static_cast<float>(r[i] & 0xffffu);
  }
}
)";
} // namespace

TEST(Emu, BytePermuteSelectsBytesAsPrmtDoes) {
  auto pkg =
      buildTestPackage(kBytePerm, {{"out", 6}}, {TestLaunch{"perm", {1, 1, 1}, {1, 1, 1}, 0, {0}}});
  auto r = runOnEmu(pkg, {}, {"out"});
  ASSERT_TRUE(r.ok()) << r.status().message();
  const std::vector<float> &o = (*r)[0];
  auto at = [&](int i) {
    return static_cast<unsigned>(o[2 * i]) << 16 | static_cast<unsigned>(o[2 * i + 1]);
  };
  EXPECT_EQ(at(0), 0x07060501u); // x's byte 1 under y's bytes 1-3
  EXPECT_EQ(at(1), 0x4B000034u); // 2^23 + 0x34 as a float's bits
  EXPECT_EQ(at(2), 0x78563412u); // x's bytes reversed
}

namespace {
// The kernel library's float8 conversions (from the float's bits), which every float8
// QuantizeLinear, DequantizeLinear and Cast stores and loads through.
const char *kFloat8 = R"(
extern "C" __global__ void f8(const float *in, float *bits, float *back) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < N; i += gridDim.x * blockDim.x) {
    const dlc::f8e4m3 a = dlc::cvt<dlc::f8e4m3>(in[i]);
    const dlc::f8e5m2 b = dlc::cvt<dlc::f8e5m2>(in[i]);
    bits[2 * i] = a.bits;
    bits[2 * i + 1] = b.bits;
    back[2 * i] = dlc::cvt<float>(a);
    back[2 * i + 1] = dlc::cvt<float>(b);
  }
}
)";
} // namespace

// Against the host's conversion (Half.h, computed from the value in double, and itself
// tested against hand-worked cases): every float8 value, its neighbours, the midpoints
// between adjacent values and theirs, and random floats of every exponent.
TEST(Emu, Float8ConversionsMatchTheHost) {
  std::vector<float> in;
  for (bool e5m2 : {false, true}) {
    std::vector<float> values;
    for (unsigned b = 0; b < 128; ++b)
      if (float f = f8ToFloat(static_cast<uint8_t>(b), e5m2); std::isfinite(f))
        values.push_back(f);
    std::sort(values.begin(), values.end());
    values.push_back(e5m2 ? 65536.0f : 512.0f); // the step after the largest
    for (size_t i = 0; i < values.size(); ++i) {
      for (float f :
           {values[i], i + 1 < values.size() ? (values[i] + values[i + 1]) / 2 : values[i]})
        for (float g : {f, std::nextafter(f, 0.0f), std::nextafter(f, INFINITY)}) {
          in.push_back(g);
          in.push_back(-g);
        }
    }
  }
  for (float f : {INFINITY, -INFINITY, NAN, 1e30f, 1e-30f, 0x1p-149f})
    in.push_back(f);
  std::mt19937 rng(11);
  for (int i = 0; i < 20000; ++i) {
    const uint32_t u = rng();
    in.push_back(bitsFloat((u & 0x80000000u) | ((100u + u % 50u) << 23) | (u >> 9)));
  }
  const int n = static_cast<int>(in.size());
  auto pkg = buildTestPackage("#define N " + std::to_string(n) + "\n" + kFloat8,
                              {{"in", n}, {"bits", 2 * n}, {"back", 2 * n}},
                              {TestLaunch{"f8", {8, 1, 1}, {128, 1, 1}, 0, {0, 1, 2}, false}});
  ASSERT_FALSE(pkg.empty());
  auto r = runOnEmu(pkg, {in}, {"bits", "back"});
  ASSERT_TRUE(r.ok()) << r.status().message();
  int bad = 0;
  for (int i = 0; i < n && bad < 10; ++i)
    for (int k = 0; k < 2; ++k) {
      const uint8_t want = floatToF8(in[i], k == 1);
      const float got = (*r)[0][2 * i + k], value = (*r)[1][2 * i + k];
      const bool same =
          std::isnan(in[i]) ? std::isnan(value) : got == want && value == f8ToFloat(want, k == 1);
      if (!same)
        ++bad;
      EXPECT_TRUE(same) << (k ? "e5m2 " : "e4m3 ") << in[i] << ": " << got << " != " << int(want);
    }
}

namespace {
// cp.async with a zero-filled chunk; and, under --check, a read before the wait.
const char *kCpAsync = R"(
#include "dlc_mma.cuh"
extern "C" __global__ void cpa(const float *in, float *out) {
  DLC_SHARED_ALIGNED(16, float, s, [128]);
  const int l = threadIdx.x;
  dlc::cpAsync16(dlc::smemAddr(&s[4 * l]), in + 4 * l, l % 3 != 0); // lanes 0, 3, ...: zeros
  dlc::cpAsyncCommit();
  dlc::cpAsyncWait<0>();
  __syncthreads();
  for (int i = 0; i < 4; ++i) out[4 * l + i] = s[4 * ((l + 1) % 32) + i];
}
extern "C" __global__ void early(const float *in, float *out) {
  DLC_SHARED_ALIGNED(16, float, s, [128]);
  const int l = threadIdx.x;
  dlc::cpAsync16(dlc::smemAddr(&s[4 * l]), in + 4 * l, true);
  dlc::cpAsyncCommit();
  out[l] = s[4 * l]; // no cp.async.wait_group
}
extern "C" __global__ void waited(const float *in, float *out) {
  DLC_SHARED_ALIGNED(16, float, s, [256]);
  const int l = threadIdx.x;
  dlc::cpAsync16(dlc::smemAddr(&s[4 * l]), in + 4 * l, true);
  dlc::cpAsyncCommit();
  dlc::cpAsync16(dlc::smemAddr(&s[128 + 4 * l]), in + 4 * l, true);
  dlc::cpAsyncCommit();
  dlc::cpAsyncWait<1>(); // the first group has landed, the second may not have
  out[l] = s[4 * l] + s[128 + 4 * l];
}
)";
} // namespace

TEST(Emu, CpAsyncCopiesZeroFillsAndLandsAtTheWait) {
  auto pkg = buildTestPackage(kCpAsync, {{"in", 128}, {"out", 128}},
                              {TestLaunch{"cpa", {1, 1, 1}, {32, 1, 1}, 0, {0, 1}}});
  std::vector<float> in(128);
  std::iota(in.begin(), in.end(), 1.0f);
  for (const rt::SessionOptions &o : {rt::SessionOptions{}, checked()}) {
    auto r = runOnEmu(pkg, {in}, {"out"}, o);
    ASSERT_TRUE(r.ok()) << r.status().message();
    for (int l = 0; l < 32; ++l)
      for (int i = 0; i < 4; ++i) {
        const int src = (l + 1) % 32;
        EXPECT_EQ((*r)[0][4 * l + i], src % 3 == 0 ? 0.0f : in[4 * src + i]) << l << " " << i;
      }
  }
}

TEST(Emu, ReadingACpAsyncDestinationBeforeTheWaitIsARace) {
  for (const char *kernel : {"early", "waited"}) {
    SCOPED_TRACE(kernel);
    auto pkg = buildTestPackage(kCpAsync, {{"in", 128}, {"out", 128}},
                                {TestLaunch{kernel, {1, 1, 1}, {32, 1, 1}, 0, {0, 1}}});
    auto r = runOnEmu(pkg, {std::vector<float>(128, 1.0f)}, {"out"}, checked());
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("cp.async not waited for (racecheck): thread (0,0,0)"),
              std::string::npos)
        << r.status().message();
  }
}

namespace {
const char *kWarpOpErrors = R"(
#include "dlc_mma.cuh"
extern "C" __global__ void exited(float *out) {
  DLC_SHARED_ALIGNED(16, unsigned short, tile, [64]);
  for (int i = threadIdx.x; i < 64; i += 32) tile[i] = (unsigned short)i;
  __syncthreads();
  if (threadIdx.x >= 16) return; // half the warp leaves before the ldmatrix
  unsigned r[1];
  dlc::ldmatrix<1, false>(r, dlc::smemAddr(&tile[(threadIdx.x % 8) * 8]));
  out[threadIdx.x] = (float)r[0];
}
extern "C" __global__ void overwrite(const float *in, float *out) {
  DLC_SHARED_ALIGNED(16, float, s, [4]);
  if (threadIdx.x < 4) s[threadIdx.x] = 1.0f;
  __syncthreads();
  if (threadIdx.x == 0) out[0] = s[0];   // warp 0 reads ...
  if (threadIdx.x == 32) {               // ... while warp 1 copies over it, no barrier between
    dlc::cpAsync16(dlc::smemAddr(s), in, true);
    dlc::cpAsyncWait<0>();
  }
}
)";
} // namespace

TEST(Emu, WarpOperationWithAnExitedLaneIsAnError) {
  auto pkg = buildTestPackage(kWarpOpErrors, {{"in", 4}, {"out", 32}},
                              {TestLaunch{"exited", {1, 1, 1}, {32, 1, 1}, 0, {1}}});
  auto r = runOnEmu(pkg, {}, {"out"});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("names lane 16 in its mask, which has exited"),
            std::string::npos)
      << r.status().message();
}

TEST(Emu, CpAsyncOverSharedMemoryAnotherWarpReadsIsARace) {
  auto pkg = buildTestPackage(kWarpOpErrors, {{"in", 4}, {"out", 32}},
                              {TestLaunch{"overwrite", {1, 1, 1}, {64, 1, 1}, 0, {0, 1}}});
  auto r = runOnEmu(pkg, {std::vector<float>(4, 2.0f)}, {"out"}, checked());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("write after read (racecheck): thread (32,0,0)"),
            std::string::npos)
      << r.status().message();
}
