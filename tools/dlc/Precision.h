//===- Precision.h - Mixed-precision options of dlc compile/opt --*- C++ -*-===//
#pragma once

#include "Args.h"
#include "dlc/passes/Pass.h"

namespace dlc::tool {

/// --fp16, --bf16, --io-dtype, --fp32-ops, --fp32-nodes, --layout (and --tf32 for
/// compile).
std::vector<OptSpec> precisionOptionSpecs(bool withTf32);
/// The precision pass's options, or nullopt when neither --fp16 nor --bf16 is given.
/// Checks the combinations and the op names.
llvm::Expected<std::optional<passes::PrecisionOptions>> precisionFromArgs(const Args &args);

/// --layout auto|nchw|nhwc (default auto).
llvm::Expected<passes::LayoutMode> layoutFromArgs(const Args &args);

} // namespace dlc::tool
