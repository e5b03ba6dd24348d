// The CPU iteration executor: a network's layers with all their buffers, run phase by phase in
// isolation (per layer), and as a composed SGD iteration in which gradients are all-reduced from
// a communication thread while backward runs (WFBP) or after it, as the caller's message plan says;
// or, with a sharded plan (ZeRO-1/2/3, FSDP), reduce-scattered and the parameters all-gathered.
#pragma once
#include <mpi.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/iteration.h"
#include "common/layer_graph.h"
#include "common/timer.h"
#include "cpu/layer.h"

namespace gdl::cpu {

using gdl::IterationTrace;
using gdl::LayerGraph;
using gdl::Message;
using gdl::SgdConfig;

// Sends one message in place (sum over ranks); the executor calls it from its communication thread.
using AllreduceFn = std::function<void(float* data, int64_t count)>;

// The collectives a message plan may use (common/iteration.h, MessageKind), each in place on
// `count` floats: the all-reduce; the reduce-scatter (this rank's block of the sum left at the
// start of buf, comm::reduce_scatter_blocks); the all-gather of every rank's block
// (comm::allgather_blocks). The executor calls them from its communication thread.
struct CommOps {
  AllreduceFn allreduce;
  AllreduceFn reduce_scatter;
  AllreduceFn allgather;
};

class Net : public LayerGraph<float> {
 public:
  Net(std::vector<LayerSpec> specs, int batch);

  const std::vector<float>& grads() const { return grads_; }
  const std::vector<float>& params() const { return params_; }
  float output0() const { return act_.back().at(0); }  // the loss, when the last layer is one
  void set_param(int64_t i, float v) { params_.at(i) = v; }

  // The whole forward pass, and the whole backward pass (zeroing included) after one forward,
  // each repeated alone: not the state the iteration runs them in (its isolated round is
  // time_iteration without messages); kept to show the difference.
  std::vector<double> time_forward_pass(const TimingPlan& plan);
  std::vector<double> time_backward_pass(const TimingPlan& plan);
  // Each message of the plan sent alone, with a barrier before every sample; max over ranks.
  // timeout_s > 0 (here and in time_iteration): a watchdog (comm/watchdog.h) ends the job when
  // no sample or iteration makes progress for that long (a dead or hung peer).
  std::vector<std::vector<double>> time_messages(const TimingPlan& plan, const std::vector<Message>& msgs,
                                                 const CommOps& ops, MPI_Comm comm, double timeout_s = 0);

  // The composed iteration. `overlap`: messages start as soon as they are ready (WFBP) on the
  // communication thread; otherwise all of them go after backward. `prefetch` runs the next
  // batch's I/O on another thread while this iteration computes; `io` may be empty. With no
  // messages, the phases run in sequence, each stamped: the isolated round. A sharded plan (its
  // messages reduce-scatters and all-gathers, common/iteration.h) runs as time_sharded says.
  std::vector<double> time_iteration(const TimingPlan& plan, const std::vector<Message>& msgs, bool overlap,
                                     const CommOps& ops, const std::function<void()>& io,
                                     bool prefetch, const SgdConfig& sgd, MPI_Comm comm,
                                     IterationTrace* last_trace, double timeout_s = 0);
  // Contention: backward with every message of the plan posted to the communication thread as
  // its gradients are ready, as WFBP posts them (on the gradients, no update or I/O), so
  // both run side by side; stamps of both in `trace`. Returns the span until both are done, max
  // over ranks. timeout_s > 0: the watchdog ends the job when a round makes no progress that long.
  std::vector<double> time_contention(const std::vector<Message>& msgs, const AllreduceFn& allreduce, MPI_Comm comm,
                                      IterationTrace* trace, int warmup = 0, double timeout_s = 0);

  void zero_act_grads() override;
  void update(const SgdConfig& sgd);

 private:
  // The composed iteration of a sharded plan (ZeRO-1/2/3, FSDP). Each message is posted to the
  // communication thread once its issued_after compute tasks are done; a compute task waits for
  // the all-gather it needs (its wait stamped), the update for the last reduce-scatter. Each
  // reduce-scatter, in place on the gradients, leaves this rank's block of the sum at the start of
  // its range; the update runs SGD on this rank's block of each range only (its parameters and
  // momentum, that reduced gradient block); all-gathers refill the parameters from their owners.
  // Storage stays full-size (every rank keeps every parameter, gradient and momentum value): what
  // is timed is the strategy's real communication and update volume, not its memory
  // (gdlbench.model.memory models that).
  std::vector<double> time_sharded(const TimingPlan& plan, const std::vector<Message>& msgs, const CommOps& ops,
                                   const std::function<void()>& io, bool prefetch, const SgdConfig& sgd,
                                   MPI_Comm comm, IterationTrace* last_trace);
  void send(const Message& m, const CommOps& ops);  // one message, as its kind says
  void copy_batch();  // the batch into the input buffer, and its labels advanced (the h2d phase)
  void update_shard(const std::vector<Message>& msgs, const SgdConfig& sgd, int rank, int ranks);
  std::vector<int64_t> layer_param_counts() const;

  std::vector<std::vector<float>> act_, act_grad_;
  std::vector<float> data_, staging_;     // the input batch, and the host batch it is copied from
  struct Labels {
    std::vector<int32_t> values;  // advanced every iteration (advance_labels)
    int64_t classes;
  };
  std::vector<Labels> labels_;  // one set per loss layer, bound to its layer (a move keeps the values' storage)
  std::vector<float> params_, grads_, momentum_;
};

}  // namespace gdl::cpu
