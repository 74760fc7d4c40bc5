// An If with a run-time condition, as the importer lowers it: both branches, and
// y = Where(c, then, else). The steps that feed only one side are predicated on the
// condition (Lowering::predicates): the session reads c back and runs one side. The
// expected values are worked out here (a matrix product and a softmax).
#include "RuntimeTestUtil.h"
#include "dlc/package/Package.h"
#include "dlc/runtime/Runtime.h"

#include <cmath>
#include <gtest/gtest.h>

namespace {

using namespace dlc;

constexpr int kRows = 4, kCols = 8;

std::string ifGraph(const std::vector<float> &w) {
  std::string dense;
  for (size_t i = 0; i < w.size(); ++i)
    dense += (i ? ", " : "") + std::to_string(w[i]);
  return "graph @branches(%x: f32[4,8], %c: bool[]) -> (\"y\": f32[4,8]) {\n"
         "  %w = const f32[8,8] dense<[" +
         dense +
         "]>\n"
         "  %a = MatMul(%x, %w) : f32[4,8]\n"
         "  %r = Relu(%a) : f32[4,8]\n"
         "  %b = Softmax(%x) {axis = -1} : f32[4,8]\n"
         "  %y = Where(%c, %r, %b) : f32[4,8]\n"
         "  return %y\n}\n";
}

} // namespace

TEST(ControlFlow, RunTimeIfRunsOneSide) {
  std::vector<float> w(kCols * kCols), x(kRows * kCols);
  for (size_t i = 0; i < w.size(); ++i)
    w[i] = 0.01f * static_cast<float>((i * 7) % 23) - 0.1f;
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = 0.1f * static_cast<float>((i * 5) % 17) - 0.8f;
  std::vector<uint8_t> bytes = test::compileIRForEmu(ifGraph(w).c_str(), "if.ir", "fuse");
  ASSERT_FALSE(bytes.empty());
  auto pf = pkg::PackageFile::fromBytes(bytes.data(), bytes.size(), "if.dlc");
  ASSERT_TRUE(pf.ok()) << pf.status().message();

  // The GEMM and ReLU run when c is true, the softmax when it is false; the Where
  // (a kernel of its own) always.
  int whenTrue = 0, whenFalse = 0, always = 0;
  for (const pkg::Step *st : *(*pf)->meta().steps()) {
    if (!st->predicate())
      ++always;
    else
      ++(st->when() ? whenTrue : whenFalse);
  }
  EXPECT_GE(whenTrue, 1);
  EXPECT_EQ(whenFalse, 1);
  EXPECT_EQ(always, 1);

  rt::SessionOptions so;
  so.device = rt::DeviceKind::Emu;
  so.profile = true;
  auto s = rt::Session::create(*pf, so);
  ASSERT_TRUE(s.ok()) << s.status().message();
  rt::HostTensor xt;
  xt.dtype = pkg::DType::F32;
  xt.shape = {kRows, kCols};
  xt.data.resize(x.size() * 4);
  std::memcpy(xt.data.data(), x.data(), xt.data.size());
  ASSERT_FALSE((*s)->setInput("x", xt));
  for (bool c : {true, false, true}) {
    rt::HostTensor ct;
    ct.dtype = pkg::DType::Bool;
    ct.data = {static_cast<uint8_t>(c)};
    ASSERT_FALSE((*s)->setInput("c", ct));
    ASSERT_FALSE((*s)->run());
    auto y = (*s)->getOutput("y");
    ASSERT_TRUE(y.ok()) << y.status().message();
    const float *got = reinterpret_cast<const float *>(y->data.data());
    for (int r = 0; r < kRows; ++r) {
      float mx = -INFINITY, sum = 0;
      for (int k = 0; k < kCols; ++k)
        mx = std::max(mx, x[r * kCols + k]);
      for (int k = 0; k < kCols; ++k)
        sum += std::exp(x[r * kCols + k] - mx);
      for (int j = 0; j < kCols; ++j) {
        float a = 0;
        for (int k = 0; k < kCols; ++k)
          a += x[r * kCols + k] * w[k * kCols + j];
        float expected = c ? std::max(a, 0.0f) : std::exp(x[r * kCols + j] - mx) / sum;
        EXPECT_NEAR(got[r * kCols + j], expected, 1e-5f) << "c=" << c << " at " << r << "," << j;
      }
    }
    // Only one side ran: the profile lists the Where and that side's steps.
    size_t expectedSteps = 1 + static_cast<size_t>(c ? whenTrue : whenFalse);
    EXPECT_EQ((*s)->lastProfile().size(), expectedSteps) << "c=" << c;
  }
}
