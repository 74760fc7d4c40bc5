//===- Tensor.h - Tensor types and host tensors -----------------*- C++ -*-===//
#pragma once

#include "dlc/ir/DType.h"

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

namespace dlc::ir {

using Shape = std::vector<int64_t>;
/// The most elements a tensor may have (2^48): past it, a shape is an error, so that
/// byte sizes never overflow.
constexpr int64_t kMaxTensorElements = int64_t{1} << 48;

/// The static type of a value: element type and shape (rank 0 = scalar).
struct TensorType {
  DType dtype = DType::F32;
  Shape shape;

  TensorType() = default;
  TensorType(DType d, Shape s) : dtype(d), shape(std::move(s)) {}

  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  /// Element count; the verifier guarantees it does not overflow for IR values.
  int64_t numElements() const;
  /// Element count, or nullopt if a dimension is negative or the product overflows int64.
  std::optional<int64_t> checkedNumElements() const;
  size_t byteSize() const { return static_cast<size_t>(numElements()) * dtypeSize(dtype); }
  /// "f32[1,3,224,224]"; scalars print as "f32[]".
  std::string str() const;

  bool operator==(const TensorType &o) const { return dtype == o.dtype && shape == o.shape; }
  bool operator!=(const TensorType &o) const { return !(*this == o); }
};

std::string shapeStr(const Shape &s);
/// Row-major strides in elements.
Shape stridesOf(const Shape &s);
int64_t product(const Shape &s);

/// A host tensor: a type plus a shared, 64-byte aligned byte buffer. Copies share the
/// buffer; mutable access copies it first when it is shared (copy on write).
class Tensor {
public:
  Tensor() = default;
  /// Zero-filled tensor of the given type.
  explicit Tensor(TensorType type);
  /// Wraps existing storage (for example a mapped file region); `keepAlive` owns it.
  Tensor(TensorType type, std::shared_ptr<const void> keepAlive, const void *data);

  const TensorType &type() const { return type_; }
  DType dtype() const { return type_.dtype; }
  const Shape &shape() const { return type_.shape; }
  int64_t rank() const { return type_.rank(); }
  int64_t numElements() const { return type_.numElements(); }
  size_t byteSize() const { return type_.byteSize(); }

  const void *raw() const { return data_; }
  void *mutableRaw();
  template <class T> const T *data() const { return static_cast<const T *>(data_); }
  template <class T> T *mutableData() { return static_cast<T *>(mutableRaw()); }

  /// Element i converted to double / int64 (for attribute-like small tensors).
  double getDouble(int64_t i) const;
  int64_t getInt(int64_t i) const;

  /// All elements converted to the compute type CT (float, double, int64_t, uint64_t, bool).
  template <class CT> std::vector<CT> toVector() const;
  /// A tensor of `type` whose elements are `vals` converted (rounded) to type.dtype.
  template <class CT> static Tensor fromVector(const TensorType &type, const std::vector<CT> &vals);

  /// Same data, another shape with the same element count.
  Tensor reshaped(Shape newShape) const;
  bool bitwiseEqual(const Tensor &o) const;

private:
  TensorType type_;
  std::shared_ptr<const void> owner_;
  const void *data_ = nullptr;
  bool ownsBuffer_ = false; // true when data_ points into a buffer this class allocated
};

//===----------------------------------------------------------------------===//
// Element conversion between storage types and compute types.
//===----------------------------------------------------------------------===//

/// Loads element i of a buffer of type `dt` as compute type CT.
template <class CT> CT loadElement(DType dt, const void *base, int64_t i);
/// Stores v (compute type CT) as element i of a buffer of type `dt`, rounding or
/// truncating as a C cast would (saturating float->int to avoid undefined behaviour).
template <class CT> void storeElement(DType dt, void *base, int64_t i, CT v);

/// Calls f(CT{}) with the compute type of dt: float for f32/f16/bf16/float8, double for f64,
/// int64_t for signed integers, uint64_t for unsigned integers, bool for bool.
template <class F> decltype(auto) visitComputeType(DType dt, F &&f) {
  switch (dt) {
  case DType::F32:
  case DType::F16:
  case DType::BF16:
  case DType::F8E4M3:
  case DType::F8E5M2:
    return f(float{});
  case DType::F64:
    return f(double{});
  case DType::I64:
  case DType::I32:
  case DType::I16:
  case DType::I8:
    return f(int64_t{});
  case DType::U8:
  case DType::U16:
  case DType::U32:
  case DType::U64:
    return f(uint64_t{});
  case DType::Bool:
    return f(bool{});
  }
  return f(float{});
}

} // namespace dlc::ir
