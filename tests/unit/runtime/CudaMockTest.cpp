// The cuda backend against a fake driver and a fake cuBLASLt (runtime/cuda/Driver.h):
// device memory is host memory, a stream is a queue of copies that runs at
// synchronization, and kernels are recorded, not run. What a GPU adds (numerics) is
// covered by the `gpu` tests; these check the backend's own behaviour:
//  - the primary context is pushed for every call and the caller's restored, so a
//    session made on one thread runs on another;
//  - a driver older than the package's CUDA is refused with a clear message, and a
//    GPU without a module gets a target that dlc can compile;
//  - set_input is synchronous, and the weights are complete before any kernel runs;
//  - GEMM plans are built once per step, with the epilogue kernel as the fallback;
//  - the schedule is captured as a CUDA graph once and replayed, recaptured after a
//    device pointer is bound, and run step by step (with a note) where capture fails;
//  - bound device pointers must be aligned to their elements;
//  - data parallelism: a bucket is packed on the main stream and averaged on a second
//    one that waits for the pack, and the optimizer waits for the average.
#include "RuntimeTestUtil.h"
#include "cuda/Driver.h"
#include "dlc/codegen/Compiler.h"
#include "dlc/ir/TextIR.h"
#include "dlc/passes/Pass.h"
#include "dlc/runtime/Calibrate.h"
#include "dlc/runtime/Runtime.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <gtest/gtest.h>
#include <map>
#include <mutex>
#include <thread>

using namespace dlc;
namespace cuda = dlc::rt::cuda;

