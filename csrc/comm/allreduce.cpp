// gdlbench's all-reduce algorithms on MPI point-to-point, and the library collectives.
#include "comm/allreduce.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <vector>

namespace gdl::comm {


// --- datatypes and ops ---------------------------------------------------------------------
template <bool BF16, Op O>
static void user_op16(void* in, void* inout, int* len, MPI_Datatype*) {
  reduce_loop16<BF16, O>(static_cast<uint16_t*>(inout), static_cast<const uint16_t*>(in),
                         static_cast<std::size_t>(*len));
}

template <bool BF16>
static MPI_Op make_op16(Op op) {
  MPI_User_function* fn = nullptr;
  switch (op) {
    case Op::sum: fn = &user_op16<BF16, Op::sum>; break;
    case Op::prod: fn = &user_op16<BF16, Op::prod>; break;
    case Op::max: fn = &user_op16<BF16, Op::max>; break;
    case Op::min: fn = &user_op16<BF16, Op::min>; break;
  }
  MPI_Op o;
  GDL_MPI(MPI_Op_create(fn, 1, &o));
  return o;
}

MPI_Datatype mpi_datatype(DType t) {
  switch (t) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    case DType::f16:
    case DType::bf16: return MPI_UINT16_T;  // storage only; reduced by the user ops below
  }
  return MPI_BYTE;
}

MPI_Op mpi_op(DType t, Op op) {
  if (t == DType::f16 || t == DType::bf16) {
    // Created once (thread-safe static initialisation), never freed.
    static const MPI_Op half_ops[4] = {make_op16<false>(Op::sum), make_op16<false>(Op::prod),
                                       make_op16<false>(Op::max), make_op16<false>(Op::min)};
    static const MPI_Op bf16_ops[4] = {make_op16<true>(Op::sum), make_op16<true>(Op::prod),
                                       make_op16<true>(Op::max), make_op16<true>(Op::min)};
    return (t == DType::f16 ? half_ops : bf16_ops)[static_cast<int>(op)];
  }
  switch (op) {
    case Op::sum: return MPI_SUM;
    case Op::prod: return MPI_PROD;
    case Op::max: return MPI_MAX;
    case Op::min: return MPI_MIN;
  }
  return MPI_SUM;
}

char* scratch(std::size_t bytes) {
  thread_local std::vector<char> buf;
  if (buf.size() < bytes) {
    buf.clear();
    buf.shrink_to_fit();
    buf.resize(bytes);  // value-initialised: the pages are touched here, once
  }
  return buf.data();
}

