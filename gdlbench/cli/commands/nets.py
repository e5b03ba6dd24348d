"""gdlbench nets: the networks gdlbench knows, with parameters, size and forward FLOPs; one
network's per-layer table with --net NAME --layers."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from ...common import env
from ...common.errors import UsageError
from ...common.output import Column, Report, fmt_float, print_table
from ...nets.network import Network, builtin_nets, load_network, net_option
from .. import outputs


def _shape(v: Sequence[int]) -> str:
    return "x".join(str(x) for x in v)


NET_COLUMNS = [
    Column("net", "name"), Column("layers", "layers"), Column("params", "params", "{:,}"),
    Column("MB (fp32)", "size_mb", fmt_float(1)), Column("GMACs/img", "fwd_gmacs", fmt_float(3)),
    Column("GFLOPs/img", "fwd_gflops", fmt_float(3)), Column("input", "input", _shape),
    Column("published params", "published_params", "{:,}"), Column("published GMACs", "published_gmacs", fmt_float(2)),
]
LAYER_COLUMNS = [
    Column("#", "index"), Column("layer", "layer"), Column("type", "type"), Column("inputs", "input_names"),
    Column("in", "in_shapes", lambda v: " + ".join(_shape(s) for s in v)), Column("out", "out_shape", _shape),
    Column("params", "params", "{:,}"), Column("MMACs", "fwd_mmacs", fmt_float(2)),
    Column("grad bytes", "grad_bytes", "{:,}"),
]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--net", type=net_option, help="one network: a built-in name or a path to a .json/.py spec")
    p.add_argument("--layers", action="store_true", help="with --net: print its per-layer table")
    p.add_argument("--json", metavar="FILE", help="write the report as JSON")
    p.add_argument("--csv", metavar="FILE", help="write the rows as CSV")


def net_row(net: Network) -> dict[str, Any]:
    s = net.summary()
    pub = net.published
    return {"name": s["net"], "layers": s["layers"], "params": s["params"], "size_mb": s["size_mb"],
            "fwd_gmacs": s["fwd_gmacs"], "fwd_gflops": s["fwd_gflops"], "input": s["input"],
            "published_params": pub.get("params"),
            "published_gmacs": pub["fwd_macs"] / 1e9 if pub.get("fwd_macs") else None,
            "published_source": pub.get("source"), "description": s["description"], "origin": s["origin"]}


def layer_rows(net: Network) -> list[dict[str, Any]]:
    rows = []
    for i, spec in enumerate(net.layer_specs()):
        names = ["data" if j < 0 else net.layers[j].name for j in spec["inputs"]]
        rows.append({"index": i, "layer": spec["name"], "type": spec["type"], "input_names": ", ".join(names),
                     "inputs": spec["inputs"], "in_shapes": spec["in_shapes"], "out_shape": spec["out_shape"],
                     "attrs": spec["attrs"], "param_shapes": spec["param_shapes"], "params": spec["params"],
                     "fwd_macs": spec["fwd_macs"], "fwd_mmacs": spec["fwd_macs"] / 1e6,
                     "grad_bytes": spec["params"] * 4})
    return rows


def run(args: argparse.Namespace) -> int:
    if args.layers and not args.net:
        raise UsageError("--layers needs --net NAME")
    files = outputs(args)
    is_root = env.rank() == 0
    if args.net and args.layers:
        net = load_network(args.net)
        rows = layer_rows(net)
        title = (f"gdlbench nets: {net.name}: {len(net)} layers, {net.params:,} parameters "
                 f"({net.param_bytes() / 1e6:.1f} MB fp32), {net.fwd_macs / 1e9:.3f} GMACs per sample")
        columns = LAYER_COLUMNS
        summary = net_row(net)
    else:
        nets = [load_network(args.net)] if args.net else [load_network(n) for n in builtin_nets()]
        rows = [net_row(n) for n in nets]
        title, columns, summary = "gdlbench nets", NET_COLUMNS, {}
    caption = ("MACs: forward multiply-adds per sample (an image or a sequence) of conv, fc, linear, attention "
               "(QKV, QK^T, AV, output) and LM-head layers (FLOPs = 2 x MACs); "
               "params: learnable (BN: scale and shift; running statistics excluded); MB = 1e6 bytes")
    env_info = env.collect()  # every rank: it holds a collective (the node split)
    report = Report("nets", vars(args), env_info if is_root else {}, {"clock": "none", "region": "no timing: counts from the specs",
                                            "rank_reduction": "none"}, rows=rows, summary=summary)
    if is_root:
        print_table(title, columns, rows, caption=caption)
        files.write(report, csv_safe(report))
    return 0


def csv_safe(report: Report) -> Report:
    """Report.to_csv joins lists as numbers; shapes and attributes go in as JSON text instead
    (one CSV cell each, integers kept integers)."""
    import dataclasses
    import json

    def cell(v: Any) -> Any:  # one value of a row: any JSON
        if isinstance(v, (dict, list, tuple)):
            return json.dumps(v)
        return v

    return dataclasses.replace(report, rows=[{k: cell(v) for k, v in r.items()} for r in report.rows])
