//===- Cudnn.cpp - cuDNN's graph API for the vendor tactics (via dlopen) ---===//
//
// A pkg::CudnnConv step becomes a cuDNN operation graph of one convolution forward
// (with its bias and ReLU where the step has them): channels-last tensors described
// as cuDNN wants them (dimensions in N, C, spatial order, strides of the NHWC layout),
// FP32 compute, cross-correlation as ONNX defines Conv. A pkg::CudnnSdpa step becomes
// the pattern of cuDNN's fused flash attention (two matmuls, the scale, an optional
// causal mask, the softmax with its statistics). The heuristic (mode A) lists engine
// configurations; the first whose execution plan finalizes and fits the step's
// workspace is kept. Every call's
// status is checked and turned into a Status that names the node and the call:
// a failing cuDNN call never ends the process or leaves an error pending on the
// CUDA context for other sessions.
//===----------------------------------------------------------------------===//
#include "Driver.h"

#include <dlfcn.h>
#include <limits>

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

/// Builds one operation graph: every call's status checked, every descriptor owned by
/// the plan (destroyed in reverse when it dies).
class CudnnGraph {
public:
  CudnnGraph(const Cudnn &dnn, cudnnHandle_t handle, const std::string &node, const char *what)
      : dnn_(dnn), handle_(handle), plan_(new CudnnPlan(dnn, handle)) {
    plan_->node_ = node;
    plan_->what_ = what;
  }

  Status fail(const char *what, cudnnStatus_t st) const {
    return Status(StatusCode::Unavailable, "cuDNN cannot run " + plan_->what_ + " '" +
                                               plan_->node_ + "': " + what + " failed (" +
                                               dnn_.cudnnGetErrorString_(st) + ")");
  }
  cudnnStatus_t make(cudnnBackendDescriptorType_t type, cudnnBackendDescriptor_t &d) {
    cudnnStatus_t st = dnn_.cudnnBackendCreateDescriptor_(type, &d);
    if (st == CUDNN_STATUS_SUCCESS)
      plan_->owned_.push_back(d);
    return st;
  }
  cudnnStatus_t set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                    cudnnBackendAttributeType_t type, int64_t count, const void *v) {
    return dnn_.cudnnBackendSetAttribute_(d, name, type, count, v);
  }

