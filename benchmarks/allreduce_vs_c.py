"""gdlbench's collectives against the least a program can do: a bare C MPI loop, same ranks.

    python benchmarks/allreduce_vs_c.py [--ranks 2] [--rounds 5] [--quick] [--no-write]

The C loop is compiled here, at run time, with the venv's mpicc (no binary in the repository):
MPI_Init (no thread support asked for), then per iteration MPI_Barrier, MPI_Wtime, the collective,
MPI_Wtime; samples reduced with MAX over ranks, median reported. gdlbench runs its own command
(`gdlbench allreduce ...`, its defaults: thread level, buffers, timer) on the same ranks under the
same mpiexec. Rounds alternate which of the two runs first (C, gdlbench, gdlbench, C, ...), so
that drift on a shared machine falls on both sides; a ratio is the median over rounds of the
round's gdlbench/C time ratio. Sizes 8 B to 256 MB (x4), in-place and out-of-place, float32; for
all-reduce the library's MPI_Allreduce and gdlbench's own ring and recursive doubling (rd), each
also against gdlbench's library row. reduce_scatter, allgather and broadcast: the library call
against MPI_Reduce_scatter_block, MPI_Allgather and MPI_Bcast (sizes are the total buffer, as
nccl-tests and gdlbench count them).

Goals: 8 B - 4 KB latency <= 1.10 x the C loop's; busbw >= 0.97 x from 1 MB up (time ratio
<= 1/0.97); gdlbench's ring >= 0.9 x the library's busbw from 1 MB up. The results go to
benchmarks/RESULTS.md (one section, replaced on each run) with date, machine, load and command.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

C_LOOP = r"""
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void* (*volatile opaque_memset)(void*, int, size_t) = memset; /* the optimiser cannot drop it */

