// The CUDA iteration executor, the twin of cpu/net.h on one GPU per rank: the layers run on the
// compute stream; gradients are all-reduced with NCCL on a communication stream, each message
// after an event that marks its last layer's backward (WFBP), or after the whole backward.
#pragma once
#include <mpi.h>

#include <functional>
#include <memory>
#include <vector>

#include "common/iteration.h"
#include "common/layer_graph.h"
#include "common/timer.h"
#include "cuda/device.h"
#include "cuda/layer.h"

namespace gdl::cuda {

class Net : public LayerGraph<void> {
 public:
  Net(std::vector<LayerSpec> specs, int batch);
  ~Net() override;

  // The passes repeated alone (CUDA events), as the CPU executor's: kept to show the difference
  // from the isolated round (time_iteration without messages).
  std::vector<double> time_forward_pass(const TimingPlan& plan);
  std::vector<double> time_backward_pass(const TimingPlan& plan);
  // Each message alone (NCCL, in place), barrier before each sample, max over ranks.
  // timeout_s > 0 (here and in time_iteration): a watchdog (comm/watchdog.h) ends the job when no
  // sample or iteration makes progress for that long; NCCL waits abort the communicator too.
  std::vector<std::vector<double>> time_messages(const TimingPlan& plan, const std::vector<Message>& msgs,
                                                 MPI_Comm comm, double timeout_s = 0);
  // The composed iteration, host steady clock from the iteration's start to the device finishing
  // its update; max over ranks. io (may be empty) reads the next batch, on a host thread when
  // prefetching. With no messages, the phases run in sequence, each stamped: the isolated round.
  std::vector<double> time_iteration(const TimingPlan& plan, const std::vector<Message>& msgs, bool overlap,
                                     const std::function<void()>& io, bool prefetch, const SgdConfig& sgd,
                                     MPI_Comm comm, IterationTrace* last_trace, double timeout_s = 0);
  // Contention: backward with every message of the plan enqueued on the communication stream as
  // its gradients are ready, as WFBP enqueues them (on the gradients), so both run side by
  // side; stamps of both in `trace`. Returns the span until both are done (host clock), max over
  // ranks. timeout_s > 0: a watchdog ends the job when a round makes no progress that long, and the
  // NCCL waits abort the communicator.
  std::vector<double> time_contention(const std::vector<Message>& msgs, MPI_Comm comm, IterationTrace* trace,
                                      int warmup = 0, double timeout_s = 0);

  void zero_act_grads() override;
  void update(const SgdConfig& sgd);
  void synchronize();
  std::vector<float> grads() const;  // copied to the host
  std::vector<float> params() const;
  float output0() const;              // the loss, when the last layer is one
  void set_param(int64_t i, float v);

 private:
  std::vector<std::unique_ptr<DeviceBuffer>> act_, act_grad_;
  std::unique_ptr<DeviceBuffer> data_, params_, grads_, momentum_;
  float* staging_ = nullptr;  // pinned host copy of the batch (cudaMallocHost)
  struct Labels {             // one set per loss layer (common/fill.h's label_shape), bound to its layer
    std::unique_ptr<DeviceBuffer> device;
    int32_t* host = nullptr;  // pinned; advanced every iteration (advance_labels)
    int count = 0;
    int64_t classes = 1;
  };
  std::vector<Labels> labels_;
  std::size_t data_bytes_ = 0;
  cudaStream_t comm_stream_ = nullptr;
};

}  // namespace gdl::cuda
