//===- ImportCommand.cpp - `dlc import`: ONNX to textual IR ----------------===//
#include "Args.h"
#include "Commands.h"

#include "dlc/frontend/OnnxImporter.h"
#include "dlc/ir/TextIR.h"
#include "dlc/passes/Pass.h"

namespace dlc::tool {

llvm::Expected<std::pair<std::string, ir::Shape>> parseInputShape(const std::string &spec) {
  size_t eq = spec.find('=');
  if (eq == std::string::npos || eq == 0)
    return ir::errorf("--input-shape expects NAME=d0,d1,..., got '{0}'", spec);
  ir::Shape s;
  llvm::StringRef rest = llvm::StringRef(spec).substr(eq + 1);
  while (!rest.empty()) {
    auto [d, tail] = rest.split(',');
    int64_t v;
    if (d.trim().getAsInteger(10, v) || v < 0)
      return ir::errorf("--input-shape: invalid dimension '{0}' in '{1}'", d, spec);
    s.push_back(v);
    rest = tail;
  }
  return std::make_pair(spec.substr(0, eq), s);
}

llvm::Expected<frontend::ImportResult> importWithOptions(const std::string &file, const Args &args) {
  frontend::ImportOptions opts;
  for (const std::string &spec : args.getAll("input-shape")) {
    auto p = parseInputShape(spec);
    if (!p)
      return p.takeError();
    opts.inputShapes[p->first] = p->second;
  }
  opts.runChecker = !args.has("no-check");
  opts.initializersAsVariables = args.has("train");
  auto r = frontend::importOnnxFile(file, opts);
  if (r)
    for (const std::string &note : r->notes)
      llvm::errs() << "dlc: note: " << file << ": " << note << "\n";
  return r;
}

std::vector<OptSpec> importOptionSpecs() {
  return {{"input-shape", 0, true, true, "NAME=D0,D1,..",
           "Static shape for an input with symbolic dims (repeatable)"},
          {"no-check", 0, false, false, "", "Skip onnx::checker"}};
}

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
  auto r = importWithOptions(file, *args);
  if (!r) {
    reportError(r.takeError());
    return 1;
  }
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
  if (auto out = args->get("output")) {
    if (auto e = writeFileAtomically(*out, text)) {
      reportError(std::move(e));
      return 1;
    }
  } else {
    llvm::outs() << text;
  }
  return 0;
}

} // namespace dlc::tool
