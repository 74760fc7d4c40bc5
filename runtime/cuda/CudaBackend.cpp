//===- CudaBackend.cpp - The GPU backend: driver API and cuBLASLt via dlopen ===//
//
// Written against the real CUDA headers but linked against nothing: libcuda.so.1
// and libcublasLt are loaded at run time, so one runtime binary works on machines
// with and without a GPU and says which library or device is missing. Without a
// GPU this file is compiled and its tests are skipped (ctest label `gpu`).
//===----------------------------------------------------------------------===//
#include "../Backend.h"

#include <cublasLt.h>
#include <cuda.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <map>

namespace dlc::rt {
namespace {

#define DLC_STR2(x) #x
#define DLC_STR(x) DLC_STR2(x) // expands cuda.h's versioning macros (cuMemAlloc -> cuMemAlloc_v2)

/// Driver API entry points. Each is declared with the prototype from cuda.h.
struct Driver {
  void *lib = nullptr;
#define DLC_CU(fn) decltype(&fn) fn##_ = nullptr;
#define DLC_CU_LIST(X)                                                                             \
  X(cuInit) X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName) X(cuDeviceGetAttribute)          \
  X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent) X(cuStreamCreate)   \
  X(cuStreamDestroy) X(cuStreamSynchronize) X(cuModuleLoadData) X(cuModuleUnload)                 \
  X(cuModuleGetFunction) X(cuFuncSetAttribute) X(cuLaunchKernel) X(cuMemAlloc) X(cuMemFree)        \
  X(cuMemcpyHtoD) X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync) X(cuMemcpyDtoDAsync) X(cuMemsetD8Async)  \
  X(cuGetErrorName) X(cuGetErrorString) X(cuLaunchKernelEx) X(cuOccupancyMaxActiveBlocksPerMultiprocessor)
  DLC_CU_LIST(DLC_CU)
#undef DLC_CU

  Status load() {
    lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
      return Status(StatusCode::Unavailable,
                    "libcuda.so.1 could not be loaded (no NVIDIA driver on this machine)");
#define DLC_CU_LOAD(fn)                                                                            \
  fn##_ = reinterpret_cast<decltype(fn##_)>(dlsym(lib, DLC_STR(fn)));                              \
  if (!fn##_)                                                                                      \
    return Status(StatusCode::Unavailable, std::string("libcuda.so.1 lacks ") + DLC_STR(fn));
    DLC_CU_LIST(DLC_CU_LOAD)
#undef DLC_CU_LOAD
    return Status::ok();
  }

  std::string error(CUresult r) const {
    const char *name = nullptr, *msg = nullptr;
    if (cuGetErrorName_)
      cuGetErrorName_(r, &name);
    if (cuGetErrorString_)
      cuGetErrorString_(r, &msg);
    return std::string(name ? name : "CUDA error") + ": " + (msg ? msg : "?");
  }
};

struct CublasLt {
  void *lib = nullptr;
#define DLC_LT(fn) decltype(&fn) fn##_ = nullptr;
#define DLC_LT_LIST(X)                                                                             \
  X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescDestroy)   \
  X(cublasLtMatmulDescSetAttribute) X(cublasLtMatrixLayoutCreate) X(cublasLtMatrixLayoutDestroy)  \
  X(cublasLtMatrixLayoutSetAttribute) X(cublasLtMatmulPreferenceCreate)                           \
  X(cublasLtMatmulPreferenceDestroy) X(cublasLtMatmulPreferenceSetAttribute)                      \
  X(cublasLtMatmulAlgoGetHeuristic) X(cublasLtMatmul)
  DLC_LT_LIST(DLC_LT)
#undef DLC_LT

  Status load() {
    for (const char *name : {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"})
      if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)))
        break;
    if (!lib)
      return Status(StatusCode::Unavailable,
                    "libcublasLt.so.13 could not be loaded (install the CUDA toolkit's cuBLAS or "
                    "add its lib64 directory to LD_LIBRARY_PATH)");
