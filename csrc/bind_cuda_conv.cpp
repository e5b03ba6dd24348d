// Standalone cuDNN convolution timing and checks for gdlbench.conv: builds the "conv" cuda layer
// on its own device buffers (filled with cuda::fill), times each pass with CUDA events
// (cuda/cuda_timer.h), or every algorithm with all_algos, and runs the three passes once for the
// host's float64 check.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bind_cuda.h"
#include "common/conv_geometry.h"
#include "cuda/check.h"
#include "cuda/conv.h"
#include "cuda/cuda_timer.h"
#include "cuda/device.h"

namespace py = pybind11;

namespace gdl::bind {
namespace {

using cuda::ConvPass;

constexpr ConvPass kPasses[] = {ConvPass::fwd, ConvPass::bwd_data, ConvPass::bwd_filter};
// Seeds of the test data; gdlbench/conv.py regenerates the same values on the host.
constexpr uint64_t kSeedX = 11, kSeedW = 5, kSeedB = 6, kSeedDy = 7, kSeedDx0 = 13;

int64_t geo(const py::dict& g, const char* key, int64_t fallback = -1) {
  if (!g.contains(key)) {
    GDL_REQUIRE(fallback >= 0, "conv geometry: missing '", key, "'");
    return fallback;
  }
  return g[key].cast<int64_t>();
}

// The layer spec for a geometry dict (gdlbench.conv.ConvShape.geometry()) and the options.
LayerSpec make_spec(const py::dict& g, const std::string& dtype, const std::string& layout, const std::string& mode,
                    const std::map<std::string, std::string>& named, std::size_t workspace_limit) {
  LayerSpec s;
  s.name = "conv";
  s.type = "conv";
  s.inputs = {-1};
  const int64_t n = geo(g, "n"), c = geo(g, "c"), h = geo(g, "h"), w = geo(g, "w"), k = geo(g, "k");
  const int64_t r = geo(g, "r"), ss = geo(g, "s"), groups = geo(g, "groups", 1), bias = geo(g, "bias", 0);
  const char* keys[] = {"stride_h", "stride_w", "pad_h", "pad_w", "dilation_h", "dilation_w"};
  const int64_t defaults[] = {1, 1, 0, 0, 1, 1};
  for (int i = 0; i < 6; ++i) s.attrs[keys[i]] = double(geo(g, keys[i], defaults[i]));
  GDL_REQUIRE(n >= 1 && groups >= 1 && c % groups == 0, "conv: bad geometry");
  s.attrs["out_channels"] = double(k);
  s.attrs["kernel_h"] = double(r);
  s.attrs["kernel_w"] = double(ss);
  s.attrs["groups"] = double(groups);
  s.attrs["bias"] = double(bias);
  const auto t = cuda::parse_dtype(dtype);
  GDL_REQUIRE(t != cuda::DType::f64, "conv: float64 is not a cuDNN convolution dtype here");
  s.attrs["dtype"] = t == cuda::DType::f16 ? 1 : t == cuda::DType::bf16 ? 2 : 0;
  s.attrs["tf32"] = t == cuda::DType::tf32 ? 1 : 0;
  GDL_REQUIRE(layout == "nchw" || layout == "nhwc", "conv: layout must be nchw or nhwc, got '", layout, "'");
  s.attrs["nhwc"] = layout == "nhwc" ? 1 : 0;
  s.attrs["workspace_limit"] = double(workspace_limit);
  if (mode == "heuristic") {
    s.attrs["algo_mode"] = 0;
  } else if (mode == "search") {
    s.attrs["algo_mode"] = 1;
  } else {
    GDL_REQUIRE(mode == "named", "conv: algo mode must be heuristic, search or named, got '", mode, "'");
    s.attrs["algo_mode"] = 2;
    const char* attr_names[] = {"algo_fwd", "algo_bwd_data", "algo_bwd_filter"};
    for (auto p : kPasses) {
      auto it = named.find(cuda::conv_pass_name(p));
      // A pass that is not timed still needs an algorithm: the heuristic's default, IMPLICIT_GEMM/ALGO_1.
      const std::string name = it == named.end() ? (p == ConvPass::fwd ? "IMPLICIT_GEMM" : "ALGO_1") : it->second;
      const int a = cuda::conv_algo_from_name(p, name);
      GDL_REQUIRE(a >= 0, "conv: unknown ", cuda::conv_pass_name(p), " algorithm '", name, "'");
      s.attrs[attr_names[int(p)]] = a;
    }
  }
  // Derived shapes; ConvGeometry::from_spec checks them all again.
  s.in_shapes = {{c, h, w}};
  const int64_t p = ConvGeometry::out_size(h, r, int64_t(s.attrs["stride_h"]), int64_t(s.attrs["pad_h"]),
                                           int64_t(s.attrs["dilation_h"]));
  const int64_t q = ConvGeometry::out_size(w, ss, int64_t(s.attrs["stride_w"]), int64_t(s.attrs["pad_w"]),
                                           int64_t(s.attrs["dilation_w"]));
  s.out_shape = {k, p, q};
  s.param_shapes = {{k, c / groups, r, ss}};
  if (bias) s.param_shapes.push_back({k});
  s.batch = static_cast<int>(n);
  return s;
}

// The layer plus device buffers for every tensor, filled with test data.
struct ConvRig {
  std::unique_ptr<cuda::ConvLayer> layer;
  std::unique_ptr<cuda::DeviceBuffer> x, y, dy, dx, params, grads;
  std::size_t es = 4, w_count = 0;

