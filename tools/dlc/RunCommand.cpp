//===- RunCommand.cpp - `dlc run` and `dlc inspect` ------------------------===//
#include "Args.h"
#include "Commands.h"
#include "CostModel.h"
#include "dlc/codegen/GpuModel.h"
#include "dlc/frontend/OnnxImporter.h"
#include "dlc/runtime/Cli.h"
#include "dlc/runtime/Runtime.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/JSON.h"

#include <algorithm>
#include <cstring>
#include <map>

namespace dlc::tool {

/// Reads an input file: .npy, or a serialized ONNX TensorProto (.pb).
Result<rt::HostTensor> readTensorFile(const std::string &path) {
  if (!llvm::StringRef(path).endswith(".pb"))
    return rt::readNpy(path);
  auto t = frontend::readTensorProtoFile(path);
  if (!t)
    return Status(StatusCode::InvalidArgument, llvm::toString(t.takeError()));
  rt::HostTensor h;
  h.dtype = static_cast<pkg::DType>(static_cast<uint8_t>(t->second.dtype()));
  h.shape = t->second.shape();
  const uint8_t *p = static_cast<const uint8_t *>(t->second.raw());
  h.data.assign(p, p + t->second.byteSize());
  return h;
}

namespace {

llvm::Error toError(const Status &s) {
  return ir::makeError(s.message());
}

cli::CliContext context(const char *program) {
  cli::CliContext ctx;
  ctx.program = program;
  ctx.readInput = readTensorFile;
  return ctx;
}

/// A shape-range package (pkg::ShapeRange): its ranges as text, and the schedules at
/// the smallest and the largest shape (-1: the package's own, at the opt shape).
struct RangeSummary {
  std::string text;
  size_t schedules = 1;
  int minSchedule = -1, maxSchedule = -1;
};

RangeSummary summarizeRanges(const pkg::Package &m) {
  RangeSummary r;
  if (!m.shape_ranges() || !m.shape_ranges()->size())
    return r;
  for (const pkg::ShapeRange *sr : *m.shape_ranges())
    r.text += (r.text.empty() ? "" : ", ") + sr->input()->str() + "[" + std::to_string(sr->axis()) +
              "] " + std::to_string(sr->min()) + ".." + std::to_string(sr->max()) + " (opt " +
              std::to_string(sr->opt()) + ")";
  size_t nv = m.variants() ? m.variants()->size() : 0;
  r.schedules = nv + 1;
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
      r.minSchedule = k;
    if (at(k, true))
      r.maxSchedule = k;
  }
  return r;
}

} // namespace

// `dlc run` and `dlc bench` are the runtime's own front ends (shared with the
// executables of `dlc compile --emit exe`), plus .pb inputs.
int runRun(const std::vector<std::string> &argv) {
  return cli::runMain(argv, context("dlc"));
}
int runBench(const std::vector<std::string> &argv) {
  return cli::benchMain(argv, context("dlc"));
}

