//===- HostBlas.cpp - CBLAS loaded at run time, with a loop fallback --------===//
#include "HostBlas.h"

#include <cstdlib>
#include <dlfcn.h>
#include <vector>

namespace dlc::rt::emu {
namespace {

// The CBLAS enumerators are fixed by the CBLAS standard.
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;
using SgemmFn = void (*)(int, int, int, int, int, int, float, const float *, int, const float *,
                         int, float, float *, int);
using DgemmFn = void (*)(int, int, int, int, int, int, double, const double *, int, const double *,
                         int, double, double *, int);

struct Blas {
  SgemmFn sgemm = nullptr;
  DgemmFn dgemm = nullptr;
  const char *name = "built-in loop";

  Blas() {
    if (std::getenv("DLC_EMU_NO_BLAS"))
      return;
    for (const char *lib : {"libopenblas.so.0", "libblas.so.3", "libcblas.so.3"}) {
      void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
      if (!h)
        continue;
      auto s = reinterpret_cast<SgemmFn>(dlsym(h, "cblas_sgemm"));
      auto d = reinterpret_cast<DgemmFn>(dlsym(h, "cblas_dgemm"));
      if (s && d) {
        sgemm = s;
        dgemm = d;
        name = lib;
        return;
      }
      dlclose(h);
    }
  }
};

const Blas &blas() {
  static const Blas b;
  return b;
}

/// The fallback: one output row at a time, accumulated in T.
template <typename T>
void loopGemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T *a, int64_t lda,
              const T *b, int64_t ldb, T beta, T *c, int64_t ldc) {
  std::vector<T> acc(static_cast<size_t>(n));
  for (int64_t i = 0; i < m; ++i) {
    std::fill(acc.begin(), acc.end(), T(0));
    for (int64_t p = 0; p < k; ++p) {
      T av = ta ? a[p * lda + i] : a[i * lda + p];
      if (tb)
        for (int64_t j = 0; j < n; ++j)
          acc[j] += av * b[j * ldb + p];
      else
        for (int64_t j = 0; j < n; ++j)
          acc[j] += av * b[p * ldb + j];
    }
    T *row = c + i * ldc;
    for (int64_t j = 0; j < n; ++j)
      row[j] = beta == T(0) ? alpha * acc[j] : alpha * acc[j] + beta * row[j];
  }
}

} // namespace

namespace {
template <class T, class Fn>
void gemmWith(Fn blasFn, bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T *a,
              int64_t lda, const T *b, int64_t ldb, T beta, T *c, int64_t ldc) {
  if (blasFn)
    return blasFn(kRowMajor, ta ? kTrans : kNoTrans, tb ? kTrans : kNoTrans, int(m), int(n), int(k),
                  alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
  loopGemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
} // namespace

void hostGemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
              int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
  gemmWith(blas().sgemm, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void hostGemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double *a,
              int64_t lda, const double *b, int64_t ldb, double beta, double *c, int64_t ldc) {
  gemmWith(blas().dgemm, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

const char *hostBlasName() {
  return blas().name;
}

} // namespace dlc::rt::emu
