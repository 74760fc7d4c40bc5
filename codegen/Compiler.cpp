//===- Compiler.cpp - Lowering, compilation per target, packaging ---------===//
#include "dlc/codegen/Compiler.h"

#include "Lowering.h"
#include "MemoryPlan.h"
#include "Toolchain.h"
#include "dlc/package/Package.h"
#include "dlc/support/HostKey.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <set>
#include <thread>

namespace dlc::codegen {

using namespace ir;

const std::vector<std::string> &defaultGpuTargets() {
  static const std::vector<std::string> t = {"sm_80", "sm_86", "sm_89", "sm_90", "compute_80"};
  return t;
}

std::vector<std::string> cubinArchs(const std::vector<std::string> &targets) {
  std::vector<std::string> archs;
  for (const std::string &t : targets)
    if (t.rfind("sm_", 0) == 0)
      archs.push_back(t);
  return archs;
}

llvm::Expected<std::vector<uint8_t>> compileCubin(const std::string &source,
                                                  const std::string &arch) {
  llvm::Expected<CompiledModule> m = compileWithNvrtc(source, arch, ToolchainOptions{});
  if (!m)
    return m.takeError();
  return std::move(m->image);
}

namespace {

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

pkg::BufRef ref(const BufferRef &r) {
  return pkg::BufRef(r.buffer, r.offset);
}

/// The package image; its sections point into `p` and `modules`.
pkg::PackageImage writePackage(const Program &p, const std::vector<CompiledModule> &modules,
                               bool embedSource, const std::string &sourceModel,
                               CompileReport &rep) {
  pkg::PackageWriter w;
  auto &fb = w.builder();
  // Sections first: weights, modules, source.
  std::vector<pkg::Section> weightSections;
  for (const Tensor &t : p.weights)
    weightSections.push_back(w.addSection(t.raw(), t.byteSize()));
  std::vector<pkg::Section> moduleSections;
  for (const CompiledModule &m : modules)
    moduleSections.push_back(w.addSection(m.image.data(), m.image.size()));
  pkg::Section src =
      embedSource ? w.addSection(p.source.data(), p.source.size()) : pkg::Section(0, 0);
  pkg::Section model = w.addSection(sourceModel.data(), sourceModel.size());
  std::vector<pkg::Section> variableSections;
  for (const VariableDesc &v : p.variables)
    variableSections.push_back(w.addSection(v.initial.raw(), v.initial.byteSize()));
  // Host code (the emu module) is signed with this user's key, so that this user's
  // sessions run it without asking (dlc/support/HostKey.h).
  bool hostCode = std::any_of(modules.begin(), modules.end(), [](const CompiledModule &m) {
    return m.kind == CompiledModule::EmuObject;
  });
  pkg::Section signature = hostCode ? w.reserveSignature() : pkg::Section(0, 0);
  std::optional<HostKey> key;
  if (hostCode) {
    if (auto k = loadHostKey(/*create=*/true); k.ok())
      key = *k;
    else
      rep.warnings.push_back(
          "the package's host code (its emu module) is not signed: " + k.status().message() +
          "; running it on emu will need --allow-host-code");
  }

  auto buffersOf = [&](const std::vector<BufferDesc> &bs) {
    std::vector<flatbuffers::Offset<pkg::Buffer>> v;
    for (const BufferDesc &b : bs)
      v.push_back(pkg::CreateBuffer(fb, b.region, b.offset, b.bytes));
    return fb.CreateVector(v);
  };
  auto buffers = buffersOf(p.buffers);
  auto tensors = [&](const std::vector<TensorDesc> &ts) {
    std::vector<flatbuffers::Offset<pkg::TensorInfo>> v;
    for (const TensorDesc &t : ts)
      v.push_back(pkg::CreateTensorInfo(fb, fb.CreateString(t.name), toPkg(t.type.dtype),
                                        fb.CreateVector(t.type.shape), t.buffer));
    return fb.CreateVector(v);
  };
  auto inputs = tensors(p.inputs), outputs = tensors(p.outputs);
  decltype(outputs) evalOutputs;
  if (!p.evalOutputs.empty())
    evalOutputs = tensors(p.evalOutputs);
  std::vector<flatbuffers::Offset<pkg::Weight>> weights;
  for (size_t i = 0; i < p.buffers.size(); ++i)
    if (p.buffers[i].weightIndex >= 0)
      weights.push_back(pkg::CreateWeight(fb, fb.CreateString(p.buffers[i].name),
                                          static_cast<uint32_t>(i),
                                          &weightSections[p.buffers[i].weightIndex]));
  std::vector<flatbuffers::Offset<pkg::Kernel>> kernels;
  for (const KernelDesc &k : p.kernels) {
    std::vector<flatbuffers::Offset<pkg::ArchResources>> res;
    for (const CompiledModule &m : modules) {
      if (m.kind != CompiledModule::Cubin || m.chunk != k.chunk)
        continue;
      auto it = m.resources.find(k.symbol);
      if (it == m.resources.end())
        continue;
      const KernelResources &r = it->second;
      res.push_back(pkg::CreateArchResources(fb, fb.CreateString(m.target), r.registers,
                                             r.spillStores, r.spillLoads, r.sharedBytes,
                                             r.stackBytes));
    }
    kernels.push_back(pkg::CreateKernel(fb, fb.CreateString(k.name), fb.CreateString(k.symbol),
                                        k.chunk, k.needsSync, k.cooperative, fb.CreateVector(res),
                                        fb.CreateString(k.templateName), k.tensorCore, k.tf32,
                                        k.integer, k.fp8));
  }
  std::vector<flatbuffers::Offset<pkg::Module>> mods;
  for (size_t i = 0; i < modules.size(); ++i) {
    const CompiledModule &m = modules[i];
    pkg::ModuleKind kind = m.kind == CompiledModule::Cubin ? pkg::ModuleKind::Cubin
                           : m.kind == CompiledModule::Ptx ? pkg::ModuleKind::Ptx
                                                           : pkg::ModuleKind::EmuSharedObject;
    mods.push_back(
        pkg::CreateModule(fb, fb.CreateString(m.target), kind, &moduleSections[i], m.chunk));
  }
  auto launchOf = [&](const LaunchStep &l) {
    std::vector<pkg::Reloc> relocs;
    for (const auto &[offset, r] : l.params.relocs)
      relocs.emplace_back(offset, ref(r));
    pkg::Dim3 grid(l.grid[0], l.grid[1], l.grid[2]), block(l.block[0], l.block[1], l.block[2]);
    return pkg::CreateLaunch(fb, l.kernel, &grid, &block, l.smem, fb.CreateVector(l.params.bytes),
                             fb.CreateVectorOfStructs(relocs), l.bytesRead, l.bytesWritten,
                             l.flops);
  };
  auto stepsOf = [&](const std::vector<StepDesc> &stepDescs) {
    std::vector<flatbuffers::Offset<pkg::Step>> steps;
    for (const StepDesc &s : stepDescs) {
      auto node = fb.CreateString(s.node);
      flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<flatbuffers::String>>> archs;
      if (!s.archs.empty())
        archs = fb.CreateVectorOfStrings(s.archs);
      std::optional<pkg::BufRef> cond;
      if (s.predicate)
        cond = ref(s.predicate->cond);
      auto step = [&](pkg::StepKind kind, flatbuffers::Offset<void> op) {
        steps.push_back(pkg::CreateStep(fb, kind, op, node, archs, s.schedules,
                                        cond ? &*cond : nullptr, s.predicate && s.predicate->when,
                                        s.altGroup, s.alt, s.tactic,
                                        s.tacticDesc.empty() ? 0 : fb.CreateString(s.tacticDesc)));
      };
      if (const auto *l = std::get_if<LaunchStep>(&s.op)) {
        step(pkg::StepKind::Launch, launchOf(*l).Union());
      } else if (const auto *g = std::get_if<GemmStep>(&s.op)) {
        pkg::BufRef a = ref(g->a), b = ref(g->b), c = ref(g->c);
        std::optional<pkg::BufRef> bias, cIn;
        if (g->bias)
          bias = ref(*g->bias);
        if (g->cIn)
          cIn = ref(*g->cIn);
        pkg::BufRef ws = ref(g->workspace);
        flatbuffers::Offset<pkg::Launch> fallback;
        if (g->fallback)
          fallback = launchOf(*g->fallback);
        auto gemm = pkg::CreateGemm(
            fb, toPkg(g->dtype), g->transA, g->transB, g->m, g->n, g->k, g->batch, &a, &b, &c,
            g->lda, g->ldb, g->ldc, g->strideA, g->strideB, g->strideC, g->alpha, g->beta,
            bias ? &*bias : nullptr, g->activation, cIn ? &*cIn : nullptr,
            g->workspaceBytes ? &ws : nullptr, g->workspaceBytes, fallback, g->tf32, g->algoRank);
        step(pkg::StepKind::Gemm, gemm.Union());
      } else if (const auto *v = std::get_if<CudnnConvStep>(&s.op)) {
        pkg::BufRef x = ref(v->x), w = ref(v->w), y = ref(v->y), ws = ref(v->workspace);
        std::optional<pkg::BufRef> bias;
        if (v->bias)
          bias = ref(*v->bias);
        auto conv = pkg::CreateCudnnConv(
            fb, toPkg(v->dtype), &x, &w, &y, v->n, v->c, v->k, v->groups, fb.CreateVector(v->in),
            fb.CreateVector(v->out), fb.CreateVector(v->kernel), fb.CreateVector(v->stride),
            fb.CreateVector(v->dilation), fb.CreateVector(v->padBegin), fb.CreateVector(v->padEnd),
            v->workspaceBytes ? &ws : nullptr, v->workspaceBytes, bias ? &*bias : nullptr, v->relu);
        step(pkg::StepKind::CudnnConv, conv.Union());
      } else if (const auto *a = std::get_if<CudnnSdpaStep>(&s.op)) {
        pkg::BufRef q = ref(a->q), k = ref(a->k), v = ref(a->v), o = ref(a->o),
                    ws = ref(a->workspace);
        auto vec = [&](const std::array<int64_t, 4> &x) {
          return fb.CreateVector(std::vector<int64_t>(x.begin(), x.end()));
        };
        auto sdpa = pkg::CreateCudnnSdpa(fb, toPkg(a->dtype), &q, &k, &v, &o, a->b, a->h, a->sq,
                                         a->sk, a->d, a->dv, vec(a->qStrides), vec(a->kStrides),
                                         vec(a->vStrides), vec(a->oStrides), a->scale, a->causal,
                                         a->workspaceBytes ? &ws : nullptr, a->workspaceBytes);
        step(pkg::StepKind::CudnnSdpa, sdpa.Union());
      } else if (const auto *c = std::get_if<CopyStep>(&s.op)) {
        pkg::BufRef src = ref(c->src), dst = ref(c->dst);
        auto copy = pkg::CreateCopy(fb, &src, &dst, c->bytes);
        step(pkg::StepKind::Copy, copy.Union());
      } else if (const auto *m = std::get_if<MemsetStep>(&s.op)) {
        pkg::BufRef dst = ref(m->dst);
        auto ms = pkg::CreateMemset(fb, &dst, m->bytes, m->value);
        step(pkg::StepKind::Memset, ms.Union());
      } else if (const auto *a = std::get_if<CollectiveStep>(&s.op)) {
        pkg::BufRef staging = ref(a->staging);
        std::vector<pkg::BufRef> sources;
        for (const BufferRef &r : a->sources)
          sources.push_back(ref(r));
        std::optional<pkg::BufRef> output;
        if (a->output)
          output = ref(*a->output);
        auto ar = pkg::CreateCollective(fb, a->bucket, toPkg(a->dtype), &staging, a->count,
                                        fb.CreateVectorOfStructs(sources),
                                        fb.CreateVector(a->offsets), fb.CreateVector(a->sizes),
                                        a->op, a->ranks, output ? &*output : nullptr);
        step(pkg::StepKind::Collective, ar.Union());
      } else if (const auto *cw = std::get_if<CollectiveWaitStep>(&s.op)) {
        pkg::BufRef staging = ref(cw->staging);
        std::optional<pkg::BufRef> output;
        if (cw->output)
          output = ref(*cw->output);
        step(pkg::StepKind::CollectiveWait,
             pkg::CreateCollectiveWait(fb, cw->bucket, &staging, output ? &*output : nullptr)
                 .Union());
      }
    }
    return fb.CreateVector(steps);
  };
  auto steps = stepsOf(p.steps);
  std::vector<flatbuffers::Offset<pkg::Variable>> variables;
  for (size_t i = 0; i < p.variables.size(); ++i) {
    const VariableDesc &v = p.variables[i];
    variables.push_back(pkg::CreateVariable(fb, fb.CreateString(v.name), toPkg(v.initial.dtype()),
                                            fb.CreateVector(v.initial.shape()), v.buffer,
                                            &variableSections[i], v.trainable, v.sharded));
  }
  auto checksOf = [&](const std::vector<CheckDesc> &cs) {
    std::vector<flatbuffers::Offset<pkg::Check>> v;
    for (const CheckDesc &c : cs)
      v.push_back(pkg::CreateCheck(fb, c.offset, fb.CreateString(c.node), fb.CreateString(c.what)));
    return fb.CreateVector(v);
  };
  auto checks = checksOf(p.checks);
  std::vector<flatbuffers::Offset<pkg::ShapeRange>> ranges;
  for (const ShapeRangeDesc &r : p.shapeRanges)
    ranges.push_back(
        pkg::CreateShapeRange(fb, fb.CreateString(r.input), r.axis, r.min, r.max, r.opt));
  std::vector<flatbuffers::Offset<pkg::ShapeVariant>> variants;
  for (const ScheduleVariant &v : p.variants) {
    auto vin = tensors(v.inputs), vout = tensors(v.outputs);
    auto vbuf = buffersOf(v.buffers);
    auto vsteps = stepsOf(v.steps);
    auto vchecks = checksOf(v.checks);
    variants.push_back(pkg::CreateShapeVariant(fb, vin, vout, vbuf, vsteps, v.arenaBytes,
                                               v.maxLiveBytes, vchecks, v.checkBuffer));
  }
  std::vector<flatbuffers::Offset<pkg::BoundInput>> bound;
  for (const ir::Graph::BoundInput &b : p.boundInputs) {
    std::string values;
    int64_t n = b.value.numElements(), shown = std::min<int64_t>(n, 8);
    for (int64_t i = 0; i < shown; ++i)
      values += (i ? ", " : "") + (ir::isFloat(b.value.dtype())
                                       ? llvm::formatv("{0:g}", b.value.getDouble(i)).str()
                                       : std::to_string(b.value.getInt(i)));
    if (shown < n)
      values += ", ... (" + std::to_string(n) + " values)";
    bound.push_back(pkg::CreateBoundInput(fb, fb.CreateString(b.name), toPkg(b.value.dtype()),
                                          fb.CreateVector(b.value.shape()),
                                          fb.CreateString(values)));
  }
  bool gpuModules = std::any_of(modules.begin(), modules.end(), [](const CompiledModule &m) {
    return m.kind != CompiledModule::EmuObject;
  });
  auto root = pkg::CreatePackage(
      fb, pkg::kFormatVersion, fb.CreateString("dlc 0.1.0"), fb.CreateString(p.modelName), inputs,
      outputs, buffers, p.arenaBytes, p.weightBytes, fb.CreateVector(weights),
      fb.CreateVector(kernels), fb.CreateVector(mods), steps, embedSource ? &src : nullptr,
      p.naiveArenaBytes, p.maxLiveBytes, gpuModules ? nvrtcVersionNumber() : 0, checks,
      p.checkBuffer, fb.CreateVector(variables), p.commitSteps,
      sourceModel.empty() ? nullptr : &model, evalOutputs,
      bound.empty() ? 0 : fb.CreateVector(bound), ranges.empty() ? 0 : fb.CreateVector(ranges),
      variants.empty() ? 0 : fb.CreateVector(variants), p.bucketBytes, p.zeroRanks,
      hostCode ? &signature : nullptr);
  return w.finishImage(root, key ? &*key : nullptr);
}

/// The compilation of a program's chunks for every target as a set of jobs on a
/// small thread pool: NVRTC's front end once per chunk (to PTX), then ptxas once per
/// (chunk, GPU architecture), and the host compiler once per chunk for emu.
class CompileJobs {
public:
  CompileJobs(Program &p, const std::vector<std::string> &targets, const ToolchainOptions &tc,
              const CompileOptions &opts, CompileReport &rep)
      : p_(p), tc_(tc), opts_(opts), rep_(rep) {
    int base = 1000;
    for (const std::string &t : targets) {
      if (t == "emu" || t == "emu-check") {
        emu_ = true;
        tc_.emuCheck |= t == "emu-check";
        continue;
      }
      int v = std::atoi(t.c_str() + t.find('_') + 1);
      base = std::min(base, v);
      if (t.rfind("sm_", 0) == 0)
        sms_.push_back(t);
      else
        ptxTargets_.push_back(t);
    }
    // One front end per chunk for the lowest architecture; an explicitly requested
    // newer PTX target needs its own. A chunk with float8 kernels has a second one at
    // compute_89, for its cubins of sm_89 and later, which compute float8 natively
    // (mma.sync and cvt on e4m3/e5m2: dlc_mma.cuh, dlc_device.cuh).
    if (base < 1000)
      virtualArchs_.push_back("compute_" + std::to_string(base));
    for (const std::string &t : ptxTargets_)
      if (std::find(virtualArchs_.begin(), virtualArchs_.end(), t) == virtualArchs_.end())
        virtualArchs_.push_back(t);
    for (const std::string &src : p_.chunkSources)
      float8Chunk_.push_back(src.find("dlc::f8e") != std::string::npos);
    const bool float8 =
        std::find(float8Chunk_.begin(), float8Chunk_.end(), true) != float8Chunk_.end();
    if (float8 && base < 89 && std::any_of(sms_.begin(), sms_.end(), [](const std::string &sm) {
          return smNumber(sm) >= 89;
        })) {
      auto it = std::find(virtualArchs_.begin(), virtualArchs_.end(), "compute_89");
      if (it == virtualArchs_.end())
        it = virtualArchs_.insert(virtualArchs_.end(), "compute_89");
      float8Front_ = static_cast<size_t>(it - virtualArchs_.begin());
    }
  }

