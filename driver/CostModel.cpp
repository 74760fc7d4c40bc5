//===- CostModel.cpp - The latency model behind `dlc inspect` --------------===//
#include "dlc/driver/CostModel.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace dlc::driver {

/// NCCL's per-hop latency of a ring step in one machine (a few microseconds).
constexpr double kLinkLatencyMicros = 3.0;

using codegen::Bounds;
using codegen::GpuModel;
using codegen::LaunchShape;

namespace {

/// Registers per thread of a kernel on `g`: ptxas's count for its architecture, else
/// the largest count the package has, else a guess.
int registersOf(const pkg::Kernel &k, const std::string &arch) {
  int any = 0;
  if (k.resources())
    for (const pkg::ArchResources *r : *k.resources()) {
      if (r->arch() && r->arch()->str() == arch)
        return r->registers();
      any = std::max(any, r->registers());
    }
  return any ? any : 32;
}

int staticSmemOf(const pkg::Kernel &k, const std::string &arch) {
  int any = 0;
  if (k.resources())
    for (const pkg::ArchResources *r : *k.resources()) {
      if (r->arch() && r->arch()->str() == arch)
        return r->static_smem();
      any = std::max(any, r->static_smem());
    }
  return any;
}

/// Launch l of kernel k on g: the module the runtime loads there (pkg::pickModule: a
/// cubin, or PTX the driver compiles), threads per block, and the blocks per SM its
/// registers (ptxas's, for the cubin that runs: sm_80's on an A10) and shared memory
/// allow.
struct Residency {
  const pkg::Module *mod;
  int threads, blocksPerSm;
};
Residency residencyOf(const pkg::Package &m, const pkg::Kernel &k, const pkg::Launch &l,
                      const GpuModel &g) {
  Residency r;
  r.mod = pkg::pickModule(m, k.chunk(), pkg::archNumber(g.arch));
  const std::string resArch =
      r.mod && r.mod->kind() == pkg::ModuleKind::Cubin ? r.mod->target()->str() : g.arch;
  const uint64_t threads = uint64_t(l.block()->x()) * l.block()->y() * l.block()->z();
  r.threads = static_cast<int>(std::min<uint64_t>(threads, 1 << 20));
  const int64_t smem = std::min<int64_t>(
      int64_t(staticSmemOf(k, resArch)) + int64_t(l.dynamic_smem()), int64_t(1) << 30);
  r.blocksPerSm =
      codegen::blocksPerSm(g, r.threads, registersOf(k, resArch), static_cast<int>(smem));
  return r;
}

} // namespace

const codegen::sass::KernelFacts *PackageFacts::factsOf(const std::string &arch,
                                                        const std::string &symbol) const {
  auto a = facts.find(arch);
  if (a == facts.end())
    return nullptr;
  auto k = a->second.find(symbol);
  return k == a->second.end() ? nullptr : &k->second;
}

PackageFacts decodePackage(const pkg::PackageFile &pf) {
  PackageFacts c;
  const pkg::Package &m = pf.meta();
  codegen::sass::Budget budget; // for the whole package
  if (!m.modules())
    return c;
  for (const pkg::Module *mod : *m.modules()) {
    if (!mod->target())
      continue;
    llvm::ArrayRef<uint8_t> image(pf.section(mod->data()), mod->data()->size());
    if (mod->kind() == pkg::ModuleKind::Ptx) {
      llvm::StringRef text(reinterpret_cast<const char *>(image.data()), image.size());
      text = text.take_until([](char ch) { return ch == 0; });
      for (auto &[symbol, facts] : codegen::sass::analyzePtx(text, budget))
        c.facts[mod->target()->str()][symbol] = std::move(facts);
      continue;
    }
    if (mod->kind() != pkg::ModuleKind::Cubin)
      continue;
    llvm::Expected<std::map<std::string, codegen::sass::KernelFacts>> f =
        codegen::sass::decodeCubin(image, budget);
    if (!f) {
      c.decodeErrors[mod->target()->str()] = llvm::toString(f.takeError());
      continue;
    }
    for (auto &[symbol, facts] : *f)
      c.facts[mod->target()->str()][symbol] = std::move(facts);
  }
  return c;
}

