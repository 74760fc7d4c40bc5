#include "RuntimeTestUtil.h"

#include "dlc/codegen/Compiler.h"
#include "dlc/ir/TextIR.h"
#include "dlc/passes/Pass.h"

#include "llvm/Support/Error.h"

#include <cstring>
#include <map>

namespace dlc::test {

std::vector<uint8_t> buildTestPackage(const std::string &src,
                                      const std::vector<std::pair<std::string, int64_t>> &buffers,
                                      const std::vector<TestLaunch> &launches,
                                      const std::vector<std::string> &gpuTargets) {
  codegen::ToolchainOptions tc;
  tc.emuCheck = true; // hand-written kernels: every access instrumented for --check
  tc.useCache = false;
  std::string full = "#include \"dlc_device.cuh\"\n" + src;
  std::vector<codegen::CompiledModule> modules;
  for (const std::string &t : gpuTargets) {
    auto m = codegen::compileWithNvrtc(full, t, tc);
    EXPECT_TRUE(bool(m)) << (m ? "" : llvm::toString(m.takeError()));
    if (m)
      modules.push_back(std::move(*m));
  }
  // The emu entry points, as the code generator writes them.
  std::map<std::string, size_t> arity;
  for (const TestLaunch &l : launches)
    arity[l.kernel] = l.pointerArgs.size();
  // Each parameter is a pointer: consecutive 8-byte slots of the parameter buffer.
  std::string emu = "#ifdef DLC_EMU\nthread_local dlc_emu_thread *dlc_emu_cur = nullptr;\n"
                    "const dlc_emu_api *dlc_emu_api_ptr = nullptr;\n";
  std::string table;
  for (const auto &[name, n] : arity) {
    std::string call;
    for (size_t i = 0; i < n; ++i)
      call += (i ? ", " : "") + std::string("*(float *const *)((const char *)a + ") +
              std::to_string(8 * i) + ")";
    emu += "static void " + name + "__thunk(const void *a) { " + name + "(" + call + "); }\n";
    table += "{\"" + name + "\", " + name + "__thunk},";
  }
  emu += "static const dlc_emu_kernel tbl[] = {" + table +
         "{nullptr, nullptr}};\n"
         "extern \"C\" __attribute__((visibility(\"default\"))) int dlc_emu_abi_version(void) { "
         "return DLC_EMU_ABI_VERSION; }\n"
         "extern \"C\" __attribute__((visibility(\"default\"))) const dlc_emu_kernel "
         "*dlc_emu_kernels(int *n) { *n = " +
         std::to_string(arity.size()) +
         "; return tbl; }\n"
         "extern \"C\" __attribute__((visibility(\"default\"))) void dlc_emu_set_api(const "
         "dlc_emu_api *a) { dlc_emu_api_ptr = a; }\n"
         "extern \"C\" __attribute__((visibility(\"default\"))) void "
         "dlc_emu_set_thread(dlc_emu_thread *t) { dlc_emu_cur = t; }\n#endif\n";
  auto m = codegen::compileForEmu(full + emu, tc);
  EXPECT_TRUE(bool(m)) << (m ? "" : llvm::toString(m.takeError()));
  if (m)
    modules.push_back(std::move(*m));

  pkg::PackageWriter w;
  std::vector<pkg::Section> sections;
  for (const auto &mod : modules)
    sections.push_back(w.addSection(mod.image.data(), mod.image.size()));
  auto &fb = w.builder();
  std::vector<flatbuffers::Offset<pkg::Buffer>> bufs;
  std::vector<flatbuffers::Offset<pkg::TensorInfo>> tensors;
  uint64_t arena = 0;
  for (size_t i = 0; i < buffers.size(); ++i) {
    uint64_t bytes = buffers[i].second * 4;
    bufs.push_back(pkg::CreateBuffer(fb, pkg::Region::Arena, arena, bytes));
    std::vector<int64_t> shape{buffers[i].second};
    tensors.push_back(pkg::CreateTensorInfo(fb, fb.CreateString(buffers[i].first), pkg::DType::F32,
                                            fb.CreateVector(shape), static_cast<uint32_t>(i)));
    arena += (bytes + 255) / 256 * 256;
  }
  std::map<std::string, uint32_t> kernelIndex;
  std::vector<flatbuffers::Offset<pkg::Kernel>> kernels;
  for (const TestLaunch &l : launches) {
    if (kernelIndex.count(l.kernel))
      continue;
    std::vector<flatbuffers::Offset<pkg::ArchResources>> res;
    for (const auto &mod : modules) {
      auto it = mod.resources.find(l.kernel);
      if (mod.kind == codegen::CompiledModule::Cubin && it != mod.resources.end())
        res.push_back(pkg::CreateArchResources(fb, fb.CreateString(mod.target),
                                               it->second.registers, 0, 0, it->second.sharedBytes,
                                               0));
    }
    kernelIndex[l.kernel] = static_cast<uint32_t>(kernels.size());
    kernels.push_back(pkg::CreateKernel(fb, fb.CreateString(l.kernel), fb.CreateString(l.kernel), 0,
                                        l.needsSync, l.cooperative, fb.CreateVector(res)));
  }
  std::vector<flatbuffers::Offset<pkg::Step>> steps;
  for (const TestLaunch &l : launches) {
    std::vector<uint8_t> params(8 * l.pointerArgs.size(), 0);
    std::vector<pkg::Reloc> relocs;
    for (size_t i = 0; i < l.pointerArgs.size(); ++i)
      relocs.emplace_back(static_cast<uint32_t>(8 * i), pkg::BufRef(l.pointerArgs[i], 0));
    pkg::Dim3 g(l.grid[0], l.grid[1], l.grid[2]), b(l.block[0], l.block[1], l.block[2]);
    auto launch = pkg::CreateLaunch(fb, kernelIndex[l.kernel], &g, &b, l.dynamicSmem,
                                    fb.CreateVector(params), fb.CreateVectorOfStructs(relocs));
    steps.push_back(
        pkg::CreateStep(fb, pkg::StepKind::Launch, launch.Union(), fb.CreateString("test")));
  }
  std::vector<flatbuffers::Offset<pkg::Module>> mods;
  for (size_t i = 0; i < modules.size(); ++i)
    mods.push_back(pkg::CreateModule(
        fb, fb.CreateString(modules[i].target),
        modules[i].kind == codegen::CompiledModule::Cubin ? pkg::ModuleKind::Cubin
        : modules[i].kind == codegen::CompiledModule::Ptx ? pkg::ModuleKind::Ptx
                                                          : pkg::ModuleKind::EmuSharedObject,
        &sections[i]));
  auto tv = fb.CreateVector(tensors);
  auto root =
      pkg::CreatePackage(fb, pkg::kFormatVersion, fb.CreateString("test"), fb.CreateString("test"),
                         tv, tv, fb.CreateVector(bufs), arena, 0, 0, fb.CreateVector(kernels),
                         fb.CreateVector(mods), fb.CreateVector(steps));
  return w.finish(root);
}

Result<std::vector<std::vector<float>>> runOnEmu(const std::vector<uint8_t> &bytes,
                                                 const std::vector<std::vector<float>> &inputs,
                                                 const std::vector<std::string> &outputs,
                                                 const rt::SessionOptions &options) {
  auto pf = pkg::PackageFile::fromBytes(bytes.data(), bytes.size(), "test.dlc");
  if (!pf)
    return pf.takeStatus();
  rt::SessionOptions so = options;
  so.device = rt::DeviceKind::Emu;
  so.allowHostCode = true; // the test's own kernels, in a package it built unsigned
  auto s = rt::Session::create(*pf, so);
  if (!s)
    return s.takeStatus();
  const pkg::Package &m = (*pf)->meta();
  for (size_t i = 0; i < m.inputs()->size(); ++i) {
    rt::HostTensor t;
    t.shape = {m.inputs()->Get(i)->shape()->Get(0)};
    t.data.resize(t.shape[0] * 4, 0);
    if (i < inputs.size())
      std::memcpy(t.data.data(), inputs[i].data(), std::min(t.data.size(), inputs[i].size() * 4));
    if (Status st = (*s)->setInput(m.inputs()->Get(i)->name()->str(), t))
      return st;
  }
  if (Status st = (*s)->run())
    return st;
  std::vector<std::vector<float>> out;
  for (const std::string &name : outputs) {
    auto t = (*s)->getOutput(name);
    if (!t)
      return t.takeStatus();
    std::vector<float> v(t->data.size() / 4);
    std::memcpy(v.data(), t->data.data(), t->data.size());
    out.push_back(std::move(v));
  }
  return out;
}

std::vector<uint8_t> compileIRForEmu(const char *text, const char *name, const char *passes) {
  auto g = ir::parseGraph(text, name);
  EXPECT_TRUE(bool(g)) << (g ? "" : llvm::toString(g.takeError()));
  if (!g)
    return {};
  if (passes) {
    auto pipeline = passes::parsePipeline(passes);
    EXPECT_TRUE(bool(pipeline)) << (pipeline ? "" : llvm::toString(pipeline.takeError()));
    if (!pipeline)
      return {};
    passes::PassManager pm;
    passes::PassContext ctx;
    if (llvm::Error e = pm.run(**g, *pipeline, ctx)) {
      ADD_FAILURE() << llvm::toString(std::move(e));
      return {};
    }
  }
  codegen::CompileOptions co;
  co.targets = {"emu"};
  auto p = codegen::compileGraph(**g, co);
  EXPECT_TRUE(bool(p)) << (p ? "" : llvm::toString(p.takeError()));
  return p ? std::move(*p) : std::vector<uint8_t>{};
}

std::vector<uint8_t> compileShapeRangeIR(const std::function<std::string(int64_t)> &textAt,
                                         const std::string &input, uint32_t axis, int64_t min,
                                         int64_t max, const std::vector<std::string> &targets) {
  // Point 0 is the opt shape (max), then min .. max - 1.
  auto graphAt = [&](size_t i) -> llvm::Expected<std::unique_ptr<ir::Graph>> {
    int64_t v = i == 0 ? max : min + static_cast<int64_t>(i) - 1;
    auto g = ir::parseGraph(textAt(v), "range.ir");
    if (!g)
      return g.takeError();
    passes::PassManager pm;
    passes::PassContext ctx;
    if (llvm::Error e = pm.run(**g, passes::defaultPipeline(2), ctx))
      return e;
    return g;
  };
  codegen::CompileOptions co;
  co.targets = targets;
  auto image = codegen::compileShapeRangeImage(static_cast<size_t>(max - min + 1), graphAt,
                                               {{input, axis, min, max, max}}, co);
  EXPECT_TRUE(bool(image)) << (image ? "" : llvm::toString(image.takeError()));
  return image ? image->bytes() : std::vector<uint8_t>{};
}

} // namespace dlc::test
