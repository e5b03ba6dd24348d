// A batch of sequences [B][R][S] (features-major per sample, cpu/position_wise.cpp) as one matrix
// [R][B*S] and back. Packed, a per-position projection over the batch is one GEMM with N = B*S
// (torch's GEMM on (B*S, D)) instead of B GEMMs with N = S: the weight is packed and streamed once,
// and a weight gradient is one GEMM with K = B*S instead of B rank-S updates of the whole gradient.
#pragma once
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "cpu/blas.h"
#include "cpu/layer.h"

namespace gdl::cpu {

// out[r][b*s + j] = x[b][r][j]
inline void pack_seq(const float* x, int64_t batch, int64_t rows, int64_t s, float* out) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < batch; ++b)
      std::memcpy(out + (r * batch + b) * s, x + (b * rows + r) * s, std::size_t(s) * sizeof(float));
}

// y[b][r][j] = in[r][b*s + j] (+ bias[r] if bias), or += when add.
inline void unpack_seq(const float* in, int64_t batch, int64_t rows, int64_t s, const float* bias, bool add,
                       float* y) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float v = bias ? bias[r] : 0.f;
    for (int64_t b = 0; b < batch; ++b) {
      const float* src = in + (r * batch + b) * s;
      float* dst = y + (b * rows + r) * s;
      if (add) {
#pragma omp simd
        for (int64_t j = 0; j < s; ++j) dst[j] += src[j] + v;
      } else {
#pragma omp simd
        for (int64_t j = 0; j < s; ++j) dst[j] = src[j] + v;
      }
    }
  }
}

// gemm (cpu/blas.h) with C's rows split over the compute threads (OpenMP), single-threaded BLAS in
// each. The layers' other loops (packing, attention's heads) run on the OpenMP threads too; with
// the GEMMs on OpenBLAS's own thread pool, each pool's workers kept spinning after their work
// (OpenBLAS's for OPENBLAS_THREAD_TIMEOUT) and took the cores from the other's: on 2 shared cores
// a pass took 2-5 x its single-threaded time. One pool for the whole layer avoids it.
inline void gemm_rows(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
                      int ldb, float beta, float* c, int ldc) {
  const int threads = std::max(1, std::min(compute_threads(), m / 64));  // a few rows: one thread
  const int saved = blas_threads();
  set_blas_threads(1);
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    const int t = omp_get_thread_num(), m0 = int(int64_t(m) * t / threads), m1 = int(int64_t(m) * (t + 1) / threads);
    gemm(ta, tb, m1 - m0, n, k, alpha, ta ? a + m0 : a + int64_t(m0) * lda, lda, b, ldb, beta, c + int64_t(m0) * ldc,
         ldc);
  }
  set_blas_threads(saved);
}

}  // namespace gdl::cpu
