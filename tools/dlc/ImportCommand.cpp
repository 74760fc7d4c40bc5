//===- ImportCommand.cpp - `dlc import`: ONNX to textual IR ----------------===//
#include "Args.h"
#include "Commands.h"
#include "dlc/frontend/OnnxImporter.h"
#include "dlc/ir/TextIR.h"
#include "dlc/passes/Pass.h"

#include <cstring>

namespace dlc::tool {

llvm::Expected<InputShapeSpec> parseInputShape(const std::string &spec) {
  size_t eq = spec.find('=');
  if (eq == std::string::npos || eq == 0)
    return ir::errorf(
        "--input-shape expects NAME=d0,d1,... (a dimension may be a range MIN..MAX), got '{0}'",
        spec);
  InputShapeSpec r;
  r.name = spec.substr(0, eq);
  llvm::StringRef rest = llvm::StringRef(spec).substr(eq + 1);
  while (!rest.empty()) {
    auto [d, tail] = rest.split(',');
    auto [lo, hi] = d.trim().split("..");
    int64_t a, b;
    if (lo.getAsInteger(10, a) || a < 0 || (d.contains("..") && (hi.getAsInteger(10, b) || b < 0)))
      return ir::errorf("--input-shape: invalid dimension '{0}' in '{1}'", d, spec);
    if (!d.contains(".."))
      b = a;
    if (b < a || (d.contains("..") && a < 1))
      return ir::errorf("--input-shape: the range '{0}' in '{1}' is empty or starts below 1", d,
                        spec);
    r.min.push_back(a);
    r.max.push_back(b);
    rest = tail;
  }
  return r;
}

llvm::Expected<frontend::ImportResult>
importWithOptions(const std::string &file, const Args &args,
                  const std::map<std::string, ir::Shape> *point) {
  frontend::ImportOptions opts;
  for (const std::string &spec : args.getAll("input-shape")) {
    auto p = parseInputShape(spec);
    if (!p)
      return p.takeError();
    if (point && point->count(p->name))
      opts.inputShapes[p->name] = point->at(p->name);
    else if (p->ranged())
      return ir::errorf("--input-shape {0}: shape ranges are for dlc compile; give one shape here",
                        spec);
    else
      opts.inputShapes[p->name] = p->min;
  }
  for (const std::string &spec : args.getAll("bind")) {
    size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
      return ir::errorf("--bind expects NAME=VALUES or NAME=FILE.npy, got '{0}'", spec);
    std::string name = spec.substr(0, eq), value = spec.substr(eq + 1);
    if (opts.bindings.count(name) || opts.bindingText.count(name))
      return ir::errorf("--bind: '{0}' is bound twice", name);
    llvm::StringRef v(value);
    if (v.endswith(".npy") || v.endswith(".pb")) {
      auto h = readTensorFile(value);
      if (!h)
        return ir::errorf("--bind {0}: {1}", name, h.status().message());
      ir::Tensor t(
          ir::TensorType(static_cast<ir::DType>(static_cast<uint8_t>(h->dtype)), h->shape));
      if (h->data.size() != t.byteSize())
        return ir::errorf("--bind {0}: {1} holds {2} bytes, expected {3}", name, value,
                          h->data.size(), t.byteSize());
      std::memcpy(t.mutableRaw(), h->data.data(), h->data.size());
      opts.bindings[name] = std::move(t);
    } else {
      opts.bindingText[name] = value;
    }
  }
  if (args.has("max-loop-unroll")) {
    std::string v = args.getOr("max-loop-unroll", "");
    if (llvm::StringRef(v).getAsInteger(10, opts.maxLoopUnroll) || opts.maxLoopUnroll < 0 ||
        opts.maxLoopUnroll > 100000)
      return ir::errorf("--max-loop-unroll expects an integer in [0, 100000], got '{0}'", v);
  }
  if (args.has("loop-bound")) {
    std::string v = args.getOr("loop-bound", "");
    if (llvm::StringRef(v).getAsInteger(10, opts.loopBound) || opts.loopBound < 1 ||
        opts.loopBound > opts.maxLoopUnroll)
      return ir::errorf(
          "--loop-bound expects an integer in [1, {0}] (--max-loop-unroll), got '{1}'",
          opts.maxLoopUnroll, v);
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
           "Shape of an input with symbolic dims (repeatable). dlc compile: a dimension may be a "
           "range\n"
           "MIN..MAX (x=1..32,3,224,224): one package serves every shape in it"},
          {"bind", 0, true, true, "NAME=VALUES|FILE",
           "Bind an input to a constant at compile time: comma-separated values of its dtype, or a "
           ".npy/.pb "
           "file (repeatable). Shape inputs, axes and If conditions then fold; the input leaves "
           "the package"},
          {"max-loop-unroll", 0, true, false, "N",
           "Loops are unrolled at compile time; a trip count above N is an error (default 256)"},
          {"loop-bound", 0, true, false, "N",
           "Loops whose trip count is known only at run time (an input, a while loop) run up to N\n"
           "iterations, unrolled and gated; a run that needs more fails naming the loop (default: "
           "refused)"},
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
  auto r = importWithOptions(file, *args, nullptr);
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
  return writeReport(*args, text);
}

} // namespace dlc::tool