namespace {

CUcontext const kPrimary = reinterpret_cast<CUcontext>(0x1000);
CUcontext const kUserCtx = reinterpret_cast<CUcontext>(0x2000);

/// What the fake driver saw.
struct FakeState {
  std::mutex mu;
  int major = 9, minor = 0, driverVersion = 13000;
  int sms = 132, blocksPerSm = 8; // the device's multiprocessors, and the occupancy API's answer
  std::vector<std::string> calls; // in order
  int callsWithoutContext = 0;    // device work while the primary context was not current
  struct Copy {
    void *dst;
    const void *src;
    size_t n;
  };
  std::vector<Copy> pending; // asynchronous copies not yet synchronized
  std::map<CUfunction, std::string> functions;
  std::vector<std::string> launched; // kernel symbols, in order
  int captures = 0, graphLaunches = 0;
  bool capturing = false;
  CUresult endCaptureResult = CUDA_SUCCESS;
  int heuristicCalls = 0, matmuls = 0;
  int streams = 0;
  int cooperativeLaunches = 0;
  std::vector<CUstream> reduceStreams; // of the fake device communicator's all-reduces
  std::vector<size_t> reduceCounts;
  bool rejectEpilogue = false; // the heuristic finds no algorithm that applies an epilogue
  std::map<cublasLtMatmulPreferenceAttributes_t, uint32_t> alignments;
  void reset() { *this = FakeState(); }
  FakeState() = default;
  FakeState &operator=(const FakeState &o) {
    major = o.major, minor = o.minor, driverVersion = o.driverVersion;
    sms = o.sms, blocksPerSm = o.blocksPerSm;
    calls.clear(), pending.clear(), functions.clear(), launched.clear(), alignments.clear();
    reduceStreams.clear(), reduceCounts.clear();
    callsWithoutContext = captures = graphLaunches = heuristicCalls = matmuls = streams = 0;
    cooperativeLaunches = 0;
    capturing = rejectEpilogue = false;
    endCaptureResult = CUDA_SUCCESS;
    return *this;
  }
};
FakeState S;
thread_local std::vector<CUcontext> ctxStack;

void log(const char *what, bool needsContext) {
  std::lock_guard<std::mutex> g(S.mu);
  S.calls.push_back(what);
  if (needsContext && (ctxStack.empty() || ctxStack.back() != kPrimary))
    ++S.callsWithoutContext;
}

void drain() {
  for (const FakeState::Copy &c : S.pending)
    std::memcpy(c.dst, c.src, c.n);
  S.pending.clear();
}

cuda::Driver makeDriver() {
  cuda::Driver d;
  d.cuInit_ = [](unsigned) { return CUDA_SUCCESS; };
  d.cuDriverGetVersion_ = [](int *v) {
    *v = S.driverVersion;
    return CUDA_SUCCESS;
  };
  d.cuDeviceGetCount_ = [](int *n) {
    *n = 1;
    return CUDA_SUCCESS;
  };
  d.cuDeviceGet_ = [](CUdevice *dev, int) {
    *dev = 0;
    return CUDA_SUCCESS;
  };
  d.cuDeviceGetName_ = [](char *name, int n, CUdevice) {
    std::snprintf(name, n, "Fake GPU");
    return CUDA_SUCCESS;
  };
  d.cuDeviceGetAttribute_ = [](int *v, CUdevice_attribute a, CUdevice) {
    *v = a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR   ? S.major
         : a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR ? S.minor
         : a == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT     ? S.sms
                                                             : 132;
    return CUDA_SUCCESS;
  };
  d.cuDevicePrimaryCtxRetain_ = [](CUcontext *c, CUdevice) {
    *c = kPrimary;
    return CUDA_SUCCESS;
  };
  d.cuDevicePrimaryCtxRelease_ = [](CUdevice) { return CUDA_SUCCESS; };
  d.cuCtxPushCurrent_ = [](CUcontext c) {
    ctxStack.push_back(c);
    return CUDA_SUCCESS;
  };
  d.cuCtxPopCurrent_ = [](CUcontext *c) {
    if (ctxStack.empty())
      return CUDA_ERROR_INVALID_CONTEXT;
    *c = ctxStack.back();
    ctxStack.pop_back();
    return CUDA_SUCCESS;
  };
  d.cuCtxSynchronize_ = []() {
    log("cuCtxSynchronize", true);
    drain();
    return CUDA_SUCCESS;
  };
  d.cuStreamCreate_ = [](CUstream *s, unsigned) {
    log("cuStreamCreate", true);
    *s = reinterpret_cast<CUstream>(0x3000 + 0x10 * S.streams++);
    return CUDA_SUCCESS;
  };
  d.cuStreamDestroy_ = [](CUstream) { return CUDA_SUCCESS; };
  d.cuStreamSynchronize_ = [](CUstream) {
    log("cuStreamSynchronize", true);
    drain();
    return CUDA_SUCCESS;
  };
  d.cuModuleLoadData_ = [](CUmodule *m, const void *) {
    log("cuModuleLoadData", true);
    *m = reinterpret_cast<CUmodule>(0x4000);
    return CUDA_SUCCESS;
  };
  d.cuModuleUnload_ = [](CUmodule) { return CUDA_SUCCESS; };
  d.cuModuleGetFunction_ = [](CUfunction *f, CUmodule, const char *name) {
    *f = reinterpret_cast<CUfunction>(0x10000 + 16 * S.functions.size());
    S.functions[*f] = name;
    return CUDA_SUCCESS;
  };
  d.cuFuncSetAttribute_ = [](CUfunction, CUfunction_attribute, int) { return CUDA_SUCCESS; };
  d.cuMemAlloc_ = [](CUdeviceptr *p, size_t n) {
    log("cuMemAlloc", true);
    *p = reinterpret_cast<CUdeviceptr>(std::aligned_alloc(256, (n + 255) / 256 * 256));
    std::memset(reinterpret_cast<void *>(*p), 0, n);
    return CUDA_SUCCESS;
  };
  d.cuMemFree_ = [](CUdeviceptr p) {
    std::free(reinterpret_cast<void *>(p));
    return CUDA_SUCCESS;
  };
  d.cuMemcpyHtoD_ = [](CUdeviceptr dst, const void *src, size_t n) {
    log("cuMemcpyHtoD", true);
    std::memcpy(reinterpret_cast<void *>(dst), src, n);
    return CUDA_SUCCESS;
  };
  d.cuMemcpyHtoDAsync_ = [](CUdeviceptr dst, const void *src, size_t n, CUstream) {
    log("cuMemcpyHtoDAsync", true);
    S.pending.push_back({reinterpret_cast<void *>(dst), src, n});
    return CUDA_SUCCESS;
  };
  d.cuMemcpyDtoHAsync_ = [](void *dst, CUdeviceptr src, size_t n, CUstream) {
    log("cuMemcpyDtoHAsync", true);
    S.pending.push_back({dst, reinterpret_cast<const void *>(src), n});
    return CUDA_SUCCESS;
  };
  d.cuMemcpyDtoDAsync_ = [](CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream) {
    log("cuMemcpyDtoDAsync", true);
    if (!S.capturing)
      S.pending.push_back({reinterpret_cast<void *>(dst), reinterpret_cast<const void *>(src), n});
    return CUDA_SUCCESS;
  };
  d.cuMemsetD8Async_ = [](CUdeviceptr dst, unsigned char v, size_t n, CUstream) {
    log("cuMemsetD8Async", true);
    if (!S.capturing)
      std::memset(reinterpret_cast<void *>(dst), v, n);
    return CUDA_SUCCESS;
  };
  d.cuGetErrorName_ = [](CUresult, const char **s) {
    *s = "CUDA_ERROR_FAKE";
    return CUDA_SUCCESS;
  };
  d.cuGetErrorString_ = [](CUresult, const char **s) {
    *s = "fake failure";
    return CUDA_SUCCESS;
  };
  d.cuLaunchKernelEx_ = [](const CUlaunchConfig *cfg, CUfunction f, void **params, void **extra) {
    log("cuLaunchKernelEx", true);
    // The driver's rules (cuda.h): the arguments come either as kernelParams or as
    // `extra`, and a cooperative launch has cuLaunchCooperativeKernel's usage, which
    // takes kernelParams only.
    bool cooperative = false;
    for (unsigned i = 0; i < cfg->numAttrs; ++i)
      cooperative |=
          cfg->attrs[i].id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE && cfg->attrs[i].value.cooperative;
    if ((params != nullptr) == (extra != nullptr) || (cooperative && extra))
      return CUDA_ERROR_INVALID_VALUE;
    S.cooperativeLaunches += cooperative;
    S.launched.push_back(S.functions[f]);
    return CUDA_SUCCESS;
  };
  d.cuOccupancyMaxActiveBlocksPerMultiprocessor_ = [](int *n, CUfunction, int, size_t) {
    *n = S.blocksPerSm;
    return CUDA_SUCCESS;
  };
  d.cuStreamBeginCapture_ = [](CUstream, CUstreamCaptureMode) {
    log("cuStreamBeginCapture", true);
    S.capturing = true;
    ++S.captures;
    return CUDA_SUCCESS;
  };
  d.cuStreamEndCapture_ = [](CUstream, CUgraph *g) {
    log("cuStreamEndCapture", true);
    S.capturing = false;
    *g = S.endCaptureResult == CUDA_SUCCESS ? reinterpret_cast<CUgraph>(0x5000) : nullptr;
    return S.endCaptureResult;
  };
  d.cuGraphInstantiateWithFlags_ = [](CUgraphExec *e, CUgraph, unsigned long long) {
    *e = reinterpret_cast<CUgraphExec>(0x6000);
    return CUDA_SUCCESS;
  };
  d.cuGraphLaunch_ = [](CUgraphExec, CUstream) {
    log("cuGraphLaunch", true);
    ++S.graphLaunches;
    return CUDA_SUCCESS;
  };
  d.cuGraphDestroy_ = [](CUgraph) { return CUDA_SUCCESS; };
  d.cuGraphExecDestroy_ = [](CUgraphExec) { return CUDA_SUCCESS; };
  d.cuEventCreate_ = [](CUevent *e, unsigned) {
    static uintptr_t next = 0xb000;
    *e = reinterpret_cast<CUevent>(next += 16);
    return CUDA_SUCCESS;
  };
  d.cuEventDestroy_ = [](CUevent) { return CUDA_SUCCESS; };
  d.cuEventRecord_ = [](CUevent, CUstream) {
    log("cuEventRecord", true);
    return CUDA_SUCCESS;
  };
  d.cuStreamWaitEvent_ = [](CUstream, CUevent, unsigned) {
    log("cuStreamWaitEvent", true);
    return CUDA_SUCCESS;
  };
  d.cuStreamQuery_ = [](CUstream) {
    log("cuStreamQuery", true);
    drain();
    return CUDA_SUCCESS;
  };
  return d;
}

/// cuBLASLt: descriptors are counters; the epilogue attribute is remembered per
/// descriptor so that the heuristic can refuse it.
std::map<cublasLtMatmulDesc_t, bool> descHasEpilogue;

cuda::CublasLt makeLt() {
  cuda::CublasLt l;
  l.cublasLtCreate_ = [](cublasLtHandle_t *h) {
    *h = reinterpret_cast<cublasLtHandle_t>(0x7000);
    return CUBLAS_STATUS_SUCCESS;
  };
  l.cublasLtDestroy_ = [](cublasLtHandle_t) { return CUBLAS_STATUS_SUCCESS; };
  l.cublasLtMatmulDescCreate_ = [](cublasLtMatmulDesc_t *d, cublasComputeType_t, cudaDataType_t) {
    static uintptr_t next = 0x8000;
    *d = reinterpret_cast<cublasLtMatmulDesc_t>(next += 16);
    descHasEpilogue[*d] = false;
    return CUBLAS_STATUS_SUCCESS;
  };
  l.cublasLtMatmulDescDestroy_ = [](cublasLtMatmulDesc_t) { return CUBLAS_STATUS_SUCCESS; };
  l.cublasLtMatmulDescSetAttribute_ = [](cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a,
                                         const void *v, size_t) {
    if (a == CUBLASLT_MATMUL_DESC_EPILOGUE)
      descHasEpilogue[d] = *static_cast<const cublasLtEpilogue_t *>(v) != CUBLASLT_EPILOGUE_DEFAULT;
    return CUBLAS_STATUS_SUCCESS;
  };
  l.cublasLtMatrixLayoutCreate_ = [](cublasLtMatrixLayout_t *m, cudaDataType, uint64_t, uint64_t,
                                     int64_t) {
    static uintptr_t next = 0x9000;
    *m = reinterpret_cast<cublasLtMatrixLayout_t>(next += 16);
    return CUBLAS_STATUS_SUCCESS;
  };
  l.cublasLtMatrixLayoutDestroy_ = [](cublasLtMatrixLayout_t) { return CUBLAS_STATUS_SUCCESS; };
  l.cublasLtMatrixLayoutSetAttribute_ = [](cublasLtMatrixLayout_t, cublasLtMatrixLayoutAttribute_t,
                                           const void *, size_t) { return CUBLAS_STATUS_SUCCESS; };
  l.cublasLtMatmulPreferenceCreate_ = [](cublasLtMatmulPreference_t *p) {
    *p = reinterpret_cast<cublasLtMatmulPreference_t>(0xa000);
    return CUBLAS_STATUS_SUCCESS;
  };
  l.cublasLtMatmulPreferenceDestroy_ = [](cublasLtMatmulPreference_t) {
    return CUBLAS_STATUS_SUCCESS;
  };
  l.cublasLtMatmulPreferenceSetAttribute_ = [](cublasLtMatmulPreference_t,
                                               cublasLtMatmulPreferenceAttributes_t a,
                                               const void *v, size_t n) {
    if (n == sizeof(uint32_t))
      S.alignments[a] = *static_cast<const uint32_t *>(v);
    return CUBLAS_STATUS_SUCCESS;
  };
  l.cublasLtMatmulAlgoGetHeuristic_ =
      [](cublasLtHandle_t, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
         cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatmulPreference_t, int,
         cublasLtMatmulHeuristicResult_t *, int *found) {
        ++S.heuristicCalls;
        *found = S.rejectEpilogue && descHasEpilogue[d] ? 0 : 1;
        return CUBLAS_STATUS_SUCCESS;
      };
  l.cublasLtMatmul_ = [](cublasLtHandle_t, cublasLtMatmulDesc_t, const void *, const void *,
                         cublasLtMatrixLayout_t, const void *, cublasLtMatrixLayout_t, const void *,
                         const void *, cublasLtMatrixLayout_t, void *, cublasLtMatrixLayout_t,
                         const cublasLtMatmulAlgo_t *, void *, size_t, cudaStream_t) {
    log("cublasLtMatmul", true);
    ++S.matmuls;
    return CUBLAS_STATUS_SUCCESS;
  };
  return l;
}

const cuda::Driver kDriver = makeDriver();
const cuda::CublasLt kLt = makeLt();

/// Textual IR through the default pipeline, compiled for sm_90 (NVRTC, no GPU needed).
std::shared_ptr<const pkg::PackageFile> compileForSm90(const char *text, const std::string &name) {
  auto g = ir::parseGraph(text, name);
  EXPECT_TRUE(bool(g));
  passes::PassManager pm;
  passes::PassContext ctx;
  EXPECT_FALSE(bool(pm.run(**g, passes::defaultPipeline(2), ctx)));
  codegen::CompileOptions co;
  co.targets = {"sm_90"};
  auto bytes = codegen::compileGraph(**g, co);
  EXPECT_TRUE(bool(bytes)) << llvm::toString(bytes.takeError());
  auto pf = pkg::PackageFile::fromBytes(bytes->data(), bytes->size(), name + ".dlc");
  EXPECT_TRUE(pf.ok());
  return std::shared_ptr<const pkg::PackageFile>(*pf);
}

/// MatMul + bias + ReLU (one GEMM with an epilogue), then Softmax (one kernel).
std::shared_ptr<const pkg::PackageFile> mlpPackage() {
  static std::shared_ptr<const pkg::PackageFile> pkg = [] {
    const char *text = R"(graph @mlp(%x: f32[2,4]) -> ("probs": f32[2,3]) {
  %w = const f32[4,3] dense<[1.0, 0.5, -1.0, 2.0, 0.25, 0.75, -0.5, 1.0, 0.0, 0.125, -2.0, 3.0]>
  %b = const f32[3] dense<[0.1, -0.2, 0.3]>
  %h = MatMul(%x, %w) : f32[2,3]
  %hb = Add(%h, %b) : f32[2,3]
  %a = Relu(%hb) : f32[2,3]
  %p = Softmax(%a) {axis = 1} : f32[2,3]
  return %p
})";
    return compileForSm90(text, "mlp");
  }();
  return pkg;
}

