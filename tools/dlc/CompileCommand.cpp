//===- CompileCommand.cpp - `dlc compile`: model to .dlc package -----------===//
//
// The command line of driver::compile(): options to driver::CompileOptions, the
// companions of --emit exe|lib found beside dlc, progress on stderr (a progress bar
// on a terminal, one line per phase elsewhere) and the summary of what was written.
//===----------------------------------------------------------------------===//
#include "Commands.h"
#include "Options.h"
#include "dlc/codegen/Artifacts.h"
#include "dlc/codegen/Compiler.h"
#include "dlc/driver/Compile.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>
#include <unistd.h>

namespace dlc::tool {

namespace {

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

/// The default output beside the model: MODEL.dlc, MODEL-cuda/, MODEL (exe) or
/// libMODEL.so.
std::string defaultOutput(const std::string &model, driver::Emit emit) {
  llvm::SmallString<256> p(model);
  llvm::sys::path::replace_extension(p, "");
  if (emit == driver::Emit::Package)
    p += ".dlc";
  else if (emit == driver::Emit::Cuda)
    p += "-cuda";
  else if (emit == driver::Emit::Library)
    p = (llvm::sys::path::parent_path(model) +
         (llvm::sys::path::parent_path(model).empty() ? "" : "/") + "lib" +
         llvm::sys::path::stem(model) + ".so")
            .str();
  return std::string(p);
}

/// The options of the command line (usage errors are those of the options alone).
llvm::Expected<driver::CompileOptions> optionsFromArgs(const Args &args) {
  driver::CompileOptions o;
  o.model = args.positionals()[0];
  std::string emit = args.getOr("emit", "package");
  if (emit == "package")
    o.emit = driver::Emit::Package;
  else if (emit == "exe")
    o.emit = driver::Emit::Executable;
  else if (emit == "lib")
    o.emit = driver::Emit::Library;
  else if (emit == "cuda")
    o.emit = driver::Emit::Cuda;
  else
    return ir::errorf("compile: --emit must be package, exe, lib or cuda, got '{0}'", emit);
  o.optLevel = std::atoi(args.getOr("O", "2").c_str());
  if (o.optLevel < 0 || o.optLevel > 3)
    return ir::makeError("compile: -O must be 0 to 3");
  o.output = args.getOr("output", "");
  if (o.output.empty())
    o.output = defaultOutput(o.model, o.emit);
  if (o.emit == driver::Emit::Library) {
    llvm::StringRef stem = llvm::sys::path::stem(o.output);
    stem.consume_front("lib");
    o.libraryName = args.getOr("name", codegen::cIdentifier(stem.str()));
  }

  auto import = importOptionsFromArgs(args, &o.shapeRanges);
  if (!import)
    return import.takeError();
  o.import = std::move(*import);
  for (const std::string &spec : args.getAll("opt-shape")) {
    auto p = driver::parseInputShape(spec);
    if (!p)
      return p.takeError();
    o.optShapes.push_back(*p);
  }
  if (auto t = args.get("max-shape-variants"))
    if (llvm::StringRef(*t).getAsInteger(10, o.maxShapeVariants) || o.maxShapeVariants < 1)
      return ir::errorf("--max-shape-variants expects a positive integer, got '{0}'", *t);

  auto precision = precisionFromArgs(args);
  if (!precision)
    return precision.takeError();
  o.precision = *precision;
  auto layout = layoutFromArgs(args);
  if (!layout)
    return layout.takeError();
  o.layout = *layout;
  auto gemmEpilogue = gemmEpilogueFromArgs(args);
  if (!gemmEpilogue)
    return gemmEpilogue.takeError();
  o.gemmEpilogue = *gemmEpilogue;
  auto training = trainingFromArgs(args);
  if (!training)
    return training.takeError();
  o.training = *training;
  o.passManager = passManagerFromArgs(args);

  if (args.has("check-accuracy")) {
    driver::AccuracyCheck check;
    check.seed = std::strtoull(args.getOr("seed", "0").c_str(), nullptr, 10);
    for (const std::string &spec : args.getAll("input")) {
      size_t eq = spec.find('=');
      if (eq == std::string::npos || eq == 0)
        return ir::errorf("--input expects NAME=FILE, got '{0}'", spec);
      std::string name = spec.substr(0, eq), path = spec.substr(eq + 1);
      auto t = readIrTensor(path, "--input " + name);
      if (!t)
        return t.takeError();
      check.inputs[name] = {path, std::move(*t)};
    }
    o.checkAccuracy = std::move(check); // (runCompile prints the report)
  } else if (args.has("input") || args.has("json") || args.has("seed")) {
    return ir::makeError("compile: --input, --seed and --json go with --check-accuracy");
  }

  if (auto t = args.get("target")) {
    llvm::SmallVector<llvm::StringRef, 8> parts;
    llvm::StringRef(*t).split(parts, ',', -1, false);
    for (llvm::StringRef p : parts)
      o.targets.push_back(p.trim().str());
  }
  if (args.has("tf32") && args.has("no-tf32"))
    return ir::makeError("compile: --tf32 and --no-tf32 exclude each other");
  if (args.has("tf32") || args.has("no-tf32"))
    o.tf32 = args.has("tf32");
  o.convTile = args.getOr("conv-tile", "");
  if (args.has("conv-tile")) {
    std::vector<std::string> tiles = codegen::convTileNames();
    if (std::find(tiles.begin(), tiles.end(), o.convTile) == tiles.end()) {
      std::string known;
      for (const std::string &t : tiles)
        known += (known.empty() ? "" : ", ") + t;
      return ir::makeError("compile: --conv-tile '" + o.convTile +
                           "' is no tile; the tiles: " + known);
    }
  }
  o.attentionKernel = args.getOr("attention-kernel", "auto");
  if (o.attentionKernel != "auto" && o.attentionKernel != "mma" && o.attentionKernel != "cuda-core")
    return ir::makeError("compile: --attention-kernel '" + o.attentionKernel +
                         "' is not auto, mma or cuda-core");
  if (o.attentionKernel == "auto")
    o.attentionKernel.clear();
  o.deterministic = args.has("deterministic");
  o.vendorTactics = !args.has("no-vendor-tactics");
  o.useCache = !args.has("no-cache");
  o.cacheDir = args.getOr("cache-dir", "");
  o.dumpDot = args.getOr("dump-dot", "");
  return o;
}

/// The layers in TF32, one line: their count and (`all`, or up to 4) their names.
std::string tf32Summary(const std::vector<std::string> &layers, bool all) {
  if (layers.empty())
    return "tf32: none (no FP32 convolution or GEMM runs on tensor cores)";
  std::string names;
  size_t shown = all ? layers.size() : std::min<size_t>(layers.size(), 4);
  for (size_t i = 0; i < shown; ++i)
    names += (i ? ", " : "") + (layers[i].empty() ? std::string("(unnamed)") : layers[i]);
  if (shown < layers.size())
    names += ", ...";
  return "tf32: " + std::to_string(layers.size()) + (layers.size() == 1 ? " layer" : " layers") +
         " multiply FP32 inputs rounded to TF32 (10-bit mantissa) on tensor cores, --no-tf32 "
         "for strict FP32: " +
         names;
}

} // namespace

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
       {"conv-tile", 0, true, false, "BMxBN/WMxWN[/128B]",
        "Benchmarking: implicit-GEMM convolutions use this tile where their kernel family has it\n"
        "(block x warp tile, /128B: 128 bytes of K per stage row; codegen/emitters/ConvTiles.h),\n"
        "not the cost model's choice"},
       {"deterministic", 0, false, false, "",
        "Bit-identical results on every run: floating-point scatter-adds (training's MaxPool and\n"
        "Gather/embedding gradients) as 64-bit fixed-point sums instead of atomic float adds,\n"
        "which sum in no fixed order (two more kernels and three memsets per scatter)"},
       {"attention-kernel", 0, true, false, "auto|mma|cuda-core",
        "Benchmarking: fused attentions on tensor cores (attention_mma, FP16/BF16 with head sizes\n"
        "a multiple of 8) or CUDA cores, not the cost model's choice (default auto)"},
       {"no-vendor-tactics", 0, false, false, "",
        "One implementation per layer, ours as the cost model chose it: no cuDNN or cuBLASLt\n"
        "candidates or second tiles for the session to time (README: Tactics)"},
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
  auto options = optionsFromArgs(*args);
  if (!options) {
    reportError(options.takeError());
    return 2;
  }
  driver::CompileOptions &o = *options;
  // The companions of --emit exe|lib, found before the long work starts.
  if (o.emit == driver::Emit::Executable || o.emit == driver::Emit::Library) {
    auto c = o.emit == driver::Emit::Executable
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
    o.companion = *c;
  }
  if (auto e = driver::validate(o)) {
    reportError(std::move(e));
    return 2;
  }

