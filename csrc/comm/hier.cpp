// Node topology and the hierarchical (two-level) all-reduce, as Caffe-MPI and Horovod run it:
// inside a node over the fast link, across nodes only 1/G of the buffer per rank.
#include <atomic>
#include <climits>
#include <vector>

#include "comm/allreduce.h"

namespace gdl::comm {

namespace {

std::atomic<int> g_ranks_per_node{0};

// What is cached on a communicator: its node and cross-node sub-communicators.
struct Layout {
  int ranks_per_node = 0;  // the setting it was built with (0: MPI's shared-memory split)
  Topology topo;
  MPI_Comm node = MPI_COMM_NULL;   // the ranks of this node
  MPI_Comm cross = MPI_COMM_NULL;  // one rank per node, the same local rank; null where local_rank >= min_local
};

int free_layout(MPI_Comm, int, void* value, void*) {
  auto* l = static_cast<Layout*>(value);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) {
    if (l->node != MPI_COMM_NULL) MPI_Comm_free(&l->node);
    if (l->cross != MPI_COMM_NULL) MPI_Comm_free(&l->cross);
  }
  delete l;
  return MPI_SUCCESS;
}

int layout_keyval() {
  static const int key = [] {
    int k = MPI_KEYVAL_INVALID;
    GDL_MPI(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, free_layout, &k, nullptr));
    return k;
  }();
  return key;
}

// The layout of comm, built (collectively) on first use and whenever the setting changed.
const Layout& layout(MPI_Comm comm) {
  const int key = layout_keyval();
  const int rpn = g_ranks_per_node.load();
  void* value = nullptr;
  int found = 0;
  GDL_MPI(MPI_Comm_get_attr(comm, key, &value, &found));
  if (found && static_cast<Layout*>(value)->ranks_per_node == rpn) return *static_cast<Layout*>(value);
  if (found) GDL_MPI(MPI_Comm_delete_attr(comm, key));
  auto* l = new Layout;
  l->ranks_per_node = rpn;
  int rank = 0;
  GDL_MPI(MPI_Comm_rank(comm, &rank));
  if (rpn > 0) GDL_MPI(MPI_Comm_split(comm, rank / rpn, rank, &l->node));
  else GDL_MPI(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &l->node));
  Topology& t = l->topo;
  GDL_MPI(MPI_Comm_rank(l->node, &t.local_rank));
  GDL_MPI(MPI_Comm_size(l->node, &t.local_size));
  int leader = t.local_rank == 0 ? 1 : 0;
  GDL_MPI(MPI_Allreduce(&leader, &t.nodes, 1, MPI_INT, MPI_SUM, comm));
  int sizes[2] = {-t.local_size, t.local_size};  // one MAX gives both the smallest and the largest node
  GDL_MPI(MPI_Allreduce(MPI_IN_PLACE, sizes, 2, MPI_INT, MPI_MAX, comm));
  t.min_local = -sizes[0];
  t.max_local = sizes[1];
  const int color = t.local_rank < t.min_local ? t.local_rank : MPI_UNDEFINED;
  GDL_MPI(MPI_Comm_split(comm, color, rank, &l->cross));
  GDL_MPI(MPI_Comm_set_attr(comm, key, l));
  return *l;
}

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

void set_ranks_per_node(int g) {
  GDL_REQUIRE(g >= 0, "ranks per node must be >= 1 (0: MPI's shared-memory split), got ", g);
  g_ranks_per_node.store(g);
}

int ranks_per_node_setting() { return g_ranks_per_node.load(); }

Topology topology(MPI_Comm comm) { return layout(comm).topo; }

void level_comms(MPI_Comm comm, MPI_Comm* node, MPI_Comm* cross) {
  const Layout& l = layout(comm);
  *node = l.node;
  *cross = l.cross;
}

const char* hier_variant(std::size_t bytes) { return bytes < kHierLeaderBelowBytes ? "leader" : "rs-ag"; }

void hier_allreduce(void* buf, std::size_t count, DType dtype, Op op, MPI_Comm comm) {
  const Layout& l = layout(comm);
  const Topology& t = l.topo;
  const MPI_Datatype type = mpi_datatype(dtype);
  const MPI_Op mop = mpi_op(dtype, op);
  const std::size_t es = dtype_size(dtype);
  if (count * es < kHierLeaderBelowBytes) {
    // Leader variant: reduce to local rank 0, all-reduce among the leaders, broadcast.
#if MPI_VERSION >= 4
    const Count c = mpi_count(count);
    GDL_MPI(MPI_Reduce_c(t.local_rank == 0 ? MPI_IN_PLACE : buf, buf, c, type, mop, 0, l.node));
    if (t.local_rank == 0) GDL_MPI(MPI_Allreduce_c(MPI_IN_PLACE, buf, c, type, mop, l.cross));
    GDL_MPI(MPI_Bcast_c(buf, c, type, 0, l.node));
#else
    const int c = mpi_count(count);
    GDL_MPI(MPI_Reduce(t.local_rank == 0 ? MPI_IN_PLACE : buf, buf, c, type, mop, 0, l.node));
    if (t.local_rank == 0) GDL_MPI(MPI_Allreduce(MPI_IN_PLACE, buf, c, type, mop, l.cross));
    GDL_MPI(MPI_Bcast(buf, c, type, 0, l.node));
#endif
    return;
  }
  // Shard variant. The buffer is cut into S = min_local shards (nodes of different sizes agree on
  // them); local rank j < S owns shard j, larger local ranks own none and only take part inside
  // their node. Uneven counts: the first count % S shards hold one element more.
  const int shards = t.min_local;
  std::vector<Count> counts(static_cast<std::size_t>(t.local_size), 0);
#if MPI_VERSION >= 4
  std::vector<MPI_Aint> displs(counts.size(), 0);
#else
  std::vector<int> displs(counts.size(), 0);
#endif
  for (int j = 0; j < shards; ++j) {
    const Block b = block(count, shards, j);
    counts[static_cast<std::size_t>(j)] = mpi_count(b.count);
    displs[static_cast<std::size_t>(j)] = static_cast<decltype(displs)::value_type>(b.offset);
  }
  for (int j = shards; j < t.local_size; ++j) displs[static_cast<std::size_t>(j)] = displs[0];
  const std::size_t mine = static_cast<std::size_t>(counts[static_cast<std::size_t>(t.local_rank)]);
  char* shard = scratch(block(count, shards, 0).count * es);
#if MPI_VERSION >= 4
  GDL_MPI(MPI_Reduce_scatter_c(buf, shard, counts.data(), type, mop, l.node));
  if (mine) GDL_MPI(MPI_Allreduce_c(MPI_IN_PLACE, shard, static_cast<Count>(mine), type, mop, l.cross));
  GDL_MPI(MPI_Allgatherv_c(shard, static_cast<Count>(mine), type, buf, counts.data(), displs.data(), type, l.node));
#else
  GDL_MPI(MPI_Reduce_scatter(buf, shard, counts.data(), type, mop, l.node));
  if (mine) GDL_MPI(MPI_Allreduce(MPI_IN_PLACE, shard, static_cast<int>(mine), type, mop, l.cross));
  GDL_MPI(MPI_Allgatherv(shard, static_cast<int>(mine), type, buf, counts.data(), displs.data(), type, l.node));
#endif
}

}  // namespace gdl::comm
