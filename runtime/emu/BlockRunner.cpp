//===- BlockRunner.cpp - Runs the threads of CUDA blocks on one OS thread ---===//
//
// Fibers (Boost.Context) with fixed-size recycled stacks, a round-robin scheduler
// for __syncthreads, warp collectives and grid barriers, and --check's
// shared-memory initcheck and racecheck. See BlockRunner.h.
//===----------------------------------------------------------------------===//
#include "BlockRunner.h"

#include <boost/context/fiber.hpp>
#include <boost/context/stack_context.hpp>
#include <csetjmp>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <unistd.h>
#include <vector>

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
  // A warp-wide operation it waits at (dlc_emu_api.warp_op), and its operands.
  void (*op)(void *const *, unsigned) = nullptr;
  void *operands = nullptr;
  // cp.async copies not yet complete, and the number of groups committed.
  struct AsyncCopy {
    uint8_t *dst;
    const uint8_t *src;
    uint32_t bytes, srcBytes, group;
  };
  std::vector<AsyncCopy> copies;
  uint32_t groups = 0;
};

thread_local FiberScheduler *tlsRunner = nullptr;

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
      base = ::mmap(nullptr, size_ + guard(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                    -1, 0);
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

} // namespace

/// Runs the threads of one block, or of a whole cooperative grid, on one OS thread.
class FiberScheduler {
public:
  using Launch = BlockLaunch;
  FiberScheduler() : stacks_(128 * 1024) {}
  /// This runner's slot (kSharedSlot bytes) of the backend's shared memory.
  void setSharedSlot(uint8_t *slot) {
    dynamic_ = slot;
    statics_ = slot + kDynamicArea;
  }
  void setOrder(SessionOptions::ThreadOrder o, uint64_t seed) {
    order_ = o;
    rng_ = seed | 1;
  }

