//===- Backend.h - The interface the session drives (runtime-internal) ----===//
//
// A backend owns device memory (the arena and the weight region), loads the
// package's modules and executes steps. Nothing here is inference-specific:
// weights are writable device memory, and a schedule is any list of steps, so
// training steps (gradients, optimizer updates) run through the same interface.
//===----------------------------------------------------------------------===//
#pragma once

#include "dlc/runtime/Runtime.h"

#include <algorithm>
#include <cstring>
#include <functional>

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
  /// The compute capability (major * 10 + minor) whose per-architecture steps run
  /// here: the GPU's, or the one the emu backend plans for.
  virtual int computeCapability() const = 0;
  /// Loads modules, allocates the arena, and takes the model's weights (uploading
  /// them if this is the first session of the model on this backend).
  virtual Status prepare(const Model &m) = 0;
  /// The buffer table that BufRefs index from now on: the package's (schedule 0) or
  /// a shape variant's (schedule i + 1 for pkg::Package::variants()[i]). The cuda
  /// backend keeps a CUDA graph per schedule.
  void useSchedule(const flatbuffers::Vector<flatbuffers::Offset<pkg::Buffer>> *buffers,
                   size_t schedule) {
    buffers_ = buffers;
    schedule_ = schedule;
  }
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
  /// Whether this device holds the whole grid of cooperative launch `l` at once (a
  /// grid barrier needs it); `why` says how many blocks fit. Emu runs a cooperative
  /// grid on one thread: always.
  virtual Status fitsResident(const pkg::Launch &l, bool &fits, std::string &why) {
    (void)l;
    fits = true;
    why.clear();
    return Status();
  }
  /// Runs a GEMM step. `epilogueApplied` comes back false when the backend ran it
  /// without its bias/activation (no algorithm applies them); the session then runs
  /// the step's fallback launch.
  virtual Status gemm(const pkg::Gemm &g, const std::string &node, bool &epilogueApplied) = 0;
  /// A vendor convolution (pkg::CudnnConv): cuDNN on a GPU; emu computes it on the
  /// host as cuDNN defines it (FP32 sums, the result rounded once), for tests of the
  /// vendor tactics' schedules.
  virtual Status cudnnConv(const pkg::CudnnConv &c, const std::string &node) = 0;
  /// A vendor attention (pkg::CudnnSdpa), likewise: emu computes it on the host (FP32
  /// scores and softmax, the probabilities rounded to the I/O type, FP32 sums, the output
  /// rounded once).
  virtual Status cudnnSdpa(const pkg::CudnnSdpa &a, const std::string &node) = 0;
  /// Tactics: whether this backend runs alternatives of kind `k`; `why` says why not.
  virtual bool runsTactic(pkg::TacticKind k, std::string &why) {
    why.clear();
    return k == pkg::TacticKind::Dlc || k == pkg::TacticKind::Cudnn ||
           k == pkg::TacticKind::CublasLt;
  }
  /// Tactics: what their timings depend on (GPU, driver and library versions), the
  /// tactics cache's key; "" where tactics are not timed (emu).
  virtual std::string tacticKey() { return ""; }
  /// Tactics: the time of one `issue` (an alternative's steps) in microseconds, on
  /// the device's clock: one warm-up call, then the mean of `reps`.
  virtual Status timeIssue(const std::function<Status()> &issue, int reps, double &micros) {
    (void)issue;
    (void)reps;
    micros = 0;
    return Status(StatusCode::Unavailable, "tactics are timed on a GPU");
  }
  virtual Status copy(const pkg::Copy &c) = 0;
  /// Data parallelism: packs the bucket's gradients into its staging buffer and
  /// starts averaging it over the ranks beside the steps that follow (emu: a thread
  /// of its own; cuda: a second stream); waitCollective orders the steps after it
  /// behind the average. With one rank, the pack is all. `local`: this rank alone
  /// (rank 0 evaluating): no communication, as if every rank held the same values.
  virtual Status collective(const pkg::Collective &a, bool local) = 0;
  virtual Status waitCollective(const pkg::CollectiveWait &w) = 0;
  /// Overwrites `bytes` at `r` on every rank with rank `root`'s (the parameters at
  /// the start of a data-parallel run).
  virtual Status broadcast(const pkg::BufRef &r, size_t bytes, int root) = 0;
  virtual CollectiveStats collectiveStats() const { return {}; }
  virtual Status memset(const pkg::Memset &m) = 0;
  virtual Status synchronize() = 0;
  /// Runs a whole schedule: `issue` issues its steps in order. The default calls it;
  /// the cuda backend captures it into a CUDA graph once and replays that after.
  virtual Status execute(const std::function<Status()> &issue) { return issue(); }
  /// A note for the user (a fallback the backend took), or "".
  virtual std::string note() const { return ""; }

protected:
  const pkg::Buffer *bufferAt(uint32_t i) const { return buffers_->Get(i); }
  const flatbuffers::Vector<flatbuffers::Offset<pkg::Buffer>> *buffers_ = nullptr;
  size_t schedule_ = 0;
};

/// The emu backend: opts.emuThreads workers (0: one per hardware thread);
/// opts.emuComputeCapability selects which architecture's steps it runs (0: the
/// newest in the package).
std::unique_ptr<Backend> createEmuBackend(const SessionOptions &opts);
/// Fails with StatusCode::Unavailable when libcuda.so.1 or a device is missing.
Result<std::unique_ptr<Backend>> createCudaBackend(const SessionOptions &opts);

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

/// Copies a launch's parameter buffer into `buf` (8-byte aligned) and writes the
/// device address of each relocation, as `address(ref)` gives it.
template <class AddressFn>
void resolveParams(const pkg::Launch &l, std::vector<uint64_t> &buf, AddressFn address) {
  size_t n = l.params() ? l.params()->size() : 0;
  buf.assign((n + 7) / 8, 0);
  if (n)
    std::copy(l.params()->begin(), l.params()->end(), reinterpret_cast<uint8_t *>(buf.data()));
  // Relocations are 8-byte aligned and inside the buffer (the package reader checks).
  if (l.relocs())
    for (const pkg::Reloc *r : *l.relocs())
      if (r->offset() / 8 < buf.size())
        buf[r->offset() / 8] = static_cast<uint64_t>(address(r->ref()));
}

using pkg::archNumber;
using pkg::chooseStepArch;
using pkg::stepArchs;
using pkg::stepRunsOn;

} // namespace dlc::rt
