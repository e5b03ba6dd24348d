#!/usr/bin/env bash
# Run HERE (a machine with PyPI) before scripts/gpu-check.sh. Downloads into .whl/ the wheels the
# GPU machine lacks (it has no registry): mpich and scipy-openblas32, and nothing that its image
# already has (pytest, rich, hypothesis, numpy, ... there would shadow the image's own versions).
# .whl/ is git-ignored; name it in the device run's `carry`.
#   scripts/fetch-gpu-wheels.sh                       # for the GPU machine: Python 3.12, x86-64
#   scripts/fetch-gpu-wheels.sh --python-version 3.11 --image
# --image also downloads into .whl/image/ what the GPU image is known to have (the build tools,
# numpy, pytest, the NVIDIA CUDA 13.0 wheels, ...; about 1.3 GB), so that
# `scripts/gpu-check.sh --no-gpu` can stand in for the image on a machine without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
pyver=3.12
image=0
while [ $# -gt 0 ]; do
  case $1 in
    --python-version) pyver=$2; shift 2 ;;
    --image) image=1; shift ;;
    *) echo "fetch-gpu-wheels.sh: unknown argument '$1' (--python-version X.Y, --image)" >&2; exit 2 ;;
  esac
done
# The versions gpu-check.sh installs on the GPU machine; kept in one place.
CARRIED=(mpich==5.0.2 scipy-openblas32==0.3.34.481.3)
# What the GPU image has (its package list), as far as building and testing gdlbench needs it.
# CUDA 13.0 like the image's PyTorch (cu130); nvcc is not among them: the image has a system nvcc.
IMAGE=(numpy mpi4py pybind11 scikit-build-core cmake ninja pytest hypothesis rich pillow matplotlib
       "cuda-toolkit[cudart,cublas]==13.0.*" nvidia-cudnn-cu13 nvidia-nccl-cu13)
plat=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
      --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any)
target=(--only-binary=:all: --python-version "$pyver" --implementation cp "${plat[@]}")
mkdir -p .whl
python3 -m pip download -q --no-deps "${target[@]}" -d .whl "${CARRIED[@]}"
if [ "$image" = 1 ]; then
  # Into a fresh folder: gpu-check installs every wheel of .whl/image, so a wheel an earlier fetch
  # left there (NCCL 2.32.3 beside today's 2.32.6) would make the install impossible. The earlier
  # folder still serves as a local source for the wheels that did not change.
  mkdir -p .whl/image && rm -rf .whl/image.new && mkdir .whl/image.new
  python3 -m pip download -q "${target[@]}" --find-links .whl/image -d .whl/image.new "${IMAGE[@]}"
  rm -rf .whl/image && mv .whl/image.new .whl/image
fi
ls -la .whl
