"""Compare: results side by side, as the CLI shows and writes them.

Every command of the CLI ends here, and so can a study script: the same table on stdout, the
same JSON document and the same CSV, row for row, whether the results came from `gdlbench gemm`
or from `gdlbench.gemm(...)` in a script. Results of several kinds (all-reduce rows and a GEMM,
say) print as one table per kind and are written as one JSON document per kind, since each kind
has its own row shape.

>>> from gdlbench import Compare, Measurement
>>> from gdlbench.primitives.gemm import GemmResult
>>> m = Measurement([100.0, 101.0, 99.0], "steady-clock", "one cblas_?gemm call")
>>> r = GemmResult(64, 64, 64, "float32", "cpu", 1, False, False, m)
>>> cmp = Compare([r])
>>> cmp.commands
['gemm']
>>> row = cmp.rows()[0]
>>> row["time_us"], row["noisy"], round(row["tflops"], 6)
(100.0, False, 0.005243)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .errors import UsageError
from .output import Column, OutputFile, Outputs, Report, print_table


def result_rows(result: Any) -> list[dict[str, Any]]:
    """The JSON rows of one result: rows() where a result has several (update: the update and its
    reference copy; an iteration: phases, layers, messages, composed runs), else [to_dict()]."""
    rows = getattr(result, "rows", None)
    return list(rows()) if callable(rows) else [result.to_dict()]


def command_of(result: Any) -> str:
    """The CLI command whose rows this result makes (its `command` attribute)."""
    command = getattr(result, "command", None)
    if not isinstance(command, str):
        raise UsageError(f"Compare: {type(result).__name__} is not a gdlbench result (no command)")
    return command


def reproduce(results: Sequence[Any]) -> list[str]:
    """The commands that measure these results again: each one's request.to_argv() (a result made
    without a request, from a user's arrays, has none), each command once."""
    import shlex

    argvs = [shlex.join(["gdlbench", *r.request.to_argv()]) for r in results
             if getattr(r, "request", None) is not None]
    return list(dict.fromkeys(argvs))


def table_of(results: Sequence[Any]) -> tuple[list[Column], list[dict[str, Any]]]:
    """The table the CLI prints for these results (of one kind): their class's `table(results)`
    where it shapes its own rows (all-reduce puts out-of-place and in-place side by side),
    otherwise its COLUMNS over the JSON rows."""
    cls = type(results[0])
    table = getattr(cls, "table", None)
    if callable(table):
        columns, rows = table(results)
        return list(columns), list(rows)
    columns = getattr(cls, "COLUMNS", None)
    if columns is None:
        raise UsageError(f"Compare: {cls.__name__} has no table (neither table() nor COLUMNS)")
    return list(columns), [row for r in results for row in result_rows(r)]


