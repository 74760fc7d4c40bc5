//===- Cudnn.cpp - cuDNN's graph API for the vendor tactics (via dlopen) ---===//
//
// A pkg::CudnnConv step becomes a cuDNN operation graph of one convolution forward:
// channels-last tensors described as cuDNN wants them (dimensions in N, C, spatial
// order, strides of the NHWC layout), FP32 compute, cross-correlation as ONNX
// defines Conv. The heuristic (mode A) lists engine configurations; the first whose
// execution plan finalizes and fits the step's workspace is kept. Every call's
// status is checked and turned into a Status that names the node and the call:
// a failing cuDNN call never ends the process or leaves an error pending on the
// CUDA context for other sessions.
//===----------------------------------------------------------------------===//
#include "Driver.h"

#include <dlfcn.h>

namespace dlc::rt::cuda {

Status Cudnn::load() {
  for (const char *name : {"libcudnn.so.9", "libcudnn.so"})
    if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)))
      break;
  if (!lib)
    return Status(StatusCode::Unavailable,
                  "libcudnn.so.9 could not be loaded (install cuDNN 9 or add its directory to "
                  "LD_LIBRARY_PATH)");
#define DLC_DNN_LOAD(fn)                                                                           \
  fn##_ = reinterpret_cast<decltype(fn##_)>(dlsym(lib, #fn));                                      \
  if (!fn##_)                                                                                      \
    return Status(StatusCode::Unavailable, std::string("libcudnn lacks ") + #fn);
  DLC_DNN_LIST(DLC_DNN_LOAD)
#undef DLC_DNN_LOAD
  if (size_t v = cudnnGetVersion_(); v < 90000)
    return Status(StatusCode::Unavailable,
                  "cuDNN " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) +
                      " is older than 9.0, which the graph API tactics need");
  return Status::ok();
}

namespace {

/// Unique ids of the convolution's tensors in the graph and the variant pack (the
/// virtual ones, FP32 between the fused operations, only in the graph).
enum : int64_t { kX = 1, kW = 2, kY = 3, kBias = 4, kConvOut = 5, kBiasOut = 6 };

} // namespace