/// y = Where(c, Relu(x W), Softmax(x)): an If with a run-time condition, as imported.
std::shared_ptr<const pkg::PackageFile> ifPackage() {
  static std::shared_ptr<const pkg::PackageFile> pkg = [] {
    const char *text = R"(graph @branches(%x: f32[2,4], %c: bool[]) -> ("y": f32[2,4]) {
  %w = const f32[4,4] dense<[1.0, 0.5, -1.0, 2.0, 0.25, 0.75, -0.5, 1.0, 0.0, 0.125, -2.0, 3.0, 1.0, 1.0, 1.0, 1.0]>
  %a = MatMul(%x, %w) : f32[2,4]
  %r = Relu(%a) : f32[2,4]
  %b = Softmax(%x) {axis = 1} : f32[2,4]
  %y = Where(%c, %r, %b) : f32[2,4]
  return %y
})";
    return compileForSm90(text, "if");
  }();
  return pkg;
}

class CudaMock : public ::testing::Test {
protected:
  void SetUp() override {
    S.reset();
    ctxStack.clear();
    cuda::overrideTablesForTesting(&kDriver, &kLt);
  }
  void TearDown() override { cuda::overrideTablesForTesting(nullptr, nullptr); }

  Result<std::unique_ptr<rt::Session>> session(rt::SessionOptions so = {}) {
    so.device = rt::DeviceKind::Cuda;
    return rt::Session::create(mlpPackage(), so);
  }
  static Status runWith(rt::Session &s, float first) {
    std::vector<float> x(8, first);
    DLC_RETURN_IF_ERROR(s.setInputBytes("x", x.data(), x.size() * 4));
    return s.run();
  }
  static size_t count(const std::string &what) {
    return static_cast<size_t>(std::count(S.calls.begin(), S.calls.end(), what));
  }
};

