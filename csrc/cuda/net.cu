#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

#include "comm/timed.h"
#include "cuda/cuda_timer.h"
#include "cuda/net.h"
#include "cuda/nccl.h"
#include "cuda/sgd.h"

namespace gdl::cuda {
namespace {

using clock_type = std::chrono::steady_clock;

std::unique_ptr<DeviceBuffer> floats(int64_t n) {
  return std::make_unique<DeviceBuffer>(static_cast<std::size_t>(std::max<int64_t>(n, 1)) * sizeof(float));
}

// Events created once and destroyed with the owner.
struct EventPool {
  std::vector<cudaEvent_t> ev;
  explicit EventPool(std::size_t n) : ev(n) {
    for (auto& e : ev) CUDA_CHECK(cudaEventCreate(&e));
  }
  ~EventPool() {
    for (auto e : ev) cudaEventDestroy(e);
  }
  cudaEvent_t operator[](std::size_t i) const { return ev[i]; }
};

double elapsed_us(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0.f;
  CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  return 1000.0 * ms;
}

}  // namespace

namespace {
// The executor's convolutions search their algorithms when the net is built, once per shape (as a
// framework with cudnn.benchmark does before its first iteration), unless a spec names its mode.
std::vector<LayerSpec>& searching(std::vector<LayerSpec>& specs) {
  for (auto& s : specs)
    if (s.type == "conv" && !s.attrs.count("algo_mode")) s.attrs["algo_mode"] = 1;
  return specs;
}

}  // namespace

Net::Net(std::vector<LayerSpec> specs, int batch) : LayerGraph(searching(specs), batch, make_layer) {
  const cudaStream_t s = context().stream;
  data_bytes_ = static_cast<std::size_t>(batch) * numel(specs.front().in_shapes.at(0)) * sizeof(float);
  data_ = std::make_unique<DeviceBuffer>(data_bytes_);
  CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&staging_), data_bytes_));
  // Token ids stay exact: the data buffer is float32 (integers exact below 2^24), as every CUDA
  // layer's data. A half-precision executor must keep a token net's data float32 all the same
  // (fp16 holds integers exactly only up to 2048, bf16 up to 256).
  if (const LayerSpec* embedding = token_input(specs))
    fill_token_ids(staging_, static_cast<int64_t>(data_bytes_ / sizeof(float)),
                   static_cast<int64_t>(embedding->attr("vocab")));
  else
    for (std::size_t i = 0; i < data_bytes_ / sizeof(float); ++i) staging_[i] = fill_value(3, i);
  CUDA_CHECK(cudaMemcpyAsync(data_->data(), staging_, data_bytes_, cudaMemcpyHostToDevice, s));
  for (auto& layer : layers_) {
    act_.push_back(floats(layer->out_count()));
    act_grad_.push_back(floats(layer->out_count()));
    CUDA_CHECK(cudaMemsetAsync(act_.back()->data(), 0, act_.back()->nbytes(), s));
    CUDA_CHECK(cudaMemsetAsync(act_grad_.back()->data(), 0, act_grad_.back()->nbytes(), s));
  }
  fill(act_grad_.back()->data(), layers_.back()->out_count(), DType::f32, 9);  // dL/dy of the last layer
  const auto host_params = initial_params(specs, param_count_);  // the CPU executor's values
  params_ = floats(param_count_);
  grads_ = floats(param_count_);
  momentum_ = floats(param_count_);
  CUDA_CHECK(cudaMemcpyAsync(params_->data(), host_params.data(), host_params.size() * sizeof(float),
                             cudaMemcpyHostToDevice, s));
  CUDA_CHECK(cudaMemsetAsync(grads_->data(), 0, grads_->nbytes(), s));
  CUDA_CHECK(cudaMemsetAsync(momentum_->data(), 0, momentum_->nbytes(), s));
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    auto* p = static_cast<float*>(params_->data()) + param_offset_[l];
    auto* g = static_cast<float*>(grads_->data()) + param_offset_[l];
    layers_[l]->bind_params(p, g, sizeof(float));
  }
  tie_weights();
  for (std::size_t l = 0; l < layers_.size(); ++l) {  // each loss layer its own labels (fill.h)
    if (specs[l].type != "softmax_xent") continue;
    const LabelShape shape = label_shape(specs[l]);
    const auto values = test_labels(static_cast<int>(shape.count(batch)), shape.classes);
    Labels lab;
    lab.count = static_cast<int>(values.size());
    lab.classes = shape.classes;
    lab.device = std::make_unique<DeviceBuffer>(std::max<std::size_t>(values.size(), 1) * sizeof(int32_t));
    CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&lab.host), std::max<std::size_t>(values.size(), 1) * sizeof(int32_t)));
    labels_.push_back(std::move(lab));  // owned by labels_ before anything else can throw
    Labels& mine = labels_.back();
    std::copy(values.begin(), values.end(), mine.host);
    CUDA_CHECK(cudaMemcpyAsync(mine.device->data(), mine.host, values.size() * sizeof(int32_t), cudaMemcpyHostToDevice, s));
    layers_[l]->set_labels(static_cast<const int32_t*>(mine.device->data()));
  }
  std::vector<void*> outputs, output_grads;
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    outputs.push_back(act_[l]->data());
    output_grads.push_back(act_grad_[l]->data());
  }
  place(data_->data(), std::move(outputs), std::move(output_grads));
  CUDA_CHECK(cudaStreamCreateWithFlags(&comm_stream_, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamSynchronize(s));  // host_params leaves scope after this
}