class Compare:
    """Results side by side: print() the table the CLI prints, write_json()/write_csv() the
    files it writes.

    results: any gdlbench results (gemm, conv, layer, the collectives, copy, update, io,
    iteration), of one kind or several. title, caption, args, summary and notes fill the
    report as the CLI's options would; timing overrides what the results say of their clock and
    timed region. Under MPI call it on every rank of `comm` (default COMM_WORLD): only that
    communicator's rank 0 prints and writes, and it alone collects the env block.
    """

    def __init__(self, results: Iterable[Any], *, title: str | None = None, caption: str | None = None,
                 args: Mapping[str, Any] | None = None, summary: Mapping[str, Any] | None = None,
                 notes: Sequence[str] = (), timing: Mapping[str, Any] | None = None, comm: Any = None) -> None:
        self.results = list(results)
        if not self.results:
            raise UsageError("Compare: no results to compare")
        self.groups: dict[str, list[Any]] = {}
        for r in self.results:
            self.groups.setdefault(command_of(r), []).append(r)
        self.title, self.caption = title, caption
        self.args = dict(args or {})
        self.summary = dict(summary or {})
        self.notes = list(notes)
        self.timing = dict(timing) if timing is not None else None
        self.comm = comm
        self._env: dict[str, Any] | None = None
        from . import env

        env.topology(comm)  # collective the first time: every rank here, so the writing rank may ask alone

    @property
    def commands(self) -> list[str]:
        """The kinds of result held, in the order they first appear."""
        return list(self.groups)

    @property
    def is_root(self) -> bool:
        """True on the rank that prints and writes (rank 0 of the communicator)."""
        from .._native import MPI

        return (self.comm or MPI.COMM_WORLD).Get_rank() == 0

    def _command(self, command: str | None) -> str:
        if command is None:
            if len(self.groups) > 1:
                raise UsageError(f"Compare: results of several commands ({', '.join(self.groups)}): name one, "
                                 "or write_dir() for one file per command")
            return self.commands[0]
        if command not in self.groups:
            raise UsageError(f"Compare: no {command} results (have {', '.join(self.groups)})")
        return command

    def rows(self, command: str | None = None) -> list[dict[str, Any]]:
        """The JSON rows of one command's results (the only command when there is one)."""
        return [row for r in self.groups[self._command(command)] for row in result_rows(r)]

    def _timing(self, command: str) -> dict[str, Any]:
        if self.timing is not None:
            return dict(self.timing)
        first = self.groups[command][0]
        if isinstance(getattr(first, "timing", None), dict):  # results that time nothing (predict)
            return dict(first.timing)
        m = first.measurement
        return {"clock": m.clock, "region": m.region,
                "rank_reduction": getattr(first, "rank_reduction", "none (this rank)")}

    def report(self, command: str | None = None) -> Report:
        """The CLI's JSON document for one command's results: tool, version, command, args, env,
        timing, rows, summary, notes. The env block is collected once, on the writing rank."""
        command = self._command(command)
        if self._env is None:
            from . import env

            self._env = env.collect(self.comm) if self.is_root else {}
        again = reproduce(self.groups[command])
        args = self.args | ({"requests": again} if again else {})
        return Report(command, args, self._env, self._timing(command), rows=self.rows(command),
                      summary=self.summary, notes=self.notes)

    def to_json(self, command: str | None = None) -> str:
        return self.report(command).to_json()

    def to_csv(self, command: str | None = None) -> str:
        return self.report(command).to_csv()

    def print(self, command: str | None = None) -> None:
        """The CLI's table for each command (or the one named), on the writing rank."""
        if not self.is_root:
            return
        for cmd in [self._command(command)] if command else self.commands:
            group = self.groups[cmd]
            columns, rows = table_of(group)
            t = self._timing(cmd)
            m = getattr(group[0], "measurement", None)
            caption = self.caption or (f"clock {t['clock']}; "
                                       + (f"median of {len(m.samples_us)} samples; " if m is not None else "")
                                       + f"timed region: {t['region']}")
            title = self.title if self.title and len(self.groups) == 1 else f"gdlbench {cmd}"
            print_table(title, columns, rows, caption=caption)

    def write_json(self, path: str | Path, command: str | None = None) -> None:
        """The JSON document, written whole or not at all (on the writing rank)."""
        self._write(path, "json", command)

    def write_csv(self, path: str | Path, command: str | None = None) -> None:
        """The rows as CSV, one line per row (on the writing rank)."""
        self._write(path, "csv", command)

    def _write(self, path: str | Path, kind: str, command: str | None) -> None:
        if not self.is_root:
            return
        out = OutputFile(str(path), f"Compare.write_{kind}")
        out.write(self.to_json(command) if kind == "json" else self.to_csv(command))

    def write_dir(self, directory: str | Path) -> list[Path]:
        """<command>.json and <command>.csv for each command, in `directory` (created)."""
        d = Path(directory)
        if self.is_root:
            d.mkdir(parents=True, exist_ok=True)
        written = []
        for cmd in self.commands:
            for kind in ("json", "csv"):
                self._write(d / f"{cmd}.{kind}", kind, cmd)
                written.append(d / f"{cmd}.{kind}")
        return written

    def emit(self, files: Outputs | None = None) -> None:
        """The CLI's ending: the table, then the --json and --csv files (checked writable before
        measuring)."""
        self.print()
        if self.is_root and files is not None:
            files.write(self.report())