#define DLC_DNN_TRY(call, what)                                                                    \
  if (cudnnStatus_t st_ = (call); st_ != CUDNN_STATUS_SUCCESS)                                     \
    return fail(what, st_);

  /// A tensor of `type` with these dimensions and strides; virtual ones live only in
  /// the graph, by-value ones are host scalars the plan passes at execution.
  Status tensor(int64_t uid, cudnnDataType_t type, const std::vector<int64_t> &dims,
                const std::vector<int64_t> &strides, cudnnBackendDescriptor_t &d,
                bool isVirtual = false, bool byValue = false) {
    const int64_t align = 16, n = static_cast<int64_t>(dims.size());
    const bool yes = true;
    DLC_DNN_TRY(make(CUDNN_BACKEND_TENSOR_DESCRIPTOR, d), "creating a tensor descriptor");
    DLC_DNN_TRY(set(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type),
                "setting a tensor's data type");
    DLC_DNN_TRY(set(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, n, dims.data()),
                "setting a tensor's dimensions");
    DLC_DNN_TRY(set(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, n, strides.data()),
                "setting a tensor's strides");
    DLC_DNN_TRY(set(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid),
                "setting a tensor's id");
    DLC_DNN_TRY(set(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align),
                "setting a tensor's alignment");
    if (isVirtual)
      DLC_DNN_TRY(set(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &yes),
                  "marking a tensor virtual");
    if (byValue)
      DLC_DNN_TRY(set(d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &yes),
                  "marking a tensor by value");
    DLC_DNN_TRY(dnn_.cudnnBackendFinalize_(d), "finalizing a tensor descriptor");
    return Status::ok();
  }

  /// A pointwise operation y = mode(x[, b[, t]]) computed in `prec` (FP32; a
  /// comparison's is BOOLEAN), `axis` for GEN_INDEX.
  Status pointwise(cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x,
                   cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t,
                   cudnnBackendDescriptor_t y, int64_t axis = -1,
                   cudnnDataType_t prec = CUDNN_DATA_FLOAT) {
    cudnnBackendDescriptor_t pw, op;
    DLC_DNN_TRY(make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, pw), "creating a pointwise descriptor");
    DLC_DNN_TRY(set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode),
                "setting a pointwise mode");
    DLC_DNN_TRY(set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec),
                "setting a pointwise precision");
    if (axis >= 0)
      DLC_DNN_TRY(set(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis),
                  "setting an index axis");
    DLC_DNN_TRY(dnn_.cudnnBackendFinalize_(pw), "finalizing a pointwise descriptor");
    DLC_DNN_TRY(make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, op),
                "creating a pointwise operation");
    DLC_DNN_TRY(set(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                    1, &pw),
                "setting a pointwise operation's mode");
    DLC_DNN_TRY(set(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x),
                "setting a pointwise operation's input");
    if (b)
      DLC_DNN_TRY(
          set(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b),
          "setting a pointwise operation's second input");
    if (t)
      DLC_DNN_TRY(
          set(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t),
          "setting a pointwise operation's condition");
    DLC_DNN_TRY(set(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y),
                "setting a pointwise operation's output");
    DLC_DNN_TRY(dnn_.cudnnBackendFinalize_(op), "finalizing a pointwise operation");
    ops_.push_back(op);
    return Status::ok();
  }

  /// c = a b over the last two dimensions, batched over the others, FP32 sums.
  Status matmul(cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
                cudnnBackendDescriptor_t c) {
    const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t mm, op;
    DLC_DNN_TRY(make(CUDNN_BACKEND_MATMUL_DESCRIPTOR, mm), "creating a matmul descriptor");
    DLC_DNN_TRY(set(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute),
                "setting a matmul's compute type");
    DLC_DNN_TRY(dnn_.cudnnBackendFinalize_(mm), "finalizing a matmul descriptor");
    DLC_DNN_TRY(make(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, op), "creating a matmul");
    DLC_DNN_TRY(set(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a),
                "setting a matmul's A");
    DLC_DNN_TRY(set(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b),
                "setting a matmul's B");
    DLC_DNN_TRY(set(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c),
                "setting a matmul's C");
    DLC_DNN_TRY(set(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm),
                "setting a matmul's descriptor");
    DLC_DNN_TRY(dnn_.cudnnBackendFinalize_(op), "finalizing a matmul");
    ops_.push_back(op);
    return Status::ok();
  }

  /// y = reduce(x) over the dimensions where y has extent 1, in FP32.
  Status reduction(cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x,
                   cudnnBackendDescriptor_t y) {
    const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t rd, op;
    DLC_DNN_TRY(make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, rd), "creating a reduction descriptor");
    DLC_DNN_TRY(
        set(rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode),
        "setting a reduction's operator");
    DLC_DNN_TRY(set(rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute),
                "setting a reduction's compute type");
    DLC_DNN_TRY(dnn_.cudnnBackendFinalize_(rd), "finalizing a reduction descriptor");
    DLC_DNN_TRY(make(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, op), "creating a reduction");
    DLC_DNN_TRY(set(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x),
                "setting a reduction's input");
    DLC_DNN_TRY(set(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y),
                "setting a reduction's output");
    DLC_DNN_TRY(set(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &rd),
                "setting a reduction's descriptor");
    DLC_DNN_TRY(dnn_.cudnnBackendFinalize_(op), "finalizing a reduction");
    ops_.push_back(op);
    return Status::ok();
  }

  void add(cudnnBackendDescriptor_t op) {
    ops_.push_back(op);
  }
  void byValue(int64_t uid, float v) {
    plan_->byValue_.emplace_back(uid, v);
  }

  /// The operation graph of the operations added so far, the heuristic (mode A), and the
  /// first of its engines whose plan finalizes within `workspaceBytes`.
  Result<std::unique_ptr<CudnnPlan>> finish(uint64_t workspaceBytes) {
    cudnnBackendDescriptor_t graph, heur;
    DLC_DNN_TRY(make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, graph), "creating the graph");
    DLC_DNN_TRY(set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                    static_cast<int64_t>(ops_.size()), ops_.data()),
                "setting the graph's operations");
    DLC_DNN_TRY(set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle_),
                "setting the graph's handle");
    DLC_DNN_TRY(dnn_.cudnnBackendFinalize_(graph), "finalizing the graph");
    const cudnnBackendHeurMode_t heurMode = CUDNN_HEUR_MODE_A;
    DLC_DNN_TRY(make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, heur), "creating the heuristic");
    DLC_DNN_TRY(
        set(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph),
        "setting the heuristic's graph");
    DLC_DNN_TRY(set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &heurMode),
                "setting the heuristic's mode");
    DLC_DNN_TRY(dnn_.cudnnBackendFinalize_(heur), "finalizing the heuristic");
    int64_t count = 0;
    DLC_DNN_TRY(dnn_.cudnnBackendGetAttribute_(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                               CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr),
                "counting the heuristic's engines");
    // The first few engines the heuristic ranks highest: one of them is the tactic.
    constexpr int64_t kEngines = 8;
    count = std::min(count, kEngines);
    std::vector<cudnnBackendDescriptor_t> cfgs(static_cast<size_t>(count));
    for (auto &cfg : cfgs)
      DLC_DNN_TRY(make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, cfg),
                  "creating an engine configuration");
    int64_t got = 0;
    if (count)
      DLC_DNN_TRY(dnn_.cudnnBackendGetAttribute_(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got,
                                                 cfgs.data()),
                  "reading the heuristic's engines");
    for (int64_t i = 0; i < std::min(got, count); ++i) {
      cudnnBackendDescriptor_t plan;
      DLC_DNN_TRY(make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, plan), "creating a plan");
      int64_t ws = 0, n = 0;
      if (set(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
              &cfgs[static_cast<size_t>(i)]) != CUDNN_STATUS_SUCCESS ||
          set(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle_) !=
              CUDNN_STATUS_SUCCESS ||
          dnn_.cudnnBackendFinalize_(plan) != CUDNN_STATUS_SUCCESS ||
          dnn_.cudnnBackendGetAttribute_(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                         CUDNN_TYPE_INT64, 1, &n, &ws) != CUDNN_STATUS_SUCCESS ||
          ws < 0 || static_cast<uint64_t>(ws) > workspaceBytes)
        continue; // this engine does not run it here, or needs more workspace
      plan_->plan_ = plan;
      plan_->workspace_ = ws;
      return std::move(plan_);
    }
    return Status(StatusCode::Unavailable, "cuDNN has no engine for " + plan_->what_ + " '" +
                                               plan_->node_ + "' within its workspace of " +
                                               std::to_string(workspaceBytes) + " bytes (" +
                                               std::to_string(got) + " offered)");
  }
