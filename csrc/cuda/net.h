// The CUDA iteration executor, the twin of cpu/net.h on one GPU per rank: the layers run on the
// compute stream; gradients are all-reduced with NCCL on a communication stream, each message
// after an event that marks its last layer's backward (WFBP), or after the whole backward.
#pragma once
#include <mpi.h>

#include <functional>
#include <memory>
#include <vector>

#include "common/iteration.h"
#include "common/timer.h"
#include "cuda/device.h"
#include "cuda/layer.h"

namespace gdl::cuda {

class Net {
 public:
  Net(std::vector<LayerSpec> specs, int batch);
  ~Net();
  Net(const Net&) = delete;
  Net& operator=(const Net&) = delete;

  int64_t param_count() const { return param_count_; }
  int64_t layer_param_offset(int l) const { return param_offset_.at(l); }
  int layers() const { return static_cast<int>(layers_.size()); }

  // The passes repeated alone (CUDA events), as the CPU executor's: kept to show the difference
  // from the isolated round (time_iteration without messages).
  std::vector<double> time_forward_pass(const TimingPlan& plan);
  std::vector<double> time_backward_pass(const TimingPlan& plan);
  // Each message alone (NCCL, in place), barrier before each sample, max over ranks.
  std::vector<std::vector<double>> time_messages(const TimingPlan& plan, const std::vector<Message>& msgs,
                                                 MPI_Comm comm);
  // The composed iteration, host steady clock from the iteration's start to the device finishing
  // its update; max over ranks. io (may be empty) reads the next batch, on a host thread when
  // prefetching. With no messages, the phases run in sequence, each stamped: the isolated round.
  std::vector<double> time_iteration(const TimingPlan& plan, const std::vector<Message>& msgs, bool overlap,
                                     const std::function<void()>& io, bool prefetch, const SgdConfig& sgd,
                                     MPI_Comm comm, IterationTrace* last_trace);
  // Contention: every message of the plan enqueued on the communication stream as backward starts
  // (on a scratch buffer), so both run side by side; stamps of both in `trace`. Returns the span
  // until both are done (host clock), max over ranks.
  std::vector<double> time_contention(const std::vector<Message>& msgs, MPI_Comm comm, IterationTrace* trace);

  void forward(const std::function<void(int)>& after_layer = {});
  void zero_act_grads();
  void backward_layers(const std::function<void(int)>& after_layer);
  void backward(const std::function<void(int)>& after_layer = {});
  void update(const SgdConfig& sgd);
  void synchronize();
  std::vector<float> grads() const;  // copied to the host
  std::vector<float> params() const;
  float output0() const;              // the loss, when the last layer is one
  void set_param(int64_t i, float v);

 private:
  void forward_layer(int l);
  void backward_layer(int l);
  std::vector<const void*> layer_inputs(int l) const;
  std::vector<void*> layer_input_grads(int l);

  int batch_;
  int64_t param_count_ = 0;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<std::vector<int>> inputs_;
  std::vector<std::unique_ptr<DeviceBuffer>> act_, act_grad_;
  std::unique_ptr<DeviceBuffer> data_, params_, grads_, momentum_, labels_;
  float* staging_ = nullptr;  // pinned host copy of the batch (cudaMallocHost)
  std::size_t data_bytes_ = 0;
  std::vector<int64_t> param_offset_;
  cudaStream_t comm_stream_ = nullptr;
};

}  // namespace gdl::cuda
