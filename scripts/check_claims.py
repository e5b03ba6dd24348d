#!/usr/bin/env python3
"""The figures README.md and benchmarks/RESULTS.md's headlines quote, against the sections they
cite: every number in a row's figure cells (README's results table, RESULTS.md's headline table)
and in every README paragraph marked `<!-- claim -->` must appear in the text of a RESULTS.md
section the row or paragraph links to (a section: its heading down to the next heading of its
level or above). Prints each miss and exits 1; tests/test_claims.py runs it.
    python scripts/check_claims.py [ROOT]"""

from __future__ import annotations

import re
import sys
from pathlib import Path

NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?")
LINK = re.compile(r"\]\(((?:benchmarks/)?RESULTS\.md)?#([\w-]+)\)")
HEADING = re.compile(r"^(#{1,6}) (.*)$")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def sections(text: str) -> dict[str, str]:
    lines = text.splitlines()
    heads = [(i, len(m.group(1)), m.group(2)) for i, line in enumerate(lines) if (m := HEADING.match(line))]
    out: dict[str, str] = {}
    for k, (i, level, title) in enumerate(heads):
        end = next((j for j, lv, _ in heads[k + 1:] if lv <= level), len(lines))
        out.setdefault(slug(title), "\n".join(lines[i:end]))
    return out


def numbers(text: str) -> set[float]:
    return {float(n) for n in NUMBER.findall(text.replace(",", ""))}


def table_after(text: str, heading: str) -> tuple[list[str], list[list[str]]]:
    """The header and rows of the first table under `heading`."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == heading)
    rows = []
    for line in lines[start + 1:]:
        if line.startswith("|"):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif rows:
            break
    return rows[0], [r for r in rows[2:]]


def check(label: str, figures: str, cited: str, secs: dict[str, str]) -> list[str]:
    anchors = [m.group(2) for m in LINK.finditer(cited)]
    if not anchors:
        return [f"{label}: cites no RESULTS.md section"]
    missing = [a for a in anchors if a not in secs]
    if missing:
        return [f"{label}: no section #{a} in RESULTS.md" for a in missing]
    source = numbers("\n".join(secs[a] for a in anchors))
    figures = LINK.sub("]()", figures)
    absent = sorted(n for n in numbers(figures) if n not in source)
    return [f"{label}: {', '.join(f'{n:g}' for n in absent)} not in #{', #'.join(anchors)}"] if absent else []


def main(root: Path) -> int:
    readme = (root / "README.md").read_text()
    results = (root / "benchmarks" / "RESULTS.md").read_text()
    secs = sections(results)
    misses: list[str] = []
    header, rows = table_after(readme, "## Results")
    src = header.index("source")
    for r in rows:
        misses += check(f"README results '{r[0]}'", " ".join(r[1:src]), r[src], secs)
    header, rows = table_after(results, "## Headlines")
    src = header.index("source")
    for r in rows:
        misses += check(f"RESULTS headline '{r[0]}'", " ".join(r[1:src]), r[src], secs)
    for m in re.finditer(r"<!-- claim -->\n(.*?)(?:\n\n|\Z)", readme, re.S):
        para = m.group(1)
        misses += check(f"README claim '{para[:60]}...'", para, para, secs)
    for line in misses:
        print(line)
    print(f"check_claims: {len(misses)} figures without their source" if misses else "check_claims: every figure found")
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent))