#undef DLC_DNN_TRY

private:
  const Cudnn &dnn_;
  cudnnHandle_t handle_;
  std::unique_ptr<CudnnPlan> plan_;
  std::vector<cudnnBackendDescriptor_t> ops_;
};

namespace {

/// Unique ids of the convolution's tensors in the graph and the variant pack (the
/// virtual ones, FP32 between the fused operations, only in the graph).
enum : int64_t { kX = 1, kW = 2, kY = 3, kBias = 4, kConvOut = 5, kBiasOut = 6 };

/// The attention's: Q, K (as K', [b, h, d, sk]), V and O, the by-value scale and -inf,
/// then the virtual scores, mask, softmax statistics and probabilities.
enum : int64_t {
  kQ = 1,
  kK = 2,
  kV = 3,
  kO = 4,
  kScale = 5,
  kNegInf = 6,
  kS = 100,
  kScaled,
  kRow,
  kCol,
  kKeep,
  kMasked,
  kMax,
  kSub,
  kExp,
  kSum,
  kLog,
  kStats,
  kP
};

cudnnDataType_t dnnType(pkg::DType t) {
  return t == pkg::DType::BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
}

} // namespace

Result<std::unique_ptr<CudnnPlan>> CudnnPlan::conv(const Cudnn &dnn, cudnnHandle_t handle,
                                                   const pkg::CudnnConv &c,
                                                   const std::string &node) {
  CudnnGraph g(dnn, handle, node, "convolution");
  const cudnnDataType_t dt = dnnType(c.dtype()), compute = CUDNN_DATA_FLOAT;
  const int64_t nd = c.kernel()->size();
  // A channels-last tensor [n, spatial..., ch] in cuDNN's order [n, ch, spatial...]
  // (`spatial` null: extents of 1, a per-channel bias); virtual ones are FP32.
  auto tensor = [&](int64_t uid, int64_t n, int64_t ch, const flatbuffers::Vector<int64_t> *spatial,
                    cudnnBackendDescriptor_t &d, bool isVirtual = false) -> Status {
    std::vector<int64_t> dims = {n, ch}, strides(nd + 2);
    for (int64_t i = 0; i < nd; ++i)
      dims.push_back(spatial ? spatial->Get(static_cast<uint32_t>(i)) : 1);
    int64_t stride = ch; // channels fastest, then the spatial dimensions from the last
    strides[1] = 1;
    for (int64_t i = nd + 1; i >= 2; --i) {
      strides[i] = stride;
      stride *= dims[i];
    }
    strides[0] = stride;
    return g.tensor(uid, isVirtual ? CUDNN_DATA_FLOAT : dt, dims, strides, d, isVirtual);
  };
  // conv -> [+ bias] -> [ReLU] -> y: the convolution's and the bias's results are
  // virtual where an operation follows them.
  const bool addBias = c.bias() != nullptr, relu = c.relu();
  cudnnBackendDescriptor_t x, w, y, bias = nullptr, convOut, biasOut = nullptr, conv, op;
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
#define DLC_DNN_TRY(call, what)                                                                    \
  if (cudnnStatus_t st_ = (call); st_ != CUDNN_STATUS_SUCCESS)                                     \
    return g.fail(what, st_);
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  DLC_DNN_TRY(g.make(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, conv), "creating the convolution");
  DLC_DNN_TRY(g.set(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute),
              "setting the compute type");
  DLC_DNN_TRY(g.set(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode),
              "setting the convolution mode");
  DLC_DNN_TRY(g.set(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &nd),
              "setting the spatial dimensions");
  DLC_DNN_TRY(
      g.set(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, nd, c.dilation()->data()),
      "setting the dilations");
  DLC_DNN_TRY(
      g.set(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, nd, c.stride()->data()),
      "setting the strides");
  DLC_DNN_TRY(
      g.set(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, nd, c.pad_begin()->data()),
      "setting the paddings");
  DLC_DNN_TRY(
      g.set(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, nd, c.pad_end()->data()),
      "setting the paddings");
  DLC_DNN_TRY(dnn.cudnnBackendFinalize_(conv), "finalizing the convolution");
  const float alpha = 1, beta = 0;
  DLC_DNN_TRY(g.make(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, op),
              "creating the operation");
  DLC_DNN_TRY(
      g.set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x),
      "setting the operation's input");
  DLC_DNN_TRY(
      g.set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w),
      "setting the operation's filter");
  DLC_DNN_TRY(g.set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                    1, &convOut),
              "setting the operation's output");
  DLC_DNN_TRY(g.set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
                    CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv),
              "setting the operation's convolution");
  DLC_DNN_TRY(
      g.set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha),
      "setting alpha");
  DLC_DNN_TRY(g.set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta),
              "setting beta");
  DLC_DNN_TRY(dnn.cudnnBackendFinalize_(op), "finalizing the operation");
