// The hierarchical (two-level) all-reduce on MPI, as Caffe-MPI and Horovod run it: inside a node
// over the fast link, across nodes only 1/G of the buffer per rank.
#include <climits>
#include <cstring>
#include <vector>

#include "comm/allreduce.h"

namespace gdl::comm {

namespace {

#if MPI_VERSION >= 4
using Count = MPI_Count;
#else
using Count = int;
#endif

Count mpi_count(std::size_t n) {
#if MPI_VERSION < 4
  GDL_REQUIRE(n <= INT_MAX, "hier: counts above INT_MAX need an MPI-4 library");
#endif
  return static_cast<Count>(n);
}

}  // namespace

void hier_allreduce(void* buf, std::size_t count, DType dtype, Op op, MPI_Comm comm) {
  const Topology t = topology(comm);
  MPI_Comm node = MPI_COMM_NULL, cross = MPI_COMM_NULL;
  level_comms(comm, &node, &cross);
  const MPI_Datatype type = mpi_datatype(dtype);
  const MPI_Op mop = mpi_op(dtype, op);
  const std::size_t es = dtype_size(dtype);
  if (t.local_size == 1) {
    // A node of one rank has nothing to reduce or share inside it: only the inter-node all-reduce,
    // in place. (The steps below would copy the whole buffer out and back around it: at 10 Gbit/s
    // between emulated nodes those copies cost 28 % beyond what the two-level model prices.)
    // Larger nodes' ranks with local index 0 meet this rank in the same all-reduce on `cross`.
#if MPI_VERSION >= 4
    GDL_MPI(MPI_Allreduce_c(MPI_IN_PLACE, buf, mpi_count(count), type, mop, cross));
#else
    GDL_MPI(MPI_Allreduce(MPI_IN_PLACE, buf, mpi_count(count), type, mop, cross));
#endif
    return;
  }
  if (count * es < kHierLeaderBelowBytes) {
    // Leader variant: reduce to local rank 0, all-reduce among the leaders, broadcast.
#if MPI_VERSION >= 4
    const Count c = mpi_count(count);
    GDL_MPI(MPI_Reduce_c(t.local_rank == 0 ? MPI_IN_PLACE : buf, buf, c, type, mop, 0, node));
    if (t.local_rank == 0) GDL_MPI(MPI_Allreduce_c(MPI_IN_PLACE, buf, c, type, mop, cross));
    GDL_MPI(MPI_Bcast_c(buf, c, type, 0, node));
#else
    const int c = mpi_count(count);
    GDL_MPI(MPI_Reduce(t.local_rank == 0 ? MPI_IN_PLACE : buf, buf, c, type, mop, 0, node));
    if (t.local_rank == 0) GDL_MPI(MPI_Allreduce(MPI_IN_PLACE, buf, c, type, mop, cross));
    GDL_MPI(MPI_Bcast(buf, c, type, 0, node));
#endif
    return;
  }
  // Shard variant. The buffer is cut into S = min_local shards (nodes of different sizes agree on
  // them); local rank j < S owns shard j, larger local ranks own none and only take part inside
  // their node. Uneven counts: the first count % S shards hold one element more.
  const int shards = t.min_local;
  std::vector<Count> counts(static_cast<std::size_t>(t.local_size), 0);
  for (int j = 0; j < shards; ++j) counts[static_cast<std::size_t>(j)] = mpi_count(block(count, shards, j).count);
  const std::size_t mine = static_cast<std::size_t>(counts[static_cast<std::size_t>(t.local_rank)]);
  const Block own = block(count, shards, t.local_rank < shards ? t.local_rank : 0);
  char* b = static_cast<char*>(buf);
  // 1. Reduce-scatter inside the node: local rank j receives shard j reduced over its node.
  char* shard = scratch(block(count, shards, 0).count * es);
#if MPI_VERSION >= 4
  GDL_MPI(MPI_Reduce_scatter_c(buf, shard, counts.data(), type, mop, node));
  // 2. All-reduce of each shard among the ranks with the same local index, one per node.
  if (mine) GDL_MPI(MPI_Allreduce_c(MPI_IN_PLACE, shard, static_cast<Count>(mine), type, mop, cross));
#else
  GDL_MPI(MPI_Reduce_scatter(buf, shard, counts.data(), type, mop, node));
  if (mine) GDL_MPI(MPI_Allreduce(MPI_IN_PLACE, shard, static_cast<int>(mine), type, mop, cross));
#endif
  if (mine) std::memcpy(b + own.offset * es, shard, mine * es);  // in place, for the broadcast
  // 3. All-gather inside the node as one broadcast per shard from its owner, all in flight at
  //    once. (MPI_Allgatherv would do, but MPICH 5 on a node of an emulated cluster, cliques on,
  //    took 500-840 ms for 8 MB where MPI_Allgather took 8.5 ms and these broadcasts 4.3 ms.)
  std::vector<MPI_Request> reqs(static_cast<std::size_t>(shards));
  for (int j = 0; j < shards; ++j) {
    const Block k = block(count, shards, j);
#if MPI_VERSION >= 4
    GDL_MPI(MPI_Ibcast_c(b + k.offset * es, mpi_count(k.count), type, j, node, &reqs[static_cast<std::size_t>(j)]));
#else
    GDL_MPI(MPI_Ibcast(b + k.offset * es, mpi_count(k.count), type, j, node, &reqs[static_cast<std::size_t>(j)]));
#endif
  }
  GDL_MPI(MPI_Waitall(shards, reqs.data(), MPI_STATUSES_IGNORE));
}

}  // namespace gdl::comm
