#include "Toolchain.h"

#include <algorithm>
#include <filesystem>
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

// Cache entries end in an HMAC under this user's host key: an entry another user wrote
// or a disk damaged is a miss that recompiles, never code that goes into a package.
TEST(Toolchain, DamagedCacheEntriesAreMisses) {
  ToolchainOptions o;
  o.cacheDir = ::testing::TempDir() + "/dlc-cache-poison-test";
  std::error_code ec;
  std::filesystem::remove_all(o.cacheDir, ec);
  const char *src = "extern \"C\" __global__ void k(float *p) { p[threadIdx.x] += 3.0f; }\n";
  auto a = compileWithNvrtc(src, "sm_86", o);
  ASSERT_TRUE(bool(a)) << llvm::toString(a.takeError());
  int entries = 0;
  for (const auto &e : std::filesystem::recursive_directory_iterator(o.cacheDir)) {
    if (!e.is_regular_file())
      continue;
    std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
    char c;
    f.seekg(0);
    f.get(c);
    f.seekp(0);
    f.put(char(c ^ 1));
    ++entries;
  }
  ASSERT_GT(entries, 0);
  auto b = compileWithNvrtc(src, "sm_86", o);
  ASSERT_TRUE(bool(b)) << llvm::toString(b.takeError());
  EXPECT_FALSE(b->cached) << "a damaged entry was trusted";
  EXPECT_EQ(a->image, b->image);
  auto c = compileWithNvrtc(src, "sm_86", o);
  ASSERT_TRUE(bool(c));
  EXPECT_TRUE(c->cached) << "the recompilation rewrote the entry";
}

// Static shared memory is declared with DLC_SHARED (dlc_device.cuh), which emu maps to
// per-block storage; a plain `__shared__` does not compile for emu, so no declaration
// can fall back to storage with the wrong (per-thread) semantics.
TEST(Toolchain, EmuRefusesPlainSharedDeclarations) {
  ToolchainOptions o;
  o.useCache = false;
  auto ok = compileForEmu("#include \"dlc_device.cuh\"\n"
                          "template <int N> __global__ void k(float *p) {\n"
                          "  DLC_SHARED(float, tile, [N][N + 1]);\n"
                          "  DLC_SHARED_ALIGNED(32, float, aligned, [4]);\n"
                          "  tile[0][0] = aligned[0] = p[0];\n}\n"
                          "template __global__ void k<4>(float *);\n",
                          o);
  ASSERT_TRUE(bool(ok)) << llvm::toString(ok.takeError());
  auto bad = compileForEmu("__global__ void k(float *p) {\n"
                           "  __shared__ float tile[4];\n  tile[0] = p[0];\n}\n",
                           o);
  ASSERT_FALSE(bool(bad));
  std::string err = llvm::toString(bad.takeError());
  EXPECT_NE(err.find("declared_with_DLC_SHARED"), std::string::npos) << err;
}
