//===- Driver.h - The CUDA driver and cuBLASLt entry points the backend uses ===//
//
// Tables of function pointers, each declared with the prototype from the real
// headers and filled by dlopen/dlsym. Tests fill them with fakes instead
// (tests/unit/runtime/CudaMockTest.cpp) to check the backend's behaviour without a
// GPU: context handling, the driver-version check, synchronous copies, cached GEMM
// plans and their fallback, CUDA graph capture.
//===----------------------------------------------------------------------===//
#pragma once

#include "../Backend.h"
#include "dlc/runtime/Calibrate.h"

#include <cublasLt.h>
#include <cuda.h>
#include <cudnn_graph.h>

namespace dlc::rt::cuda {

// clang-format off
#define DLC_CU_LIST(X) \
  X(cuInit) \
  X(cuDriverGetVersion) \
  X(cuDeviceGetCount) \
  X(cuDeviceGet) \
  X(cuDeviceGetName) \
  X(cuDeviceGetAttribute) \
  X(cuDevicePrimaryCtxRetain) \
  X(cuDevicePrimaryCtxRelease) \
  X(cuCtxPushCurrent) \
  X(cuCtxPopCurrent) \
  X(cuCtxSynchronize) \
  X(cuStreamCreate) \
  X(cuStreamDestroy) \
  X(cuStreamSynchronize) \
  X(cuModuleLoadData) \
  X(cuModuleUnload) \
  X(cuModuleGetFunction) \
  X(cuFuncSetAttribute) \
  X(cuMemAlloc) \
  X(cuMemFree) \
  X(cuMemcpyHtoD) \
  X(cuMemcpyHtoDAsync) \
  X(cuMemcpyDtoHAsync) \
  X(cuMemcpyDtoDAsync) \
  X(cuMemsetD8Async) \
  X(cuGetErrorName) \
  X(cuGetErrorString) \
  X(cuLaunchKernelEx) \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor) \
  X(cuStreamBeginCapture) \
  X(cuStreamEndCapture) \
  X(cuGraphInstantiateWithFlags) \
  X(cuGraphLaunch) \
  X(cuGraphDestroy) \
  X(cuGraphExecDestroy) \
  X(cuEventCreate) \
  X(cuEventRecord) \
  X(cuEventSynchronize) \
  X(cuEventElapsedTime) \
  X(cuEventDestroy) \
  X(cuStreamWaitEvent) \
  X(cuStreamQuery)
// clang-format on

/// Driver API entry points; `fn_` has the prototype of `fn` in cuda.h.
struct Driver {
  void *lib = nullptr;
#define DLC_CU(fn) decltype(&fn) fn##_ = nullptr;
  DLC_CU_LIST(DLC_CU)
#undef DLC_CU
  /// dlopens libcuda.so.1 and resolves every entry point.
  Status load();
  /// "CUDA_ERROR_X: message".
  std::string error(CUresult r) const;
};

// clang-format off
#define DLC_LT_LIST(X) \
  X(cublasLtCreate) \
  X(cublasLtDestroy) \
  X(cublasLtMatmulDescCreate) \
  X(cublasLtMatmulDescDestroy) \
  X(cublasLtMatmulDescSetAttribute) \
  X(cublasLtMatrixLayoutCreate) \
  X(cublasLtMatrixLayoutDestroy) \
  X(cublasLtMatrixLayoutSetAttribute) \
  X(cublasLtMatmulPreferenceCreate) \
  X(cublasLtMatmulPreferenceDestroy) \
  X(cublasLtMatmulPreferenceSetAttribute) \
  X(cublasLtMatmulAlgoGetHeuristic) \
  X(cublasLtMatmul) \
  X(cublasLtGetVersion)
// clang-format on

struct CublasLt {
  void *lib = nullptr;
#define DLC_LT(fn) decltype(&fn) fn##_ = nullptr;
  DLC_LT_LIST(DLC_LT)
#undef DLC_LT
  Status load();
};

// clang-format off
#define DLC_DNN_LIST(X) \
  X(cudnnGetVersion) \
  X(cudnnGetErrorString) \
  X(cudnnCreate) \
  X(cudnnDestroy) \
  X(cudnnSetStream) \
  X(cudnnBackendCreateDescriptor) \
  X(cudnnBackendDestroyDescriptor) \
  X(cudnnBackendSetAttribute) \
  X(cudnnBackendGetAttribute) \
  X(cudnnBackendFinalize) \
  X(cudnnBackendExecute)
// clang-format on

/// cuDNN's graph (backend) API: the vendor tactics (pkg::CudnnConv).
struct Cudnn {
  void *lib = nullptr;
#define DLC_DNN(fn) decltype(&fn) fn##_ = nullptr;
  DLC_DNN_LIST(DLC_DNN)
#undef DLC_DNN
  /// dlopens libcudnn.so.9 (Unavailable, with why, when it is missing or older than 9).
  Status load();
};