int runInspect(const std::vector<std::string> &argv) {
  ArgParser parser(
      "inspect", "PACKAGE.dlc [--json [-o FILE]]",
      "Lists the kernels (unique instantiations of the kernel library, with their\n"
      "launches, registers, spills and shared memory per architecture), library calls\n"
      "and the memory plan of a package, with a latency model for A100 and H100.",
      {{"json", 0, false, false, "", "Machine-readable output"},
       {"output", 'o', true, false, "FILE",
        "--json: write the report to FILE (atomically) instead of stdout"}});
  int exitCode = 0;
  auto args = parser.parseCommand(argv, exitCode, "package file");
  if (!args)
    return exitCode;
  if (args->has("output") && !args->has("json")) {
    reportError(ir::makeError("inspect: -o goes with --json"));
    return 2;
  }
  auto pf = pkg::PackageFile::load(args->positionals()[0]);
  if (!pf) {
    reportError(toError(pf.status()));
    return 1;
  }
  const pkg::Package &m = (*pf)->meta();
  size_t nk = m.kernels() ? m.kernels()->size() : 0;
  PackageCost cost = costOf(**pf);
  std::vector<const codegen::GpuModel *> gpus = codegen::reportedGpus();
  size_t ng = gpus.size(), h100 = ng - 1;
  // Per unique kernel, over its launches on each GPU: count, blocks, lowest SM fill,
  // modeled time.
  struct KernelStats {
    std::vector<int> launches;
    std::vector<double> minFill, micros;
    std::vector<uint64_t> blocks; // of each launch on H100
    double flops = 0;
    uint64_t bytes = 0;
  };
  std::vector<KernelStats> ks(nk);
  for (KernelStats &k : ks) {
    k.launches.assign(ng, 0);
    k.minFill.assign(ng, 1.0);
    k.micros.assign(ng, 0);
  }
  size_t packageLaunches = 0, gemms = 0, others = 0;
  std::vector<size_t> launchesOn(ng, 0), callsOn(ng, 0);
  for (const StepCost &sc : cost.steps) {
    packageLaunches += sc.kind == "launch";
    gemms += sc.kind == "gemm";
    others += sc.kind == "copy" || sc.kind == "memset";
    for (size_t i = 0; i < ng; ++i) {
      if (!sc.runs[i])
        continue;
      launchesOn[i] += sc.kind == "launch";
      callsOn[i] += sc.kind == "gemm";
      if (sc.kernel < 0)
        continue;
      KernelStats &k = ks[sc.kernel];
      ++k.launches[i];
      k.minFill[i] = std::min(k.minFill[i], sc.fill[i]);
      k.micros[i] += sc.micros[i];
      if (i == h100) {
        k.blocks.push_back(sc.blocks);
        k.flops += sc.flops;
        k.bytes += sc.bytes();
      }
    }
  }
  auto perGpu = [&](const std::vector<double> &v) {
    llvm::json::Object o;
    for (size_t i = 0; i < ng; ++i)
      o[gpus[i]->name] = v[i];
    return o;
  };
  auto perGpuInt = [&](const std::vector<size_t> &v) {
    llvm::json::Object o;
    for (size_t i = 0; i < ng; ++i)
      o[gpus[i]->name] = static_cast<int64_t>(v[i]);
    return o;
  };
  // A training package's variables (dlc compile --train).
  struct {
    size_t count = 0, trainable = 0, parameterValues = 0, bytes = 0;
  } vars;
  if (m.variables())
    for (const pkg::Variable *v : *m.variables()) {
      ++vars.count;
      vars.bytes += v->data()->size();
      if (v->trainable())
        ++vars.trainable, vars.parameterValues += v->data()->size() / pkg::dtypeSize(v->dtype());
    }
  // Its evaluation schedule (pkg::Step::schedules bit 1), and the steps both run.
  size_t evalSteps = 0, sharedSteps = 0;
  size_t conditional = 0; // steps on one side of an If with a run-time condition
  if (m.steps())
    for (const pkg::Step *st : *m.steps())
      conditional += st->predicate() != nullptr;
  if (m.steps() && m.eval_outputs() && m.eval_outputs()->size())
    for (const pkg::Step *st : *m.steps()) {
      evalSteps += (st->schedules() & 2) != 0;
      sharedSteps += st->schedules() == 3;
    }
  // Data-parallel training: the all-reduces at 2, 4 and 8 GPUs of one machine.
  std::vector<DataParallelCost> dp;
  // ZeRO-1 packages run on the ranks they were compiled for.
  if (m.bucket_bytes())
    for (int ranks : m.zero_ranks() ? std::vector<int>{static_cast<int>(m.zero_ranks())}
                                    : std::vector<int>{2, 4, 8})
      dp.push_back(dataParallelCostOf(**pf, cost, ranks));
  uint64_t shardedBytes = 0; // ZeRO-1: this rank's optimizer state
  if (m.variables())
    for (const pkg::Variable *v : *m.variables())
      if (v->sharded())
        shardedBytes += v->data()->size();
  RangeSummary ranges = summarizeRanges(m);
  // Modeled latency at the smallest and largest shape of a shape-range package.
  PackageCost minCost = ranges.schedules > 1 ? costOf(**pf, ranges.minSchedule) : PackageCost{};
  PackageCost maxCost = ranges.schedules > 1 ? costOf(**pf, ranges.maxSchedule) : PackageCost{};
  if (args->has("json")) {
    llvm::json::Array kernels;
    for (size_t i = 0; i < nk; ++i) {
      const pkg::Kernel *k = m.kernels()->Get(i);
      llvm::json::Object regs, spills, smem;
      if (k->resources())
        for (const pkg::ArchResources *r : *k->resources()) {
          regs[r->arch()->str()] = r->registers();
          spills[r->arch()->str()] = r->spill_stores() + r->spill_loads();
          smem[r->arch()->str()] = r->static_smem();
        }
      llvm::json::Array blocks;
      for (uint64_t b : ks[i].blocks)
        blocks.push_back(static_cast<int64_t>(b));
      kernels.push_back(llvm::json::Object{
          {"name", k->name()->str()},
          {"template", k->template_name() ? k->template_name()->str() : ""},
          {"symbol", k->symbol() ? k->symbol()->str() : ""},
          {"chunk", static_cast<int64_t>(k->chunk())},
          {"static_smem_bytes", std::move(smem)},
          {"registers", std::move(regs)},
          {"spills", std::move(spills)},
          {"launches",
           perGpuInt(std::vector<size_t>(ks[i].launches.begin(), ks[i].launches.end()))},
          {"blocks", std::move(blocks)},
          {"sm_fill", perGpu(ks[i].minFill)},
          {"modeled_us", perGpu(ks[i].micros)},
          {"needs_sync", k->needs_sync()},
          {"cooperative", k->cooperative()},
          {"tensor_core", k->tensor_core()},
          {"flops", ks[i].flops},
          {"modeled_dram_bytes", static_cast<int64_t>(ks[i].bytes)}});
    }
    llvm::json::Array steps;
    for (const StepCost &sc : cost.steps) {
      llvm::json::Object runs;
      for (size_t i = 0; i < ng; ++i)
        runs[gpus[i]->name] = static_cast<bool>(sc.runs[i]);
      llvm::json::Object o{{"node", sc.node},
                           {"kind", sc.kind},
                           {"blocks", static_cast<int64_t>(sc.blocks)},
                           {"flops", sc.flops},
                           {"modeled_dram_bytes", static_cast<int64_t>(sc.bytes())},
                           {"runs_on", std::move(runs)},
                           {"sm_fill", perGpu(sc.fill)},
                           {"modeled_us", perGpu(sc.micros)},
                           {"roofline_us", perGpu(sc.roofline)}};
      if (sc.kernel >= 0)
        o["kernel"] = m.kernels()->Get(sc.kernel)->name()->str();
      steps.push_back(std::move(o));
    }
    llvm::json::Array targets;
    if (m.modules())
      for (const pkg::Module *mod : *m.modules())
        if (std::find(targets.begin(), targets.end(), llvm::json::Value(mod->target()->str())) ==
            targets.end())
          targets.push_back(mod->target()->str());
    llvm::json::Array checks; // launches that flag bad data (package.fbs: Check)
    if (m.checks())
      for (const pkg::Check *c : *m.checks())
        checks.push_back(
            llvm::json::Object{{"node", c->node()->str()}, {"what", c->what()->str()}});
    llvm::json::Array bound; // inputs bound at compile time (package.fbs: BoundInput)
    if (m.bound_inputs())
      for (const pkg::BoundInput *b : *m.bound_inputs()) {
        llvm::json::Array shape;
        for (size_t i = 0; b->shape() && i < b->shape()->size(); ++i)
          shape.push_back(b->shape()->Get(i));
        bound.push_back(llvm::json::Object{{"name", b->name()->str()},
                                           {"dtype", pkg::dtypeName(b->dtype())},
                                           {"shape", std::move(shape)},
                                           {"values", b->values()->str()}});
      }
    llvm::json::Value shapeRanges = nullptr;
    if (ranges.schedules > 1) {
      llvm::json::Array list;
      for (const pkg::ShapeRange *sr : *m.shape_ranges())
        list.push_back(llvm::json::Object{{"input", sr->input()->str()},
                                          {"axis", static_cast<int64_t>(sr->axis())},
                                          {"min", sr->min()},
                                          {"max", sr->max()},
                                          {"opt", sr->opt()}});
      shapeRanges = llvm::json::Object{{"ranges", std::move(list)},
                                       {"schedules", static_cast<int64_t>(ranges.schedules)},
                                       {"modeled_latency_us_at_min", perGpu(minCost.micros)},
                                       {"modeled_latency_us_at_opt", perGpu(cost.micros)},
                                       {"modeled_latency_us_at_max", perGpu(maxCost.micros)}};
    }
    llvm::json::Object training{{"variables", static_cast<int64_t>(vars.count)},
                                {"trainable_parameters", static_cast<int64_t>(vars.trainable)},
                                {"parameter_values", static_cast<int64_t>(vars.parameterValues)},
                                {"variable_bytes", static_cast<int64_t>(vars.bytes)},
                                {"commit_steps", static_cast<int64_t>(m.commit_steps())},
                                {"evaluation_steps", static_cast<int64_t>(evalSteps)},
                                {"shared_steps", static_cast<int64_t>(sharedSteps)}};
    llvm::json::Value dataParallel = nullptr;
    if (!dp.empty()) {
      llvm::json::Array scaling;
      for (const DataParallelCost &d : dp) {
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
          {"bucket_bytes", static_cast<int64_t>(m.bucket_bytes())},
          {"zero_ranks", static_cast<int64_t>(m.zero_ranks())},
          {"sharded_state_bytes_per_rank", static_cast<int64_t>(shardedBytes)},
          {"buckets", static_cast<int64_t>(dp.front().buckets)},
          {"all_reduce_bytes_per_step", static_cast<int64_t>(dp.front().allReduceBytes)},
          {"model",
           "a model, not a measurement: ring all-reduce of each bucket, 2 (N-1)/N of its "
           "bytes over NVLink (A100 300 GB/s, H100 450 GB/s per direction) + 3 us per hop, "
           "on a second stream from the bucket's AllReduce step; the step waits at its "
           "CollectiveWait"},
          {"scaling", std::move(scaling)}};
    }
    llvm::json::Object root{
        {"model", m.model() ? m.model()->str() : ""},
        {"data_parallel", std::move(dataParallel)},
        {"training", m.variables() && m.variables()->size() ? llvm::json::Value(std::move(training))
                                                            : llvm::json::Value(nullptr)},
        {"checks", std::move(checks)},
        {"bound_inputs", std::move(bound)},
        {"conditional_steps", static_cast<int64_t>(conditional)},
        {"shape_ranges", std::move(shapeRanges)},
        {"launches", static_cast<int64_t>(launchesOn[h100])},
        {"library_calls", static_cast<int64_t>(callsOn[h100])},
        {"launches_by_gpu", perGpuInt(launchesOn)},
        {"package_launch_steps", static_cast<int64_t>(packageLaunches)},
        {"package_library_calls", static_cast<int64_t>(gemms)},
        {"other_steps", static_cast<int64_t>(others)},
        {"unique_kernels", static_cast<int64_t>(nk)},
        {"arena_bytes", static_cast<int64_t>(m.arena_bytes())},
        {"naive_bytes", static_cast<int64_t>(m.arena_naive_bytes())},
        {"max_live_bytes", static_cast<int64_t>(m.arena_max_live_bytes())},
        {"weight_bytes", static_cast<int64_t>(m.weight_bytes())},
        {"package_bytes", static_cast<int64_t>((*pf)->size())},
        {"modeled_dram_bytes",
         static_cast<int64_t>(cost.bytesRead[h100] + cost.bytesWritten[h100])},
        {"modeled_bytes_read", static_cast<int64_t>(cost.bytesRead[h100])},
        {"modeled_bytes_written", static_cast<int64_t>(cost.bytesWritten[h100])},
        {"lower_bound_bytes", static_cast<int64_t>(cost.lowerBoundBytes)},
        {"flops", cost.flops[h100]},
        {"tensor_core_flops", cost.tensorFlops[h100]},
        {"tensor_core_flop_fraction",
         cost.flops[h100] > 0 ? cost.tensorFlops[h100] / cost.flops[h100] : 0.0},
        {"modeled_latency_us", perGpu(cost.micros)},
        {"roofline_us", perGpu(cost.roofline)},
        {"latency_model",
         "a model, not a measurement: per launch max(FLOPs / (peak x SM fill), bytes / DRAM "
         "bandwidth) + 2 us launch overhead; SM fill from blocks, waves and the blocks an SM "
         "holds (ptxas registers, shared memory, threads); A100-SXM4 108 SMs 19.5 TFLOP/s FP32 "
         "2039 GB/s, H100-SXM5 132 SMs 66.9 TFLOP/s 3350 GB/s; traffic and FLOPs of the H100 plan"},
        {"roofline_model",
         "the optimistic bound: per step max(bytes / bandwidth, FLOPs / peak), no SM fill, no "
         "launch overhead"},
        {"targets", std::move(targets)},
        {"kernels", std::move(kernels)},
        {"steps", std::move(steps)}};
    std::string text = llvm::formatv("{0:2}", llvm::json::Value(std::move(root))).str() + "\n";
    return writeReport(*args, text);
  }
  llvm::outs() << "package " << (*pf)->name() << " (" << (*pf)->size() << " bytes), model '"
               << (m.model() ? m.model()->str() : "") << "'\n";
  llvm::outs() << "targets:";
  if (m.modules())
    for (const pkg::Module *mod : *m.modules())
      llvm::outs() << " " << mod->target()->str() << "[" << mod->chunk() << "]("
                   << mod->data()->size() << " B)";
  llvm::outs() << "\nsteps: " << launchesOn[h100] << " kernel launches of " << nk
               << " unique kernels, " << callsOn[h100] << " library calls, " << others
               << " copies/memsets";
  if (packageLaunches != launchesOn[h100])
    llvm::outs() << " (on H100; " << launchesOn[0]
                 << " launches on A100: tiles planned per architecture)";
  llvm::outs() << "\nmemory: arena " << m.arena_bytes() << " bytes";
  if (m.arena_max_live_bytes())
    llvm::outs() << llvm::format(" (%.2fx the live-set bound %llu; %llu without a plan)",
                                 double(m.arena_bytes()) / double(m.arena_max_live_bytes()),
                                 (unsigned long long)m.arena_max_live_bytes(),
                                 (unsigned long long)m.arena_naive_bytes());
  llvm::outs() << ", weights " << m.weight_bytes() << " bytes\n";
  if (vars.count)
    llvm::outs() << "training step: " << vars.count << " variables (" << vars.trainable
                 << " trainable parameters, the rest optimizer and model state; " << vars.bytes
                 << " bytes in the arena), committed by the last " << m.commit_steps()
                 << " steps (multi-tensor update kernels, then copies)\n";
  if (!dp.empty()) {
    if (m.zero_ranks())
      llvm::outs() << "data parallel, ZeRO-1 over " << m.zero_ranks() << " ranks: the gradients ("
                   << dp.front().allReduceBytes
                   << " bytes) reduce-scattered, the parameters all-gathered; " << shardedBytes
                   << " bytes of optimizer state per rank\n";
    else
      llvm::outs() << "data parallel: " << dp.front().buckets << " all-reduce buckets (limit "
                   << m.bucket_bytes() << " bytes), " << dp.front().allReduceBytes
                   << " bytes all-reduced per rank and step\n";
    llvm::outs() << "modeled scaling (a model, not a measurement; ring all-reduce over NVLink on a "
                    "second stream):\n";
    for (const DataParallelCost &d : dp) {
      llvm::outs() << "  " << d.ranks << " GPUs:";
      for (size_t i = 0; i < ng; ++i)
        llvm::outs() << llvm::format(" %s all-reduce %.1f us, %.0f%% overlapped, step %.1f us;",
                                     gpus[i]->name, d.commMicros[i], 100.0 * d.overlap(i),
                                     d.stepMicros[i]);
      llvm::outs() << "\n";
    }
  }
  if (evalSteps)
    llvm::outs() << "evaluation: " << evalSteps << " steps (" << sharedSteps
                 << " shared with the training step): the model in inference mode, "
                 << m.eval_outputs()->size() << " outputs\n";
  if (conditional)
    llvm::outs() << "control flow: " << conditional
                 << " steps run on one side of an If with a run-time condition (read back each "
                    "run; no CUDA graph)\n";
  if (m.bound_inputs())
    for (const pkg::BoundInput *b : *m.bound_inputs())
      llvm::outs() << "bound input: " << b->name()->str() << " = " << pkg::describeBoundInput(*b)
                   << " (fixed at compile time with --bind; not an input)\n";
  if (ranges.schedules > 1) {
    llvm::outs() << "shape ranges: " << ranges.text << "; " << ranges.schedules
                 << " schedules, one per shape, sharing kernels and weights (the figures below are "
                    "at the opt shape)\n"
                 << "modeled latency by shape (a model, not a measurement):";
    for (size_t i = 0; i < ng; ++i)
      llvm::outs() << llvm::format(" %s min %.1f us, opt %.1f us, max %.1f us;", gpus[i]->name,
                                   minCost.micros[i], cost.micros[i], maxCost.micros[i]);
    llvm::outs() << "\n";
  }
  if (m.checks() && m.checks()->size())
    llvm::outs() << "data checks: " << m.checks()->size()
                 << " (launches that flag bad indices, loops that would pass their --loop-bound; "
                    "the run fails "
                    "naming the node)\n";
  llvm::outs() << llvm::format(
      "traffic: %.3f MB DRAM (lower bound %.3f MB, %.2fx), %.3f GFLOP\n",
      (cost.bytesRead[h100] + cost.bytesWritten[h100]) / 1e6, cost.lowerBoundBytes / 1e6,
      cost.lowerBoundBytes
          ? double(cost.bytesRead[h100] + cost.bytesWritten[h100]) / cost.lowerBoundBytes
          : 0.0,
      cost.flops[h100] / 1e9);
  if (cost.flops[h100] > 0)
    llvm::outs() << llvm::format("tensor cores: %.1f%% of the FLOPs (%.3f GFLOP)\n",
                                 100.0 * cost.tensorFlops[h100] / cost.flops[h100],
                                 cost.tensorFlops[h100] / 1e9);
  llvm::outs() << "modeled latency (a model, not a measurement):";
  for (size_t i = 0; i < ng; ++i)
    llvm::outs() << llvm::format(" %s %.1f us", gpus[i]->name, cost.micros[i]);
  llvm::outs() << "; roofline bound:";
  for (size_t i = 0; i < ng; ++i)
    llvm::outs() << llvm::format(" %s %.1f us", gpus[i]->name, cost.roofline[i]);
  llvm::outs() << "\nkernels (launches on H100, lowest SM fill on H100, modeled H100 time):\n";
  for (size_t i = 0; i < nk; ++i) {
    const pkg::Kernel *k = m.kernels()->Get(i);
    llvm::outs() << "  " << llvm::left_justify(k->name()->str(), 30)
                 << llvm::format(" x%-3d fill %.2f %8.1f us", ks[i].launches[h100],
                                 ks[i].minFill[h100], ks[i].micros[h100])
                 << (k->tensor_core() ? "  tensor cores" : "");
    if (k->resources())
      for (const pkg::ArchResources *r : *k->resources())
        llvm::outs() << "  " << r->arch()->str() << ":" << r->registers() << "r/"
                     << (r->spill_stores() + r->spill_loads()) << "s/" << r->static_smem() << "B";
    llvm::outs() << "\n";
  }
  // The layers that cost the most on H100, with their fill.
  std::vector<const StepCost *> byTime;
  for (const StepCost &sc : cost.steps)
    if (sc.runs[h100])
      byTime.push_back(&sc);
  std::stable_sort(byTime.begin(), byTime.end(), [&](const StepCost *a, const StepCost *b) {
    return a->micros[h100] > b->micros[h100];
  });
  llvm::outs() << "costliest steps on H100:\n";
  for (size_t i = 0; i < std::min<size_t>(byTime.size(), 10); ++i) {
    const StepCost &sc = *byTime[i];
    std::string what = sc.kernel >= 0 ? m.kernels()->Get(sc.kernel)->name()->str() : sc.kind;
    if (sc.tensor)
      what += sc.tf32 ? " (tf32)" : " (tc)";
    llvm::outs() << llvm::format("  %8.1f us  fill %.2f  %6llu blocks  %8.3f GFLOP  ",
                                 sc.micros[h100], sc.fill[h100],
                                 static_cast<unsigned long long>(sc.blocks), sc.flops / 1e9)
                 << llvm::left_justify(what, 30) << " " << sc.node << "\n";
  }
  return 0;
}

} // namespace dlc::tool
