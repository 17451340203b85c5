"""HTTP extenders against a small aiohttp server: the wire format, the verdicts, the
cycle's use of them (filter, scores, bind, preemption), TLS and failure handling."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import re
import ssl
import subprocess
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import web

from kscheduler.algorithm import Algorithm, FitError, ScheduleError
from kscheduler.cache import Cache, Snapshot
from kscheduler.config import (
    Extender,
    ExtenderManagedResource,
    ExtenderTLSConfig,
    load_config,
)
from kscheduler.extender import (
    EXTENDER_NAME,
    ExtenderError,
    HTTPExtender,
    Victims,
    bind_with_extenders,
    find_nodes_that_pass_extenders,
    prioritize_with_extenders,
    process_preemption,
    ssl_context,
    with_extender_ignored_resources,
)
from kscheduler.framework import Code, CycleState, NodeToStatus, PluginEntry, Status
from kscheduler.framework.parse import parse_pod
from kscheduler.framework.types import NodeInfo, PodInfo
from kscheduler.plugins import in_tree_registry
from kscheduler.queue import SchedulingQueue
from kscheduler.scheduler import Scheduler
from tests.unit.builders import node, pod
from tests.unit.fakes import FakeClient, Sort, framework

Handler = Callable[[dict[str, Any]], Any]


class ExtenderServer:
    """Answers each verb with a handler(body) -> reply (or an aiohttp Response)."""

    def __init__(self) -> None:
        self.handlers: dict[str, Handler] = {}
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.port = 0
        self._runner: web.AppRunner | None = None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        verb = request.match_info["verb"]
        body = await request.json()
        self.requests.append((verb, body))
        handler = self.handlers.get(verb)
        if handler is None:
            return web.Response(status=404)
        reply = handler(body)
        if asyncio.iscoroutine(reply):
            reply = await reply
        if isinstance(reply, web.StreamResponse):
            return reply
        return web.json_response(reply)

    async def start(self, ssl_ctx: ssl.SSLContext | None = None) -> None:
        app = web.Application()
        app.router.add_post("/ext/{verb}", self._handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=ssl_ctx)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def url(self, scheme: str = "http") -> str:
        return f"{scheme}://127.0.0.1:{self.port}/ext"

    def verbs(self) -> list[str]:
        return [v for v, _ in self.requests]


@pytest_asyncio.fixture
async def server() -> AsyncIterator[ExtenderServer]:
    s = ExtenderServer()
    await s.start()
    try:
        yield s
    finally:
        await s.stop()


def ext_config(url: str, **kw: Any) -> Extender:
    return Extender(url_prefix=url, **kw)


def nodes(*names: str) -> list[NodeInfo]:
    return [node(n).alloc(cpu="4", pods=10).labels(name=n).build() for n in names]


def names(ns: list[NodeInfo]) -> list[str]:
    return [n.name for n in ns]


@pytest_asyncio.fixture
async def closing() -> AsyncIterator[list[HTTPExtender]]:
    made: list[HTTPExtender] = []
    yield made
    for e in made:
        await e.close()


def make(closing: list[HTTPExtender], cfg: Extender) -> HTTPExtender:
    e = HTTPExtender(cfg)
    closing.append(e)
    return e


# ---- wire format -------------------------------------------------------------------------


async def test_filter_sends_go_field_names_and_whole_nodes(
    server: ExtenderServer, closing: list[HTTPExtender]
) -> None:
    server.handlers["filter"] = lambda body: {
        "Nodes": {"items": [i for i in body["Nodes"]["items"] if i["metadata"]["name"] != "b"]},
        "NodeNames": None,
        "FailedNodes": {"b": "b is busy"},
        "FailedAndUnresolvableNodes": {},
        "Error": "",
    }
    ext = make(closing, ext_config(server.url(), filter_verb="filter"))
    p = pod("p").req(cpu="1").build()
    passed, failed, unresolvable = await ext.filter(p, nodes("a", "b", "c"))
    assert names(passed) == ["a", "c"]
    assert failed == {"b": "b is busy"} and unresolvable == {}
    verb, body = server.requests[0]
    assert verb == "filter"
    assert set(body) == {"Pod", "Nodes", "NodeNames"}
    assert body["NodeNames"] is None
    assert body["Pod"]["metadata"]["name"] == "p"
    assert [i["metadata"]["name"] for i in body["Nodes"]["items"]] == ["a", "b", "c"]
    assert body["Nodes"]["items"][0]["status"]["allocatable"]["cpu"] == "4"


async def test_node_cache_capable_sends_names_and_reads_names_in_any_case(
    server: ExtenderServer, closing: list[HTTPExtender]
) -> None:
    server.handlers["filter"] = lambda body: {
        "nodenames": [n for n in body["NodeNames"] if n != "a"],
        "failedAndUnresolvableNodes": {"a": "a can never run it"},
    }
    ext = make(closing, ext_config(server.url(), filter_verb="filter", node_cache_capable=True))
    passed, failed, unresolvable = await ext.filter(pod("p").build(), nodes("a", "b"))
    assert names(passed) == ["b"]
    assert unresolvable == {"a": "a can never run it"} and failed == {}
    body = server.requests[0][1]
    assert body["Nodes"] is None and body["NodeNames"] == ["a", "b"]


async def test_filter_reply_errors(server: ExtenderServer, closing: list[HTTPExtender]) -> None:
    ext = make(closing, ext_config(server.url(), filter_verb="filter", node_cache_capable=True))
    p = pod("p").build()
    server.handlers["filter"] = lambda body: {"Error": "the extender is unhappy"}
    with pytest.raises(ExtenderError, match="the extender is unhappy"):
        await ext.filter(p, nodes("a"))
    server.handlers["filter"] = lambda body: {"NodeNames": ["a", "zz"]}
    with pytest.raises(ExtenderError, match='claims a filtered node "zz"'):
        await ext.filter(p, nodes("a"))
    server.handlers["filter"] = lambda body: web.Response(status=500, text="boom")
    with pytest.raises(
        ExtenderError, match=r"failed filter with extender at URL .*/ext/filter, code 500"
    ):
        await ext.filter(p, nodes("a"))
    server.handlers["filter"] = lambda body: web.Response(text="not json")
    with pytest.raises(ExtenderError, match="not JSON"):
        await ext.filter(p, nodes("a"))
    # no filter verb: everything passes, nothing is sent
    quiet = make(closing, ext_config(server.url()))
    before = len(server.requests)
    passed, _, _ = await quiet.filter(p, nodes("a", "b"))
    assert names(passed) == ["a", "b"] and len(server.requests) == before


async def test_timeout_and_unreachable(server: ExtenderServer, closing: list[HTTPExtender]) -> None:
    async def slow(body: dict[str, Any]) -> Any:
        await asyncio.sleep(1.0)
        return {"NodeNames": body["NodeNames"]}

    server.handlers["filter"] = slow
    ext = make(
        closing,
        ext_config(server.url(), filter_verb="filter", node_cache_capable=True, http_timeout=0.2),
    )
    with pytest.raises(ExtenderError, match=r"no reply within 0.2s"):
        await ext.filter(pod("p").build(), nodes("a"))
    gone = make(closing, ext_config("http://127.0.0.1:1/ext", filter_verb="filter"))
    with pytest.raises(
        ExtenderError, match=re.escape("with extender at URL http://127.0.0.1:1/ext/filter")
    ):
        await gone.filter(pod("p").build(), nodes("a"))


async def test_prioritize_bind_and_their_bodies(
    server: ExtenderServer, closing: list[HTTPExtender]
) -> None:
    server.handlers["prioritize"] = lambda body: [
        {"Host": "a", "Score": 2},
        {"host": "b", "score": 10},
        {"Host": "elsewhere", "Score": 10},
    ]
    server.handlers["bind"] = lambda body: {"Error": ""}
    ext = make(
        closing,
        ext_config(server.url(), prioritize_verb="prioritize", bind_verb="bind", weight=3),
    )
    p = pod("p").uid("u-1").build()
    scores = await prioritize_with_extenders([ext], p, nodes("a", "b", "c"))
    assert {k: [(s.name, s.score) for s in v] for k, v in scores.items()} == {
        server.url(): [("a", 2 * 3 * 10), ("b", 10 * 3 * 10), ("c", 0)]
    }
    taken, st = await bind_with_extenders([ext], p, "b")
    assert taken and st is None
    assert server.requests[-1] == (
        "bind",
        {"PodName": "p", "PodNamespace": "default", "PodUID": "u-1", "Node": "b"},
    )
    server.handlers["bind"] = lambda body: {"Error": "no room after all"}
    taken, st = await bind_with_extenders([ext], p, "b")
    assert taken and st is not None and st.code == Code.ERROR
    assert "no room after all" in st.message and st.plugin == EXTENDER_NAME


async def test_prioritize_failures_are_ignored(
    server: ExtenderServer, closing: list[HTTPExtender]
) -> None:
    server.handlers["good"] = lambda body: [{"Host": "a", "Score": 1}]
    server.handlers["bad"] = lambda body: web.Response(status=503)
    good = make(closing, ext_config(server.url(), prioritize_verb="good", weight=1))
    bad = make(closing, ext_config(server.url(), prioritize_verb="bad", weight=5))
    scores = await prioritize_with_extenders([bad, good], pod("p").build(), nodes("a", "b"))
    assert list(scores) == [server.url()]
    assert [s.score for s in scores[server.url()]] == [10, 0]


async def test_ignorable_and_managed_resources(
    server: ExtenderServer, closing: list[HTTPExtender]
) -> None:
    server.handlers["filter"] = lambda body: web.Response(status=500)
    server.handlers["bind"] = lambda body: web.Response(status=500)
    ignorable = make(
        closing,
        ext_config(server.url(), filter_verb="filter", bind_verb="bind", ignorable=True),
    )
    p = pod("p").build()
    statuses = NodeToStatus()
    out = await find_nodes_that_pass_extenders([ignorable], p, nodes("a", "b"), statuses)
    assert names(out) == ["a", "b"] and not statuses.statuses
    assert await bind_with_extenders([ignorable], p, "a") == (False, None)

    strict = make(closing, ext_config(server.url(), filter_verb="filter"))
    with pytest.raises(ExtenderError):
        await find_nodes_that_pass_extenders([strict], p, nodes("a"), NodeToStatus())

    gpu = make(
        closing,
        ext_config(
            server.url(),
            filter_verb="filter",
            managed_resources=(ExtenderManagedResource("example.com/gpu"),),
        ),
    )
    assert not gpu.is_interested(p)
    assert gpu.is_interested(pod("g").req(cpu="1", **{"example.com/gpu": "1"}).build())
    assert gpu.is_interested(pod("i").init(**{"example.com/gpu": "1"}).build())
    before = len(server.requests)
    out = await find_nodes_that_pass_extenders([gpu], p, nodes("a"), NodeToStatus())
    assert names(out) == ["a"] and len(server.requests) == before  # not interested: not asked


async def test_extenders_filter_in_turn_and_statuses(
    server: ExtenderServer, closing: list[HTTPExtender]
) -> None:
    server.handlers["first"] = lambda body: {
        "NodeNames": [n for n in body["NodeNames"] if n != "a"],
        "FailedNodes": {"a": "first says no", "b": "ignored: also unresolvable"},
        "FailedAndUnresolvableNodes": {"b": "first says never"},
    }
    server.handlers["second"] = lambda body: {
        "NodeNames": [n for n in body["NodeNames"] if n != "c"],
        "FailedNodes": {"c": "second says no", "a": "not sent to me"},
    }
    first = make(closing, ext_config(server.url(), filter_verb="first", node_cache_capable=True))
    second = make(closing, ext_config(server.url(), filter_verb="second", node_cache_capable=True))
    statuses = NodeToStatus()
    # "first" keeps b although it failed it: the node list is what counts, the maps only
    # explain the rejections
    out = await find_nodes_that_pass_extenders(
        [first, second], pod("p").build(), nodes("a", "b", "c", "d"), statuses
    )
    assert names(out) == ["b", "d"]
    assert server.requests[1][1]["NodeNames"] == ["b", "c", "d"]
    got = {n: (st.code, st.reasons, st.plugin) for n, st in statuses.statuses.items()}
    assert got == {
        "a": (Code.UNSCHEDULABLE, ["first says no"], EXTENDER_NAME),
        "b": (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ["first says never"], EXTENDER_NAME),
        "c": (Code.UNSCHEDULABLE, ["second says no"], EXTENDER_NAME),
    }


# ---- preemption --------------------------------------------------------------------------


async def test_process_preemption(server: ExtenderServer, closing: list[HTTPExtender]) -> None:
    cache = Cache()
    v1 = pod("v1").uid("uid-v1").build()
    v2 = pod("v2").uid("uid-v2").build()
    v3 = pod("v3").uid("uid-v3").build()
    cache.add_node(node("a").alloc(cpu="4").record())
    cache.add_node(node("b").alloc(cpu="4").record())
    for v, n in ((v1, "a"), (v2, "a"), (v3, "b")):
        cache.add_pod(v.with_node(n))
    snap = Snapshot(cache)
    snap.update()
    victims = {"a": Victims([v1, v2], 1), "b": Victims([v3], 0)}
    server.handlers["preempt"] = lambda body: {
        "NodeNameToMetaVictims": {"a": {"Pods": [{"UID": "uid-v2"}], "NumPDBViolations": 0}}
    }
    meta = make(closing, ext_config(server.url(), preempt_verb="preempt", node_cache_capable=True))
    p = pod("hi").build()
    out = await process_preemption([meta], p, victims, snap)
    assert list(out) == ["a"] and [x.name for x in out["a"].pods] == ["v2"]
    assert out["a"].num_pdb_violations == 0
    body = server.requests[-1][1]
    assert body["NodeNameToVictims"] is None
    assert body["NodeNameToMetaVictims"] == {
        "a": {"Pods": [{"UID": "uid-v1"}, {"UID": "uid-v2"}], "NumPDBViolations": 1},
        "b": {"Pods": [{"UID": "uid-v3"}], "NumPDBViolations": 0},
    }
    whole = make(closing, ext_config(server.url(), preempt_verb="preempt"))
    await process_preemption([whole], p, victims, snap)
    body = server.requests[-1][1]
    assert body["NodeNameToMetaVictims"] is None
    assert [x["metadata"]["name"] for x in body["NodeNameToVictims"]["a"]["Pods"]] == ["v1", "v2"]
    # a victim the node does not have, or a node without victims, is an error
    server.handlers["preempt"] = lambda body: {
        "NodeNameToMetaVictims": {"b": {"Pods": [{"UID": "uid-v1"}]}}
    }
    with pytest.raises(ExtenderError, match="not found on that node"):
        await process_preemption([meta], p, victims, snap)
    server.handlers["preempt"] = lambda body: {"NodeNameToMetaVictims": {"b": {"Pods": []}}}
    with pytest.raises(ExtenderError, match="expected at least one victim pod"):
        await process_preemption([meta], p, victims, snap)


# ---- in the cycle ------------------------------------------------------------------------


class FitCPU:
    name = "FitCPU"

    def filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status | None:
        free = node_info.allocatable.milli_cpu - node_info.requested.milli_cpu
        return None if pod.requests.milli_cpu <= free else Status.unschedulable("Insufficient cpu")


class Spread:
    """Scores emptier nodes higher (0..100)."""

    name = "Spread"

    def score(
        self, state: CycleState, pod: PodInfo, node_info: NodeInfo
    ) -> tuple[int, Status | None]:
        return max(0, 100 - 10 * len(node_info.pods)), None


class Binder:
    name = "Binder"

    def __init__(self, client: FakeClient) -> None:
        self.client = client

    async def bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status | None:
        await self.client.bind(pod, node_name)
        return None


def cycle_framework(cache: Cache, client: FakeClient | None = None) -> Any:
    client = client or FakeClient()
    es = [
        PluginEntry("Sort", Sort, lambda a, h: Sort()),
        PluginEntry("FitCPU", FitCPU, lambda a, h: FitCPU()),
        PluginEntry("Spread", Spread, lambda a, h: Spread()),
        PluginEntry("Binder", Binder, lambda a, h: Binder(client)),
    ]
    return framework(
        es,
        {"queueSort": ["Sort"], "filter": ["FitCPU"], "score": ["Spread"], "bind": ["Binder"]},
        cache=cache,
        client=client,
    )


def cluster(*specs: tuple[str, str]) -> Cache:
    c = Cache()
    for name, cpu in specs:
        c.add_node(node(name).alloc(cpu=cpu, pods=10).record())
    return c


async def test_cycle_follows_extender_verdicts_and_scores(
    server: ExtenderServer, closing: list[HTTPExtender]
) -> None:
    cache = cluster(("a", "4"), ("b", "4"), ("c", "4"), ("small", "1"))
    fwk, snap, _, _ = cycle_framework(cache)
    server.handlers["filter"] = lambda body: {
        "NodeNames": [n for n in body["NodeNames"] if n != "a"],
        "FailedNodes": {"a": "a is reserved"},
    }
    server.handlers["prioritize"] = lambda body: [{"Host": "c", "Score": 10}]
    ext = make(
        closing,
        ext_config(
            server.url(),
            filter_verb="filter",
            prioritize_verb="prioritize",
            weight=2,
            node_cache_capable=True,
        ),
    )
    alg = Algorithm()
    snap.update()
    p = pod("p").req(cpu="2").build()
    r = await alg.schedule_pod_with_extenders(fwk, CycleState(), p, snap, [ext])
    # the Filter plugin already removed "small": the extender sees only the others
    assert server.requests[0][1]["NodeNames"] in (["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"])
    assert r.suggested_host == "c"
    assert r.totals == {"b": 100, "c": 100 + 10 * 2 * 10}
    assert r.scores is not None and set(r.scores) == {"Spread", server.url()}
    assert r.feasible_nodes == 2 and r.evaluated_nodes == 4

    # everything rejected: the FitError lists the extender's reason and any event may help
    server.handlers["filter"] = lambda body: {
        "NodeNames": [],
        "FailedNodes": dict.fromkeys(body["NodeNames"], "the extender says no"),
    }
    with pytest.raises(FitError) as ei:
        await alg.schedule_pod_with_extenders(fwk, CycleState(), p, snap, [ext])
    assert str(ei.value) == ("0/4 nodes are available: 1 Insufficient cpu, 3 the extender says no.")
    assert ei.value.diagnosis.unschedulable_plugins == set()

    # a failing extender is an error of the attempt
    server.handlers["filter"] = lambda body: web.Response(status=502)
    with pytest.raises(ScheduleError) as se:
        await alg.schedule_pod_with_extenders(fwk, CycleState(), p, snap, [ext])
    assert se.value.status.code == Code.ERROR and "code 502" in se.value.status.message


async def test_a_nominated_node_the_extender_rejects_leads_to_a_full_search(
    server: ExtenderServer, closing: list[HTTPExtender]
) -> None:
    cache = cluster(("a", "4"), ("b", "4"))
    fwk, snap, _, _ = cycle_framework(cache)
    server.handlers["filter"] = lambda body: {
        "NodeNames": [n for n in body["NodeNames"] if n != "a"],
        "FailedNodes": {"a": "not a"},
    }
    ext = make(closing, ext_config(server.url(), filter_verb="filter", node_cache_capable=True))
    snap.update()
    p = pod("p").req(cpu="1").nominated("a").build()
    r = await Algorithm().schedule_pod_with_extenders(fwk, CycleState(), p, snap, [ext])
    assert r.suggested_host == "b"
    sent = [body["NodeNames"] for _, body in server.requests]
    assert sent[0] == ["a"] and sorted(sent[1]) == ["a", "b"]


async def test_nodes_that_change_during_the_call_are_filtered_again(
    server: ExtenderServer, closing: list[HTTPExtender]
) -> None:
    cache = cluster(("a", "2"), ("b", "2"), ("c", "2"))
    fwk, snap, _, _ = cycle_framework(cache)
    other = pod("other").uid("other").req(cpu="2").build()

    def fill_a_and_drop_c(body: dict[str, Any]) -> Any:
        # meanwhile, another scheduler's pod lands on "a" and "c" goes away
        cache.add_pod(other.with_node("a"))
        cache.remove_node("c")
        return {"NodeNames": body["NodeNames"]}

    server.handlers["filter"] = fill_a_and_drop_c
    ext = make(closing, ext_config(server.url(), filter_verb="filter", node_cache_capable=True))
    snap.update()
    p = pod("p").req(cpu="1").build()
    r = await Algorithm().schedule_pod_with_extenders(
        fwk, CycleState(), p, snap, [ext], refresh=snap.update
    )
    assert r.suggested_host == "b" and r.feasible_nodes == 1


async def test_scheduler_binds_through_the_extender_and_closes_it(
    server: ExtenderServer,
) -> None:
    bound: list[dict[str, Any]] = []

    def bind(body: dict[str, Any]) -> Any:
        bound.append(body)
        return {}

    server.handlers["bind"] = bind
    server.handlers["prioritize"] = lambda body: [{"Host": "b", "Score": 10}]
    cache = cluster(("a", "4"), ("b", "4"))
    client = FakeClient()
    fwk, snap, _, _ = cycle_framework(cache, client)
    q = SchedulingQueue(sort_key=fwk.queue_sort_key(), pre_enqueue=lambda p: None, events={})
    ext = HTTPExtender(
        ext_config(server.url(), bind_verb="bind", prioritize_verb="prioritize", weight=1)
    )
    s = Scheduler(
        cache=cache,
        queue=q,
        profiles={"test-scheduler": fwk},
        algorithm=Algorithm(),
        status_writer=client,
        snapshot=snap,
        extenders=[ext],
    )
    raw = pod("p").uid("uid-p").req(cpu="1").raw()
    raw["spec"]["schedulerName"] = "test-scheduler"
    q.add(parse_pod(raw))
    qp = await q.pop()
    assert qp is not None
    await s.schedule_one(qp)
    await s.binds.drain(5)
    assert bound == [{"PodName": "p", "PodNamespace": "default", "PodUID": "uid-p", "Node": "b"}]
    assert client.bound == []  # the bind plugin was not asked
    await s.shutdown(1)
    assert ext._session is None


# ---- configuration helpers ---------------------------------------------------------------


def test_ignored_by_scheduler_resources_reach_node_resources_fit() -> None:
    cfg = load_config(
        """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
