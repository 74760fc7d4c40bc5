//===- InspectCommand.cpp - `dlc inspect`: what a package holds ------------===//
#include "Args.h"
#include "Commands.h"
#include "dlc/driver/Inspect.h"
#include "dlc/runtime/Runtime.h"
#include "dlc/support/Files.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>

namespace dlc::tool {

int runInspect(const std::vector<std::string> &argv) {
  ArgParser parser(
      "inspect",
      "PACKAGE.dlc [--json [-o FILE]] [--gpu LIST] [--gpu-profile FILE] [--tactics-cache FILE]",
      "Lists the kernels (unique instantiations of the kernel library, with their\n"
      "launches, registers, spills and shared memory per architecture, and the main\n"
      "loop of their SASS), library calls and the memory plan of a package, with a\n"
      "latency model built on the compiled code (issue, memory and latency bounds per\n"
      "kernel) for A100 and H100.",
      {{"json", 0, false, false, "", "Machine-readable output"},
       {"output", 'o', true, false, "FILE",
        "--json: write the report to FILE (atomically) instead of stdout"},
       {"gpu", 0, true, false, "LIST",
        "GPU profiles to model, comma-separated: A100, A10, L4, H100, H200 (default "
        "A100,H100; the last is detailed)"},
       {"gpu-profile", 0, true, true, "FILE",
        "a profile measured by `dlc calibrate`: replaces the profile of its name, else "
        "is added last (repeatable)"},
       {"tactics-cache", 0, true, false, "FILE",
        "a tactics cache file (~/.cache/dlc/tactics/*.txt, dlc tune): show which candidate "
        "it chose for each layer and its measured time"}});
  int exitCode = 0;
  auto args = parser.parseCommand(argv, exitCode, "package file");
  if (!args)
    return exitCode;
  if (args->has("output") && !args->has("json")) {
    reportError("inspect: -o goes with --json");
    return 2;
  }
  if (Status s = refuseOverwrite(args->getOr("output", ""), "inspect: -o",
                                 {{args->positionals()[0], "package"}})) {
    reportError(s.message());
    return 2;
  }
  auto pf = pkg::PackageFile::load(args->positionals()[0]);
  if (!pf) {
    reportError(pf.status().message());
    return 1;
  }
  std::vector<codegen::GpuModel> gpus;
  for (llvm::StringRef name : llvm::split(args->getOr("gpu", "A100,H100"), ',')) {
    const codegen::GpuModel *g = codegen::gpuModelNamed(name.trim().str());
    if (!g) {
      reportError("inspect: --gpu: no profile named '" + name.trim().str() +
                  "' (A100, A10, L4, H100, H200)");
      return 2;
    }
    gpus.push_back(*g);
  }
  for (const std::string &file : args->getAll("gpu-profile")) {
    llvm::Expected<codegen::GpuModel> g = codegen::loadGpuProfile(file);
    if (!g) {
      reportError(g.takeError());
      return 2;
    }
    auto same = std::find_if(gpus.begin(), gpus.end(),
                             [&](const codegen::GpuModel &x) { return x.name == g->name; });
    if (same != gpus.end())
      *same = std::move(*g);
    else
      gpus.push_back(std::move(*g));
  }
  driver::Report report = driver::inspect(**pf, gpus);
  if (auto path = args->get("tactics-cache")) {
    // The cache names its package by the package's bytes (rt::tacticsCacheFileName:
    // "<crc32>-<size>-" and the key's checksum).
    std::string mine = rt::tacticsCacheFileName(**pf, "");
    mine = mine.substr(0, mine.rfind('-') + 1);
    llvm::StringRef file = llvm::StringRef(*path).contains('/')
                               ? llvm::StringRef(*path).rsplit('/').second
                               : llvm::StringRef(*path);
    if (!file.startswith(mine)) {
      reportError("inspect: " + *path + " is not this package's tactics cache (those are " + mine +
                  "*.txt in the cache directory)");
      return 1;
    }
    auto cache = rt::readTacticsCache(*path);
    if (!cache) {
      reportError("inspect: " + cache.status().message());
      return 1;
    }
    report.tacticsCachePath = *path;
    report.tacticsCacheKey = cache->key;
    for (const auto &[where, choice] : cache->choices)
      if (where.first == 0)
        report.tacticsChosen[where.second] = choice;
  }
  if (args->has("json"))
    return writeReport(*args, llvm::formatv("{0:2}", driver::toJson(report)).str() + "\n");
  driver::printReport(report, llvm::outs());
  return 0;
}

} // namespace dlc::tool
