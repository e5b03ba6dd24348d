// gdlbench._core is assembled from one binding function per area.
#pragma once
#include <pybind11/pybind11.h>

namespace gdl::bind {
void bind_gemm(pybind11::module_& m);
void bind_comm(pybind11::module_& m);  // csrc/bind_core_comm.cpp: MPI collectives
}  // namespace gdl::bind
