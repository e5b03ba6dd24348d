#include "cuda/check.h"
#include "cuda/cuda_timer.h"
#include "cuda/gemm.h"

namespace gdl::cuda {

cublasHandle_t cublas_handle() {
  static cublasHandle_t h = [] {
    const cudaStream_t stream = default_stream();  // first: it marks the device as in use
    cublasHandle_t handle;
    CUBLAS_CHECK(cublasCreate(&handle));
    CUBLAS_CHECK(cublasSetStream(handle, stream));
    return handle;
  }();
  return h;
}

namespace {
struct GemmTypes {
  cudaDataType_t data;
  cublasComputeType_t compute;
};
GemmTypes gemm_types(DType t) {
  switch (t) {
    case DType::f32: return {CUDA_R_32F, CUBLAS_COMPUTE_32F};
    case DType::tf32: return {CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32};
    case DType::f16: return {CUDA_R_16F, CUBLAS_COMPUTE_32F};
    case DType::bf16: return {CUDA_R_16BF, CUBLAS_COMPUTE_32F};
    case DType::f64: return {CUDA_R_64F, CUBLAS_COMPUTE_64F};
  }
  return {CUDA_R_32F, CUBLAS_COMPUTE_32F};
}
}  // namespace

void gemm(DType t, bool trans_a, bool trans_b, int m, int n, int k, const void* a, const void* b, void* c) {
  // Row-major C = A B is column-major C^T = B^T A^T: swap the operands, keep the shapes.
  const GemmTypes ty = gemm_types(t);
  const int lda = trans_a ? m : k, ldb = trans_b ? k : n;
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const float one_f = 1.f, zero_f = 0.f;
  const double one_d = 1.0, zero_d = 0.0;
  const bool f64 = t == DType::f64;
  CUBLAS_CHECK(cublasGemmEx(cublas_handle(), op_b, op_a, n, m, k, f64 ? (const void*)&one_d : &one_f, b,
                            ty.data, ldb, a, ty.data, lda, f64 ? (const void*)&zero_d : &zero_f, c, ty.data,
                            n, ty.compute, CUBLAS_GEMM_DEFAULT));
}

std::vector<double> gemm_time(const TimingPlan& plan, DType t, bool trans_a, bool trans_b, int m, int n,
                              int k, const void* a, const void* b, void* c) {
  GDL_REQUIRE(m > 0 && n > 0 && k > 0, "gemm: m, n and k must be positive");
  return time_events(plan, default_stream(), [&] { gemm(t, trans_a, trans_b, m, n, k, a, b, c); });
}

}  // namespace gdl::cuda
