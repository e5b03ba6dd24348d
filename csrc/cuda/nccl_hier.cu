// The hierarchical all-reduce on GPUs, as Caffe-MPI ran it: NCCL inside the node (reduce of each
// shard to its owner, then broadcast from it), NCCL across the nodes among the ranks with the same
// local index (one NCCL communicator over the MPI cross-node communicator). The node layout and the
// leader/shard switch are the MPI version's (comm/topology.h), so both run the same steps.
#include "comm/allreduce.h"
#include "cuda/check.h"
#include "cuda/device.h"
#include "cuda/nccl.h"

namespace gdl::cuda {

// The communicators are non-blocking (cuda/nccl.cu): every call may answer ncclInProgress, which
// nccl_issued waits out, and the end is waited for with nccl_wait, which watches for errors.
void nccl_hier_allreduce(void* buf, std::size_t count, comm::DType t, comm::Op op, MPI_Comm comm) {
  const comm::Topology topo = comm::topology(comm);
  MPI_Comm node = MPI_COMM_NULL, cross = MPI_COMM_NULL;
  comm::level_comms(comm, &node, &cross);
  // Both on this process's device (chosen once, before any CUDA work), as every NCCL communicator.
  ncclComm_t in_node = nccl_comm(node);
  ncclComm_t across = cross != MPI_COMM_NULL ? nccl_comm(cross) : nullptr;
  const ncclDataType_t dt = nccl_dtype(t);
  const ncclRedOp_t rop = nccl_op(op);
  const std::size_t es = comm::dtype_size(t);
  cudaStream_t s = default_stream();
  char* b = static_cast<char*>(buf);
  if (topo.local_size == 1) {  // as comm/hier.cpp: nothing to do inside a node of one rank
    nccl_issued(ncclAllReduce(b, b, count, dt, rop, across, s), across, 0, "ncclAllReduce");
  } else if (count * es < comm::kHierLeaderBelowBytes) {
    nccl_issued(ncclReduce(b, b, count, dt, rop, 0, in_node, s), in_node, 0, "ncclReduce");
    if (topo.local_rank == 0) nccl_issued(ncclAllReduce(b, b, count, dt, rop, across, s), across, 0, "ncclAllReduce");
    nccl_issued(ncclBroadcast(b, b, count, dt, 0, in_node, s), in_node, 0, "ncclBroadcast");
  } else {
    const int shards = topo.min_local;  // as comm/hier.cpp: local rank j < shards owns shard j
    NCCL_CHECK(ncclGroupStart());
    for (int j = 0; j < shards; ++j) {
      const comm::Block k = comm::block(count, shards, j);
      nccl_issued(ncclReduce(b + k.offset * es, b + k.offset * es, k.count, dt, rop, j, in_node, s), in_node, 0, "ncclReduce");
    }
    nccl_issued(ncclGroupEnd(), in_node, 0, "ncclGroupEnd");
    if (topo.local_rank < shards) {
      const comm::Block k = comm::block(count, shards, topo.local_rank);
      nccl_issued(ncclAllReduce(b + k.offset * es, b + k.offset * es, k.count, dt, rop, across, s), across, 0, "ncclAllReduce");
    }
    NCCL_CHECK(ncclGroupStart());
    for (int j = 0; j < shards; ++j) {
      const comm::Block k = comm::block(count, shards, j);
      nccl_issued(ncclBroadcast(b + k.offset * es, b + k.offset * es, k.count, dt, j, in_node, s), in_node, 0, "ncclBroadcast");
    }
    nccl_issued(ncclGroupEnd(), in_node, 0, "ncclGroupEnd");
  }
  nccl_wait(topo.local_size == 1 ? across : in_node, s, 0, "the hierarchical all-reduce");
  if (across && topo.local_size > 1) nccl_wait(across, s, 0, "the hierarchical all-reduce");
}

}  // namespace gdl::cuda
