// gdlbench._core: the CPU backend and MPI. Every timed loop runs here with the GIL released.
#include "bind_core.h"

#include <pybind11/stl.h>

#include <mpi.h>
#include <mpi4py/mpi4py.h>

#include "bind_util.h"
#include "common/timer.h"
#include "cpu/blas.h"

namespace py = pybind11;

namespace gdl::bind {

MPI_Comm get_comm(py::handle comm) {
  MPI_Comm* c = PyMPIComm_Get(comm.ptr());
  if (!c) throw py::error_already_set();
  return *c;
}

py::object wrap_comm(MPI_Comm comm) {
  PyObject* o = PyMPIComm_New(comm);
  if (!o) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(o);
}

template <class T>
static void fill_array(py::array a, uint64_t seed) {
  T* p = host_data<T>(a, "fill");
  const auto n = static_cast<std::size_t>(a.size());
  py::gil_scoped_release nogil;
  cpu::fill(p, n, seed);
}

template <class T>
static std::vector<double> gemm_time(py::array a, py::array b, py::array c, bool trans_a, bool trans_b,
                                     int warmup, int iters) {
  GDL_REQUIRE(a.ndim() == 2 && b.ndim() == 2 && c.ndim() == 2, "gemm: a, b and c must be 2-D");
  const T* pa = host_data<T>(a, "a");
  const T* pb = host_data<T>(b, "b");
  T* pc = host_data<T>(c, "c");
  const int m = static_cast<int>(c.shape(0)), n = static_cast<int>(c.shape(1));
  const int k = static_cast<int>(trans_a ? a.shape(0) : a.shape(1));
  GDL_REQUIRE((trans_a ? a.shape(1) : a.shape(0)) == m, "gemm: a does not have ", m, " rows");
  GDL_REQUIRE((trans_b ? b.shape(1) : b.shape(0)) == k, "gemm: b does not have ", k, " rows");
  GDL_REQUIRE((trans_b ? b.shape(0) : b.shape(1)) == n, "gemm: b does not have ", n, " columns");
  const int lda = static_cast<int>(a.shape(1)), ldb = static_cast<int>(b.shape(1));
  py::gil_scoped_release nogil;
  return time_steady(TimingPlan{warmup, iters}, [&] {
    cpu::gemm(trans_a, trans_b, m, n, k, T(1), pa, lda, pb, ldb, T(0), pc, n);
  });
}

void bind_gemm(py::module_& m) {
  m.def(
      "gemm_time",
      [](py::array a, py::array b, py::array c, bool ta, bool tb, int warmup, int iters) {
        if (a.dtype().is(py::dtype::of<double>())) return gemm_time<double>(a, b, c, ta, tb, warmup, iters);
        return gemm_time<float>(a, b, c, ta, tb, warmup, iters);
      },
      py::arg("a"), py::arg("b"), py::arg("c"), py::arg("trans_a"), py::arg("trans_b"), py::arg("warmup"),
      py::arg("iters"), "Time c = op(a) @ op(b) with OpenBLAS: one host steady-clock sample (us) per iteration.");
}

}  // namespace gdl::bind

PYBIND11_MODULE(_core, m) {
  if (import_mpi4py() < 0) throw py::error_already_set();
  m.doc() = "gdlbench CPU backend (OpenBLAS, im2col convolution, layer kernels) and MPI collectives";
  m.attr("__version__") = GDL_VERSION;

  m.def("set_blas_threads", &gdl::cpu::set_blas_threads, py::arg("n"));
  m.def("blas_threads", &gdl::cpu::blas_threads);
  m.def("blas_config", &gdl::cpu::blas_config);
  m.def("blas_corename", &gdl::cpu::blas_corename);
  m.def(
      "fill",
      [](py::array a, uint64_t seed) {
        if (a.dtype().is(py::dtype::of<double>())) return gdl::bind::fill_array<double>(a, seed);
        gdl::bind::fill_array<float>(a, seed);
      },
      py::arg("array"), py::arg("seed"),
      "Fill a float32/float64 array with gdlbench's deterministic test data (exact in every dtype).");

  gdl::bind::bind_gemm(m);
  gdl::bind::bind_layer(m);
  gdl::bind::bind_net(m);
  gdl::bind::bind_update(m);
  gdl::bind::bind_comm(m);
}
