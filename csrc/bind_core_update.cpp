// The SGD update and host copies in gdlbench._core: a numpy entry point for checks, and timed
// loops whose buffers are allocated and touched here, before timing (first-touch page faults
// would otherwise dominate: DESIGN.md, benchmark hygiene).
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include "bind_core.h"
#include "bind_util.h"
#include "common/fill.h"
#include "common/timer.h"
#include "cpu/compress.h"
#include "cpu/copy.h"
#include "cpu/layer.h"
#include "cpu/sgd.h"

namespace py = pybind11;

namespace gdl::bind {
namespace {

using clock_type = std::chrono::steady_clock;
double us_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::micro>(clock_type::now() - t0).count();
}

// Page-aligned, touched buffer (value-initialised floats would also touch, but this states it).
struct HostBuffer {
  explicit HostBuffer(std::size_t nbytes) : n(nbytes), p(static_cast<char*>(std::aligned_alloc(4096, round(nbytes)))) {
    if (!p) throw std::bad_alloc();
  }
  ~HostBuffer() { std::free(p); }
  static std::size_t round(std::size_t b) { return ((b ? b : 1) + 4095) & ~std::size_t(4095); }
  std::size_t n;
  char* p;
};

void fill_bytes(char* p, std::size_t n, uint64_t seed) {
  // A pattern that differs per 8 bytes, so a copy that misses or shifts data is caught.
#pragma omp parallel for schedule(static)
  for (std::size_t i = 0; i < n / 8; ++i) {
    const uint64_t v = splitmix64(seed + i);
    std::memcpy(p + 8 * i, &v, 8);
  }
  for (std::size_t i = n / 8 * 8; i < n; ++i) p[i] = char(seed + i);
}

std::size_t count_wrong(const char* a, const char* b, std::size_t n) {
  std::size_t wrong = 0;
#pragma omp parallel for schedule(static) reduction(+ : wrong)
  for (std::size_t i = 0; i < n; ++i) wrong += a[i] != b[i];
  return wrong;
}

// Interleaved per iteration: one timed update, then one timed copy of 10 bytes per parameter
// (which reads 10 and writes 10: the update's 20 bytes of traffic), so both see the same machine state.
py::dict update_bench(int64_t n, float lr, float momentum, float wd, int warmup, int iters, int threads) {
  GDL_REQUIRE(n >= 1, "update: need at least one parameter, got ", n);
  validate(TimingPlan{warmup, iters});
  std::vector<double> upd, cpy;
  {
    py::gil_scoped_release nogil;
    cpu::set_compute_threads(threads);
    const std::size_t bytes = std::size_t(n) * sizeof(float);
    HostBuffer w(bytes), g(bytes), v(bytes), src(bytes * 5 / 2), dst(bytes * 5 / 2);
    auto *pw = reinterpret_cast<float*>(w.p), *pg = reinterpret_cast<float*>(g.p), *pv = reinterpret_cast<float*>(v.p);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) {  // same static schedule as the update: pages land near their thread
      pw[i] = fill_value(1, i);
      pg[i] = fill_value(2, i) * 0.01f;
      pv[i] = 0.f;
    }
    fill_bytes(src.p, src.n, 3);
    std::memset(dst.p, 0, dst.n);
    for (int i = 0; i < warmup; ++i) {
      cpu::sgd_update(pw, pg, pv, n, lr, momentum, wd);
      cpu::parallel_copy(dst.p, src.p, src.n, threads);
    }
    for (int i = 0; i < iters; ++i) {
      auto t0 = clock_type::now();
      cpu::sgd_update(pw, pg, pv, n, lr, momentum, wd);
      upd.push_back(us_since(t0));
      t0 = clock_type::now();
      cpu::parallel_copy(dst.p, src.p, src.n, threads);
      cpy.push_back(us_since(t0));
    }
  }
  py::dict d;
  d["update_us"] = upd;
  d["copy_us"] = cpy;
  d["copy_bytes"] = std::size_t(n) * 10;
  return d;
}

