//===- BlockRunner.h - Runs the threads of CUDA blocks on one OS thread -*- C++ -*-===//
//
// The emu backend's block scheduler: the threads of a block (or of a whole
// cooperative grid) run on one OS thread, as one fiber per CUDA thread when the
// kernel uses barriers or warp collectives (a round-robin scheduler releases them
// when every live participant has arrived), or as a plain loop otherwise. The
// kernels reach it through the dlc_emu_api callbacks (emuApi()).
//===----------------------------------------------------------------------===//
#pragma once

#include "dlc/package/EmuAbi.h"
#include "dlc/runtime/Runtime.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <sys/mman.h>

namespace dlc::rt {

/// Zero-filled memory reserved on demand and committed as it is touched (a shadow
/// record or a static region that is never used costs nothing).
class Reserve {
public:
  ~Reserve() { release(); }
  void reserve(size_t bytes) {
    if (bytes <= bytes_)
      return;
    release();
    void *p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
      throw std::bad_alloc();
    p_ = static_cast<uint8_t *>(p);
    bytes_ = bytes;
  }
  uint8_t *data() const { return p_; }

private:
  void release() {
    if (p_)
      ::munmap(p_, bytes_);
    p_ = nullptr;
    bytes_ = 0;
  }
  uint8_t *p_ = nullptr;
  size_t bytes_ = 0;
};

/// Each runner's shared memory lies in one mapping of the backend (so that the modules'
/// access callbacks test a single range under --check): per runner, a dynamic area and a
/// static area of kStaticSmemLimit per block of a run.
constexpr size_t kStaticSmemLimit = 48 * 1024;
constexpr size_t kDynamicArea = size_t(64) << 20, kStaticArea = size_t(16) << 20;
constexpr size_t kSharedSlot = kDynamicArea + kStaticArea;

struct BlockLaunch {
  void (*thunk)(const void *);
  const void *params;
  dlc_emu_dim3 block, grid;
  bool fibers;
  dlc_emu_set_thread_fn setThread;
  /// --check: shared-memory initcheck and racecheck.
  bool check = false;
};

class FiberScheduler;

/// One worker thread's runner (the backend keeps one per pool thread).
class BlockRunner {
public:
  using Launch = BlockLaunch;
  BlockRunner();
  ~BlockRunner();
  BlockRunner(BlockRunner &&) noexcept;
  BlockRunner &operator=(BlockRunner &&) noexcept;

  /// This runner's slot (kSharedSlot bytes) of the backend's shared memory.
  void setSharedSlot(uint8_t *slot);
  /// The order threads run in (SessionOptions::emuThreadOrder), seeded per runner.
  void setOrder(SessionOptions::ThreadOrder o, uint64_t seed);
  /// Runs `blocks` consecutive blocks starting at linear block `first` together (more
  /// than one only for cooperative launches, whose blocks meet at grid barriers).
  /// `smemBytes` of dynamic shared memory per block. Returns an error message, or
  /// nullopt on success.
  std::optional<std::string> run(const Launch &l, uint64_t first, unsigned blocks,
                                 size_t smemBytes);

private:
  std::unique_ptr<FiberScheduler> impl_;
};

/// The callbacks the emu modules call (barriers, warp collectives, traps, --check
/// accesses); they act on the runner of the calling OS thread.
const dlc_emu_api &emuApi();

} // namespace dlc::rt
