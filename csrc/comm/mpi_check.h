// An MPI return-code check that throws with MPI's own message. Header-only, so both native
// modules (gdlbench._core and gdlbench._cuda) use it.
#pragma once
#include <mpi.h>

#include <string>

#include "common/errors.h"

namespace gdl::comm {

inline void mpi_check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  GDL_FAIL(what, ": ", std::string(msg, len));
}

}  // namespace gdl::comm

#define GDL_MPI(call) ::gdl::comm::mpi_check((call), #call)
