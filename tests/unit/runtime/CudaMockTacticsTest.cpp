// Tactics (runtime/Tactics.cpp) on the fake driver and a fake cuDNN (CudaMockTestUtil.h):
//  - cuDNN's graph is built with the calls and attribute types cudnn_graph.h documents,
//    the channels-last tensors described in cuDNN's dimension order;
//  - the faster candidate, by the fake clock, is the one that runs;
//  - the choice is cached: a second session times nothing, a new GPU or a damaged
//    file times again, with a note;
//  - DLC_TACTICS and the session option force a family; a cuDNN that cannot start
//    leaves our kernels;
// and on emu, the vendor candidate's schedule (cuDNN's convolution on the host, then
// conv_finish) computes what our kernels compute.
#include "CudaMockTestUtil.h"
#include "dlc/support/Half.h"

#include <filesystem>

using namespace cudamock;

namespace {

/// Textual IR through the default pipeline, for sm_90 and emu (`attentionKernel`:
/// CompileOptions::attentionKernel).
std::shared_ptr<const pkg::PackageFile>
compileForSm90AndEmu(const std::string &text, const std::string &name,
                     const std::string &attentionKernel = "") {
  auto g = ir::parseGraph(text, name);
  EXPECT_TRUE(bool(g)) << llvm::toString(g.takeError());
  passes::PassManager pm;
  passes::PassContext ctx;
  EXPECT_FALSE(bool(pm.run(**g, passes::defaultPipeline(2), ctx)));
  codegen::CompileOptions co;
  co.targets = {"sm_90", "emu"};
  co.attentionKernel = attentionKernel;
  auto bytes = codegen::compileGraph(**g, co);
  EXPECT_TRUE(bool(bytes)) << llvm::toString(bytes.takeError());
  auto pf = pkg::PackageFile::fromBytes(bytes->data(), bytes->size(), name + ".dlc");
  EXPECT_TRUE(pf.ok());
  return std::shared_ptr<const pkg::PackageFile>(*pf);
}

/// Two FP16 channels-last convolutions (16 -> 16 channels, 3x3, padding 1) between
/// transposes from and to NCHW: the first with its bias and a ReLU (cuDNN's fusion
/// applies both), the second storing transposed (an epilogue cuDNN is not given:
/// conv_finish applies it to cuDNN's result). For sm_90 and emu.
std::shared_ptr<const pkg::PackageFile> convPackage() {
  static std::shared_ptr<const pkg::PackageFile> pkg = [] {
    std::string w, b;
    for (int i = 0; i < 16 * 16 * 9; ++i)
      w += (i ? ", " : "") + std::to_string(((i * 37) % 17 - 8) / 32.0);
    for (int i = 0; i < 16; ++i)
      b += (i ? ", " : "") + std::to_string((i % 5 - 2) / 8.0);
    std::string text =
        "graph @conv(%x: f16[1,16,8,8]) -> (\"y\": f16[1,16,8,8]) {\n"
        "  %w = const f16[16,3,3,16] dense<[" +
        w + "]>\n  %b = const f16[16] dense<[" + b +
        "]>\n"
        "  %t = Transpose(%x) {perm = [0, 2, 3, 1]} : f16[1,8,8,16]\n"
        "  %c = Conv(%t, %w, %b) {channels_last = 1, pads = [1, 1, 1, 1]} : f16[1,8,8,16]\n"
        "  %a = Relu(%c) : f16[1,8,8,16]\n"
        "  %c2 = Conv(%a, %w) {channels_last = 1, pads = [1, 1, 1, 1]} : f16[1,8,8,16]\n"
        "  %y = Transpose(%c2) {perm = [0, 3, 1, 2]} : f16[1,16,8,8]\n"
        "  return %y\n}\n";
    return compileForSm90AndEmu(text, "conv");
  }();
  return pkg;
}

/// Two-head FP16 self-attention (16 tokens, head size 8) on the halves of a projection
/// (the views attention_mma reads as they are), scaled by 0.35, causal where asked (a
/// Where of a lower-triangular mask with FP16's lowest value), its output merged back
/// to [2, 16, 16] (an epilogue: attention_finish stores cuDNN's result through it). For
/// sm_90 and emu, attention_mma asked for.
std::shared_ptr<const pkg::PackageFile> attentionPackage(bool causal = false) {
  static std::map<bool, std::shared_ptr<const pkg::PackageFile>> cache;
  if (cache.count(causal))
    return cache[causal];
  std::string w, keep;
  for (int i = 0; i < 48 * 48; ++i)
    w += (i ? ", " : "") + std::to_string(((i * 29) % 23 - 11) / 64.0);
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j)
      keep += std::string(i || j ? ", " : "") + (j <= i ? "true" : "false");
  std::string text = "graph @attn(%x: f16[2,16,48]) -> (\"y\": f16[2,16,16]) {\n"
                     "  %w = const f16[48,48] dense<[" +
                     w +
                     "]>\n"
                     "  %qkv = MatMul(%x, %w) : f16[2,16,48]\n"
                     "  %q = Slice(%qkv) {axes = [2], ends = [16], starts = [0]} : f16[2,16,16]\n"
                     "  %k = Slice(%qkv) {axes = [2], ends = [32], starts = [16]} : f16[2,16,16]\n"
                     "  %v = Slice(%qkv) {axes = [2], ends = [48], starts = [32]} : f16[2,16,16]\n"
                     "  %qr = Reshape(%q) {shape = [2, 16, 2, 8]} : f16[2,16,2,8]\n"
                     "  %kr = Reshape(%k) {shape = [2, 16, 2, 8]} : f16[2,16,2,8]\n"
                     "  %vr = Reshape(%v) {shape = [2, 16, 2, 8]} : f16[2,16,2,8]\n"
                     "  %qh = Transpose(%qr) {perm = [0, 2, 1, 3]} : f16[2,2,16,8]\n"
                     "  %kt = Transpose(%kr) {perm = [0, 2, 3, 1]} : f16[2,2,8,16]\n"
                     "  %vh = Transpose(%vr) {perm = [0, 2, 1, 3]} : f16[2,2,16,8]\n"
                     "  %s = MatMul(%qh, %kt) : f16[2,2,16,16]\n"
                     "  %scale = const f16[] dense<[0.35]>\n"
                     "  %ss = Mul(%s, %scale) : f16[2,2,16,16]\n" +
                     (causal ? "  %keep = const bool[16,16] dense<[" + keep +
                                   "]>\n"
                                   "  %fill = const f16[] dense<[-65504.0]>\n"
                                   "  %m = Where(%keep, %ss, %fill) : f16[2,2,16,16]\n"
                                   "  %p = Softmax(%m) {axis = -1} : f16[2,2,16,16]\n"
                             : "  %p = Softmax(%ss) {axis = -1} : f16[2,2,16,16]\n") +
                     "  %o = MatMul(%p, %vh) : f16[2,2,16,8]\n"
                     "  %ot = Transpose(%o) {perm = [0, 2, 1, 3]} : f16[2,16,2,8]\n"
                     "  %y = Reshape(%ot) {shape = [2, 16, 16]} : f16[2,16,16]\n"
                     "  return %y\n}\n";
  return cache[causal] = compileForSm90AndEmu(text, causal ? "attn_causal" : "attn", "mma");
}

