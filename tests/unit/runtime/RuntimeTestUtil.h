//===- RuntimeTestUtil.h - Hand-built packages for runtime tests -*- C++ -*-===//
#pragma once

#include "Toolchain.h"
#include "dlc/package/Package.h"
#include "dlc/runtime/Runtime.h"

#include <cstdlib>
#include <functional>
#include <gtest/gtest.h>
#include <optional>
#include <string>
#include <vector>

namespace dlc::test {

/// One kernel launch of a hand-written package.
struct TestLaunch {
  std::string kernel;
  std::vector<uint32_t> grid{1, 1, 1}, block{32, 1, 1};
  uint32_t dynamicSmem = 0;
  std::vector<uint32_t> pointerArgs; // buffer indices
  bool needsSync = true;
  bool cooperative = false;
};

/// A package over hand-written CUDA source: buffers (arena, f32) named by the test,
/// the given launches, inputs/outputs = buffers. `gpuTargets` are compiled with NVRTC
/// (their ptxas resources are recorded) in addition to emu.
std::vector<uint8_t> buildTestPackage(const std::string &cudaSource,
                                      const std::vector<std::pair<std::string, int64_t>> &buffers,
                                      const std::vector<TestLaunch> &launches,
                                      const std::vector<std::string> &gpuTargets = {});

/// A package of textual IR compiled for emu only, after the graph passes `passes`
/// ("fuse", ...; none when null); empty, with a test failure, when it does not parse
/// or compile.
std::vector<uint8_t> compileIRForEmu(const char *text, const char *name,
                                     const char *passes = nullptr);

/// A shape-range package (dlc compile --input-shape with a range): `textAt(v)` is the
/// textual IR with the ranged dimension of `input` (axis `axis`) equal to v, for every
/// v in [min, max]; the opt shape is `max`. Each point goes through the default -O2
/// pipeline, then all are compiled for `targets` into one package.
std::vector<uint8_t> compileShapeRangeIR(const std::function<std::string(int64_t)> &textAt,
                                         const std::string &input, uint32_t axis, int64_t min,
                                         int64_t max,
                                         const std::vector<std::string> &targets = {"emu"});

/// Runs a package on emu with the given f32 inputs; returns the session error or the
/// named f32 outputs.
Result<std::vector<std::vector<float>>> runOnEmu(const std::vector<uint8_t> &pkg,
                                                 const std::vector<std::vector<float>> &inputs,
                                                 const std::vector<std::string> &outputs,
                                                 const rt::SessionOptions &options = {});

/// Sets an environment variable for a scope (tests run one at a time in a process).
class ScopedEnv {
public:
  ScopedEnv(const char *name, const char *value) : name_(name) {
    if (const char *old = std::getenv(name))
      old_ = old;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_)
      ::setenv(name_.c_str(), old_->c_str(), 1);
    else
      ::unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv &) = delete;
  ScopedEnv &operator=(const ScopedEnv &) = delete;

private:
  std::string name_;
  std::optional<std::string> old_;
};

} // namespace dlc::test
