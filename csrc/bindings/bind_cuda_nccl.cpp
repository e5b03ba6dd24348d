// Bindings for the NCCL collectives (csrc/cuda/nccl.*). Device buffers are passed as pointers
// (ints), the MPI communicator from mpi4py.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <mpi.h>

#include "bind_comm_bench.h"
#include "bind_cuda.h"
#include "comm/topology.h"
#include "cuda/nccl.h"

namespace py = pybind11;

namespace gdl::bind {

void bind_cuda_nccl(py::module_& m) {
  bind_comm_bench(m, "nccl_bench", &cuda::nccl_bench,
                  "Time one NCCL collective on device buffers: per iteration an untimed MPI_Barrier, then the "
                  "call and its wait on the host steady clock; then the exact check.");
  m.def(
      "nccl_allreduce",
      [](py::object comm, uintptr_t ptr, std::size_t count, const std::string& dtype, const std::string& op,
         const std::string& algo) {
        const auto t = comm::parse_dtype(dtype);
        const auto o = comm::parse_op(op);
        const auto a = comm::parse_algo(algo);
        MPI_Comm c = get_comm(comm);
        py::gil_scoped_release nogil;
        cuda::nccl_allreduce(as_ptr(ptr), count, t, o, c, a);
      },
      py::arg("comm"), py::arg("ptr"), py::arg("count"), py::arg("dtype"), py::arg("op") = "sum",
      py::arg("algo") = "library",
      "In-place all-reduce of count elements at a device pointer over the ranks of comm: ncclAllReduce "
      "(library) or the hierarchical one (hier: NCCL inside each node and across nodes).");
  m.def("set_ranks_per_node", &comm::set_ranks_per_node, py::arg("ranks_per_node"),
        "This module's copy of the node grouping (gdlbench.common.env.set_ranks_per_node sets both).");
}

}  // namespace gdl::bind