/// Runs `pkg` on emu with our kernels, then with the vendor tactics (cuDNN's steps on
/// the host), on input x; checks how many cuDNN steps each ran and returns the largest
/// difference of the FP16 output `y` (of `outElems`) and its largest magnitude.
std::pair<double, double> emuDlcVsVendor(const std::shared_ptr<const pkg::PackageFile> &pkg,
                                         const std::vector<uint16_t> &x, size_t outElems,
                                         int vendorSteps) {
  std::vector<std::vector<uint16_t>> outs;
  for (auto mode : {rt::SessionOptions::Tactics::Dlc, rt::SessionOptions::Tactics::Vendor}) {
    rt::SessionOptions so;
    so.device = rt::DeviceKind::Emu;
    so.tactics = mode;
    so.profile = true;
    auto s = rt::Session::create(pkg, so);
    EXPECT_TRUE(s.ok()) << s.status().message();
    if (!s.ok())
      return {1e30, 0};
    EXPECT_FALSE(bool((*s)->setInputBytes("x", x.data(), x.size() * 2)));
    EXPECT_FALSE(bool((*s)->run()));
    int cudnnSteps = 0;
    for (const rt::StepTime &t : (*s)->lastProfile())
      cudnnSteps += t.kind == "cudnn";
    EXPECT_EQ(cudnnSteps, mode == rt::SessionOptions::Tactics::Vendor ? vendorSteps : 0);
    std::vector<uint16_t> y(outElems);
    EXPECT_FALSE(bool((*s)->getOutputBytes("y", y.data(), y.size() * 2)));
    outs.push_back(y);
  }
  double worst = 0, largest = 0;
  for (size_t i = 0; i < outElems; ++i) {
    worst = std::max(worst, std::fabs(double(halfToFloat(outs[0][i])) - halfToFloat(outs[1][i])));
    largest = std::max(largest, std::fabs(double(halfToFloat(outs[0][i]))));
  }
  return {worst, largest};
}

class Tactics : public CudaMock {
protected:
  void SetUp() override {
    CudaMock::SetUp();
    dir_ = ::testing::TempDir() + "/dlc-tactics-" + std::to_string(::getpid()) + "-" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(dir_);
    ::unsetenv("DLC_TACTICS");
  }
  void TearDown() override {
    std::filesystem::remove_all(dir_);
    ::unsetenv("DLC_TACTICS");
    CudaMock::TearDown();
  }
  Result<std::unique_ptr<rt::Session>> conv(rt::SessionOptions so = {}) {
    so.device = rt::DeviceKind::Cuda;
    so.cudaGraphs = false;
    so.tacticsCacheDir = dir_;
    return rt::Session::create(convPackage(), so);
  }
  static const rt::TacticChoice::Candidate &chosen(const rt::Session &s) {
    const rt::TacticChoice &c = s.tactics().at(0);
    return c.candidates.at(c.chosen);
  }
  static bool noted(const rt::Session &s, const std::string &what) {
    for (const std::string &n : s.scheduleNotes())
      if (n.find(what) != std::string::npos)
        return true;
    return false;
  }
  std::string dir_;
};

