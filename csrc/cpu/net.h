// The CPU iteration executor: a network's layers with all their buffers, run phase by phase in
// isolation (per layer), and as a composed SGD iteration in which gradients are all-reduced from
// a communication thread while backward runs (WFBP) or after it, as the caller's message plan says.
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

// The net's embedding when its data are token ids (a language model), else nullptr; a data input
// that feeds an embedding and another layer at once is refused.
const LayerSpec* token_input(const std::vector<LayerSpec>& specs);

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
                                                 const AllreduceFn& allreduce, MPI_Comm comm, double timeout_s = 0);

  // The composed iteration. `overlap`: messages start as soon as they are ready (WFBP) on the
  // communication thread; otherwise all of them go after backward. `prefetch` runs the next
  // batch's I/O on another thread while this iteration computes; `io` may be empty. With no
  // messages, the phases run in sequence, each stamped: the isolated round.
  std::vector<double> time_iteration(const TimingPlan& plan, const std::vector<Message>& msgs, bool overlap,
                                     const AllreduceFn& allreduce, const std::function<void()>& io,
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