TEST_F(CudaMock, APersistentRecurrentKernelIsACooperativeLaunch) {
  // A small LSTM runs as one persistent kernel with a grid barrier: a cooperative
  // launch, whose argument struct must travel as kernelParams (the driver refuses
  // `extra` there; the first GPU run of the kit failed so).
  auto pkg = compileForSm90(R"(graph @lstm(%x: f32[3,2,4]) -> ("y": f32[3,1,2,8]) {
  %w = const f32[1,32,4] dense<[-0.25, 0.10, -0.10, 0.25, 0.05, -0.15, 0.20, 0.00, -0.20, 0.15, -0.05, -0.25, 0.10, -0.10, 0.25, 0.05, -0.15, 0.20, 0.00, -0.20, 0.15, -0.05, -0.25, 0.10, -0.10, 0.25, 0.05, -0.15, 0.20, 0.00, -0.20, 0.15, -0.05, -0.25, 0.10, -0.10, 0.25, 0.05, -0.15, 0.20, 0.00, -0.20, 0.15, -0.05, -0.25, 0.10, -0.10, 0.25, 0.05, -0.15, 0.20, 0.00, -0.20, 0.15, -0.05, -0.25, 0.10, -0.10, 0.25, 0.05, -0.15, 0.20, 0.00, -0.20, 0.15, -0.05, -0.25, 0.10, -0.10, 0.25, 0.05, -0.15, 0.20, 0.00, -0.20, 0.15, -0.05, -0.25, 0.10, -0.10, 0.25, 0.05, -0.15, 0.20, 0.00, -0.20, 0.15, -0.05, -0.25, 0.10, -0.10, 0.25, 0.05, -0.15, 0.20, 0.00, -0.20, 0.15, -0.05, -0.25, 0.10, -0.10, 0.25, 0.05, -0.15, 0.20, 0.00, -0.20, 0.15, -0.05, -0.25, 0.10, -0.10, 0.25, 0.05, -0.15, 0.20, 0.00, -0.20, 0.15, -0.05, -0.25, 0.10, -0.10, 0.25, 0.05, -0.15, 0.20]>
  %r = const f32[1,32,8] dense<[-0.18, -0.03, 0.12, -0.12, 0.03, 0.18, -0.06, 0.09, -0.15, 0.00, 0.15, -0.09, 0.06, -0.18, -0.03, 0.12, -0.12, 0.03, 0.18, -0.06, 0.09, -0.15, 0.00, 0.15, -0.09, 0.06, -0.18, -0.03, 0.12, -0.12, 0.03, 0.18, -0.06, 0.09, -0.15, 0.00, 0.15, -0.09, 0.06, -0.18, -0.03, 0.12, -0.12, 0.03, 0.18, -0.06, 0.09, -0.15, 0.00, 0.15, -0.09, 0.06, -0.18, -0.03, 0.12, -0.12, 0.03, 0.18, -0.06, 0.09, -0.15, 0.00, 0.15, -0.09, 0.06, -0.18, -0.03, 0.12, -0.12, 0.03, 0.18, -0.06, 0.09, -0.15, 0.00, 0.15, -0.09, 0.06, -0.18, -0.03, 0.12, -0.12, 0.03, 0.18, -0.06, 0.09, -0.15, 0.00, 0.15, -0.09, 0.06, -0.18, -0.03, 0.12, -0.12, 0.03, 0.18, -0.06, 0.09, -0.15, 0.00, 0.15, -0.09, 0.06, -0.18, -0.03, 0.12, -0.12, 0.03, 0.18, -0.06, 0.09, -0.15, 0.00, 0.15, -0.09, 0.06, -0.18, -0.03, 0.12, -0.12, 0.03, 0.18, -0.06, 0.09, -0.15, 0.00, 0.15, -0.09, 0.06, -0.18, -0.03, 0.12, -0.12, 0.03, 0.18, -0.06, 0.09, -0.15, 0.00, 0.15, -0.09, 0.06, -0.18, -0.03, 0.12, -0.12, 0.03, 0.18, -0.06, 0.09, -0.15, 0.00, 0.15, -0.09, 0.06, -0.18, -0.03, 0.12, -0.12, 0.03, 0.18, -0.06, 0.09, -0.15, 0.00, 0.15, -0.09, 0.06, -0.18, -0.03, 0.12, -0.12, 0.03, 0.18, -0.06, 0.09, -0.15, 0.00, 0.15, -0.09, 0.06, -0.18, -0.03, 0.12, -0.12, 0.03, 0.18, -0.06, 0.09, -0.15, 0.00, 0.15, -0.09, 0.06, -0.18, -0.03, 0.12, -0.12, 0.03, 0.18, -0.06, 0.09, -0.15, 0.00, 0.15, -0.09, 0.06, -0.18, -0.03, 0.12, -0.12, 0.03, 0.18, -0.06, 0.09, -0.15, 0.00, 0.15, -0.09, 0.06, -0.18, -0.03, 0.12, -0.12, 0.03, 0.18, -0.06, 0.09, -0.15, 0.00, 0.15, -0.09, 0.06, -0.18, -0.03, 0.12, -0.12, 0.03, 0.18, -0.06, 0.09, -0.15, 0.00, 0.15, -0.09, 0.06, -0.18, -0.03, 0.12, -0.12, 0.03, 0.18, -0.06, 0.09, -0.15]>
  %y, %h, %c = LSTM(%x, %w, %r) {hidden_size = 8} : f32[3,1,2,8], f32[1,2,8], f32[1,2,8]
  return %y
})",
                            "lstm");
  ASSERT_TRUE(pkg);
  bool persistent = false;
  for (const pkg::Kernel *k : *pkg->meta().kernels())
    persistent |= k->cooperative();
  ASSERT_TRUE(persistent) << "the test needs the persistent kernel";
  rt::SessionOptions so;
  so.device = rt::DeviceKind::Cuda;
  so.cudaGraphs = false;
  auto s = rt::Session::create(pkg, so);
  ASSERT_TRUE(s.ok()) << s.status().message();
  std::vector<float> x(24, 0.5f);
  ASSERT_FALSE(bool((*s)->setInputBytes("x", x.data(), x.size() * 4)));
  Status st = (*s)->run();
  EXPECT_FALSE(bool(st)) << st.message();
  EXPECT_EQ(S.cooperativeLaunches, 1);
}

TEST_F(CudaMock, APersistentRecurrentKernelRunsOnlyWhereItsGridFits) {
  // 256 hidden units over a batch of 64: 4 units per block, 64 blocks of 80 KB of
  // shared memory, one per multiprocessor. The package carries the persistent kernel
  // and the per-step schedule; a 40-SM GPU (an A30, a MIG slice) cannot hold the grid
  // and runs the steps (a GEMM and a cell launch per time step), a 132-SM one runs the
  // persistent kernel alone. The session says which.
  auto pkg = compileForSm90(
      R"(graph @lstm(%x: f32[2,64,4], %w: f32[1,1024,4], %r: f32[1,1024,256]) -> ("y": f32[2,1,64,256]) {
  %y, %h, %c = LSTM(%x, %w, %r) {hidden_size = 256} : f32[2,1,64,256], f32[1,64,256], f32[1,64,256]
  return %y
})",
      "lstm");
  ASSERT_TRUE(pkg);
  for (int sms : {40, 132}) {
    SCOPED_TRACE(std::to_string(sms) + " SMs");
    S.reset();
    S.sms = sms;
    S.blocksPerSm = 1;
    rt::SessionOptions so;
    so.device = rt::DeviceKind::Cuda;
    so.cudaGraphs = false;
    auto s = rt::Session::create(pkg, so);
    ASSERT_TRUE(s.ok()) << s.status().message();
    std::vector<float> x(2 * 64 * 4, 0.5f), w(1024 * 4, 0.1f), r(1024 * 256, 0.01f);
    ASSERT_FALSE(bool((*s)->setInputBytes("x", x.data(), x.size() * 4)));
    ASSERT_FALSE(bool((*s)->setInputBytes("w", w.data(), w.size() * 4)));
    ASSERT_FALSE(bool((*s)->setInputBytes("r", r.data(), r.size() * 4)));
    Status st = (*s)->run();
    ASSERT_FALSE(bool(st)) << st.message();
    const bool fits = sms == 132;
    EXPECT_EQ(S.cooperativeLaunches, fits ? 1 : 0);
    const auto cells =
        std::count_if(S.launched.begin(), S.launched.end(), [](const std::string &k) {
          return k.find("lstm_cell") != std::string::npos;
        });
    EXPECT_EQ(cells, fits ? 0 : 2); // one per time step
    ASSERT_EQ((*s)->scheduleNotes().size(), 1u);
    const std::string &note = (*s)->scheduleNotes()[0];
    EXPECT_NE(note.find(fits ? "runs its persistent kernel" : "runs step by step"),
              std::string::npos)
        << note;
    EXPECT_NE(note.find("64 blocks; the GPU holds 1 per multiprocessor x " + std::to_string(sms)),
              std::string::npos)
        << note;
  }
}

