"""Reliability under faults and bad input: nothing lost, nothing bound twice.

Each test injects a fault while a workload runs, and checks the invariants of
tests/integration/invariants.py all along: no node over its allocatable, no pod
bound twice (a pod's nodeName never changes once set, and the scheduler never
has two successful binds for one pod), every schedulable pod bound in the end,
the scheduler's cache and queue converge to the API objects, and no crash loop
(the daemon task keeps running and logs no error).

How each fault is injected:

1. apiserver restart: the kube-apiserver of a control plane of our own is
   stopped (SIGTERM, and SIGKILL) and started again mid-workload.
2. 410 Gone: the scheduler talks to the apiserver through :class:`FaultProxy`
   (an HTTP reverse proxy in the test process). The proxy cuts every connection
   and refuses new ones (a network partition); meanwhile nodes and pods are
   deleted, created and changed, and etcd is compacted. The apiserver runs with
   ``--watch-cache=false``, so watches are served from etcd and resuming from a
   compacted resourceVersion is answered 410: the informers must relist, and
   what was deleted while they were cut off must leave the cache.
   Each informer reconnects on its own backoff; the scheduling loop waits until the
   pod and node watches are both back, so no pod is bound to a node deleted during
   the partition (the apiserver would accept such a binding).
3. bind races: the scheduler's bind call (``app.client.bind``) is wrapped so
   a chosen pod's bind is held in flight while the test deletes the pod, deletes
   the node it was assumed on, or binds it elsewhere with another client.
4. throttling and 5xx: the proxy answers a fraction of requests 429 (with
   Retry-After) or 503 before forwarding them, drops the answer of some binds
   after the apiserver carried them out (a 504 from a gateway), and has a storm
   where it answers everything 429. Every retry's distance from the failure it
   follows is measured per request.
5. malformed objects: what the apiserver lets through (node affinity Gt/Lt with
   a value that is not an integer, absurd quantities, large annotations, many
   labels, unknown fields dropped with fieldValidation=Ignore) plus a node the
   scheduler cannot parse, delivered through its informer (the apiserver rejects
   every unparseable quantity, so such a node can only come from a decoding
   problem); and bad config files and flags, which must exit 2 naming the field.
6. soak (``make soak``): pods and nodes created and deleted for
   KSCHEDULER_SOAK_SECONDS (default 300) against a kscheduler subprocess whose
   RSS is sampled; the slope over the second half is reported.

The figures (faults injected, pods lost, double binds, recovery times) are
printed at the end of the module and written to bench-results/faults.json.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import os
import random
import ssl
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
import yarl
from aiohttp import web

from kscheduler.app import SchedulerApp
from kscheduler.controlplane.builders import (
    create_namespace,
    create_nodes,
    create_pods,
    delete_all_nodes,
    delete_namespace,
    make_node,
    make_pod,
    pods_path,
    run_bounded,
)
from kscheduler.controlplane.harness import (
    LOOPBACK,
    ControlPlane,
    ManagedProcess,
    free_ports,
    write_kubeconfig,
)
from kscheduler.controlplane.rest import ApiError, RestClient
from kscheduler.framework.types import PodInfo
from kscheduler.informers import Informer
from kscheduler.kube import ApiError as KubeApiError
from tests.integration.invariants import (
    JSON,
    BindHook,
    BindLedger,
    ClusterMonitor,
    Exchange,
    Figures,
    LogWatch,
    cache_diff,
    json_log_entries,
    peak_rate,
    retry_gaps,
)
from tests.integration.runner import SCHEDULER, running_kscheduler, wait_for

REPO = Path(__file__).resolve().parents[2]
FIGURES = Figures()

#: The informers' first reconnect step (InformerSettings.backoff_initial is 0.8 s),
#: and the client's (KubeClient backoff_initial is 0.2 s), with room for timer slack.
WATCH_RETRY_FLOOR = 0.75
REQUEST_RETRY_FLOOR = 0.18


@pytest.fixture(scope="module", autouse=True)
def fault_figures(request: pytest.FixtureRequest) -> Iterator[Figures]:
    """Print the figures at the end of the module (even under capture) and keep them."""
    yield FIGURES
    if not FIGURES.rows:
        return
    out = Path(request.config.rootpath) / "bench-results" / "faults.json"
    FIGURES.write(out)
    text = f"\n{FIGURES.render()}\n  (written to {out})"
    capman = request.config.pluginmanager.getplugin("capturemanager")
    if capman is not None:
        with capman.global_and_fixture_disabled():
            print(text)
    else:
        print(text)


# --------------------------------------------------------------------------- control planes


@pytest.fixture(scope="module")
def restart_plane() -> Iterator[ControlPlane]:
    """A control plane of our own, to restart and to put a proxy in front of."""
    with ControlPlane() as cp:
        yield cp


@pytest.fixture(scope="module")
def etcd_watch_plane() -> Iterator[ControlPlane]:
    """Watches served from etcd (no watch cache): a compaction makes old versions 410."""
    with ControlPlane(extra_apiserver_args=["--watch-cache=false"]) as cp:
        yield cp


@dataclass
class Env:
    cp: ControlPlane
    rest: RestClient
    ns: str
    monitor: ClusterMonitor


@asynccontextmanager
async def environment(cp: ControlPlane) -> AsyncIterator[Env]:
    """A namespace, no nodes, and the invariant monitor running; cleaned up after."""
    async with cp.client() as rest:
        await delete_all_nodes(rest)
        ns = f"f-{uuid.uuid4().hex[:8]}"
        await create_namespace(rest, ns, exist_ok=False)
        try:
            async with ClusterMonitor.running(cp.admin_kubeconfig) as monitor:
                yield Env(cp, rest, ns, monitor)
        finally:
            await delete_namespace(rest, ns)
            await delete_all_nodes(rest)


@dataclass
class Sched:
    """The in-process scheduler under test and what watches it."""

    app: SchedulerApp
    ledger: BindLedger
    logs: LogWatch
    task: asyncio.Task[Any]

    def alive(self) -> bool:
        return not self.task.done()

    def informer(self, kind: str) -> Informer[Any]:
        inf = self.app.informers.get(kind)
        assert inf is not None
        return inf


@asynccontextmanager
async def scheduler(
    cp: ControlPlane,
    monkeypatch: pytest.MonkeyPatch,
    *,
    kubeconfig: Path | None = None,
    hook: BindHook | None = None,
) -> AsyncIterator[Sched]:
    logs = LogWatch(monkeypatch)
    async with running_kscheduler(cp, kubeconfig=str(kubeconfig) if kubeconfig else None) as app:
        task = next(t for t in asyncio.all_tasks() if t.get_name() == "kscheduler-under-test")
        yield Sched(app, BindLedger(app, monkeypatch, hook), logs, task)


def pod(name: str, ns: str, cpu: str = "200m", **kw: Any) -> JSON:
    return make_pod(name, ns, cpu=cpu, memory="64Mi", scheduler_name=SCHEDULER, **kw)


async def pods_by_name(rest: RestClient, ns: str) -> dict[str, JSON]:
    return {p["metadata"]["name"]: p for p in await rest.list(pods_path(ns))}


def node_of(p: JSON | None) -> str:
    return str(((p or {}).get("spec") or {}).get("nodeName") or "")


async def wait_bound(rest: RestClient, ns: str, names: Iterable[str], timeout: float = 60) -> None:
    want = set(names)

    async def done() -> bool:
        got = await pods_by_name(rest, ns)
        return all(node_of(got.get(n)) for n in want)

    await wait_for(done, timeout=timeout, interval=0.25, what=f"{len(want)} pods bound")


def pod_condition(p: JSON) -> JSON | None:
    for c in (p.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled":
            return dict(c)
    return None


async def events_of(rest: RestClient, ns: str, name: str, reason: str) -> list[JSON]:
    evs = (await rest.get(f"/apis/events.k8s.io/v1/namespaces/{ns}/events"))["items"]
    return [e for e in evs if e.get("reason") == reason and e["regarding"]["name"] == name]


async def wait_converged(s: Sched, rest: RestClient, timeout: float = 30) -> None:
    """Until the scheduler's cache and queue match the API objects."""
    last: list[str] = []

    async def ok() -> bool:
        nonlocal last
        pods = await rest.list("/api/v1/pods")
        nodes = await rest.list("/api/v1/nodes")
        last = cache_diff(s.app, pods, nodes, s.app.frameworks)
        return not last

    try:
        await wait_for(ok, timeout=timeout, interval=0.3, what="the cache to converge")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n" + "\n".join(last)) from None


