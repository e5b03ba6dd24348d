// Bindings for the standalone cuDNN convolution benchmark (cuda/conv_bench.h): a geometry dict
// and options in, rows and raw result bytes out.
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
#include "cuda/conv_bench.h"
#include "cuda/device.h"

namespace py = pybind11;

namespace gdl::bind {
namespace {

using cuda::ConvPass;

constexpr ConvPass kPasses[] = {ConvPass::fwd, ConvPass::bwd_data, ConvPass::bwd_filter};

int64_t geo(const py::dict& g, const char* key, int64_t fallback = -1) {
  if (!g.contains(key)) {
    GDL_REQUIRE(fallback >= 0, "conv geometry: missing '", key, "'");
    return fallback;
  }
  return g[key].cast<int64_t>();
}

// The layer spec for a geometry dict (gdlbench.primitives.conv.ConvShape.geometry()) and the options.
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

py::list conv_time(const py::dict& g, const std::string& dtype, const std::string& layout, const std::string& mode,
                   const std::map<std::string, std::string>& named, std::size_t workspace_limit,
                   const std::vector<std::string>& passes, bool all_algos, int warmup, int iters) {
  const LayerSpec spec = make_spec(g, dtype, layout, mode, named, workspace_limit);
  std::vector<ConvPass> ps;
  for (const auto& name : passes) ps.push_back(cuda::parse_conv_pass(name));
  std::vector<cuda::ConvTiming> rows;
  {
    py::gil_scoped_release nogil;
    rows = cuda::conv_time(spec, ps, all_algos, TimingPlan{warmup, iters});
  }
  py::list out;
  for (const auto& r : rows) {
    py::dict d;
    d["pass"] = cuda::conv_pass_name(r.pass);
    d["algo"] = r.algo;
    d["algo_id"] = r.algo_id;
    d["workspace_bytes"] = r.workspace_bytes;
    d["selection"] = r.selection;
    d["samples_us"] = r.samples_us;
    d["status"] = r.status;
    out.append(d);
  }
  return out;
}

py::array_t<uint8_t> bytes_array(const std::vector<uint8_t>& v) {
  return py::array_t<uint8_t>(static_cast<py::ssize_t>(v.size()), v.data());
}

py::dict conv_check(const py::dict& g, const std::string& dtype, const std::string& layout, const std::string& mode,
                    const std::map<std::string, std::string>& named, std::size_t workspace_limit) {
  const LayerSpec spec = make_spec(g, dtype, layout, mode, named, workspace_limit);
  cuda::ConvCheckRun run;
  {
    py::gil_scoped_release nogil;
    run = cuda::conv_check(spec);
  }
  py::dict d;
  d["y"] = bytes_array(run.y);
  d["dx"] = bytes_array(run.dx);
  d["dw"] = bytes_array(run.dw);
  if (!run.db.empty()) d["db"] = bytes_array(run.db);
  d["algos"] = run.algos;
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
      "conv_search_stats",
      [] {
        const cuda::ConvSearchStats st = cuda::conv_search_stats();
        py::dict d;
        d["searched"] = st.searched;
        d["reused"] = st.reused;
        return d;
      },
      "Convolution algorithm searches in this process: shapes searched (cudnnFind*Ex) and layers that "
      "reused an earlier search of their shape (as cudnn.benchmark's cache).");
  // The fill seeds of conv_time's buffers (cuda/conv_bench.h), so that a comparison can give its
  // peer the same values (gdlbench.fill on the peer's tensors).
  m.attr("CONV_SEEDS") = std::map<std::string, uint64_t>{{"x", cuda::kConvSeedX}, {"w", cuda::kConvSeedW},
                                                          {"b", cuda::kConvSeedB}, {"dy", cuda::kConvSeedDy},
                                                          {"dx0", cuda::kConvSeedDx0}};
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