TEST_F(CudaMock, TheCallersContextIsRestoredAndAnyThreadMayRun) {
  ctxStack.push_back(kUserCtx); // the application's own context is current
  auto s = session();
  ASSERT_TRUE(s.ok()) << s.status().message();
  ASSERT_EQ(ctxStack, std::vector<CUcontext>{kUserCtx});
  Status st;
  std::thread other([&] { // a thread on which no context was ever made current
    st = runWith(**s, 1.0f);
    EXPECT_TRUE(ctxStack.empty());
  });
  other.join();
  EXPECT_FALSE(bool(st)) << st.message();
  EXPECT_EQ(S.callsWithoutContext, 0);
  EXPECT_EQ(ctxStack, std::vector<CUcontext>{kUserCtx});
  s->reset();
  EXPECT_EQ(ctxStack, std::vector<CUcontext>{kUserCtx});
}

TEST_F(CudaMock, ADriverOlderThanThePackagesCudaIsRefused) {
  S.driverVersion = 12040;
  auto s = session();
  ASSERT_FALSE(s.ok());
  const std::string &m = s.status().message();
  EXPECT_NE(m.find("built with CUDA 13.0"), std::string::npos) << m;
  EXPECT_NE(m.find("supports CUDA 12.4"), std::string::npos) << m;
  EXPECT_NE(m.find("Update the driver"), std::string::npos) << m;
  EXPECT_EQ(count("cuModuleLoadData"), 0u); // refused before any opaque load failure
}

TEST_F(CudaMock, AGpuWithoutAModuleGetsATargetDlcCompiles) {
  S.major = 12; // sm_120: no cubin; the package has none of its PTX either
  auto s = session();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("--target compute_80"), std::string::npos)
      << s.status().message();
  S.major = 7, S.minor = 5;
  auto t = session();
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("older than dlc supports"), std::string::npos)
      << t.status().message();
}

TEST_F(CudaMock, SetInputIsSynchronousAndWeightsAreCompleteBeforeKernels) {
  rt::SessionOptions so;
  so.cudaGraphs = false;
  auto s = session(so);
  ASSERT_TRUE(s.ok()) << s.status().message();
  std::vector<float> x(8, 3.0f);
  ASSERT_FALSE(bool((*s)->setInputBytes("x", x.data(), x.size() * 4)));
  EXPECT_TRUE(S.pending.empty()); // the copy finished before set_input returned
  ASSERT_FALSE(bool((*s)->run()));
  auto lastWeight = std::find(S.calls.rbegin(), S.calls.rend(), "cuMemcpyHtoD");
  ASSERT_NE(lastWeight, S.calls.rend());
  auto sync = std::find(lastWeight.base(), S.calls.end(), "cuCtxSynchronize");
  auto firstWork = std::find_if(S.calls.begin(), S.calls.end(), [](const std::string &c) {
    return c == "cuLaunchKernelEx" || c == "cublasLtMatmul" || c == "cuMemcpyHtoDAsync";
  });
  ASSERT_NE(sync, S.calls.end());
  EXPECT_LT(sync - S.calls.begin(), firstWork - S.calls.begin());
}

TEST_F(CudaMock, GemmPlansAreBuiltOnceAndFallBackToTheEpilogueKernel) {
  S.rejectEpilogue = true; // no algorithm applies bias + ReLU
  rt::SessionOptions so;
  so.cudaGraphs = false;
  auto s = session(so);
  ASSERT_TRUE(s.ok()) << s.status().message();
  for (int i = 0; i < 3; ++i)
    ASSERT_FALSE(bool(runWith(**s, 1.0f + i)));
  EXPECT_EQ(S.matmuls, 3);
  EXPECT_EQ(S.heuristicCalls, 2); // with the epilogue (refused), then without: once
  size_t epilogues = std::count_if(S.launched.begin(), S.launched.end(), [](const std::string &k) {
    return k.find("gemm_epilogue") != std::string::npos;
  });
  EXPECT_EQ(epilogues, 3u);
  // The arena is 256-byte aligned and so are its buffers: cuBLASLt may assume it.
  EXPECT_EQ(S.alignments[CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES], 256u);
  EXPECT_EQ(S.alignments[CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES], 256u);

  S.reset();
  auto t = session(so); // an algorithm with the epilogue: no extra kernel
  ASSERT_TRUE(t.ok());
  ASSERT_FALSE(bool(runWith(**t, 1.0f)));
  EXPECT_EQ(S.heuristicCalls, 1);
  for (const std::string &k : S.launched)
    EXPECT_EQ(k.find("gemm_epilogue"), std::string::npos) << k;
}

TEST_F(CudaMock, TheScheduleIsCapturedOnceThenReplayed) {
  auto s = session();
  ASSERT_TRUE(s.ok()) << s.status().message();
  for (int i = 0; i < 3; ++i)
    ASSERT_FALSE(bool(runWith(**s, 1.0f)));
  EXPECT_EQ(S.captures, 1);
  EXPECT_EQ(S.graphLaunches, 3);
  EXPECT_EQ(count("cuLaunchKernelEx"), 1u); // softmax, issued once, during capture
  EXPECT_EQ(S.matmuls, 1);
  EXPECT_EQ((*s)->backendNote(), "");
  // A bound device pointer changes the addresses baked into the graph.
  std::vector<float> deviceInput(8, 0.0f);
  ASSERT_FALSE(bool((*s)->bindDevice("x", false, reinterpret_cast<uint64_t>(deviceInput.data()))));
  ASSERT_FALSE(bool((*s)->run()));
  EXPECT_EQ(S.captures, 2);
  EXPECT_EQ(S.graphLaunches, 4);
}

TEST_F(CudaMock, AShapeRangePackageCapturesAGraphPerShapeOnFirstUse) {
  auto textAt = [](int64_t n) {
    std::string N = std::to_string(n);
    return "graph @r(%x: f32[" + N + ",4]) -> (\"y\": f32[" + N +
           ",4]) {\n  %y = Softmax(%x) {axis = 1} : f32[" + N + ",4]\n  return %y\n}\n";
  };
  std::vector<uint8_t> bytes = test::compileShapeRangeIR(textAt, "x", 0, 1, 12, {"sm_90"});
  auto pf = pkg::PackageFile::fromBytes(bytes.data(), bytes.size(), "range.dlc");
  ASSERT_TRUE(pf.ok()) << pf.status().message();
  rt::SessionOptions so;
  so.device = rt::DeviceKind::Cuda;
  auto s = rt::Session::create(*pf, so);
  ASSERT_TRUE(s.ok()) << s.status().message();
  auto runAt = [&](int64_t n) {
    rt::HostTensor t = rt::HostTensor::zeros(pkg::DType::F32, {n, 4});
    DLC_RETURN_IF_ERROR((*s)->setInput("x", t));
    return (*s)->run();
  };
  for (int64_t n : {2, 3, 2, 3, 2})
    ASSERT_FALSE(bool(runAt(n)));
  EXPECT_EQ(S.captures, 2); // one per shape, replayed after
  EXPECT_EQ(S.graphLaunches, 5);
  // The cache keeps the 8 most recently used shapes: 10 shapes evict 2 and 3.
  for (int64_t n = 3; n <= 12; ++n)
    ASSERT_FALSE(bool(runAt(n)));
  EXPECT_EQ(S.captures, 2 + 9);
  ASSERT_FALSE(bool(runAt(12))); // still cached
  EXPECT_EQ(S.captures, 11);
  ASSERT_FALSE(bool(runAt(2))); // evicted: captured again
  EXPECT_EQ(S.captures, 12);
  EXPECT_EQ(S.graphLaunches, 5 + 10 + 2);
}

