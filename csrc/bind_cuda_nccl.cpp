// Bindings for the NCCL collectives (csrc/cuda/nccl.*). Device buffers are passed as pointers
// (ints), the MPI communicator from mpi4py.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <mpi.h>

#include "bind_cuda.h"
#include "cuda/nccl.h"

namespace py = pybind11;

namespace gdl::bind {

void bind_cuda_nccl(py::module_& m) {
  m.def(
      "nccl_bench",
      [](py::object comm, const std::string& collective, std::size_t count, const std::string& dtype,
         const std::string& op, bool inplace, int root, int warmup, int iters, int check_iters, double timeout_s) {
        const auto t = comm::parse_dtype(dtype);
        const auto o = comm::parse_op(op);
        MPI_Comm c = get_comm(comm);
        cuda::NcclBenchResult r;
        {
          py::gil_scoped_release nogil;
          r = cuda::nccl_bench(c, collective, count, t, o, inplace, root, warmup, iters, check_iters, timeout_s);
        }
        return py::make_tuple(r.samples_us, r.wrong);
      },
      py::arg("comm"), py::arg("collective"), py::arg("count"), py::arg("dtype"), py::arg("op"), py::arg("inplace"),
      py::arg("root"), py::arg("warmup"), py::arg("iters"), py::arg("check_iters"), py::arg("timeout_s"),
      "Time one NCCL collective on device buffers: per iteration an untimed MPI_Barrier, then the call + "
      "stream sync on the host steady clock; (samples_us max over ranks, wrong elements or -1).");
  m.def(
      "nccl_allreduce",
      [](py::object comm, uintptr_t ptr, std::size_t count, const std::string& dtype, const std::string& op) {
        const auto t = comm::parse_dtype(dtype);
        const auto o = comm::parse_op(op);
        MPI_Comm c = get_comm(comm);
        py::gil_scoped_release nogil;
        cuda::nccl_allreduce(as_ptr(ptr), count, t, o, c);
      },
      py::arg("comm"), py::arg("ptr"), py::arg("count"), py::arg("dtype"), py::arg("op") = "sum",
      "In-place ncclAllReduce of count elements at a device pointer over the ranks of comm.");
}

}  // namespace gdl::bind