async def check_all(
    test: str,
    s: Sched,
    env: Env,
    *,
    expect_bound: Iterable[str],
    injected: Mapping[str, int],
    **figures: Any,
) -> None:
    """The end-of-test invariants; records the figures first so that a failure shows them.

    injected: how many times each kind of fault the test meant to inject was seen to
    happen; each must be > 0 (a fault that never happened proves nothing), and this is
    asserted before anything else.
    """
    assert_injected(injected)
    await wait_converged(s, env.rest)
    got = await pods_by_name(env.rest, env.ns)
    expected = list(expect_bound)
    lost = sorted(n for n in expected if not node_of(got.get(n)))
    final = await env.monitor.final_check()
    logged = s.logs.bound_counts()
    FIGURES.record(
        test,
        faults=sum(injected.values()),
        **{f"injected[{kind}]": n for kind, n in injected.items()},
        pods=len(expected),
        lost=len(lost),
        double_binds=env.monitor.double_binds() + len(s.ledger.double_binds()),
        overcommits=env.monitor.overcommits(),
        unexpected_errors=len(s.logs.unexpected()),
        **figures,
    )
    assert s.alive(), "the scheduler stopped"
    env.monitor.assert_ok()
    assert not final, final
    assert not s.ledger.double_binds(), s.ledger.double_binds()
    # a name may come back as a new pod (new uid): one "bound" per pod, not per name
    pods_of = Counter(key for _, key in {(a.uid, a.key) for a in s.ledger.attempts if a.ok})
    assert not [k for k, n in logged.items() if n > max(1, pods_of[k])], logged
    s.logs.assert_no_unexpected()
    assert not lost, f"pods never bound: {lost}"


def assert_injected(injected: Mapping[str, int]) -> None:
    """Every kind of fault the test meant to inject happened at least once."""
    assert injected, "a fault test names the faults it injects"
    missing = sorted(kind for kind, n in injected.items() if n <= 0)
    assert not missing, f"faults never injected: {missing} (counts: {dict(injected)})"


async def create_retrying(rest: RestClient, ns: str, pods: Iterable[JSON]) -> None:
    """Create pods even while the apiserver is away (an AlreadyExists means it got there)."""

    async def one(body: JSON) -> None:
        while True:
            try:
                await rest.post(pods_path(ns), body)
                return
            except ApiError as exc:
                if exc.status == 409:
                    return
                if exc.status != 429 and exc.status < 500:
                    raise
            except (aiohttp.ClientError, OSError, TimeoutError):
                pass
            await asyncio.sleep(0.2)

    await run_bounded(list(pods), one, concurrency=8)


# --------------------------------------------------------------------------- the proxy

_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
#: Query parameters that change from one retry of a request to the next.
_VOLATILE = frozenset({"resourceVersion", "timeoutSeconds", "continue", "allowWatchBookmarks"})


@dataclass(frozen=True, slots=True)
class Fault:
    status: int
    retry_after: float | None = None
    lose_response: bool = False
    """Forward the request, then answer ``status`` instead of what the apiserver said."""

    @property
    def label(self) -> str:
        return f"lost-{self.status}" if self.lose_response else str(self.status)


Policy = Callable[[str, str, bool], "Fault | None"]
"""(method, path, is_watch) -> the fault to inject, or None to pass the request on."""

_REASONS = {429: "TooManyRequests", 503: "ServiceUnavailable", 504: "Timeout"}


def _fault_response(fault: Fault) -> web.Response:
    status: JSON = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f"injected by the test proxy: {fault.label}",
        "reason": _REASONS.get(fault.status, "InternalError"),
        "code": fault.status,
    }
    headers = {"Content-Type": "application/json"}
    if fault.retry_after is not None:
        status["details"] = {"retryAfterSeconds": int(fault.retry_after)}
        headers["Retry-After"] = str(int(fault.retry_after))
    return web.Response(status=fault.status, body=orjson.dumps(status), headers=headers)


class FaultProxy:
    """Plain-HTTP reverse proxy in front of a control plane's apiserver.

    Streams answers (watches) through as they come; records every request as an
    :class:`Exchange`; asks ``policy`` whether to inject a fault; can cut every
    connection and refuse new ones (:meth:`partition`) until :meth:`heal`.
    """

    def __init__(self, cp: ControlPlane, policy: Policy | None = None) -> None:
        self.upstream = cp.url
        self.ca_file = cp.ca_file
        self.policy = policy
        self.exchanges: list[Exchange] = []
        self.partitioned = False
        #: connections reset by partition() (client side and upstream streams)
        self.cuts = 0
        #: path prefixes refused as in a partition while everything else flows
        self.blocked: tuple[str, ...] = ()
        self.port = 0
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self._session: aiohttp.ClientSession | None = None
        self._live: set[aiohttp.ClientResponse] = set()

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def kubeconfig(self, token: str, path: Path) -> Path:
        return write_kubeconfig(path, server=self.url, token=token, ca_file=None, user="proxied")

    async def __aenter__(self) -> FaultProxy:
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, ssl=ctx),
            auto_decompress=False,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
        )
        app = web.Application(client_max_size=64 << 20)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=2.0)
        await self._runner.setup()
        self.port = free_ports(1)[0]
        await self._listen()
        return self

    async def __aexit__(self, *exc: object) -> None:
        for up in list(self._live):
            up.close()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _listen(self) -> None:
        assert self._runner is not None
        self._site = web.TCPSite(self._runner, LOOPBACK, self.port, reuse_address=True)
        await self._site.start()

    async def partition(self) -> None:
        """Refuse new connections and reset every open one (watches included)."""
        self.partitioned = True
        if self._site is not None:
            await self._site.stop()
            self._site = None
        assert self._runner is not None
        server = self._runner.server
        for conn in list(server.connections) if server is not None else []:
            if conn.transport is not None:
                conn.transport.abort()
                self.cuts += 1
        for up in list(self._live):
            up.close()
            self.cuts += 1

    async def heal(self) -> None:
        self.partitioned = False
        await self._listen()

    def during(self, start: float, end: float) -> list[Exchange]:
        return [e for e in self.exchanges if start <= e.at <= end]

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        at = time.monotonic()
        watch = request.query.get("watch") in ("true", "1")
        query = sorted((k, v) for k, v in request.query.items() if k not in _VOLATILE)
        body = await request.read()
        key = f"{request.method} {request.path} {query}"
        if request.method == "POST":  # a create: which object (events all go to one path)
            key += f" {_posted_name(body)}"
        ex = Exchange(at, request.method, request.path, key, watch)
        self.exchanges.append(ex)
        if self.partitioned or request.path.startswith(self.blocked or ("\0",)):
            # a keep-alive connection that outlived the cut, or a blocked path
            if request.transport is not None:
                request.transport.abort()
            ex.fault = "partition"
            return web.Response(status=502)
        fault = self.policy(request.method, request.path, watch) if self.policy else None
        if fault is not None and not fault.lose_response:
            ex.status, ex.fault, ex.retry_after = fault.status, fault.label, fault.retry_after
            return _fault_response(fault)
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        url = yarl.URL(self.upstream + request.raw_path, encoded=True)
        try:
            async with self._session.request(
                request.method, url, headers=headers, data=body or None
            ) as up:
                self._live.add(up)
                try:
                    if fault is not None:  # carried out, but the answer is lost
                        await up.read()
                        ex.status, ex.fault = fault.status, fault.label
                        return _fault_response(fault)
                    ex.status = up.status
                    resp = web.StreamResponse(status=up.status, reason=up.reason)
                    for k, v in up.headers.items():
                        if k.lower() not in _HOP_BY_HOP:
                            resp.headers.add(k, v)
                    await resp.prepare(request)
                    async for chunk in up.content.iter_any():
                        await resp.write(chunk)
                    await resp.write_eof()
                    return resp
                finally:
                    self._live.discard(up)
        except (aiohttp.ClientError, ConnectionError, TimeoutError):
            # the apiserver went away, the cut closed the stream, or the client left
            if request.transport is not None:
                request.transport.abort()
            ex.fault = ex.fault or "upstream-closed"
            return web.Response(status=502)


def _posted_name(body: bytes) -> str:
    try:
        obj = orjson.loads(body) if body else {}
    except orjson.JSONDecodeError:
        return ""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    return str(meta.get("name") or meta.get("generateName") or "") if isinstance(meta, dict) else ""


class RandomFaults:
    """A policy: each request independently gets a 429, a 503, or (binds) a lost answer."""

    def __init__(
        self,
        seed: int,
        *,
        p429: float = 0.0,
        p503: float = 0.0,
        p_lost_bind: float = 0.0,
        retry_after: float = 1.0,
    ) -> None:
        self.rng = random.Random(seed)
        self.p429, self.p503, self.p_lost_bind = p429, p503, p_lost_bind
        self.retry_after = retry_after
        self.enabled = False
        self.storm_until = 0.0

    def __call__(self, method: str, path: str, watch: bool) -> Fault | None:
        if not self.enabled:
            return None
        if time.monotonic() < self.storm_until:
            return Fault(429, self.retry_after)
        if method == "POST" and path.endswith("/binding") and self.rng.random() < self.p_lost_bind:
            return Fault(504, lose_response=True)
        r = self.rng.random()
        if r < self.p429:
            return Fault(429, self.retry_after)
        if r < self.p429 + self.p503:
            return Fault(503)
        return None


async def etcd_compact(endpoint: str) -> int:
    """Compact etcd up to its current revision (v3 JSON gateway); returns the revision."""
    async with aiohttp.ClientSession() as session:
        key = base64.b64encode(b"/").decode()
        async with session.post(f"{endpoint}/v3/kv/range", json={"key": key}) as resp:
            resp.raise_for_status()
            revision = int((await resp.json())["header"]["revision"])
        body = {"revision": str(revision), "physical": True}
        async with session.post(f"{endpoint}/v3/kv/compaction", json=body) as resp:
            resp.raise_for_status()
    return revision


# --------------------------------------------------------------------------- 1. apiserver restart


