//===- LtGemm.cpp - A GEMM step's cuBLASLt plan ------------------------------===//
//
// Row-major C = op(A) op(B) as column-major C' = op(B)' op(A)': the descriptor, the
// layouts (strided batches) and the algorithm of the step's rank among the heuristic's,
// with the bias/activation epilogue where an algorithm applies it.
//===----------------------------------------------------------------------===//
#include "Driver.h"

namespace dlc::rt::cuda {

namespace {

/// The largest power of two (at most 256) that divides an address: cuBLASLt's
/// MIN_ALIGNMENT preferences.
uint32_t alignmentOf(uint64_t address) {
  uint32_t a = 256;
  while (a > 1 && address % a)
    a /= 2;
  return a;
}

} // namespace

GemmPlan::~GemmPlan() {
  if (!lt)
    return;
  if (la)
    lt->cublasLtMatrixLayoutDestroy_(la);
  if (lb)
    lt->cublasLtMatrixLayoutDestroy_(lb);
  if (lc)
    lt->cublasLtMatrixLayoutDestroy_(lc);
  if (desc)
    lt->cublasLtMatmulDescDestroy_(desc);
}

namespace {

/// Bias (one value per column of our row-major D = per row of Lt's column-major
/// D) and activation, applied by cuBLASLt before the store.
bool setEpilogue(const CublasLt &lt, const pkg::Gemm &g, GemmPlan &p,
                 const std::function<uint64_t(const pkg::BufRef &)> &at) {
  bool relu = g.activation() == pkg::GemmActivation::Relu,
       gelu = g.activation() == pkg::GemmActivation::GeluTanh;
  cublasLtEpilogue_t epi = g.bias() ? (relu   ? CUBLASLT_EPILOGUE_RELU_BIAS
                                       : gelu ? CUBLASLT_EPILOGUE_GELU_BIAS
                                              : CUBLASLT_EPILOGUE_BIAS)
                                    : (relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_GELU);
  if (lt.cublasLtMatmulDescSetAttribute_(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)))
    return false;
  if (!g.bias())
    return true;
  void *biasPtr = reinterpret_cast<void *>(at(*g.bias()));
  int64_t biasStride = 0; // the same bias for every batch
  return !lt.cublasLtMatmulDescSetAttribute_(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &biasPtr,
                                             sizeof(biasPtr)) &&
         !lt.cublasLtMatmulDescSetAttribute_(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &p.dtype,
                                             sizeof(p.dtype)) &&
         !lt.cublasLtMatmulDescSetAttribute_(p.desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE,
                                             &biasStride, sizeof(biasStride));
}

} // namespace

