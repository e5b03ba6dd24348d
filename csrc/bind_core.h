// gdlbench._core is assembled from one binding function per area.
#pragma once
#include <pybind11/pybind11.h>

namespace gdl::bind {
void bind_gemm(pybind11::module_& m);
void bind_layer(pybind11::module_& m);
void bind_update(pybind11::module_& m);  // SGD update and host copies
}  // namespace gdl::bind
