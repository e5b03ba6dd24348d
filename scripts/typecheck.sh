#!/usr/bin/env bash
# The public API under mypy --strict (config: pyproject.toml [tool.mypy]), against the installed
# package with its stubs, then the stubs against the built native modules (scripts/stubs.sh).
#   scripts/typecheck.sh [PYTHON]     (default: the venv's; needs mypy)
set -euo pipefail
# PYTHON may be relative to the caller's folder: make it absolute before leaving that folder
if [ -n "${1:-}" ]; then set -- "$(realpath -s "$1")" "${@:2}"; fi
cd "$(dirname "$0")/.."
root=$(pwd)
python=${1:-$root/.venv/bin/python}
# every module of the package (the source tree's), so a new one is checked without a list to keep
modules=($(cd "$root" && find gdlbench -name '*.py' | sed -e 's/\.py$//' -e 's#/__init__$##' -e 's#/#.#g' | sort))
(cd "$(mktemp -d)" && "$python" -m mypy --config-file "$root/pyproject.toml" "${modules[@]/#/-m}")
"$root/scripts/stubs.sh" check "$python" _core