Result<std::unique_ptr<CudnnConvPlan>> CudnnConvPlan::build(const Cudnn &dnn, cudnnHandle_t handle,
                                                            const pkg::CudnnConv &c,
                                                            const std::string &node) {
  std::unique_ptr<CudnnConvPlan> p(new CudnnConvPlan(dnn, handle));
  p->node_ = node;
  auto fail = [&](const char *what, cudnnStatus_t st) {
    return Status(StatusCode::Unavailable, "cuDNN cannot run convolution '" + node + "': " + what +
                                               " failed (" + dnn.cudnnGetErrorString_(st) + ")");
  };
  auto make = [&](cudnnBackendDescriptorType_t type, cudnnBackendDescriptor_t &d) -> cudnnStatus_t {
    cudnnStatus_t st = dnn.cudnnBackendCreateDescriptor_(type, &d);
    if (st == CUDNN_STATUS_SUCCESS)
      p->owned_.push_back(d);
    return st;
  };
  auto set = [&](cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                 cudnnBackendAttributeType_t type, int64_t count,
                 const void *v) { return dnn.cudnnBackendSetAttribute_(d, name, type, count, v); };
#define DLC_DNN_TRY(call, what)                                                                    \
  if (cudnnStatus_t st_ = (call); st_ != CUDNN_STATUS_SUCCESS)                                     \
    return fail(what, st_);

  const cudnnDataType_t dt = c.dtype() == pkg::DType::BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  const int64_t nd = c.kernel()->size();
  // A channels-last tensor [n, spatial..., ch] in cuDNN's order [n, ch, spatial...]
  // (`spatial` null: extents of 1, a per-channel bias); virtual ones are FP32.
  auto tensor = [&](int64_t uid, int64_t n, int64_t ch, const flatbuffers::Vector<int64_t> *spatial,
                    cudnnBackendDescriptor_t &d, bool isVirtual = false) -> Status {
    std::vector<int64_t> dims = {n, ch}, strides(nd + 2);
    for (int64_t i = 0; i < nd; ++i)
      dims.push_back(spatial ? spatial->Get(static_cast<uint32_t>(i)) : 1);
    const cudnnDataType_t type = isVirtual ? CUDNN_DATA_FLOAT : dt;
    int64_t stride = ch; // channels fastest, then the spatial dimensions from the last
    strides[1] = 1;
    for (int64_t i = nd + 1; i >= 2; --i) {
      strides[i] = stride;
      stride *= dims[i];
    }
    strides[0] = stride;
    const int64_t align = 16;
    DLC_DNN_TRY(make(CUDNN_BACKEND_TENSOR_DESCRIPTOR, d), "creating a tensor descriptor");
    DLC_DNN_TRY(set(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type),
                "setting a tensor's data type");
    DLC_DNN_TRY(set(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, nd + 2, dims.data()),
                "setting a tensor's dimensions");
    DLC_DNN_TRY(set(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, nd + 2, strides.data()),
                "setting a tensor's strides");
    DLC_DNN_TRY(set(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid),
                "setting a tensor's id");
    DLC_DNN_TRY(set(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align),
                "setting a tensor's alignment");
    if (isVirtual) {
      const bool yes = true;
      DLC_DNN_TRY(set(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &yes),
                  "marking a tensor virtual");
    }
    DLC_DNN_TRY(dnn.cudnnBackendFinalize_(d), "finalizing a tensor descriptor");
    return Status::ok();
  };
  // conv -> [+ bias] -> [ReLU] -> y: the convolution's and the bias's results are
  // virtual where an operation follows them.
  const bool addBias = c.bias() != nullptr, relu = c.relu();
  cudnnBackendDescriptor_t x, w, y, bias = nullptr, convOut, biasOut = nullptr, conv, op, graph,
                                    heur;
  DLC_RETURN_IF_ERROR(tensor(kX, c.n(), c.c(), c.spatial_in(), x));
  DLC_RETURN_IF_ERROR(tensor(kW, c.k(), c.c() / c.groups(), c.kernel(), w));
  DLC_RETURN_IF_ERROR(tensor(kY, c.n(), c.k(), c.spatial_out(), y));
  if (addBias)
    DLC_RETURN_IF_ERROR(tensor(kBias, 1, c.k(), nullptr, bias));
  if (addBias || relu)
    DLC_RETURN_IF_ERROR(tensor(kConvOut, c.n(), c.k(), c.spatial_out(), convOut, true));
  else
    convOut = y;
  if (addBias && relu)
    DLC_RETURN_IF_ERROR(tensor(kBiasOut, c.n(), c.k(), c.spatial_out(), biasOut, true));
  else if (addBias)
    biasOut = y;

  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  DLC_DNN_TRY(make(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, conv), "creating the convolution");
  DLC_DNN_TRY(set(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute),
              "setting the compute type");
  DLC_DNN_TRY(set(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode),
              "setting the convolution mode");
  DLC_DNN_TRY(set(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &nd),
              "setting the spatial dimensions");
  DLC_DNN_TRY(
      set(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, nd, c.dilation()->data()),
      "setting the dilations");
  DLC_DNN_TRY(
      set(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, nd, c.stride()->data()),
      "setting the strides");
  DLC_DNN_TRY(
      set(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, nd, c.pad_begin()->data()),
      "setting the paddings");
  DLC_DNN_TRY(
      set(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, nd, c.pad_end()->data()),
      "setting the paddings");
  DLC_DNN_TRY(dnn.cudnnBackendFinalize_(conv), "finalizing the convolution");

  const float alpha = 1, beta = 0;
  DLC_DNN_TRY(make(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, op),
              "creating the operation");
  DLC_DNN_TRY(
      set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x),
      "setting the operation's input");
  DLC_DNN_TRY(
      set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w),
      "setting the operation's filter");
  DLC_DNN_TRY(set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                  &convOut),
              "setting the operation's output");
  DLC_DNN_TRY(set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
                  CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv),
              "setting the operation's convolution");
  DLC_DNN_TRY(set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha),
              "setting alpha");
  DLC_DNN_TRY(set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta),
              "setting beta");
  DLC_DNN_TRY(dnn.cudnnBackendFinalize_(op), "finalizing the operation");
  std::vector<cudnnBackendDescriptor_t> ops = {op};
  // A pointwise operation of the fusion: out = mode(in[, b]), in FP32.
  auto pointwise = [&](cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t in,
                       cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t out) -> Status {
    cudnnBackendDescriptor_t pw, pop;
    DLC_DNN_TRY(make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, pw), "creating a pointwise descriptor");
    DLC_DNN_TRY(set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode),
                "setting a pointwise mode");
    DLC_DNN_TRY(set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &compute),
                "setting a pointwise precision");
    DLC_DNN_TRY(dnn.cudnnBackendFinalize_(pw), "finalizing a pointwise descriptor");
    DLC_DNN_TRY(make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, pop),
                "creating a pointwise operation");
    DLC_DNN_TRY(set(pop, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR,
                    CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw),
                "setting a pointwise operation's mode");
    DLC_DNN_TRY(
        set(pop, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &in),
        "setting a pointwise operation's input");
    if (b)
      DLC_DNN_TRY(
          set(pop, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b),
          "setting a pointwise operation's second input");
    DLC_DNN_TRY(
        set(pop, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &out),
        "setting a pointwise operation's output");
    DLC_DNN_TRY(dnn.cudnnBackendFinalize_(pop), "finalizing a pointwise operation");
    ops.push_back(pop);
    return Status::ok();
  };
  if (addBias)
    DLC_RETURN_IF_ERROR(pointwise(CUDNN_POINTWISE_ADD, convOut, bias, biasOut));
  if (relu)
    DLC_RETURN_IF_ERROR(
        pointwise(CUDNN_POINTWISE_RELU_FWD, addBias ? biasOut : convOut, nullptr, y));

  DLC_DNN_TRY(make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, graph), "creating the graph");
  DLC_DNN_TRY(set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                  static_cast<int64_t>(ops.size()), ops.data()),
              "setting the graph's operations");
  DLC_DNN_TRY(set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle),
              "setting the graph's handle");
  DLC_DNN_TRY(dnn.cudnnBackendFinalize_(graph), "finalizing the graph");

  const cudnnBackendHeurMode_t heurMode = CUDNN_HEUR_MODE_A;
  DLC_DNN_TRY(make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, heur), "creating the heuristic");
  DLC_DNN_TRY(
      set(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph),
      "setting the heuristic's graph");
  DLC_DNN_TRY(set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &heurMode),
              "setting the heuristic's mode");
  DLC_DNN_TRY(dnn.cudnnBackendFinalize_(heur), "finalizing the heuristic");
  int64_t count = 0;
  DLC_DNN_TRY(dnn.cudnnBackendGetAttribute_(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                            CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr),
              "counting the heuristic's engines");
  // The first few engines the heuristic ranks highest: one of them is the tactic.
  constexpr int64_t kEngines = 8;
  count = std::min(count, kEngines);
  std::vector<cudnnBackendDescriptor_t> cfgs(static_cast<size_t>(count));
  for (auto &cfg : cfgs)
    DLC_DNN_TRY(make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, cfg), "creating an engine configuration");
  int64_t got = 0;
  if (count)
    DLC_DNN_TRY(dnn.cudnnBackendGetAttribute_(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                              CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got,
                                              cfgs.data()),
                "reading the heuristic's engines");
  for (int64_t i = 0; i < std::min(got, count); ++i) {
    cudnnBackendDescriptor_t plan;
    DLC_DNN_TRY(make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, plan), "creating a plan");
    int64_t ws = 0, n = 0;
    if (set(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
            &cfgs[static_cast<size_t>(i)]) != CUDNN_STATUS_SUCCESS ||
        set(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle) !=
            CUDNN_STATUS_SUCCESS ||
        dnn.cudnnBackendFinalize_(plan) != CUDNN_STATUS_SUCCESS ||
        dnn.cudnnBackendGetAttribute_(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                      CUDNN_TYPE_INT64, 1, &n, &ws) != CUDNN_STATUS_SUCCESS ||
        ws < 0 || static_cast<uint64_t>(ws) > c.workspace_bytes())
      continue; // this engine does not run it here, or needs more workspace
    p->plan_ = plan;
    p->workspace_ = ws;
    return p;
  }
