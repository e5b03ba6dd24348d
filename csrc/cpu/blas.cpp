#include "cpu/blas.h"

#include <cblas.h>

#include "common/fill.h"

namespace gdl::cpu {

void set_blas_threads(int n) { scipy_openblas_set_num_threads(n); }
int blas_threads() { return scipy_openblas_get_num_threads(); }
std::string blas_config() { return scipy_openblas_get_config(); }
std::string blas_corename() { return scipy_openblas_get_corename(); }

static CBLAS_TRANSPOSE tr(bool t) { return t ? CblasTrans : CblasNoTrans; }

void gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
          int ldb, float beta, float* c, int ldc) {
  scipy_cblas_sgemm(CblasRowMajor, tr(ta), tr(tb), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void gemm(bool ta, bool tb, int m, int n, int k, double alpha, const double* a, int lda, const double* b,
          int ldb, double beta, double* c, int ldc) {
  scipy_cblas_dgemm(CblasRowMajor, tr(ta), tr(tb), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

template <class T>
void fill(T* data, std::size_t count, uint64_t seed) {
  for (std::size_t i = 0; i < count; ++i) data[i] = static_cast<T>(fill_value(seed, i));
}
template void fill<float>(float*, std::size_t, uint64_t);
template void fill<double>(double*, std::size_t, uint64_t);

}  // namespace gdl::cpu
