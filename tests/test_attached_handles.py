"""The NCCL communicators hang on their MPI communicators as attributes (comm/attached_handle.h),
and MPI deletes them when it frees the communicator, at MPI_Finalize at the latest. An aborted one
(ncclCommAbort on an error or a dead peer) is released already: destroying it again there was a
double free. Tested without a GPU through the same template with a stand-in library (_core's
stand_in_*), whose destroy and abort only count their calls."""

from __future__ import annotations

import json
import sys

from helpers import run_mpi

CODE = """
import json, sys
from mpi4py import MPI
from gdlbench import _core
out = {}
# Attached, aborted, then the communicator freed: aborted once, never destroyed.
a = MPI.COMM_WORLD.Dup()
h = _core.stand_in_attach(a)
assert _core.stand_in_get(a) == h
_core.stand_in_abort(h)
assert _core.stand_in_get(a) == 0, "an aborted handle is not handed out again"
_core.stand_in_abort(h)  # a second abort (an error while reporting one) does not reach the library
a.Free()
out["aborted_then_freed"] = h
# Attached and freed without an abort: destroyed once.
b = MPI.COMM_WORLD.Dup()
out["freed"] = _core.stand_in_attach(b)
b.Free()
# Aborted, then replaced by a new one on the same communicator (the next use after an abort):
# the aborted entry is deleted without a destroy, the new one destroyed with the communicator.
c = MPI.COMM_WORLD.Dup()
old = _core.stand_in_attach(c)
_core.stand_in_abort(old)
new = _core.stand_in_attach(c)
assert _core.stand_in_get(c) == new
c.Free()
out["replaced"], out["replacement"] = old, new
# Left for MPI_Finalize to delete: one aborted on COMM_WORLD and one on COMM_SELF, one live on
# COMM_SELF (MPI deletes COMM_SELF's attributes first thing in MPI_Finalize).
out["world_aborted"] = _core.stand_in_attach(MPI.COMM_WORLD)
_core.stand_in_abort(out["world_aborted"])
d = MPI.COMM_SELF
out["self_aborted"] = _core.stand_in_attach(d)
_core.stand_in_abort(out["self_aborted"])
out["self_live"] = _core.stand_in_attach(MPI.COMM_SELF)
rank = MPI.COMM_WORLD.rank
MPI.Finalize()
calls = {str(k): v for k, v in _core.stand_in_calls().items()}
with open(f"{sys.argv[1]}/rank{rank}.json", "w") as f:
    json.dump({"handles": out, "calls": calls}, f)
"""


def test_an_aborted_handle_is_never_destroyed_again(tmp_path):
    p = run_mpi(2, sys.executable, "-c", CODE, str(tmp_path), timeout=120)
    assert p.returncode == 0, (p.stdout, p.stderr)
    for rank in range(2):
        got = json.loads((tmp_path / f"rank{rank}.json").read_text())
        check(got["handles"], got["calls"])


def check(handles: dict[str, int], calls: dict[str, list[int]]) -> None:
    destroyed_aborted = lambda h: tuple(calls.get(str(h), [0, 0]))  # noqa: E731
    # Aborted ones: one abort each (the second abort did not reach the library), no destroy,
    # whether the communicator was freed, the entry replaced, or MPI_Finalize deleted it.
    for name in ("aborted_then_freed", "replaced", "world_aborted", "self_aborted"):
        assert destroyed_aborted(handles[name]) == (0, 1), (name, calls)
    # Live ones: destroyed once with their communicator, never aborted.
    for name in ("freed", "replacement", "self_live"):
        assert destroyed_aborted(handles[name]) == (1, 0), (name, calls)
