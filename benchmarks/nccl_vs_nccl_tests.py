"""gdlbench's NCCL collectives against nccl-tests' own loop, on the same GPU and the same NCCL.

    python benchmarks/nccl_vs_nccl_tests.py [--peer .peers/nccl-tests] [--rounds 3] [--json FILE]

The peer is nccl-tests' perf programs, built from its source by scripts/build-nccl-tests.sh (no
binary in the repository), run in one process on one GPU (-g 1) with LD_LIBRARY_PATH pointing at
the libnccl and libcudart that gdlbench's CUDA module loads, so that both sides call the same
library. Two nccl-tests loops:
  -z 3  per iteration: the collective, cudaStreamSynchronize (timed), a barrier (untimed): the loop
        gdlbench runs (untimed barrier, then one NCCL call and a stream synchronize); the peer.
  -z 0  nccl-tests' default: the iterations launched back to back, one synchronize at the end
        (launch overhead hidden behind the previous call); shown for reference.
nccl-tests reports the mean over its iterations; gdlbench's side is the mean of its samples, so
the two are the same statistic. Rounds alternate which side runs first; a ratio is the median over
rounds of gdlbench's time over the peer's. Sizes 8 B to 256 MiB (x4), float32, sum, in-place and
out-of-place. Goals (those of the MPI comparison): <= 1.10 x the peer's time up to 4 KiB, <= 1/0.97
from 1 MiB up. With one GPU the collectives move no data between ranks: this measures the loop
and launch overhead and the local copy, not links.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import gdlbench

# gdlbench command -> nccl-tests program; the sizes mean the same on both (the total buffer for
# reduce_scatter and allgather, each rank's buffer for allreduce and broadcast).
PROGRAMS = {"allreduce": "all_reduce_perf", "reduce_scatter": "reduce_scatter_perf",
            "allgather": "all_gather_perf", "broadcast": "broadcast_perf"}
SWEEP = ["-b", "8", "-e", "256M", "-f", "4"]
SMALL_MAX, LARGE_MIN = 4096, 2**20


def nccl_library_path() -> str:
    """The folders of the libnccl and libcudart that gdlbench's CUDA module resolves (ldd)."""
    from gdlbench import _native

    ldd = subprocess.run(["ldd", _native._cuda.__file__], capture_output=True, text=True, check=True).stdout
    dirs = []
    for line in ldd.splitlines():
        if ("libnccl" in line or "libcudart" in line) and "=>" in line:
            path = line.split("=>")[1].split("(")[0].strip()
            if path and path != "not found":
                dirs.append(str(Path(path).parent))
    if not any("libnccl" in line and "not found" not in line for line in ldd.splitlines()):
        sys.exit("nccl_vs_nccl_tests: gdlbench's CUDA module does not resolve libnccl (ldd)")
    return ":".join(dict.fromkeys(dirs + [os.environ.get("LD_LIBRARY_PATH", "")]))


def run_peer(exe: Path, blocking: int, a, libpath: str) -> dict[tuple[bool, int], float]:
    """{(inplace, size): mean us} from nccl-tests' table (out-of-place columns, then in-place)."""
    cmd = [str(exe), *SWEEP, "-g", "1", "-n", str(a.iters), "-w", str(a.warmup), "-c", "0", "-d", "float",
           "-o", "sum", "-z", str(blocking)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout,
                       env={**os.environ, "LD_LIBRARY_PATH": libpath})
    if p.returncode != 0:
        sys.exit(f"nccl_vs_nccl_tests: {' '.join(cmd)} failed:\n{(p.stdout + p.stderr).strip()[-800:]}")
    out: dict[tuple[bool, int], float] = {}
    for line in p.stdout.splitlines():
        f = line.split()
        if len(f) >= 13 and f[0].isdigit():  # size count type redop root | time algbw busbw #wrong (x2)
            out[(False, int(f[0]))] = float(f[5])
            out[(True, int(f[0]))] = float(f[9])
    if not out:
        sys.exit(f"nccl_vs_nccl_tests: no rows in the output of {' '.join(cmd)}:\n{p.stdout[-800:]}")
    return out


def run_gdlbench(coll: str, a, workdir: Path) -> dict[tuple[bool, int], float]:
    js = workdir / f"{coll}.json"
    cmd = [sys.executable, "-m", "gdlbench", coll, "--backend", "nccl", *SWEEP, "-n", str(a.iters),
           "-w", str(a.warmup), "-c", "0", "-d", "float32", "--json", str(js)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout, cwd=workdir)
    if p.returncode != 0:
        sys.exit(f"nccl_vs_nccl_tests: {' '.join(cmd)} failed:\n{p.stderr.strip()[-800:]}")
    return {(bool(r["inplace"]), int(r["size_bytes"])): statistics.fmean(r["samples_us"])
            for r in json.loads(js.read_text())["rows"]}