  /// Whether chunk c has a front end at virtualArchs_[v]: the float8 one (unless it is
  /// an explicit PTX target) only for float8 chunks.
  bool hasFront(size_t c, size_t v) const {
    return v != float8Front_ || float8Front_ == 0 || float8Chunk_[c] ||
           std::find(ptxTargets_.begin(), ptxTargets_.end(), virtualArchs_[v]) != ptxTargets_.end();
  }

  llvm::Error run() {
    size_t chunks = p_.chunkSources.size();
    ptx_.assign(chunks * virtualArchs_.size(), {});
    // Interleave the long jobs (front ends, host compiles) so that both start early;
    // ptxas jobs are queued as their front end finishes.
    total_ = chunks * (sms_.size() + (emu_ ? 1 : 0));
    for (size_t c = 0; c < chunks; ++c) {
      for (size_t v = 0; v < virtualArchs_.size(); ++v)
        if (hasFront(c, v)) {
          queue_.push_back([this, c, v] { frontEnd(c, v); });
          ++total_;
        }
      if (emu_)
        queue_.push_back([this, c] { hostCompile(c); });
    }
    unsigned workers = std::max(1u, std::min<unsigned>(std::thread::hardware_concurrency(), 16));
    std::vector<std::thread> pool;
    for (unsigned i = 0; i < workers; ++i)
      pool.emplace_back([this] { work(); });
    for (std::thread &t : pool)
      t.join();
    if (!firstError_.empty())
      return makeError(firstError_);
    // Symbols: template instantiations are known to the GPU modules by mangled names.
    for (KernelDesc &k : p_.kernels)
      if (!k.nameExpr.empty() && !virtualArchs_.empty()) {
        const PtxModule &m = ptx_[k.chunk * virtualArchs_.size()];
        auto it = std::find(m.exprs.begin(), m.exprs.end(), k.nameExpr);
        if (it != m.exprs.end())
          k.symbol = m.module.loweredNames[it - m.exprs.begin()];
      }
    std::sort(modules_.begin(), modules_.end(),
              [](const CompiledModule &a, const CompiledModule &b) {
                return std::tie(a.chunk, a.kind, a.target) < std::tie(b.chunk, b.kind, b.target);
              });
    return llvm::Error::success();
  }