TEST_F(Tactics, CudnnGetsTheDocumentedGraphOfTheConvolution) {
  rt::SessionOptions so;
  so.tactics = rt::SessionOptions::Tactics::Vendor;
  auto s = conv(so);
  ASSERT_TRUE(s.ok()) << s.status().message();
  ASSERT_EQ((*s)->tactics().size(), 2u);
  EXPECT_EQ(chosen(**s).kind, "cudnn");
  EXPECT_TRUE(S.dnnErrors.empty()) << S.dnnErrors.front();
  // The builder's calls, in order, up to the first execution (descriptor types and
  // attributes by their cudnn_graph.h numbers).
  auto t = [](cudnnBackendDescriptorType_t d) { return "create " + std::to_string(d); };
  auto a = [](cudnnBackendAttributeName_t n) { return "set " + std::to_string(n); };
  // The first layer is conv, bias and ReLU: cuDNN fuses all three, through two virtual
  // FP32 tensors (ids 5 and 6) into y (3), the bias (4) per channel.
  std::vector<std::string> want = {"cudnnCreate"};
  for (const char *tensor :
       {"1 dims 1,16,8,8 strides 1024,1,128,16", "2 dims 16,16,3,3 strides 144,1,48,16",
        "3 dims 1,16,8,8 strides 1024,1,128,16", "4 dims 1,16,1,1 strides 16,1,16,16",
        "5 dims 1,16,8,8 strides 1024,1,128,16", "6 dims 1,16,8,8 strides 1024,1,128,16"}) {
    want.insert(want.end(), {t(CUDNN_BACKEND_TENSOR_DESCRIPTOR), a(CUDNN_ATTR_TENSOR_DATA_TYPE),
                             a(CUDNN_ATTR_TENSOR_DIMENSIONS), a(CUDNN_ATTR_TENSOR_STRIDES),
                             a(CUDNN_ATTR_TENSOR_UNIQUE_ID), a(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT)});
    if (tensor[0] >= '5')
      want.push_back(a(CUDNN_ATTR_TENSOR_IS_VIRTUAL));
    want.push_back(std::string("finalize tensor ") + tensor);
  }
  want.insert(
      want.end(),
      {t(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR), a(CUDNN_ATTR_CONVOLUTION_COMP_TYPE),
       a(CUDNN_ATTR_CONVOLUTION_CONV_MODE), a(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS),
       a(CUDNN_ATTR_CONVOLUTION_DILATIONS), a(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES),
       a(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS), a(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS),
       "finalize convolution pads 1,1/1,1 strides 1,1 dilations 1,1",
       t(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR),
       a(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X), a(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W),
       a(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y),
       a(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC),
       a(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA),
       a(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA),
       "finalize " + std::to_string(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR)});
  for (bool add : {true, false}) { // the bias's ADD, then the ReLU
    want.insert(want.end(), {t(CUDNN_BACKEND_POINTWISE_DESCRIPTOR), a(CUDNN_ATTR_POINTWISE_MODE),
                             a(CUDNN_ATTR_POINTWISE_MATH_PREC),
                             "finalize " + std::to_string(CUDNN_BACKEND_POINTWISE_DESCRIPTOR),
                             t(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR),
                             a(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR),
                             a(CUDNN_ATTR_OPERATION_POINTWISE_XDESC)});
    if (add)
      want.push_back(a(CUDNN_ATTR_OPERATION_POINTWISE_BDESC));
    want.insert(want.end(),
                {a(CUDNN_ATTR_OPERATION_POINTWISE_YDESC),
                 "finalize " + std::to_string(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR)});
  }
  want.insert(want.end(), {t(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR),
                           a(CUDNN_ATTR_OPERATIONGRAPH_OPS),
                           a(CUDNN_ATTR_OPERATIONGRAPH_HANDLE),
                           "finalize " + std::to_string(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR),
                           t(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR),
                           a(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH),
                           a(CUDNN_ATTR_ENGINEHEUR_MODE),
                           "finalize " + std::to_string(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR),
                           "get " + std::to_string(CUDNN_ATTR_ENGINEHEUR_RESULTS),
                           t(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR),
                           t(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR),
                           "get " + std::to_string(CUDNN_ATTR_ENGINEHEUR_RESULTS),
                           t(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR),
                           a(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG),
                           a(CUDNN_ATTR_EXECUTION_PLAN_HANDLE),
                           "finalize " + std::to_string(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR),
                           "get " + std::to_string(CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE),
                           t(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR),
                           a(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS),
                           a(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS),
                           a(CUDNN_ATTR_VARIANT_PACK_WORKSPACE),
                           "finalize " + std::to_string(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR),
                           "execute"});
  std::vector<std::string> got(
      S.dnnCalls.begin(),
      S.dnnCalls.begin() + static_cast<std::ptrdiff_t>(std::min(S.dnnCalls.size(), want.size())));
  EXPECT_EQ(got, want);
  // The second (no bias, an epilogue cuDNN is not given): its plain graph.
  auto second =
      std::find(S.dnnCalls.begin() + static_cast<std::ptrdiff_t>(want.size()), S.dnnCalls.end(),
                "finalize tensor 1 dims 1,16,8,8 strides 1024,1,128,16");
  ASSERT_NE(second, S.dnnCalls.end());
  EXPECT_EQ(std::count(second, S.dnnCalls.end(), t(CUDNN_BACKEND_POINTWISE_DESCRIPTOR)), 0);
  EXPECT_EQ(std::count(second, S.dnnCalls.end(), a(CUDNN_ATTR_TENSOR_IS_VIRTUAL)), 0);
  // A run executes the plans built once (one execution per layer, no new descriptors).
  const size_t calls = S.dnnCalls.size();
  S.launched.clear();
  std::vector<uint16_t> x(16 * 64, 0x3c00);
  ASSERT_FALSE(bool((*s)->setInputBytes("x", x.data(), x.size() * 2)));
  ASSERT_FALSE(bool((*s)->run()));
  EXPECT_EQ(S.dnnCalls.size() - calls, 12u); // per layer the variant pack (5 calls), execution
  // The fused layer's pack names its bias (4), the other's does not.
  ASSERT_GE(S.dnnPacks.size(), 2u);
  EXPECT_EQ(S.dnnPacks[S.dnnPacks.size() - 2], (std::vector<int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(S.dnnPacks.back(), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(S.dnnCalls.back(), "execute");
  for (const std::string &k : S.launched)
    EXPECT_EQ(k.find("conv_fprop_mma"), std::string::npos) << k;
}

TEST_F(Tactics, TheFasterCandidateRunsAndTheChoiceIsCached) {
  S.kernelMs["conv_fprop_mma"] = 0.5; // ours: 500 us a run by the fake clock
  S.cudnnMs = 0.1;                    // cuDNN: 100 us (+ conv_finish's 1 us on the second)
  auto s = conv();
  ASSERT_TRUE(s.ok()) << s.status().message();
  ASSERT_EQ((*s)->tactics().size(), 2u);
  for (size_t layer = 0; layer < 2; ++layer) {
    const rt::TacticChoice &c = (*s)->tactics()[layer];
    EXPECT_EQ(c.how, "timed");
    ASSERT_EQ(c.candidates.size(), 2u);
    EXPECT_EQ(c.candidates[0].kind, "dlc");
    EXPECT_NEAR(c.candidates[0].micros, 500, 1);
    EXPECT_NEAR(c.candidates[1].micros, layer ? 101 : 100, 0.5);
    EXPECT_NE(c.candidates[1].description.find(layer ? "then conv_finish" : "+ bias + ReLU"),
              std::string::npos)
        << c.candidates[1].description;
    EXPECT_EQ(c.candidates[c.chosen].kind, "cudnn");
  }
  EXPECT_TRUE(noted(**s, "tactics: timed 2 layers")) << (*s)->scheduleNotes().at(0);
  S.launched.clear();
  const int executes = S.dnnExecutes;
  std::vector<uint16_t> x(16 * 64, 0x3c00);
  ASSERT_FALSE(bool((*s)->setInputBytes("x", x.data(), x.size() * 2)));
  ASSERT_FALSE(bool((*s)->run()));
  EXPECT_EQ(S.dnnExecutes, executes + 2);
  for (const std::string &k : S.launched)
    EXPECT_EQ(k.find("conv_fprop_mma"), std::string::npos) << k;
  s->reset();

  // The file: keyed by the GPU, SMs, driver and cuDNN version.
  std::vector<std::filesystem::path> files;
  for (const auto &e : std::filesystem::directory_iterator(dir_))
    files.push_back(e.path());
  ASSERT_EQ(files.size(), 1u);
  std::string text;
  {
    std::ifstream in(files[0]);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  EXPECT_NE(text.find("key Fake GPU|sm_90|132 SMs|driver 13000|cudnn 91900\n"), std::string::npos)
      << text;

  // A second session reads the cache and times nothing; the cached cuDNN choice runs
  // once as the session starts (its plans built outside any graph capture), then in
  // the captured graph.
  S.elapsedCalls = 0;
  const int before = S.dnnExecutes;
  rt::SessionOptions graphs;
  graphs.device = rt::DeviceKind::Cuda;
  graphs.tacticsCacheDir = dir_;
  auto again = rt::Session::create(convPackage(), graphs);
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(S.elapsedCalls, 0);
  EXPECT_EQ(S.dnnExecutes, before + 2);
  EXPECT_EQ((*again)->tactics().at(0).how, "cache");
  EXPECT_EQ(chosen(**again).kind, "cudnn");
  EXPECT_TRUE(noted(**again, "from the cache"));
  ASSERT_FALSE(bool((*again)->setInputBytes("x", x.data(), x.size() * 2)));
  ASSERT_FALSE(bool((*again)->run()));
  EXPECT_EQ(S.captures, 1);
  again->reset();

  // Another GPU (the key changes): its own file, timed; now ours is faster.
  S.sms = 100;
  S.kernelMs["conv_fprop_mma"] = 0.02;
  auto other = conv();
  ASSERT_TRUE(other.ok()) << other.status().message();
  EXPECT_GT(S.elapsedCalls, 0);
  EXPECT_EQ(chosen(**other).kind, "dlc");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_),
                          std::filesystem::directory_iterator()),
            2);
  other->reset();

  // A file at this GPU's name written for another key, then a damaged one: each is
  // ignored with a note, timed again and rewritten.
  for (const char *bad : {"dlc-tactics 1\nkey Other GPU|sm_80\n0 1 2 5.0\n",
                          "dlc-tactics 1\nkey x\n0 1 zz\n", "dlc-tactics 1\n"}) {
    S.sms = 132;
    std::ofstream(files[0]) << bad;
    S.elapsedCalls = 0;
    auto damaged = conv();
    ASSERT_TRUE(damaged.ok()) << damaged.status().message();
    EXPECT_GT(S.elapsedCalls, 0);
    EXPECT_TRUE(noted(**damaged, "ignored, timing again")) << bad;
    if (std::string(bad).find("Other") != std::string::npos) {
      EXPECT_TRUE(noted(**damaged, "another GPU or library version"));
    }
    std::ifstream in(files[0]);
    std::string first;
    std::getline(in, first);
    EXPECT_EQ(first, "dlc-tactics 1");
  }
}

/// The package's output `y` for input `x` on emu.
std::vector<uint16_t> emuOutput(const std::shared_ptr<const pkg::PackageFile> &pkg,
                                const std::vector<uint16_t> &x, size_t outElems) {
  rt::SessionOptions so;
  so.device = rt::DeviceKind::Emu;
  auto s = rt::Session::create(pkg, so);
  EXPECT_TRUE(s.ok()) << s.status().message();
  std::vector<uint16_t> y(outElems);
  if (s.ok()) {
    EXPECT_FALSE(bool((*s)->setInputBytes("x", x.data(), x.size() * 2)));
    EXPECT_FALSE(bool((*s)->run()));
    EXPECT_FALSE(bool((*s)->getOutputBytes("y", y.data(), y.size() * 2)));
  }
  return y;
}

// dlc tune --embed: the choices go into a copy of the package that is otherwise the
// same (steps, weights, emu output, host-code signature); a session on the GPU they
// were made for reads them and times nothing, even with no cache; another GPU times.
TEST_F(Tactics, ChoicesEmbeddedInThePackageApplyOnTheirGpuOnly) {
  S.kernelMs["conv_fprop_mma"] = 0.5;
  S.cudnnMs = 0.1;
  rt::SessionOptions noCache;
  noCache.device = rt::DeviceKind::Cuda;
  noCache.cudaGraphs = false;
  noCache.tacticsCacheDir = "-";
  auto s = rt::Session::create(convPackage(), noCache);
  ASSERT_TRUE(s.ok()) << s.status().message();
  const std::string key = (*s)->tacticsKey();
  EXPECT_EQ(key, "Fake GPU|sm_90|132 SMs|driver 13000|cudnn 91900");
  auto img = rt::embedChosenTactics(**s, *convPackage());
  ASSERT_TRUE(img.ok()) << img.status().message();
  s->reset();
  std::vector<uint8_t> bytes = img->bytes();
  auto loaded = pkg::PackageFile::fromBytes(bytes.data(), bytes.size(), "embedded.dlc");
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  std::shared_ptr<const pkg::PackageFile> tuned = *loaded;

  // Everything but the new field as it was.
  const pkg::Package &m = tuned->meta(), &o = convPackage()->meta();
  ASSERT_EQ(m.steps()->size(), o.steps()->size());
  for (uint32_t i = 0; i < o.steps()->size(); ++i) {
    EXPECT_EQ(m.steps()->Get(i)->node()->str(), o.steps()->Get(i)->node()->str());
    EXPECT_EQ(m.steps()->Get(i)->alt(), o.steps()->Get(i)->alt());
  }
  EXPECT_EQ(m.buffers()->size(), o.buffers()->size());
  EXPECT_EQ(m.arena_bytes(), o.arena_bytes());
  EXPECT_EQ(m.model()->str(), o.model()->str());
  ASSERT_EQ(m.weights()->size(), o.weights()->size());
  for (uint32_t i = 0; i < o.weights()->size(); ++i) {
    const pkg::Section *a = m.weights()->Get(i)->data(), *b = o.weights()->Get(i)->data();
    ASSERT_EQ(a->size(), b->size());
    EXPECT_EQ(std::memcmp(tuned->section(a), convPackage()->section(b), a->size()), 0);
  }
  auto hostKey = loadHostKey(false);
  ASSERT_TRUE(hostKey.ok()) << hostKey.status().message();
  ASSERT_TRUE(convPackage()->signedWith(*hostKey));
  EXPECT_TRUE(tuned->signedWith(*hostKey)); // re-signed: emu runs its host code
  std::vector<uint16_t> x(16 * 64);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = floatToHalf(float(int(i % 13) - 6) / 8.0f);
  EXPECT_EQ(emuOutput(tuned, x, x.size()), emuOutput(convPackage(), x, x.size()));
  ASSERT_TRUE(m.embedded_tactics());
  ASSERT_EQ(m.embedded_tactics()->size(), 1u);
  EXPECT_EQ(m.embedded_tactics()->Get(0)->key()->str(), key);
  ASSERT_EQ(m.embedded_tactics()->Get(0)->picks()->size(), 2u);

  // This GPU: nothing timed, cuDNN runs, as chosen.
  S.elapsedCalls = 0;
  auto fast = rt::Session::create(tuned, noCache);
  ASSERT_TRUE(fast.ok()) << fast.status().message();
  EXPECT_EQ(S.elapsedCalls, 0);
  EXPECT_EQ((*fast)->tactics().at(0).how, "package");
  EXPECT_EQ(chosen(**fast).kind, "cudnn");
  EXPECT_NEAR(chosen(**fast).micros, 100, 1);
  EXPECT_TRUE(noted(**fast, "2 layers from the choices embedded in the package"));
  fast->reset();
  // dlc tune measures again (SessionOptions::useEmbeddedTactics off).
  rt::SessionOptions retune = noCache;
  retune.useEmbeddedTactics = false;
  auto again0 = rt::Session::create(tuned, retune);
  ASSERT_TRUE(again0.ok()) << again0.status().message();
  EXPECT_GT(S.elapsedCalls, 0);
  EXPECT_EQ((*again0)->tactics().at(0).how, "timed");
  again0->reset();

  // Another GPU: timed (ours is faster there); embedding its choices keeps the first
  // GPU's; embedding the first GPU's again replaces them.
  S.sms = 100;
  S.kernelMs["conv_fprop_mma"] = 0.02;
  S.elapsedCalls = 0;
  auto other = rt::Session::create(tuned, noCache);
  ASSERT_TRUE(other.ok()) << other.status().message();
  EXPECT_GT(S.elapsedCalls, 0);
  EXPECT_EQ((*other)->tactics().at(0).how, "timed");
  EXPECT_EQ(chosen(**other).kind, "dlc");
  auto img2 = rt::embedChosenTactics(**other, *tuned);
  ASSERT_TRUE(img2.ok()) << img2.status().message();
  other->reset();
  std::vector<uint8_t> bytes2 = img2->bytes();
  auto both = pkg::PackageFile::fromBytes(bytes2.data(), bytes2.size(), "both.dlc");
  ASSERT_TRUE(both.ok()) << both.status().message();
  ASSERT_EQ((*both)->meta().embedded_tactics()->size(), 2u);
  for (int sms : {132, 100}) {
    S.sms = sms;
    S.elapsedCalls = 0;
    auto t = rt::Session::create(*both, noCache);
    ASSERT_TRUE(t.ok()) << t.status().message();
    EXPECT_EQ(S.elapsedCalls, 0) << sms;
    EXPECT_EQ((*t)->tactics().at(0).how, "package");
    EXPECT_EQ(chosen(**t).kind, sms == 132 ? "cudnn" : "dlc");
  }
  auto again = pkg::embedTactics(**both, key, {pkg::TacticPick(0, 1, 1, 5.0f)}, &*hostKey);
  ASSERT_TRUE(again.ok()) << again.status().message();
  std::vector<uint8_t> bytes3 = again->bytes();
  auto replaced = pkg::PackageFile::fromBytes(bytes3.data(), bytes3.size(), "again.dlc");
  ASSERT_TRUE(replaced.ok()) << replaced.status().message();
  const auto *sets = (*replaced)->meta().embedded_tactics();
  ASSERT_EQ(sets->size(), 2u);
  EXPECT_EQ(sets->Get(1)->key()->str(), key);
  EXPECT_EQ(sets->Get(1)->picks()->size(), 1u);

  // A package signed by another user's key is not re-signed with ours: refused.
  HostKey someoneElse{};
  someoneElse[0] = 1;
  auto refused = pkg::embedTactics(**both, key, {}, &someoneElse);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("signed by another user's key"), std::string::npos)
      << refused.status().message();
  // Emu measures nothing: there is nothing to embed.
  rt::SessionOptions emu;
  emu.device = rt::DeviceKind::Emu;
  auto onEmu = rt::Session::create(convPackage(), emu);
  ASSERT_TRUE(onEmu.ok());
  auto notEmbedded = rt::embedChosenTactics(**onEmu, *convPackage());
  ASSERT_FALSE(notEmbedded.ok());
  EXPECT_NE(notEmbedded.status().message().find("for a GPU"), std::string::npos);
}