static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* argv: collective in|out iters warmup size... ; prints "size median_us" per size on rank 0 */
int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const char* coll = argv[1];
  const int inplace = strcmp(argv[2], "in") == 0;
  const int iters = atoi(argv[3]), warmup = atoi(argv[4]);
  double* t = malloc(sizeof(double) * iters);
  for (int s = 5; s < argc; ++s) {
    const long long bytes = atoll(argv[s]);
    /* whole elements; reduce-scatter and all-gather: whole blocks of n */
    const int per_block = !strcmp(coll, "reduce_scatter") || !strcmp(coll, "allgather");
    long long count = bytes / 4 / (per_block ? n : 1);
    if (count < 1) count = 1;
    const long long total = per_block ? count * n : count;
    /* Zeros written to every page (sums stay put in place), as gdlbench's buffers. Through a
       volatile pointer: GCC drops memset(0) after calloc and turns malloc + memset(0) into calloc,
       and the untouched pages then all map the kernel's one zero page, which every read finds in
       cache (all-gather and broadcast ran 2 x faster so). */
    float* send = malloc(total * sizeof(float));
    float* recv = malloc(total * sizeof(float));
    opaque_memset(send, 0, total * sizeof(float));
    opaque_memset(recv, 0, total * sizeof(float));
    for (int i = -warmup; i < iters; ++i) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = MPI_Wtime();
      if (!strcmp(coll, "allreduce"))
        MPI_Allreduce(inplace ? MPI_IN_PLACE : send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      else if (!strcmp(coll, "reduce_scatter"))
        MPI_Reduce_scatter_block(inplace ? MPI_IN_PLACE : send, inplace ? send : recv, (int)count, MPI_FLOAT,
                                 MPI_SUM, MPI_COMM_WORLD);
      else if (!strcmp(coll, "allgather"))
        MPI_Allgather(inplace ? MPI_IN_PLACE : send + rank * count, (int)count, MPI_FLOAT, recv, (int)count,
                      MPI_FLOAT, MPI_COMM_WORLD);
      else
        MPI_Bcast(recv, (int)count, MPI_FLOAT, 0, MPI_COMM_WORLD);
      const double t1 = MPI_Wtime();
      if (i >= 0) t[i] = (t1 - t0) * 1e6;
    }
    MPI_Allreduce(MPI_IN_PLACE, t, iters, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    qsort(t, iters, sizeof(double), cmp);
    const double med = iters % 2 ? t[iters / 2] : 0.5 * (t[iters / 2 - 1] + t[iters / 2]);
    if (rank == 0) printf("%lld %.4f\n", total * 4, med);
    free(send);
    free(recv);
  }
  free(t);
  MPI_Finalize();
  return 0;
}
"""

COLLECTIVES = ("allreduce", "reduce_scatter", "allgather", "broadcast")
BUS = {"allreduce": lambda n: 2 * (n - 1) / n, "reduce_scatter": lambda n: (n - 1) / n,
       "allgather": lambda n: (n - 1) / n, "broadcast": lambda n: 1.0}
SMALL_MAX = 4096        # the latency goal's sizes: 8 B .. 4 KB
LARGE_MIN = 1 << 20     # the bandwidth goals' sizes: 1 MB up
SECTION_START = "<!-- allreduce_vs_c: start (written by benchmarks/allreduce_vs_c.py) -->"
SECTION_END = "<!-- allreduce_vs_c: end -->"


def venv_tool(name: str) -> str:
    here = Path(sys.executable).parent / name
    found = str(here) if here.exists() else shutil.which(name)
    if not found:
        sys.exit(f"allreduce_vs_c: {name} not found beside {sys.executable} or on PATH")
    return found


def compile_c_loop(workdir: Path) -> Path:
    src, exe = workdir / "c_loop.c", workdir / "c_loop"
    src.write_text(C_LOOP)
    subprocess.run([venv_tool("mpicc"), "-O2", "-o", str(exe), str(src)], check=True)
    return exe


def sizes_for(max_bytes: int) -> list[int]:
    sizes, s = [], 8
    while s <= max_bytes:
        sizes.append(s)
        s *= 4
    if sizes[-1] < max_bytes:  # 256 MB is not 8 x a power of 4: add it as the last size
        sizes.append(max_bytes)
    return sizes


def iters_for(size: int, a: argparse.Namespace) -> tuple[int, int]:
    return (a.small_iters, a.small_warmup) if size < LARGE_MIN else (a.large_iters, a.large_warmup)


def run_c(exe: Path, a, coll: str, mode: str, sizes: list[int]) -> dict[int, float]:
    out: dict[int, float] = {}
    for band in (_band(sizes, small=True), _band(sizes, small=False)):
        if not band:
            continue
        iters, warmup = iters_for(band[0], a)
        p = subprocess.run([venv_tool("mpiexec"), "-n", str(a.ranks), str(exe), coll, mode, str(iters), str(warmup),
                            *map(str, band)], capture_output=True, text=True, timeout=a.timeout)
        if p.returncode != 0:
            sys.exit(f"allreduce_vs_c: the C loop failed ({coll} {mode}): {p.stderr.strip()[-500:]}")
        for line in p.stdout.split("\n"):
            if line.strip():
                size, med = line.split()
                out[int(size)] = float(med)
    return out


def _band(sizes: list[int], small: bool) -> list[int]:
    return [s for s in sizes if (s < LARGE_MIN) == small]


def run_gdlbench(a, coll: str, sizes: list[int], algos: list[str], workdir: Path) -> dict[tuple, float]:
    """{(algo, inplace, size_bytes): median us} from `gdlbench COLL --json`."""
    cmd0 = [venv_tool("gdlbench")] if (Path(sys.executable).parent / "gdlbench").exists() else \
        [sys.executable, "-m", "gdlbench"]
    out: dict[tuple, float] = {}
    for band in (_band(sizes, small=True), _band(sizes, small=False)):
        if not band:
            continue
        iters, warmup = iters_for(band[0], a)
        js = workdir / f"g_{coll}.json"
        cmd = [venv_tool("mpiexec"), "-n", str(a.ranks), *cmd0, coll, "--size", ",".join(map(str, band)),
               "-n", str(iters), "-w", str(warmup), "-c", "0", "--backend", "mpi", "--json", str(js)]
        if coll == "allreduce":
            cmd += ["--algo", ",".join(algos)]
        if a.mpi_thread_level:
            cmd += ["--mpi-thread-level", a.mpi_thread_level]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
        if p.returncode != 0:
            sys.exit(f"allreduce_vs_c: gdlbench failed: {' '.join(cmd)}\n{p.stderr.strip()[-800:]}")
        doc = json.loads(js.read_text())
        for row in doc["rows"]:
            out[(row["algo"], bool(row["inplace"]), int(row["size_bytes"]))] = float(row["time_us"])
        out["thread_level"] = doc["env"].get("mpi_thread_level")  # type: ignore[index]
    return out


def fmt_size(b: int) -> str:
    for unit, scale in (("MiB", 2**20), ("KiB", 2**10)):
        if b >= scale and b % scale == 0:
            return f"{b // scale} {unit}"
    return f"{b} B" if b < 10**6 else f"{b / 1e6:.0f} MB"


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--collectives", default="all", help=f"comma list of {', '.join(COLLECTIVES)} (default all)")
    p.add_argument("--algos", default="library,ring,rd", help="gdlbench all-reduce algorithms (default library,ring,rd)")
    p.add_argument("--max-bytes", type=int, default=256 * 10**6, help="largest size (default 256 MB)")
    p.add_argument("--small-iters", type=int, default=2000)
    p.add_argument("--small-warmup", type=int, default=100)
    p.add_argument("--large-iters", type=int, default=20)
    p.add_argument("--large-warmup", type=int, default=3)
    p.add_argument("--mpi-thread-level", help="passed to gdlbench (default: its own, the least it needs)")
    p.add_argument("--quick", action="store_true",
                   help="a few minutes: 2 rounds, sizes up to 32 MB, 300/8 iterations")
    p.add_argument("--timeout", type=float, default=900, help="seconds per launched run")
    p.add_argument("--no-write", action="store_true", help="print only; leave benchmarks/RESULTS.md alone")
    a = p.parse_args()
    if a.quick:
        a.rounds, a.max_bytes = min(a.rounds, 2), min(a.max_bytes, 32 * 2**20)
        a.small_iters, a.small_warmup, a.large_iters, a.large_warmup = 300, 20, 8, 2
    colls = list(COLLECTIVES) if a.collectives == "all" else [c.strip() for c in a.collectives.split(",")]
    algos = [x.strip() for x in a.algos.split(",")]
    if "library" not in algos:
        algos.insert(0, "library")
    sizes = sizes_for(a.max_bytes)
    load_before = os.getloadavg()
    started = datetime.datetime.now(datetime.timezone.utc)

    # ratios[(coll, algo, inplace, size)] -> per-round gdlbench/C time ratio; also vs gdlbench library
    vs_c: dict[tuple, list[float]] = {}
    vs_lib: dict[tuple, list[float]] = {}
    c_us: dict[tuple, list[float]] = {}
    g_us: dict[tuple, list[float]] = {}
    level = None
    with tempfile.TemporaryDirectory(prefix="gdl-vs-c-") as tmp:
        work = Path(tmp)
        exe = compile_c_loop(work)
        for r in range(a.rounds):
            for coll in colls:
                modes = ["in"] if coll == "broadcast" else ["out", "in"]
                coll_algos = algos if coll == "allreduce" else ["library"]

                def c_side(coll=coll, modes=modes):
                    return {m: run_c(exe, a, coll, m, sizes) for m in modes}

                def g_side(coll=coll, coll_algos=coll_algos):
                    return run_gdlbench(a, coll, sizes, coll_algos, work)

                if r % 2 == 0:
                    c, g = c_side(), g_side()
                else:
                    g, c = g_side(), c_side()
                level = g.pop("thread_level", level)
                for m in modes:
                    inplace = m == "in"
                    for size, ct in c[m].items():
                        lib = g.get(("library", inplace, size))
                        for algo in coll_algos:
                            gt = g.get((algo, inplace, size))
                            if gt is None:
                                continue
                            key = (coll, algo, inplace, size)
                            vs_c.setdefault(key, []).append(gt / ct)
                            g_us.setdefault(key, []).append(gt)
                            if lib:
                                vs_lib.setdefault(key, []).append(gt / lib)
                        c_us.setdefault((coll, inplace, size), []).append(ct)
            print(f"round {r + 1}/{a.rounds} done (load {os.getloadavg()[0]:.1f})", file=sys.stderr, flush=True)
    load_after = os.getloadavg()

    lines, verdicts = [], []
    for coll in colls:
        bus = BUS[coll](a.ranks)
        lines.append(f"\n#### {coll}\n")
        head = "| size | mode | C loop us | C busbw GB/s |"
        coll_algos = algos if coll == "allreduce" else ["library"]
        for algo in coll_algos:
            head += f" {algo} us | {algo}/C time |" + (" ring busbw / library |" if algo == "ring" else "")
        lines.append(head)
        lines.append("|" + "---|" * (head.count("|") - 1))
        for inplace in ((True,) if coll == "broadcast" else (False, True)):
            for size in sorted(s for (cc, ip, s) in c_us if cc == coll and ip == inplace):
                ct = median(c_us[(coll, inplace, size)])
                cbw = size / 1e9 / (ct * 1e-6) * bus
                row = f"| {fmt_size(size)} | {'in' if inplace else 'out'} | {ct:.2f} | {cbw:.3f} |"
                for algo in coll_algos:
                    key = (coll, algo, inplace, size)
                    ratio = median(vs_c.get(key, []))
                    row += f" {median(g_us.get(key, [])):.2f} | {ratio:.3f} |"
                    if algo == "ring":
                        lib_ratio = median(vs_lib.get(key, []))
                        row += f" {1 / lib_ratio:.3f} |"
                    if algo == "library" and size <= SMALL_MAX:
                        verdicts.append((f"{coll} {'in' if inplace else 'out'} {fmt_size(size)} latency", ratio, 1.10))
                    if algo == "library" and size >= LARGE_MIN:
                        verdicts.append((f"{coll} {'in' if inplace else 'out'} {fmt_size(size)} busbw", ratio, 1 / 0.97))
                    if algo == "ring" and size >= LARGE_MIN:
                        verdicts.append((f"ring vs library {'in' if inplace else 'out'} {fmt_size(size)} busbw",
                                         median(vs_lib.get(key, [])), 1 / 0.9))
                lines.append(row)
    missed = [v for v in verdicts if not v[1] <= v[2]]
    summary = [f"- goals checked: {len(verdicts)}; met: {len(verdicts) - len(missed)}; missed: {len(missed)}"]
    for what, ratio, limit in missed:
        summary.append(f"  - missed: {what}: time ratio {ratio:.3f} (goal <= {limit:.3f})")

    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    command = "python benchmarks/allreduce_vs_c.py " + " ".join(sys.argv[1:])
    header = [
        f"### gdlbench against a bare C MPI loop ({started:%Y-%m-%d %H:%M} UTC)",
        "",
        f"Command: `{command.strip()}`. Machine: {os.cpu_count()} cores ({cpu}), {a.ranks} ranks, "
        f"mpich wheel; load average {load_before[0]:.1f} before, {load_after[0]:.1f} after"
        + (" (a shared, loaded machine: ratios are noisy)" if max(load_before[0], load_after[0]) > 1.5 else "")
        + f". gdlbench's MPI thread level: {level}; the C loop: MPI_Init. {a.rounds} rounds, alternating "
        f"which side runs first; iterations per row {a.small_iters} (< 1 MiB) / {a.large_iters}. "
        "Time columns are medians over rounds of each run's median (of the max over ranks); ratio "
        "columns are medians of the per-round ratios (< 1: gdlbench faster).",
    ]
    text = "\n".join(header + lines + ["", *summary])
    print(text)
    if not a.no_write:
        results = Path(__file__).with_name("RESULTS.md")
        doc = results.read_text() if results.exists() else ""
        block = f"{SECTION_START}\n{text}\n{SECTION_END}"
        if SECTION_START in doc and SECTION_END in doc:
            before, rest = doc.split(SECTION_START, 1)
            doc = before + block + rest.split(SECTION_END, 1)[1]
        else:
            doc = doc.rstrip("\n") + "\n\n## Collectives against a bare C MPI loop (benchmarks/allreduce_vs_c.py)\n\n" \
                + block + "\n"
        results.write_text(doc)
        print(f"\nwritten to {results}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
