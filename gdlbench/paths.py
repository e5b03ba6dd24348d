"""Checks on the paths a user gives, made before anything is measured or written."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

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
