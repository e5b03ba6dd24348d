"""Markdown table of the alpha-beta fits in a `gdlbench allreduce --fit --json FILE` report.

    python benchmarks/fit_table.py FILE [--min-bytes 65536]
"""

from __future__ import annotations

import argparse
import json
import statistics


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("file")
    p.add_argument("--min-bytes", type=int, default=65536, help="sizes the error is taken over (default 64 KiB)")
    a = p.parse_args()
    doc = json.load(open(a.file))
    fits = doc["summary"]["fit"]
    print(f"| algo | fitted on sizes >= | alpha (us) | beta (ns/B) | gamma (ns/B) | median rel. error, sizes >= "
          f"{a.min_bytes} B | max | <= 10 % |")
    print("|---|---|---|---|---|---|---|---|")
    for f in fits:
        errs = [pt["rel_error"] for pt in f["points"] if pt["size_bytes"] >= a.min_bytes]
        med = statistics.median(errs)
        gamma = "-" if f["gamma_us_per_byte"] is None else f"{f['gamma_us_per_byte'] * 1e3:.4f}"
        name = f["algo"] + (f"(P={f['servers']})" if f["algo"] == "ps" else "")
        print(f"| {name} | {f.get('fit_min_bytes', 0)} | {f['alpha_us']:.2f} | {f['beta_us_per_byte'] * 1e3:.4f} | "
              f"{gamma} | {100 * med:.1f} % | {100 * max(errs):.1f} % | {'yes' if med <= 0.10 else 'no'} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