// A convolution the model prices at 10 us or more, with another tile within 25% of
// the best: both tiles are candidates (ours, alternatives 1 and 2) beside cuDNN; the
// faster by the clock runs, and only its kernel.
TEST_F(Tactics, OurRunnerUpTileIsACandidateToo) {
  const std::string text =
      "graph @big(%x: f16[8,256,28,28]) -> (\"y\": f16[8,28,28,256]) {\n"
      "  %w0 = const f16[] dense<[0.01]>\n"
      "  %w = Expand(%w0) {shape = [256, 3, 3, 256]} : f16[256,3,3,256]\n"
      "  %t = Transpose(%x) {perm = [0, 2, 3, 1]} : f16[8,28,28,256]\n"
      "  %y = Conv(%t, %w) {channels_last = 1, pads = [1, 1, 1, 1]} : f16[8,28,28,256]\n"
      "  return %y\n}\n";
  auto pkg = compileForSm90AndEmu(text, "big");
  // The symbols of each alternative's conv_fprop_mma launch.
  std::map<uint8_t, std::string> symbol;
  const pkg::Package &m = pkg->meta();
  for (const pkg::Step *st : *m.steps())
    if (st->alt_group() && st->op_as_Launch()) {
      const pkg::Kernel *k = m.kernels()->Get(st->op_as_Launch()->kernel());
      if (k->name()->str().find("conv_fprop_mma") != std::string::npos)
        symbol[st->alt()] = k->symbol()->str();
    }
  ASSERT_EQ(symbol.size(), 2u);
  ASSERT_NE(symbol[1], symbol[2]);
  S.kernelMs[symbol[1]] = 0.5;
  S.kernelMs[symbol[2]] = 0.2;
  S.cudnnMs = 0.3;
  rt::SessionOptions so;
  so.device = rt::DeviceKind::Cuda;
  so.cudaGraphs = false;
  so.tacticsCacheDir = "-";
  auto s = rt::Session::create(pkg, so);
  ASSERT_TRUE(s.ok()) << s.status().message();
  const rt::TacticChoice &c = (*s)->tactics().at(0);
  ASSERT_EQ(c.candidates.size(), 3u);
  EXPECT_EQ(c.candidates[0].kind, "dlc");
  EXPECT_EQ(c.candidates[1].kind, "dlc");
  EXPECT_EQ(c.candidates[2].kind, "cudnn");
  EXPECT_NE(c.candidates[0].description, c.candidates[1].description);
  EXPECT_EQ(c.chosen, 1u);
  EXPECT_NEAR(c.candidates[1].micros, 200, 1);
  S.launched.clear();
  std::vector<uint16_t> x(8 * 256 * 28 * 28, 0x3c00);
  ASSERT_FALSE(bool((*s)->setInputBytes("x", x.data(), x.size() * 2)));
  ASSERT_FALSE(bool((*s)->run()));
  EXPECT_EQ(std::count(S.launched.begin(), S.launched.end(), symbol[2]), 1);
  EXPECT_EQ(std::count(S.launched.begin(), S.launched.end(), symbol[1]), 0);
  s->reset();
  // Without tactics (dlc compile --no-vendor-tactics), one implementation: ours, the
  // model's best tile.
  auto g = ir::parseGraph(text, "big");
  ASSERT_TRUE(bool(g));
  passes::PassManager pm;
  passes::PassContext ctx;
  ASSERT_FALSE(bool(pm.run(**g, passes::defaultPipeline(2), ctx)));
  codegen::CompileOptions co;
  co.targets = {"sm_90"};
  co.vendorTactics = false;
  auto bytes = codegen::compileGraph(**g, co);
  ASSERT_TRUE(bool(bytes)) << llvm::toString(bytes.takeError());
  auto single = pkg::PackageFile::fromBytes(bytes->data(), bytes->size(), "single.dlc");
  ASSERT_TRUE(single.ok());
  EXPECT_TRUE(pkg::tacticGroups((*single)->meta().steps(), 90).empty());
}

