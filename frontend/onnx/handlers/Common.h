//===- Common.h - Helpers shared by the ONNX op handlers --------*- C++ -*-===//
#pragma once

#include "../NodeImporter.h"

#include <limits>

namespace dlc::frontend {

/// All inputs in order (absent = null), trailing absent ones dropped.
std::vector<ir::Value *> allInputs(NodeImporter &ni);

/// One IR op with the node's inputs and attributes, one result per ONNX output.
template <ir::OpKind K> llvm::Error direct(NodeImporter &ni) {
  auto attrs = ni.copyAttrs(K);
  if (!attrs)
    return attrs.takeError();
  unsigned outs = std::max<unsigned>(1, static_cast<unsigned>(ni.numOutputs()));
  auto r = ni.opMulti(K, allInputs(ni), std::move(*attrs), outs);
  if (!r)
    return r.takeError();
  for (unsigned i = 0; i < r->size(); ++i)
    ni.setOutput(i, (*r)[i]);
  return llvm::Error::success();
}

/// A com.microsoft handler entry (domain version 1) needing `minInputs` inputs.
inline HandlerEntry contribEntry(const char *op, Handler h, int minInputs) {
  return {op, 1, kMaxContribOpset, h, kMicrosoftDomain, minInputs};
}

/// Sets output 0 to the value, or returns its error.
llvm::Error single(NodeImporter &ni, llvm::Expected<ir::Value *> v);

/// A quantized (u8 or i8) value minus its zero point (of its type; null: none) in
/// int32 (QuantHandlers.cpp).
llvm::Expected<ir::Value *> centered(NodeImporter &ni, ir::Value *v, ir::Value *zp);

/// Unwraps an Expected into `var` or returns its error from the enclosing function.
#define DLC_TRY(var, expr)                                                                         \
  auto var##OrErr = (expr);                                                                        \
  if (!var##OrErr)                                                                                 \
    return var##OrErr.takeError();                                                                 \
  auto &var = *var##OrErr

/// Resolves ONNX auto_pad into explicit pads for a window op.
llvm::Expected<std::vector<int64_t>> resolvePads(NodeImporter &ni, const ir::Shape &inSpatial,
                                                 const ir::Shape &kernel, const ir::Shape &strides,
                                                 const ir::Shape &dilations);

/// Conv(x, w, b?) with the node's window attributes (kernel_shape, strides, dilations,
/// pads, auto_pad, group): Conv's and the quantized convolutions' handlers.
llvm::Expected<ir::Value *> buildConv(NodeImporter &ni, ir::Value *x, ir::Value *w, ir::Value *b);

/// Normalized copy of an axis list (negative axes wrapped).
std::vector<int64_t> wrapAxes(std::vector<int64_t> axes, int64_t rank);

} // namespace dlc::frontend
