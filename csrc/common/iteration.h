// What the CPU and CUDA iteration executors share: the message plan, the SGD settings, the trace
// of one composed iteration, and how parameters are initialised.
#pragma once
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/fill.h"
#include "common/layer_spec.h"

namespace gdl {

// What a message does on the flat buffers [offset, offset + count): all-reduce the gradients (the
// data-parallel strategies); reduce-scatter them (each rank keeps the reduced sum of its 1/N block,
// comm::block) or all-gather the parameters (each rank's block to every rank): the sharded
// strategies (ZeRO-1/2/3, FSDP), which only the CPU executor runs.
enum class MessageKind : int { allreduce = 0, reduce_scatter = 1, allgather = 2 };

// One message: `count` floats of the flat buffer from `offset`. An all-reduce is sent once the
// backward pass of layer `ready_after` (and of every layer after it) is done (WFBP), or after
// backward. A sharded message is posted once `issued_after` compute tasks are done (forward's
// layers 0..L-1, backward's L..2L-1 last layer first, the update 2L: gdlbench.model.phases.plan_sharded's
// tasks), and compute task `needed_by` (an all-gather's: its unit's first layer in that pass; -1:
// none) waits for it. The fields after ready_after default to an all-reduce.
struct Message {
  int64_t offset = 0;
  int64_t count = 0;
  int ready_after = 0;
  MessageKind kind = MessageKind::allreduce;
  int issued_after = -1;
  int needed_by = -1;
};

struct SgdConfig {
  float lr = 0.01f, momentum = 0.9f, weight_decay = 1e-4f;
};

// Time stamps of one iteration, us since its start on this rank (the CUDA executor: device times
// from an event at the start, host times for the I/O), for the trace and the model. A layer's
// forward starts where the one before it ended (the first at h2d_end); a layer's backward starts
// where the layer after it ended (the last layer's at zero_end); a message starts once it is
// ready and the one before it is done.
struct IterationTrace {
  double io_start = 0, io_end = 0;  // the read: this batch's (inline), or the next one's (prefetch thread)
  bool io_prefetch = false;
  double io_wait_end = 0, h2d_end = 0, forward_end = 0, zero_end = 0, backward_end = 0, comm_end = 0,
         update_end = 0;
  std::vector<double> layer_forward_end, layer_backward_end;     // per layer, in layer order
  std::vector<double> message_ready, message_start, message_end;  // per message, in plan order
  // The iteration's end: update_end, or for ZeRO-1/2 the end of the all-gathers after the update.
  double end = 0;
  // Per message, how long compute waited for it: the sharded strategies' all-gathers before a
  // unit's forward or backward and the last reduce-scatter before the update; the all-reduce
  // strategies' last message (the update waits for all of them). 0 where none; empty: not stamped.
  std::vector<double> message_wait;
  // Per layer, how long its forward and its backward waited for an all-gather before they started
  // (inside the span from the previous layer's end to its own; empty: not stamped).
  std::vector<double> layer_forward_wait, layer_backward_wait;
};

// Checks a message plan against the executor: every message inside the gradient buffer, its
// ready layer a real one, every gradient covered (or no message at all: the phases run in
// sequence without communication, as the isolated round measures them). Returns the messages
// ready after each layer.
inline std::vector<std::vector<int>> messages_by_layer(const std::vector<Message>& msgs, int64_t param_count,
                                                       int layers) {
  std::vector<std::vector<int>> ready_at(layers);
  int64_t covered = 0;
  for (std::size_t i = 0; i < msgs.size(); ++i) {
    const auto& m = msgs[i];
    GDL_REQUIRE(m.offset >= 0 && m.count > 0 && m.offset + m.count <= param_count, "message ", i,
                " is outside the gradient buffer");
    GDL_REQUIRE(m.kind == MessageKind::allreduce, "message ", i,
                ": a reduce-scatter or all-gather goes in a sharded plan (only the CPU executor runs them)");
    GDL_REQUIRE(m.ready_after >= 0 && m.ready_after < layers, "message ", i, ": no layer ", m.ready_after);
    ready_at[m.ready_after].push_back(static_cast<int>(i));
    covered += m.count;
  }
  GDL_REQUIRE(msgs.empty() || covered == param_count, "the messages cover ", covered, " of ", param_count, " gradients");
  return ready_at;
}

// Whether a plan is sharded: its messages reduce-scatters and all-gathers (check_sharded_plan).
inline bool is_sharded(const std::vector<Message>& msgs) {
  for (const auto& m : msgs)
    if (m.kind != MessageKind::allreduce) return true;
  return false;
}

// Checks a sharded plan against the executor's net (offsets[l], counts[l]: layer l's parameters in
// the flat buffers): no all-reduce among its messages; posted in plan order (issued_after never
// decreasing) and at a real compute task; the reduce-scatters covering every gradient once, each
// after the backward of every layer it carries and before the update; every all-gather either
// after the update (issued_after 2L + 1, ZeRO-1/2) or needed by a compute task it is posted before
// (a forward task no later than its first layer, a backward task no earlier than its last: the
// layer reads what it gathers); the all-gathers after the update and those of forward covering
// every parameter once (each made whole once an iteration before forward uses it).
inline void check_sharded_plan(const std::vector<Message>& msgs, const std::vector<int64_t>& offsets,
                               const std::vector<int64_t>& counts, int64_t param_count) {
  const int nl = static_cast<int>(offsets.size());
  // the layer holding element o (the last layer with parameters starting at or before it)
  auto layer_of = [&](int64_t o) {
    int found = -1;
    for (int l = 0; l < nl; ++l)
      if (counts[l] > 0 && offsets[l] <= o) found = l;
    return found;
  };
  std::vector<std::pair<int64_t, int64_t>> scattered, gathered;  // (offset, count) of each
  int last_issue = 0;
  for (std::size_t i = 0; i < msgs.size(); ++i) {
    const auto& m = msgs[i];
    GDL_REQUIRE(m.offset >= 0 && m.count > 0 && m.offset + m.count <= param_count, "message ", i,
                " is outside the parameter buffer");
    GDL_REQUIRE(m.kind != MessageKind::allreduce, "message ", i, ": an all-reduce in a sharded plan");
    GDL_REQUIRE(m.issued_after >= last_issue && m.issued_after <= 2 * nl + 1, "message ", i, ": issued after ",
                m.issued_after, " compute tasks (plan order needs ", last_issue, " to ", 2 * nl + 1, ")");
    last_issue = m.issued_after;
    const int low = layer_of(m.offset), high = layer_of(m.offset + m.count - 1);
    if (m.kind == MessageKind::reduce_scatter) {
      GDL_REQUIRE(m.needed_by < 0 && m.issued_after >= 2 * nl - low && m.issued_after <= 2 * nl, "message ", i,
                  ": a reduce-scatter goes after the backward of its layers (", 2 * nl - low,
                  " tasks) and before the update (", 2 * nl, ")");
      scattered.emplace_back(m.offset, m.count);
      continue;
    }
    const int t = m.needed_by;
    if (t < 0) {
      GDL_REQUIRE(m.issued_after == 2 * nl + 1, "message ", i, ": an all-gather needed by no task goes after the update");
    } else {
      GDL_REQUIRE(t < 2 * nl && m.issued_after <= t, "message ", i, ": an all-gather needed by task ", t,
                  " must be posted before it (issued after ", m.issued_after, ")");
      const int layer = t < nl ? t : 2 * nl - 1 - t;
      GDL_REQUIRE(t < nl ? low >= layer : high <= layer, "message ", i, ": its parameters (layers ", low, "-", high,
                  ") are not all read at or after task ", t, " (layer ", layer, ")");
    }
    if (t < nl) gathered.emplace_back(m.offset, m.count);
  }
  // each set of ranges tiles [0, param_count) exactly: sorted, each starts where the one before ended
  auto tiles = [&](std::vector<std::pair<int64_t, int64_t>> v, const char* what) {
    std::sort(v.begin(), v.end());
    int64_t at = 0;
    for (const auto& [offset, count] : v) {
      GDL_REQUIRE(offset == at, what, " carry the values from ", std::min(offset, at), " ",
                  offset < at ? "twice" : "not at all", " (each once needed)");
      at = offset + count;
    }
    GDL_REQUIRE(at == param_count, what, " end at ", at, " of ", param_count, " values (each once needed)");
  };
  tiles(scattered, "the reduce-scatters");
  tiles(gathered, "the all-gathers of forward and after the update");
}

// Host values of every parameter, the same on both backends: test data (uniform in [-1, 1])
// scaled He-like per weight tensor so activations stay finite through deep stacks; 1-D tensors
// (biases, BN shift) small; BN scale near 1.
inline std::vector<float> initial_params(const std::vector<LayerSpec>& specs, int64_t total) {
  std::vector<float> p(total);
  int64_t at = 0;
  for (const auto& s : specs) {
    for (std::size_t t = 0; t < s.param_shapes.size(); ++t) {
      const auto& shape = s.param_shapes[t];
      const int64_t n = numel(shape);
      const bool bn_scale = s.type == "bn" && t == 0;
      const float scale = shape.size() > 1 ? std::sqrt(6.0f / static_cast<float>(n / shape[0])) : 0.1f;
      for (int64_t i = 0; i < n; ++i)
        p[at + i] = (bn_scale ? 1.0f : 0.0f) + scale * fill_value(5, static_cast<uint64_t>(at + i));
      at += n;
    }
  }
  return p;
}

// Reads the next batch: io() on a thread of its own while the iteration computes (prefetch), or
// in line. An error on the I/O thread comes back as an exception from wait(); the thread is joined
// on every path (a joinable std::thread at destruction would terminate the process). The last
// read's start and end are kept for the trace (read them after wait()).
class BatchLoader {
 public:
  using clock = std::chrono::steady_clock;
  BatchLoader(const std::function<void()>& io, bool prefetch) : io_(io), prefetch_(prefetch && io) {
    if (prefetch_) start();  // the first batch, ahead of the first iteration
  }
  ~BatchLoader() {
    if (thread_.joinable()) thread_.join();
  }
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  // This iteration's batch: waits for the prefetched one and starts the next, or reads in line.
  void next() {
    if (!io_) return;
    if (!prefetch_) return read();
    wait();
    start();
  }
  void wait() {
    if (thread_.joinable()) thread_.join();
    if (!error_.empty()) GDL_FAIL("data I/O failed: ", error_);
  }
  // The last read into the trace, in microseconds since t0 (nothing without I/O).
  void stamp(IterationTrace& trace, clock::time_point t0) const {
    if (!io_) return;
    const auto since = [&](clock::time_point t) { return std::chrono::duration<double, std::micro>(t - t0).count(); };
    trace.io_prefetch = prefetch_;
    trace.io_start = since(read_start_);
    trace.io_end = since(read_end_);
  }

 private:
  void read() {
    read_start_ = clock::now();
    io_();
    read_end_ = clock::now();
  }
  void start() {
    thread_ = std::thread([this] {
      try {
        read();
      } catch (const std::exception& e) {
        error_ = e.what();
      }
    });
  }
  const std::function<void()>& io_;
  bool prefetch_;
  std::thread thread_;
  std::string error_;
  clock::time_point read_start_{}, read_end_{};
};

}  // namespace gdl