PackageCost costOf(const pkg::PackageFile &pf, int variant,
                   const std::vector<codegen::GpuModel> &gpuList, const PackageFacts *decoded) {
  const pkg::Package &m = pf.meta();
  const pkg::ShapeVariant *v =
      variant >= 0 ? m.variants()->Get(static_cast<uint32_t>(variant)) : nullptr;
  const auto *schedule = v ? v->steps() : m.steps();
  PackageCost c;
  if (gpuList.empty())
    for (const GpuModel *g : codegen::reportedGpus())
      c.gpus.push_back(*g);
  else
    c.gpus = gpuList;
  size_t ng = c.gpus.size();
  static_cast<PackageFacts &>(c) = decoded ? *decoded : decodePackage(pf);
  c.micros.assign(ng, 0);
  c.roofline.assign(ng, 0);
  c.flops.assign(ng, 0);
  c.tensorFlops.assign(ng, 0);
  c.integerFlops.assign(ng, 0);
  c.integerTensorFlops.assign(ng, 0);
  c.fp8TensorFlops.assign(ng, 0);
  c.bytesRead.assign(ng, 0);
  c.bytesWritten.assign(ng, 0);
  c.peakPriced.assign(ng, 0);
  c.ptxPriced.assign(ng, 0);
  // The steps that run on each GPU, as the runtime chooses them.
  std::vector<int> arch(ng), planned = pkg::stepArchs(m);
  for (size_t i = 0; i < ng; ++i)
    arch[i] = pkg::chooseStepArch(planned, pkg::archNumber(c.gpus[i].arch));
  // Alternatives (pkg::Step::alt_group), as the session chooses them: a persistent
  // kernel's steps where the GPU holds its cooperative grid at once (the model's
  // resident blocks per SM from ptxas's registers and the shared memory), else the
  // per-step schedule.
  std::vector<std::map<uint32_t, uint8_t>> alt(ng);
  if (schedule)
    for (const pkg::Step *s : *schedule) {
      const pkg::Launch *l = s->op_as_Launch();
      if (!s->alt_group() || s->alt() != 1 || !l || !m.kernels() ||
          l->kernel() >= m.kernels()->size() || !m.kernels()->Get(l->kernel())->cooperative())
        continue;
      const pkg::Kernel *k = m.kernels()->Get(l->kernel());
      for (size_t i = 0; i < ng; ++i) {
        if (!pkg::stepRunsOn(*s, arch[i]))
          continue;
        const GpuModel &g = c.gpus[i];
        const uint64_t blocks = uint64_t(l->grid()->x()) * l->grid()->y() * l->grid()->z();
        const int perSm = residencyOf(m, *k, *l, g).blocksPerSm;
        alt[i][s->alt_group()] = blocks <= uint64_t(std::max(perSm, 0)) * uint64_t(g.sms) ? 1 : 2;
      }
    }
  // Tactic groups: the alternative a session runs without timing (our kernels).
  for (size_t i = 0; i < ng; ++i)
    for (const pkg::TacticGroup &tg : pkg::tacticGroups(schedule, arch[i]))
      alt[i][tg.group] = tg.defaultAlt();
  auto altRuns = [&](const pkg::Step &s, size_t i) {
    if (!s.alt_group())
      return true;
    auto it = alt[i].find(s.alt_group());
    return s.alt() == (it == alt[i].end() ? 2 : it->second);
  };
  if (schedule)
    for (const pkg::Step *s : *schedule) {
      if (!(s->schedules() & 1)) // a training package's evaluation: not part of a step
        continue;
      StepCost sc;
      sc.node = s->node() ? s->node()->str() : "";
      sc.altGroup = s->tactic() != pkg::TacticKind::None ? s->alt_group() : 0;
      sc.alt = s->alt();
      const pkg::Launch *l = s->op_as_Launch();
      const pkg::Gemm *gm = s->op_as_Gemm();
      const pkg::CudnnConv *cc = s->op_as_CudnnConv();
      const pkg::CudnnSdpa *sa = s->op_as_CudnnSdpa();
      const pkg::Kernel *kernel = nullptr;
      uint64_t gemmM = 0, gemmN = 0, gemmK = 0, batch = 1;
      if (l) {
        sc.kind = "launch";
        sc.kernel = static_cast<int>(l->kernel());
        sc.bytesRead = l->bytes_read();
        sc.bytesWritten = l->bytes_written();
        // A damaged package's FLOPs are not a number to divide by.
        sc.flops = std::isfinite(l->flops()) && l->flops() > 0 ? l->flops() : 0.0;
        if (m.kernels() && l->kernel() < m.kernels()->size())
          kernel = m.kernels()->Get(l->kernel());
        sc.tensor = kernel && kernel->tensor_core();
        sc.integer = kernel && kernel->integer();
        sc.fp8 = kernel && kernel->fp8();
        sc.tf32 = kernel && kernel->tf32();
        sc.blocks = uint64_t(l->grid()->x()) * l->grid()->y() * l->grid()->z();
      } else if (gm) {
        sc.kind = "gemm";
        uint64_t es = pkg::dtypeSize(gm->dtype());
        batch = static_cast<uint64_t>(gm->batch());
        gemmM = gm->m();
        gemmN = gm->n();
        gemmK = gm->k();
        sc.bytesRead = (gm->stride_a() ? batch : 1) * gemmM * gemmK * es +
                       (gm->stride_b() ? batch : 1) * gemmK * gemmN * es +
                       (gm->beta() != 0 ? batch * gemmM * gemmN * es : 0) +
                       (gm->bias() ? gemmN * es : 0);
        sc.bytesWritten = batch * gemmM * gemmN * es;
        sc.flops = 2.0 * static_cast<double>(batch) * static_cast<double>(gemmM) *
                   static_cast<double>(gemmN) * static_cast<double>(gemmK);
        sc.tensor = gm->dtype() == pkg::DType::F16 || gm->dtype() == pkg::DType::BF16 || gm->tf32();
        sc.tf32 = gm->tf32();
        sc.blocks = ((gemmM + 127) / 128) * ((gemmN + 127) / 128) * batch;
      } else if (cc) {
        // Priced as the library GEMM it amounts to: output channels x positions, over
        // the window's taps of a group's channels.
        sc.kind = "cudnn";
        uint64_t es = pkg::dtypeSize(cc->dtype()), positions = cc->n(), pixels = cc->n(), taps = 1;
        for (size_t d = 0; d < cc->kernel()->size(); ++d) {
          positions *= cc->spatial_out()->Get(d);
          pixels *= cc->spatial_in()->Get(d);
          taps *= cc->kernel()->Get(d);
        }
        gemmM = cc->k();
        gemmN = positions;
        gemmK = taps * cc->c() / cc->groups();
        sc.bytesRead = pixels * cc->c() * es + gemmM * gemmK * es;
        sc.bytesWritten = positions * cc->k() * es;
        sc.flops = 2.0 * double(gemmM) * double(gemmN) * double(gemmK);
        sc.tensor = true;
        sc.blocks = ((gemmM + 127) / 128) * ((gemmN + 127) / 128);
      } else if (sa) {
        // Priced as the library GEMM of both products (the causal half where masked).
        sc.kind = "cudnn";
        const uint64_t es = pkg::dtypeSize(sa->dtype()), bh = sa->b() * sa->h();
        gemmM = bh * sa->sq();
        gemmN = sa->dv();
        gemmK = sa->sk() * (sa->d() + sa->dv()) / sa->dv() / (sa->causal() ? 2 : 1);
        sc.bytesRead = bh * (sa->sq() * sa->d() + sa->sk() * (sa->d() + sa->dv())) * es;
        sc.bytesWritten = bh * sa->sq() * sa->dv() * es;
        sc.flops = 2.0 * double(gemmM) * double(gemmN) * double(gemmK);
        sc.tensor = true;
        sc.blocks = (gemmM + 127) / 128;
      } else if (const pkg::Copy *cp = s->op_as_Copy()) {
        sc.kind = "copy";
        sc.bytesRead = sc.bytesWritten = cp->bytes();
      } else if (const pkg::Memset *ms = s->op_as_Memset()) {
        sc.kind = "memset";
        sc.bytesWritten = ms->bytes();
      } else if (const pkg::Collective *ar = s->op_as_Collective()) {
        sc.kind = "all-reduce"; // on the main stream: the pack's copies
        if (ar->sizes())
          for (uint64_t b : *ar->sizes())
            sc.bytesRead += b;
        sc.bytesWritten = sc.bytesRead;
      } else if (s->op_as_CollectiveWait()) {
        sc.kind = "wait";
      }
      for (size_t i = 0; i < ng; ++i) {
        const GpuModel &g = c.gpus[i];
        bool runs = pkg::stepRunsOn(*s, arch[i]) && altRuns(*s, i);
        // (INT8 tensor cores: twice the FP16/BF16 rate, an IMMA.16832 per HMMA.16816.)
        double peak = sc.tf32                   ? g.tf32Flops
                      : sc.tensor && sc.integer ? 2 * g.tensorFlops
                      : sc.tensor               ? g.tensorFlops
                                                : g.fp32Flops;
        double achievable = g.dramBytesPerSecond * g.dramAchievable;
        Bounds b;
        double fill = 1;
        if (kernel) {
          LaunchShape ls;
          ls.blocks = sc.blocks;
          const Residency res = residencyOf(m, *kernel, *l, g);
          const pkg::Module *mod = res.mod;
          ls.threads = res.threads;
          ls.blocksPerSm = res.blocksPerSm;
          fill = ls.fill = codegen::smFill(g, sc.blocks, ls.blocksPerSm);
          ls.flops = sc.flops;
          ls.bytesRead = static_cast<double>(sc.bytesRead);
          ls.bytesWritten = static_cast<double>(sc.bytesWritten);
          ls.tensor = sc.tensor;
          ls.tf32 = sc.tf32;
          ls.integer = sc.integer;
          const codegen::sass::KernelFacts *f =
              mod && kernel->symbol() ? c.factsOf(mod->target()->str(), kernel->symbol()->str())
                                      : nullptr;
          if (f && f->truncated) // incomplete facts: no better than none
            f = nullptr;
          bool fromPtx = f && mod->kind() == pkg::ModuleKind::Ptx;
          b = codegen::launchBounds(g, f, ls);
          if (runs && !f)
            ++c.peakPriced[i];
          if (runs && fromPtx)
            ++c.ptxPriced[i];
        } else if (gm || cc || sa) {
          codegen::LibraryGemm lg;
          lg.m = gemmM;
          lg.n = gemmN;
          lg.k = gemmK;
          lg.batch = batch;
          lg.bytes = static_cast<double>(sc.bytes());
          lg.tensor = sc.tensor;
          lg.tf32 = sc.tf32;
          b = codegen::libraryGemmBounds(g, lg, &fill);
        } else {
          b.memory = 1e6 * static_cast<double>(sc.bytes()) / achievable;
          b.limit = "copy";
        }
        double roof =
            1e6 * std::max(static_cast<double>(sc.bytes()) / g.dramBytesPerSecond, sc.flops / peak);
        double t = sc.kind == "wait" ? 0.0 : b.worst() + g.graphNodeMicros;
        sc.runs.push_back(runs);
        sc.fill.push_back(fill);
        sc.micros.push_back(t);
        sc.roofline.push_back(roof);
        sc.bounds.push_back(std::move(b));
        if (runs) {
          c.micros[i] += t;
          c.roofline[i] += roof;
          c.flops[i] += sc.flops;
          if (sc.tensor)
            c.tensorFlops[i] += sc.flops;
          if (sc.integer)
            c.integerFlops[i] += sc.flops;
          if (sc.integer && sc.tensor)
            c.integerTensorFlops[i] += sc.flops;
          if (sc.fp8 && sc.tensor)
            c.fp8TensorFlops[i] += sc.flops;
          c.bytesRead[i] += sc.bytesRead;
          c.bytesWritten[i] += sc.bytesWritten;
        }
      }
      c.steps.push_back(std::move(sc));
    }
  for (size_t i = 0; i < ng; ++i)
    if (!c.steps.empty())
      c.micros[i] += c.gpus[i].runOverheadMicros;
  c.lowerBoundBytes = m.weight_bytes();
  for (const auto *list : {v ? v->inputs() : m.inputs(), v ? v->outputs() : m.outputs()})
    if (list)
      for (const pkg::TensorInfo *t : *list)
        c.lowerBoundBytes += pkg::tensorBytes(*t);
  return c;
}