  /// Runs `blocks` consecutive blocks starting at linear block `first` together (more
  /// than one only for cooperative launches, whose blocks meet at grid barriers).
  /// `smem` holds `smemBytes` of dynamic shared memory per block. Returns an error
  /// message, or nullopt on success.
  std::optional<std::string> run(const Launch &l, uint64_t first, unsigned blocks,
                                 size_t smemBytes) {
    uint8_t *smem = dynamic_;
    unsigned perBlock = l.block.x * l.block.y * l.block.z, n = perBlock * blocks;
    threads_.resize(n);
    perBlock_ = perBlock;
    blocks_ = blocks;
    error_.reset();
    accessAs_ = nullptr;
    readied_ = false;
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
      th.t.blockIdx = {static_cast<unsigned>(b % l.grid.x),
                       static_cast<unsigned>((b / l.grid.x) % l.grid.y),
                       static_cast<unsigned>(b / (uint64_t(l.grid.x) * l.grid.y))};
      th.t.blockDim = l.block;
      th.t.gridDim = l.grid;
      th.t.dynamicSmem = smem + (i / perBlock) * smemBytes;
      th.t.scheduler = this;
      th.state = EmuThread::Ready;
      th.op = nullptr;
      th.copies.clear();
      th.groups = 0;
    }
    beginRun(l, smem, smemBytes);
    makeOrder(n);
    if (!l.fibers) {
      for (unsigned k = 0; k < n && !error_; ++k) {
        current_ = &threads_[perm_[k]];
        l.setThread(&current_->t);
        // A failing thread (a trap, a misaligned access) jumps back here: the code
        // after the fault must not run (a misaligned vector load would fault the host).
        if (setjmp(escape_) == 0) {
          l.thunk(l.params);
          completeCopies(*current_, ~0u);
        }
      }
      return error_;
    }
    for (unsigned i = 0; i < n; ++i) {
      EmuThread &th = threads_[i];
      th.fiber =
          bctx::fiber(std::allocator_arg, stacks_.allocator(), [this, &th, &l](bctx::fiber &&c) {
            // The ucontext fibers (sanitizer build) enter a never-started fiber to destroy
            // it; the kernel thread must not run then.
            if (killing_)
              return std::move(c);
            th.caller = std::move(c);
            l.thunk(l.params);
            completeCopies(th, ~0u);
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
      // A warp operation run by its last lane released the warp already.
      bool released = readied_;
      readied_ = false;
      if (allAtGrid && anyAtGrid && !released) {
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
    unsigned me = static_cast<unsigned>((accessAs_ ? accessAs_ : current_) - threads_.data());
    forCheckedBytes(p, n, [&](int r, uint64_t off, ShadowByte &b) {
      if (Hazard h = write ? onWrite(b, me) : onRead(b, me); h != Hazard::None)
        fail(describeHazard(h, r, off, b, n, me, write));
    });
  }

  /// A warp-wide operation (see dlc_emu_api.warp_op): the last lane of `mask` to arrive
  /// runs it for the warp.
  void warpOp(void *operands, unsigned mask, void (*op)(void *const *, unsigned)) {
    if (!fibers_)
      fail("kernel uses a warp-wide operation but was compiled as barrier-free");
    EmuThread *me = current_;
    const unsigned i = static_cast<unsigned>(me - threads_.data()),
                   first = i / perBlock_ * perBlock_;
    const unsigned lo = first + (i % perBlock_) / 32 * 32,
                   hi = std::min(first + perBlock_, lo + 32);
    if (!((mask >> (i - lo)) & 1u))
      fail("lane " + std::to_string(i - lo) + " calls a warp-wide operation with a mask that " +
           "excludes it");
    if (hi - lo < 32 && (mask >> (hi - lo)) != 0)
      fail("a warp-wide operation names lanes that do not exist (the block has " +
           std::to_string(hi - lo) + " threads in this warp)");
    bool all = true;
    for (unsigned j = lo; j < hi; ++j) {
      const EmuThread &o = threads_[j];
      if (j == i || !((mask >> (j - lo)) & 1u))
        continue;
      if (o.state == EmuThread::Done)
        fail("a warp-wide operation names lane " + std::to_string(j - lo) + ", which has exited");
      if (o.state != EmuThread::AtWarpBarrier || !o.op)
        all = false;
      else if (o.op != op || o.mask != mask)
        fail("lanes of a warp wait at different warp-wide operations");
    }
    me->op = op;
    me->operands = operands;
    me->mask = mask;
    if (!all) {
      block(EmuThread::AtWarpBarrier);
      return; // the last lane ran the operation
    }
    void *lanes[32] = {};
    for (unsigned j = lo; j < hi; ++j)
      if ((mask >> (j - lo)) & 1u)
        lanes[j - lo] = threads_[j].operands;
    laneBase_ = lo;
    op(lanes, mask);
    accessAs_ = nullptr;
    for (unsigned j = lo; j < hi; ++j)
      if ((mask >> (j - lo)) & 1u) {
        threads_[j].op = nullptr;
        if (j != i)
          threads_[j].state = EmuThread::Ready;
      }
    ++warpEpoch_[warpOf(i)];
    readied_ = true;
  }
  /// Inside a warp operation: attributes the accesses that follow to `lane`.
  void accessAsLane(int lane) {
    accessAs_ = lane < 0 ? nullptr : &threads_[laneBase_ + static_cast<unsigned>(lane)];
  }

  /// cp.async by the current thread: recorded, completed at its wait (or exit).
  void cpAsync(void *dst, const void *src, unsigned bytes, unsigned srcBytes) {
    EmuThread &th = *current_;
    if (bytes != 4 && bytes != 8 && bytes != 16)
      fail("cp.async copies 4, 8 or 16 bytes, not " + std::to_string(bytes));
    if (srcBytes > bytes)
      fail("cp.async's source size exceeds its copy size");
    if (reinterpret_cast<uintptr_t>(dst) % bytes ||
        (srcBytes && reinterpret_cast<uintptr_t>(src) % bytes))
      fail("misaligned cp.async of " + std::to_string(bytes) + " bytes");
    uintptr_t d = reinterpret_cast<uintptr_t>(dst);
    bool inShared = false;
    for (int r = 0; r < 2; ++r)
      inShared |=
          d - sharedBase_[r] < sharedBytes_[r] && d + bytes - sharedBase_[r] <= sharedBytes_[r];
    if (!inShared)
      fail("cp.async's destination is not inside the block's shared memory");
    if (check_) {
      unsigned me = static_cast<unsigned>(current_ - threads_.data());
      forCheckedBytes(d, bytes, [&](int r, uint64_t off, ShadowByte &raw) {
        ShadowByte &b = fresh(raw);
        if (Hazard h = b.asyncPending ? Hazard::AsyncPending : onWrite(b, me); h != Hazard::None)
          fail(describeHazard(h, r, off, b, bytes, me, true));
        b.asyncPending = true;
        b.writer = me;
      });
    }
    th.copies.push_back({static_cast<uint8_t *>(dst), static_cast<const uint8_t *>(src), bytes,
                         srcBytes, th.groups});
  }
  void cpAsyncCommit() { ++current_->groups; }
  /// Completes the current thread's copies of all but its `n` most recent committed groups.
  void cpAsyncWait(unsigned n) {
    EmuThread &th = *current_;
    completeCopies(th, th.groups > n ? th.groups - n : 0);
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
    enum : uint8_t {
      NoReader,
      OneReader,
      ReadersInOneWarp,
      ReadersInSeveralWarps
    } readers = NoReader;
    bool written = false;
    bool asyncPending = false; // the destination of a cp.async not yet waited for
  };

  /// Calls f(region, offset of p in it, record) for each byte of [p, p + n) in the run's
  /// shared memory, under --check (without it, nothing is tracked).
  template <class F> void forCheckedBytes(uintptr_t p, uint64_t n, F f) {
    if (!check_)
      return;
    for (int r = 0; r < 2; ++r) {
      uint64_t off = p - sharedBase_[r];
      if (off >= sharedBytes_[r])
        continue; // (or another runner's: the module's range covers every runner)
      uint64_t end = std::min<uint64_t>(sharedBytes_[r], off + n);
      for (uint64_t o = off; o < end; ++o)
        f(r, off, shadowAt(r, o));
      return;
    }
  }
  ShadowByte &shadowAt(int region, uint64_t offset) {
    return reinterpret_cast<ShadowByte *>(shadow_[region].data())[offset];
  }
  static_assert(std::is_trivially_copyable_v<ShadowByte>,
                "shadow records live in zero-filled mappings");
  unsigned warpsPerBlock() const { return (perBlock_ + 31) / 32; }
  unsigned warpOf(unsigned i) const {
    return (i / perBlock_) * warpsPerBlock() + (i % perBlock_) / 32;
  }
  /// Whether an access by thread `other` at (block epoch, warp epoch) happens before
  /// the current access of thread `me`.
  bool ordered(unsigned other, uint32_t epoch, uint32_t warpEpoch, unsigned me) const {
    if (other == me || other / perBlock_ != me / perBlock_)
      return true; // the same thread; or another block (the static shared memory of a cooperative
                   // run)
    if (epoch < blockEpoch_[me / perBlock_])
      return true;
    return warpOf(other) == warpOf(me) && warpEpoch < warpEpoch_[warpOf(me)];
  }
  ShadowByte &fresh(ShadowByte &b) {
    if (b.gen != gen_)
      b = ShadowByte{gen_};
    return b;
  }
  enum class Hazard {
    None,
    Uninitialised,
    ReadAfterWrite,
    WriteAfterWrite,
    WriteAfterRead,
    AsyncPending
  };
  Hazard onRead(ShadowByte &raw, unsigned me) {
    ShadowByte &b = fresh(raw);
    if (b.asyncPending)
      return Hazard::AsyncPending;
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
    if (b.asyncPending)
      return Hazard::AsyncPending;
    if (b.written && !ordered(b.writer, b.writeEpoch, b.writeWarpEpoch, me))
      return Hazard::WriteAfterWrite;
    uint32_t epoch = blockEpoch_[me / perBlock_], warpEpoch = warpEpoch_[warpOf(me)];
    if (b.readers != ShadowByte::NoReader && b.readEpoch == epoch) {
      bool ok = b.readers == ShadowByte::OneReader
                    ? ordered(b.reader, b.readEpoch, b.readWarpEpoch, me)
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
      return "(" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) +
             ")";
    };
    return "thread " + d3(t.threadIdx) + " of block " + d3(t.blockIdx);
  }
  std::string describeHazard(Hazard hazard, int region, uint64_t off, const ShadowByte &b,
                             uint64_t n, unsigned me, bool write) const {
    uint64_t shown = region == 0 ? (smemBytes_ ? off % smemBytes_ : off) : off % kStaticSmemLimit;
    std::string where = std::to_string(n) + " bytes at offset " + std::to_string(shown) + " of " +
                        (region == 0 ? "dynamic" : "static") + " shared memory";
    if (hazard == Hazard::AsyncPending)
      return "shared memory race, cp.async not waited for (racecheck): " + who(me) +
             (write ? " writes " : " reads ") + where + ", the destination of a cp.async by " +
             who(b.writer) + " that has not completed (no cp.async.wait_group for it)";
    if (hazard == Hazard::Uninitialised)
      return "uninitialised shared memory read (initcheck): " + who(me) + " reads " + where +
             ", which no thread of the block has written";
    bool war = hazard == Hazard::WriteAfterRead;
    std::string kind = war                                ? "write after read"
                       : hazard == Hazard::ReadAfterWrite ? "read after write"
                                                          : "write after write";
    std::string others = war && b.readers != ShadowByte::OneReader ? " (among others)" : "";
    return "shared memory race, " + kind + " (racecheck): " + who(me) +
           (write ? " writes " : " reads ") + where + ", which " + who(war ? b.reader : b.writer) +
           others + (war ? " read" : " wrote") + " with no __syncthreads between";
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
    sharedBase_[0] = reinterpret_cast<uintptr_t>(smem);
    sharedBytes_[0] = smemBytes * blocks_;
    sharedBase_[1] = reinterpret_cast<uintptr_t>(statics_);
    sharedBytes_[1] = size_t(blocks_) * kStaticSmemLimit;
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
      fail("the kernel's static __shared__ variables need more than " +
           std::to_string(kStaticSmemLimit) +
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

  /// Lands thread th's copies of groups before `group` (~0u: all, uncommitted too).
  void completeCopies(EmuThread &th, uint32_t group) {
    if (th.copies.empty())
      return;
    unsigned me = static_cast<unsigned>(&th - threads_.data());
    size_t kept = 0;
    for (const EmuThread::AsyncCopy &c : th.copies) {
      if (group != ~0u && c.group >= group) {
        th.copies[kept++] = c;
        continue;
      }
      std::memcpy(c.dst, c.src, c.srcBytes);
      std::memset(c.dst + c.srcBytes, 0, c.bytes - c.srcBytes);
      if (!check_)
        continue;
      forCheckedBytes(reinterpret_cast<uintptr_t>(c.dst), c.bytes,
                      [&](int, uint64_t, ShadowByte &raw) {
                        ShadowByte &b = fresh(raw);
                        b.asyncPending = false;
                        b.written = true;
                        b.writer = me;
                        b.writeEpoch = blockEpoch_[me / perBlock_];
                        b.writeWarpEpoch = warpEpoch_[warpOf(me)];
                        b.readers = ShadowByte::NoReader;
                      });
    }
    th.copies.resize(kept);
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
          error_ = "threads of block " + std::to_string(b) +
                   " wait at different __syncthreads call sites";
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
        error_ = "lane " + std::to_string(lane) +
                 " calls a warp collective with a mask that excludes it";
        return false;
      }
      for (unsigned j = lo; j < hi; ++j)
        if (((th.mask >> (j - lo)) & 1u) && threads_[j].state != EmuThread::AtWarpBarrier) {
          error_ = "lane " + std::to_string(lane) + "'s warp collective names lane " +
                   std::to_string(j - lo) + " in its mask, which has exited";
          return false;
        }
      for (unsigned j = hi - lo; j < 32; ++j)
        if ((th.mask >> j) & 1u) {
          error_ = "lane " + std::to_string(lane) + "'s warp collective names lane " +
                   std::to_string(j) + ", which does not exist (the block has " +
                   std::to_string(hi - lo) + " threads in this warp)";
          return false;
        }
    }
    for (unsigned i = lo; i < hi; ++i)
      if (threads_[i].state == EmuThread::AtWarpBarrier && threads_[i].op) {
        error_ = "lanes of a warp wait at a warp-wide operation and at a shuffle, ballot or "
                 "__syncwarp";
        return false;
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
  EmuThread *accessAs_ = nullptr; // inside a warp operation: whose accesses these are
  unsigned laneBase_ = 0;         // inside a warp operation: the warp's first thread
  bool readied_ = false;          // a warp operation made threads ready this round
  uint64_t sharedBase_[2] = {}, sharedBytes_[2] = {}; // the run's dynamic, static shared memory
  unsigned perBlock_ = 0, blocks_ = 0;
  // --check
  std::vector<uint32_t> blockEpoch_, warpEpoch_;
  struct StaticSite {
    const void *site;
    unsigned block;
    size_t offset;
  };
  uint8_t *dynamic_ = nullptr,
          *statics_ = nullptr; // this runner's areas of the backend's shared memory
  std::vector<StaticSite> staticSites_;
  std::vector<size_t> staticUsed_;
  Reserve shadow_[2]; // ShadowByte records: dynamic, static shared memory
  bool check_ = false;
  uint32_t gen_ = 0;
  size_t smemBytes_ = 0;
  bool fibers_ = false;
  bool killing_ = false;
  std::optional<std::string> error_;
};

namespace {

void apiSyncthreads(const void *site) {
  tlsRunner->syncthreads(site);
}
void apiSyncwarp(unsigned mask) {
  tlsRunner->exchange(0, 0, mask, false);
}
unsigned long long apiExchange(unsigned long long v, int src, unsigned mask) {
  return tlsRunner->exchange(v, src, mask, false);
}
unsigned apiBallot(int pred, unsigned mask) {
  return static_cast<unsigned>(tlsRunner->exchange(pred ? 1 : 0, 0, mask, true));
}
void apiTrap(const char *msg) {
  tlsRunner->fail(std::string("kernel trap: ") + msg);
}
void apiGridsync() {
  tlsRunner->gridsync();
}
void apiAccess(const void *p, unsigned long long n, int write) {
  tlsRunner->access(reinterpret_cast<uintptr_t>(p), n, write != 0);
}
void *apiStaticShared(const void *site, unsigned long long bytes, unsigned align) {
  return tlsRunner->staticShared(site, bytes, align);
}
void apiWarpOp(void *operands, unsigned mask, void (*op)(void *const *, unsigned)) {
  tlsRunner->warpOp(operands, mask, op);
}
void apiAccessAsLane(int lane) {
  tlsRunner->accessAsLane(lane);
}
void apiCpAsync(void *dst, const void *src, unsigned bytes, unsigned srcBytes) {
  tlsRunner->cpAsync(dst, src, bytes, srcBytes);
}
void apiCpAsyncCommit() {
  tlsRunner->cpAsyncCommit();
}
void apiCpAsyncWait(unsigned n) {
  tlsRunner->cpAsyncWait(n);
}

const dlc_emu_api kApiTable = {apiSyncthreads, apiSyncwarp,     apiExchange, apiBallot,
                               apiTrap,        apiGridsync,     apiAccess,   apiStaticShared,
                               apiWarpOp,      apiAccessAsLane, apiCpAsync,  apiCpAsyncCommit,
                               apiCpAsyncWait};

} // namespace

BlockRunner::BlockRunner() : impl_(std::make_unique<FiberScheduler>()) {}
BlockRunner::~BlockRunner() = default;
BlockRunner::BlockRunner(BlockRunner &&) noexcept = default;
BlockRunner &BlockRunner::operator=(BlockRunner &&) noexcept = default;
void BlockRunner::setSharedSlot(uint8_t *slot) {
  impl_->setSharedSlot(slot);
}
void BlockRunner::setOrder(SessionOptions::ThreadOrder o, uint64_t seed) {
  impl_->setOrder(o, seed);
}
std::optional<std::string> BlockRunner::run(const Launch &l, uint64_t first, unsigned blocks,
                                            size_t smemBytes) {
  return impl_->run(l, first, blocks, smemBytes);
}

const dlc_emu_api &emuApi() {
  return kApiTable;
}

} // namespace dlc::rt
