//===- TrainingSupport.h - Shared by the training passes --------*- C++ -*-===//
//
// The training passes (Training.h) hand the gradients from one to the next as graph
// outputs named grad.NAME (the `autodiff` pass's form): `allreduce-gradients`
// replaces their values, `optimizer` and `zero-shard` consume them.
//===----------------------------------------------------------------------===//
#pragma once

#include "dlc/ir/GradBuilder.h"
#include "dlc/passes/Autodiff.h"
#include "dlc/passes/Training.h"

#include <vector>

namespace dlc::passes {

/// The gradient outputs (grad.NAME of a trainable parameter NAME), in output order,
/// with the output's index.
struct GradientOutput {
  Gradient gradient;
  size_t output;
};
std::vector<GradientOutput> gradientOutputs(const ir::Graph &g);
/// Drops the gradient outputs (the optimizer has consumed them).
void removeGradientOutputs(ir::Graph &g);

/// The training options of the pipeline (an error when the pass runs without them),
/// and the summary to count in (a scratch one when nobody reads it).
const TrainingOptions *trainingOptions(PassContext &ctx, std::string_view pass);
TrainingSummary &trainingSummary(PassContext &ctx);

/// A state variable of `like`'s type, zero-initialized, named NAME.what.
ir::Value *zerosState(ir::Graph &g, ir::Value *like, const std::string &what);
/// A float scalar state variable.
ir::Value *scalarState(ir::Graph &g, const std::string &name, float init);

/// The optimizer's step, one element-wise chain per parameter (the fusion pass
/// makes each an update lane). Hyper-parameters are compile-time constants. Adam's
/// bias corrections come from a step-count state variable that constructing the
/// builder creates. `skip` (FP16 loss scaling's overflow flag) keeps every
/// parameter and state when set.
class OptimizerBuilder {
public:
  OptimizerBuilder(ir::Graph &g, ir::GradBuilder &b, const TrainingOptions &opts,
                   TrainingSummary &sum, ir::Value *skip);
  /// The new value of parameter (or ZeRO share) p from its gradient d; appends the
  /// updates of the state it needs.
  ir::Value *step(ir::Value *p, ir::Value *d);
  /// Appends the update var = next (or the old value on a skipped step).
  void update(ir::Value *var, ir::Value *next);

private:
  ir::Graph &g_;
  ir::GradBuilder &b_;
  const TrainingOptions &opts_;
  TrainingSummary &sum_;
  ir::Value *skip_;
  ir::Value *bc1_ = nullptr, *bc2_ = nullptr; // Adam's 1 - beta^t
};

} // namespace dlc::passes
