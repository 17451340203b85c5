"""kscheduler and kube-scheduler side by side, scheduler_perf's way.

    python -m bench.run --size quick --scheduler-cpus 1            # make bench
    python -m bench.run --size 5000 --scheduler-cpus 1 --main-pairs 3   # make bench-5000
    python -m bench.run --size quick --workloads SchedulingBasic --throttle unthrottled \\
        --schedulers kscheduler --kscheduler-profiler py-spy
    python -m bench.run --size 5000 --workloads SchedulingBasic --throttle unthrottled \\
        --kscheduler-patches ALL   # bench.experiments proposals, side by side

One harness cluster (etcd, kube-apiserver, kube-controller-manager, kwok) serves
the whole run. For each workload the nodes are created once, and its first run
waits until the control plane has stopped writing them (no Node changed for
NODES_QUIET seconds: the node lifecycle controller adds the beta os and arch
labels to each new node, the TTL controller an annotation); then for each CPU
mode, each client setting (unthrottled: qps/burst 5000/5000 as scheduler_perf;
default: upstream's 50/100) and each pair, the schedulers run one at a time in
ABBA order (A B, then B A, ...). In the unthrottled setting the trivial binder
(hack/controlplane/cmd/bench-binder: binds round robin and writes the same
Scheduled event, through client-go over protobuf as kube-scheduler's client)
runs too: its rate is the most this control plane takes, and every scheduler is
reported as a fraction of it. ``--ceiling-binder python`` runs bench.binder
instead (the same work from Python over JSON: its requests cost the apiserver
more, so its rate is below kube-scheduler's and is no ceiling).

CPU modes: ``shared`` pins nothing. ``pinned`` (``--scheduler-cpus``) runs the
scheduler under test on its own CPUs (taskset; GOMAXPROCS set to their number
for kube-scheduler; kscheduler is one process with one event loop) and moves
every control plane process and this driver onto the other CPUs, from the
scheduler's start to its stop.

Both schedulers run as scheduler_perf runs kube-scheduler: profiling and
contention profiling off, their default verbosity; the reference's
``--version`` is logged and kept.

One run:

1. etcd is compacted to its current revision and defragmented;
2. the workload's init pods are created, already bound (see bench.workloads),
   and kwok is given time to finish the last run's deletions (until it takes
   under SETTLE_BELOW of a CPU; it deletes each pod by name as its kubelet, for
   a minute or more after 10,000 pods); the run's measured pods get names of
   their own, so a late deletion cannot take one of them;
3. the scheduler starts as its own process, as the harness's
   system:kube-scheduler identity, and /readyz (informers synced) is awaited;
4. a pod watch (fieldSelector spec.nodeName!=) and an events.k8s.io/v1 watch on
   the measured namespace start, the apiserver's /metrics is read, churn starts
   where the workload has it, and the measured pods are created in bulk, each
   one's creation time taken when its POST returns;
5. every second the bound pods are counted. The window closes when every
   measured pod is bound AND its Scheduled event has been seen. Throughput
   samples follow scheduler_perf's throughputCollector over the binds: sampling
   starts at the first bind, the first sample is skipped, intervals that bind
   nothing are folded into the next one, the last partial interval counts when
   it lasted at least 0.5 s; Average and Perc50/90/99 over the samples. Next to
   it: "overall" (measured pods / (last bind - first pod created)) and "window"
   (measured pods / (window close - first pod created)), which charges a
   scheduler for events written late;
6. over the window: the scheduler's, kube-apiserver's and etcd's CPU (utime +
   stime from /proc) per measured pod, the scheduler's peak RSS (VmHWM), the
   events by controller and reason, apiserver_request_total by verb and
   resource (every client), and the scheduler identity's own requests by verb,
   resource and user agent from an apiserver audit log (Metadata level for
   that user only; ``--no-audit`` turns it off), among them its pods/status
   writes (PodScheduled condition, nominations);
7. the scheduler stops and every pod of the workload is deleted.

The results go to ``<out>/<timestamp>.json`` (every run and a summary per
workload, client setting and CPU mode: median and spread over the pairs,
kscheduler / kube-scheduler, fraction of the ceiling, the machine and its load),
``.md`` (the table) and ``.png`` (bound pods over time), rewritten after every
run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import yaml

from bench.experiments import IN_PROCESS_ONLY, PATCHES
from bench.method import (
    ForeignCpu,
    abba,
    affinity,
    audit_apiserver_args,
    audit_counts,
    available_cpus,
    counter_delta,
    etcd_compact_defrag,
    format_cpus,
    load,
    machine,
    parse_cpus,
    pin,
    request_counts,
    split_cpus,
    spread,
)
from bench.pyspy import Recorder
from bench.pyspy import summarize as summarize_profile
from bench.workloads import (
    DRA_CLASS,
    RESOURCE_API,
    SIZES,
    WORKLOAD_NAMES,
    Devices,
    Workload,
    workloads,
)
from kscheduler.controlplane.binaries import K8S_VERSION, BinariesNotFoundError, find_kube_scheduler
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
#: the trivial binder (bench-binder, or bench.binder): the control plane's ceiling
CEILING = "ceiling"
#: --ceiling-binder: hack/controlplane/cmd/bench-binder (client-go, protobuf) or
#: bench.binder (Python, aiohttp, JSON)
CEILING_BINDERS = ("go", "python")
CEILING_BINDER_NOTES = {
    "go": "bench-binder (hack/controlplane/cmd/bench-binder: client-go, protobuf)",
    "python": "bench.binder (Python, aiohttp, JSON)",
}
#: kscheduler with the bench.experiments patches of --kscheduler-patches applied
#: kscheduler with bench.experiments patches: "kscheduler+<patch>,<patch>"
PATCHED_PREFIX = "kscheduler+"
SCHEDULERS = (KUBE_SCHEDULER, KSCHEDULER)
SCHEDULER_NAMES = {
    KUBE_SCHEDULER: "bench-kube-scheduler",
    KSCHEDULER: "bench-kscheduler",
    CEILING: "bench-binder",
}
#: what scheduler_perf sets for kube-scheduler, set for both schedulers under test
PERF_CONFIG = {"enableProfiling": False, "enableContentionProfiling": False}
SHARED = "shared"
#: the schedulerName of the init pods (created bound)
INIT_SCHEDULER = "bench-init"
PINNED = "pinned"
#: kwok's share of a CPU under which the control plane counts as settled before a run
SETTLE_BELOW = 0.10
#: a workload's runs start once no Node has changed for this long (Bench.wait_nodes_settled)
NODES_QUIET = 5.0


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
#: The node Leases' duration in the benchmark's cluster (see ControlPlane).
NODE_LEASE_SECONDS = 600
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
        self.path = pods_path(namespace)
        self.field_selector = "spec.nodeName!="

    @property
    def count(self) -> int:
        return len(self.bound_at)

    async def start(self) -> None:
        page = await self.api.get(self.path, {"limit": 1})
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
        items = await self.api.list(self.path)
        now = time.monotonic()
        for obj in items:
            self._seen(obj, now)
        page = await self.api.get(self.path, {"limit": 1})
        self._rv = str(page.get("metadata", {}).get("resourceVersion", ""))

    async def _run(self) -> None:
        url = self.api.base_url + self.path
        timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
        while True:
            params = {
                "watch": "true",
                "resourceVersion": self._rv,
                "allowWatchBookmarks": "true",
            }
            if self.field_selector:
                params["fieldSelector"] = self.field_selector
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


class EventWatch(BindWatch):
    """The events.k8s.io/v1 Events of one namespace: when each pod's Scheduled event
    was seen (``bound_at`` here), and every event counted by controller and reason."""

    def __init__(self, api: RestClient, namespace: str) -> None:
        super().__init__(api, namespace)
        self.path = f"/apis/events.k8s.io/v1/namespaces/{namespace}/events"
        self.field_selector = ""
        self.by_reason: dict[str, int] = {}
        self._uids: set[str] = set()

    def _seen(self, obj: dict[str, Any], now: float) -> None:
        meta = obj.get("metadata") or {}
        rv = meta.get("resourceVersion")
        if rv:
            self._rv = str(rv)
        uid = str(meta.get("uid", ""))
        if not uid or uid in self._uids:
            return  # a series patch of an event already counted
        self._uids.add(uid)
        key = f"{obj.get('reportingController', '')} {obj.get('reason', '')}"
        self.by_reason[key] = self.by_reason.get(key, 0) + 1
        if obj.get("reason") == "Scheduled":
            name = str((obj.get("regarding") or {}).get("name", ""))
            if name and name not in self.bound_at:
                self.bound_at[name] = now
                self.progress.set()


# --------------------------------------------------------------------------- schedulers


def taskset(cpus: Sequence[int] | None) -> list[str]:
    """The argv prefix that runs a command on ``cpus`` (nothing when unpinned)."""
    return ["taskset", "-c", format_cpus(cpus)] if cpus else []


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


class PinnedReference(ReferenceScheduler):
    """kube-scheduler on a CPU set, with GOMAXPROCS equal to its size."""

    def __init__(
        self,
        *args: Any,
        cpus: Sequence[int] | None = None,
        content_type: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.cpus = list(cpus or [])
        #: clientConnection.contentType; None: kube-scheduler's default (protobuf)
        self.content_type = content_type

    def config(self) -> dict[str, Any]:
        config = super().config()
        if self.content_type is not None:
            config["clientConnection"]["contentType"] = self.content_type
        return config

    def _prepare(self) -> ManagedProcess:
        proc = super()._prepare()
        if self.cpus:
            proc.argv = [*taskset(self.cpus), *proc.argv]
            proc.env = {**os.environ, "GOMAXPROCS": str(len(self.cpus))}
        return proc


class KubeSchedulerProcess(SchedulerProcess):
    kind = KUBE_SCHEDULER

    def __init__(
        self,
        cp: ControlPlane,
        qps: float,
        burst: int,
        verbosity: int,
        cpus: Sequence[int] | None = None,
        content_type: str | None = None,
    ) -> None:
        self.ref = PinnedReference(
            cp.scheduler_kubeconfig,
            workdir=cp.workdir / f"kube-scheduler-{SCHEDULER_NAMES[KUBE_SCHEDULER]}",
            scheduler_name=SCHEDULER_NAMES[KUBE_SCHEDULER],
            qps=qps,
            burst=burst,
            verbosity=verbosity,
            config_extra=PERF_CONFIG,
            cpus=cpus,
            content_type=content_type,
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
        cpus: Sequence[int] | None = None,
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
            **PERF_CONFIG,
        }
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        self.port = free_ports(1)[0]
        prefix = [*taskset(cpus), sys.executable]
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


def find_bench_binder() -> Path:
    """hack/controlplane/cmd/bench-binder as ``make control-plane`` builds it: next to
    the pinned kube-scheduler, else on PATH."""
    try:
        beside: Path | None = find_kube_scheduler().parent / "bench-binder"
    except BinariesNotFoundError:
        beside = None
    if beside is not None and os.access(beside, os.X_OK):
        return beside
    found = shutil.which("bench-binder")
    if found:
        return Path(found)
    raise BinariesNotFoundError(
        "bench-binder was not found next to kube-scheduler nor on PATH: `make control-plane` "
        "builds it (hack/controlplane/cmd/bench-binder); --ceiling-binder python uses "
        "bench.binder instead"
    )


class BinderProcess(SchedulerProcess):
    """The trivial binder: binds round robin and writes the Scheduled event, nothing
    else. ``binder``: "go" runs bench-binder (client-go over protobuf, as
    kube-scheduler's client), "python" bench.binder (aiohttp, JSON)."""

    kind = CEILING

    def __init__(
        self,
        cp: ControlPlane,
        namespace: str,
        *,
        workdir: Path,
        cpus: Sequence[int] | None,
        binder: str = "go",
    ) -> None:
        if binder not in CEILING_BINDERS:
            raise ValueError(f"binder: {binder!r} is not one of {', '.join(CEILING_BINDERS)}")
        workdir.mkdir(parents=True, exist_ok=True)
        token = workdir / "token"
        token.write_text(cp.scheduler_token)
        token.chmod(0o600)
        self.ready_file = workdir / "ready"
        self.ready_file.unlink(missing_ok=True)
        program = (
            [str(find_bench_binder())] if binder == "go" else [sys.executable, "-m", "bench.binder"]
        )
        argv = [
            *taskset(cpus),
            *program,
            "--server",
            cp.url,
            "--token-file",
            str(token),
            "--ca-file",
            str(cp.ca_file),
            "--scheduler-name",
            SCHEDULER_NAMES[CEILING],
            "--namespace",
            namespace,
            "--ready-file",
            str(self.ready_file),
        ]
        env = dict(os.environ)
        repo = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (repo, env.get("PYTHONPATH")) if p)
        if cpus:
            env["GOMAXPROCS"] = str(len(cpus))
        self.name = "bench-binder" if binder == "go" else "bench.binder"
        self.proc = ManagedProcess(self.name, argv, workdir / "binder.log", env=env)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc.alive() else None

    async def start(self) -> None:
        self.proc.start()
        deadline = time.monotonic() + 120.0
        while not self.ready_file.exists():
            if not self.proc.alive():
                raise RuntimeError(f"{self.name} exited:\n{self.proc.log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} not ready after 120s:\n{self.proc.log_tail()}")
            await asyncio.sleep(0.1)

    async def stop(self) -> None:
        await asyncio.to_thread(self.proc.stop, 10.0)

    def alive(self) -> bool:
        return self.proc.alive()

    def log_tail(self) -> str:
        return self.proc.log_tail()