  std::vector<CompiledModule> takeModules() { return std::move(modules_); }

private:
  struct PtxModule {
    codegen::PtxModule module;
    std::vector<std::string> exprs;
  };

  void work() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return !queue_.empty() || done_ == total_ || !firstError_.empty(); });
        if (queue_.empty())
          return;
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      job();
    }
  }

  void finish(const std::string &phase, double seconds, bool cached, const std::string &what,
              llvm::Error e, size_t skipped = 0) {
    std::lock_guard<std::mutex> lock(mu_);
    if (e) {
      if (firstError_.empty())
        firstError_ = llvm::toString(std::move(e));
      else
        llvm::consumeError(std::move(e));
      queue_.clear();
    }
    done_ += 1 + skipped;
    CompileReport::Phase &ph = rep_.phases[phase];
    ph.jobs += 1;
    ph.cached += cached;
    ph.seconds += seconds;
    if (opts_.onJob)
      opts_.onJob(done_, total_, what);
    cv_.notify_all();
  }

  void frontEnd(size_t c, size_t v) {
    PtxModule pm;
    for (const KernelDesc &k : p_.kernels)
      if (k.chunk == c && !k.nameExpr.empty())
        pm.exprs.push_back(k.nameExpr);
    auto m = compileToPtx(p_.chunkSources[c], virtualArchs_[v], pm.exprs, tc_);
    std::string what = "nvrtc chunk " + std::to_string(c) + " (" + virtualArchs_[v] + ")";
    size_t fed = 0; // the ptxas jobs this front end's PTX feeds
    for (const std::string &sm : sms_)
      fed += frontFor(c, sm) == v;
    if (!m)
      return finish("nvrtc", 0, false, what, m.takeError(), fed);
    pm.module = std::move(*m);
    double secs = pm.module.seconds;
    bool cached = pm.module.cached;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ptx_[c * virtualArchs_.size() + v] = std::move(pm);
      const std::string &va = virtualArchs_[v];
      if (std::find(ptxTargets_.begin(), ptxTargets_.end(), va) != ptxTargets_.end()) {
        CompiledModule out;
        out.target = va;
        out.kind = CompiledModule::Ptx;
        out.chunk = static_cast<uint32_t>(c);
        const std::string &text = ptx_[c * virtualArchs_.size() + v].module.ptx;
        out.image.assign(text.begin(), text.end());
        modules_.push_back(std::move(out));
      }
      // The base front end's PTX feeds ptxas for every architecture (the float8 one's
      // for sm_89 and later).
      for (const std::string &sm : sms_)
        if (frontFor(c, sm) == v)
          queue_.push_back([this, c, sm] { assemble(c, sm); });
    }
    finish("nvrtc", secs, cached, what, llvm::Error::success());
  }

  void assemble(size_t c, const std::string &sm) {
    const codegen::PtxModule *ptx;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ptx = &ptx_[c * virtualArchs_.size() + frontFor(c, sm)].module;
    }
    auto m = ptxToCubin(*ptx, sm, tc_);
    std::string what = "ptxas " + sm + " chunk " + std::to_string(c);
    if (!m)
      return finish("ptxas " + sm, 0, false, what, m.takeError());
    m->chunk = static_cast<uint32_t>(c);
    double secs = m->seconds;
    bool cached = m->cached;
    {
      std::lock_guard<std::mutex> lock(mu_);
      modules_.push_back(std::move(*m));
    }
    finish("ptxas " + sm, secs, cached, what, llvm::Error::success());
  }

  void hostCompile(size_t c) {
    auto m = compileForEmu(p_.chunkSources[c], tc_);
    std::string what = "emu chunk " + std::to_string(c);
    if (!m)
      return finish("emu", 0, false, what, m.takeError());
    m->chunk = static_cast<uint32_t>(c);
    double secs = m->seconds;
    bool cached = m->cached;
    {
      std::lock_guard<std::mutex> lock(mu_);
      modules_.push_back(std::move(*m));
    }
    finish("emu", secs, cached, what, llvm::Error::success());
  }

  Program &p_;
  ToolchainOptions tc_; // (emuCheck set by the emu-check target)
  const CompileOptions &opts_;
  CompileReport &rep_;
  /// sm_80 -> 80.
  static int smNumber(const std::string &sm) { return std::atoi(sm.c_str() + sm.find('_') + 1); }
  /// The front end (an index of virtualArchs_) whose PTX ptxas assembles for `sm`.
  size_t frontFor(size_t c, const std::string &sm) const {
    return float8Front_ && float8Chunk_[c] && smNumber(sm) >= 89 ? float8Front_ : 0;
  }

  std::vector<std::string> sms_, ptxTargets_, virtualArchs_;
  std::vector<bool> float8Chunk_; // per chunk: its source uses a float8 type
  size_t float8Front_ = 0;        // the compute_89 front end of float8 chunks (0: none)
  bool emu_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  size_t done_ = 0, total_ = 0;
  std::string firstError_;
  std::vector<PtxModule> ptx_;
  std::vector<CompiledModule> modules_;
};

} // namespace

