//===- CompileCommand.cpp - `dlc compile`: model to .dlc package -----------===//
#include "Args.h"
#include "Commands.h"
#include "Dot.h"
#include "Precision.h"
#include "Train.h"
#include "dlc/codegen/Artifacts.h"
#include "dlc/codegen/Compiler.h"
#include "dlc/frontend/OnnxImporter.h"
#include "dlc/ir/TextIR.h"
#include "dlc/passes/Accuracy.h"
#include "dlc/passes/Pass.h"
#include "dlc/runtime/Runtime.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <chrono>
#include <unistd.h>

namespace dlc::tool {

std::vector<OptSpec> importOptionSpecs();
llvm::Expected<InputShapeSpec> parseInputShape(const std::string &spec);
/// `point`: the shapes of inputs given a range (dlc compile, one point of the ranges).
llvm::Expected<frontend::ImportResult>
importWithOptions(const std::string &file, const Args &args,
                  const std::map<std::string, ir::Shape> *point = nullptr);

namespace {

std::string shapeText(const std::vector<int64_t> &s) {
  std::string r;
  for (size_t i = 0; i < s.size(); ++i)
    r += (i ? "," : "") + std::to_string(s[i]);
  return r;
}

/// The shape ranges of --input-shape (x=1..32,3,224,224) and --opt-shape: the
/// dimensions given the same range vary together (one variable, as a batch
/// dimension shared by several inputs); distinct ranges vary independently. Point 0
/// is the opt shape, the others follow in order.
class ShapeRanges {
public:
  static llvm::Expected<ShapeRanges> fromArgs(const Args &args) {
    ShapeRanges r;
    for (const std::string &spec : args.getAll("input-shape")) {
      auto p = parseInputShape(spec);
      if (!p)
        return p.takeError();
      if (!p->ranged())
        continue;
      for (const InputShapeSpec &q : r.specs_)
        if (q.name == p->name)
          return ir::errorf("--input-shape: '{0}' is given twice", p->name);
      for (size_t a = 0; a < p->min.size(); ++a) {
        if (p->min[a] == p->max[a])
          continue;
        auto v = std::find_if(r.vars_.begin(), r.vars_.end(), [&](const Var &x) {
          return x.min == p->min[a] && x.max == p->max[a];
        });
        if (v == r.vars_.end()) {
          r.vars_.push_back({p->min[a], p->max[a], p->max[a], {}});
          v = r.vars_.end() - 1;
        }
        v->dims.push_back(r.ranges_.size());
        r.ranges_.push_back({p->name, static_cast<uint32_t>(a), p->min[a], p->max[a], p->max[a]});
      }
      r.specs_.push_back(*p);
    }
    for (const std::string &spec : args.getAll("opt-shape")) {
      auto p = parseInputShape(spec);
      if (!p)
        return p.takeError();
      auto it = std::find_if(r.specs_.begin(), r.specs_.end(),
                             [&](const InputShapeSpec &q) { return q.name == p->name; });
      if (p->ranged() || it == r.specs_.end() || it->min.size() != p->min.size())
        return ir::errorf(
            "--opt-shape {0}: expects one shape of an input given a range with --input-shape",
            spec);
      for (size_t a = 0; a < p->min.size(); ++a)
        if (p->min[a] < it->min[a] || p->min[a] > it->max[a])
          return ir::errorf("--opt-shape {0}: dimension {1} is {2}, outside {3}..{4}", spec, a,
                            p->min[a], it->min[a], it->max[a]);
      for (Var &v : r.vars_)
        for (size_t d : v.dims)
          if (r.ranges_[d].input == p->name) {
            v.opt = p->min[r.ranges_[d].axis];
            for (size_t e : v.dims)
              if (r.ranges_[e].input == p->name && p->min[r.ranges_[e].axis] != v.opt)
                return ir::errorf(
                    "--opt-shape {0}: dimensions with the range {1}..{2} vary together and "
                    "need one value",
                    spec, v.min, v.max);
          }
    }
    for (const Var &v : r.vars_)
      for (size_t d : v.dims)
        r.ranges_[d].opt = v.opt;
    int64_t limit = 1024;
    if (args.has("max-shape-variants")) {
      std::string t = args.getOr("max-shape-variants", "");
      if (llvm::StringRef(t).getAsInteger(10, limit) || limit < 1)
        return ir::errorf("--max-shape-variants expects a positive integer, got '{0}'", t);
    }
    r.count_ = 1;
    for (const Var &v : r.vars_) {
      r.count_ *= static_cast<size_t>(v.max - v.min + 1);
      if (r.count_ > static_cast<size_t>(limit))
        return ir::errorf("the shape ranges {0} span more than {1} shapes; narrow them, or raise "
                          "--max-shape-variants (each shape is a schedule in the package)",
                          r.describe(), limit);
    }
    return r;
  }

