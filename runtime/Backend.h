//===- Backend.h - The interface the session drives (runtime-internal) ----===//
//
// A backend owns device memory (the arena and the weight region), loads the
// package's modules and executes steps. Nothing here is inference-specific:
// weights are writable device memory, and a schedule is any list of steps, so
// training steps (gradients, optimizer updates) run through the same interface.
//===----------------------------------------------------------------------===//
#pragma once

#include "dlc/runtime/Runtime.h"

namespace dlc::rt {

/// A backend's copy of a model's weight region (host memory for emu, device memory
/// for cuda), shared by the sessions of one model.
class WeightStore {
public:
  virtual ~WeightStore() = default;
};

class Backend {
public:
  virtual ~Backend() = default;
  virtual std::string describe() const = 0;
  virtual DeviceKind kind() const = 0;
  /// Loads modules, allocates the arena, and takes the model's weights (uploading
  /// them if this is the first session of the model on this backend).
  virtual Status prepare(const Model &m) = 0;
  /// Binds a buffer to a caller-owned device address (cuda only).
  virtual Status bindExternal(uint32_t buffer, uint64_t address) {
    (void)buffer;
    (void)address;
    return Status(StatusCode::InvalidArgument, "binding device pointers needs the cuda backend");
  }
  virtual Status setStream(void *stream) {
    (void)stream;
    return Status(StatusCode::InvalidArgument, "streams need the cuda backend");
  }
  virtual Status upload(const pkg::BufRef &dst, const void *src, size_t n) = 0;
  virtual Status download(void *dst, const pkg::BufRef &src, size_t n) = 0;
  virtual Status launch(const pkg::Launch &l, const std::string &node) = 0;
  virtual Status gemm(const pkg::Gemm &g, const std::string &node) = 0;
  virtual Status copy(const pkg::Copy &c) = 0;
  virtual Status memset(const pkg::Memset &m) = 0;
  virtual Status synchronize() = 0;
};

std::unique_ptr<Backend> createEmuBackend(int threads);
/// Fails with StatusCode::Unavailable when libcuda.so.1 or a device is missing.
Result<std::unique_ptr<Backend>> createCudaBackend(int device);

/// GPU resource limits the emu backend enforces (and the cuda backend relies on).
struct ArchLimits {
  const char *arch;
  int maxSmemPerBlockOptin; // static + dynamic, with the opt-in attribute
};
const ArchLimits *archLimits(const std::string &arch);
inline constexpr int kMaxThreadsPerBlock = 1024;
inline constexpr int kMaxStaticSmem = 48 * 1024;
inline constexpr int kRegistersPerBlock = 65536;

/// Checks a launch against the limits of every architecture the package was built
/// for; the message says why a GPU would reject it.
Status checkLaunchLimits(const pkg::PackageFile &p, const pkg::Launch &l);

} // namespace dlc::rt
