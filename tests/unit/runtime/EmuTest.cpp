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
  __shared__ float smem[32];
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
  auto pkg = buildTestPackage(kCollectives, {{"in", 2048}, {"sum", 1}, {"shfl", 6144}, {"ballot", 64}},
                              {TestLaunch{"collectives", {1, 1, 1}, {2048, 1, 1}, 0, {0, 1, 2, 3}}});
  auto r = runOnEmu(pkg, {}, {"sum"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::LaunchFailure);
  EXPECT_NE(r.status().message().find("launch of kernel 'collectives' would fail on a GPU: a block of 2048 "
                                      "threads exceeds the limit of 1024"),
            std::string::npos)
      << r.status().message();
}

TEST(Emu, GridYLimitIsEnforced) {
  auto pkg = buildTestPackage(kCollectives, {{"in", 64}, {"sum", 1}, {"shfl", 192}, {"ballot", 2}},
                              {TestLaunch{"collectives", {1, 70000, 1}, {32, 1, 1}, 0, {0, 1, 2, 3}}});
  auto r = runOnEmu(pkg, {}, {"sum"});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("grid dimensions (1, 70000, 1) exceed (2^31-1, 65535, 65535)"),
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
  auto pkg = buildTestPackage(src, {{"out", 32}}, {TestLaunch{"dyn", {1, 1, 1}, {32, 1, 1}, 120 * 1024, {0}}},
                              {"sm_86"});
  auto r = runOnEmu(pkg, {}, {"out"});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("sm_86: 122880 bytes of shared memory per block exceed 101376"),
            std::string::npos)
      << r.status().message();
  // Within the limit it runs, and dynamic shared memory is shared by the block.
  auto ok = buildTestPackage(src, {{"out", 32}}, {TestLaunch{"dyn", {1, 1, 1}, {32, 1, 1}, 128, {0}}}, {"sm_86"});
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
  auto pkg = buildTestPackage(src, {{"out", 32}}, {TestLaunch{"diverge", {1, 1, 1}, {32, 1, 1}, 0, {0}}});
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
  EXPECT_NE(r.status().message().find("compiled as barrier-free"), std::string::npos) << r.status().message();
}