@pytest.mark.parametrize("graceful", [True, False], ids=["sigterm", "sigkill"])
async def test_apiserver_restart_mid_workload(
    restart_plane: ControlPlane, monkeypatch: pytest.MonkeyPatch, graceful: bool
) -> None:
    """6 nodes x 4 CPUs, 120 pods x 200m: exactly full, so a leaked or lost pod shows."""
    cp = restart_plane
    names = [f"p-{i:03d}" for i in range(119)]
    before, during = names[:60], names[60:]
    async with environment(cp) as env, scheduler(cp, monkeypatch) as s:
        await create_nodes(
            env.rest, [make_node(f"r-{i}", cpu="4", memory="16Gi") for i in range(6)]
        )
        await create_pods(env.rest, [pod(n, env.ns) for n in before])

        async def some_bound() -> bool:
            got = await pods_by_name(env.rest, env.ns)
            return sum(1 for p in got.values() if node_of(p)) >= 20

        await wait_for(some_bound, timeout=60, interval=0.05, what="part of the workload bound")
        # the rest arrives while the apiserver goes down and comes back
        producer = asyncio.create_task(
            create_retrying(env.rest, env.ns, [pod(n, env.ns) for n in during])
        )
        pid_before = cp.apiserver_process.pid
        watches_before = s.informer("pods").watches
        stopped = time.monotonic()
        await cp.arestart_apiserver(graceful=graceful)
        ready = time.monotonic()
        restarted = int(cp.apiserver_process.pid != pid_before)
        # a pod created now can only be bound once the scheduler's pod watch is back
        await create_retrying(env.rest, env.ns, [pod("probe", env.ns)])
        await producer
        await wait_bound(env.rest, env.ns, [*names, "probe"], timeout=120)
        probe = [a for a in s.ledger.of("probe") if a.ok]
        next_bind = s.ledger.first_success_after(ready)
        got = await pods_by_name(env.rest, env.ns)
        per_node: dict[str, int] = {}
        for p in got.values():
            per_node[node_of(p)] = per_node.get(node_of(p), 0) + 1
        await check_all(
            f"apiserver restart ({'SIGTERM' if graceful else 'SIGKILL'})",
            s,
            env,
            expect_bound=[*names, "probe"],
            injected={
                "apiserver restarts": restarted,
                "pod watches reopened": s.informer("pods").watches - watches_before,
            },
            downtime_s=ready - stopped,
            ready_to_next_bind_s=(next_bind - ready) if next_bind else -1.0,
            ready_to_new_pod_bound_s=(probe[0].ended or 0) - ready if probe else -1.0,
            bind_failures=len(s.ledger.failures()),
            pod_relists=s.informer("pods").relists,
        )
        assert sorted(per_node.values()) == [20] * 6, per_node


# --------------------------------------------------------------------------- 2. 410 Gone


async def _cut_off_changes(env: Env, first: list[str]) -> dict[str, Any]:
    """What happens while the scheduler is cut off: g-4 and g-5 go, with their pods
    (as PodGC would delete them), except one left bound to the missing g-5; three
    more bound pods and two pending ones are deleted; g-0 is relabelled; g-6 comes."""
    got = await pods_by_name(env.rest, env.ns)
    on = {n: sorted(p for p, o in got.items() if node_of(o) == n) for n in ("g-4", "g-5")}
    assert on["g-5"], "the workload should have reached every node"
    orphan = on["g-5"][0]
    deleted = [*on["g-4"], *on["g-5"][1:]]
    deleted += [n for n in first if n not in deleted and n != orphan][:3]
    for name in [*deleted, "huge-0", "huge-1"]:
        await env.rest.delete(f"{pods_path(env.ns)}/{name}", {"gracePeriodSeconds": 0})
    for node in ("g-4", "g-5"):
        await env.rest.delete(f"/api/v1/nodes/{node}")
    await env.rest.patch("/api/v1/nodes/g-0", {"metadata": {"labels": {"seen": "later"}}})
    await create_nodes(
        env.rest, [make_node("g-6", cpu="4", memory="16Gi", labels={"fresh": "yes"})]
    )
    return {"orphan": orphan, "deleted": deleted}


async def _workload_on_six_nodes(env: Env, s: Sched) -> list[str]:
    await create_nodes(env.rest, [make_node(f"g-{i}", cpu="4", memory="16Gi") for i in range(6)])
    first = [f"a-{i:02d}" for i in range(30)]
    await create_pods(env.rest, [pod(n, env.ns) for n in first])
    await create_pods(env.rest, [pod(f"huge-{i}", env.ns, cpu="64") for i in range(3)])
    await wait_bound(env.rest, env.ns, first)

    async def huge_reported() -> bool:
        got = await pods_by_name(env.rest, env.ns)
        return all(pod_condition(got[f"huge-{i}"]) for i in range(3))

    await wait_for(huge_reported, what="the huge pods reported unschedulable")
    await wait_converged(s, env.rest)
    return first


