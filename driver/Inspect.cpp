//===- Inspect.cpp - What a package holds, and its modeled cost -------------===//
#include "dlc/driver/Inspect.h"

#include "dlc/ir/Graph.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <map>

namespace dlc::driver {

namespace {

/// A shape-range package's ranges as text, and the schedules at the smallest and
/// largest shape (-1: the package's own, at the opt shape).
struct RangeSchedules {
  int min = -1, max = -1;
};

RangeSchedules rangeSchedules(const pkg::Package &m) {
  RangeSchedules r;
  size_t nv = m.variants() ? m.variants()->size() : 0;
  // Whether every ranged dimension of schedule k's inputs equals its range's min (or max).
  auto at = [&](int k, bool max) {
    const auto *inputs = k < 0 ? m.inputs() : m.variants()->Get(static_cast<uint32_t>(k))->inputs();
    for (const pkg::ShapeRange *sr : *m.shape_ranges())
      for (const pkg::TensorInfo *t : *inputs)
        if (t->name()->str() == sr->input()->str() &&
            (!t->shape() || sr->axis() >= t->shape()->size() ||
             t->shape()->Get(sr->axis()) != (max ? sr->max() : sr->min())))
          return false;
    return true;
  };
  for (int k = -1; k < static_cast<int>(nv); ++k) {
    if (at(k, false))
      r.min = k;
    if (at(k, true))
      r.max = k;
  }
  return r;
}

/// A layer's candidates: kind, description, alternative, whether a session runs it
/// without timing (emu, DLC_TACTICS=dlc), and (mine) whether it is `mine`'s.
llvm::json::Array tacticsJson(const Report &r, const pkg::TacticGroup &g, uint8_t mine) {
  llvm::json::Array a;
  auto chosen = r.tacticsChosen.find(g.group);
  for (const pkg::TacticAlt &t : g.alts) {
    llvm::json::Object o{{"kind", pkg::tacticKindName(t.kind)},
                         {"description", t.desc},
                         {"alt", static_cast<int64_t>(t.alt)},
                         {"default", t.alt == g.defaultAlt()}};
    if (mine)
      o["this_step"] = t.alt == mine;
    if (chosen != r.tacticsChosen.end() && chosen->second.first == t.alt) {
      o["chosen"] = true;
      o["measured_us"] = chosen->second.second;
    }
    a.push_back(std::move(o));
  }
  return a;
}

llvm::json::Object boundsJson(const codegen::Bounds &b) {
  return llvm::json::Object{
      {"issue", b.issue}, {"memory", b.memory}, {"latency", b.latency}, {"limit", b.limit}};
}

llvm::json::Object widthsJson(const std::map<int, int> &w) {
  llvm::json::Object o;
  for (const auto &[bytes, count] : w)
    o[std::to_string(8 * bytes)] = count;
  return o;
}

/// A mix as JSON: issued instructions and each class's count, the access widths in
/// bits with their counts.
llvm::json::Object mixJson(const codegen::sass::Mix &m) {
  using codegen::sass::Class;
  llvm::json::Object classes;
  for (int c = 0; c < static_cast<int>(Class::Count); ++c)
    if (m.count[c])
      classes[codegen::sass::className(static_cast<Class>(c))] = m.count[c];
  return llvm::json::Object{{"instructions", m.instructions},
                            {"mma", m.of(Class::Tensor)},
                            {"mma_flops_per_warp", m.mmaFlops},
                            {"ffma", m.ffma},
                            {"hfma2", m.hfma2},
                            {"integer", m.integerOps()},
                            {"global_load_bits", widthsJson(m.globalLoadWidths)},
                            {"global_store_bits", widthsJson(m.globalStoreWidths)},
                            {"cp_async_bits", widthsJson(m.cpAsyncWidths)},
                            {"shared_load_bits", widthsJson(m.sharedLoadWidths)},
                            {"shared_store_bits", widthsJson(m.sharedStoreWidths)},
                            {"ldmatrix", m.of(Class::Ldsm)},
                            {"barriers", m.of(Class::Barrier)},
                            {"classes", std::move(classes)}};
}

llvm::json::Object factsJson(const codegen::sass::KernelFacts &f) {
  llvm::json::Value main = nullptr;
  if (const codegen::sass::Mix *m = f.main()) {
    llvm::json::Object o = mixJson(*m);
    o["instructions_per_mma"] = f.instructionsPerMma();
    o["begin"] = f.loops[static_cast<size_t>(f.mainLoop)].begin;
    o["end"] = f.loops[static_cast<size_t>(f.mainLoop)].end;
    main = std::move(o);
  }
  llvm::json::Array loops; // every loop: its byte range and what one iteration issues
  for (const codegen::sass::Loop &l : f.loops)
    loops.push_back(llvm::json::Object{{"begin", l.begin},
                                       {"end", l.end},
                                       {"innermost", l.innermost},
                                       {"instructions", l.mix.instructions},
                                       {"global_load_bytes", l.mix.globalLoadBytes},
                                       {"mma", l.mix.of(codegen::sass::Class::Tensor)},
                                       {"ffma", l.mix.ffma}});
  return llvm::json::Object{
      {"instructions", f.whole.instructions}, {"loops", static_cast<int64_t>(f.loops.size())},
      {"loop_list", std::move(loops)},        {"load_loops", f.loadLoops},
      {"main_loop", std::move(main)},         {"outside_loops", mixJson(f.straight)}};
}

} // namespace

Report inspect(const pkg::PackageFile &pf, const std::vector<codegen::GpuModel> &gpus) {
  const pkg::Package &m = pf.meta();
  Report r;
  r.packageName = pf.name();
  r.packageBytes = pf.size();
  r.model = m.model() ? m.model()->str() : "";
  if (m.modules())
    for (const pkg::Module *mod : *m.modules())
      r.modules.push_back({mod->target()->str(), mod->chunk(), mod->data()->size()});
  r.cost = costOf(pf, -1, gpus);
  size_t ng = r.cost.gpus.size(), h100 = ng - 1;
  for (const codegen::GpuModel &g : r.cost.gpus)
    r.gpus.push_back(g.name);
  size_t nk = m.kernels() ? m.kernels()->size() : 0;
  for (size_t i = 0; i < nk; ++i) {
    const pkg::Kernel *k = m.kernels()->Get(static_cast<uint32_t>(i));
    KernelReport kr;
    kr.name = k->name()->str();
    kr.templateName = k->template_name() ? k->template_name()->str() : "";
    kr.symbol = k->symbol() ? k->symbol()->str() : "";
    kr.chunk = k->chunk();
    if (k->resources())
      for (const pkg::ArchResources *a : *k->resources())
        kr.resources.push_back({a->arch()->str(), a->registers(),
                                static_cast<int64_t>(a->spill_stores() + a->spill_loads()),
                                a->static_smem()});
    kr.needsSync = k->needs_sync();
    kr.cooperative = k->cooperative();
    kr.tensorCore = k->tensor_core();
    kr.launches.assign(ng, 0);
    kr.minFill.assign(ng, 1.0);
    kr.micros.assign(ng, 0);
    kr.bounds.assign(ng, codegen::Bounds{});
    r.kernels.push_back(std::move(kr));
  }
  // Per unique kernel, over its launches on each GPU: count, blocks, lowest SM fill,
  // modeled time.
  r.launchesOn.assign(ng, 0);
  r.callsOn.assign(ng, 0);
  for (const StepCost &sc : r.cost.steps) {
    r.packageLaunches += sc.kind == "launch";
    r.libraryCalls += sc.kind == "gemm";
    r.otherSteps += sc.kind == "copy" || sc.kind == "memset";
    for (size_t i = 0; i < ng; ++i) {
      if (!sc.runs[i])
        continue;
      r.launchesOn[i] += sc.kind == "launch";
      r.callsOn[i] += sc.kind == "gemm";
      if (sc.kernel < 0)
        continue;
      KernelReport &k = r.kernels[sc.kernel];
      ++k.launches[i];
      k.minFill[i] = std::min(k.minFill[i], sc.fill[i]);
      k.micros[i] += sc.micros[i];
      codegen::Bounds &b = k.bounds[i];
      const codegen::Bounds &sb = sc.bounds[i];
      b.issue += sb.issue;
      b.memory += sb.memory;
      b.latency += sb.latency;
      if (sb.limit == "peak")
        b.limit = "peak";
      if (i == h100) {
        k.blocks.push_back(sc.blocks);
        k.flops += sc.flops;
        k.bytes += sc.bytes();
      }
    }
  }
  for (KernelReport &k : r.kernels)
    for (codegen::Bounds &b : k.bounds)
      if (b.limit.empty())
        b.limit = b.worst() == b.issue ? "issue" : b.worst() == b.memory ? "memory" : "latency";
  r.arenaBytes = m.arena_bytes();
  r.naiveBytes = m.arena_naive_bytes();
  r.maxLiveBytes = m.arena_max_live_bytes();
  r.weightBytes = m.weight_bytes();
  // A training package's variables (dlc compile --train), its evaluation schedule
  // (pkg::Step::schedules bit 1), and the steps both run.
  if (m.variables() && m.variables()->size()) {
    Report::Training t;
    for (const pkg::Variable *v : *m.variables()) {
      ++t.variables;
      t.variableBytes += v->data()->size();
      if (v->trainable())
        ++t.trainable, t.parameterValues += v->data()->size() / pkg::dtypeSize(v->dtype());
    }
    t.commitSteps = m.commit_steps();
    if (m.steps() && m.eval_outputs() && m.eval_outputs()->size())
      for (const pkg::Step *st : *m.steps()) {
        t.evaluationSteps += (st->schedules() & 2) != 0;
        t.sharedSteps += st->schedules() == 3;
      }
    t.evaluationOutputs = m.eval_outputs() ? m.eval_outputs()->size() : 0;
    r.training = t;
  }
  if (m.steps())
    for (const pkg::Step *st : *m.steps())
      r.conditionalSteps += st->predicate() != nullptr;
  if (m.embedded_tactics())
    for (const pkg::EmbeddedTactics *e : *m.embedded_tactics())
      r.embeddedTactics.emplace_back(e->key() ? e->key()->str() : "",
                                     e->picks() ? e->picks()->size() : 0);
  if (!r.cost.gpus.empty())
    r.tactics =
        pkg::tacticGroups(m.steps(), pkg::chooseStepArch(pkg::stepArchs(m),
                                                         pkg::archNumber(r.cost.gpus.back().arch)));
  // Data-parallel training: the all-reduces at 2, 4 and 8 GPUs of one machine; ZeRO-1
  // packages run on the ranks they were compiled for.
  if (m.bucket_bytes()) {
    Report::DataParallel dp;
    dp.bucketBytes = m.bucket_bytes();
    dp.zeroRanks = m.zero_ranks();
    for (int ranks : m.zero_ranks() ? std::vector<int>{static_cast<int>(m.zero_ranks())}
                                    : std::vector<int>{2, 4, 8})
      dp.scaling.push_back(dataParallelCostOf(pf, r.cost, ranks));
    if (m.variables())
      for (const pkg::Variable *v : *m.variables())
        if (v->sharded())
          dp.shardedBytesPerRank += v->data()->size();
    r.dataParallel = std::move(dp);
  }
  if (m.checks())
    for (const pkg::Check *c : *m.checks())
      r.checks.push_back({c->node()->str(), c->what()->str()});
  if (m.bound_inputs())
    for (const pkg::BoundInput *b : *m.bound_inputs()) {
      Report::BoundInput bi{b->name()->str(),
                            pkg::dtypeName(b->dtype()),
                            b->values()->str(),
                            pkg::describeBoundInput(*b),
                            {}};
      for (size_t i = 0; b->shape() && i < b->shape()->size(); ++i)
        bi.shape.push_back(b->shape()->Get(static_cast<uint32_t>(i)));
      r.boundInputs.push_back(std::move(bi));
    }
  if (m.shape_ranges() && m.shape_ranges()->size()) {
    Report::ShapeRanges sr;
    for (const pkg::ShapeRange *x : *m.shape_ranges()) {
      sr.ranges.push_back({x->input()->str(), x->axis(), x->min(), x->max(), x->opt()});
      sr.text += (sr.text.empty() ? "" : ", ") + x->input()->str() + "[" +
                 std::to_string(x->axis()) + "] " + std::to_string(x->min()) + ".." +
                 std::to_string(x->max()) + " (opt " + std::to_string(x->opt()) + ")";
    }
    sr.schedules = (m.variants() ? m.variants()->size() : 0) + 1;
    if (sr.schedules > 1) {
      // Modeled latency at the smallest and largest shape.
      RangeSchedules at = rangeSchedules(m);
      sr.microsAtMin = costOf(pf, at.min, r.cost.gpus, &r.cost).micros;
      sr.microsAtMax = costOf(pf, at.max, r.cost.gpus, &r.cost).micros;
      r.shapeRanges = std::move(sr);
    }
  }
  return r;
}

llvm::json::Value toJson(const Report &r) {
  size_t ng = r.gpus.size(), h100 = ng - 1;
  const PackageCost &cost = r.cost;
  auto perGpu = [&](const std::vector<double> &v) {
    llvm::json::Object o;
    for (size_t i = 0; i < ng; ++i)
      o[r.gpus[i]] = v[i];
    return o;
  };
  auto perGpuInt = [&](const std::vector<size_t> &v) {
    llvm::json::Object o;
    for (size_t i = 0; i < ng; ++i)
      o[r.gpus[i]] = static_cast<int64_t>(v[i]);
    return o;
  };
  llvm::json::Array kernels;
  for (const KernelReport &k : r.kernels) {
    llvm::json::Object regs, spills, smem;
    for (const KernelReport::Resources &a : k.resources) {
      regs[a.arch] = a.registers;
      spills[a.arch] = a.spillBytes;
      smem[a.arch] = a.staticSmem;
    }
    llvm::json::Array blocks;
    for (uint64_t b : k.blocks)
      blocks.push_back(static_cast<int64_t>(b));
    llvm::json::Object bounds, sass, ptx;
    for (size_t i = 0; i < ng; ++i)
      bounds[r.gpus[i]] = boundsJson(k.bounds[i]);
    for (const auto &[target, byName] : r.cost.facts)
      if (auto f = byName.find(k.symbol); f != byName.end())
        (target.rfind("compute_", 0) == 0 ? ptx : sass)[target] = factsJson(f->second);
    kernels.push_back(llvm::json::Object{{"name", k.name},
                                         {"template", k.templateName},
                                         {"symbol", k.symbol},
                                         {"chunk", static_cast<int64_t>(k.chunk)},
                                         {"static_smem_bytes", std::move(smem)},
                                         {"registers", std::move(regs)},
                                         {"spills", std::move(spills)},
                                         {"launches", perGpuInt(k.launches)},
                                         {"blocks", std::move(blocks)},
                                         {"sm_fill", perGpu(k.minFill)},
                                         {"modeled_us", perGpu(k.micros)},
                                         {"bounds_us", std::move(bounds)},
                                         {"sass", std::move(sass)},
                                         {"ptx", std::move(ptx)},
                                         {"needs_sync", k.needsSync},
                                         {"cooperative", k.cooperative},
                                         {"tensor_core", k.tensorCore},
                                         {"flops", k.flops},
                                         {"modeled_dram_bytes", static_cast<int64_t>(k.bytes)}});
  }
  llvm::json::Array steps;
  for (const StepCost &sc : cost.steps) {
    llvm::json::Object runs;
    for (size_t i = 0; i < ng; ++i)
      runs[r.gpus[i]] = static_cast<bool>(sc.runs[i]);
    llvm::json::Object stepBounds;
    for (size_t i = 0; i < ng; ++i)
      stepBounds[r.gpus[i]] = boundsJson(sc.bounds[i]);
    llvm::json::Object o{{"node", sc.node},
                         {"kind", sc.kind},
                         {"blocks", static_cast<int64_t>(sc.blocks)},
                         {"flops", sc.flops},
                         {"modeled_dram_bytes", static_cast<int64_t>(sc.bytes())},
                         {"runs_on", std::move(runs)},
                         {"sm_fill", perGpu(sc.fill)},
                         {"modeled_us", perGpu(sc.micros)},
                         {"bounds_us", std::move(stepBounds)},
                         {"roofline_us", perGpu(sc.roofline)}};
    if (sc.kernel >= 0)
      o["kernel"] = r.kernels[sc.kernel].name;
    // A layer's step with alternatives: every candidate of its group, this step's own
    // marked, and which one runs without timing.
    for (const pkg::TacticGroup &g : r.tactics)
      if (sc.altGroup && g.group == sc.altGroup) {
        o["tactics"] = tacticsJson(r, g, sc.alt);
        o["tactic_group"] = static_cast<int64_t>(g.group);
      }
    steps.push_back(std::move(o));
  }
  llvm::json::Array layers;
  for (const pkg::TacticGroup &g : r.tactics)
    layers.push_back(llvm::json::Object{{"node", g.node},
                                        {"group", static_cast<int64_t>(g.group)},
                                        {"tactics", tacticsJson(r, g, 0)}});
  llvm::json::Array targets;
  for (const Report::Module &mod : r.modules)
    if (std::find(targets.begin(), targets.end(), llvm::json::Value(mod.target)) == targets.end())
      targets.push_back(mod.target);
  llvm::json::Array checks; // launches that flag bad data (package.fbs: Check)
  for (const Report::Check &c : r.checks)
    checks.push_back(llvm::json::Object{{"node", c.node}, {"what", c.what}});
  llvm::json::Array bound; // inputs bound at compile time (package.fbs: BoundInput)
  for (const Report::BoundInput &b : r.boundInputs) {
    llvm::json::Array shape;
    for (int64_t d : b.shape)
      shape.push_back(d);
    bound.push_back(llvm::json::Object{
        {"name", b.name}, {"dtype", b.dtype}, {"shape", std::move(shape)}, {"values", b.values}});
  }
  llvm::json::Value shapeRanges = nullptr;
  if (r.shapeRanges) {
    llvm::json::Array list;
    for (const Report::ShapeRanges::Range &sr : r.shapeRanges->ranges)
      list.push_back(llvm::json::Object{{"input", sr.input},
                                        {"axis", static_cast<int64_t>(sr.axis)},
                                        {"min", sr.min},
                                        {"max", sr.max},
                                        {"opt", sr.opt}});
    shapeRanges =
        llvm::json::Object{{"ranges", std::move(list)},
                           {"schedules", static_cast<int64_t>(r.shapeRanges->schedules)},
                           {"modeled_latency_us_at_min", perGpu(r.shapeRanges->microsAtMin)},
                           {"modeled_latency_us_at_opt", perGpu(cost.micros)},
                           {"modeled_latency_us_at_max", perGpu(r.shapeRanges->microsAtMax)}};
  }
  llvm::json::Value training = nullptr;
  if (r.training)
    training =
        llvm::json::Object{{"variables", static_cast<int64_t>(r.training->variables)},
                           {"trainable_parameters", static_cast<int64_t>(r.training->trainable)},
                           {"parameter_values", static_cast<int64_t>(r.training->parameterValues)},
                           {"variable_bytes", static_cast<int64_t>(r.training->variableBytes)},
                           {"commit_steps", static_cast<int64_t>(r.training->commitSteps)},
                           {"evaluation_steps", static_cast<int64_t>(r.training->evaluationSteps)},
                           {"shared_steps", static_cast<int64_t>(r.training->sharedSteps)}};
  llvm::json::Value dataParallel = nullptr;
  if (r.dataParallel) {
    const Report::DataParallel &dp = *r.dataParallel;
    llvm::json::Array scaling;
    for (const DataParallelCost &d : dp.scaling) {
      std::vector<double> overlap;
      for (size_t i = 0; i < ng; ++i)
        overlap.push_back(d.overlap(i));
      scaling.push_back(llvm::json::Object{{"ranks", d.ranks},
                                           {"all_reduce_us", perGpu(d.commMicros)},
                                           {"exposed_us", perGpu(d.exposedMicros)},
                                           {"overlap_fraction", perGpu(overlap)},
                                           {"step_us", perGpu(d.stepMicros)}});
    }
    dataParallel = llvm::json::Object{
        {"bucket_bytes", static_cast<int64_t>(dp.bucketBytes)},
        {"zero_ranks", static_cast<int64_t>(dp.zeroRanks)},
        {"sharded_state_bytes_per_rank", static_cast<int64_t>(dp.shardedBytesPerRank)},
        {"buckets", static_cast<int64_t>(dp.scaling.front().buckets)},
        {"all_reduce_bytes_per_step", static_cast<int64_t>(dp.scaling.front().allReduceBytes)},
        {"model", "a model, not a measurement: ring all-reduce of each bucket, 2 (N-1)/N of its "
                  "bytes over NVLink (A100 300 GB/s, H100 450 GB/s per direction) + 3 us per hop, "
                  "on a second stream from the bucket's AllReduce step; the step waits at its "
                  "CollectiveWait"},
        {"scaling", std::move(scaling)}};
  }
  llvm::json::Object profiles;
  for (const codegen::GpuModel &g : cost.gpus)
    profiles[g.name] = llvm::json::Object{{"arch", g.arch}, {"source", g.source}};
  llvm::json::Object root{
      {"model", r.model},
      {"data_parallel", std::move(dataParallel)},
      {"training", std::move(training)},
      {"checks", std::move(checks)},
      {"bound_inputs", std::move(bound)},
      {"conditional_steps", static_cast<int64_t>(r.conditionalSteps)},
      {"shape_ranges", std::move(shapeRanges)},
      {"launches", static_cast<int64_t>(r.launchesOn[h100])},
      {"library_calls", static_cast<int64_t>(r.callsOn[h100])},
      {"launches_by_gpu", perGpuInt(r.launchesOn)},
      {"package_launch_steps", static_cast<int64_t>(r.packageLaunches)},
      {"package_library_calls", static_cast<int64_t>(r.libraryCalls)},
      {"other_steps", static_cast<int64_t>(r.otherSteps)},
      {"unique_kernels", static_cast<int64_t>(r.kernels.size())},
      {"arena_bytes", static_cast<int64_t>(r.arenaBytes)},
      {"naive_bytes", static_cast<int64_t>(r.naiveBytes)},
      {"max_live_bytes", static_cast<int64_t>(r.maxLiveBytes)},
      {"weight_bytes", static_cast<int64_t>(r.weightBytes)},
      {"package_bytes", static_cast<int64_t>(r.packageBytes)},
      {"modeled_dram_bytes", static_cast<int64_t>(cost.bytesRead[h100] + cost.bytesWritten[h100])},
      {"modeled_bytes_read", static_cast<int64_t>(cost.bytesRead[h100])},
      {"modeled_bytes_written", static_cast<int64_t>(cost.bytesWritten[h100])},
      {"lower_bound_bytes", static_cast<int64_t>(cost.lowerBoundBytes)},
      {"flops", cost.flops[h100]},
      {"tensor_core_flops", cost.tensorFlops[h100]},
      {"tensor_core_flop_fraction",
       cost.flops[h100] > 0 ? cost.tensorFlops[h100] / cost.flops[h100] : 0.0},
      // Integer work (quantized models): its FLOPs, and the fraction of them on int8
      // tensor cores; FP8 tensor-core work over all FLOPs.
      {"integer_flops", cost.integerFlops[h100]},
      {"int8_tensor_core_flop_fraction",
       cost.integerFlops[h100] > 0 ? cost.integerTensorFlops[h100] / cost.integerFlops[h100] : 0.0},
      {"fp8_tensor_core_flop_fraction",
       cost.flops[h100] > 0 ? cost.fp8TensorFlops[h100] / cost.flops[h100] : 0.0},
      {"modeled_latency_us", perGpu(cost.micros)},
      {"roofline_us", perGpu(cost.roofline)},
      {"latency_model",
       "a model, not a measurement, from the compiled code: per kernel launch the largest of "
       "an issue bound (the SASS main loop's instructions per pipe, run as often as the "
       "launch's FLOPs or bytes need, over the busy SMs), a memory bound (each pass over the "
       "data at achievable DRAM bandwidth, re-reads at L2 bandwidth) and a latency bound "
       "(each warp's chain of iterations, wave by wave), plus one CUDA-graph node; library "
       "calls from an efficiency curve; launches without a cubin for the GPU at peak x SM "
       "fill (limit 'peak'); docs/ARCHITECTURE.md 'Kernel facts and bounds'"},
      {"gpu_profiles", std::move(profiles)},
      {"launches_priced_at_peak", perGpuInt(cost.peakPriced)},
      {"launches_priced_from_ptx", perGpuInt(cost.ptxPriced)},
      {"roofline_model", "the optimistic bound: per step max(bytes / bandwidth, FLOPs / peak), no "
                         "SM fill, no launch overhead"},
      {"targets", std::move(targets)},
      {"kernels", std::move(kernels)},
      {"steps", std::move(steps)},
      {"tactics", std::move(layers)}};
  llvm::json::Array embedded;
  for (const auto &[key, n] : r.embeddedTactics)
    embedded.push_back(llvm::json::Object{{"key", key}, {"layers", static_cast<int64_t>(n)}});
  root["embedded_tactics"] = std::move(embedded);
  if (!r.tacticsCachePath.empty())
    root["tactics_cache"] =
        llvm::json::Object{{"path", r.tacticsCachePath}, {"key", r.tacticsCacheKey}};
  return root;
}

void printReport(const Report &r, llvm::raw_ostream &os) {
  size_t ng = r.gpus.size(), h100 = ng - 1;
  const PackageCost &cost = r.cost;
  os << "package " << r.packageName << " (" << r.packageBytes << " bytes), model '" << r.model
     << "'\n";
  os << "targets:";
  for (const Report::Module &mod : r.modules)
    os << " " << mod.target << "[" << mod.chunk << "](" << mod.bytes << " B)";
  os << "\nsteps: " << r.launchesOn[h100] << " kernel launches of " << r.kernels.size()
     << " unique kernels, " << r.callsOn[h100] << " library calls, " << r.otherSteps
     << " copies/memsets";
  if (r.packageLaunches != r.launchesOn[h100])
    os << " (on " << r.gpus[h100] << "; " << r.launchesOn[0] << " launches on " << r.gpus[0]
       << ": tiles planned per architecture)";
  os << "\nmemory: arena " << r.arenaBytes << " bytes";
  if (r.maxLiveBytes)
    os << llvm::format(" (%.2fx the live-set bound %llu; %llu without a plan)",
                       double(r.arenaBytes) / double(r.maxLiveBytes),
                       (unsigned long long)r.maxLiveBytes, (unsigned long long)r.naiveBytes);
  os << ", weights " << r.weightBytes << " bytes\n";
  if (!r.tactics.empty()) {
    std::map<std::string, size_t> vendors;
    // (Counted beyond the default: the vendors' candidates, and our other tiles.)
    for (const pkg::TacticGroup &g : r.tactics)
      for (const pkg::TacticAlt &t : g.alts)
        if (t.alt != g.defaultAlt())
          ++vendors[t.kind == pkg::TacticKind::Dlc ? "dlc tiles" : pkg::tacticKindName(t.kind)];
    os << "tactics: " << r.tactics.size() << " layer" << (r.tactics.size() == 1 ? "" : "s")
       << " with alternatives (";
    bool first = true;
    for (const auto &[kind, n] : vendors) {
      os << (first ? "" : ", ") << kind << " " << n;
      first = false;
    }
    os << "), timed on the GPU when a session starts; modeled here with dlc's kernels "
          "(--json: steps[].tactics)\n";
    if (!r.tacticsCachePath.empty()) {
      std::map<std::string, size_t> chosen;
      for (const pkg::TacticGroup &g : r.tactics)
        if (auto c = r.tacticsChosen.find(g.group); c != r.tacticsChosen.end())
          for (const pkg::TacticAlt &t : g.alts)
            if (t.alt == c->second.first)
              ++chosen[pkg::tacticKindName(t.kind)];
      os << "tactics cache " << r.tacticsCachePath << " (" << r.tacticsCacheKey << "):";
      if (chosen.empty())
        os << " no choice for this package's layers";
      for (const auto &[kind, n] : chosen)
        os << " " << kind << " " << n;
      os << "\n";
    }
    for (const auto &[key, n] : r.embeddedTactics)
      os << "tactics embedded for " << key << ": " << n << " layer" << (n == 1 ? "" : "s")
         << " (dlc tune --embed)\n";
  }
  if (r.training)
    os << "training step: " << r.training->variables << " variables (" << r.training->trainable
       << " trainable parameters, the rest optimizer and model state; " << r.training->variableBytes
       << " bytes in the arena), committed by the last " << r.training->commitSteps
       << " steps (multi-tensor update kernels, then copies)\n";
  if (r.dataParallel) {
    const Report::DataParallel &dp = *r.dataParallel;
    if (dp.zeroRanks)
      os << "data parallel, ZeRO-1 over " << dp.zeroRanks << " ranks: the gradients ("
         << dp.scaling.front().allReduceBytes
         << " bytes) reduce-scattered, the parameters all-gathered; " << dp.shardedBytesPerRank
         << " bytes of optimizer state per rank\n";
    else
      os << "data parallel: " << dp.scaling.front().buckets << " all-reduce buckets (limit "
         << dp.bucketBytes << " bytes), " << dp.scaling.front().allReduceBytes
         << " bytes all-reduced per rank and step\n";
    os << "modeled scaling (a model, not a measurement; ring all-reduce over NVLink on a "
          "second stream):\n";
    for (const DataParallelCost &d : dp.scaling) {
      os << "  " << d.ranks << " GPUs:";
      for (size_t i = 0; i < ng; ++i)
        os << llvm::format(" %s all-reduce %.1f us, %.0f%% overlapped, step %.1f us;",
                           r.gpus[i].c_str(), d.commMicros[i], 100.0 * d.overlap(i),
                           d.stepMicros[i]);
      os << "\n";
    }
  }
  if (r.training && r.training->evaluationSteps)
    os << "evaluation: " << r.training->evaluationSteps << " steps (" << r.training->sharedSteps
       << " shared with the training step): the model in inference mode, "
       << r.training->evaluationOutputs << " outputs\n";
  if (r.conditionalSteps)
    os << "control flow: " << r.conditionalSteps
       << " steps run on one side of an If with a run-time condition (read back each "
          "run; no CUDA graph)\n";
  for (const Report::BoundInput &b : r.boundInputs)
    os << "bound input: " << b.name << " = " << b.description
       << " (fixed at compile time with --bind; not an input)\n";
  if (r.shapeRanges) {
    os << "shape ranges: " << r.shapeRanges->text << "; " << r.shapeRanges->schedules
       << " schedules, one per shape, sharing kernels and weights (the figures below are "
          "at the opt shape)\n"
       << "modeled latency by shape (a model, not a measurement):";
    for (size_t i = 0; i < ng; ++i)
      os << llvm::format(" %s min %.1f us, opt %.1f us, max %.1f us;", r.gpus[i].c_str(),
                         r.shapeRanges->microsAtMin[i], cost.micros[i],
                         r.shapeRanges->microsAtMax[i]);
    os << "\n";
  }
  if (!r.checks.empty()) {
    os << "data checks: " << r.checks.size()
       << " (launches that flag bad indices, loops that would pass their --loop-bound, "
          "deferred If branches; the run fails naming the node)\n";
    for (const Report::Check &c : r.checks)
      if (c.what.find(ir::kDeferredBranchText) != std::string::npos)
        os << "  deferred If branch: node '" << c.node << "': " << c.what << "\n";
  }
  os << llvm::format("traffic: %.3f MB DRAM (lower bound %.3f MB, %.2fx), %.3f GFLOP\n",
                     (cost.bytesRead[h100] + cost.bytesWritten[h100]) / 1e6,
                     cost.lowerBoundBytes / 1e6,
                     cost.lowerBoundBytes ? double(cost.bytesRead[h100] + cost.bytesWritten[h100]) /
                                                cost.lowerBoundBytes
                                          : 0.0,
                     cost.flops[h100] / 1e9);
  if (cost.flops[h100] > 0)
    os << llvm::format("tensor cores: %.1f%% of the FLOPs (%.3f GFLOP)\n",
                       100.0 * cost.tensorFlops[h100] / cost.flops[h100],
                       cost.tensorFlops[h100] / 1e9);
  if (cost.integerFlops[h100] > 0)
    os << llvm::format("integer arithmetic (quantized): %.1f%% of the FLOPs (%.3f GFLOP), "
                       "%.1f%% of it on int8 tensor cores\n",
                       100.0 * cost.integerFlops[h100] / cost.flops[h100],
                       cost.integerFlops[h100] / 1e9,
                       100.0 * cost.integerTensorFlops[h100] / cost.integerFlops[h100]);
  if (cost.fp8TensorFlops[h100] > 0)
    os << llvm::format("float8 (FP8 QDQ): %.1f%% of the FLOPs on tensor cores (%.3f GFLOP)\n",
                       100.0 * cost.fp8TensorFlops[h100] / cost.flops[h100],
                       cost.fp8TensorFlops[h100] / 1e9);
  const std::string &main = r.gpus[h100];
  const std::string &mainArch = cost.gpus[h100].arch;
  os << "modeled latency (a model, not a measurement; bounds from the compiled code):";
  for (size_t i = 0; i < ng; ++i)
    os << llvm::format(" %s %.1f us", r.gpus[i].c_str(), cost.micros[i]);
  os << "; roofline bound:";
  for (size_t i = 0; i < ng; ++i)
    os << llvm::format(" %s %.1f us", r.gpus[i].c_str(), cost.roofline[i]);
  os << "\n";
  for (size_t i = 0; i < ng; ++i)
    if (cost.ptxPriced[i])
      os << "  " << r.gpus[i] << ": " << cost.ptxPriced[i] << " launches priced from PTX (no "
         << cost.gpus[i].arch << " cubin runs there; ptxas will change the instruction counts)\n";
  for (size_t i = 0; i < ng; ++i)
    if (cost.peakPriced[i])
      os << "  " << r.gpus[i] << ": " << cost.peakPriced[i]
         << " launches priced at peak x SM fill ("
         << (cost.decodeErrors.count(cost.gpus[i].arch)
                 ? cost.decodeErrors.at(cost.gpus[i].arch)
                 : "the package has no " + cost.gpus[i].arch + " cubin")
         << ")\n";
  os << "kernels (launches on " << main << ", lowest SM fill, modeled time, the limiting bound, "
     << mainArch << " main loop):\n";
  for (const KernelReport &k : r.kernels) {
    os << "  " << llvm::left_justify(k.name, 30)
       << llvm::format(" x%-3d fill %.2f %8.1f us %-7s", static_cast<int>(k.launches[h100]),
                       k.minFill[h100], k.micros[h100], k.bounds[h100].limit.c_str());
    if (const codegen::sass::KernelFacts *f = cost.factsOf(mainArch, k.symbol); f && f->main()) {
      const codegen::sass::Mix &mix = *f->main();
      if (f->instructionsPerMma() > 0)
        os << llvm::format(" %.1f instr/MMA", f->instructionsPerMma());
      else
        os << " " << mix.instructions << " instr/iter";
    }
    os << (k.tensorCore ? "  tensor cores" : "");
    for (const KernelReport::Resources &a : k.resources)
      os << "  " << a.arch << ":" << a.registers << "r/" << a.spillBytes << "s/" << a.staticSmem
         << "B";
    os << "\n";
  }
  // The layers that cost the most on the main GPU, with their fill and limit.
  std::vector<const StepCost *> byTime;
  for (const StepCost &sc : cost.steps)
    if (sc.runs[h100])
      byTime.push_back(&sc);
  std::stable_sort(byTime.begin(), byTime.end(), [&](const StepCost *a, const StepCost *b) {
    return a->micros[h100] > b->micros[h100];
  });
  os << "costliest steps on " << main << ":\n";
  for (size_t i = 0; i < std::min<size_t>(byTime.size(), 10); ++i) {
    const StepCost &sc = *byTime[i];
    std::string what = sc.kernel >= 0 ? r.kernels[sc.kernel].name : sc.kind;
    if (sc.tensor)
      what += sc.tf32 ? " (tf32)" : " (tc)";
    os << llvm::format("  %8.1f us  %-7s fill %.2f  %6llu blocks  %8.3f GFLOP  ", sc.micros[h100],
                       sc.bounds[h100].limit.c_str(), sc.fill[h100],
                       static_cast<unsigned long long>(sc.blocks), sc.flops / 1e9)
       << llvm::left_justify(what, 30) << " " << sc.node << "\n";
  }
}

} // namespace dlc::driver