#undef DLC_DNN_TRY
  g.add(op);
  if (addBias)
    DLC_RETURN_IF_ERROR(g.pointwise(CUDNN_POINTWISE_ADD, convOut, bias, nullptr, biasOut));
  if (relu)
    DLC_RETURN_IF_ERROR(
        g.pointwise(CUDNN_POINTWISE_RELU_FWD, addBias ? biasOut : convOut, nullptr, nullptr, y));
  return g.finish(c.workspace_bytes());
}

Result<std::unique_ptr<CudnnPlan>> CudnnPlan::sdpa(const Cudnn &dnn, cudnnHandle_t handle,
                                                   const pkg::CudnnSdpa &a,
                                                   const std::string &node) {
  // The pattern of cuDNN's fused flash attention (inference: the statistics virtual):
  // S = Q K', S * scale, [causal: row >= col kept, else -inf], softmax as max, sub,
  // exp, sum, log + max (the statistics), exp / sum in Q's type (the second matmul takes
  // its A operand in the I/O type), then O = P V.
  const size_t version = dnn.cudnnGetVersion_();
  if (version >= 91000 && version < 91002) // (FP16/BF16 attention forward: known bugs)
    return Status(StatusCode::Unavailable,
                  "cuDNN 9.10.0 and 9.10.1 are not used for attention (known bugs); update cuDNN");
  CudnnGraph g(dnn, handle, node, "attention");
  const cudnnDataType_t dt = dnnType(a.dtype()), f32 = CUDNN_DATA_FLOAT;
  const int64_t b = a.b(), h = a.h(), sq = a.sq(), sk = a.sk(), d = a.d(), dv = a.dv();
  auto st4 = [](const flatbuffers::Vector<int64_t> *v) {
    return std::vector<int64_t>{v->Get(0), v->Get(1), v->Get(2), v->Get(3)};
  };
  std::vector<int64_t> kt = st4(a.k_strides());
  std::swap(kt[2], kt[3]); // K' [b, h, d, sk]: K's strides, the last two swapped
  const std::vector<int64_t> scores = {b, h, sq, sk}, scoreStrides = {h * sq * sk, sq * sk, sk, 1},
                             row = {b, h, sq, 1}, rowStrides = {h * sq, sq, 1, 1},
                             one = {1, 1, 1, 1};
  cudnnBackendDescriptor_t q, k, v, o, scale, negInf = nullptr, s, scaled, rowIdx, colIdx, keep,
                                              masked, mx, sub, ex, sum, lg, stats, p;
  DLC_RETURN_IF_ERROR(g.tensor(kQ, dt, {b, h, sq, d}, st4(a.q_strides()), q));
  DLC_RETURN_IF_ERROR(g.tensor(kK, dt, {b, h, d, sk}, kt, k));
  DLC_RETURN_IF_ERROR(g.tensor(kV, dt, {b, h, sk, dv}, st4(a.v_strides()), v));
  DLC_RETURN_IF_ERROR(g.tensor(kO, dt, {b, h, sq, dv}, st4(a.o_strides()), o));
  DLC_RETURN_IF_ERROR(g.tensor(kScale, f32, one, one, scale, false, true));
  g.byValue(kScale, a.scale());
  DLC_RETURN_IF_ERROR(g.tensor(kS, f32, scores, scoreStrides, s, true));
  DLC_RETURN_IF_ERROR(g.matmul(q, k, s));
  DLC_RETURN_IF_ERROR(g.tensor(kScaled, f32, scores, scoreStrides, scaled, true));
  DLC_RETURN_IF_ERROR(g.pointwise(CUDNN_POINTWISE_MUL, s, scale, nullptr, scaled));
  cudnnBackendDescriptor_t logits = scaled;
  if (a.causal()) {
    DLC_RETURN_IF_ERROR(g.tensor(kNegInf, f32, one, one, negInf, false, true));
    // (Before 9.10, the masked value is the lowest finite float, as cuDNN's own front
    // end passes it.)
    g.byValue(kNegInf, version < 91000 ? std::numeric_limits<float>::lowest()
                                       : -std::numeric_limits<float>::infinity());
    DLC_RETURN_IF_ERROR(g.tensor(kRow, CUDNN_DATA_INT32, scores, scoreStrides, rowIdx, true));
    DLC_RETURN_IF_ERROR(
        g.pointwise(CUDNN_POINTWISE_GEN_INDEX, scaled, nullptr, nullptr, rowIdx, 2));
    DLC_RETURN_IF_ERROR(g.tensor(kCol, CUDNN_DATA_INT32, scores, scoreStrides, colIdx, true));
    DLC_RETURN_IF_ERROR(
        g.pointwise(CUDNN_POINTWISE_GEN_INDEX, scaled, nullptr, nullptr, colIdx, 3));
    DLC_RETURN_IF_ERROR(g.tensor(kKeep, CUDNN_DATA_BOOLEAN, scores, scoreStrides, keep, true));
    DLC_RETURN_IF_ERROR(
        g.pointwise(CUDNN_POINTWISE_CMP_GE, rowIdx, colIdx, nullptr, keep, -1, CUDNN_DATA_BOOLEAN));
    DLC_RETURN_IF_ERROR(g.tensor(kMasked, f32, scores, scoreStrides, masked, true));
    DLC_RETURN_IF_ERROR(g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, scaled, negInf, keep, masked));
    logits = masked;
  }
  DLC_RETURN_IF_ERROR(g.tensor(kMax, f32, row, rowStrides, mx, true));
  DLC_RETURN_IF_ERROR(g.reduction(CUDNN_REDUCE_TENSOR_MAX, logits, mx));
  DLC_RETURN_IF_ERROR(g.tensor(kSub, f32, scores, scoreStrides, sub, true));
  DLC_RETURN_IF_ERROR(g.pointwise(CUDNN_POINTWISE_SUB, logits, mx, nullptr, sub));
  DLC_RETURN_IF_ERROR(g.tensor(kExp, f32, scores, scoreStrides, ex, true));
  DLC_RETURN_IF_ERROR(g.pointwise(CUDNN_POINTWISE_EXP, sub, nullptr, nullptr, ex));
  DLC_RETURN_IF_ERROR(g.tensor(kSum, f32, row, rowStrides, sum, true));
  DLC_RETURN_IF_ERROR(g.reduction(CUDNN_REDUCE_TENSOR_ADD, ex, sum));
  DLC_RETURN_IF_ERROR(g.tensor(kLog, f32, row, rowStrides, lg, true));
  DLC_RETURN_IF_ERROR(g.pointwise(CUDNN_POINTWISE_LOG, sum, nullptr, nullptr, lg));
  DLC_RETURN_IF_ERROR(g.tensor(kStats, f32, row, rowStrides, stats, true));
  DLC_RETURN_IF_ERROR(g.pointwise(CUDNN_POINTWISE_ADD, mx, lg, nullptr, stats));
  DLC_RETURN_IF_ERROR(g.tensor(kP, dt, scores, scoreStrides, p, true));
  DLC_RETURN_IF_ERROR(g.pointwise(CUDNN_POINTWISE_DIV, ex, sum, nullptr, p));
  DLC_RETURN_IF_ERROR(g.matmul(p, v, o));
  return g.finish(a.workspace_bytes());
}

