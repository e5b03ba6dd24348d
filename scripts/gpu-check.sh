#!/usr/bin/env bash
# The GPU validation, in stages that each fit one command of the GPU machine (600 s at most). That
# machine (one H200, x86-64, Python 3.12, no package registry) has nvcc, CuPy, PyTorch, the CUDA
# 13 wheels (cuBLAS, cuDNN, NCCL), mpi4py, pybind11, scikit-build-core, cmake, ninja, numpy and
# pytest; mpich and scipy-openblas32 come carried in .whl/ (scripts/fetch-gpu-wheels.sh), and
# nccl-tests' perf programs, the NCCL peer, in .peers/nccl-tests/ (scripts/build-nccl-tests.sh;
# the bench stage waives that comparison without them).
# From the repository root:
#   bash scripts/gpu-check.sh                  # stage "first": set-up, build, import, the GPU
#                                              #   tests, GEMM vs torch.matmul (well under 5 min)
#   bash scripts/gpu-check.sh --stage bench    # the benchmarks beside their peers (a second call)
#   bash scripts/gpu-check.sh --stage key      # ONE call of at most 540 s: set-up, build, the GPU
#                                              #   tests, GEMM, a conv subset, the ResNet-50 step,
#                                              #   NCCL vs nccl-tests; $OUT/figures.md after each step
#   bash scripts/gpu-check.sh --stage setup    # the venv and the build alone
#   bash scripts/gpu-check.sh --no-gpu         # here, without a GPU: the same set-up and build
#                                              #   from .whl/ alone, both modules imported, the
#                                              #   CPU suite; stops before the GPU steps
# Every step has a timeout. As each step ends, its log (and JSON) is added to $OUT/<stage>.tgz
# and a line to $OUT/summary.txt (default OUT=./gpu-check-out), so a run that is killed still
# returns what it finished. Exit status: 0 when every step passed.
#
# The install: a venv (.venv-gpu-check) whose site-packages come first, with the image's own
# site-packages added after them (a .pth file: the image's python3 is itself a venv, so
# `venv --system-site-packages` would expose the base interpreter's packages, not PyTorch's).
# Into it, with pip kept off every registry (--no-index, no pip config): the carried wheels, then
# gdlbench (--no-build-isolation, sm_90). A venv keeps each wheel's data files (mpich's
# lib/libmpi.so.12, which `pip install --target` drops) and the RPATHs of the native modules.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

usage() { echo "usage: scripts/gpu-check.sh [--no-gpu] [--stage first|bench|key|all|setup] [--only STEP,...]" >&2; exit 2; }
no_gpu=0
stage=first
only=""   # --only: run these steps of the stage (and the set-up), skip the others (a rerun of what failed)
ran=","   # the steps that ran, to catch an --only name that matches none
while [ $# -gt 0 ]; do
  case $1 in
    --no-gpu) no_gpu=1; shift ;;
    --stage) [ $# -ge 2 ] || usage; stage=$2; shift 2 ;;
    --only) [ $# -ge 2 ] || usage; only=",$2,"; shift 2 ;;
    *) usage ;;
  esac
done
case $stage in first | bench | key | all | setup) ;; *) usage ;; esac
[ "$no_gpu" = 1 ] && { [ "$stage" = bench ] || [ "$stage" = key ]; } && { echo "gpu-check: --no-gpu has no benchmark stage" >&2; exit 2; }

