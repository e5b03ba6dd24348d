"""gdlbench env: what this run would measure on."""

from __future__ import annotations

import argparse

from rich.table import Table

from ...common import env
from ...common.output import Report, stdout_console
from .. import outputs, ranks_per_node_option


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", metavar="FILE", help="write the environment as JSON")
    ranks_per_node_option(p)


def run(args: argparse.Namespace) -> int:
    files = outputs(args)
    info = env.collect()
    if env.rank() != 0:
        return 0
    table = Table(title=f"gdlbench env [{info['topology']['shape']}]", show_header=False, title_justify="left")
    table.add_column("what", style="bold")
    table.add_column("value")
    for key, value in info.items():
        if key == "devices":
            continue
        if key == "topology":
            value = f"{value['shape']} (found by {value['found_by']})"
        if value is not None:
            table.add_row(key, str(value))
    for d in info["devices"]:
        if d["kind"] == "cuda":
            table.add_row(f"cuda:{d['index']}", f"{d['name']} (sm {d['compute_capability']}, "
                          f"{d['memory_bytes'] / 2**30:.0f} GiB, {d['sm_count']} SMs, {d.get('pci_bus_id', '')})")
    stdout_console().print(table)
    files.write(Report("env", {}, info, {}))
    return 0