#define DLC_LT_LOAD(fn)                                                                            \
  fn##_ = reinterpret_cast<decltype(fn##_)>(dlsym(lib, #fn));                                      \
  if (!fn##_)                                                                                      \
    return Status(StatusCode::Unavailable, std::string("libcublasLt lacks ") + #fn);
    DLC_LT_LIST(DLC_LT_LOAD)
#undef DLC_LT_LOAD
    return Status::ok();
  }
};

/// A model's weights on the device, shared by its cuda sessions. It holds its own
/// reference on the primary context so that it can outlive the session that made it.
struct CudaWeights : WeightStore {
  CUdeviceptr ptr = 0;
  CUdevice dev = 0;
  const Driver *drv = nullptr;
  ~CudaWeights() override {
    if (!drv)
      return;
    CUcontext ctx;
    if (drv->cuDevicePrimaryCtxRetain_(&ctx, dev) == CUDA_SUCCESS) {
      drv->cuCtxSetCurrent_(ctx);
      if (ptr)
        drv->cuMemFree_(ptr);
      drv->cuDevicePrimaryCtxRelease_(dev); // this call's retain
      drv->cuDevicePrimaryCtxRelease_(dev); // the store's own
    }
  }
};

/// One process-wide driver table (the library stays loaded for the process).
const Driver *sharedDriver(Status &st) {
  static Driver d;
  static Status loaded = d.load();
  st = loaded;
  return loaded ? nullptr : &d;
}

class CudaBackend : public Backend {
public:
  ~CudaBackend() override {
    if (drv_.lib) {
      if (ctxReady_) {
        drv_.cuCtxSetCurrent_(ctx_);
        if (stream_)
          drv_.cuStreamSynchronize_(stream_);
        if (arena_)
          drv_.cuMemFree_(arena_);
        if (workspace_)
          drv_.cuMemFree_(workspace_);
        for (CUmodule mod : modules_)
          drv_.cuModuleUnload_(mod);
        if (stream_)
          drv_.cuStreamDestroy_(stream_);
        drv_.cuDevicePrimaryCtxRelease_(dev_);
      }
    }
    if (lt_.lib && ltHandle_)
      lt_.cublasLtDestroy_(ltHandle_);
  }

