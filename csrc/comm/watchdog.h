// A watchdog for collectives: if a rank dies or hangs, the survivors sit in MPI forever. While a
// Watchdog::Scope is alive, a helper thread checks every 50 ms that kick() was called within the
// last `timeout_s` seconds; if not, it prints one line on stderr and calls MPI_Abort, which ends
// the whole job with a non-zero status. Needs MPI_THREAD_MULTIPLE (mpi4py's default).
#pragma once
#include <mpi.h>

#include <string>

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

}  // namespace gdl::comm