llvm::Expected<std::vector<uint8_t>> compileGraph(const Graph &g, const CompileOptions &opts,
                                                  CompileReport *report) {
  auto image = compileGraphImage(g, opts, report);
  if (!image)
    return image.takeError();
  return image->bytes();
}

namespace {

/// The targets to compile for (checked, and recorded in the report), and the
/// toolchain's options.
llvm::Expected<std::vector<std::string>> resolveTargets(const CompileOptions &opts,
                                                        ToolchainOptions &tc, CompileReport &rep) {
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
  static const std::set<std::string> known = {
      "sm_80",      "sm_86",      "sm_89",      "sm_90", "compute_80",
      "compute_86", "compute_89", "compute_90", "emu",   "emu-check"};
  for (const std::string &t : targets)
    if (!known.count(t))
      return errorf(
          "unknown target '{0}' (known: sm_80, sm_86, sm_89, sm_90, compute_80..compute_90, emu, "
          "emu-check)",
          t);
  if (std::count(targets.begin(), targets.end(), "emu") &&
      std::count(targets.begin(), targets.end(), "emu-check"))
    return makeError(
        "targets emu and emu-check exclude each other (emu-check is emu with every memory access "
        "instrumented for --check)");
  rep.targets = targets;
  return targets;
}

llvm::Expected<Program> lowerFor(const Graph &g, const std::vector<std::string> &targets,
                                 const CompileOptions &opts) {
  LoweringOptions lo;
  lo.archs = cubinArchs(targets);
  lo.persistentRnn = opts.persistentRnn;
  lo.wideIndices = opts.wideIndices;
  lo.convTile = opts.convTile;
  lo.attentionKernel = opts.attentionKernel;
  lo.vendorTactics = opts.vendorTactics;
  lo.secondTiles = opts.vendorTactics && !lo.archs.empty();
  lo.deterministic = opts.deterministic;
  lo.tf32 = opts.tf32;
  lo.tf32Everywhere = opts.tf32Everywhere;
  lo.int8TensorCoresEverywhere = opts.int8TensorCoresEverywhere;
  Lowering lowering(g, lo);
  return lowering.run();
}

/// Compiles the program's chunks for every target and writes the package.
llvm::Expected<pkg::PackageImage> compileProgram(std::shared_ptr<Program> program,
                                                 const std::vector<std::string> &targets,
                                                 const ToolchainOptions &tc,
                                                 const CompileOptions &opts, CompileReport &rep,
                                                 std::chrono::steady_clock::time_point t0) {
  auto progress = [&](const std::string &s) {
    if (opts.progress)
      opts.progress(s);
  };
  rep.codegenSeconds = since(t0);
  rep.kernels = program->kernels.size();
  rep.steps = program->steps.size();
  std::set<std::string> tf32Seen;
  for (const StepDesc &s : program->steps) {
    rep.launches += std::holds_alternative<LaunchStep>(s.op);
    rep.libraryCalls += std::holds_alternative<GemmStep>(s.op) ||
                        std::holds_alternative<CudnnConvStep>(s.op) ||
                        std::holds_alternative<CudnnSdpaStep>(s.op);
    const auto *launch = std::get_if<LaunchStep>(&s.op);
    const auto *gemm = std::get_if<GemmStep>(&s.op);
    bool tf32 = (launch && program->kernels[launch->kernel].tf32) || (gemm && gemm->tf32);
    if (tf32 && tf32Seen.insert(s.node).second)
      rep.tf32Layers.push_back(s.node);
  }
  rep.arenaBytes = program->arenaBytes;
  rep.naiveArenaBytes = program->naiveArenaBytes;
  rep.maxLiveBytes = program->maxLiveBytes;
  rep.weightBytes = program->weightBytes;
  rep.cudaSource = program->source;
  rep.chunks = program->chunkSources.size();
  progress("codegen: " + std::to_string(rep.kernels) + " kernels in " + std::to_string(rep.chunks) +
           " chunks, " + std::to_string(rep.libraryCalls) + " library calls, " +
           std::to_string(rep.steps) + " steps");

  auto modules = std::make_shared<std::vector<CompiledModule>>();
  if (!program->kernels.empty()) {
    auto t1 = std::chrono::steady_clock::now();
    CompileJobs jobs(*program, targets, tc, opts, rep);
    if (auto e = jobs.run())
      return e;
    *modules = jobs.takeModules();
    rep.compileSeconds = since(t1);
    for (const CompiledModule &m : *modules)
      for (const auto &[name, r] : m.resources) {
        rep.totalSpills += r.spillStores + r.spillLoads;
        rep.maxRegisters = std::max(rep.maxRegisters, r.registers);
      }
    for (const auto &[phase, ph] : rep.phases)
      progress(phase + ": " + std::to_string(ph.jobs) + " job" + (ph.jobs == 1 ? "" : "s") +
               (ph.cached ? " (" + std::to_string(ph.cached) + " cached)" : "") + ", " +
               llvm::formatv("{0:f2}", ph.seconds).str() + " s");
  }
  progress("package: writing");
  pkg::PackageImage image =
      writePackage(*program, *modules, opts.embedSource, opts.sourceModel, rep);
  image.keepAlive(program);
  image.keepAlive(modules);
  rep.packageBytes = image.size();
  return image;
}

/// Adds the schedule of another point of the shape ranges to `base`: kernels base
/// lacks join its kernel list, weights whose name and contents base has share base's
/// copy (others join the weight region), and its buffers, steps and tensors become a
/// variant.
void addVariant(Program &base, Program v, std::map<std::string, uint32_t> &kernelIndex,
                std::map<std::string, uint32_t> &weightByName) {
  std::vector<uint32_t> remap(v.kernels.size());
  for (size_t k = 0; k < v.kernels.size(); ++k) {
    auto [it, added] =
        kernelIndex.emplace(v.kernels[k].key, static_cast<uint32_t>(base.kernels.size()));
    if (added) {
      for (const std::string &f : v.kernels[k].functors)
        base.functors.emplace(f, v.functors.at(f));
      base.kernels.push_back(std::move(v.kernels[k]));
    }
    remap[k] = it->second;
  }
  for (StepDesc &st : v.steps) {
    if (auto *l = std::get_if<LaunchStep>(&st.op))
      l->kernel = remap[l->kernel];
    else if (auto *g = std::get_if<GemmStep>(&st.op); g && g->fallback)
      g->fallback->kernel = remap[g->fallback->kernel];
  }
  for (BufferDesc &b : v.buffers) {
    if (b.region != pkg::Region::Weights || b.weightIndex < 0)
      continue;
    const Tensor &t = v.weights[b.weightIndex];
    auto it = weightByName.find(b.name);
    if (it != weightByName.end()) {
      const BufferDesc &mine = base.buffers[it->second];
      const Tensor &theirs = base.weights[mine.weightIndex];
      if (mine.bytes == b.bytes && theirs.byteSize() == t.byteSize() &&
          std::memcmp(theirs.raw(), t.raw(), t.byteSize()) == 0) {
        b.offset = mine.offset;
        b.weightIndex = -1;
        continue;
      }
    }
    BufferDesc nb = b;
    nb.offset = base.weightBytes;
    nb.weightIndex = static_cast<int>(base.weights.size());
    base.weights.push_back(t);
    base.weightBytes += arenaAligned(b.bytes);
    weightByName.emplace(b.name, static_cast<uint32_t>(base.buffers.size()));
    base.buffers.push_back(nb);
    b.offset = nb.offset;
    b.weightIndex = -1;
  }
  base.arenaBytes = std::max(base.arenaBytes, v.arenaBytes);
  ScheduleVariant sv;
  sv.buffers = std::move(v.buffers);
  sv.steps = std::move(v.steps);
  sv.inputs = std::move(v.inputs);
  sv.outputs = std::move(v.outputs);
  sv.arenaBytes = v.arenaBytes;
  sv.maxLiveBytes = v.maxLiveBytes;
  sv.checks = std::move(v.checks);
  sv.checkBuffer = v.checkBuffer;
  base.variants.push_back(std::move(sv));
}

} // namespace

