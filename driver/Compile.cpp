//===- Compile.cpp - The compiler as a library ------------------------------===//
#include "dlc/driver/Compile.h"

#include "Dot.h"
#include "dlc/codegen/Artifacts.h"
#include "dlc/driver/Tensors.h"
#include "dlc/ir/Interpreter.h"
#include "dlc/ir/TextIR.h"
#include "dlc/support/Files.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <algorithm>
#include <chrono>
#include <unistd.h>

namespace dlc::driver {

namespace {

/// The most memory any GPU has (NVIDIA B300: 288 GB of HBM3e).
constexpr uint64_t kLargestGpuBytes = 288ull * 1000 * 1000 * 1000;

/// A warning when the package cannot fit: its arena and weights together are more
/// than any GPU's memory, or (for emu) this machine's. It still compiles (a bigger
/// GPU may come), but nobody is surprised at load time.
std::string memoryWarning(const codegen::CompileReport &r,
                          const std::vector<std::string> &targets) {
  uint64_t needs = r.arenaBytes + r.weightBytes;
  auto gb = [](uint64_t b) { return llvm::formatv("{0:f1} GB", b / 1e9).str(); };
  std::string what = "the package needs " + gb(needs) + " of memory (arena " + gb(r.arenaBytes) +
                     ", weights " + gb(r.weightBytes) + ")";
  if (needs > kLargestGpuBytes)
    return what + ", more than any GPU has (the largest, NVIDIA B300, has 288 GB): loading it "
                  "will fail";
  bool emu = targets.empty() || std::find(targets.begin(), targets.end(), "emu") != targets.end();
  long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  uint64_t host = pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : 0;
  if (emu && host && needs > host)
    return what + ", more than this machine's " + gb(host) + ": emu will fail to load it here";
  return "";
}

double seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string shapeText(const std::vector<int64_t> &s) {
  std::string r;
  for (size_t i = 0; i < s.size(); ++i)
    r += (i ? "," : "") + std::to_string(s[i]);
  return r;
}

/// The shape ranges of CompileOptions::shapeRanges and optShapes: the dimensions
/// given the same range vary together (one variable, as a batch dimension shared by
/// several inputs); distinct ranges vary independently. Point 0 is the opt shape,
/// the others follow in order.
class ShapeRanges {
public:
  static llvm::Expected<ShapeRanges> fromOptions(const CompileOptions &o) {
    ShapeRanges r;
    for (const InputShape &p : o.shapeRanges) {
      if (!p.ranged())
        continue;
      for (const InputShape &q : r.specs_)
        if (q.name == p.name)
          return ir::errorf("--input-shape: '{0}' is given twice", p.name);
      for (size_t a = 0; a < p.min.size(); ++a) {
        if (p.min[a] == p.max[a])
          continue;
        auto v = std::find_if(r.vars_.begin(), r.vars_.end(),
                              [&](const Var &x) { return x.min == p.min[a] && x.max == p.max[a]; });
        if (v == r.vars_.end()) {
          r.vars_.push_back({p.min[a], p.max[a], p.max[a], {}});
          v = r.vars_.end() - 1;
        }
        v->dims.push_back(r.ranges_.size());
        r.ranges_.push_back({p.name, static_cast<uint32_t>(a), p.min[a], p.max[a], p.max[a]});
      }
      r.specs_.push_back(p);
    }
    for (const InputShape &p : o.optShapes) {
      std::string spec = p.name + "=" + shapeText(p.min);
      auto it = std::find_if(r.specs_.begin(), r.specs_.end(),
                             [&](const InputShape &q) { return q.name == p.name; });
      if (p.ranged() || it == r.specs_.end() || it->min.size() != p.min.size())
        return ir::errorf(
            "--opt-shape {0}: expects one shape of an input given a range with --input-shape",
            spec);
      for (size_t a = 0; a < p.min.size(); ++a)
        if (p.min[a] < it->min[a] || p.min[a] > it->max[a])
          return ir::errorf("--opt-shape {0}: dimension {1} is {2}, outside {3}..{4}", spec, a,
                            p.min[a], it->min[a], it->max[a]);
      for (Var &v : r.vars_)
        for (size_t d : v.dims)
          if (r.ranges_[d].input == p.name) {
            v.opt = p.min[r.ranges_[d].axis];
            for (size_t e : v.dims)
              if (r.ranges_[e].input == p.name && p.min[r.ranges_[e].axis] != v.opt)
                return ir::errorf(
                    "--opt-shape {0}: dimensions with the range {1}..{2} vary together and "
                    "need one value",
                    spec, v.min, v.max);
          }
    }
    for (const Var &v : r.vars_)
      for (size_t d : v.dims)
        r.ranges_[d].opt = v.opt;
    int64_t limit = o.maxShapeVariants;
    if (limit < 1)
      return ir::errorf("--max-shape-variants expects a positive integer, got '{0}'", limit);
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
    for (const InputShape &s : specs_) {
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
    for (const InputShape &s : specs_)
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
  std::vector<InputShape> specs_;
  std::vector<Var> vars_;
  std::vector<codegen::ShapeRangeDesc> ranges_;
  size_t count_ = 1;
};

/// --check-accuracy's inputs: the given ones (checked against the graph's inputs),
/// seeded random values for the others (integers in a small range, so indices stay
/// valid).
llvm::Expected<ir::TensorMap> accuracyInputs(const ir::Graph &g, const AccuracyCheck &check) {
  ir::TensorMap inputs = ir::randomInputs(g, check.seed);
  for (const auto &[name, given] : check.inputs) {
    const ir::Value *v = g.findValue(name);
    if (!v || !v->isInput())
      return ir::errorf("--input: the model has no input named '{0}'", name);
    if (given.value.type() != v->type())
      return ir::errorf("--input {0}: {1} has type {2}, the input is {3}", name, given.source,
                        given.value.type().str(), v->type().str());
    inputs[name] = given.value;
  }
  return inputs;
}

void log(const CompileOptions &o, const std::string &line) {
  if (o.log)
    o.log(line);
}

/// The summary line of the training step (`dlc: train: ...`).
std::string describeTraining(const passes::TrainingSummary &sum, const passes::TrainingOptions &t,
                             size_t nodes) {
  std::string s = "train: " + std::to_string(sum.parameters) + " parameters (" +
                  std::to_string(sum.parameterElements) + " values" +
                  (sum.frozen ? ", " + std::to_string(sum.frozen) + " frozen" : "") + "), loss " +
                  std::string(passes::lossKindName(t.loss)) + ", optimizer " +
                  std::string(passes::optimizerKindName(t.optimizer)) + ", " +
                  std::to_string(sum.stateVariables) + " state variables";
  if (sum.batchNorms)
    s += ", " + std::to_string(sum.batchNorms) + " BatchNorms in training mode";
  if (sum.lossScaling)
    s += ", dynamic loss scaling";
  if (sum.buckets)
    s += ", data parallel: " + std::to_string(sum.buckets) + " all-reduce buckets of " +
         std::to_string(sum.allReduceBytes) + " gradient bytes" +
         (sum.syncBatchNorm ? ", synchronized BatchNorm" : "");
  if (sum.zeroShareElements)
    s += ", ZeRO-1 over " + std::to_string(*t.zeroRanks) + " ranks (" +
         std::to_string(sum.zeroShareElements) + " parameters per rank)";
  return s + "; " + std::to_string(nodes) + " nodes";
}

} // namespace

llvm::Expected<InputShape> parseInputShape(const std::string &spec) {
  size_t eq = spec.find('=');
  if (eq == std::string::npos || eq == 0)
    return ir::errorf(
        "--input-shape expects NAME=d0,d1,... (a dimension may be a range MIN..MAX), got '{0}'",
        spec);
  InputShape r;
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

llvm::Expected<std::unique_ptr<ir::Graph>>
loadAndOptimize(const CompileOptions &o, const std::map<std::string, ir::Shape> *shapes,
                std::optional<passes::TrainingSummary> *training) {
  const std::string &file = o.model;
  auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<ir::Graph> g;
  if (!o.modelBytes && llvm::StringRef(file).endswith(".ir")) {
    if (!o.import.bindings.empty() || !o.import.bindingText.empty())
      return ir::errorf("--bind applies to ONNX models; in textual IR, write the input as a const");
    auto buf = readInputFile(file);
    if (!buf)
      return buf.takeError();
    auto parsed = ir::parseGraph(*buf, file);
    if (!parsed)
      return parsed.takeError();
    if (auto e = ir::verifyGraph(**parsed, file))
      return e;
    g = std::move(*parsed);
    log(o, "parse " + file + ": " + std::to_string(g->numNodes()) + " nodes");
  } else {
    frontend::ImportOptions io = o.import;
    if (shapes)
      for (const auto &[name, shape] : *shapes)
        io.inputShapes[name] = shape;
    io.initializersAsVariables = o.training.has_value();
    auto r = o.modelBytes ? frontend::importOnnxBytes(*o.modelBytes, file, "", io)
                          : frontend::importOnnxFile(file, io);
    if (!r)
      return r.takeError();
    if (o.onNote)
      for (const std::string &note : r->notes)
        o.onNote(file + ": " + note);
    if (o.onWarning)
      for (const std::string &w : r->warnings)
        o.onWarning(file + ": " + w);
    g = std::move(r->graph);
    log(o, llvm::formatv("import {0} (opset {1}{2}): {3} nodes, {4:f2} s", file, r->originalOpset,
                         r->opset != r->originalOpset ? " -> " + std::to_string(r->opset) : "",
                         g->numNodes(), seconds(t0))
               .str());
  }
  if (o.training) {
    // Mixed-precision training lowers the forward graph itself (Training.h); the
    // pipeline below then leaves precision alone.
    passes::TrainingOptions t = *o.training;
    t.precision = o.precision;
    auto sum = passes::buildTrainingStep(*g, t, o.passManager);
    if (!sum)
      return sum.takeError();
    if (auto e = ir::verifyGraph(*g))
      return ir::errorf("internal error: the training graph does not verify: {0}",
                        llvm::toString(std::move(e)));
    log(o, describeTraining(*sum, t, g->numNodes()));
    if (training)
      *training = *sum;
  }
  auto t1 = std::chrono::steady_clock::now();
  size_t before = g->numNodes();
  passes::PassManager pm(o.passManager);
  passes::PassContext ctx;
  ctx.layout = o.layout;
  ctx.gemmEpilogue = o.gemmEpilogue;
  ctx.ownGemm = [&o](int64_t rows, int64_t k, int64_t n, ir::DType dt) {
    return codegen::ownGemmIsFaster(o.targets, rows, k, n, dt);
  };
  ctx.tf32 = o.useTf32(g.get()); // (training: strict FP32 unless --tf32)
  if (o.precision) {
    ctx.precision = *o.precision;
    std::set<std::string, std::less<>> names;
    for (const ir::Node &n : g->nodes())
      names.insert(n.name());
    for (const std::string &n : ctx.precision.fp32Nodes)
      if (!names.count(n))
        return ir::errorf("--fp32-nodes: the model has no node named '{0}'", n);
  }
  // (A training step lowered its precision itself; its FP16/BF16 convolutions, the
  // input and weight gradients' too, go channels-last like an inference graph's.)
  bool lowerPrecision = o.precision && !o.training;
  // (A quantized model's INT8 convolutions run channels-last, on tensor cores.)
  const bool quantized = !g->nodesOf(ir::OpKind::QuantizeLinear).empty();
  for (const passes::PipelineStage &stage : passes::defaultPipeline(
           o.optLevel, lowerPrecision,
           passes::needsLayoutPass(o.layout, bool(o.precision), ctx.tf32, quantized))) {
    if (o.checkAccuracy && stage.passes.front() == "precision") {
      auto inputs = accuracyInputs(*g, *o.checkAccuracy);
      if (!inputs)
        return inputs.takeError();
      passes::AccuracyOptions ao;
      ao.precision = ctx.precision;
      log(o, "checking accuracy on the reference interpreter");
      auto rep = passes::checkAccuracy(*g, *inputs, ao);
      if (!rep)
        return rep.takeError();
      if (o.checkAccuracy->report)
        o.checkAccuracy->report(*rep, ao);
    }
    if (auto e = pm.run(*g, {stage}, ctx))
      return e;
  }
  if (auto e = ir::verifyGraph(*g))
    return ir::errorf("internal error: the optimized graph does not verify: {0}",
                      llvm::toString(std::move(e)));
  log(o, llvm::formatv("passes -O{0}{1}: {2} -> {3} nodes, {4:f2} s", o.optLevel,
                       o.precision ? (o.precision->reduced == ir::DType::BF16 ? " bf16" : " fp16")
                                   : "",
                       before, g->numNodes(), seconds(t1))
             .str());
  return g;
}

llvm::Error validate(const CompileOptions &o) {
  if (o.output.empty())
    return ir::makeError("compile: no output path");
  if (Status s = refuseOverwrite(o.output, "compile: the output", {{o.model, "model"}}))
    return ir::makeError(s.message());
  if (!o.dumpDot.empty())
    if (Status s = refuseOverwrite(o.dumpDot, "compile: --dump-dot", {{o.model, "model"}}))
      return ir::makeError(s.message());
  if (o.checkAccuracy && !o.precision)
    return ir::makeError("compile: --check-accuracy needs --fp16 or --bf16");
  if ((o.emit == Emit::Executable || o.emit == Emit::Library) && o.companion.empty())
    return ir::makeError(o.emit == Emit::Executable
                             ? "compile: --emit exe needs the executable stub dlc-exe-stub"
                             : "compile: --emit lib needs the static runtime libdlcrt.a");
  if (o.emit == Emit::Library && o.libraryName.empty())
    return ir::makeError("compile: --emit lib needs the name of its entry points");
  auto shapes = ShapeRanges::fromOptions(o);
  if (!shapes)
    return shapes.takeError();
  if (!shapes->empty() &&
      (o.training || o.checkAccuracy || o.emit == Emit::Library || o.emit == Emit::Cuda)) {
    // --emit lib's entry points and --emit cuda's host schedule are written for one shape.
    std::string what = o.checkAccuracy           ? "--check-accuracy"
                       : o.training              ? "--train"
                       : o.emit == Emit::Library ? "--emit lib"
                                                 : "--emit cuda";
    return ir::makeError("compile: " + what +
                         " takes one shape per input, not a range (a range package is run through "
                         "the runtime: --emit package or exe, dlc run, the C/C++ API)");
  }
  return llvm::Error::success();
}

llvm::Expected<CompileResult> compile(const CompileOptions &o) {
  if (auto e = validate(o))
    return e;
  auto shapes = ShapeRanges::fromOptions(o);
  if (!shapes)
    return shapes.takeError();
  CompileResult result;
  auto writeDot = [&](const ir::Graph &g) -> llvm::Error {
    if (o.dumpDot.empty())
      return llvm::Error::success();
    return codegen::writeFileAtomically(o.dumpDot, graphToDot(g));
  };
  std::unique_ptr<ir::Graph> graph;
  if (shapes->empty()) {
    auto g = loadAndOptimize(o, nullptr, &result.training);
    if (!g)
      return g.takeError();
    graph = std::move(*g);
    if (auto e = writeDot(*graph))
      return e;
  }
  codegen::CompileOptions co;
  co.targets = o.targets;
  co.tf32 = o.useTf32(graph.get()); // (shape ranges: ONNX, whose import has no parameters)
  co.tf32Everywhere = o.tf32.value_or(false);
  co.convTile = o.convTile;
  co.attentionKernel = o.attentionKernel;
  // (--deterministic: the same kernels on every GPU, not a choice made by timing.)
  co.vendorTactics = o.vendorTactics && !o.deterministic;
  co.deterministic = o.deterministic;
  if (o.training && !llvm::StringRef(o.model).endswith(".ir")) { // kept for `dlc export`
    if (o.modelBytes) {
      co.sourceModel = *o.modelBytes;
    } else {
      auto bytes = readInputFile(o.model);
      if (!bytes)
        return bytes.takeError();
      co.sourceModel = std::move(*bytes);
    }
  }
  co.useCache = o.useCache;
  co.cacheDir = o.cacheDir;
  co.failureDumpPath = o.output + ".failed.cu";
  co.progress = o.log;
  co.onJob = o.onJob;
  if (o.emit == Emit::Cuda) // the source is checked by compiling PTX for the newest architecture
    co.targets = {"compute_90"};
  llvm::Expected<pkg::PackageImage> image =
      llvm::make_error<llvm::StringError>("", llvm::inconvertibleErrorCode());
  llvm::consumeError(image.takeError());
  if (shapes->empty()) {
    image = codegen::compileGraphImage(*graph, co, &result.report);
  } else {
    // One schedule per point of the ranges; the first is the opt shape, whose import
    // and passes are reported (the others repeat them at other shapes).
    log(o, "shape ranges: " + shapes->describe() + " -> " + std::to_string(shapes->count()) +
               " shapes");
    auto graphAt = [&](size_t i) -> llvm::Expected<std::unique_ptr<ir::Graph>> {
      std::map<std::string, ir::Shape> point = shapes->point(i);
      CompileOptions at = o;
      if (i > 0)
        at.log = nullptr;
      auto g = loadAndOptimize(at, &point);
      if (!g) {
        std::string where;
        for (const auto &[name, shape] : point)
          where += (where.empty() ? "" : ", ") + name + "=" + shapeText(shape);
        return ir::errorf("at shape {0}: {1}", where, llvm::toString(g.takeError()));
      }
      if (i == 0)
        if (auto e = writeDot(**g))
          return llvm::Expected<std::unique_ptr<ir::Graph>>(std::move(e));
      return g;
    };
    auto onVariant = [&](size_t done, size_t total) {
      if (o.onShape)
        o.onShape(done, total);
    };
    image = codegen::compileShapeRangeImage(shapes->count(), graphAt, shapes->ranges(), co,
                                            &result.report, onVariant);
  }
  if (!image)
    return image.takeError();
  if (std::string w = memoryWarning(result.report, o.targets); !w.empty())
    result.report.warnings.push_back(w);
  if (o.onWarning)
    for (const std::string &w : result.report.warnings)
      o.onWarning(o.output + ": " + w);
  if (llvm::StringRef parent = llvm::sys::path::parent_path(o.output); !parent.empty())
    if (auto ec = llvm::sys::fs::create_directories(parent))
      return ir::errorf("cannot create '{0}': {1}", parent, ec.message());
  llvm::Error written = llvm::Error::success();
  if (o.emit == Emit::Package) {
    written = codegen::writeFileAtomically(o.output, [&](llvm::raw_ostream &os) {
      image->forEachPiece(
          [&](const uint8_t *d, size_t n) { os.write(reinterpret_cast<const char *>(d), n); });
      return llvm::Error::success();
    });
  } else if (o.emit == Emit::Executable) {
    written = codegen::writeExecutable(image->bytes(), o.companion, o.output);
  } else {
    std::vector<uint8_t> bytes = image->bytes();
    auto pf = pkg::PackageFile::fromBytes(bytes.data(), bytes.size(), o.output);
    if (!pf)
      return ir::makeError("internal error: " + pf.status().message());
    if (o.emit == Emit::Cuda) {
      written = codegen::writeCudaDirectory(**pf, o.output);
    } else {
      llvm::SmallString<256> h(llvm::sys::path::parent_path(o.output));
      llvm::sys::path::append(h, o.libraryName + ".h");
      codegen::LibraryOptions lo;
      lo.name = o.libraryName;
      lo.libraryPath = o.output;
      lo.headerPath = result.headerPath = std::string(h);
      lo.runtimeArchive = o.companion;
      log(o, "linking " + o.output + " with " + o.companion);
      written = codegen::writeLibrary(**pf, lo);
    }
  }
  if (written)
    return written;
  if (o.emit != Emit::Cuda)
    llvm::sys::fs::file_size(o.output, result.outputBytes);
  return result;
}

} // namespace dlc::driver
