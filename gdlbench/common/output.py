"""One report shape for every command: a rich table on stdout, JSON and CSV files written whole
or not at all, progress on stderr. Only rank 0 prints and writes."""

from __future__ import annotations

import csv
import io
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .. import __version__
from .errors import UsageError
from .measurement import NOISE_NOTE
from .paths import require_writable_dir, write_atomic


@dataclass
class Column:
    """A table column: header, the row key it shows, how to format the value, and its alignment
    (default: words left, numbers right)."""

    header: str
    key: str
    fmt: str | Callable[[Any], str] = "{}"
    justify: Literal["left", "right"] | None = None

    def render(self, row: dict[str, Any]) -> str:
        value = row.get(self.key)
        if value is None:
            return "-"
        return self.fmt(value) if callable(self.fmt) else self.fmt.format(value)


class OutputFile:
    """A file written whole or not at all. The directory is checked when the option is read, so
    an unwritable path fails before any measurement; the data lands by an atomic rename."""

    def __init__(self, path: str, option: str) -> None:
        self.path = Path(path)
        self.option = option
        parent = self.path.parent if str(self.path.parent) else Path(".")
        if self.path.is_dir():
            raise UsageError(f"{option} {path}: is a directory")
        if not parent.is_dir():
            raise UsageError(f"{option} {path}: directory {parent} does not exist")
        if self.path.exists() and not self.path.is_file():  # the rename would replace a device node
            raise UsageError(f"{option} {path}: exists and is not a regular file")
        if self.path.exists() and not os.access(self.path, os.W_OK):
            raise UsageError(f"{option} {path}: not writable")
        require_writable_dir(parent, f"{option} {path}")

    def write(self, text: str) -> None:
        write_atomic(self.path, text)


def _csv_cell(key: str, value: Any) -> Any:
    """Samples as 'a;b;c' (one record per row); other lists and dicts as JSON text."""
    if key.startswith("samples") and isinstance(value, (list, tuple)):
        return ";".join(f"{x:.4f}" for x in value)
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value, default=_json_default)
    return value


def _json_default(o: Any) -> Any:
    if hasattr(o, "to_dict"):
        return o.to_dict()
    if hasattr(o, "item"):  # numpy scalars
        return o.item()
    if hasattr(o, "tolist"):
        return o.tolist()
    raise TypeError(f"cannot serialise {type(o).__name__}")


@dataclass
class Report:
    """The JSON shape of every command (docs/report.md): tool, version, command, args, env, timing,
    rows, summary, notes."""

    command: str
    args: dict[str, Any]
    env: dict[str, Any]
    timing: dict[str, Any]
    rows: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "tool": "gdlbench",
            "version": __version__,
            "command": self.command,
            "args": {k: v for k, v in self.args.items() if k != "version"},
            "env": self.env,
            "timing": self.timing,
            "rows": self.rows,
            "summary": self.summary,
            "notes": self.notes,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, default=_json_default, allow_nan=False)

    def to_csv(self) -> str:
        """One line per row; samples joined by ';' so each row stays one record."""
        keys: list[str] = []
        for row in self.rows:
            keys += [k for k in row if k not in keys]
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=keys, lineterminator="\n")
        writer.writeheader()
        for row in self.rows:
            writer.writerow({k: _csv_cell(k, v) for k, v in row.items()})
        return buf.getvalue()

    def write(self, json_file: OutputFile | None, csv_file: OutputFile | None) -> None:
        if json_file:
            json_file.write(self.to_json())
        if csv_file:
            csv_file.write(self.to_csv())


@dataclass(frozen=True)
class Outputs:
    """A command's --json and --csv files, checked writable when made (before anything is
    measured); write(report) is every command's ending."""

    json: OutputFile | None = None
    csv: OutputFile | None = None

    @classmethod
    def of(cls, json_path: str | None, csv_path: str | None) -> Outputs:
        return cls(OutputFile(json_path, "--json") if json_path else None,
                   OutputFile(csv_path, "--csv") if csv_path else None)

    def write(self, report: Report, csv_report: Report | None = None) -> None:
        """The JSON of `report`, and the CSV of csv_report (default: the same report)."""
        if self.json:
            self.json.write(report.to_json())
        if self.csv:
            self.csv.write((csv_report or report).to_csv())