CudnnPlan::~CudnnPlan() {
  for (auto it = owned_.rbegin(); it != owned_.rend(); ++it)
    dnn_.cudnnBackendDestroyDescriptor_(*it);
}

Status CudnnPlan::execute(const std::vector<std::pair<int64_t, uint64_t>> &tensors,
                          uint64_t workspace) const {
  std::vector<int64_t> uids;
  std::vector<void *> ptrs;
  for (const auto &[uid, address] : tensors) {
    uids.push_back(uid);
    ptrs.push_back(reinterpret_cast<void *>(address));
  }
  for (const auto &[uid, value] : byValue_) { // (host scalars: the plan's own storage)
    uids.push_back(uid);
    ptrs.push_back(const_cast<float *>(&value));
  }
  void *ws = workspace_ ? reinterpret_cast<void *>(workspace) : nullptr;
  const int64_t n = static_cast<int64_t>(uids.size());
  cudnnBackendDescriptor_t pack = nullptr;
  cudnnStatus_t st =
      dnn_.cudnnBackendCreateDescriptor_(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack);
  if (st == CUDNN_STATUS_SUCCESS)
    st = dnn_.cudnnBackendSetAttribute_(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
                                        n, uids.data());
  if (st == CUDNN_STATUS_SUCCESS)
    st = dnn_.cudnnBackendSetAttribute_(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                                        CUDNN_TYPE_VOID_PTR, n, ptrs.data());
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
    return Status(StatusCode::LaunchFailure, "cuDNN " + what_ + " '" + node_ + "' failed (" +
                                                 dnn_.cudnnGetErrorString_(st) + ")");
  return Status::ok();
}

