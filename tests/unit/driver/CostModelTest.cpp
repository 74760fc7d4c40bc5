// The cost model of `dlc inspect` on packages compiled here for sm_80 and sm_90: every
// launch is priced from its decoded SASS (none at peak), no launch is modeled faster
// than its own issue bound or than the arithmetic peak that applies to it, and a GPU
// profile file replaces a built-in profile.
#include "dlc/codegen/Compiler.h"
#include "dlc/driver/Compile.h"
#include "dlc/driver/Inspect.h"
#include "dlc/runtime/Calibrate.h"

#include "llvm/Support/FileSystem.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <gtest/gtest.h>
#include <tuple>
#include <unistd.h>

using namespace dlc;

namespace {

std::string tempPath(const std::string &name) {
  return testing::TempDir() + "/dlc_cost_" + std::to_string(::getpid()) + "_" + name;
}

// Convolutions (a 3x3 and a 1x1), softmax over rows, a layer norm: tensor-core kernels
// in FP16, reductions with several passes over their rows.
std::string dense(size_t n, float step) {
  std::string hex = "0x";
  char buf[9];
  for (size_t i = 0; i < n; ++i) {
    float v = step * static_cast<float>(static_cast<int>(i % 7) - 3);
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    for (int b = 0; b < 4; ++b) { // little-endian bytes
      std::snprintf(buf, sizeof buf, "%02X", (bits >> (8 * b)) & 0xff);
      hex += buf;
    }
  }
  return hex;
}

const std::string kModel =
    R"(graph @net(%x: f32[4,16,16,16]) -> ("y": f32[4,32,16,16], "s": f32[128,256]) {
  %w = const f32[32,16,3,3] dense<)" +
    dense(32 * 16 * 9, 0.01f) + R"(>
  %b = const f32[32] dense<)" +
    dense(32, 0.1f) + R"(>
  %c = Conv(%x, %w, %b) {pads = [1, 1, 1, 1]} : f32[4,32,16,16]
  %y = Relu(%c) : f32[4,32,16,16]
  %r = Reshape(%y) {shape = [128, 256]} : f32[128,256]
  %s = Softmax(%r) {axis = -1} : f32[128,256]
  return %y, %s
}
)";

std::shared_ptr<pkg::PackageFile> compileModel(bool fp16, std::vector<std::string> targets = {
                                                              "sm_80", "sm_90"}) {
  std::string model = tempPath("net.ir"),
              out = tempPath((fp16 ? "net16" : "net32") + targets.front() + ".dlc");
  std::ofstream(model) << kModel;
  driver::CompileOptions o;
  o.model = model;
  o.output = out;
  o.targets = targets;
  o.useCache = false;
  if (fp16)
    o.precision = passes::PrecisionOptions{};
  else
    o.tf32 = false; // strict FP32: CUDA-core kernels
  llvm::Expected<driver::CompileResult> r = driver::compile(o);
  EXPECT_TRUE(static_cast<bool>(r)) << (r ? "" : llvm::toString(r.takeError()));
  if (!r)
    return nullptr;
  auto pf = pkg::PackageFile::load(out);
  EXPECT_TRUE(pf.ok()) << pf.status().message();
  return pf.ok() ? *pf : nullptr;
}

} // namespace