Net::~Net() {
  if (comm_stream_) cudaStreamDestroy(comm_stream_);
  if (staging_) cudaFreeHost(staging_);
  for (auto& l : labels_)
    if (l.host) cudaFreeHost(l.host);
}

void Net::zero_act_grads() {
  const cudaStream_t s = context().stream;
  for (int l = 0; l + 1 < layers(); ++l) CUDA_CHECK(cudaMemsetAsync(act_grad_[l]->data(), 0, act_grad_[l]->nbytes(), s));
}

void Net::update(const SgdConfig& c) {
  sgd_update(static_cast<float*>(params_->data()), static_cast<const float*>(grads_->data()),
             static_cast<float*>(momentum_->data()), param_count_, c.lr, c.momentum, c.weight_decay, context().stream);
}

void Net::synchronize() { CUDA_CHECK(cudaStreamSynchronize(context().stream)); }

std::vector<float> Net::grads() const {
  std::vector<float> h(param_count_);
  copy_now(h.data(), grads_->data(), h.size() * sizeof(float));
  return h;
}

std::vector<float> Net::params() const {
  std::vector<float> h(param_count_);
  copy_now(h.data(), params_->data(), h.size() * sizeof(float));
  return h;
}

float Net::output0() const {
  float v = 0.f;
  copy_now(&v, act_.back()->data(), sizeof(float));
  return v;
}

void Net::set_param(int64_t i, float v) {
  GDL_REQUIRE(i >= 0 && i < param_count_, "parameter ", i, " out of range");
  copy_now(static_cast<float*>(params_->data()) + i, &v, sizeof(float));
}

std::vector<double> Net::time_forward_pass(const TimingPlan& plan) {
  return time_events(plan, context().stream, [&] { forward(); });
}

std::vector<double> Net::time_backward_pass(const TimingPlan& plan) {
  forward();
  return time_events(plan, context().stream, [&] { backward(); });
}

std::vector<std::vector<double>> Net::time_messages(const TimingPlan& plan, const std::vector<Message>& msgs,
                                                    MPI_Comm comm, double timeout_s) {
  messages_by_layer(msgs, param_count_, layers());
  // Armed before the NCCL communicator is built (an MPI_Bcast and NCCL's own set-up): a peer that
  // never joins ends the job, not hangs it. time_each_message arms its own inside this one.
  comm::Watchdog::Scope watchdog(timeout_s, "a message's ncclAllReduce");
  ncclComm_t nc = nccl_comm(comm, timeout_s);
  auto* g = static_cast<float*>(grads_->data());
  return comm::time_each_message(plan, msgs.size(), comm, timeout_s, "a message's ncclAllReduce", [&](std::size_t i) {
    const auto& m = msgs[i];
    nccl_issued(ncclAllReduce(g + m.offset, g + m.offset, static_cast<std::size_t>(m.count), ncclFloat, ncclSum, nc,
                              comm_stream_), nc, timeout_s, "ncclAllReduce");
    nccl_wait(nc, comm_stream_, timeout_s, "ncclAllReduce");
  });
}

