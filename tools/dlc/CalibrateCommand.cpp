//===- CalibrateCommand.cpp - `dlc calibrate`: measure this GPU for the model ===//
#include "Args.h"
#include "Commands.h"
#include "dlc/codegen/Artifacts.h"
#include "dlc/codegen/Compiler.h"
#include "dlc/codegen/GpuModel.h"
#include "dlc/runtime/Calibrate.h"
#include "dlc/support/Files.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"

#include <cctype>
#include <cstring>

namespace dlc::tool {

namespace {

llvm::Expected<std::vector<uint8_t>> compileKernels(const std::string &arch) {
  return codegen::compileCubin(rt::calibrationKernelSource(), arch);
}

} // namespace

int runCalibrate(const std::vector<std::string> &argv) {
  ArgParser parser(
      "calibrate", "[-o PROFILE.json] [--device N] [--name NAME] | --emit-kernels DIR",
      "Measures this machine's GPU for the cost model of `dlc inspect`: the sustained\n"
      "SM clock, FFMA, HFMA2 and mma.sync throughput, DRAM and L2 bandwidth, load\n"
      "latencies, launch and CUDA-graph overheads (a few seconds, about 800 MB of GPU\n"
      "memory). Prints them beside the built-in profile and writes a profile that\n"
      "`dlc inspect --gpu-profile FILE` uses (commit it per GPU model). Needs a GPU;\n"
      "--emit-kernels compiles the microbenchmarks for every architecture instead (for\n"
      "`dlc-run --calibrate DIR` on a machine without dlc, as the GPU kit does).",
      {{"output", 'o', true, false, "FILE", "write the profile to FILE (atomically)"},
       {"device", 0, true, false, "N", "the CUDA device (default 0)"},
       {"name", 0, true, false, "NAME",
        "the profile's name (default: the built-in profile the device's name matches, as "
        "H100, else the device's name)"},
       {"emit-kernels", 0, true, false, "DIR",
        "write DIR/calibrate_sm_XX.cubin for sm_80, sm_86, sm_89 and sm_90 and stop"}});
  int exitCode = 0;
  auto args = parser.parseCommand(argv, exitCode);
  if (!args)
    return exitCode;
  if (!args->positionals().empty()) {
    reportError("calibrate: takes no positional arguments");
    return 2;
  }
  if (auto dir = args->get("emit-kernels")) {
    if (std::error_code ec = llvm::sys::fs::create_directories(*dir)) {
      reportError("calibrate: cannot create " + *dir + ": " + ec.message());
      return 1;
    }
    for (const char *arch : {"sm_80", "sm_86", "sm_89", "sm_90"}) {
      llvm::Expected<std::vector<uint8_t>> cubin = compileKernels(arch);
      if (!cubin) {
        reportError(cubin.takeError());
        return 1;
      }
      std::string path = *dir + "/calibrate_" + arch + ".cubin";
      if (auto e = codegen::writeFileAtomically(path, std::string(cubin->begin(), cubin->end()))) {
        reportError(std::move(e));
        return 1;
      }
    }
    llvm::outs() << "dlc: wrote the microbenchmarks for sm_80, sm_86, sm_89, sm_90 to " << *dir
                 << "\n";
    return 0;
  }
  int device = 0;
  if (auto d = args->get("device");
      d && (llvm::StringRef(*d).getAsInteger(10, device) || device < 0)) {
    reportError("calibrate: --device must be a device number, got '" + *d + "'");
    return 2;
  }
  Result<std::pair<int, int>> cc = rt::cudaComputeCapability(device);
  if (!cc) {
    reportError("calibrate needs a GPU: " + cc.status().message());
    return 1;
  }
  std::string arch = "sm_" + std::to_string(cc->first * 10 + cc->second);
  llvm::Expected<std::vector<uint8_t>> cubin = compileKernels(arch);
  if (!cubin) {
    reportError(cubin.takeError());
    return 1;
  }
  Result<rt::Calibration> c = rt::calibrate(device, *cubin, [](const std::string &what) {
    llvm::errs() << "dlc: calibrate: " << what << "\n";
  });
  if (!c) {
    reportError(c.status().message());
    return 1;
  }
  std::string name = args->getOr("name", rt::profileNameFor(c->device));
  if (name.empty())
    name = c->device;
  const codegen::GpuModel *base = codegen::gpuModelNamed(name);
  for (const codegen::GpuModel &g : codegen::gpuModels())
    if (!base && g.arch == arch) // the first of the architecture, as loadGpuProfile takes
      base = &g;
  if (!base)
    llvm::errs() << "dlc: note: no built-in profile for " << arch
                 << "; dlc inspect loads profiles of sm_80, sm_86, sm_89 and sm_90 only\n";
  llvm::outs() << "device: " << c->device << " (" << arch << ", " << c->sms << " SMs)\n";
  std::string profileColumn = base ? "profile " + base->name : "no profile";
  llvm::outs() << llvm::format("%-32s %14s %14s\n", static_cast<const char *>("measured"),
                               profileColumn.c_str(), static_cast<const char *>("this GPU"));
  auto row = [&](const char *what, double profile, double measured) {
    llvm::outs() << llvm::format("%-32s %14.4g %14.4g\n", what, profile, measured);
  };
  codegen::GpuModel none{};
  const codegen::GpuModel &p = base ? *base : none;
  row("SM clock, Hz", p.clockHz, c->clockHz);
  row("FFMA / clock / SM", p.fp32PerClock, c->ffmaPerClock);
  row("HFMA2 / clock / SM", p.fp16x2PerClock, c->hfma2PerClock);
  row("mma.sync 16x8x16 / clock / SM", base ? p.hmmaPerClock() : 0, c->hmmaPerClock);
  row("DRAM copy, bytes/s", p.dramBytesPerSecond * p.dramAchievable, c->dramBytesPerSecond);
  row("L2 reads, bytes/s", p.l2BytesPerSecond, c->l2BytesPerSecond);
  row("L2-hit latency, cycles", p.l2LatencyCycles, c->l2LatencyCycles);
  row("DRAM latency, cycles", p.dramLatencyCycles, c->dramLatencyCycles);
  row("launch, us", p.launchMicros, c->launchMicros);
  row("CUDA-graph node, us", p.graphNodeMicros, c->graphNodeMicros);
  row("run (graph launch + wait), us", p.runOverheadMicros, c->runOverheadMicros);
  std::string json = rt::calibrationProfileJson(*c, name);
  if (!args->has("output")) {
    llvm::outs() << json;
    return 0;
  }
  if (auto e = codegen::writeFileAtomically(*args->get("output"), json)) {
    reportError(std::move(e));
    return 1;
  }
  llvm::outs() << "dlc: wrote " << *args->get("output") << " (dlc inspect --gpu-profile "
               << *args->get("output") << ")\n";
  return 0;
}

} // namespace dlc::tool