  bool empty() const { return vars_.empty(); }
  size_t count() const { return vars_.empty() ? 0 : count_; }
  const std::vector<codegen::ShapeRangeDesc> &ranges() const { return ranges_; }
  std::string describe() const {
    std::string d;
    for (const InputShapeSpec &s : specs_) {
      d += (d.empty() ? "" : " ") + s.name + "=";
      for (size_t a = 0; a < s.min.size(); ++a)
        d += (a ? "," : "") + std::to_string(s.min[a]) +
             (s.min[a] != s.max[a] ? ".." + std::to_string(s.max[a]) : std::string());
    }
    return d;
  }
  /// The shapes of the ranged inputs at point i.
  std::map<std::string, ir::Shape> point(size_t i) const {
    // Point 0 is the opt shape; point i > 0 is the i-th (or, past opt's index, the
    // (i+1)-th) in the mixed-radix order of the variables.
    size_t optIndex = 0;
    for (const Var &v : vars_)
      optIndex =
          optIndex * static_cast<size_t>(v.max - v.min + 1) + static_cast<size_t>(v.opt - v.min);
    size_t k = i == 0 ? optIndex : (i - 1 < optIndex ? i - 1 : i);
    std::vector<int64_t> values(vars_.size());
    for (size_t j = vars_.size(); j-- > 0;) {
      size_t n = static_cast<size_t>(vars_[j].max - vars_[j].min + 1);
      values[j] = vars_[j].min + static_cast<int64_t>(k % n);
      k /= n;
    }
    std::map<std::string, ir::Shape> shapes;
    for (const InputShapeSpec &s : specs_)
      shapes[s.name] = s.min;
    for (size_t j = 0; j < vars_.size(); ++j)
      for (size_t d : vars_[j].dims)
        shapes[ranges_[d].input][ranges_[d].axis] = values[j];
    return shapes;
  }

private:
  struct Var {
    int64_t min, max, opt;
    std::vector<size_t> dims; // indices into ranges_
  };
  std::vector<InputShapeSpec> specs_;
  std::vector<Var> vars_;
  std::vector<codegen::ShapeRangeDesc> ranges_;
  size_t count_ = 1;
};

double seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// A file installed or built beside the dlc binary: $ENV if set, else the first of
/// `relative` (to the directory of the running dlc) that exists.
llvm::Expected<std::string> findCompanion(const char *env, const std::vector<std::string> &relative,
                                          const char *what) {
  if (const char *e = std::getenv(env)) {
    if (llvm::sys::fs::exists(e))
      return std::string(e);
    return ir::errorf("{0}='{1}' does not exist", env, e);
  }
  static int anchor;
  std::string exe = llvm::sys::fs::getMainExecutable(nullptr, &anchor);
  llvm::StringRef dir = llvm::sys::path::parent_path(exe);
  std::string tried;
  for (const std::string &rel : relative) {
    llvm::SmallString<256> p(dir);
    llvm::sys::path::append(p, rel);
    llvm::sys::path::remove_dots(p, true);
    if (llvm::sys::fs::exists(p))
      return std::string(p);
    tried += "\n  " + std::string(p);
  }
  return ir::errorf("cannot find {0} (set {1}); looked at:{2}", what, env, tried);
}

std::string megabytes(uint64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f MB", static_cast<double>(b) / (1 << 20));
  return buf;
}

/// --check-accuracy's inputs: --input NAME=FILE where given, else seeded random
/// values (integers in a small range, so indices stay valid).
llvm::Expected<ir::TensorMap> accuracyInputs(const ir::Graph &g, const Args &args) {
  uint64_t seed = std::strtoull(args.getOr("seed", "0").c_str(), nullptr, 10);
  ir::TensorMap inputs = ir::randomInputs(g, seed);
  for (const std::string &spec : args.getAll("input")) {
    size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0)
      return ir::errorf("--input expects NAME=FILE, got '{0}'", spec);
    std::string name = spec.substr(0, eq), path = spec.substr(eq + 1);
    const ir::Value *v = g.findValue(name);
    if (!v || !v->isInput())
      return ir::errorf("--input: the model has no input named '{0}'", name);
    auto h = readTensorFile(path);
    if (!h)
      return ir::errorf("--input {0}: {1}", name, h.status().message());
    ir::TensorType t(static_cast<ir::DType>(static_cast<uint8_t>(h->dtype)), h->shape);
    if (t != v->type())
      return ir::errorf("--input {0}: {1} has type {2}, the input is {3}", name, path, t.str(),
                        v->type().str());
    ir::Tensor data(t);
    std::memcpy(data.mutableRaw(), h->data.data(), std::min(h->data.size(), data.byteSize()));
    inputs[name] = std::move(data);
  }
  return inputs;
}

} // namespace