extenders:
- urlPrefix: http://127.0.0.1:1/ext
  filterVerb: filter
  managedResources:
  - name: example.com/gpu
    ignoredByScheduler: true
  - name: example.com/fpga
profiles:
- schedulerName: a
  pluginConfig:
  - name: NodeResourcesFit
    args:
      ignoredResources: [example.com/other]
- schedulerName: b
""",
        registry=in_tree_registry(),
    )
    out = with_extender_ignored_resources(cfg)
    for p in out.profiles:
        args: Any = p.plugin_args["NodeResourcesFit"]
        assert "example.com/gpu" in args.ignored_resources
        assert "example.com/fpga" not in args.ignored_resources
    first: Any = out.profiles[0].plugin_args["NodeResourcesFit"]
    assert "example.com/other" in first.ignored_resources
    plain = dataclasses.replace(cfg, extenders=())
    assert with_extender_ignored_resources(plain) is plain


# ---- TLS ---------------------------------------------------------------------------------


def _self_signed(tmp: Path) -> tuple[Path, Path]:
    cert, key = tmp / "server.crt", tmp / "server.key"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=extender.test",
            "-addext",
            "subjectAltName=DNS:extender.test",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


async def test_https_with_ca_and_server_name(tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    s = ExtenderServer()
    await s.start(server_ctx)
    s.handlers["filter"] = lambda body: {"NodeNames": body["NodeNames"]}
    made: list[HTTPExtender] = []
    try:
        ca = base64.b64decode(base64.b64encode(cert.read_bytes()))
        verified = make(
            made,
            ext_config(
                s.url("https"),
                filter_verb="filter",
                node_cache_capable=True,
                enable_https=True,
                tls_config=ExtenderTLSConfig(ca_data=ca, server_name="extender.test"),
            ),
        )
        passed, _, _ = await verified.filter(pod("p").build(), nodes("a"))
        assert names(passed) == ["a"]
        # the CA is right but the name is not: refused
        wrong_name = make(
            made,
            ext_config(
                s.url("https"),
                filter_verb="filter",
                node_cache_capable=True,
                tls_config=ExtenderTLSConfig(ca_file=str(cert)),
            ),
        )
        with pytest.raises(ExtenderError, match="filter with extender"):
            await wrong_name.filter(pod("p").build(), nodes("a"))
        # enableHTTPS without a CA does not verify the server, as upstream
        unverified = make(
            made,
            ext_config(
                s.url("https"), filter_verb="filter", node_cache_capable=True, enable_https=True
            ),
        )
        passed, _, _ = await unverified.filter(pod("p").build(), nodes("a"))
        assert names(passed) == ["a"]
    finally:
        for e in made:
            await e.close()
        await s.stop()


def test_tls_files_are_checked_at_startup(tmp_path: Path) -> None:
    assert ssl_context(ext_config("http://x")) is None
    with pytest.raises(ExtenderError, match="cannot load the CA"):
        ssl_context(
            ext_config("https://x", tls_config=ExtenderTLSConfig(ca_file=str(tmp_path / "none")))
        )
    cert, key = _self_signed(tmp_path)
    ctx = ssl_context(
        ext_config(
            "https://x",
            enable_https=True,
            tls_config=ExtenderTLSConfig(cert_data=cert.read_bytes(), key_data=key.read_bytes()),
        )
    )
    assert ctx is not None and ctx.verify_mode == ssl.CERT_NONE
    with pytest.raises(ExtenderError, match="client certificate"):
        ssl_context(ext_config("https://x", tls_config=ExtenderTLSConfig(cert_data=b"junk")))