def kube_scheduler_version() -> str:
    """``kube-scheduler --version`` of the pinned binary."""
    try:
        out = subprocess.run(
            [str(find_kube_scheduler()), "--version"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({exc})"
    return (out.stdout or out.stderr).strip()


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
    #: "shared" (every process on every CPU) or "pinned" (the scheduler on its own CPUs)
    cpu_mode: str = SHARED
    scheduler_cpus: list[int] = field(default_factory=list)
    control_plane_cpus: list[int] = field(default_factory=list)
    pair: int = 0
    #: position in the whole run's sequence of runs
    sequence: int = 0
    loadavg_before: list[float] = field(default_factory=list)
    etcd_maintenance: dict[str, Any] = field(default_factory=dict)
    bound: int = 0
    #: measured pods whose Scheduled event was seen
    scheduled_events: int = 0
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
    #: kube-controller-manager and kwok over the window
    controllers_cpu_seconds: float | None = None
    #: first measured pod created -> every measured pod bound and its Scheduled event seen
    window_seconds: float = 0.0
    #: measured pods / window_seconds
    window_pods_per_second: float = 0.0
    #: last Scheduled event seen - last bind seen (negative: the binds finished last)
    events_after_last_bind_s: float = 0.0
    #: per-pod figures over the window (drain of the events included)
    cpu_ms_per_pod: float | None = None
    apiserver_cpu_ms_per_pod: float | None = None
    etcd_cpu_ms_per_pod: float | None = None
    #: events in the measured namespace: "reportingController reason" -> count
    events: dict[str, int] = field(default_factory=dict)
    #: apiserver_request_total over the window, every client: "VERB resource[/sub]" -> n
    apiserver_requests: dict[str, int] = field(default_factory=dict)
    #: the scheduler identity's requests over the window (audit log)
    scheduler_requests: dict[str, int] = field(default_factory=dict)
    scheduler_user_agents: dict[str, int] = field(default_factory=dict)
    #: the scheduler identity's pods/status writes (PodScheduled condition, nomination)
    pod_status_writes: int | None = None
    startup_seconds: float = 0.0
    measure_seconds: float = 0.0
    churn_pods: int = 0
    watch_restarts: int = 0
    #: (seconds since the first measured pod was created, bound pods)
    curve: list[tuple[float, int]] = field(default_factory=list)
    #: (seconds, cumulative scheduler CPU seconds in the measured phase, RSS MiB)
    resources: list[tuple[float, float, float]] = field(default_factory=list)
    #: CPU seconds spent outside this benchmark's processes from the scheduler's start
    #: to the end of the measurement (another build or test suite on the machine)
    foreign_cpu_seconds: float | None = None
    #: foreign_cpu_seconds / those seconds: the share of one CPU something else took
    foreign_cpu_share: float | None = None
    #: foreign_cpu_share passed --max-foreign: kept, left out of the summary, run again
    perturbed: bool = False
    #: when the run finished (local time)
    finished: str = ""
    #: seconds waited before the run for kwok to finish the last run's deletions
    settle_seconds: float = 0.0


@dataclass
class Options:
    size: str
    out: Path
    stall_timeout: float
    max_seconds: float
    kscheduler_profiler: str | None
    kube_scheduler_verbosity: int
    kscheduler_args: list[str]
    #: kube-scheduler's clientConnection.contentType (None: its default, protobuf)
    kube_scheduler_content_type: str | None = None
    #: the trivial binder of the ceiling runs (CEILING_BINDERS)
    ceiling_binder: str = "go"
    audit_log: Path | None = None
    compact_etcd: bool = True


class Bench:
    def __init__(self, cp: ControlPlane, admin: RestClient, opts: Options, stamp: str) -> None:
        self.cp = cp
        self.admin = admin
        self.opts = opts
        self.stamp = stamp
        #: process -> CPUs while pinned (the last pinned run's)
        self.affinities: dict[str, list[int]] = {}

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
        waited, changes = await self.wait_nodes_settled()
        log(f"{wl.name}: nodes settled after {waited:.1f}s ({changes} node updates)")
        if wl.devices is not None:
            await self._setup_devices(wl, wl.devices)

    async def _setup_devices(self, wl: Workload, devices: Devices) -> None:
        """DeviceClass, one ResourceSlice per node, the claim template, and the init
        claims allocated as the workload gives them (kept for every run)."""
        t0 = time.monotonic()
        with contextlib.suppress(ApiError):  # 409: left by an earlier workload
            await self.admin.post(f"{RESOURCE_API}/deviceclasses", devices.device_class())

        async def post(path_and_obj: tuple[str, dict[str, Any]]) -> None:
            await self.admin.post(*path_and_obj)

        slices = [
            (f"{RESOURCE_API}/resourceslices", devices.resource_slice(i)) for i in range(wl.nodes)
        ]
        await run_bounded(slices, post, concurrency=CREATE_CONCURRENCY)
        ns = wl.namespace(wl.measure.namespace)
        await self.admin.post(
            f"{RESOURCE_API}/namespaces/{ns}/resourceclaimtemplates", devices.claim_template(ns)
        )
        init_ns = wl.namespace(devices.init_namespace)
        claims_path = f"{RESOURCE_API}/namespaces/{init_ns}/resourceclaims"

        async def allocate(claim_and_status: tuple[dict[str, Any], dict[str, Any]]) -> None:
            claim, status = claim_and_status
            made = await self.admin.post(claims_path, claim)
            made["status"] = status
            await self.admin.put(f"{claims_path}/{claim['metadata']['name']}/status", made)

        await run_bounded(
            devices.allocated_claims(init_ns, wl.nodes), allocate, concurrency=CREATE_CONCURRENCY
        )
        log(
            f"{wl.name}: {wl.nodes} ResourceSlices and {devices.init_claims} allocated claims "
            f"in {time.monotonic() - t0:.1f}s"
        )

    async def teardown_workload(self, wl: Workload) -> None:
        await self.delete_pods(wl)
        if wl.devices is not None:
            for ns in wl.namespaces():
                await self.admin.delete(f"{RESOURCE_API}/namespaces/{ns}/resourceclaims")
                await self.admin.delete(f"{RESOURCE_API}/namespaces/{ns}/resourceclaimtemplates")
            await self.admin.delete(f"{RESOURCE_API}/resourceslices")
            await self.admin.delete(f"{RESOURCE_API}/deviceclasses/{DRA_CLASS}")
        await self.admin.delete("/api/v1/nodes")
        await self._wait_empty("/api/v1/nodes")

    async def ensure_init_pods(self, wl: Workload) -> None:
        """The init pods, already bound, kept from run to run while all of them are
        there (a preempting workload's victims are deleted: then they are made anew).
        Their schedulerName is neither scheduler's: a bound pod counts the same for
        both."""
        init = wl.init_pods(INIT_SCHEDULER)
        if not init:
            return
        init_ns = list(dict.fromkeys(p["metadata"]["namespace"] for p in init))
        present = 0
        for ns in init_ns:
            present += sum(
                1
                for p in await self.admin.list(pods_path(ns))
                if not p["metadata"].get("deletionTimestamp")
            )
        if present == len(init):
            return
        if present:
            await self.delete_pods(wl)
        await create_pods(self.admin, init, concurrency=CREATE_CONCURRENCY)

    def _kept(self, wl: Workload) -> set[str]:
        return {wl.namespace(g.namespace) for g in wl.init} - {wl.namespace(wl.measure.namespace)}

    async def delete_pods(self, wl: Workload, *, keep_init: bool = False) -> None:
        """Every pod of the workload (but the init pods' namespaces with keep_init), one
        DELETE each, CREATE_CONCURRENCY at once (a DeleteCollection deletes with four
        workers and took minutes on a busy machine)."""
        kept = self._kept(wl) if keep_init else set()
        namespaces = [ns for ns in wl.namespaces() if ns not in kept]

        async def delete(path: str) -> None:
            with contextlib.suppress(ApiError):  # 404: already gone
                await self.admin.delete(path, {"gracePeriodSeconds": 0})

        paths = [
            f"{pods_path(ns)}/{pod['metadata']['name']}"
            for ns in namespaces
            for pod in await self.admin.list(pods_path(ns))
        ]
        await run_bounded(paths, delete, concurrency=CREATE_CONCURRENCY)
        for ns in namespaces:
            await self._wait_empty(pods_path(ns))
            if wl.devices is not None and ns == wl.namespace(wl.measure.namespace):
                # the claims made for the pods go with them (garbage collector): the
                # next run starts with their devices free
                await self._wait_empty(f"{RESOURCE_API}/namespaces/{ns}/resourceclaims")
            with contextlib.suppress(ApiError):
                await self.admin.delete(f"/api/v1/namespaces/{ns}/events")
            with contextlib.suppress(ApiError):
                await self.admin.delete(f"/apis/events.k8s.io/v1/namespaces/{ns}/events")

    async def settle(
        self, below: float = SETTLE_BELOW, sample: float = 2.0, within: float = 180.0
    ) -> float:
        """Wait until kwok takes under ``below`` of a CPU over ``sample`` seconds; the
        seconds waited. kwok plays each deleted pod's kubelet: after a run's 10,000
        pods are deleted it goes on deleting them (by name, most already gone) for a
        minute or more, which would load the next run's control plane."""
        t0 = time.monotonic()
        pid = self.cp.kwok_process.pid
        while time.monotonic() - t0 < within:
            before = cpu_seconds(pid)
            await asyncio.sleep(sample)
            after = cpu_seconds(pid)
            if before is None or after is None or (after - before) / sample < below:
                break
        return time.monotonic() - t0

    async def wait_nodes_settled(
        self, quiet: float = NODES_QUIET, within: float = 300.0
    ) -> tuple[float, int]:
        """Wait until no Node has changed for ``quiet`` seconds; (seconds waited,
        node updates seen). New nodes are written again by the control plane for a
        minute or two (the node lifecycle controller's beta os and arch labels, the
        TTL controller's annotation: about two updates per node), which every scheduler watches: the
        first run of a workload would otherwise share its window with them."""
        t0 = time.monotonic()
        page = await self.admin.get("/api/v1/nodes", {"limit": 1})
        rv = str(page["metadata"]["resourceVersion"])
        params = {"watch": "1", "resourceVersion": rv, "timeoutSeconds": str(int(within))}
        changes = 0
        async with self.admin.session.get(
            self.admin.base_url + "/api/v1/nodes", params=params
        ) as resp:
            resp.raise_for_status()
            while time.monotonic() - t0 < within:
                try:
                    line = await asyncio.wait_for(resp.content.readline(), quiet)
                except TimeoutError:
                    break
                if not line:
                    break
                changes += 1
        return time.monotonic() - t0, changes

    async def _wait_empty(self, path: str, within: float = 300.0) -> None:
        deadline = time.monotonic() + within
        while True:
            page = await self.admin.get(path, {"limit": 1})
            if not page.get("items"):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{path} still not empty after {within}s")
            await asyncio.sleep(0.25)

    def _scheduler(
        self, kind: str, throttle: str, wl: Workload, cpus: Sequence[int] | None
    ) -> SchedulerProcess:
        qps, burst = THROTTLES[throttle]
        if kind == KUBE_SCHEDULER:
            return KubeSchedulerProcess(
                self.cp,
                qps,
                burst,
                self.opts.kube_scheduler_verbosity,
                cpus,
                self.opts.kube_scheduler_content_type,
            )
        if kind == CEILING:
            ns = wl.namespace(wl.measure.namespace)
            return BinderProcess(
                self.cp,
                ns,
                workdir=self.cp.workdir / "binder",
                cpus=cpus,
                binder=self.opts.ceiling_binder,
            )
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
            cpus=cpus,
        )

    def profile_path(self, wl: Workload, throttle: str, ext: str, kind: str) -> Path:
        tag = "kscheduler-" + "-".join(kind_patches(kind)) if is_patched(kind) else "kscheduler"
        return (self.opts.out / f"{self.stamp}-{tag}-{wl.name}-{throttle}.{ext}").resolve()

    async def run_one(
        self,
        wl: Workload,
        kind: str,
        throttle: str,
        *,
        mode: str = SHARED,
        cpus: Sequence[int] = (),
        rest: Sequence[int] = (),
        pair: int = 0,
        sequence: int = 0,
    ) -> RunResult:
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
            cpu_mode=mode,
            scheduler_cpus=list(cpus),
            control_plane_cpus=list(rest),
            pair=pair,
            sequence=sequence,
        )
        if self.opts.compact_etcd:
            res.etcd_maintenance = await asyncio.to_thread(
                etcd_compact_defrag, self.cp.etcd_endpoint
            )
        await self.ensure_init_pods(wl)
        res.settle_seconds = await self.settle()
        res.loadavg_before = load()
        if mode == PINNED:
            # pinned from the scheduler's start to its stop; set-up and clean-up use every CPU
            self.affinities = pin_control_plane(self.cp, rest)
        sched = self._scheduler(kind, throttle, wl, list(cpus) if mode == PINNED else None)
        foreign = ForeignCpu()
        t_start = time.monotonic()
        try:
            await sched.start()
        except BaseException:
            await sched.stop()
            raise
        res.startup_seconds = time.monotonic() - t_start
        try:
            await self._measure(wl, sched, name, res)
        except Exception as exc:  # keep what was measured, with the failure
            res.error = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=-4)}"
        finally:
            res.foreign_cpu_seconds = foreign.seconds()
            res.foreign_cpu_share = res.foreign_cpu_seconds / max(time.monotonic() - t_start, 1e-3)
            res.finished = time.strftime("%Y-%m-%dT%H:%M:%S%z")
            mem = memory_kib(sched.pid)
            if "VmHWM" in mem:
                res.peak_rss_mib = mem["VmHWM"] / 1024
                res.rss_end_mib = mem["VmRSS"] / 1024
            total = cpu_seconds(sched.pid)
            res.cpu_seconds_total = total
            if not sched.alive():
                res.error = res.error or f"{kind} died:\n{sched.log_tail()}"
            await sched.stop()
            if mode == PINNED:
                pin_control_plane(self.cp, available_cpus_all())
            await self.delete_pods(wl, keep_init=True)
        return res

    async def _measure(
        self, wl: Workload, sched: SchedulerProcess, name: str, res: RunResult
    ) -> None:
        ns = wl.namespace(wl.measure.namespace)
        # names of this run's own: kwok deletes the pods of the last run by name, some
        # after the next run has begun, and would take a new pod of the same name
        pods = wl.measured_pods(name, prefix=f"r{res.sequence}")
        total = len(pods)
        watch = BindWatch(self.admin, ns)
        await watch.start()
        events = EventWatch(self.admin, ns)
        await events.start()
        churn_task: asyncio.Task[int] | None = None
        if wl.churn is not None:
            churn_task = asyncio.create_task(self._churn(wl, name))
        created_at: dict[str, float] = {}
        pid = sched.pid
        api_pid = self.cp.apiserver_process.pid
        etcd_pid = self.cp.etcd_process.pid
        controller_pids = [
            self.cp.controller_manager_process.pid,
            self.cp.kwok_process.pid,
        ]
        metrics0 = request_counts(await self.admin.get_text("/metrics"))
        audit0 = 0
        if self.opts.audit_log is not None and self.opts.audit_log.exists():
            audit0 = self.opts.audit_log.stat().st_size
        cpu0 = cpu_seconds(pid) or 0.0
        api0 = cpu_seconds(api_pid)
        etcd0 = cpu_seconds(etcd_pid)
        ctl0 = sum(cpu_seconds(p) or 0.0 for p in controller_pids)
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
        collector_done = False
        try:
            while True:
                tick += 1
                await asyncio.sleep(max(0.0, t0 + tick - time.monotonic()))
                now = time.monotonic()
                count = watch.count
                collector_now = now
                if count >= total and not collector_done:
                    collector.finish(max(watch.bound_at.values()), count)
                    collector_done = True
                if count >= total and events.count >= total:
                    break  # the window closes: every pod bound and its event written
                if not collector_done:
                    collector.tick(collector_now, count)
                cpu = (cpu_seconds(pid) or cpu0) - cpu0
                rss = memory_kib(pid).get("VmRSS", 0) / 1024
                res.resources.append((now - t0, cpu, rss))
                if count + events.count != last_count:
                    last_count, last_progress = count + events.count, now
                if creator.done() and creator.exception() is not None:
                    raise creator.exception()  # type: ignore[misc]
                if not sched.alive():
                    res.error = f"{sched.kind} exited during the run"
                    break
                stall = max(self.opts.stall_timeout, wl.stall_timeout)
                if creator.done() and now - last_progress > stall:
                    res.error = (
                        f"stalled: {count}/{total} bound, {events.count} Scheduled events, "
                        f"no progress for {stall:.0f}s"
                    )
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
            await events.stop()
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
        res.controllers_cpu_seconds = sum(cpu_seconds(p) or 0.0 for p in controller_pids) - ctl0
        res.apiserver_requests = counter_delta(
            request_counts(await self.admin.get_text("/metrics")), metrics0
        )
        if self.opts.audit_log is not None:
            verbs, agents, _ = audit_counts(self.opts.audit_log, audit0)
            res.scheduler_requests = verbs
            res.scheduler_user_agents = agents
            res.pod_status_writes = sum(
                n
                for k, n in verbs.items()
                if k.split(" ")[0] in ("patch", "update") and k.endswith(" pods/status")
            )
        res.events = dict(sorted(events.by_reason.items()))
        res.scheduled_events = events.count
        res.bound = watch.count
        res.complete = watch.count >= total and events.count >= total
        res.watch_restarts = watch.restarts
        res.throughput_samples = collector.samples
        res.throughput = summarize_throughput(collector.samples)
        first_created = min(created_at.values(), default=t0)
        if created_at:
            res.create_pods_per_second = len(created_at) / max(max(created_at.values()) - t0, 1e-9)
        binds = sorted(watch.bound_at.values())
        if binds:
            res.overall_pods_per_second = len(binds) / max(binds[-1] - first_created, 1e-9)
        written = sorted(events.bound_at.values())
        if binds and written:
            window_end = max(binds[-1], written[-1])
            res.window_seconds = window_end - first_created
            res.window_pods_per_second = len(binds) / max(res.window_seconds, 1e-9)
            res.events_after_last_bind_s = written[-1] - binds[-1]
        if res.bound:
            n = res.bound
            if res.cpu_seconds_measured is not None:
                res.cpu_ms_per_pod = res.cpu_seconds_measured * 1000 / n
            if res.apiserver_cpu_seconds is not None:
                res.apiserver_cpu_ms_per_pod = res.apiserver_cpu_seconds * 1000 / n
            if res.etcd_cpu_seconds is not None:
                res.etcd_cpu_ms_per_pod = res.etcd_cpu_seconds * 1000 / n
        lat = [
            max(0.0, bound - created_at[n])
            for n, bound in watch.bound_at.items()
            if n in created_at
        ]
        res.latency = summarize_latency(lat)
        # at most ~1000 points (and the last bind): enough for the plot, small in the JSON
        step = max(1, len(binds) // 1000)
        res.curve = [(0.0, 0)] + [
            (round(t - first_created, 3), i + 1)
            for i, t in enumerate(binds)
            if i % step == step - 1 or i == len(binds) - 1
        ]
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


def _med(runs: list[RunResult], get: Any) -> float | None:
    return spread([v for v in (get(r) for r in runs) if v is not None]).get("median")


def _scheduler_summary(runs: list[RunResult]) -> dict[str, Any]:
    ok = [r for r in runs if not r.error] or runs
    last = ok[-1]
    return {
        "n": len(runs),
        "complete": sum(1 for r in runs if r.complete),
        "average": spread([r.throughput["Average"] for r in ok if "Average" in r.throughput]),
        "p50": _med(ok, lambda r: r.throughput.get("Perc50")),
        "p90": _med(ok, lambda r: r.throughput.get("Perc90")),
        "p99": _med(ok, lambda r: r.throughput.get("Perc99")),
        "overall": spread([r.overall_pods_per_second for r in ok if r.bound]),
        "window": spread([r.window_pods_per_second for r in ok if r.window_pods_per_second]),
        "latency_p50_ms": _med(ok, lambda r: r.latency.get("p50_ms")),
        "latency_p90_ms": _med(ok, lambda r: r.latency.get("p90_ms")),
        "latency_p99_ms": _med(ok, lambda r: r.latency.get("p99_ms")),
        "cpu_ms_per_pod": spread([r.cpu_ms_per_pod for r in ok if r.cpu_ms_per_pod is not None]),
        "apiserver_cpu_ms_per_pod": _med(ok, lambda r: r.apiserver_cpu_ms_per_pod),
        "etcd_cpu_ms_per_pod": _med(ok, lambda r: r.etcd_cpu_ms_per_pod),
        "peak_rss_mib": max((r.peak_rss_mib or 0.0 for r in ok), default=None),
        "events_after_last_bind_s": _med(ok, lambda r: r.events_after_last_bind_s),
        "bound": last.bound,
        "scheduled_events": last.scheduled_events,
        "of": last.measured_pods,
        "events": last.events,
        "scheduler_requests": last.scheduler_requests,
        "pod_status_writes": last.pod_status_writes,
        "errors": [r.error.splitlines()[0] for r in runs if r.error],
    }


def summarize(results: list[RunResult]) -> list[dict[str, Any]]:
    """One row per (workload, client setting, CPU mode): each scheduler's median and
    spread over its runs, kscheduler / kube-scheduler, and each as a fraction of the
    trivial binder's rate (the ceiling: same workload and CPU mode)."""
    rows: list[dict[str, Any]] = []
    keys: list[tuple[str, str, str]] = []
    # a run something else on the machine perturbed is kept in the runs, not summarized
    results = [r for r in results if not r.perturbed]
    for r in results:
        if (r.workload, r.throttle, r.cpu_mode) not in keys:
            keys.append((r.workload, r.throttle, r.cpu_mode))
    for wl, th, mode in keys:
        group = [r for r in results if (r.workload, r.throttle, r.cpu_mode) == (wl, th, mode)]
        kinds = list(dict.fromkeys(r.scheduler for r in group))
        by = {k: _scheduler_summary([r for r in group if r.scheduler == k]) for k in kinds}
        ceiling_runs = [
            r
            for r in results
            if r.scheduler == CEILING and (r.workload, r.cpu_mode) == (wl, mode) and not r.error
        ]
        ceiling = _scheduler_summary(ceiling_runs) if ceiling_runs else None
        first = group[0]
        row: dict[str, Any] = {
            "workload": wl,
            "throttle": th,
            "cpu_mode": mode,
            "scheduler_cpus": format_cpus(first.scheduler_cpus) if mode == PINNED else "",
            "control_plane_cpus": format_cpus(first.control_plane_cpus) if mode == PINNED else "",
            "schedulers": by,
            "ratios": {},
        }
        for one in by.values():
            if ceiling is not None:
                one["of_ceiling"] = {
                    "average": _ratio(
                        one["average"].get("median"), ceiling["average"].get("median")
                    ),
                    "window": _ratio(one["window"].get("median"), ceiling["window"].get("median")),
                }
        ref = by.get(KUBE_SCHEDULER)
        for label, ks in by.items():
            if ref is None or label in (KUBE_SCHEDULER, CEILING):
                continue
            row["ratios"][label] = {
                "average": _ratio(ks["average"].get("median"), ref["average"].get("median")),
                "window": _ratio(ks["window"].get("median"), ref["window"].get("median")),
                "latency_p50": _ratio(ks["latency_p50_ms"], ref["latency_p50_ms"]),
                "latency_p99": _ratio(ks["latency_p99_ms"], ref["latency_p99_ms"]),
                "cpu_ms_per_pod": _ratio(
                    ks["cpu_ms_per_pod"].get("median"), ref["cpu_ms_per_pod"].get("median")
                ),
                "peak_rss": _ratio(ks["peak_rss_mib"], ref["peak_rss_mib"]),
            }
        rows.append(row)
    return rows


def _f(v: Any, fmt: str = "{:.1f}") -> str:
    return "-" if v is None else fmt.format(v)


def _range(d: dict[str, Any], fmt: str = "{:.0f}") -> str:
    if not d.get("n"):
        return "-"
    if d["n"] == 1:
        return fmt.format(d["median"])
    return f"{fmt.format(d['median'])} [{fmt.format(d['min'])}-{fmt.format(d['max'])}]"


TABLE_HEAD = (
    "workload",
    "client",
    "cpus",
    "scheduler",
    "runs",
    "avg pods/s [min-max]",
    "p50",
    "p90",
    "p99",
    "window pods/s",
    "of ceiling",
    "lat p50 ms",
    "lat p99 ms",
    "sched CPU ms/pod",
    "apiserver ms/pod",
    "etcd ms/pod",
    "peak RSS MiB",
    "bound/events/of",
    "status writes",
)


def table_rows(rows: list[dict[str, Any]]) -> list[list[str]]:
    out: list[list[str]] = []
    for row in rows:
        cpus = "shared" if row["cpu_mode"] == SHARED else f"sched {row['scheduler_cpus']}"
        for label, d in row["schedulers"].items():
            frac = (d.get("of_ceiling") or {}).get("average")
            out.append(
                [
                    row["workload"],
                    row["throttle"],
                    cpus,
                    label,
                    f"{d['complete']}/{d['n']}",
                    _range(d["average"]),
                    _f(d["p50"], "{:.0f}"),
                    _f(d["p90"], "{:.0f}"),
                    _f(d["p99"], "{:.0f}"),
                    _range(d["window"]),
                    "-" if frac is None else f"{frac * 100:.0f}%",
                    _f(d["latency_p50_ms"], "{:.0f}"),
                    _f(d["latency_p99_ms"], "{:.0f}"),
                    _range(d["cpu_ms_per_pod"], "{:.2f}"),
                    _f(d["apiserver_cpu_ms_per_pod"], "{:.2f}"),
                    _f(d["etcd_cpu_ms_per_pod"], "{:.2f}"),
                    _f(d["peak_rss_mib"], "{:.0f}"),
                    f"{d['bound']}/{d['scheduled_events']}/{d['of']}",
                    _f(d["pod_status_writes"], "{:.0f}"),
                ]
                + ([f"! {d['errors'][0][:60]}"] if d["errors"] else [])
            )
    return out


def table(rows: list[dict[str, Any]]) -> str:
    body = table_rows(rows)
    widths = [max(len(TABLE_HEAD[i]), *(len(r[i]) for r in body)) for i in range(len(TABLE_HEAD))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(TABLE_HEAD, widths, strict=True))]
    lines.append("-" * len(lines[0]))
    for r in body:
        line = "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False))
        lines.append((line + ("  " + r[-1] if len(r) > len(widths) else "")).rstrip())
    return "\n".join(lines)


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["| " + " | ".join(TABLE_HEAD) + " |", "|" + "---|" * len(TABLE_HEAD)]
    for r in table_rows(rows):
        cells = r[: len(TABLE_HEAD)]
        if len(r) > len(TABLE_HEAD):
            cells[-1] += " " + r[-1].replace("|", "/")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(results: list[RunResult], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels: list[tuple[str, str, str]] = []
    for r in results:
        if (r.workload, r.throttle, r.cpu_mode) not in panels:
            panels.append((r.workload, r.throttle, r.cpu_mode))
    if not panels:
        return
    columns = list(dict.fromkeys((p[1], p[2]) for p in panels))
    wls = list(dict.fromkeys(p[0] for p in panels))
    fig, axes = plt.subplots(
        len(wls), len(columns), figsize=(5.5 * len(columns), 3.0 * len(wls)), squeeze=False
    )
    palette = ["tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:olive"]
    colors = {KUBE_SCHEDULER: "tab:blue", KSCHEDULER: "tab:orange", CEILING: "tab:gray"}
    for r in results:
        if r.scheduler not in colors:
            colors[r.scheduler] = palette[(len(colors) - 3) % len(palette)]
    for i, wl in enumerate(wls):
        for j, (th, mode) in enumerate(columns):
            ax = axes[i][j]
            labelled: set[str] = set()
            for r in results:
                if (r.workload, r.throttle, r.cpu_mode) != (wl, th, mode) or not r.curve:
                    continue
                xs = [c[0] for c in r.curve]
                ys = [c[1] for c in r.curve]
                label = None if r.scheduler in labelled else r.scheduler
                labelled.add(r.scheduler)
                ax.step(xs, ys, where="post", color=colors[r.scheduler], label=label, alpha=0.8)
            cpus = "shared CPUs" if mode == SHARED else "scheduler pinned"
            ax.set_title(f"{wl} - {th} client - {cpus}", fontsize=8)
            ax.set_xlabel("s since the first measured pod was created", fontsize=7)
            ax.set_ylabel("bound pods", fontsize=7)
            ax.tick_params(labelsize=7)
            ax.grid(alpha=0.3)
            if labelled:
                ax.legend(fontsize=7, loc="lower right")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout(rect=(0.0, 0.0, 1.0, 0.97))
    fig.savefig(path, dpi=90)
    plt.close(fig)


# --------------------------------------------------------------------------- main

MAIN_WORKLOADS = ("SchedulingBasic", "TopologySpreading", "SchedulingPodAntiAffinity")
MAIN_PAIRS_NOTE = (
    f"{', '.join(MAIN_WORKLOADS)}, unthrottled, pinned (shared when pinned is not run); "
    "every other cell gets --pairs"
)


def pairs_for(
    workload: str, throttle: str, mode: str, modes: Sequence[str], pairs: int, main_pairs: int
) -> int:
    """ABBA pairs of one cell: --main-pairs for the main workloads unthrottled in the
    pinned mode (the setting that measures the schedulers, not the client limits), or
    in the shared mode when pinned is not run; --pairs for every other cell."""
    measured_mode = PINNED if PINNED in modes else SHARED
    if workload in MAIN_WORKLOADS and throttle == "unthrottled" and mode == measured_mode:
        return main_pairs
    return pairs


def run_key(r: RunResult) -> tuple[str, str, str, int, str]:
    return (r.workload, r.throttle, r.cpu_mode, r.pair, r.scheduler)


def checkout_revision() -> str:
    """The commit measured, "+dirty" when kscheduler/ or bench/ differ from it."""
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "kscheduler", "bench"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


#: what a resumed run must share with the one it goes on with
RESUME_SAME = (
    "size",
    "revision",
    "kubernetes",
    "scheduler_cpus",
    "scheduler_config",
    "ceiling_binder",
)


def resume(path: Path, fresh: dict[str, Any]) -> tuple[dict[str, Any], list[RunResult]]:
    """The meta and runs of an earlier results file, to be gone on with.

    Refused (ValueError) when it measured another commit, size, CPU split or
    scheduler configuration: one results file is one measurement.
    """
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read {path}: {exc}") from exc
    meta = doc.get("meta", {})
    for key in RESUME_SAME:
        if meta.get(key) != fresh.get(key):
            raise ValueError(
                f"{path} has {key} {meta.get(key)!r}, this checkout {fresh.get(key)!r}"
            )
    if str(fresh["revision"]).endswith("+dirty") or fresh["revision"] == "unknown":
        raise ValueError(f"kscheduler/ or bench/ has uncommitted changes ({fresh['revision']})")
    names = {f.name for f in fields(RunResult)}
    runs = [RunResult(**{k: v for k, v in d.items() if k in names}) for d in doc.get("runs", [])]
    meta.setdefault("resumed", []).append(time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    meta["machine_at_resume"] = fresh["machine"]
    meta.pop("finished", None)
    return meta, runs


def parse_stop_by(text: str) -> float:
    """--stop-by HH:MM: the next such local time, as a Unix time."""
    try:
        hh, mm = (int(x) for x in text.split(":"))
        if not (0 <= hh < 24 and 0 <= mm < 60):
            raise ValueError
    except ValueError:
        raise SystemExit(f"--stop-by: {text!r} is not HH:MM") from None
    now = time.time()
    t = time.localtime(now)
    at = time.mktime((t.tm_year, t.tm_mon, t.tm_mday, hh, mm, 0, 0, 0, -1))
    return at if at > now else at + 86400


async def wait_quiet(since: ForeignCpu, max_share: float, sample: float = 10.0) -> float:
    """Wait until the rest of the machine took at most ``max_share`` of one CPU, over the
    time since ``since`` started and then over each ``sample`` seconds; seconds waited.

    The time since the last run ended (its clean-up) is usually enough to tell, so a
    quiet machine costs no wait.
    """
    t0 = time.monotonic()
    elapsed = max(time.monotonic() - since.started, 1e-3)
    share = since.seconds() / elapsed
    said = 0.0
    while share > max_share:
        now = time.monotonic()
        if now - said >= 60:
            log(f"  waiting: something else takes {share:.0%} of a CPU (run at {max_share:.0%})")
            said = now
        probe = ForeignCpu()
        await asyncio.sleep(sample)
        share = probe.seconds() / sample
    return time.monotonic() - t0


def available_cpus_all() -> list[int]:
    """Every CPU this driver started with."""
    return list(_START_CPUS)


_START_CPUS = available_cpus()


def pin_control_plane(cp: ControlPlane, cpus: Sequence[int]) -> dict[str, list[int]]:
    """Every control plane process and this driver on ``cpus``; their affinities."""
    out: dict[str, list[int]] = {}
    for proc in cp.processes():
        if proc.pid is not None:
            pin(proc.pid, cpus)
            out[proc.name] = affinity(proc.pid)
    pin(os.getpid(), cpus)
    out["driver"] = affinity(os.getpid())
    return out


async def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    all_cpus = available_cpus()
    sched_cpus: list[int] = []
    rest: list[int] = list(all_cpus)
    if args.scheduler_cpus:
        sched_cpus = parse_cpus(args.scheduler_cpus)
        rest = split_cpus(sched_cpus, all_cpus)
    modes = {"both": [SHARED, PINNED], SHARED: [SHARED], PINNED: [PINNED]}[args.cpu_modes]
    audit_dir = Path(tempfile.mkdtemp(prefix="kscheduler-bench-audit-"))
    opts = Options(
        size=args.size,
        out=out,
        stall_timeout=args.stall_timeout,
        max_seconds=args.max_seconds,
        kscheduler_profiler=args.kscheduler_profiler,
        kube_scheduler_verbosity=args.kube_scheduler_v,
        kscheduler_args=list(args.kscheduler_arg or []),
        kube_scheduler_content_type=args.kube_scheduler_content_type,
        ceiling_binder=args.ceiling_binder,
        audit_log=audit_dir / "audit.log" if args.audit else None,
        compact_etcd=args.compact_etcd,
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
            elif x in (*SCHEDULERS, CEILING):
                schedulers.append(x)
            elif x:
                raise SystemExit(
                    f"unknown scheduler {x!r}; known: {', '.join(SCHEDULERS)}, {CEILING}, patched"
                )
    for v in variants:
        for name in kind_patches(v):
            if name != "ALL" and (name not in PATCHES or name in IN_PROCESS_ONLY):
                raise SystemExit(f"--kscheduler-patches: {name!r} is not a daemon patch")
    if args.order == "kscheduler-first":
        schedulers.reverse()
    results: list[RunResult] = []
    json_path = out / f"{stamp}.json"
    version = kube_scheduler_version()
    log(f"reference: {version}")
    meta: dict[str, Any] = {
        "size": args.size,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "revision": checkout_revision(),
        "kubernetes": K8S_VERSION,
        "kube_scheduler_version": version,
        "machine": machine(),
        "load_note": args.load_note,
        "throttles": {t: {"qps": THROTTLES[t][0], "burst": THROTTLES[t][1]} for t in throttles},
        "cpu_modes": modes,
        "scheduler_cpus": sched_cpus,
        "control_plane_cpus": rest,
        "pairs": args.pairs,
        "main_pairs": args.main_pairs,
        "main_pairs_apply_to": MAIN_PAIRS_NOTE,
        "ceiling": args.ceiling,
        "ceiling_binder": CEILING_BINDER_NOTES[args.ceiling_binder],
        "audit": args.audit,
        "etcd_compacted_between_runs": args.compact_etcd,
        "max_foreign_cpu_share": args.max_foreign,
        "scheduler_config": {
            **PERF_CONFIG,
            "kube_scheduler_v": args.kube_scheduler_v,
            "kube_scheduler_content_type": args.kube_scheduler_content_type or "default (protobuf)",
            "kscheduler_log_level": "default",
        },
        "scheduler_names": {k: scheduler_name(k) for k in [*schedulers, CEILING]},
        "method": "bench/run.py docstring; README 'Benchmarks'",
        "kscheduler_args": opts.kscheduler_args,
    }
    if args.resume:
        json_path = Path(args.resume)
        try:
            meta, results = resume(json_path, meta)
        except ValueError as exc:
            log(f"--resume: {exc}")
            return 2
        log(f"resuming {json_path}: {len(results)} runs kept")
    png_path = json_path.with_suffix(".png")
    md_path = json_path.with_suffix(".md")

    def write() -> None:
        """The results so far: JSON, the Markdown table and the PNG, after every run."""
        rows = summarize(results)
        meta["loadavg_now"] = load()
        doc = {"meta": meta, "summary": rows, "runs": [asdict(r) for r in results]}
        json_path.write_text(json.dumps(doc, indent=1))
        md_path.write_text(markdown(rows) + "\n")
        with contextlib.suppress(ImportError):
            plot(results, png_path, f"kscheduler vs kube-scheduler {K8S_VERSION} - {args.size}")

    extra_args = audit_apiserver_args(audit_dir) if args.audit else []
    log(f"starting the control plane (Kubernetes {K8S_VERSION}); load {load()}")
    stop_by = parse_stop_by(args.stop_by) if args.stop_by else None
    stopped = ""
    try:
        # kwok renews node Leases a quarter of their duration apart: a kubelet's 40 s
        # means 500 Lease writes a second at 5000 nodes, most of this control plane's
        # budget on a small machine; neither scheduler reads Leases
        async with ControlPlane(
            extra_apiserver_args=extra_args, node_lease_seconds=NODE_LEASE_SECONDS
        ) as cp:
            log(f"control plane up in {cp.startup_seconds:.1f}s at {cp.url}")
            admin = cp.client(max_connections=CREATE_CONCURRENCY + 16)
            try:
                bench = Bench(cp, admin, opts, stamp)
                # every workload once per (mode, client setting) before the next one,
                # so that a run cut short still covers every workload in the first
                done = {run_key(r) for r in results if not r.perturbed and not r.error}
                sequence = max((r.sequence for r in results), default=0)
                durations: dict[tuple[str, str], float] = {}
                quiet = ForeignCpu()
                for mode, th, wl in plan(modes, throttles, chosen):
                    kinds = list(schedulers)
                    # the trivial binder allocates no devices: no ceiling for DRA
                    dra = wl.devices is not None
                    if args.ceiling and th == "unthrottled" and CEILING not in kinds and not dra:
                        kinds.append(CEILING)
                    pairs = pairs_for(wl.name, th, mode, modes, args.pairs, args.main_pairs)
                    todo = [
                        (pair, kind)
                        for pair, kind in abba(kinds, pairs)
                        if (wl.name, th, mode, pair, kind) not in done
                    ]
                    if not todo or stopped:
                        continue
                    await bench.setup_workload(wl)
                    try:
                        for pair, kind in todo:
                            for attempt in range(1 + args.redo):
                                guess = durations.get(
                                    (wl.name, th), max(durations.values(), default=0.0)
                                )
                                if stop_by is not None and time.time() + guess > stop_by:
                                    stopped = (
                                        f"stopped before {wl.name} / {th} / {mode} / pair "
                                        f"{pair + 1} / {kind}: --stop-by "
                                        f"{time.strftime('%H:%M', time.localtime(stop_by))} "
                                        f"would pass (last such run took {guess:.0f}s)"
                                    )
                                    break
                                waited = await wait_quiet(quiet, args.max_foreign)
                                sequence += 1
                                log(
                                    f"{wl.name} / {th} / {mode} / pair {pair + 1} / {kind}"
                                    + (f" (again, {attempt + 1})" if attempt else "")
                                    + f": {wl.measure.count} pods; load {load()}"
                                    + (f"; waited {waited:.0f}s for quiet" if waited >= 1 else "")
                                )
                                t0 = time.monotonic()
                                r = await one_run(
                                    bench, wl, kind, th, mode, sched_cpus, rest, pair, sequence
                                )
                                durations[(wl.name, th)] = time.monotonic() - t0
                                quiet.restart()
                                share = r.foreign_cpu_share or 0.0
                                r.perturbed = share > args.max_foreign
                                results.append(r)
                                log_result(r)
                                if bench.affinities:
                                    meta["pinned_affinities"] = bench.affinities
                                write()
                                if not r.perturbed:
                                    break
                                log(
                                    f"  perturbed: something else took {share:.0%} of a CPU "
                                    f"(at most {args.max_foreign:.0%}); kept aside"
                                )
                            if stopped:
                                break
                    finally:
                        await bench.teardown_workload(wl)
            finally:
                await admin.close()
    finally:
        shutil.rmtree(audit_dir, ignore_errors=True)
    if stopped:
        log(stopped + f"; go on with --resume {json_path}")
        meta["stopped"] = stopped
    else:
        meta.pop("stopped", None)
        meta["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    write()
    print()
    print(table(summarize(results)))
    log(f"wrote {json_path}, {md_path}" + (f" and {png_path}" if png_path.exists() else ""))
    return 0


def plan(
    modes: Sequence[str], throttles: Sequence[str], chosen: Sequence[Workload]
) -> list[tuple[str, str, Workload]]:
    """(CPU mode, client setting, workload) in run order: pinned first when both."""
    ordered = sorted(modes, key=lambda m: m != PINNED)
    return [(m, t, w) for t in throttles for m in ordered for w in chosen]


def log_result(r: RunResult) -> None:
    log(
        f"  -> avg {_f(r.throughput.get('Average'))} pods/s, "
        f"window {r.window_pods_per_second:.1f}/s, "
        f"{r.bound}/{r.scheduled_events}/{r.measured_pods} bound/events/pods, "
        f"cpu {_f(r.cpu_ms_per_pod, '{:.2f}')} ms/pod, "
        f"rss {_f(r.peak_rss_mib, '{:.0f}')}MiB"
        + (f" [{r.error.splitlines()[0]}]" if r.error else "")
    )


async def one_run(
    bench: Bench,
    wl: Workload,
    kind: str,
    th: str,
    mode: str,
    cpus: list[int],
    rest: list[int],
    pair: int,
    sequence: int,
) -> RunResult:
    try:
        return await bench.run_one(
            wl, kind, th, mode=mode, cpus=cpus, rest=rest, pair=pair, sequence=sequence
        )
    except Exception as exc:  # keep going: report the failure
        r = RunResult(
            wl.name,
            kind,
            th,
            *THROTTLES[th],
            wl.nodes,
            sum(g.count for g in wl.init),
            wl.measure.count,
            cpu_mode=mode,
            pair=pair,
            sequence=sequence,
            error=f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=-4)}",
        )
        pin_control_plane(bench.cp, available_cpus_all())
        with contextlib.suppress(Exception):
            await bench.delete_pods(wl)
        return r


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
        f"or a comma-separated list of: {', '.join(SCHEDULERS)}, {CEILING}, patched (the variants)",
    )
    p.add_argument(
        "--order",
        choices=("kube-scheduler-first", "kscheduler-first"),
        default=None,
        help="who runs first in the first pair (the next pair reverses it)",
    )
    p.add_argument("--pairs", type=int, default=1, help="ABBA pairs per workload")
    p.add_argument(
        "--main-pairs",
        type=int,
        default=None,
        help=f"ABBA pairs for {', '.join(MAIN_WORKLOADS)} (default: --pairs)",
    )
    p.add_argument(
        "--scheduler-cpus",
        default=None,
        metavar="LIST",
        help="CPUs of the scheduler under test when pinned (e.g. 1 or 0-3); the control "
        "plane and the driver get the others; GOMAXPROCS follows for kube-scheduler",
    )
    p.add_argument(
        "--cpu-modes",
        choices=("both", SHARED, PINNED),
        default=None,
        help="shared (nothing pinned), pinned (needs --scheduler-cpus) or both "
        "(default: both with --scheduler-cpus, else shared)",
    )
    p.add_argument(
        "--no-ceiling",
        dest="ceiling",
        action="store_false",
        help="skip the trivial binder (the control plane's ceiling)",
    )
    p.add_argument(
        "--no-audit",
        dest="audit",
        action="store_false",
        help="do not count the scheduler identity's requests from an apiserver audit log",
    )
    p.add_argument(
        "--no-compact-etcd",
        dest="compact_etcd",
        action="store_false",
        help="skip compacting and defragmenting etcd before each run",
    )
    p.add_argument(
        "--load-note",
        default="",
        help="what else ran on the machine meanwhile (kept in the results' meta)",
    )
    p.add_argument("--out", default="bench-results")
    p.add_argument(
        "--stall-timeout",
        type=float,
        default=30.0,
        help="give up when no pod was bound for this long after all were created",
    )
    p.add_argument("--max-seconds", type=float, default=1800.0, help="cap per measured phase")
    p.add_argument(
        "--max-foreign",
        type=float,
        default=0.10,
        metavar="SHARE",
        help="a run during which processes outside the benchmark took more than this share "
        "of one CPU is kept aside as perturbed and run again; no run starts until the "
        "machine is that quiet (default 0.10)",
    )
    p.add_argument(
        "--redo", type=int, default=3, help="times a perturbed run is run again (default 3)"
    )
    p.add_argument(
        "--resume",
        metavar="JSON",
        default=None,
        help="go on with the results file of a run cut short (same commit, size and CPU "
        "split): runs already measured are kept and skipped",
    )
    p.add_argument(
        "--stop-by",
        metavar="HH:MM",
        default=None,
        help="start no run that would end after this local time (judged by the last run of "
        "the same workload); the results file can be gone on with by --resume",
    )
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
    p.add_argument(
        "--kube-scheduler-v", type=int, default=0, help="kube-scheduler --v (its default: 0)"
    )
    p.add_argument(
        "--kube-scheduler-content-type",
        metavar="TYPE",
        help="kube-scheduler's clientConnection.contentType (default: its own, "
        "application/vnd.kubernetes.protobuf; kscheduler speaks application/json)",
    )
    p.add_argument(
        "--ceiling-binder",
        choices=CEILING_BINDERS,
        default="go",
        help="the trivial binder of the ceiling runs: go (bench-binder, client-go over "
        "protobuf, built by make control-plane; the default) or python (bench.binder, JSON)",
    )
    p.add_argument("--kscheduler-arg", action="append", metavar="ARG", help="extra kscheduler flag")
    args = p.parse_args(argv)
    if args.pairs < 1:
        p.error("--pairs: must be at least 1")
    if args.main_pairs is None:
        args.main_pairs = args.pairs
    if args.main_pairs < 1:
        p.error("--main-pairs: must be at least 1")
    if args.redo < 0:
        p.error("--redo: must be 0 or more")
    if not args.max_foreign > 0:
        p.error("--max-foreign: must be above 0")
    if args.stop_by:
        parse_stop_by(args.stop_by)
    if args.cpu_modes is None:
        args.cpu_modes = "both" if args.scheduler_cpus else SHARED
    if args.cpu_modes != SHARED and not args.scheduler_cpus:
        p.error(f"--cpu-modes {args.cpu_modes}: needs --scheduler-cpus")
    if args.scheduler_cpus:
        try:
            split_cpus(parse_cpus(args.scheduler_cpus), available_cpus())
        except ValueError as exc:
            p.error(f"--scheduler-cpus: {exc}")
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
