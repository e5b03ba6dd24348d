// Timed loops across ranks, shared by both iteration executors (cpu/net.cpp, cuda/net.cu): samples
// reduced with MAX over ranks, and each message of a plan timed alone under the watchdog.
// Header-only, so both native modules carry it.
#pragma once
#include <mpi.h>

#include <cstddef>
#include <vector>

#include "comm/watchdog.h"
#include "common/timer.h"

namespace gdl::comm {

// Per-sample max over ranks, so a row is as slow as its slowest rank.
inline void max_over_ranks(std::vector<double>& samples, MPI_Comm comm) {
  MPI_Allreduce(MPI_IN_PLACE, samples.data(), static_cast<int>(samples.size()), MPI_DOUBLE, MPI_MAX, comm);
}

// Message i of n timed alone by send(i): an untimed MPI_Barrier before every sample; samples max
// over ranks. timeout_s > 0: the watchdog ends the job when a sample makes no progress that long.
template <class Send>
std::vector<std::vector<double>> time_each_message(const TimingPlan& plan, std::size_t n, MPI_Comm comm,
                                                   double timeout_s, const char* what, Send&& send) {
  Watchdog::Scope watchdog(timeout_s, what);
  std::vector<std::vector<double>> out;
  for (std::size_t i = 0; i < n; ++i) {
    auto s = time_steady(plan, [&] { send(i); }, [&] {
      Watchdog::kick();
      MPI_Barrier(comm);
    });
    Watchdog::kick();
    max_over_ranks(s, comm);
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace gdl::comm
