//===- EmitterUtils.h - Shared pieces of the CUDA emitters ------*- C++ -*-===//
#pragma once

#include "../Lowering.h"

#include <string>
#include <vector>

namespace dlc::codegen {

/// A constant with one element: emitted as a literal instead of a load.
bool isScalarConstant(const ir::Value *v);
/// The literal (compute type) of a one-element constant.
std::string scalarLiteral(const ir::Value *v);

/// The element-wise expression of node n applied to operand value expressions.
std::string expandExpr(const ir::Node &n, const std::vector<std::string> &vals);

/// Emits index arithmetic for a fixed (static) output shape.
class IndexMapper {
public:
  explicit IndexMapper(ir::Shape shape) : shape_(std::move(shape)) {}
  /// Declares "<prefix><d>" = coordinate d of linear index `linear`.
  void emitCoords(CodeStream &b, const std::string &linear, const std::string &prefix) const;
  /// Linear index into a tensor of shape `in` broadcast (numpy-style) to this shape.
  std::string broadcastIndex(const ir::Shape &in, const std::string &prefix) const;
  /// Sum over d of coord(d) * strides[d] (strides may be 0), as an expression.
  std::string dot(const std::vector<int64_t> &strides, const std::string &prefix) const;
  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }

private:
  ir::Shape shape_;
};

/// "(long long)" product expressions and loops use these.
inline std::string ll(int64_t v) { return literalInt(v); }

/// The standard grid-stride loop header over [0, n) with variable `var`.
std::string gridStrideLoop(const std::string &var, const std::string &n);

} // namespace dlc::codegen
