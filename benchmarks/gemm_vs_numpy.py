"""gdlbench's CPU GEMM against numpy.matmul: same sizes, same thread count, alternating runs in
one process. Prints GFLOP/s of each and the ratio of medians (gdlbench / numpy).

  python benchmarks/gemm_vs_numpy.py [--size 2048] [--rounds 7] [--iters 5] [--dtype float32]

Both call OpenBLAS sgemm (numpy through its bundled scipy-openblas64, gdlbench through
scipy-openblas32). numpy is timed with time.perf_counter around `np.matmul(a, b, out=c)`, so
neither side pays for allocating C.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

import gdlbench
from gdlbench import _core


def numpy_samples(a, b, c, warmup: int, iters: int) -> list[float]:
    for _ in range(warmup):
        np.matmul(a, b, out=c)
    out = []
    for _ in range(iters):
        t0 = time.perf_counter()
        np.matmul(a, b, out=c)
        out.append((time.perf_counter() - t0) * 1e6)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=2048)
    ap.add_argument("--rounds", type=int, default=7, help="alternating rounds (each: gdlbench, then numpy)")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()

    n = args.size
    threads = args.threads or gdlbench.common.env.default_threads()
    a = np.empty((n, n), dtype=args.dtype)
    b = np.empty((n, n), dtype=args.dtype)
    _core.fill(a, 1)
    _core.fill(b, 2)
    c = np.zeros((n, n), dtype=args.dtype)
    flop = 2.0 * n * n * n
    ours, theirs = [], []
    with threadpool_limits(limits=threads, user_api="blas"):
        numpy_blas = [f"{i['internal_api']} {i['version']} {i.get('architecture')} x{i['num_threads']}"
                      for i in threadpool_info() if i["user_api"] == "blas"]
        for _ in range(args.rounds):
            r = gdlbench.gemm(n, n, n, args.dtype, "cpu", iters=args.iters, warmup=1, threads=threads,
                              check=False)
            ours += r.measurement.samples_us
            theirs += numpy_samples(a, b, c, 1, args.iters)
    g_ours = flop / np.median(ours) / 1e3
    g_np = flop / np.median(theirs) / 1e3
    print(f"machine: {gdlbench.common.env.collect()['cpu']}, {threads} threads")
    print(f"gdlbench BLAS: {_core.blas_config().strip()} core={_core.blas_corename()}")
    print(f"numpy BLAS:    {'; '.join(numpy_blas)}")
    print(f"{args.dtype} GEMM {n}^3, {args.rounds} alternating rounds x {args.iters} iterations")
    print(f"  gdlbench: median {np.median(ours) / 1e3:8.2f} ms  {g_ours:7.1f} GFLOP/s  (min {np.min(ours) / 1e3:.2f} ms)")
    print(f"  numpy:    median {np.median(theirs) / 1e3:8.2f} ms  {g_np:7.1f} GFLOP/s  (min {np.min(theirs) / 1e3:.2f} ms)")
    print(f"  ratio gdlbench/numpy (GFLOP/s, medians): {g_ours / g_np:.3f}  (goal >= 0.95)")


if __name__ == "__main__":
    main()
