#include "cpu/net.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "comm/allreduce.h"
#include "comm/timed.h"
#include "cpu/blas.h"
#include "cpu/sgd.h"

namespace gdl::cpu {
namespace {

using clock_type = std::chrono::steady_clock;
double us_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::micro>(clock_type::now() - t0).count();
}

// The communication thread: sends queued messages in order (send(i) runs message i), records
// when each started and ended.
class CommThread {
 public:
  CommThread(std::size_t n_msgs, std::function<void(int)> send)
      : n_(n_msgs), send_(std::move(send)), start_(n_msgs), end_(n_msgs), worker_([this] { loop(); }) {}
  ~CommThread() {
    {
      std::lock_guard<std::mutex> g(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }
  void begin_iteration(clock_type::time_point t0) {
    std::lock_guard<std::mutex> g(mu_);
    t0_ = t0;
    done_ = 0;
    error_.clear();
  }
  void post(int i) {
    {
      std::lock_guard<std::mutex> g(mu_);
      queue_.push_back(i);
    }
    cv_.notify_all();
  }
  void wait_all() { wait_done(n_); }
  // Message i alone: sent on this thread, waited for (one timed sample of it).
  void send_alone(int i) {
    begin_iteration(clock_type::now());
    post(i);
    wait_done(1);
  }
  // Until message i is done (messages run in the order posted: the first i + 1 posted are done).
  void wait_for(int i) { wait_done(static_cast<std::size_t>(i) + 1); }
  const std::vector<double>& starts() const { return start_; }
  const std::vector<double>& ends() const { return end_; }

 private:
  void wait_done(std::size_t n) {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return done_ >= n; });
    if (!error_.empty()) GDL_FAIL("a message on the communication thread failed: ", error_);
  }
  void loop() {
    for (;;) {
      int i;
      clock_type::time_point t0;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
        if (stop_ && queue_.empty()) return;
        i = queue_.front();
        queue_.pop_front();
        t0 = t0_;
      }
      start_[i] = us_since(t0);
      std::string err;
      try {
        send_(i);
      } catch (const std::exception& e) {
        err = e.what();
      }
      end_[i] = us_since(t0);
      comm::Watchdog::kick();  // a message done is progress
      {
        std::lock_guard<std::mutex> g(mu_);
        if (!err.empty()) error_ = err;
        ++done_;
      }
      cv_.notify_all();
    }
  }

  std::size_t n_;
  std::function<void(int)> send_;
  std::vector<double> start_, end_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<int> queue_;
  std::size_t done_ = 0;
  bool stop_ = false;
  std::string error_;
  clock_type::time_point t0_;
  std::thread worker_;  // last: starts after every other member exists
};

// The end of a timed run: the last read waited for (its end is then known), the samples' max over
// ranks, the last iteration's trace with its messages' and read's stamps.
std::vector<double> finish_run(std::vector<double> samples, MPI_Comm comm, BatchLoader& loader,
                               const CommThread& comm_thread, IterationTrace& trace, clock_type::time_point t0,
                               IterationTrace* last_trace) {
  loader.wait();
  comm::Watchdog::kick();
  comm::max_over_ranks(samples, comm);
  if (last_trace) {
    trace.message_start = comm_thread.starts();
    trace.message_end = comm_thread.ends();
    loader.stamp(trace, t0);
    *last_trace = trace;
  }
  return samples;
}

}  // namespace

Net::Net(std::vector<LayerSpec> specs, int batch) : LayerGraph(specs, batch, make_layer) {
  // Buffers, touched (zeroed or filled) here so no page fault lands in a timed region.
  const Shape& data_shape = specs.front().in_shapes.at(0);
  data_.assign(batch * numel(data_shape), 0.f);
  staging_.resize(data_.size());
  if (const LayerSpec* embedding = token_input(specs))
    fill_token_ids(staging_.data(), static_cast<int64_t>(staging_.size()), embedding->attr("vocab"));
  else
    fill(staging_.data(), staging_.size(), 3);
  std::copy(staging_.begin(), staging_.end(), data_.begin());
  for (auto& layer : layers_) {
    act_.emplace_back(layer->out_count(), 0.f);
    act_grad_.emplace_back(layer->out_count(), 0.f);
  }
  fill(act_grad_.back().data(), act_grad_.back().size(), 9);  // dL/dy of the last layer (ignored by a loss)
  params_ = initial_params(specs, param_count_);
  grads_.assign(param_count_, 0.f);
  momentum_.assign(param_count_, 0.f);
  for (std::size_t l = 0; l < layers_.size(); ++l)
    layers_[l]->bind_params(params_.data() + param_offset_[l], grads_.data() + param_offset_[l]);
  tie_weights();
  for (std::size_t l = 0; l < layers_.size(); ++l) {  // each loss layer its own labels (fill.h)
    if (specs[l].type != "softmax_xent") continue;
    const LabelShape shape = label_shape(specs[l]);
    labels_.push_back({test_labels(static_cast<int>(shape.count(batch)), shape.classes), shape.classes});
    layers_[l]->set_labels(labels_.back().values.data());
  }
  std::vector<float*> outputs, output_grads;
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    outputs.push_back(act_[l].data());
    output_grads.push_back(act_grad_[l].data());
  }
  place(data_.data(), std::move(outputs), std::move(output_grads));
}

