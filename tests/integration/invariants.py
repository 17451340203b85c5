"""Invariants that must hold while faults are injected, checked all along.

* :class:`ClusterMonitor` watches every pod and node through an admin connection
  of its own and records a violation the moment a node's bound pods request more
  than its allocatable, or a pod's ``spec.nodeName`` changes once set (the
  apiserver refuses a second Binding with 409, so a pod bound twice would show
  as a changed nodeName). It reconnects and relists like any informer, so it
  keeps checking across apiserver restarts and 410s.
* :class:`BindLedger` wraps the in-process scheduler's bind call and records
  every attempt with its outcome: a pod with two successful binds is a double
  bind on the scheduler's side, whatever the apiserver made of it.
* :class:`LogWatch` records what the scheduler logs; an ``error`` or
  ``exception`` entry (a crashed cycle, a failed handler or background task) is
  an unexpected exception.
* :func:`cache_diff` compares the scheduler's cache and queue with the API
  objects: after a fault they must converge.
* :func:`retry_gaps` checks the requests a fault-injecting proxy saw: after each
  injected failure the same request may come back only after a backoff.
* :class:`Figures` collects what each test measured for the final report.

Requests and allocatable are summed here independently of the scheduler's own
parser (containers, init containers, overhead), so a parsing bug cannot hide an
overcommit.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from kscheduler.app import SchedulerApp
from kscheduler.framework.quantity import parse_quantity
from kscheduler.framework.types import PodInfo
from kscheduler.informers import Callbacks, Informer, InformerSettings
from kscheduler.kube import KubeClient

JSON = dict[str, Any]

#: Reconnect fast: the monitor must see what happens right after a fault.
MONITOR_SETTINGS = InformerSettings(backoff_initial=0.05, backoff_max=0.5, inactivity_timeout=60.0)

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


# --------------------------------------------------------------------------- resources


def _add(total: dict[str, int], raw: Mapping[str, Any] | None) -> None:
    for name, q in (raw or {}).items():
        total[name] = total.get(name, 0) + parse_quantity(q, milli=name == "cpu")


def pod_requests(pod: Mapping[str, Any]) -> dict[str, int]:
    """What a pod holds on its node: cpu in millicores, the rest in base units, plus one pod."""
    spec = pod.get("spec") or {}
    total: dict[str, int] = {}
    for c in spec.get("containers") or []:
        _add(total, (c.get("resources") or {}).get("requests"))
    for c in spec.get("initContainers") or []:
        one: dict[str, int] = {}
        _add(one, (c.get("resources") or {}).get("requests"))
        if c.get("restartPolicy") == "Always":  # a sidecar runs alongside
            for k, v in one.items():
                total[k] = total.get(k, 0) + v
        else:
            for k, v in one.items():
                total[k] = max(total.get(k, 0), v)
    _add(total, spec.get("overhead"))
    total["pods"] = total.get("pods", 0) + 1
    return total


def node_allocatable(node: Mapping[str, Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    _add(out, (node.get("status") or {}).get("allocatable"))
    return out


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _key(obj: Mapping[str, Any]) -> str:
    meta = _meta(obj)
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _uid(obj: Mapping[str, Any]) -> str:
    return str(_meta(obj).get("uid") or "")


def _node_of(pod: Mapping[str, Any]) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def _holds_resources(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") not in TERMINAL_PHASES


def overcommits(pods: Iterable[Mapping[str, Any]], nodes: Iterable[Mapping[str, Any]]) -> list[str]:
    """Nodes whose bound pods request more than the node has, from one listing."""
    alloc = {str(_meta(n).get("name")): node_allocatable(n) for n in nodes}
    used: dict[str, dict[str, int]] = {}
    for p in pods:
        node = _node_of(p)
        if not node or node not in alloc or not _holds_resources(p):
            continue
        u = used.setdefault(node, {})
        for k, v in pod_requests(p).items():
            u[k] = u.get(k, 0) + v
    out = []
    for node, u in sorted(used.items()):
        for res, amount in sorted(u.items()):
            if amount > alloc[node].get(res, 0):
                out.append(
                    f"node {node}: {res} requested {amount} > allocatable {alloc[node].get(res, 0)}"
                )
    return out


# --------------------------------------------------------------------------- the monitor


class ClusterMonitor:
    """Watches all pods and nodes; records invariant violations as they happen."""

    def __init__(self, kube: KubeClient) -> None:
        self.kube = kube
        self.pods: Informer[JSON] = Informer(
            kube, "/api/v1/pods", settings=MONITOR_SETTINGS, name="monitor-pods"
        )
        self.nodes: Informer[JSON] = Informer(
            kube, "/api/v1/nodes", settings=MONITOR_SETTINGS, name="monitor-nodes"
        )
        self.violations: list[str] = []
        self._seen_violations: set[str] = set()
        #: pod uid -> the first node it was seen bound to
        self.first_node: dict[str, str] = {}
        #: pod uid -> "namespace/name"
        self.keys: dict[str, str] = {}
        #: pod uid -> monotonic time the monitor first saw it bound
        self.bound_at: dict[str, float] = {}
        self.allocatable: dict[str, dict[str, int]] = {}
        self._on_node: dict[str, dict[str, dict[str, int]]] = {}
        self._placed: dict[str, str] = {}
        self.checks = 0
        self.pods.add_handler(Callbacks(self._pod_seen, self._pod_updated, self._pod_gone))
        self.nodes.add_handler(Callbacks(self._node_seen, self._node_updated, self._node_gone))
        self._tasks: list[asyncio.Task[None]] = []

    @classmethod
    @contextlib.asynccontextmanager
    async def running(cls, kubeconfig: str | Path) -> AsyncIterator[ClusterMonitor]:
        """A monitor on its own unthrottled client, synced before it is yielded."""
        async with await KubeClient.from_kubeconfig(str(kubeconfig), qps=0) as kube:
            mon = cls(kube)
            mon._tasks = [
                asyncio.create_task(mon.pods.run(), name="monitor-pods"),
                asyncio.create_task(mon.nodes.run(), name="monitor-nodes"),
            ]
            try:
                async with asyncio.timeout(30):
                    await mon.pods.has_synced.wait()
                    await mon.nodes.has_synced.wait()
                yield mon
            finally:
                for t in mon._tasks:
                    t.cancel()
                await asyncio.gather(*mon._tasks, return_exceptions=True)

    # ----------------------------------------------------------------- checks

    def _violate(self, text: str) -> None:
        if text not in self._seen_violations:
            self._seen_violations.add(text)
            self.violations.append(f"{time.strftime('%H:%M:%S')} {text}")

    def _check_node(self, node: str) -> None:
        alloc = self.allocatable.get(node)
        if alloc is None:
            return  # not a node (deleted, or never created): nothing to exceed
        self.checks += 1
        used: dict[str, int] = {}
        for req in self._on_node.get(node, {}).values():
            for k, v in req.items():
                used[k] = used.get(k, 0) + v
        for res, amount in used.items():
            if amount > alloc.get(res, 0):
                self._violate(
                    f"node {node} overcommitted: {res} requested {amount} > allocatable "
                    f"{alloc.get(res, 0)} (pods: {sorted(self._on_node.get(node, {}))})"
                )

    def _unplace(self, uid: str) -> str | None:
        node = self._placed.pop(uid, None)
        if node is not None:
            pods = self._on_node.get(node)
            if pods is not None:
                pods.pop(uid, None)
        return node

    def _pod_seen(self, pod: JSON) -> None:
        uid, node = _uid(pod), _node_of(pod)
        self.keys[uid] = _key(pod)
        first = self.first_node.get(uid)
        if node:
            if first is None:
                self.first_node[uid] = node
                self.bound_at[uid] = time.monotonic()
            elif first != node:
                self._violate(f"pod {_key(pod)} ({uid}) bound twice: to {first}, then to {node}")
        elif first is not None:
            self._violate(f"pod {_key(pod)} ({uid}) lost its node {first}")
        if node and _holds_resources(pod):
            if self._placed.get(uid) != node:
                self._unplace(uid)
            self._placed[uid] = node
            self._on_node.setdefault(node, {})[uid] = pod_requests(pod)
            self._check_node(node)
        else:
            self._unplace(uid)

    def _pod_updated(self, old: JSON, new: JSON) -> None:
        self._pod_seen(new)

    def _pod_gone(self, pod: JSON) -> None:
        self._unplace(_uid(pod))

    def _node_seen(self, node: JSON) -> None:
        name = str(_meta(node).get("name"))
        self.allocatable[name] = node_allocatable(node)
        self._check_node(name)

    def _node_updated(self, old: JSON, new: JSON) -> None:
        self._node_seen(new)

    def _node_gone(self, node: JSON) -> None:
        self.allocatable.pop(str(_meta(node).get("name")), None)

    # ----------------------------------------------------------------- queries

    def alive(self) -> bool:
        return all(not t.done() for t in self._tasks)

    def bound_after(self, t: float) -> list[float]:
        """Times (monotonic) the monitor saw pods bound after t, sorted."""
        return sorted(x for x in self.bound_at.values() if x > t)

    def double_binds(self) -> int:
        return sum(1 for v in self.violations if " bound twice" in v)

    def overcommits(self) -> int:
        return sum(1 for v in self.violations if " overcommitted" in v)

    async def final_check(self) -> list[str]:
        """One fresh listing: overcommit, and every bound pod still on its first node."""
        pods = (await self.kube.get_json("/api/v1/pods"))["items"]
        nodes = (await self.kube.get_json("/api/v1/nodes"))["items"]
        problems = overcommits(pods, nodes)
        for p in pods:
            first = self.first_node.get(_uid(p))
            node = _node_of(p)
            if first is not None and node != first:
                problems.append(f"pod {_key(p)} first seen on {first}, now on {node!r}")
        return problems

    def assert_ok(self) -> None:
        assert self.alive(), "the invariant monitor stopped watching"
        assert not self.violations, "invariants violated:\n" + "\n".join(self.violations)


# --------------------------------------------------------------------------- the bind ledger

BindHook = Callable[[PodInfo, str], Awaitable[None]]
"""Runs before the real bind call (to delay it, hold it, or raise an injected error)."""


@dataclass(slots=True)
class BindAttempt:
    key: str
    uid: str
    node: str
    started: float
    ended: float | None = None
    error: str | None = None
    status: int | None = None

    @property
    def ok(self) -> bool:
        return self.ended is not None and self.error is None


class BindLedger:
    """Every bind the in-process scheduler attempts, with its outcome and timing."""

    def __init__(
        self, app: SchedulerApp, monkeypatch: pytest.MonkeyPatch, hook: BindHook | None = None
    ) -> None:
        self.hook = hook
        self.attempts: list[BindAttempt] = []
        self._real = app.client.bind
        monkeypatch.setattr(app.client, "bind", self._bind)

    async def _bind(self, pod: PodInfo, node_name: str) -> None:
        a = BindAttempt(pod.key, pod.uid, node_name, time.monotonic())
        self.attempts.append(a)
        try:
            if self.hook is not None:
                await self.hook(pod, node_name)
            await self._real(pod, node_name)
        except BaseException as exc:
            a.ended = time.monotonic()
            a.error = f"{type(exc).__name__}: {exc}"
            status = getattr(exc, "status", None)
            a.status = status if isinstance(status, int) else None
            raise
        a.ended = time.monotonic()

    def of(self, name: str) -> list[BindAttempt]:
        return [a for a in self.attempts if a.key.rsplit("/", 1)[-1] == name]

    def successes(self) -> Counter[str]:
        return Counter(a.uid for a in self.attempts if a.ok)

    def double_binds(self) -> list[str]:
        keys = {a.uid: a.key for a in self.attempts}
        return [keys[uid] for uid, n in self.successes().items() if n > 1]

    def failures(self) -> list[BindAttempt]:
        return [a for a in self.attempts if a.error is not None]

    def first_success_after(self, t: float) -> float | None:
        ends = [a.ended for a in self.attempts if a.ok and a.ended is not None and a.ended > t]
        return min(ends) if ends else None


# --------------------------------------------------------------------------- logs

LOGGING_MODULES = (
    "kscheduler.app",
    "kscheduler.binder",
    "kscheduler.eventhandlers",
    "kscheduler.events",
    "kscheduler.informers",
    "kscheduler.kube",
    "kscheduler.queue",
    "kscheduler.scheduler",
)
UNEXPECTED_LEVELS = frozenset({"error", "exception", "critical"})


@dataclass(frozen=True, slots=True)
class LogEntry:
    at: float
    module: str
    level: str
    event: str
    fields: Mapping[str, Any]


class _RecordingLogger:
    """Stands in for a module's structlog logger: records, then passes on."""

    def __init__(self, inner: Any, module: str, sink: list[LogEntry]) -> None:
        self._inner = inner
        self._module = module
        self._sink = sink

    def _record(self, level: str, event: str, kw: Mapping[str, Any]) -> None:
        self._sink.append(LogEntry(time.monotonic(), self._module, level, event, dict(kw)))

    def debug(self, event: str, **kw: Any) -> Any:
        self._record("debug", event, kw)
        return self._inner.debug(event, **kw)

    def info(self, event: str, **kw: Any) -> Any:
        self._record("info", event, kw)
        return self._inner.info(event, **kw)

    def warning(self, event: str, **kw: Any) -> Any:
        self._record("warning", event, kw)
        return self._inner.warning(event, **kw)

    def error(self, event: str, **kw: Any) -> Any:
        self._record("error", event, kw)
        return self._inner.error(event, **kw)

    def exception(self, event: str, **kw: Any) -> Any:
        self._record("exception", event, kw)
        return self._inner.exception(event, **kw)

    def critical(self, event: str, **kw: Any) -> Any:
        self._record("critical", event, kw)
        return self._inner.critical(event, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class LogWatch:
    """Records what the in-process scheduler logs (module loggers are swapped for the test)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import importlib

        self.entries: list[LogEntry] = []
        for name in LOGGING_MODULES:
            mod: ModuleType = importlib.import_module(name)
            inner = getattr(mod, "log", None)
            if inner is not None:
                monkeypatch.setattr(mod, "log", _RecordingLogger(inner, name, self.entries))

    def events(self, event: str, **match: Any) -> list[LogEntry]:
        return [
            e
            for e in self.entries
            if e.event == event and all(e.fields.get(k) == v for k, v in match.items())
        ]

    def unexpected(self) -> list[LogEntry]:
        return [e for e in self.entries if e.level in UNEXPECTED_LEVELS]

    def bound_counts(self) -> Counter[str]:
        return Counter(str(e.fields.get("pod")) for e in self.events("bound"))

    def assert_no_unexpected(self) -> None:
        bad = self.unexpected()
        assert not bad, "unexpected errors logged:\n" + "\n".join(
            f"{e.module} {e.level} {e.event} {dict(e.fields)}" for e in bad[:20]
        )


def json_log_entries(path: Path) -> list[dict[str, Any]]:
    """The JSON lines of a kscheduler process's log file."""
    out: list[dict[str, Any]] = []
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return out
    for line in text.splitlines():
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
    return out


# --------------------------------------------------------------------------- cache convergence


def cache_diff(
    app: SchedulerApp,
    pods: Iterable[Mapping[str, Any]],
    nodes: Iterable[Mapping[str, Any]],
    scheduler_names: Iterable[str],
) -> list[str]:
    """How the scheduler's cache and queue differ from the API objects (empty: converged).

    Nodes with a record must be exactly the API's nodes; each node entry must hold
    exactly the pods bound to it (with their requests summed); nothing may still be
    assumed; the queue must hold exactly our pending pods.
    """
    out: list[str] = []
    api_nodes = {str(_meta(n).get("name")) for n in nodes}
    cache_nodes = {name for name, ni in app.cache.nodes.items() if ni.node is not None}
    if cache_nodes != api_nodes:
        out.append(
            f"nodes: cache has {sorted(cache_nodes - api_nodes)} extra, "
            f"misses {sorted(api_nodes - cache_nodes)}"
        )
    names = set(scheduler_names)
    bound: dict[str, dict[str, str]] = {}
    milli: dict[str, int] = {}
    pending: dict[str, str] = {}
    for p in pods:
        if not _holds_resources(p):
            continue
        node = _node_of(p)
        if node:
            bound.setdefault(node, {})[_uid(p)] = _key(p)
            milli[node] = milli.get(node, 0) + pod_requests(p).get("cpu", 0)
        elif (p.get("spec") or {}).get("schedulerName") in names:
            pending[_uid(p)] = _key(p)
    for name in sorted(set(bound) | set(app.cache.nodes)):
        ni = app.cache.nodes.get(name)
        have = set(ni.pods) if ni is not None else set()
        want = set(bound.get(name, {}))
        if have != want:
            extra = [ni.pods[u].key for u in have - want] if ni is not None else []
            missing = [bound[name][u] for u in want - have]
            out.append(f"node {name}: cache holds extra {sorted(extra)}, misses {sorted(missing)}")
        elif ni is not None and ni.requested.milli_cpu != milli.get(name, 0):
            out.append(
                f"node {name}: cache accounts {ni.requested.milli_cpu}m cpu, "
                f"the bound pods request {milli.get(name, 0)}m"
            )
    assumed = [p.key for p in app.cache.assumed_pods()]
    if assumed:
        out.append(f"still assumed: {sorted(assumed)}")
    queued = {qp.pod.uid: qp.pod.key for _, qp in app.queue.pending()}
    if set(queued) != set(pending):
        out.append(
            f"queue: holds extra {sorted(queued[u] for u in set(queued) - set(pending))}, "
            f"misses {sorted(pending[u] for u in set(pending) - set(queued))}"
        )
    return out


# --------------------------------------------------------------------------- retry discipline


@dataclass(slots=True)
class Exchange:
    """One request as a proxy saw it."""

    at: float
    method: str
    path: str
    key: str
    """method, path and the query without the parameters that change per retry."""
    watch: bool
    status: int = 0
    fault: str = ""
    """"" when passed through; else the injected answer ("429", "503", "lost-504" ...)."""
    retry_after: float | None = None


@dataclass(slots=True)
class RetryReport:
    faults: int = 0
    retried: int = 0
    min_gap: dict[str, float] = field(default_factory=dict)
    tight: list[str] = field(default_factory=list)


def retry_gaps(
    exchanges: list[Exchange],
    *,
    watch_min: float,
    error_min: float,
    retry_after_slack: float = 0.95,
) -> RetryReport:
    """After every injected failure, how soon did the same request come back?

    A 429 with Retry-After R must be retried no sooner than R (times the slack)
    unless it is a watch; a watch after any failure no sooner than ``watch_min``
    (the informer's reconnect backoff); any other request after a 5xx no sooner
    than ``error_min`` (the client's first backoff step). Sooner is a tight loop.
    """
    rep = RetryReport()
    by_key: dict[str, list[Exchange]] = {}
    for e in sorted(exchanges, key=lambda e: e.at):
        by_key.setdefault(e.key, []).append(e)
    for seq in by_key.values():
        for cur, nxt in itertools.pairwise(seq):
            if not cur.fault:
                continue
            gap = nxt.at - cur.at
            if cur.watch:
                cls, floor = f"watch after {cur.fault}", watch_min
            elif cur.fault == "429" and cur.retry_after:
                cls, floor = "429 with Retry-After", cur.retry_after * retry_after_slack
            else:
                cls, floor = f"{cur.method} after {cur.fault}", error_min
            rep.retried += 1
            rep.min_gap[cls] = min(rep.min_gap.get(cls, gap), gap)
            if gap < floor:
                rep.tight.append(f"{cur.key}: {cur.fault} then again after {gap:.3f}s < {floor}s")
        rep.faults += sum(1 for e in seq if e.fault)
    return rep


def peak_rate(exchanges: Iterable[Exchange], window: float = 1.0) -> int:
    """Most requests seen in any window of ``window`` seconds."""
    times = sorted(e.at for e in exchanges)
    best = lo = 0
    for hi, t in enumerate(times):
        while times[lo] < t - window:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


# --------------------------------------------------------------------------- figures


class Figures:
    """What each fault test measured; summed up for the report at the end."""

    def __init__(self) -> None:
        self.rows: dict[str, dict[str, Any]] = {}

    def record(self, test: str, **values: Any) -> None:
        self.rows.setdefault(test, {}).update(values)

    def totals(self) -> dict[str, Any]:
        def total(name: str) -> int:
            return sum(int(r.get(name, 0)) for r in self.rows.values())

        return {
            "faults_injected": total("faults"),
            "pods": total("pods"),
            "pods_lost": total("lost"),
            "double_binds": total("double_binds"),
            "overcommits": total("overcommits"),
            "unexpected_errors": total("unexpected_errors"),
        }

    def render(self) -> str:
        lines = ["fault-injection figures:"]
        for test, row in self.rows.items():
            vals = ", ".join(f"{k}={_fmt(v)}" for k, v in row.items())
            lines.append(f"  {test}: {vals}")
        lines.append("  totals: " + ", ".join(f"{k}={v}" for k, v in self.totals().items()))
        return "\n".join(lines)

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"tests": self.rows, "totals": self.totals()}, indent=2) + "\n")


def _fmt(v: Any) -> str:
    return f"{v:.2f}" if isinstance(v, float) else str(v)