# The limits are sized for the GPU machine (16 cores); --no-gpu runs on small shared machines.
TIME_SCALE=${GDL_CHECK_TIME_SCALE:-$([ "$no_gpu" = 1 ] && echo 10 || echo 1)}
OUT=${OUT:-$root/gpu-check-out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
VENV=${GDL_CHECK_VENV:-$root/.venv-gpu-check}
WORK=$VENV.logs   # step logs and JSON; archived into $OUT after every step
mkdir -p "$WORK"
export PYTHONUNBUFFERED=1
# pip: no registry, no configuration or PIP_* variable that could add one (an index, find-links);
# only the wheels named here.
while read -r var; do unset "$var"; done < <(compgen -e | grep '^PIP_')
export PIP_CONFIG_FILE=/dev/null PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
failed=0
current=""

begin_stage() {  # begin_stage NAME: a fresh log folder and archive for this stage
  current=$1
  rm -rf "${WORK:?}/$current" && mkdir -p "$WORK/$current"
  rm -f "$OUT/$current.tgz"
  echo "=== stage $current ($(date -u +%FT%TZ))" | tee -a "$OUT/summary.txt"
}

archive() {  # the stage's logs so far, replaced whole (never half-written)
  tar -czf "$OUT/.$current.tgz.tmp" -C "$WORK" "$current" && mv "$OUT/.$current.tgz.tmp" "$OUT/$current.tgz"
  if [ "$current" = key ]; then  # each step's JSON, and the figures table of what is measured so far
    cp "$WORK/$current"/*.json "$OUT/" 2>/dev/null
    python3 "$root/benchmarks/key_figures.py" "$WORK/$current" "$OUT" || true
  fi
}

step() {  # step NAME SECONDS COMMAND...: run with a timeout, log, archive, record pass/fail
  local name=$1 limit=$(($2 * TIME_SCALE)); shift 2
  if [ -n "$only" ] && [[ $only != *",$name,"* ]] && [[ ",$SETUP_STEPS," != *",$name,"* ]]; then
    printf '%-28s %s\n' "$name" "skipped (--only)" | tee -a "$OUT/summary.txt"
    return 0
  fi
  ran="$ran$name,"
  local log="$WORK/$current/$name.log" t0=$SECONDS rc
  echo "--- $name (timeout ${limit}s): $*"
  # bash -c: the command may be one of this script's functions (exported below)
  timeout -k 10 "$limit" bash -c '"$@"' step "$@" >"$log" 2>&1
  rc=$?
  tail -n 20 "$log"
  local verdict=ok
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then verdict="TIMEOUT(${limit}s)"; elif [ "$rc" != 0 ]; then verdict="FAILED(rc=$rc)"; fi
  [ "$verdict" = ok ] || failed=1
  printf '%-28s %-16s %4ss\n' "$name" "$verdict" "$((SECONDS - t0))" | tee -a "$OUT/summary.txt"
  archive
  return "$rc"
}

# ------------------------------------------------------------------------------------- set-up
SETUP_STEPS=probe,image,venv,build,import,env   # run whatever --only says
# Their limits (s); the key stage, one call of at most 540 s in all, sets tighter ones.
L_PROBE=20 L_VENV=60 L_BUILD=240 L_IMPORT=30 L_ENV=20
export IMAGE_PY=${GDL_IMAGE_PYTHON:-python3}

make_image() {  # --no-gpu: a stand-in for the GPU image, from .whl/image/ alone (no registry)
  local image=$VENV.image
  ls .whl/image/*.whl >/dev/null 2>&1 \
    || { echo "no .whl/image/: run scripts/fetch-gpu-wheels.sh --python-version $(python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")') --image"; return 1; }
  rm -rf "$image" && python3 -m venv "$image" \
    && "$image/bin/python" -m pip install -q --no-index --no-deps .whl/image/*.whl
}

source_stamp() {  # what the installed build was made from
  find CMakeLists.txt cmake csrc gdlbench pyproject.toml _build -type f -not -name '*.pyc' | sort | xargs cat | sha1sum
}

vpip() {  # the venv's pip, or (a venv made without pip) the image's pip pointed at the venv
  if [ -x "$VENV/bin/pip" ]; then "$VENV/bin/python" -m pip "$@"; else "$IMAGE_PY" -m pip --python "$VENV/bin/python" "$@"; fi
}

make_venv() {
  rm -rf "$VENV"
  # Without ensurepip in the image's base interpreter, `venv` fails: then a venv without pip.
  "$IMAGE_PY" -m venv "$VENV" || { rm -rf "$VENV" && "$IMAGE_PY" -m venv --without-pip "$VENV"; } || return 1
  local site
  site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  # The image's packages after the venv's own (addsitedir also runs the image's .pth files).
  "$IMAGE_PY" -c 'import site; print("\n".join(f"import site; site.addsitedir({p!r})" for p in site.getsitepackages()))' \
    >"$site/gdl-image.pth"
  echo "image site-packages:"; cat "$site/gdl-image.pth"
  ls .whl/*.whl >/dev/null 2>&1 || { echo "no carried wheels in .whl/ (scripts/fetch-gpu-wheels.sh)"; return 1; }
  vpip install --no-index --no-deps .whl/*.whl || return 1
  # mpi4py loads libmpi at run time; point it at the carried one when it does not find one itself.
  if ! "$VENV/bin/python" -c "from mpi4py import MPI" 2>/dev/null; then
    echo "export MPI4PY_LIBMPI=$VENV/lib/libmpi.so.12" >"$VENV/gpu-check.env"
  fi
  : >>"$VENV/gpu-check.env"
}

build() {
  # The image's nvcc (the NVIDIA wheels' 13.0/13.1 nvcc cannot link, the system one can).
  if [ -z "${CUDACXX:-}" ] && command -v nvcc >/dev/null; then export CUDACXX=$(command -v nvcc); fi
  [ -n "${CUDACXX:-}" ] || { echo "no nvcc on PATH (the GPU image has CUDA 13's; install it or set CUDACXX)"; return 1; }
  echo "nvcc: $CUDACXX"
  rm -f "$VENV/built.stamp"
  # GDL_RPATH_BUILD_WHEELS: _cuda also searches the image's NVIDIA wheels, not only the venv's.
  GDL_ENABLE_CUDA=ON CMAKE_ARGS="-DCMAKE_CUDA_ARCHITECTURES=90 -DGDL_RPATH_BUILD_WHEELS=ON" \
    CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
    vpip install -v --no-index --no-deps --no-build-isolation \
    --config-settings=build-dir="$VENV/build" . || return 1
  source_stamp >"$VENV/built.stamp"
}

check_import() {  # both modules import and every library they need resolves
  cd /tmp || return 1
  "$VENV/bin/python" - "$no_gpu" <<'PY'
import pathlib, subprocess, sys
import gdlbench
from gdlbench import _native
assert _native._cuda is not None, f"the CUDA module did not import: {_native.CUDA_IMPORT_ERROR}"
for mod in (_native._core, _native._cuda):
    ldd = subprocess.run(["ldd", mod.__file__], capture_output=True, text=True).stdout
    missing = [line.strip() for line in ldd.splitlines() if "not found" in line]
    assert not missing, f"{pathlib.Path(mod.__file__).name}: {missing}"
print("gdlbench from", pathlib.Path(gdlbench.__file__).parent)
print("MPI:", _native.MPI.Get_library_version().splitlines()[0])
print("CUDA module versions:", _native._cuda.versions())
count, why = gdlbench.cuda_status()
print(f"GPUs: {count} ({why})")
if sys.argv[1] == "1":
    assert count == 0, "--no-gpu, but a GPU is visible"
else:
    assert count > 0, f"a GPU is expected here: {why}"
PY
}

check_no_gpu_refusal() {  # without a GPU, --device cuda is one line and exit 2
  local out rc
  out=$(cd /tmp && "$VENV/bin/python" -m gdlbench gemm --device cuda -m 64 -n 64 -k 64 2>&1)
  rc=$?
  echo "rc=$rc: $out"
  [ "$rc" = 2 ] && grep -q "no usable GPU" <<<"$out" && [ "$(wc -l <<<"$out")" = 1 ]
}

setup() {  # skipped when the venv already holds a build of this source (a second call)
  if [ -f "$VENV/built.stamp" ] && [ "$(cat "$VENV/built.stamp")" = "$(source_stamp)" ] && [ "$no_gpu" = 0 ]; then
    echo "--- set-up: $VENV already holds this build"
    # shellcheck disable=SC1091
    . "$VENV/gpu-check.env"
    return 0
  fi
  step probe "$L_PROBE" bash -c "nvidia-smi; $IMAGE_PY --version; command -v nvcc && nvcc --version; echo \"CXX=\${CXX:-unset} CC=\${CC:-unset}\"; \
    $IMAGE_PY -m pip list 2>/dev/null \
    | grep -iE '^(torch|cupy|nvidia|cuda|mpi4py|pybind11|scikit-build|cmake|ninja|numpy|pytest) '; true"
  if [ "$no_gpu" = 1 ]; then
    step image 600 make_image || return 1
    IMAGE_PY=$VENV.image/bin/python; export IMAGE_PY
    export PATH=$PATH:$VENV.image/bin   # the image's cmake and ninja, as its PATH has them
  fi
  step venv "$L_VENV" make_venv || return 1
  # shellcheck disable=SC1091
  . "$VENV/gpu-check.env"
  export MPI4PY_LIBMPI   # empty unless make_venv set it
  [ -n "${MPI4PY_LIBMPI:-}" ] || unset MPI4PY_LIBMPI
  step build "$L_BUILD" build || return 1
  step import "$L_IMPORT" check_import || return 1
  step env "$L_ENV" bash -c "cd /tmp && '$VENV/bin/python' -m gdlbench env --json '$WORK/$current/env.json'"
}

# ------------------------------------------------------------------------------------- stages
G="$VENV/bin/python -m gdlbench"
J() { echo "$WORK/$current/$1"; }   # a JSON file that travels in the stage's archive

stage_first() {  # on the GPU: step limits sum to 560 s (expected: about 4 minutes)
  begin_stage first
  setup || return 1
  if [ "$no_gpu" = 1 ]; then
    step no_gpu_refusal 60 check_no_gpu_refusal
    step cpu_tests 400 bash -c "cd /tmp && '$VENV/bin/python' -m pytest -q -rs -p no:cacheprovider -m 'not gpu' '$root/tests'"
    return
  fi
  # GDL_EXPECT_GPU=1: a GPU test that would skip fails instead.
  step gpu_tests 140 env GDL_EXPECT_GPU=1 bash -c "cd /tmp && '$VENV/bin/python' -m pytest -q -rs -p no:cacheprovider -m 'gpu or native' '$root/tests'"
  step gemm_vs_torch 50 "$VENV/bin/python" benchmarks/gemm_vs_torch_gpu.py --json "$(J gemm_vs_torch.json)"
}

stage_bench() {  # about 400 s on an H200 (2026-12-04); the limits leave room (their sum is more)
  begin_stage bench
  setup || return 1
  step conv_vs_torch 90 "$VENV/bin/python" benchmarks/conv_vs_torch_gpu.py --json "$(J conv_vs_torch.json)"
  step iteration_vs_torch 90 "$VENV/bin/python" benchmarks/iteration_vs_torch_gpu.py --json "$(J iteration_vs_torch.json)"
  step copy_update_vs_torch 60 "$VENV/bin/python" benchmarks/copy_update_vs_torch_gpu.py --json "$(J copy_update_vs_torch.json)"
  step gemm_cli 30 bash -c "cd /tmp && $G gemm --device cuda --dtype bfloat16 -m 8192 -n 8192 -k 8192 --json $(J gemm_bf16.json)"
  if [ -x .peers/nccl-tests/all_reduce_perf ]; then
    step nccl_vs_nccl_tests 120 "$VENV/bin/python" benchmarks/nccl_vs_nccl_tests.py --json "$(J nccl_vs_nccl_tests.json)"
  else
    printf '%-28s %s\n' nccl_vs_nccl_tests "waived (no .peers/nccl-tests: scripts/build-nccl-tests.sh)" | tee -a "$OUT/summary.txt"
  fi
  step nccl_allreduce 60 bash -c "cd /tmp && $G allreduce --backend nccl -b 8 -e 256M -f 4 -d float32,bfloat16 -c 1 -n 20 --json $(J nccl_allreduce.json)"
  step nccl_others 60 bash -c "cd /tmp && for c in reduce_scatter allgather broadcast; do $G \$c --backend nccl -b 8 -e 256M -f 16 -c 1 --json $(J nccl)_\$c.json || exit 1; done"
  step conv_cli 60 bash -c "cd /tmp && $G conv --net resnet50 --device cuda --dtype float32 --layout nhwc --algo search --json $(J conv_r50_fp32.json)"
  step copy_update_layer_cli 60 bash -c "cd /tmp && $G copy --size 1GB --direction all --memory both --device cuda --json $(J copy.json) \
    && $G update --params 25.6M --device cuda --json $(J update.json) && $G layer --layer all -b 32 --device cuda --json $(J layers.json)"
  # AlexNet alone took about 50 s on the H200 (5 rounds; its 1024-image read, 0.4 s, recurs in each):
  # a 60 s limit cut GoogLeNet off.
  step iteration_cli 240 bash -c "cd /tmp && for n in alexnet googlenet resnet50; do $G iteration --net \$n --device cuda --strategy serial,wfbp,wfbp-fusion --json $(J iteration)_\$n.json || exit 1; done"
}

# One device call of at most 540 s (a lent device has 15 minutes in all, start-up included): every
# limit below, the set-up's included, sums to 530 s. As each step ends, its JSON and
# $OUT/figures.md (gdlbench, peer, ratio, goal: benchmarks/key_figures.py) are in $OUT, so a lease
# cut short still returns what it measured. The exact call: docs/cuda.md, "The key stage".
KEY_CONV_LAYERS=conv1,conv2_1x1_reduce,conv2_3x3,conv3_proj,conv4_3x3,conv5_1x1_expand  # 1x1, 3x3, 7x7, strided
stage_key() {
  begin_stage key
  L_PROBE=10 L_VENV=30 L_BUILD=160 L_IMPORT=20 L_ENV=15   # 235 s
  setup || return 1
  step gpu_tests 75 env GDL_EXPECT_GPU=1 bash -c "cd /tmp && '$VENV/bin/python' -m pytest -q -rs -p no:cacheprovider -m 'gpu or native' '$root/tests'"
  step gemm_vs_torch 40 "$VENV/bin/python" benchmarks/gemm_vs_torch_gpu.py --rounds 3 --json "$(J gemm_vs_torch.json)"
  step conv_vs_torch 55 "$VENV/bin/python" benchmarks/conv_vs_torch_gpu.py --layers "$KEY_CONV_LAYERS" --rounds 2 \
    --iters 10 --json "$(J conv_vs_torch_legacy.json)"
  step iteration_vs_torch 85 "$VENV/bin/python" benchmarks/iteration_vs_torch_gpu.py --iters 5 --json "$(J iteration_vs_torch.json)"
  if [ -x .peers/nccl-tests/all_reduce_perf ]; then
    step nccl_vs_nccl_tests 40 "$VENV/bin/python" benchmarks/nccl_vs_nccl_tests.py --collectives allreduce \
      --rounds 3 --iters 20 --json "$(J nccl_vs_nccl_tests.json)"
  else
    printf '%-28s %s\n' nccl_vs_nccl_tests "waived (no .peers/nccl-tests: scripts/prepare-key-stage.sh)" | tee -a "$OUT/summary.txt"
  fi
}

export -f vpip make_image make_venv build check_import check_no_gpu_refusal source_stamp
export VENV WORK no_gpu root
[ -f "$OUT/summary.txt" ] || : >"$OUT/summary.txt"
case $stage in
  first) stage_first ;;
  bench) stage_bench ;;
  key) stage_key ;;
  all) stage_first; stage_bench ;;
  setup) begin_stage setup; setup ;;  # the venv and the build alone (to investigate by hand)
esac
for name in ${only//,/ }; do
  [[ $ran == *",$name,"* ]] || { echo "gpu-check: --only: no step named '$name' ran in stage $stage" | tee -a "$OUT/summary.txt"; failed=1; }
done
echo "=== summary ($OUT/summary.txt)"
cat "$OUT/summary.txt"
exit "$failed"
