// The compiler as a library (dlc/driver): compile() from an options struct to a
// package that runs, validate()'s refusals, parseInputShape, inspect() of what
// compile() wrote, exportOnnx() of a package without a source model, and the
// runtime's bench statistics. Expected values are worked out by hand.
#include "dlc/driver/Compile.h"
#include "dlc/driver/Export.h"
#include "dlc/driver/Inspect.h"
#include "dlc/package/Package.h"
#include "dlc/runtime/Runtime.h"

#include "llvm/Support/FileSystem.h"

#include <cstring>
#include <fstream>
#include <gtest/gtest.h>
#include <set>
#include <unistd.h>

using namespace dlc;

namespace {

// y = Relu(x) + 1 and z = x * 2 over f32[4]: three nodes (constants are values).
const char *kModel = R"(graph @small(%x: f32[4]) -> ("y": f32[4], "z": f32[4]) {
  %one = const f32[] dense<[1.0]>
  %two = const f32[] dense<[2.0]>
  %r = Relu(%x) : f32[4]
  %y = Add(%r, %one) : f32[4]
  %z = Mul(%x, %two) : f32[4]
  return %y, %z
}
)";

std::string tempPath(const std::string &name) {
  return testing::TempDir() + "/dlc_driver_" + std::to_string(::getpid()) + "_" + name;
}

std::string writeModel(const std::string &name, const char *text) {
  std::string path = tempPath(name);
  std::ofstream(path) << text;
  return path;
}

driver::CompileOptions emuOptions(const std::string &model, const std::string &output) {
  driver::CompileOptions o;
  o.model = model;
  o.output = output;
  o.targets = {"emu"};
  o.useCache = false;
  return o;
}

std::vector<float> floats(const rt::HostTensor &t) {
  std::vector<float> v(t.data.size() / sizeof(float));
  std::memcpy(v.data(), t.data.data(), t.data.size());
  return v;
}

} // namespace

TEST(Driver, CompileWritesAPackageThatRuns) {
  std::string model = writeModel("small.ir", kModel), out = tempPath("small.dlc");
  driver::CompileOptions o = emuOptions(model, out);
  std::vector<std::string> log;
  o.log = [&](const std::string &line) { log.push_back(line); };
  auto r = driver::compile(o);
  ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
  uint64_t size = 0;
  ASSERT_FALSE(llvm::sys::fs::file_size(out, size));
  EXPECT_EQ(r->outputBytes, size);
  EXPECT_GE(r->report.kernels, 1u);
  EXPECT_FALSE(r->training);
  ASSERT_GE(log.size(), 2u);
  EXPECT_EQ(log[0].rfind("parse " + model + ": 3 nodes", 0), 0u) << log[0];
  EXPECT_EQ(log[1].rfind("passes -O2: ", 0), 0u) << log[1];

  auto pf = pkg::PackageFile::load(out);
  ASSERT_TRUE(bool(pf)) << pf.status().message();
  rt::SessionOptions so;
  so.device = rt::DeviceKind::Emu;
  auto s = rt::Session::create(*pf, so);
  ASSERT_TRUE(bool(s)) << s.status().message();
  rt::HostTensor x;
  x.dtype = pkg::DType::F32;
  x.shape = {4};
  std::vector<float> xs = {-1.5f, 0.f, 2.f, 3.25f};
  x.data.resize(16);
  std::memcpy(x.data.data(), xs.data(), 16);
  ASSERT_FALSE((*s)->setInput("x", x));
  ASSERT_FALSE((*s)->run());
  auto y = (*s)->getOutput("y"), z = (*s)->getOutput("z");
  ASSERT_TRUE(y && z);
  EXPECT_EQ(floats(*y), (std::vector<float>{1.f, 1.f, 3.f, 4.25f}));
  EXPECT_EQ(floats(*z), (std::vector<float>{-3.f, 0.f, 4.f, 6.5f}));

  // inspect() of the same package: its size, and the kernels compile() reported.
  driver::Report rep = driver::inspect(**pf);
  EXPECT_EQ(rep.packageBytes, size);
  EXPECT_EQ(rep.kernels.size(), r->report.kernels);
  llvm::json::Value json = driver::toJson(rep);
  ASSERT_TRUE(json.getAsObject());
  EXPECT_EQ(json.getAsObject()->getInteger("unique_kernels"),
            static_cast<int64_t>(r->report.kernels));

  // An inference package holds no source model to export.
  auto e = driver::exportOnnx(**pf, {}, "the test");
  ASSERT_FALSE(bool(e));
  EXPECT_NE(llvm::toString(e.takeError()).find("holds no source model"), std::string::npos);
  std::remove(out.c_str());
  std::remove(model.c_str());
}

