// Which ranks share a node, and the sub-communicators a two-level algorithm runs on. Compiled into
// both native modules (each keeps its own setting and cache).
#pragma once
#include <mpi.h>

#include <cstddef>

namespace gdl::comm {

// Ranks are grouped into nodes by MPI_Comm_split_type(MPI_COMM_TYPE_SHARED), or, when
// set_ranks_per_node(G > 0) was called, in blocks of G consecutive ranks (layouts MPI cannot see).
void set_ranks_per_node(int g);
int ranks_per_node_setting();

struct Topology {
  int nodes = 1;        // number of nodes
  int local_rank = 0;   // this rank's index inside its node
  int local_size = 1;   // ranks on this rank's node
  int min_local = 1;    // ranks on the smallest node: the number of shards hier cuts a buffer into
  int max_local = 1;
};
// Collective over comm the first time (cached on comm as an MPI attribute, freed with it).
Topology topology(MPI_Comm comm);

// The sub-communicators of the two-level algorithms: this rank's node, and the ranks of every node
// with the same local rank (MPI_COMM_NULL where local_rank >= min_local). Owned by comm's cache.
void level_comms(MPI_Comm comm, MPI_Comm* node, MPI_Comm* cross);

// Below this many bytes per rank, hier runs its leader variant: intra-node reduce to local rank
// 0, all-reduce among the node leaders, intra-node broadcast (fewer, larger steps win when
// latency dominates). From this size up: reduce-scatter / shard all-reduce / all-gather.
constexpr std::size_t kHierLeaderBelowBytes = 64 * 1024;
inline const char* hier_variant(std::size_t bytes) { return bytes < kHierLeaderBelowBytes ? "leader" : "rs-ag"; }

}  // namespace gdl::comm
