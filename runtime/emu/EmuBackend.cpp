//===- EmuBackend.cpp - Runs CUDA kernels compiled for the host ------------===//
//
// The package's emu module is the generated CUDA source compiled by the host
// compiler with dlc_emu_prelude.h. It is loaded from memory (memfd + dlopen).
// Blocks of a grid are spread over a thread pool, one BlockRunner per worker
// (BlockRunner.h: fibers for kernels with barriers or warp collectives, a plain
// loop for the others). GEMM steps run on a CBLAS loaded at run time (HostBlas.h).
//===----------------------------------------------------------------------===//
#include "../Backend.h"
#include "BlockRunner.h"
#include "HostBlas.h"
#include "ThreadPool.h"
#include "dlc/package/EmuAbi.h"
#include "dlc/support/Gelu.h"
#include "dlc/support/Half.h"
#include "dlc/support/HostKey.h"

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <dlfcn.h>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sys/mman.h>
#include <thread>
#include <tuple>
#include <type_traits>
#include <unistd.h>

namespace dlc::rt {
namespace {

/// The vendor steps' 16-bit elements (FP16, or BF16 where `bf`): element i of p as a
/// float, a float stored rounded to nearest even, a float rounded to the type.
float load16(const uint8_t *p, int64_t i, bool bf) {
  uint16_t h;
  std::memcpy(&h, p + 2 * i, 2);
  return bf ? bf16ToFloat(h) : halfToFloat(h);
}
void store16(uint8_t *p, int64_t i, float v, bool bf) {
  const uint16_t h = bf ? floatToBF16(v) : floatToHalf(v);
  std::memcpy(p + 2 * i, &h, 2);
}
float round16(float v, bool bf) {
  return bf ? bf16ToFloat(floatToBF16(v)) : halfToFloat(floatToHalf(v));
}

/// The emu backend's second stream: all-reduces of gradient buckets run on a thread
/// of their own, in the order they were started, while the pool computes the rest
/// of the backward pass. Every rank starts the same buckets in the same order, which
/// is what MPI needs of collectives.
class CollectiveThread {
public:
  explicit CollectiveThread(std::shared_ptr<Communicator> comm) : comm_(std::move(comm)) {}
  ~CollectiveThread() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable())
      thread_.join();
  }
  /// Starts the collective of a package step on `data` (its staging) and `out`.
  void start(const pkg::Collective &c, void *data, void *out) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!thread_.joinable())
      thread_ = std::thread([this] { loop(); });
    uint32_t bucket = c.bucket();
    queue_.push_back(
        {bucket, c.op(), data, out, c.count(), c.dtype(), std::max<uint32_t>(c.ranks(), 1)});
    pending_[bucket] = true;
    cv_.notify_all();
  }
  /// Waits for a bucket's average (nothing if it was not started); its error if it failed.
  Status wait(uint32_t bucket) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !pending_[bucket]; });
    return error_;
  }
  Status drain() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
    for (auto &[bucket, pending] : pending_)
      pending = false;
    return error_;
  }
  /// The all-reduces run so far and the seconds they took.
  std::pair<uint64_t, double> done() {
    std::lock_guard<std::mutex> lock(mu_);
    return {count_, seconds_};
  }