TEST(CostModel, LaunchesAreBoundedByTheirCodeAndThePeak) {
  for (bool fp16 : {false, true}) {
    SCOPED_TRACE(fp16 ? "fp16" : "fp32");
    auto pf = compileModel(fp16);
    ASSERT_TRUE(pf);
    driver::PackageCost c = driver::costOf(*pf);
    ASSERT_EQ(c.gpus.size(), 2u);
    EXPECT_EQ(c.gpus[0].name, "A100");
    EXPECT_EQ(c.gpus[1].name, "H100");
    EXPECT_TRUE(c.decodeErrors.empty());
    size_t launches = 0, tensorLaunches = 0;
    for (size_t i = 0; i < c.gpus.size(); ++i) {
      const codegen::GpuModel &g = c.gpus[i];
      EXPECT_EQ(c.peakPriced[i], 0u) << g.name;
      for (const driver::StepCost &sc : c.steps) {
        if (!sc.runs[i] || sc.kind != "launch")
          continue;
        ++launches;
        const codegen::Bounds &b = sc.bounds[i];
        EXPECT_TRUE(b.limit == "issue" || b.limit == "memory" || b.limit == "latency") << b.limit;
        // Never faster than its own bounds, plus one graph node.
        EXPECT_GE(sc.micros[i], b.issue + g.graphNodeMicros - 1e-9) << sc.node;
        EXPECT_GE(sc.micros[i], b.memory + g.graphNodeMicros - 1e-9) << sc.node;
        EXPECT_GE(sc.micros[i], b.latency + g.graphNodeMicros - 1e-9) << sc.node;
        // Never faster than the arithmetic peak that applies, nor the DRAM bandwidth.
        double peak = sc.tensor ? g.tensorFlops * g.mmaSyncFraction : g.fp32Flops;
        EXPECT_GE(b.issue, 1e6 * sc.flops / peak * (1 - 1e-9)) << sc.node;
        EXPECT_GE(b.memory,
                  1e6 * double(sc.bytes()) / (g.dramBytesPerSecond * g.dramAchievable) * (1 - 1e-9))
            << sc.node;
        tensorLaunches += sc.tensor;
        // The kernel's facts are there for this architecture, and its main loop
        // holds the tensor-core instructions when it runs on tensor cores.
        const pkg::Kernel *k = pf->meta().kernels()->Get(static_cast<uint32_t>(sc.kernel));
        const codegen::sass::KernelFacts *f = c.factsOf(g.arch, k->symbol()->str());
        ASSERT_NE(f, nullptr) << k->name()->str();
        if (sc.tensor) {
          ASSERT_NE(f->main(), nullptr);
          EXPECT_GT(f->main()->of(codegen::sass::Class::Tensor), 0);
        }
      }
    }
    EXPECT_GT(launches, 0u);
    EXPECT_EQ(tensorLaunches > 0, fp16);
  }
}

TEST(CostModel, SoftmaxPaysForEachPassOverItsRows) {
  auto pf = compileModel(false);
  ASSERT_TRUE(pf);
  driver::PackageCost c = driver::costOf(*pf);
  const codegen::GpuModel &h100 = c.gpus[1];
  bool found = false;
  for (const driver::StepCost &sc : c.steps) {
    if (sc.kind != "launch")
      continue;
    const pkg::Kernel *k = pf->meta().kernels()->Get(static_cast<uint32_t>(sc.kernel));
    if (k->name()->str().find("softmax") == std::string::npos)
      continue;
    found = true;
    const codegen::sass::KernelFacts *f = c.factsOf("sm_90", k->symbol()->str());
    ASSERT_NE(f, nullptr);
    // The kernel reads its row more than once (max, then sum, then the output)...
    EXPECT_GE(f->loadLoops, 2);
    // ... and the memory bound charges the re-reads (at L2 bandwidth: 128 KB fits).
    double once = 1e6 * double(sc.bytes()) / (h100.dramBytesPerSecond * h100.dramAchievable);
    double rereads = 1e6 * (f->loadLoops - 1) * double(sc.bytesRead) / h100.l2BytesPerSecond;
    EXPECT_NEAR(sc.bounds[1].memory, once + rereads, 1e-9);
  }
  EXPECT_TRUE(found);
}

