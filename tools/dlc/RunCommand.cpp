//===- RunCommand.cpp - `dlc run` and `dlc inspect` ------------------------===//
#include "Args.h"
#include "Commands.h"
#include "CostModel.h"

#include "dlc/frontend/OnnxImporter.h"
#include "dlc/runtime/Runtime.h"
#include "runtime/cli/Cli.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/JSON.h"

#include <cstring>
#include <map>

namespace dlc::tool {

namespace {

llvm::Error toError(const Status &s) { return ir::makeError(s.message()); }

/// Reads an input file: .npy, or a serialized ONNX TensorProto (.pb).
Result<rt::HostTensor> readInputFile(const std::string &path) {
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

cli::CliContext context(const char *program) {
  cli::CliContext ctx;
  ctx.program = program;
  ctx.readInput = readInputFile;
  return ctx;
}

} // namespace

// `dlc run` and `dlc bench` are the runtime's own front ends (shared with the
// executables of `dlc compile --emit exe`), plus .pb inputs.
int runRun(const std::vector<std::string> &argv) { return cli::runMain(argv, context("dlc")); }
int runBench(const std::vector<std::string> &argv) { return cli::benchMain(argv, context("dlc")); }

int runInspect(const std::vector<std::string> &argv) {
  ArgParser parser("inspect", "PACKAGE.dlc [--json]",
                   "Lists the kernels (launch shape, registers, spills and shared memory per\n"
                   "architecture), library calls and the memory plan of a package.",
                   {{"json", 0, false, false, "", "Machine-readable output"}});
  auto args = parser.parse(argv);
  if (!args) {
    reportError(args.takeError());
    return 2;
  }
  if (args->has("help")) {
    parser.printHelp(llvm::outs());
    return 0;
  }
  if (args->positionals().size() != 1) {
    reportError(ir::makeError("inspect: expected exactly one package file"));
    return 2;
  }
  auto pf = pkg::PackageFile::load(args->positionals()[0]);
  if (!pf) {
    reportError(toError(pf.status()));
    return 1;
  }
  const pkg::Package &m = (*pf)->meta();
  size_t nk = m.kernels() ? m.kernels()->size() : 0;
  std::vector<const pkg::Launch *> firstLaunch(nk, nullptr);
  std::vector<int> launchCount(nk, 0);
  size_t launches = 0, gemms = 0, copies = 0;
  if (m.steps())
    for (const pkg::Step *s : *m.steps()) {
      if (const pkg::Launch *l = s->op_as_Launch()) {
        ++launches;
        ++launchCount[l->kernel()];
        if (!firstLaunch[l->kernel()])
          firstLaunch[l->kernel()] = l;
      } else if (s->op_type() == pkg::StepKind::Gemm) {
        ++gemms;
      } else {
        ++copies;
      }
    }
  PackageCost cost = costOf(**pf);
  auto roofline = [&](const auto &item) {
    llvm::json::Object o;
    for (const GpuSpec &gpu : gpuSpecs())
      o[gpu.name] = item.micros(gpu);
    return o;
  };
  if (args->has("json")) {
    // Per kernel: its launches' modeled traffic, FLOPs and roofline time.
    std::vector<PackageCost> perKernel(nk);
    std::vector<llvm::json::Value> gemmList;
    for (const StepCost &sc : cost.steps) {
      if (sc.kernel >= 0) {
        perKernel[sc.kernel].steps.push_back(sc);
        perKernel[sc.kernel].bytesRead += sc.bytesRead;
        perKernel[sc.kernel].bytesWritten += sc.bytesWritten;
        perKernel[sc.kernel].flops += sc.flops;
      } else if (sc.kind == "gemm") {
        gemmList.push_back(llvm::json::Object{{"node", sc.node},
                                              {"modeled_dram_bytes", static_cast<int64_t>(sc.bytes())},
                                              {"flops", sc.flops},
                                              {"roofline_us", roofline(sc)}});
      }
    }
    llvm::json::Array kernels;
    for (size_t i = 0; i < nk; ++i) {
      const pkg::Kernel *k = m.kernels()->Get(i);
      const pkg::Launch *l = firstLaunch[i];
      llvm::json::Object regs, spills, smem;
      if (k->resources())
        for (const pkg::ArchResources *r : *k->resources()) {
          regs[r->arch()->str()] = r->registers();
          spills[r->arch()->str()] = r->spill_stores() + r->spill_loads();
          smem[r->arch()->str()] = r->static_smem();
        }
      auto dim = [](const pkg::Dim3 *d) {
        return d ? llvm::json::Array{d->x(), d->y(), d->z()} : llvm::json::Array{};
      };
      kernels.push_back(llvm::json::Object{{"name", k->name()->str()},
                                           {"grid", l ? dim(l->grid()) : llvm::json::Array{}},
                                           {"block", l ? dim(l->block()) : llvm::json::Array{}},
                                           {"smem_bytes", l ? l->dynamic_smem() : 0},
                                           {"static_smem_bytes", std::move(smem)},
                                           {"registers", std::move(regs)},
                                           {"spills", std::move(spills)},
                                           {"launches", launchCount[i]},
                                           {"needs_sync", k->needs_sync()},
                                           {"flops", perKernel[i].flops},
                                           {"modeled_dram_bytes",
                                            static_cast<int64_t>(perKernel[i].bytesRead + perKernel[i].bytesWritten)},
                                           {"roofline_us", roofline(perKernel[i])}});
    }
    llvm::json::Array targets;
    if (m.modules())
      for (const pkg::Module *mod : *m.modules())
        targets.push_back(mod->target()->str());
    llvm::json::Object root{{"model", m.model() ? m.model()->str() : ""},
                            {"launches", static_cast<int64_t>(launches)},
                            {"library_calls", static_cast<int64_t>(gemms)},
                            {"other_steps", static_cast<int64_t>(copies)},
                            {"arena_bytes", static_cast<int64_t>(m.arena_bytes())},
                            {"weight_bytes", static_cast<int64_t>(m.weight_bytes())},
                            {"package_bytes", static_cast<int64_t>((*pf)->size())},
                            {"modeled_dram_bytes", static_cast<int64_t>(cost.bytesRead + cost.bytesWritten)},
                            {"modeled_bytes_read", static_cast<int64_t>(cost.bytesRead)},
                            {"modeled_bytes_written", static_cast<int64_t>(cost.bytesWritten)},
                            {"lower_bound_bytes", static_cast<int64_t>(cost.lowerBoundBytes)},
                            {"flops", cost.flops},
                            {"roofline_us", roofline(cost)},
                            {"roofline_model",
                             "a model, not a measurement: per step max(modeled DRAM bytes / bandwidth, FLOPs / FP32 "
                             "peak), summed; A100-SXM4-80GB 2039 GB/s 19.5 TFLOP/s, H100-SXM5 3350 GB/s 66.9 TFLOP/s; "
                             "launch overheads not included"},
                            {"targets", std::move(targets)},
                            {"kernels", std::move(kernels)},
                            {"gemms", llvm::json::Array(std::move(gemmList))}};
    llvm::outs() << llvm::formatv("{0:2}", llvm::json::Value(std::move(root))) << "\n";
    return 0;
  }
  llvm::outs() << "package " << (*pf)->name() << " (" << (*pf)->size() << " bytes), model '"
               << (m.model() ? m.model()->str() : "") << "'\n";
  llvm::outs() << "targets:";
  if (m.modules())
    for (const pkg::Module *mod : *m.modules())
      llvm::outs() << " " << mod->target()->str() << "(" << mod->data()->size() << " B)";
  llvm::outs() << "\nsteps: " << launches << " kernel launches, " << gemms << " library calls, " << copies
               << " copies/memsets\n";
  llvm::outs() << "memory: arena " << m.arena_bytes() << " bytes, weights " << m.weight_bytes() << " bytes\n";
  llvm::outs() << llvm::format("model: %.3f MB DRAM traffic (lower bound %.3f MB, %.2fx), %.3f GFLOP; roofline",
                               cost.bytesRead / 1e6 + cost.bytesWritten / 1e6, cost.lowerBoundBytes / 1e6,
                               cost.lowerBoundBytes ? double(cost.bytesRead + cost.bytesWritten) / cost.lowerBoundBytes
                                                    : 0.0,
                               cost.flops / 1e9);
  for (const GpuSpec &gpu : gpuSpecs())
    llvm::outs() << llvm::format(" %s %.1f us", gpu.name, cost.micros(gpu));
  llvm::outs() << " (a model, not a measurement)\n";
  llvm::outs() << "kernels:\n";
  for (size_t i = 0; i < nk; ++i) {
    const pkg::Kernel *k = m.kernels()->Get(i);
    const pkg::Launch *l = firstLaunch[i];
    llvm::outs() << "  " << llvm::left_justify(k->name()->str(), 36);
    if (l)
      llvm::outs() << " grid " << l->grid()->x() << " block " << l->block()->x();
    if (launchCount[i] > 1)
      llvm::outs() << " x" << launchCount[i];
    if (k->resources())
      for (const pkg::ArchResources *r : *k->resources())
        llvm::outs() << "  " << r->arch()->str() << ":" << r->registers() << "r/" << (r->spill_stores() + r->spill_loads())
                     << "s/" << r->static_smem() << "B";
    llvm::outs() << "\n";
  }
  return 0;
}

} // namespace dlc::tool
