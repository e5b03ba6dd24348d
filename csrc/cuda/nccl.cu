#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/attached_handle.h"
#include "comm/watchdog.h"
#include "cuda/check.h"
#include "cuda/device.h"
#include "cuda/nccl.h"

namespace gdl::cuda {

namespace {

using sclock = std::chrono::steady_clock;

double seconds_since(sclock::time_point t0) { return std::chrono::duration<double>(sclock::now() - t0).count(); }

// The NCCL communicators attached to MPI communicators; each destroyed when MPI frees its MPI
// communicator, unless it was aborted (ncclCommAbort releases it: destroying it again at
// MPI_Finalize would be a double free).
// Both run where nothing can be thrown (MPI's attribute callback, an error being reported): a
// failure is a line on stderr.
void warn_nccl(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) std::fprintf(stderr, "gdlbench: warning: %s: %s\n", what, ncclGetErrorString(r));
}

struct NcclTraits {
  using Handle = ncclComm_t;
  static void destroy(ncclComm_t nc) { warn_nccl(ncclCommDestroy(nc), "ncclCommDestroy"); }
  static void abort(ncclComm_t nc) { warn_nccl(ncclCommAbort(nc), "ncclCommAbort"); }
};

comm::AttachedHandles<NcclTraits>& attached() {
  static comm::AttachedHandles<NcclTraits> a;
  return a;
}

[[noreturn]] void abort_comm(ncclComm_t nc, const std::string& why) {
  comm::AttachedHandles<NcclTraits>::abort(nc);  // marks the attached entry aborted first
  GDL_FAIL("nccl: ", why, "; the NCCL communicator was aborted");
}

// Polls the communicator's asynchronous state until `done()` or an error; on an error, or when
// timeout_s > 0 has passed, aborts the communicator and throws.
template <class Done>
void poll(ncclComm_t nc, double timeout_s, const char* what, Done&& done) {
  const auto t0 = sclock::now();
  for (;;) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(nc, &state);
    if (r != ncclSuccess) abort_comm(nc, concat(what, ": ncclCommGetAsyncError: ", ncclGetErrorString(r)));
    if (state != ncclSuccess && state != ncclInProgress)
      abort_comm(nc, concat(what, ": ", ncclGetErrorString(state), " (", ncclGetLastError(nc), ")"));
    if (state == ncclSuccess && done()) return;
    if (timeout_s > 0 && seconds_since(t0) > timeout_s)
      abort_comm(nc, concat(what, " made no progress for ", timeout_s, " s: another rank died or hangs"));
    std::this_thread::yield();
  }
}

}  // namespace

void nccl_issued(ncclResult_t r, ncclComm_t nc, double timeout_s, const char* what) {
  if (r == ncclInProgress) return poll(nc, timeout_s, what, [] { return true; });
  check_nccl(r, what, __FILE__, __LINE__);
}

ncclComm_t nccl_comm(MPI_Comm comm, double timeout_s) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  if (ncclComm_t live = attached().get(comm)) return live;
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  // On this process's device, chosen before any CUDA work (gdlbench.common.env.resolve_device).
  default_stream();
  ncclUniqueId id;
  if (rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, comm);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // returns at once; poll() waits, so a missing peer cannot block us forever
  ncclComm_t nc = nullptr;
  const ncclResult_t r = ncclCommInitRankConfig(&nc, size, id, rank, &config);
  if (r != ncclInProgress && r != ncclSuccess) {
    if (nc) NcclTraits::abort(nc);  // never attached: nothing else will release it
    NCCL_CHECK(r);
  }
  attached().attach(comm, nc);
  poll(nc, timeout_s, "ncclCommInitRankConfig", [] { return true; });  // an abort there marks it
  return nc;
}

void nccl_wait(ncclComm_t nc, cudaStream_t stream, double timeout_s, const char* what) {
  poll(nc, timeout_s, what, [&] {
    const cudaError_t e = cudaStreamQuery(stream);
    if (e == cudaErrorNotReady) return false;
    CUDA_CHECK(e);
    return true;
  });
}

