// NCCL collectives on device buffers. The NCCL communicator is built from an MPI communicator
// (rank 0's ncclUniqueId broadcast with MPI_Bcast), one per MPI communicator, cached.
#pragma once
#include <mpi.h>
#include <nccl.h>

#include <cstddef>
#include <string>
#include <vector>

#include "comm/types.h"

namespace gdl::cuda {

// The NCCL communicator over the ranks of comm (created on first use; collective over comm).
ncclComm_t nccl_comm(MPI_Comm comm);

ncclDataType_t nccl_dtype(comm::DType t);
ncclRedOp_t nccl_op(comm::Op op);

// In place, on the process's stream (default_stream()), synchronised before returning.
void nccl_allreduce(void* buf, std::size_t count, comm::DType t, comm::Op op, MPI_Comm comm);

struct NcclBenchResult {
  std::vector<double> samples_us;  // per iteration, the max over ranks
  long long wrong = -1;            // wrong elements summed over ranks and checks; -1: no check
};

// collective: allreduce, reduce_scatter, allgather, broadcast; count per rank as in comm/allreduce.h.
// Per timed iteration: an untimed MPI_Barrier, then the NCCL call + cudaStreamSynchronize on the
// host steady clock; samples reduced with MAX over ranks. Checks run after, untimed and exact.
NcclBenchResult nccl_bench(MPI_Comm comm, const std::string& collective, std::size_t count, comm::DType t,
                           comm::Op op, bool inplace, int root, int warmup, int iters, int check_iters,
                           double timeout_s);

}  // namespace gdl::cuda