async def test_partition_then_compaction_gives_410_and_the_cache_converges(
    etcd_watch_plane: ControlPlane, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    cp = etcd_watch_plane
    async with FaultProxy(cp) as proxy, environment(cp) as env:
        kubeconfig = proxy.kubeconfig(cp.scheduler_token, tmp_path / "proxied.kubeconfig")
        async with scheduler(cp, monkeypatch, kubeconfig=kubeconfig) as s:
            first = await _workload_on_six_nodes(env, s)
            relists = {k: s.informer(k).relists for k in ("pods", "nodes")}

            await proxy.partition()
            cut = time.monotonic()
            changes = await _cut_off_changes(env, first)
            # pods created meanwhile that only the new node can take: they are bound once
            # the scheduler has relisted the nodes, whichever informer comes back first
            fresh = [f"b-{i:02d}" for i in range(5)]
            await create_pods(
                env.rest, [pod(n, env.ns, node_selector={"fresh": "yes"}) for n in fresh]
            )
            revision = await etcd_compact(cp.etcd_endpoint)
            await asyncio.sleep(1.0)
            healed = time.monotonic()
            await proxy.heal()

            await wait_bound(env.rest, env.ns, fresh, timeout=90)
            await wait_converged(s, env.rest)
            got = await pods_by_name(env.rest, env.ns)
            assert {node_of(got[n]) for n in fresh} == {"g-6"}
            assert node_of(got[changes["orphan"]]) == "g-5"
            # the cache keeps the pod on the missing node, and places nothing else there
            g5 = s.app.cache.nodes["g-5"]
            assert g5.node is None and len(g5.pods) == 1
            g0 = s.app.cache.nodes["g-0"].node
            assert g0 is not None and g0.labels.get("seen") == "later"
            assert "huge-2" in {qp.pod.name for _, qp in s.app.queue.pending()}
            relisted = {k: s.informer(k).relists - relists[k] for k in relists}
            expired = s.logs.events("watch resourceVersion expired; relisting")
            first_relist = min((e.at for e in expired if e.at > healed), default=0.0)
            next_bind = s.ledger.first_success_after(healed)

            # and the converged view schedules as before
            later = [f"c-{i:02d}" for i in range(10)]
            await create_pods(env.rest, [pod(n, env.ns) for n in later])
            await wait_bound(env.rest, env.ns, later)
            got = await pods_by_name(env.rest, env.ns)
            assert not [n for n in later if node_of(got[n]) in ("g-4", "g-5")]
            await check_all(
                "partition + etcd compaction (410)",
                s,
                env,
                expect_bound=[n for n in [*first, *fresh, *later] if n in got],
                injected={"connections cut": proxy.cuts, "watches expired (410)": len(expired)},
                partition_s=healed - cut,
                compacted_revision=revision,
                relists_pods=relisted["pods"],
                relists_nodes=relisted["nodes"],
                heal_to_first_relist_s=first_relist - healed if first_relist else -1.0,
                heal_to_next_bind_s=(next_bind - healed) if next_bind else -1.0,
            )
            assert relisted["pods"] >= 1 and relisted["nodes"] >= 1, relisted
            assert {e.fields.get("informer") for e in expired} >= {"pods", "nodes"}


async def test_no_bind_to_a_node_deleted_while_the_node_watch_was_down(
    etcd_watch_plane: ControlPlane, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The pods watch comes back before the nodes watch (their reconnect backoffs are
    independent; here the proxy refuses /api/v1/nodes until 2 s after the pods relist)."""
    cp = etcd_watch_plane
    async with FaultProxy(cp) as proxy, environment(cp) as env:
        kubeconfig = proxy.kubeconfig(cp.scheduler_token, tmp_path / "proxied.kubeconfig")
        async with scheduler(cp, monkeypatch, kubeconfig=kubeconfig) as s:
            first = await _workload_on_six_nodes(env, s)
            pod_lists = s.informer("pods").relists
            await proxy.partition()
            changes = await _cut_off_changes(env, first)
            anywhere = [f"b-{i:02d}" for i in range(10)]
            await create_pods(env.rest, [pod(n, env.ns) for n in anywhere])
            await etcd_compact(cp.etcd_endpoint)
            proxy.blocked = ("/api/v1/nodes",)
            healed = time.monotonic()
            await proxy.heal()

            async def pods_relisted() -> bool:
                return s.informer("pods").relists > pod_lists

            await wait_for(pods_relisted, timeout=60, what="the pods informer to relist")
            await asyncio.sleep(2.0)  # time to schedule the new pods, if it does
            proxy.blocked = ()
            await wait_bound(env.rest, env.ns, anywhere, timeout=90)
            await wait_converged(s, env.rest)
            got = await pods_by_name(env.rest, env.ns)
            ghosts = sorted(n for n in anywhere if node_of(got[n]) in ("g-4", "g-5"))
            refused = [
                e
                for e in proxy.exchanges
                if e.at >= healed and e.fault == "partition" and e.path.startswith("/api/v1/nodes")
            ]
            injected = {"connections cut": proxy.cuts, "node requests refused": len(refused)}
            FIGURES.record(
                "nodes watch back after the pods watch",
                faults=sum(injected.values()),
                **{f"injected[{kind}]": n for kind, n in injected.items()},
                pods=len(anywhere),
                bound_to_deleted_nodes=len(ghosts),
                orphan_kept=node_of(got[changes["orphan"]]) == "g-5",
            )
            assert_injected(injected)
            assert not ghosts, f"bound to nodes deleted during the partition: {ghosts}"


# --------------------------------------------------------------------------- 3. bind races


class Gate:
    """A bind hook that holds the first bind of each named pod until released."""

    def __init__(self, *names: str) -> None:
        self._arrived = {n: asyncio.Event() for n in names}
        self._release = {n: asyncio.Event() for n in names}
        self.node: dict[str, str] = {}
        #: binds held so far
        self.held = 0

    async def __call__(self, pod: PodInfo, node: str) -> None:
        release = self._release.get(pod.name)
        if release is None or release.is_set():
            return
        self.node[pod.name] = node
        self.held += 1
        self._arrived[pod.name].set()
        await release.wait()

    async def arrived(self, name: str, timeout: float = 30) -> str:
        async with asyncio.timeout(timeout):
            await self._arrived[name].wait()
        return self.node[name]

    def release(self, name: str) -> None:
        self._release[name].set()

    def release_all(self) -> None:
        for ev in self._release.values():
            ev.set()


class HeldWatch:
    """Holds back the events of one of the scheduler's informers (a lagging watch)."""

    def __init__(self, informer: Informer[Any], monkeypatch: pytest.MonkeyPatch) -> None:
        self._apply = informer.apply
        self._held: list[tuple[str, JSON]] | None = None
        monkeypatch.setattr(informer, "apply", self._maybe_hold)

    def hold(self) -> None:
        self._held = []

    def release(self) -> None:
        held, self._held = self._held or [], None
        for kind, obj in held:
            self._apply(kind, obj)

    def _maybe_hold(self, kind: str, obj: JSON) -> None:
        if self._held is not None:
            self._held.append((kind, obj))
        else:
            self._apply(kind, obj)


async def _uid(rest: RestClient, ns: str, name: str) -> str:
    return str((await rest.get(f"{pods_path(ns)}/{name}"))["metadata"]["uid"])


async def _bind_with_another_client(rest: RestClient, ns: str, name: str, node: str) -> None:
    await rest.post(
        f"{pods_path(ns)}/{name}/binding",
        {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name},
            "target": {"kind": "Node", "name": node},
        },
    )


async def _ended(s: Sched, name: str) -> bool:
    attempts = s.ledger.of(name)
    return bool(attempts) and all(a.ended is not None for a in attempts)


async def test_pod_deleted_while_its_bind_is_in_flight(
    control_plane: ControlPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = Gate("victim")
    async with (
        environment(control_plane) as env,
        scheduler(control_plane, monkeypatch, hook=gate) as s,
    ):
        try:
            await create_nodes(env.rest, [make_node(f"d-{i}", cpu="2") for i in range(2)])
            await create_pods(env.rest, [pod("victim", env.ns, cpu="1")])
            node = await gate.arrived("victim")
            uid = await _uid(env.rest, env.ns, "victim")
            assert s.app.cache.is_assumed(uid)
            await env.rest.delete(f"{pods_path(env.ns)}/victim", {"gracePeriodSeconds": 0})

            async def forgotten() -> bool:
                return not s.app.cache.is_assumed(uid) and s.app.queue.where(uid) is None

            await wait_for(forgotten, what="the deletion to reach the scheduler")
            gate.release("victim")
            await wait_for(lambda: _ended(s, "victim"), what="the held bind to return")
            (attempt,) = s.ledger.of("victim")
            assert attempt.status == 404, attempt
            # the rest keeps flowing, for longer than the pod backoff: a requeued
            # victim would be tried again meanwhile
            others = [f"o-{i}" for i in range(6)]
            await create_pods(env.rest, [pod(n, env.ns, cpu="500m") for n in others])
            await wait_bound(env.rest, env.ns, others)
            await asyncio.sleep(2.5)
            assert len(s.ledger.of("victim")) == 1, "the deleted pod was retried"
            assert s.app.queue.where(uid) is None
            assert not await events_of(env.rest, env.ns, "victim", "FailedScheduling")
            ni = s.app.cache.nodes[node]
            assert uid not in ni.pods
            await check_all(
                "pod deleted while its bind is in flight",
                s,
                env,
                expect_bound=others,
                injected={
                    "binds held": gate.held,
                    "held binds answered 404": sum(a.status == 404 for a in s.ledger.of("victim")),
                },
                held_bind_answer=attempt.status,
                victim_bind_attempts=len(s.ledger.of("victim")),
            )
        finally:
            gate.release_all()


async def test_node_deleted_after_assume_the_bind_lands_on_the_missing_node(
    control_plane: ControlPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The apiserver does not check that a Binding's node exists: the pod is bound to
    the deleted node (kube-scheduler does the same; PodGC deletes such pods and their
    controller recreates them). The scheduler must keep it accounted on a node-less
    entry, place nothing else there, and drop the entry once the pod is gone."""
    gate = Gate("p")
    async with (
        environment(control_plane) as env,
        scheduler(control_plane, monkeypatch, hook=gate) as s,
    ):
        try:
            await create_nodes(env.rest, [make_node(f"m-{i}", cpu="2") for i in range(2)])
            await create_pods(env.rest, [pod("p", env.ns, cpu="1")])
            ghost = await gate.arrived("p")
            (survivor,) = {"m-0", "m-1"} - {ghost}
            await env.rest.delete(f"/api/v1/nodes/{ghost}")

            async def node_gone() -> bool:
                return s.app.snapshot.get(ghost) is None

            await wait_for(node_gone, what="the node deletion to reach the scheduler")
            gate.release("p")
            await wait_for(lambda: _ended(s, "p"), what="the held bind to return")
            (attempt,) = s.ledger.of("p")
            assert attempt.ok, f"the apiserver refused the binding: {attempt.error}"
            got = await pods_by_name(env.rest, env.ns)
            assert node_of(got["p"]) == ghost
            await wait_converged(s, env.rest)
            entry = s.app.cache.nodes[ghost]
            assert entry.node is None and list(entry.pods) == [got["p"]["metadata"]["uid"]]

            others = [f"o-{i}" for i in range(3)]
            await create_pods(env.rest, [pod(n, env.ns, cpu="500m") for n in others])
            await wait_bound(env.rest, env.ns, others)
            got = await pods_by_name(env.rest, env.ns)
            assert {node_of(got[n]) for n in others} == {survivor}
            # PodGC deletes the orphan, its controller creates it again
            await env.rest.delete(f"{pods_path(env.ns)}/p", {"gracePeriodSeconds": 0})
            await env.rest.wait_deleted(f"{pods_path(env.ns)}/p")
            await create_pods(env.rest, [pod("p", env.ns, cpu="500m")])
            await wait_bound(env.rest, env.ns, ["p"])
            got = await pods_by_name(env.rest, env.ns)
            assert node_of(got["p"]) == survivor
            await check_all(
                "node deleted after assume (bind accepted)",
                s,
                env,
                expect_bound=[*others, "p"],
                injected={
                    "binds held": gate.held,
                    "binds to a deleted node": sum(
                        a.ok and a.node == ghost for a in s.ledger.of("p")
                    ),
                },
                apiserver_accepts_binding_to_missing_node=True,
            )
            assert ghost not in s.app.cache.nodes, "the node-less entry outlived its pod"
        finally:
            gate.release_all()


async def test_node_deleted_after_assume_and_the_bind_refused_requeues_elsewhere(
    control_plane: ControlPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As above, but the binding is refused (as an admission webhook that checks the
    node would refuse it): the scheduler forgets the pod, requeues it, binds it to the
    node that is left."""
    gate = Gate("p")
    refused: list[str] = []

    async def hook(p: PodInfo, node: str) -> None:
        await gate(p, node)
        if p.name == "p" and not refused:
            refused.append(node)
            raise KubeApiError(
                400,
                reason="BadRequest",
                message=f'admission webhook "nodes.example.com" denied the request: '
                f'node "{node}" not found',
                method="POST",
                path=f"/api/v1/namespaces/{p.namespace}/pods/{p.name}/binding",
            )

    async with (
        environment(control_plane) as env,
        scheduler(control_plane, monkeypatch, hook=hook) as s,
    ):
        try:
            await create_nodes(env.rest, [make_node(f"m-{i}", cpu="2") for i in range(2)])
            await create_pods(env.rest, [pod("p", env.ns, cpu="1")])
            ghost = await gate.arrived("p")
            (survivor,) = {"m-0", "m-1"} - {ghost}
            uid = await _uid(env.rest, env.ns, "p")
            await env.rest.delete(f"/api/v1/nodes/{ghost}")

            async def node_gone() -> bool:
                return s.app.snapshot.get(ghost) is None

            await wait_for(node_gone, what="the node deletion to reach the scheduler")
            gate.release("p")
            await wait_bound(env.rest, env.ns, ["p"])
            got = await pods_by_name(env.rest, env.ns)
            assert node_of(got["p"]) == survivor
            first, second = s.ledger.of("p")
            assert first.error and "denied" in first.error and second.ok
            assert ghost not in s.app.cache.nodes and not s.app.cache.is_assumed(uid)
            failed = await events_of(env.rest, env.ns, "p", "FailedScheduling")
            assert failed and "denied the request" in failed[0]["note"]
            await check_all(
                "node deleted after assume (bind refused)",
                s,
                env,
                expect_bound=["p"],
                injected={"binds held": gate.held, "binds refused": len(refused)},
                bind_attempts=len(s.ledger.of("p")),
                retry_after_s=(second.started - (first.ended or 0)),
            )
        finally:
            gate.release_all()


@pytest.mark.parametrize("order", ["watch-first", "conflict-first"])
async def test_bind_answered_with_a_conflict(
    control_plane: ControlPlane, monkeypatch: pytest.MonkeyPatch, order: str
) -> None:
    """Another client binds the pod while our bind is held. watch-first: the scheduler
    sees that binding before its own bind gets its 409; conflict-first: its pod watch
    lags (held back by the test) and the 409 comes first."""
    gate = Gate("p")
    async with (
        environment(control_plane) as env,
        scheduler(control_plane, monkeypatch, hook=gate) as s,
    ):
        watch = HeldWatch(s.informer("pods"), monkeypatch)
        try:
            await create_nodes(env.rest, [make_node(f"c-{i}", cpu="2") for i in range(2)])
            await create_pods(env.rest, [pod("p", env.ns, cpu="1")])
            ours = await gate.arrived("p")
            (theirs,) = {"c-0", "c-1"} - {ours}
            uid = await _uid(env.rest, env.ns, "p")
            if order == "conflict-first":
                watch.hold()
            await _bind_with_another_client(env.rest, env.ns, "p", theirs)
            if order == "watch-first":

                async def seen() -> bool:
                    cached = s.app.cache.get_pod(uid)
                    return cached is not None and cached.node_name == theirs

                await wait_for(seen, what="the other binding to reach the scheduler")
                assert not s.app.cache.is_assumed(uid)
            gate.release("p")
            await wait_for(lambda: _ended(s, "p"), what="our bind to return")
            (attempt,) = s.ledger.of("p")
            assert attempt.status == 409, attempt
            watch.release()

            async def confirmed() -> bool:
                cached = s.app.cache.get_pod(uid)
                return (
                    cached is not None
                    and cached.node_name == theirs
                    and not s.app.cache.is_assumed(uid)
                    and s.app.queue.where(uid) is None
                )

            await wait_for(confirmed, what="the cache to confirm the other binding")
            await asyncio.sleep(2.5)  # longer than the pod backoff: no retry may follow
            assert len(s.ledger.of("p")) == 1, [a.error for a in s.ledger.of("p")]
            assert uid not in s.app.cache.nodes[ours].pods
            got = await pods_by_name(env.rest, env.ns)
            assert node_of(got["p"]) == theirs
            cond = pod_condition(got["p"]) or {}
            await check_all(
                f"bind conflict ({order})",
                s,
                env,
                expect_bound=["p"],
                injected={
                    "binds held": gate.held,
                    "binds answered 409": sum(a.status == 409 for a in s.ledger.of("p")),
                },
                our_bind_answer=attempt.status,
                bind_attempts=len(s.ledger.of("p")),
                pod_scheduled_condition=f"{cond.get('status')}/{cond.get('reason', '')}",
            )
            if order == "watch-first":
                assert cond.get("status") == "True", cond
        finally:
            gate.release_all()
            watch.release()


# --------------------------------------------------------------------------- 4. 429 and 5xx


async def _throttled_workload(
    cp: ControlPlane,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    faults: RandomFaults,
    *,
    test: str,
    kinds: Iterable[str],
    storm: float = 0.0,
) -> None:
    """8 nodes, 160 pods through a proxy that injects ``faults`` once the scheduler synced;
    kinds: the fault labels (``Fault.label``) that must each have been injected."""
    async with FaultProxy(cp, faults) as proxy, environment(cp) as env:
        kubeconfig = proxy.kubeconfig(cp.scheduler_token, tmp_path / "proxied.kubeconfig")
        await create_nodes(
            env.rest, [make_node(f"t-{i}", cpu="4", memory="16Gi") for i in range(8)]
        )
        async with scheduler(cp, monkeypatch, kubeconfig=kubeconfig) as s:
            faults.enabled = True
            began = time.monotonic()
            names = [f"p-{i:03d}" for i in range(160)]
            await create_pods(env.rest, [pod(n, env.ns) for n in names[:80]])
            storm_window = (0.0, 0.0)
            if storm:
                await asyncio.sleep(0.5)
                storm_window = (time.monotonic(), time.monotonic() + storm)
                faults.storm_until = storm_window[1]
            await create_pods(env.rest, [pod(n, env.ns) for n in names[80:]])
            await wait_bound(env.rest, env.ns, names, timeout=180)
            took = time.monotonic() - began
            faults.enabled = False
            seen = list(proxy.exchanges)
            rep = retry_gaps(seen, watch_min=WATCH_RETRY_FLOOR, error_min=REQUEST_RETRY_FLOOR)
            in_storm = proxy.during(*storm_window) if storm else []
            binds = [e for e in seen if e.path.endswith("/binding")]
            labels = Counter(e.fault for e in seen if e.fault)
            injected = {kind: labels[kind] for kind in kinds}
            if storm:  # each fault counted once: the storm's 429s apart from the others
                stormed = sum(1 for e in in_storm if e.fault == "429")
                injected["429 in the storm"] = stormed
                injected["429"] = labels["429"] - stormed
            await check_all(
                test,
                s,
                env,
                expect_bound=names,
                injected=injected,
                faults_seen_by_retry_gaps=rep.faults,
                requests=len(seen),
                bind_requests=len(binds),
                retried_after_fault=rep.retried,
                **{f"min_gap_s[{k}]": round(v, 3) for k, v in sorted(rep.min_gap.items())},
                peak_requests_per_s=peak_rate(seen),
                storm_requests=len(in_storm),
                storm_keys=len({e.key for e in in_storm}),
                workload_s=took,
            )
            assert not rep.tight, "tight retry loops:\n" + "\n".join(rep.tight[:20])
            if storm:
                # every request kind retried at most once per Retry-After during the storm
                keys = len({e.key for e in in_storm})
                assert len(in_storm) <= keys * (storm / faults.retry_after + 2), (
                    len(in_storm),
                    keys,
                )


async def test_throttling_429_is_retried_after_retry_after(
    restart_plane: ControlPlane, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """30% of requests answered 429 (Retry-After: 1), then 3 s where every request is."""
    faults = RandomFaults(1, p429=0.3, retry_after=1.0)
    await _throttled_workload(
        restart_plane,
        monkeypatch,
        tmp_path,
        faults,
        test="429 throttling",
        kinds=["429"],
        storm=3.0,
    )


async def test_5xx_and_lost_bind_answers(
    restart_plane: ControlPlane, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """20% of requests answered 503 before reaching the apiserver, and 15% of binds
    carried out by the apiserver but answered 504 (the answer lost on the way back):
    the scheduler sees a failed bind for a pod that is in fact bound."""
    faults = RandomFaults(2, p503=0.2, p_lost_bind=0.15)
    await _throttled_workload(
        restart_plane,
        monkeypatch,
        tmp_path,
        faults,
        test="503 and lost 504",
        kinds=["503", "lost-504"],
    )


# --------------------------------------------------------------------------- 5. malformed input


def _affinity(operator: str, value: str, *, preferred: bool = False) -> JSON:
    term = {"matchExpressions": [{"key": "rank", "operator": operator, "values": [value]}]}
    if preferred:
        return {
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "preference": term}
                ]
            }
        }
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
        }
    }