TEST(Driver, AFailedCompileWritesNothing) {
  std::string model = writeModel("bad.ir", "graph @bad(%x: f32[4]) -> (\"y\": f32[4]) {\n"
                                           "  %y = Frobnicate(%x) : f32[4]\n  return %y\n}\n");
  std::string out = tempPath("bad.dlc");
  auto r = driver::compile(emuOptions(model, out));
  ASSERT_FALSE(bool(r));
  EXPECT_NE(llvm::toString(r.takeError()).find("Frobnicate"), std::string::npos);
  EXPECT_FALSE(llvm::sys::fs::exists(out));
  std::remove(model.c_str());
}

TEST(Driver, AccuracyCheckReportsBeforeThePrecisionPass) {
  std::string model = writeModel("acc.ir", kModel), out = tempPath("acc.dlc");
  driver::CompileOptions o = emuOptions(model, out);
  o.precision = passes::PrecisionOptions{};
  driver::AccuracyCheck check;
  int reports = 0;
  size_t outputs = 0;
  check.report = [&](const passes::AccuracyReport &r, const passes::AccuracyOptions &) {
    ++reports;
    outputs = r.outputs.size();
  };
  o.checkAccuracy = check;
  auto r = driver::compile(o);
  ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
  EXPECT_EQ(reports, 1);
  EXPECT_EQ(outputs, 2u); // y and z
  std::remove(out.c_str());
  std::remove(model.c_str());
}

TEST(Driver, ParseInputShape) {
  auto s = driver::parseInputShape("x=1..32,3,224");
  ASSERT_TRUE(bool(s)) << llvm::toString(s.takeError());
  EXPECT_EQ(s->name, "x");
  EXPECT_EQ(s->min, (std::vector<int64_t>{1, 3, 224}));
  EXPECT_EQ(s->max, (std::vector<int64_t>{32, 3, 224}));
  EXPECT_TRUE(s->ranged());
  for (const char *bad : {"x", "=1,2", "x=4..2", "x=0..3", "x=a"}) {
    auto b = driver::parseInputShape(bad);
    EXPECT_FALSE(bool(b)) << bad;
    if (!b)
      llvm::consumeError(b.takeError());
  }
}

TEST(Driver, ValidateRefusesWhatNeedsNoModel) {
  auto error = [](const driver::CompileOptions &o) {
    llvm::Error e = driver::validate(o);
    return e ? llvm::toString(std::move(e)) : std::string();
  };
  driver::CompileOptions o = emuOptions("m.onnx", "m.dlc");
  EXPECT_EQ(error(o), "");
  o.shapeRanges = {{"x", {1, 3}, {8, 3}}};
  EXPECT_EQ(error(o), "");
  o.training = passes::TrainingOptions{};
  EXPECT_NE(error(o).find("--train takes one shape per input"), std::string::npos);
  o.training.reset();
  o.optShapes = {{"x", {9, 3}, {9, 3}}};
  EXPECT_NE(error(o).find("dimension 0 is 9, outside 1..8"), std::string::npos);
  o.optShapes.clear();
  o.maxShapeVariants = 7; // 1..8 is 8 shapes
  EXPECT_NE(error(o).find("span more than 7 shapes"), std::string::npos);
  o.maxShapeVariants = 8;
  EXPECT_EQ(error(o), "");
  o.emit = driver::Emit::Executable;
  EXPECT_NE(error(o).find("dlc-exe-stub"), std::string::npos);
  o = emuOptions("m.onnx", "m.dlc");
  o.checkAccuracy = driver::AccuracyCheck{};
  EXPECT_NE(error(o).find("--check-accuracy needs --fp16 or --bf16"), std::string::npos);
}

TEST(Driver, TrainingOptionsAreChecked) {
  passes::TrainingOptions t;
  EXPECT_FALSE(bool(passes::validateTrainingOptions(t)));
  t.momentum = 1.0;
  llvm::Error e = passes::validateTrainingOptions(t);
  ASSERT_TRUE(bool(e));
  EXPECT_EQ(llvm::toString(std::move(e)), "--momentum must be a number in [0, 1), got 1");
  t.momentum = 0.9;
  t.lr = -0.5;
  e = passes::validateTrainingOptions(t);
  ASSERT_TRUE(bool(e));
  EXPECT_EQ(llvm::toString(std::move(e)), "--lr must be a number >= 0, got -0.5");
}

