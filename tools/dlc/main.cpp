//===- main.cpp - The dlc driver -------------------------------------------===//
#include "Commands.h"

#include "llvm/Support/raw_ostream.h"

#include <cstring>
#include <new>

namespace {

struct Command {
  const char *name;
  const char *summary;
  int (*run)(const std::vector<std::string> &);
};

const Command kCommands[] = {
    {"compile", "Compile a model (.onnx or .ir) into a .dlc package", dlc::tool::runCompile},
    {"run", "Run a .dlc package (GPU if present, else emu)", dlc::tool::runRun},
    {"bench", "Measure latency and throughput of a package (trtexec-style)", dlc::tool::runBench},
    {"train", "Train a package compiled with --train on .npz data", dlc::tool::runTrain},
    {"export", "Write the trained model (ONNX) from a training package and a checkpoint",
     dlc::tool::runExport},
    {"inspect", "Show the kernels, resources and memory plan of a package", dlc::tool::runInspect},
    {"calibrate", "Measure this GPU for the cost model (writes a profile for inspect)",
     dlc::tool::runCalibrate},
    {"tune", "Choose each layer's tactic (ours or cuDNN) on this GPU, into the cache",
     dlc::tool::runTune},
    {"quantize", "Quantize an FP32 ONNX model to INT8 (QDQ ONNX) on calibration data",
     dlc::tool::runQuantize},
    {"import", "Import an ONNX model and print its IR", dlc::tool::runImport},
    {"opt", "Run graph passes on textual IR", dlc::tool::runOpt},
    {"interpret", "Run textual IR on the reference interpreter", dlc::tool::runInterpret},
    {"ops", "List the IR ops and their properties", dlc::tool::runOps},
};

void printUsage(llvm::raw_ostream &os) {
  os << "usage: dlc <command> [options]\n\ncommands:\n";
  for (const Command &c : kCommands) {
    os << "  " << c.name;
    os.indent(12 - std::strlen(c.name));
    os << c.summary << "\n";
  }
  os << "\nRun 'dlc <command> --help' for the options of a command.\n";
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2) {
    printUsage(llvm::errs());
    return 2;
  }
  std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    printUsage(llvm::outs());
    return 0;
  }
  if (cmd == "--version") {
    llvm::outs() << "dlc 0.1.0\n";
    return 0;
  }
  std::vector<std::string> args(argv + 2, argv + argc);
  for (const Command &c : kCommands)
    if (cmd == c.name) {
      // Inputs are validated before anything is allocated from their sizes; a model
      // that is valid but larger than this machine's memory still ends cleanly.
      try {
        return c.run(args);
      } catch (const std::bad_alloc &) {
        llvm::errs() << "dlc: error: out of memory while running '" << cmd << "'\n";
        return 1;
      }
    }
  llvm::errs() << "dlc: error: unknown command '" << cmd << "'\n";
  printUsage(llvm::errs());
  return 2;
}