def _with_spec(body: JSON, **spec: Any) -> JSON:
    return {**body, "spec": {**body["spec"], **spec}}


#: Malformed pods and how the apiserver answers them (kube-apiserver v1.35): none of
#: these reaches a scheduler.
REJECTED: dict[str, tuple[Callable[[str], JSON], int, str]] = {
    "unparseable quantity": (lambda ns: pod("x", ns, cpu="1.5.5"), 400, "quantities must match"),
    "negative quantity": (lambda ns: pod("x", ns, cpu="-1"), 422, "greater than or equal to 0"),
    "fractional extended resource": (
        lambda ns: pod("x", ns, extended={"example.com/gpu": "0.5"}),
        422,
        "must be an integer",
    ),
    "toleration operator": (
        lambda ns: pod("x", ns, tolerations=[{"key": "k", "operator": "Maybe"}]),
        422,
        "spec.tolerations[0].operator",
    ),
    "node affinity operator": (
        lambda ns: pod("x", ns, affinity=_affinity("Near", "1")),
        422,
        "not a valid selector operator",
    ),
    "label value over 63 bytes": (
        lambda ns: pod("x", ns, labels={"k": "v" * 64}),
        422,
        "must be no more than 63",
    ),
    "annotations over 256 KiB": (
        lambda ns: pod("x", ns, annotations={"k": "v" * (256 * 1024)}),
        422,
        "Too long",
    ),
    "host port out of range": (lambda ns: pod("x", ns, host_port=70000), 422, "hostPort"),
    "spec.priority without its class": (
        lambda ns: _with_spec(pod("x", ns), priority=5),
        403,
        "must not be provided",
    ),
}


