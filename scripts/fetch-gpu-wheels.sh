#!/usr/bin/env bash
# Run HERE (a machine with PyPI) before scripts/gpu-check.sh: downloads into .whl/ the wheels the
# GPU machine lacks (it has no registry), for its Python 3.12 on x86-64. .whl/ is git-ignored;
# name it in the device run's `carry`.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
plat=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
      --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
dl() { python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${plat[@]}" -d .whl "$@"; }
dl mpich==5.0.2 scipy-openblas32==0.3.34.481.3 rich markdown-it-py mdurl pygments hypothesis sortedcontainers attrs
python3 -m pip download -q --no-deps -d .whl "pytest" "pluggy" "iniconfig" "packaging"
ls -la .whl
