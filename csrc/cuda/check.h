// Every CUDA, cuBLAS, cuDNN and NCCL call goes through one of these: a failure throws
// std::runtime_error naming the call, the library's own message, and the source line.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include "common/errors.h"

namespace gdl::cuda {

inline void check_cuda(cudaError_t e, const char* what, const char* file, int line) {
  if (e != cudaSuccess) GDL_FAIL(what, ": ", cudaGetErrorName(e), ": ", cudaGetErrorString(e), " (", file, ":", line, ")");
}
inline void check_cublas(cublasStatus_t s, const char* what, const char* file, int line) {
  if (s != CUBLAS_STATUS_SUCCESS) GDL_FAIL(what, ": ", cublasGetStatusName(s), ": ", cublasGetStatusString(s), " (", file, ":", line, ")");
}

inline void check_nccl(ncclResult_t r, const char* what, const char* file, int line) {
  if (r != ncclSuccess) GDL_FAIL(what, ": ", ncclGetErrorString(r), " (", file, ":", line, ")");
}

}  // namespace gdl::cuda

#define CUDA_CHECK(call) ::gdl::cuda::check_cuda((call), #call, __FILE__, __LINE__)
#define CUBLAS_CHECK(call) ::gdl::cuda::check_cublas((call), #call, __FILE__, __LINE__)

#include <cudnn.h>

namespace gdl::cuda {
inline void check_cudnn_status(cudnnStatus_t s, const char* what, const char* file, int line) {
  if (s != CUDNN_STATUS_SUCCESS) GDL_FAIL(what, ": ", cudnnGetErrorString(s), " (", file, ":", line, ")");
}
}  // namespace gdl::cuda

#define CUDNN_CHECK(call) ::gdl::cuda::check_cudnn_status((call), #call, __FILE__, __LINE__)
#define NCCL_CHECK(call) ::gdl::cuda::check_nccl((call), #call, __FILE__, __LINE__)
