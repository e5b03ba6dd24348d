"""The key stage's figures table (scripts/gpu-check.sh --stage key): from whatever comparison JSON
files a folder holds so far, one row per figure (what, gdlbench, peer, ratio, goal, met), written
as figures.md and figures.json beside them. Run after every step, so that a lease cut short still
returns a table of what it measured; files not there yet are listed as missing, not errors.

    python benchmarks/key_figures.py FOLDER [OUT_FOLDER]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

Row = dict[str, Any]


def _load(folder: Path, name: str) -> Any:
    path = folder / name
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None  # half-written by a step that was cut off


def gemm_rows(doc: Any) -> list[Row]:
    out = []
    for r in doc.get("rows", []):
        data = r.get("data", "randn (torch) vs fill (gdlbench)")
        out.append({"what": f"GEMM {r['size']}^3 {r['dtype']}, data {data}", "gdlbench": f"{r['gdlbench_tflops']:.1f} TFLOP/s",
                    "peer": f"torch.matmul {r['torch_tflops']:.1f} TFLOP/s", "ratio": r["ratio"], "goal": ">= 0.95",
                    "met": r["ratio"] >= 0.95 and r.get("wrong", 0) == 0})
    return out


def conv_rows(doc: Any, label: str) -> list[Row]:
    args = doc.get("args", {})
    what = f"conv {label} ResNet-50 layers {args.get('dtype', '?')} {args.get('layout', '?')} batch {args.get('batch', '?')}"
    if args.get("layers"):
        what += f" ({len(str(args['layers']).split(','))} layers)"
    return [{"what": f"{what} {p}", "gdlbench": "count-weighted time", "peer": "torch, cudnn.benchmark",
             "ratio": r, "goal": ">= 0.95", "met": r >= 0.95} for p, r in doc.get("overall", {}).items()]


def iteration_rows(doc: Any) -> list[Row]:
    ours = doc.get("gdlbench_fwd_bwd_us")
    out = []
    for key, label in (("torch_channels_last_us", "channels-last"), ("torch_nchw_us", "NCHW")):
        if ours and doc.get(key):
            ratio = ours / doc[key]
            out.append({"what": f"ResNet-50 fwd+bwd fp32 batch {doc.get('batch', '?')} vs torch {label}",
                        "gdlbench": f"{ours / 1e3:.2f} ms", "peer": f"{doc[key] / 1e3:.2f} ms",
                        "ratio": ratio, "goal": "<= 1.05 (time)", "met": ratio <= 1.05})
    return out


def nccl_rows(doc: Any) -> list[Row]:
    rows = [r for r in doc.get("rows", []) if r.get("goal") is not None]
    if not rows:
        return []
    by: dict[tuple[str, bool], list[Row]] = {}
    for r in rows:
        by.setdefault((r["collective"], r["inplace"]), []).append(r)
    out = []
    for (coll, inplace), rs in sorted(by.items()):
        missed = [r for r in rs if r["ratio"] > r["goal"]]
        worst = max(rs, key=lambda r: r["ratio"] / r["goal"])
        out.append({"what": f"NCCL {coll} {'in place' if inplace else 'out of place'}, {len(rs)} sizes",
                    "gdlbench": f"worst {worst['gdlbench_us']:.1f} us at {worst['size_bytes']} B",
                    "peer": f"nccl-tests -z 3 {worst['nccl_tests_z3_us']:.1f} us",
                    "ratio": worst["ratio"], "goal": "<= 1.10 to 4 KiB, <= 1/0.97 from 1 MiB (time)",
                    "met": not missed})
    return out


SOURCES = [
    ("gemm_vs_torch.json", gemm_rows),
    ("conv_vs_torch_legacy.json", lambda d: conv_rows(d, "legacy API")),
    ("conv_vs_torch_graph.json", lambda d: conv_rows(d, "graph API")),
    ("conv_vs_torch_fp32_nchw.json", lambda d: conv_rows(d, "legacy API")),
    ("iteration_vs_torch.json", iteration_rows),
    ("nccl_vs_nccl_tests.json", nccl_rows),
]


def table(folder: Path) -> tuple[list[Row], list[str], str]:
    rows: list[Row] = []
    missing = []
    device = ""
    for name, make in SOURCES:
        doc = _load(folder, name)
        if doc is None:
            missing.append(name)
            continue
        device = device or doc.get("device", "")
        rows += make(doc)
    return rows, missing, device


def markdown(rows: list[Row], missing: list[str], device: str) -> str:
    lines = [f"# Key stage figures{f' ({device})' if device else ''}", "",
             "| what | gdlbench | peer (same run) | ratio | goal | met |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['what']} | {r['gdlbench']} | {r['peer']} | {r['ratio']:.3f} | {r['goal']} | "
                     f"{'yes' if r['met'] else '**no**'} |")
    if missing:
        lines += ["", f"Not (yet) measured: {', '.join(missing)}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if not 1 <= len(argv) <= 2:
        print("usage: key_figures.py FOLDER [OUT_FOLDER]", file=sys.stderr)
        return 2
    folder = Path(argv[0])
    out = Path(argv[1]) if len(argv) > 1 else folder
    rows, missing, device = table(folder)
    out.mkdir(parents=True, exist_ok=True)
    for name, text in (("figures.md", markdown(rows, missing, device)),
                       ("figures.json", json.dumps({"device": device, "rows": rows, "missing": missing}, indent=1))):
        tmp = out / f".{name}.tmp"
        tmp.write_text(text)
        tmp.replace(out / name)  # never half-written
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
