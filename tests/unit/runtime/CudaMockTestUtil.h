// The fake CUDA driver and cuBLASLt of the CudaMock tests (runtime/cuda/Driver.h's
// tables): device memory is host memory, a stream is a queue of copies that runs at
// synchronization, kernels are recorded, not run; FakeState `S` records what the
// driver saw. Shared by CudaMockTest.cpp and CudaMockCalibrateTest.cpp (test-only: it
// brings `dlc` and `cuda` into scope).
#pragma once

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

namespace cudamock {

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
  // Tactics: a clock that kernels (by a substring of their names) and cuDNN's
  // executions advance, which events read; cuDNN's calls as "create T", "set A",
  // "get A", "finalize T", "execute"; attribute type errors against cudnn_graph.h.
  double clockMs = 0, cudnnMs = 0.01;
  std::map<std::string, double> kernelMs;
  std::map<CUevent, double> eventAt;
  int elapsedCalls = 0, dnnExecutes = 0;
  bool dnnCreateFails = false, dnnRejectPlans = false;
  int64_t dnnWorkspace = 0;
  std::vector<std::string> dnnCalls, dnnErrors;
  std::vector<std::vector<int64_t>> dnnPacks; // each execution's tensor ids
  std::map<int64_t, int> dnnTensorTypes;      // each tensor id's data type
  std::vector<std::string> dnnPointwise;      // pointwise operations, as the fake writes them
  std::map<int64_t, float> dnnByValue;        // by-value scalars at the last execution
  int ltAlgorithms = 1;                       // cuBLASLt's heuristic offers this many algorithms
  std::map<int, double> algoMs;               // the fake clock's time of each (by rank)
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
    clockMs = 0, cudnnMs = 0.01;
    kernelMs.clear(), eventAt.clear(), dnnCalls.clear(), dnnErrors.clear(), dnnPacks.clear();
    dnnTensorTypes.clear(), dnnPointwise.clear(), dnnByValue.clear();
    elapsedCalls = dnnExecutes = 0;
    dnnCreateFails = dnnRejectPlans = false;
    dnnWorkspace = 0;
    ltAlgorithms = 1;
    algoMs.clear();
    endCaptureResult = CUDA_SUCCESS;
    return *this;
  }
};
inline FakeState S;
inline thread_local std::vector<CUcontext> ctxStack;

inline void log(const char *what, bool needsContext) {
  std::lock_guard<std::mutex> g(S.mu);
  S.calls.push_back(what);
  if (needsContext && (ctxStack.empty() || ctxStack.back() != kPrimary))
    ++S.callsWithoutContext;
}

inline void drain() {
  for (const FakeState::Copy &c : S.pending)
    std::memcpy(c.dst, c.src, c.n);
  S.pending.clear();
}