#undef DLC_DNN_TRY
  return Status(StatusCode::Unavailable, "cuDNN has no engine for convolution '" + node +
                                             "' within its workspace of " +
                                             std::to_string(c.workspace_bytes()) + " bytes (" +
                                             std::to_string(got) + " offered)");
}

CudnnConvPlan::~CudnnConvPlan() {
  for (auto it = owned_.rbegin(); it != owned_.rend(); ++it)
    dnn_.cudnnBackendDestroyDescriptor_(*it);
}

Status CudnnConvPlan::execute(uint64_t x, uint64_t w, uint64_t y, uint64_t bias,
                              uint64_t workspace) const {
  const int64_t uids[] = {kX, kW, kY, kBias};
  void *ptrs[] = {reinterpret_cast<void *>(x), reinterpret_cast<void *>(w),
                  reinterpret_cast<void *>(y), reinterpret_cast<void *>(bias)};
  const int64_t tensors = bias ? 4 : 3;
  void *ws = workspace_ ? reinterpret_cast<void *>(workspace) : nullptr;
  cudnnBackendDescriptor_t pack = nullptr;
  cudnnStatus_t st =
      dnn_.cudnnBackendCreateDescriptor_(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack);
  if (st == CUDNN_STATUS_SUCCESS)
    st = dnn_.cudnnBackendSetAttribute_(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
                                        tensors, uids);
  if (st == CUDNN_STATUS_SUCCESS)
    st = dnn_.cudnnBackendSetAttribute_(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                                        CUDNN_TYPE_VOID_PTR, tensors, ptrs);
  if (st == CUDNN_STATUS_SUCCESS)
    st = dnn_.cudnnBackendSetAttribute_(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE,
                                        CUDNN_TYPE_VOID_PTR, 1, &ws);
  if (st == CUDNN_STATUS_SUCCESS)
    st = dnn_.cudnnBackendFinalize_(pack);
  if (st == CUDNN_STATUS_SUCCESS)
    st = dnn_.cudnnBackendExecute_(handle_, plan_, pack);
  if (pack)
    dnn_.cudnnBackendDestroyDescriptor_(pack);
  if (st != CUDNN_STATUS_SUCCESS)
    return Status(StatusCode::LaunchFailure, "cuDNN convolution '" + node_ + "' failed (" +
                                                 dnn_.cudnnGetErrorString_(st) + ")");
  return Status::ok();
}

} // namespace dlc::rt::cuda
