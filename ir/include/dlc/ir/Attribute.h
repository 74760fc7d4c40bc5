//===- Attribute.h - Node attributes ----------------------------*- C++ -*-===//
#pragma once

#include "dlc/ir/Tensor.h"

#include <map>
#include <string>
#include <variant>
#include <vector>

namespace dlc::ir {

enum class AttrKind : uint8_t { Int, Float, String, Ints, Floats, Strings, Tensor };
std::string_view attrKindName(AttrKind k);

/// An attribute value. Floats are float32, as in ONNX.
class Attribute {
public:
  using Storage = std::variant<int64_t, float, std::string, std::vector<int64_t>,
                               std::vector<float>, std::vector<std::string>, Tensor>;

  Attribute() : v_(int64_t{0}) {}
  Attribute(int64_t i) : v_(i) {}
  Attribute(int i) : v_(int64_t{i}) {}
  Attribute(float f) : v_(f) {}
  Attribute(std::string s) : v_(std::move(s)) {}
  Attribute(const char *s) : v_(std::string(s)) {}
  Attribute(std::vector<int64_t> v) : v_(std::move(v)) {}
  Attribute(std::vector<float> v) : v_(std::move(v)) {}
  Attribute(std::vector<std::string> v) : v_(std::move(v)) {}
  Attribute(Tensor t) : v_(std::move(t)) {}

  AttrKind kind() const { return static_cast<AttrKind>(v_.index()); }
  int64_t i() const { return std::get<int64_t>(v_); }
  float f() const { return std::get<float>(v_); }
  const std::string &s() const { return std::get<std::string>(v_); }
  const std::vector<int64_t> &ints() const { return std::get<std::vector<int64_t>>(v_); }
  const std::vector<float> &floats() const { return std::get<std::vector<float>>(v_); }
  const std::vector<std::string> &strings() const { return std::get<std::vector<std::string>>(v_); }
  const Tensor &tensor() const { return std::get<Tensor>(v_); }

  /// Structural equality (tensors compared bitwise).
  bool operator==(const Attribute &o) const;
  bool operator!=(const Attribute &o) const { return !(*this == o); }

private:
  Storage v_;
};

/// Attributes are kept sorted by name so printing and hashing are deterministic.
using AttrMap = std::map<std::string, Attribute, std::less<>>;

} // namespace dlc::ir
