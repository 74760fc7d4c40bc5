//===- EmitterUtils.h - Shared pieces of the CUDA emitters ------*- C++ -*-===//
#pragma once

#include "../Lowering.h"

#include <functional>
#include <optional>
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

/// Whether `v`'s memory sits at a multiple of `bytes` for every run: not a graph input
/// or output (a caller may bind those at any element-aligned address) and at such an
/// offset in its buffer (buffers are 256-byte aligned). Kernels that read or write v
/// as it is, several elements at a time, ask this.
bool fixedAligned(Lowering &l, const ir::Value *v, uint64_t bytes);
/// The longest run of lanes (a power of two from maxLanes down to 2) that divides
/// `count` and at which every value of `vs` is fixedAligned to lanes times its element
/// size: the vector a kernel may move per thread along a last dim of `count`; 1 if none.
int64_t vectorRun(Lowering &l, std::initializer_list<const ir::Value *> vs, int64_t count,
                  int64_t maxLanes);
/// `dlc::VecOf<T, lanes>` for the storage type of dt.
std::string vecType(ir::DType dt, int64_t lanes);

/// A value as a strided view of one the current group does not compute (`source`):
/// element c of the value's shape is source's element offset + sum_d c_d strides[d].
struct StridedAccess {
  const ir::Value *source = nullptr;
  int64_t offset = 0;
  std::vector<int64_t> strides;
};
/// `v` as such a view, through the group's metadata ops (reshapes, where the dims they
/// merge are contiguous) and affine index maps (transposes, slices, broadcasts); none
/// where an element-wise op or any other producer computes it.
std::optional<StridedAccess> stridedAccess(Lowering &l, const ir::Value *v);

/// Threads per block for a block-per-row kernel over `len` items: a power of two from
/// 32 to 256.
uint32_t blockFor(int64_t len);
/// a / b rounded up (a >= 0, b > 0).
inline int64_t ceilDiv(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

/// How a block-per-row kernel that reads x as it is (no fused prologue) accesses rows
/// of `len` elements: V elements at a time (16 bytes where len, x's address and
/// `allows(V)` permit), and whether it may write y as it is too (no fused epilogue,
/// x's dtype, aligned to V). None where x is not F32/F16/BF16 or the group computes
/// it.
struct RowAccess {
  /// Vectors per thread the row kernels keep in registers (their R); kernels that
  /// cache two rows (an operand and its gradient) keep half as many of each.
  static constexpr int kCached = 4, kCachedPair = 2;
  int64_t vec = 1;
  bool rawOut = false;
};
std::optional<RowAccess> rowAccess(Lowering &l, const ir::Value *x, const ir::Value *y, int64_t len,
                                   const std::function<bool(int64_t)> &allows = nullptr);

} // namespace dlc::codegen
