"""The scheduling cycle alone, in process: no API server, no informers, no binds.

    python -m bench.cycle                         # 100, 1000, 5000 nodes, four workloads
    python -m bench.cycle --nodes 5000 --workloads SchedulingBasic --breakdown
    python -m bench.cycle --nodes 5000 --pyinstrument cycle.html
    python -m bench.cycle --nodes 5000 --cprofile 30

A Cache is filled with N nodes (scheduler_perf's node-default) and existing
pods (``--existing-per-node`` pod-default pods per node, plus the workload's own
init pods scaled to N), the default profile's Framework is built as the daemon
builds it (fake client, recorder and object lister), and then for every measured
pod: snapshot update -> Algorithm.schedule_pod (with the cycle's number, so that
OpportunisticBatching applies as in the daemon) -> assume -> Reserve -> Permit,
exactly the synchronous part of Scheduler.schedule_one.

``--breakdown`` repeats the run with every plugin method wrapped in a timer and
prints the time per plugin and extension point; the wrappers cost time of
their own, so pods/s is taken from the plain run.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import pstats
import random
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.experiments import APPLIED, apply
from bench.workloads import (
    Workload,
    node_default,
    node_name,
    pod_default,
    with_uid,
    workloads,
)
from kscheduler.algorithm import Algorithm, FitError
from kscheduler.app import profile_specs
from kscheduler.cache import Cache, Snapshot
from kscheduler.config import parse_config
from kscheduler.framework.cycle_state import CycleState
from kscheduler.framework.parse import parse_node, parse_pod
from kscheduler.framework.runtime import Framework, ProfileSpec
from kscheduler.framework.types import PodInfo
from kscheduler.plugins import in_tree_registry
from kscheduler.queue import SchedulingQueue

SCHEDULER = "kscheduler"
CYCLE_WORKLOADS = (
    "SchedulingBasic",
    "SchedulingNodeAffinity",
    "TopologySpreading",
    "SchedulingPodAntiAffinity",
)
PLUGIN_METHODS = (
    "pre_filter",
    "filter",
    "filter_nodes",
    "pre_score",
    "score",
    "score_nodes",
    "normalize_score",
    "normalize_scores",
    "reserve",
    "permit",
)


# --------------------------------------------------------------------------- fakes


class FakeObjects:
    """An object lister with nothing in it (no services, PVCs, namespaces...)."""

    def list(self, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        return []

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return None


class FakeClient:
    async def bind(self, pod: PodInfo, node_name: str) -> None:
        return None

    async def delete_pod(self, pod: PodInfo, *, reason: str, message: str) -> None:
        return None

    async def request(
        self, method: str, path: str, body: Any = None, *, content_type: str | None = None
    ) -> Any:
        return {}


class FakeRecorder:
    def event(
        self,
        obj: Mapping[str, Any],
        type_: str,
        reason: str,
        action: str,
        note: str,
        related: Mapping[str, Any] | None = None,
    ) -> None:
        return None


# --------------------------------------------------------------------------- environment


@dataclass
class Env:
    workload: Workload
    cache: Cache
    snapshot: Snapshot
    fwk: Framework
    algorithm: Algorithm
    queue: SchedulingQueue
    existing: int
    pods: list[PodInfo] = field(default_factory=list)


def default_spec(scheduler: str = SCHEDULER) -> ProfileSpec:
    registry = in_tree_registry()
    cfg = parse_config(
        {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "profiles": [{"schedulerName": scheduler}],
        },
        registry=registry,
    )
    return profile_specs(cfg)[0]


def _workload(name: str) -> Workload:
    for w in workloads("5000"):
        if w.name == name:
            return w
    raise SystemExit(f"unknown workload {name!r}; choose from {', '.join(CYCLE_WORKLOADS)}")


def build_env(
    name: str, nodes: int, pods: int, *, existing_per_node: int = 2, seed: int = 1
) -> Env:
    """A filled cache and the default-profile framework, ready to schedule ``pods`` pods."""
    wl = _workload(name)
    registry = in_tree_registry()
    spec = default_spec()
    cache = Cache()
    snapshot = Snapshot(cache)
    fwk = Framework(
        spec,
        registry,
        snapshot=snapshot,
        objects=FakeObjects(),
        client=FakeClient(),
        recorder=FakeRecorder(),
    )
    queue = SchedulingQueue(
        sort_key=fwk.queue_sort_key(),
        pre_enqueue=fwk.run_pre_enqueue,
        events=fwk.events_to_register(),
    )
    fwk.set_nominator(queue)
    for i in range(nodes):
        cache.add_node(parse_node(node_default(i, wl.node_labels)))
    uid = 0
    existing = 0
    for i in range(nodes * existing_per_node):
        raw = pod_default(f"bg-{i}", "background", SCHEDULER)
        raw["spec"]["nodeName"] = node_name(i % nodes)
        cache.add_pod(parse_pod(with_uid(raw, f"uid-{uid}")))
        uid += 1
        existing += 1
    # the workload's own init pods, scaled from its 5000-node size to ``nodes``
    k = 0
    for g in wl.init:
        count = g.count * nodes // wl.nodes
        ns = wl.namespace(g.namespace)
        for i in range(count):
            raw = g.template(f"init-{i}", ns, SCHEDULER)
            raw["spec"]["nodeName"] = node_name(k % nodes)
            k += 1
            cache.add_pod(parse_pod(with_uid(raw, f"uid-{uid}")))
            uid += 1
            existing += 1
    ns = wl.namespace(wl.measure.namespace)
    measured = [
        parse_pod(with_uid(wl.measure.template(f"pod-{i}", ns, SCHEDULER), f"uid-{uid + i}"))
        for i in range(pods)
    ]
    algorithm = Algorithm(rng=random.Random(seed))
    return Env(wl, cache, snapshot, fwk, algorithm, queue, existing, measured)


# --------------------------------------------------------------------------- the cycle


@dataclass
class CycleResult:
    workload: str
    nodes: int
    existing_pods: int
    pods: int
    scheduled: int
    unschedulable: int
    seconds: float
    pods_per_second: float
    cycle_ms_p50: float
    cycle_ms_p99: float
    breakdown: dict[str, dict[str, float]] | None = None
    breakdown_overhead_ms_per_pod: float | None = None
    patches: list[str] = field(default_factory=list)
    placements: list[str] = field(default_factory=list, repr=False)
    gc_ms_per_pod: float = 0.0
    gc_collections: dict[int, int] = field(default_factory=dict)

    def line(self) -> str:
        tag = "+".join(self.patches) if self.patches else "baseline"
        return (
            f"[{tag}] "
            f"{self.workload:<26} {self.nodes:>5} nodes {self.existing_pods:>6} existing "
            f"{self.pods:>5} pods: {self.pods_per_second:8.1f} pods/s  "
            f"cycle p50 {self.cycle_ms_p50:7.3f} ms  p99 {self.cycle_ms_p99:7.3f} ms  "
            f"gc {self.gc_ms_per_pod:6.3f} ms/pod"
            + (f"  ({self.unschedulable} unschedulable)" if self.unschedulable else "")
        )


def run_cycles(env: Env, placements: list[str] | None = None) -> tuple[int, int, list[float]]:
    """Schedule every pod of env once; returns (scheduled, unschedulable, per-pod seconds)."""
    fwk, algorithm, snapshot, cache = env.fwk, env.algorithm, env.snapshot, env.cache
    clock = time.perf_counter
    per_pod: list[float] = []
    scheduled = unschedulable = 0
    for number, pod in enumerate(env.pods, start=1):
        t0 = clock()
        state = CycleState()
        snapshot.update()
        try:
            # the cycle's number, as the daemon passes it (OpportunisticBatching)
            result = algorithm.schedule_pod(fwk, state, pod, snapshot, cycle=number)
        except FitError:
            unschedulable += 1
            per_pod.append(clock() - t0)
            if placements is not None:
                placements.append("")
            continue
        host = result.suggested_host
        assumed = pod.with_node(host)
        cache.assume(assumed)
        if fwk.run_reserve(state, assumed, host) is None:
            fwk.run_permit(state, assumed, host)
        per_pod.append(clock() - t0)
        scheduled += 1
        if placements is not None:
            placements.append(host)
    return scheduled, unschedulable, per_pod


def _pct(values: Sequence[float], p: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(len(s) * p / 100 + 0.999999) - 1))]


class GcTimer:
    """Time spent in the garbage collector while it is installed, per generation."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.collections: dict[int, int] = defaultdict(int)
        self._t0 = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._t0
            self.collections[info["generation"]] += 1

    def close(self) -> None:
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)