private:
  struct Job {
    uint32_t bucket;
    pkg::CollectiveOp op;
    void *data, *out;
    size_t count;
    pkg::DType dtype;
    uint32_t ranks;
    Status run(Communicator &comm) const {
      switch (op) {
      case pkg::CollectiveOp::ReduceScatter:
        return comm.reduceScatter(data, out, count / ranks, dtype, ReduceOp::Avg);
      case pkg::CollectiveOp::AllGather:
        return comm.allGather(data, out, count * pkg::dtypeSize(dtype));
      default:
        return comm.allReduce(data, count, dtype, ReduceOp::Avg);
      }
    }
  };
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty())
        return;
      Job j = queue_.front();
      queue_.pop_front();
      busy_ = true;
      Status st;
      if (!error_) { // after a failure, the ranks no longer agree on what comes next
        lock.unlock();
        auto t0 = std::chrono::steady_clock::now();
        st = j.run(*comm_);
        double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        lock.lock();
        ++count_;
        seconds_ += secs;
      }
      if (st && !error_)
        error_ = st;
      busy_ = false;
      pending_[j.bucket] = false;
      cv_.notify_all();
    }
  }
  std::shared_ptr<Communicator> comm_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  std::map<uint32_t, bool> pending_;
  bool busy_ = false, stop_ = false;
  uint64_t count_ = 0;
  double seconds_ = 0;
  Status error_;
  std::thread thread_;
};

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
    // More than the machine's memory fails here rather than in the allocator, and a
    // size near 2^64 cannot wrap the rounding.
    if (bytes > hostMemoryBytes())
      return false;
    n = bytes;
    size_t total = (bytes + 255) / 256 * 256 + 256;
    p = std::aligned_alloc(256, total);
    if (p)
      std::memset(p, fill, total);
    return p != nullptr;
  }
  static size_t hostMemoryBytes() {
    long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page)
                                 : size_t{1} << 40;
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
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// A kernel's entry point and the module it lives in.
struct EmuKernel {
  void (*thunk)(const void *) = nullptr;
  const EmuModule *module = nullptr;
};

