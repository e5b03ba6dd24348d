#!/usr/bin/env bash
# Builds nccl-tests' four perf programs (all_reduce, reduce_scatter, all_gather, broadcast) from a
# checkout of https://github.com/NVIDIA/nccl-tests into .peers/nccl-tests/ (git-ignored), the peer
# that benchmarks/nccl_vs_nccl_tests.py runs beside `gdlbench allreduce --backend nccl`. Single
# process (no MPI), for Hopper (sm_90) unless NVCC_GENCODE says otherwise.
#   scripts/build-nccl-tests.sh SRC [NCCL_HOME]
# NCCL_HOME holds include/nccl.h and lib/libnccl.so*; default: the nvidia-nccl wheel of the
# Python on PATH. CUDA_HOME: default the folder above nvcc's bin/. The programs find libnccl at
# run time through LD_LIBRARY_PATH (the benchmark points it at the NCCL gdlbench loads).
set -euo pipefail
[ $# -ge 1 ] && [ -f "$1/src/common.cu" ] || { echo "usage: scripts/build-nccl-tests.sh NCCL_TESTS_SRC [NCCL_HOME]" >&2; exit 2; }
src=$(cd "$1" && pwd)
cd "$(dirname "$0")/.."
out=$(pwd)/.peers/nccl-tests
nccl_home=${2:-$(python3 -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null || true)}
[ -f "$nccl_home/include/nccl.h" ] || { echo "build-nccl-tests: no include/nccl.h under '$nccl_home' (give NCCL_HOME)" >&2; exit 2; }
# The wheel ships only libnccl.so.2 and the link step asks for libnccl.so: a NCCL_HOME of links.
home=$(mktemp -d) && trap 'rm -rf "$home"' EXIT
mkdir "$home/lib" && ln -s "$nccl_home/include" "$home/include"
ln -s "$(ls "$nccl_home"/lib/libnccl.so* | head -1)" "$home/lib/libnccl.so"
nvcc=${CUDACXX:-$(command -v nvcc)} || { echo "build-nccl-tests: no nvcc on PATH" >&2; exit 2; }
cuda_home=${CUDA_HOME:-$(dirname "$(dirname "$(readlink -f "$nvcc")")")}
build=$(mktemp -d) && trap 'rm -rf "$home" "$build"' EXIT
mkdir -p "$out"
make -s -j"$(nproc)" -C "$src/src" BUILDDIR="$build" CUDA_HOME="$cuda_home" NCCL_HOME="$home" \
  NVCC_GENCODE="${NVCC_GENCODE:--gencode=arch=compute_90,code=sm_90}" \
  "$build/all_reduce_perf" "$build/reduce_scatter_perf" "$build/all_gather_perf" "$build/broadcast_perf"
cp "$build"/{all_reduce,reduce_scatter,all_gather,broadcast}_perf "$out/"
git -C "$src" log -1 --format='nccl-tests %H %cs' >"$out/VERSION" 2>/dev/null || echo "nccl-tests (no git)" >"$out/VERSION"
echo "built into $out: $(ls "$out" | tr '\n' ' ')"
