"""Scale: a cluster filled to upstream's scalability limit, each scheduler in turn.

    python -m bench.scale [--nodes 5000] [--pods 150000] [--out bench/results]

``make bench-scale`` runs it at 5000 nodes and 150,000 pods (30 pods a node, the
limit Kubernetes' scalability thresholds name). One control plane; for each
scheduler (kube-scheduler, then kscheduler, or ``--order kscheduler-first``) the
measured pods (SchedulingBasic's pod: 100m CPU, 500Mi) are created as fast as the
driver can while the scheduler binds them, through bench/run.py's machinery (the
same window, CPU and RSS sampling, etcd compacted between runs), and deleted
afterwards. Reported per scheduler:

- throughput over the first and over the last 10% of the pods, from the bind
  curve (pods bound in that tenth / the time between its first and its last bind),
  and their ratio: a scheduler whose per-pod cost grows with the pods already
  placed slows down over the run (kscheduler's target: last >= 90% of first);
- peak RSS (VmHWM) and the RSS at the end (kscheduler's target: peak at most
  kube-scheduler's in the same run);
- the pod creation rate, since a scheduler cannot bind faster than pods appear:
  while it keeps up, a tenth's rate is the driver's; so also the scheduler's CPU ms
  per pod over the first and the last tenth (its cumulative CPU, sampled every
  second, between that tenth's first and last bind), which shows a per-pod cost
  that grows with the pods in the cluster whatever the creation rate.

The results go to ``<out>/scale-<timestamp>.json`` (the figures, the machine, and
each run as bench/run.py records it) and ``.png`` (bound pods and RSS over time).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.method import audit_apiserver_args, load, machine
from bench.run import (
    KSCHEDULER,
    KUBE_SCHEDULER,
    NODE_LEASE_SECONDS,
    PERF_CONFIG,
    SHARED,
    THROTTLES,
    Bench,
    Options,
    RunResult,
    kube_scheduler_version,
    log,
    one_run,
)
from bench.workloads import PodGroup, Workload, pod_default
from kscheduler.controlplane.binaries import K8S_VERSION
from kscheduler.controlplane.harness import ControlPlane
from kscheduler.controlplane.rest import ApiError

#: pods bound per node at upstream's limit: 150,000 pods over 5000 nodes
DEFAULT_NODES = 5000
DEFAULT_PODS = 150_000
#: node-default's 4 CPUs over the pod's 100m
PODS_PER_NODE_MAX = 40
DELETE_ATTEMPTS = 3
#: seconds an admin request may take (listing and deleting a filled cluster's pods)
ADMIN_TIMEOUT = 600.0


class ScaleBench(Bench):
    """Bench whose clean-up survives a slow apiserver: deleting a filled cluster's pods
    on a busy machine may time out once, which must not throw the measured run away."""

    async def delete_pods(self, wl: Workload, *, keep_init: bool = False) -> None:
        for attempt in range(1, DELETE_ATTEMPTS + 1):
            try:
                await super().delete_pods(wl, keep_init=keep_init)
                return
            except (TimeoutError, ApiError) as exc:
                if attempt == DELETE_ATTEMPTS:
                    raise
                log(f"deleting the pods: {type(exc).__name__} {exc}; trying again")


def scale_workload(nodes: int, pods: int) -> Workload:
    return Workload(
        "SchedulingBasicScale",
        nodes=nodes,
        measure=PodGroup(pod_default, pods, "measure"),
        upstream=f"misc/performance-config.yaml SchedulingBasic's pod, {pods} pods "
        f"over {nodes} nodes",
        notes="the cluster filled from empty; throughput over the first and last 10% of pods",
        stall_timeout=120.0,
    )


def tenth_rates(curve: list[tuple[float, int]], total: int) -> dict[str, float | None]:
    """Pods/s over the first and the last tenth of ``total`` pods from a bind curve of
    (seconds, pods bound so far) points."""
    points = [(t, n) for t, n in curve if n > 0]
    if not points:
        return {"first_10pct_pods_per_s": None, "last_10pct_pods_per_s": None, "ratio": None}
    total = min(total, points[-1][1])  # a run cut short: the tenths of what was bound

    def rate(lo: int, hi: int) -> float | None:
        a = next(p for p in points if p[1] >= lo)
        b = next(p for p in points if p[1] >= hi)
        if b[0] <= a[0] or b[1] <= a[1]:
            return None
        return (b[1] - a[1]) / (b[0] - a[0])

    tenth = max(1, total // 10)
    first = rate(1, tenth)
    last = rate(total - tenth, total)
    return {
        "first_10pct_pods_per_s": first,
        "last_10pct_pods_per_s": last,
        "ratio": last / first if first and last else None,
    }


def tenth_cpu(
    curve: list[tuple[float, int]], resources: list[tuple[float, float, float]], total: int
) -> dict[str, float | None]:
    """The scheduler's CPU ms per pod bound in the first and in the last tenth: what a
    tenth costs whether or not pod creation kept the scheduler waiting (the rates
    above are capped by the creation rate while the scheduler keeps up)."""
    points = [(t, n) for t, n in curve if n > 0]
    none: dict[str, float | None] = {
        "first_10pct_cpu_ms_per_pod": None,
        "last_10pct_cpu_ms_per_pod": None,
    }
    if not points or len(resources) < 2:
        return none
    total = min(total, points[-1][1])

    def cpu_at(t: float) -> float:
        before = [r for r in resources if r[0] <= t]
        after = [r for r in resources if r[0] >= t]
        if not before:
            return after[0][1]
        if not after:
            return before[-1][1]
        a, b = before[-1], after[0]
        if b[0] == a[0]:
            return a[1]
        return a[1] + (b[1] - a[1]) * (t - a[0]) / (b[0] - a[0])

    def cost(lo: int, hi: int) -> float | None:
        a = next(p for p in points if p[1] >= lo)
        b = next(p for p in points if p[1] >= hi)
        if b[1] <= a[1]:
            return None
        return (cpu_at(b[0]) - cpu_at(a[0])) * 1000 / (b[1] - a[1])

    tenth = max(1, total // 10)
    return {
        "first_10pct_cpu_ms_per_pod": cost(1, tenth),
        "last_10pct_cpu_ms_per_pod": cost(total - tenth, total),
    }


def figures(r: RunResult) -> dict[str, Any]:
    return {
        "scheduler": r.scheduler,
        "complete": r.complete,
        "bound": r.bound,
        "error": r.error.splitlines()[0] if r.error else "",
        **tenth_rates(r.curve, r.measured_pods),
        **tenth_cpu(r.curve, r.resources, r.measured_pods),
        "overall_pods_per_s": r.overall_pods_per_second,
        "create_pods_per_s": r.create_pods_per_second,
        "peak_rss_mib": r.peak_rss_mib,
        "rss_end_mib": r.rss_end_mib,
        "cpu_ms_per_pod": r.cpu_ms_per_pod,
        "window_seconds": r.window_seconds,
    }


def verdict(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """kscheduler's targets: last tenth >= 90% of the first, peak RSS <= kube-scheduler's."""
    by = {row["scheduler"]: row for row in rows}
    ks, ref = by.get(KSCHEDULER), by.get(KUBE_SCHEDULER)
    out: dict[str, Any] = {}
    if ks is not None and ks["ratio"] is not None:
        out["kscheduler_last_over_first"] = ks["ratio"]
        out["throughput_target_met"] = ks["ratio"] >= 0.9
    if ks is not None and ks["first_10pct_cpu_ms_per_pod"] and ks["last_10pct_cpu_ms_per_pod"]:
        # the same target in CPU: the last tenth's pods cost at most 1/0.9 of the first's
        grow = ks["last_10pct_cpu_ms_per_pod"] / ks["first_10pct_cpu_ms_per_pod"]
        out["kscheduler_cpu_per_pod_last_over_first"] = grow
        out["cpu_per_pod_target_met"] = grow <= 1 / 0.9
    if ks is not None and ref is not None and ks["peak_rss_mib"] and ref["peak_rss_mib"]:
        out["kscheduler_peak_rss_over_kube_scheduler"] = ks["peak_rss_mib"] / ref["peak_rss_mib"]
        out["rss_target_met"] = ks["peak_rss_mib"] <= ref["peak_rss_mib"]
    return out


def plot(results: list[RunResult], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (bound, rss) = plt.subplots(1, 2, figsize=(12, 4.5))
    for r in results:
        bound.plot([t for t, _ in r.curve], [n for _, n in r.curve], label=r.scheduler)
        rss.plot([s[0] for s in r.resources], [s[2] for s in r.resources], label=r.scheduler)
    bound.set_xlabel("s since the first pod was created")
    bound.set_ylabel("bound pods")
    rss.set_xlabel("s since the first pod was created")
    rss.set_ylabel("scheduler RSS (MiB)")
    for ax in (bound, rss):
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


async def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    json_path = out / f"scale-{stamp}.json"
    png_path = out / f"scale-{stamp}.png"
    wl = scale_workload(args.nodes, args.pods)
    kinds = [KUBE_SCHEDULER, KSCHEDULER]
    if args.order == "kscheduler-first":
        kinds.reverse()
    audit_dir = Path(tempfile.mkdtemp(prefix="kscheduler-scale-audit-"))
    opts = Options(
        size=f"{args.nodes}n-{args.pods}p",
        out=out,
        stall_timeout=120.0,
        max_seconds=args.max_seconds,
        kscheduler_profiler=None,
        kube_scheduler_verbosity=0,
        kscheduler_args=[],
        audit_log=audit_dir / "audit.log" if args.audit else None,
    )
    meta: dict[str, Any] = {
        "nodes": args.nodes,
        "pods": args.pods,
        "full_size": args.nodes == DEFAULT_NODES and args.pods == DEFAULT_PODS,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "kubernetes": K8S_VERSION,
        "kube_scheduler_version": kube_scheduler_version(),
        "machine": machine(),
        "load_note": args.load_note,
        "throttle": args.throttle,
        "cpu_mode": SHARED,
        "scheduler_config": PERF_CONFIG,
        "order": kinds,
        "method": "bench/scale.py docstring",
    }
    results: list[RunResult] = []

    def write() -> list[dict[str, Any]]:
        rows = [figures(r) for r in results]
        meta["loadavg_now"] = load()
        doc = {
            "meta": meta,
            "figures": rows,
            "targets": verdict(rows),
            "runs": [asdict(r) for r in results],
        }
        json_path.write_text(json.dumps(doc, indent=1))
        plot(results, png_path, f"{wl.nodes} nodes filled to {wl.measure.count} pods")
        return rows

    extra = audit_apiserver_args(audit_dir) if args.audit else []
    try:
        async with ControlPlane(
            extra_apiserver_args=extra, node_lease_seconds=NODE_LEASE_SECONDS
        ) as cp:
            admin = cp.client(max_connections=64, timeout=ADMIN_TIMEOUT)
            try:
                bench = ScaleBench(cp, admin, opts, stamp)
                await bench.setup_workload(wl)
                try:
                    for i, kind in enumerate(kinds):
                        log(f"scale / {kind}: {wl.nodes} nodes, {wl.measure.count} pods")
                        r = await one_run(bench, wl, kind, args.throttle, SHARED, [], [], 0, i + 1)
                        results.append(r)
                        log(f"  -> {figures(r)}")
                        write()
                finally:
                    await bench.teardown_workload(wl)
            finally:
                await admin.close()
    finally:
        shutil.rmtree(audit_dir, ignore_errors=True)
    meta["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    rows = write()
    for row in rows:
        print(
            f"{row['scheduler']:>15}: first 10% {row['first_10pct_pods_per_s']} pods/s, "
            f"last 10% {row['last_10pct_pods_per_s']} pods/s (ratio {row['ratio']}), "
            f"CPU ms/pod first 10% {row['first_10pct_cpu_ms_per_pod']}, "
            f"last 10% {row['last_10pct_cpu_ms_per_pod']}, "
            f"peak RSS {row['peak_rss_mib']} MiB, created {row['create_pods_per_s']:.0f} pods/s"
            + (f" [{row['error']}]" if row["error"] else "")
        )
    print(f"targets: {verdict(rows)}")
    log(f"wrote {json_path} and {png_path}")
    return 0 if all(r.complete for r in results) else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.scale",
        description="kube-scheduler and kscheduler filling one cluster to its scale limit",
    )
    p.add_argument("--nodes", type=int, default=DEFAULT_NODES)
    p.add_argument("--pods", type=int, default=DEFAULT_PODS)
    p.add_argument("--throttle", choices=tuple(THROTTLES), default="unthrottled")
    p.add_argument("--order", choices=("kube-scheduler-first", "kscheduler-first"), default=None)
    p.add_argument(
        "--audit",
        action="store_true",
        help="count the scheduler identity's requests from an apiserver audit log",
    )
    p.add_argument("--max-seconds", type=float, default=4 * 3600.0, help="cap per scheduler")
    p.add_argument("--load-note", default="", help="what else ran on the machine meanwhile")
    p.add_argument("--out", default="bench-results")
    args = p.parse_args(argv)
    if args.nodes < 1:
        p.error("--nodes: must be at least 1")
    if args.pods < 10:
        p.error("--pods: must be at least 10")
    if args.pods > args.nodes * PODS_PER_NODE_MAX:
        p.error(
            f"--pods: {args.pods} pods do not fit {args.nodes} nodes "
            f"(4 CPUs each, 100m a pod: at most {PODS_PER_NODE_MAX} a node)"
        )
    Path(args.out).mkdir(parents=True, exist_ok=True)
    try:
        import uvloop

        runner: Any = uvloop.run
    except ImportError:
        runner = asyncio.run
    return int(runner(run(args)))


if __name__ == "__main__":
    sys.exit(main())