async def test_the_apiserver_stops_most_malformed_pods(
    control_plane: ControlPlane, rest: RestClient, namespace: str
) -> None:
    """What the scheduler never has to parse; the next test feeds it what gets through."""
    for what, (build, status, text) in REJECTED.items():
        with pytest.raises(ApiError) as err:
            await rest.post(pods_path(namespace), build(namespace))
        assert err.value.status == status and text in err.value.message, (what, err.value)
    unknown = _with_spec(pod("x", namespace), bogusField=1)
    with pytest.raises(ApiError) as err:
        await rest.post(pods_path(namespace), unknown, {"fieldValidation": "Strict"})
    assert 'unknown field "spec.bogusField"' in err.value.message
    created = await rest.post(pods_path(namespace), unknown, {"fieldValidation": "Ignore"})
    assert "bogusField" not in created["spec"], "the server drops unknown fields"
    FIGURES.record("apiserver validation", rejected_kinds=len(REJECTED) + 1)


async def test_malformed_objects_get_a_reason_and_the_rest_keep_flowing(
    control_plane: ControlPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with environment(control_plane) as env, scheduler(control_plane, monkeypatch) as s:
        ns = env.ns
        await create_nodes(
            env.rest, [make_node(f"v-{i}", cpu="4", memory="16Gi") for i in range(2)]
        )
        good = [f"good-{i}" for i in range(6)]
        big = ["big-annotation", "many-labels", "unknown-field"]
        # the apiserver does not check that a Gt/Lt value is an integer (for required
        # terms see test_a_bad_node_affinity_term_matches_no_node)
        bad = "lt-fraction-preferred"
        await create_pods(env.rest, [pod(n, ns) for n in good])
        await create_pods(
            env.rest,
            [
                pod("big-annotation", ns, annotations={"blob": "x" * (200 * 1024)}),
                pod("many-labels", ns, labels={f"k{i:02d}": "v" * 63 for i in range(60)}),
                pod(bad, ns, affinity=_affinity("Lt", "1.5", preferred=True)),
                pod("absurd-cpu", ns, cpu="1e30"),
                _with_spec(
                    pod("missing-claim", ns),
                    volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "nope"}}],
                ),
            ],
        )
        await env.rest.post(
            pods_path(ns),
            _with_spec(pod("unknown-field", ns), bogusField=1),
            {"fieldValidation": "Ignore"},
        )
        await wait_bound(env.rest, ns, [*good, *big])

        async def reported(name: str, text: str) -> JSON | None:
            evs = await events_of(env.rest, ns, name, "FailedScheduling")
            return next((e for e in evs if text in e["note"]), None)

        reported_events: list[JSON] = []
        reasons = {
            bad: "1.5",
            "absurd-cpu": "Insufficient cpu",
            "missing-claim": 'persistentvolumeclaim "nope" not found',
        }
        for name, why in reasons.items():

            async def check(name: str = name, why: str = why) -> JSON | None:
                return await reported(name, why)

            ev = await wait_for(check, what=f"FailedScheduling for {name} saying {why!r}")
            assert ev["type"] == "Warning"
            reported_events.append(ev)
        (ev, *_) = await events_of(env.rest, ns, bad, "FailedScheduling")
        assert "matchExpressions[0]" in ev["note"] and "integer" in ev["note"], ev
        cond = pod_condition((await pods_by_name(env.rest, ns))[bad]) or {}
        assert (cond.get("status"), cond.get("reason")) == ("False", "SchedulerError"), cond

        # a node the scheduler cannot parse, as from a decoding problem (the apiserver
        # refuses such quantities): it is left out until a good version arrives
        nodes = s.informer("nodes")
        raw = await env.rest.get("/api/v1/nodes/v-1")
        corrupt = {
            **raw,
            "metadata": {**raw["metadata"], "resourceVersion": "999999999"},
            "status": {
                **raw["status"],
                "allocatable": {**raw["status"]["allocatable"], "cpu": "lots"},
            },
        }
        nodes.apply("MODIFIED", corrupt)
        unparseable_nodes = int("v-1" in s.app.handlers.bad_nodes)
        assert s.app.snapshot.get("v-1") is None
        assert "status.allocatable.cpu" in s.app.handlers.bad_nodes["v-1"]
        assert s.logs.events("ignoring node that cannot be parsed", node="v-1")
        meanwhile = [f"meanwhile-{i}" for i in range(3)]
        await create_pods(env.rest, [pod(n, ns) for n in meanwhile])
        await wait_bound(env.rest, ns, meanwhile)
        got = await pods_by_name(env.rest, ns)
        assert {node_of(got[n]) for n in meanwhile} == {"v-0"}
        await env.rest.patch("/api/v1/nodes/v-1", {"metadata": {"labels": {"fixed": "yes"}}})

        async def back() -> bool:
            return s.app.snapshot.get("v-1") is not None and "v-1" not in s.app.handlers.bad_nodes

        await wait_for(back, what="the node back once a good version arrived")

        # absurd but valid quantities parse: a node as large as the pod
        await create_nodes(
            env.rest, [make_node("vast", cpu="1e30", extended={"example.com/gpu": "1e30"})]
        )
        await wait_bound(env.rest, ns, ["absurd-cpu"])
        after = [f"after-{i}" for i in range(4)]
        await create_pods(env.rest, [pod(n, ns) for n in after])
        await wait_bound(env.rest, ns, after)
        await asyncio.sleep(2.5)  # long enough for a retry loop to show
        tried = [e.at for e in s.logs.events("attempt failed", pod=f"{ns}/{bad}")]
        gaps = [b - a for a, b in itertools.pairwise(tried)]
        pending = {qp.pod.name for _, qp in s.app.queue.pending()}
        await check_all(
            "malformed objects",
            s,
            env,
            expect_bound=[*good, *big, *meanwhile, "absurd-cpu", *after],
            injected={
                "malformed pods accepted": sum(
                    n in got for n in [*big, bad, "absurd-cpu", "missing-claim"]
                ),
                "malformed pods reported": len(reported_events),
                "unparseable nodes delivered": unparseable_nodes,
            },
            failed_scheduling_reported=len(reasons),
            attempts_of_bad_affinity=len(tried),
        )
        # an error may be retried, after a backoff, never in a loop
        assert all(g >= 0.9 for g in gaps), gaps
        assert pending >= {bad, "missing-claim"}, pending


def _required_terms(*terms: JSON) -> JSON:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}
        }
    }


def _term(key: str, operator: str, *values: str) -> JSON:
    return {"matchExpressions": [{"key": key, "operator": operator, "values": list(values)}]}


