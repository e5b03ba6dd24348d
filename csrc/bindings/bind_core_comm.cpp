// Bindings for the MPI collectives (csrc/comm). The communicator comes from mpi4py.
#include <malloc.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <map>
#include <utility>

#include <mpi.h>

#include "bind_comm_bench.h"
#include "bind_core.h"
#include "comm/allreduce.h"
#include "comm/attached_handle.h"
#include "comm/comm_attribute.h"

namespace py = pybind11;

namespace gdl::bind {
namespace {

// A stand-in library for comm::AttachedHandles (the NCCL communicators' attachment, cuda/nccl.cu):
// handles are numbers, and destroy / abort count their calls, so that the abort path can be tested
// without a GPU.
struct StandIn {
  using Handle = long long;
  static std::map<long long, std::pair<int, int>>& calls() {  // handle -> (destroyed, aborted)
    static auto* c = new std::map<long long, std::pair<int, int>>;  // read after MPI_Finalize too
    return *c;
  }
  static void destroy(long long h) { ++calls()[h].first; }
  static void abort(long long h) { ++calls()[h].second; }
};

comm::AttachedHandles<StandIn>& stand_ins() {
  static comm::AttachedHandles<StandIn> a;
  return a;
}

comm::DType array_dtype(const py::array& a, const std::string& name) {
  if (!name.empty()) {
    const comm::DType t = comm::parse_dtype(name);
    GDL_REQUIRE(static_cast<std::size_t>(a.itemsize()) == comm::dtype_size(t), "allreduce: dtype ", name,
                " needs ", comm::dtype_size(t), "-byte elements, the array has ", a.itemsize());
    return t;
  }
  if (a.dtype().is(py::dtype::of<float>())) return comm::DType::f32;
  if (a.dtype().is(py::dtype::of<double>())) return comm::DType::f64;
  if (a.dtype().is(py::dtype::of<int32_t>())) return comm::DType::i32;
  if (a.dtype().kind() == 'f' && a.itemsize() == 2) return comm::DType::f16;
  GDL_REQUIRE(false, "allreduce: unsupported array dtype ", std::string(py::str(a.dtype())),
              " (float32, float64, int32, float16; bfloat16 as uint16 with dtype='bfloat16')");
  return comm::DType::f32;
}

}  // namespace

void bind_comm(py::module_& m) {
  bind_comm_bench(m, "comm_bench", &comm::bench,
                  "Time one MPI collective: per iteration an untimed MPI_Barrier, then the call on the host "
                  "steady clock; then the exact check.");
  m.def(
      "comm_bench_started_together",
      [](py::object comm, const comm::BenchSpec& spec, py::object start_on) {
        const MPI_Comm c = get_comm(comm), s = get_comm(start_on);
        py::gil_scoped_release nogil;
        return comm::bench_started_together(spec, c, s);
      },
      py::arg("comm"), py::arg("spec"), py::arg("start_on"),
      "comm_bench with the untimed barrier on start_on, a communicator over comm's ranks and others, so that "
      "collectives on its other sub-communicators start every call together; comm MPI.COMM_NULL: the barriers "
      "only, no samples.");

  m.def(
      "allreduce",
      [](py::object comm, py::array a, const std::string& op, const std::string& algo, int servers,
         const std::string& dtype) {
        GDL_REQUIRE(a.flags() & py::array::c_style, "allreduce: array must be C-contiguous");
        GDL_REQUIRE(a.writeable(), "allreduce: array must be writable");
        const comm::DType t = array_dtype(a, dtype);
        const comm::Op o = comm::parse_op(op);
        const comm::Algo al = comm::parse_algo(algo);
        comm::AllreduceOptions opt;
        opt.servers = servers;
        void* p = a.mutable_data();
        const auto n = static_cast<std::size_t>(a.size());
        MPI_Comm c = get_comm(comm);
        py::gil_scoped_release nogil;
        comm::allreduce(al, p, n, t, o, c, opt);
      },
      py::arg("comm"), py::arg("array"), py::arg("op") = "sum", py::arg("algo") = "library", py::arg("servers") = 1,
      py::arg("dtype") = "", "In-place all-reduce of a numpy array over comm with the chosen algorithm.");
  m.def(
      "collective_arrays",
      [](py::object comm, const std::string& name, py::object send, py::array recv, const std::string& op, int root,
         const std::string& dtype) {
        // The call the timed loop makes (comm::run_collective), on caller-given buffers: for tests that hold
        // every collective against an outside reference. count is per rank, as comm::kCollectives has it.
        GDL_REQUIRE(recv.flags() & py::array::c_style && recv.writeable(), name, ": recv must be C-contiguous and writable");
        comm::BenchSpec spec;
        spec.coll = comm::parse_collective(name);
        spec.dtype = array_dtype(recv, dtype);
        if (comm::describe(spec.coll).reduces) spec.op = comm::parse_op(op);
        spec.root = root;
        MPI_Comm c = get_comm(comm);
        int n = 1;
        MPI_Comm_size(c, &n);
        comm::validate(spec, n);
        const auto recv_n = static_cast<std::size_t>(recv.size());
        const void* sp = nullptr;
        py::array s;
        if (!send.is_none()) {
          s = send.cast<py::array>();
          GDL_REQUIRE(s.flags() & py::array::c_style && s.itemsize() == recv.itemsize(), name,
                      ": send must be C-contiguous, of recv's element size");
          sp = s.data();
        }
        const std::size_t send_n = sp ? static_cast<std::size_t>(s.size()) : recv_n;
        const auto un = static_cast<std::size_t>(n);
        switch (spec.coll) {
          case comm::Collective::reduce_scatter: spec.count = send_n / un; break;
          case comm::Collective::allgather: spec.count = recv_n / un; break;
          default: spec.count = recv_n;
        }
        const comm::Layout l = comm::describe(spec.coll).layout(spec.count, n, 0, root, sp == nullptr,
                                                                comm::InPlaceResult::first_block);
        GDL_REQUIRE(recv_n == l.recv_n && (sp == nullptr || send_n == l.send_n), name, ": buffers of ", send_n,
                    " and ", recv_n, " elements do not fit ", n, " ranks (send ", l.send_n, ", recv ", l.recv_n, ")");
        void* rp = recv.mutable_data();
        py::gil_scoped_release nogil;
        comm::run_collective(spec, sp, rp, c);
      },
      py::arg("comm"), py::arg("name"), py::arg("send"), py::arg("recv"), py::arg("op") = "sum", py::arg("root") = 0,
      py::arg("dtype") = "",
      "One call of collective `name` on numpy buffers, as the timed loop makes it (send None: in place).");
  m.def(
      "collectives",
      [] {
        py::list out;
        for (const comm::Description& d : comm::kCollectives) {
          py::list algos;
          for (const comm::AlgoName& a : comm::kAlgos)
            if (d.algorithms || a.id == comm::Algo::library) algos.append(a.name);
          py::dict e;
          e["name"] = d.name;
          e["reduces"] = d.reduces;
          e["rooted"] = d.rooted;
          e["size_is_total"] = d.size_is_total;
          e["algos"] = algos;
          e["host_buffers"] = d.host_buffers;
          e["cost"] = d.cost ? py::object(py::str(d.cost)) : py::object(py::none());
          e["bus_factor_formula"] = d.bus_factor_formula;
          out.append(e);
        }
        return out;
      },
      "comm::kCollectives (csrc/comm/collective.h): each collective's name, whether it reduces, is rooted, sizes "
      "the whole buffer, the algorithms it takes, its host buffers, its cost entry and its bus factor's formula.");
  m.def(
      "algorithms",
      [] {
        py::list out;
        for (const comm::AlgoName& a : comm::kAlgos) {
          py::dict e;
          e["name"] = a.name;
          e["servers"] = a.servers;
          e["about"] = a.about;
          out.append(e);
        }
        return out;
      },
      "comm::kAlgos (csrc/comm/collective.h): the all-reduce algorithms' names, which have server ranks, and what each is.");
  m.def(
      "bus_factor",
      [](const std::string& name, int n) {
        GDL_REQUIRE(n >= 1, "bus_factor: ranks must be >= 1, got ", n);
        return comm::describe(comm::parse_collective(name)).bus_factor(n);
      },
      py::arg("collective"), py::arg("nranks"), "nccl-tests' bus bandwidth factor of a collective at N ranks.");

  m.def("set_ranks_per_node", &comm::set_ranks_per_node, py::arg("ranks_per_node"),
        "Group ranks into nodes of this many consecutive ranks (0: MPI_Comm_split_type shared memory).");
  m.def("ranks_per_node_setting", &comm::ranks_per_node_setting, "The set_ranks_per_node value (0: MPI's split).");
  m.def(
      "topology",
      [](py::object comm) {
        MPI_Comm c = get_comm(comm);
        comm::Topology t;
        {
          py::gil_scoped_release nogil;
          t = comm::topology(c);
        }
        py::dict d;
        d["nodes"] = t.nodes;
        d["local_rank"] = t.local_rank;
        d["local_size"] = t.local_size;
        d["min_local"] = t.min_local;
        d["max_local"] = t.max_local;
        return d;
      },
      py::arg("comm"), "The node layout of comm as the hierarchical all-reduce sees it (collective on first use).");
  m.def(
      "level_comms",
      [](py::object comm) {
        MPI_Comm c = get_comm(comm), node = MPI_COMM_NULL, cross = MPI_COMM_NULL;
        {
          py::gil_scoped_release nogil;
          comm::level_comms(c, &node, &cross);
        }
        return py::make_tuple(wrap_comm(node), wrap_comm(cross));
      },
      py::arg("comm"),
      "(node, cross): this rank's node and the same local rank on every node (COMM_NULL where it has no "
      "shard), as the hierarchical all-reduce uses them; owned by comm, never free them.");
  m.def("hier_variant", &comm::hier_variant, py::arg("bytes"),
        "Which variant the hierarchical all-reduce runs for a buffer of this many bytes per rank.");
  m.attr("HIER_LEADER_BELOW_BYTES") = comm::kHierLeaderBelowBytes;

  m.def(
      "reduce_time",
      [](std::size_t count, const std::string& dtype, const std::string& op, int warmup, int iters) {
        const auto t = comm::parse_dtype(dtype);
        const auto o = comm::parse_op(op);
        py::gil_scoped_release nogil;
        return comm::reduce_time(count, t, o, warmup, iters);
      },
      py::arg("count"), py::arg("dtype"), py::arg("op"), py::arg("warmup") = 2, py::arg("iters") = 10,
      "Time the local reduction a op= b over count elements (the cost model's gamma).");

  m.def("comm_serial", [](py::object comm) { return comm::comm_serial(get_comm(comm)); }, py::arg("comm"),
        "A number naming this communicator while it lives, held as an MPI attribute (freed with it): a "
        "communicator created later never gets an old one's, even under a reused handle. The NCCL "
        "communicators are attached the same way.");
  m.def(
      "stand_in_attach",
      [](py::object comm) {
        static long long next = 1;
        return stand_ins().attach(get_comm(comm), next++);
      },
      py::arg("comm"),
      "Testing: attach a new stand-in handle to comm, as the NCCL communicators are attached; returns it.");
  m.def("stand_in_get", [](py::object comm) { return stand_ins().get(get_comm(comm)); }, py::arg("comm"),
        "Testing: the live (not aborted) stand-in handle attached to comm, 0 when none.");
  m.def("stand_in_abort", &comm::AttachedHandles<StandIn>::abort, py::arg("handle"),
        "Testing: abort a stand-in handle as an NCCL communicator is aborted (its entry marked first).");
  m.def("stand_in_calls", [] { return StandIn::calls(); },
        "Testing: per stand-in handle, (destroy calls, abort calls) so far.");
  m.def(
      "keep_freed_memory",
      [](std::size_t bytes) {
        // glibc returns blocks above its mmap threshold to the kernel on free; MPICH allocates its
        // large temporary buffers per call, so every call would fault its pages in again.
        const int t = static_cast<int>(bytes);
        return mallopt(M_MMAP_THRESHOLD, t) == 1 && mallopt(M_TRIM_THRESHOLD, t) == 1;
      },
      py::arg("bytes") = 1 << 30,
      "Ask glibc to keep freed blocks up to `bytes` (mallopt M_MMAP_THRESHOLD/M_TRIM_THRESHOLD).");
}

}  // namespace gdl::bind
