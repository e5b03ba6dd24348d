"""Checks on the paths a user gives, made before anything is measured or written."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from .errors import UsageError


def require_writable_dir(directory: Path, what: str) -> None:
    """UsageError unless a file can be created in `directory`. Tried, not read from the permission
    bits: root passes every access check, and /proc or a read-only mount still refuse."""
    try:
        fd, probe = tempfile.mkstemp(dir=directory, prefix=".gdlbench-probe.")
    except OSError as exc:
        raise UsageError(f"{what}: cannot create files in {directory} ({exc.strerror})") from None
    os.close(fd)
    os.unlink(probe)


def write_atomic(path: Path, data: str | bytes) -> None:
    """The file appears whole, by rename, or not at all (its temporary name starts with a dot),
    with an ordinary file's permissions (0666 less the umask; mkstemp alone makes it private)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_json(path: str | Path, option: str) -> Any:
    """The JSON document in the file a user named with `option`, or a one-line UsageError."""
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"{option} {path}: no such file")
    try:
        return json.loads(p.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{option} {path}: not valid JSON: {exc}") from None
