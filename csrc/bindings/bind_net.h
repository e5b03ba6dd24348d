// The Python class of an iteration executor (cpu::Net in _core, cuda::Net in _cuda): one binding
// for both, so they keep the same Python interface. The backend supplies how messages are sent.
#pragma once
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "bind_layer_spec.h"
#include "bind_mpi.h"
#include "common/fault.h"
#include "common/iteration.h"
#include "common/timer.h"

namespace gdl::bind {

// Each message (offset, count, ready_after), or for a sharded plan (offset, count, ready_after,
// kind, issued_after, needed_by) with kind 0 all-reduce, 1 reduce-scatter, 2 all-gather
// (common/iteration.h, Message).
using MessageList = std::vector<std::vector<int64_t>>;

inline std::vector<Message> to_messages(const MessageList& v) {
  std::vector<Message> out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const auto& t = v[i];
    GDL_REQUIRE(t.size() == 3 || t.size() == 6, "message ", i, ": (offset, count, ready_after) or (offset, count, "
                "ready_after, kind, issued_after, needed_by), got ", t.size(), " values");
    Message m{t[0], t[1], static_cast<int>(t[2])};
    if (t.size() == 6) {
      GDL_REQUIRE(t[3] >= 0 && t[3] <= 2, "message ", i, ": kind ", t[3], " (0 all-reduce, 1 reduce-scatter, 2 all-gather)");
      m.kind = static_cast<MessageKind>(t[3]);
      m.issued_after = static_cast<int>(t[4]);
      m.needed_by = static_cast<int>(t[5]);
    }
    out.push_back(m);
  }
  return out;
}

inline py::dict trace_dict(const IterationTrace& t) {
  py::dict d;
  d["io_start_us"] = t.io_start;
  d["io_end_us"] = t.io_end;
  d["io_prefetch"] = t.io_prefetch;
  d["io_wait_end_us"] = t.io_wait_end;
  d["h2d_end_us"] = t.h2d_end;
  d["forward_end_us"] = t.forward_end;
  d["zero_end_us"] = t.zero_end;
  d["backward_end_us"] = t.backward_end;
  d["comm_end_us"] = t.comm_end;
  d["update_end_us"] = t.update_end;
  d["layer_forward_end_us"] = t.layer_forward_end;
  d["layer_backward_end_us"] = t.layer_backward_end;
  d["message_ready_us"] = t.message_ready;
  d["message_start_us"] = t.message_start;
  d["message_end_us"] = t.message_end;
  d["end_us"] = t.end > 0 ? t.end : t.update_end;  // the CUDA executor stamps no end of its own
  // Not stamped (the CUDA executor): the update waited for the last message from backward's end.
  std::vector<double> wait = t.message_wait;
  if (wait.empty()) {
    wait.assign(t.message_end.size(), 0.0);
    if (!wait.empty()) wait.back() = std::max(0.0, t.comm_end - t.backward_end);
  }
  d["message_wait_us"] = wait;
  const std::vector<double> none(t.layer_forward_end.size(), 0.0);
  d["layer_forward_wait_us"] = t.layer_forward_wait.empty() ? none : t.layer_forward_wait;
  d["layer_backward_wait_us"] = t.layer_backward_wait.empty() ? none : t.layer_backward_wait;
  return d;
}

