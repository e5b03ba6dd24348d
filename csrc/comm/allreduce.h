// MPI collectives on host buffers: the library's MPI_Allreduce and gdlbench's own all-reduce
// algorithms on MPI point-to-point, plus the library reduce-scatter, all-gather and broadcast.
//
// The reusable API: every function works on a caller's buffer, calls no Python and holds no
// global state except the cached MPI datatypes/ops for float16/bfloat16 (created on first use).
// A caller that runs collectives from a second thread (the iteration's communication thread)
// needs MPI_THREAD_SERIALIZED if the threads take turns, as gdlbench's do; at the same time, it
// needs MPI_THREAD_MULTIPLE and one communicator per thread (MPI_Comm_dup): the algorithms use
// fixed tags.
#pragma once
#include <mpi.h>

#include <cstddef>
#include <string>
#include <vector>

#include "comm/collective.h"
#include "comm/mpi_check.h"
#include "comm/topology.h"

namespace gdl::comm {

// In place: buf holds this rank's count elements on entry and the reduction over all ranks of
// comm on return. Every rank passes the same algo, count, dtype, op and options.
void allreduce(Algo algo, void* buf, std::size_t count, DType dtype, Op op, MPI_Comm comm,
               const AllreduceOptions& opt = {});

// Out of place: sendbuf is left untouched, recvbuf receives the result. The library call passes
// both buffers to MPI; gdlbench's algorithms copy sendbuf into recvbuf, then reduce in place.
void allreduce(Algo algo, const void* sendbuf, void* recvbuf, std::size_t count, DType dtype, Op op,
               MPI_Comm comm, const AllreduceOptions& opt = {});

// Library collectives. count is per rank: reduce_scatter reduces N*count elements of sendbuf and
// leaves block `rank` (count elements) in recvbuf; allgather gathers count elements from every
// rank into recvbuf (N*count). In place: sendbuf == nullptr (MPI_IN_PLACE): reduce_scatter reads
// N*count elements from recvbuf and leaves the result in its first count; allgather takes this
// rank's block from recvbuf + rank*count.
void reduce_scatter(const void* sendbuf, void* recvbuf, std::size_t count, DType dtype, Op op, MPI_Comm comm);
void allgather(const void* sendbuf, void* recvbuf, std::size_t count, DType dtype, MPI_Comm comm);
void broadcast(void* buf, std::size_t count, DType dtype, int root, MPI_Comm comm);

// The same two in place on one flat buffer of `count` elements in all, cut into N blocks as
// block() cuts it (a sharded optimizer's shards): reduce_scatter_blocks reduces all of buf and
// leaves this rank's block of the result at the start of buf (MPI's in-place convention);
// allgather_blocks takes this rank's block from buf + block(count, N, rank).offset and leaves
// every block in its place. When N divides count they are exactly reduce_scatter and allgather
// (the calls `gdlbench reducescatter/allgather` time); otherwise the first count % N blocks hold
// one element more and the calls are MPI_Reduce_scatter and MPI_Allgatherv with those counts.
void reduce_scatter_blocks(void* buf, std::size_t count, DType dtype, Op op, MPI_Comm comm);
void allgather_blocks(void* buf, std::size_t count, DType dtype, MPI_Comm comm);

// The MPI datatype and op used for dtype/op: predefined ones where MPI has them; for float16 and
// bfloat16 a contiguous 2-byte type and user-defined ops that widen to float, reduce and round.
MPI_Datatype mpi_datatype(DType t);
MPI_Op mpi_op(DType t, Op op);

// A scratch buffer reused across calls by the calling thread (no allocation in steady state).
char* scratch(std::size_t bytes);

// Block c of n blocks of count elements: the first count % n blocks hold one element more.
struct Block {
  std::size_t offset, count;
};
inline Block block(std::size_t count, int n, int c) {
  const std::size_t q = count / n, rem = count % n, uc = static_cast<std::size_t>(c);
  return {uc * q + (uc < rem ? uc : rem), q + (uc < rem ? 1 : 0)};
}

// --- the hierarchical all-reduce (comm/hier.cpp; the node layout: comm/topology.h) -----------
void hier_allreduce(void* buf, std::size_t count, DType dtype, Op op, MPI_Comm comm);

// --- benchmarking --------------------------------------------------------------------------
// The MPI call of spec.coll on a harness's buffers (sendbuf nullptr: in place, as Layout says).
void run_collective(const BenchSpec& spec, const void* sendbuf, void* recvbuf, MPI_Comm comm);

// Per timed iteration: an untimed MPI_Barrier, then one collective timed on the host steady
// clock; the samples are reduced with MAX over ranks. The checks run after timing, on freshly
// written inputs. Buffers are allocated and touched before any timing.
BenchResult bench(const BenchSpec& spec, MPI_Comm comm);

// bench with the untimed barrier on start_on, a communicator over comm's ranks and others: the
// same collective run at once on other sub-communicators of start_on (the shards of a
// hierarchical all-reduce crossing between nodes, say) starts every warm-up and timed call
// together with this one. Every rank of start_on calls it with the same spec; a rank in none of
// the sub-communicators passes comm = MPI_COMM_NULL, joins the barriers only and gets no samples.
BenchResult bench_started_together(const BenchSpec& spec, MPI_Comm comm, MPI_Comm start_on);

// Local reduction speed (the gamma of the cost model): time of inout op= in over count elements.
std::vector<double> reduce_time(std::size_t count, DType dtype, Op op, int warmup, int iters);

}  // namespace gdl::comm