void Net::zero_act_grads() {
  for (int l = 0; l + 1 < layers(); ++l) std::memset(act_grad_[l].data(), 0, act_grad_[l].size() * sizeof(float));
}

void Net::update(const SgdConfig& sgd) {
  sgd_update(params_.data(), grads_.data(), momentum_.data(), param_count(), sgd.lr, sgd.momentum, sgd.weight_decay);
}

std::vector<double> Net::time_forward_pass(const TimingPlan& plan) {
  return time_steady(plan, [&] { forward(); });
}

std::vector<double> Net::time_backward_pass(const TimingPlan& plan) {
  forward();
  return time_steady(plan, [&] { backward(); });
}

std::vector<int64_t> Net::layer_param_counts() const {
  std::vector<int64_t> counts;
  for (const auto& l : layers_) counts.push_back(l->param_count());
  return counts;
}

void Net::send(const Message& m, const CommOps& ops) {
  switch (m.kind) {
    case MessageKind::allreduce: return ops.allreduce(grads_.data() + m.offset, m.count);
    case MessageKind::reduce_scatter: return ops.reduce_scatter(grads_.data() + m.offset, m.count);
    case MessageKind::allgather: return ops.allgather(params_.data() + m.offset, m.count);
  }
}

std::vector<std::vector<double>> Net::time_messages(const TimingPlan& plan, const std::vector<Message>& msgs,
                                                    const CommOps& ops, MPI_Comm comm, double timeout_s) {
  for (const auto& m : msgs)
    GDL_REQUIRE(m.offset >= 0 && m.count > 0 && m.offset + m.count <= param_count(), "message [", m.offset, ", +",
                m.count, ") is outside the gradient buffer");
  // On a communication thread, as the composed iteration sends them. glibc gives a thread other
  // than the main one an arena of its own, whose heaps (64 MB at most) cannot hold MPICH's large
  // temporaries: it maps a fresh one and unmaps it on every call (GPT-2 small's ZeRO reduce-scatter
  // on 2 ranks: 60,762 page faults, 45 ms, a call). Timed on the main thread, whose heap keeps
  // them (keep_freed_memory), the message alone missed that cost of the same call inside.
  CommThread comm_thread(msgs.size(), [&](int i) { send(msgs[i], ops); });
  return comm::time_each_message(plan, msgs.size(), comm, timeout_s, "a message's collective",
                                 [&](std::size_t i) { comm_thread.send_alone(static_cast<int>(i)); });
}