class PluginTimer:
    """Wraps every plugin method of a framework with a perf_counter timer."""

    def __init__(self, fwk: Framework) -> None:
        self.totals: dict[tuple[str, str], float] = defaultdict(float)
        self.calls: dict[tuple[str, str], int] = defaultdict(int)
        for plugin in fwk.plugins.values():
            for method in PLUGIN_METHODS:
                fn = getattr(plugin, method, None)
                if callable(fn):
                    setattr(plugin, method, self._wrap(plugin.name, method, fn))
        fwk.refresh_plans()  # the framework caches bound methods for its hot loops

    def _wrap(self, plugin: str, method: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        key = (plugin, method)
        totals, calls, clock = self.totals, self.calls, time.perf_counter

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                totals[key] += clock() - t0
                calls[key] += 1

        return timed

    def table(self, pods: int) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for (plugin, method), seconds in sorted(self.totals.items(), key=lambda kv: -kv[1]):
            out[f"{plugin}.{method}"] = {
                "ms_per_pod": seconds * 1000 / max(pods, 1),
                "calls_per_pod": self.calls[(plugin, method)] / max(pods, 1),
                "us_per_call": seconds * 1e6 / max(self.calls[(plugin, method)], 1),
            }
        return out


def measure(
    name: str,
    nodes: int,
    pods: int,
    *,
    existing_per_node: int,
    breakdown: bool,
    seed: int = 1,
    profiler: Callable[[Callable[[], Any]], Any] | None = None,
) -> CycleResult:
    env = build_env(name, nodes, pods, existing_per_node=existing_per_node, seed=seed)
    gc.collect()
    if "gc" in APPLIED:
        gc.freeze()  # what the gc patch does once the daemon's informers synced
    gc_timer = GcTimer()
    t0 = time.perf_counter()
    placements: list[str] = []
    if profiler is not None:
        box: list[tuple[int, int, list[float]]] = []
        profiler(lambda: box.append(run_cycles(env, placements)))
        scheduled, unsched, per_pod = box[0]
    else:
        scheduled, unsched, per_pod = run_cycles(env, placements)
    seconds = time.perf_counter() - t0
    gc_timer.close()
    if "gc" in APPLIED:
        gc.unfreeze()
    result = CycleResult(
        workload=name,
        nodes=nodes,
        existing_pods=env.existing,
        pods=pods,
        scheduled=scheduled,
        unschedulable=unsched,
        seconds=seconds,
        pods_per_second=pods / seconds if seconds > 0 else 0.0,
        cycle_ms_p50=_pct(per_pod, 50) * 1000,
        cycle_ms_p99=_pct(per_pod, 99) * 1000,
        patches=list(APPLIED),
        placements=placements,
        gc_ms_per_pod=gc_timer.seconds * 1000 / max(pods, 1),
        gc_collections=dict(gc_timer.collections),
    )
    if breakdown:
        env2 = build_env(name, nodes, pods, existing_per_node=existing_per_node, seed=seed)
        timer = PluginTimer(env2.fwk)
        gc.collect()
        t1 = time.perf_counter()
        run_cycles(env2)
        instrumented = time.perf_counter() - t1
        result.breakdown = timer.table(pods)
        in_plugins = sum(timer.totals.values())
        result.breakdown_overhead_ms_per_pod = (instrumented - in_plugins) * 1000 / max(pods, 1)
    return result


def print_breakdown(r: CycleResult, top: int = 25) -> None:
    if not r.breakdown:
        return
    print(f"  per plugin ({r.workload}, {r.nodes} nodes; timers included):")
    for key, row in list(r.breakdown.items())[:top]:
        print(
            f"    {key:<44} {row['ms_per_pod']:8.3f} ms/pod "
            f"{row['calls_per_pod']:8.1f} calls/pod {row['us_per_call']:7.2f} us/call"
        )
    print(
        f"    {'(outside plugins: framework + algorithm)':<44} "
        f"{r.breakdown_overhead_ms_per_pod or 0.0:8.3f} ms/pod"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.cycle", description=__doc__.split("\n")[0])
    p.add_argument("--nodes", default="100,1000,5000", help="comma-separated node counts")
    p.add_argument(
        "--workloads",
        nargs="+",
        default=list(CYCLE_WORKLOADS),
        choices=CYCLE_WORKLOADS,
        metavar="NAME",
        help=f"of {', '.join(CYCLE_WORKLOADS)}",
    )
    p.add_argument("--pods", type=int, default=500, help="measured pods per run")
    p.add_argument("--existing-per-node", type=int, default=2)
    p.add_argument("--breakdown", action="store_true", help="time every plugin method")
    p.add_argument("--pyinstrument", metavar="FILE.html", help="profile the runs (pyinstrument)")
    p.add_argument("--cprofile", type=int, metavar="N", help="print cProfile's top N functions")
    p.add_argument("--json", metavar="FILE", help="write the results as JSON")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--patches",
        metavar="A,B",
        help="bench.experiments patches: run unpatched first, then patched, and compare",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="with --patches: count the pods placed differently from the unpatched run",
    )
    p.add_argument(
        "--base-patches", metavar="A,B", help="patches applied to both sides of --patches"
    )
    p.add_argument("--repeat", type=int, default=1, help="runs per case (the best one counts)")
    args = p.parse_args(argv)
    node_counts = [int(x) for x in str(args.nodes).split(",") if x]

    profiler: Callable[[Callable[[], Any]], Any] | None = None
    finish: Callable[[], None] = lambda: None  # noqa: E731
    if args.pyinstrument:
        from pyinstrument import Profiler

        prof = Profiler(interval=0.0005)

        def run_pyinstrument(fn: Callable[[], Any]) -> Any:
            prof.start()
            try:
                return fn()
            finally:
                prof.stop()

        def write_pyinstrument() -> None:
            Path(args.pyinstrument).write_text(prof.output_html())
            print(prof.output_text(unicode=False, color=False, show_all=False)[:6000])
            print(f"pyinstrument profile: {args.pyinstrument}")

        profiler, finish = run_pyinstrument, write_pyinstrument
    elif args.cprofile:
        cprof = cProfile.Profile()

        def run_cprofile(fn: Callable[[], Any]) -> Any:
            cprof.enable()
            try:
                return fn()
            finally:
                cprof.disable()

        def print_cprofile() -> None:
            out = io.StringIO()
            pstats.Stats(cprof, stream=out).sort_stats("tottime").print_stats(args.cprofile)
            print(out.getvalue())

        profiler, finish = run_cprofile, print_cprofile

    def run_all() -> list[CycleResult]:
        out: list[CycleResult] = []
        for name in args.workloads:
            for n in node_counts:
                runs = [
                    measure(
                        name,
                        n,
                        args.pods,
                        existing_per_node=args.existing_per_node,
                        breakdown=args.breakdown,
                        seed=args.seed,
                        profiler=profiler,
                    )
                    for _ in range(max(1, args.repeat))
                ]
                r = max(runs, key=lambda x: x.pods_per_second)
                out.append(r)
                print(r.line(), flush=True)
                print_breakdown(r)
        return out

    patches = [x for x in (args.patches or "").split(",") if x]
    apply([x for x in (args.base_patches or "").split(",") if x])
    results = run_all()
    if patches:
        baseline = results
        apply(patches)
        results = run_all()
        print()
        for before, after in zip(baseline, results, strict=True):
            differ = sum(
                1 for a, b in zip(before.placements, after.placements, strict=True) if a != b
            )
            print(
                f"{after.workload:<26} {after.nodes:>5} nodes: "
                f"{before.pods_per_second:8.1f} -> {after.pods_per_second:8.1f} pods/s "
                f"({after.pods_per_second / before.pods_per_second:5.2f}x)"
                + (f", {differ} of {after.pods} placed differently" if args.check else "")
            )
        results = baseline + results
    finish()
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(
            json.dumps(
                {
                    "python": sys.version.split()[0],
                    "existing_per_node": args.existing_per_node,
                    "results": [
                        {k: v for k, v in r.__dict__.items() if k != "placements"} for r in results
                    ],
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
