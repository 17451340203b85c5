"""kscheduler and kube-scheduler side by side, scheduler_perf's way.

    python -m bench.run --size quick                       # every workload, ~10 minutes
    python -m bench.run --size 5000 --workloads SchedulingBasic
    python -m bench.run --size quick --workloads SchedulingBasic --throttle unthrottled \\
        --schedulers kscheduler --kscheduler-profiler py-spy
    python -m bench.run --size 5000 --workloads SchedulingBasic --throttle unthrottled \\
        --kscheduler-patches ALL   # bench.experiments proposals, side by side

One harness control plane (etcd + kube-apiserver) serves the whole run. For
each workload the nodes are created once; then, for each client setting
(unthrottled: qps/burst 5000/5000 as scheduler_perf; default: upstream's
50/100) and for each scheduler, one after the other:

1. the workload's init pods are created, already bound (see bench.workloads);
2. the scheduler starts as its own process, as the harness's
   system:kube-scheduler identity, and /readyz (informers synced) is awaited;
3. a pod watch on the measured namespace starts (fieldSelector
   spec.nodeName!=, so it reports each pod once, when it gets bound), churn
   starts where the workload has it, and the measured pods are created in bulk
   while the scheduler runs, each one's creation time taken client side when
   its POST returns;
4. every second the count of bound pods is sampled until all are bound (or
   nothing was bound for ``--stall-timeout`` seconds). The throughput samples
   follow scheduler_perf's throughputCollector: sampling starts at the first
   bound pod, the first sample is skipped, intervals that bind nothing are
   folded into the next one; the last, partial interval counts (up to the
   last bind) when it lasted at least 0.5 s; Average and Perc50/90/99 over
   the samples. Because sampling
   only starts at the first bind, "overall" (measured pods / (last bind -
   first pod created)) is reported next to it: it also charges a scheduler
   for a slow start;
5. the scheduler's CPU seconds (utime+stime from /proc/<pid>/stat, over the
   measured phase and in total) and peak RSS (VmHWM) are read, it is stopped,
   and every pod of the workload is deleted.

The results go to ``<out>/<timestamp>.json`` and ``<out>/<timestamp>.png``
(bound pods over time, both schedulers per panel).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import math
import os
import platform
import signal
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import yaml

from bench.experiments import IN_PROCESS_ONLY, PATCHES
from bench.pyspy import Recorder
from bench.pyspy import summarize as summarize_profile
from bench.workloads import SIZES, WORKLOAD_NAMES, Workload, workloads
from kscheduler.controlplane.binaries import K8S_VERSION
from kscheduler.controlplane.builders import (
    create_namespace,
    create_nodes,
    create_pods,
    make_priority_class,
    pods_path,
    run_bounded,
)
from kscheduler.controlplane.harness import LOOPBACK, ControlPlane, ManagedProcess, free_ports
from kscheduler.controlplane.reference import ReferenceScheduler
from kscheduler.controlplane.rest import ApiError, RestClient

KUBE_SCHEDULER = "kube-scheduler"
KSCHEDULER = "kscheduler"
#: kscheduler with the bench.experiments patches of --kscheduler-patches applied
#: kscheduler with bench.experiments patches: "kscheduler+<patch>,<patch>"
PATCHED_PREFIX = "kscheduler+"
SCHEDULERS = (KUBE_SCHEDULER, KSCHEDULER)
SCHEDULER_NAMES = {KUBE_SCHEDULER: "bench-kube-scheduler", KSCHEDULER: "bench-kscheduler"}


def patched_kind(patches: str) -> str:
    return PATCHED_PREFIX + patches


def is_patched(kind: str) -> bool:
    return kind.startswith(PATCHED_PREFIX)


def kind_patches(kind: str) -> list[str]:
    return [p for p in kind[len(PATCHED_PREFIX) :].split(",") if p] if is_patched(kind) else []


def scheduler_name(kind: str) -> str:
    """The spec.schedulerName (and profile) of a scheduler under test."""
    if kind in SCHEDULER_NAMES:
        return SCHEDULER_NAMES[kind]
    digest = hashlib.sha1(kind.encode()).hexdigest()[:8]
    return f"bench-kscheduler-{digest}"


#: name -> (qps, burst)
THROTTLES: dict[str, tuple[float, int]] = {
    "unthrottled": (5000.0, 5000),
    "default": (50.0, 100),
}
CREATE_CONCURRENCY = 48
CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


# --------------------------------------------------------------------------- /proc


def cpu_seconds(pid: int | None) -> float | None:
    """utime + stime of a live process, in seconds."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode()
    except OSError:
        return None
    fields = data[data.rindex(")") + 2 :].split()
    # fields[0] is field 3 (state): utime is field 14, stime field 15
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def memory_kib(pid: int | None) -> dict[str, int]:
    """VmHWM (peak RSS) and VmRSS in KiB."""
    out: dict[str, int] = {}
    if pid is None:
        return out
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(("VmHWM:", "VmRSS:")):
                    key, value = line.split(":", 1)
                    out[key] = int(value.split()[0])
    except OSError:
        pass
    return out