  bool quiet = args->has("quiet");
  // On a terminal, one progress bar line for the compilation jobs and the shapes of a
  // shape-range package; elsewhere (logs, CI) one line per phase.
  bool tty = !quiet && ::isatty(2);
  bool barShown = false;
  auto bar = [&](const char *what, size_t done, size_t total) {
    constexpr size_t width = 24;
    size_t filled = total ? done * width / total : width;
    llvm::errs() << "\r\x1b[Kdlc: " << what << " [" << std::string(filled, '#')
                 << std::string(width - filled, '.') << "] " << done << "/" << total;
    barShown = true;
  };
  std::set<std::string> said; // a shape-range compile imports the model once per shape
  o.onNote = [&](const std::string &note) {
    if (said.insert("note: " + note).second)
      llvm::errs() << "dlc: note: " << note << "\n";
  };
  o.onWarning = [&](const std::string &w) {
    if (said.insert("warning: " + w).second)
      llvm::errs() << "dlc: warning: " << w << "\n";
  };
  if (!quiet)
    o.log = [&](const std::string &line) {
      if (barShown) {
        llvm::errs() << "\r\x1b[K";
        barShown = false;
      }
      llvm::errs() << "dlc: " << line << "\n";
    };
  if (tty)
    o.onJob = [&, start = std::chrono::steady_clock::now()](size_t done, size_t total,
                                                            const std::string &what) {
      bar("compiling", done, total);
      llvm::errs() << " " << llvm::format("%.1f s", seconds(start)) << "  " << what;
      llvm::errs().flush();
    };
  if (!quiet)
    o.onShape = [&, last = std::chrono::steady_clock::now()](size_t done, size_t total) mutable {
      if (total < 2)
        return;
      if (tty) {
        bar("lowering shapes", done, total);
        if (done == total) {
          llvm::errs() << "\n";
          barShown = false;
        }
        llvm::errs().flush();
      } else if (done == total || seconds(last) > 10) {
        llvm::errs() << "dlc: lowered " << done << "/" << total << " shapes\n";
        last = std::chrono::steady_clock::now();
      }
    };

