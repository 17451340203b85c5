#!/usr/bin/env bash
# Upstream's own benchmark, test/integration/scheduler_perf of the pinned
# k8s.io/kubernetes module, for the workloads bench.run models: kube-scheduler
# in process against an in-process apiserver and the harness's etcd. It is the
# in-process anchor next to `python -m bench.cycle` (kscheduler's cycle alone).
#
#   bench/scheduler_perf.sh                    # the six workloads at the quick size
#   SIZE=5000 bench/scheduler_perf.sh          # the same at 5000 nodes
#   WORKLOADS="SchedulingBasic" bench/scheduler_perf.sh
#   CPUS=1 bench/scheduler_perf.sh             # the test binary on CPU 1, GOMAXPROCS=1
#
# It works in a module of its own under $WORK (go.mod and go.sum copied from
# hack/controlplane, so the same versions and replaces), compiles the test
# binaries of the scheduler_perf packages with `go test -c` (the Go build cache
# of `make control-plane` is reused: same -trimpath, CGO_ENABLED=0), and runs
# each as upstream's `make test-integration` does: -run='^$' -benchtime=1ns
# -bench=BenchmarkPerfScheduling/<workload>/<size>. The JSON data items
# (SchedulingThroughput Average/Perc50/90/99, per-plugin latencies) go to $OUT.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
SIZE=${SIZE:-quick}
WORKLOADS=${WORKLOADS:-"SchedulingBasic SchedulingNodeAffinity TopologySpreading SchedulingPodAntiAffinity Preemption Unschedulable"}
WORK=${WORK:-$HOME/.cache/kscheduler/scheduler_perf}
OUT=${OUT:-$repo/bench-results/scheduler_perf-$(date +%Y%m%d-%H%M%S)}
BUILD_ONLY=${BUILD_ONLY:-0}
CPUS=${CPUS:-}
TIMEOUT=${TIMEOUT:-60m}

k8s_version=$(awk '/^require k8s.io\/kubernetes /{print $3}' "$repo/hack/controlplane/go.mod")
etcd=$(ls -d "$HOME"/.cache/kscheduler/controlplane/k8s-"$k8s_version"_*/etcd 2>/dev/null | head -1 || true)
if [ -z "$etcd" ]; then
    echo "bench/scheduler_perf.sh: no etcd for $k8s_version under ~/.cache/kscheduler/controlplane (run make control-plane)" >&2
    exit 2
fi
case "$SIZE" in quick | 5000) ;; *)
    echo "bench/scheduler_perf.sh: SIZE must be quick or 5000, not $SIZE" >&2
    exit 2
    ;;
esac

# workload -> package directory and the performance-config entry at each size
target() {
    local w=$1 big=0
    [ "$SIZE" = 5000 ] && big=1
    case "$w" in
    SchedulingBasic) echo "misc SchedulingBasic/$([ $big = 1 ] && echo 5000Nodes_10000Pods || echo 500Nodes)" ;;
    SchedulingNodeAffinity) echo "affinity SchedulingNodeAffinity/$([ $big = 1 ] && echo 5000Nodes_10000Pods || echo 500Nodes)" ;;
    TopologySpreading) echo "topology_spreading TopologySpreading/$([ $big = 1 ] && echo 5000Nodes_5000Pods || echo 500Nodes)" ;;
    SchedulingPodAntiAffinity) echo "affinity SchedulingPodAntiAffinity/$([ $big = 1 ] && echo 5000Nodes_2000Pods || echo 500Nodes)" ;;
    # upstream has no 500-node PreemptionBasic entry: 1000 nodes at both sizes
    Preemption) echo "default_preemption PreemptionBasic/1000Nodes" ;;
    Unschedulable) echo "default_preemption Unschedulable/$([ $big = 1 ] && echo 5kNodes/100Init/10kPods || echo 500Nodes/10Init/1kPods)" ;;
    *)
        echo "bench/scheduler_perf.sh: unknown workload $w" >&2
        exit 2
        ;;
    esac
}

mkdir -p "$WORK" "$OUT"
cp "$repo/hack/controlplane/go.mod" "$repo/hack/controlplane/go.sum" "$WORK/"
sed -i 's#^module .*#module kscheduler.local/schedulerperf#' "$WORK/go.mod"
export CGO_ENABLED=0 GOFLAGS=-mod=mod
pkgs=()
for w in $WORKLOADS; do
    read -r dir _ <<<"$(target "$w")"
    case " ${pkgs[*]-} " in *" $dir "*) ;; *) pkgs+=("$dir") ;; esac
done
cd "$WORK"
# the test packages import what the control plane's binaries do not: add it to this module only
go get "k8s.io/kubernetes/test/integration/scheduler_perf@$k8s_version" >/dev/null
for dir in "${pkgs[@]}"; do
    if [ ! -x "$WORK/$dir.test" ]; then
        echo "== go test -c k8s.io/kubernetes/test/integration/scheduler_perf/$dir"
        start=$(date +%s)
        go test -c -vet=off -trimpath -o "$WORK/$dir.test" "k8s.io/kubernetes/test/integration/scheduler_perf/$dir"
        echo "   built in $(($(date +%s) - start))s"
    fi
done
[ "$BUILD_ONLY" = 1 ] && exit 0

src=$(go list -m -f '{{.Dir}}' k8s.io/kubernetes)
pin=()
if [ -n "$CPUS" ]; then
    pin=(taskset -c "$CPUS")
    export GOMAXPROCS=$(($(taskset -c "$CPUS" nproc)))
fi
{
    echo "k8s.io/kubernetes $k8s_version; etcd $("$etcd" --version | head -1)"
    echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
    echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "test binary CPUs: ${CPUS:-all}"
} | tee "$OUT/machine.txt"
for w in $WORKLOADS; do
    read -r dir bench <<<"$(target "$w")"
    echo "== $w: BenchmarkPerfScheduling/$bench ($dir)"
    # the test reads its performance-config.yaml and templates from its own directory
    # built with -trimpath (to reuse the control plane's build cache), the test
    # apiserver finds its own package directory the way it does under bazel:
    # TEST_SRCDIR/TEST_WORKSPACE + the module-relative path
    (cd "$src/test/integration/scheduler_perf/$dir" &&
        TEST_SRCDIR="$(go env GOMODCACHE)" TEST_WORKSPACE=. \
        PATH="$(dirname "$etcd"):$PATH" "${pin[@]}" "$WORK/$dir.test" \
            -test.run='^$' -test.benchtime=1ns -test.timeout="$TIMEOUT" \
            -test.bench="BenchmarkPerfScheduling/$bench\$" \
            -perf-scheduling-label-filter= \
            -data-items-dir="$OUT" 2>&1 | tee "$OUT/$w.log" | grep -E '^(Benchmark|ok|FAIL|PASS|---)' || true)
done
echo "results: $OUT"