std::vector<double> Net::time_iteration(const TimingPlan& plan, const std::vector<Message>& msgs, bool overlap,
                                        const CommOps& ops, const std::function<void()>& io,
                                        bool prefetch, const SgdConfig& sgd, MPI_Comm comm,
                                        IterationTrace* last_trace, double timeout_s) {
  validate(plan);
  comm::Watchdog::Scope watchdog(timeout_s, "the composed iteration");
  if (is_sharded(msgs)) return time_sharded(plan, msgs, ops, io, prefetch, sgd, comm, last_trace);
  const auto ready_at = messages_by_layer(msgs, param_count(), layers());

  CommThread comm_thread(msgs.size(), [&](int i) { send(msgs[i], ops); });

  std::vector<double> samples;
  IterationTrace trace;
  trace.layer_forward_end.assign(layers(), 0.0);
  trace.layer_backward_end.assign(layers(), 0.0);
  trace.message_ready.assign(msgs.size(), 0.0);
  BatchLoader loader(io, prefetch);
  clock_type::time_point t0;
  auto post = [&](int i) {
    trace.message_ready[i] = us_since(t0);
    comm_thread.post(i);
  };
  for (int it = 0; it < plan.warmup + plan.iters; ++it) {
    comm::Watchdog::kick();
    MPI_Barrier(comm);  // untimed: every rank starts the iteration together
    t0 = clock_type::now();
    comm_thread.begin_iteration(t0);
    loader.next();  // this iteration's batch (read while the previous one computed, when prefetching)
    trace.io_wait_end = us_since(t0);
    copy_batch();
    trace.h2d_end = us_since(t0);
    forward([&](int l) { trace.layer_forward_end[l] = us_since(t0); });
    trace.forward_end = trace.layer_forward_end.back();
    zero_act_grads();
    trace.zero_end = us_since(t0);
    backward_layers([&](int l) {
      trace.layer_backward_end[l] = us_since(t0);
      if (overlap)
        for (int i : ready_at[l]) post(i);
    });
    trace.backward_end = trace.layer_backward_end.front();
    if (!overlap)
      for (std::size_t i = 0; i < msgs.size(); ++i) post(static_cast<int>(i));
    comm_thread.wait_all();
    trace.comm_end = us_since(t0);
    trace.message_wait.assign(msgs.size(), 0.0);  // what compute waited for: the last message's
    if (!msgs.empty()) trace.message_wait.back() = trace.comm_end - trace.backward_end;
    update(sgd);
    trace.update_end = trace.end = us_since(t0);
    if (it >= plan.warmup) samples.push_back(trace.update_end);
  }
  return finish_run(std::move(samples), comm, loader, comm_thread, trace, t0, last_trace);
}

void Net::copy_batch() {
  std::memcpy(data_.data(), staging_.data(), data_.size() * sizeof(float));
  for (auto& l : labels_)  // a new batch's labels
    advance_labels(l.values.data(), static_cast<int>(l.values.size()), l.classes);
}

void Net::update_shard(const std::vector<Message>& msgs, const SgdConfig& sgd, int rank, int ranks) {
  for (const auto& m : msgs) {
    if (m.kind != MessageKind::reduce_scatter) continue;
    const comm::Block b = comm::block(static_cast<std::size_t>(m.count), ranks, rank);
    const int64_t at = m.offset + static_cast<int64_t>(b.offset);  // the reduced block: at m.offset (in place)
    sgd_update(params_.data() + at, grads_.data() + m.offset, momentum_.data() + at, static_cast<int64_t>(b.count),
               sgd.lr, sgd.momentum, sgd.weight_decay);
  }
}

