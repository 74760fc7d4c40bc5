//===- Autodiff.h - Reverse-mode differentiation ----------------*- C++ -*-===//
//
// Appends the backward graph of a scalar loss to a graph: one pass over the
// forward nodes in reverse order, each node's vector-Jacobian product built by its
// op's gradient rule (OpDef::gradient, in the op's family file), gradients of a
// value used several times summed. Only nodes on a path from a trainable parameter
// to the loss are differentiated.
//===----------------------------------------------------------------------===//
#pragma once

#include "dlc/ir/Graph.h"

#include <functional>

namespace dlc::passes {

struct Gradient {
  ir::Value *parameter;
  ir::Value *grad; // same type as the parameter
};

/// Builds d loss / d p for every trainable parameter p of the graph, in
/// g.parameters() order (state variables get none). The loss must be a floating-point value with
/// one element. A parameter the loss does not depend on gets a zero gradient. `seed`, a one-element
/// value, is d loss / d loss (1 when null; the loss scale in mixed-precision training, so every
/// gradient comes out multiplied by it).
llvm::Expected<std::vector<Gradient>> buildGradients(ir::Graph &g, ir::Value *loss,
                                                     ir::Value *seed = nullptr,
                                                     bool fuseAttentionDropout = false);

/// Replaces the ops that a gradient must cross and that have no rule of their own
/// (OpDef::decompose: LSTM, GRU) by their decomposition. buildGradients does it
/// first; a caller that rewrites the forward graph before (the precision pass of
/// mixed-precision training) calls it earlier so the rewrite sees the primitives.
llvm::Error decomposeForGradients(ir::Graph &g);

/// Replaces each attention core in FP16/BF16 that a gradient crosses
/// (MatMul(Softmax(f(MatMul(Q, K'))), V), f scaling by positive constants, then at
/// most one added bias that needs no gradient and an exact causal mask, head sizes
/// multiples of 8 up to 128) by one FlashAttention
/// node, whose gradient recomputes the scores from the saved log-sum-exp instead of
/// keeping the Sq x Sk probabilities. buildGradients does it after decomposing.
/// `fuseDropout`: an attention whose probabilities go through training-mode Dropout is
/// rewritten too (TrainingOptions::fuseAttentionDropout), else left op by op.
llvm::Error flashAttentionForGradients(ir::Graph &g, bool fuseDropout = false);

/// Decides what trains. Trainable parameters: the constants and variables without
/// updates (imported initializers, ImportOptions::initializersAsVariables) that are
/// floating-point tensors (not scalars, which are hyper-constants such as epsilons
/// and scale factors) with finite values (not attention masks), with at least one
/// use as a weight rather than as an op's state operand (BatchNormalization's
/// running statistics), and whose name `frozen` does not accept. Variables that do
/// not qualify become constants again. Returns how many are trainable.
size_t promoteTrainableConstants(ir::Graph &g,
                                 const std::function<bool(const std::string &)> &frozen = {});

/// The output name of a parameter's gradient in the `autodiff` pass: "grad.NAME".
std::string gradientOutputName(const ir::Value &parameter);

} // namespace dlc::passes
