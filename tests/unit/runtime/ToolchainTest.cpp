#include "Toolchain.h"

#include <algorithm>
#include <fstream>
#include <gtest/gtest.h>

using namespace dlc::codegen;

TEST(Toolchain, ParsesPtxasStatistics) {
  const char *log =
      "ptxas info    : 0 bytes gmem\n"
      "ptxas info    : Compiling entry function 'k0_Add' for 'sm_80'\n"
      "ptxas info    : Function properties for k0_Add\n"
      "ptxas         .     16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads\n"
      "ptxas info    : Used 40 registers, used 1 barriers, 1024 bytes smem, 380 bytes cmem[0]\n"
      "ptxas info    : Compiling entry function 'k1_Relu' for 'sm_80'\n"
      "ptxas info    : Function properties for k1_Relu\n"
      "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 12 registers, used 0 barriers, 372 bytes cmem[0]\n";
  auto r = parsePtxasLog(log);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r["k0_Add"].registers, 40);
  EXPECT_EQ(r["k0_Add"].spillStores, 8);
  EXPECT_EQ(r["k0_Add"].spillLoads, 4);
  EXPECT_EQ(r["k0_Add"].sharedBytes, 1024);
  EXPECT_EQ(r["k0_Add"].stackBytes, 16);
  EXPECT_EQ(r["k1_Relu"].registers, 12);
  EXPECT_EQ(r["k1_Relu"].sharedBytes, 0);
}

TEST(Toolchain, NvrtcFailureCarriesTheLogAndWritesTheSource) {
  ToolchainOptions o;
  o.useCache = false;
  o.failureDumpPath = ::testing::TempDir() + "/failed.cu";
  std::remove(o.failureDumpPath.c_str());
  auto m = compileWithNvrtc(
      "extern \"C\" __global__ void k(float *p) { p[0] = undefined_thing; }\n", "sm_80", o);
  ASSERT_FALSE(bool(m));
  std::string err = llvm::toString(m.takeError());
  EXPECT_NE(err.find("NVRTC failed for compute_80"), std::string::npos) << err;
  EXPECT_NE(err.find("undefined_thing"), std::string::npos)
      << "the full log is in the error: " << err;
  EXPECT_NE(err.find("source written to"), std::string::npos);
  std::ifstream f(o.failureDumpPath);
  EXPECT_TRUE(f.good());
}

TEST(Toolchain, CachedCompilationsAreReused) {
  ToolchainOptions o;
  o.cacheDir = ::testing::TempDir() + "/dlc-cache-test";
  const char *src = "extern \"C\" __global__ void k(float *p) { p[threadIdx.x] *= 2.0f; }\n";
  auto a = compileWithNvrtc(src, "sm_86", o);
  ASSERT_TRUE(bool(a)) << llvm::toString(a.takeError());
  auto b = compileWithNvrtc(src, "sm_86", o);
  ASSERT_TRUE(bool(b));
  EXPECT_TRUE(b->cached);
  EXPECT_EQ(a->image, b->image);
  EXPECT_EQ(b->resources.at("k").registers, a->resources.at("k").registers);
}

// The emu compile's lowering of static shared memory (see Toolchain.h).
TEST(Toolchain, StaticSharedDeclarationsAreLoweredForEmu) {
  const std::string src = R"(// __shared__ float inComment[4];
#define SMEM __shared__ float inMacro[4];
__shared__ int atNamespaceScope[8];
namespace ns { __shared__ int alsoAtNamespaceScope; }
const char *s = "__shared__ float inString[2];";
template <class T, int N> __global__ void k(T *out) {
  __shared__ T tile[N][N + 1];
  __shared__ __align__(32) float aligned[4];
  volatile __shared__ int flag;
  extern __shared__ unsigned char dynamicSmem[];
  __shared__ float a[2], b[2];
  if (true) {
    __shared__ double
        twoLines[3];
  }
}
)";
  std::string out = lowerStaticSharedForEmu(src);
  // Lowered: references to per-block storage, one line each, line count kept.
  EXPECT_NE(
      out.find(
          "static const char dlc_emu_site_tile = 0; using dlc_emu_shared_t_tile = T [N][N + 1]; "
          "auto &tile = *dlc_emu_static_shared<dlc_emu_shared_t_tile>(&dlc_emu_site_tile, 16);"),
      std::string::npos)
      << out;
  EXPECT_NE(
      out.find("using dlc_emu_shared_t_aligned = float [4]; auto &aligned = "
               "*dlc_emu_static_shared<dlc_emu_shared_t_aligned>(&dlc_emu_site_aligned, 32);"),
      std::string::npos)
      << out;
  EXPECT_NE(out.find("using dlc_emu_shared_t_flag = volatile int ;"), std::string::npos) << out;
  EXPECT_EQ(out.find("volatile static const char"), std::string::npos) << out;
  EXPECT_NE(out.find("auto &twoLines = "), std::string::npos) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), std::count(src.begin(), src.end(), '\n'));
  // Left alone: comments, macros, strings, namespace scope, dynamic shared memory and
  // several declarators.
  for (const char *kept :
       {"// __shared__ float inComment[4];", "#define SMEM __shared__ float inMacro[4];",
        "__shared__ int atNamespaceScope[8];", "__shared__ int alsoAtNamespaceScope;",
        "\"__shared__ float inString[2];\"", "extern __shared__ unsigned char dynamicSmem[];",
        "__shared__ float a[2], b[2];"})
    EXPECT_NE(out.find(kept), std::string::npos) << kept << "\n" << out;
}