/// The descriptor, layouts and algorithm of a GEMM step: with the epilogue if any
/// algorithm applies it, else without (the session then runs the step's
/// fallback kernel). Alignment preferences come from the actual addresses.
Status buildGemmPlan(const CublasLt &lt, cublasLtHandle_t handle, const pkg::Gemm &g,
                     const std::string &node,
                     const std::function<uint64_t(const pkg::BufRef &)> &at, bool timing,
                     GemmPlan &p, std::string &note) {
  p.lt = &lt;
  cublasComputeType_t ct = CUBLAS_COMPUTE_32F;
  cudaDataType_t scaleType = CUDA_R_32F;
  switch (g.dtype()) {
  case pkg::DType::F32:
    p.dtype = CUDA_R_32F;
    if (g.tf32())
      ct = CUBLAS_COMPUTE_32F_FAST_TF32;
    break;
  case pkg::DType::F16:
    p.dtype = CUDA_R_16F;
    break;
  case pkg::DType::BF16:
    p.dtype = CUDA_R_16BF;
    break;
  case pkg::DType::F64:
    p.dtype = CUDA_R_64F;
    ct = CUBLAS_COMPUTE_64F;
    scaleType = CUDA_R_64F;
    break;
  default:
    return Status(StatusCode::InvalidPackage,
                  "GEMM of node '" + node + "' has an unsupported dtype");
  }
  auto fail = [&](const char *what) {
    return Status(StatusCode::LaunchFailure,
                  std::string("cuBLASLt ") + what + " failed for node '" + node + "'");
  };
  uint64_t m = g.m(), n = g.n(), k = g.k();
  if (lt.cublasLtMatrixLayoutCreate_(&p.la, p.dtype, g.trans_b() ? k : n, g.trans_b() ? n : k,
                                     g.ldb()) ||
      lt.cublasLtMatrixLayoutCreate_(&p.lb, p.dtype, g.trans_a() ? m : k, g.trans_a() ? k : m,
                                     g.lda()) ||
      lt.cublasLtMatrixLayoutCreate_(&p.lc, p.dtype, n, m, g.ldc()))
    return fail("layout creation");
  if (g.batch() > 1) {
    int32_t batch = static_cast<int32_t>(g.batch());
    int64_t sa = g.stride_b(), sb = g.stride_a(), sc = g.stride_c();
    for (auto [layout, stride] : {std::pair{p.la, sa}, std::pair{p.lb, sb}, std::pair{p.lc, sc}}) {
      lt.cublasLtMatrixLayoutSetAttribute_(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
                                           sizeof(batch));
      lt.cublasLtMatrixLayoutSetAttribute_(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                           &stride, sizeof(stride));
    }
  }
  cublasLtMatmulPreference_t pref = nullptr;
  if (lt.cublasLtMatmulPreferenceCreate_(&pref) != CUBLAS_STATUS_SUCCESS)
    return fail("preference creation");
  uint64_t ws = g.workspace() ? g.workspace_bytes() : 0;
  lt.cublasLtMatmulPreferenceSetAttribute_(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                           sizeof(ws));
  uint32_t alignA = alignmentOf(at(*g.b())), alignB = alignmentOf(at(*g.a()));
  uint32_t alignC =
      std::min(alignmentOf(at(*g.c())), alignmentOf(at(g.c_in() ? *g.c_in() : *g.c())));
  lt.cublasLtMatmulPreferenceSetAttribute_(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                           &alignA, sizeof(alignA));
  lt.cublasLtMatmulPreferenceSetAttribute_(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                           &alignB, sizeof(alignB));
  lt.cublasLtMatmulPreferenceSetAttribute_(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                           &alignC, sizeof(alignC));
  lt.cublasLtMatmulPreferenceSetAttribute_(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                           &alignC, sizeof(alignC));
  bool wantEpilogue = g.bias() || g.activation() != pkg::GemmActivation::None;
  Status st = fail("algorithm selection");
  for (bool epilogue : {true, false}) {
    if (!epilogue && !wantEpilogue)
      break;
    if (p.desc)
      lt.cublasLtMatmulDescDestroy_(p.desc);
    p.desc = nullptr;
    if (lt.cublasLtMatmulDescCreate_(&p.desc, ct, scaleType) != CUBLAS_STATUS_SUCCESS) {
      st = fail("descriptor creation");
      break;
    }
    cublasOperation_t opA = g.trans_b() ? CUBLAS_OP_T : CUBLAS_OP_N; // Lt's A is our B
    cublasOperation_t opB = g.trans_a() ? CUBLAS_OP_T : CUBLAS_OP_N;
    lt.cublasLtMatmulDescSetAttribute_(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opA, sizeof(opA));
    lt.cublasLtMatmulDescSetAttribute_(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opB, sizeof(opB));
    if (epilogue && wantEpilogue && !setEpilogue(lt, g, p, at)) {
      st = fail("epilogue setup");
      continue;
    }
    // The algorithm of the step's rank among the heuristic's (a tactic: 0 otherwise).
    const int rank = g.algo_rank();
    std::vector<cublasLtMatmulHeuristicResult_t> heur(static_cast<size_t>(rank) + 1);
    int found = 0;
    if (lt.cublasLtMatmulAlgoGetHeuristic_(handle, p.desc, p.la, p.lb, p.lc, p.lc, pref, rank + 1,
                                           heur.data(), &found) == CUBLAS_STATUS_SUCCESS &&
        found > rank) {
      p.algo = heur[static_cast<size_t>(rank)].algo;
      p.epilogue = epilogue && wantEpilogue;
      st = Status::ok();
      break;
    }
    // Fewer algorithms than the rank: a candidate that does not exist while tactics
    // are timed; at run time (the plan rebuilt for pointers bound since, whose
    // alignment may leave fewer), the last one offered.
    if (rank > 0 && found > 0 && !timing) {
      p.algo = heur[static_cast<size_t>(found - 1)].algo;
      p.epilogue = epilogue && wantEpilogue;
      note = "cuBLASLt offers " + std::to_string(found) + " algorithm" + (found == 1 ? "" : "s") +
             " for node '" + node + "' as its operands are bound now; " +
             "it runs the last of them instead of the timed #" + std::to_string(rank + 1);
      st = Status::ok();
      break;
    }
    if (rank > 0)
      st = Status(StatusCode::Unavailable, "cuBLASLt offers " + std::to_string(found) +
                                               " algorithm" + (found == 1 ? "" : "s") +
                                               " for node '" + node + "', not " +
                                               std::to_string(rank + 1));
  }
  lt.cublasLtMatmulPreferenceDestroy_(pref);
  return st;
}

} // namespace dlc::rt::cuda
