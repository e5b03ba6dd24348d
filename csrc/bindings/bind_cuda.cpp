// gdlbench._cuda: the optional CUDA backend (cuBLAS now; cuDNN and NCCL join it). Buffers are
// passed as device pointers (ints) so that gdlbench's own DeviceBuffer and CuPy arrays both work.
#include <cudnn.h>
#include <nccl.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <mpi.h>
#include <mpi4py/mpi4py.h>

#include "bind_cuda.h"
#include "bind_util.h"
#include "cuda/check.h"
#include "cuda/device.h"
#include "cuda/gemm.h"

namespace py = pybind11;
using namespace gdl;
using gdl::bind::as_ptr;

namespace gdl::bind {
MPI_Comm get_comm(py::handle comm) {
  MPI_Comm* c = PyMPIComm_Get(comm.ptr());
  if (!c) throw py::error_already_set();
  return *c;
}
}  // namespace gdl::bind

namespace {

py::dict versions() {
  py::dict d;
  int v = 0;
  d["cuda_runtime"] = cudaRuntimeGetVersion(&v) == cudaSuccess ? v : -1;
  v = 0;
  d["driver"] = cudaDriverGetVersion(&v) == cudaSuccess ? v : -1;  // 0: no driver installed
  int major = 0, minor = 0, patch = 0;
  cublasGetProperty(MAJOR_VERSION, &major);
  cublasGetProperty(MINOR_VERSION, &minor);
  cublasGetProperty(PATCH_LEVEL, &patch);
  d["cublas"] = major * 10000 + minor * 100 + patch;
  d["cudnn"] = static_cast<long>(cudnnGetVersion());
  int nccl = 0;
  d["nccl"] = ncclGetVersion(&nccl) == ncclSuccess ? nccl : -1;
  return d;
}

py::dict device_properties(int index) {
  cudaDeviceProp p{};
  CUDA_CHECK(cudaGetDeviceProperties(&p, index));
  py::dict d;
  d["index"] = index;
  d["name"] = std::string(p.name);
  d["compute_capability"] = std::to_string(p.major) + "." + std::to_string(p.minor);
  d["memory_bytes"] = static_cast<unsigned long long>(p.totalGlobalMem);
  d["sm_count"] = p.multiProcessorCount;
  char bus[32] = {0};
  if (cudaDeviceGetPCIBusId(bus, sizeof bus, index) == cudaSuccess) d["pci_bus_id"] = std::string(bus);
  return d;
}

void copy_to_host(uintptr_t src, py::array dst) {
  GDL_REQUIRE(dst.flags() & py::array::c_style, "copy_to_host: destination must be C-contiguous");
  void* p = dst.mutable_data();
  const auto n = static_cast<std::size_t>(dst.nbytes());
  py::gil_scoped_release nogil;
  cuda::copy_now(p, as_ptr(src), n);
}

void copy_from_host(py::array src, uintptr_t dst) {
  GDL_REQUIRE(src.flags() & py::array::c_style, "copy_from_host: source must be C-contiguous");
  const void* p = src.data();
  const auto n = static_cast<std::size_t>(src.nbytes());
  py::gil_scoped_release nogil;
  cuda::copy_now(as_ptr(dst), p, n);
}

}  // namespace

PYBIND11_MODULE(_cuda, m) {
  if (import_mpi4py() < 0) throw py::error_already_set();
  m.doc() = "gdlbench CUDA backend: cuBLAS GEMM, cuDNN layers, NCCL collectives";

  m.def("versions", &versions, "Versions of the CUDA runtime and driver, cuBLAS, cuDNN and NCCL.");
  m.def(
      "device_status",
      [] {
        std::string why;
        const int n = cuda::device_count(&why);
        return py::make_tuple(n, why);
      },
      "(device count, reason when it is 0)");
  m.def("device_properties", &device_properties, py::arg("index"));
  m.def("set_device", &cuda::select_device, py::arg("index"),
        "Make `index` this process's device; before any CUDA work (refused after it began elsewhere).");
  m.def("current_device", &cuda::current_device);
  m.def(
      "wait_for_stream",
      [](uintptr_t stream) {
        py::gil_scoped_release nogil;
        cuda::wait_for_stream(stream);
      },
      py::arg("stream"),
      "Make gdlbench's stream wait for the work queued on a __cuda_array_interface__ producer stream "
      "(1 legacy default, 2 per-thread default, else a cudaStream_t).");
  m.def("synchronize", [] {
    py::gil_scoped_release nogil;
    CUDA_CHECK(cudaDeviceSynchronize());
  });
  m.def("mem_get_info", [] {
    std::size_t free = 0, total = 0;
    CUDA_CHECK(cudaMemGetInfo(&free, &total));
    return py::make_tuple(free, total);
  }, "(free, total) bytes of the current device");
  m.def("dtype_size", [](const std::string& t) { return cuda::dtype_size(cuda::parse_dtype(t)); }, py::arg("dtype"),
        "Bytes per element of a dtype name.");

  py::class_<cuda::DeviceBuffer>(m, "DeviceBuffer", "Owning cudaMalloc allocation.")
      .def(py::init<std::size_t>(), py::arg("nbytes"))
      .def_property_readonly("ptr", [](const cuda::DeviceBuffer& b) { return reinterpret_cast<uintptr_t>(b.data()); })
      .def_property_readonly("nbytes", &cuda::DeviceBuffer::nbytes);

  m.def(
      "fill",
      [](uintptr_t ptr, std::size_t count, const std::string& dtype, uint64_t seed) {
        const auto t = cuda::parse_dtype(dtype);
        py::gil_scoped_release nogil;
        cuda::fill(as_ptr(ptr), count, t, seed);
      },
      py::arg("ptr"), py::arg("count"), py::arg("dtype"), py::arg("seed"),
      "Fill device memory with gdlbench's deterministic test data, converted to dtype.");
  m.def("copy_to_host", &copy_to_host, py::arg("src"), py::arg("dst"));
  m.def("copy_from_host", &copy_from_host, py::arg("src"), py::arg("dst"));

  m.def(
      "gemm_time",
      [](uintptr_t a, uintptr_t b, uintptr_t c, int m_, int n_, int k_, const std::string& dtype, bool ta,
         bool tb, int warmup, int iters) {
        const auto t = cuda::parse_dtype(dtype);
        py::gil_scoped_release nogil;
        return cuda::gemm_time(TimingPlan{warmup, iters}, t, ta, tb, m_, n_, k_, as_ptr(a), as_ptr(b), as_ptr(c));
      },
      py::arg("a"), py::arg("b"), py::arg("c"), py::arg("m"), py::arg("n"), py::arg("k"), py::arg("dtype"),
      py::arg("trans_a"), py::arg("trans_b"), py::arg("warmup"), py::arg("iters"),
      "Time cuBLAS C = op(A) @ op(B) on row-major device buffers: one CUDA-event sample (us) per iteration.");

  gdl::bind::bind_cuda_nccl(m);
  gdl::bind::bind_cuda_layers(m);
  gdl::bind::bind_cuda_net(m);
  gdl::bind::bind_cuda_conv(m);
}
