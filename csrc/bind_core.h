// gdlbench._core is assembled from one binding function per area.
#pragma once
#include <mpi.h>
#include <pybind11/pybind11.h>

namespace gdl::bind {
// The MPI_Comm inside an mpi4py communicator. mpi4py's C API table is per translation unit, so
// this one function (bind_core.cpp) is the only place that uses it.
MPI_Comm get_comm(pybind11::handle comm);

void bind_gemm(pybind11::module_& m);
void bind_layer(pybind11::module_& m);
void bind_net(pybind11::module_& m);
void bind_update(pybind11::module_& m);  // SGD update and host copies
void bind_comm(pybind11::module_& m);  // csrc/bind_core_comm.cpp: MPI collectives
}  // namespace gdl::bind
