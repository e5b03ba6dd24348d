// gdlbench._core is assembled from one binding function per area.
#pragma once
#include <pybind11/pybind11.h>

#include "bind_mpi.h"

namespace gdl::bind {

void bind_gemm(pybind11::module_& m);
void bind_layer(pybind11::module_& m);
void bind_net(pybind11::module_& m);
void bind_update(pybind11::module_& m);  // SGD update and host copies
void bind_comm(pybind11::module_& m);  // csrc/bind_core_comm.cpp: MPI collectives
}  // namespace gdl::bind
