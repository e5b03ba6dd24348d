// The node layout of a communicator, cached on it as an MPI attribute.
#include "comm/topology.h"

#include <atomic>

#include "comm/mpi_check.h"

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

}  // namespace gdl::comm