TEST(CostModel, AProfileFileReplacesTheBuiltInOne) {
  std::string path = tempPath("h100.json");
  std::ofstream(path) << R"({"name": "H100", "arch": "sm_90", "source": "test",
                             "dram_bytes_per_second": 1e12, "clock_hz": 1e9})";
  llvm::Expected<codegen::GpuModel> g = codegen::loadGpuProfile(path);
  ASSERT_TRUE(static_cast<bool>(g)) << llvm::toString(g.takeError());
  EXPECT_EQ(g->source, "test");
  EXPECT_EQ(g->dramBytesPerSecond, 1e12);
  EXPECT_EQ(g->sms, 132); // from the built-in H100
  // The written profile reads back the same.
  std::string again = tempPath("again.json");
  std::ofstream(again) << codegen::gpuProfileJson(*g);
  llvm::Expected<codegen::GpuModel> g2 = codegen::loadGpuProfile(again);
  ASSERT_TRUE(static_cast<bool>(g2));
  EXPECT_EQ(codegen::gpuProfileJson(*g2), codegen::gpuProfileJson(*g));

  auto pf = compileModel(false);
  ASSERT_TRUE(pf);
  driver::PackageCost slow = driver::costOf(*pf, -1, {*g});
  driver::PackageCost fast = driver::costOf(*pf, -1, {*codegen::gpuModelNamed("H100")});
  EXPECT_GT(slow.micros[0], fast.micros[0]);

  auto refused = [&](const char *text, const char *why) {
    std::ofstream(path) << text;
    llvm::Expected<codegen::GpuModel> bad = codegen::loadGpuProfile(path);
    ASSERT_FALSE(static_cast<bool>(bad)) << text;
    EXPECT_NE(llvm::toString(bad.takeError()).find(why), std::string::npos) << text;
  };
  refused("[1, 2]", "not a JSON object");
  refused("{\"name\": \"X\"}", "needs \"name\" and \"arch\"");
  refused("{\"name\": \"X\", \"arch\": \"sm_75\"}", "no built-in profile");
  refused("{\"name\": \"X\", \"arch\": \"sm_90\", \"sms\": -3}",
          "\"sms\" must be an integer number from 1 to 100000");
  refused("{\"name\": \"X\", \"arch\": \"sm_90\", \"sms\": 1e18}", "\"sms\" must be an integer");
  refused("{\"name\": \"X\", \"arch\": \"sm_90\", \"sms\": 13.5}", "\"sms\" must be an integer");
  refused("{\"name\": \"X\", \"arch\": \"sm_90\", \"clock_hz\": 1e-300}",
          "\"clock_hz\" must be a number from 1e+07");
  refused("{\"name\": \"X\", \"arch\": \"sm_90\", \"hmma_per_clock\": 0}",
          "\"hmma_per_clock\" must be a number");
  refused("{\"name\": \"X\", \"arch\": \"sm_90\", \"clock\": 1}", "unknown field \"clock\"");
  refused("{\"name\": ", "not JSON");
  llvm::sys::fs::remove(path);
  llvm::sys::fs::remove(again);
}

TEST(CostModel, ACalibratedProfileSetsTheMeasuredFractions) {
  rt::Calibration c;
  c.device = "NVIDIA H100 80GB HBM3";
  c.ccMajor = 9;
  c.sms = 132;
  c.clockHz = 1.755e9;
  c.ffmaPerClock = 3.9;
  c.hfma2PerClock = 3.8;
  c.hmmaPerClock = 0.5;
  c.dramBytesPerSecond = 2.9e12;
  c.l2BytesPerSecond = 6.1e12;
  c.l2LatencyCycles = 270;
  c.dramLatencyCycles = 820;
  c.launchMicros = 2.5;
  c.graphNodeMicros = 0.8;
  c.runOverheadMicros = 9.5;
  std::string path = tempPath("calibrated.json");
  std::ofstream(path) << rt::calibrationProfileJson(c, "H100");
  llvm::Expected<codegen::GpuModel> g = codegen::loadGpuProfile(path);
  llvm::sys::fs::remove(path);
  ASSERT_TRUE(static_cast<bool>(g)) << llvm::toString(g.takeError());
  EXPECT_EQ(g->source, "dlc calibrate on NVIDIA H100 80GB HBM3");
  EXPECT_DOUBLE_EQ(g->clockHz, 1.755e9);
  EXPECT_DOUBLE_EQ(g->fp32PerClock, 3.9);
  // 0.5 HMMA.16816 per clock per SM at 1.755 GHz on 132 SMs, of the data sheet's 989 TFLOP/s.
  EXPECT_NEAR(g->mmaSyncFraction, 0.5 * 132 * 1.755e9 * 4096 / 989e12, 1e-6);
  EXPECT_NEAR(g->hmmaPerClock(), 0.5, 1e-6);
  EXPECT_NEAR(g->dramAchievable, 2.9e12 / 3350e9, 1e-6);
  EXPECT_DOUBLE_EQ(g->graphNodeMicros, 0.8);
  EXPECT_DOUBLE_EQ(g->dramLatencyCycles, 820);
  EXPECT_DOUBLE_EQ(g->runOverheadMicros, 9.5);
}

