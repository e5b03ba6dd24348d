#!/usr/bin/env python3
"""A small mutation pass: flip one operator or constant at a time in the model's formulas and the
Python-side checks, put the mutant in the installed package (the tests import it), run the tests
that should notice, and list the mutants that survive. The installed files are restored after
every mutant (and at exit). Slow (minutes): a developer's tool, not part of the suite.
    .venv/bin/python scripts/mutate.py [--only NAME,...] [--every K] [--limit N]"""

from __future__ import annotations

import argparse
import ast
import copy
import importlib.util
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FAST_MODEL = ["tests/test_model.py", "--deselect",
              "tests/test_model.py::test_predict_with_more_servers_than_one_worker_prices_the_single_worker_too"]
# (name, module file, functions to mutate (empty: all), tests that should kill the mutants)
TARGETS = [
    ("costmodel", "costmodel.py", [], [*FAST_MODEL, "tests/test_public_api.py", "tests/test_faults.py"]),
    ("costmodel-2level", "costmodel.py", ["_levels", "_ring2", "_rd2", "_tree2", "_library2", "_hier2", "_ps2"],
     ["tests/test_multinode.py", "-k", "counts_price or reduces_to_one_level or recovers_both or flat_ring or "
      "regime_of_what"]),
    ("model", "model.py", ["comm_time_us", "predict_iteration", "schedule_shared", "params_for", "predict_us",
                           "allreduce_us", "push_us", "pull_us"], FAST_MODEL),
    ("contention", "iteration.py", ["contention"],
     [*FAST_MODEL, "tests/test_faults.py", "-k", "contention or five_percent"]),
    ("fit", "collectives.py", ["fit_alpha_beta", "params_for", "predict_us", "rel_errors", "median_rel_error",
                               "link_gbs", "bus_factor"],
     ["tests/test_collectives.py", "tests/test_public_api.py", "-k", "fit or bus"]),
    ("gemm-check", "gemm.py", ["compare", "check_rows"], ["tests/test_faults.py", "tests/test_gemm.py"]),
    ("conv-check", "conv.py", ["compare", "expected", "_for_pass"],
     ["tests/test_faults.py", "tests/test_conv.py", "-k", "check or fault or accumulates or cpu"]),
    ("topk-check", "compress.py", ["kept_count", "topk_wrong", "check_topk"],
     ["tests/test_faults.py", "tests/test_public_api.py", "-k", "topk or compress or kept"]),
    ("fault", "_fault.py", [], ["tests/test_faults.py"]),
]

SWAP = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult, ast.FloorDiv: ast.Mult,
        ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq,
        ast.And: ast.Or, ast.Or: ast.And, ast.Pow: ast.Mult}


def sites(tree: ast.Module, functions: list[str]) -> list[tuple[ast.AST, str]]:
    """Every operator and numeric constant inside the named functions (all, when none named)."""
    scopes = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
              and (not functions or n.name in functions)] if functions else [tree]
    found: list[tuple[ast.AST, str]] = []
    seen: set[int] = set()
    for scope in scopes:
        for n in ast.walk(scope):
            if id(n) in seen:
                continue
            seen.add(id(n))
            if isinstance(n, (ast.BinOp, ast.AugAssign)) and type(n.op) in SWAP:
                found.append((n, f"{type(n.op).__name__}->{SWAP[type(n.op)].__name__}"))
            elif isinstance(n, ast.BoolOp) and type(n.op) in SWAP:
                found.append((n, f"{type(n.op).__name__}->{SWAP[type(n.op)].__name__}"))
            elif isinstance(n, ast.Compare) and type(n.ops[0]) in SWAP:
                found.append((n, f"{type(n.ops[0]).__name__}->{SWAP[type(n.ops[0])].__name__}"))
            elif isinstance(n, ast.Constant) and type(n.value) in (int, float) and not isinstance(n.value, bool):
                found.append((n, f"{n.value!r}->{_bump(n.value)!r}"))
    return found


def _bump(v: float) -> float:
    return v + 1 if isinstance(v, int) else (v * 2 if v else 1.0)


def mutate(node: ast.AST) -> None:
    if isinstance(node, (ast.BinOp, ast.AugAssign, ast.BoolOp)):
        node.op = SWAP[type(node.op)]()
    elif isinstance(node, ast.Compare):
        node.ops[0] = SWAP[type(node.ops[0])]()
    elif isinstance(node, ast.Constant):
        node.value = _bump(node.value)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", help="target names, comma-separated")
    ap.add_argument("--limit", type=int, default=0, help="at most this many mutants per target")
    ap.add_argument("--every", type=int, default=1, help="every K-th site only (a sample, for a quicker pass)")
    ap.add_argument("--timeout", type=float, default=240)
    args = ap.parse_args()
    spec = importlib.util.find_spec("gdlbench")
    assert spec and spec.submodule_search_locations
    # the folder the tests import the Python modules from: the installed copy, or with an editable
    # install (pip install -e) this checkout itself (the files are restored after every mutant)
    installed = next((Path(p) for p in spec.submodule_search_locations if (Path(p) / "model.py").is_file()), None)
    if installed is None:
        sys.exit("mutate: gdlbench's modules were not found where Python imports them")
    editable = installed.resolve() == (ROOT / "gdlbench").resolve()
    if editable and Path(sys.prefix).resolve() == Path(sys.base_prefix).resolve():
        sys.exit("mutate: run it with the venv's python, so that gdlbench is the installed copy")
    survivors: list[str] = []
    total = killed = 0
    for name, module, functions, tests in TARGETS:
        if args.only and name not in args.only.split(","):
            continue
        path = installed / module
        original = path.read_text()
        tree = ast.parse((ROOT / "gdlbench" / module).read_text())
        n_sites = len(sites(tree, functions))
        picked = list(range(0, n_sites, args.every))
        picked = picked[:args.limit] if args.limit else picked
        try:
            for i in picked:
                mutant = copy.deepcopy(tree)
                node, what = sites(mutant, functions)[i]
                line = getattr(node, "lineno", 0)
                mutate(node)
                path.write_text(ast.unparse(mutant))
                start = time.monotonic()
                try:
                    p = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests],
                                       cwd=ROOT, capture_output=True, text=True, timeout=args.timeout)
                    dead = p.returncode != 0
                except subprocess.TimeoutExpired:
                    dead = True  # a mutant that hangs the tests is caught
                total += 1
                killed += dead
                label = f"{module}:{line} {what}"
                print(f"{'killed  ' if dead else 'SURVIVED'} {label} ({time.monotonic() - start:.0f} s)", flush=True)
                if not dead:
                    survivors.append(label)
        finally:
            path.write_text(original)
    print(f"\n{killed}/{total} mutants killed; {len(survivors)} survived:")
    for s in survivors:
        print("  " + s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