def stdout_console() -> Console:
    # Wide enough for every table when piped; colour only on a terminal.
    return Console(file=sys.stdout, width=None if sys.stdout.isatty() else 200, highlight=False)


_table_context = ""


def set_table_context(text: str) -> None:
    """What every table's title ends with: the run's nodes x ranks per node."""
    global _table_context
    _table_context = text


def _noise_flag(key: str) -> str | None:
    """The row key that says whether a headline time column is noisy: time_us -> noisy,
    in_time_us -> in_noisy (Measurement.stats' names)."""
    for suffix in ("time_us", "time_ms"):
        if key.endswith(suffix):
            return key.removesuffix(suffix) + "noisy"
    return None


def print_table(title: str, columns: Sequence[Column], rows: Sequence[dict[str, Any]],
                console: Console | None = None, caption: str | None = None, context: str | None = None) -> None:
    """A rich table on rank 0's stdout; headline times of noisy rows are marked with '!' and
    the caption says what that means. The title ends with `context` in brackets (default the
    run's nodes x ranks per node, set_table_context)."""
    cells = []
    marked = False
    for row in rows:
        line = []
        for col in columns:
            text = col.render(row)
            flag = _noise_flag(col.key)
            if flag and row.get(flag) and row.get(col.key) is not None:
                text, marked = f"{text} !", True
            line.append(text)
        cells.append(line)
    if marked:
        caption = f"{caption}; {NOISE_NOTE}" if caption else NOISE_NOTE
    context = _table_context if context is None else context
    if context and title:
        title = f"{title} [{context}]"
    table = Table(title=escape(title) if title else None, caption=escape(caption) if caption else None, caption_justify="left", title_justify="left")
    for col in columns:
        words = any(isinstance(row.get(col.key), str) for row in rows)  # words left, numbers right
        table.add_column(col.header, justify=col.justify or ("left" if words else "right"))
    for line in cells:
        table.add_row(*(escape(c) for c in line))
    (console or stdout_console()).print(table)


class Progress:
    """Progress lines on stderr, only once a run has taken longer than `after_s` seconds, so short
    runs stay quiet and long ones show where they are. Silent on ranks other than 0."""

    def __init__(self, total: int, label: str, enabled: bool = True, after_s: float = 2.0) -> None:
        self.total, self.label, self.enabled, self.after_s = total, label, enabled, after_s
        self.start = time.monotonic()
        self.done = 0

    def step(self, what: str) -> None:
        self.done += 1
        elapsed = time.monotonic() - self.start
        if self.enabled and elapsed >= self.after_s:
            print(f"gdlbench {self.label}: [{self.done}/{self.total}] {what} ({elapsed:.0f} s)", file=sys.stderr,
                  flush=True)


_Request = TypeVar("_Request")
_Result = TypeVar("_Result")


def run_each(requests: Sequence[_Request], label: str, run: Callable[[_Request], _Result],
             describe: Callable[[_Request, _Result], str], enabled: bool = True) -> list[_Result]:
    """run(request) for each request in order, a Progress line after each (describe(request,
    result)); the results in the same order."""
    progress = Progress(len(requests), label, enabled=enabled)
    results = []
    for req in requests:
        result = run(req)
        results.append(result)
        progress.step(describe(req, result))
    return results


def fmt_float(digits: int) -> Callable[[float], str]:
    return lambda v: f"{v:.{digits}f}"


# The time, TFLOP/s and float64 check columns of a kernel's table (GEMM, convolution).
KERNEL_COLUMNS: list[Column] = [
    Column("time (us)", "time_us", fmt_float(1)), Column("min", "time_us_min", fmt_float(1)),
    Column("p95", "time_us_p95", fmt_float(1)), Column("cv", "time_cv", fmt_float(3)),
    Column("TFLOP/s", "tflops", fmt_float(3)), Column("max rel err", "max_rel_error", "{:.1e}"),
    Column("#wrong", "wrong"),
]