// `copies` back-to-back copies of nbytes per sample; the destination is verified after timing.
py::tuple copy_bench(std::size_t nbytes, int copies, int warmup, int iters, int threads) {
  GDL_REQUIRE(nbytes >= 1, "copy: size must be positive");
  GDL_REQUIRE(copies >= 1, "copy: copies per sample must be >= 1, got ", copies);
  validate(TimingPlan{warmup, iters});
  std::vector<double> samples;
  std::size_t wrong = 0;
  {
    py::gil_scoped_release nogil;
    HostBuffer src(nbytes), dst(nbytes);
    fill_bytes(src.p, nbytes, 42);
    std::memset(dst.p, 0, nbytes);
    for (int i = 0; i < warmup; ++i) cpu::parallel_copy(dst.p, src.p, nbytes, threads);
    std::memset(dst.p, 0, nbytes);  // so the check sees the timed copies' data, not the warm-up's
    for (int i = 0; i < iters; ++i) {
      const auto t0 = clock_type::now();
      for (int c = 0; c < copies; ++c) cpu::parallel_copy(dst.p, src.p, nbytes, threads);
      samples.push_back(us_since(t0));
    }
    wrong = count_wrong(src.p, dst.p, nbytes);
  }
  return py::make_tuple(samples, wrong);
}

}  // namespace

void bind_update(py::module_& m) {
  m.def(
      "sgd_update",
      [](py::array w, py::array g, py::array v, float lr, float momentum, float wd) {
        float* pw = host_data<float>(w, "w");
        float* pg = host_data<float>(g, "g");
        float* pv = host_data<float>(v, "v");
        GDL_REQUIRE(w.size() == g.size() && w.size() == v.size(), "sgd_update: w, g and v differ in size");
        py::gil_scoped_release nogil;
        cpu::sgd_update(pw, pg, pv, w.size(), lr, momentum, wd);
      },
      py::arg("w"), py::arg("g"), py::arg("v"), py::arg("lr"), py::arg("momentum"), py::arg("wd"),
      "In place: v = momentum*v + (g + wd*w); w -= lr*v (PyTorch's SGD convention), float32 arrays.");
  m.def("update_bench", &update_bench, py::arg("n"), py::arg("lr"), py::arg("momentum"), py::arg("wd"),
        py::arg("warmup"), py::arg("iters"), py::arg("threads"),
        "Time sgd_update over n parameters, interleaved with a memcpy of 10n bytes: "
        "{'update_us', 'copy_us', 'copy_bytes'} (host steady clock).");
  m.def("copy_bench", &copy_bench, py::arg("nbytes"), py::arg("copies"), py::arg("warmup"), py::arg("iters"),
        py::arg("threads"),
        "Time `copies` memcpys of nbytes per sample between touched buffers: (samples_us, wrong_bytes).");
  m.def(
      "topk_encode",
      [](py::array g, double ratio) {
        const float* pg = host_data<float>(g, "g");
        const auto n = static_cast<std::size_t>(g.size());
        const std::size_t k = cpu::topk_count(n, ratio);
        py::array_t<int32_t> indices(k);
        py::array_t<float> values(k);
        std::vector<float> scratch(n);
        int32_t* pi = indices.mutable_data();
        float* pv = values.mutable_data();
        {
          py::gil_scoped_release nogil;
          cpu::topk_encode(pg, n, k, scratch.data(), pi, pv);
        }
        return py::make_tuple(indices, values);
      },
      py::arg("g"), py::arg("ratio"),
      "Top-k encode of a float32 gradient at compression ratio r: (indices, values), k = n / (2r).");
  m.def(
      "topk_encode_time",
      [](std::size_t n, double ratio, int warmup, int iters) {
        py::gil_scoped_release nogil;
        return cpu::time_topk_encode(n, ratio, TimingPlan{warmup, iters});
      },
      py::arg("n"), py::arg("ratio"), py::arg("warmup"), py::arg("iters"),
      "Time the top-k encode of n float32 values at ratio r: samples in us (host steady clock).");
}

}  // namespace gdl::bind