// --- point-to-point helpers (bytes; messages above 1 GiB go in pieces) ---------------------------
namespace {

constexpr std::size_t kPiece = std::size_t(1) << 30;
constexpr int kTagRing = 0x6d10, kTagRd = 0x6d20, kTagTree = 0x6d30, kTagPush = 0x6d40, kTagPull = 0x6d50;

void sendrecv(const void* sbuf, std::size_t sbytes, int dst, void* rbuf, std::size_t rbytes, int src, int tag,
              MPI_Comm comm) {
  std::size_t off = 0;
  const auto* s = static_cast<const char*>(sbuf);
  auto* r = static_cast<char*>(rbuf);
  do {  // both sides walk the same piece sequence: sizes agree piece by piece
    const std::size_t sn = sbytes > off ? std::min(kPiece, sbytes - off) : 0;
    const std::size_t rn = rbytes > off ? std::min(kPiece, rbytes - off) : 0;
    GDL_MPI(MPI_Sendrecv(s + std::min(off, sbytes), static_cast<int>(sn), MPI_BYTE, dst, tag,
                         r + std::min(off, rbytes), static_cast<int>(rn), MPI_BYTE, src, tag, comm,
                         MPI_STATUS_IGNORE));
    off += kPiece;
  } while (off < std::max(sbytes, rbytes));
}

void send(const void* buf, std::size_t bytes, int dst, int tag, MPI_Comm comm) {
  std::size_t off = 0;
  do {
    const std::size_t n = bytes > off ? std::min(kPiece, bytes - off) : 0;
    GDL_MPI(MPI_Send(static_cast<const char*>(buf) + std::min(off, bytes), static_cast<int>(n), MPI_BYTE, dst,
                     tag, comm));
    off += kPiece;
  } while (off < bytes);
}

void recv(void* buf, std::size_t bytes, int src, int tag, MPI_Comm comm, int* source = nullptr) {
  std::size_t off = 0;
  do {
    const std::size_t n = bytes > off ? std::min(kPiece, bytes - off) : 0;
    MPI_Status st;
    GDL_MPI(MPI_Recv(static_cast<char*>(buf) + std::min(off, bytes), static_cast<int>(n), MPI_BYTE, src, tag,
                     comm, &st));
    if (source) *source = st.MPI_SOURCE;
    if (src == MPI_ANY_SOURCE) src = st.MPI_SOURCE;  // the other pieces come from the same rank
    off += kPiece;
  } while (off < bytes);
}

void isend(const void* buf, std::size_t bytes, int dst, int tag, MPI_Comm comm, std::vector<MPI_Request>& reqs) {
  std::size_t off = 0;
  do {
    const std::size_t n = bytes > off ? std::min(kPiece, bytes - off) : 0;
    reqs.emplace_back();
    GDL_MPI(MPI_Isend(static_cast<const char*>(buf) + std::min(off, bytes), static_cast<int>(n), MPI_BYTE, dst,
                      tag, comm, &reqs.back()));
    off += kPiece;
  } while (off < bytes);
}

void irecv(void* buf, std::size_t bytes, int src, int tag, MPI_Comm comm, std::vector<MPI_Request>& reqs) {
  std::size_t off = 0;
  do {
    const std::size_t n = bytes > off ? std::min(kPiece, bytes - off) : 0;
    reqs.emplace_back();
    GDL_MPI(MPI_Irecv(static_cast<char*>(buf) + std::min(off, bytes), static_cast<int>(n), MPI_BYTE, src, tag,
                      comm, &reqs.back()));
    off += kPiece;
  } while (off < bytes);
}

void waitall(std::vector<MPI_Request>& reqs) {
  if (!reqs.empty()) GDL_MPI(MPI_Waitall(static_cast<int>(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE));
  reqs.clear();
}



// --- the algorithms (in place) -------------------------------------------------------------
void ring(char* buf, std::size_t count, DType t, Op op, MPI_Comm comm, int rank, int n) {
  const std::size_t es = dtype_size(t);
  const int right = (rank + 1) % n, left = (rank + n - 1) % n;
  char* tmp = scratch(block(count, n, 0).count * es);
  // Reduce-scatter: after step s, block (rank - s - 1) holds the sum of s + 2 ranks' blocks.
  for (int s = 0; s < n - 1; ++s) {
    const Block out = block(count, n, (rank - s + n) % n);
    const Block in = block(count, n, (rank - s - 1 + 2 * n) % n);
    sendrecv(buf + out.offset * es, out.count * es, right, tmp, in.count * es, left, kTagRing, comm);
    reduce(buf + in.offset * es, tmp, in.count, t, op);
  }
  // All-gather: rank holds the full block (rank + 1); pass the completed blocks around.
  for (int s = 0; s < n - 1; ++s) {
    const Block out = block(count, n, (rank + 1 - s + n) % n);
    const Block in = block(count, n, (rank - s + n) % n);
    sendrecv(buf + out.offset * es, out.count * es, right, buf + in.offset * es, in.count * es, left, kTagRing,
             comm);
  }
}

void recursive_doubling(char* buf, std::size_t count, DType t, Op op, MPI_Comm comm, int rank, int n) {
  const std::size_t bytes = count * dtype_size(t);
  int p2 = 1;
  while (p2 * 2 <= n) p2 *= 2;
  const int extra = n - p2;  // ranks 0 .. 2*extra-1 pair up: the even one folds into the odd one
  char* tmp = scratch(bytes);
  int newrank;
  if (rank < 2 * extra) {
    if (rank % 2 == 0) {
      send(buf, bytes, rank + 1, kTagRd, comm);
      newrank = -1;
    } else {
      recv(tmp, bytes, rank - 1, kTagRd, comm);
      reduce(buf, tmp, count, t, op);
      newrank = rank / 2;
    }
  } else {
    newrank = rank - extra;
  }
  if (newrank >= 0) {
    for (int mask = 1; mask < p2; mask <<= 1) {
      const int newpeer = newrank ^ mask;
      const int peer = newpeer < extra ? newpeer * 2 + 1 : newpeer + extra;
      sendrecv(buf, bytes, peer, tmp, bytes, peer, kTagRd, comm);
      reduce(buf, tmp, count, t, op);
    }
  }
  if (rank < 2 * extra) {
    if (rank % 2 == 1) send(buf, bytes, rank - 1, kTagRd, comm);
    else recv(buf, bytes, rank + 1, kTagRd, comm);
  }
}

void binomial_tree(char* buf, std::size_t count, DType t, Op op, MPI_Comm comm, int rank, int n) {
  const std::size_t bytes = count * dtype_size(t);
  char* tmp = scratch(bytes);
  // Reduce to rank 0: at level `mask`, ranks with that bit set send to rank - mask and drop out.
  for (int mask = 1; mask < n; mask <<= 1) {
    if (rank & mask) {
      send(buf, bytes, rank - mask, kTagTree, comm);
      break;
    }
    if (rank + mask < n) {
      recv(tmp, bytes, rank + mask, kTagTree, comm);
      reduce(buf, tmp, count, t, op);
    }
  }
  // Broadcast from rank 0 down the same tree.
  int mask = 1;
  while (mask < n) {
    if (rank & mask) {
      recv(buf, bytes, rank - mask, kTagTree + 1, comm);
      break;
    }
    mask <<= 1;
  }
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (rank + mask < n) send(buf, bytes, rank + mask, kTagTree + 1, comm);
}

void parameter_server(char* buf, std::size_t count, DType t, Op op, MPI_Comm comm, int rank, int n, int servers) {
  GDL_REQUIRE(servers >= 1 && servers <= n, "ps: servers must be between 1 and the number of ranks (", n,
              "), got ", servers);
  const std::size_t es = dtype_size(t);
  std::vector<MPI_Request> reqs;
  // Push: every rank sends shard s to server s.
  for (int s = 0; s < servers; ++s) {
    if (s == rank) continue;
    const Block b = block(count, servers, s);
    isend(buf + b.offset * es, b.count * es, s, kTagPush, comm, reqs);
  }
  const bool server = rank < servers;
  const Block mine = server ? block(count, servers, rank) : Block{0, 0};
  if (server) {  // reduce the N - 1 pushes into this rank's shard, in arrival order
    char* tmp = scratch(mine.count * es);
    for (int k = 0; k < n - 1; ++k) {
      recv(tmp, mine.count * es, MPI_ANY_SOURCE, kTagPush, comm);
      reduce(buf + mine.offset * es, tmp, mine.count, t, op);
    }
  }
  waitall(reqs);  // the shards sent are free to be overwritten by the pull
  // Pull: every rank receives shard s from server s.
  for (int s = 0; s < servers; ++s) {
    if (s == rank) continue;
    const Block b = block(count, servers, s);
    irecv(buf + b.offset * es, b.count * es, s, kTagPull, comm, reqs);
  }
  if (server)
    for (int r = 0; r < n; ++r)
      if (r != rank) isend(buf + mine.offset * es, mine.count * es, r, kTagPull, comm, reqs);
  waitall(reqs);
}

}  // namespace

void allreduce(Algo algo, void* buf, std::size_t count, DType dtype, Op op, MPI_Comm comm,
               const AllreduceOptions& opt) {
  if (algo == Algo::library) {  // first: nothing else in the timed call, as in a bare MPI loop
#if MPI_VERSION >= 4
    GDL_MPI(MPI_Allreduce_c(MPI_IN_PLACE, buf, static_cast<MPI_Count>(count), mpi_datatype(dtype),
                            mpi_op(dtype, op), comm));
#else
    GDL_REQUIRE(count <= INT_MAX, "allreduce: count above INT_MAX needs an MPI-4 library");
    GDL_MPI(MPI_Allreduce(MPI_IN_PLACE, buf, static_cast<int>(count), mpi_datatype(dtype), mpi_op(dtype, op), comm));
#endif
    return;
  }
  int rank = 0, n = 1;
  GDL_MPI(MPI_Comm_rank(comm, &rank));
  GDL_MPI(MPI_Comm_size(comm, &n));
  if (algo == Algo::ps)
    GDL_REQUIRE(opt.servers >= 1 && opt.servers <= n, "ps: servers must be between 1 and the number of ranks (",
                n, "), got ", opt.servers);
  if (n == 1 || count == 0) return;
  char* b = static_cast<char*>(buf);
  switch (algo) {
    case Algo::ring: return ring(b, count, dtype, op, comm, rank, n);
    case Algo::rd: return recursive_doubling(b, count, dtype, op, comm, rank, n);
    case Algo::tree: return binomial_tree(b, count, dtype, op, comm, rank, n);
    case Algo::ps: return parameter_server(b, count, dtype, op, comm, rank, n, opt.servers);
    case Algo::hier: return hier_allreduce(b, count, dtype, op, comm);
    case Algo::library: break;
  }
}

void allreduce(Algo algo, const void* sendbuf, void* recvbuf, std::size_t count, DType dtype, Op op,
               MPI_Comm comm, const AllreduceOptions& opt) {
  if (algo == Algo::library) {
#if MPI_VERSION >= 4
    GDL_MPI(MPI_Allreduce_c(sendbuf, recvbuf, static_cast<MPI_Count>(count), mpi_datatype(dtype),
                            mpi_op(dtype, op), comm));
#else
    GDL_REQUIRE(count <= INT_MAX, "allreduce: count above INT_MAX needs an MPI-4 library");
    GDL_MPI(MPI_Allreduce(sendbuf, recvbuf, static_cast<int>(count), mpi_datatype(dtype), mpi_op(dtype, op), comm));
#endif
    return;
  }
  if (sendbuf != recvbuf) std::memcpy(recvbuf, sendbuf, count * dtype_size(dtype));
  allreduce(algo, recvbuf, count, dtype, op, comm, opt);
}

void reduce_scatter(const void* sendbuf, void* recvbuf, std::size_t count, DType dtype, Op op, MPI_Comm comm) {
  const void* s = sendbuf ? sendbuf : MPI_IN_PLACE;
#if MPI_VERSION >= 4
  GDL_MPI(MPI_Reduce_scatter_block_c(s, recvbuf, static_cast<MPI_Count>(count), mpi_datatype(dtype),
                                     mpi_op(dtype, op), comm));
#else
  GDL_REQUIRE(count <= INT_MAX, "reduce_scatter: count above INT_MAX needs an MPI-4 library");
  GDL_MPI(MPI_Reduce_scatter_block(s, recvbuf, static_cast<int>(count), mpi_datatype(dtype), mpi_op(dtype, op), comm));
#endif
}

void allgather(const void* sendbuf, void* recvbuf, std::size_t count, DType dtype, MPI_Comm comm) {
  const MPI_Datatype t = mpi_datatype(dtype);
#if MPI_VERSION >= 4
  const MPI_Count c = static_cast<MPI_Count>(count);
  if (sendbuf) GDL_MPI(MPI_Allgather_c(sendbuf, c, t, recvbuf, c, t, comm));
  else GDL_MPI(MPI_Allgather_c(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recvbuf, c, t, comm));
#else
  GDL_REQUIRE(count <= INT_MAX, "allgather: count above INT_MAX needs an MPI-4 library");
  const int c = static_cast<int>(count);
  if (sendbuf) GDL_MPI(MPI_Allgather(sendbuf, c, t, recvbuf, c, t, comm));
  else GDL_MPI(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recvbuf, c, t, comm));
#endif
}

