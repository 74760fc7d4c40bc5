//===- Compile.h - The compiler as a library --------------------*- C++ -*-===//
//
// `dlc compile`, the Python package's dlc.compile and tests all call compile():
// import (ONNX) or parse (textual IR), the training step, the pass pipeline, code
// generation for every target and the artifact. Options are a struct, the result a
// value; nothing here parses a command line or prints unless told to.
//===----------------------------------------------------------------------===//
#pragma once

#include "dlc/codegen/Compiler.h"
#include "dlc/frontend/OnnxImporter.h"
#include "dlc/passes/Accuracy.h"
#include "dlc/passes/Training.h"

#include "llvm/Support/Error.h"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace dlc::driver {

/// What compile() writes.
enum class Emit {
  Package,    // a .dlc package
  Executable, // the stub executable with the package appended
  Library,    // a shared library embedding the package, and its C header
  Cuda,       // a directory of CUDA sources and the host schedule
};

/// An input's shape, where a dimension may be a range [min, max]: a package for a
/// range serves every shape in it (one schedule per shape).
struct InputShape {
  std::string name;
  std::vector<int64_t> min, max; // equal where the dimension is fixed
  bool ranged() const { return min != max; }
};
/// NAME=d0,d1,... where a dimension may be MIN..MAX.
llvm::Expected<InputShape> parseInputShape(const std::string &spec);

/// --check-accuracy: FP32 against the reduced precision on the reference
/// interpreter, before the precision pass.
struct AccuracyCheck {
  /// Inputs by name, with where they came from (for messages); the others are
  /// random (ir::randomInputs with `seed`).
  struct Input {
    std::string source;
    ir::Tensor value;
  };
  std::map<std::string, Input> inputs;
  uint64_t seed = 0;
  /// Receives the report (compile() prints nothing).
  std::function<void(const passes::AccuracyReport &, const passes::AccuracyOptions &)> report;
};

struct CompileOptions {
  /// The model: a path (.onnx, or .ir for textual IR), or ONNX bytes in
  /// `modelBytes`, which `model` then only names in messages.
  std::string model;
  std::optional<std::string> modelBytes;
  /// Where the artifact goes (a file, or a directory for Emit::Cuda).
  std::string output;
  Emit emit = Emit::Package;
  /// Emit::Library: the prefix of the entry points; Emit::Executable and
  /// Emit::Library: dlc-exe-stub, or the static runtime libdlcrt.a.
  std::string libraryName, companion;

  /// Import: static shapes, bindings, loop bounds, the checker (frontend).
  frontend::ImportOptions import;
  /// Inputs given a shape with ranges; `optShapes`: the shape to tune for (default
  /// the maximum); at most `maxShapeVariants` shapes.
  std::vector<InputShape> shapeRanges, optShapes;
  int64_t maxShapeVariants = 1024;

  /// Passes: -O level, mixed precision, layout, the training step.
  int optLevel = 2;
  std::optional<passes::PrecisionOptions> precision;
  passes::LayoutMode layout = passes::LayoutMode::Auto;
  /// MatMuls with an epilogue cuBLASLt cannot apply (passes::GemmEpilogueMode).
  passes::GemmEpilogueMode gemmEpilogue = passes::GemmEpilogueMode::Auto;
  std::optional<passes::TrainingOptions> training;
  passes::PassManagerOptions passManager;
  std::optional<AccuracyCheck> checkAccuracy;

  /// Code generation: targets (default: every GPU architecture, plus emu when a host
  /// compiler is present), TF32, the compilation cache.
  std::vector<std::string> targets;
  /// FP32 convolutions and GEMMs on tensor cores in TF32 (inputs rounded to 10 mantissa
  /// bits, FP32 accumulation). Unset: on for inference, as ONNX Runtime's CUDA EP and
  /// TensorRT default to on sm_80+ (every dlc target), GEMMs always and convolutions
  /// where the cost model prices TF32 faster than the CUDA-core kernel; off for training
  /// (--train, or a graph that already is a training step: one with parameters). true
  /// (--tf32): every eligible convolution too. false: strict FP32 (--no-tf32).
  std::optional<bool> tf32;
  /// Whether `g` (the loaded graph; null: not known yet, an ONNX model) runs in TF32.
  bool useTf32(const ir::Graph *g = nullptr) const {
    return tf32.value_or(!training && (!g || g->parameters().empty()));
  }
  /// Benchmarks: implicit-GEMM convolutions take this tile ("BMxBN/WMxWN") where their
  /// family has it (codegen::CompileOptions::convTile).
  std::string convTile;
  /// Benchmarks: fused attentions on "mma" or "cuda-core" kernels, not the model's
  /// choice (codegen::CompileOptions::attentionKernel).
  std::string attentionKernel;
  /// cuDNN alternatives beside our kernels (codegen::CompileOptions::vendorTactics).
  bool vendorTactics = true;
  /// Bit-identical results on every run: deterministic scatter-adds
  /// (codegen::CompileOptions::deterministic).
  bool deterministic = false;
  bool useCache = true;
  std::string cacheDir;
  /// The optimized graph as Graphviz (empty: none).
  std::string dumpDot;

  /// Progress: one line per phase (null: quiet), each compilation job, each shape
  /// of a shape-range package; remarks about the model (defaulted dimensions,
  /// conversion fallbacks) go to `onNote`, and what compiles differently from the
  /// model's meaning (a deferred If branch) to `onWarning`, whether quiet or not.
  /// A shape-range compile reports each distinct remark once.
  std::function<void(const std::string &)> log, onNote, onWarning;
  std::function<void(size_t done, size_t total, const std::string &what)> onJob;
  std::function<void(size_t done, size_t total)> onShape;
};

struct CompileResult {
  codegen::CompileReport report;
  /// What the training step did (CompileOptions::training).
  std::optional<passes::TrainingSummary> training;
  uint64_t outputBytes = 0; // 0 for a directory
  std::string headerPath;   // Emit::Library: the C header beside the library
};

/// The checks of compile() that need no model: the combinations of options and the
/// shape ranges (a command line reports these as usage errors).
llvm::Error validate(const CompileOptions &options);

/// Compiles a model into the artifact at options.output (written whole or not at
/// all). Errors name the model, node, op and option at fault.
llvm::Expected<CompileResult> compile(const CompileOptions &options);

/// The model loaded and optimized as compile() does it, without code generation
/// (`shapes`: the input shapes of one point of the ranges).
llvm::Expected<std::unique_ptr<ir::Graph>>
loadAndOptimize(const CompileOptions &options, const std::map<std::string, ir::Shape> *shapes,
                std::optional<passes::TrainingSummary> *training = nullptr);

} // namespace dlc::driver
