// A watchdog for collectives: if a rank dies or hangs, the survivors sit in MPI forever. While a
// Watchdog::Scope is alive, a helper thread checks that kick() was called within the last
// `timeout_s` seconds (every timeout/20, from 50 ms to 1 s: each wake-up takes a core from a rank
// busy-polling in MPI on a small machine); if not, it prints one line on stderr and ends the job
// with a non-zero status. It calls MPI only where MPI lets a second thread do so (MPI_Abort under
// MPI_THREAD_MULTIPLE); at lower levels it ends its own process with _Exit and the launcher
// (mpiexec, srun) ends the other ranks, so any thread level from FUNNELED up works.
// Header-only, so both native modules (_core for MPI, _cuda for NCCL) carry it.
#pragma once
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

namespace gdl::comm {

class Watchdog {
 public:
  // Arms the watchdog for the scope's lifetime (timeout_s <= 0: does nothing).
  class Scope {
   public:
    Scope(double timeout_s, std::string what);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    bool armed_ = false;
  };
  static void kick();  // progress: restart the countdown (cheap: one atomic store)
};

namespace watchdog_detail {

using sclock = std::chrono::steady_clock;

struct State {
  std::mutex mu;
  std::condition_variable cv;
  std::thread thread;
  bool running = false;  // the thread exists
  int depth = 0;         // live scopes
  double timeout_s = 0;
  std::string what;
  int rank = -1;              // of MPI_COMM_WORLD, read by the arming thread
  bool may_abort = false;     // MPI_THREAD_MULTIPLE: the helper thread may call MPI_Abort
  std::atomic<long long> last_kick_ns{0};
};

inline State& state() {
  static State* s = new State;  // never destroyed: the thread may outlive static destructors
  return *s;
}

inline long long now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(sclock::now().time_since_epoch()).count();
}

inline void loop() {
  watchdog_detail::State& s = watchdog_detail::state();
  std::unique_lock<std::mutex> lock(s.mu);
  while (true) {
    const double poll_s = s.depth ? std::min(1.0, std::max(0.05, s.timeout_s / 20)) : 1.0;
    s.cv.wait_for(lock, std::chrono::duration<double>(poll_s));
    if (s.depth == 0) continue;
    const double idle = (now_ns() - s.last_kick_ns.load(std::memory_order_relaxed)) * 1e-9;
    if (idle > s.timeout_s) {
      std::fprintf(stderr,
                   "[rank %d] gdlbench: error: %s made no progress for %.0f s (--timeout): another rank "
                   "died or hangs; aborting the job\n",
                   s.rank, s.what.c_str(), s.timeout_s);
      std::fflush(stderr);
      // The line sits in a pipe to the launcher until it reads it; ending the job at once can
      // lose it (hydra, under load: about 1 in 50). A moment lets the launcher forward it.
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      int finalized = 0;
      MPI_Finalized(&finalized);  // callable from any thread
      if (s.may_abort && !finalized) MPI_Abort(MPI_COMM_WORLD, 3);
      std::_Exit(3);
    }
  }
}

}  // namespace watchdog_detail

inline Watchdog::Scope::Scope(double timeout_s, std::string what) {
  if (!(timeout_s > 0)) return;
  watchdog_detail::State& s = watchdog_detail::state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.depth == 0 || timeout_s < s.timeout_s) s.timeout_s = timeout_s;
  if (s.depth == 0) {
    s.what = std::move(what);
    int provided = MPI_THREAD_SINGLE;
    MPI_Query_thread(&provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &s.rank);
    s.may_abort = provided == MPI_THREAD_MULTIPLE;
  }
  ++s.depth;
  s.last_kick_ns.store(watchdog_detail::now_ns());
  if (!s.running) {
    s.thread = std::thread(watchdog_detail::loop);
    s.thread.detach();
    s.running = true;
  }
  armed_ = true;
}

inline Watchdog::Scope::~Scope() {
  if (!armed_) return;
  watchdog_detail::State& s = watchdog_detail::state();
  std::lock_guard<std::mutex> lock(s.mu);
  --s.depth;
}

inline void Watchdog::kick() {
  watchdog_detail::state().last_kick_ns.store(watchdog_detail::now_ns(), std::memory_order_relaxed);
}

}  // namespace gdl::comm