namespace {
struct BlockCounts {  // block()'s cut of count elements among the ranks of comm, in MPI's types
  int n = 1;
#if MPI_VERSION >= 4
  std::vector<MPI_Count> counts;
  std::vector<MPI_Aint> displs;
#else
  std::vector<int> counts, displs;
#endif
};
BlockCounts block_counts(std::size_t count, MPI_Comm comm) {
  BlockCounts b;
  GDL_MPI(MPI_Comm_size(comm, &b.n));
  for (int r = 0; r < b.n; ++r) {
    const Block k = block(count, b.n, r);
#if MPI_VERSION < 4
    GDL_REQUIRE(count <= INT_MAX, "sharded collectives: counts above INT_MAX need an MPI-4 library");
#endif
    b.counts.push_back(static_cast<decltype(b.counts)::value_type>(k.count));
    b.displs.push_back(static_cast<decltype(b.displs)::value_type>(k.offset));
  }
  return b;
}
}  // namespace

void reduce_scatter_blocks(void* buf, std::size_t count, DType dtype, Op op, MPI_Comm comm) {
  int n = 1;
  GDL_MPI(MPI_Comm_size(comm, &n));
  if (count % static_cast<std::size_t>(n) == 0) return reduce_scatter(nullptr, buf, count / n, dtype, op, comm);
  const BlockCounts b = block_counts(count, comm);
#if MPI_VERSION >= 4
  GDL_MPI(MPI_Reduce_scatter_c(MPI_IN_PLACE, buf, b.counts.data(), mpi_datatype(dtype), mpi_op(dtype, op), comm));
#else
  GDL_MPI(MPI_Reduce_scatter(MPI_IN_PLACE, buf, b.counts.data(), mpi_datatype(dtype), mpi_op(dtype, op), comm));
#endif
}

