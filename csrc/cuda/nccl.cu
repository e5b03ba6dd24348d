#include <map>
#include <mutex>
#include <vector>

#include "comm/watchdog.h"
#include "common/timer.h"
#include "cuda/check.h"
#include "cuda/device.h"
#include "cuda/nccl.h"

namespace gdl::cuda {

ncclComm_t nccl_comm(MPI_Comm comm) {
  static std::mutex mu;
  static std::map<MPI_Comm, ncclComm_t> cache;  // one NCCL communicator per MPI communicator
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(comm);
  if (it != cache.end()) return it->second;
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  // On this process's device, chosen before any CUDA work (gdlbench.env.resolve_device).
  default_stream();
  ncclUniqueId id;
  if (rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, comm);
  ncclComm_t c;
  NCCL_CHECK(ncclCommInitRank(&c, size, id, rank));
  cache.emplace(comm, c);
  return c;
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

void nccl_allreduce(void* buf, std::size_t count, comm::DType t, comm::Op op, MPI_Comm comm) {
  ncclComm_t c = nccl_comm(comm);
  NCCL_CHECK(ncclAllReduce(buf, buf, count, nccl_dtype(t), nccl_op(op), c, default_stream()));
  CUDA_CHECK(cudaStreamSynchronize(default_stream()));
}

namespace {

enum class Coll { allreduce, reduce_scatter, allgather, broadcast };

Coll parse(const std::string& s) {
  if (s == "allreduce") return Coll::allreduce;
  if (s == "reduce_scatter") return Coll::reduce_scatter;
  if (s == "allgather") return Coll::allgather;
  if (s == "broadcast") return Coll::broadcast;
  GDL_REQUIRE(false, "unknown collective '", s, "' (allreduce, reduce_scatter, allgather, broadcast)");
  return Coll::allreduce;
}

void to_device(void* dst, const std::vector<char>& src) {
  CUDA_CHECK(cudaMemcpyAsync(dst, src.data(), src.size(), cudaMemcpyHostToDevice, default_stream()));
  CUDA_CHECK(cudaStreamSynchronize(default_stream()));
}

void to_host(std::vector<char>& dst, const void* src) {
  CUDA_CHECK(cudaMemcpyAsync(dst.data(), src, dst.size(), cudaMemcpyDeviceToHost, default_stream()));
  CUDA_CHECK(cudaStreamSynchronize(default_stream()));
}

}  // namespace

NcclBenchResult nccl_bench(MPI_Comm comm, const std::string& collective, std::size_t count, comm::DType t,
                           comm::Op op, bool inplace, int root, int warmup, int iters, int check_iters,
                           double timeout_s) {
  GDL_REQUIRE(check_iters >= 0, "check iterations must be >= 0, got ", check_iters);
  validate(TimingPlan{warmup, iters});
  const Coll coll = parse(collective);
  int rank = 0, n = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &n);
  if (coll == Coll::broadcast) GDL_REQUIRE(root >= 0 && root < n, "broadcast: root must be between 0 and ", n - 1);
  ncclComm_t nc = nccl_comm(comm);
  cudaStream_t st = default_stream();
  const std::size_t es = comm::dtype_size(t), un = static_cast<std::size_t>(n);
  const std::size_t ur = static_cast<std::size_t>(rank);

  // Element counts (NCCL's in-place conventions: reduce-scatter leaves block `rank` in place,
  // all-gather takes this rank's input from block `rank` of the output).
  std::size_t send_n = count, recv_n = count;
  if (coll == Coll::reduce_scatter) send_n = count * un;
  if (coll == Coll::allgather) recv_n = count * un;
  if (coll == Coll::broadcast) send_n = 0;
  if (coll == Coll::reduce_scatter && inplace) recv_n = count * un;
  if (inplace) send_n = 0;
  DeviceBuffer sendb(send_n * es), recvb(recv_n * es);
  char* sp = static_cast<char*>(sendb.data());
  char* rp = static_cast<char*>(recvb.data());
  CUDA_CHECK(cudaMemsetAsync(rp, 0, recv_n * es, st));  // zeros stay zeros under every op, in place
  if (send_n) CUDA_CHECK(cudaMemsetAsync(sp, 0, send_n * es, st));
  CUDA_CHECK(cudaStreamSynchronize(st));
  const ncclDataType_t dt = nccl_dtype(t);

  auto launch = [&](ncclRedOp_t red) {
    switch (coll) {
      case Coll::allreduce:
        NCCL_CHECK(ncclAllReduce(inplace ? rp : sp, rp, count, dt, red, nc, st));
        break;
      case Coll::reduce_scatter:
        NCCL_CHECK(ncclReduceScatter(inplace ? rp : sp, inplace ? rp + ur * count * es : rp, count, dt, red, nc, st));
        break;
      case Coll::allgather:
        NCCL_CHECK(ncclAllGather(inplace ? rp + ur * count * es : sp, rp, count, dt, nc, st));
        break;
      case Coll::broadcast: NCCL_CHECK(ncclBroadcast(rp, rp, count, dt, root, nc, st)); break;
    }
    CUDA_CHECK(cudaStreamSynchronize(st));
  };
  const ncclRedOp_t red = nccl_op(op);

  comm::Watchdog::Scope watchdog(timeout_s, "nccl " + collective);
  NcclBenchResult result;
  result.samples_us = time_steady(TimingPlan{warmup, iters}, [&] { launch(red); }, [&] {
    comm::Watchdog::kick();
    MPI_Barrier(comm);
  });
  comm::Watchdog::kick();
  MPI_Allreduce(MPI_IN_PLACE, result.samples_us.data(), static_cast<int>(result.samples_us.size()), MPI_DOUBLE,
                MPI_MAX, comm);
  if (check_iters == 0) return result;

  long long wrong = 0;
  std::vector<char> host_in, host_out(recv_n * es);
  for (int c = 0; c < check_iters; ++c) {
    comm::Watchdog::kick();
    const uint64_t seed = static_cast<uint64_t>(c) + 1;
    std::vector<char> poison(recv_n * es, static_cast<char>(0xFF));
    switch (coll) {
      case Coll::allreduce: {
        host_in.assign(count * es, 0);
        comm::fill_check(host_in.data(), count, t, op, seed, rank, n);
        if (!inplace) to_device(rp, poison);
        to_device(inplace ? rp : sp, host_in);
        launch(red);
        to_host(host_out, rp);
        wrong += comm::count_wrong(host_out.data(), count, t,
                                   [&](std::size_t i) { return comm::check_expected(op, seed, n, i); });
        break;
      }
      case Coll::reduce_scatter: {
        host_in.assign(count * un * es, 0);
        comm::fill_check(host_in.data(), count * un, t, op, seed, rank, n);
        if (!inplace) to_device(rp, poison);
        to_device(inplace ? rp : sp, host_in);
        launch(red);
        to_host(host_out, rp);
        const char* res = host_out.data() + (inplace ? ur * count * es : 0);
        wrong += comm::count_wrong(res, count, t,
                                   [&](std::size_t i) { return comm::check_expected(op, seed, n, ur * count + i); });
        break;
      }
      case Coll::allgather: {
        to_device(rp, poison);
        host_in.assign(count * es, 0);
        comm::fill_check(host_in.data(), count, t, comm::Op::max, seed, rank, n, ur * count);
        if (inplace) {
          CUDA_CHECK(cudaMemcpyAsync(rp + ur * count * es, host_in.data(), host_in.size(), cudaMemcpyHostToDevice, st));
          CUDA_CHECK(cudaStreamSynchronize(st));
        } else {
          to_device(sp, host_in);
        }
        launch(red);
        to_host(host_out, rp);
        wrong += comm::count_wrong(host_out.data(), count * un, t, [&](std::size_t j) {
          return comm::check_value(comm::Op::max, seed, static_cast<int>(j / (count ? count : 1)), n, j);
        });
        break;
      }
      case Coll::broadcast: {
        if (rank == root) {
          host_in.assign(count * es, 0);
          comm::fill_check(host_in.data(), count, t, comm::Op::max, seed, rank, n);
          to_device(rp, host_in);
        } else {
          to_device(rp, poison);
        }
        launch(red);
        to_host(host_out, rp);
        wrong += comm::count_wrong(host_out.data(), count, t,
                                   [&](std::size_t i) { return comm::check_value(comm::Op::max, seed, root, n, i); });
        break;
      }
    }
  }
  comm::Watchdog::kick();
  MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_LONG_LONG, MPI_SUM, comm);
  result.wrong = wrong;
  return result;
}

}  // namespace gdl::cuda
