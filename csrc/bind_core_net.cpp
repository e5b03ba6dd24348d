// gdlbench._core.Net: the CPU iteration executor (cpu/net.h) for Python. Every call releases the
// GIL; the optional I/O callback takes it back on its own thread only.
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include "bind_core.h"
#include "bind_core_layer.h"
#include "comm/allreduce.h"
#include "cpu/net.h"

namespace py = pybind11;

namespace gdl::bind {
namespace {

std::vector<cpu::Message> to_messages(const std::vector<std::tuple<int64_t, int64_t, int>>& v) {
  std::vector<cpu::Message> out;
  for (const auto& [offset, count, ready_after] : v) out.push_back({offset, count, ready_after});
  return out;
}

// The all-reduce a message plan is sent with: sum over ranks, in place, on `comm` (the caller
// gives the communication thread a communicator of its own: the algorithms use fixed tags).
cpu::AllreduceFn allreduce_for(const std::string& algo, int servers, MPI_Comm comm) {
  const comm::Algo a = comm::parse_algo(algo);
  comm::AllreduceOptions opt;
  opt.servers = servers;
  return [a, opt, comm](float* data, int64_t count) {
    comm::allreduce(a, data, static_cast<std::size_t>(count), comm::DType::f32, comm::Op::sum, comm, opt);
  };
}

// A duplicate of a communicator for the lifetime of one call (MPI_Comm_dup is collective).
struct DupComm {
  MPI_Comm comm = MPI_COMM_NULL;
  explicit DupComm(MPI_Comm c) { MPI_Comm_dup(c, &comm); }
  ~DupComm() { MPI_Comm_free(&comm); }
};

cpu::SgdConfig sgd_config(float lr, float momentum, float wd) { return cpu::SgdConfig{lr, momentum, wd}; }

py::dict trace_dict(const cpu::IterationTrace& t) {
  py::dict d;
  d["io_wait_end_us"] = t.io_wait_end;
  d["h2d_end_us"] = t.h2d_end;
  d["forward_end_us"] = t.forward_end;
  d["backward_end_us"] = t.backward_end;
  d["comm_end_us"] = t.comm_end;
  d["update_end_us"] = t.update_end;
  d["layer_backward_end_us"] = t.layer_backward_end;
  d["message_start_us"] = t.message_start;
  d["message_end_us"] = t.message_end;
  return d;
}

}  // namespace

void bind_net(py::module_& m) {
  using Plan = TimingPlan;
  using MsgList = std::vector<std::tuple<int64_t, int64_t, int>>;
  py::class_<cpu::Net>(m, "Net", "A network's CPU layers with every buffer, timed per phase and composed.")
      .def(py::init([](const py::list& specs, int batch) {
             std::vector<LayerSpec> v;
             for (auto s : specs) v.push_back(spec_from_dict(s.cast<py::dict>(), batch));
             py::gil_scoped_release nogil;  // buffers are allocated and touched here
             return std::make_unique<cpu::Net>(std::move(v), batch);
           }),
           py::arg("specs"), py::arg("batch"))
      .def_property_readonly("param_count", &cpu::Net::param_count)
      .def("layer_param_offset", &cpu::Net::layer_param_offset, py::arg("layer"))
      .def("forward_backward", [](cpu::Net& n) {
        py::gil_scoped_release nogil;
        n.forward();
        n.backward();
      }, "One untimed forward and backward pass (gradients land in grads()).")
      .def("grads", [](const cpu::Net& n) { return py::array_t<float>(n.grads().size(), n.grads().data()); },
           "A copy of the flat gradient buffer.")
      .def("params", [](const cpu::Net& n) { return py::array_t<float>(n.params().size(), n.params().data()); },
           "A copy of the flat parameter buffer.")
      .def("time_forward", [](cpu::Net& n, int warmup, int iters) {
        py::gil_scoped_release nogil;
        return n.time_forward(Plan{warmup, iters});
      }, py::arg("warmup"), py::arg("iters"), "Per layer: forward samples (us), each layer alone.")
      .def("time_backward", [](cpu::Net& n, int warmup, int iters) {
        py::gil_scoped_release nogil;
        return n.time_backward(Plan{warmup, iters});
      }, py::arg("warmup"), py::arg("iters"), "Per layer: backward (weights + data) samples (us).")
      .def("time_update", [](cpu::Net& n, int warmup, int iters, float lr, float momentum, float wd) {
        py::gil_scoped_release nogil;
        return n.time_update(Plan{warmup, iters}, sgd_config(lr, momentum, wd));
      }, py::arg("warmup"), py::arg("iters"), py::arg("lr") = 0.01f, py::arg("momentum") = 0.9f,
         py::arg("weight_decay") = 1e-4f)
      .def("time_h2d", [](cpu::Net& n, int warmup, int iters) {
        py::gil_scoped_release nogil;
        return n.time_h2d(Plan{warmup, iters});
      }, py::arg("warmup"), py::arg("iters"))
      .def("time_messages", [](cpu::Net& n, const MsgList& msgs, const std::string& algo, int servers,
                               py::object comm, int warmup, int iters) {
        const MPI_Comm c = get_comm(comm);
        const auto fn = allreduce_for(algo, servers, c);
        const auto plan = to_messages(msgs);
        py::gil_scoped_release nogil;
        return n.time_messages(Plan{warmup, iters}, plan, fn, c);
      }, py::arg("messages"), py::arg("algo"), py::arg("servers"), py::arg("comm"), py::arg("warmup"),
         py::arg("iters"), "Per message (offset, count, ready_after): samples (us) of sending it alone, max over ranks.")
      .def("time_iteration", [](cpu::Net& n, const MsgList& msgs, bool overlap, const std::string& algo,
                                int servers, py::object comm, std::optional<py::function> io, bool prefetch,
                                int warmup, int iters, float lr, float momentum, float wd) {
        const MPI_Comm c = get_comm(comm);
        const DupComm comm_thread_comm(c);
        const auto fn = allreduce_for(algo, servers, comm_thread_comm.comm);
        const auto plan = to_messages(msgs);
        std::function<void()> io_fn;
        if (io) io_fn = [f = *io] {
          py::gil_scoped_acquire gil;
          f();
        };
        cpu::IterationTrace trace;
        std::vector<double> samples;
        {
          py::gil_scoped_release nogil;
          samples = n.time_iteration(Plan{warmup, iters}, plan, overlap, fn, io_fn, prefetch,
                                     sgd_config(lr, momentum, wd), c, &trace);
        }
        return py::make_tuple(samples, trace_dict(trace));
      }, py::arg("messages"), py::arg("overlap"), py::arg("algo"), py::arg("servers"), py::arg("comm"), py::arg("io"),
         py::arg("prefetch"), py::arg("warmup"), py::arg("iters"), py::arg("lr") = 0.01f,
         py::arg("momentum") = 0.9f, py::arg("weight_decay") = 1e-4f,
         "The composed iteration: (samples in us, max over ranks; the last iteration's trace on this rank).");
}

}  // namespace gdl::bind
