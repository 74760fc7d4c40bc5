//===- RunCommand.cpp - `dlc run` and `dlc bench` ---------------------------===//
//
// The runtime's own front ends (runtime/cli, shared with the executables of
// `dlc compile --emit exe`), which here also read .pb inputs.
//===----------------------------------------------------------------------===//
#include "Commands.h"
#include "dlc/driver/Tensors.h"
#include "dlc/runtime/Cli.h"

namespace dlc::tool {

namespace {

cli::CliContext context(const char *program) {
  cli::CliContext ctx;
  ctx.program = program;
  ctx.readInput = driver::readTensorFile;
  return ctx;
}

} // namespace

int runRun(const std::vector<std::string> &argv) {
  return cli::runMain(argv, context("dlc"));
}
int runBench(const std::vector<std::string> &argv) {
  return cli::benchMain(argv, context("dlc"));
}
int runTune(const std::vector<std::string> &argv) {
  return cli::tuneMain(argv, context("dlc tune"));
}

} // namespace dlc::tool
