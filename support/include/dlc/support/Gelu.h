//===- Gelu.h - GELU's tanh approximation on the host -----------*- C++ -*-===//
//
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), ONNX Gelu's approximate="tanh"
// (PyTorch's gelu(approximate='tanh')), computed in T: the reference interpreter's
// Gelu and emu's cuBLASLt GELU epilogue. The kernel library computes the same in
// device code (gelu_ in dlc_device.cuh); autodiff's gradient uses the constants.
//===----------------------------------------------------------------------===//
#pragma once

#include <cmath>

namespace dlc {

/// The coefficient of x^3.
inline constexpr double kGeluTanhCubic = 0.044715;
/// sqrt(2 / pi).
inline const double kGeluTanhScale = std::sqrt(2.0 / M_PI);

template <class T> T geluTanh(T x) {
  const T c = std::sqrt(T(2) / T(M_PI));
  return T(0.5) * x * (T(1) + std::tanh(c * (x + T(kGeluTanhCubic) * x * x * x)));
}

} // namespace dlc