const Cudnn *testDnn = nullptr;

void overrideCudnnForTesting(const Cudnn *dnn) {
  testDnn = dnn;
}

CudnnSession::~CudnnSession() {
  plans_.clear();
  if (handle_)
    dnn_->cudnnDestroy_(handle_);
}

Status CudnnSession::load() {
  if (handle_)
    return Status::ok();
  if (!status_.isOk())
    return status_;
  if (!dnn_ && testDnn) {
    dnn_ = testDnn;
  } else if (!dnn_) {
    static Cudnn shared; // one process-wide table (the library stays loaded)
    static Status loaded = shared.load();
    if (!loaded.isOk())
      return status_ = loaded;
    dnn_ = &shared;
  }
  if (cudnnStatus_t st = dnn_->cudnnCreate_(&handle_); st != CUDNN_STATUS_SUCCESS) {
    handle_ = nullptr;
    return status_ = Status(StatusCode::Unavailable,
                            std::string("cudnnCreate failed: ") + dnn_->cudnnGetErrorString_(st));
  }
  return Status::ok();
}

template <class Build>
Status CudnnSession::run(const void *step, CUstream stream, Build build,
                         const std::vector<std::pair<int64_t, uint64_t>> &tensors,
                         uint64_t workspace) {
  DLC_RETURN_IF_ERROR(load());
  if (cudnnStatus_t st = dnn_->cudnnSetStream_(handle_, reinterpret_cast<cudaStream_t>(stream));
      st != CUDNN_STATUS_SUCCESS)
    return Status(StatusCode::LaunchFailure,
                  std::string("cudnnSetStream failed: ") + dnn_->cudnnGetErrorString_(st));
  auto it = plans_.find(step);
  if (it == plans_.end()) {
    auto plan = build();
    if (!plan)
      return plan.takeStatus();
    it = plans_.emplace(step, std::move(*plan)).first;
  }
  return it->second->execute(tensors, workspace);
}

Status CudnnSession::conv(const pkg::CudnnConv &c, const std::string &node, CUstream stream,
                          const Address &at) {
  std::vector<std::pair<int64_t, uint64_t>> t = {
      {kX, at(*c.x())}, {kW, at(*c.w())}, {kY, at(*c.y())}};
  if (c.bias())
    t.emplace_back(kBias, at(*c.bias()));
  return run(
      &c, stream, [&] { return CudnnPlan::conv(*dnn_, handle_, c, node); }, t,
      c.workspace() ? at(*c.workspace()) : 0);
}

Status CudnnSession::sdpa(const pkg::CudnnSdpa &a, const std::string &node, CUstream stream,
                          const Address &at) {
  return run(
      &a, stream, [&] { return CudnnPlan::sdpa(*dnn_, handle_, a, node); },
      {{kQ, at(*a.q())}, {kK, at(*a.k())}, {kV, at(*a.v())}, {kO, at(*a.o())}},
      a.workspace() ? at(*a.workspace()) : 0);
}

} // namespace dlc::rt::cuda