class EmuBackend : public Backend {
public:
  explicit EmuBackend(const SessionOptions &o)
      : opts_(o),
        pool_(o.emuThreads > 0 ? o.emuThreads : std::max(1u, std::thread::hardware_concurrency())),
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
    buffers_ = p.meta().buffers();
    const pkg::Package &m = p.meta();
    if (m.kernels() && m.kernels()->size()) {
      bool hasEmuModule = false;
      if (m.modules())
        for (const pkg::Module *x : *m.modules())
          hasEmuModule |= x->kind() == pkg::ModuleKind::EmuSharedObject;
      if (!hasEmuModule)
        return Status(StatusCode::Unavailable,
                      p.name() +
                          ": the package has no emu module (compile with --target including emu)");
      DLC_RETURN_IF_ERROR(checkHostCodeTrust(p));
      std::map<std::string, EmuKernel> thunks;
      if (m.modules())
        for (const pkg::Module *x : *m.modules())
          if (x->kind() == pkg::ModuleKind::EmuSharedObject) {
            if (opts_.check && !endsWith(x->target() ? x->target()->str() : "", "-check"))
              note_ =
                  "--check poisons memory, but initcheck and racecheck of shared memory need the "
                  "package's emu module built with --target emu-check";
            modules_.push_back(std::make_unique<EmuModule>());
            DLC_RETURN_IF_ERROR(
                loadModule(*modules_.back(), p.section(x->data()), x->data()->size(), thunks));
          }
      if (modules_.empty())
        return Status(StatusCode::Unavailable,
                      p.name() +
                          ": the package has no emu module (compile with --target including emu)");
      for (const pkg::Kernel *k : *m.kernels()) {
        auto it = thunks.find(k->name()->str());
        if (it == thunks.end())
          return Status(StatusCode::InvalidPackage,
                        p.name() + ": emu module lacks kernel '" + k->name()->str() + "'");
        kernels_.push_back(it->second);
      }
    }
    // Any collective step of any package then has an MPI communicator to run on.
    if (opts_.rank.size > 1 && (!opts_.communicator || opts_.communicator->onDevice()))
      return Status(StatusCode::InvalidArgument, "emu ranks average their gradients through MPI: "
                                                 "start them with mpirun or `dlc train --nproc`");
    if (!arena_.allocate(m.arena_bytes(), opts_.check ? 0xff : 0))
      return Status(StatusCode::Internal,
                    p.name() + ": cannot allocate the arena of " + std::to_string(m.arena_bytes()) +
                        " bytes (this machine has " +
                        std::to_string(AlignedBuffer::hostMemoryBytes()) + " bytes of memory)");
    // Weights: one copy per model, shared by its emu sessions.
    weights_ = std::static_pointer_cast<EmuWeights>(
        model.weights(DeviceKind::Emu, 0, [&]() -> std::shared_ptr<WeightStore> {
          auto w = std::make_shared<EmuWeights>();
          if (!w->buf.allocate(m.weight_bytes()))
            return nullptr;
          if (m.weights())
            for (const pkg::Weight *wt : *m.weights()) {
              const pkg::Buffer *b = m.buffers()->Get(wt->buffer());
              std::memcpy(static_cast<uint8_t *>(w->buf.p) + b->offset(), p.section(wt->data()),
                          wt->data()->size());
            }
          return w;
        }));
    if (!weights_)
      return Status(StatusCode::Internal, "out of host memory for the weights");
    return Status::ok();
  }

  uint8_t *address(const pkg::BufRef &r) const {
    const pkg::Buffer *b = bufferAt(r.buffer());
    auto *base =
        static_cast<uint8_t *>(b->region() == pkg::Region::Arena ? arena_.p : weights_->buf.p);
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
  Status synchronize() override {
    if (collectives_)
      if (Status st = collectives_->drain(); st && !sticky_)
        sticky_ = st;
    return sticky_;
  }

  Status collective(const pkg::Collective &a, bool local) override {
    if (sticky_)
      return sticky_;
    uint8_t *staging = address(*a.staging());
    if (a.sources())
      for (size_t k = 0; k < a.sources()->size(); ++k)
        std::memmove(staging + a.offsets()->Get(k), address(*a.sources()->Get(k)),
                     a.sizes()->Get(k));
    size_t bytes = a.count() * pkg::dtypeSize(a.dtype());
    bool alone = local || opts_.rank.size <= 1; // every rank alike: a mean is this rank's values
    // This rank's share of staging: a shard always, a reduce-scatter alone.
    if (a.op() == pkg::CollectiveOp::Shard ||
        (alone && a.op() == pkg::CollectiveOp::ReduceScatter)) {
      size_t share = bytes / a.ranks();
      std::memcpy(address(*a.output()), staging + static_cast<size_t>(opts_.rank.rank) * share,
                  share);
      return Status::ok();
    }
    if (alone) {
      if (a.op() == pkg::CollectiveOp::AllGather)
        for (uint32_t r = 0; r < a.ranks(); ++r)
          std::memcpy(address(*a.output()) + r * bytes, staging, bytes);
      return Status::ok();
    }
    if (!collectives_)
      collectives_ = std::make_unique<CollectiveThread>(opts_.communicator);
    collectives_->start(a, staging, a.output() ? address(*a.output()) : nullptr);
    return Status::ok();
  }
  Status waitCollective(const pkg::CollectiveWait &w) override {
    if (sticky_)
      return sticky_;
    if (collectives_) {
      auto t0 = std::chrono::steady_clock::now();
      Status st = collectives_->wait(w.bucket());
      waitSeconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (st)
        return sticky_ = st;
    }
    return Status::ok();
  }
  CollectiveStats collectiveStats() const override {
    CollectiveStats s;
    if (collectives_)
      std::tie(s.allReduces, s.reduceSeconds) = collectives_->done();
    s.waitSeconds = waitSeconds_;
    return s;
  }
  Status broadcast(const pkg::BufRef &r, size_t bytes, int root) override {
    if (sticky_)
      return sticky_;
    if (opts_.rank.size <= 1)
      return Status::ok();
    return opts_.communicator->broadcast(address(r), bytes, root);
  }

  Status launch(const pkg::Launch &l, const std::string &node) override {
    if (sticky_)
      return sticky_;
    DLC_RETURN_IF_ERROR(checkLaunchLimits(*pkg_, l));
    const pkg::Kernel *k = pkg_->meta().kernels()->Get(l.kernel());
    std::vector<uint64_t> params;
    resolveParams(l, params,
                  [&](const pkg::BufRef &r) { return reinterpret_cast<uint64_t>(address(r)); });
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
      sticky_ = Status(StatusCode::LaunchFailure, "kernel '" + k->name()->str() + "' (node '" +
                                                      node + "') failed on emu: " + *err);
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
          v = geluTanh(v);
      }
  }

  Status cudnnConv(const pkg::CudnnConv &c, const std::string &node) override {
    (void)node;
    if (sticky_)
      return sticky_;
    const bool bf = c.dtype() == pkg::DType::BF16;
    auto rd = [&](const uint8_t *p, int64_t i) { return load16(p, i, bf); };
    // Channels-last, in 3 spatial dimensions (leading ones of extent 1 for 2-D).
    const int64_t nd = c.kernel()->size(), C = c.c(), K = c.k(), G = c.groups(), Cg = C / G,
                  Kg = K / G;
    int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, ker[3] = {1, 1, 1}, st[3] = {1, 1, 1},
            dil[3] = {1, 1, 1}, pad[3] = {0, 0, 0};
    for (int64_t d = 0; d < nd; ++d) {
      const int64_t e = 3 - nd + d;
      in[e] = c.spatial_in()->Get(d), out[e] = c.spatial_out()->Get(d);
      ker[e] = c.kernel()->Get(d), st[e] = c.stride()->Get(d);
      dil[e] = c.dilation()->Get(d), pad[e] = c.pad_begin()->Get(d);
    }
    const uint8_t *x = address(*c.x()), *w = address(*c.w()),
                  *bias = c.bias() ? address(*c.bias()) : nullptr;
    uint8_t *y = address(*c.y());
    for (int64_t n = 0; n < c.n(); ++n)
      for (int64_t o0 = 0; o0 < out[0]; ++o0)
        for (int64_t o1 = 0; o1 < out[1]; ++o1)
          for (int64_t o2 = 0; o2 < out[2]; ++o2)
            for (int64_t k = 0; k < K; ++k) {
              const int64_t g = k / Kg;
              float acc = 0;
              for (int64_t t0 = 0; t0 < ker[0]; ++t0)
                for (int64_t t1 = 0; t1 < ker[1]; ++t1)
                  for (int64_t t2 = 0; t2 < ker[2]; ++t2) {
                    const int64_t i0 = o0 * st[0] - pad[0] + t0 * dil[0],
                                  i1 = o1 * st[1] - pad[1] + t1 * dil[1],
                                  i2 = o2 * st[2] - pad[2] + t2 * dil[2];
                    if (i0 < 0 || i0 >= in[0] || i1 < 0 || i1 >= in[1] || i2 < 0 || i2 >= in[2])
                      continue;
                    const int64_t xi = (((n * in[0] + i0) * in[1] + i1) * in[2] + i2) * C + g * Cg,
                                  wi = (((k * ker[0] + t0) * ker[1] + t1) * ker[2] + t2) * Cg;
                    for (int64_t ci = 0; ci < Cg; ++ci)
                      acc += rd(x, xi + ci) * rd(w, wi + ci);
                  }
              const int64_t yi = (((n * out[0] + o0) * out[1] + o1) * out[2] + o2) * K + k;
              if (bias) // cuDNN's fusion: on the FP32 sum, one rounding at the end
                acc += rd(bias, k);
              if (c.relu())
                acc = std::max(acc, 0.0f);
              store16(y, yi, acc, bf);
            }
    return Status::ok();
  }

  Status cudnnSdpa(const pkg::CudnnSdpa &a, const std::string &node) override {
    (void)node;
    if (sticky_)
      return sticky_;
    const bool bf = a.dtype() == pkg::DType::BF16;
    auto rd = [&](const uint8_t *p, int64_t i) { return load16(p, i, bf); };
    auto st = [](const flatbuffers::Vector<int64_t> *v, int i) { return v->Get(i); };
    const uint8_t *q = address(*a.q()), *k = address(*a.k()), *v = address(*a.v());
    uint8_t *o = address(*a.o());
    const int64_t sq = a.sq(), sk = a.sk(), d = a.d(), dv = a.dv();
    std::vector<float> p(static_cast<size_t>(sk)), acc(static_cast<size_t>(dv));
    for (int64_t b = 0; b < a.b(); ++b)
      for (int64_t h = 0; h < a.h(); ++h) {
        auto base = [&](const flatbuffers::Vector<int64_t> *s) {
          return b * st(s, 0) + h * st(s, 1);
        };
        const int64_t qb = base(a.q_strides()), kb = base(a.k_strides()), vb = base(a.v_strides()),
                      ob = base(a.o_strides());
        for (int64_t i = 0; i < sq; ++i) {
          // FP32 scores, scaled; a causal mask keeps keys j <= i; the softmax in FP32.
          float mx = -std::numeric_limits<float>::infinity();
          for (int64_t j = 0; j < sk; ++j) {
            float s = -std::numeric_limits<float>::infinity();
            if (!a.causal() || j <= i) {
              float dot = 0;
              for (int64_t c = 0; c < d; ++c)
                dot += rd(q, qb + i * st(a.q_strides(), 2) + c) *
                       rd(k, kb + j * st(a.k_strides(), 2) + c);
              s = dot * a.scale();
            }
            p[static_cast<size_t>(j)] = s;
            mx = std::max(mx, s);
          }
          float sum = 0;
          for (float &x : p)
            sum += (x = std::isinf(x) && x < 0 ? 0.0f : std::exp(x - mx));
          // (P in the I/O type, as the second matmul takes it.)
          std::fill(acc.begin(), acc.end(), 0.0f);
          for (int64_t j = 0; j < sk; ++j) {
            const float pj = p[static_cast<size_t>(j)] / sum;
            const float pr = round16(pj, bf);
            for (int64_t c = 0; c < dv; ++c)
              acc[static_cast<size_t>(c)] += pr * rd(v, vb + j * st(a.v_strides(), 2) + c);
          }
          for (int64_t c = 0; c < dv; ++c) {
            store16(o, ob + i * st(a.o_strides(), 2) + c, acc[static_cast<size_t>(c)], bf);
          }
        }
      }
    return Status::ok();
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
        gemmAs<float>(g, reinterpret_cast<const uint8_t *>(ra.data()),
                      reinterpret_cast<const uint8_t *>(rb.data()), C, Cin, epilogueApplied,
                      Identity{});
      } else {
        gemmAs<float>(g, A, B, C, Cin, epilogueApplied, Identity{});
      }
      break;
    case pkg::DType::F64:
      gemmAs<double>(g, A, B, C, Cin, epilogueApplied, Identity{});
      break;
    // 16-bit types as a GPU computes them (CUBLAS_COMPUTE_32F): float products and
    // sums, the result rounded once to the storage type.
    case pkg::DType::F16:
      gemmAs<float>(g, A, B, C, Cin, epilogueApplied, Half16{halfToFloat, floatToHalf});
      break;
    case pkg::DType::BF16:
      gemmAs<float>(g, A, B, C, Cin, epilogueApplied, Half16{bf16ToFloat, floatToBF16});
      break;
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
  static const T *view(const uint8_t *base, int64_t offset, int64_t rows, int64_t cols, int64_t ld,
                       const Conv &conv, std::vector<T> &scratch) {
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
  void gemmAs(const pkg::Gemm &g, const uint8_t *A, const uint8_t *B, uint8_t *C,
              const uint8_t *Cin, bool withEpilogue, const Conv &conv) {
    int64_t ar = g.trans_a() ? g.k() : g.m(), ac = g.trans_a() ? g.m() : g.k();
    int64_t br = g.trans_b() ? g.n() : g.k(), bc = g.trans_b() ? g.k() : g.n();
    std::vector<T> sa, sb, sc, sbias;
    const T *bias =
        g.bias() ? view<T>(address(*g.bias()), 0, 1, g.n(), g.n(), conv, sbias) : nullptr;
    for (int64_t b = 0; b < g.batch(); ++b) {
      const T *a = view<T>(A, b * g.stride_a(), ar, ac, g.lda(), conv, sa);
      const T *bb = view<T>(B, b * g.stride_b(), br, bc, g.ldb(), conv, sb);
      T *c;
      if constexpr (std::is_same_v<Conv, Identity>) {
        c = reinterpret_cast<T *>(C) + b * g.stride_c();
        if (Cin && g.beta() != 0 && Cin != C) // D = ... + beta * Cin: start from Cin
          for (int64_t r = 0; r < g.m(); ++r)
            std::memmove(c + r * g.ldc(),
                         reinterpret_cast<const T *>(Cin) + b * g.stride_c() + r * g.ldc(),
                         g.n() * sizeof(T));
      } else {
        sc.assign(static_cast<size_t>(g.m() * g.ldc()), T(0));
        if (g.beta() != 0)
          view<T>(Cin ? Cin : C, b * g.stride_c(), g.m(), g.n(), g.ldc(), conv, sc);
        c = sc.data();
      }
      emu::hostGemm(g.trans_a(), g.trans_b(), g.m(), g.n(), g.k(), T(g.alpha()), a, g.lda(), bb,
                    g.ldb(), T(g.beta()), c, g.ldc());
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

  /// The package's host code runs only when this user compiled it here (its signature
  /// verifies with this user's key) or with the user's consent.
  Status checkHostCodeTrust(const pkg::PackageFile &p) {
    if (opts_.allowHostCode)
      return Status::ok();
    auto key = loadHostKey(/*create=*/false);
    if (key.ok() && p.signedWith(*key))
      return Status::ok();
    return Status(StatusCode::InvalidPackage,
                  p.name() +
                      ": the package carries host code (its emu module) that was not compiled "
                      "by this user on this machine (" +
                      (key.ok() ? "its signature does not verify with " + hostKeyPath()
                                : key.status().message()) +
                      "); dlc runs it only with --allow-host-code (SessionOptions::allowHostCode, "
                      "the C API's dlc_session_create_allowing_host_code, Python's "
                      "allow_host_code=True). Run the package on a GPU, where only its GPU code "
                      "runs, or compile the model on this machine");
  }

  Status loadModule(EmuModule &mod, const uint8_t *data, size_t n,
                    std::map<std::string, EmuKernel> &thunks) {
    int fd = memfd_create("dlc-emu-kernels", MFD_CLOEXEC);
    if (fd < 0)
      return Status(StatusCode::Internal,
                    std::string("memfd_create failed: ") + std::strerror(errno));
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
      return Status(StatusCode::InvalidPackage,
                    std::string("cannot load the emu module: ") + dlerror());
    auto version = reinterpret_cast<dlc_emu_abi_version_fn>(dlsym(mod.lib, "dlc_emu_abi_version"));
    auto kernels = reinterpret_cast<dlc_emu_kernels_fn>(dlsym(mod.lib, "dlc_emu_kernels"));
    auto setApi = reinterpret_cast<dlc_emu_set_api_fn>(dlsym(mod.lib, "dlc_emu_set_api"));
    mod.setThread = reinterpret_cast<dlc_emu_set_thread_fn>(dlsym(mod.lib, "dlc_emu_set_thread"));
    auto setChecked =
        reinterpret_cast<dlc_emu_set_checked_fn>(dlsym(mod.lib, "dlc_emu_set_checked"));
    if (!version || !kernels || !setApi || !mod.setThread || !setChecked)
      return Status(StatusCode::InvalidPackage, "the emu module does not export the dlc emu ABI");
    if (version() != DLC_EMU_ABI_VERSION)
      return Status(StatusCode::InvalidPackage, "emu module ABI version " +
                                                    std::to_string(version()) + ", runtime has " +
                                                    std::to_string(DLC_EMU_ABI_VERSION));
    setApi(&emuApi());
    // Under --check, loads and stores in the runners' shared memory reach the runtime.
    setChecked(reinterpret_cast<uintptr_t>(shared_.data()),
               opts_.check ? runners_.size() * kSharedSlot : 0);
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
  std::unique_ptr<CollectiveThread> collectives_;
  double waitSeconds_ = 0;
};

} // namespace

std::unique_ptr<Backend> createEmuBackend(const SessionOptions &opts) {
  return std::make_unique<EmuBackend>(opts);
}

} // namespace dlc::rt
