//===- OptCommand.cpp - `dlc opt`: run passes on textual IR ----------------===//
#include "Commands.h"
#include "Options.h"
#include "dlc/codegen/Compiler.h"
#include "dlc/driver/Tensors.h"
#include "dlc/ir/TextIR.h"
#include "dlc/passes/Pass.h"
#include "dlc/passes/Training.h"

#include "llvm/Support/MemoryBuffer.h"

namespace dlc::tool {

namespace {

std::string optDescription() {
  std::string d = "Parses textual IR, verifies it, runs the given passes and prints the result.\n"
                  "Without --passes, runs the default pipeline of -O (default 1).\n\npasses:\n";
  for (const passes::PassInfo &p : passes::registeredPasses()) {
    std::string name(p.name);
    d += "  " + name + std::string(name.size() < 16 ? 16 - name.size() : 1, ' ') +
         std::string(p.summary) + "\n";
  }
  return d;
}

/// Splits on lines that are exactly "// -----"; returns (first line number, text) chunks.
std::vector<std::pair<unsigned, std::string>> splitInput(llvm::StringRef text) {
  std::vector<std::pair<unsigned, std::string>> chunks{{1, ""}};
  unsigned line = 1;
  while (!text.empty()) {
    auto [l, rest] = text.split('\n');
    if (l.rtrim() == "// -----")
      chunks.push_back({line + 1, ""});
    else
      chunks.back().second += (l + "\n").str();
    text = rest;
    ++line;
  }
  return chunks;
}

} // namespace

int runOpt(const std::vector<std::string> &argv) {
  std::vector<OptSpec> specs = {
      {"passes", 0, true, false, "LIST", "Comma-separated passes to run, e.g. canonicalize,dce"},
      {"O", 'O', true, false, "N", "Optimization level for the default pipeline (0-3)"},
      {"output", 'o', true, false, "FILE", "Write the result here instead of stdout"},
      {"print-ir-after-all", 0, false, false, "", "Print the IR after every pass (to stderr)"},
      {"print-ir-after", 0, true, true, "PASS", "Print the IR after the named pass (to stderr)"},
      {"verify-each", 0, false, false, "", "Verify the IR after every pass"},
      {"stop-after", 0, true, false, "PASS", "Stop the pipeline after the named pass"},
      {"split-input-file", 0, false, false, "",
       "Treat '// -----' lines as separators between independent graphs"},
      {"elide-constants", 0, true, false, "N",
       "Print constants with more than N elements as dense<elided>"}};
  auto prec = precisionOptionSpecs(true);
  specs.insert(specs.end(), prec.begin(), prec.end());
  // The training passes' options (train-step, optimizer, ...): --train and the rest.
  auto train = trainingOptionSpecs();
  specs.insert(specs.end(), train.begin(), train.end());
  ArgParser parser("opt", "FILE.ir [options]", optDescription(), specs);
  int exitCode = 0;
  auto args = parser.parseCommand(argv, exitCode, "input file (use '-' for stdin)");
  if (!args)
    return exitCode;
  const std::string file = args->positionals()[0];

  auto precision = precisionFromArgs(*args);
  if (!precision) {
    reportError(precision.takeError());
    return 2;
  }
  auto layout = layoutFromArgs(*args);
  if (!layout) {
    reportError(layout.takeError());
    return 2;
  }
  auto gemmEpilogue = gemmEpilogueFromArgs(*args);
  if (!gemmEpilogue) {
    reportError(gemmEpilogue.takeError());
    return 2;
  }
  auto training = trainingFromArgs(*args);
  if (!training) {
    reportError(training.takeError());
    return 2;
  }
  if (*training)
    (*training)->precision = *precision;
  if (args->has("tf32") && args->has("no-tf32")) {
    reportError(ir::makeError("opt: --tf32 and --no-tf32 exclude each other"));
    return 2;
  }
  // As dlc compile: TF32 (and so channels-last FP32 conv nets) unless --no-tf32 or --train.
  const bool tf32 = args->has("tf32") || (!args->has("no-tf32") && !*training);
  passes::Pipeline pipeline;
  if (auto spec = args->get("passes")) {
    auto p = passes::parsePipeline(*spec);
    if (!p) {
      reportError(p.takeError());
      return 2;
    }
    pipeline = std::move(*p);
  }
  const bool explicitPasses = args->has("passes");
  const int level = std::atoi(args->getOr("O", "1").c_str());
  passes::PassManagerOptions pmOpts = passManagerFromArgs(*args);
  for (const std::string &p : args->getAll("print-ir-after"))
    pmOpts.printAfter.insert(p);
  pmOpts.stopAfter = args->getOr("stop-after", "");
  for (const std::string &p : args->getAll("print-ir-after"))
    if (!passes::findPass(p)) {
      reportError(ir::errorf("opt: --print-ir-after: unknown pass '{0}'", p));
      return 2;
    }
  if (!pmOpts.stopAfter.empty() && !passes::findPass(pmOpts.stopAfter)) {
    reportError(ir::errorf("opt: --stop-after: unknown pass '{0}'", pmOpts.stopAfter));
    return 2;
  }
  ir::PrintOptions printOpts;
  if (auto n = args->get("elide-constants"))
    printOpts.elideConstantsAbove = std::atoll(n->c_str());

  auto buf = driver::readInputFile(file);
  if (!buf) {
    reportError(buf.takeError());
    return 1;
  }
  std::vector<std::pair<unsigned, std::string>> chunks;
  if (args->has("split-input-file"))
    chunks = splitInput(*buf);
  else
    chunks.push_back({1, *buf});

  std::string output;
  bool failed = false;
  for (size_t i = 0; i < chunks.size(); ++i) {
    auto g = ir::parseGraph(chunks[i].second, file, chunks[i].first);
    llvm::Error err = g ? ir::verifyGraph(**g, file) : g.takeError();
    if (!err) {
      passes::PassManager pm(pmOpts);
      passes::PassContext ctx;
      if (*precision)
        ctx.precision = **precision;
      ctx.layout = *layout;
      ctx.gemmEpilogue = *gemmEpilogue;
      ctx.ownGemm = [](int64_t rows, int64_t k, int64_t n, ir::DType dt) { // as dlc compile's
        return codegen::ownGemmIsFaster(std::vector<std::string>{}, rows, k, n, dt);
      };
      ctx.tf32 = tf32 && !*training && (args->has("tf32") || (*g)->parameters().empty());
      passes::TrainingSummary summary;
      if (*training) {
        ctx.training = &**training;
        ctx.trainingSummary = &summary;
      }
      // (As dlc compile: the layout stage also for a quantized graph's INT8 convolutions.)
      if (!explicitPasses)
        pipeline = passes::defaultPipeline(
            level, bool(*precision) && !*training,
            passes::needsLayoutPass(*layout, bool(*precision), ctx.tf32,
                                    !(*g)->nodesOf(ir::OpKind::QuantizeLinear).empty()));
      err = pm.run(**g, pipeline, ctx);
    }
    if (err) {
      reportError(std::move(err));
      failed = true;
      continue;
    }
    if (i)
      output += "// -----\n";
    output += ir::printGraph(**g, printOpts);
  }
  if (failed)
    return 1;
  return writeReport(*args, output);
}

} // namespace dlc::tool
