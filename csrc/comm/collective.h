// One description per collective and per all-reduce algorithm: the facts both harnesses read
// (comm/bench.cpp on MPI, cuda/nccl.cu on NCCL), so that neither branches on which collective it
// times. Adding a collective: an entry in kCollectives, its MPI call in comm::run_collective and
// its NCCL call in cuda::nccl_launch (docs/adding-a-collective.md). Free of MPI and CUDA, so both
// native modules compile it.
#pragma once
#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/types.h"
#include "common/fault.h"
#include "common/timer.h"

namespace gdl::comm {

enum class Collective { allreduce, reduce_scatter, allgather, broadcast };

// All-reduce algorithms. library: the backend's own call (MPI_Allreduce, ncclAllReduce); the rest
// are gdlbench's, on MPI point-to-point (comm/allreduce.cpp).
enum class Algo {
  library,  // MPI_Allreduce / ncclAllReduce
  ring,     // reduce-scatter + all-gather around a ring: 2(N-1) steps of m/N bytes
  rd,       // recursive doubling; N not a power of two: the extra ranks fold into a partner first
  tree,     // binomial-tree reduce to rank 0, then binomial-tree broadcast
  ps,       // parameter server: ranks 0..P-1 each own 1/P of the buffer; push, reduce, pull
  hier,     // two levels (comm/hier.cpp): intra-node reduce-scatter, inter-node all-reduce of each
            // shard, intra-node all-gather; below kHierLeaderBelowBytes node leaders do it instead
};

struct AllreduceOptions {
  int servers = 1;  // ps: number of server ranks P (1 <= P <= N); ranks 0..P-1 serve
};

// Where a rank's input and result sit, in elements. In place there is no send buffer: the input
// is read from the receive buffer at in_at and the result left there.
struct Layout {
  std::size_t send_n = 0;  // send buffer (0: none, in place)
  std::size_t recv_n = 0;  // receive buffer
  std::size_t in_at = 0;   // in place: where this rank's input starts in the receive buffer
  std::size_t in_n = 0;    // this rank's input (0: it gives none, as a broadcast's non-root)
  std::size_t out_at = 0;  // where this rank's result starts in the receive buffer
  std::size_t out_n = 0;   // elements of the result the exact check compares
};

// MPI and NCCL differ in one in-place convention: MPI_Reduce_scatter_block leaves the result at
// the start of the buffer, ncclReduceScatter in block `rank`.
enum class InPlaceResult { first_block, own_block };

// What one exact-check round knows: the values are functions of these (comm/types.h).
struct CheckRound {
  Op op;
  uint64_t seed;
  int rank, n, root;
  std::size_t count;  // elements per rank
};

// The one table of the collectives: gdlbench reads it too (_core.collectives(), gdlbench/primitives/collectives.py),
// so the CLI, the report and the model never hold a twin of it.
struct Description {
  Collective id;
  const char* name;
  bool reduces;        // takes a reduction op
  bool rooted;         // has a root rank and one buffer
  bool size_is_total;  // a row's size is the whole buffer of N blocks (nccl-tests), not each rank's
  bool algorithms;     // takes every algorithm of kAlgos; otherwise only the library's call
  int host_buffers;    // buffers of a row's size a rank holds (send, receive, scratch): the memory check
  const char* cost;    // its entry in gdlbench/primitives/costmodel.py; nullptr: the entry of the algorithm it runs
  // nccl-tests' bus bandwidth factor: busbw = algbw x bus_factor(N), and its formula as printed.
  const char* bus_factor_formula;
  double (*bus_factor)(int n);
  Layout (*layout)(std::size_t count, int n, int rank, int root, bool inplace, InPlaceResult rs);
  double (*input)(const CheckRound& c, std::size_t i);     // element i of this rank's input
  double (*expected)(const CheckRound& c, std::size_t j);  // element j of this rank's result
};

namespace detail {
inline std::size_t own_block(const CheckRound& c) { return static_cast<std::size_t>(c.rank) * c.count; }
}  // namespace detail

// count is per rank: reduce-scatter reduces N*count elements and keeps block `rank`; all-gather
// gathers count elements from every rank into N*count.
inline const Description kCollectives[] = {
    {Collective::allreduce, "allreduce", true, false, false, true, 3, nullptr, "2(N-1)/N",
     [](int n) { return 2.0 * (n - 1) / n; },
     [](std::size_t count, int, int, int, bool inplace, InPlaceResult) {
       return Layout{inplace ? 0 : count, count, 0, count, 0, count};
     },
     [](const CheckRound& c, std::size_t i) { return check_value(c.op, c.seed, c.rank, c.n, i); },
     [](const CheckRound& c, std::size_t j) { return check_expected(c.op, c.seed, c.n, j); }},
    {Collective::reduce_scatter, "reduce_scatter", true, false, true, false, 2, "reduce_scatter", "(N-1)/N",
     [](int n) { return double(n - 1) / n; },
     [](std::size_t count, int n, int rank, int, bool inplace, InPlaceResult rs) {
       const std::size_t all = count * static_cast<std::size_t>(n);
       const std::size_t at = inplace && rs == InPlaceResult::own_block ? static_cast<std::size_t>(rank) * count : 0;
       return Layout{inplace ? 0 : all, inplace ? all : count, 0, all, at, count};
     },
     [](const CheckRound& c, std::size_t i) { return check_value(c.op, c.seed, c.rank, c.n, i); },
     [](const CheckRound& c, std::size_t j) { return check_expected(c.op, c.seed, c.n, detail::own_block(c) + j); }},
    {Collective::allgather, "allgather", false, false, true, false, 2, "allgather", "(N-1)/N",
     [](int n) { return double(n - 1) / n; },
     [](std::size_t count, int n, int rank, int, bool inplace, InPlaceResult) {
       const std::size_t all = count * static_cast<std::size_t>(n);
       return Layout{inplace ? 0 : count, all, static_cast<std::size_t>(rank) * count, count, 0, all};
     },
     [](const CheckRound& c, std::size_t i) {
       return check_value(Op::max, c.seed, c.rank, c.n, detail::own_block(c) + i);
     },
     [](const CheckRound& c, std::size_t j) {
       return check_value(Op::max, c.seed, static_cast<int>(j / (c.count ? c.count : 1)), c.n, j);
     }},
    {Collective::broadcast, "broadcast", false, true, false, false, 1, "broadcast", "1",
     [](int) { return 1.0; },
     [](std::size_t count, int, int rank, int root, bool, InPlaceResult) {
       return Layout{0, count, 0, rank == root ? count : 0, 0, count};
     },
     [](const CheckRound& c, std::size_t i) { return check_value(Op::max, c.seed, c.rank, c.n, i); },
     [](const CheckRound& c, std::size_t j) { return check_value(Op::max, c.seed, c.root, c.n, j); }},
};

inline const Description& describe(Collective c) { return kCollectives[static_cast<int>(c)]; }

inline Collective parse_collective(const std::string& s) {
  std::string names;
  for (const Description& d : kCollectives) {
    if (s == d.name) return d.id;
    names += names.empty() ? d.name : std::string(", ") + d.name;
  }
  GDL_FAIL("unknown collective '", s, "' (", names, ")");
}

// The all-reduce algorithms' names (gdlbench reads them: _core.algorithms()); each name is also its
// cost formula's key in gdlbench/primitives/costmodel.py.
struct AlgoName {
  Algo id;
  const char* name;
  bool servers;       // has server ranks (--servers P)
  const char* about;  // what `allreduce --algo` says of it
};
inline const AlgoName kAlgos[] = {
    {Algo::library, "library", false, "MPI_Allreduce / ncclAllReduce"},
    {Algo::ring, "ring", false, "reduce-scatter + all-gather around a ring"},
    {Algo::rd, "rd", false, "recursive doubling"},
    {Algo::tree, "tree", false, "binomial reduce + broadcast"},
    {Algo::ps, "ps", true, "parameter server"},
    {Algo::hier, "hier", false,
     "two levels: intra-node reduce-scatter, inter-node all-reduce of each shard, intra-node all-gather; "
     "below 64 KiB the node leaders' reduce/all-reduce/broadcast"}};

inline const char* algo_name(Algo a) { return kAlgos[static_cast<int>(a)].name; }

inline Algo parse_algo(const std::string& s) {
  if (s == "mpi") return Algo::library;
  std::string names;
  for (const AlgoName& a : kAlgos) {
    if (s == a.name) return a.id;
    names += names.empty() ? a.name : std::string(", ") + a.name;
  }
  GDL_FAIL("unknown algorithm '", s, "' (", names, ")");
}

// --- benchmarking: what both harnesses take and return ------------------------------------
struct BenchSpec {
  Collective coll = Collective::allreduce;
  Algo algo = Algo::library;   // allreduce only
  std::size_t count = 0;       // elements per rank (see kCollectives)
  DType dtype = DType::f32;
  Op op = Op::sum;
  bool inplace = false;
  int root = 0;                // rooted collectives
  AllreduceOptions opt;
  int warmup = 5;
  int iters = 20;
  int check_iters = 1;         // separate, untimed, exact checks (0: none)
  double timeout_s = 0;        // > 0: abort the job when one call makes no progress this long
  std::size_t rotate_bytes = 0;  // > 0 (MPI): iterations cycle through buffers spread over this
                                 // many bytes (as nccl-tests), so small sizes are not served from cache
  bool on_comm_thread = false;   // MPI: the whole row (timed loop and check) on a thread of its own,
                                 // as the composed iteration sends its messages (comm/bench.cpp)
};

struct BenchResult {
  std::vector<double> samples_us;  // per iteration, the max over ranks
  long long wrong = -1;            // wrong elements summed over ranks and check rounds; -1: no check
};

// The argument checks every harness makes before it allocates anything.
inline void validate(const BenchSpec& spec, int n) {
  gdl::validate(TimingPlan{spec.warmup, spec.iters});
  GDL_REQUIRE(spec.check_iters >= 0, "check iterations must be >= 0, got ", spec.check_iters);
  const Description& d = describe(spec.coll);
  if (d.rooted)
    GDL_REQUIRE(spec.root >= 0 && spec.root < n, d.name, ": root must be between 0 and ", n - 1, ", got ", spec.root);
  if (spec.algo != Algo::library)
    GDL_REQUIRE(d.algorithms, "algorithm ", algo_name(spec.algo), " is an all-reduce; ", d.name,
                " has only the library's");
}

// How the exact check reaches a harness's buffers: host memory directly (MPI), device memory
// through a host copy (NCCL).
//   poison(p, bytes):  every byte 0xFF (NaN for floats, -1 for int32): unwritten output is caught
//   stage(dst, bytes): where to write bytes bound for dst; commit(dst, bytes) sends them there
//   view(src, bytes):  src's bytes, readable on the host
// The exact check of a bench, once for every collective and backend: per round, poison the
// receive buffer, write this rank's input, run() the collective once, count the elements of the
// result that differ from the expected value. Returns this rank's wrong elements.
template <class Access, class Run>
long long check_exact(const BenchSpec& spec, const Layout& l, int rank, int n, char* send, char* recv,
                      Access& mem, Run&& run) {
  const Description& d = describe(spec.coll);
  const DType t = spec.dtype;
  const std::size_t es = dtype_size(t);
  long long wrong = 0;
  for (int c = 0; c < spec.check_iters; ++c) {
    const CheckRound round{spec.op, static_cast<uint64_t>(c) + 1, rank, n, spec.root, spec.count};
    mem.poison(recv, l.recv_n * es);
    if (l.in_n) {
      char* dst = l.send_n ? send : recv + l.in_at * es;
      char* in = mem.stage(dst, l.in_n * es);
      for (std::size_t i = 0; i < l.in_n; ++i) store(in, i, t, d.input(round, i));
      mem.commit(dst, l.in_n * es);
    }
    run();
    const char* out = mem.view(recv, l.recv_n * es) + l.out_at * es;
    // Test-only (common/fault.h): K elements of the result made wrong, so the count below must see them.
    // view() returns a host buffer the check may write: the receive buffer itself, or its host copy.
    for (std::size_t j = 0, k = std::min(fault_count("collective"), l.out_n); j < k; ++j)
      store(const_cast<char*>(out), j, t, d.expected(round, j) + 1000.0);
    wrong += static_cast<long long>(count_wrong(out, l.out_n, t, [&](std::size_t j) { return d.expected(round, j); }));
  }
  return wrong;
}

}  // namespace gdl::comm
