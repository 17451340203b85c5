#!/usr/bin/env bash
# How each scheduler scales with cores: SchedulingBasic and TopologySpreading at
# 5000 nodes, each scheduler pinned to 1 and then to 4 CPUs, the control plane
# and the pod-creating driver on every other CPU. Made for a machine with 16
# CPUs or more (with fewer, the control plane, not the scheduler, is measured).
#
#   bench/scaling.sh                       # 3 ABBA pairs per setting
#   PAIRS=1 OUT=/tmp/scaling bench/scaling.sh
#
# Each setting writes its own <time>.json/.md/.png under $OUT; compare the
# pods/s and the fraction of the ceiling (the trivial binder on the same CPUs)
# between the 1-CPU and the 4-CPU files.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
PY=${PY:-$repo/.venv/bin/python}
OUT=${OUT:-$repo/bench/results/scaling}
PAIRS=${PAIRS:-3}
MIN_CPUS=${MIN_CPUS:-16}
# the scheduler's CPUs; the last ones, away from CPU 0 where interrupts tend to land
n=$(nproc)
ONE=${ONE:-$((n - 1))}
FOUR=${FOUR:-$((n - 4))-$((n - 1))}

if [ "$n" -lt "$MIN_CPUS" ]; then
    echo "bench/scaling.sh: made for $MIN_CPUS CPUs or more, this machine has $n (MIN_CPUS=$n to run anyway)" >&2
    exit 2
fi
mkdir -p "$OUT"
for cpus in "$ONE" "$FOUR"; do
    echo "== scheduler on CPUs $cpus, control plane and driver on the other $n minus those"
    "$PY" -m bench.run --size 5000 \
        --workloads SchedulingBasic TopologySpreading \
        --throttle unthrottled \
        --scheduler-cpus "$cpus" --cpu-modes pinned \
        --pairs "$PAIRS" \
        --out "$OUT" \
        --load-note "${LOAD_NOTE:-scaling: scheduler on CPUs $cpus}"
done
