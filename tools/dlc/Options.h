//===- Options.h - The option groups several dlc commands share -*- C++ -*-===//
//
// Each group is a list of OptSpecs (for a command's parser and --help) and a
// function from the parsed Args to the library's options struct, which checks the
// values and their combinations: import (dlc import/compile), precision and layout
// (dlc opt/compile), training (dlc opt/compile), and the tensor files that
// --bind and --input read.
//===----------------------------------------------------------------------===//
#pragma once

#include "Args.h"
#include "dlc/driver/Compile.h"
#include "dlc/frontend/OnnxImporter.h"
#include "dlc/passes/Pass.h"
#include "dlc/passes/Training.h"

#include <optional>
#include <vector>

namespace dlc::tool {

/// --input-shape, --bind, --max-loop-unroll, --loop-bound, --no-check.
std::vector<OptSpec> importOptionSpecs();
/// The importer's options. An --input-shape with a range goes to `ranges` when it is
/// given (dlc compile), and is an error otherwise.
llvm::Expected<frontend::ImportOptions>
importOptionsFromArgs(const Args &args, std::vector<driver::InputShape> *ranges = nullptr);

/// --fp16, --bf16, --io-dtype, --fp32-ops, --fp32-nodes, --layout (and --tf32 for
/// compile).
std::vector<OptSpec> precisionOptionSpecs(bool withTf32);
/// The precision pass's options, or nullopt when neither --fp16 nor --bf16 is given.
/// Checks the combinations and the op names.
llvm::Expected<std::optional<passes::PrecisionOptions>> precisionFromArgs(const Args &args);
/// --layout auto|nchw|nhwc (default auto).
llvm::Expected<passes::LayoutMode> layoutFromArgs(const Args &args);
llvm::Expected<passes::GemmEpilogueMode> gemmEpilogueFromArgs(const Args &args);

/// --train, --loss, --label, --optimizer, --lr, --momentum, --beta1, --beta2, --eps,
/// --weight-decay, --freeze, --loss-scale, --data-parallel, --bucket-mb, --zero,
/// --sync-batchnorm.
std::vector<OptSpec> trainingOptionSpecs();
/// The training options when --train is given; an error for training options
/// without --train or values out of range.
llvm::Expected<std::optional<passes::TrainingOptions>> trainingFromArgs(const Args &args);

/// --print-ir-after-all and --verify-each (each command words their help).
passes::PassManagerOptions passManagerFromArgs(const Args &args);

/// A tensor file (.npy or .pb, driver::readTensorFile) as an IR tensor; errors
/// start with `option` ("--bind x").
llvm::Expected<ir::Tensor> readIrTensor(const std::string &path, const std::string &option);

} // namespace dlc::tool