TEST_F(Tactics, AFamilyCanBeForced) {
  S.kernelMs["conv_fprop_mma"] = 0.5;
  ::setenv("DLC_TACTICS", "dlc", 1);
  auto s = conv();
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(S.elapsedCalls, 0);
  EXPECT_EQ((*s)->tactics().at(0).how, "forced");
  EXPECT_EQ(chosen(**s).kind, "dlc");
  EXPECT_EQ(S.dnnExecutes, 0);
  EXPECT_TRUE(S.dnnCalls.empty()); // cuDNN is not even started
  s->reset();
  ::setenv("DLC_TACTICS", "fastest", 1);
  auto bad = conv();
  ASSERT_TRUE(bad.ok()) << bad.status().message();
  EXPECT_TRUE(noted(**bad, "DLC_TACTICS='fastest' is not auto, dlc or vendor"));
  EXPECT_EQ((*bad)->tactics().at(0).how, "timed");
  bad->reset();
  // The session option wins over the environment.
  ::setenv("DLC_TACTICS", "dlc", 1);
  rt::SessionOptions so;
  so.tactics = rt::SessionOptions::Tactics::Vendor;
  S.kernelMs["conv_fprop_mma"] = 0.001;
  auto vendor = conv(so);
  ASSERT_TRUE(vendor.ok()) << vendor.status().message();
  EXPECT_EQ(chosen(**vendor).kind, "cudnn");
}

