// Conversion of a Python layer spec (a dict from Network.layer_specs()) into cpu::LayerSpec.
#pragma once
#include "bind_layer_spec.h"
#include "cpu/layer.h"
