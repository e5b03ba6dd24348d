"""What a fresh process pays to touch memory for the first time, after the machine sat idle and
right after another process did the same: on a VM whose balloon reports free pages to its host
(`memory_note` in every report's env), memory freed for a few seconds goes back to the host and
its next first touch faults there too.

    python benchmarks/first_touch.py [--gb 2] [--idle 20] [--rounds 3]

Per round: sleep --idle seconds, then two fresh processes one after the other, each mapping --gb
GB (numpy.empty: an anonymous mapping) and writing one byte per 4 KiB page, timed inside the
process on time.perf_counter around the touch alone. Prints every round and the medians.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from gdlbench.common.env import memory_note

TOUCH = """
import sys, time, numpy as np
n = int(float(sys.argv[1]) * 1e9)
a = np.empty(n, dtype=np.uint8)
t0 = time.perf_counter()
a[::4096] = 1
print(time.perf_counter() - t0)
"""


def touch(gb: float) -> float:
    """Seconds a fresh process takes to touch gb GB of fresh memory."""
    out = subprocess.run([sys.executable, "-c", TOUCH, str(gb)], capture_output=True, text=True, check=True)
    return float(out.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gb", type=float, default=2.0)
    ap.add_argument("--idle", type=float, default=20.0, help="seconds idle before each round's first process")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if not args.gb > 0 or args.idle < 0 or args.rounds < 1:
        ap.error("--gb must be above 0, --idle at least 0, --rounds at least 1")
    print(f"memory_note: {memory_note() or 'none (no free page reporting seen)'}")
    after_idle, back_to_back = [], []
    for r in range(args.rounds):
        time.sleep(args.idle)
        after_idle.append(touch(args.gb))
        back_to_back.append(touch(args.gb))
        print(f"round {r}: after {args.idle:.0f} s idle {1e3 * after_idle[-1]:.0f} ms, "
              f"right after {1e3 * back_to_back[-1]:.0f} ms", flush=True)
    a, b = statistics.median(after_idle), statistics.median(back_to_back)
    print(f"first touch of {args.gb:g} GB in a fresh process, medians of {args.rounds}: after {args.idle:.0f} s idle "
          f"{1e3 * a:.0f} ms, right after another {1e3 * b:.0f} ms: x {a / b:.1f} "
          f"({1e6 * a / (args.gb * 1e9 / 4096):.2f} against {1e6 * b / (args.gb * 1e9 / 4096):.2f} us a page)")


if __name__ == "__main__":
    main()