TEST_F(Tactics, ACudnnThatCannotStartLeavesOurKernels) {
  S.dnnCreateFails = true;
  auto s = conv();
  ASSERT_TRUE(s.ok()) << s.status().message();
  const rt::TacticChoice &c = (*s)->tactics().at(0);
  EXPECT_EQ(chosen(**s).kind, "dlc");
  EXPECT_NE(c.candidates[1].problem.find("cudnnCreate failed"), std::string::npos)
      << c.candidates[1].problem;
  EXPECT_LT(c.candidates[1].micros, 0);
  s->reset();
  // No engine finalizes: the candidate says so, ours runs.
  S.reset();
  S.dnnRejectPlans = true;
  rt::SessionOptions so;
  so.tactics = rt::SessionOptions::Tactics::Vendor;
  auto t = conv(so);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(chosen(**t).kind, "dlc");
  EXPECT_NE((*t)->tactics().at(0).candidates[1].problem.find("cuDNN has no engine"),
            std::string::npos);
}

TEST_F(Tactics, ALargeGemmTimesCublasLtsFirstAlgorithms) {
  // 2 x 256 x 512 x 512 FLOPs (over the threshold): cuBLASLt's first three heuristic
  // algorithms are the candidates; the second is fastest by the fake clock.
  auto pkg =
      compileForSm90(R"(graph @mm(%x: f16[256,512], %w: f16[512,512]) -> ("y": f16[256,512]) {
  %y = MatMul(%x, %w) : f16[256,512]
  return %y
})",
                     "mm");
  ASSERT_TRUE(pkg);
  S.ltAlgorithms = 3;
  S.algoMs = {{0, 0.3}, {1, 0.1}, {2, 0.2}};
  rt::SessionOptions so;
  so.device = rt::DeviceKind::Cuda;
  so.cudaGraphs = false;
  so.tacticsCacheDir = dir_;
  auto s = rt::Session::create(pkg, so);
  ASSERT_TRUE(s.ok()) << s.status().message();
  ASSERT_EQ((*s)->tactics().size(), 1u);
  const rt::TacticChoice &c = (*s)->tactics()[0];
  ASSERT_EQ(c.candidates.size(), 3u);
  for (const auto &k : c.candidates)
    EXPECT_EQ(k.kind, "cublaslt");
  EXPECT_NEAR(c.candidates[0].micros, 300, 1);
  EXPECT_NEAR(c.candidates[1].micros, 100, 1);
  EXPECT_NEAR(c.candidates[2].micros, 200, 1);
  EXPECT_EQ(c.chosen, 1u);
  for (const auto &e : std::filesystem::directory_iterator(dir_)) {
    std::ifstream in(e.path());
    std::string text((std::istreambuf_iterator<char>(in)), {});
    EXPECT_NE(text.find("|cublaslt 130100\n"), std::string::npos) << text;
  }
  // A run calls cuBLASLt once, with that algorithm.
  const double before = S.clockMs;
  std::vector<uint16_t> x(256 * 512, 0x3c00), w(512 * 512, 0x3c00);
  ASSERT_FALSE(bool((*s)->setInputBytes("x", x.data(), x.size() * 2)));
  ASSERT_FALSE(bool((*s)->setInputBytes("w", w.data(), w.size() * 2)));
  const int matmuls = S.matmuls;
  ASSERT_FALSE(bool((*s)->run()));
  EXPECT_EQ(S.matmuls, matmuls + 1);
  EXPECT_NEAR(S.clockMs - before, 0.1, 1e-9);
  s->reset();
  // Where the heuristic offers one algorithm, the others say so and the first runs.
  S.reset();
  std::filesystem::remove_all(dir_);
  auto one = rt::Session::create(pkg, so);
  ASSERT_TRUE(one.ok()) << one.status().message();
  EXPECT_EQ((*one)->tactics()[0].chosen, 0u);
  EXPECT_NE((*one)->tactics()[0].candidates[2].problem.find("cuBLASLt offers 1 algorithm"),
            std::string::npos)
      << (*one)->tactics()[0].candidates[2].problem;
}