TEST_F(CudaMock, AFailedCaptureRunsStepByStepWithANote) {
  S.endCaptureResult = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  auto s = session();
  ASSERT_TRUE(s.ok()) << s.status().message();
  ASSERT_FALSE(bool(runWith(**s, 1.0f)));
  ASSERT_FALSE(bool(runWith(**s, 2.0f)));
  EXPECT_EQ(S.captures, 1); // not tried again
  EXPECT_EQ(S.graphLaunches, 0);
  EXPECT_EQ(S.matmuls, 3); // once captured (discarded), then once per run
  EXPECT_NE((*s)->backendNote().find("CUDA graph capture failed"), std::string::npos)
      << (*s)->backendNote();
}

// A schedule with steps on one side of an If reads the condition back (a stream-
// ordered copy and a synchronize) and is issued step by step, never captured.
TEST_F(CudaMock, ARunTimeIfReadsItsConditionAndRunsOneSide) {
  rt::SessionOptions so;
  so.device = rt::DeviceKind::Cuda;
  auto s = rt::Session::create(ifPackage(), so);
  ASSERT_TRUE(s.ok()) << s.status().message();
  std::vector<float> x(8, 1.0f);
  ASSERT_FALSE(bool((*s)->setInputBytes("x", x.data(), x.size() * 4)));
  for (bool c : {true, false, true}) {
    uint8_t cv = c;
    ASSERT_FALSE(bool((*s)->setInputBytes("c", &cv, 1)));
    size_t launches = count("cuLaunchKernelEx"), reads = count("cuMemcpyDtoHAsync");
    int matmuls = S.matmuls;
    ASSERT_FALSE(bool((*s)->run()));
    EXPECT_EQ(S.matmuls - matmuls, c ? 1 : 0) << "c=" << c;
    // The Where kernel, plus the softmax on the false side (cuBLASLt applies the ReLU).
    EXPECT_EQ(count("cuLaunchKernelEx") - launches, c ? 1u : 2u) << "c=" << c;
    EXPECT_GE(count("cuMemcpyDtoHAsync") - reads,
              1u); // the condition (and the check words, if any)
  }
  EXPECT_EQ(S.captures, 0);
  EXPECT_EQ(S.graphLaunches, 0);
}

TEST_F(CudaMock, BoundPointersMustBeAlignedToTheirElements) {
  auto s = session();
  ASSERT_TRUE(s.ok());
  Status st = (*s)->bindDevice("x", false, 0x10002);
  ASSERT_TRUE(bool(st));
  EXPECT_EQ(st.code(), StatusCode::InvalidArgument);
  EXPECT_NE(st.message().find("not aligned to its 4-byte elements"), std::string::npos)
      << st.message();
  EXPECT_FALSE(bool((*s)->bindDevice("probs", true, 0x10004))); // 4-byte aligned is enough
}

/// A device communicator of two ranks that records what it is asked (NCCL's place).
class FakeDeviceComm : public rt::Communicator {
public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  int localRank() const override { return 0; }
  std::string describe() const override { return "fake device communicator"; }
  Status allReduce(void *, size_t, pkg::DType, rt::ReduceOp) override { return unsupported(); }
  Status broadcast(void *, size_t, int) override { return unsupported(); }
  Status barrier() override { return unsupported(); }
  Status reduceScatter(const void *, void *, size_t, pkg::DType, rt::ReduceOp) override {
    return unsupported();
  }
  Status allGather(const void *, void *, size_t) override { return unsupported(); }
  bool onDevice() const override { return true; }
  Status reduceScatterDevice(uint64_t, uint64_t, size_t count, pkg::DType, rt::ReduceOp op,
                             void *stream) override {
    log("reduceScatterDevice", true);
    EXPECT_EQ(op, rt::ReduceOp::Avg);
    S.reduceStreams.push_back(static_cast<CUstream>(stream));
    S.reduceCounts.push_back(count);
    return Status::ok();
  }
  Status allGatherDevice(uint64_t, uint64_t, size_t bytes, void *stream) override {
    log("allGatherDevice", true);
    S.reduceStreams.push_back(static_cast<CUstream>(stream));
    S.reduceCounts.push_back(bytes);
    return Status::ok();
  }
  Status allReduceDevice(uint64_t, size_t count, pkg::DType dt, rt::ReduceOp op,
                         void *stream) override {
    log("allReduceDevice", true);
    EXPECT_EQ(dt, pkg::DType::F32);
    EXPECT_EQ(op, rt::ReduceOp::Avg);
    S.reduceStreams.push_back(static_cast<CUstream>(stream));
    S.reduceCounts.push_back(count);
    return Status::ok();
  }
  Status broadcastDevice(uint64_t, size_t, int root, void *) override {
    log("broadcastDevice", true);
    EXPECT_EQ(root, 0);
    return Status::ok();
  }
  double timeoutSeconds() const override { return 5; }
  [[noreturn]] void abort(int) override { std::abort(); }

private:
  static Status unsupported() {
    return Status(StatusCode::Unavailable, "host collectives: not in this test");
  }
};

TEST_F(CudaMock, ADataParallelStepAveragesEachBucketOnASecondStream) {
  // Two gradients in one bucket, read by the optimizer's update.
  std::ifstream in(std::string(DLC_SOURCE_DIR) + "/tests/lit/tools/Inputs/data_parallel.ir");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(text.empty());
  auto pkg = compileForSm90(text.c_str(), "dp");
  ASSERT_EQ(pkg->meta().bucket_bytes(), 1024u);
  rt::SessionOptions so;
  so.device = rt::DeviceKind::Cuda;
  so.rank = {0, 2, 0};
  so.communicator = std::make_shared<FakeDeviceComm>();
  auto s = rt::Session::create(pkg, so);
  ASSERT_TRUE(s.ok()) << s.status().message();
  ASSERT_FALSE(bool((*s)->broadcastVariables(0)));
  EXPECT_EQ(count("broadcastDevice"), 2u); // w and v
  std::vector<float> x{1, 2, 3}, y{4, 5};
  ASSERT_FALSE(bool((*s)->setInputBytes("x", x.data(), 12)));
  ASSERT_FALSE(bool((*s)->setInputBytes("y", y.data(), 8)));
  S.calls.clear();
  ASSERT_FALSE(bool((*s)->run()));
  // Step by step (NCCL's calls are not captured), one all-reduce of the bucket: each
  // gradient at an arena-aligned offset, so 2 x 256 bytes of f32.
  EXPECT_EQ(S.captures, 0);
  ASSERT_EQ(S.reduceCounts, std::vector<size_t>{128});
  // On the second stream (the session's is the first one created).
  EXPECT_EQ(S.reduceStreams, std::vector<CUstream>{reinterpret_cast<CUstream>(0x3010)});
  // Packed (two copies) before the "packed" event; the second stream waits for it,
  // reduces, records "averaged"; the main stream waits for that before the update.
  auto at = [&](const std::string &what, size_t from) {
    return static_cast<size_t>(
        std::find(S.calls.begin() + static_cast<std::ptrdiff_t>(from), S.calls.end(), what) -
        S.calls.begin());
  };
  size_t reduce = at("allReduceDevice", 0);
  ASSERT_LT(reduce, S.calls.size());
  ASSERT_GE(reduce, 4u);
  EXPECT_EQ(S.calls[reduce - 1], "cuStreamWaitEvent");
  EXPECT_EQ(S.calls[reduce - 2], "cuEventRecord");
  EXPECT_EQ(S.calls[reduce - 3], "cuMemcpyDtoDAsync");
  EXPECT_EQ(S.calls[reduce - 4], "cuMemcpyDtoDAsync");
  EXPECT_EQ(S.calls[reduce + 1], "cuEventRecord");
  size_t wait = at("cuStreamWaitEvent", reduce + 1);
  size_t update = at("cuLaunchKernelEx", reduce + 1);
  ASSERT_LT(update, S.calls.size());
  EXPECT_LT(wait, update) << "the optimizer's update must wait for the average";
}

