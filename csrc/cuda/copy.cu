#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

#include "common/errors.h"
#include "common/fill.h"
#include "common/timer.h"
#include "cuda/check.h"
#include "cuda/copy.h"
#include "cuda/device.h"

namespace gdl::cuda {
namespace {

// Holds the stream until the host sets *flag (or about a second passes, so a mistake cannot hang).
__global__ void hold_stream(volatile int* flag, long long max_cycles) {
  const long long t0 = clock64();
  while (*flag == 0 && clock64() - t0 < max_cycles) {
  }
}

struct HostMem {
  HostMem(std::size_t n, bool pinned) : pinned(pinned) {
    if (pinned) {
      const cudaError_t e = cudaHostAlloc(&p, n ? n : 1, cudaHostAllocPortable);
      if (e == cudaErrorMemoryAllocation) {
        cudaGetLastError();
        throw std::bad_alloc();
      }
      CUDA_CHECK(e);
    } else {
      p = std::aligned_alloc(4096, ((n ? n : 1) + 4095) & ~std::size_t(4095));
      if (!p) throw std::bad_alloc();
    }
  }
  ~HostMem() {
    if (pinned)
      cudaFreeHost(p);
    else
      std::free(p);
  }
  HostMem(const HostMem&) = delete;
  HostMem& operator=(const HostMem&) = delete;
  char* data() const { return static_cast<char*>(p); }
  void* p = nullptr;
  bool pinned;
};

void pattern(char* p, std::size_t n, uint64_t seed) {
  for (std::size_t i = 0; i < n / 8; ++i) {
    const uint64_t v = splitmix64(seed + i);
    std::memcpy(p + 8 * i, &v, 8);
  }
  for (std::size_t i = n / 8 * 8; i < n; ++i) p[i] = char(seed + i);
}

std::size_t count_wrong(const char* a, const char* b, std::size_t n) {
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < n; ++i) wrong += a[i] != b[i];
  return wrong;
}

}  // namespace

CopyRun copy_bench(const std::string& direction, bool pinned, std::size_t nbytes, int copies, int warmup, int iters) {
  GDL_REQUIRE(direction == "h2d" || direction == "d2h" || direction == "d2d", "copy: direction must be h2d, d2h or d2d");
  GDL_REQUIRE(nbytes >= 1 && copies >= 1, "copy: need a positive size and copies >= 1");
  validate(TimingPlan{warmup, iters});
  const cudaStream_t stream = default_stream();
  const bool d2d = direction == "d2d";

  // The host pattern is the reference; sources are written with it before timing.
  HostMem ref(nbytes, false);
  pattern(ref.data(), nbytes, 42);
  std::unique_ptr<HostMem> host;
  if (!d2d) {
    host = std::make_unique<HostMem>(nbytes, pinned);
    std::memset(host->data(), 0, nbytes);  // touch every page before timing
  }
  DeviceBuffer dev(nbytes);
  std::unique_ptr<DeviceBuffer> dev2;
  if (d2d) dev2 = std::make_unique<DeviceBuffer>(nbytes);

  void *src = nullptr, *dst = nullptr;
  cudaMemcpyKind kind;
  if (direction == "h2d") {
    std::memcpy(host->data(), ref.data(), nbytes);
    CUDA_CHECK(cudaMemsetAsync(dev.data(), 0, nbytes, stream));
    src = host->data(), dst = dev.data(), kind = cudaMemcpyHostToDevice;
  } else if (direction == "d2h") {
    copy_now(dev.data(), ref.data(), nbytes);
    src = dev.data(), dst = host->data(), kind = cudaMemcpyDeviceToHost;
  } else {
    copy_now(dev.data(), ref.data(), nbytes);
    CUDA_CHECK(cudaMemsetAsync(dev2->data(), 0, nbytes, stream));
    src = dev.data(), dst = dev2->data(), kind = cudaMemcpyDeviceToDevice;
  }
  CUDA_CHECK(cudaStreamSynchronize(stream));

  const bool hold = pinned || d2d;  // pageable copies block the host: a held stream would stall them
  // Owns the mapped flag and the events from the moment each exists: a failing call below
  // (cudaHostGetDevicePointer, say) must not leak the pinned allocation.
  struct Cleanup {
    int* flag = nullptr;
    cudaEvent_t a = nullptr, b = nullptr;
    ~Cleanup() {
      if (flag) cudaFreeHost(flag);
      if (a) cudaEventDestroy(a);
      if (b) cudaEventDestroy(b);
    }
  } cleanup;
  int* dflag = nullptr;
  if (hold) {
    CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&cleanup.flag), sizeof(int), cudaHostAllocMapped));
    CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dflag), cleanup.flag, 0));
  }
  int* const flag = cleanup.flag;
  CUDA_CHECK(cudaEventCreate(&cleanup.a));
  CUDA_CHECK(cudaEventCreate(&cleanup.b));
  const long long max_cycles = 1LL << 32;  // about 2 s at 2 GHz: far longer than queuing takes

  CopyRun run;
  for (int s = 0; s < warmup + iters; ++s) {
    if (s == warmup) {  // clear the destination so the check sees the timed copies' data
      if (kind == cudaMemcpyDeviceToHost)
        std::memset(dst, 0, nbytes);
      else
        CUDA_CHECK(cudaMemsetAsync(dst, 0, nbytes, stream));
      CUDA_CHECK(cudaStreamSynchronize(stream));
    }
    if (hold) {
      *reinterpret_cast<volatile int*>(flag) = 0;
      std::atomic_thread_fence(std::memory_order_seq_cst);
      hold_stream<<<1, 1, 0, stream>>>(dflag, max_cycles);
      CUDA_CHECK(cudaGetLastError());
    }
    CUDA_CHECK(cudaEventRecord(cleanup.a, stream));
    for (int c = 0; c < copies; ++c) CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, kind, stream));
    CUDA_CHECK(cudaEventRecord(cleanup.b, stream));
    if (hold) {
      std::atomic_thread_fence(std::memory_order_seq_cst);
      *reinterpret_cast<volatile int*>(flag) = 1;
    }
    CUDA_CHECK(cudaEventSynchronize(cleanup.b));
    float ms = 0.f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, cleanup.a, cleanup.b));
    if (s >= warmup) run.samples_us.push_back(1000.0 * ms);
  }

  // Verify (untimed): bring the destination back to the host when it is on the device.
  if (kind == cudaMemcpyDeviceToHost) {
    run.wrong_bytes = count_wrong(host->data(), ref.data(), nbytes);
  } else {
    HostMem back(nbytes, false);
    copy_now(back.data(), dst, nbytes);
    run.wrong_bytes = count_wrong(back.data(), ref.data(), nbytes);
  }
  return run;
}

}  // namespace gdl::cuda
