// The MPI_Comm inside an mpi4py communicator. mpi4py's C API table lives in per-translation-unit
// pointers, so each module defines this once, in its main binding file (bind_core.cpp,
// bind_cuda.cpp, after import_mpi4py()), and every other binding file calls it.
#pragma once
#include <mpi.h>
#include <pybind11/pybind11.h>

namespace gdl::bind {
MPI_Comm get_comm(pybind11::handle comm);
// An mpi4py communicator object for a handle gdlbench keeps (it does not free it).
pybind11::object wrap_comm(MPI_Comm comm);
}  // namespace gdl::bind