DataParallelCost dataParallelCostOf(const pkg::PackageFile &pf, const PackageCost &cost,
                                    int ranks) {
  DataParallelCost d;
  d.ranks = ranks;
  const pkg::Package &m = pf.meta();
  std::vector<const pkg::Step *> steps; // those costOf modeled, in the same order
  if (m.steps())
    for (const pkg::Step *s : *m.steps())
      if (s->schedules() & 1)
        steps.push_back(s);
  // The gradients' collectives: all-reduce buckets, or ZeRO-1's reduce-scatter.
  for (const pkg::Step *s : steps)
    if (const pkg::Collective *ar = s->op_as_Collective();
        ar && (ar->op() == pkg::CollectiveOp::AllReduce ||
               ar->op() == pkg::CollectiveOp::ReduceScatter)) {
      ++d.buckets;
      if (ar->sizes())
        for (uint64_t b : *ar->sizes())
          d.allReduceBytes += b;
    }
  for (size_t i = 0; i < cost.gpus.size(); ++i) {
    const codegen::GpuModel &g = cost.gpus[i];
    double t = 0, commFree = 0, comm = 0, exposed = 0;
    std::map<uint32_t, double> done;
    for (size_t k = 0; k < steps.size() && k < cost.steps.size(); ++k) {
      const StepCost &sc = cost.steps[k];
      if (!sc.runs[i])
        continue;
      t += sc.micros[i];
      if (const pkg::Collective *ar = steps[k]->op_as_Collective();
          ar && ar->op() != pkg::CollectiveOp::Shard) {
        // A ring all-reduce is a reduce-scatter and an all-gather, each moving
        // (N - 1) / N of the whole vector.
        double bytes = static_cast<double>(ar->count() * pkg::dtypeSize(ar->dtype()));
        double passes = 2;
        if (ar->op() == pkg::CollectiveOp::AllGather)
          passes = 1, bytes *= ranks;
        else if (ar->op() == pkg::CollectiveOp::ReduceScatter)
          passes = 1;
        double c = ranks > 1 ? passes * (ranks - 1) / ranks * bytes / g.linkBytesPerSecond * 1e6 +
                                   passes * (ranks - 1) * kLinkLatencyMicros
                             : 0.0;
        double start = std::max(t, commFree);
        commFree = done[ar->bucket()] = start + c;
        comm += c;
      } else if (const pkg::CollectiveWait *w = steps[k]->op_as_CollectiveWait()) {
        double ready = done.count(w->bucket()) ? done[w->bucket()] : 0;
        if (ready > t) {
          exposed += ready - t;
          t = ready;
        }
      }
    }
    d.commMicros.push_back(comm);
    d.exposedMicros.push_back(exposed);
    d.stepMicros.push_back(t);
  }
  return d;
}

} // namespace dlc::driver
