// The collective benchmark's spec and result, bound the same way in both modules: _core.comm_bench
// (MPI, comm/bench.cpp) and _cuda.nccl_bench (NCCL, cuda/nccl.cu) take a BenchSpec and return a
// BenchResult. module_local: each module has its own Python class of the same shape.
#pragma once
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>

#include "bind_mpi.h"
#include "comm/collective.h"

namespace gdl::bind {
namespace py = pybind11;

// Bench(const comm::BenchSpec&, MPI_Comm) -> comm::BenchResult, run with the GIL released.
template <class Bench>
void bind_comm_bench(py::module_& m, const char* name, Bench bench, const char* doc) {
  py::class_<comm::BenchSpec>(m, "BenchSpec", py::module_local(), "What one collective benchmark row runs.")
      .def(py::init([](const std::string& collective, std::size_t count, const std::string& dtype,
                       const std::string& op, bool inplace, const std::string& algo, int root, int servers,
                       int warmup, int iters, int check_iters, double timeout_s, std::size_t rotate_bytes,
                       const std::string& on) {
             comm::BenchSpec s;
             s.coll = comm::parse_collective(collective);
             s.count = count;
             s.dtype = comm::parse_dtype(dtype);
             s.op = comm::parse_op(op);
             s.inplace = inplace;
             s.algo = comm::parse_algo(algo);
             s.root = root;
             s.opt.servers = servers;
             s.warmup = warmup;
             s.iters = iters;
             s.check_iters = check_iters;
             s.timeout_s = timeout_s;
             s.rotate_bytes = rotate_bytes;
             GDL_REQUIRE(on == "main" || on == "comm-thread", "on: main or comm-thread, got '", on, "'");
             s.on_comm_thread = on == "comm-thread";
             return s;
           }),
           py::kw_only(), py::arg("collective"), py::arg("count"), py::arg("dtype") = "float32",
           py::arg("op") = "sum", py::arg("inplace") = false, py::arg("algo") = "library", py::arg("root") = 0,
           py::arg("servers") = 1, py::arg("warmup") = 5, py::arg("iters") = 20, py::arg("check_iters") = 1,
           py::arg("timeout_s") = 0.0, py::arg("rotate_bytes") = 0,
           py::arg("on") = "main");
  py::class_<comm::BenchResult>(m, "BenchResult", py::module_local(), "Samples and the exact check of one row.")
      .def_readonly("samples_us", &comm::BenchResult::samples_us, "per iteration, the max over ranks")
      .def_readonly("wrong", &comm::BenchResult::wrong, "wrong elements over ranks and checks; -1: no check");
  m.def(
      name,
      [bench](py::object comm, const comm::BenchSpec& spec) {
        const MPI_Comm c = get_comm(comm);
        py::gil_scoped_release nogil;
        return bench(spec, c);
      },
      py::arg("comm"), py::arg("spec"), doc);
}

}  // namespace gdl::bind