TEST_F(CudaMock, ZeroShardsReduceScatterAndAllGatherOnTheSecondStream) {
  // ZeRO-1 over 2 ranks, by hand: this rank's share of the mean gradient and of the
  // parameters, its step, and every rank's new share gathered into the parameter.
  const char *text = R"(graph @zero(%x: f32[4]) -> ("loss": f32[]) {
  %w = param f32[4] dense<[1.0, 2.0, 3.0, 4.0]>
  %p = Mul(%x, %w) : f32[4]
  %loss = ReduceSum(%p) {keepdims = 0} : f32[]
  %gs = ReduceScatter(%x) {ranks = 2} : f32[2]
  %ps = RankShard(%w) {ranks = 2} : f32[2]
  %n = Sub(%ps, %gs) : f32[2]
  %all = AllGather(%n) {ranks = 2} : f32[4]
  update %w = %all
  return %loss
})";
  auto pkg = compileForSm90(text, "zero");
  ASSERT_EQ(pkg->meta().zero_ranks(), 2u);
  rt::SessionOptions so;
  so.device = rt::DeviceKind::Cuda;
  so.communicator = std::make_shared<FakeDeviceComm>();
  so.rank = {1, 2, 1};
  {
    rt::SessionOptions one = so;
    one.rank = {0, 1, 0};
    auto s = rt::Session::create(pkg, one);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.status().message().find("run it on 2 ranks, not 1"), std::string::npos)
        << s.status().message();
  }
  auto s = rt::Session::create(pkg, so);
  ASSERT_TRUE(s.ok()) << s.status().message();
  std::vector<float> x{1, 2, 3, 4};
  ASSERT_FALSE(bool((*s)->setInputBytes("x", x.data(), 16)));
  S.calls.clear();
  ASSERT_FALSE(bool((*s)->run()));
  // A reduce-scatter of 2 floats per rank and an all-gather of 8 bytes per rank, both
  // on the second stream.
  EXPECT_EQ(S.reduceCounts, (std::vector<size_t>{2, 8}));
  EXPECT_EQ(S.reduceStreams, (std::vector<CUstream>(2, reinterpret_cast<CUstream>(0x3010))));
  auto at = [&](const std::string &what, size_t from) {
    return static_cast<size_t>(
        std::find(S.calls.begin() + static_cast<std::ptrdiff_t>(from), S.calls.end(), what) -
        S.calls.begin());
  };
  size_t scatter = at("reduceScatterDevice", 0), gather = at("allGatherDevice", 0);
  ASSERT_LT(scatter, gather);
  ASSERT_LT(gather, S.calls.size());
  // The step reads the gradient share only after waiting for it, and the update
  // copies the gathered parameters only after waiting for them.
  size_t waitScatter = at("cuStreamWaitEvent", scatter + 1);
  EXPECT_LT(waitScatter, at("cuLaunchKernelEx", scatter + 1));
  size_t waitGather = at("cuStreamWaitEvent", gather + 1);
  ASSERT_LT(waitGather, S.calls.size());
  EXPECT_EQ(at("cuLaunchKernelEx", gather + 1), S.calls.size())
      << "nothing computes after the gather";
}

// `dlc calibrate` against a fake GPU whose rates are known: each microbenchmark's
// launch advances the fake GPU's clock by its work (from the kernel's source: FFMA per
// thread and iteration, bytes copied, ...) at those rates, and calibrate must recover
// them from the event times and the cycles the kernels report.
namespace calib {

constexpr double kClock = 1.5e9, kSms = 100, kFfma = 4, kHfma2 = 2, kHmma = 1, kDram = 3e12,
                 kL2 = 6e12, kL2Lat = 250, kDramLat = 700, kLaunchUs = 3, kNodeUs = 1;
constexpr int kL2Bytes = 40 << 20;

double gpuSeconds = 0;
std::map<CUevent, double> recorded;
uint64_t lastRingBytes = 0;
int capturedNodes = 0, liveAllocations = 0, moduleLoads = 0;
bool failModule = false;
double tickRate = 1; // clock64's rate as a fraction of the SM clock

template <typename T> T param(void **p, int i) {
  return *static_cast<T *>(p[i]);
}

cuda::Driver fakeGpu() {
  cuda::Driver d = makeDriver();
  d.cuDeviceGetAttribute_ = [](int *v, CUdevice_attribute a, CUdevice) {
    *v = a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR   ? 9
         : a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR ? 0
         : a == CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE            ? kL2Bytes
         : a == CU_DEVICE_ATTRIBUTE_CLOCK_RATE               ? static_cast<int>(kClock / 1e3)
                                                             : static_cast<int>(kSms);
    return CUDA_SUCCESS;
  };
  d.cuModuleLoadData_ = [](CUmodule *m, const void *) {
    ++moduleLoads;
    *m = reinterpret_cast<CUmodule>(0x4000);
    return failModule ? CUDA_ERROR_NO_BINARY_FOR_GPU : CUDA_SUCCESS;
  };
  // Large buffers are never touched by the fake: only their addresses exist.
  d.cuMemAlloc_ = [](CUdeviceptr *p, size_t n) {
    static uintptr_t fake = 0x7f0000000000;
    ++liveAllocations;
    *p = n <= 4096 ? reinterpret_cast<CUdeviceptr>(std::calloc(1, 4096))
                   : static_cast<CUdeviceptr>(fake += (n + 4095) / 4096 * 4096);
    return CUDA_SUCCESS;
  };
  d.cuMemFree_ = [](CUdeviceptr p) {
    --liveAllocations;
    if (p < 0x7f0000000000)
      std::free(reinterpret_cast<void *>(p));
    return CUDA_SUCCESS;
  };
  d.cuEventRecord_ = [](CUevent e, CUstream) {
    recorded[e] = gpuSeconds;
    return CUDA_SUCCESS;
  };
  d.cuEventSynchronize_ = [](CUevent) { return CUDA_SUCCESS; };
  d.cuEventElapsedTime_ = [](float *ms, CUevent a, CUevent b) {
    *ms = static_cast<float>((recorded[b] - recorded[a]) * 1e3);
    return CUDA_SUCCESS;
  };
  d.cuStreamBeginCapture_ = [](CUstream, CUstreamCaptureMode) {
    S.capturing = true;
    capturedNodes = 0;
    return CUDA_SUCCESS;
  };
  d.cuGraphLaunch_ = [](CUgraphExec, CUstream) {
    ++S.graphLaunches;
    gpuSeconds += capturedNodes * kNodeUs * 1e-6;
    return CUDA_SUCCESS;
  };
  d.cuLaunchKernelEx_ = [](const CUlaunchConfig *cfg, CUfunction f, void **p, void **) {
    std::string k = S.functions[f];
    S.launched.push_back(k);
    double warps = cfg->gridDimX * cfg->blockDimX / 32.0, t = 0;
    auto *out = reinterpret_cast<uint64_t *>(param<CUdeviceptr>(p, 0));
    if (k == "dlc_cal_ffma" || k == "dlc_cal_hfma2") {
      t = warps * param<int>(p, 2) * 64 / ((k == "dlc_cal_ffma" ? kFfma : kHfma2) * kClock * kSms);
      out[0] = static_cast<uint64_t>(t * kClock * tickRate + 0.5);
    } else if (k == "dlc_cal_mma") {
      t = warps * param<int>(p, 2) * 8 / (kHmma * kClock * kSms);
    } else if (k == "dlc_cal_copy") {
      t = 2.0 * param<uint64_t>(p, 3) * 16 / kDram;
    } else if (k == "dlc_cal_l2") {
      t = double(param<uint64_t>(p, 2)) * 16 * param<int>(p, 3) / kL2;
    } else if (k == "dlc_cal_ring") {
      lastRingBytes = uint64_t(param<unsigned>(p, 2)) * 4;
    } else if (k == "dlc_cal_chase") {
      out[0] = static_cast<uint64_t>((lastRingBytes <= uint64_t(kL2Bytes) ? kL2Lat : kDramLat) *
                                     tickRate);
    } else if (k == "dlc_cal_empty") {
      if (S.capturing)
        ++capturedNodes;
      else
        t = kLaunchUs * 1e-6;
    }
    gpuSeconds += t;
    return CUDA_SUCCESS;
  };
  return d;
}

} // namespace calib

