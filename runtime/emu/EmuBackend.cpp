//===- EmuBackend.cpp - Runs CUDA kernels compiled for the host ------------===//
//
// The package's emu module is the generated CUDA source compiled by the host
// compiler with dlc_emu_prelude.h. It is loaded from memory (memfd + dlopen).
// Blocks of a grid are spread over a thread pool; within a block, kernels that use
// barriers or warp collectives run one fiber per CUDA thread (Boost.Context), and
// a round-robin scheduler releases __syncthreads and warp-level exchanges when
// every live participant has arrived. Barrier-free kernels run their threads as
// a plain loop. GEMM steps run on a CBLAS loaded at run time (HostBlas.h).
//===----------------------------------------------------------------------===//
#include "../Backend.h"
#include "HostBlas.h"
#include "ThreadPool.h"

#include "dlc/package/Half.h"
#include "dlc/runtime/EmuAbi.h"

#include <boost/context/fiber.hpp>
#include <boost/context/stack_context.hpp>
#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <csetjmp>
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <type_traits>

#if defined(BOOST_USE_UCONTEXT)
// The sanitizer build (-DDLC_SANITIZE=ON) uses Boost.Context's ucontext fibers, whose
// switches tell AddressSanitizer about the change of stack (BOOST_USE_ASAN); with the
// assembly fibers ASan sees unknown stacks and reports false overflows. Debian ships
// the library built for the assembly fibers only, so the per-thread "running fiber"
// record that the ucontext fibers declare is defined here: lazily, the thread's own
// context first.
namespace boost::context::detail {
fiber_activation_record *&fiber_activation_record::current() noexcept {
  thread_local std::unique_ptr<fiber_activation_record> threadContext;
  thread_local fiber_activation_record *running = nullptr;
  if (!running) {
    threadContext.reset(new fiber_activation_record());
    running = threadContext.get();
  }
  return running;
}
} // namespace boost::context::detail
#endif

