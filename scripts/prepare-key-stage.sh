#!/usr/bin/env bash
# Run HERE (a machine with PyPI, no GPU needed) before the key stage (scripts/gpu-check.sh --stage
# key, docs/cuda.md): what the device run carries, since the GPU machine reaches no registry.
#   .whl/               the wheels its image lacks (scripts/fetch-gpu-wheels.sh: mpich,
#                       scipy-openblas32; Python 3.12, x86-64)
#   .peers/nccl-tests/  nccl-tests' perf programs for sm_90 (scripts/build-nccl-tests.sh), built
#                       from a checkout of https://github.com/NVIDIA/nccl-tests (not copied into
#                       the repository; the first GPU run used v2.19.6, a0b82b2)
# Both folders are git-ignored. Needs nvcc (CUDA_HOME: default /usr/local/cuda when it exists) and
# the nvidia-nccl wheel in PYTHON's environment (default python3) for nccl.h.
#   scripts/prepare-key-stage.sh NCCL_TESTS_SRC [PYTHON]
#   scripts/prepare-key-stage.sh --wheels-only
# Then the device call, with carry [".whl", ".peers"] (64 MiB at most in all): docs/cuda.md.
set -euo pipefail
cd "$(dirname "$0")/.."
usage() { echo "usage: scripts/prepare-key-stage.sh NCCL_TESTS_SRC [PYTHON] | --wheels-only" >&2; exit 2; }
[ $# -ge 1 ] || usage
src=""
py=python3
if [ "$1" != --wheels-only ]; then
  [ -f "$1/src/common.cu" ] || { echo "prepare-key-stage: '$1' is not an nccl-tests checkout (no src/common.cu)" >&2; exit 2; }
  src=$1
  py=${2:-python3}
fi
if [ -d .whl/image ]; then  # fetch-gpu-wheels.sh --image's stand-in (1.3 GB): far over the carry limit
  echo "prepare-key-stage: .whl/image/ is there (the --no-gpu stand-in): move it out of .whl before carrying .whl" >&2
  exit 2
fi
bash scripts/fetch-gpu-wheels.sh --python-version 3.12 >/dev/null
if [ -n "$src" ]; then
  [ -n "${CUDA_HOME:-}" ] || { [ -d /usr/local/cuda/include ] && export CUDA_HOME=/usr/local/cuda; } || true
  nccl_home=$("$py" -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])')
  PATH=$(dirname "$(command -v "$py")"):$PATH bash scripts/build-nccl-tests.sh "$src" "$nccl_home"
fi
echo "to carry:"
du -sh .whl .peers 2>/dev/null || true
total=$(du -sm .whl .peers 2>/dev/null | awk '{s += $1} END {print s + 0}')
[ "$total" -le 64 ] || { echo "prepare-key-stage: .whl and .peers take ${total} MiB, over the 64 MiB a device call carries" >&2; exit 1; }
