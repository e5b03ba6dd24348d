// gdlbench._core.Net: the CPU iteration executor (cpu/net.h); messages go through comm::allreduce
// (the MPI library's or gdlbench's own algorithms) from the executor's communication thread.
#include "bind_core.h"
#include "bind_net.h"
#include "comm/allreduce.h"
#include "cpu/net.h"

namespace py = pybind11;

namespace gdl::bind {
namespace {

// Sum over ranks, in place, on `comm`.
cpu::AllreduceFn allreduce_for(const std::string& algo, int servers, MPI_Comm comm) {
  const comm::Algo a = comm::parse_algo(algo);
  comm::AllreduceOptions opt;
  opt.servers = servers;
  return [a, opt, comm](float* data, int64_t count) {
    comm::allreduce(a, data, static_cast<std::size_t>(count), comm::DType::f32, comm::Op::sum, comm, opt);
  };
}

// A duplicate of a communicator for one call (collective): the communication thread gets its own,
// since the algorithms use fixed tags.
struct DupComm {
  MPI_Comm comm = MPI_COMM_NULL;
  explicit DupComm(MPI_Comm c) { MPI_Comm_dup(c, &comm); }
  ~DupComm() { MPI_Comm_free(&comm); }
};

}  // namespace

void bind_net(py::module_& m) {
  bind_net_class<cpu::Net>(
      m, "A network's CPU layers with every buffer, timed per phase and composed.",
      [](cpu::Net& n, const TimingPlan& plan, const std::vector<Message>& msgs, const std::string& algo, int servers,
         MPI_Comm c, double timeout_s) {
        return n.time_messages(plan, msgs, allreduce_for(algo, servers, c), c, timeout_s);
      },
      [](cpu::Net& n, const TimingPlan& plan, const std::vector<Message>& msgs, bool overlap, const std::string& algo,
         int servers, MPI_Comm c, const std::function<void()>& io, bool prefetch, const SgdConfig& sgd,
         IterationTrace* trace, double timeout_s) {
        const DupComm comm_thread(c);
        return n.time_iteration(plan, msgs, overlap, allreduce_for(algo, servers, comm_thread.comm), io, prefetch, sgd,
                                c, trace, timeout_s);
      },
      [](cpu::Net& n, const std::vector<Message>& msgs, const std::string& algo, int servers, MPI_Comm c,
         IterationTrace* trace, int warmup) {
        const DupComm comm_thread(c);
        return n.time_contention(msgs, allreduce_for(algo, servers, comm_thread.comm), c, trace, warmup);
      });
}

}  // namespace gdl::bind
