// Devices, device memory and test data on the GPU.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace gdl::cuda {

enum class DType { f32, tf32, f16, bf16, f64 };  // tf32: fp32 storage, TF32 tensor-core math
DType parse_dtype(const std::string& name);
std::size_t dtype_size(DType t);

// Number of usable devices; on 0, `why` says what the runtime reported (no driver, no device).
int device_count(std::string* why);
cudaStream_t default_stream();  // one non-blocking stream per process, used by every timed op

// Owning device allocation (cudaMalloc; never managed memory).
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t nbytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* data() const { return ptr_; }
  std::size_t nbytes() const { return nbytes_; }

 private:
  void* ptr_ = nullptr;
  std::size_t nbytes_ = 0;
};

// Writes common/fill.h's values, converted to `t`, into `count` elements at `ptr`.
void fill(void* ptr, std::size_t count, DType t, uint64_t seed);

}  // namespace gdl::cuda
