// The timed loop and the exact check for the MPI collectives. What differs between collectives
// comes from their descriptions (comm/collective.h); nothing here branches on which one runs.
#include <algorithm>
#include <cstring>
#include <exception>
#include <thread>
#include <vector>

#include "comm/allreduce.h"
#include "comm/watchdog.h"
#include "common/timer.h"

namespace gdl::comm {

namespace {

// Values that stay put when reduced in place over and over (no overflow, no denormals):
// 0 for sum, 1 for prod, anything for max/min.
void fill_stable(void* p, std::size_t count, DType t, Op op) {
  const double v = op == Op::prod ? 1.0 : 0.0;
  for (std::size_t i = 0; i < count; ++i) store(p, i, t, v);
}

// The exact check writes and reads the host buffers in place.
struct HostAccess {
  void poison(char* p, std::size_t bytes) { std::memset(p, 0xFF, bytes); }
  char* stage(char* dst, std::size_t) { return dst; }
  void commit(char*, std::size_t) {}
  const char* view(const char* src, std::size_t) { return src; }
};

// run() on the calling thread, or with on_comm_thread on a thread of its own (joined before it
// returns; what it throws is thrown here), as the composed iteration's communication thread sends
// its messages (cpu/net.cpp). glibc gives a thread other than the main one a malloc arena of its
// own, whose heaps (64 MB at most) cannot keep MPICH's large temporaries: it maps and unmaps them
// on every call, where the main thread's heap keeps them (keep_freed_memory).
template <class Run>
void on_thread(bool on_comm_thread, Run&& run) {
  if (!on_comm_thread) return run();
  std::exception_ptr error;
  std::thread worker([&] {
    try {
      run();
    } catch (...) {
      error = std::current_exception();
    }
  });
  worker.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace

BenchResult bench(const BenchSpec& spec, MPI_Comm comm) { return bench_started_together(spec, comm, comm); }

BenchResult bench_started_together(const BenchSpec& spec, MPI_Comm comm, MPI_Comm start_on) {
  const Description& d = describe(spec.coll);
  if (comm == MPI_COMM_NULL) {  // no part in the collective: only in the barriers that start each call
    gdl::validate(TimingPlan{spec.warmup, spec.iters});
    Watchdog::Scope watchdog(spec.timeout_s, d.name);
    for (int i = 0; i < spec.warmup + spec.iters; ++i) {
      Watchdog::kick();
      MPI_Barrier(start_on);
    }
    return {};
  }
  int rank = 0, n = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &n);
  validate(spec, n);
  const DType t = spec.dtype;
  const std::size_t es = dtype_size(t);
  const Layout l = d.layout(spec.count, n, rank, spec.root, spec.inplace, InPlaceResult::first_block);

  // Rotation: `slots` copies of each buffer back to back; timed iteration i uses slot i % slots.
  const std::size_t biggest = std::max(l.send_n, l.recv_n) * es;
  const std::size_t slots =
      spec.rotate_bytes > biggest && biggest > 0 ? std::min<std::size_t>(spec.rotate_bytes / biggest, 1 << 20) : 1;
  std::vector<char> send(l.send_n * es * slots), recv(l.recv_n * es * slots);  // every page touched before timing
  char* sp = send.data();
  char* rp = recv.data();
  std::size_t slot = 0;
  auto next_slot = [&] {
    slot = (slot + 1) % slots;
    sp = send.data() + slot * l.send_n * es;
    rp = recv.data() + slot * l.recv_n * es;
  };
  auto run_once = [&] { run_collective(spec, l.send_n ? sp : nullptr, rp, comm); };

  Watchdog::Scope watchdog(spec.timeout_s, d.name);
  BenchResult result;
  fill_stable(send.data(), l.send_n * slots, t, spec.op);
  fill_stable(recv.data(), l.recv_n * slots, t, spec.op);
  // The buffers belong to the calling thread (as the iteration's gradients); the timed loop and
  // the check run where spec.on_comm_thread says.
  on_thread(spec.on_comm_thread, [&] {
    result.samples_us = time_steady(TimingPlan{spec.warmup, spec.iters}, run_once, [&] {
      next_slot();
      Watchdog::kick();
      MPI_Barrier(start_on);
    });
    slot = slots - 1;
    next_slot();  // the checks use slot 0
    Watchdog::kick();
    MPI_Allreduce(MPI_IN_PLACE, result.samples_us.data(), static_cast<int>(result.samples_us.size()), MPI_DOUBLE,
                  MPI_MAX, comm);

    if (spec.check_iters == 0) return;
    HostAccess mem;
    long long wrong = check_exact(spec, l, rank, n, sp, rp, mem, [&] {
      Watchdog::kick();
      run_once();
    });
    Watchdog::kick();
    MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_LONG_LONG, MPI_SUM, comm);
    result.wrong = wrong;
  });
  return result;
}

std::vector<double> reduce_time(std::size_t count, DType dtype, Op op, int warmup, int iters) {
  std::vector<char> a(count * dtype_size(dtype)), b(count * dtype_size(dtype));
  fill_stable(a.data(), count, dtype, op);
  fill_stable(b.data(), count, dtype, op);
  return time_steady(TimingPlan{warmup, iters}, [&] { reduce(a.data(), b.data(), count, dtype, op); });
}

}  // namespace gdl::comm
