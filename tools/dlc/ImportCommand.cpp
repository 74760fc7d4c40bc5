//===- ImportCommand.cpp - `dlc import`: ONNX to textual IR ----------------===//
#include "Commands.h"
#include "Options.h"
#include "dlc/frontend/OnnxImporter.h"
#include "dlc/ir/TextIR.h"
#include "dlc/passes/Pass.h"

namespace dlc::tool {

int runImport(const std::vector<std::string> &argv) {
  auto specs = importOptionSpecs();
  specs.push_back({"output", 'o', true, false, "FILE", "Write the IR here instead of stdout"});
  specs.push_back({"passes", 0, true, false, "LIST", "Run these passes after importing"});
  specs.push_back({"elide-constants", 0, true, false, "N",
                   "Print constants with more than N elements as dense<elided>"});
  ArgParser parser("import", "MODEL.onnx [options]",
                   "Imports an ONNX model (checker, opset conversion, shape inference) and prints\n"
                   "the IR. Lists every unsupported node at once.",
                   specs);
  int exitCode = 0;
  auto args = parser.parseCommand(argv, exitCode, "model file");
  if (!args)
    return exitCode;
  const std::string &file = args->positionals()[0];
  auto opts = importOptionsFromArgs(*args);
  if (!opts) {
    reportError(opts.takeError());
    return 1;
  }
  auto r = frontend::importOnnxFile(file, *opts);
  if (!r) {
    reportError(r.takeError());
    return 1;
  }
  for (const std::string &note : r->notes)
    llvm::errs() << "dlc: note: " << file << ": " << note << "\n";
  if (auto spec = args->get("passes")) {
    auto pipeline = passes::parsePipeline(*spec);
    if (!pipeline) {
      reportError(pipeline.takeError());
      return 2;
    }
    passes::PassManager pm;
    passes::PassContext ctx;
    if (auto e = pm.run(*r->graph, *pipeline, ctx)) {
      reportError(std::move(e));
      return 1;
    }
  }
  ir::PrintOptions po;
  if (auto n = args->get("elide-constants"))
    po.elideConstantsAbove = std::atoll(n->c_str());
  std::string text = ir::printGraph(*r->graph, po);
  return writeReport(*args, text);
}

} // namespace dlc::tool
