//===- Window.h - Sliding-window geometry for conv and pooling --*- C++ -*-===//
#pragma once

#include "OpUtils.h"

namespace dlc::ir::ops {

/// Spatial geometry of a convolution or pooling window over `spatial` dims.
/// Reference kernels normalize to exactly 3 spatial dims (leading dims of size 1),
/// so one loop nest serves 1-D, 2-D and 3-D.
struct Window {
  int64_t spatial = 0;
  Shape kernel, strides, dilations, padBegin, padEnd;
  bool ceilMode = false;

  /// Reads kernel (from `kernel` when non-empty, else the node's kernel_shape),
  /// strides, dilations and pads; checks lengths and values.
  static llvm::Expected<Window> fromNode(const Node &n, int64_t spatial, const Shape &kernel);

  /// Output size along dim i for input size `in` (pooling/conv formula).
  int64_t outSize(int64_t i, int64_t in) const;
  llvm::Expected<Shape> outShape(const Shape &inSpatial) const;

  /// The same window padded to 3 spatial dims.
  Window as3D() const;

  /// The attributes of the ConvTranspose that maps outputs of `outSpatial` back to
  /// inputs of `inSpatial` through this window (the gradient of a convolution or an
  /// average pool): strides, dilations, pads and the output_padding that recovers
  /// the input size the stride rounded away. An error when no ConvTranspose can (a
  /// ceil-mode window reaching past the padding).
  llvm::Expected<AttrMap> transposedAttrs(const Shape &inSpatial, const Shape &outSpatial) const;
};

/// Returns the last `k` dims of s, left-padded with 1 to 3 dims.
Shape spatial3D(const Shape &s, int64_t k);

} // namespace dlc::ir::ops
