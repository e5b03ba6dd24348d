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
modules=(gdlbench gdlbench.compare gdlbench.measurement gdlbench.scaling gdlbench.errors gdlbench.units
         gdlbench.report gdlbench.copy gdlbench.update gdlbench.io gdlbench.layers gdlbench.collectives
         gdlbench.cluster gdlbench.costmodel gdlbench.env gdlbench.trace gdlbench.paths gdlbench.model
         gdlbench.iteration gdlbench.network gdlbench.cli gdlbench.compress
         gdlbench.gemm gdlbench.memory gdlbench.nets.transformer gdlbench.twolevel
         gdlbench.commands gdlbench.commands.allgather gdlbench.commands.allreduce gdlbench.commands.broadcast
         gdlbench.commands.compress gdlbench.commands.conv gdlbench.commands.copy gdlbench.commands.env
         gdlbench.commands.gemm gdlbench.commands.io gdlbench.commands.iteration gdlbench.commands.layer
         gdlbench.commands.nets gdlbench.commands.predict gdlbench.commands.reduce_scatter
         gdlbench.commands.study gdlbench.commands.update
         gdlbench.conv gdlbench.conv_layers gdlbench.prediction gdlbench.study gdlbench.study_report gdlbench.strategies
         gdlbench.plots gdlbench.hostmem gdlbench._native gdlbench.__main__ gdlbench._checkout
         gdlbench.nets gdlbench.nets.googlenet gdlbench.nets.resnet gdlbench.nets.vgg
         gdlbench.torch_trace gdlbench.gloo gdlbench.commands.import_trace)
(cd "$(mktemp -d)" && "$python" -m mypy --config-file "$root/pyproject.toml" "${modules[@]/#/-m}")
"$root/scripts/stubs.sh" check "$python" _core