namespace {

// The events of one traced iteration: start, h2d end, per layer forward end, zeroing end, per
// layer backward end, per message ready / start / end, comm done, update end.
struct IterationEvents {
  int L;
  std::size_t M;
  EventPool ev;
  IterationEvents(int layers, std::size_t messages) : L(layers), M(messages), ev(5 + 2 * layers + 3 * messages) {}
  cudaEvent_t start() const { return ev[0]; }
  cudaEvent_t h2d() const { return ev[1]; }
  cudaEvent_t zero() const { return ev[2]; }
  cudaEvent_t comm() const { return ev[3]; }
  cudaEvent_t update() const { return ev[4]; }
  cudaEvent_t forward(int l) const { return ev[5 + l]; }
  cudaEvent_t backward(int l) const { return ev[5 + L + l]; }
  cudaEvent_t ready(std::size_t i) const { return ev[5 + 2 * L + 3 * i]; }
  cudaEvent_t msg_start(std::size_t i) const { return ev[5 + 2 * L + 3 * i + 1]; }
  cudaEvent_t msg_end(std::size_t i) const { return ev[5 + 2 * L + 3 * i + 2]; }

  // Device times from the start event, after the device is done with them.
  void read(IterationTrace& t, bool updated) const {
    CUDA_CHECK(cudaDeviceSynchronize());
    const auto since = [&](cudaEvent_t e) { return elapsed_us(start(), e); };
    t.h2d_end = since(h2d());
    t.layer_forward_end.resize(L);
    t.layer_backward_end.resize(L);
    for (int l = 0; l < L; ++l) {
      t.layer_forward_end[l] = since(forward(l));
      t.layer_backward_end[l] = since(backward(l));
    }
    t.forward_end = L ? t.layer_forward_end[L - 1] : t.h2d_end;
    t.zero_end = since(zero());
    t.backward_end = L ? t.layer_backward_end[0] : t.zero_end;
    t.message_ready.clear();
    t.message_start.clear();
    t.message_end.clear();
    for (std::size_t i = 0; i < M; ++i) {
      t.message_ready.push_back(since(ready(i)));
      t.message_start.push_back(since(msg_start(i)));
      t.message_end.push_back(since(msg_end(i)));
    }
    t.comm_end = std::max(t.backward_end, since(comm()));
    t.update_end = updated ? since(update()) : t.comm_end;
  }
};

// Sends message i of the plan from buffer g on the communication stream once the compute stream
// reaches this point, with events around it.
void send_message(const IterationEvents& ev, std::size_t i, const Message& m, float* g, ncclComm_t nc,
                  cudaStream_t s, cudaStream_t comm_stream, double timeout_s) {
  CUDA_CHECK(cudaEventRecord(ev.ready(i), s));
  CUDA_CHECK(cudaStreamWaitEvent(comm_stream, ev.ready(i), 0));
  CUDA_CHECK(cudaEventRecord(ev.msg_start(i), comm_stream));
  nccl_issued(ncclAllReduce(g + m.offset, g + m.offset, static_cast<std::size_t>(m.count), ncclFloat, ncclSum, nc,
                            comm_stream), nc, timeout_s, "ncclAllReduce");
  CUDA_CHECK(cudaEventRecord(ev.msg_end(i), comm_stream));
}

}  // namespace