TEST_F(Tactics, CudnnGetsTheFlashAttentionPattern) {
  rt::SessionOptions so;
  so.device = rt::DeviceKind::Cuda;
  so.cudaGraphs = false;
  so.tactics = rt::SessionOptions::Tactics::Vendor;
  auto s = rt::Session::create(attentionPackage(), so);
  ASSERT_TRUE(s.ok()) << s.status().message();
  ASSERT_EQ((*s)->tactics().size(), 1u);
  const rt::TacticChoice &c = (*s)->tactics()[0];
  ASSERT_EQ(c.candidates.size(), 2u);
  EXPECT_EQ(c.candidates[0].kind, "dlc");
  EXPECT_NE(c.candidates[1].description.find("scaled-dot-product attention, then attention_finish"),
            std::string::npos)
      << c.candidates[1].description;
  EXPECT_EQ(c.candidates[c.chosen].kind, "cudnn") << c.candidates[1].problem;
  EXPECT_TRUE(S.dnnErrors.empty()) << S.dnnErrors.front();
  // The operands as attention_mma reads them: Q, V [b, h, row] strides of the projection's
  // halves, K' with K's row and column strides swapped; O contiguous (cuDNN's own).
  auto has = [&](const std::string &call) {
    return std::find(S.dnnCalls.begin(), S.dnnCalls.end(), call) != S.dnnCalls.end();
  };
  EXPECT_TRUE(has("finalize tensor 1 dims 2,2,16,8 strides 768,8,48,1"));
  EXPECT_TRUE(has("finalize tensor 2 dims 2,2,8,16 strides 768,8,1,48"));
  EXPECT_TRUE(has("finalize tensor 3 dims 2,2,16,8 strides 768,8,48,1"));
  EXPECT_TRUE(has("finalize tensor 4 dims 2,2,16,8 strides 256,128,8,1"));
  EXPECT_TRUE(has("finalize tensor 5 dims 1,1,1,1 strides 1,1,1,1"));
  // The operations, in order: the scores' matmul and scale, the softmax (max, sub, exp,
  // sum, log, add: the statistics; div), the output's matmul.
  std::vector<std::string> ops;
  for (const std::string &call : S.dnnCalls)
    for (auto t :
         {CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR,
          CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR})
      if (call == "create " + std::to_string(t))
        ops.push_back(t == CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR      ? "matmul"
                      : t == CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR ? "reduction"
                                                                          : "pointwise");
  const std::vector<std::string> want = {"matmul",    "pointwise", "reduction", "pointwise",
                                         "pointwise", "reduction", "pointwise", "pointwise",
                                         "pointwise", "matmul"};
  ASSERT_GE(ops.size(), want.size());
  EXPECT_EQ(std::vector<std::string>(ops.begin(), ops.begin() + 10), want);
  // The pointwise operations by tensor id (cudnn_graph.h's modes: MUL 1, SUB 9, EXP 13,
  // LOG 15, ADD 0, DIV 6; precision FLOAT 0): the scale (5) on the scores (100 -> 101),
  // the softmax through its maximum (106) and sum (109), the statistics (111) from
  // both, and P (112), which is FP16 like Q: the second matmul's A in the I/O type.
  const std::vector<std::string> pointwise = {
      "1(100, 5) -> 101 prec 0", "9(101, 106) -> 107 prec 0", "13(107) -> 108 prec 0",
      "15(109) -> 110 prec 0",   "0(106, 110) -> 111 prec 0", "6(108, 109) -> 112 prec 0"};
  EXPECT_EQ(S.dnnPointwise, pointwise);
  EXPECT_EQ(S.dnnTensorTypes[112], CUDNN_DATA_HALF);
  EXPECT_EQ(S.dnnTensorTypes[100], CUDNN_DATA_FLOAT);
  EXPECT_EQ(S.dnnTensorTypes[5], CUDNN_DATA_FLOAT);
  // The variant pack: Q, K, V, O and the by-value scale, the attention's own.
  ASSERT_FALSE(S.dnnPacks.empty());
  EXPECT_EQ(S.dnnPacks.back(), (std::vector<int64_t>{1, 2, 3, 4, 5}));
  EXPECT_NEAR(S.dnnByValue[5], 0.35, 1e-3);
}

