// Conversion of a Python layer spec (a dict from Network.layer_specs()) into cpu::LayerSpec.
#pragma once
#include <pybind11/pybind11.h>

#include "cpu/layer.h"

namespace gdl::bind {
cpu::LayerSpec spec_from_dict(const pybind11::dict& d, int batch);
}  // namespace gdl::bind
