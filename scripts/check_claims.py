#!/usr/bin/env python3
"""The figures README.md and benchmarks/RESULTS.md's headlines quote, against the sections they
cite. A RESULTS.md section is its heading down to the next heading of its level or above; a
citation is a Markdown link to `RESULTS.md#anchor` (GitHub's heading anchors), and the anchor must
be a heading of RESULTS.md.

- Every number in a row's figure cells (README's results table, RESULTS.md's headline table) and
  in every README paragraph marked `<!-- claim -->` must appear in a section the row or paragraph
  links to.
- Every other README paragraph, and every row of README's other tables, that quotes a *figure*
  must link a section holding each of its figures. A figure is a number, or a range `a-b`,
  followed by a unit of something measured: us, ms, s, min, minutes, GB/s, MB/s, GFLOP/s,
  TFLOP/s, %, or x (a ratio; `2 x 2`, a layout, is not one). Code (fenced blocks and `spans`),
  HTML comments and the phrases in NOT_MEASURED (settings and limits, not measurements) are not
  read. Link rates (Gbit/s) are settings of the emulated link, not figures.
- Every cited section must state a date (YYYY-MM-DD, in it or in a heading above it), so the
  figure's date is one click away; the machine and the peer are for the reader to check there.

Prints each miss and exits 1; tests/test_claims.py runs it.
    python scripts/check_claims.py [ROOT]"""

from __future__ import annotations

import re
import sys
from pathlib import Path

NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?")
LINK = re.compile(r"\]\(((?:benchmarks/)?RESULTS\.md)?#([\w-]+)\)")
HEADING = re.compile(r"^(#{1,6}) (.*)$")
UNITS = r"(?:us|ms|s|min|minutes|GB/s|MB/s|GFLOP/s|TFLOP/s|%|x(?!\s?\d))"
FIGURE = re.compile(r"(?<![\w.-])\d+(?:\.\d+)?(?:-\d+(?:\.\d+)?)?\s?" + UNITS + r"(?![\w/])")
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
# README phrases whose numbers are settings or limits, not measurements
NOT_MEASURED = ("`--target-se` (1 %)", "exceeds 10 % of the median", "at most 540 s")


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


def undated(text: str) -> set[str]:
    """The anchors of sections with no date in them nor in a heading above them."""
    lines = text.splitlines()
    heads = [(len(m.group(1)), m.group(2)) for line in lines if (m := HEADING.match(line))]
    secs = sections(text)
    out = set()
    for k, (level, title) in enumerate(heads):
        above, lv = [], level
        for lv2, t2 in reversed(heads[:k]):
            if lv2 < lv:
                above.append(t2)
                lv = lv2
        if not DATE.search(secs[slug(title)] + " ".join(above)):
            out.add(slug(title))
    return out


def prose_units(readme: str) -> list[str]:
    """README's paragraphs and table rows outside code, the results table and `<!-- claim -->`
    paragraphs (checked number by number), with code spans, comments and NOT_MEASURED removed."""
    text = re.sub(r"```.*?```", "", readme, flags=re.S)
    text = re.sub(r"<!-- claim -->\n.*?(?:\n\n|\Z)", "\n\n", text, flags=re.S)
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    text = re.sub(r"^## Results\n.*?(?=^#|\Z)", lambda m: "\n".join(
        line for line in m.group(0).splitlines() if not line.startswith("|")), text, flags=re.S | re.M)
    for phrase in NOT_MEASURED:
        text = text.replace(phrase, "")
    units: list[str] = []
    for block in re.split(r"\n\s*\n", text):
        rows = block.splitlines()
        if rows and all(r.startswith("|") for r in rows):
            units += rows
        else:
            units.append(block)
    return [re.sub(r"`[^`]*`", "", u) for u in units]


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


def check(label: str, figures: str, cited: str, secs: dict[str, str],
          only: list[str] | None = None) -> list[str]:
    """`figures`' numbers (or, given `only`, those figures' numbers) against the sections `cited` links."""
    anchors = [m.group(2) for m in LINK.finditer(cited)]
    if not anchors:
        return [f"{label}: cites no RESULTS.md section"]
    missing = [a for a in anchors if a not in secs]
    if missing:
        return [f"{label}: no section #{a} in RESULTS.md" for a in missing]
    source = numbers("\n".join(secs[a] for a in anchors))
    figures = LINK.sub("]()", figures)
    quoted = numbers(" ".join(only)) if only is not None else numbers(figures)
    absent = sorted(n for n in quoted if n not in source)
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
    for unit in prose_units(readme):
        figs = [f.group(0) for f in FIGURE.finditer(LINK.sub("]()", unit))]
        if figs:
            label = f"README figure {figs[0]!r} in '{' '.join(unit.split())[:60]}...'"
            misses += check(label, unit, unit, secs, only=figs)
    cited = {m.group(2) for m in LINK.finditer(readme + results)} & set(secs)
    misses += [f"RESULTS section #{a}: states no date" for a in sorted(cited & undated(results))]
    for line in misses:
        print(line)
    print(f"check_claims: {len(misses)} figures without their source" if misses else "check_claims: every figure found")
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent))