TEST(Driver, BenchStatsAreNearestRank) {
  // Sorted: 1 2 3 4 5 6 7 8 9 10; rank ceil(q * 10): median 5th, p90 9th, p99 10th.
  rt::BenchStats s = rt::benchStats({7, 3, 10, 1, 9, 2, 8, 4, 6, 5});
  EXPECT_EQ(s.min, 1);
  EXPECT_EQ(s.median, 5);
  EXPECT_EQ(s.p90, 9);
  EXPECT_EQ(s.p99, 10);
  EXPECT_EQ(s.max, 10);
  rt::BenchStats one = rt::benchStats({2.5});
  EXPECT_EQ(one.min, 2.5);
  EXPECT_EQ(one.p99, 2.5);
}

// --tf32: FP32 conv nets go channels-last (auto layout) and their convolutions run on
// tensor cores (conv_fprop_mma in TF32); without it they stay NCHW on conv_igemm.
TEST(Driver, Tf32MovesFp32ConvNetsToTensorCores) {
  const char *net = R"(graph @net(%x: f32[1,8,6,6], %w: f32[16,8,3,3]) -> ("y": f32[1,16,6,6]) {
  %c = Conv(%x, %w) {pads = [1, 1, 1, 1]} : f32[1,16,6,6]
  %y = Relu(%c) : f32[1,16,6,6]
  return %y
}
)";
  std::string model = writeModel("net.ir", net);
  for (bool tf32 : {false, true}) {
    SCOPED_TRACE(tf32 ? "tf32" : "fp32");
    std::string out = tempPath(tf32 ? "net_tf32.dlc" : "net_fp32.dlc");
    driver::CompileOptions o = emuOptions(model, out);
    o.tf32 = tf32;
    auto r = driver::compile(o);
    ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
    auto pf = pkg::PackageFile::load(out);
    ASSERT_TRUE(pf.ok()) << pf.status().message();
    std::set<std::string> used;
    for (const pkg::Kernel *k : *(*pf)->meta().kernels())
      used.insert(k->template_name()->str());
    EXPECT_EQ(used.count("dlc::conv_fprop_mma"), tf32 ? 1u : 0u);
    EXPECT_EQ(used.count("dlc::conv_igemm"), tf32 ? 0u : 1u);
    llvm::sys::fs::remove(out);
  }
}

// TF32 by default (unset): FP32 conv nets go channels-last and each convolution takes
// the kernel the cost model prices faster: TF32 tensor cores for a 64-channel 3x3 layer
// at batch 8, the CUDA-core implicit GEMM for an 8-channel one at 6x6; the report names
// the one TF32 layer. --no-tf32 (false) keeps both on CUDA cores in NCHW.
TEST(Driver, DefaultTf32IsChosenPerConvolution) {
  const char *net =
      R"(graph @net(%x: f32[8,64,28,28], %w: f32[64,64,3,3], %s: f32[1,8,6,6], %v: f32[16,8,3,3]) -> ("y": f32[8,64,28,28], "z": f32[1,16,6,6]) {
  %c = Conv(%x, %w) {pads = [1, 1, 1, 1]} : f32[8,64,28,28] loc("big")
  %y = Relu(%c) : f32[8,64,28,28]
  %d = Conv(%s, %v) {pads = [1, 1, 1, 1]} : f32[1,16,6,6] loc("small")
  %z = Relu(%d) : f32[1,16,6,6]
  return %y, %z
}
)";
  std::string model = writeModel("pernet.ir", net);
  for (bool strict : {false, true}) {
    SCOPED_TRACE(strict ? "--no-tf32" : "default");
    std::string out = tempPath(strict ? "pernet_strict.dlc" : "pernet.dlc");
    driver::CompileOptions o = emuOptions(model, out);
    if (strict)
      o.tf32 = false;
    auto r = driver::compile(o);
    ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
    EXPECT_EQ(r->report.tf32Layers,
              strict ? std::vector<std::string>{} : std::vector<std::string>{"big"});
    auto pf = pkg::PackageFile::load(out);
    ASSERT_TRUE(pf.ok()) << pf.status().message();
    std::map<std::string, int> used;
    for (const pkg::Kernel *k : *(*pf)->meta().kernels())
      ++used[k->template_name()->str()];
    EXPECT_EQ(used["dlc::conv_fprop_mma"], strict ? 0 : 1);
    EXPECT_EQ(used["dlc::conv_igemm"], strict ? 2 : 1);
    llvm::sys::fs::remove(out);
  }
}