  explicit ConvRig(const LayerSpec& spec) : layer(std::make_unique<cuda::ConvLayer>(spec)) {
    const ConvGeometry& g = layer->geometry();
    es = cuda::dtype_size(layer->dtype());
    const std::size_t nx = g.n * g.c * g.h * g.w, ny = g.n * g.k * g.pq();
    w_count = g.k * g.crs();
    const std::size_t np = w_count + (g.bias ? g.k : 0);
    x = std::make_unique<cuda::DeviceBuffer>(nx * es);
    y = std::make_unique<cuda::DeviceBuffer>(ny * es);
    dy = std::make_unique<cuda::DeviceBuffer>(ny * es);
    dx = std::make_unique<cuda::DeviceBuffer>(nx * es);
    params = std::make_unique<cuda::DeviceBuffer>(np * es);
    grads = std::make_unique<cuda::DeviceBuffer>(np * es);
    const auto t = layer->dtype();
    cuda::fill(x->data(), nx, t, kSeedX);
    cuda::fill(dy->data(), ny, t, kSeedDy);
    cuda::fill(dx->data(), nx, t, kSeedDx0);
    cuda::fill(params->data(), w_count, t, kSeedW);
    if (g.bias) cuda::fill(static_cast<char*>(params->data()) + w_count * es, g.k, t, kSeedB);
    // On the layer's stream: a plain cudaMemset runs on the legacy stream, which a non-blocking
    // stream does not wait for.
    CUDA_CHECK(cudaMemsetAsync(grads->data(), 0, np * es, cuda::context().stream));
    CUDA_CHECK(cudaStreamSynchronize(cuda::context().stream));
    layer->bind_params(params->data(), grads->data(), es);
  }

  void run(ConvPass p) {
    const std::vector<const void*> xs{x->data()};
    switch (p) {
      case ConvPass::fwd: layer->forward(xs, y->data()); break;
      case ConvPass::bwd_data: layer->backward_data(xs, y->data(), dy->data(), {dx->data()}); break;
      case ConvPass::bwd_filter: layer->backward_params(xs, y->data(), dy->data()); break;
    }
  }
};

py::dict row(ConvRig& rig, ConvPass p, const std::vector<double>& samples, const std::string& status) {
  py::dict d;
  d["pass"] = cuda::conv_pass_name(p);
  d["algo"] = cuda::conv_algo_name(p, rig.layer->algo(p));
  d["algo_id"] = rig.layer->algo(p);
  d["workspace_bytes"] = rig.layer->workspace_bytes(p);
  d["selection"] = rig.layer->selection();
  d["samples_us"] = samples;
  d["status"] = status;
  return d;
}

py::list conv_time(const py::dict& g, const std::string& dtype, const std::string& layout, const std::string& mode,
                   const std::map<std::string, std::string>& named, std::size_t workspace_limit,
                   const std::vector<std::string>& passes, bool all_algos, int warmup, int iters) {
  const LayerSpec spec = make_spec(g, dtype, layout, mode, named, workspace_limit);
  std::vector<ConvPass> ps;
  for (const auto& name : passes) ps.push_back(cuda::parse_conv_pass(name));
  const TimingPlan plan{warmup, iters};
  validate(plan);
  py::list out;
  std::unique_ptr<ConvRig> rig;
  {
    py::gil_scoped_release nogil;
    rig = std::make_unique<ConvRig>(spec);
  }
  const cudaStream_t stream = cuda::context().stream;
  for (ConvPass p : ps) {
    if (!all_algos) {
      std::vector<double> samples;
      {
        py::gil_scoped_release nogil;
        samples = cuda::time_events(plan, stream, [&] { rig->run(p); });
      }
      out.append(row(*rig, p, samples, "ok"));
      continue;
    }
    const int chosen = rig->layer->algo(p);
    for (int a = 0; a < cuda::conv_algo_count(p); ++a) {
      const cuda::ConvAlgoQuery q = rig->layer->query(p, a);
      std::string status = "ok";
      std::vector<double> samples;
      if (!q.supported) {
        status = "not supported: " + q.status;
      } else if (q.workspace > workspace_limit) {
        status = concat("needs ", q.workspace, " bytes of workspace > limit ", workspace_limit);
      } else {
        try {
          py::gil_scoped_release nogil;
          rig->layer->set_algo(p, a);
          samples = cuda::time_events(plan, stream, [&] { rig->run(p); });
        } catch (const std::exception& e) {  // cuDNN refused at run time: record, go on
          status = std::string("failed: ") + e.what();
          samples.clear();
          cudaGetLastError();
        }
      }
      py::dict d = row(*rig, p, samples, status);
      d["algo"] = cuda::conv_algo_name(p, a);
      d["algo_id"] = a;
      d["workspace_bytes"] = q.workspace;
      out.append(d);
    }
    py::gil_scoped_release nogil;
    rig->layer->set_algo(p, chosen);
  }
  return out;
}

py::array_t<uint8_t> to_host(const void* src, std::size_t nbytes) {
  py::array_t<uint8_t> a(static_cast<py::ssize_t>(nbytes));
  void* dst = a.mutable_data();
  py::gil_scoped_release nogil;
  CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToHost, cuda::context().stream));
  CUDA_CHECK(cudaStreamSynchronize(cuda::context().stream));
  return a;
}