ncclDataType_t nccl_dtype(comm::DType t) {
  switch (t) {
    case comm::DType::f32: return ncclFloat32;
    case comm::DType::f64: return ncclFloat64;
    case comm::DType::f16: return ncclFloat16;
    case comm::DType::bf16: return ncclBfloat16;
    case comm::DType::i32: return ncclInt32;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(comm::Op op) {
  switch (op) {
    case comm::Op::sum: return ncclSum;
    case comm::Op::prod: return ncclProd;
    case comm::Op::max: return ncclMax;
    case comm::Op::min: return ncclMin;
  }
  return ncclSum;
}

void nccl_allreduce(void* buf, std::size_t count, comm::DType t, comm::Op op, MPI_Comm comm, comm::Algo algo) {
  if (algo == comm::Algo::hier) return nccl_hier_allreduce(buf, count, t, op, comm);
  GDL_REQUIRE(algo == comm::Algo::library, "nccl: no algorithm ", comm::algo_name(algo), " (library, hier)");
  ncclComm_t c = nccl_comm(comm);
  nccl_issued(ncclAllReduce(buf, buf, count, nccl_dtype(t), nccl_op(op), c, default_stream()), c, 0, "ncclAllReduce");
  nccl_wait(c, default_stream(), 0, "ncclAllReduce");
}

// One case per collective: what each is, lives in its description (comm/collective.h). In place
// (sendbuf nullptr) the input sits where Layout's in_at says.
void nccl_launch(const comm::BenchSpec& spec, const void* sendbuf, void* recvbuf, ncclComm_t nc, cudaStream_t st) {
  const ncclDataType_t dt = nccl_dtype(spec.dtype);
  const ncclRedOp_t red = nccl_op(spec.op);
  const std::size_t count = spec.count;
  int rank = 0;
  NCCL_CHECK(ncclCommUserRank(nc, &rank));
  char* own = static_cast<char*>(recvbuf) + static_cast<std::size_t>(rank) * count * comm::dtype_size(spec.dtype);
  ncclResult_t r = ncclSuccess;
  switch (spec.coll) {
    case comm::Collective::allreduce:
      r = ncclAllReduce(sendbuf ? sendbuf : recvbuf, recvbuf, count, dt, red, nc, st);
      break;
    case comm::Collective::reduce_scatter:
      r = ncclReduceScatter(sendbuf ? sendbuf : recvbuf, sendbuf ? recvbuf : own, count, dt, red, nc, st);
      break;
    case comm::Collective::allgather: r = ncclAllGather(sendbuf ? sendbuf : own, recvbuf, count, dt, nc, st); break;
    case comm::Collective::broadcast: r = ncclBroadcast(recvbuf, recvbuf, count, dt, spec.root, nc, st); break;
  }
  nccl_issued(r, nc, spec.timeout_s, comm::describe(spec.coll).name);
}

namespace {

// The exact check reaches device buffers through host copies on the process's stream.
struct DeviceAccess {
  cudaStream_t st;
  std::vector<char> host;
  void sync() { CUDA_CHECK(cudaStreamSynchronize(st)); }
  void poison(char* p, std::size_t bytes) {
    CUDA_CHECK(cudaMemsetAsync(p, 0xFF, bytes, st));
    sync();
  }
  char* stage(char*, std::size_t bytes) {
    host.resize(bytes);
    return host.data();
  }
  void commit(char* dst, std::size_t bytes) {
    CUDA_CHECK(cudaMemcpyAsync(dst, host.data(), bytes, cudaMemcpyHostToDevice, st));
    sync();
  }
  const char* view(const char* src, std::size_t bytes) {
    host.resize(bytes);
    CUDA_CHECK(cudaMemcpyAsync(host.data(), src, bytes, cudaMemcpyDeviceToHost, st));
    sync();
    return host.data();
  }
};

}  // namespace

comm::BenchResult nccl_bench(const comm::BenchSpec& spec, MPI_Comm comm) {
  int rank = 0, n = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &n);
  comm::validate(spec, n);
  GDL_REQUIRE(spec.algo == comm::Algo::library, "nccl: no algorithm ", comm::algo_name(spec.algo),
              " (NCCL chooses its own; use library)");
  GDL_REQUIRE(!spec.on_comm_thread, "nccl: the row runs on the calling thread (on comm-thread is MPI's)");
  const comm::Description& d = comm::describe(spec.coll);
  const std::string what = std::string("nccl ") + d.name;
  // Armed before the communicator is built: a peer that never joins ends the job, not hangs it.
  comm::Watchdog::Scope watchdog(spec.timeout_s, what);
  ncclComm_t nc = nccl_comm(comm, spec.timeout_s);
  cudaStream_t st = default_stream();
  const std::size_t es = comm::dtype_size(spec.dtype);
  const comm::Layout l = d.layout(spec.count, n, rank, spec.root, spec.inplace, comm::InPlaceResult::own_block);
  DeviceBuffer sendb(l.send_n * es), recvb(l.recv_n * es);
  char* sp = static_cast<char*>(sendb.data());
  char* rp = static_cast<char*>(recvb.data());
  CUDA_CHECK(cudaMemsetAsync(rp, 0, l.recv_n * es, st));  // zeros stay zeros under every op, in place
  if (l.send_n) CUDA_CHECK(cudaMemsetAsync(sp, 0, l.send_n * es, st));
  CUDA_CHECK(cudaStreamSynchronize(st));

  auto run_once = [&] {
    nccl_launch(spec, l.send_n ? sp : nullptr, rp, nc, st);
    nccl_wait(nc, st, spec.timeout_s, what.c_str());
  };
  comm::BenchResult result;
  comm::Watchdog::kick();
  result.samples_us = time_steady(TimingPlan{spec.warmup, spec.iters}, run_once, [&] {
    comm::Watchdog::kick();
    MPI_Barrier(comm);
  });
  comm::Watchdog::kick();
  MPI_Allreduce(MPI_IN_PLACE, result.samples_us.data(), static_cast<int>(result.samples_us.size()), MPI_DOUBLE,
                MPI_MAX, comm);
  if (spec.check_iters == 0) return result;

  DeviceAccess mem{st, {}};
  long long wrong = comm::check_exact(spec, l, rank, n, sp, rp, mem, [&] {
    comm::Watchdog::kick();
    run_once();
  });
  comm::Watchdog::kick();
  MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_LONG_LONG, MPI_SUM, comm);
  result.wrong = wrong;
  return result;
}

}  // namespace gdl::cuda
