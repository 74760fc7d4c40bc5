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

/// The element-wise expression of node n (OpDef::cudaExpr) applied to operand value
/// expressions; an error when a required operand has no value.
llvm::Expected<std::string> expandExpr(const ir::Node &n, const std::vector<std::string> &vals,
                                       const std::string &index);

/// dst (shape `dims`) = x[base + sum_d coord_d * strides[d]]: the copy_strided kernel
/// (splits, materialized broadcasts).
llvm::Error emitStridedCopy(Lowering &l, const ir::Node &n, const ir::Value *x, int64_t base,
                            BufferRef dst, uint64_t dstBytes, const ir::Shape &dims,
                            const std::vector<int64_t> &strides);

} // namespace dlc::codegen
