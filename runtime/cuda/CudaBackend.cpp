//===- CudaBackend.cpp - The GPU backend: driver API and cuBLASLt via dlopen ===//
//
// Written against the real CUDA headers but linked against nothing: libcuda.so.1
// and libcublasLt are loaded at run time, so one runtime binary works on machines
// with and without a GPU and says which library or device is missing. The tables
// of entry points (Driver.h) can be replaced by fakes, which is how its behaviour
// is tested without a GPU; the tests that need one carry the ctest label `gpu`.
//
// Every entry point makes the device's primary context current for its duration
// and restores the caller's (CtxGuard), so a session may be created on one thread
// and run on another, and the caller's own CUDA context is left as it was.
//===----------------------------------------------------------------------===//
#include "Driver.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <dlfcn.h>
#include <list>
#include <map>
#include <thread>

namespace dlc::rt::cuda {

#define DLC_STR2(x) #x
#define DLC_STR(x) DLC_STR2(x) // expands cuda.h's versioning macros (cuMemAlloc -> cuMemAlloc_v2)

Status Driver::load() {
  lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib)
    return Status(StatusCode::Unavailable,
                  "libcuda.so.1 could not be loaded (no NVIDIA driver on this machine)");
#define DLC_CU_LOAD(fn)                                                                            \
  fn##_ = reinterpret_cast<decltype(fn##_)>(dlsym(lib, DLC_STR(fn)));                              \
  if (!fn##_)                                                                                      \
    return Status(StatusCode::Unavailable, std::string("libcuda.so.1 lacks ") + DLC_STR(fn) +      \
                                               " (the NVIDIA driver is too old)");
  DLC_CU_LIST(DLC_CU_LOAD)
#undef DLC_CU_LOAD
  return Status::ok();
}

std::string Driver::error(CUresult r) const {
  const char *name = nullptr, *msg = nullptr;
  if (cuGetErrorName_)
    cuGetErrorName_(r, &name);
  if (cuGetErrorString_)
    cuGetErrorString_(r, &msg);
  return std::string(name ? name : "CUDA error " + std::to_string(static_cast<int>(r))) + ": " +
         (msg ? msg : "?");
}

Status CublasLt::load() {
  for (const char *name : {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"})
    if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)))
      break;
  if (!lib)
    return Status(StatusCode::Unavailable,
                  "libcublasLt.so.13 could not be loaded (install the CUDA toolkit's "
                  "cuBLAS or add its lib64 directory to LD_LIBRARY_PATH)");
#define DLC_LT_LOAD(fn)                                                                            \
  fn##_ = reinterpret_cast<decltype(fn##_)>(dlsym(lib, #fn));                                      \
  if (!fn##_)                                                                                      \
    return Status(StatusCode::Unavailable, std::string("libcublasLt lacks ") + #fn);
  DLC_LT_LIST(DLC_LT_LOAD)
#undef DLC_LT_LOAD
  return Status::ok();
}

namespace {

/// The largest kernel parameter space (CUDA 12.1 and later, Volta and newer).
constexpr size_t kMaxParamBytes = 32764;

/// Makes `ctx` current for a scope and restores whatever the calling thread had.
class CtxGuard {
public:
  CtxGuard(const Driver &d, CUcontext ctx) : d_(d) {
    pushed_ = ctx && d.cuCtxPushCurrent_(ctx) == CUDA_SUCCESS;
  }
  ~CtxGuard() {
    if (pushed_) {
      CUcontext popped;
      d_.cuCtxPopCurrent_(&popped);
    }
  }
  CtxGuard(const CtxGuard &) = delete;
  CtxGuard &operator=(const CtxGuard &) = delete;
  bool ok() const { return pushed_; }

private:
  const Driver &d_;
  bool pushed_ = false;
};

/// A model's weights on the device, shared by its cuda sessions. It holds its own
/// reference on the primary context so that it can outlive the session that made it.
struct CudaWeights : WeightStore {
  CUdeviceptr ptr = 0;
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  const Driver *drv = nullptr;
  ~CudaWeights() override {
    if (!drv || !ctx)
      return;
    {
      CtxGuard g(*drv, ctx);
      if (ptr)
        drv->cuMemFree_(ptr);
    }
    drv->cuDevicePrimaryCtxRelease_(dev);
  }
};

class CudaBackend : public Backend {
public:
  CudaBackend(const Driver &d, const CublasLt *lt, const SessionOptions &o) : drv_(d), opts_(o) {
    if (lt) {
      ltTable_ = *lt;
      ltLoaded_ = true;
    }
  }

  ~CudaBackend() override {
    if (!ctx_)
      return;
    {
      CtxGuard g(drv_, ctx_);
      // Collectives still in flight: bounded, and aborted when a peer is gone, before
      // anything they write is freed.
      if (nccl_ && !waitStreams().isOk())
        nccl_->abortCollectives();
      if (stream_)
        drv_.cuStreamSynchronize_(stream_);
      if (commStream_)
        drv_.cuStreamSynchronize_(commStream_);
      dropGraph();
      plans_.clear();
      dnn_.reset();
      if (ltHandle_)
        ltTable_.cublasLtDestroy_(ltHandle_);
      if (arena_)
        drv_.cuMemFree_(arena_);
      for (CUmodule mod : modules_)
        drv_.cuModuleUnload_(mod);
      for (const auto &[bucket, ev] : bucketEvents_) {
        drv_.cuEventDestroy_(ev.first);
        drv_.cuEventDestroy_(ev.second);
      }
      nccl_.reset();
      if (commStream_)
        drv_.cuStreamDestroy_(commStream_);
      if (stream_)
        drv_.cuStreamDestroy_(stream_);
    }
    weightStore_.reset();
    drv_.cuDevicePrimaryCtxRelease_(dev_);
  }

  Status init(int ordinal) {
    if (CUresult r = drv_.cuInit_(0))
      return Status(StatusCode::Unavailable, "cuInit failed: " + drv_.error(r));
    int count = 0;
    if (CUresult r = drv_.cuDeviceGetCount_(&count))
      return Status(StatusCode::Unavailable, "cannot count CUDA devices: " + drv_.error(r));
    if (count == 0)
      return Status(StatusCode::Unavailable, "no CUDA device is present");
    if (ordinal < 0 || ordinal >= count)
      return Status(StatusCode::InvalidArgument, "CUDA device " + std::to_string(ordinal) +
                                                     " does not exist (" + std::to_string(count) +
                                                     " present)");
    ordinal_ = ordinal;
    DLC_RETURN_IF_ERROR(check(drv_.cuDeviceGet_(&dev_, ordinal), "cuDeviceGet"));
    char name[256] = {0};
    drv_.cuDeviceGetName_(name, sizeof(name) - 1, dev_);
    name_ = name;
    drv_.cuDeviceGetAttribute_(&major_, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev_);
    drv_.cuDeviceGetAttribute_(&minor_, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev_);
    drv_.cuDeviceGetAttribute_(&sms_, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev_);
    drv_.cuDriverGetVersion_(&driverVersion_);
    DLC_RETURN_IF_ERROR(
        check(drv_.cuDevicePrimaryCtxRetain_(&ctx_, dev_), "cuDevicePrimaryCtxRetain"));
    CtxGuard g(drv_, ctx_);
    return check(drv_.cuStreamCreate_(&stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  }

  std::string describe() const override {
    return "cuda (" + name_ + ", sm_" + std::to_string(major_) + std::to_string(minor_) +
           ", driver for CUDA " + versionString(driverVersion_) +
           (useGraphs() ? ", CUDA graphs" : "") + ")";
  }
  DeviceKind kind() const override { return DeviceKind::Cuda; }
  int computeCapability() const override { return major_ * 10 + minor_; }
  std::string note() const override { return note_; }

  Status prepare(const Model &model) override {
    const pkg::PackageFile &p = model.file();
    pkg_ = &p;
    buffers_ = p.meta().buffers();
    const pkg::Package &m = p.meta();
    CtxGuard g(drv_, ctx_);
    if (major_ * 10 + minor_ < 80)
      return Status(StatusCode::Unavailable,
                    "this GPU (" + name_ + ", sm_" + std::to_string(major_) +
                        std::to_string(minor_) +
                        ") is older than dlc supports (sm_80, Ampere, and newer); "
                        "run on --device emu instead");
    // CUDA's compatibility promise holds within a major version: cubins and PTX from
    // CUDA 13.x need a driver for CUDA 13 or newer.
    if (m.cuda_version() && driverVersion_ / 1000 < static_cast<int>(m.cuda_version() / 1000))
      return Status(StatusCode::Unavailable,
                    p.name() + ": its GPU code was built with CUDA " +
                        versionString(m.cuda_version()) +
                        ", and this NVIDIA driver supports CUDA " + versionString(driverVersion_) +
                        " at most. Update the driver to one for CUDA " +
                        std::to_string(m.cuda_version() / 1000) + " or newer" +
                        (m.cuda_version() / 1000 == 13 ? " (the R580 series or later)" : "") +
                        ", or run on --device emu");
    if (m.kernels() && m.kernels()->size()) {
      uint32_t chunks = 0;
      for (const pkg::Kernel *k : *m.kernels())
        chunks = std::max(chunks, k->chunk() + 1);
      for (uint32_t c = 0; c < chunks; ++c) {
        const pkg::Module *mod = pickModule(m, c);
        if (!mod)
          return noModule(p, c);
        CUmodule handle = nullptr;
        if (CUresult r = drv_.cuModuleLoadData_(&handle, p.section(mod->data()))) {
          std::string hint;
          if (r == CUDA_ERROR_UNSUPPORTED_PTX_VERSION)
            hint = " (the driver is older than the CUDA " + versionString(m.cuda_version()) +
                   " that wrote this PTX: update it, or compile with a --target of sm_" +
                   std::to_string(major_) + std::to_string(minor_) + " to ship a cubin)";
          return Status(StatusCode::LaunchFailure,
                        "loading module " + mod->target()->str() + ": " + drv_.error(r) + hint);
        }
        modules_.push_back(handle);
      }
      for (const pkg::Kernel *k : *m.kernels()) {
        CUfunction f;
        DLC_RETURN_IF_ERROR(
            check(drv_.cuModuleGetFunction_(&f, modules_[k->chunk()], k->symbol()->c_str()),
                  "kernel " + k->name()->str()));
        functions_.push_back(f);
      }
    }
    if (m.arena_bytes())
      DLC_RETURN_IF_ERROR(
          check(drv_.cuMemAlloc_(&arena_, m.arena_bytes()), "allocating the arena"));
    // Weights: uploaded once per model, shared by its cuda sessions. The copies are
    // synchronous, and the context is synchronized before any stream uses them.
    Status weightStatus;
    weightStore_ = std::static_pointer_cast<CudaWeights>(
        model.weights(DeviceKind::Cuda, ordinal_, [&]() -> std::shared_ptr<WeightStore> {
          auto w = std::make_shared<CudaWeights>();
          if (CUresult r = drv_.cuDevicePrimaryCtxRetain_(&w->ctx, dev_)) {
            weightStatus = check(r, "retaining the context");
            return nullptr;
          }
          w->dev = dev_;
          w->drv = &drv_;
          if (m.weight_bytes())
            if (CUresult r = drv_.cuMemAlloc_(&w->ptr, m.weight_bytes())) {
              weightStatus = check(r, "allocating weights");
              return nullptr;
            }
          if (m.weights())
            for (const pkg::Weight *wt : *m.weights()) {
              const pkg::Buffer *b = m.buffers()->Get(wt->buffer());
              if (CUresult r = drv_.cuMemcpyHtoD_(w->ptr + b->offset(), p.section(wt->data()),
                                                  wt->data()->size())) {
                weightStatus = check(r, "uploading weights");
                return nullptr;
              }
            }
          if (CUresult r = drv_.cuCtxSynchronize_()) {
            weightStatus = check(r, "finishing the weight upload");
            return nullptr;
          }
          return w;
        }));
    if (!weightStore_)
      return weightStatus ? weightStatus : Status(StatusCode::Internal, "weights unavailable");
    weights_ = weightStore_->ptr;
    bool hasGemm = false;
    if (m.steps())
      for (const pkg::Step *s : *m.steps())
        hasGemm |= s->op_type() == pkg::StepKind::Gemm;
    auto cudnnStep = [](const pkg::Step *s) {
      return s->op_type() == pkg::StepKind::CudnnConv || s->op_type() == pkg::StepKind::CudnnSdpa;
    };
    if (m.steps())
      usesCudnn_ = std::any_of(m.steps()->begin(), m.steps()->end(), cudnnStep);
    if (m.variants())
      for (const pkg::ShapeVariant *v : *m.variants())
        if (v->steps())
          usesCudnn_ |= std::any_of(v->steps()->begin(), v->steps()->end(), cudnnStep);
    if (hasGemm) {
      if (!ltLoaded_) {
        DLC_RETURN_IF_ERROR(ltTable_.load());
        ltLoaded_ = true;
      }
      if (ltTable_.cublasLtCreate_(&ltHandle_) != CUBLAS_STATUS_SUCCESS)
        return Status(StatusCode::Unavailable, "cublasLtCreate failed");
    }
    if (m.bucket_bytes() && opts_.rank.size > 1) {
      // A device communicator of the caller's, or NCCL on the device whose context
      // is current here (this backend's), its id exchanged through the caller's.
      if (opts_.communicator && opts_.communicator->onDevice()) {
        nccl_ = opts_.communicator;
      } else {
        auto comm = createNcclCommunicator(opts_.comm, opts_.communicator);
        if (!comm)
          return comm.takeStatus();
        nccl_ = std::move(*comm);
      }
      DLC_RETURN_IF_ERROR(
          check(drv_.cuStreamCreate_(&commStream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate"));
    }
    return check(drv_.cuStreamSynchronize_(stream_), "synchronize");
  }

  Status bindExternal(uint32_t buffer, uint64_t addr) override {
    external_[buffer] = addr;
    // Addresses are baked into a captured graph and into the GEMM plans' alignment.
    CtxGuard g(drv_, ctx_);
    dropGraph();
    plans_.clear();
    return Status::ok();
  }

  bool runsTactic(pkg::TacticKind k, std::string &why) override {
    why.clear();
    if (k == pkg::TacticKind::Dlc)
      return true;
    if (k == pkg::TacticKind::CublasLt) { // loaded with the package's GEMMs
      why = ltHandle_ ? "" : "cuBLASLt is not loaded";
      return ltHandle_ != nullptr;
    }
    CtxGuard g(drv_, ctx_);
    Status st = dnn_->load();
    why = st.message();
    return st.isOk();
  }

  /// The same for every schedule of a session: cuDNN is loaded (or found missing)
  /// first, so its version is in it whether or not this schedule has cuDNN layers.
  std::string tacticKey() override {
    std::string key = name_ + "|sm_" + std::to_string(major_) + std::to_string(minor_) + "|" +
                      std::to_string(sms_) + " SMs|driver " + std::to_string(driverVersion_);
    if (usesCudnn_) { // (any schedule of the package: the same key for all)
      CtxGuard g(drv_, ctx_);
      key += dnn_->load().isOk() ? "|cudnn " + std::to_string(dnn_->version())
                                 : std::string("|no cudnn");
    }
    if (ltHandle_)
      key += "|cublaslt " + std::to_string(ltTable_.cublasLtGetVersion_());
    return key;
  }

  Status timeIssue(const std::function<Status()> &issue, int reps, double &micros) override {
    CtxGuard g(drv_, ctx_);
    struct Timing { // (a GEMM whose rank does not exist fails while timed)
      bool &flag;
      explicit Timing(bool &f) : flag(f) { flag = true; }
      ~Timing() { flag = false; }
    } timing(timing_);
    DLC_RETURN_IF_ERROR(issue()); // warm: plans are built, code is loaded
    DLC_RETURN_IF_ERROR(check(drv_.cuStreamSynchronize_(stream()), "synchronize"));
    CUevent start = nullptr, stop = nullptr;
    Status st = check(drv_.cuEventCreate_(&start, CU_EVENT_DEFAULT), "cuEventCreate");
    if (st.isOk())
      st = check(drv_.cuEventCreate_(&stop, CU_EVENT_DEFAULT), "cuEventCreate");
    if (st.isOk())
      st = check(drv_.cuEventRecord_(start, stream()), "cuEventRecord");
    for (int r = 0; st.isOk() && r < reps; ++r)
      st = issue();
    if (st.isOk())
      st = check(drv_.cuEventRecord_(stop, stream()), "cuEventRecord");
    if (st.isOk())
      st = check(drv_.cuEventSynchronize_(stop), "cuEventSynchronize");
    float ms = 0;
    if (st.isOk())
      st = check(drv_.cuEventElapsedTime_(&ms, start, stop), "cuEventElapsedTime");
    if (start)
      drv_.cuEventDestroy_(start);
    if (stop)
      drv_.cuEventDestroy_(stop);
    micros = 1000.0 * ms / std::max(reps, 1);
    return st;
  }

  Status cudnnConv(const pkg::CudnnConv &c, const std::string &node) override {
    CtxGuard guard(drv_, ctx_);
    return dnn_->conv(c, node, stream(), [&](const pkg::BufRef &r) { return address(r); });
  }
  Status cudnnSdpa(const pkg::CudnnSdpa &a, const std::string &node) override {
    CtxGuard guard(drv_, ctx_);
    return dnn_->sdpa(a, node, stream(), [&](const pkg::BufRef &r) { return address(r); });
  }

  Status setStream(void *stream) override {
    userStream_ = static_cast<CUstream>(stream);
    return Status::ok();
  }

  CUstream stream() const { return userStream_ ? userStream_ : stream_; }

  CUdeviceptr address(const pkg::BufRef &r) const {
    auto ext = external_.find(r.buffer());
    if (ext != external_.end())
      return ext->second + r.offset();
    const pkg::Buffer *b = bufferAt(r.buffer());
    return (b->region() == pkg::Region::Arena ? arena_ : weights_) + b->offset() + r.offset();
  }

  /// Synchronous: the caller may reuse `src` (pinned or not) as soon as it returns.
  Status upload(const pkg::BufRef &dst, const void *src, size_t n) override {
    CtxGuard g(drv_, ctx_);
    DLC_RETURN_IF_ERROR(
        check(drv_.cuMemcpyHtoDAsync_(address(dst), src, n, stream()), "host-to-device copy"));
    return check(drv_.cuStreamSynchronize_(stream()), "host-to-device copy");
  }
  Status download(void *dst, const pkg::BufRef &src, size_t n) override {
    CtxGuard g(drv_, ctx_);
    DLC_RETURN_IF_ERROR(
        check(drv_.cuMemcpyDtoHAsync_(dst, address(src), n, stream()), "device-to-host copy"));
    return check(drv_.cuStreamSynchronize_(stream()), "device-to-host copy");
  }
  Status copy(const pkg::Copy &c) override {
    CtxGuard g(drv_, ctx_);
    return check(drv_.cuMemcpyDtoDAsync_(address(*c.dst()), address(*c.src()), c.bytes(), stream()),
                 "device copy");
  }
  Status memset(const pkg::Memset &m) override {
    CtxGuard g(drv_, ctx_);
    return check(drv_.cuMemsetD8Async_(address(*m.dst()), m.value(), m.bytes(), stream()),
                 "memset");
  }
  Status synchronize() override {
    CtxGuard g(drv_, ctx_);
    if (!nccl_)
      return check(drv_.cuStreamSynchronize_(stream()), "synchronize");
    Status st = waitStreams();
    if (st)
      nccl_->abortCollectives(); // the kernels of a collective whose peer is gone never end
    return st;
  }

  /// With collectives in flight, a rank that died would leave this one waiting for
  /// ever: polls both streams, NCCL's asynchronous errors and the deadline.
  Status waitStreams() {
    auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(nccl_->timeoutSeconds());
    for (CUstream s : {commStream_, stream()}) {
      if (!s)
        continue;
      for (;;) {
        CUresult r = drv_.cuStreamQuery_(s);
        if (r == CUDA_SUCCESS)
          break;
        if (r != CUDA_ERROR_NOT_READY)
          return check(r, "synchronize");
        DLC_RETURN_IF_ERROR(nccl_->asyncError());
        if (std::chrono::steady_clock::now() > deadline)
          return Status(StatusCode::Unavailable,
                        "rank " + std::to_string(nccl_->rank()) + ": the step waited " +
                            std::to_string(static_cast<int>(nccl_->timeoutSeconds())) +
                            " s for the other ranks' collectives (did one of them die?)");
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
    return Status::ok();
  }

  Status collective(const pkg::Collective &a, bool local) override {
    CtxGuard g(drv_, ctx_);
    CUdeviceptr staging = address(*a.staging());
    // The pack runs on the main stream, in order with the producers of the gradients
    // and before any later step may reuse their memory.
    if (a.sources())
      for (size_t k = 0; k < a.sources()->size(); ++k)
        DLC_RETURN_IF_ERROR(check(drv_.cuMemcpyDtoDAsync_(staging + a.offsets()->Get(k),
                                                          address(*a.sources()->Get(k)),
                                                          a.sizes()->Get(k), stream()),
                                  "packing a gradient bucket"));
    size_t es = pkg::dtypeSize(a.dtype()), bytes = a.count() * es;
    bool alone = local || !nccl_; // every rank alike: a mean is this rank's values
    // This rank's share of staging, on the main stream: a shard always, a
    // reduce-scatter alone.
    if (a.op() == pkg::CollectiveOp::Shard ||
        (alone && a.op() == pkg::CollectiveOp::ReduceScatter)) {
      size_t share = bytes / a.ranks();
      return check(drv_.cuMemcpyDtoDAsync_(address(*a.output()),
                                           staging + static_cast<size_t>(opts_.rank.rank) * share,
                                           share, stream()),
                   "taking this rank's share");
    }
    if (alone) {
      if (a.op() == pkg::CollectiveOp::AllGather)
        for (uint32_t r = 0; r < a.ranks(); ++r)
          DLC_RETURN_IF_ERROR(check(
              drv_.cuMemcpyDtoDAsync_(address(*a.output()) + r * bytes, staging, bytes, stream()),
              "a local all-gather"));
      return Status::ok();
    }
    auto [it, fresh] = bucketEvents_.try_emplace(a.bucket(), nullptr, nullptr);
    if (fresh) {
      DLC_RETURN_IF_ERROR(
          check(drv_.cuEventCreate_(&it->second.first, CU_EVENT_DISABLE_TIMING), "cuEventCreate"));
      DLC_RETURN_IF_ERROR(
          check(drv_.cuEventCreate_(&it->second.second, CU_EVENT_DISABLE_TIMING), "cuEventCreate"));
    }
    DLC_RETURN_IF_ERROR(check(drv_.cuEventRecord_(it->second.first, stream()), "cuEventRecord"));
    DLC_RETURN_IF_ERROR(
        check(drv_.cuStreamWaitEvent_(commStream_, it->second.first, 0), "cuStreamWaitEvent"));
    switch (a.op()) {
    case pkg::CollectiveOp::ReduceScatter:
      DLC_RETURN_IF_ERROR(nccl_->reduceScatterDevice(staging, address(*a.output()),
                                                     a.count() / a.ranks(), a.dtype(),
                                                     ReduceOp::Avg, commStream_));
      break;
    case pkg::CollectiveOp::AllGather:
      DLC_RETURN_IF_ERROR(
          nccl_->allGatherDevice(staging, address(*a.output()), bytes, commStream_));
      break;
    default:
      DLC_RETURN_IF_ERROR(
          nccl_->allReduceDevice(staging, a.count(), a.dtype(), ReduceOp::Avg, commStream_));
    }
    return check(drv_.cuEventRecord_(it->second.second, commStream_), "cuEventRecord");
  }
  Status waitCollective(const pkg::CollectiveWait &w) override {
    auto it = bucketEvents_.find(w.bucket());
    if (!nccl_ || it == bucketEvents_.end())
      return Status::ok();
    CtxGuard g(drv_, ctx_);
    return check(drv_.cuStreamWaitEvent_(stream(), it->second.second, 0), "cuStreamWaitEvent");
  }
  Status broadcast(const pkg::BufRef &r, size_t bytes, int root) override {
    if (!nccl_)
      return Status::ok();
    CtxGuard g(drv_, ctx_);
    DLC_RETURN_IF_ERROR(check(drv_.cuStreamSynchronize_(stream()), "synchronize"));
    DLC_RETURN_IF_ERROR(nccl_->broadcastDevice(address(r), bytes, root, commStream_));
    return synchronize(); // bounded: rank 0 may never arrive
  }

  /// The first run captures the steps into a CUDA graph (nothing executes during
  /// capture), then every run launches the graph. Where capture or instantiation
  /// fails, the backend says so once and issues the steps one by one from then on.
  Status execute(const std::function<Status()> &issue) override {
    CtxGuard g(drv_, ctx_);
    if (!useGraphs())
      return issue();
    // One graph per schedule (shape variant), the most recently used first.
    auto cached = std::find_if(graphs_.begin(), graphs_.end(),
                               [&](const auto &e) { return e.first == schedule_; });
    if (cached != graphs_.end()) {
      graphs_.splice(graphs_.begin(), graphs_, cached);
    } else {
      CUgraphExec graphExec = nullptr;
      if (CUresult r = drv_.cuStreamBeginCapture_(stream(), CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)) {
        graphFailed("cuStreamBeginCapture: " + drv_.error(r));
        return issue();
      }
      Status st = issue();
      CUgraph graph = nullptr;
      CUresult r = drv_.cuStreamEndCapture_(stream(), &graph);
      if (st) { // a step the backend refused (launch limits, ...): nothing ran
        if (graph)
          drv_.cuGraphDestroy_(graph);
        return st;
      }
      if (r == CUDA_SUCCESS)
        r = drv_.cuGraphInstantiateWithFlags_(&graphExec, graph, 0);
      if (graph)
        drv_.cuGraphDestroy_(graph);
      if (r != CUDA_SUCCESS) {
        graphFailed(drv_.error(r));
        return issue();
      }
      graphs_.emplace_front(schedule_, graphExec);
      if (graphs_.size() > kGraphCacheSize) {
        drv_.cuGraphExecDestroy_(graphs_.back().second);
        graphs_.pop_back();
      }
    }
    return check(drv_.cuGraphLaunch_(graphs_.front().second, stream()), "launching the CUDA graph");
  }

  Status fitsResident(const pkg::Launch &l, bool &fits, std::string &why) override {
    fits = false;
    if (l.kernel() >= functions_.size())
      return Status(StatusCode::InvalidArgument, "no kernel " + std::to_string(l.kernel()));
    CtxGuard g(drv_, ctx_);
    CUfunction f = functions_[l.kernel()];
    if (l.dynamic_smem() > 48 * 1024)
      DLC_RETURN_IF_ERROR(
          check(drv_.cuFuncSetAttribute_(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                         static_cast<int>(l.dynamic_smem())),
                "opting in to dynamic shared memory"));
    return resident(f, l, fits, why);
  }

  /// Whether l's whole grid is resident at once with f's occupancy (after the
  /// shared-memory opt-in), and the figures.
  Status resident(CUfunction f, const pkg::Launch &l, bool &fits, std::string &why) {
    int perSm = 0;
    const uint64_t threads = uint64_t(l.block()->x()) * l.block()->y() * l.block()->z(),
                   blocks = uint64_t(l.grid()->x()) * l.grid()->y() * l.grid()->z();
    DLC_RETURN_IF_ERROR(check(drv_.cuOccupancyMaxActiveBlocksPerMultiprocessor_(
                                  &perSm, f, static_cast<int>(threads), l.dynamic_smem()),
                              "occupancy"));
    fits = blocks <= uint64_t(perSm) * uint64_t(sms_);
    why = std::to_string(blocks) + " blocks; the GPU holds " + std::to_string(perSm) +
          " per multiprocessor x " + std::to_string(sms_) + " multiprocessors";
    return Status();
  }

  Status launch(const pkg::Launch &l, const std::string &node) override {
    DLC_RETURN_IF_ERROR(checkLaunchLimits(*pkg_, l));
    CtxGuard g(drv_, ctx_);
    CUfunction f = functions_[l.kernel()];
    const pkg::Kernel *k = pkg_->meta().kernels()->Get(l.kernel());
    std::vector<uint64_t> params;
    resolveParams(l, params, [&](const pkg::BufRef &r) { return address(r); });
    size_t paramBytes = l.params() ? l.params()->size() : 0;
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, params.data(), CU_LAUNCH_PARAM_BUFFER_SIZE,
                     &paramBytes, CU_LAUNCH_PARAM_END};
    // Every kernel of the library takes one argument struct, which is the parameter
    // buffer; a cooperative launch must pass it as kernelParams[0], since the driver
    // refuses `extra` there (CUDA_ERROR_INVALID_VALUE, seen on an H200). The driver then
    // copies as many bytes as the kernel's struct has, unchecked against the buffer:
    // a buffer as large as the largest parameter space (32 KB) keeps a short one from a
    // damaged package inside our memory.
    if (k->cooperative())
      params.resize(std::max<size_t>(params.size(), (kMaxParamBytes + 7) / sizeof(uint64_t)), 0);
    void *kernelParams[] = {params.data()};
    if (l.dynamic_smem() > 48 * 1024)
      DLC_RETURN_IF_ERROR(
          check(drv_.cuFuncSetAttribute_(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                         static_cast<int>(l.dynamic_smem())),
                "opting in to dynamic shared memory"));
    CUlaunchAttribute coop{};
    CUlaunchConfig cfg{};
    cfg.gridDimX = l.grid()->x();
    cfg.gridDimY = l.grid()->y();
    cfg.gridDimZ = l.grid()->z();
    cfg.blockDimX = l.block()->x();
    cfg.blockDimY = l.block()->y();
    cfg.blockDimZ = l.block()->z();
    cfg.sharedMemBytes = l.dynamic_smem();
    cfg.hStream = stream();
    if (k->cooperative()) {
      // A grid barrier needs every block resident: check before the driver refuses.
      bool fits = false;
      std::string why;
      DLC_RETURN_IF_ERROR(resident(f, l, fits, why));
      if (!fits)
        return Status(StatusCode::LaunchFailure,
                      "kernel '" + k->name()->str() + "' (node '" + node +
                          "') needs every block resident for its grid barrier (" + why + ")");
      coop.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
      coop.value.cooperative = 1;
      cfg.attrs = &coop;
      cfg.numAttrs = 1;
      return check(drv_.cuLaunchKernelEx_(&cfg, f, kernelParams, nullptr),
                   "launching kernel for node '" + node + "'");
    }
    return check(drv_.cuLaunchKernelEx_(&cfg, f, nullptr, extra),
                 "launching kernel for node '" + node + "'");
  }

  /// Row-major C = op(A) op(B) as column-major C^T = op(B)^T op(A)^T, with the plan
  /// built on the step's first run.
  Status gemm(const pkg::Gemm &g, const std::string &node, bool &epilogueApplied) override {
    CtxGuard guard(drv_, ctx_);
    auto it = plans_.find(&g);
    if (it == plans_.end()) {
      auto plan = std::make_unique<GemmPlan>();
      DLC_RETURN_IF_ERROR(buildGemmPlan(
          ltTable_, ltHandle_, g, node, [&](const pkg::BufRef &r) { return address(r); }, timing_,
          *plan, note_));
      it = plans_.emplace(&g, std::move(plan)).first;
    }
    const GemmPlan &p = *it->second;
    epilogueApplied = p.epilogue || (!g.bias() && g.activation() == pkg::GemmActivation::None);
    float alpha32 = g.alpha(), beta32 = g.beta();
    double alpha64 = g.alpha(), beta64 = g.beta();
    const void *alpha = p.dtype == CUDA_R_64F ? static_cast<const void *>(&alpha64) : &alpha32;
    const void *beta = p.dtype == CUDA_R_64F ? static_cast<const void *>(&beta64) : &beta32;
    CUdeviceptr a = address(*g.b()), b = address(*g.a()), c = address(*g.c());
    CUdeviceptr cin = g.c_in() ? address(*g.c_in()) : c; // C may differ from D (residual input)
    void *ws = g.workspace() && g.workspace_bytes()
                   ? reinterpret_cast<void *>(address(*g.workspace()))
                   : nullptr;
    cublasStatus_t st = ltTable_.cublasLtMatmul_(
        ltHandle_, p.desc, alpha, reinterpret_cast<const void *>(a), p.la,
        reinterpret_cast<const void *>(b), p.lb, beta, reinterpret_cast<const void *>(cin), p.lc,
        reinterpret_cast<void *>(c), p.lc, &p.algo, ws, ws ? g.workspace_bytes() : 0,
        reinterpret_cast<cudaStream_t>(stream()));
    if (st != CUBLAS_STATUS_SUCCESS)
      return Status(StatusCode::LaunchFailure, "cublasLtMatmul failed for node '" + node +
                                                   "' (status " + std::to_string(int(st)) + ")");
    return Status::ok();
  }

private:
  static std::string versionString(uint32_t v) {
    return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
  }

  // Data-parallel schedules run step by step: NCCL's calls on the second stream are
  // not captured.
  bool useGraphs() const { return opts_.cudaGraphs && !opts_.profile && !graphFailed_ && !nccl_; }

  void graphFailed(const std::string &why) {
    graphFailed_ = true;
    note_ = "CUDA graph capture failed (" + why + "); the schedule runs step by step";
  }

  void dropGraph() {
    for (const auto &[schedule, exec] : graphs_)
      drv_.cuGraphExecDestroy_(exec);
    graphs_.clear();
  }

  Status check(CUresult r, const std::string &what) const {
    if (r == CUDA_SUCCESS)
      return Status::ok();
    return Status(StatusCode::LaunchFailure, what + ": " + drv_.error(r));
  }

  /// For one chunk: pkg::pickModule's choice for this GPU.
  const pkg::Module *pickModule(const pkg::Package &m, uint32_t chunk) const {
    return pkg::pickModule(m, chunk, major_ * 10 + minor_);
  }

  /// No module runs on this GPU: say which targets would (targets dlc compiles).
  Status noModule(const pkg::PackageFile &p, uint32_t chunk) const {
    std::string have;
    if (p.meta().modules())
      for (const pkg::Module *x : *p.meta().modules())
        if (x->chunk() == chunk && have.find(x->target()->str()) == std::string::npos)
          have += (have.empty() ? "" : ", ") + x->target()->str();
    int cc = major_ * 10 + minor_;
    std::string sm = "sm_" + std::to_string(cc);
    bool cubinTarget = cc == 80 || cc == 86 || cc == 89 || cc == 90;
    return Status(StatusCode::Unavailable,
                  p.name() + ": no module for this GPU (" + sm + "); the package has: " +
                      (have.empty() ? "none" : have) + ". Recompile with --target " +
                      (cubinTarget ? sm + " (a cubin) or compute_80 (PTX, compiled by the driver)"
                                   : "compute_80 (PTX, which the driver compiles for " + sm + ")"));
  }

  const Driver &drv_;
  CublasLt ltTable_;
  bool ltLoaded_ = false;
  SessionOptions opts_;
  cublasLtHandle_t ltHandle_ = nullptr;
  const pkg::PackageFile *pkg_ = nullptr;
  CUdevice dev_ = 0;
  int ordinal_ = 0;
  CUcontext ctx_ = nullptr;
  CUstream stream_ = nullptr;
  std::vector<CUmodule> modules_; // one per chunk
  std::vector<CUfunction> functions_;
  CUdeviceptr arena_ = 0, weights_ = 0;
  std::shared_ptr<CudaWeights> weightStore_;
  CUstream userStream_ = nullptr;
  std::map<uint32_t, uint64_t> external_;
  std::map<const pkg::Gemm *, std::unique_ptr<GemmPlan>> plans_;
  bool timing_ = false;    // inside timeIssue
  bool usesCudnn_ = false; // the package has cuDNN steps (tactics)
  std::unique_ptr<CudnnSession> dnn_ = std::make_unique<CudnnSession>();
  /// Captured schedules (shape variants), the most recently used first.
  static constexpr size_t kGraphCacheSize = 8;
  std::list<std::pair<size_t, CUgraphExec>> graphs_;
  bool graphFailed_ = false;
  /// Data parallelism: the NCCL communicator, the stream its all-reduces run on, and
  /// per bucket the events "gradients packed" (main stream) and "averaged" (second stream).
  std::shared_ptr<Communicator> nccl_;
  CUstream commStream_ = nullptr;
  std::map<uint32_t, std::pair<CUevent, CUevent>> bucketEvents_;
  std::string note_;
  std::string name_;
  int major_ = 0, minor_ = 0, sms_ = 0, driverVersion_ = 0;
};

/// One process-wide driver table (the library stays loaded for the process).
const Driver *sharedDriver(Status &st) {
  static Driver d;
  static Status loaded = d.load();
  st = loaded;
  return loaded ? nullptr : &d;
}

} // namespace

const Driver *testDriver = nullptr;
const CublasLt *testLt = nullptr;
void overrideTablesForTesting(const Driver *drv, const CublasLt *lt) {
  testDriver = drv;
  testLt = lt;
}

Result<std::unique_ptr<Backend>> createBackend(const Driver &drv, const CublasLt *lt,
                                               const SessionOptions &opts) {
  auto b = std::make_unique<CudaBackend>(drv, lt, opts);
  if (Status s = b->init(opts.cudaDevice))
    return s;
  return std::unique_ptr<Backend>(std::move(b));
}

} // namespace dlc::rt::cuda

namespace dlc::rt {

Result<std::unique_ptr<Backend>> createCudaBackend(const SessionOptions &opts) {
  if (cuda::testDriver)
    return cuda::createBackend(*cuda::testDriver, cuda::testLt, opts);
  Status st;
  const cuda::Driver *d = cuda::sharedDriver(st);
  if (!d)
    return st;
  return cuda::createBackend(*d, nullptr, opts);
}

} // namespace dlc::rt

namespace dlc::rt {

int cudaDeviceCount() {
  const cuda::Driver *d = cuda::testDriver;
  Status st;
  if (!d)
    d = cuda::sharedDriver(st);
  int count = 0;
  if (!d || d->cuInit_(0) != CUDA_SUCCESS || d->cuDeviceGetCount_(&count) != CUDA_SUCCESS)
    return 0;
  return count;
}

} // namespace dlc::rt
