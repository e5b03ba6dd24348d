"""Every collective, op, algorithm and dtype held against references outside gdlbench: numpy on
every rank's gathered input, and mpi4py's own collective where MPI has the dtype. Run through the
Python API (allreduce_array for every algorithm; _core.collective_arrays, the call the timed loop
makes, for every collective) under mpiexec, on 3 ranks (rd folds a rank, ps splits unevenly)."""

from __future__ import annotations

import sys
import textwrap

import pytest
from helpers import run_mpi

pytestmark = pytest.mark.mpi

REFERENCE_CODE = textwrap.dedent("""
    import numpy as np
    from mpi4py import MPI
    import gdlbench.primitives.collectives as C
    from gdlbench import _core
    comm = MPI.COMM_WORLD
    n, rank = comm.size, comm.rank
    MPI_OPS = {"sum": MPI.SUM, "prod": MPI.PROD, "max": MPI.MAX, "min": MPI.MIN}
    NP_OPS = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min}
    MPI_DTYPES = ("float32", "float64", "int32")

    def values(op, count, seed):
        # small integers, exact in every dtype whatever the order of reduction
        rng = np.random.default_rng(seed * 100 + rank)
        if op == "prod":  # +-1 everywhere, one rank (by element) contributes +-2
            v = rng.choice([-1.0, 1.0], count)
            v[np.arange(count) % n == rank] *= 2
            return v
        return rng.integers(-8, 9, count).astype(np.float64)

    def encode(x, dtype):
        if dtype == "bfloat16":  # bfloat16 as uint16 bits: the top half of the float32
            return (x.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
        return x.astype(dtype)

    def decode(y, dtype):
        if dtype == "bfloat16":
            return (y.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        return y.astype(np.float64)

    def name(dtype):
        return "bfloat16" if dtype == "bfloat16" else ""

    checked = 0
    for dtype in C.DTYPES:
        for op in C.OPS:
            for count in (1, 7, 1000):
                seed = count + 7 * C.OPS.index(op)
                x = values(op, n * count, seed)
                gathered = np.stack(comm.allgather(x))  # every rank's input: the numpy reference's
                ref = NP_OPS[op](gathered, axis=0)
                # all-reduce, every algorithm, in place (allreduce_array)
                for algo in C.ALGOS:
                    y = encode(x, dtype)
                    C.allreduce_array(y, op, algo, servers=2, dtype=name(dtype))
                    assert np.array_equal(decode(y, dtype), ref), (dtype, op, algo, count)
                    checked += 1
                # the library's all-reduce and reduce-scatter, out of place and in place
                out = np.zeros_like(encode(x, dtype))
                _core.collective_arrays(comm, "allreduce", encode(x, dtype), out, op, 0, name(dtype))
                assert np.array_equal(decode(out, dtype), ref), (dtype, op, "allreduce", count)
                mine = ref[rank * count:(rank + 1) * count]
                rs = np.zeros(count, dtype=encode(x, dtype).dtype)
                _core.collective_arrays(comm, "reduce_scatter", encode(x, dtype), rs, op, 0, name(dtype))
                assert np.array_equal(decode(rs, dtype), mine), (dtype, op, "reduce_scatter", count)
                inplace = encode(x, dtype)
                _core.collective_arrays(comm, "reduce_scatter", None, inplace, op, 0, name(dtype))
                assert np.array_equal(decode(inplace[:count], dtype), mine), (dtype, op, "reduce_scatter in", count)
                checked += 3
                if dtype in MPI_DTYPES:  # mpi4py's answer agrees with numpy's
                    m = np.empty_like(x.astype(dtype))
                    comm.Allreduce(x.astype(dtype), m, op=MPI_OPS[op])
                    assert np.array_equal(m.astype(np.float64), ref)
                    mrs = np.empty(count, dtype=dtype)
                    comm.Reduce_scatter_block(x.astype(dtype), mrs, op=MPI_OPS[op])
                    assert np.array_equal(mrs.astype(np.float64), mine)
        # all-gather (out of place, in place) and broadcast from every root
        for count in (1, 7, 1000):
            x = values("sum", count, count)
            want = np.concatenate(comm.allgather(x))
            ag = np.zeros(n * count, dtype=encode(x, dtype).dtype)
            _core.collective_arrays(comm, "allgather", encode(x, dtype), ag, "sum", 0, name(dtype))
            assert np.array_equal(decode(ag, dtype), want), (dtype, "allgather", count)
            ag_in = np.zeros(n * count, dtype=encode(x, dtype).dtype)
            ag_in[rank * count:(rank + 1) * count] = encode(x, dtype)
            _core.collective_arrays(comm, "allgather", None, ag_in, "sum", 0, name(dtype))
            assert np.array_equal(decode(ag_in, dtype), want), (dtype, "allgather in", count)
            checked += 2
            for root in range(n):
                b = encode(x, dtype)
                _core.collective_arrays(comm, "broadcast", None, b, "sum", root, name(dtype))
                assert np.array_equal(decode(b, dtype), comm.bcast(x, root=root)), (dtype, "broadcast", root)
                checked += 1
            if dtype in MPI_DTYPES:
                m = np.empty(n * count, dtype=dtype)
                comm.Allgather(x.astype(dtype), m)
                assert np.array_equal(m.astype(np.float64), want)
    # 5 dtypes x 4 ops x 3 counts x (6 algorithms + 3), and 5 x 3 x (2 + 3 roots)
    assert checked == 5 * 4 * 3 * 9 + 5 * 3 * (2 + n), checked
    if rank == 0:
        print("references ok", checked)
""")


def test_every_collective_op_dtype_and_algorithm_against_numpy_and_mpi4py():
    p = run_mpi(3, sys.executable, "-c", REFERENCE_CODE, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "references ok 615" in p.stdout
