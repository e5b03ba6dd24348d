"""gdlbench inside an existing mpi4py program: it uses the communicator it is given (a
sub-communicator here), keeps the thread level the program chose, and neither initialises nor
finalises MPI behind the program's back."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from helpers import run_mpi

DATA = Path(__file__).resolve().parent / "data"

# The program initialises MPI itself at the level it wants, splits the world into two halves,
# runs gdlbench on its half, then keeps using MPI and finalises it itself.
PROGRAM = """
import sys
import mpi4py
mpi4py.rc.initialize = False          # this program owns MPI's lifetime
from mpi4py import MPI

provided = MPI.Init_thread(MPI.THREAD_SERIALIZED)
world = MPI.COMM_WORLD
half = world.Split(world.rank % 2, world.rank)

import gdlbench

assert MPI.Query_thread() == provided == MPI.THREAD_SERIALIZED, "gdlbench changed the thread level"
rows = gdlbench.allreduce([4096, 65536], algo="ring", inplace=True, iters=2, warmup=1, comm=half)
assert all(r.nranks == half.size == 2 and r.wrong == 0 for r in rows), [r.to_dict() for r in rows]
it = gdlbench.Iteration(sys.argv[2], batch=2, device="cpu", strategy="wfbp", iters=1, warmup=0,
                        io=False, comm=half).measure()
assert it.world_size == 2
study = gdlbench.Compare([*rows], comm=half)
study.write_json(f"{sys.argv[1]}/half{world.rank % 2}.json")   # rank 0 of each half writes

# the program's own MPI still works, on its communicators and on the world
assert half.allreduce(world.rank) == sum(r for r in range(world.size) if r % 2 == world.rank % 2)
assert world.allreduce(1) == world.size
assert MPI.Is_initialized() and not MPI.Is_finalized(), "gdlbench finalised MPI"
assert MPI.Query_thread() == MPI.THREAD_SERIALIZED
rank = world.rank
half.Free()
MPI.Finalize()
# a file per rank: mpiexec may interleave the ranks' stdout mid-line
open(f"{sys.argv[1]}/done{rank}", "w").close()
"""

# The usual way: the program sets mpi4py's thread level, mpi4py initialises on import.
RC_LEVEL = """
import mpi4py
mpi4py.rc.thread_level = "funneled"
from mpi4py import MPI
import gdlbench
rows = gdlbench.broadcast(1024, root=1, iters=2, warmup=0)
assert rows[0].wrong == 0 and rows[0].nranks == MPI.COMM_WORLD.size
assert MPI.Query_thread() == MPI.THREAD_FUNNELED
print("level kept", flush=True)
"""


def test_inside_an_mpi4py_program_with_its_own_communicator_and_level(tmp_path):
    r = run_mpi(4, sys.executable, "-c", PROGRAM, str(tmp_path), str(DATA / "convnet.json"), timeout=300)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in tmp_path.glob("done*")) == [f"done{i}" for i in range(4)]
    for half in (0, 1):
        doc = json.loads((tmp_path / f"half{half}.json").read_text())
        assert [row["size_bytes"] for row in doc["rows"]] == [4096, 65536]
        assert all(row["nranks"] == 2 for row in doc["rows"])


def test_the_thread_level_set_through_mpi4py_rc_is_kept():
    r = run_mpi(2, sys.executable, "-c", RC_LEVEL, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("level kept") == 2
