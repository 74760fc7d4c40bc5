//===- Runtime.h - Loading and running .dlc packages (C++ API) --*- C++ -*-===//
//
// The runtime library (dlcrt) links no LLVM, ONNX, protobuf or fmt. A Session owns
// one backend (cuda or emu), an arena allocated once and the weights uploaded
// once; run() executes the package's schedule.
//===----------------------------------------------------------------------===//
#pragma once

#include "dlc/package/Package.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dlc::rt {

struct HostTensor {
  pkg::DType dtype = pkg::DType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;

  int64_t numElements() const;
  size_t byteSize() const { return static_cast<size_t>(numElements()) * pkg::dtypeSize(dtype); }
  static HostTensor zeros(pkg::DType dt, std::vector<int64_t> shape);
};

enum class DeviceKind { Auto, Cuda, Emu };
const char *deviceKindName(DeviceKind k);

struct SessionOptions {
  DeviceKind device = DeviceKind::Auto;
  /// Worker threads of the emu backend (0: one per hardware thread).
  int emuThreads = 0;
  /// Record per-step wall time (host-side; on emu it is CPU time, not GPU time).
  bool profile = false;
};

struct StepTime {
  std::string node;
  std::string kind; // launch, gemm, copy, memset
  double microseconds;
};

class Backend;

class Session {
public:
  /// Picks the backend (cuda if libcuda.so.1 loads and a device exists, else emu,
  /// unless forced), allocates the arena and uploads the weights.
  static Result<std::unique_ptr<Session>> create(std::shared_ptr<const pkg::PackageFile> pkg,
                                                 const SessionOptions &opts = {});
  ~Session();

  /// "cuda (NVIDIA A100, sm_80)" or "emu (...)".
  std::string backendDescription() const;
  DeviceKind deviceKind() const;
  const pkg::Package &package() const { return pkg_->meta(); }

  /// Copies a host tensor into the named input; checks name, dtype and shape.
  Status setInput(const std::string &name, const HostTensor &t);
  /// Runs the schedule (all inputs must have been set at least once).
  Status run();
  Result<HostTensor> getOutput(const std::string &name) const;
  const std::vector<StepTime> &lastProfile() const { return profile_; }

private:
  Session() = default;
  std::shared_ptr<const pkg::PackageFile> pkg_;
  std::unique_ptr<Backend> backend_;
  SessionOptions opts_;
  std::vector<bool> inputSet_;
  std::vector<StepTime> profile_;
};

/// .npy files (format 1.0/2.0, little-endian, C order).
Result<HostTensor> readNpy(const std::string &path);
Status writeNpy(const std::string &path, const HostTensor &t);
/// Parses .npy bytes (for tests and fuzzing).
Result<HostTensor> parseNpy(const uint8_t *data, size_t n, const std::string &name);

} // namespace dlc::rt