TEST_F(CudaMock, CalibrateRecoversTheRatesOfAFakeGpu) {
  cuda::Driver d = calib::fakeGpu();
  std::vector<std::string> steps;
  auto c = cuda::calibrateWith(d, 0, std::vector<uint8_t>(16, 1),
                               [&](const std::string &s) { steps.push_back(s); });
  ASSERT_TRUE(c.ok()) << c.status().message() << " after " << steps.back();
  EXPECT_EQ(c->device, "Fake GPU");
  EXPECT_EQ(c->arch(), "sm_90");
  EXPECT_EQ(c->sms, 100);
  // Event times are float milliseconds: 1e-6 relative.
  auto near = [](double got, double want) { return std::abs(got / want - 1) < 1e-5; };
  EXPECT_PRED2(near, c->clockHz, calib::kClock);
  EXPECT_PRED2(near, c->ffmaPerClock, calib::kFfma);
  EXPECT_PRED2(near, c->hfma2PerClock, calib::kHfma2);
  EXPECT_PRED2(near, c->hmmaPerClock, calib::kHmma);
  EXPECT_PRED2(near, c->dramBytesPerSecond, calib::kDram);
  EXPECT_PRED2(near, c->l2BytesPerSecond, calib::kL2);
  EXPECT_EQ(c->l2LatencyCycles, calib::kL2Lat);
  EXPECT_EQ(c->dramLatencyCycles, calib::kDramLat);
  EXPECT_PRED2(near, c->launchMicros, calib::kLaunchUs);
  EXPECT_PRED2(near, c->graphNodeMicros, calib::kNodeUs);
  EXPECT_GT(c->runOverheadMicros, 0); // host time: whatever the fake takes
  EXPECT_LT(c->runOverheadMicros, 1e6);
  EXPECT_EQ(steps.size(), 7u);
  // Everything it took is given back: context, memory.
  EXPECT_TRUE(ctxStack.empty());
  EXPECT_EQ(calib::liveAllocations, 0);
  EXPECT_EQ(calib::moduleLoads, 1);
  // The profile names the measured fields as the loader reads them.
  std::string json = rt::calibrationProfileJson(*c, "H100");
  for (const char *field : {"\"name\": \"H100\"", "\"arch\": \"sm_90\"", "\"hmma_per_clock\": 1",
                            "\"dram_measured_bytes_per_second\": 3e+12", "\"graph_node_us\": 1"})
    EXPECT_NE(json.find(field), std::string::npos) << field << "\n" << json;
}

// A clock64 that advances at 0.42 of the SM clock (what one warp's span read on an H100). The clock
// is the device's attribute, the per-clock rates follow from it, and the latencies are SM cycles.
TEST_F(CudaMock, CalibrateTakesTheSmClockWhereClock64CountsSlower) {
  cuda::Driver d = calib::fakeGpu();
  calib::tickRate = 0.42;
  std::vector<std::string> steps;
  auto c = cuda::calibrateWith(d, 0, std::vector<uint8_t>(16, 1),
                               [&](const std::string &s) { steps.push_back(s); });
  calib::tickRate = 1;
  ASSERT_TRUE(c.ok()) << c.status().message();
  auto near = [](double got, double want) { return std::abs(got / want - 1) < 1e-5; };
  EXPECT_PRED2(near, c->clockHz, calib::kClock);
  EXPECT_PRED2(near, c->ffmaPerClock, calib::kFfma);
  EXPECT_PRED2(near, c->hmmaPerClock, calib::kHmma);
  EXPECT_EQ(c->l2LatencyCycles, calib::kL2Lat);
  EXPECT_EQ(c->dramLatencyCycles, calib::kDramLat);
  bool said = false;
  for (const std::string &s : steps)
    said |= s.find("clock64 counts at 63") != std::string::npos &&
            s.find("MHz, the SM clock is 1500 MHz") != std::string::npos;
  EXPECT_TRUE(said);
}

TEST(Calibrate, ADeviceNameNamesAProfileAsAWholeWord) {
  EXPECT_EQ(rt::profileNameFor("NVIDIA H100 80GB HBM3"), "H100");
  EXPECT_EQ(rt::profileNameFor("NVIDIA H200"), "H200");
  EXPECT_EQ(rt::profileNameFor("NVIDIA A100-SXM4-80GB"), "A100");
  EXPECT_EQ(rt::profileNameFor("NVIDIA A10"), "A10");
  EXPECT_EQ(rt::profileNameFor("NVIDIA A10G"), "");
  EXPECT_EQ(rt::profileNameFor("NVIDIA L4"), "L4");
  EXPECT_EQ(rt::profileNameFor("NVIDIA L40S"), "");
  EXPECT_EQ(rt::profileNameFor("Tesla V100"), "");
}

TEST_F(CudaMock, CalibrateWithAModuleForAnotherGpuFailsCleanly) {
  cuda::Driver d = calib::fakeGpu();
  calib::failModule = true;
  calib::liveAllocations = 0;
  auto c = cuda::calibrateWith(d, 0, std::vector<uint8_t>(16, 1), {});
  calib::failModule = false;
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("compiled for another GPU?"), std::string::npos)
      << c.status().message();
  EXPECT_TRUE(ctxStack.empty());
  EXPECT_EQ(calib::liveAllocations, 0);
  auto none = cuda::calibrateWith(d, 3, std::vector<uint8_t>(16, 1), {});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("no CUDA device 3 (1 present)"), std::string::npos);
}

} // namespace