/// A cuDNN operation graph built for one step (a convolution with its fused bias and
/// ReLU, or a scaled-dot-product attention): its descriptors and the execution plan of
/// the first engine the heuristic offers that finalizes within the step's workspace.
/// Built once per step and session.
class CudnnPlan {
public:
  /// `handle`: the session's cuDNN handle; `node` names the layer in errors.
  static Result<std::unique_ptr<CudnnPlan>> conv(const Cudnn &dnn, cudnnHandle_t handle,
                                                 const pkg::CudnnConv &c, const std::string &node);
  static Result<std::unique_ptr<CudnnPlan>> sdpa(const Cudnn &dnn, cudnnHandle_t handle,
                                                 const pkg::CudnnSdpa &a, const std::string &node);
  ~CudnnPlan();
  CudnnPlan(const CudnnPlan &) = delete;
  CudnnPlan &operator=(const CudnnPlan &) = delete;
  /// Runs it on the handle's stream: `tensors` are the graph's device tensors by id
  /// (its by-value scalars are the plan's own).
  Status execute(const std::vector<std::pair<int64_t, uint64_t>> &tensors,
                 uint64_t workspace) const;
  int64_t workspaceBytes() const { return workspace_; }

private:
  friend class CudnnGraph;
  CudnnPlan(const Cudnn &d, cudnnHandle_t h) : dnn_(d), handle_(h) {}
  const Cudnn &dnn_;
  cudnnHandle_t handle_;
  std::vector<cudnnBackendDescriptor_t> owned_; // destroyed in reverse
  cudnnBackendDescriptor_t plan_ = nullptr;
  int64_t workspace_ = 0;
  std::string node_, what_;
  /// By-value scalars (the attention's scale, -inf): ids and host values.
  std::vector<std::pair<int64_t, float>> byValue_;
};

/// A session's cuDNN: the library (loaded on first need: the test table, else the
/// process-wide dlopened one), the session's handle, and each step's plan, built on
/// the step's first run. Its owner makes the CUDA context current around every call,
/// destruction included.
class CudnnSession {
public:
  CudnnSession() = default;
  CudnnSession(const CudnnSession &) = delete;
  CudnnSession &operator=(const CudnnSession &) = delete;
  ~CudnnSession();
  /// Unavailable with the reason (remembered) when cuDNN cannot be loaded or started.
  Status load();
  /// cuDNN's version (after a successful load).
  size_t version() const { return dnn_->cudnnGetVersion_(); }
  /// Runs a step on `stream`; `at` gives a BufRef's device address.
  using Address = std::function<uint64_t(const pkg::BufRef &)>;
  Status conv(const pkg::CudnnConv &c, const std::string &node, CUstream stream, const Address &at);
  Status sdpa(const pkg::CudnnSdpa &a, const std::string &node, CUstream stream, const Address &at);

private:
  template <class Build>
  Status run(const void *step, CUstream stream, Build build,
             const std::vector<std::pair<int64_t, uint64_t>> &tensors, uint64_t workspace);
  const Cudnn *dnn_ = nullptr;
  cudnnHandle_t handle_ = nullptr;
  Status status_;
  std::map<const void *, std::unique_ptr<CudnnPlan>> plans_;
};

/// A GEMM step's cuBLASLt objects and chosen algorithm, built on its first run.
struct GemmPlan {
  const CublasLt *lt = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool epilogue = false; // the algorithm applies bias/activation
  cudaDataType_t dtype = CUDA_R_32F;
  GemmPlan() = default;
  GemmPlan(const GemmPlan &) = delete;
  GemmPlan &operator=(const GemmPlan &) = delete;
  ~GemmPlan();
};

/// The plan of GEMM step `g`: with its epilogue if an algorithm applies it, else
/// without (the session then runs the step's fallback kernel); alignment preferences
/// from the actual addresses (`at`). The algorithm of the step's rank: while
/// `timing`, a rank the heuristic does not offer fails; otherwise the last offered
/// runs, and `note` says so.
Status buildGemmPlan(const CublasLt &lt, cublasLtHandle_t handle, const pkg::Gemm &g,
                     const std::string &node,
                     const std::function<uint64_t(const pkg::BufRef &)> &at, bool timing,
                     GemmPlan &p, std::string &note);

/// Tests: sessions use these tables instead of the dlopened libraries (null: back
/// to the real ones). Not thread-safe against sessions being created meanwhile.
void overrideTablesForTesting(const Driver *drv, const CublasLt *lt);
/// Tests: the cuDNN table sessions use (null: the dlopened library).
void overrideCudnnForTesting(const Cudnn *dnn);

/// The cuda backend over the given tables (null `lt`: cuBLASLt is loaded when a
/// package has GEMMs). The tables must outlive the backend.
Result<std::unique_ptr<Backend>> createBackend(const Driver &drv, const CublasLt *lt,
                                               const SessionOptions &opts);

/// `dlc calibrate` over the given table (rt::calibrate loads the real one).
Result<Calibration> calibrateWith(const Driver &drv, int device, const std::vector<uint8_t> &cubin,
                                  const std::function<void(const std::string &)> &progress);

} // namespace dlc::rt::cuda