/// Loads a model (.onnx through the importer, .ir through the parser) and runs the
/// pass pipeline of the given level, with the precision pass when --fp16/--bf16 is
/// given (`beforePrecision` then sees the graph it starts from). Shared by compile
/// and related commands.
llvm::Expected<std::unique_ptr<ir::Graph>> loadAndOptimize(
    const std::string &file, const Args &args, int optLevel, bool quiet,
    const std::function<llvm::Error(const ir::Graph &, const passes::PrecisionOptions &)>
        &beforePrecision = {},
    const std::map<std::string, ir::Shape> *point = nullptr) {
  auto precision = precisionFromArgs(args);
  if (!precision)
    return precision.takeError();
  auto layout = layoutFromArgs(args);
  if (!layout)
    return layout.takeError();
  auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<ir::Graph> g;
  if (llvm::StringRef(file).endswith(".ir")) {
    if (args.has("bind"))
      return ir::errorf("--bind applies to ONNX models; in textual IR, write the input as a const");
    auto buf = llvm::MemoryBuffer::getFileOrSTDIN(file);
    if (!buf)
      return ir::errorf("cannot read '{0}': {1}", file, buf.getError().message());
    auto parsed = ir::parseGraph((*buf)->getBuffer(), file);
    if (!parsed)
      return parsed.takeError();
    if (auto e = ir::verifyGraph(**parsed, file))
      return e;
    g = std::move(*parsed);
    if (!quiet)
      llvm::errs() << "dlc: parse " << file << ": " << g->numNodes() << " nodes\n";
  } else {
    auto r = importWithOptions(file, args, point);
    if (!r)
      return r.takeError();
    g = std::move(r->graph);
    if (!quiet)
      llvm::errs() << "dlc: import " << file << " (opset " << r->originalOpset
                   << (r->opset != r->originalOpset ? " -> " + std::to_string(r->opset)
                                                    : std::string())
                   << "): " << g->numNodes() << " nodes, " << llvm::format("%.2f", seconds(t0))
                   << " s\n";
  }
  passes::PassManagerOptions pmo;
  pmo.printAfterAll = args.has("print-ir-after-all");
  pmo.verifyEach = args.has("verify-each");
  auto training = trainingFromArgs(args);
  if (!training)
    return training.takeError();
  if (*training) {
    // Mixed-precision training lowers the forward graph itself (Training.h); the
    // pipeline below then leaves precision alone.
    (*training)->precision = *precision;
    auto sum = passes::buildTrainingStep(*g, **training, pmo);
    if (!sum)
      return sum.takeError();
    if (auto e = ir::verifyGraph(*g))
      return ir::errorf("internal error: the training graph does not verify: {0}",
                        llvm::toString(std::move(e)));
    if (!quiet)
      llvm::errs() << "dlc: train: " << sum->parameters << " parameters (" << sum->parameterElements
                   << " values"
                   << (sum->frozen ? ", " + std::to_string(sum->frozen) + " frozen" : "")
                   << "), loss " << passes::lossKindName((*training)->loss) << ", optimizer "
                   << passes::optimizerKindName((*training)->optimizer) << ", "
                   << sum->stateVariables << " state variables"
                   << (sum->batchNorms
                           ? ", " + std::to_string(sum->batchNorms) + " BatchNorms in training mode"
                           : "")
                   << (sum->lossScaling ? ", dynamic loss scaling" : "")
                   << (sum->buckets ? ", data parallel: " + std::to_string(sum->buckets) +
                                          " all-reduce buckets of " +
                                          std::to_string(sum->allReduceBytes) + " gradient bytes" +
                                          (sum->syncBatchNorm ? ", synchronized BatchNorm" : "")
                                    : "")
                   << (sum->zeroShareElements
                           ? ", ZeRO-1 over " + std::to_string(*(*training)->zeroRanks) +
                                 " ranks (" + std::to_string(sum->zeroShareElements) +
                                 " parameters per rank)"
                           : "")
                   << "; " << g->numNodes() << " nodes\n";
  }
  auto t1 = std::chrono::steady_clock::now();
  size_t before = g->numNodes();
  passes::PassManager pm(pmo);
  passes::PassContext ctx;
  ctx.layout = *layout;
  if (*precision) {
    ctx.precision = **precision;
    std::set<std::string, std::less<>> names;
    for (const ir::Node &n : g->nodes())
      names.insert(n.name());
    for (const std::string &n : ctx.precision.fp32Nodes)
      if (!names.count(n))
        return ir::errorf("--fp32-nodes: the model has no node named '{0}'", n);
  }
  bool lowerPrecision = *precision && !*training;
  for (const passes::PipelineStage &stage : passes::defaultPipeline(
           optLevel, lowerPrecision, passes::needsLayoutPass(*layout, lowerPrecision))) {
    if (beforePrecision && stage.passes.front() == "precision")
      if (auto e = beforePrecision(*g, ctx.precision))
        return e;
    if (auto e = pm.run(*g, {stage}, ctx))
      return e;
  }
  if (auto e = ir::verifyGraph(*g))
    return ir::errorf("internal error: the optimized graph does not verify: {0}",
                      llvm::toString(std::move(e)));
  if (!quiet)
    llvm::errs() << "dlc: passes -O" << optLevel
                 << (*precision ? std::string(" ") +
                                      (ctx.precision.reduced == ir::DType::BF16 ? "bf16" : "fp16")
                                : "")
                 << ": " << before << " -> " << g->numNodes() << " nodes, "
                 << llvm::format("%.2f", seconds(t1)) << " s\n";
  return g;
}