void allgather_blocks(void* buf, std::size_t count, DType dtype, MPI_Comm comm) {
  int n = 1;
  GDL_MPI(MPI_Comm_size(comm, &n));
  if (count % static_cast<std::size_t>(n) == 0) return allgather(nullptr, buf, count / n, dtype, comm);
  const BlockCounts b = block_counts(count, comm);
#if MPI_VERSION >= 4
  GDL_MPI(MPI_Allgatherv_c(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, b.counts.data(), b.displs.data(),
                           mpi_datatype(dtype), comm));
#else
  GDL_MPI(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, b.counts.data(), b.displs.data(),
                         mpi_datatype(dtype), comm));
#endif
}

void broadcast(void* buf, std::size_t count, DType dtype, int root, MPI_Comm comm) {
#if MPI_VERSION >= 4
  GDL_MPI(MPI_Bcast_c(buf, static_cast<MPI_Count>(count), mpi_datatype(dtype), root, comm));
#else
  GDL_REQUIRE(count <= INT_MAX, "broadcast: count above INT_MAX needs an MPI-4 library");
  GDL_MPI(MPI_Bcast(buf, static_cast<int>(count), mpi_datatype(dtype), root, comm));
#endif
}

// One case per collective: what each is, lives in its description (comm/collective.h).
void run_collective(const BenchSpec& spec, const void* sendbuf, void* recvbuf, MPI_Comm comm) {
  switch (spec.coll) {
    case Collective::allreduce:
      if (sendbuf) allreduce(spec.algo, sendbuf, recvbuf, spec.count, spec.dtype, spec.op, comm, spec.opt);
      else allreduce(spec.algo, recvbuf, spec.count, spec.dtype, spec.op, comm, spec.opt);
      return;
    case Collective::reduce_scatter: return reduce_scatter(sendbuf, recvbuf, spec.count, spec.dtype, spec.op, comm);
    case Collective::allgather: return allgather(sendbuf, recvbuf, spec.count, spec.dtype, comm);
    case Collective::broadcast: return broadcast(recvbuf, spec.count, spec.dtype, spec.root, comm);
  }
}

}  // namespace gdl::comm
