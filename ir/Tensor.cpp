#include "dlc/ir/Tensor.h"

#include <cassert>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>

namespace dlc::ir {

int64_t product(const Shape &s) {
  int64_t n = 1;
  for (int64_t d : s)
    n *= d;
  return n;
}

int64_t TensorType::numElements() const {
  return product(shape);
}

std::optional<int64_t> TensorType::checkedNumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0)
      return std::nullopt;
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d)
      return std::nullopt;
    n *= d;
  }
  return n;
}

std::string shapeStr(const Shape &s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i)
      r += ",";
    r += std::to_string(s[i]);
  }
  return r + "]";
}

std::string TensorType::str() const {
  return std::string(dtypeName(dtype)) + shapeStr(shape);
}

Shape stridesOf(const Shape &s) {
  Shape st(s.size(), 1);
  for (int64_t i = static_cast<int64_t>(s.size()) - 2; i >= 0; --i)
    st[i] = st[i + 1] * s[i + 1];
  return st;
}

static std::shared_ptr<void> allocateAligned(size_t bytes) {
  size_t rounded = (bytes + 63) / 64 * 64;
  void *p = std::aligned_alloc(64, rounded ? rounded : 64);
  if (!p)
    throw std::bad_alloc();
  std::memset(p, 0, rounded ? rounded : 64);
  return std::shared_ptr<void>(p, [](void *q) { std::free(q); });
}

Tensor::Tensor(TensorType type) : type_(std::move(type)) {
  auto buf = allocateAligned(type_.byteSize());
  data_ = buf.get();
  owner_ = std::move(buf);
  ownsBuffer_ = true;
}

Tensor::Tensor(TensorType type, std::shared_ptr<const void> keepAlive, const void *data)
    : type_(std::move(type)), owner_(std::move(keepAlive)), data_(data) {}

void *Tensor::mutableRaw() {
  if (!ownsBuffer_ || owner_.use_count() > 1) {
    auto buf = allocateAligned(byteSize());
    if (data_)
      std::memcpy(buf.get(), data_, byteSize());
    data_ = buf.get();
    owner_ = std::move(buf);
    ownsBuffer_ = true;
  }
  return const_cast<void *>(data_);
}

double Tensor::getDouble(int64_t i) const {
  return loadElement<double>(dtype(), data_, i);
}
int64_t Tensor::getInt(int64_t i) const {
  if (isFloat(dtype()))
    return static_cast<int64_t>(loadElement<double>(dtype(), data_, i));
  if (isUnsignedInt(dtype()))
    return static_cast<int64_t>(loadElement<uint64_t>(dtype(), data_, i));
  return loadElement<int64_t>(dtype(), data_, i);
}

Tensor Tensor::reshaped(Shape newShape) const {
  Tensor t = *this;
  assert(product(newShape) == numElements());
  t.type_.shape = std::move(newShape);
  return t;
}

bool Tensor::bitwiseEqual(const Tensor &o) const {
  return type_ == o.type_ && std::memcmp(data_, o.data_, byteSize()) == 0;
}

//===----------------------------------------------------------------------===//
// Conversions
//===----------------------------------------------------------------------===//

namespace {
template <class S> S rd(const void *base, int64_t i) {
  S v;
  std::memcpy(&v, static_cast<const char *>(base) + i * sizeof(S), sizeof(S));
  return v;
}
template <class S> void wr(void *base, int64_t i, S v) {
  std::memcpy(static_cast<char *>(base) + i * sizeof(S), &v, sizeof(S));
}

/// Float to integer conversion without undefined behaviour: NaN -> 0, saturate.
template <class I, class F> I floatToInt(F v) {
  if (std::isnan(v))
    return 0;
  if (v <= static_cast<F>(std::numeric_limits<I>::min()))
    return std::numeric_limits<I>::min();
  if (v >= static_cast<F>(std::numeric_limits<I>::max()))
    return std::numeric_limits<I>::max();
  return static_cast<I>(v);
}

template <class S, class CT> S toStorage(CT v) {
  if constexpr (std::is_same_v<S, bool>)
    return v != CT(0);
  else if constexpr (std::is_integral_v<S> && std::is_floating_point_v<CT>)
    return floatToInt<S>(v);
  else
    return static_cast<S>(v);
}
} // namespace

