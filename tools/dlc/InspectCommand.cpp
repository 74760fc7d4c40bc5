//===- InspectCommand.cpp - `dlc inspect`: what a package holds ------------===//
#include "Args.h"
#include "Commands.h"
#include "dlc/driver/Inspect.h"
#include "dlc/support/Files.h"

#include "llvm/Support/FormatVariadic.h"

namespace dlc::tool {

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
  driver::Report report = driver::inspect(**pf);
  if (args->has("json"))
    return writeReport(*args, llvm::formatv("{0:2}", driver::toJson(report)).str() + "\n");
  driver::printReport(report, llvm::outs());
  return 0;
}

} // namespace dlc::tool