TEST(CostModel, WithoutACubinTheModelReadsThePtx) {
  auto pf = compileModel(true, {"compute_80"});
  ASSERT_TRUE(pf);
  driver::PackageCost c = driver::costOf(*pf);
  size_t launches = 0;
  for (const driver::StepCost &sc : c.steps)
    launches += sc.kind == "launch" && sc.runs[1];
  EXPECT_GT(launches, 0u);
  EXPECT_EQ(c.peakPriced[1], 0u);
  EXPECT_EQ(c.ptxPriced[1], launches);
  ASSERT_EQ(c.facts.count("compute_80"), 1u);
  // The tensor-core convolution's PTX main loop holds its mma.sync, its ldmatrix and its
  // 16-byte cp.async copies.
  bool tensor = false;
  for (const auto &[symbol, f] : c.facts.at("compute_80"))
    if (symbol.find("conv_fprop_mma") != std::string::npos && f.main()) {
      const codegen::sass::Mix &m = *f.main();
      tensor |= m.of(codegen::sass::Class::Tensor) > 0 && m.of(codegen::sass::Class::Ldsm) > 0 &&
                m.of(codegen::sass::Class::CpAsync) > 0 &&
                m.cpAsyncBytes == 16 * m.of(codegen::sass::Class::CpAsync);
    }
  EXPECT_TRUE(tensor);
}

// The layout pass's choice for a MatMul whose epilogue cuBLASLt cannot apply follows
// the model. With the built-in profiles it stays on cuBLASLt (the library at 0.70-0.85
// of the tensor peak, mma.sync at most 0.65 of it on an H100) plus a kernel for the
// epilogue, small products and BERT-large's FFN at 8192 tokens alike. A profile whose
// library reached 0.3 of peak moves the large product to the implicit GEMM (its tiles
// are full there) and keeps the small one (128 rows: half-empty tiles, low occupancy).
TEST(CostModel, AnUnfusableGemmEpilogueRunsOnTheImplicitGemmWhereThatIsFaster) {
  const std::vector<std::string> all = codegen::defaultGpuTargets();
  EXPECT_FALSE(codegen::ownGemmIsFaster(all, 128, 768, 3072, ir::DType::F16));
  EXPECT_FALSE(codegen::ownGemmIsFaster(all, 8192, 1024, 4096, ir::DType::F16));
  codegen::GpuModel slowLibrary = *codegen::gpuModelNamed("H100");
  slowLibrary.libraryEfficiency = 0.3;
  EXPECT_TRUE(codegen::ownGemmIsFaster(slowLibrary, 8192, 1024, 4096, ir::DType::BF16));
  EXPECT_FALSE(codegen::ownGemmIsFaster(slowLibrary, 128, 768, 3072, ir::DType::BF16));
}