// Messages(net, plan, msgs, algo, servers, comm, timeout_s) -> per-message samples;
// Iterate(net, plan, msgs, overlap, algo, servers, comm, io, prefetch, sgd, trace*, timeout_s) -> samples;
// Contend(net, msgs, algo, servers, comm, trace*, warmup) -> samples.
// All run with the GIL released; io takes it back on its own thread.
template <class NetT, class Messages, class Iterate, class Contend>
void bind_net_class(py::module_& m, const char* doc, Messages messages, Iterate iterate, Contend contend) {
  py::class_<NetT>(m, "Net", doc)
      .def(py::init([](const py::list& specs, int batch) {
             std::vector<LayerSpec> v;
             for (auto s : specs) v.push_back(spec_from_dict(s.cast<py::dict>(), batch));
             py::gil_scoped_release nogil;  // buffers are allocated and touched here
             return std::make_unique<NetT>(std::move(v), batch);
           }),
           py::arg("specs"), py::arg("batch"))
      .def_property_readonly("param_count", &NetT::param_count)
      .def("layer_param_offset", &NetT::layer_param_offset, py::arg("layer"))
      .def("forward_backward", [](NetT& n) {
        py::gil_scoped_release nogil;
        n.forward();
        n.backward();
      }, "One untimed forward and backward pass (gradients land in grads()).")
      .def("grads", [](const NetT& n) {
        std::vector<float> g = n.grads();
        // Test-only (common/fault.h): K gradients of the copy made wrong, for the gradient checks' tests.
        for (std::size_t j = 0, k = std::min(fault_count("grads"), g.size()); j < k; ++j) g[j] += 1.0f + std::fabs(g[j]);
        return py::array_t<float>(g.size(), g.data());
      }, "A copy of the flat gradient buffer.")
      .def("params", [](const NetT& n) {
        const std::vector<float> p = n.params();
        return py::array_t<float>(p.size(), p.data());
      }, "A copy of the flat parameter buffer.")
      .def("output", [](const NetT& n) { return n.output0(); }, "The first output of the last layer (the loss).")
      .def("set_param", &NetT::set_param, py::arg("index"), py::arg("value"))
      .def("time_forward_pass", [](NetT& n, int warmup, int iters) {
        py::gil_scoped_release nogil;
        return n.time_forward_pass(TimingPlan{warmup, iters});
      }, py::arg("warmup"), py::arg("iters"), "The whole forward pass: samples (us).")
      .def("time_backward_pass", [](NetT& n, int warmup, int iters) {
        py::gil_scoped_release nogil;
        return n.time_backward_pass(TimingPlan{warmup, iters});
      }, py::arg("warmup"), py::arg("iters"), "The whole backward pass (activation gradients zeroed first): samples (us).")
      .def("time_messages", [messages](NetT& n, const MessageList& msgs, const std::string& algo, int servers,
                                       py::object comm, int warmup, int iters, double timeout_s) {
        const MPI_Comm c = get_comm(comm);
        const auto plan = to_messages(msgs);
        py::gil_scoped_release nogil;
        return messages(n, TimingPlan{warmup, iters}, plan, algo, servers, c, timeout_s);
      }, py::arg("messages"), py::arg("algo"), py::arg("servers"), py::arg("comm"), py::arg("warmup"),
         py::arg("iters"), py::arg("timeout_s") = 0.0,
         "Per message (offset, count, ready_after): samples (us) of sending it alone, max over ranks. "
         "timeout_s > 0: end the job when a sample makes no progress that long.")
      .def("time_iteration", [iterate](NetT& n, const MessageList& msgs, bool overlap, const std::string& algo,
                                       int servers, py::object comm, std::optional<py::function> io, bool prefetch,
                                       int warmup, int iters, float lr, float momentum, float wd, double timeout_s) {
        const MPI_Comm c = get_comm(comm);
        const auto plan = to_messages(msgs);
        std::function<void()> io_fn;
        if (io) io_fn = [f = *io] {
          py::gil_scoped_acquire gil;
          f();
        };
        IterationTrace trace;
        std::vector<double> samples;
        {
          py::gil_scoped_release nogil;
          samples = iterate(n, TimingPlan{warmup, iters}, plan, overlap, algo, servers, c, io_fn, prefetch,
                            SgdConfig{lr, momentum, wd}, &trace, timeout_s);
        }
        return py::make_tuple(samples, trace_dict(trace));
      }, py::arg("messages"), py::arg("overlap"), py::arg("algo"), py::arg("servers"), py::arg("comm"), py::arg("io"),
         py::arg("prefetch"), py::arg("warmup"), py::arg("iters"), py::arg("lr") = 0.01f,
         py::arg("momentum") = 0.9f, py::arg("weight_decay") = 1e-4f, py::arg("timeout_s") = 0.0,
         "The composed iteration: (samples in us, max over ranks; the last iteration's trace on this rank). "
         "No messages: the phases in sequence without communication (the isolated round). timeout_s > 0: "
         "end the job when an iteration makes no progress that long.")
      .def("time_contention", [contend](NetT& n, const MessageList& msgs, const std::string& algo, int servers,
                                        py::object comm, int warmup, double timeout_s) {
        const MPI_Comm c = get_comm(comm);
        const auto plan = to_messages(msgs);
        IterationTrace trace;
        std::vector<double> samples;
        {
          py::gil_scoped_release nogil;
          samples = contend(n, plan, algo, servers, c, &trace, warmup, timeout_s);
        }
        return py::make_tuple(samples, trace_dict(trace));
      }, py::arg("messages"), py::arg("algo"), py::arg("servers"), py::arg("comm"), py::arg("warmup") = 0,
         py::arg("timeout_s") = 0.0,
         "Forward, then backward with each message sent beside it as its gradients are ready (as WFBP "
         "sends them), after `warmup` such rounds: (span in us, max over ranks; the last round's trace). "
         "timeout_s > 0: end the job when a round makes no progress that long.");
}

}  // namespace gdl::bind
