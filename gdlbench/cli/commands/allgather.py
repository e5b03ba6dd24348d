"""gdlbench allgather: the library's allgather on MPI or NCCL, nccl-tests-compatible (see allreduce.py)."""

from __future__ import annotations

from .allreduce import make

add_arguments, run = make("allgather")
