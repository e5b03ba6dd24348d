// gdlbench._cuda is assembled from one binding function per area (csrc/bind_cuda_<area>.cpp).
#pragma once
#include <pybind11/pybind11.h>

#include <cstdint>

#include "bind_mpi.h"

namespace gdl::bind {
inline void* as_ptr(uintptr_t p) { return reinterpret_cast<void*>(p); }
// Areas add their binding function here and call it from PYBIND11_MODULE(_cuda, ...).
void bind_cuda_nccl(pybind11::module_& m);  // csrc/bind_cuda_nccl.cpp: NCCL collectives
void bind_cuda_layers(pybind11::module_& m);  // LayerBench, layer_types, SGD update, copies
void bind_cuda_net(pybind11::module_& m);  // csrc/bind_cuda_net.cpp: the iteration executor
void bind_cuda_conv(pybind11::module_& m);  // bind_cuda_conv.cpp: cuDNN convolution timing and checks
}  // namespace gdl::bind
