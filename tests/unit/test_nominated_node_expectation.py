"""NominatedNodeNameForExpectation: PreBind pre-flights, the nominatedNodeName write at
the start of the binding cycle, its clearing when the binding cycle fails, and the
grouping of PreBind plugins the pre-flights decide."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from kscheduler.algorithm import Algorithm
from kscheduler.cache import Cache
from kscheduler.framework import CycleState, PluginEntry, PreBindPreFlightResult, Status
from kscheduler.framework import features as ft
from kscheduler.framework.parse import parse_pod
from kscheduler.framework.status import Code
from kscheduler.framework.types import NodeInfo, PodInfo
from kscheduler.queue import SchedulingQueue
from kscheduler.scheduler import Scheduler
from tests.unit.builders import node, pod
from tests.unit.fakes import FakeClient, Sort, framework


class Fit:
    name = "Fit"

    def filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status | None:
        return None


class Binder:
    name = "Binder"

    def __init__(self, client: FakeClient) -> None:
        self.client = client

    async def bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status | None:
        await self.client.bind(pod, node_name)
        return None


class Volumes:
    """A PreBind plugin with a pre-flight answering ``answer``."""

    name = "Volumes"

    def __init__(self, answer: Status | None, pre_bind: Status | None = None) -> None:
        self.answer = answer
        self.result = pre_bind
        self.ran = 0

    def pre_bind_pre_flight(
        self, state: CycleState, pod: PodInfo, node_name: str
    ) -> tuple[PreBindPreFlightResult | None, Status | None]:
        return None, self.answer

    async def pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status | None:
        self.ran += 1
        return self.result


class OldPreBind:
    """A PreBind plugin without a pre-flight."""

    name = "OldPreBind"

    def __init__(self) -> None:
        self.ran = 0

    async def pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status | None:
        self.ran += 1
        return None


class Gate:
    """A Permit plugin that makes every pod wait, then allows it."""

    name = "Gate"

    def permit(
        self, state: CycleState, pod: PodInfo, node_name: str
    ) -> tuple[Status | None, float]:
        return Status.wait(), 10.0


@pytest.fixture
def gate_off() -> Iterator[None]:
    ft.configure(ft.gates_from({ft.NOMINATED_NODE_NAME_FOR_EXPECTATION: False}))
    try:
        yield
    finally:
        ft.configure(ft.FeatureGates())


def build(
    client: FakeClient, plugins: dict[str, Any], *, permit: bool = False
) -> tuple[Scheduler, SchedulingQueue, Any]:
    cache = Cache()
    cache.add_node(node("n1").alloc(cpu="2").record())
    entries = [
        PluginEntry("Sort", Sort, lambda a, h: Sort()),
        PluginEntry("Fit", Fit, lambda a, h: Fit()),
        PluginEntry("Binder", Binder, lambda a, h: Binder(client)),
        *(PluginEntry(n, type(p), lambda a, h, p=p: p) for n, p in plugins.items()),
    ]
    points: dict[str, list[str]] = {
        "queueSort": ["Sort"],
        "filter": ["Fit"],
        "bind": ["Binder"],
        "preBind": [n for n in plugins if n != "Gate"],
    }
    if permit:
        entries.append(PluginEntry("Gate", Gate, lambda a, h: Gate()))
        points["permit"] = ["Gate"]
    fwk, snap, _, _ = framework(entries, points, cache=cache, client=client, name="s")
    q = SchedulingQueue(sort_key=fwk.queue_sort_key(), pre_enqueue=lambda p: None, events={})
    s = Scheduler(
        cache=cache,
        queue=q,
        profiles={"s": fwk},
        algorithm=Algorithm(),
        status_writer=client,
        snapshot=snap,
    )
    return s, q, fwk


def ours(name: str, nominated: str = "") -> PodInfo:
    raw = pod(name).req(cpu="1").raw()
    raw["spec"]["schedulerName"] = "s"
    if nominated:
        raw["status"]["nominatedNodeName"] = nominated
    return parse_pod(raw)


async def run_one(s: Scheduler, q: SchedulingQueue, fwk: Any = None) -> None:
    qp = await q.pop()
    assert qp is not None
    await s.schedule_one(qp)
    for _ in range(5):
        await asyncio.sleep(0)
    if fwk is not None:
        for wp in fwk.iterate_waiting_pods():
            wp.allow("Gate")
    await s.binds.drain(5)
    s.binds.accepting = True
    await s.writes.drain(5)
    s.writes.accepting = True


def nnn_writes(client: FakeClient) -> list[Any]:
    return [
        p["status"]["nominatedNodeName"]
        for _, p in client.status_patches
        if "nominatedNodeName" in p.get("status", {})
    ]


@pytest.mark.parametrize(
    ("answer", "written", "pre_bind_runs"),
    [
        (None, ["n1"], 1),  # Success: PreBind will work, the node is announced first
        (Status.skip(), [], 0),  # Skip: nothing to announce, PreBind not run
    ],
)
async def test_pre_flight_decides_the_write(
    answer: Status | None, written: list[str], pre_bind_runs: int
) -> None:
    client = FakeClient()
    vol = Volumes(answer)
    s, q, _ = build(client, {"Volumes": vol})
    q.add(ours("p"))
    await run_one(s, q)
    assert nnn_writes(client) == written
    assert vol.ran == pre_bind_runs
    assert client.bound == [("default/p", "n1")]


async def test_waiting_on_permit_announces_the_node() -> None:
    client = FakeClient()
    s, q, fwk = build(client, {"Volumes": Volumes(Status.skip())}, permit=True)
    q.add(ours("p"))
    await run_one(s, q, fwk)
    assert nnn_writes(client) == ["n1"]
    assert client.bound == [("default/p", "n1")]


async def test_plugin_without_pre_flight_runs_but_does_not_announce() -> None:
    client = FakeClient()
    old = OldPreBind()
    s, q, _ = build(client, {"OldPreBind": old})
    q.add(ours("p"))
    await run_one(s, q)
    assert nnn_writes(client) == []
    assert old.ran == 1


async def test_no_rewrite_when_already_nominated_there() -> None:
    client = FakeClient()
    s, q, _ = build(client, {"Volumes": Volumes(None)})
    q.add(ours("p", nominated="n1"))
    await run_one(s, q)
    assert nnn_writes(client) == []


@pytest.mark.usefixtures("gate_off")
async def test_gate_off_no_pre_flight_no_write() -> None:
    client = FakeClient()
    vol = Volumes(Status.skip())
    s, q, _ = build(client, {"Volumes": vol})
    q.add(ours("p"))
    await run_one(s, q)
    assert nnn_writes(client) == []
    assert vol.ran == 1  # without pre-flights every PreBind runs


@pytest.mark.parametrize(
    "answer",
    [Status.as_error("boom"), Status.unschedulable("no"), Status(Code.WAIT, ["later"])],
)
async def test_pre_flight_failure_fails_the_binding_cycle(answer: Status) -> None:
    client = FakeClient()
    vol = Volumes(answer)
    s, q, _ = build(client, {"Volumes": vol})
    q.add(ours("p"))
    await run_one(s, q)
    assert client.bound == []
    assert vol.ran == 0
    rec = s.last_attempts["default/p"]
    assert rec.result == "error"
    assert "PreBindPreFlight" in rec.message


async def test_binding_failure_clears_the_announced_node() -> None:
    client = FakeClient()
    s, q, _ = build(client, {"Volumes": Volumes(None, pre_bind=Status.as_error("volume"))})
    q.add(ours("p"))
    await run_one(s, q)
    assert client.bound == []
    assert nnn_writes(client) == ["n1", None]


class Par:
    def __init__(self, name: str, *, parallel: bool, skip: bool = False) -> None:
        self.name = name
        self.parallel = parallel
        self.skip = skip

    def pre_bind_pre_flight(
        self, state: CycleState, pod: PodInfo, node_name: str
    ) -> tuple[PreBindPreFlightResult | None, Status | None]:
        return PreBindPreFlightResult(allow_parallel=self.parallel), (
            Status.skip() if self.skip else None
        )

    async def pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status | None:
        return None


@pytest.mark.parametrize(
    ("plugins", "groups"),
    [
        ([("a", False, False), ("b", False, False)], [["a"], ["b"]]),
        ([("a", True, False), ("b", True, False), ("c", False, False)], [["a", "b"], ["c"]]),
        # a skipped plugin that allows concurrency is left out of its group
        ([("a", True, False), ("b", True, True), ("c", True, False)], [["a", "c"]]),
        # a skipped plugin that does not allow it still splits the group
        ([("a", True, False), ("b", False, True), ("c", True, False)], [["a"], ["c"]]),
        ([("a", False, True)], []),
    ],
)
def test_pre_bind_groups(plugins: list[tuple[str, bool, bool]], groups: list[list[str]]) -> None:
    client = FakeClient()
    pls = {n: Par(n, parallel=par, skip=skip) for n, par, skip in plugins}
    _, _, fwk = build(client, pls)
    state = CycleState()
    p = ours("p")
    st = fwk.run_pre_bind_pre_flights(state, p, "n1")
    all_skip = all(skip for _, _, skip in plugins)
    assert (st is not None and st.code == Code.SKIP) == all_skip
    assert [[x.name for x in g] for g in fwk.pre_bind_groups(state)] == groups