// An INT8 convolution (a quantized model's, channels-last) runs conv_fprop_mma on
// IMMA.16832 (mma.sync m16n8k32 s8): its sm_80 and sm_90 main loops hold the integer
// tensor-core instructions, 16-byte cp.async and ldmatrix, at most 8 instructions per
// IMMA, no spills; inspect counts its work as integer work on INT8 tensor cores, priced
// at the INT8 peak (twice FP16's).
TEST(CostModel, Int8ConvolutionsRunOnIntegerTensorCores) {
  std::string model = tempPath("int8.ir"), out = tempPath("int8.dlc");
  std::ofstream(model)
      << R"(graph @g(%x: i8[1,56,56,64], %w: i8[64,3,3,64], %b: i32[64]) -> ("y": i8[1,56,56,64]) {
  %m = const f32[] dense<[0.01]>
  %r = Relu(%x) : i8[1,56,56,64]
  %c = Conv(%r, %w, %b) {channels_last = 1, pads = [1, 1, 1, 1]} : i32[1,56,56,64]
  %f = Cast(%c) {to = "f32"} : f32[1,56,56,64]
  %y = QuantizeLinear(%f, %m) {multiply = 1, to = "i8"} : i8[1,56,56,64]
  return %y
}
)";
  driver::CompileOptions o;
  o.model = model;
  o.output = out;
  o.targets = {"sm_80", "sm_90"};
  o.useCache = false;
  llvm::Expected<driver::CompileResult> r = driver::compile(o);
  ASSERT_TRUE(static_cast<bool>(r)) << llvm::toString(r.takeError());
  auto pf = pkg::PackageFile::load(out);
  ASSERT_TRUE(pf.ok()) << pf.status().message();
  driver::PackageCost c = driver::costOf(**pf);
  ASSERT_EQ(c.gpus.size(), 2u);
  size_t convs = 0;
  for (size_t i = 0; i < c.gpus.size(); ++i) {
    const codegen::GpuModel &g = c.gpus[i];
    for (const driver::StepCost &sc : c.steps) {
      const pkg::Kernel *k = sc.kind == "launch"
                                 ? (*pf)->meta().kernels()->Get(static_cast<uint32_t>(sc.kernel))
                                 : nullptr;
      if (!sc.runs[i] || !k || k->name()->str().find("conv_fprop_mma") != 0)
        continue;
      ++convs;
      EXPECT_TRUE(sc.tensor && sc.integer);
      const codegen::sass::KernelFacts *f = c.factsOf(g.arch, k->symbol()->str());
      ASSERT_NE(f, nullptr);
      const codegen::sass::Mix *m = f->main();
      ASSERT_NE(m, nullptr);
      const int imma = m->of(codegen::sass::Class::Tensor);
      EXPECT_GT(imma, 0) << g.name;
      EXPECT_EQ(m->mmaFlops, 8192.0 * imma) << g.name; // every one m16n8k32
      EXPECT_GT(m->of(codegen::sass::Class::CpAsync), 0) << g.name;
      EXPECT_GT(m->cpAsyncBytes, 0) << g.name;
      EXPECT_GT(m->of(codegen::sass::Class::Ldsm), 0) << g.name;
      EXPECT_LE(m->instructions, 8 * imma) << g.name;
      const double intPeak = 2 * g.tensorFlops * g.mmaSyncFraction;
      EXPECT_GE(sc.bounds[i].issue, 1e6 * sc.flops / intPeak * (1 - 1e-9)) << g.name;
    }
    EXPECT_NEAR(c.integerTensorFlops[i], c.integerFlops[i], 1e-6 * c.integerFlops[i]);
    EXPECT_GT(c.integerFlops[i], 0.0);
  }
  EXPECT_EQ(convs, 2u);
  for (const pkg::Kernel *kn : *(*pf)->meta().kernels()) {
    if (kn->name()->str().find("conv_fprop_mma") != 0 || !kn->resources())
      continue;
    for (const pkg::ArchResources *res : *kn->resources()) {
      EXPECT_EQ(res->spill_stores() + res->spill_loads(), 0) << res->arch()->str();
    }
  }
}
