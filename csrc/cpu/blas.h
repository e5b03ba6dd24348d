// CPU dense linear algebra through OpenBLAS (scipy-openblas32), row-major throughout.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace gdl::cpu {

void set_blas_threads(int n);
int blas_threads();
std::string blas_config();    // build configuration string, e.g. "OpenBLAS 0.3.30 DYNAMIC_ARCH ..."
std::string blas_corename();  // kernel family in use, e.g. "Haswell", "SkylakeX"

// C[m x n] = alpha * op(A) * op(B) + beta * C, row-major with leading dimensions lda, ldb, ldc.
void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
          const float* b, int ldb, float beta, float* c, int ldc);
void gemm(bool trans_a, bool trans_b, int m, int n, int k, double alpha, const double* a, int lda,
          const double* b, int ldb, double beta, double* c, int ldc);

// Deterministic test data (common/fill.h), written in parallel-friendly chunks.
template <class T>
void fill(T* data, std::size_t count, uint64_t seed);

}  // namespace gdl::cpu
