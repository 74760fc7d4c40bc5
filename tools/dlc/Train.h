//===- Train.h - `dlc compile --train` options ------------------*- C++ -*-===//
#pragma once

#include "Args.h"
#include "dlc/passes/Training.h"

#include <optional>

namespace dlc::tool {

/// --train, --loss, --label, --optimizer, --lr, --momentum, --beta1, --beta2, --eps,
/// --weight-decay, --freeze.
std::vector<OptSpec> trainingOptionSpecs();
/// The training options when --train is given; an error for training options
/// without --train or values out of range.
llvm::Expected<std::optional<passes::TrainingOptions>> trainingFromArgs(const Args &args);

} // namespace dlc::tool
