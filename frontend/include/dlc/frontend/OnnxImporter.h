//===- OnnxImporter.h - ONNX to ir::Graph -----------------------*- C++ -*-===//
//
// The only part of dlc that knows ONNX. Loading checks the model with
// onnx::checker, upgrades opsets <= 16 to 17 with the version converter, runs
// ONNX shape inference, then builds an ir::Graph through a table of per-op
// handlers keyed by (op type, opset range).
//===----------------------------------------------------------------------===//
#pragma once

#include "dlc/ir/Graph.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace dlc::frontend {

struct ImportOptions {
  /// Full shapes for inputs whose ONNX shapes are symbolic or unknown.
  std::map<std::string, ir::Shape> inputShapes;
  /// Value for symbolic dims without an override (reported as a note).
  int64_t defaultDimValue = 1;
  /// Inputs specialized to constants up front (`dlc compile --bind NAME=FILE`): the
  /// tensor's dtype must be the input's, and its shape must fit the declared dims.
  /// The graph records them (ir::Graph::boundInputs).
  std::map<std::string, ir::Tensor> bindings;
  /// Inputs specialized to constants given as text (`--bind NAME=1,2,3`): values of
  /// the input's declared dtype, shaped as declared (a fully static shape), else as a
  /// scalar (rank 0) or a vector (rank 1).
  std::map<std::string, std::string> bindingText;
  /// Values for inputs that are specialized to constants only if an op needs them
  /// at compile time (a Reshape's shape, an If condition), as TensorRT does with
  /// shape tensors. Other inputs stay inputs.
  std::map<std::string, ir::Tensor> specializable;
  /// Loops are unrolled at compile time: a trip count above this is an error
  /// (`--max-loop-unroll`), never a hang or a runaway compile.
  int64_t maxLoopUnroll = 256;
  /// And all unrolling together imports at most this many body nodes (nested Loops
  /// and Scans multiply: 4 trips at depth 8 are 65536 bodies): `--max-unrolled-nodes`.
  int64_t maxUnrolledNodes = 200000;
  /// A Loop whose trip count is known only at run time (an input, or none: a while
  /// loop) is unrolled to this many iterations, each gated by its trip count and
  /// condition; a run that would go further fails with a data error naming the
  /// node (`--loop-bound`). 0: such loops are refused.
  int64_t loopBound = 0;
  /// Run onnx::checker before importing.
  bool runChecker = true;
  /// Upgrade opsets <= 16 to 17 with the ONNX version converter.
  bool convertVersion = true;
  /// Nodes whose operands are all constants are evaluated while importing when
  /// their results have at most this many elements (shape computations).
  int64_t eagerFoldLimit = int64_t{1} << 16;
  /// Floating-point initializers become (not yet trainable) variables, so that no
  /// node is folded into a new constant through them and they keep their names:
  /// `dlc compile --train` then decides which are trained (passes/Training.h).
  bool initializersAsVariables = false;
};

struct ImportResult {
  std::unique_ptr<ir::Graph> graph;
  int64_t opset = 0;              // default-domain opset the graph was imported at
  int64_t originalOpset = 0;      // as found in the file
  std::vector<std::string> notes; // non-fatal remarks (defaulted dims, conversion fallbacks)
  /// What compiled differently from the model's meaning: a branch of a run-time If
  /// that cannot be built at the compiled shapes, deferred to a run-time error.
  std::vector<std::string> warnings;
  std::vector<std::string> specializedInputs; // inputs of `specializable` turned into constants
};

/// Imports an ONNX model file. Errors name the file, node, op type and opset; when
/// several nodes are unsupported, all are listed (one per line).
llvm::Expected<ImportResult> importOnnxFile(const std::string &path,
                                            const ImportOptions &opts = {});

/// Imports an ONNX model from memory; external data is resolved inside `modelDir`.
llvm::Expected<ImportResult> importOnnxBytes(llvm::StringRef bytes, const std::string &displayName,
                                             const std::string &modelDir,
                                             const ImportOptions &opts = {});

/// The serialized model with the initializers named in `values` replaced (same
/// name, type and dims, data inline). Names that were replaced go to `replaced`.
llvm::Expected<std::string> replaceInitializers(llvm::StringRef modelBytes,
                                                const std::map<std::string, ir::Tensor> &values,
                                                std::vector<std::string> *replaced = nullptr);

/// Reads a serialized TensorProto (the .pb files of the ONNX test data).
/// Returns the tensor and its name.
llvm::Expected<std::pair<std::string, ir::Tensor>> readTensorProtoFile(const std::string &path);

/// The op types the importer handles in `domain` ("": the default ONNX domain;
/// "com.microsoft": ONNX Runtime's contrib ops), sorted and unique.
std::vector<std::string> supportedOnnxOps(const std::string &domain = "");

/// Names and types of the graph inputs of a model file (before importing), for
/// tools that bind inputs by position.
llvm::Expected<std::vector<std::string>> onnxInputNames(const std::string &path);

/// The external-data locations a serialized model names (relative to its folder, as
/// written, each once in first-use order), subgraphs included: what a cache of compiled
/// models must key on besides the model's own bytes.
llvm::Expected<std::vector<std::string>> onnxExternalDataFiles(llvm::StringRef modelBytes);

} // namespace dlc::frontend