def goal(size: int) -> float | None:
    return 1.10 if size <= SMALL_MAX else 1 / 0.97 if size >= LARGE_MIN else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peer", default=str(Path(__file__).resolve().parent.parent / ".peers" / "nccl-tests"),
                    help="folder of nccl-tests' *_perf programs (scripts/build-nccl-tests.sh)")
    ap.add_argument("--collectives", default=",".join(PROGRAMS), help=f"comma list of {', '.join(PROGRAMS)}")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--timeout", type=float, default=120, help="seconds per launched run")
    ap.add_argument("--json")
    a = ap.parse_args()
    colls = a.collectives.split(",")
    if unknown := [c for c in colls if c not in PROGRAMS]:
        ap.error(f"--collectives: unknown {', '.join(unknown)} (expected {', '.join(PROGRAMS)})")
    if min(a.rounds, a.iters) < 1 or a.warmup < 0:
        ap.error("--rounds and --iters must be >= 1, --warmup >= 0")
    if gdlbench.cuda_status()[0] == 0:
        print(f"nccl_vs_nccl_tests: needs a GPU: {gdlbench.cuda_status()[1]}", file=sys.stderr)
        return 2
    peer = Path(a.peer)
    if missing := [PROGRAMS[c] for c in colls if not (peer / PROGRAMS[c]).is_file()]:
        print(f"nccl_vs_nccl_tests: no {', '.join(missing)} in {peer} (scripts/build-nccl-tests.sh SRC)",
              file=sys.stderr)
        return 2
    libpath = nccl_library_path()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for coll in colls:
            exe = peer / PROGRAMS[coll]
            ours, same, default = [], [], []
            for rnd in range(a.rounds):  # alternate which side goes first
                if rnd % 2:
                    ours.append(run_gdlbench(coll, a, Path(tmp)))
                same.append(run_peer(exe, 3, a, libpath))
                if not rnd % 2:
                    ours.append(run_gdlbench(coll, a, Path(tmp)))
                default.append(run_peer(exe, 0, a, libpath))
            # nccl-tests rounds a size down to whole elements per rank (8 B reduce_scatter: 0 B
            # on one rank); the sizes both sides ran are compared, the others named.
            common = sorted(ours[0].keys() & same[0].keys() & default[0].keys())
            if only := sorted(ours[0].keys() ^ same[0].keys()):
                print(f"{coll}: sizes (in-place, bytes) on one side only, not compared: {only}")
            for key in common:
                inplace, size = key
                ratio = statistics.median(o[key] / s[key] for o, s in zip(ours, same, strict=True))
                rows.append({"collective": coll, "size_bytes": size, "inplace": inplace,
                             "gdlbench_us": statistics.median(o[key] for o in ours),
                             "nccl_tests_z3_us": statistics.median(s[key] for s in same),
                             "nccl_tests_z0_us": statistics.median(d[key] for d in default),
                             "ratio": ratio, "goal": goal(size)})
    print(f"{'collective':15s} {'size':>10s} {'mode':5s} {'gdlbench us':>12s} {'nccl-tests -z3':>15s} "
          f"{'-z0':>9s} {'ratio':>7s}  goal")
    missed = 0
    for r in rows:
        g = r["goal"]
        verdict = "" if g is None else "ok" if r["ratio"] <= g else f"MISSED (<= {g:.2f})"
        missed += verdict.startswith("MISSED")
        print(f"{r['collective']:15s} {r['size_bytes']:10d} {'in' if r['inplace'] else 'out':5s} "
              f"{r['gdlbench_us']:12.2f} {r['nccl_tests_z3_us']:15.2f} {r['nccl_tests_z0_us']:9.2f} "
              f"{r['ratio']:7.3f}  {verdict}")
    print(f"{missed} of {sum(r['goal'] is not None for r in rows)} rows with a goal missed")
    if a.json:
        doc = {"peer": (peer / "VERSION").read_text().strip() if (peer / "VERSION").exists() else str(peer),
               "ld_library_path": libpath, "rounds": a.rounds, "iters": a.iters, "warmup": a.warmup,
               "env": gdlbench.common.env.collect(), "rows": rows}
        tmp_json = Path(a.json + ".tmp")
        tmp_json.write_text(json.dumps(doc, indent=1))
        tmp_json.replace(a.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
