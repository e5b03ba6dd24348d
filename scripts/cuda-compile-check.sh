#!/usr/bin/env bash
# Compile and link both native modules, the CUDA backend included, without installing anything:
# a quick check for developers on machines without a GPU. Needs a Python that has the build
# requirements and the NVIDIA wheels (pip install 'cuda-toolkit[nvcc,cccl,cudart,cublas]==13.2.*'
# nvidia-cudnn-cu13 nvidia-nccl-cu13 pybind11 mpi4py mpich scipy-openblas32).
# Usage: scripts/cuda-compile-check.sh [PYTHON] [BUILD_DIR]
set -euo pipefail
py=${1:-python3}
build=${2:-build/cuda-check}
here=$(cd "$(dirname "$0")/.." && pwd)
cmake -S "$here" -B "$build" -G Ninja -DGDL_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-90}" \
  -DPython_EXECUTABLE="$("$py" -c 'import sys; print(sys.executable)')" \
  -Dpybind11_DIR="$("$py" -m pybind11 --cmakedir)" -DSKBUILD_PROJECT_VERSION=dev >/dev/null
cmake --build "$build" -j "${JOBS:-2}"
ls -l "$build"/_core*.so "$build"/_cuda*.so