async def test_a_bad_node_affinity_term_matches_no_node(
    control_plane: ControlPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What kube-scheduler v1.35 does with these pods (checked against the reference
    kube-scheduler): "or-good" is bound through its good term, "only-bad" is
    Unschedulable: node(s) didn't match Pod's node affinity/selector."""
    async with environment(control_plane) as env, scheduler(control_plane, monkeypatch) as s:
        ns = env.ns
        await create_nodes(env.rest, [make_node("w-0", cpu="2", labels={"rank": "10"})])
        bad = _term("rank", "Gt", "x")
        good = _term("kubernetes.io/os", "In", "linux")
        await create_pods(
            env.rest,
            [
                pod("or-good", ns, affinity=_required_terms(bad, good)),
                pod("only-bad", ns, affinity=_required_terms(bad)),
            ],
        )

        async def decided() -> dict[str, JSON] | None:
            got = await pods_by_name(env.rest, ns)
            return got if all(pod_condition(p) for p in got.values()) else None

        got = await wait_for(decided, what="both pods decided")
        FIGURES.record(
            "bad node-affinity term",
            or_good_bound=bool(node_of(got["or-good"])),
            only_bad_reason=str((pod_condition(got["only-bad"]) or {}).get("reason")),
        )
        assert node_of(got["or-good"]) == "w-0", pod_condition(got["or-good"])
        cond = pod_condition(got["only-bad"]) or {}
        assert cond.get("reason") == "Unschedulable", cond
        assert "didn't match Pod's node affinity/selector" in str(cond.get("message")), cond
        assert s.alive()


async def test_gt_values_are_parsed_as_go_parses_them(
    control_plane: ControlPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with environment(control_plane) as env, scheduler(control_plane, monkeypatch) as s:
        ns = env.ns
        await create_nodes(
            env.rest,
            [
                make_node("i-0", cpu="2", labels={"rank": "11"}),
                make_node("i-1", cpu="2", labels={"rank": "2_0"}),
            ],
        )
        await create_pods(
            env.rest,
            [
                # "1_0" is not an integer to kube-scheduler: the term matches nothing
                pod("underscore-value", ns, affinity=_required_terms(_term("rank", "Gt", "1_0"))),
                # nor is the label "2_0": no node's rank is above 15 (int() reads 20)
                pod("underscore-label", ns, affinity=_required_terms(_term("rank", "Gt", "15"))),
            ],
        )

        async def decided() -> dict[str, JSON] | None:
            got = await pods_by_name(env.rest, ns)
            return got if all(pod_condition(p) for p in got.values()) else None

        got = await wait_for(decided, what="both pods decided")
        placed = {n: node_of(p) for n, p in got.items()}
        FIGURES.record("Gt value parsing", placed=placed)
        assert placed == {"underscore-value": "", "underscore-label": ""}, placed
        assert s.alive()


async def test_an_unschedulable_pod_waits_for_a_relevant_event(
    control_plane: ControlPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing changes in the cluster after the first attempt: no second attempt (the
    scheduler's own PodScheduled=False write is an update of the pod, not a change)."""
    async with environment(control_plane) as env, scheduler(control_plane, monkeypatch) as s:
        await create_nodes(env.rest, [make_node(f"u-{i}", cpu="2") for i in range(2)])

        async def nodes_seen() -> bool:
            # a node added while the pod is in its attempt rightly earns it a retry
            return all(f"u-{i}" in s.app.cache.nodes for i in range(2))

        await wait_for(nodes_seen, what="the scheduler to see both nodes")
        await create_pods(env.rest, [pod("too-big", env.ns, cpu="8")])

        async def reported() -> bool:
            return pod_condition((await pods_by_name(env.rest, env.ns))["too-big"]) is not None

        await wait_for(reported, what="PodScheduled=False on the pod")
        await asyncio.sleep(4.0)  # several times the 1 s backoff of a first failure
        attempts = len(s.logs.events("unschedulable", pod=f"{env.ns}/too-big"))
        FIGURES.record("unschedulable pod left alone", attempts_without_a_change=attempts)
        assert attempts == 1, f"{attempts} attempts while nothing changed"


def _config(body: str) -> str:
    return f"apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n{body}"


BAD_CONFIGS = {
    "unknown field": (_config("colour: blue\n"), "colour: unknown field"),
    "wrong type": (
        _config("parallelism: many\n"),
        'parallelism: expected integer, got string "many"',
    ),
    "unknown plugin": (
        _config(
            "profiles:\n- schedulerName: x\n  plugins:\n    score:\n      enabled:\n"
            "      - name: NoSuchPlugin\n"
        ),
        'profiles[0].plugins.score.enabled[0].name: unknown plugin "NoSuchPlugin"',
    ),
    "bad duration": (
        _config("leaderElection:\n  leaseDuration: 15parsecs\n"),
        'leaderElection.leaseDuration: unknown unit "parsecs"',
    ),
    "bad plugin args": (
        _config(
            "profiles:\n- schedulerName: x\n  pluginConfig:\n  - name: NodeResourcesFit\n"
            "    args:\n      scoringStrategy:\n        type: Cheapest\n"
        ),
        "profiles[0].pluginConfig[0].args.scoringStrategy.type: unsupported value",
    ),
    "negative qps type": (
        _config("clientConnection:\n  burst: lots\n"),
        "clientConnection.burst: expected integer",
    ),
    "old apiVersion": (
        "apiVersion: kubescheduler.config.k8s.io/v1beta3\nkind: KubeSchedulerConfiguration\n",
        "apiVersion: unsupported",
    ),
    "not YAML": ("profiles: [\n", "YAML syntax error"),
}

BAD_FLAGS = {
    "negative port": (
        ["--secure-port", "-1"],
        "argument --secure-port: port must be within 0..65535, got -1",
    ),
    "same ports": (["--insecure-port", "10259"], "--insecure-port: must differ from --secure-port"),
    "key without certificate": (
        ["--tls-private-key-file", "/dev/null"],
        "--tls-cert-file and --tls-private-key-file: give both or neither",
    ),
    "bad cache ttl": (
        ["--authorization-webhook-cache-authorized-ttl", "ten"],
        "argument --authorization-webhook-cache-authorized-ttl: expected a duration",
    ),
    "unknown flag": (["--colour", "blue"], "unrecognized arguments: --colour"),
    "not a bool": (["--leader-elect", "maybe"], "argument --leader-elect: expected true or false"),
    "zero bind concurrency": (
        ["--bind-concurrency", "0"],
        "--bind-concurrency: must be at least 1",
    ),
    "negative grace": (["--shutdown-grace", "-1"], "--shutdown-grace: must not be negative"),
    "not a number": (["--bind-concurrency", "x"], "argument --bind-concurrency: invalid int value"),
}


def _run_kscheduler(args: list[str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": "/nonexistent"}  # it must fail before connecting
    return subprocess.run(
        [sys.executable, "-m", "kscheduler", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("case", list(BAD_CONFIGS))
def test_bad_config_exits_2_naming_the_field(case: str, tmp_path: Path) -> None:
    body, expected = BAD_CONFIGS[case]
    path = tmp_path / "config.yaml"
    path.write_text(body)
    done = _run_kscheduler(["--config", str(path)])
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert done.stderr.startswith(f"kscheduler: invalid configuration: {path}: "), done.stderr
    assert expected in done.stderr, done.stderr
    FIGURES.record("bad config and flags", configs=len(BAD_CONFIGS), flags=len(BAD_FLAGS))


def test_missing_config_file_exits_2(tmp_path: Path) -> None:
    done = _run_kscheduler(["--config", str(tmp_path / "absent.yaml")])
    assert done.returncode == 2 and "cannot read" in done.stderr, done.stderr


@pytest.mark.parametrize("case", list(BAD_FLAGS))
def test_bad_flags_exit_2_naming_the_flag(case: str) -> None:
    args, expected = BAD_FLAGS[case]
    done = _run_kscheduler(args)
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert expected in done.stderr, done.stderr
    assert done.stderr.startswith("usage: kscheduler"), done.stderr


# --------------------------------------------------------------------------- 6. soak

SOAK_SECONDS = float(os.environ.get("KSCHEDULER_SOAK_SECONDS", "300"))
#: Only a run this long says something about the slope; shorter ones still report it.
SOAK_MIN_FOR_SLOPE = 240.0
#: A generous bound: the scheduler keeps bounded records (10000 attempt records, event
#: series for 6 minutes), so a 5-minute run may still grow a little while they fill.
SOAK_MAX_SLOPE_MB_PER_MIN = 8.0
#: From about 11 minutes of this churn on those records are full: the last third of a
#: run at least this long must be nearly flat (a 900 s run measured 0.3 MB/min there).
SOAK_MIN_FOR_PLATEAU = 840.0
SOAK_MAX_PLATEAU_SLOPE_MB_PER_MIN = 1.0
#: Where the soak writes its JSON and RSS curve (``make soak`` passes bench/results).
SOAK_OUT = Path(os.environ.get("KSCHEDULER_SOAK_OUT", str(REPO / "bench-results")))
#: Set to 1 to run kscheduler under tracemalloc (bench/tracemalloc_run.py) and report
#: the allocation sites that grew over the second half. Tracing inflates RSS, so the
#: slope bounds are not checked in such a run.
SOAK_TRACEMALLOC = os.environ.get("KSCHEDULER_SOAK_TRACEMALLOC", "") not in ("", "0")


def traced_totals(snapshots: Path) -> list[tuple[float, float]]:
    from bench.tracemalloc_run import traced_totals as read

    return read(snapshots)


def plot_rss(
    samples: list[tuple[float, float]],
    figures: Mapping[str, Any],
    path: Path,
    traced: list[tuple[float, float]] | None = None,
) -> None:
    """The RSS curve of a soak as a PNG, the second half's fitted slope drawn over it
    (and, under tracemalloc, what the Python heap holds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5))
    ax.plot([t / 60 for t, _ in samples], [v for _, v in samples], lw=1, label="RSS")
    half = [s for s in samples if s[0] >= samples[-1][0] / 2]
    if len(half) >= 2:
        slope = slope_per_minute(half)
        mt = sum(t for t, _ in half) / len(half) / 60
        mv = sum(v for _, v in half) / len(half)
        ends = [half[0][0] / 60, half[-1][0] / 60]
        ax.plot(
            ends,
            [mv + slope * (x - mt) for x in ends],
            "r--",
            lw=1.5,
            label=f"second half: {slope:+.3f} MB/min",
        )
    if traced:
        ax.plot([t / 60 for t, _ in traced], [v for _, v in traced], lw=1, label="traced heap")
    ax.set_xlabel("minutes of churn")
    ax.set_ylabel("kscheduler RSS (MB)")
    ax.set_title(
        f"soak: {figures['pods_created']} pods created, {figures['pods_deleted']} deleted, "
        f"{figures['nodes_replaced']} nodes replaced"
    )
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def rss_mb(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def slope_per_minute(samples: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, MB) samples, in MB per minute."""
    n = len(samples)
    if n < 2:
        return 0.0
    mt = sum(t for t, _ in samples) / n
    mv = sum(v for _, v in samples) / n
    var = sum((t - mt) ** 2 for t, _ in samples)
    if var == 0:
        return 0.0
    return 60.0 * sum((t - mt) * (v - mv) for t, v in samples) / var


@dataclass
class Churn:
    rest: RestClient
    ns: str
    scheduler_name: str
    rng: random.Random
    live: dict[str, bool] = field(default_factory=dict)
    """pod name -> True when it is too large for any node (stays pending)."""
    nodes: list[str] = field(default_factory=list)
    created: int = 0
    deleted: int = 0
    nodes_replaced: int = 0
    orphans_collected: int = 0
    next_node: int = 0

    def make_node(self) -> JSON:
        name = f"soak-n-{self.next_node:04d}"
        self.next_node += 1
        self.nodes.append(name)
        return make_node(name, cpu="8", memory="32Gi", pods=110)

    async def delete_pods(self, names: list[str]) -> None:
        async def one(name: str) -> None:
            try:
                await self.rest.delete(f"{pods_path(self.ns)}/{name}", {"gracePeriodSeconds": 0})
            except ApiError as exc:
                if exc.status != 404:
                    raise
            self.live.pop(name, None)

        await run_bounded(names, one, concurrency=16)
        self.deleted += len(names)

    async def add_pods(self, count: int) -> None:
        batch = []
        for _ in range(count):
            name = f"s-{self.created:06d}"
            self.created += 1
            big = self.rng.random() < 0.04
            cpu = "64" if big else f"{self.rng.choice([50, 100, 150, 200, 250])}m"
            batch.append(
                make_pod(name, self.ns, cpu=cpu, memory="64Mi", scheduler_name=self.scheduler_name)
            )
            self.live[name] = big
        await create_pods(self.rest, batch)

    async def collect_orphans(self) -> None:
        """Delete pods bound to nodes that are gone, as PodGC does."""
        existing = set(self.nodes)
        gone = [
            p["metadata"]["name"]
            for p in await self.rest.list(pods_path(self.ns))
            if node_of(p) and node_of(p) not in existing
        ]
        if gone:
            self.orphans_collected += len(gone)
            await self.delete_pods(gone)

    async def replace_node(self) -> None:
        victim = self.rng.choice(self.nodes)
        self.nodes.remove(victim)
        await self.rest.delete(f"/api/v1/nodes/{victim}")
        await create_nodes(self.rest, [self.make_node()])
        self.nodes_replaced += 1
        await self.collect_orphans()


@pytest.mark.slow
@pytest.mark.timeout(SOAK_SECONDS + 600)
async def test_soak_with_churn(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    duration = SOAK_SECONDS
    name = "soak"
    config = tmp_path / "soak.yaml"
    config.write_text(
        _config(f"leaderElection:\n  leaderElect: false\nprofiles:\n- schedulerName: {name}\n")
    )
    log_path = tmp_path / "kscheduler-soak.log"
    async with ControlPlane() as cp, cp.client() as rest:
        ns = "soak"
        await create_namespace(rest, ns)
        churn = Churn(rest, ns, name, random.Random(7))
        await create_nodes(rest, [churn.make_node() for _ in range(12)])
        snapshots = tmp_path / "tracemalloc"
        runner = (
            ["bench.tracemalloc_run", str(snapshots), str(max(30.0, duration / 10))]
            if SOAK_TRACEMALLOC
            else ["kscheduler"]
        )
        proc = ManagedProcess(
            "kscheduler-soak",
            [
                sys.executable,
                "-m",
                *runner,
                "--config",
                str(config),
                "--kubeconfig",
                str(cp.scheduler_kubeconfig),
                "--secure-port",
                "0",
                "--log-format",
                "json",
            ],
            log_path,
            cwd=REPO,
        )
        proc.start()
        try:
            async with ClusterMonitor.running(cp.admin_kubeconfig) as monitor:

                async def synced() -> bool:
                    assert proc.alive(), proc.log_tail()
                    return any(
                        e.get("event") == "caches synced" for e in json_log_entries(log_path)
                    )

                await wait_for(
                    synced, timeout=180 if SOAK_TRACEMALLOC else 60, what="kscheduler to sync"
                )
                assert proc.pid is not None
                pid = proc.pid
                began = time.monotonic()
                samples: list[tuple[float, float]] = []
                crashed: list[str] = []

                async def sample() -> None:
                    while True:
                        mb = rss_mb(pid)
                        if mb is None or not proc.alive():
                            crashed.append(f"exited with {proc.returncode}")
                            return
                        samples.append((time.monotonic() - began, mb))
                        await asyncio.sleep(2.0)

                sampler = asyncio.create_task(sample())
                next_node_change = began + 20.0
                while time.monotonic() - began < duration and not crashed:
                    tick = time.monotonic()
                    await churn.add_pods(8)
                    if len(churn.live) > 400:
                        await churn.delete_pods(list(churn.live)[: len(churn.live) - 400])
                    if tick >= next_node_change:
                        await churn.replace_node()
                        next_node_change = tick + 20.0
                    await asyncio.sleep(max(0.0, 0.5 - (time.monotonic() - tick)))
                churned = time.monotonic() - began
                await churn.collect_orphans()
                wanted = [n for n, big in churn.live.items() if not big]
                too_big = [n for n, big in churn.live.items() if big]
                await wait_bound(rest, ns, wanted, timeout=180)

                async def big_reported() -> bool:
                    got = await pods_by_name(rest, ns)
                    return all(pod_condition(got[n]) for n in too_big)

                await wait_for(big_reported, timeout=60, what="the too-big pods reported")
                converged = time.monotonic() - began - churned
                await asyncio.sleep(2.0)
                sampler.cancel()
                await asyncio.gather(sampler, return_exceptions=True)
                final = await monitor.final_check()
                entries = json_log_entries(log_path)
                bound = Counter(str(e.get("pod")) for e in entries if e.get("event") == "bound")
                errors = [e for e in entries if e.get("level") in ("error", "critical")]
                second_half = [s for s in samples if s[0] >= samples[-1][0] / 2] if samples else []
                slope = slope_per_minute(second_half)
                last_third = [s for s in samples if s[0] >= samples[-1][0] * 2 / 3]
                plateau = slope_per_minute(last_third)
                got = await pods_by_name(rest, ns)
                lost = [n for n in wanted if not node_of(got.get(n))]
                figures = {
                    "duration_s": round(churned, 1),
                    "converged_after_churn_s": round(converged, 1),
                    "pods_created": churn.created,
                    "pods_deleted": churn.deleted,
                    "nodes_replaced": churn.nodes_replaced,
                    "orphans_collected": churn.orphans_collected,
                    "binds_logged": sum(bound.values()),
                    "pods_lost": len(lost),
                    "double_binds": sum(1 for n in bound.values() if n > 1)
                    + monitor.double_binds(),
                    "overcommits": monitor.overcommits(),
                    "errors_logged": len(errors),
                    "rss_samples": len(samples),
                    "rss_start_mb": round(samples[0][1], 1) if samples else None,
                    "rss_end_mb": round(samples[-1][1], 1) if samples else None,
                    "rss_max_mb": round(max(v for _, v in samples), 1) if samples else None,
                    "rss_slope_second_half_mb_per_min": round(slope, 3),
                    "rss_slope_last_third_mb_per_min": round(plateau, 3),
                }
                FIGURES.record(
                    "soak with churn",
                    faults=churn.nodes_replaced,
                    pods=churn.created,
                    lost=len(lost),
                    **figures,
                )
                growth: list[str] = []
                traced: list[tuple[float, float]] = []
                if SOAK_TRACEMALLOC:
                    from bench.tracemalloc_run import top_growth

                    snaps = sorted(snapshots.glob("snap-*.pickle"))
                    assert len(snaps) >= 2, snaps
                    growth = top_growth(snaps[len(snaps) // 2 - 1], snaps[-1])
                    figures["tracemalloc_snapshots"] = [s.name for s in snaps]
                    traced = traced_totals(snapshots)
                    traced_half = [s for s in traced if s[0] >= traced[-1][0] / 2]
                    # the Python heap's own slope: RSS growing faster is native memory
                    figures["traced_slope_second_half_mb_per_min"] = round(
                        slope_per_minute(traced_half), 3
                    )
                out = SOAK_OUT / f"soak-{time.strftime('%Y%m%d-%H%M%S')}.json"
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_text(
                    orjson.dumps(
                        {
                            **figures,
                            "tracemalloc": SOAK_TRACEMALLOC,
                            "tracemalloc_growth_second_half": growth,
                            "traced": traced,
                            "rss": samples,
                        },
                        option=orjson.OPT_INDENT_2,
                    ).decode()
                )
                png = out.with_suffix(".png")
                plot_rss(samples, figures, png, traced)
                capman = request.config.pluginmanager.getplugin("capturemanager")
                text = "soak figures: " + ", ".join(f"{k}={v}" for k, v in figures.items())
                if growth:
                    text += "\n  grew over the second half:\n    " + "\n    ".join(growth)
                if capman is not None:
                    with capman.global_and_fixture_disabled():
                        print(f"\n{text}\n  (written to {out} and {png})")
                assert_injected(
                    {
                        "nodes replaced": churn.nodes_replaced,
                        "pods deleted": churn.deleted,
                    }
                )
                assert not crashed, crashed
                assert proc.alive(), proc.log_tail()
                monitor.assert_ok()
                assert not final, final
                assert not [k for k, n in bound.items() if n > 1]
                assert not errors, errors[:5]
                assert not lost, lost[:20]
                if churned >= SOAK_MIN_FOR_SLOPE and not SOAK_TRACEMALLOC:
                    assert slope < SOAK_MAX_SLOPE_MB_PER_MIN, figures
                if churned >= SOAK_MIN_FOR_PLATEAU and not SOAK_TRACEMALLOC:
                    assert plateau < SOAK_MAX_PLATEAU_SLOPE_MB_PER_MIN, figures
        finally:
            rc = await asyncio.to_thread(proc.stop, 30.0)
        assert rc == 0, (rc, proc.log_tail())
