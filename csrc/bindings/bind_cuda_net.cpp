// gdlbench._cuda.Net: the CUDA iteration executor (cuda/net.h); messages are ncclAllReduce calls
// on the executor's communication stream.
#include "bind_cuda.h"
#include "bind_net.h"
#include "cuda/net.h"

namespace py = pybind11;

namespace gdl::bind {
namespace {
void require_nccl(const std::string& algo) {
  GDL_REQUIRE(algo == "library" || algo == "nccl", "the CUDA executor sends messages with NCCL's all-reduce; "
              "algorithm '", algo, "' runs on the CPU executor only");
}
}  // namespace

void bind_cuda_net(py::module_& m) {
  bind_net_class<cuda::Net>(
      m, "A network's CUDA layers with every device buffer, timed per phase and composed.",
      [](cuda::Net& n, const TimingPlan& plan, const std::vector<Message>& msgs, const std::string& algo, int,
         MPI_Comm c, double timeout_s) {
        require_nccl(algo);
        return n.time_messages(plan, msgs, c, timeout_s);
      },
      [](cuda::Net& n, const TimingPlan& plan, const std::vector<Message>& msgs, bool overlap, const std::string& algo,
         int, MPI_Comm c, const std::function<void()>& io, bool prefetch, const SgdConfig& sgd,
         IterationTrace* trace, double timeout_s) {
        require_nccl(algo);
        return n.time_iteration(plan, msgs, overlap, io, prefetch, sgd, c, trace, timeout_s);
      },
      [](cuda::Net& n, const std::vector<Message>& msgs, const std::string& algo, int, MPI_Comm c,
         IterationTrace* trace, int warmup, double timeout_s) {
        require_nccl(algo);
        return n.time_contention(msgs, c, trace, warmup, timeout_s);
      });
}

}  // namespace gdl::bind