llvm::Expected<pkg::PackageImage> compileGraphImage(const Graph &g, const CompileOptions &opts,
                                                    CompileReport *report) {
  CompileReport local;
  CompileReport &rep = report ? *report : local;
  ToolchainOptions tc;
  auto targets = resolveTargets(opts, tc, rep);
  if (!targets)
    return targets.takeError();
  auto t0 = std::chrono::steady_clock::now();
  if (opts.progress)
    opts.progress("codegen: lowering " + std::to_string(g.numNodes()) + " nodes");
  auto lowered = lowerFor(g, *targets, opts);
  if (!lowered)
    return lowered.takeError();
  return compileProgram(std::make_shared<Program>(std::move(*lowered)), *targets, tc, opts, rep,
                        t0);
}

llvm::Expected<pkg::PackageImage> compileShapeRangeImage(
    size_t count, const std::function<llvm::Expected<std::unique_ptr<ir::Graph>>(size_t)> &graphAt,
    const std::vector<ShapeRangeDesc> &ranges, const CompileOptions &opts, CompileReport *report,
    const std::function<void(size_t, size_t)> &onVariant) {
  CompileReport local;
  CompileReport &rep = report ? *report : local;
  ToolchainOptions tc;
  auto targets = resolveTargets(opts, tc, rep);
  if (!targets)
    return targets.takeError();
  auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<Program> base;
  std::map<std::string, uint32_t> kernelIndex, weightByName;
  size_t baseKernels = 0;
  for (size_t i = 0; i < count; ++i) {
    auto g = graphAt(i);
    if (!g)
      return g.takeError();
    auto lowered = lowerFor(**g, *targets, opts);
    if (!lowered)
      return lowered.takeError();
    if (!base) {
      base = std::make_shared<Program>(std::move(*lowered));
      for (size_t k = 0; k < base->kernels.size(); ++k)
        kernelIndex.emplace(base->kernels[k].key, static_cast<uint32_t>(k));
      for (size_t b = 0; b < base->buffers.size(); ++b)
        if (base->buffers[b].region == pkg::Region::Weights && base->buffers[b].weightIndex >= 0)
          weightByName.emplace(base->buffers[b].name, static_cast<uint32_t>(b));
      baseKernels = base->kernels.size();
    } else {
      if (!lowered->variables.empty())
        return makeError(
            "shape ranges apply to inference packages (a training package has one batch shape)");
      addVariant(*base, std::move(*lowered), kernelIndex, weightByName);
    }
    if (onVariant)
      onVariant(i + 1, count);
  }
  if (!base)
    return makeError("a shape range with no shapes");
  base->shapeRanges = ranges;
  buildTranslationUnits(*base);
  rep.variants = count;
  rep.variantKernels = base->kernels.size() - baseKernels;
  return compileProgram(base, *targets, tc, opts, rep, t0);
}

} // namespace dlc::codegen
