#!/usr/bin/env bash
# The one-call GPU validation. On the GPU machine (one H200, x86-64,
# Python 3.12, no package registry; nvcc, CuPy, PyTorch, cuBLAS/cuDNN/NCCL wheels, mpi4py,
# pybind11, scikit-build-core, cmake, ninja present; mpich and scipy-openblas32 carried in .whl/
# by scripts/fetch-gpu-wheels.sh), from the repository root:
#   bash scripts/gpu-check.sh            # logs and JSON under $OUT (default ./gpu-check-out)
# It probes and prints what it finds first, so its first run is also the probe. It builds for
# sm_90 only, runs the GPU test suite, then each GPU benchmark beside its peer (PyTorch, CuPy)
# on the same card, and prints a short table last. A failing step is recorded and the rest go on.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-./gpu-check-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
# The device tool brings back at most 8 files from $OUT: logs and JSON collect in LOG and leave
# as one archive, with the summary beside it.
LOG=${LOG:-/tmp/gpu-check-logs}
rm -rf "$LOG" && mkdir -p "$LOG"
export PYTHONUNBUFFERED=1
status=()
step() {  # step NAME COMMAND...: run, log to $OUT/NAME.log, remember pass/fail
  local name=$1; shift
  echo "=== $name: $*"
  local t0=$SECONDS
  if "$@" >"$LOG/$name.log" 2>&1; then status+=("$name ok $((SECONDS - t0))s"); else status+=("$name FAILED(rc=$?) $((SECONDS - t0))s"); fi
  tail -n 25 "$LOG/$name.log"
}

echo "=== probe"
{ nvidia-smi; python3 --version; which nvcc && nvcc --version; python3 -m pip list 2>/dev/null \
    | grep -iE "torch|cupy|nvidia|cuda|mpi4py|pybind|scikit|cmake|ninja|numpy|pytest|rich"; } 2>&1 | tee "$LOG/probe.log"

# 1. carried wheels -> /tmp/site (no registry here)
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} PATH=/tmp/site/bin:$PATH
fi
# mpi4py must find the carried libmpi when no MPI is installed
if ! python3 -c "from mpi4py import MPI" 2>/dev/null; then
  lib=$(ls /tmp/site/lib/libmpi.so.12 2>/dev/null || true)
  [ -n "$lib" ] && export MPI4PY_LIBMPI=$lib
fi
python3 -c "from mpi4py import MPI; print('MPI:', MPI.Get_library_version().splitlines()[0])" 2>&1 | tee -a "$LOG/probe.log"

# 2. build (sm_90 only). Prefer a system nvcc: the 13.0/13.1 nvcc wheels cannot link.
if command -v nvcc >/dev/null; then export CUDACXX=${CUDACXX:-$(command -v nvcc)}; fi
step build env GDL_ENABLE_CUDA=ON CMAKE_ARGS="-DCMAKE_CUDA_ARCHITECTURES=90" \
  python3 -m pip install -v --no-build-isolation --no-deps --no-index --target /tmp/gdl .
export PYTHONPATH=/tmp/gdl:${PYTHONPATH:-}
step env bash -c "cd /tmp && python3 -m gdlbench env --json $LOG/env.json"

# 3. the GPU test suite (the whole suite; GPU tests no longer skip here)
step tests bash -c "cd /tmp && python3 -m pytest -q -rs $PWD/tests -p no:cacheprovider"

# 4. benchmarks beside their peers on the same card
G="python3 -m gdlbench"
R=$LOG
step gemm_vs_torch python3 benchmarks/gemm_vs_torch_gpu.py --json "$R/gemm_vs_torch.json"
step gemm_cli bash -c "cd /tmp && $G gemm --device cuda --dtype bfloat16 -m 8192 -n 8192 -k 8192 --json $R/gemm_bf16.json"
# NCCL on one rank, exact checks on (host-side checks: keep -d all -o all at or below 256M)
step nccl_allreduce bash -c "cd /tmp && $G allreduce --backend nccl -b 8 -e 256M -f 4 -d all -o all -c 1 -n 20 --json $R/nccl-allreduce.json"
step nccl_allreduce_1G bash -c "cd /tmp && $G allreduce --backend nccl --size 1G -c 1 -n 20 --json $R/nccl-allreduce-1G.json"
step nccl_others bash -c "cd /tmp && for c in reduce_scatter allgather broadcast; do $G \$c --backend nccl -b 8 -e 256M -f 4 -d all -c 1 --json $R/nccl-\$c.json || exit 1; done"
# layers, copies, update
step conv_cli bash -c "cd /tmp && $G conv --net resnet50 --device cuda --dtype float32 --layout nhwc --algo search --json $R/conv_r50_fp32.json"
step copy_cli bash -c "cd /tmp && $G copy --size 1GB --direction all --memory both --device cuda --json $R/copy.json"
step update_cli bash -c "cd /tmp && $G update --params 25.6M --device cuda --json $R/update.json"
step layer_cli bash -c "cd /tmp && $G layer --layer all -b 32 --device cuda --json $R/layers_gpu.json"
# every benchmarks/*_gpu.py against its peer (torch, CuPy) on the same card
for extra in benchmarks/*_gpu.py; do
  name=$(basename "$extra" .py)
  [ "$name" = gemm_vs_torch_gpu ] && continue
  step "$name" python3 "$extra" --json "$R/$name.json"
done
# the iteration skeletons of the three networks (one rank)
for net in alexnet googlenet resnet50; do
  step "iteration_$net" bash -c "cd /tmp && $G iteration --net $net --device cuda --strategy serial,wfbp,wfbp-fusion --json $R/iteration-$net.json"
done

echo
echo "=== summary"
printf '%s\n' "${status[@]}" | tee "$LOG/summary.txt"
cp "$LOG/summary.txt" "$OUT/summary.txt"
tar -czf "$OUT/gpu-check-logs.tgz" -C "$(dirname "$LOG")" "$(basename "$LOG")"