  // The accuracy report is printed once the package is built, with the layers that
  // run in TF32 (known after code generation); or without them if that fails.
  std::optional<std::pair<passes::AccuracyReport, double>> accuracy;
  if (o.checkAccuracy)
    o.checkAccuracy->report = [&](const passes::AccuracyReport &rep,
                                  const passes::AccuracyOptions &ao) {
      accuracy.emplace(rep, ao.target);
    };
  auto printAccuracy = [&](const std::vector<std::string> *tf32) {
    if (!accuracy)
      return;
    if (args->has("json")) {
      llvm::json::Value v = accuracy->first.toJson();
      if (tf32 && v.getAsObject())
        (*v.getAsObject())["tf32_layers"] = llvm::json::Array(*tf32);
      llvm::outs() << llvm::formatv("{0:2}", v) << "\n";
    } else {
      accuracy->first.print(llvm::outs(), accuracy->second);
      if (tf32)
        llvm::outs() << tf32Summary(*tf32, true)
                     << (tf32->empty() ? "" : " (the check above ran them in strict FP32)") << "\n";
    }
    llvm::outs().flush();
  };

  auto t0 = std::chrono::steady_clock::now();
  auto result = driver::compile(o);
  if (!result) {
    printAccuracy(nullptr);
    reportError(result.takeError());
    return 1;
  }
  printAccuracy(&result->report.tf32Layers);
  if (quiet)
    return 0;
  const codegen::CompileReport &rep = result->report;
  std::string targets;
  for (const std::string &t : rep.targets)
    targets += (targets.empty() ? "" : ",") + t;
  llvm::errs() << "dlc: wrote " << o.output
               << (result->headerPath.empty() ? "" : " and " + result->headerPath)
               << (o.emit == driver::Emit::Cuda ? std::string(" (directory)")
                                                : " (" + megabytes(result->outputBytes) + ")")
               << ": " << rep.kernels << " kernels, " << rep.launches << " launches, "
               << rep.libraryCalls << " library calls; arena " << megabytes(rep.arenaBytes)
               << " (live-set bound " << megabytes(rep.maxLiveBytes) << ")"
               << ", weights " << megabytes(rep.weightBytes) << "; targets " << targets << "; max "
               << rep.maxRegisters << " registers, " << rep.totalSpills << " spill bytes; "
               << llvm::format("%.2f", seconds(t0)) << " s\n";
  if (!rep.tf32Layers.empty() && !o.checkAccuracy)
    llvm::errs() << "dlc: " << tf32Summary(rep.tf32Layers, false) << "\n";
  if (rep.variants > 1)
    llvm::errs() << "dlc: " << rep.variants
                 << " shapes in one package: arena sized for the largest plan, "
                 << rep.variantKernels << " kernels beyond the opt shape's\n";
  return 0;
}

} // namespace dlc::tool
