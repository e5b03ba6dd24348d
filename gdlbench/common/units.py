"""Parsing sizes and counts the way users type them, saying which convention was applied, and
writing values back as options that read back exactly (a request's to_argv())."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from .errors import UsageError

# nccl-tests reads K/M/G as 1024-based; "100MB" reads naturally as decimal. Both are accepted and
# the output states the convention (SIZE_CONVENTION).
_BINARY = {"": 1, "B": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40,
           "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}
_DECIMAL = {"KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
SIZE_CONVENTION = "K/M/G and KiB/MiB/GiB are 1024-based (as nccl-tests); KB/MB/GB are 1000-based"
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*$")

MAX_BYTES = 2**40  # 1 TiB: anything larger is a typo, not a benchmark


def parse_size(text: str | int, what: str = "size") -> int:
    """'100MB' -> 100_000_000, '4K' -> 4096, '1GiB' -> 2**30, '512' -> 512."""
    if isinstance(text, int):
        value = text
    else:
        m = _SIZE_RE.match(str(text))
        if not m:
            raise UsageError(f"{what}: cannot read {text!r} as a size (e.g. 8, 4K, 100MB, 1GiB)")
        number, suffix = float(m.group(1)), m.group(2).upper()
        scale = _BINARY.get(suffix) or _DECIMAL.get(suffix)
        if scale is None:
            raise UsageError(f"{what}: unknown unit {m.group(2)!r} in {text!r} (B, K, M, G, KB, MB, GB, KiB, MiB, GiB)")
        value = int(round(number * scale))
    if value <= 0:
        raise UsageError(f"{what}: must be positive, got {text!r}")
    if value > MAX_BYTES:
        raise UsageError(f"{what}: {text!r} is larger than 1 TiB")
    return value


def parse_count(text: str | int | float, what: str = "count") -> int:
    """Element counts with decimal suffixes: '25.6M' -> 25_600_000, '4K' -> 4000."""
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        m = _SIZE_RE.match(str(text))
        scales = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9}
        if not m or m.group(2).upper() not in scales:
            raise UsageError(f"{what}: cannot read {text!r} as a count (e.g. 1000, 25.6M, 4K)")
        value = float(m.group(1)) * scales[m.group(2).upper()]
    if value < 1 or value != value:
        raise UsageError(f"{what}: must be at least 1, got {text!r}")
    if value > 2**40:
        raise UsageError(f"{what}: {text!r} is absurdly large")
    return int(round(value))


_BANDWIDTH_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(?:([kKMGT])(i?))?(B|b|bit|byte)?(/s|ps)?\s*$")
_PREFIX = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
MAX_GBS = 1e6  # 1 PB/s: anything faster is a typo
BANDWIDTH_FORMS = "12.5 (GB/s), 12.5GB/s, 100Gb/s, 100Gbit/s, 800MB/s, 10GiB/s"


def parse_bandwidth(text: str | float, what: str = "--bandwidth") -> float:
    """A link bandwidth in GB/s (1e9 bytes/s): a bare number is GB/s; with a unit, B is bytes and b
    or bit is bits (100Gb/s = 12.5 GB/s); K/M/G/T are 1000-based, Ki/Mi/Gi/Ti 1024-based."""
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        m = _BANDWIDTH_RE.match(str(text))
        if not m or (m.group(2) and not m.group(4)):
            raise UsageError(f"{what}: cannot read {text!r} as a bandwidth (e.g. {BANDWIDTH_FORMS})")
        number, prefix, binary, unit = float(m.group(1)), m.group(2) or "", m.group(3), m.group(4)
        if unit is None:
            value = number  # a bare number: GB/s
        else:
            scale = 1024.0 ** (" KMGT".index(prefix.upper())) if binary else _PREFIX[prefix]
            value = number * scale / (8 if unit in ("b", "bit") else 1) / 1e9
    if not 0 < value <= MAX_GBS:
        raise UsageError(f"{what}: must be > 0 and at most {MAX_GBS:g} GB/s, got {text!r}")
    return value


def split_list(text: str, what: str) -> list[str]:
    """'a, b,c' -> ['a', 'b', 'c']; an empty item ('a,,b', 'a,') is a mistake, not skipped."""
    items = [x.strip() for x in str(text).split(",")]
    if not any(items):
        raise UsageError(f"{what}: nothing given")
    if not all(items):
        raise UsageError(f"{what}: empty item in {text!r}")
    return items


def parse_int_list(text: str, what: str) -> list[int]:
    """'1,2,4' -> [1, 2, 4]; each item positive."""
    items = split_list(text, what)
    try:
        values = [int(x) for x in items]
    except ValueError:
        raise UsageError(f"{what}: expected comma-separated integers, got {text!r}") from None
    if not values or any(v <= 0 for v in values):
        raise UsageError(f"{what}: expected positive integers, got {text!r}")
    return values


def size_text(n: int) -> str:
    """A byte count as parse_size reads it back exactly: 4MiB, else 4096B."""
    return f"{n >> 20}MiB" if n % 2**20 == 0 else f"{n}B"


def format_bytes(n: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)} B"


def number_text(x: float) -> str:
    """A float as short as it reads back exactly: 5, 0.0001, 12.345678901."""
    return f"{x:g}" if float(f"{x:g}") == x else repr(x)


def option_argv(pairs: Sequence[tuple[str, Any]]) -> list[str]:
    """--option value for each pair whose value is given (None: left out); True: the bare flag,
    False: left out."""
    out: list[str] = []
    for name, value in pairs:
        if value is None or value is False:
            continue
        if value is True:
            out.append(name)
        else:
            out += [name, number_text(value) if isinstance(value, float) else str(value)]
    return out