namespace dlc::rt {
namespace {

namespace bctx = boost::context;

//===----------------------------------------------------------------------===//
// Block scheduler
//===----------------------------------------------------------------------===//

struct EmuThread {
  enum State { Ready, AtBlockBarrier, AtWarpBarrier, AtGridBarrier, Done, Aborted };
  dlc_emu_thread t{};
  bctx::fiber fiber;
  bctx::fiber caller;
  State state = Ready;
  unsigned long long slot = 0, result = 0;
  int src = 0;
  unsigned mask = 0;
  bool ballot = false;
  const void *site = nullptr; // the __syncthreads it waits at
};

class BlockRunner;
thread_local BlockRunner *tlsRunner = nullptr;

/// Zero-filled memory reserved on demand and committed as it is touched (a shadow
/// record or a static region that is never used costs nothing).
class Reserve {
public:
  ~Reserve() { release(); }
  void reserve(size_t bytes) {
    if (bytes <= bytes_)
      return;
    release();
    void *p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
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

/// Fiber stacks: fixed size, a guard page below each, recycled (one pool per
/// runner, so per worker thread). A StackAllocator in Boost.Context's sense.
class StackPool {
public:
  explicit StackPool(size_t size) : size_(size) {}
  ~StackPool() {
    for (void *p : free_)
      ::munmap(p, size_ + guard());
  }
  StackPool(const StackPool &) = delete;
  StackPool &operator=(const StackPool &) = delete;

  /// What bctx::fiber copies: a reference to the pool.
  struct Allocator {
    StackPool *pool;
    bctx::stack_context allocate() { return pool->allocate(); }
    void deallocate(bctx::stack_context &sc) noexcept { pool->deallocate(sc); }
  };
  Allocator allocator() { return Allocator{this}; }

private:
  static size_t guard() { return static_cast<size_t>(::sysconf(_SC_PAGESIZE)); }
  bctx::stack_context allocate() {
    void *base;
    if (!free_.empty()) {
      base = free_.back();
      free_.pop_back();
    } else {
      base = ::mmap(nullptr, size_ + guard(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (base == MAP_FAILED)
        throw std::bad_alloc();
      ::mprotect(base, guard(), PROT_NONE); // overflow faults instead of corrupting
    }
    bctx::stack_context sc;
    sc.size = size_;
    sc.sp = static_cast<char *>(base) + guard() + size_;
    return sc;
  }
  void deallocate(bctx::stack_context &sc) noexcept {
    free_.push_back(static_cast<char *>(sc.sp) - size_ - guard());
  }
  size_t size_;
  std::vector<void *> free_;
};

/// Runs the threads of one block, or of a whole cooperative grid, on one OS thread.
class BlockRunner {
public:
  BlockRunner() : stacks_(128 * 1024) {}
  /// This runner's slot (kSharedSlot bytes) of the backend's shared memory.
  void setSharedSlot(uint8_t *slot) {
    dynamic_ = slot;
    statics_ = slot + kDynamicArea;
  }
  void setOrder(SessionOptions::ThreadOrder o, uint64_t seed) {
    order_ = o;
    rng_ = seed | 1;
  }

  struct Launch {
    void (*thunk)(const void *);
    const void *params;
    dlc_emu_dim3 block, grid;
    bool fibers;
    dlc_emu_set_thread_fn setThread;
    /// --check: shared-memory initcheck and racecheck.
    bool check = false;
  };

  /// Runs `blocks` consecutive blocks starting at linear block `first` together (more
  /// than one only for cooperative launches, whose blocks meet at grid barriers).
  /// `smem` holds `smemBytes` of dynamic shared memory per block. Returns an error
  /// message, or nullopt on success.
  std::optional<std::string> run(const Launch &l, uint64_t first, unsigned blocks, size_t smemBytes) {
    uint8_t *smem = dynamic_;
    unsigned perBlock = l.block.x * l.block.y * l.block.z, n = perBlock * blocks;
    threads_.resize(n);
    perBlock_ = perBlock;
    blocks_ = blocks;
    error_.reset();
    if (smemBytes * blocks > kDynamicArea || size_t(blocks) * kStaticSmemLimit > kStaticArea)
      return "the emu backend has no room for the shared memory of " + std::to_string(blocks) +
             " co-resident blocks of " + std::to_string(smemBytes) + " bytes";
    fibers_ = l.fibers;
    tlsRunner = this;
    for (unsigned i = 0; i < n; ++i) {
      EmuThread &th = threads_[i];
      unsigned t = i % perBlock;
      uint64_t b = first + i / perBlock;
      th.t.threadIdx = {t % l.block.x, (t / l.block.x) % l.block.y, t / (l.block.x * l.block.y)};
      th.t.blockIdx = {static_cast<unsigned>(b % l.grid.x), static_cast<unsigned>((b / l.grid.x) % l.grid.y),
                       static_cast<unsigned>(b / (uint64_t(l.grid.x) * l.grid.y))};
      th.t.blockDim = l.block;
      th.t.gridDim = l.grid;
      th.t.dynamicSmem = smem + (i / perBlock) * smemBytes;
      th.t.scheduler = this;
      th.state = EmuThread::Ready;
    }
    beginRun(l, smem, smemBytes);
    makeOrder(n);
    if (!l.fibers) {
      for (unsigned k = 0; k < n && !error_; ++k) {
        current_ = &threads_[perm_[k]];
        l.setThread(&current_->t);
        // A failing thread (a trap, a misaligned access) jumps back here: the code
        // after the fault must not run (a misaligned vector load would fault the host).
        if (setjmp(escape_) == 0)
          l.thunk(l.params);
      }
      return error_;
    }
    for (unsigned i = 0; i < n; ++i) {
      EmuThread &th = threads_[i];
      th.fiber = bctx::fiber(std::allocator_arg, stacks_.allocator(), [this, &th, &l](bctx::fiber &&c) {
        // The ucontext fibers (sanitizer build) enter a never-started fiber to destroy
        // it; the kernel thread must not run then.
        if (killing_)
          return std::move(c);
        th.caller = std::move(c);
        l.thunk(l.params);
        th.state = EmuThread::Done;
        return std::move(th.caller);
      });
    }
    for (;;) {
      for (unsigned k = 0; k < n; ++k) {
        EmuThread &th = threads_[perm_[k]];
        if (th.state != EmuThread::Ready)
          continue;
        current_ = &th;
        l.setThread(&th.t);
        th.fiber = std::move(th.fiber).resume();
        if (th.state == EmuThread::Aborted) {
          killAll();
          return error_;
        }
      }
      bool allDone = true, allAtGrid = true, anyAtGrid = false;
      for (const EmuThread &th : threads_) {
        allDone &= th.state == EmuThread::Done;
        allAtGrid &= th.state == EmuThread::Done || th.state == EmuThread::AtGridBarrier;
        anyAtGrid |= th.state == EmuThread::AtGridBarrier;
      }
      if (allDone)
        return std::nullopt;
      bool released = false;
      if (allAtGrid && anyAtGrid) {
        for (EmuThread &th : threads_)
          if (th.state == EmuThread::AtGridBarrier)
            th.state = EmuThread::Ready;
        for (uint32_t &e : blockEpoch_)
          ++e;
        released = true;
      }
      for (unsigned b = 0; b < blocks && !released; ++b)
        released |= releaseBlock(b);
      for (unsigned w = 0; w < blocks * warpsPerBlock() && !released && !error_; ++w)
        released |= releaseWarp(w);
      if (error_) {
        killAll();
        return error_;
      }
      if (!released) {
        error_ = "deadlock: threads of a block wait at different barriers (divergent "
                 "__syncthreads or warp collective)";
        killAll();
        return error_;
      }
    }
  }

  // Callbacks from kernels (through dlc_emu_api), acting on the current thread.
  void syncthreads(const void *site) {
    if (!fibers_)
      return fail("kernel uses __syncthreads but was compiled as barrier-free");
    current_->site = site;
    block(EmuThread::AtBlockBarrier);
  }
  void gridsync() {
    if (!fibers_)
      return fail("kernel uses a grid barrier but was compiled as barrier-free");
    block(EmuThread::AtGridBarrier);
  }
  unsigned long long exchange(unsigned long long v, int src, unsigned mask, bool ballot) {
    if (!fibers_) {
      fail("kernel uses a warp collective but was compiled as barrier-free");
      return v;
    }
    current_->slot = v;
    current_->src = src;
    current_->mask = mask;
    current_->ballot = ballot;
    block(EmuThread::AtWarpBarrier);
    return current_->result;
  }
  /// A load or store by the current thread inside a checked range (--check): reports a
  /// read of bytes no thread of the block has written, and two threads' conflicting
  /// accesses with no barrier between them, as compute-sanitizer's initcheck and
  /// racecheck do.
  void access(uintptr_t p, uint64_t n, bool write) {
    unsigned me = static_cast<unsigned>(current_ - threads_.data());
    for (int r = 0; r < 2; ++r) {
      uint64_t off = p - checkBase_[r];
      if (off >= checkBytes_[r])
        continue; // (or another runner's: the module's range covers every runner)
      uint64_t end = std::min<uint64_t>(checkBytes_[r], off + n);
      for (uint64_t o = off; o < end; ++o)
        if (Hazard h = write ? onWrite(shadowAt(r, o), me) : onRead(shadowAt(r, o), me); h != Hazard::None)
          fail(describeHazard(h, r, off, shadowAt(r, o), n, me, write));
      return;
    }
  }

  /// Ends the current emulated thread with an error; does not return.
  [[noreturn]] void fail(const std::string &msg) {
    if (!error_)
      error_ = msg;
    if (fibers_) {
      current_->state = EmuThread::Aborted;
      current_->caller = std::move(current_->caller).resume();
    }
    std::longjmp(escape_, 1);
  }

private:
  /// What --check knows of one byte of shared memory in the current run: whether a
  /// thread has written it, the last writer, and who read it since (the first reader and
  /// whether there were others, in its warp or beyond). Epochs order accesses: a block
  /// epoch ends at each __syncthreads (or grid barrier), a warp epoch at each warp
  /// collective or __syncwarp of the warp.
  struct ShadowByte {
    uint32_t gen = 0; // the run this record belongs to; an older one reads as untouched
    uint32_t writer = 0, writeEpoch = 0, writeWarpEpoch = 0;
    uint32_t reader = 0, readEpoch = 0, readWarpEpoch = 0;
    enum : uint8_t { NoReader, OneReader, ReadersInOneWarp, ReadersInSeveralWarps } readers = NoReader;
    bool written = false;
  };

  ShadowByte &shadowAt(int region, uint64_t offset) {
    return reinterpret_cast<ShadowByte *>(shadow_[region].data())[offset];
  }
  static_assert(std::is_trivially_copyable_v<ShadowByte>, "shadow records live in zero-filled mappings");
  unsigned warpsPerBlock() const { return (perBlock_ + 31) / 32; }
  unsigned warpOf(unsigned i) const { return (i / perBlock_) * warpsPerBlock() + (i % perBlock_) / 32; }
  /// Whether an access by thread `other` at (block epoch, warp epoch) happens before
  /// the current access of thread `me`.
  bool ordered(unsigned other, uint32_t epoch, uint32_t warpEpoch, unsigned me) const {
    if (other == me || other / perBlock_ != me / perBlock_)
      return true; // the same thread; or another block (the static shared memory of a cooperative run)
    if (epoch < blockEpoch_[me / perBlock_])
      return true;
    return warpOf(other) == warpOf(me) && warpEpoch < warpEpoch_[warpOf(me)];
  }
  ShadowByte &fresh(ShadowByte &b) {
    if (b.gen != gen_)
      b = ShadowByte{gen_};
    return b;
  }
  enum class Hazard { None, Uninitialised, ReadAfterWrite, WriteAfterWrite, WriteAfterRead };
  Hazard onRead(ShadowByte &raw, unsigned me) {
    ShadowByte &b = fresh(raw);
    if (!b.written)
      return Hazard::Uninitialised;
    if (!ordered(b.writer, b.writeEpoch, b.writeWarpEpoch, me))
      return Hazard::ReadAfterWrite;
    uint32_t epoch = blockEpoch_[me / perBlock_], warpEpoch = warpEpoch_[warpOf(me)];
    if (b.readers == ShadowByte::NoReader || b.readEpoch < epoch) {
      b.readers = ShadowByte::OneReader;
      b.reader = me;
      b.readEpoch = epoch;
      b.readWarpEpoch = warpEpoch;
    } else if (b.reader != me || b.readers != ShadowByte::OneReader) {
      if (warpOf(b.reader) != warpOf(me))
        b.readers = ShadowByte::ReadersInSeveralWarps;
      else if (b.readers != ShadowByte::ReadersInSeveralWarps)
        b.readers = ShadowByte::ReadersInOneWarp;
      b.readWarpEpoch = std::max(b.readWarpEpoch, warpEpoch);
    }
    return Hazard::None;
  }
  Hazard onWrite(ShadowByte &raw, unsigned me) {
    ShadowByte &b = fresh(raw);
    if (b.written && !ordered(b.writer, b.writeEpoch, b.writeWarpEpoch, me))
      return Hazard::WriteAfterWrite;
    uint32_t epoch = blockEpoch_[me / perBlock_], warpEpoch = warpEpoch_[warpOf(me)];
    if (b.readers != ShadowByte::NoReader && b.readEpoch == epoch) {
      bool ok = b.readers == ShadowByte::OneReader ? ordered(b.reader, b.readEpoch, b.readWarpEpoch, me)
                : b.readers == ShadowByte::ReadersInOneWarp
                    ? warpOf(b.reader) == warpOf(me) && b.readWarpEpoch < warpEpoch
                    : false;
      if (!ok)
        return Hazard::WriteAfterRead;
    }
    b.written = true;
    b.writer = me;
    b.writeEpoch = epoch;
    b.writeWarpEpoch = warpEpoch;
    b.readers = ShadowByte::NoReader;
    return Hazard::None;
  }
  std::string who(unsigned i) const {
    const dlc_emu_thread &t = threads_[i].t;
    auto d3 = [](const dlc_emu_dim3 &d) {
      return "(" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + ")";
    };
    return "thread " + d3(t.threadIdx) + " of block " + d3(t.blockIdx);
  }
  std::string describeHazard(Hazard hazard, int region, uint64_t off, const ShadowByte &b, uint64_t n,
                             unsigned me, bool write) const {
    uint64_t shown = region == 0 ? (smemBytes_ ? off % smemBytes_ : off) : off % kStaticSmemLimit;
    std::string where = std::to_string(n) + " bytes at offset " + std::to_string(shown) + " of " +
                        (region == 0 ? "dynamic" : "static") + " shared memory";
    if (hazard == Hazard::Uninitialised)
      return "uninitialised shared memory read (initcheck): " + who(me) + " reads " + where +
             ", which no thread of the block has written";
    bool war = hazard == Hazard::WriteAfterRead;
    std::string kind = war ? "write after read" : hazard == Hazard::ReadAfterWrite ? "read after write" : "write after write";
    std::string others = war && b.readers != ShadowByte::OneReader ? " (among others)" : "";
    return "shared memory race, " + kind + " (racecheck): " + who(me) + (write ? " writes " : " reads ") + where +
           ", which " + who(war ? b.reader : b.writer) + others + (war ? " read" : " wrote") +
           " with no __syncthreads between";
  }

  /// Starts a run's static shared memory (empty; each block's region is filled as its
  /// declarations are reached) and, under --check, fills the dynamic shared memory with
  /// 0xff, as a GPU leaves it with whatever was there, and sets every thread's checked
  /// ranges (empty without --check).
  void beginRun(const Launch &l, uint8_t *smem, size_t smemBytes) {
    blockEpoch_.assign(blocks_, 1);
    warpEpoch_.assign(size_t(blocks_) * warpsPerBlock(), 1);
    smemBytes_ = smemBytes;
    check_ = l.check;
    staticSites_.clear();
    staticUsed_.assign(blocks_, 0);
    std::memset(smem, l.check ? 0xff : 0, smemBytes * blocks_);
    if (l.check) {
      ++gen_;
      shadow_[0].reserve((smemBytes * blocks_) * sizeof(ShadowByte));
      shadow_[1].reserve(size_t(blocks_) * kStaticSmemLimit * sizeof(ShadowByte));
    }
    checkBase_[0] = reinterpret_cast<uintptr_t>(smem);
    checkBytes_[0] = l.check ? smemBytes * blocks_ : 0;
    checkBase_[1] = reinterpret_cast<uintptr_t>(statics_);
    checkBytes_[1] = l.check ? size_t(blocks_) * kStaticSmemLimit : 0;
  }

public:
  /// The current block's storage for the static __shared__ variable declared at `site`.
  void *staticShared(const void *site, uint64_t bytes, unsigned align) {
    unsigned block = static_cast<unsigned>(current_ - threads_.data()) / perBlock_;
    for (const StaticSite &x : staticSites_)
      if (x.site == site && x.block == block)
        return statics_ + x.offset;
    size_t at = (staticUsed_[block] + align - 1) / align * align;
    if (at + bytes > kStaticSmemLimit)
      fail("the kernel's static __shared__ variables need more than " + std::to_string(kStaticSmemLimit) +
           " bytes per block (the CUDA limit for static shared memory)");
    staticUsed_[block] = at + bytes;
    size_t offset = size_t(block) * kStaticSmemLimit + at;
    std::memset(statics_ + offset, check_ ? 0xff : 0, bytes);
    staticSites_.push_back({site, block, offset});
    return statics_ + offset;
  }

private:
  /// The order in which threads are run between barriers (perm_[k]: the k-th to run).
  void makeOrder(unsigned n) {
    perm_.resize(n);
    for (unsigned i = 0; i < n; ++i)
      perm_[i] = order_ == SessionOptions::ThreadOrder::Reverse ? n - 1 - i : i;
    if (order_ == SessionOptions::ThreadOrder::Random)
      for (unsigned i = n; i > 1; --i) { // Fisher-Yates on a xorshift stream
        rng_ ^= rng_ << 13;
        rng_ ^= rng_ >> 7;
        rng_ ^= rng_ << 17;
        std::swap(perm_[i - 1], perm_[rng_ % i]);
      }
  }

  void block(EmuThread::State s) {
    EmuThread *me = current_;
    me->state = s;
    me->caller = std::move(me->caller).resume();
  }

  /// Releases block b's __syncthreads once every live thread of the block waits there.
  bool releaseBlock(unsigned b) {
    unsigned lo = b * perBlock_, hi = lo + perBlock_;
    bool any = false;
    for (unsigned i = lo; i < hi; ++i) {
      if (threads_[i].state == EmuThread::AtBlockBarrier)
        any = true;
      else if (threads_[i].state != EmuThread::Done)
        return false;
    }
    if (!any)
      return false;
    // Every waiting thread at the same __syncthreads: on a GPU, threads at different
    // barriers (or some exited, some waiting) is undefined behaviour.
    const void *site = nullptr;
    for (unsigned i = lo; i < hi; ++i)
      if (threads_[i].state == EmuThread::AtBlockBarrier) {
        if (site && threads_[i].site != site) {
          error_ = "threads of block " + std::to_string(b) + " wait at different __syncthreads call sites";
          return false;
        }
        site = threads_[i].site;
      }
    for (unsigned i = lo; i < hi; ++i)
      if (threads_[i].state == EmuThread::AtBlockBarrier)
        threads_[i].state = EmuThread::Ready;
    ++blockEpoch_[b];
    return true;
  }

  /// Warp w (numbered within the run; warps never span blocks) exchanges once every
  /// live lane waits at a warp collective.
  bool releaseWarp(unsigned w) {
    unsigned lo = (w / warpsPerBlock()) * perBlock_ + (w % warpsPerBlock()) * 32;
    unsigned hi = std::min((w / warpsPerBlock()) * perBlock_ + perBlock_, lo + 32);
    if (w / warpsPerBlock() >= blocks_)
      return false;
    bool any = false;
    for (unsigned i = lo; i < hi; ++i) {
      if (threads_[i].state == EmuThread::AtWarpBarrier)
        any = true;
      else if (threads_[i].state != EmuThread::Done)
        return false;
    }
    if (!any)
      return false;
    // The mask names the lanes that take part: each must be here (an exited lane
    // never arrives on a GPU: the result is undefined), the lane itself included.
    for (unsigned i = lo; i < hi; ++i) {
      const EmuThread &th = threads_[i];
      if (th.state != EmuThread::AtWarpBarrier)
        continue;
      unsigned lane = i - lo;
      if (!((th.mask >> lane) & 1u)) {
        error_ = "lane " + std::to_string(lane) + " calls a warp collective with a mask that excludes it";
        return false;
      }
      for (unsigned j = lo; j < hi; ++j)
        if (((th.mask >> (j - lo)) & 1u) && threads_[j].state != EmuThread::AtWarpBarrier) {
          error_ = "lane " + std::to_string(lane) + "'s warp collective names lane " + std::to_string(j - lo) +
                   " in its mask, which has exited";
          return false;
        }
      for (unsigned j = hi - lo; j < 32; ++j)
        if ((th.mask >> j) & 1u) {
          error_ = "lane " + std::to_string(lane) + "'s warp collective names lane " + std::to_string(j) +
                   ", which does not exist (the block has " + std::to_string(hi - lo) + " threads in this warp)";
          return false;
        }
    }
    for (unsigned i = lo; i < hi; ++i) {
      EmuThread &th = threads_[i];
      if (th.state != EmuThread::AtWarpBarrier)
        continue;
      if (th.ballot) {
        unsigned bits = 0;
        for (unsigned j = lo; j < hi; ++j)
          if (threads_[j].state == EmuThread::AtWarpBarrier && threads_[j].slot &&
              (th.mask >> (j - lo)) & 1u)
            bits |= 1u << (j - lo);
        th.result = bits;
      } else {
        unsigned src = lo + static_cast<unsigned>(th.src);
        th.result = src < hi && threads_[src].state == EmuThread::AtWarpBarrier ? threads_[src].slot
                                                                                 : th.slot;
      }
    }
    for (unsigned i = lo; i < hi; ++i)
      if (threads_[i].state == EmuThread::AtWarpBarrier)
        threads_[i].state = EmuThread::Ready;
    ++warpEpoch_[w];
    return true;
  }

  void killAll() {
    // Destroying an unfinished fiber unwinds its stack.
    killing_ = true;
    for (EmuThread &th : threads_)
      th.fiber = bctx::fiber();
    killing_ = false;
  }

  StackPool stacks_;
  std::vector<EmuThread> threads_;
  std::vector<unsigned> perm_;
  std::jmp_buf escape_; // the thread loop of barrier-free kernels (fail() returns there)
  SessionOptions::ThreadOrder order_ = SessionOptions::ThreadOrder::Forward;
  uint64_t rng_ = 1;
  EmuThread *current_ = nullptr;
  unsigned perBlock_ = 0, blocks_ = 0;
  // --check
  std::vector<uint32_t> blockEpoch_, warpEpoch_;
  struct StaticSite {
    const void *site;
    unsigned block;
    size_t offset;
  };
  uint8_t *dynamic_ = nullptr, *statics_ = nullptr; // this runner's areas of the backend's shared memory
  uint64_t checkBase_[2] = {}, checkBytes_[2] = {};   // --check: the run's dynamic, static shared memory
  std::vector<StaticSite> staticSites_;
  std::vector<size_t> staticUsed_;
  Reserve shadow_[2];               // ShadowByte records: dynamic, static shared memory
  bool check_ = false;
  uint32_t gen_ = 0;
  size_t smemBytes_ = 0;
  bool fibers_ = false;
  bool killing_ = false;
  std::optional<std::string> error_;
};

void apiSyncthreads(const void *site) { tlsRunner->syncthreads(site); }
void apiSyncwarp(unsigned mask) { tlsRunner->exchange(0, 0, mask, false); }
unsigned long long apiExchange(unsigned long long v, int src, unsigned mask) {
  return tlsRunner->exchange(v, src, mask, false);
}
unsigned apiBallot(int pred, unsigned mask) {
  return static_cast<unsigned>(tlsRunner->exchange(pred ? 1 : 0, 0, mask, true));
}
void apiTrap(const char *msg) { tlsRunner->fail(std::string("kernel trap: ") + msg); }
void apiGridsync() { tlsRunner->gridsync(); }
void apiAccess(const void *p, unsigned long long n, int write) {
  tlsRunner->access(reinterpret_cast<uintptr_t>(p), n, write != 0);
}
void *apiStaticShared(const void *site, unsigned long long bytes, unsigned align) {
  return tlsRunner->staticShared(site, bytes, align);
}

const dlc_emu_api kApi = {apiSyncthreads, apiSyncwarp, apiExchange,     apiBallot,
                          apiTrap,        apiGridsync, apiAccess,       apiStaticShared};

//===----------------------------------------------------------------------===//
// Backend
//===----------------------------------------------------------------------===//

struct AlignedBuffer {
  void *p = nullptr;
  size_t n = 0;
  ~AlignedBuffer() { std::free(p); }
  /// `fill`: the byte every allocated byte starts as (0xff under --check: every float
  /// reads as NaN, every index as -1, as uninitialised GPU memory would mislead).
  bool allocate(size_t bytes, uint8_t fill = 0) {
    n = bytes;
    p = std::aligned_alloc(256, (bytes + 255) / 256 * 256 + 256);
    if (p)
      std::memset(p, fill, (bytes + 255) / 256 * 256 + 256);
    return p != nullptr;
  }
};

struct EmuWeights : WeightStore {
  AlignedBuffer buf;
};

/// One loaded emu module (a compilation chunk's kernels compiled for the host).
struct EmuModule {
  void *lib = nullptr;
  int fd = -1;
  dlc_emu_set_thread_fn setThread = nullptr;
  ~EmuModule() {
    if (lib)
      dlclose(lib);
    if (fd >= 0)
      ::close(fd);
  }
};

bool endsWith(const std::string &s, const std::string &suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// A kernel's entry point and the module it lives in.
struct EmuKernel {
  void (*thunk)(const void *) = nullptr;
  const EmuModule *module = nullptr;
};

class EmuBackend : public Backend {
public:
  explicit EmuBackend(const SessionOptions &o)
      : opts_(o), pool_(o.emuThreads > 0 ? o.emuThreads : std::max(1u, std::thread::hardware_concurrency())),
        runners_(pool_.size()), cc_(o.emuComputeCapability) {
    shared_.reserve(runners_.size() * kSharedSlot);
    for (size_t i = 0; i < runners_.size(); ++i) {
      runners_[i].setOrder(o.emuThreadOrder, 0x9e3779b97f4a7c15ull * (i + 1));
      runners_[i].setSharedSlot(shared_.data() + i * kSharedSlot);
    }
  }

  std::string describe() const override {
    return "emu (CUDA kernels compiled for the host CPU, " + std::to_string(pool_.size()) +
           " threads, GEMM on " + emu::hostBlasName() + "; timings are not GPU timings)";
  }
  DeviceKind kind() const override { return DeviceKind::Emu; }
  std::string note() const override { return note_; }
  // Without a choice, the plan for the newest architecture in the package.
  int computeCapability() const override { return cc_ > 0 ? cc_ : 1 << 30; }

  Status prepare(const Model &model) override {
    const pkg::PackageFile &p = model.file();
    pkg_ = &p;
    const pkg::Package &m = p.meta();
    if (m.kernels() && m.kernels()->size()) {
      std::map<std::string, EmuKernel> thunks;
      if (m.modules())
        for (const pkg::Module *x : *m.modules())
          if (x->kind() == pkg::ModuleKind::EmuSharedObject) {
            if (opts_.check && !endsWith(x->target() ? x->target()->str() : "", "-check"))
              note_ = "--check poisons memory, but initcheck and racecheck of shared memory need the "
                      "package's emu module built with --target emu-check";
            modules_.push_back(std::make_unique<EmuModule>());
            DLC_RETURN_IF_ERROR(loadModule(*modules_.back(), p.section(x->data()), x->data()->size(), thunks));
          }
      if (modules_.empty())
        return Status(StatusCode::Unavailable,
                      p.name() + ": the package has no emu module (compile with --target including emu)");
      for (const pkg::Kernel *k : *m.kernels()) {
        auto it = thunks.find(k->name()->str());
        if (it == thunks.end())
          return Status(StatusCode::InvalidPackage,
                        p.name() + ": emu module lacks kernel '" + k->name()->str() + "'");
        kernels_.push_back(it->second);
      }
    }
    if (!arena_.allocate(m.arena_bytes(), opts_.check ? 0xff : 0))
      return Status(StatusCode::Internal, "out of host memory for the arena");
    // Weights: one copy per model, shared by its emu sessions.
    weights_ = std::static_pointer_cast<EmuWeights>(model.weights(DeviceKind::Emu, 0, [&]() -> std::shared_ptr<WeightStore> {
      auto w = std::make_shared<EmuWeights>();
      if (!w->buf.allocate(m.weight_bytes()))
        return nullptr;
      if (m.weights())
        for (const pkg::Weight *wt : *m.weights()) {
          const pkg::Buffer *b = m.buffers()->Get(wt->buffer());
          std::memcpy(static_cast<uint8_t *>(w->buf.p) + b->offset(), p.section(wt->data()), wt->data()->size());
        }
      return w;
    }));
    if (!weights_)
      return Status(StatusCode::Internal, "out of host memory for the weights");
    return Status::ok();
  }

  uint8_t *address(const pkg::BufRef &r) const {
    const pkg::Buffer *b = pkg_->meta().buffers()->Get(r.buffer());
    auto *base = static_cast<uint8_t *>(b->region() == pkg::Region::Arena ? arena_.p : weights_->buf.p);
    return base + b->offset() + r.offset();
  }

  Status upload(const pkg::BufRef &dst, const void *src, size_t n) override {
    if (sticky_)
      return sticky_;
    std::memcpy(address(dst), src, n);
    return Status::ok();
  }
  Status download(void *dst, const pkg::BufRef &src, size_t n) override {
    if (sticky_)
      return sticky_;
    std::memcpy(dst, address(src), n);
    return Status::ok();
  }
  Status copy(const pkg::Copy &c) override {
    if (sticky_)
      return sticky_;
    std::memmove(address(*c.dst()), address(*c.src()), c.bytes());
    return Status::ok();
  }
  Status memset(const pkg::Memset &m) override {
    if (sticky_)
      return sticky_;
    std::memset(address(*m.dst()), m.value(), m.bytes());
    return Status::ok();
  }
  Status synchronize() override { return sticky_; }

  Status launch(const pkg::Launch &l, const std::string &node) override {
    if (sticky_)
      return sticky_;
    DLC_RETURN_IF_ERROR(checkLaunchLimits(*pkg_, l));
    const pkg::Kernel *k = pkg_->meta().kernels()->Get(l.kernel());
    std::vector<uint64_t> params;
    resolveParams(l, params, [&](const pkg::BufRef &r) { return reinterpret_cast<uint64_t>(address(r)); });
    BlockRunner::Launch bl;
    const EmuKernel &ek = kernels_[l.kernel()];
    bl.thunk = ek.thunk;
    bl.setThread = ek.module->setThread;
    bl.check = opts_.check;
    bl.params = params.data();
    bl.grid = {l.grid()->x(), l.grid()->y(), l.grid()->z()};
    bl.block = {l.block()->x(), l.block()->y(), l.block()->z()};
    bl.fibers = k->needs_sync() || k->cooperative();
    uint64_t blocks = uint64_t(bl.grid.x) * bl.grid.y * bl.grid.z;
    size_t smemBytes = (l.dynamic_smem() + 15) / 16 * 16;
    std::optional<std::string> err;
    if (k->cooperative()) {
      // Every block resident at once: one runner interleaves all of them.
      err = runners_[0].run(bl, 0, static_cast<unsigned>(blocks), smemBytes);
    } else {
      std::mutex errMu;
      pool_.parallelFor(blocks, [&](int worker, uint64_t b) {
        {
          std::lock_guard<std::mutex> g(errMu);
          if (err)
            return;
        }
        auto e = runners_[worker].run(bl, b, 1, smemBytes);
        if (e) {
          std::lock_guard<std::mutex> g(errMu);
          if (!err)
            err = *e;
        }
      });
    }
    if (err) {
      // A failed kernel ends the CUDA context on a GPU: so does it this session.
      sticky_ = Status(StatusCode::LaunchFailure, "kernel '" + k->name()->str() + "' (node '" + node +
                                                      "') failed on emu: " + *err);
      return sticky_;
    }
    return Status::ok();
  }

  /// The cuBLASLt epilogue: bias per column, then the activation (GELU: tanh form).
  template <class T> void epilogue(T *c, const T *bias, const pkg::Gemm &g) {
    for (int64_t r = 0; r < g.m(); ++r)
      for (int64_t j = 0; j < g.n(); ++j) {
        T &v = c[r * g.ldc() + j];
        if (bias)
          v += bias[j];
        if (g.activation() == pkg::GemmActivation::Relu)
          v = v > T(0) ? v : T(0);
        else if (g.activation() == pkg::GemmActivation::GeluTanh)
          v = T(0.5) * v * (T(1) + std::tanh(T(0.7978845608028654) * (v + T(0.044715) * v * v * v)));
      }
  }

  Status gemm(const pkg::Gemm &g, const std::string &node, bool &epilogueApplied) override {
    if (sticky_)
      return sticky_;
    const uint8_t *A = address(*g.a()), *B = address(*g.b());
    uint8_t *C = address(*g.c());
    const uint8_t *Cin = g.c_in() ? address(*g.c_in()) : nullptr;
    bool hasEpilogue = g.bias() || g.activation() != pkg::GemmActivation::None;
    // As a GPU does when no cuBLASLt algorithm fuses the epilogue: the session then
    // runs the package's epilogue kernel.
    epilogueApplied = !(hasEpilogue && opts_.gemmEpilogueKernel);
    switch (g.dtype()) {
    case pkg::DType::F32:
      if (g.tf32()) { // as tensor cores do: operands rounded to TF32 (10-bit mantissa), FP32 sums
        int64_t ar = g.trans_a() ? g.k() : g.m(), br = g.trans_b() ? g.n() : g.k();
        std::vector<float> ra = tf32Copy(A, (g.batch() - 1) * g.stride_a() + ar * g.lda());
        std::vector<float> rb = tf32Copy(B, (g.batch() - 1) * g.stride_b() + br * g.ldb());
        gemmAs<float>(g, reinterpret_cast<const uint8_t *>(ra.data()), reinterpret_cast<const uint8_t *>(rb.data()),
                      C, Cin, epilogueApplied, Identity{});
      } else {
        gemmAs<float>(g, A, B, C, Cin, epilogueApplied, Identity{});
      }
      break;
    case pkg::DType::F64: gemmAs<double>(g, A, B, C, Cin, epilogueApplied, Identity{}); break;
    // 16-bit types as a GPU computes them (CUBLAS_COMPUTE_32F): float products and
    // sums, the result rounded once to the storage type.
    case pkg::DType::F16: gemmAs<float>(g, A, B, C, Cin, epilogueApplied, Half16{halfToFloat, floatToHalf}); break;
    case pkg::DType::BF16: gemmAs<float>(g, A, B, C, Cin, epilogueApplied, Half16{bf16ToFloat, floatToBF16}); break;
    default:
      return Status(StatusCode::InvalidPackage, "GEMM of node '" + node + "' has dtype " +
                                                    pkg::dtypeName(g.dtype()) +
                                                    ", which the emu backend does not run");
    }
    return Status::ok();
  }

private:
  /// n floats rounded to TF32.
  static std::vector<float> tf32Copy(const uint8_t *p, int64_t n) {
    std::vector<float> v(static_cast<size_t>(std::max<int64_t>(n, 0)));
    std::memcpy(v.data(), p, v.size() * sizeof(float));
    for (float &x : v)
      x = roundToTf32(x);
    return v;
  }
  /// Storage = compute type.
  struct Identity {};
  /// 16-bit storage, float compute.
  struct Half16 {
    float (*toFloat)(uint16_t);
    uint16_t (*fromFloat)(float);
  };

  /// A (rows x cols, leading dimension ld) matrix of batch b in compute type T.
  template <class T, class Conv>
  static const T *view(const uint8_t *base, int64_t offset, int64_t rows, int64_t cols, int64_t ld, const Conv &conv,
                       std::vector<T> &scratch) {
    if constexpr (std::is_same_v<Conv, Identity>) {
      (void)rows, (void)cols, (void)ld, (void)scratch;
      return reinterpret_cast<const T *>(base) + offset;
    } else {
      const uint16_t *p = reinterpret_cast<const uint16_t *>(base) + offset;
      scratch.assign(static_cast<size_t>(rows * ld), T(0));
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
          scratch[r * ld + c] = conv.toFloat(p[r * ld + c]);
      return scratch.data();
    }
  }

  template <class T, class Conv>
  void gemmAs(const pkg::Gemm &g, const uint8_t *A, const uint8_t *B, uint8_t *C, const uint8_t *Cin,
              bool withEpilogue, const Conv &conv) {
    int64_t ar = g.trans_a() ? g.k() : g.m(), ac = g.trans_a() ? g.m() : g.k();
    int64_t br = g.trans_b() ? g.n() : g.k(), bc = g.trans_b() ? g.k() : g.n();
    std::vector<T> sa, sb, sc, sbias;
    const T *bias = g.bias() ? view<T>(address(*g.bias()), 0, 1, g.n(), g.n(), conv, sbias) : nullptr;
    for (int64_t b = 0; b < g.batch(); ++b) {
      const T *a = view<T>(A, b * g.stride_a(), ar, ac, g.lda(), conv, sa);
      const T *bb = view<T>(B, b * g.stride_b(), br, bc, g.ldb(), conv, sb);
      T *c;
      if constexpr (std::is_same_v<Conv, Identity>) {
        c = reinterpret_cast<T *>(C) + b * g.stride_c();
        if (Cin && g.beta() != 0 && Cin != C) // D = ... + beta * Cin: start from Cin
          for (int64_t r = 0; r < g.m(); ++r)
            std::memmove(c + r * g.ldc(), reinterpret_cast<const T *>(Cin) + b * g.stride_c() + r * g.ldc(),
                         g.n() * sizeof(T));
      } else {
        sc.assign(static_cast<size_t>(g.m() * g.ldc()), T(0));
        if (g.beta() != 0)
          view<T>(Cin ? Cin : C, b * g.stride_c(), g.m(), g.n(), g.ldc(), conv, sc);
        c = sc.data();
      }
      emu::hostGemm(g.trans_a(), g.trans_b(), g.m(), g.n(), g.k(), T(g.alpha()), a, g.lda(), bb, g.ldb(),
                    T(g.beta()), c, g.ldc());
      if (withEpilogue)
        epilogue(c, bias, g);
      if constexpr (!std::is_same_v<Conv, Identity>) {
        uint16_t *d = reinterpret_cast<uint16_t *>(C) + b * g.stride_c();
        for (int64_t r = 0; r < g.m(); ++r)
          for (int64_t j = 0; j < g.n(); ++j)
            d[r * g.ldc() + j] = conv.fromFloat(c[r * g.ldc() + j]);
      }
    }
  }

  Status loadModule(EmuModule &mod, const uint8_t *data, size_t n,
                    std::map<std::string, EmuKernel> &thunks) {
    int fd = memfd_create("dlc-emu-kernels", MFD_CLOEXEC);
    if (fd < 0)
      return Status(StatusCode::Internal, std::string("memfd_create failed: ") + std::strerror(errno));
    mod.fd = fd;
    size_t off = 0;
    while (off < n) {
      ssize_t w = ::write(fd, data + off, n - off);
      if (w <= 0)
        return Status(StatusCode::Internal, "cannot stage the emu module");
      off += static_cast<size_t>(w);
    }
    // The descriptor stays open while the module is loaded: the dynamic loader knows
    // objects by path, and a reused descriptor number would make a second module's
    // "/proc/self/fd/N" resolve to the first one.
    std::string path = "/proc/self/fd/" + std::to_string(fd);
    mod.lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!mod.lib)
      return Status(StatusCode::InvalidPackage, std::string("cannot load the emu module: ") + dlerror());
    auto version = reinterpret_cast<dlc_emu_abi_version_fn>(dlsym(mod.lib, "dlc_emu_abi_version"));
    auto kernels = reinterpret_cast<dlc_emu_kernels_fn>(dlsym(mod.lib, "dlc_emu_kernels"));
    auto setApi = reinterpret_cast<dlc_emu_set_api_fn>(dlsym(mod.lib, "dlc_emu_set_api"));
    mod.setThread = reinterpret_cast<dlc_emu_set_thread_fn>(dlsym(mod.lib, "dlc_emu_set_thread"));
    auto setChecked = reinterpret_cast<dlc_emu_set_checked_fn>(dlsym(mod.lib, "dlc_emu_set_checked"));
    if (!version || !kernels || !setApi || !mod.setThread || !setChecked)
      return Status(StatusCode::InvalidPackage, "the emu module does not export the dlc emu ABI");
    if (version() != DLC_EMU_ABI_VERSION)
      return Status(StatusCode::InvalidPackage, "emu module ABI version " +
                                                    std::to_string(version()) + ", runtime has " +
                                                    std::to_string(DLC_EMU_ABI_VERSION));
    setApi(&kApi);
    // Under --check, loads and stores in the runners' shared memory reach the runtime.
    setChecked(reinterpret_cast<uintptr_t>(shared_.data()), opts_.check ? runners_.size() * kSharedSlot : 0);
    int count = 0;
    const dlc_emu_kernel *table = kernels(&count);
    for (int i = 0; i < count; ++i)
      thunks[table[i].name] = {table[i].thunk, &mod};
    return Status::ok();
  }


  SessionOptions opts_;
  std::string note_;
  Status sticky_; // the first kernel failure: every later call fails with it
  const pkg::PackageFile *pkg_ = nullptr;
  ThreadPool pool_;
  std::vector<BlockRunner> runners_;
  Reserve shared_; // every runner's shared memory (kSharedSlot each)
  int cc_ = 0;
  std::vector<std::unique_ptr<EmuModule>> modules_;
  std::vector<EmuKernel> kernels_;
  AlignedBuffer arena_;
  std::shared_ptr<EmuWeights> weights_;
};

} // namespace

std::unique_ptr<Backend> createEmuBackend(const SessionOptions &opts) {
  return std::make_unique<EmuBackend>(opts);
}

} // namespace dlc::rt
