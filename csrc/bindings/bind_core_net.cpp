// gdlbench._core.Net: the CPU iteration executor (cpu/net.h); messages go through comm::allreduce
// (the MPI library's or gdlbench's own algorithms), or a sharded plan's through the library's
// reduce-scatter and all-gather (comm::reduce_scatter_blocks, allgather_blocks), from the
// executor's communication thread.
#include "bind_core.h"
#include "bind_net.h"
#include "comm/allreduce.h"
#include "comm/comm_attribute.h"
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

// Every collective a plan may use (cpu::CommOps): the all-reduce `algo`, the library's
// reduce-scatter and all-gather of a sharded plan.
cpu::CommOps ops_for(const std::string& algo, int servers, MPI_Comm comm) {
  cpu::CommOps ops;
  ops.allreduce = allreduce_for(algo, servers, comm);
  ops.reduce_scatter = [comm](float* buf, int64_t count) {
    comm::reduce_scatter_blocks(buf, static_cast<std::size_t>(count), comm::DType::f32, comm::Op::sum, comm);
  };
  ops.allgather = [comm](float* buf, int64_t count) {
    comm::allgather_blocks(buf, static_cast<std::size_t>(count), comm::DType::f32, comm);
  };
  return ops;
}

// The messages' communicator: a duplicate of `parent` (the algorithms use fixed tags, and the main
// thread calls MPI on `parent` between iterations), made on first use and kept on `parent` (an MPI
// attribute, freed with it). One for the whole run, shared by the messages alone, the contention
// rounds and every composed iteration, as a training job's lives for all its iterations: MPICH
// picks a communicator's intra-node all-reduce by how many collectives it has made (release-gather
// after MPIR_CVAR_POSIX_NUM_COLLS_THRESHOLD), and a duplicate per call stayed below the threshold
// while the messages alone ran past it (a 26 MiB all-reduce on 2 ranks: about 7 ms against 16 ms).
struct MessageComm {
  MPI_Comm comm = MPI_COMM_NULL;
  ~MessageComm() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
  }
};

MPI_Comm message_comm(MPI_Comm parent) {
  static comm::CommAttribute<MessageComm> attached;
  if (const MessageComm* m = attached.get(parent)) return m->comm;
  auto m = std::make_unique<MessageComm>();
  const int rc = MPI_Comm_dup(parent, &m->comm);
  if (rc != MPI_SUCCESS) GDL_FAIL("MPI_Comm_dup failed (", rc, ")");
  return attached.set(parent, std::move(m)).comm;
}

}  // namespace

void bind_net(py::module_& m) {
  bind_net_class<cpu::Net>(
      m, "A network's CPU layers with every buffer, timed per phase and composed.",
      [](cpu::Net& n, const TimingPlan& plan, const std::vector<Message>& msgs, const std::string& algo, int servers,
         MPI_Comm c, double timeout_s) {
        return n.time_messages(plan, msgs, ops_for(algo, servers, message_comm(c)), c, timeout_s);
      },
      [](cpu::Net& n, const TimingPlan& plan, const std::vector<Message>& msgs, bool overlap, const std::string& algo,
         int servers, MPI_Comm c, const std::function<void()>& io, bool prefetch, const SgdConfig& sgd,
         IterationTrace* trace, double timeout_s) {
        return n.time_iteration(plan, msgs, overlap, ops_for(algo, servers, message_comm(c)), io, prefetch, sgd,
                                c, trace, timeout_s);
      },
      [](cpu::Net& n, const std::vector<Message>& msgs, const std::string& algo, int servers, MPI_Comm c,
         IterationTrace* trace, int warmup, double timeout_s) {
        return n.time_contention(msgs, allreduce_for(algo, servers, message_comm(c)), c, trace, warmup, timeout_s);
      });
}

}  // namespace gdl::bind
