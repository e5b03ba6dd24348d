// cuBLAS GEMM on row-major device buffers: C[m x n] = op(A) * op(B).
#pragma once
#include <cublas_v2.h>

#include <vector>

#include "common/timer.h"
#include "cuda/device.h"

namespace gdl::cuda {

cublasHandle_t cublas_handle();  // one per process, bound to default_stream()

void gemm(DType t, bool trans_a, bool trans_b, int m, int n, int k, const void* a, const void* b, void* c);

std::vector<double> gemm_time(const TimingPlan& plan, DType t, bool trans_a, bool trans_b, int m, int n,
                              int k, const void* a, const void* b, void* c);

}  // namespace gdl::cuda
