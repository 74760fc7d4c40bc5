//===- Status.h - Errors as values, without LLVM -----------------*- C++ -*-===//
//
// The package and runtime libraries do not link LLVM, so they use this small
// Status/Result pair instead of llvm::Error/Expected.
//===----------------------------------------------------------------------===//
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace dlc {

enum class StatusCode : int {
  Ok = 0,
  InvalidArgument = 1, // bad input from the caller (names, shapes, dtypes)
  InvalidPackage = 2,  // malformed or corrupted .dlc file
  Unavailable = 3,     // a backend cannot be used here (no driver, no device)
  LaunchFailure = 4,   // a launch that a GPU would reject, or a failing kernel
  Internal = 5,
  IoError = 6,
  DataError = 7, // the input data is invalid for the model (an index out of range)
};

class [[nodiscard]] Status {
public:
  Status() = default;
  Status(StatusCode c, std::string msg) : code_(c), msg_(std::move(msg)) {}
  static Status ok() { return {}; }
  bool isOk() const { return code_ == StatusCode::Ok; }
  explicit operator bool() const { return !isOk(); } // true when there is an error
  StatusCode code() const { return code_; }
  const std::string &message() const { return msg_; }

private:
  StatusCode code_ = StatusCode::Ok;
  std::string msg_;
};

template <class T> class [[nodiscard]] Result {
public:
  Result(T v) : v_(std::move(v)) {}
  Result(Status s) : v_(std::move(s)) {}
  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T &operator*() { return std::get<0>(v_); }
  const T &operator*() const { return std::get<0>(v_); }
  T *operator->() { return &std::get<0>(v_); }
  const T *operator->() const { return &std::get<0>(v_); }
  const Status &status() const {
    static const Status okStatus;
    return ok() ? okStatus : std::get<1>(v_);
  }
  Status takeStatus() { return ok() ? Status() : std::move(std::get<1>(v_)); }

private:
  std::variant<T, Status> v_;
};

#define DLC_RETURN_IF_ERROR(expr)                                                                  \
  do {                                                                                             \
    if (::dlc::Status _s = (expr))                                                                 \
      return _s;                                                                                   \
  } while (0)

} // namespace dlc