TEST_F(Tactics, CudnnGetsTheCausalMaskAsIndexComparisons) {
  rt::SessionOptions so;
  so.device = rt::DeviceKind::Cuda;
  so.cudaGraphs = false;
  so.tactics = rt::SessionOptions::Tactics::Vendor;
  auto s = rt::Session::create(attentionPackage(true), so);
  ASSERT_TRUE(s.ok()) << s.status().message();
  ASSERT_EQ((*s)->tactics().size(), 1u);
  const rt::TacticChoice &c = (*s)->tactics()[0];
  EXPECT_NE(c.candidates.at(1).description.find("(causal)"), std::string::npos);
  EXPECT_EQ(c.candidates[c.chosen].kind, "cudnn") << c.candidates[1].problem;
  EXPECT_TRUE(S.dnnErrors.empty()) << S.dnnErrors.front();
  // Row (axis 2) and column (axis 3) indices of the scaled scores (101) as INT32, kept
  // where row >= col (CMP_GE 303, a BOOLEAN comparison, 11), else the by-value -inf (6)
  // (BINARY_SELECT 601: x where t, else b), then the softmax of the masked scores (105).
  const std::vector<std::string> mask = {
      "1(100, 5) -> 101 prec 0",        "501(101) -> 102 prec 0 axis 2",
      "501(101) -> 103 prec 0 axis 3",  "303(102, 103) -> 104 prec 11",
      "601(101, 6, 104) -> 105 prec 0", "9(105, 106) -> 107 prec 0"};
  ASSERT_GE(S.dnnPointwise.size(), mask.size());
  EXPECT_EQ(std::vector<std::string>(S.dnnPointwise.begin(), S.dnnPointwise.begin() + 6), mask);
  EXPECT_EQ(S.dnnTensorTypes[102], CUDNN_DATA_INT32);
  EXPECT_EQ(S.dnnTensorTypes[104], CUDNN_DATA_BOOLEAN);
  ASSERT_FALSE(S.dnnPacks.empty());
  EXPECT_EQ(S.dnnPacks.back(), (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_TRUE(std::isinf(S.dnnByValue[6]) && S.dnnByValue[6] < 0);
}

TEST(TacticsOnEmu, CudnnAttentionComputesWhatOursDoes) {
  // Emu's host attention (FP32 scores and softmax, one rounding), then attention_finish
  // (the head merge): attention_mma's values within FP16 rounding.
  std::vector<uint16_t> x(2 * 16 * 48);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = floatToHalf(static_cast<float>((static_cast<int>(i * 7) % 19) - 9) / 8.0f);
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "no mask");
    auto [worst, largest] = emuDlcVsVendor(attentionPackage(causal), x, 2 * 16 * 16, 1);
    EXPECT_GT(largest, 0.1); // (not all zeros)
    EXPECT_LE(worst, 4e-3 * largest + 1e-3);
  }
}

TEST(TacticsOnEmu, TheVendorScheduleComputesWhatOursDoes) {
  // Emu runs cuDNN's convolution on the host as cuDNN defines it: FP32 sums, the bias
  // and ReLU of its fusion on the first layer, one rounding; on the second, cuDNN's
  // rounded result goes through conv_finish (the transposed store). Our kernels' values
  // within FP16 rounding.
  auto pkg = convPackage();
  rt::SessionOptions so;
  so.device = rt::DeviceKind::Emu;
  auto s = rt::Session::create(pkg, so);
  ASSERT_TRUE(s.ok()) << s.status().message();
  ASSERT_EQ((*s)->tactics().size(), 2u);
  EXPECT_EQ((*s)->tactics()[0].candidates.at(1).description.find("conv_finish"), std::string::npos);
  EXPECT_NE((*s)->tactics()[1].candidates.at(1).description.find("conv_finish"), std::string::npos);
  std::vector<uint16_t> x(16 * 64);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = floatToHalf(static_cast<float>((static_cast<int>(i * 13) % 21) - 10) / 8.0f);
  auto [worst, largest] = emuDlcVsVendor(pkg, x, 16 * 64, 2);
  EXPECT_GT(largest, 1.0); // (not all zeros)
  EXPECT_LE(worst, 4e-3 * largest);
}

} // namespace

namespace {

TEST(TacticsPackage, AnInvalidCudnnAttentionIsRefused) {
  // The attention step's output must be contiguous (no two outputs on one element) and
  // its scores at most 2^48: a package that says otherwise is refused before any
  // backend computes it.
  auto good = attentionPackage();
  const pkg::CudnnSdpa *a = nullptr;
  for (const pkg::Step *s : *good->meta().steps())
    if (s->op_as_CudnnSdpa())
      a = s->op_as_CudnnSdpa();
  ASSERT_NE(a, nullptr);
  std::vector<uint8_t> bytes(good->data(), good->data() + good->size());
  auto at = [&](const void *p) { return static_cast<const uint8_t *>(p) - good->data(); };
  auto resign = [](std::vector<uint8_t> &b) {
    uint32_t body = pkg::crc32(b.data() + pkg::kHeaderSize, b.size() - pkg::kHeaderSize);
    std::memcpy(b.data() + 48, &body, 4);
    uint32_t header = pkg::crc32(b.data(), 52);
    std::memcpy(b.data() + 52, &header, 4);
  };
  const auto *table = reinterpret_cast<const flatbuffers::Table *>(a);
  for (int mutation = 0; mutation < 2; ++mutation) {
    std::vector<uint8_t> bad = bytes;
    const int64_t v = mutation == 0 ? 0 : int64_t(1) << 31;
    if (mutation == 0) // O's row stride 0: every row on the same elements
      std::memcpy(bad.data() + at(a->o_strides()->data()) + 16, &v, 8);
    else // 2^31 keys and queries: 2^64 scores
      for (auto field : {pkg::CudnnSdpa::VT_SQ, pkg::CudnnSdpa::VT_SK})
        std::memcpy(bad.data() + at(table->GetAddressOf(field)), &v, 8);
    resign(bad);
    auto pf = pkg::PackageFile::fromBytes(bad.data(), bad.size(), "bad_attention.dlc");
    ASSERT_FALSE(pf.ok()) << mutation;
    EXPECT_NE(pf.status().message().find("is an invalid cuDNN attention"), std::string::npos)
        << pf.status().message();
  }
}

} // namespace