std::vector<double> Net::time_iteration(const TimingPlan& plan, const std::vector<Message>& msgs, bool overlap,
                                        const std::function<void()>& io, bool prefetch, const SgdConfig& sgd,
                                        MPI_Comm comm, IterationTrace* last_trace, double timeout_s) {
  validate(plan);
  const auto ready_at = messages_by_layer(msgs, param_count_, layers());
  const cudaStream_t s = context().stream;
  comm::Watchdog::Scope watchdog(timeout_s, "the composed iteration");
  ncclComm_t nc = msgs.empty() ? nullptr : nccl_comm(comm, timeout_s);
  auto* g = static_cast<float*>(grads_->data());
  const IterationEvents ev(layers(), msgs.size());
  auto send = [&](std::size_t i) { send_message(ev, i, msgs[i], g, nc, s, comm_stream_, timeout_s); };

  std::vector<double> samples;
  double io_wait_us = 0;
  BatchLoader loader(io, prefetch);
  clock_type::time_point t0;
  for (int it = 0; it < plan.warmup + plan.iters; ++it) {
    CUDA_CHECK(cudaDeviceSynchronize());
    comm::Watchdog::kick();
    MPI_Barrier(comm);
    t0 = clock_type::now();
    CUDA_CHECK(cudaEventRecord(ev.start(), s));
    loader.next();
    io_wait_us = std::chrono::duration<double, std::micro>(clock_type::now() - t0).count();
    CUDA_CHECK(cudaMemcpyAsync(data_->data(), staging_, data_bytes_, cudaMemcpyHostToDevice, s));
    // A new batch's labels (advance_labels); the last copy of them ended with the last iteration.
    for (auto& l : labels_) {
      advance_labels(l.host, l.count, l.classes);
      CUDA_CHECK(cudaMemcpyAsync(l.device->data(), l.host, l.count * sizeof(int32_t), cudaMemcpyHostToDevice, s));
    }
    CUDA_CHECK(cudaEventRecord(ev.h2d(), s));
    forward([&](int l) { CUDA_CHECK(cudaEventRecord(ev.forward(l), s)); });
    zero_act_grads();
    CUDA_CHECK(cudaEventRecord(ev.zero(), s));
    backward_layers([&](int l) {
      CUDA_CHECK(cudaEventRecord(ev.backward(l), s));
      if (overlap)
        for (int i : ready_at[l]) send(static_cast<std::size_t>(i));
    });
    if (!overlap)
      for (std::size_t i = 0; i < msgs.size(); ++i) send(i);
    CUDA_CHECK(cudaEventRecord(ev.comm(), comm_stream_));
    CUDA_CHECK(cudaStreamWaitEvent(s, ev.comm(), 0));  // the update needs every reduced gradient
    update(sgd);
    CUDA_CHECK(cudaEventRecord(ev.update(), s));
    if (nc) nccl_wait(nc, s, timeout_s, "the iteration's all-reduces");  // the update waited for them on s
    else CUDA_CHECK(cudaEventSynchronize(ev.update()));
    const double us = std::chrono::duration<double, std::micro>(clock_type::now() - t0).count();
    if (it >= plan.warmup) samples.push_back(us);
  }
  loader.wait();
  comm::Watchdog::kick();
  comm::max_over_ranks(samples, comm);
  if (last_trace) {
    IterationTrace trace;
    ev.read(trace, true);
    trace.io_wait_end = io_wait_us;  // host clock: the device's start event follows t0 at once
    loader.stamp(trace, t0);
    *last_trace = trace;
  }
  return samples;
}

std::vector<double> Net::time_contention(const std::vector<Message>& msgs, MPI_Comm comm, IterationTrace* trace,
                                         int warmup, double timeout_s) {
  const auto ready_at = messages_by_layer(msgs, param_count_, layers());
  const cudaStream_t s = context().stream;
  comm::Watchdog::Scope watchdog(timeout_s, "the contention round");  // before the communicator, as above
  ncclComm_t nc = nccl_comm(comm, timeout_s);
  // On the gradients themselves, as the composed iteration (each message enqueued after the
  // backward that writes them); the sums are overwritten by the next backward.
  auto* g = static_cast<float*>(grads_->data());
  const IterationEvents ev(layers(), msgs.size());
  std::vector<double> sample(1);
  for (int it = 0; it <= warmup; ++it) {  // warm-up rounds first, as the composed iteration's
    // The barrier before forward, as in the composed iteration: backward starts on each rank when
    // its forward ends, the ranks as far apart as forward leaves them.
    CUDA_CHECK(cudaDeviceSynchronize());
    comm::Watchdog::kick();
    MPI_Barrier(comm);
    forward();
    CUDA_CHECK(cudaEventRecord(ev.start(), s));
    CUDA_CHECK(cudaEventSynchronize(ev.start()));  // the host span below starts where backward does
    const auto t0 = clock_type::now();
    CUDA_CHECK(cudaEventRecord(ev.h2d(), s));
    for (int l = 0; l < layers(); ++l) CUDA_CHECK(cudaEventRecord(ev.forward(l), s));
    zero_act_grads();
    CUDA_CHECK(cudaEventRecord(ev.zero(), s));
    backward_layers([&](int l) {  // each message enqueued as its gradients are ready, as WFBP does
      CUDA_CHECK(cudaEventRecord(ev.backward(l), s));
      for (int i : ready_at[l])
        send_message(ev, static_cast<std::size_t>(i), msgs[i], g, nc, s, comm_stream_, timeout_s);
    });
    CUDA_CHECK(cudaEventRecord(ev.comm(), comm_stream_));
    CUDA_CHECK(cudaStreamWaitEvent(s, ev.comm(), 0));
    CUDA_CHECK(cudaEventRecord(ev.update(), s));
    // Polls NCCL while it waits (a dead peer aborts the communicator after timeout_s).
    nccl_wait(nc, s, timeout_s, "the contention round's all-reduces");
    sample[0] = std::chrono::duration<double, std::micro>(clock_type::now() - t0).count();
  }
  comm::Watchdog::kick();
  comm::max_over_ranks(sample, comm);
  IterationTrace t;
  ev.read(t, false);
  if (trace) *trace = t;
  return sample;
}

}  // namespace gdl::cuda