// Runs forward, backward-filter and backward-data once (dx starts at the dx0 test data: it must
// accumulate) and returns the raw bytes of y, dx, dw (and db) in the layout's memory order.
py::dict conv_check(const py::dict& g, const std::string& dtype, const std::string& layout, const std::string& mode,
                    const std::map<std::string, std::string>& named, std::size_t workspace_limit) {
  const LayerSpec spec = make_spec(g, dtype, layout, mode, named, workspace_limit);
  std::unique_ptr<ConvRig> rig;
  {
    py::gil_scoped_release nogil;
    rig = std::make_unique<ConvRig>(spec);
    for (ConvPass p : kPasses) rig->run(p);
    CUDA_CHECK(cudaStreamSynchronize(cuda::context().stream));
  }
  const ConvGeometry& geom = rig->layer->geometry();
  py::dict d;
  d["y"] = to_host(rig->y->data(), rig->y->nbytes());
  d["dx"] = to_host(rig->dx->data(), rig->dx->nbytes());
  d["dw"] = to_host(rig->grads->data(), rig->w_count * rig->es);
  if (geom.bias) d["db"] = to_host(static_cast<char*>(rig->grads->data()) + rig->w_count * rig->es, geom.k * rig->es);
  py::dict algos;
  for (ConvPass p : kPasses) algos[cuda::conv_pass_name(p)] = cuda::conv_algo_name(p, rig->layer->algo(p));
  d["algos"] = algos;
  return d;
}

}  // namespace

void bind_cuda_conv(py::module_& m) {
  m.def("conv_time", &conv_time, py::arg("geometry"), py::arg("dtype"), py::arg("layout"), py::arg("mode"),
        py::arg("named"), py::arg("workspace_limit"), py::arg("passes"), py::arg("all_algos"), py::arg("warmup"),
        py::arg("iters"),
        "Time cuDNN convolution passes (CUDA events, one sample per call): a list of rows with pass, algo, "
        "workspace_bytes, samples_us (empty when the algorithm cannot run) and status.");
  m.def("conv_check", &conv_check, py::arg("geometry"), py::arg("dtype"), py::arg("layout"), py::arg("mode"),
        py::arg("named"), py::arg("workspace_limit"),
        "Run the three passes once on test data: raw bytes of y, dx (= dx0 + dL/dx), dw, db, and the algorithms.");
  m.def(
      "conv_algo_names",
      [] {
        std::map<std::string, std::vector<std::string>> names;
        for (ConvPass p : kPasses)
          for (int a = 0; a < cuda::conv_algo_count(p); ++a) names[cuda::conv_pass_name(p)].push_back(cuda::conv_algo_name(p, a));
        return names;
      },
      "cuDNN's algorithm names per pass.");
}

}  // namespace gdl::bind
