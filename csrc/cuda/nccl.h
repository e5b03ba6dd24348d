// NCCL collectives on device buffers. The NCCL communicator is built from an MPI communicator
// (rank 0's ncclUniqueId broadcast with MPI_Bcast), one per MPI communicator, attached to it as
// an MPI attribute (freed with it). Communicators are non-blocking: every wait polls NCCL's
// asynchronous error and aborts the communicator on an error or when no progress comes in time,
// so a dead peer ends in an error instead of a hang.
#pragma once
#include <mpi.h>
#include <nccl.h>

#include <cstddef>
#include <string>

#include "comm/collective.h"

namespace gdl::cuda {

// The NCCL communicator over the ranks of comm (created on first use; collective over comm).
// timeout_s > 0: abort the creation when it has not finished after that long.
ncclComm_t nccl_comm(MPI_Comm comm, double timeout_s = 0);

// Waits for the work queued on `stream`, polling the communicator's asynchronous error. On an
// error, or (timeout_s > 0) when the stream has not finished after timeout_s, aborts the
// communicator (it cannot be used again; the next nccl_comm builds a new one) and throws.
void nccl_wait(ncclComm_t nc, cudaStream_t stream, double timeout_s, const char* what);

// Checks what an NCCL call returned; ncclInProgress (a non-blocking communicator) waits until NCCL
// has taken the call, as nccl_wait does.
void nccl_issued(ncclResult_t r, ncclComm_t nc, double timeout_s, const char* what);

ncclDataType_t nccl_dtype(comm::DType t);
ncclRedOp_t nccl_op(comm::Op op);

// In place, on the process's stream (default_stream()), waited for before returning: algo library
// (ncclAllReduce) or hier (below); the other algorithms are the MPI harness's own.
void nccl_allreduce(void* buf, std::size_t count, comm::DType t, comm::Op op, MPI_Comm comm,
                    comm::Algo algo = comm::Algo::library);
// The hierarchical all-reduce (cuda/nccl_hier.cu): NCCL inside each node, NCCL across nodes on
// 1/G of the buffer (below comm::kHierLeaderBelowBytes through the node leaders). In place, synchronised.
void nccl_hier_allreduce(void* buf, std::size_t count, comm::DType t, comm::Op op, MPI_Comm comm);

// The collective spec.coll on device buffers (sendbuf nullptr: in place), queued on stream.
void nccl_launch(const comm::BenchSpec& spec, const void* sendbuf, void* recvbuf, ncclComm_t nc, cudaStream_t stream);

// The harness of comm::bench on device buffers: per timed iteration an untimed MPI_Barrier, then
// the NCCL call and its wait on the host steady clock; samples reduced with MAX over ranks; the
// exact check (comm::check_exact) after, untimed. spec.algo must be library, rotate_bytes is not
// used.
comm::BenchResult nccl_bench(const comm::BenchSpec& spec, MPI_Comm comm);

}  // namespace gdl::cuda