std::vector<double> Net::time_sharded(const TimingPlan& plan, const std::vector<Message>& msgs, const CommOps& ops,
                                      const std::function<void()>& io, bool prefetch, const SgdConfig& sgd,
                                      MPI_Comm comm, IterationTrace* last_trace) {
  check_sharded_plan(msgs, param_offset_, layer_param_counts(), param_count());
  int rank = 0, ranks = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &ranks);
  const int nl = layers();
  // Per compute task (forward 0..L-1, backward L..2L-1, the update 2L), the message it waits for:
  // the all-gathers their tasks need, the update the last reduce-scatter (the thread runs in order).
  std::vector<int> need(2 * nl + 1, -1);
  for (std::size_t i = 0; i < msgs.size(); ++i) {
    if (msgs[i].needed_by >= 0) need[msgs[i].needed_by] = static_cast<int>(i);
    if (msgs[i].kind == MessageKind::reduce_scatter) need[2 * nl] = static_cast<int>(i);
  }
  CommThread comm_thread(msgs.size(), [&](int i) { send(msgs[i], ops); });
  std::vector<double> samples;
  IterationTrace trace;
  trace.layer_forward_end.assign(nl, 0.0);
  trace.layer_backward_end.assign(nl, 0.0);
  trace.message_ready.assign(msgs.size(), 0.0);
  BatchLoader loader(io, prefetch);
  clock_type::time_point t0;
  std::size_t next = 0;
  auto tasks_done = [&](int done) {  // post what `done` finished compute tasks issue, in plan order
    for (; next < msgs.size() && msgs[next].issued_after <= done; ++next) {
      trace.message_ready[next] = us_since(t0);
      comm_thread.post(static_cast<int>(next));
    }
  };
  auto before_task = [&](int task) {  // wait for the message the task needs, stamped
    if (need[task] < 0) return;
    const double from = us_since(t0);
    comm_thread.wait_for(need[task]);
    const double waited = us_since(t0) - from;
    trace.message_wait[need[task]] += waited;
    if (task < nl) trace.layer_forward_wait[task] = waited;
    else if (task < 2 * nl) trace.layer_backward_wait[2 * nl - 1 - task] = waited;
  };
  for (int it = 0; it < plan.warmup + plan.iters; ++it) {
    comm::Watchdog::kick();
    MPI_Barrier(comm);  // untimed: every rank starts the iteration together
    t0 = clock_type::now();
    comm_thread.begin_iteration(t0);
    trace.message_wait.assign(msgs.size(), 0.0);
    trace.layer_forward_wait.assign(nl, 0.0);
    trace.layer_backward_wait.assign(nl, 0.0);
    next = 0;
    loader.next();
    trace.io_wait_end = us_since(t0);
    copy_batch();
    trace.h2d_end = us_since(t0);
    tasks_done(0);
    before_task(0);
    forward([&](int l) {
      trace.layer_forward_end[l] = us_since(t0);
      tasks_done(l + 1);
      if (l + 1 < nl) before_task(l + 1);
    });
    trace.forward_end = trace.layer_forward_end.back();
    zero_act_grads();
    trace.zero_end = us_since(t0);
    before_task(nl);  // the last layer's backward
    backward_layers([&](int l) {
      trace.layer_backward_end[l] = us_since(t0);
      tasks_done(2 * nl - l);
      if (l > 0) before_task(2 * nl - l);
    });
    trace.backward_end = trace.layer_backward_end.front();
    before_task(2 * nl);  // the update: every gradient reduced
    trace.comm_end = us_since(t0);
    update_shard(msgs, sgd, rank, ranks);
    trace.update_end = us_since(t0);
    tasks_done(2 * nl + 1);  // ZeRO-1/2: the all-gathers of the updated parameters
    comm_thread.wait_all();
    trace.end = us_since(t0);
    if (it >= plan.warmup) samples.push_back(trace.end);
  }
  return finish_run(std::move(samples), comm, loader, comm_thread, trace, t0, last_trace);
}

std::vector<double> Net::time_contention(const std::vector<Message>& msgs, const AllreduceFn& allreduce,
                                         MPI_Comm comm, IterationTrace* trace, int warmup, double timeout_s) {
  comm::Watchdog::Scope watchdog(timeout_s, "the contention round");
  const auto ready_at = messages_by_layer(msgs, param_count(), layers());
  // On the gradients themselves, as the composed iteration: a message is posted once backward
  // has written its gradients, and the all-reduce finds them where backward left them (in cache
  // or not). A scratch buffer of their size would double the memory the round touches. The sums
  // are overwritten by the next backward.
  CommThread comm_thread(msgs.size(), [&](int i) { allreduce(grads_.data() + msgs[i].offset, msgs[i].count); });
  IterationTrace t;
  t.layer_backward_end.assign(layers(), 0.0);
  t.message_ready.assign(msgs.size(), 0.0);
  // Warm-up rounds first on the same communication thread, as the composed iteration's: the
  // scheduler treats a thread that has just spun through a backward's messages otherwise than a
  // new one.
  for (int it = 0; it <= warmup; ++it) {
    // The barrier before forward, as in the composed iteration: backward starts on each rank when
    // its forward ends, the ranks as far apart as forward leaves them.
    comm::Watchdog::kick();
    MPI_Barrier(comm);
    forward();
    const auto t0 = clock_type::now();
    comm_thread.begin_iteration(t0);
    zero_act_grads();
    t.zero_end = us_since(t0);
    // Each message posted as its last gradient is ready, as WFBP posts them: each post wakes the
    // communication thread and each message waits for the peers' threads, which messages posted
    // all at once would not show.
    backward_layers([&](int l) {
      t.layer_backward_end[l] = us_since(t0);
      for (int i : ready_at[l]) {
        t.message_ready[i] = us_since(t0);
        comm_thread.post(i);
      }
    });
    t.backward_end = t.layer_backward_end.front();
    comm_thread.wait_all();
    t.comm_end = us_since(t0);
  }
  t.message_start = comm_thread.starts();
  t.message_end = comm_thread.ends();
  std::vector<double> sample{t.comm_end};
  comm::Watchdog::kick();
  comm::max_over_ranks(sample, comm);
  if (trace) *trace = t;
  return sample;
}

}  // namespace gdl::cpu
