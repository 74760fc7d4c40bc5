// A damaged .dlc is always an error with a clear message, never a crash.
#include "dlc/package/Package.h"

#include "dlc/codegen/Compiler.h"
#include "dlc/ir/TextIR.h"

#include "llvm/Support/Error.h"

#include <cstring>
#include <gtest/gtest.h>
#include <random>

using namespace dlc;

namespace {

std::vector<uint8_t> samplePackage() {
  auto g = ir::parseGraph(R"(graph @g(%x: f32[4,8], %w: f32[8,3]) -> ("y": f32[4,3]) {
  %b = const f32[3] dense<[0.5, -1.0, 2.0]>
  %0 = MatMul(%x, %w) : f32[4,3]
  %1 = Add(%0, %b) : f32[4,3]
  %2 = Relu(%1) : f32[4,3]
  return %2
})");
  EXPECT_TRUE(bool(g));
  codegen::CompileOptions co;
  co.targets = {"emu"};
  auto bytes = codegen::compileGraph(**g, co);
  EXPECT_TRUE(bool(bytes)) << (bytes ? "" : llvm::toString(bytes.takeError()));
  return bytes ? *bytes : std::vector<uint8_t>{};
}

/// Recomputes the checksums so that a change reaches the structural verifier.
void resign(std::vector<uint8_t> &b) {
  uint32_t body = pkg::crc32(b.data() + pkg::kHeaderSize, b.size() - pkg::kHeaderSize);
  std::memcpy(b.data() + 48, &body, 4);
  uint32_t header = pkg::crc32(b.data(), 52);
  std::memcpy(b.data() + 52, &header, 4);
}

} // namespace

TEST(Package, RoundTripsAndVerifies) {
  auto bytes = samplePackage();
  auto pf = pkg::PackageFile::fromBytes(bytes.data(), bytes.size(), "ok.dlc");
  ASSERT_TRUE(pf.ok()) << pf.status().message();
  const pkg::Package &m = (*pf)->meta();
  EXPECT_EQ(m.inputs()->size(), 2u);
  EXPECT_EQ(m.outputs()->Get(0)->name()->str(), "y");
  EXPECT_EQ(bytes.size() % 256, 0u);
  for (const pkg::Weight *w : *m.weights())
    EXPECT_EQ(((*pf)->section(w->data()) - (*pf)->data()) % 256, 0)
        << "weights are 256-byte aligned";
}

TEST(Package, EveryFlippedByteIsRejected) {
  auto bytes = samplePackage();
  ASSERT_FALSE(bytes.empty());
  size_t step = std::max<size_t>(1, bytes.size() / 400);
  int checked = 0;
  for (size_t off = 0; off < bytes.size(); off += step) {
    auto bad = bytes;
    bad[off] ^= 0x5A;
    auto pf = pkg::PackageFile::fromBytes(bad.data(), bad.size(), "bad.dlc");
    ASSERT_FALSE(pf.ok()) << "flip at " << off << " was accepted";
    EXPECT_EQ(pf.status().code(), StatusCode::InvalidPackage);
    EXPECT_NE(pf.status().message().find("bad.dlc: invalid or corrupted .dlc package"),
              std::string::npos);
    ++checked;
  }
  EXPECT_GT(checked, 300);
}

TEST(Package, EveryTruncationIsRejected) {
  auto bytes = samplePackage();
  for (size_t len = 0; len < bytes.size(); len += std::max<size_t>(1, bytes.size() / 300)) {
    auto pf = pkg::PackageFile::fromBytes(bytes.data(), len, "short.dlc");
    ASSERT_FALSE(pf.ok()) << "truncation to " << len << " was accepted";
    EXPECT_EQ(pf.status().code(), StatusCode::InvalidPackage);
  }
  auto pf = pkg::PackageFile::fromBytes(bytes.data(), bytes.size() - 1, "short.dlc");
  EXPECT_NE(pf.status().message().find("(truncated?)"), std::string::npos) << pf.status().message();
}

// With valid checksums, damaged metadata must still be caught by the verifier (or be
// harmless): no crash, no out-of-bounds reference accepted.
TEST(Package, ResignedMetadataDamageNeverCrashes) {
  auto bytes = samplePackage();
  uint64_t metaSize;
  std::memcpy(&metaSize, bytes.data() + 24, 8);
  std::mt19937 rng(42);
  int rejected = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    auto bad = bytes;
    for (int k = 0; k < 1 + trial % 4; ++k)
      bad[pkg::kHeaderSize + rng() % metaSize] = static_cast<uint8_t>(rng());
    resign(bad);
    auto pf = pkg::PackageFile::fromBytes(bad.data(), bad.size(), "fuzz.dlc");
    if (!pf.ok()) {
      ++rejected;
      EXPECT_EQ(pf.status().code(), StatusCode::InvalidPackage);
    }
  }
  EXPECT_GT(rejected, 100);
}

TEST(Package, WrongMagicAndVersionAreNamed) {
  auto bytes = samplePackage();
  auto bad = bytes;
  bad[0] = 'X';
  auto pf = pkg::PackageFile::fromBytes(bad.data(), bad.size(), "m.dlc");
  EXPECT_NE(pf.status().message().find("wrong magic bytes (not a .dlc file)"), std::string::npos);
  bad = bytes;
  uint32_t v = 99;
  std::memcpy(bad.data() + 8, &v, 4);
  resign(bad);
  pf = pkg::PackageFile::fromBytes(bad.data(), bad.size(), "m.dlc");
  EXPECT_NE(pf.status().message().find("format version 99, this runtime reads version " +
                                       std::to_string(pkg::kFormatVersion)),
            std::string::npos)
      << pf.status().message();
}
