#!/usr/bin/env bash
# A validation point beyond a study's measured scale: one of the study's nets measured on an
# emulated cluster (scripts/emulated-cluster.sh: a network namespace per node, veth pairs through
# a switch, a tc token bucket as the inter-node link), then set beside the model's prediction for
# those nodes from the study's own phases.
#
#   scripts/study-validate.sh --study DIR --net NET [--nodes 2] [--rate 1gbit] [--delay D] \
#       [--iters N] [--mpiexec PATH]
#
# 1. the study's all-reduce fit cell, run across the emulated nodes (the link's fit);
# 2. the study's iteration cell of NET, run across them (same batch, strategies, rounds and
#    compute threads per rank as the study measured; --iters N overrides the rounds);
# 3. `gdlbench study --resume DIR --validate ITERATION --validate-fit FIT`: the report gains the
#    validation table and the chart its markers (docs/study.md, "Validation beyond the measured scale").
# One rank per node (2 x 1 by default). Needs root, iproute2 and the mpich wheel's mpiexec (as
# scripts/emulated-cluster.sh); the namespaces exist only while each run lasts and are removed on
# exit, failure or interrupt (that script's trap); this one stops its child on a signal. Output: DIR/validation/{allreduce-fit,iteration-NET}.json.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
study=""
net=""
nodes=2
rate=1gbit
delay=""
iters=""
mpiexec=""
while [ $# -gt 0 ]; do
  case "$1" in
    --study|--net|--nodes|--rate|--delay|--iters|--mpiexec)
      [ $# -ge 2 ] || { echo "study-validate: $1 needs a value" >&2; exit 2; } ;;&
    --study) study=$2; shift 2 ;;
    --net) net=$2; shift 2 ;;
    --nodes) nodes=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --delay) delay=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --mpiexec) mpiexec=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;;
    *) echo "study-validate: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ -z "$iters" ] || [[ "$iters" =~ ^[1-9][0-9]*$ ]] || { echo "study-validate: --iters must be >= 1" >&2; exit 2; }
[ -n "$study" ] && [ -f "$study/study.json" ] || { echo "study-validate: --study DIR must hold a study.json" >&2; exit 2; }
[ -n "$net" ] || { echo "study-validate: --net NET (one of the study's nets)" >&2; exit 2; }
if [ -z "$mpiexec" ]; then
  mpiexec=$(dirname "$(command -v python3)")/mpiexec
  [ -x "$mpiexec" ] || mpiexec=$(command -v mpiexec || true)
fi
bin=$(dirname "$mpiexec")
gdl="$bin/gdlbench"; py="$bin/python3"
[ -x "$gdl" ] || { echo "study-validate: no gdlbench beside $mpiexec (give --mpiexec PATH)" >&2; exit 2; }
study=$(cd "$study" && pwd)
out="$study/validation"
mkdir -p "$out"

# The study's own commands for the fit and the net's iteration, one argument a line; the JSON
# written to validation/, the iteration at the study's threads per rank (on one rank per node the
# default would be every core), its rounds from --iters.
readarray -t plan < <("$py" - "$study" "$net" "$out" "$nodes" "$iters" <<'EOF'
import json, shlex, sys
root, net, out, nodes, iters = sys.argv[1:]
index = json.load(open(f"{root}/study.json"))
cells = {c["name"]: c for c in index["cells"]}
cfg = index["config"]
if f"iteration-{net}" not in cells or "allreduce-fit" not in cells:
    sys.exit(f"study-validate: {root} has no iteration cell for {net!r} (nets: {', '.join(cfg['nets'])}) or no fit cell")

def argv(name, json_out):
    words = shlex.split(cells[name]["command"])
    words = words[words.index("gdlbench") + 1:]
    drop = {"--json", "--trace", *(("--servers",) if name == "allreduce-fit" else ("--iters", "--threads"))}
    keep, skip = [], False
    for w in words:  # every dropped option takes a value
        if not skip and w not in drop:
            keep.append(w)
        skip = not skip and w in drop
    if name == "allreduce-fit":
        keep += ["--servers", str(int(nodes))]
    else:
        keep += ["--iters", iters or str(cfg["iters"]),
                 "--threads", str(cfg.get("threads") or index["env"]["default_threads"])]
    return keep + ["--json", json_out]

fit = argv("allreduce-fit", f"{out}/allreduce-fit.json")
it = argv(f"iteration-{net}", f"{out}/iteration-{net}.json")
print(index["config"]["world_size"]); print(len(fit)); print("\n".join(fit)); print("\n".join(it))
EOF
)
[ "${#plan[@]}" -gt 2 ] || exit 2
world=${plan[0]}; nfit=${plan[1]}
fit_argv=("${plan[@]:2:$nfit}")
it_argv=("${plan[@]:$((2 + nfit))}")

child=""
cleanup() {
  [ -z "$child" ] || kill -TERM "$child" 2>/dev/null || true
  [ -z "$child" ] || wait "$child" 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

emulated() {  # the command across the emulated nodes, in the background so a signal stops it at once
  "$here/emulated-cluster.sh" --nodes "$nodes" --per-node 1 --rate "$rate" ${delay:+--delay "$delay"} \
      --mpiexec "$mpiexec" -- "$gdl" "$@" &
  child=$!
  wait "$child"
  child=""
}

cd "$study"
rm -f "$out/allreduce-fit.json" "$out/iteration-$net.json"  # each command writes its JSON whole, or nothing
echo "study-validate: [1/3] the link's all-reduce fit on $nodes x 1 at $rate: gdlbench ${fit_argv[*]}" >&2
emulated "${fit_argv[@]}"
echo "study-validate: [2/3] the composed iteration on $nodes x 1 at $rate: gdlbench ${it_argv[*]}" >&2
emulated "${it_argv[@]}"
echo "study-validate: [3/3] the study's report with the validation point" >&2
"$mpiexec" -n "$world" "$gdl" study --resume "$study" --validate "$out/iteration-$net.json" \
    --validate-fit "$out/allreduce-fit.json"