int runCompile(const std::vector<std::string> &argv) {
  auto specs = importOptionSpecs();
  specs.insert(
      specs.end(),
      {{"output", 'o', true, false, "FILE", "Output package (default: MODEL with .dlc)"},
       {"target", 0, true, false, "LIST",
        "Targets: sm_80,sm_86,sm_89,sm_90 (cubins), compute_80..compute_90 (PTX), emu\n"
        "(default: sm_80,sm_86,sm_89,sm_90,compute_80 and emu)"},
       {"O", 'O', true, false, "N", "Optimization level 0-3 (default 2)"},
       {"emit", 0, true, false, "KIND",
        "package (default), exe (standalone executable), lib (shared library + C header)\n"
        "or cuda (directory: CUDA sources and host schedule)"},
       {"name", 0, true, false, "ID", "--emit lib: prefix of the entry points (default: from -o)"},
       {"dump-dot", 0, true, false, "FILE",
        "Write the optimized graph as Graphviz, kernels as clusters"},
       {"no-cache", 0, false, false, "", "Do not use the compilation cache"},
       {"cache-dir", 0, true, false, "DIR", "Compilation cache (default ~/.cache/dlc)"},
       {"print-ir-after-all", 0, false, false, "", "Print the IR after every pass"},
       {"verify-each", 0, false, false, "", "Verify the IR after every pass"},
       {"check-accuracy", 0, false, false, "",
        "With --fp16/--bf16: run FP32 and reduced precision on the reference interpreter,\n"
        "print the error per output and the nodes where it jumps, and suggest --fp32-nodes"},
       {"input", 0, true, true, "NAME=FILE",
        "--check-accuracy: an input (.npy or .pb; default: random)"},
       {"seed", 0, true, false, "N", "--check-accuracy: seed of the random inputs (default 0)"},
       {"json", 0, false, false, "", "--check-accuracy: print the report as JSON on stdout"},
       {"opt-shape", 0, true, true, "NAME=D0,D1,..",
        "With --input-shape ranges: the shape to tune and report for (default: the maximum)"},
       {"max-shape-variants", 0, true, false, "N",
        "With --input-shape ranges: the most shapes one package may serve (default 1024)"},
       {"quiet", 'q', false, false, "", "No progress output"}});
  auto prec = precisionOptionSpecs(true);
  specs.insert(specs.end(), prec.begin(), prec.end());
  auto train = trainingOptionSpecs();
  specs.insert(specs.end(), train.begin(), train.end());
  ArgParser parser(
      "compile", "MODEL.onnx|MODEL.ir [options]",
      "Compiles a model: import, optimize, generate CUDA kernels, compile them with NVRTC\n"
      "for each GPU target (and the host compiler for emu), and write one .dlc package.",
      specs);
  int exitCode = 0;
  auto args = parser.parseCommand(argv, exitCode, "model file");
  if (!args)
    return exitCode;
  const std::string file = args->positionals()[0];
  bool quiet = args->has("quiet");
  std::string emit = args->getOr("emit", "package");
  if (emit != "package" && emit != "cuda" && emit != "exe" && emit != "lib") {
    reportError(ir::errorf("compile: --emit must be package, exe, lib or cuda, got '{0}'", emit));
    return 2;
  }
  int opt = std::atoi(args->getOr("O", "2").c_str());
  if (opt < 0 || opt > 3) {
    reportError(ir::makeError("compile: -O must be 0 to 3"));
    return 2;
  }
  std::string out = args->getOr("output", "");
  if (out.empty()) {
    llvm::SmallString<256> p(file);
    llvm::sys::path::replace_extension(p, "");
    if (emit == "package")
      p += ".dlc";
    else if (emit == "cuda")
      p += "-cuda";
    else if (emit == "lib")
      p = (llvm::sys::path::parent_path(file) +
           (llvm::sys::path::parent_path(file).empty() ? "" : "/") + "lib" +
           llvm::sys::path::stem(file) + ".so")
              .str();
    out = std::string(p);
  }
  // Where the header goes and what the entry points are called (--emit lib).
  std::string libName, headerPath;
  if (emit == "lib") {
    llvm::StringRef stem = llvm::sys::path::stem(out);
    stem.consume_front("lib");
    libName = args->getOr("name", codegen::cIdentifier(stem.str()));
    llvm::SmallString<256> h(llvm::sys::path::parent_path(out));
    llvm::sys::path::append(h, libName + ".h");
    headerPath = std::string(h);
  }
  // Companions of dlc, found before the long work starts.
  std::string companion;
  if (emit == "exe" || emit == "lib") {
    auto c = emit == "exe"
                 ? findCompanion("DLC_EXE_STUB",
                                 {"dlc-exe-stub", "../" DLC_INSTALL_LIBEXECDIR "/dlc/dlc-exe-stub"},
                                 "the executable stub dlc-exe-stub")
                 : findCompanion("DLC_RUNTIME_ARCHIVE",
                                 {"../runtime/libdlcrt.a", "../" DLC_INSTALL_LIBDIR "/libdlcrt.a"},
                                 "the static runtime libdlcrt.a");
    if (!c) {
      reportError(c.takeError());
      return 1;
    }
    companion = *c;
  }
  bool checkAccuracy = args->has("check-accuracy");
  if (checkAccuracy && !args->has("fp16") && !args->has("bf16")) {
    reportError(ir::makeError("compile: --check-accuracy needs --fp16 or --bf16"));
    return 2;
  }
  if (!checkAccuracy && (args->has("input") || args->has("json") || args->has("seed"))) {
    reportError(ir::makeError("compile: --input, --seed and --json go with --check-accuracy"));
    return 2;
  }
  auto accuracy = [&](const ir::Graph &base, const passes::PrecisionOptions &po) -> llvm::Error {
    auto inputs = accuracyInputs(base, *args);
    if (!inputs)
      return inputs.takeError();
    passes::AccuracyOptions ao;
    ao.precision = po;
    if (!quiet)
      llvm::errs() << "dlc: checking accuracy on the reference interpreter\n";
    auto rep = passes::checkAccuracy(base, *inputs, ao);
    if (!rep)
      return rep.takeError();
    if (args->has("json"))
      llvm::outs() << llvm::formatv("{0:2}", rep->toJson()) << "\n";
    else
      rep->print(llvm::outs(), ao.target);
    llvm::outs().flush();
    return llvm::Error::success();
  };
  auto t0 = std::chrono::steady_clock::now();
  auto shapes = ShapeRanges::fromArgs(*args);
  if (!shapes) {
    reportError(shapes.takeError());
    return 2;
  }
  if (!shapes->empty() &&
      (args->has("train") || checkAccuracy || emit == "lib" || emit == "cuda")) {
    // --emit lib's entry points and --emit cuda's host schedule are written for one shape.
    std::string what = checkAccuracy        ? "--check-accuracy"
                       : args->has("train") ? "--train"
                                            : "--emit " + emit;
    reportError(
        ir::makeError("compile: " + what +
                      " takes one shape per input, not a range (a range package is run through "
                      "the runtime: --emit package or exe, dlc run, the C/C++ API)"));
    return 2;
  }
  std::unique_ptr<ir::Graph> graph;
  if (shapes->empty()) {
    auto g = checkAccuracy ? loadAndOptimize(file, *args, opt, quiet, accuracy)
                           : loadAndOptimize(file, *args, opt, quiet);
    if (!g) {
      reportError(g.takeError());
      return 1;
    }
    graph = std::move(*g);
    if (auto dot = args->get("dump-dot"))
      if (auto e = codegen::writeFileAtomically(*dot, graphToDot(*graph))) {
        reportError(std::move(e));
        return 1;
      }
  }
  codegen::CompileOptions co;
  if (auto t = args->get("target")) {
    llvm::SmallVector<llvm::StringRef, 8> parts;
    llvm::StringRef(*t).split(parts, ',', -1, false);
    for (llvm::StringRef p : parts)
      co.targets.push_back(p.trim().str());
  }
  co.tf32 = args->has("tf32");
  if (args->has("train") && !llvm::StringRef(file).endswith(".ir")) { // kept for `dlc export`
    auto bytes = llvm::MemoryBuffer::getFile(file);
    if (!bytes) {
      reportError(ir::errorf("cannot read '{0}': {1}", file, bytes.getError().message()));
      return 1;
    }
    co.sourceModel = (*bytes)->getBuffer().str();
  }
  co.useCache = !args->has("no-cache");
  co.cacheDir = args->getOr("cache-dir", "");
  co.failureDumpPath = out + ".failed.cu";
  // On a terminal, one progress bar line for the compilation jobs; elsewhere (logs,
  // CI) one line per phase.
  bool tty = !quiet && ::isatty(2);
  bool barShown = false;
  if (!quiet)
    co.progress = [&](const std::string &s) {
      if (barShown) {
        llvm::errs() << "\r\x1b[K";
        barShown = false;
      }
      llvm::errs() << "dlc: " << s << "\n";
    };
  if (tty)
    co.onJob = [&, start = std::chrono::steady_clock::now()](size_t done, size_t total,
                                                             const std::string &what) {
      constexpr size_t width = 24;
      size_t filled = total ? done * width / total : width;
      llvm::errs() << "\r\x1b[Kdlc: compiling [" << std::string(filled, '#')
                   << std::string(width - filled, '.') << "] " << done << "/" << total << " "
                   << llvm::format("%.1f s", seconds(start)) << "  " << what;
      llvm::errs().flush();
      barShown = true;
    };
  codegen::CompileReport rep;
  if (emit == "cuda") // the source is checked by compiling PTX for the newest architecture
    co.targets = {"compute_90"};
  llvm::Expected<pkg::PackageImage> image =
      llvm::make_error<llvm::StringError>("", llvm::inconvertibleErrorCode());
  llvm::consumeError(image.takeError());
  if (shapes->empty()) {
    image = codegen::compileGraphImage(*graph, co, &rep);
  } else {
    // One schedule per point of the ranges; the first is the opt shape, whose import
    // and passes are reported (the others repeat them at other shapes).
    if (!quiet)
      llvm::errs() << "dlc: shape ranges: " << shapes->describe() << " -> " << shapes->count()
                   << " shapes\n";
    auto graphAt = [&](size_t i) -> llvm::Expected<std::unique_ptr<ir::Graph>> {
      std::map<std::string, ir::Shape> point = shapes->point(i);
      auto g = loadAndOptimize(file, *args, opt, quiet || i > 0, {}, &point);
      if (!g) {
        std::string where;
        for (const auto &[name, shape] : point)
          where += (where.empty() ? "" : ", ") + name + "=" + shapeText(shape);
        return ir::errorf("at shape {0}: {1}", where, llvm::toString(g.takeError()));
      }
      if (i == 0)
        if (auto dot = args->get("dump-dot"))
          if (auto e = codegen::writeFileAtomically(*dot, graphToDot(**g)))
            return llvm::Expected<std::unique_ptr<ir::Graph>>(std::move(e));
      return g;
    };
    auto onVariant = [&, last = std::chrono::steady_clock::now()](size_t done,
                                                                  size_t total) mutable {
      if (quiet || total < 2)
        return;
      if (tty) {
        constexpr size_t width = 24;
        llvm::errs() << "\r\x1b[Kdlc: lowering shapes [" << std::string(done * width / total, '#')
                     << std::string(width - done * width / total, '.') << "] " << done << "/"
                     << total;
        if (done == total)
          llvm::errs() << "\n";
        llvm::errs().flush();
      } else if (done == total || seconds(last) > 10) {
        llvm::errs() << "dlc: lowered " << done << "/" << total << " shapes\n";
        last = std::chrono::steady_clock::now();
      }
    };
    image = codegen::compileShapeRangeImage(shapes->count(), graphAt, shapes->ranges(), co, &rep,
                                            onVariant);
  }
  if (!image) {
    reportError(image.takeError());
    return 1;
  }
  llvm::Error written = llvm::Error::success();
  if (llvm::StringRef parent = llvm::sys::path::parent_path(out); !parent.empty())
    if (auto ec = llvm::sys::fs::create_directories(parent)) {
      reportError(ir::errorf("cannot create '{0}': {1}", parent, ec.message()));
      return 1;
    }
  if (emit == "package") {
    written = codegen::writeFileAtomically(out, [&](llvm::raw_ostream &os) {
      image->forEachPiece(
          [&](const uint8_t *d, size_t n) { os.write(reinterpret_cast<const char *>(d), n); });
      return llvm::Error::success();
    });
  } else if (emit == "exe") {
    written = codegen::writeExecutable(image->bytes(), companion, out);
  } else {
    std::vector<uint8_t> bytes = image->bytes();
    auto pf = pkg::PackageFile::fromBytes(bytes.data(), bytes.size(), out);
    if (!pf) {
      reportError(ir::makeError("internal error: " + pf.status().message()));
      return 1;
    }
    if (emit == "cuda") {
      written = codegen::writeCudaDirectory(**pf, out);
    } else {
      codegen::LibraryOptions lo;
      lo.name = libName;
      lo.libraryPath = out;
      lo.headerPath = headerPath;
      lo.runtimeArchive = companion;
      if (!quiet)
        llvm::errs() << "dlc: linking " << out << " with " << companion << "\n";
      written = codegen::writeLibrary(**pf, lo);
    }
  }
  if (written) {
    reportError(std::move(written));
    return 1;
  }
  if (!quiet) {
    std::string targets;
    for (const std::string &t : rep.targets)
      targets += (targets.empty() ? "" : ",") + t;
    uint64_t outBytes = 0;
    llvm::sys::fs::file_size(out, outBytes);
    llvm::errs() << "dlc: wrote " << out << (emit == "lib" ? " and " + headerPath : std::string())
                 << (emit == "cuda" ? std::string(" (directory)")
                                    : " (" + megabytes(outBytes) + ")")
                 << ": " << rep.kernels << " kernels, " << rep.launches << " launches, "
                 << rep.libraryCalls << " library calls; arena " << megabytes(rep.arenaBytes)
                 << " (live-set bound " << megabytes(rep.maxLiveBytes) << ")"
                 << ", weights " << megabytes(rep.weightBytes) << "; targets " << targets
                 << "; max " << rep.maxRegisters << " registers, " << rep.totalSpills
                 << " spill bytes; " << llvm::format("%.2f", seconds(t0)) << " s\n";
    if (rep.variants > 1)
      llvm::errs() << "dlc: " << rep.variants
                   << " shapes in one package: arena sized for the largest plan, "
                   << rep.variantKernels << " kernels beyond the opt shape's\n";
  }
  return 0;
}

} // namespace dlc::tool
