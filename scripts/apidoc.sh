#!/usr/bin/env bash
# The API reference, generated from the docstrings by pdoc into OUT (default build/apidoc);
# any warning is an error.   scripts/apidoc.sh [PYTHON] [OUT]   (needs pdoc)
set -euo pipefail
# PYTHON may be relative to the caller's folder: make it absolute before leaving that folder
if [ -n "${1:-}" ]; then set -- "$(realpath -s "$1")" "${@:2}"; fi
cd "$(dirname "$0")/.."
root=$(pwd)
python=${1:-$root/.venv/bin/python}
out=$(realpath -m "${2:-$root/build/apidoc}")
cd "$(mktemp -d)"   # document the installed package (with its native modules), not the checkout
# pdoc cannot tell where a TypedDict subclass's inherited keys come from (TypedDict merges them into
# the subclass's own annotations) and warns; it documents them on the subclass, which is right.
"$python" -W error -W "ignore:Cannot determine where:UserWarning" -m pdoc --docformat markdown -o "$out" gdlbench gdlbench.common.compare gdlbench.common.measurement \
  gdlbench.primitives.collectives gdlbench.model.phases gdlbench.nets.network gdlbench.model.strategies gdlbench.composed.iteration gdlbench.whatif.scaling \
  gdlbench.common.output gdlbench.common.units gdlbench.common.errors '!gdlbench.cli.commands'
test -s "$out/gdlbench.html"
echo "API reference: $out/index.html"
