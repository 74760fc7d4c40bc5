//===- Training.h - The training step as a graph ----------------*- C++ -*-===//
//
// `dlc compile --train` turns an inference graph into one training step with a
// pipeline of passes (trainingPipeline), each usable alone through `dlc opt --train`:
//   train-step          every op takes its training form (OpDef::trainingForm:
//                       BatchNormalization on batch statistics, its running
//                       statistics state variables updated each step), the trainable
//                       constants become parameters, the model in inference form
//                       (OpDef::inferenceForm) is copied beside the step as outputs
//                       named kEvalOutputPrefix + NAME (the package's evaluation
//                       schedule), and the loss is appended (cross-entropy on class
//                       indices, mean squared error, or the model's own scalar output);
//   sync-batchnorm      data parallel: BatchNorm on the global batch's statistics;
//   decompose, precision  mixed precision: the forward graph and the loss lowered, so
//                       the parameters stay FP32 master weights read through casts,
//                       the backward follows the forward's precision (the gradient of
//                       a cast is the cast back) and the optimizer runs in FP32;
//   autodiff            the backward graph; the gradients become outputs grad.NAME;
//   allreduce-gradients data parallel: the gradients averaged over the ranks;
//   optimizer           the update of every parameter and of its state (momentum,
//                       Adam's moments, the step count), as graph updates;
//   zero-shard          ZeRO-1, in the optimizer's place.
// FP16 adds dynamic loss scaling: the loss gradient is seeded with the state variable
// `amp.loss_scale`; the FP32 gradients are unscaled and checked for Inf/NaN; a step
// with one keeps every parameter and optimizer state (a skipped step) and halves the
// scale, and `lossScaleGrowthInterval` clean steps in a row double it.
// The result is an ordinary graph: every later pass, the kernels and the memory
// planner treat the backward and the optimizer like any other nodes.
//===----------------------------------------------------------------------===//
#pragma once

#include "dlc/ir/Graph.h"
#include "dlc/passes/Pass.h"

#include <optional>

namespace dlc::passes {

enum class LossKind { CrossEntropy, MSE, None };
enum class OptimizerKind { SGD, Momentum, Adam, AdamW };

struct TrainingOptions {
  LossKind loss = LossKind::CrossEntropy;
  /// The name of the label input the loss adds.
  std::string label = "label";
  OptimizerKind optimizer = OptimizerKind::SGD;
  double lr = 0.01, momentum = 0.9, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weightDecay = 0;
  /// Constants whose name matches stay constants (--freeze REGEX).
  std::optional<std::string> freeze;
  /// Mixed-precision training (--fp16/--bf16); FP32 when absent.
  std::optional<PrecisionOptions> precision;
  /// FP16's dynamic loss scaling (PyTorch GradScaler's defaults).
  double initLossScale = 65536, lossScaleGrowth = 2, lossScaleBackoff = 0.5;
  int64_t lossScaleGrowthInterval = 2000;
  /// Data-parallel training (--data-parallel): the gradients are averaged over the
  /// ranks in buckets of at most this many bytes (ir AllReduce); absent: one process.
  std::optional<uint64_t> bucketBytes;
  /// --sync-batchnorm: BatchNorm's batch statistics are those of the global batch.
  bool syncBatchNorm = false;
  /// FP16/BF16 attention keeps training-mode Dropout of its probabilities inside
  /// FlashAttention (--fused-attention-dropout): the Sq x Sk probabilities and mask are
  /// never stored, but each kernel draws the Philox mask again (about twice the
  /// attention's time, modeled); by default such attention stays op by op.
  bool fuseAttentionDropout = false;
  /// --zero N: ZeRO-1, the optimizer state sharded over N ranks (instead of buckets).
  std::optional<int64_t> zeroRanks;
};

/// The default bucket size of --data-parallel (PyTorch DDP's bucket_cap_mb).
inline constexpr uint64_t kDefaultBucketBytes = 25ull << 20;

/// The state variables of FP16 loss scaling: the current scale, and the clean steps
/// since the last change. `dlc train --log` reads the scale; a step that lowered it
/// was skipped.
inline constexpr const char *kLossScaleName = "amp.loss_scale";
inline constexpr const char *kGoodStepsName = "amp.good_steps";

/// What buildTrainingStep did, for the compile log.
struct TrainingSummary {
  size_t parameters = 0, parameterElements = 0, frozen = 0, stateVariables = 0, batchNorms = 0;
  bool lossScaling = false;
  size_t buckets = 0;           // data parallel: all-reduce buckets
  uint64_t allReduceBytes = 0;  // data parallel: gradient bytes averaged per step
  bool syncBatchNorm = false;   // data parallel: BatchNorm on the global batch's statistics
  size_t zeroShareElements = 0; // ZeRO-1: the parameters each rank steps the optimizer on
  bool evaluation = false;      // the model in inference mode is there too (kEvalOutputPrefix)
  std::string loss;             // the loss output's name
};

/// Checks the values and their combinations (a learning rate >= 0, momentum and
/// Adam's betas in [0, 1), --zero with --data-parallel, ...); errors name the
/// command-line option. buildTrainingStep checks first.
llvm::Error validateTrainingOptions(const TrainingOptions &opts);

/// The passes that turn an inference graph into a training step, in order:
///   train-step           the training form, trainable parameters, the evaluation
///                        copy, the loss (and FP16's loss-scale state)
///   sync-batchnorm       (--sync-batchnorm) BatchNorm on the global batch's statistics
///   decompose, precision (mixed precision) the forward graph and the loss lowered
///   autodiff             the gradients, as outputs grad.NAME
///   allreduce-gradients  (--data-parallel) the gradients averaged over the ranks
///   optimizer            the parameters' and the optimizer state's updates
///   zero-shard           (--zero, instead of the two before) ZeRO-1's sharded step
Pipeline trainingPipeline(const TrainingOptions &opts);

/// Rewrites `g` (an inference graph whose first output is the model's prediction)
/// into a training step by running trainingPipeline. Errors name what the user
/// gave: a label name taken by an input, --freeze matching nothing, a model with
/// nothing to train, a --loss none output that is not a scalar.
llvm::Expected<TrainingSummary> buildTrainingStep(ir::Graph &g, const TrainingOptions &opts,
                                                  const PassManagerOptions &pm = {});

llvm::Expected<LossKind> parseLossKind(std::string_view s);
llvm::Expected<OptimizerKind> parseOptimizerKind(std::string_view s);
std::string_view lossKindName(LossKind k);
std::string_view optimizerKindName(OptimizerKind k);

} // namespace dlc::passes
