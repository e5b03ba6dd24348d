"""Exceptions that the CLI turns into exit codes: UsageError -> 2, CheckFailed -> 1."""

from __future__ import annotations


class UsageError(ValueError):
    """Bad input: an option, a size, a device that is not there. The CLI prints one line, exits 2."""


class CheckFailed(RuntimeError):
    """A correctness check found wrong results. The CLI prints the table, then exits 1."""
