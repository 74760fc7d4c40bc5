//===- Compiler.cpp - Lowering, compilation per target, packaging ---------===//
#include "dlc/codegen/Compiler.h"

#include "Lowering.h"
#include "Toolchain.h"

#include "dlc/package/Package.h"

#include <algorithm>
#include <chrono>
#include <future>
#include <set>

namespace dlc::codegen {

using namespace ir;

const std::vector<std::string> &defaultGpuTargets() {
  static const std::vector<std::string> t = {"sm_80", "sm_86", "sm_89", "sm_90", "compute_90"};
  return t;
}

namespace {

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

pkg::BufRef ref(const BufferRef &r) { return pkg::BufRef(r.buffer, r.offset); }

std::vector<uint8_t> writePackage(const Program &p, const std::vector<CompiledModule> &modules,
                                  bool embedSource) {
  pkg::PackageWriter w;
  auto &fb = w.builder();
  // Sections first: weights, modules, source.
  std::vector<pkg::Section> weightSections;
  for (const Tensor &t : p.weights)
    weightSections.push_back(w.addSection(t.raw(), t.byteSize()));
  std::vector<pkg::Section> moduleSections;
  for (const CompiledModule &m : modules)
    moduleSections.push_back(w.addSection(m.image.data(), m.image.size()));
  pkg::Section src = embedSource ? w.addSection(p.source.data(), p.source.size()) : pkg::Section(0, 0);

  std::vector<flatbuffers::Offset<pkg::Buffer>> buffers;
  for (const BufferDesc &b : p.buffers)
    buffers.push_back(pkg::CreateBuffer(fb, b.region, b.offset, b.bytes));
  auto tensors = [&](const std::vector<TensorDesc> &ts) {
    std::vector<flatbuffers::Offset<pkg::TensorInfo>> v;
    for (const TensorDesc &t : ts)
      v.push_back(pkg::CreateTensorInfo(fb, fb.CreateString(t.name), toPkg(t.type.dtype),
                                        fb.CreateVector(t.type.shape), t.buffer));
    return fb.CreateVector(v);
  };
  auto inputs = tensors(p.inputs), outputs = tensors(p.outputs);
  std::vector<flatbuffers::Offset<pkg::Weight>> weights;
  for (size_t i = 0; i < p.buffers.size(); ++i)
    if (p.buffers[i].weightIndex >= 0)
      weights.push_back(pkg::CreateWeight(fb, fb.CreateString(p.buffers[i].name), static_cast<uint32_t>(i),
                                          &weightSections[p.buffers[i].weightIndex]));
  std::vector<flatbuffers::Offset<pkg::Kernel>> kernels;
  for (const KernelDesc &k : p.kernels) {
    std::vector<flatbuffers::Offset<pkg::ArchResources>> res;
    for (const CompiledModule &m : modules) {
      if (m.kind != CompiledModule::Cubin)
        continue;
      auto it = m.resources.find(k.name);
      if (it == m.resources.end())
        continue;
      const KernelResources &r = it->second;
      res.push_back(pkg::CreateArchResources(fb, fb.CreateString(m.target), r.registers, r.spillStores,
                                             r.spillLoads, r.sharedBytes, r.stackBytes));
    }
    kernels.push_back(pkg::CreateKernel(fb, fb.CreateString(k.name), k.needsSync, fb.CreateVector(res), k.flops));
  }
  std::vector<flatbuffers::Offset<pkg::Module>> mods;
  for (size_t i = 0; i < modules.size(); ++i) {
    const CompiledModule &m = modules[i];
    pkg::ModuleKind kind = m.kind == CompiledModule::Cubin ? pkg::ModuleKind::Cubin
                           : m.kind == CompiledModule::Ptx ? pkg::ModuleKind::Ptx
                                                           : pkg::ModuleKind::EmuSharedObject;
    mods.push_back(pkg::CreateModule(fb, fb.CreateString(m.target), kind, &moduleSections[i]));
  }
  std::vector<flatbuffers::Offset<pkg::Step>> steps;
  for (const StepDesc &s : p.steps) {
    auto node = fb.CreateString(s.node);
    if (const auto *l = std::get_if<LaunchStep>(&s.op)) {
      std::vector<pkg::Arg> args;
      for (const KernelArg &a : l->args)
        args.emplace_back(a.kind == KernelArg::Pointer ? pkg::ArgKind::Pointer
                          : a.kind == KernelArg::I64   ? pkg::ArgKind::I64
                                                       : pkg::ArgKind::F32,
                          ref(a.ref), a.i, a.f);
      pkg::Dim3 grid(l->grid[0], l->grid[1], l->grid[2]), block(l->block[0], l->block[1], l->block[2]);
      auto launch = pkg::CreateLaunch(fb, l->kernel, &grid, &block, l->smem, fb.CreateVectorOfStructs(args),
                                      l->bytesRead, l->bytesWritten);
      steps.push_back(pkg::CreateStep(fb, pkg::StepKind::Launch, launch.Union(), node));
    } else if (const auto *g = std::get_if<GemmStep>(&s.op)) {
      pkg::BufRef a = ref(g->a), b = ref(g->b), c = ref(g->c);
      std::optional<pkg::BufRef> bias, cIn;
      if (g->bias)
        bias = ref(*g->bias);
      if (g->cIn)
        cIn = ref(*g->cIn);
      auto gemm = pkg::CreateGemm(fb, toPkg(g->dtype), g->transA, g->transB, g->m, g->n, g->k, g->batch, &a, &b,
                                  &c, g->lda, g->ldb, g->ldc, g->strideA, g->strideB, g->strideC, g->alpha, g->beta,
                                  bias ? &*bias : nullptr, g->activation, cIn ? &*cIn : nullptr);
      steps.push_back(pkg::CreateStep(fb, pkg::StepKind::Gemm, gemm.Union(), node));
    } else if (const auto *c = std::get_if<CopyStep>(&s.op)) {
      pkg::BufRef src = ref(c->src), dst = ref(c->dst);
      auto copy = pkg::CreateCopy(fb, &src, &dst, c->bytes);
      steps.push_back(pkg::CreateStep(fb, pkg::StepKind::Copy, copy.Union(), node));
    } else if (const auto *m = std::get_if<MemsetStep>(&s.op)) {
      pkg::BufRef dst = ref(m->dst);
      auto ms = pkg::CreateMemset(fb, &dst, m->bytes, m->value);
      steps.push_back(pkg::CreateStep(fb, pkg::StepKind::Memset, ms.Union(), node));
    }
  }
  auto root = pkg::CreatePackage(fb, pkg::kFormatVersion, fb.CreateString("dlc 0.1.0"), fb.CreateString(p.modelName),
                                 inputs, outputs, fb.CreateVector(buffers), p.arenaBytes, p.weightBytes,
                                 fb.CreateVector(weights), fb.CreateVector(kernels), fb.CreateVector(mods),
                                 fb.CreateVector(steps), embedSource ? &src : nullptr);
  return w.finish(root);
}

} // namespace

llvm::Expected<std::vector<uint8_t>> compileGraph(const Graph &g, const CompileOptions &opts,
                                                  CompileReport *report) {
  CompileReport local;
  CompileReport &rep = report ? *report : local;
  auto progress = [&](const std::string &s) {
    if (opts.progress)
      opts.progress(s);
  };
  ToolchainOptions tc;
  tc.cudaRoot = opts.cudaRoot;
  tc.hostCompiler = opts.hostCompiler;
  tc.cacheDir = opts.cacheDir;
  tc.useCache = opts.useCache;
  tc.failureDumpPath = opts.failureDumpPath;

  std::vector<std::string> targets = opts.targets;
  if (targets.empty()) {
    targets = defaultGpuTargets();
    if (hostCompilerAvailable(tc))
      targets.push_back("emu");
  }
  static const std::set<std::string> known = {"sm_80", "sm_86", "sm_89", "sm_90", "compute_80",
                                              "compute_86", "compute_89", "compute_90", "emu"};
  for (const std::string &t : targets)
    if (!known.count(t))
      return errorf("unknown target '{0}' (known: sm_80, sm_86, sm_89, sm_90, compute_80..compute_90, emu)", t);
  rep.targets = targets;

  auto t0 = std::chrono::steady_clock::now();
  progress("codegen: lowering " + std::to_string(g.numNodes()) + " nodes");
  Lowering lowering(g);
  auto program = lowering.run();
  if (!program)
    return program.takeError();
  rep.codegenSeconds = since(t0);
  rep.kernels = program->kernels.size();
  rep.steps = program->steps.size();
  for (const StepDesc &s : program->steps) {
    rep.launches += std::holds_alternative<LaunchStep>(s.op);
    rep.libraryCalls += std::holds_alternative<GemmStep>(s.op);
  }
  rep.arenaBytes = program->arenaBytes;
  rep.weightBytes = program->weightBytes;
  rep.cudaSource = program->source;
  progress("codegen: " + std::to_string(rep.kernels) + " kernels, " + std::to_string(rep.libraryCalls) +
           " library calls, " + std::to_string(rep.steps) + " steps");

  // Compile all targets in parallel (NVRTC per GPU target, the host compiler for emu).
  std::vector<std::string> gpu;
  bool emu = false;
  for (const std::string &t : targets) {
    if (t == "emu")
      emu = true;
    else
      gpu.push_back(t);
  }
  std::vector<CompiledModule> modules;
  if (!program->kernels.empty()) {
    auto t1 = std::chrono::steady_clock::now();
    std::vector<std::future<llvm::Expected<CompiledModule>>> jobs;
    for (const std::string &t : gpu)
      jobs.push_back(std::async(std::launch::async, [&, t] { return compileWithNvrtc(program->source, t, tc); }));
    std::future<llvm::Expected<CompiledModule>> emuJob;
    if (emu)
      emuJob = std::async(std::launch::async, [&] { return compileForEmu(program->source, tc); });
    std::string firstError;
    for (size_t i = 0; i < jobs.size(); ++i) {
      auto m = jobs[i].get();
      if (!m) {
        std::string e = llvm::toString(m.takeError());
        if (firstError.empty())
          firstError = e;
        continue;
      }
      int spills = 0, maxRegs = 0;
      for (const auto &[name, r] : m->resources) {
        spills += r.spillStores + r.spillLoads;
        maxRegs = std::max(maxRegs, r.registers);
      }
      rep.totalSpills += spills;
      rep.maxRegisters = std::max(rep.maxRegisters, maxRegs);
      progress("nvrtc " + gpu[i] + " [" + std::to_string(i + 1) + "/" + std::to_string(gpu.size()) + "] " +
               std::to_string(m->image.size()) + " bytes" + (m->cached ? " (cached)" : "") +
               (m->kind == CompiledModule::Cubin
                    ? ", max " + std::to_string(maxRegs) + " registers, " + std::to_string(spills) + " spill bytes"
                    : ""));
      modules.push_back(std::move(*m));
    }
    rep.gpuCompileSeconds = since(t1);
    if (emu) {
      auto m = emuJob.get();
      if (!m) {
        std::string e = llvm::toString(m.takeError());
        if (firstError.empty())
          firstError = e;
      } else {
        progress("host compiler emu [" + std::to_string(m->image.size()) + " bytes" +
                 (m->cached ? ", cached" : "") + "]");
        modules.push_back(std::move(*m));
      }
      rep.emuCompileSeconds = since(t1);
    }
    if (!firstError.empty())
      return makeError(firstError);
  }
  progress("package: writing");
  auto bytes = writePackage(*program, modules, opts.embedSource);
  rep.packageBytes = bytes.size();
  return bytes;
}

} // namespace dlc::codegen
