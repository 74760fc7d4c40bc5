// A damaged .dlc is always an error with a clear message, never a crash.
#include "dlc/package/Package.h"

#include "dlc/codegen/Compiler.h"
#include "dlc/ir/TextIR.h"
#include "dlc/runtime/Runtime.h"
#include "dlc/support/Files.h"
#include "dlc/support/HostKey.h"
#include "dlc/support/Sha256.h"

#include "llvm/Support/Error.h"

#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <random>
#include <sys/stat.h>

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

// A step whose union names its kind but holds no value (the vtable entry of `op` cleared)
// passes the flatbuffers verifier; the package check must name it (found by fuzz_Package).
TEST(Package, AStepWithoutItsOperationIsRejected) {
  auto bytes = samplePackage();
  auto pf = pkg::PackageFile::fromBytes(bytes.data(), bytes.size(), "ok.dlc");
  ASSERT_TRUE(pf.ok()) << pf.status().message();
  const pkg::Step *step = (*pf)->meta().steps()->Get(0);
  const uint8_t *vtable = reinterpret_cast<const flatbuffers::Table *>(step)->GetVTable();
  size_t entry = vtable - (*pf)->data() + pkg::Step::VT_OP;
  ASSERT_LT(entry + 2, bytes.size());
  auto bad = bytes;
  bad[entry] = bad[entry + 1] = 0;
  resign(bad);
  pf = pkg::PackageFile::fromBytes(bad.data(), bad.size(), "noop.dlc");
  ASSERT_FALSE(pf.ok());
  EXPECT_NE(pf.status().message().find("step 0 has no operation"), std::string::npos)
      << pf.status().message();
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

namespace {

std::string hexOf(const Digest &d) {
  return hex(d);
}

/// A key file of this test's own (the user's key stays untouched) holding `fill`.
std::string testKeyFile(const char *name, uint8_t fill) {
  std::string path = testing::TempDir() + name;
  HostKey k;
  k.fill(fill);
  EXPECT_FALSE(writeFileAtomically(path, k.data(), k.size(), 0600));
  return path;
}

} // namespace

// FIPS 180-4 / NIST examples and RFC 4231 test cases 1, 2 and 6.
TEST(Sha256, KnownAnswers) {
  EXPECT_EQ(hexOf(sha256("abc", 3)),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hexOf(sha256("", 0)),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  EXPECT_EQ(hexOf(sha256(two, std::strlen(two))),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  Sha256 million; // one million 'a', fed in uneven pieces
  std::string chunk(777, 'a');
  size_t left = 1000000;
  while (left) {
    size_t n = std::min(left, chunk.size());
    million.update(chunk.data(), n);
    left -= n;
  }
  EXPECT_EQ(hexOf(million.finish()),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  std::string k1(20, '\x0b');
  HmacSha256 h1(k1.data(), k1.size());
  h1.update("Hi There", 8);
  EXPECT_EQ(hexOf(h1.finish()), "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  HmacSha256 h2("Jefe", 4);
  const char *d2 = "what do ya want for nothing?";
  h2.update(d2, std::strlen(d2));
  EXPECT_EQ(hexOf(h2.finish()), "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  std::string k6(131, '\xaa');
  HmacSha256 h6(k6.data(), k6.size());
  const char *d6 = "Test Using Larger Than Block-Size Key - Hash Key First";
  h6.update(d6, std::strlen(d6));
  EXPECT_EQ(hexOf(h6.finish()), "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

// A package with host code is signed with the compiling user's key: the signature
// verifies with that key only, and any change to what it covers breaks it.
TEST(Package, HostCodeSignatureCoversTheWholePackage) {
  std::string mine = testKeyFile("mine.key", 1), other = testKeyFile("other.key", 2);
  ASSERT_EQ(::setenv("DLC_HOST_KEY_FILE", mine.c_str(), 1), 0);
  auto bytes = samplePackage();
  ::unsetenv("DLC_HOST_KEY_FILE");
  HostKey k1, k2;
  k1.fill(1);
  k2.fill(2);
  auto pf = pkg::PackageFile::fromBytes(bytes.data(), bytes.size(), "signed.dlc");
  ASSERT_TRUE(pf.ok()) << pf.status().message();
  EXPECT_TRUE((*pf)->signedWith(k1));
  EXPECT_FALSE((*pf)->signedWith(k2));
  uint64_t metaSize;
  std::memcpy(&metaSize, bytes.data() + 24, 8);
  std::mt19937 rng(7);
  int verified = 0;
  for (int trial = 0; trial < 300; ++trial) {
    auto bad = bytes;
    size_t at = trial % 2 ? pkg::kHeaderSize + rng() % metaSize            // metadata
                          : bytes.size() / 2 + rng() % (bytes.size() / 4); // sections
    bad[at] ^= static_cast<uint8_t>(1 + rng() % 255);
    resign(bad);
    auto b = pkg::PackageFile::fromBytes(bad.data(), bad.size(), "changed.dlc");
    if (b.ok()) {
      ++verified;
      EXPECT_FALSE((*b)->signedWith(k1)) << "a change at byte " << at << " kept the signature";
    }
  }
  EXPECT_GT(verified, 50);
}

// 10,000 re-signed (checksums recomputed) metadata mutations of a package with host
// code: each is refused by the verifier or by the host-code check before any of it
// runs, and nothing crashes.
TEST(Package, ResignedMutationsNeverRunHostCode) {
  std::string mine = testKeyFile("mutations.key", 3);
  ASSERT_EQ(::setenv("DLC_HOST_KEY_FILE", mine.c_str(), 1), 0);
  auto bytes = samplePackage();
  uint64_t metaSize;
  std::memcpy(&metaSize, bytes.data() + 24, 8);
  std::mt19937 rng(11);
  int refusedHostCode = 0, refusedPackage = 0;
  for (int trial = 0; trial < 10000; ++trial) {
    auto bad = bytes;
    for (int k = 0; k < 1 + trial % 3; ++k)
      bad[pkg::kHeaderSize + rng() % metaSize] ^= static_cast<uint8_t>(1 + rng() % 255);
    resign(bad);
    auto pf = pkg::PackageFile::fromBytes(bad.data(), bad.size(), "mutated.dlc");
    if (!pf.ok()) {
      ++refusedPackage;
      continue;
    }
    rt::SessionOptions so;
    so.device = rt::DeviceKind::Emu;
    so.emuThreads = 1;
    auto s = rt::Session::create(std::shared_ptr<const pkg::PackageFile>(*pf), so);
    if (!s.ok() && s.status().message().find("carries host code") != std::string::npos) {
      ++refusedHostCode;
    } else if (s.ok()) { // a change that left no kernel to run: nothing of the package's runs
      EXPECT_EQ((*pf)->meta().kernels() ? (*pf)->meta().kernels()->size() : 0, 0u);
    }
  }
  ::unsetenv("DLC_HOST_KEY_FILE");
  EXPECT_GT(refusedHostCode, 1000);
  EXPECT_GT(refusedPackage, 1000);
}

// A writer killed between mkstemp and rename leaves `out.tmp-XXXXXX`; the next write of
// `out` removes such files once they are ten minutes stale, and leaves fresh ones (a
// concurrent writer's) alone.
TEST(Files, StaleTemporariesAreRemovedByTheNextWriter) {
  std::string dir = ::testing::TempDir() + "/dlc-stale-tmp";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::string out = dir + "/model.dlcpkg";
  std::string stale = out + ".tmp-abc123", fresh = out + ".tmp-def456",
              other = dir + "/other.tmp-abc123";
  for (const std::string &p : {stale, fresh, other})
    std::ofstream(p) << "partial";
  struct timespec times[2] = {{::time(nullptr) - 3600, 0}, {::time(nullptr) - 3600, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, stale.c_str(), times, 0), 0);
  ASSERT_EQ(::utimensat(AT_FDCWD, other.c_str(), times, 0), 0);
  ASSERT_TRUE(dlc::writeFileAtomically(out, "x", 1).isOk());
  EXPECT_FALSE(std::filesystem::exists(stale));
  EXPECT_TRUE(std::filesystem::exists(fresh)) << "a live writer's temporary was removed";
  EXPECT_TRUE(std::filesystem::exists(other)) << "another file's temporary was removed";
  EXPECT_TRUE(dlc::sameFile(out, out));
  EXPECT_FALSE(dlc::sameFile(out, fresh));
  EXPECT_FALSE(dlc::refuseOverwrite(out, "-o", {{out, "model"}}).isOk());
  EXPECT_TRUE(dlc::refuseOverwrite(out, "-o", {{fresh, "model"}, {"", "data"}}).isOk());
}

// A set of outputs is all or nothing: when one cannot be renamed into place, a new one
// already in place is removed again and a replaced one is restored.
TEST(Files, CommitAllRollsBackNewFiles) {
  std::string dir = ::testing::TempDir() + "/dlc-commit-all";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::string a = dir + "/a.npy", b = dir + "/b.npy", old = dir + "/old.npy";
  std::ofstream(old) << "before";
  auto refused = dlc::AtomicFile::open(dir);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("it is a directory"), std::string::npos);
  std::vector<dlc::AtomicFile> files;
  for (const std::string &p : {old, a, b}) {
    auto f = dlc::AtomicFile::open(p);
    ASSERT_TRUE(f.ok()) << f.status().message();
    ASSERT_TRUE(f->write("new", 3).isOk());
    files.push_back(std::move(*f));
  }
  std::filesystem::create_directories(b + "/in-the-way"); // after the open: the rename fails
  EXPECT_FALSE(dlc::commitAll(files).isOk());
  EXPECT_FALSE(std::filesystem::exists(a)) << "a new output was left behind";
  std::string kept;
  std::getline(std::ifstream(old), kept);
  EXPECT_EQ(kept, "before") << "an output that existed before was not restored";
  EXPECT_TRUE(std::filesystem::is_directory(b));
  size_t entries = 0;
  for (const auto &e : std::filesystem::directory_iterator(dir))
    entries += e.path().filename().string().find(".tmp-") == std::string::npos;
  EXPECT_EQ(entries, 2u) << "old.npy and b.npy only";
  for (const auto &e : std::filesystem::directory_iterator(dir))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos)
        << "left behind: " << e.path();
}

// A cuDNN convolution step whose extents multiply past 2^64 (three spatial dimensions
// of 2^31, 2^31 and 8 over 2^31 batches and channels: 2^128 bytes, which 128-bit
// arithmetic wraps to 0) is refused: the emu backend's host convolution would read and
// write far outside its buffers.
TEST(Package, ACudnnConvolutionWhoseSizesOverflowIsRejected) {
  std::string w;
  for (int i = 0; i < 64; ++i)
    w += (i ? ", " : "") + std::to_string((i % 7 - 3) / 8.0);
  auto g = ir::parseGraph("graph @g(%x: f16[1,8,2,2,2]) -> (\"y\": f16[1,2,2,2,8]) {\n"
                          "  %w = const f16[8,1,1,1,8] dense<[" +
                          w +
                          "]>\n"
                          "  %t = Transpose(%x) {perm = [0, 2, 3, 4, 1]} : f16[1,2,2,2,8]\n"
                          "  %y = Conv(%t, %w) {channels_last = 1} : f16[1,2,2,2,8]\n"
                          "  return %y\n}\n");
  ASSERT_TRUE(bool(g)) << llvm::toString(g.takeError());
  codegen::CompileOptions co;
  co.targets = {"emu"};
  auto bytes = codegen::compileGraph(**g, co);
  ASSERT_TRUE(bool(bytes)) << llvm::toString(bytes.takeError());
  auto pf = pkg::PackageFile::fromBytes(bytes->data(), bytes->size(), "conv3d.dlc");
  ASSERT_TRUE(pf.ok()) << pf.status().message();
  const pkg::CudnnConv *conv = nullptr;
  for (const pkg::Step *s : *(*pf)->meta().steps())
    if (s->op_as_CudnnConv())
      conv = s->op_as_CudnnConv();
  ASSERT_NE(conv, nullptr) << "the test needs the cuDNN alternative";
  auto bad = *bytes;
  auto at = [&](const void *p) { return static_cast<const uint8_t *>(p) - (*pf)->data(); };
  auto put = [&](ptrdiff_t offset, int64_t v) { std::memcpy(bad.data() + offset, &v, 8); };
  const auto *table = reinterpret_cast<const flatbuffers::Table *>(conv);
  for (auto field : {pkg::CudnnConv::VT_N, pkg::CudnnConv::VT_C, pkg::CudnnConv::VT_K})
    put(at(table->GetAddressOf(field)), int64_t(1) << 31);
  for (const flatbuffers::Vector<int64_t> *v :
       {conv->spatial_in(), conv->spatial_out(), conv->kernel()}) {
    ASSERT_EQ(v->size(), 3u);
    put(at(v->data()), int64_t(1) << 31);
    put(at(v->data()) + 8, int64_t(1) << 31);
    put(at(v->data()) + 16, 8);
  }
  resign(bad);
  auto mutated = pkg::PackageFile::fromBytes(bad.data(), bad.size(), "overflow.dlc");
  ASSERT_FALSE(mutated.ok());
  EXPECT_NE(mutated.status().message().find("x reaches past the end of buffer"), std::string::npos)
      << mutated.status().message();
}
