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
// Makes `index` this process's device. It must come before any CUDA work (stream, library
// handles, buffers): those belong to the device that was current when they were made, so a later
// change is refused. gdlbench.common.env picks the index (env.device_rule: a GPU of its own per rank of the node, matched by PCI bus id).
void select_device(int index);
int current_device();
// One non-blocking stream per process, used by every op. Non-blocking: it does not wait for the
// legacy default stream, so nothing here uses that stream (no cudaMemcpy/cudaMemset; the helpers
// below), and arrays from other libraries are waited for (wait_for_stream).
cudaStream_t default_stream();
// Copies (any direction) or zeroes on default_stream(), then waits for it.
void copy_now(void* dst, const void* src, std::size_t nbytes);
void zero_now(void* dst, std::size_t nbytes);
// Makes default_stream() wait for the work queued so far on a producer's stream, given as the
// __cuda_array_interface__ "stream" value: 1 the legacy default stream, 2 the per-thread default
// stream, any other value a cudaStream_t (0, "no stream given", is the caller's to skip).
void wait_for_stream(uintptr_t producer);

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
