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
#include "common/timer.h"
#include "cpu/layer.h"

namespace gdl::cpu {

using gdl::IterationTrace;
using gdl::Message;
using gdl::SgdConfig;

// Sends one message in place (sum over ranks); the executor calls it from its communication thread.
using AllreduceFn = std::function<void(float* data, int64_t count)>;

class Net {
 public:
  Net(std::vector<LayerSpec> specs, int batch);

  int64_t param_count() const { return static_cast<int64_t>(params_.size()); }
  int64_t layer_param_offset(int l) const { return param_offset_.at(l); }
  int layers() const { return static_cast<int>(layers_.size()); }
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
  std::vector<std::vector<double>> time_messages(const TimingPlan& plan, const std::vector<Message>& msgs,
                                                 const AllreduceFn& allreduce, MPI_Comm comm);

  // The composed iteration. `overlap`: messages start as soon as they are ready (WFBP) on the
  // communication thread; otherwise all of them go after backward. `prefetch` runs the next
  // batch's I/O on another thread while this iteration computes; `io` may be empty. With no
  // messages, the phases run in sequence, each stamped: the isolated round.
  std::vector<double> time_iteration(const TimingPlan& plan, const std::vector<Message>& msgs, bool overlap,
                                     const AllreduceFn& allreduce, const std::function<void()>& io,
                                     bool prefetch, const SgdConfig& sgd, MPI_Comm comm,
                                     IterationTrace* last_trace);
  // Contention: every message of the plan posted to the communication thread as backward starts
  // (on a scratch buffer), so both run side by side; stamps of both in `trace`. Returns the
  // span until both are done, max over ranks.
  std::vector<double> time_contention(const std::vector<Message>& msgs, const AllreduceFn& allreduce, MPI_Comm comm,
                                      IterationTrace* trace);

  void forward(const std::function<void(int)>& after_layer = {});
  void zero_act_grads();
  void backward_layers(const std::function<void(int)>& after_layer);
  // Zeroes the activation gradients, then runs every layer's backward, last first, calling
  // after_layer(l) as soon as layer l is done (the composed iteration posts messages there).
  void backward(const std::function<void(int)>& after_layer = {});
  void update(const SgdConfig& sgd);

 private:
  void forward_layer(int l);
  void backward_layer(int l);
  std::vector<const float*> layer_inputs(int l) const;
  std::vector<float*> layer_input_grads(int l);

  int batch_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<std::vector<int>> inputs_;   // producer indices per layer (-1 = data)
  std::vector<std::vector<float>> act_, act_grad_;
  std::vector<float> data_, staging_;     // the input batch, and the host batch it is copied from
  std::vector<int32_t> labels_;
  std::vector<float> params_, grads_, momentum_;
  std::vector<int64_t> param_offset_;
};

}  // namespace gdl::cpu
