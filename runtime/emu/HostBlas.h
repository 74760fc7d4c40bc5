//===- HostBlas.h - GEMM on the host for the emu backend --------*- C++ -*-===//
//
// The emu backend runs the package's GEMM steps on a CBLAS found at run time
// (OpenBLAS, else the system BLAS), so that the runtime library itself depends on
// no BLAS. Without one it falls back to a plain loop (correct, slower).
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>

namespace dlc::rt::emu {

/// Row-major C = alpha * op(A) * op(B) + beta * C (C is not read when beta == 0).
void hostGemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k, float alpha,
              const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
              int64_t ldc);
void hostGemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k, double alpha,
              const double *a, int64_t lda, const double *b, int64_t ldb, double beta, double *c,
              int64_t ldc);

/// "libopenblas.so.0", "libblas.so.3" or "built-in loop".
const char *hostBlasName();

} // namespace dlc::rt::emu
