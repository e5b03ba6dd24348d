#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <new>

#include "common/fill.h"
#include "cuda/check.h"
#include "cuda/device.h"

namespace gdl::cuda {

DType parse_dtype(const std::string& name) {
  if (name == "float32") return DType::f32;
  if (name == "tf32") return DType::tf32;
  if (name == "float16") return DType::f16;
  if (name == "bfloat16") return DType::bf16;
  if (name == "float64") return DType::f64;
  GDL_REQUIRE(false, "unknown dtype '", name, "' (float32, tf32, float16, bfloat16, float64)");
  return DType::f32;
}

std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::f16:
    case DType::bf16: return 2;
    case DType::f64: return 8;
    default: return 4;
  }
}

int device_count(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why) *why = concat(cudaGetErrorName(e), ": ", cudaGetErrorString(e));
    cudaGetLastError();  // clear the sticky-free error so later queries start clean
    return 0;
  }
  if (n == 0 && why) *why = "the CUDA runtime sees no device";
  return n;
}

namespace {
std::atomic<bool> work_began{false};  // a stream, handle or buffer exists on the current device

void begin_work() { work_began.store(true); }
}  // namespace

void select_device(int index) {
  if (work_began.load() && index == current_device()) return;
  GDL_REQUIRE(!work_began.load(), "CUDA device ", index, " chosen after work began on device ", current_device(),
              ": choose the device first");
  CUDA_CHECK(cudaSetDevice(index));
}

int current_device() {
  int d = 0;
  CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

cudaStream_t default_stream() {
  static cudaStream_t s = [] {
    begin_work();
    cudaStream_t st;
    CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    return st;
  }();
  return s;
}

void copy_now(void* dst, const void* src, std::size_t nbytes) {
  CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, default_stream()));
  CUDA_CHECK(cudaStreamSynchronize(default_stream()));
}

void zero_now(void* dst, std::size_t nbytes) {
  CUDA_CHECK(cudaMemsetAsync(dst, 0, nbytes, default_stream()));
  CUDA_CHECK(cudaStreamSynchronize(default_stream()));
}

void wait_for_stream(uintptr_t producer) {
  GDL_REQUIRE(producer != 0, "wait_for_stream: stream 0 is ambiguous (__cuda_array_interface__ forbids it)");
  const cudaStream_t from = producer == 1   ? cudaStreamLegacy
                            : producer == 2 ? cudaStreamPerThread
                                            : reinterpret_cast<cudaStream_t>(producer);
  cudaEvent_t e;
  CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  struct Destroy {
    cudaEvent_t e;
    ~Destroy() { cudaEventDestroy(e); }
  } destroy{e};
  CUDA_CHECK(cudaEventRecord(e, from));
  CUDA_CHECK(cudaStreamWaitEvent(default_stream(), e, 0));
}

DeviceBuffer::DeviceBuffer(std::size_t nbytes) : nbytes_(nbytes) {
  begin_work();
  const cudaError_t e = cudaMalloc(&ptr_, nbytes ? nbytes : 1);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    throw std::bad_alloc();  // Python: MemoryError, the CLI's "cannot allocate" (exit 2)
  }
  CUDA_CHECK(e);
}

DeviceBuffer::~DeviceBuffer() { cudaFree(ptr_); }

template <class T>
__device__ T convert(float v);
template <> __device__ float convert<float>(float v) { return v; }
template <> __device__ double convert<double>(float v) { return v; }
template <> __device__ __half convert<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __nv_bfloat16 convert<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

template <class T>
__global__ void fill_kernel(T* out, std::size_t n, uint64_t seed) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    out[i] = convert<T>(fill_value(seed, i));
}

template <class T>
static void launch_fill(void* p, std::size_t n, uint64_t seed) {
  const int threads = 256;
  const int blocks = static_cast<int>(std::min<std::size_t>((n + threads - 1) / threads, 65535));
  fill_kernel<T><<<blocks > 0 ? blocks : 1, threads, 0, default_stream()>>>(static_cast<T*>(p), n, seed);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaStreamSynchronize(default_stream()));
}

void fill(void* ptr, std::size_t count, DType t, uint64_t seed) {
  switch (t) {
    case DType::f32:
    case DType::tf32: return launch_fill<float>(ptr, count, seed);
    case DType::f64: return launch_fill<double>(ptr, count, seed);
    case DType::f16: return launch_fill<__half>(ptr, count, seed);
    case DType::bf16: return launch_fill<__nv_bfloat16>(ptr, count, seed);
  }
}

}  // namespace gdl::cuda
