"""gdlbench's CPU transformer layers against PyTorch's on the layers of GPT-2 small and BERT-base,
forward and backward, same thread count, one process.

The layers are those of gdlbench.nets.network.load_network("gpt2-small:seq=S") and ("bert-base:seq=S")
(S = 64 and 128 by default, batch 2): one representative layer per distinct type, shapes and
attributes, with the number of times it occurs in the net. gdlbench runs each through
_core.LayerBench (its own buffers, gdlbench's test data; the (D, S, 1) per-sample layout, features
major). Torch runs the same shapes in its natural (B, S, D) layout, as a user writes the layer:
embedding lookups summed, F.layer_norm, F.linear, F.gelu, torch.tanh, F.dropout, x[:, 0],
attention as F.linear + F.scaled_dot_product_attention (causal for GPT-2, dropout on the
probabilities) + F.linear, the LM head as F.linear against a [vocab, D] table, the loss as
F.cross_entropy over (B*S, vocab). Torch's forward runs with autograd on (a training forward,
saving what backward needs, as gdlbench's does); its backward is torch.autograd.grad of the output
with respect to the input (unless token ids) and every parameter, given a fixed dy.
"bwd" is gdlbench's bwd pass: parameter gradients then input gradients.

Both clocks are CLOCK_MONOTONIC: gdlbench's samples come from its C++ steady clock around one
pass (bench.time), torch's from time.perf_counter around one call. Calls alternate one by one
(gdlbench, torch, torch, gdlbench, ...) so that the machine's slow and fast phases hit both alike;
each figure is the median of every sample of every round (the same count on both sides, after the
same warm-up). Ratio = torch time / gdlbench time (above 1: gdlbench is faster). The total of a
net weighs each layer's fwd + bwd by its count: one forward + backward of the whole net.

    python benchmarks/transformer_layers_vs_torch.py [--nets gpt2-small,bert-base] [--seqs 64,128]
        [--batch 2] [--threads N] [--iters 5] [--warmup 2] [--rounds 3] [--types attention,...] [--json F]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from peer_timing import time_host  # the peer on the host clock, as gdlbench's steady_clock

PASSES = ("fwd", "bwd")


@dataclass
class Case:
    """One representative layer of a net and how often its kind occurs there."""

    net: str
    spec: dict[str, Any]
    count: int

    @property
    def key(self) -> str:
        return f"{self.net}/{self.spec['name']}"


def cases_of(net: str, types: set[str]) -> list[Case]:
    """One Case per distinct (type, shapes, attributes) of the net, in first-occurrence order."""
    from gdlbench.nets.network import load_network
    seen: dict[str, Case] = {}
    for spec in load_network(net).layer_specs():
        if types and spec["type"] not in types:
            continue
        kind = json.dumps([spec["type"], spec["in_shapes"], spec["out_shape"], spec["attrs"]], sort_keys=True)
        if kind in seen:
            seen[kind].count += 1
        else:
            seen[kind] = Case(net, spec, 1)
    return list(seen.values())


# ---- torch's layers, (B, S, D) layout: each builder returns (leaves needing gradients, forward) --------

def _w(torch: Any, *shape: int) -> Any:
    return (torch.randn(*shape) * 0.02).requires_grad_()


def _seq(torch: Any, spec: dict[str, Any], b: int, i: int = 0) -> Any:
    c, h, w = spec["in_shapes"][i]
    shape = (b, c) if h * w == 1 else (b, h * w, c)
    return torch.randn(*shape).requires_grad_()


def t_embedding(torch: Any, spec: dict[str, Any], b: int) -> tuple[list[Any], Callable[[], Any]]:
    a, s = spec["attrs"], spec["in_shapes"][0][1]
    f = torch.nn.functional
    idx = torch.randint(0, a["vocab"], (b, s))
    pos_ids = torch.arange(s)
    tables = [_w(torch, a["vocab"], a["hidden"]), _w(torch, a["positions"], a["hidden"])]
    if a["token_types"]:
        tables.append(_w(torch, a["token_types"], a["hidden"]))
        type_ids = (pos_ids >= s // 2).long().clamp(max=a["token_types"] - 1)

    def fwd() -> Any:
        y = f.embedding(idx, tables[0]) + f.embedding(pos_ids, tables[1])
        return y + f.embedding(type_ids, tables[2]) if len(tables) == 3 else y
    return tables, fwd


def t_attention(torch: Any, spec: dict[str, Any], b: int) -> tuple[list[Any], Callable[[], Any]]:
    a, (d, s, _) = spec["attrs"], spec["in_shapes"][0]
    f, h = torch.nn.functional, a["heads"]
    x = _seq(torch, spec, b)
    params = [_w(torch, *shape) for shape in spec["param_shapes"]]
    wqkv, bqkv, wo, bo = params if a["bias"] else (params[0], None, params[1], None)

    def fwd() -> Any:
        q, k, v = (t.view(b, s, h, d // h).transpose(1, 2) for t in f.linear(x, wqkv, bqkv).split(d, -1))
        o = f.scaled_dot_product_attention(q, k, v, dropout_p=a["dropout"], is_causal=bool(a["causal"]))
        return f.linear(o.transpose(1, 2).reshape(b, s, d), wo, bo)
    return [x, *params], fwd


def t_softmax_xent(torch: Any, spec: dict[str, Any], b: int) -> tuple[list[Any], Callable[[], Any]]:
    c, h, w = spec["in_shapes"][0]
    x = _seq(torch, spec, b)
    labels = torch.randint(0, c, (b * h * w,))
    return [x], lambda: torch.nn.functional.cross_entropy(x.reshape(-1, c), labels)


def t_simple(torch: Any, spec: dict[str, Any], b: int) -> tuple[list[Any], Callable[[], Any]]:
    """The layers that are one torch call on their input(s) and parameters."""
    f, a, t = torch.nn.functional, spec["attrs"], spec["type"]
    xs = [_seq(torch, spec, b, i) for i in range(len(spec["in_shapes"]))]
    params = [_w(torch, *shape) for shape in spec["param_shapes"]]
    ops: dict[str, Callable[[], Any]] = {
        "layernorm": lambda: f.layer_norm(xs[0], xs[0].shape[-1:], *params, eps=a.get("eps", 1e-5)),
        "linear": lambda: f.linear(xs[0], *params),
        "fc": lambda: f.linear(xs[0], *params),
        "lm_head": lambda: f.linear(xs[0], *params),
        "gelu": lambda: f.gelu(xs[0], approximate="tanh" if a.get("approximate") else "none"),
        "tanh": lambda: torch.tanh(xs[0]),
        "dropout": lambda: f.dropout(xs[0], a.get("ratio", 0.5), training=True),
        "add": lambda: xs[0] + xs[1],
        "select_token": lambda: xs[0][:, a.get("index", 0)],
    }
    if spec["type"] == "lm_head":  # the head's weight (tied: the embedding's table) [vocab, D]
        params = [_w(torch, a["vocab"], spec["in_shapes"][0][0])] + ([_w(torch, a["vocab"])] if a["bias"] else [])
    return [*xs, *params], ops[t]


TORCH_LAYERS = {"embedding": t_embedding, "attention": t_attention, "softmax_xent": t_softmax_xent}


def torch_passes(torch: Any, spec: dict[str, Any], batch: int) -> dict[str, Callable[[], Any]]:
    """fwd: the forward with autograd on; bwd: the gradients of a fixed dy (a loss: of itself)."""
    leaves, fwd = TORCH_LAYERS.get(spec["type"], t_simple)(torch, spec, batch)
    y = fwd()
    dy = None if y.dim() == 0 else torch.randn_like(y)
    return {"fwd": fwd, "bwd": lambda: torch.autograd.grad(y, leaves, dy, retain_graph=True)}


def measure(cases: list[Case], args: argparse.Namespace) -> dict[tuple[str, str, str], list[float]]:
    """Paired samples: per layer and pass, one gdlbench call and one torch call alternate (the order
    flipping each time), so that a slow phase of the machine lands on both alike."""
    import torch

    from gdlbench import _core
    samples: dict[tuple[str, str, str], list[float]] = {}
    for rnd in range(args.rounds):
        for case in cases:
            bench = _core.LayerBench(case.spec, args.batch)
            tops = torch_passes(torch, case.spec, args.batch)
            for pass_ in PASSES:
                bench.time(pass_, args.warmup, 1)
                time_host(tops[pass_], args.warmup, 1)
                for i in range(args.iters):
                    order = ("gdlbench", "torch") if (i + rnd) % 2 == 0 else ("torch", "gdlbench")
                    for who in order:
                        got = bench.time(pass_, 0, 1) if who == "gdlbench" else time_host(tops[pass_], 0, 1)
                        samples.setdefault((case.key, pass_, who), []).extend(got)
            del bench, tops
        print(f"round {rnd + 1}/{args.rounds} done (load {os.getloadavg()[0]:.2f})", file=sys.stderr, flush=True)
    return samples


def report(cases: list[Case], med: dict[tuple[str, str, str], float]) -> dict[str, dict[str, float]]:
    """Per-layer rows, then each net's count-weighted fwd + bwd total."""
    print(f"\n{'layer':<44}{'type':<13}{'count':>6}{'pass':>5}{'gdl (ms)':>11}{'torch (ms)':>11}{'ratio':>7}")
    totals: dict[str, dict[str, float]] = {}
    for case in cases:
        tot = totals.setdefault(case.net, {"gdl_ms": 0.0, "torch_ms": 0.0})
        for pass_ in PASSES:
            g, t = med[(case.key, pass_, "gdlbench")] / 1e3, med[(case.key, pass_, "torch")] / 1e3
            tot["gdl_ms"] += case.count * g
            tot["torch_ms"] += case.count * t
            print(f"{case.key:<44}{case.spec['type']:<13}{case.count:>6}{pass_:>5}{g:>11.3f}{t:>11.3f}{t / g:>7.2f}")
    print()
    for net, tot in totals.items():
        tot["ratio"] = tot["torch_ms"] / tot["gdl_ms"]
        print(f"{net:<24} one forward + backward (layers x counts): gdlbench {tot['gdl_ms']:8.1f} ms, "
              f"torch {tot['torch_ms']:8.1f} ms, ratio {tot['ratio']:.2f}")
    return totals


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nets", default="gpt2-small,bert-base")
    ap.add_argument("--seqs", default="64,128")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--threads", type=int, default=None, help="threads for both (default: gdlbench's compute threads)")
    ap.add_argument("--iters", type=int, default=5, help="timed calls per pass per round, each side")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--types", default="", help="comma-separated layer types (default: all)")
    ap.add_argument("--json", help="write every sample here")
    args = ap.parse_args()

    import numpy as np
    import torch

    import gdlbench
    from gdlbench import _core
    from gdlbench.common import env

    threads = args.threads or env.default_threads()
    torch.set_num_threads(threads)
    _core.set_compute_threads(threads)
    _core.set_blas_threads(threads)
    types = {t for t in args.types.split(",") if t}
    cases = [c for n in args.nets.split(",") for s in args.seqs.split(",") for c in cases_of(f"{n}:seq={s}", types)]
    print(f"gdlbench {gdlbench.__version__} (OpenBLAS {_core.blas_corename()}); torch {torch.__version__}; "
          f"threads {threads} both; batch {args.batch}; {args.rounds} rounds x {args.iters} calls each side, "
          f"medians; clocks: steady_clock / perf_counter ({time.get_clock_info('perf_counter').implementation}); "
          f"load {os.getloadavg()[0]:.2f}", flush=True)
    samples = measure(cases, args)
    med = {key: float(np.median(v)) for key, v in samples.items()}
    totals = report(cases, med)
    print(f"load average at the end: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "threads": threads, "torch": torch.__version__, "totals": totals,
                       "counts": {c.key: c.count for c in cases},
                       "medians_us": {"|".join(k): v for k, v in med.items()},
                       "samples_us": {"|".join(k): v for k, v in samples.items()}}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