inline cuda::Driver makeDriver() {
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
    double ms = 0.001;
    for (const auto &[name, t] : S.kernelMs)
      if (S.functions[f].find(name) != std::string::npos)
        ms = t;
    S.clockMs += ms;
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
  d.cuEventRecord_ = [](CUevent e, CUstream) {
    log("cuEventRecord", true);
    S.eventAt[e] = S.clockMs;
    return CUDA_SUCCESS;
  };
  d.cuEventSynchronize_ = [](CUevent) { return CUDA_SUCCESS; };
  d.cuEventElapsedTime_ = [](float *ms, CUevent a, CUevent b) {
    log("cuEventElapsedTime", true);
    ++S.elapsedCalls;
    *ms = static_cast<float>(S.eventAt[b] - S.eventAt[a]);
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
inline std::map<cublasLtMatmulDesc_t, bool> descHasEpilogue;

inline cuda::CublasLt makeLt() {
  cuda::CublasLt l;
  l.cublasLtGetVersion_ = []() -> size_t { return 130100; };
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
         cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatmulPreference_t, int requested,
         cublasLtMatmulHeuristicResult_t *results, int *found) {
        ++S.heuristicCalls;
        *found = S.rejectEpilogue && descHasEpilogue[d] ? 0 : std::min(requested, S.ltAlgorithms);
        for (int i = 0; i < *found; ++i)
          results[i].algo.data[0] = static_cast<uint64_t>(i); // its rank, for the fake clock
        return CUBLAS_STATUS_SUCCESS;
      };
  l.cublasLtMatmul_ = [](cublasLtHandle_t, cublasLtMatmulDesc_t, const void *, const void *,
                         cublasLtMatrixLayout_t, const void *, cublasLtMatrixLayout_t, const void *,
                         const void *, cublasLtMatrixLayout_t, void *, cublasLtMatrixLayout_t,
                         const cublasLtMatmulAlgo_t *algo, void *, size_t, cudaStream_t) {
    log("cublasLtMatmul", true);
    ++S.matmuls;
    auto t = S.algoMs.find(algo ? static_cast<int>(algo->data[0]) : 0);
    S.clockMs += t != S.algoMs.end() ? t->second : 0.001;
    return CUBLAS_STATUS_SUCCESS;
  };
  return l;
}

/// cuDNN's graph API: descriptors remember their type; every attribute is checked
/// against the type cudnn_graph.h documents for it (and the descriptor it belongs
/// to), as the library checks them. The heuristic offers two engines.
struct FakeDnnDesc {
  cudnnBackendDescriptorType_t type;
  std::map<int, std::vector<int64_t>> ints;       // INT64 attributes
  std::map<int, int64_t> enums;                   // enum and boolean attributes
  std::map<int, std::vector<FakeDnnDesc *>> refs; // descriptor attributes
  std::vector<void *> pointers;                   // a variant pack's data pointers
};

/// The attribute type cudnn_graph.h gives each attribute the backend sets, and the
/// descriptor it belongs to.
inline const std::map<cudnnBackendAttributeName_t,
                      std::pair<cudnnBackendAttributeType_t, cudnnBackendDescriptorType_t>> &
dnnAttributes() {
  static const std::map<cudnnBackendAttributeName_t,
                        std::pair<cudnnBackendAttributeType_t, cudnnBackendDescriptorType_t>>
      m = {
          {CUDNN_ATTR_TENSOR_DATA_TYPE, {CUDNN_TYPE_DATA_TYPE, CUDNN_BACKEND_TENSOR_DESCRIPTOR}},
          {CUDNN_ATTR_TENSOR_DIMENSIONS, {CUDNN_TYPE_INT64, CUDNN_BACKEND_TENSOR_DESCRIPTOR}},
          {CUDNN_ATTR_TENSOR_STRIDES, {CUDNN_TYPE_INT64, CUDNN_BACKEND_TENSOR_DESCRIPTOR}},
          {CUDNN_ATTR_TENSOR_UNIQUE_ID, {CUDNN_TYPE_INT64, CUDNN_BACKEND_TENSOR_DESCRIPTOR}},
          {CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, {CUDNN_TYPE_INT64, CUDNN_BACKEND_TENSOR_DESCRIPTOR}},
          {CUDNN_ATTR_TENSOR_IS_VIRTUAL, {CUDNN_TYPE_BOOLEAN, CUDNN_BACKEND_TENSOR_DESCRIPTOR}},
          {CUDNN_ATTR_TENSOR_IS_BY_VALUE, {CUDNN_TYPE_BOOLEAN, CUDNN_BACKEND_TENSOR_DESCRIPTOR}},
          {CUDNN_ATTR_POINTWISE_AXIS, {CUDNN_TYPE_INT64, CUDNN_BACKEND_POINTWISE_DESCRIPTOR}},
          {CUDNN_ATTR_OPERATION_POINTWISE_TDESC,
           {CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR}},
          {CUDNN_ATTR_MATMUL_COMP_TYPE, {CUDNN_TYPE_DATA_TYPE, CUDNN_BACKEND_MATMUL_DESCRIPTOR}},
          {CUDNN_ATTR_OPERATION_MATMUL_ADESC,
           {CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR}},
          {CUDNN_ATTR_OPERATION_MATMUL_BDESC,
           {CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR}},
          {CUDNN_ATTR_OPERATION_MATMUL_CDESC,
           {CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR}},
          {CUDNN_ATTR_OPERATION_MATMUL_DESC,
           {CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR}},
          {CUDNN_ATTR_REDUCTION_OPERATOR,
           {CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, CUDNN_BACKEND_REDUCTION_DESCRIPTOR}},
          {CUDNN_ATTR_REDUCTION_COMP_TYPE,
           {CUDNN_TYPE_DATA_TYPE, CUDNN_BACKEND_REDUCTION_DESCRIPTOR}},
          {CUDNN_ATTR_OPERATION_REDUCTION_XDESC,
           {CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR}},
          {CUDNN_ATTR_OPERATION_REDUCTION_YDESC,
           {CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR}},
          {CUDNN_ATTR_OPERATION_REDUCTION_DESC,
           {CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR}},
          {CUDNN_ATTR_POINTWISE_MODE,
           {CUDNN_TYPE_POINTWISE_MODE, CUDNN_BACKEND_POINTWISE_DESCRIPTOR}},
          {CUDNN_ATTR_POINTWISE_MATH_PREC,
           {CUDNN_TYPE_DATA_TYPE, CUDNN_BACKEND_POINTWISE_DESCRIPTOR}},
          {CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR,
           {CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR}},
          {CUDNN_ATTR_OPERATION_POINTWISE_XDESC,
           {CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR}},
          {CUDNN_ATTR_OPERATION_POINTWISE_BDESC,
           {CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR}},
          {CUDNN_ATTR_OPERATION_POINTWISE_YDESC,
           {CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR}},
          {CUDNN_ATTR_CONVOLUTION_COMP_TYPE,
           {CUDNN_TYPE_DATA_TYPE, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR}},
          {CUDNN_ATTR_CONVOLUTION_CONV_MODE,
           {CUDNN_TYPE_CONVOLUTION_MODE, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR}},
          {CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS,
           {CUDNN_TYPE_INT64, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR}},
          {CUDNN_ATTR_CONVOLUTION_DILATIONS,
           {CUDNN_TYPE_INT64, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR}},
          {CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES,
           {CUDNN_TYPE_INT64, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR}},
          {CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS,
           {CUDNN_TYPE_INT64, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR}},
          {CUDNN_ATTR_CONVOLUTION_POST_PADDINGS,
           {CUDNN_TYPE_INT64, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR}},
          {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
           {CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR}},
          {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
           {CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR}},
          {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
           {CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR}},
          {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
           {CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR}},
          {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
           {CUDNN_TYPE_FLOAT, CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR}},
          {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
           {CUDNN_TYPE_FLOAT, CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR}},
          {CUDNN_ATTR_OPERATIONGRAPH_OPS,
           {CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR}},
          {CUDNN_ATTR_OPERATIONGRAPH_HANDLE,
           {CUDNN_TYPE_HANDLE, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR}},
          {CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
           {CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR}},
          {CUDNN_ATTR_ENGINEHEUR_MODE, {CUDNN_TYPE_HEUR_MODE, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR}},
          {CUDNN_ATTR_ENGINEHEUR_RESULTS,
           {CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR}},
          {CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
           {CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR}},
          {CUDNN_ATTR_EXECUTION_PLAN_HANDLE,
           {CUDNN_TYPE_HANDLE, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR}},
          {CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
           {CUDNN_TYPE_INT64, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR}},
          {CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS,
           {CUDNN_TYPE_INT64, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR}},
          {CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
           {CUDNN_TYPE_VOID_PTR, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR}},
          {CUDNN_ATTR_VARIANT_PACK_WORKSPACE,
           {CUDNN_TYPE_VOID_PTR, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR}},
      };
  return m;
}

inline void dnnCheck(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a,
                     cudnnBackendAttributeType_t t, const char *what) {
  auto it = dnnAttributes().find(a);
  auto *desc = reinterpret_cast<FakeDnnDesc *>(d);
  if (it == dnnAttributes().end())
    S.dnnErrors.push_back(std::string(what) + " of undocumented attribute " + std::to_string(a));
  else if (it->second.first != t || it->second.second != desc->type)
    S.dnnErrors.push_back(std::string(what) + " of attribute " + std::to_string(a) + " with type " +
                          std::to_string(t) + " on descriptor type " + std::to_string(desc->type));
}

inline cuda::Cudnn makeDnn() {
  cuda::Cudnn n;
  n.cudnnGetVersion_ = []() -> size_t { return 91900; };
  n.cudnnGetErrorString_ = [](cudnnStatus_t) { return "fake cuDNN failure"; };
  n.cudnnCreate_ = [](cudnnHandle_t *h) {
    S.dnnCalls.push_back("cudnnCreate");
    if (S.dnnCreateFails)
      return CUDNN_STATUS_NOT_INITIALIZED;
    *h = reinterpret_cast<cudnnHandle_t>(0xd000);
    return CUDNN_STATUS_SUCCESS;
  };
  n.cudnnDestroy_ = [](cudnnHandle_t) { return CUDNN_STATUS_SUCCESS; };
  n.cudnnSetStream_ = [](cudnnHandle_t, cudaStream_t) { return CUDNN_STATUS_SUCCESS; };
  n.cudnnBackendCreateDescriptor_ = [](cudnnBackendDescriptorType_t t,
                                       cudnnBackendDescriptor_t *d) {
    S.dnnCalls.push_back("create " + std::to_string(t));
    auto *desc = new FakeDnnDesc();
    desc->type = t;
    *d = reinterpret_cast<cudnnBackendDescriptor_t>(desc);
    return CUDNN_STATUS_SUCCESS;
  };
  n.cudnnBackendDestroyDescriptor_ = [](cudnnBackendDescriptor_t d) {
    delete reinterpret_cast<FakeDnnDesc *>(d);
    return CUDNN_STATUS_SUCCESS;
  };
  n.cudnnBackendSetAttribute_ = [](cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a,
                                   cudnnBackendAttributeType_t t, int64_t count, const void *v) {
    S.dnnCalls.push_back("set " + std::to_string(a));
    dnnCheck(d, a, t, "set");
    auto *desc = reinterpret_cast<FakeDnnDesc *>(d);
    if (t == CUDNN_TYPE_INT64)
      desc->ints[a].assign(static_cast<const int64_t *>(v),
                           static_cast<const int64_t *>(v) + count);
    else if (t == CUDNN_TYPE_BOOLEAN)
      desc->enums[a] = *static_cast<const bool *>(v);
    else if (t == CUDNN_TYPE_DATA_TYPE || t == CUDNN_TYPE_POINTWISE_MODE ||
             t == CUDNN_TYPE_REDUCTION_OPERATOR_TYPE)
      desc->enums[a] = *static_cast<const int *>(v);
    else if (t == CUDNN_TYPE_BACKEND_DESCRIPTOR)
      desc->refs[a].assign(static_cast<FakeDnnDesc *const *>(v),
                           static_cast<FakeDnnDesc *const *>(v) + count);
    else if (t == CUDNN_TYPE_VOID_PTR && a == CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS)
      desc->pointers.assign(static_cast<void *const *>(v), static_cast<void *const *>(v) + count);
    return CUDNN_STATUS_SUCCESS;
  };
  n.cudnnBackendGetAttribute_ = [](cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a,
                                   cudnnBackendAttributeType_t t, int64_t requested, int64_t *count,
                                   void *v) {
    S.dnnCalls.push_back("get " + std::to_string(a));
    dnnCheck(d, a, t, "get");
    if (a == CUDNN_ATTR_ENGINEHEUR_RESULTS) {
      *count = requested ? std::min<int64_t>(requested, 2) : 2;
      return CUDNN_STATUS_SUCCESS;
    }
    if (a == CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE) {
      *count = 1;
      *static_cast<int64_t *>(v) = S.dnnWorkspace;
    }
    return CUDNN_STATUS_SUCCESS;
  };
  n.cudnnBackendFinalize_ = [](cudnnBackendDescriptor_t d) {
    auto *desc = reinterpret_cast<FakeDnnDesc *>(d);
    auto join2 = [](const std::vector<int64_t> &v) {
      std::string r;
      for (int64_t x : v)
        r += (r.empty() ? "" : ",") + std::to_string(x);
      return r;
    };
    auto join = [&](int a) { return join2(desc->ints[a]); };
    if (desc->type == CUDNN_BACKEND_TENSOR_DESCRIPTOR &&
        !desc->ints[CUDNN_ATTR_TENSOR_UNIQUE_ID].empty())
      S.dnnTensorTypes[desc->ints[CUDNN_ATTR_TENSOR_UNIQUE_ID][0]] =
          static_cast<int>(desc->enums[CUDNN_ATTR_TENSOR_DATA_TYPE]);
    if (desc->type == CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR) {
      // "MODE(x[, b[, t]]) -> y" by tensor ids, the precision and any axis.
      auto uid = [&](int a) {
        auto it = desc->refs.find(a);
        return it == desc->refs.end() || it->second.empty() || !it->second[0]
                   ? std::string()
                   : join2(it->second[0]->ints[CUDNN_ATTR_TENSOR_UNIQUE_ID]);
      };
      FakeDnnDesc *pw = desc->refs[CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR].at(0);
      std::string op = std::to_string(pw->enums[CUDNN_ATTR_POINTWISE_MODE]) + "(" +
                       uid(CUDNN_ATTR_OPERATION_POINTWISE_XDESC);
      for (int a : {CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_ATTR_OPERATION_POINTWISE_TDESC})
        if (!uid(a).empty())
          op += ", " + uid(a);
      op += ") -> " + uid(CUDNN_ATTR_OPERATION_POINTWISE_YDESC) + " prec " +
            std::to_string(pw->enums[CUDNN_ATTR_POINTWISE_MATH_PREC]);
      if (pw->ints.count(CUDNN_ATTR_POINTWISE_AXIS))
        op += " axis " + join2(pw->ints[CUDNN_ATTR_POINTWISE_AXIS]);
      S.dnnPointwise.push_back(op);
    }
    if (desc->type == CUDNN_BACKEND_TENSOR_DESCRIPTOR)
      S.dnnCalls.push_back("finalize tensor " + join(CUDNN_ATTR_TENSOR_UNIQUE_ID) + " dims " +
                           join(CUDNN_ATTR_TENSOR_DIMENSIONS) + " strides " +
                           join(CUDNN_ATTR_TENSOR_STRIDES));
    else if (desc->type == CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR)
      S.dnnCalls.push_back("finalize convolution pads " +
                           join(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS) + "/" +
                           join(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS) + " strides " +
                           join(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES) + " dilations " +
                           join(CUDNN_ATTR_CONVOLUTION_DILATIONS));
    else
      S.dnnCalls.push_back("finalize " + std::to_string(desc->type));
    if (desc->type == CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR && S.dnnRejectPlans)
      return CUDNN_STATUS_NOT_SUPPORTED;
    return CUDNN_STATUS_SUCCESS;
  };
  n.cudnnBackendExecute_ = [](cudnnHandle_t, cudnnBackendDescriptor_t,
                              cudnnBackendDescriptor_t pack) {
    S.dnnCalls.push_back("execute");
    log("cudnnBackendExecute", true);
    const auto &uids =
        reinterpret_cast<FakeDnnDesc *>(pack)->ints[CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS];
    // (A graph's non-virtual tensors are numbered from 1: 3 or 4 for a convolution, 5 or
    // 6 for an attention with its by-value scalars.)
    bool numbered = uids.size() >= 3;
    for (size_t i = 0; i < uids.size(); ++i)
      numbered &= uids[i] == static_cast<int64_t>(i + 1);
    if (!numbered)
      S.dnnErrors.push_back("the variant pack does not name the graph's tensors");
    S.dnnPacks.push_back(uids);
    // By-value scalars (an attention's scale, 5, and masked value, 6): host floats.
    const auto &ptrs = reinterpret_cast<FakeDnnDesc *>(pack)->pointers;
    for (size_t i = 0; i < uids.size() && i < ptrs.size(); ++i)
      if (uids.size() >= 5 && (uids[i] == 5 || uids[i] == 6))
        S.dnnByValue[uids[i]] = *static_cast<const float *>(ptrs[i]);
    ++S.dnnExecutes;
    S.clockMs += S.cudnnMs;
    return CUDNN_STATUS_SUCCESS;
  };
  return n;
}

const cuda::Driver kDriver = makeDriver();
const cuda::CublasLt kLt = makeLt();
const cuda::Cudnn kDnn = makeDnn();

/// Textual IR through the default pipeline, compiled for sm_90 (NVRTC, no GPU needed).
inline std::shared_ptr<const pkg::PackageFile> compileForSm90(const char *text,
                                                              const std::string &name) {
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
inline std::shared_ptr<const pkg::PackageFile> mlpPackage() {
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
inline std::shared_ptr<const pkg::PackageFile> ifPackage() {
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
    cuda::overrideCudnnForTesting(&kDnn);
  }
  void TearDown() override {
    cuda::overrideTablesForTesting(nullptr, nullptr);
    cuda::overrideCudnnForTesting(nullptr);
  }

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

} // namespace cudamock
