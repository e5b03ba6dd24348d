// Bindings for one CPU layer on its own (cpu/layer_bench.h) and the compute threads.
#include "bind_core.h"
#include "bind_layer_bench.h"
#include "cpu/layer.h"
#include "cpu/layer_bench.h"

namespace py = pybind11;

namespace gdl::bind {

void bind_layer(py::module_& m) {
  m.def("layer_types", &cpu::layer_types, "CPU layer types the executor can build.");
  m.def("set_compute_threads", &cpu::set_compute_threads, py::arg("n"));
  m.def("compute_threads", &cpu::compute_threads);
  bind_layer_bench<cpu::LayerBench>(m, "One CPU layer with its own buffers, for timing and checking.",
                                    "Host steady-clock");
}

}  // namespace gdl::bind
