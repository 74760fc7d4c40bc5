//===- InterpretCommand.cpp - `dlc interpret`: run IR on the reference -----===//
#include "Args.h"
#include "Commands.h"
#include "dlc/driver/Tensors.h"
#include "dlc/ir/Interpreter.h"
#include "dlc/ir/TextIR.h"
#include "dlc/runtime/Cli.h"
#include "dlc/runtime/Runtime.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/MemoryBuffer.h"

namespace dlc::tool {

namespace {

void printSummary(llvm::raw_ostream &os, const std::string &name, const ir::Tensor &t) {
  os << name << ": " << t.type().str() << " [";
  int64_t n = t.numElements(), shown = std::min<int64_t>(n, 8);
  for (int64_t i = 0; i < shown; ++i)
    os << (i ? ", " : "") << llvm::format("%.6g", t.getDouble(i));
  os << (n > shown ? ", ...]" : "]");
  if (ir::isFloat(t.dtype()) && n > 1) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; ++i)
      if (t.getDouble(i) > t.getDouble(best))
        best = i;
    os << "  argmax=" << best;
  }
  os << "\n";
}

} // namespace

int runInterpret(const std::vector<std::string> &argv) {
  ArgParser parser(
      "interpret", "FILE.ir [options]",
      "Runs textual IR on the reference interpreter with seeded random inputs and\n"
      "prints each output (type, first values, argmax).",
      {{"seed", 0, true, false, "N", "Seed of the random inputs (default 0)"},
       {"output-dir", 0, true, false, "DIR", "Also write each output to DIR/NAME.npy"}});
  int exitCode = 0;
  auto args = parser.parseCommand(argv, exitCode, "input file");
  if (!args)
    return exitCode;
  const std::string &file = args->positionals()[0];
  auto buf = driver::readInputFile(file);
  if (!buf) {
    reportError(buf.takeError());
    return 1;
  }
  auto g = ir::parseGraph(*buf, file);
  llvm::Error err = g ? ir::verifyGraph(**g, file) : g.takeError();
  if (err) {
    reportError(std::move(err));
    return 1;
  }
  uint64_t seed = std::strtoull(args->getOr("seed", "0").c_str(), nullptr, 10);
  ir::TensorMap inputs = ir::randomInputs(**g, seed);
  for (const auto &[name, t] : inputs)
    printSummary(llvm::outs(), "input " + name, t);
  auto out = ir::interpret(**g, inputs);
  if (!out) {
    reportError(out.takeError());
    return 1;
  }
  for (const ir::GraphOutput &o : (*g)->outputs())
    printSummary(llvm::outs(), "output " + o.name, out->at(o.name));
  if (args->has("output-dir")) {
    std::string dir = args->getOr("output-dir", ".");
    if (auto ec = llvm::sys::fs::create_directories(dir)) {
      reportError(ir::errorf("cannot create '{0}': {1}", dir, ec.message()));
      return 1;
    }
    for (const ir::GraphOutput &o : (*g)->outputs()) {
      const ir::Tensor &t = out->at(o.name);
      rt::HostTensor h;
      h.dtype = static_cast<pkg::DType>(static_cast<uint8_t>(t.dtype()));
      h.shape = t.shape();
      const uint8_t *p = static_cast<const uint8_t *>(t.raw());
      h.data.assign(p, p + t.byteSize());
      std::string path = dir + "/" + cli::outputFileName(o.name);
      if (Status st = rt::writeNpy(path, h)) {
        reportError(ir::makeError(st.message()));
        return 1;
      }
    }
  }
  return 0;
}

} // namespace dlc::tool