  Status init(int ordinal) {
    Status st;
    const Driver *d = sharedDriver(st);
    if (!d)
      return st;
    drv_ = *d;
    driverPtr_ = d;
    if (CUresult r = drv_.cuInit_(0))
      return Status(StatusCode::Unavailable, "cuInit failed: " + drv_.error(r));
    int count = 0;
    if (CUresult r = drv_.cuDeviceGetCount_(&count))
      return Status(StatusCode::Unavailable, "cannot count CUDA devices: " + drv_.error(r));
    if (count == 0)
      return Status(StatusCode::Unavailable, "no CUDA device is present");
    if (ordinal < 0 || ordinal >= count)
      return Status(StatusCode::InvalidArgument, "CUDA device " + std::to_string(ordinal) + " does not exist (" +
                                                     std::to_string(count) + " present)");
    ordinal_ = ordinal;
    DLC_RETURN_IF_ERROR(check(drv_.cuDeviceGet_(&dev_, ordinal), "cuDeviceGet"));
    char name[256] = {0};
    drv_.cuDeviceGetName_(name, sizeof(name) - 1, dev_);
    name_ = name;
    drv_.cuDeviceGetAttribute_(&major_, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev_);
    drv_.cuDeviceGetAttribute_(&minor_, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev_);
    DLC_RETURN_IF_ERROR(check(drv_.cuDevicePrimaryCtxRetain_(&ctx_, dev_), "cuDevicePrimaryCtxRetain"));
    ctxReady_ = true;
    DLC_RETURN_IF_ERROR(check(drv_.cuCtxSetCurrent_(ctx_), "cuCtxSetCurrent"));
    DLC_RETURN_IF_ERROR(check(drv_.cuStreamCreate_(&stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate"));
    return Status::ok();
  }

  std::string describe() const override {
    return "cuda (" + name_ + ", sm_" + std::to_string(major_) + std::to_string(minor_) + ")";
  }
  DeviceKind kind() const override { return DeviceKind::Cuda; }
  int computeCapability() const override { return major_ * 10 + minor_; }

  Status prepare(const Model &model) override {
    const pkg::PackageFile &p = model.file();
    pkg_ = &p;
    const pkg::Package &m = p.meta();
    DLC_RETURN_IF_ERROR(check(drv_.cuCtxSetCurrent_(ctx_), "cuCtxSetCurrent"));
    if (m.kernels() && m.kernels()->size()) {
      uint32_t chunks = 0;
      for (const pkg::Kernel *k : *m.kernels())
        chunks = std::max(chunks, k->chunk() + 1);
      for (uint32_t c = 0; c < chunks; ++c) {
        const pkg::Module *mod = pickModule(m, c);
        if (!mod) {
          std::string have;
          if (m.modules())
            for (const pkg::Module *x : *m.modules())
              if (x->chunk() == c && have.find(x->target()->str()) == std::string::npos)
                have += (have.empty() ? "" : ", ") + x->target()->str();
          return Status(StatusCode::Unavailable,
                        p.name() + ": no module for this GPU (sm_" + std::to_string(major_) +
                            std::to_string(minor_) + "); the package has: " + (have.empty() ? "none" : have) +
                            ". Recompile with a --target that covers this GPU (sm_80, sm_86, sm_89, "
                            "sm_90, or compute_80 for PTX)");
        }
        CUmodule handle = nullptr;
        DLC_RETURN_IF_ERROR(check(drv_.cuModuleLoadData_(&handle, p.section(mod->data())),
                                  "loading module " + mod->target()->str()));
        modules_.push_back(handle);
      }
      for (const pkg::Kernel *k : *m.kernels()) {
        CUfunction f;
        DLC_RETURN_IF_ERROR(check(drv_.cuModuleGetFunction_(&f, modules_[k->chunk()], k->symbol()->c_str()),
                                  "kernel " + k->name()->str()));
        functions_.push_back(f);
      }
    }
    if (m.arena_bytes())
      DLC_RETURN_IF_ERROR(check(drv_.cuMemAlloc_(&arena_, m.arena_bytes()), "allocating the arena"));
    // Weights: uploaded once per model, shared by its cuda sessions.
    Status weightStatus;
    weightStore_ = std::static_pointer_cast<CudaWeights>(
        model.weights(DeviceKind::Cuda, ordinal_, [&]() -> std::shared_ptr<WeightStore> {
          auto w = std::make_shared<CudaWeights>();
          CUcontext ctx;
          if (CUresult r = drv_.cuDevicePrimaryCtxRetain_(&ctx, dev_)) {
            weightStatus = check(r, "retaining the context");
            return nullptr;
          }
          w->dev = dev_;
          w->drv = driverPtr_;
          if (m.weight_bytes())
            if (CUresult r = drv_.cuMemAlloc_(&w->ptr, m.weight_bytes())) {
              weightStatus = check(r, "allocating weights");
              return nullptr;
            }
          if (m.weights())
            for (const pkg::Weight *wt : *m.weights()) {
              const pkg::Buffer *b = m.buffers()->Get(wt->buffer());
              if (CUresult r = drv_.cuMemcpyHtoD_(w->ptr + b->offset(), p.section(wt->data()), wt->data()->size())) {
                weightStatus = check(r, "uploading weights");
                return nullptr;
              }
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
    if (hasGemm) {
      DLC_RETURN_IF_ERROR(lt_.load());
      if (lt_.cublasLtCreate_(&ltHandle_) != CUBLAS_STATUS_SUCCESS)
        return Status(StatusCode::Unavailable, "cublasLtCreate failed");
      DLC_RETURN_IF_ERROR(check(drv_.cuMemAlloc_(&workspace_, kWorkspace), "allocating GEMM workspace"));
    }
    return synchronize();
  }

  Status bindExternal(uint32_t buffer, uint64_t addr) override {
    external_[buffer] = addr;
    return Status::ok();
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
    const pkg::Buffer *b = pkg_->meta().buffers()->Get(r.buffer());
    return (b->region() == pkg::Region::Arena ? arena_ : weights_) + b->offset() + r.offset();
  }

  Status upload(const pkg::BufRef &dst, const void *src, size_t n) override {
    return check(drv_.cuMemcpyHtoDAsync_(address(dst), src, n, stream()), "host-to-device copy");
  }
  Status download(void *dst, const pkg::BufRef &src, size_t n) override {
    DLC_RETURN_IF_ERROR(check(drv_.cuMemcpyDtoHAsync_(dst, address(src), n, stream()), "device-to-host copy"));
    return synchronize();
  }
  Status copy(const pkg::Copy &c) override {
    return check(drv_.cuMemcpyDtoDAsync_(address(*c.dst()), address(*c.src()), c.bytes(), stream()),
                 "device copy");
  }
  Status memset(const pkg::Memset &m) override {
    return check(drv_.cuMemsetD8Async_(address(*m.dst()), m.value(), m.bytes(), stream()), "memset");
  }
  Status synchronize() override { return check(drv_.cuStreamSynchronize_(stream()), "synchronize"); }

  Status launch(const pkg::Launch &l, const std::string &node) override {
    DLC_RETURN_IF_ERROR(checkLaunchLimits(*pkg_, l));
    CUfunction f = functions_[l.kernel()];
    const pkg::Kernel *k = pkg_->meta().kernels()->Get(l.kernel());
    std::vector<uint64_t> params;
    resolveParams(l, params, [&](const pkg::BufRef &r) { return address(r); });
    size_t paramBytes = l.params() ? l.params()->size() : 0;
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, params.data(), CU_LAUNCH_PARAM_BUFFER_SIZE, &paramBytes,
                     CU_LAUNCH_PARAM_END};
    if (l.dynamic_smem() > 48 * 1024)
      DLC_RETURN_IF_ERROR(check(drv_.cuFuncSetAttribute_(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
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
      int perSm = 0, sms = 0;
      uint32_t threads = cfg.blockDimX * cfg.blockDimY * cfg.blockDimZ;
      DLC_RETURN_IF_ERROR(check(drv_.cuOccupancyMaxActiveBlocksPerMultiprocessor_(&perSm, f, static_cast<int>(threads),
                                                                                  l.dynamic_smem()),
                                "occupancy of kernel " + k->name()->str()));
      drv_.cuDeviceGetAttribute_(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev_);
      uint64_t blocks = uint64_t(cfg.gridDimX) * cfg.gridDimY * cfg.gridDimZ;
      if (blocks > uint64_t(perSm) * uint64_t(sms))
        return Status(StatusCode::LaunchFailure,
                      "kernel '" + k->name()->str() + "' (node '" + node + "') needs " + std::to_string(blocks) +
                          " resident blocks for its grid barrier; this GPU holds " + std::to_string(perSm) +
                          " per multiprocessor x " + std::to_string(sms) + " multiprocessors");
      coop.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
      coop.value.cooperative = 1;
      cfg.attrs = &coop;
      cfg.numAttrs = 1;
    }
    return check(drv_.cuLaunchKernelEx_(&cfg, f, nullptr, extra), "launching kernel for node '" + node + "'");
  }

  /// Row-major C = op(A) op(B) as column-major C^T = op(B)^T op(A)^T.
  Status gemm(const pkg::Gemm &g, const std::string &node) override {
    cudaDataType_t dt;
    cublasComputeType_t ct = CUBLAS_COMPUTE_32F;
    cudaDataType_t scaleType = CUDA_R_32F;
    switch (g.dtype()) {
    case pkg::DType::F32: dt = CUDA_R_32F; break;
    case pkg::DType::F16: dt = CUDA_R_16F; break;
    case pkg::DType::BF16: dt = CUDA_R_16BF; break;
    case pkg::DType::F64:
      dt = CUDA_R_64F;
      ct = CUBLAS_COMPUTE_64F;
      scaleType = CUDA_R_64F;
      break;
    default:
      return Status(StatusCode::InvalidPackage, "GEMM of node '" + node + "' has an unsupported dtype");
    }
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
    cublasLtMatmulPreference_t pref = nullptr;
    auto cleanup = [&] {
      if (pref) lt_.cublasLtMatmulPreferenceDestroy_(pref);
      if (la) lt_.cublasLtMatrixLayoutDestroy_(la);
      if (lb) lt_.cublasLtMatrixLayoutDestroy_(lb);
      if (lc) lt_.cublasLtMatrixLayoutDestroy_(lc);
      if (desc) lt_.cublasLtMatmulDescDestroy_(desc);
    };
    auto fail = [&](const char *what) {
      cleanup();
      return Status(StatusCode::LaunchFailure, std::string("cuBLASLt ") + what + " failed for node '" + node + "'");
    };
    cublasOperation_t opA = g.trans_b() ? CUBLAS_OP_T : CUBLAS_OP_N; // Lt's A is our B
    cublasOperation_t opB = g.trans_a() ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (lt_.cublasLtMatmulDescCreate_(&desc, ct, scaleType) != CUBLAS_STATUS_SUCCESS)
      return fail("descriptor creation");
    lt_.cublasLtMatmulDescSetAttribute_(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opA, sizeof(opA));
    lt_.cublasLtMatmulDescSetAttribute_(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opB, sizeof(opB));
    // Epilogue: bias (one value per column of our row-major D = per row of Lt's
    // column-major D) and activation, applied by cuBLASLt before the store.
    if (g.bias() || g.activation() != pkg::GemmActivation::None) {
      bool relu = g.activation() == pkg::GemmActivation::Relu, gelu = g.activation() == pkg::GemmActivation::GeluTanh;
      cublasLtEpilogue_t epi = g.bias() ? (relu ? CUBLASLT_EPILOGUE_RELU_BIAS
                                               : gelu ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
                                        : (relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_GELU);
      if (lt_.cublasLtMatmulDescSetAttribute_(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)))
        return fail("epilogue setup");
      if (g.bias()) {
        void *biasPtr = reinterpret_cast<void *>(address(*g.bias()));
        int64_t biasStride = 0; // the same bias for every batch
        if (lt_.cublasLtMatmulDescSetAttribute_(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &biasPtr,
                                                sizeof(biasPtr)) ||
            lt_.cublasLtMatmulDescSetAttribute_(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &dt, sizeof(dt)) ||
            lt_.cublasLtMatmulDescSetAttribute_(desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &biasStride,
                                                sizeof(biasStride)))
          return fail("bias setup");
      }
    }
    uint64_t m = g.m(), n = g.n(), k = g.k();
    if (lt_.cublasLtMatrixLayoutCreate_(&la, dt, g.trans_b() ? k : n, g.trans_b() ? n : k, g.ldb()) ||
        lt_.cublasLtMatrixLayoutCreate_(&lb, dt, g.trans_a() ? m : k, g.trans_a() ? k : m, g.lda()) ||
        lt_.cublasLtMatrixLayoutCreate_(&lc, dt, n, m, g.ldc()))
      return fail("layout creation");
    if (g.batch() > 1) {
      int32_t batch = static_cast<int32_t>(g.batch());
      int64_t sa = g.stride_b(), sb = g.stride_a(), sc = g.stride_c();
      for (auto [layout, stride] : {std::pair{la, sa}, std::pair{lb, sb}, std::pair{lc, sc}}) {
        lt_.cublasLtMatrixLayoutSetAttribute_(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof(batch));
        lt_.cublasLtMatrixLayoutSetAttribute_(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                             sizeof(stride));
      }
    }
    if (lt_.cublasLtMatmulPreferenceCreate_(&pref) != CUBLAS_STATUS_SUCCESS)
      return fail("preference creation");
    uint64_t ws = kWorkspace;
    lt_.cublasLtMatmulPreferenceSetAttribute_(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
    cublasLtMatmulHeuristicResult_t heur{};
    int found = 0;
    if (lt_.cublasLtMatmulAlgoGetHeuristic_(ltHandle_, desc, la, lb, lc, lc, pref, 1, &heur, &found) !=
            CUBLAS_STATUS_SUCCESS ||
        found == 0)
      return fail("algorithm selection");
    float alpha32 = g.alpha(), beta32 = g.beta();
    double alpha64 = g.alpha(), beta64 = g.beta();
    const void *alpha = dt == CUDA_R_64F ? static_cast<const void *>(&alpha64) : &alpha32;
    const void *beta = dt == CUDA_R_64F ? static_cast<const void *>(&beta64) : &beta32;
    CUdeviceptr a = address(*g.b()), b = address(*g.a()), c = address(*g.c());
    CUdeviceptr cin = g.c_in() ? address(*g.c_in()) : c; // C may differ from D (residual input)
    cublasStatus_t st = lt_.cublasLtMatmul_(ltHandle_, desc, alpha, reinterpret_cast<const void *>(a), la,
                                           reinterpret_cast<const void *>(b), lb, beta,
                                           reinterpret_cast<const void *>(cin), lc, reinterpret_cast<void *>(c), lc,
                                           &heur.algo, reinterpret_cast<void *>(workspace_), kWorkspace,
                                           reinterpret_cast<cudaStream_t>(stream()));
    cleanup();
    if (st != CUBLAS_STATUS_SUCCESS)
      return Status(StatusCode::LaunchFailure, "cublasLtMatmul failed for node '" + node + "'");
    return Status::ok();
  }

private:
  static constexpr size_t kWorkspace = 32 << 20;

  Status check(CUresult r, const std::string &what) const {
    if (r == CUDA_SUCCESS)
      return Status::ok();
    return Status(StatusCode::LaunchFailure, what + ": " + drv_.error(r));
  }

  /// For one chunk: the exact cubin, else a cubin of the same major version and a lower
  /// minor, else PTX of an equal or older virtual architecture (JIT-compiled by the driver).
  const pkg::Module *pickModule(const pkg::Package &m, uint32_t chunk) const {
    if (!m.modules())
      return nullptr;
    int cc = major_ * 10 + minor_, bestCubin = -1, bestPtx = -1;
    const pkg::Module *cubin = nullptr, *ptx = nullptr;
    for (const pkg::Module *x : *m.modules()) {
      if (x->chunk() != chunk)
        continue;
      int v = archNumber(x->target()->str());
      if (x->kind() == pkg::ModuleKind::Cubin && v / 10 == major_ && v <= cc && v > bestCubin) {
        bestCubin = v;
        cubin = x;
      } else if (x->kind() == pkg::ModuleKind::Ptx && v <= cc && v > bestPtx) {
        bestPtx = v;
        ptx = x;
      }
    }
    return cubin ? cubin : ptx;
  }

  Driver drv_;
  CublasLt lt_;
  cublasLtHandle_t ltHandle_ = nullptr;
  const pkg::PackageFile *pkg_ = nullptr;
  CUdevice dev_ = 0;
  int ordinal_ = 0;
  CUcontext ctx_ = nullptr;
  bool ctxReady_ = false;
  CUstream stream_ = nullptr;
  std::vector<CUmodule> modules_; // one per chunk
  std::vector<CUfunction> functions_;
  CUdeviceptr arena_ = 0, weights_ = 0, workspace_ = 0;
  std::shared_ptr<CudaWeights> weightStore_;
  const Driver *driverPtr_ = nullptr;
  CUstream userStream_ = nullptr;
  std::map<uint32_t, uint64_t> external_;
  std::string name_;
  int major_ = 0, minor_ = 0;
};

} // namespace

Result<std::unique_ptr<Backend>> createCudaBackend(int device) {
  auto b = std::make_unique<CudaBackend>();
  if (Status s = b->init(device))
    return s;
  return std::unique_ptr<Backend>(std::move(b));
}

} // namespace dlc::rt