# --------------------------------------------------------------------------- statistics


def percentile_index(n: int, p: int) -> int:
    """scheduler_perf's index: ceil(n * p / 100) - 1."""
    return max(0, math.ceil(n * p / 100) - 1)


def summarize_throughput(samples: Sequence[float]) -> dict[str, float]:
    if not samples:
        return {}
    s = sorted(samples)
    return {
        "Average": sum(s) / len(s),
        "Perc50": s[percentile_index(len(s), 50)],
        "Perc90": s[percentile_index(len(s), 90)],
        "Perc95": s[percentile_index(len(s), 95)],
        "Perc99": s[percentile_index(len(s), 99)],
    }


def summarize_latency(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {}
    s = sorted(values)
    return {
        "p50_ms": s[percentile_index(len(s), 50)] * 1000,
        "p90_ms": s[percentile_index(len(s), 90)] * 1000,
        "p99_ms": s[percentile_index(len(s), 99)] * 1000,
        "max_ms": s[-1] * 1000,
        "mean_ms": sum(s) / len(s) * 1000,
    }


class ThroughputCollector:
    """scheduler_perf's throughputCollector over a count that only grows."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self._started = False
        self._last_count = 0
        self._last_time = 0.0
        self._skipped = 0

    def tick(self, now: float, scheduled: int) -> None:
        if scheduled == 0:
            return
        if not self._started:
            # the first sample is skipped: sampling and pod creation start independently
            self._started = True
            self._last_count, self._last_time = scheduled, now
            return
        new = scheduled - self._last_count
        if new == 0:
            self._skipped += 1
            return
        rate = new / (now - self._last_time)
        self.samples.extend([rate] * (self._skipped + 1))
        self._last_count, self._last_time, self._skipped = scheduled, now, 0

    def finish(self, last_bound_at: float, scheduled: int) -> None:
        """The partial interval that bound the last pods, up to the last bind.

        scheduler_perf's collector is cancelled by a poll that runs on its own
        1 s timer, so whether this tail is counted is left to chance there.
        Here it counts, over its real length, when that is at least half a
        sample interval (a shorter one would be an outlier either way).
        """
        if not self._started or scheduled <= self._last_count:
            return
        elapsed = last_bound_at - self._last_time
        if elapsed < 0.5 and self.samples:
            return
        if elapsed > 0:
            self.samples.append((scheduled - self._last_count) / elapsed)


# --------------------------------------------------------------------------- pod watch


class BindWatch:
    """Counts the pods of one namespace as they get a nodeName, with the time each did."""

    def __init__(self, api: RestClient, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        self.bound_at: dict[str, float] = {}
        self.progress = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._rv = ""
        self.restarts = 0

    @property
    def count(self) -> int:
        return len(self.bound_at)

    async def start(self) -> None:
        page = await self.api.get(pods_path(self.namespace), {"limit": 1})
        self._rv = str(page.get("metadata", {}).get("resourceVersion", ""))
        self._task = asyncio.create_task(self._run(), name=f"watch {self.namespace}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    def _seen(self, obj: dict[str, Any], now: float) -> None:
        meta = obj.get("metadata") or {}
        rv = meta.get("resourceVersion")
        if rv:
            self._rv = str(rv)
        if (obj.get("spec") or {}).get("nodeName"):
            name = str(meta.get("name", ""))
            if name not in self.bound_at:
                self.bound_at[name] = now
                self.progress.set()

    async def _relist(self) -> None:
        items = await self.api.list(pods_path(self.namespace))
        now = time.monotonic()
        for obj in items:
            self._seen(obj, now)
        page = await self.api.get(pods_path(self.namespace), {"limit": 1})
        self._rv = str(page.get("metadata", {}).get("resourceVersion", ""))

    async def _run(self) -> None:
        url = self.api.base_url + pods_path(self.namespace)
        timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
        while True:
            params = {
                "watch": "true",
                "resourceVersion": self._rv,
                "allowWatchBookmarks": "true",
                "fieldSelector": "spec.nodeName!=",
            }
            try:
                async with self.api.session.get(url, params=params, timeout=timeout) as resp:
                    if resp.status != 200:
                        raise ApiError("WATCH", url, resp.status, await resp.text())
                    buf = b""
                    async for chunk in resp.content.iter_any():
                        buf += chunk
                        while True:
                            nl = buf.find(b"\n")
                            if nl < 0:
                                break
                            line, buf = buf[:nl], buf[nl + 1 :]
                            if not line.strip():
                                continue
                            event = orjson.loads(line)
                            kind = event.get("type")
                            obj = event.get("object") or {}
                            if kind == "ERROR":
                                raise ApiError("WATCH", url, int(obj.get("code") or 500), obj)
                            if kind in ("ADDED", "MODIFIED"):
                                self._seen(obj, time.monotonic())
                            elif kind == "BOOKMARK":
                                rv = (obj.get("metadata") or {}).get("resourceVersion")
                                if rv:
                                    self._rv = str(rv)
            except asyncio.CancelledError:
                raise
            except (ApiError, aiohttp.ClientError, ValueError):
                self.restarts += 1
                await asyncio.sleep(0.2)
                with contextlib.suppress(ApiError, aiohttp.ClientError):
                    await self._relist()


# --------------------------------------------------------------------------- schedulers


class SchedulerProcess:
    """One scheduler under test, started and stopped as a process of its own."""

    kind: str

    @property
    def pid(self) -> int | None:
        raise NotImplementedError

    async def start(self) -> None:
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError

    def alive(self) -> bool:
        raise NotImplementedError

    def log_tail(self) -> str:
        raise NotImplementedError


class KubeSchedulerProcess(SchedulerProcess):
    kind = KUBE_SCHEDULER

    def __init__(self, cp: ControlPlane, qps: float, burst: int, verbosity: int) -> None:
        self.ref = ReferenceScheduler.for_control_plane(
            cp,
            scheduler_name=SCHEDULER_NAMES[KUBE_SCHEDULER],
            qps=qps,
            burst=burst,
            verbosity=verbosity,
        )

    @property
    def pid(self) -> int | None:
        return self.ref.process.pid if self.ref.is_running() else None

    async def start(self) -> None:
        await self.ref.astart(ready_within=180.0)

    async def stop(self) -> None:
        await self.ref.astop()

    def alive(self) -> bool:
        return self.ref.is_running()

    def log_tail(self) -> str:
        return self.ref.log_tail()


class KschedulerProcess(SchedulerProcess):
    kind = KSCHEDULER

    def __init__(
        self,
        cp: ControlPlane,
        kind: str,
        qps: float,
        burst: int,
        *,
        workdir: Path,
        profiler: str | None = None,
        profile_out: Path | None = None,
        extra_args: Sequence[str] = (),
        patches: Sequence[str] = (),
    ) -> None:
        self.kind = kind
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.config_path = workdir / "kscheduler.yaml"
        config = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "leaderElection": {"leaderElect": False},
            "clientConnection": {"qps": qps, "burst": burst},
            "profiles": [{"schedulerName": scheduler_name(kind)}],
        }
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        self.port = free_ports(1)[0]
        prefix = [sys.executable]
        module = ["-m", "kscheduler"]
        if patches:
            module = ["-m", "bench.experiments", "--patches", ",".join(patches), "--"]
        if profiler == "pyinstrument":
            assert profile_out is not None
            prefix += ["-m", "pyinstrument", "-r", "html", "-o", str(profile_out)]
        elif profiler == "cprofile":
            assert profile_out is not None
            prefix += ["-m", "cProfile", "-o", str(profile_out)]
        argv = [
            *prefix,
            *module,
            "--config",
            str(self.config_path),
            "--kubeconfig",
            str(cp.scheduler_kubeconfig),
            "--leader-elect",
            "false",
            "--bind-address",
            LOOPBACK,
            "--secure-port",
            "0",
            "--insecure-port",
            str(self.port),
            "--shutdown-grace",
            "5",
            "--log-format",
            "json",
            *extra_args,
        ]
        env = dict(os.environ)
        env.setdefault("PYTHONUNBUFFERED", "1")
        # bench.experiments must be importable from the scheduler's working directory
        repo = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (repo, env.get("PYTHONPATH")) if p)
        self.proc = ManagedProcess(
            "kscheduler", argv, workdir / "kscheduler.log", env=env, cwd=workdir
        )

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc.alive() else None

    def _ready(self) -> bool:
        try:
            url = f"http://{LOOPBACK}:{self.port}/readyz"
            with urllib.request.urlopen(url, timeout=2.0) as resp:
                return bool(resp.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    async def start(self) -> None:
        self.proc.start()
        deadline = time.monotonic() + 180.0
        while not await asyncio.to_thread(self._ready):
            if not self.proc.alive():
                raise RuntimeError(
                    f"kscheduler exited with {self.proc.returncode}:\n{self.proc.log_tail()}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(f"kscheduler not ready after 180s:\n{self.proc.log_tail()}")
            await asyncio.sleep(0.1)

    async def stop(self) -> None:
        await asyncio.to_thread(self.proc.stop, 120.0)

    def alive(self) -> bool:
        return self.proc.alive()

    def log_tail(self) -> str:
        return self.proc.log_tail()


# --------------------------------------------------------------------------- one run


@dataclass
class RunResult:
    workload: str
    scheduler: str
    throttle: str
    qps: float
    burst: int
    nodes: int
    init_pods: int
    measured_pods: int
    bound: int = 0
    complete: bool = False
    error: str = ""
    throughput: dict[str, float] = field(default_factory=dict)
    throughput_samples: list[float] = field(default_factory=list)
    #: measured pods / (last bind - first measured pod created)
    overall_pods_per_second: float = 0.0
    create_pods_per_second: float = 0.0
    latency: dict[str, float] = field(default_factory=dict)
    cpu_seconds_measured: float | None = None
    cpu_seconds_total: float | None = None
    peak_rss_mib: float | None = None
    rss_end_mib: float | None = None
    apiserver_cpu_seconds: float | None = None
    etcd_cpu_seconds: float | None = None
    startup_seconds: float = 0.0
    measure_seconds: float = 0.0
    churn_pods: int = 0
    watch_restarts: int = 0
    #: (seconds since the first measured pod was created, bound pods)
    curve: list[tuple[float, int]] = field(default_factory=list)
    #: (seconds, cumulative scheduler CPU seconds in the measured phase, RSS MiB)
    resources: list[tuple[float, float, float]] = field(default_factory=list)


@dataclass
class Options:
    size: str
    out: Path
    stall_timeout: float
    max_seconds: float
    kscheduler_profiler: str | None
    kube_scheduler_verbosity: int
    kscheduler_args: list[str]


class Bench:
    def __init__(self, cp: ControlPlane, admin: RestClient, opts: Options, stamp: str) -> None:
        self.cp = cp
        self.admin = admin
        self.opts = opts
        self.stamp = stamp

    async def setup_workload(self, wl: Workload) -> None:
        for name, value in wl.priority_classes:
            try:
                await self.admin.post(
                    "/apis/scheduling.k8s.io/v1/priorityclasses", make_priority_class(name, value)
                )
            except ApiError as exc:
                if exc.status != 409:
                    raise
        for ns in wl.namespaces():
            await create_namespace(self.admin, ns)
        t0 = time.monotonic()
        await create_nodes(self.admin, wl.make_nodes(), concurrency=CREATE_CONCURRENCY)
        log(f"{wl.name}: {wl.nodes} nodes created in {time.monotonic() - t0:.1f}s")

    async def teardown_workload(self, wl: Workload) -> None:
        await self.delete_pods(wl)
        await self.admin.delete("/api/v1/nodes")
        await self._wait_empty("/api/v1/nodes")

    async def delete_pods(self, wl: Workload) -> None:
        for ns in wl.namespaces():
            await self.admin.delete(pods_path(ns), {"gracePeriodSeconds": 0})
        for ns in wl.namespaces():
            await self._wait_empty(pods_path(ns))
            with contextlib.suppress(ApiError):
                await self.admin.delete(f"/api/v1/namespaces/{ns}/events")
            with contextlib.suppress(ApiError):
                await self.admin.delete(f"/apis/events.k8s.io/v1/namespaces/{ns}/events")

    async def _wait_empty(self, path: str, within: float = 300.0) -> None:
        deadline = time.monotonic() + within
        while True:
            page = await self.admin.get(path, {"limit": 1})
            if not page.get("items"):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{path} still not empty after {within}s")
            await asyncio.sleep(0.25)

    def _scheduler(self, kind: str, throttle: str, wl: Workload) -> SchedulerProcess:
        qps, burst = THROTTLES[throttle]
        if kind == KUBE_SCHEDULER:
            return KubeSchedulerProcess(self.cp, qps, burst, self.opts.kube_scheduler_verbosity)
        profile_out = None
        in_process = self.opts.kscheduler_profiler in ("pyinstrument", "cprofile")
        if in_process:
            ext = "html" if self.opts.kscheduler_profiler == "pyinstrument" else "prof"
            profile_out = self.profile_path(wl, throttle, ext, kind)
        return KschedulerProcess(
            self.cp,
            kind,
            qps,
            burst,
            workdir=self.cp.workdir / "kscheduler-bench",
            profiler=self.opts.kscheduler_profiler if in_process else None,
            profile_out=profile_out,
            extra_args=self.opts.kscheduler_args,
            patches=kind_patches(kind),
        )

    def profile_path(self, wl: Workload, throttle: str, ext: str, kind: str) -> Path:
        tag = "kscheduler-" + "-".join(kind_patches(kind)) if is_patched(kind) else "kscheduler"
        return (self.opts.out / f"{self.stamp}-{tag}-{wl.name}-{throttle}.{ext}").resolve()

    async def run_one(self, wl: Workload, kind: str, throttle: str) -> RunResult:
        qps, burst = THROTTLES[throttle]
        name = scheduler_name(kind)
        res = RunResult(
            workload=wl.name,
            scheduler=kind,
            throttle=throttle,
            qps=qps,
            burst=burst,
            nodes=wl.nodes,
            init_pods=sum(g.count for g in wl.init),
            measured_pods=wl.measure.count,
        )
        init = wl.init_pods(name)
        if init:
            await create_pods(self.admin, init, concurrency=CREATE_CONCURRENCY)
        sched = self._scheduler(kind, throttle, wl)
        t_start = time.monotonic()
        try:
            await sched.start()
        except BaseException:
            await sched.stop()
            raise
        res.startup_seconds = time.monotonic() - t_start
        try:
            await self._measure(wl, sched, name, res)
        finally:
            mem = memory_kib(sched.pid)
            if "VmHWM" in mem:
                res.peak_rss_mib = mem["VmHWM"] / 1024
                res.rss_end_mib = mem["VmRSS"] / 1024
            total = cpu_seconds(sched.pid)
            res.cpu_seconds_total = total
            if not sched.alive():
                res.error = res.error or f"{kind} died:\n{sched.log_tail()}"
            await sched.stop()
            await self.delete_pods(wl)
        return res

    async def _measure(
        self, wl: Workload, sched: SchedulerProcess, name: str, res: RunResult
    ) -> None:
        ns = wl.namespace(wl.measure.namespace)
        pods = wl.measured_pods(name)
        total = len(pods)
        watch = BindWatch(self.admin, ns)
        await watch.start()
        churn_task: asyncio.Task[int] | None = None
        if wl.churn is not None:
            churn_task = asyncio.create_task(self._churn(wl, name))
        created_at: dict[str, float] = {}
        pid = sched.pid
        api_pid = self.cp.apiserver_process.pid
        etcd_pid = self.cp.etcd_process.pid
        cpu0 = cpu_seconds(pid) or 0.0
        api0 = cpu_seconds(api_pid)
        etcd0 = cpu_seconds(etcd_pid)
        collector = ThroughputCollector()

        async def create(pod: dict[str, Any]) -> None:
            await self.admin.post(pods_path(ns), pod)
            created_at[pod["metadata"]["name"]] = time.monotonic()

        spy: Recorder | None = None
        if self.opts.kscheduler_profiler == "py-spy" and sched.kind != KUBE_SCHEDULER and pid:
            spy = Recorder(pid, self.profile_path(wl, res.throttle, "txt", sched.kind))
            await asyncio.sleep(0.5)  # let it attach
        t0 = time.monotonic()
        creator = asyncio.create_task(run_bounded(pods, create, concurrency=CREATE_CONCURRENCY))
        last_progress = t0
        last_count = 0
        tick = 0
        try:
            while True:
                tick += 1
                await asyncio.sleep(max(0.0, t0 + tick - time.monotonic()))
                now = time.monotonic()
                count = watch.count
                collector_now = now
                if count >= total:
                    collector.finish(max(watch.bound_at.values()), count)
                    break
                collector.tick(collector_now, count)
                cpu = (cpu_seconds(pid) or cpu0) - cpu0
                rss = memory_kib(pid).get("VmRSS", 0) / 1024
                res.resources.append((now - t0, cpu, rss))
                if count != last_count:
                    last_count, last_progress = count, now
                if creator.done() and creator.exception() is not None:
                    raise creator.exception()  # type: ignore[misc]
                if not sched.alive():
                    res.error = f"{sched.kind} exited during the run"
                    break
                stall = max(self.opts.stall_timeout, wl.stall_timeout)
                if creator.done() and now - last_progress > stall:
                    res.error = f"stalled: {count}/{total} bound, none for {stall:.0f}s"
                    break
                if now - t0 > self.opts.max_seconds:
                    res.error = f"timed out after {self.opts.max_seconds:.0f}s: {count}/{total}"
                    break
            await creator
        finally:
            if not creator.done():
                creator.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await creator
            if churn_task is not None:
                churn_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    res.churn_pods = await churn_task
            await watch.stop()
            if spy is not None:
                await asyncio.to_thread(spy.stop)
                report = summarize_profile(spy.out, top=30)
                spy.out.with_suffix(".summary.txt").write_text(report + "\n")
                log(f"py-spy profile: {spy.out} (summary: {spy.out.with_suffix('.summary.txt')})")
        end = time.monotonic()
        res.measure_seconds = end - t0
        res.cpu_seconds_measured = (cpu_seconds(pid) or cpu0) - cpu0
        if api0 is not None:
            res.apiserver_cpu_seconds = (cpu_seconds(api_pid) or api0) - api0
        if etcd0 is not None:
            res.etcd_cpu_seconds = (cpu_seconds(etcd_pid) or etcd0) - etcd0
        res.bound = watch.count
        res.complete = watch.count >= total
        res.watch_restarts = watch.restarts
        res.throughput_samples = collector.samples
        res.throughput = summarize_throughput(collector.samples)
        first_created = min(created_at.values(), default=t0)
        if created_at:
            res.create_pods_per_second = len(created_at) / max(max(created_at.values()) - t0, 1e-9)
        binds = sorted(watch.bound_at.values())
        if binds:
            res.overall_pods_per_second = len(binds) / max(binds[-1] - first_created, 1e-9)
        lat = [
            max(0.0, bound - created_at[n])
            for n, bound in watch.bound_at.items()
            if n in created_at
        ]
        res.latency = summarize_latency(lat)
        res.curve = [(0.0, 0)] + [(t - first_created, i + 1) for i, t in enumerate(binds)]
        if not res.throughput and res.complete and binds:
            # too short for two 1 s samples: fall back to the overall rate
            res.throughput = {
                k: res.overall_pods_per_second
                for k in ("Average", "Perc50", "Perc90", "Perc95", "Perc99")
            }

    async def _churn(self, wl: Workload, scheduler: str) -> int:
        assert wl.churn is not None
        ns = wl.namespace(wl.churn.namespace)
        n = 0
        try:
            while True:
                pod = wl.churn.template(f"churn-{n}", ns, scheduler)
                with contextlib.suppress(ApiError):
                    await self.admin.post(pods_path(ns), pod)
                n += 1
                await asyncio.sleep(wl.churn.interval)
        except asyncio.CancelledError:
            return n


# --------------------------------------------------------------------------- reporting


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


def summarize(results: list[RunResult]) -> list[dict[str, Any]]:
    """One row per (workload, throttle) with both schedulers and kscheduler / kube-scheduler."""
    rows: list[dict[str, Any]] = []
    keys: list[tuple[str, str]] = []
    for r in results:
        if (r.workload, r.throttle) not in keys:
            keys.append((r.workload, r.throttle))
    for wl, th in keys:
        by = {r.scheduler: r for r in results if r.workload == wl and r.throttle == th}
        ref = by.get(KUBE_SCHEDULER)
        row: dict[str, Any] = {"workload": wl, "throttle": th, "schedulers": {}, "ratios": {}}
        for label, one in by.items():
            row["schedulers"][label] = {
                "average": one.throughput.get("Average"),
                "p50": one.throughput.get("Perc50"),
                "p90": one.throughput.get("Perc90"),
                "p99": one.throughput.get("Perc99"),
                "overall": one.overall_pods_per_second,
                "latency_p50_ms": one.latency.get("p50_ms"),
                "latency_p99_ms": one.latency.get("p99_ms"),
                "cpu_seconds": one.cpu_seconds_measured,
                "peak_rss_mib": one.peak_rss_mib,
                "bound": one.bound,
                "of": one.measured_pods,
                "error": one.error,
            }
        for label, ks in by.items():
            if ref is None or label == KUBE_SCHEDULER:
                continue
            row["ratios"][label] = {
                "average": _ratio(ks.throughput.get("Average"), ref.throughput.get("Average")),
                "overall": _ratio(ks.overall_pods_per_second, ref.overall_pods_per_second),
                "latency_p50": _ratio(ks.latency.get("p50_ms"), ref.latency.get("p50_ms")),
                "latency_p99": _ratio(ks.latency.get("p99_ms"), ref.latency.get("p99_ms")),
                "cpu_seconds": _ratio(ks.cpu_seconds_measured, ref.cpu_seconds_measured),
                "peak_rss": _ratio(ks.peak_rss_mib, ref.peak_rss_mib),
            }
        rows.append(row)
    return rows


def _f(v: Any, fmt: str = "{:.1f}") -> str:
    return "-" if v is None else fmt.format(v)


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        f"{'workload':<26} {'client':<11} {'sched':<24} {'avg/s':>7} {'p50':>6} {'p90':>6} "
        f"{'p99':>6} {'all/s':>7} {'lat50ms':>8} {'lat99ms':>8} {'cpu s':>6} {'rssMiB':>7} "
        f"{'bound':>11}"
    )
    lines = [head, "-" * len(head)]
    for row in rows:
        for label, d in row["schedulers"].items():
            lines.append(
                f"{row['workload']:<26} {row['throttle']:<11} {label[:24]:<24} "
                f"{_f(d['average']):>7} {_f(d['p50']):>6} {_f(d['p90']):>6} {_f(d['p99']):>6} "
                f"{_f(d['overall']):>7} {_f(d['latency_p50_ms'], '{:.0f}'):>8} "
                f"{_f(d['latency_p99_ms'], '{:.0f}'):>8} {_f(d['cpu_seconds']):>6} "
                f"{_f(d['peak_rss_mib'], '{:.0f}'):>7} {d['bound']:>5}/{d['of']:<5}"
                + (f"  ! {d['error'].splitlines()[0][:60]}" if d["error"] else "")
            )
        for label, ratio in row["ratios"].items():
            tag = (
                "ks / kube" if label == KSCHEDULER else f"{label[len(PATCHED_PREFIX) - 1 :]} / kube"
            )
            x = "{:.2f}x"
            lines.append(
                f"{'':<26} {'':<11} {tag[:24]:<24} {_f(ratio['average'], x):>7} "
                f"{'':>6} {'':>6} {'':>6} {_f(ratio['overall'], x):>7} "
                f"{_f(ratio['latency_p50'], x):>8} {_f(ratio['latency_p99'], x):>8} "
                f"{_f(ratio['cpu_seconds'], x):>6} {_f(ratio['peak_rss'], x):>7}"
            )
    return "\n".join(lines)


def plot(results: list[RunResult], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels: list[tuple[str, str]] = []
    for r in results:
        if (r.workload, r.throttle) not in panels:
            panels.append((r.workload, r.throttle))
    if not panels:
        return
    throttles = [t for t in THROTTLES if any(p[1] == t for p in panels)]
    wls = [w for w in dict.fromkeys(p[0] for p in panels)]
    fig, axes = plt.subplots(
        len(wls), len(throttles), figsize=(6.5 * len(throttles), 3.2 * len(wls)), squeeze=False
    )
    palette = ["tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:olive"]
    colors = {KUBE_SCHEDULER: "tab:blue", KSCHEDULER: "tab:orange"}
    for r in results:
        if r.scheduler not in colors:
            colors[r.scheduler] = palette[(len(colors) - 2) % len(palette)]
    for i, wl in enumerate(wls):
        for j, th in enumerate(throttles):
            ax = axes[i][j]
            for r in results:
                if r.workload != wl or r.throttle != th or not r.curve:
                    continue
                xs = [c[0] for c in r.curve]
                ys = [c[1] for c in r.curve]
                avg = r.throughput.get("Average")
                label = f"{r.scheduler} (avg {avg:.0f}/s)" if avg else r.scheduler
                ax.step(xs, ys, where="post", color=colors[r.scheduler], label=label)
            ax.set_title(f"{wl} - {th} ({THROTTLES[th][0]:g}/{THROTTLES[th][1]})", fontsize=9)
            ax.set_xlabel("seconds since the first measured pod was created", fontsize=8)
            ax.set_ylabel("bound pods", fontsize=8)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8, loc="lower right")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0.0, 0.0, 1.0, 0.98))
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------- main


async def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    opts = Options(
        size=args.size,
        out=out,
        stall_timeout=args.stall_timeout,
        max_seconds=args.max_seconds,
        kscheduler_profiler=args.kscheduler_profiler,
        kube_scheduler_verbosity=args.kube_scheduler_v,
        kscheduler_args=list(args.kscheduler_arg or []),
    )
    chosen = [w for w in workloads(args.size) if w.name in set(args.workloads)]
    throttles = list(THROTTLES) if args.throttle == "both" else [args.throttle]
    variants = [patched_kind(",".join(v.split(","))) for v in args.kscheduler_patches or []]
    if args.schedulers == "both":
        schedulers = [KUBE_SCHEDULER, KSCHEDULER, *variants]
    else:
        schedulers = []
        for x in args.schedulers.split(","):
            if x == "patched":
                schedulers += variants
            elif x in SCHEDULERS:
                schedulers.append(x)
            elif x:
                raise SystemExit(
                    f"unknown scheduler {x!r}; known: {', '.join(SCHEDULERS)}, patched"
                )
    for v in variants:
        for name in kind_patches(v):
            if name != "ALL" and (name not in PATCHES or name in IN_PROCESS_ONLY):
                raise SystemExit(f"--kscheduler-patches: {name!r} is not a daemon patch")
    if args.order == "kscheduler-first":
        schedulers.reverse()
    results: list[RunResult] = []
    json_path = out / f"{stamp}.json"
    png_path = out / f"{stamp}.png"
    meta: dict[str, Any] = {
        "size": args.size,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "kubernetes": K8S_VERSION,
        "python": platform.python_version(),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "throttles": {t: {"qps": THROTTLES[t][0], "burst": THROTTLES[t][1]} for t in throttles},
        "scheduler_names": {k: scheduler_name(k) for k in schedulers},
        "method": "see bench/run.py",
        "kscheduler_args": opts.kscheduler_args,
    }

    def write() -> None:
        rows = summarize(results)
        doc = {"meta": meta, "summary": rows, "runs": [asdict(r) for r in results]}
        json_path.write_text(json.dumps(doc, indent=1))

    log(f"starting the control plane (Kubernetes {K8S_VERSION})")
    async with ControlPlane() as cp:
        log(f"control plane up in {cp.startup_seconds:.1f}s at {cp.url}")
        admin = cp.client(max_connections=CREATE_CONCURRENCY + 16)
        try:
            bench = Bench(cp, admin, opts, stamp)
            for wl in chosen:
                await bench.setup_workload(wl)
                try:
                    for th in throttles:
                        for kind in schedulers:
                            log(f"{wl.name} / {th} / {kind}: {wl.measure.count} pods")
                            try:
                                r = await bench.run_one(wl, kind, th)
                            except Exception as exc:  # keep going: report the failure
                                r = RunResult(
                                    wl.name,
                                    kind,
                                    th,
                                    *THROTTLES[th],
                                    wl.nodes,
                                    sum(g.count for g in wl.init),
                                    wl.measure.count,
                                    error=f"{type(exc).__name__}: {exc}",
                                )
                                with contextlib.suppress(Exception):
                                    await bench.delete_pods(wl)
                            results.append(r)
                            log(
                                f"  -> avg {_f(r.throughput.get('Average'))} pods/s, "
                                f"overall {r.overall_pods_per_second:.1f}, "
                                f"{r.bound}/{r.measured_pods} bound, "
                                f"cpu {_f(r.cpu_seconds_measured)}s, "
                                f"rss {_f(r.peak_rss_mib, '{:.0f}')}MiB"
                                + (f" [{r.error.splitlines()[0]}]" if r.error else "")
                            )
                            write()
                finally:
                    await bench.teardown_workload(wl)
        finally:
            await admin.close()
    write()
    rows = summarize(results)
    print()
    print(table(rows))
    try:
        plot(results, png_path, f"kscheduler vs kube-scheduler {K8S_VERSION} - size {args.size}")
        log(f"wrote {json_path} and {png_path}")
    except ImportError:
        log(f"wrote {json_path} (matplotlib missing: no plot; pip install -e '.[bench]')")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.run",
        description="kscheduler vs kube-scheduler on workloads modelled on scheduler_perf",
    )
    p.add_argument("--size", choices=SIZES, default="quick")
    p.add_argument(
        "--workloads",
        nargs="+",
        default=list(WORKLOAD_NAMES),
        choices=WORKLOAD_NAMES,
        metavar="NAME",
        help=f"some of: {', '.join(WORKLOAD_NAMES)} (default: all)",
    )
    p.add_argument("--throttle", choices=("both", *THROTTLES), default="both")
    p.add_argument(
        "--schedulers",
        default="both",
        help="'both' (kube-scheduler, kscheduler and every --kscheduler-patches variant), "
        f"or a comma-separated list of: {', '.join(SCHEDULERS)}, patched (the variants)",
    )
    p.add_argument("--order", choices=("kube-scheduler-first", "kscheduler-first"), default=None)
    p.add_argument("--out", default="bench-results")
    p.add_argument(
        "--stall-timeout",
        type=float,
        default=30.0,
        help="give up when no pod was bound for this long after all were created",
    )
    p.add_argument("--max-seconds", type=float, default=1800.0, help="cap per measured phase")
    p.add_argument(
        "--kscheduler-profiler",
        choices=("py-spy", "pyinstrument", "cprofile"),
        default=None,
        help="py-spy samples the running process from outside (no slowdown); "
        "pyinstrument and cprofile run inside it and slow it down",
    )
    p.add_argument(
        "--kscheduler-patches",
        action="append",
        metavar="A,B",
        help="one more scheduler under test: kscheduler with these bench.experiments "
        "patches (ALL: every daemon patch); repeat for more variants",
    )
    p.add_argument("--kube-scheduler-v", type=int, default=2, help="kube-scheduler --v")
    p.add_argument("--kscheduler-arg", action="append", metavar="ARG", help="extra kscheduler flag")
    args = p.parse_args(argv)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    try:
        import uvloop

        runner: Any = uvloop.run
    except ImportError:
        runner = asyncio.run
    with contextlib.suppress(ValueError):
        signal.signal(signal.SIGINT, signal.default_int_handler)
    return int(runner(run(args)))


if __name__ == "__main__":
    sys.exit(main())