template <class CT> CT loadElement(DType dt, const void *base, int64_t i) {
  switch (dt) {
  case DType::F32:
    return static_cast<CT>(rd<float>(base, i));
  case DType::F16:
    return static_cast<CT>(halfToFloat(rd<uint16_t>(base, i)));
  case DType::BF16:
    return static_cast<CT>(bf16ToFloat(rd<uint16_t>(base, i)));
  case DType::F64:
    return static_cast<CT>(rd<double>(base, i));
  case DType::I64:
    return static_cast<CT>(rd<int64_t>(base, i));
  case DType::I32:
    return static_cast<CT>(rd<int32_t>(base, i));
  case DType::I16:
    return static_cast<CT>(rd<int16_t>(base, i));
  case DType::I8:
    return static_cast<CT>(rd<int8_t>(base, i));
  case DType::U8:
    return static_cast<CT>(rd<uint8_t>(base, i));
  case DType::U16:
    return static_cast<CT>(rd<uint16_t>(base, i));
  case DType::U32:
    return static_cast<CT>(rd<uint32_t>(base, i));
  case DType::U64:
    return static_cast<CT>(rd<uint64_t>(base, i));
  case DType::Bool:
    return static_cast<CT>(rd<uint8_t>(base, i) != 0);
  case DType::F8E4M3:
  case DType::F8E5M2:
    return static_cast<CT>(f8ToFloat(rd<uint8_t>(base, i), dt == DType::F8E5M2));
  }
  return CT{};
}

template <class CT> void storeElement(DType dt, void *base, int64_t i, CT v) {
  switch (dt) {
  case DType::F32:
    wr<float>(base, i, static_cast<float>(v));
    return;
  case DType::F16:
    wr<uint16_t>(base, i, floatToHalf(static_cast<float>(v)));
    return;
  case DType::BF16:
    wr<uint16_t>(base, i, floatToBF16(static_cast<float>(v)));
    return;
  case DType::F64:
    wr<double>(base, i, static_cast<double>(v));
    return;
  case DType::I64:
    wr<int64_t>(base, i, toStorage<int64_t>(v));
    return;
  case DType::I32:
    wr<int32_t>(base, i, toStorage<int32_t>(v));
    return;
  case DType::I16:
    wr<int16_t>(base, i, toStorage<int16_t>(v));
    return;
  case DType::I8:
    wr<int8_t>(base, i, toStorage<int8_t>(v));
    return;
  case DType::U8:
    wr<uint8_t>(base, i, toStorage<uint8_t>(v));
    return;
  case DType::U16:
    wr<uint16_t>(base, i, toStorage<uint16_t>(v));
    return;
  case DType::U32:
    wr<uint32_t>(base, i, toStorage<uint32_t>(v));
    return;
  case DType::U64:
    wr<uint64_t>(base, i, toStorage<uint64_t>(v));
    return;
  case DType::Bool:
    wr<uint8_t>(base, i, static_cast<uint8_t>(v != CT(0)));
    return;
  case DType::F8E4M3:
  case DType::F8E5M2:
    wr<uint8_t>(base, i, floatToF8(static_cast<float>(v), dt == DType::F8E5M2));
    return;
  }
}

template <class CT> std::vector<CT> Tensor::toVector() const {
  int64_t n = numElements();
  std::vector<CT> out(static_cast<size_t>(n));
  if constexpr (std::is_same_v<CT, float>) {
    if (dtype() == DType::F32) {
      if (n)
        std::memcpy(out.data(), data_, n * sizeof(float));
      return out;
    }
  }
  for (int64_t i = 0; i < n; ++i)
    out[i] = loadElement<CT>(dtype(), data_, i);
  return out;
}

template <class CT> Tensor Tensor::fromVector(const TensorType &type, const std::vector<CT> &vals) {
  Tensor t(type);
  assert(static_cast<int64_t>(vals.size()) == t.numElements());
  void *p = t.mutableRaw();
  if constexpr (std::is_same_v<CT, float>) {
    if (type.dtype == DType::F32) {
      std::memcpy(p, vals.data(), vals.size() * sizeof(float));
      return t;
    }
  }
  for (size_t i = 0; i < vals.size(); ++i)
    storeElement<CT>(type.dtype, p, static_cast<int64_t>(i), vals[i]);
  return t;
}

#define DLC_INSTANTIATE(CT)                                                                        \
  template CT loadElement<CT>(DType, const void *, int64_t);                                       \
  template void storeElement<CT>(DType, void *, int64_t, CT);                                      \
  template std::vector<CT> Tensor::toVector<CT>() const;                                           \
  template Tensor Tensor::fromVector<CT>(const TensorType &, const std::vector<CT> &);
DLC_INSTANTIATE(float)
DLC_INSTANTIATE(double)
DLC_INSTANTIATE(int64_t)
DLC_INSTANTIATE(uint64_t)
DLC_INSTANTIATE(bool)
#undef DLC_INSTANTIATE

} // namespace dlc::ir
