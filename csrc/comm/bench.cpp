// The timed loop and the exact checks for the MPI collectives.
#include <algorithm>
#include <cstring>
#include <vector>

#include "comm/allreduce.h"
#include "comm/watchdog.h"
#include "common/timer.h"

namespace gdl::comm {

Collective parse_collective(const std::string& s) {
  if (s == "allreduce") return Collective::allreduce;
  if (s == "reduce_scatter") return Collective::reduce_scatter;
  if (s == "allgather") return Collective::allgather;
  if (s == "broadcast") return Collective::broadcast;
  GDL_REQUIRE(false, "unknown collective '", s, "' (allreduce, reduce_scatter, allgather, broadcast)");
  return Collective::allreduce;
}

namespace {

const char* collective_name(Collective c) {
  switch (c) {
    case Collective::allreduce: return "allreduce";
    case Collective::reduce_scatter: return "reduce_scatter";
    case Collective::allgather: return "allgather";
    case Collective::broadcast: return "broadcast";
  }
  return "?";
}

// Values that stay put when reduced in place over and over (no overflow, no denormals):
// 0 for sum, 1 for prod, anything for max/min.
void fill_stable(void* p, std::size_t count, DType t, Op op) {
  const double v = op == Op::prod ? 1.0 : 0.0;
  for (std::size_t i = 0; i < count; ++i) store(p, i, t, v);
}

struct Buffers {
  std::vector<char> send, recv;
};

}  // namespace

BenchResult bench(const BenchSpec& spec, MPI_Comm comm) {
  GDL_REQUIRE(spec.check_iters >= 0, "check iterations must be >= 0, got ", spec.check_iters);
  validate(TimingPlan{spec.warmup, spec.iters});
  int rank = 0, n = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &n);
  const DType t = spec.dtype;
  const Op op = spec.op;
  const std::size_t es = dtype_size(t), count = spec.count;
  const auto un = static_cast<std::size_t>(n);
  if (spec.coll == Collective::broadcast)
    GDL_REQUIRE(spec.root >= 0 && spec.root < n, "broadcast: root must be between 0 and ", n - 1, ", got ", spec.root);
  if (spec.coll == Collective::allreduce && spec.algo == Algo::ps)
    GDL_REQUIRE(spec.opt.servers >= 1 && spec.opt.servers <= n,
                "ps: servers must be between 1 and the number of ranks (", n, "), got ", spec.opt.servers);

  // Element counts of the send and receive buffers.
  std::size_t send_n = count, recv_n = count;
  switch (spec.coll) {
    case Collective::allreduce: break;
    case Collective::reduce_scatter:
      send_n = count * un;
      recv_n = spec.inplace ? count * un : count;
      break;
    case Collective::allgather: recv_n = count * un; break;
    case Collective::broadcast: send_n = 0; break;
  }
  if (spec.inplace) send_n = 0;
  // Rotation: `slots` copies of each buffer back to back; timed iteration i uses slot i % slots.
  const std::size_t biggest = std::max(send_n, recv_n) * es;
  const std::size_t slots =
      spec.rotate_bytes > biggest && biggest > 0 ? std::min<std::size_t>(spec.rotate_bytes / biggest, 1 << 20) : 1;
  Buffers b;
  b.send.resize(send_n * es * slots);  // value-initialised: every page touched before timing
  b.recv.resize(recv_n * es * slots);
  void* sp = b.send.data();
  void* rp = b.recv.data();
  std::size_t slot = 0;
  auto next_slot = [&] {
    slot = (slot + 1) % slots;
    sp = b.send.data() + slot * send_n * es;
    rp = b.recv.data() + slot * recv_n * es;
  };

  auto run_once = [&] {
    switch (spec.coll) {
      case Collective::allreduce:
        if (spec.inplace) allreduce(spec.algo, rp, count, t, op, comm, spec.opt);
        else allreduce(spec.algo, sp, rp, count, t, op, comm, spec.opt);
        break;
      case Collective::reduce_scatter: reduce_scatter(spec.inplace ? nullptr : sp, rp, count, t, op, comm); break;
      case Collective::allgather: allgather(spec.inplace ? nullptr : sp, rp, count, t, comm); break;
      case Collective::broadcast: broadcast(rp, count, t, spec.root, comm); break;
    }
  };

  Watchdog::Scope watchdog(spec.timeout_s, collective_name(spec.coll));
  BenchResult result;
  fill_stable(b.send.data(), send_n * slots, t, op);
  fill_stable(b.recv.data(), recv_n * slots, t, op);
  result.samples_us = time_steady(TimingPlan{spec.warmup, spec.iters}, run_once, [&] {
    next_slot();
    Watchdog::kick();
    MPI_Barrier(comm);
  });
  slot = slots - 1;
  next_slot();  // the checks use slot 0
  Watchdog::kick();
  MPI_Allreduce(MPI_IN_PLACE, result.samples_us.data(), static_cast<int>(result.samples_us.size()), MPI_DOUBLE,
                MPI_MAX, comm);

  if (spec.check_iters == 0) return result;
  long long wrong = 0;
  for (int c = 0; c < spec.check_iters; ++c) {
    Watchdog::kick();
    const uint64_t seed = static_cast<uint64_t>(c) + 1;
    char* in = static_cast<char*>(spec.inplace ? rp : sp);
    switch (spec.coll) {
      case Collective::allreduce: {
        fill_check(in, count, t, op, seed, rank, n);
        if (!spec.inplace) poison(rp, count, t);
        run_once();
        wrong += count_wrong(rp, count, t, [&](std::size_t i) { return check_expected(op, seed, n, i); });
        break;
      }
      case Collective::reduce_scatter: {
        fill_check(in, count * un, t, op, seed, rank, n);
        if (!spec.inplace) poison(rp, count, t);
        run_once();
        const std::size_t first = static_cast<std::size_t>(rank) * count;
        wrong += count_wrong(rp, count, t, [&](std::size_t i) { return check_expected(op, seed, n, first + i); });
        break;
      }
      case Collective::allgather: {
        poison(rp, count * un, t);
        const std::size_t first = static_cast<std::size_t>(rank) * count;
        fill_check(spec.inplace ? static_cast<char*>(rp) + first * es : in, count, t, Op::max, seed, rank, n, first);
        run_once();
        wrong += count_wrong(rp, count * un, t, [&](std::size_t j) {
          return check_value(Op::max, seed, static_cast<int>(j / (count ? count : 1)), n, j);
        });
        break;
      }
      case Collective::broadcast: {
        if (rank == spec.root) fill_check(rp, count, t, Op::max, seed, rank, n);
        else poison(rp, count, t);
        run_once();
        wrong += count_wrong(rp, count, t, [&](std::size_t i) { return check_value(Op::max, seed, spec.root, n, i); });
        break;
      }
    }
  }
  Watchdog::kick();
  MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_LONG_LONG, MPI_SUM, comm);
  result.wrong = wrong;
  return result;
}

std::vector<double> reduce_time(std::size_t count, DType dtype, Op op, int warmup, int iters) {
  std::vector<char> a(count * dtype_size(dtype)), b(count * dtype_size(dtype));
  fill_stable(a.data(), count, dtype, op);
  fill_stable(b.data(), count, dtype, op);
  return time_steady(TimingPlan{warmup, iters}, [&] { reduce(a.data(), b.data(), count, dtype, op); });
}

}  // namespace gdl::comm
