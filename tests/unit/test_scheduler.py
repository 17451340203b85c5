"""schedule_one and the binding cycle, with in-memory fakes for the API."""

from __future__ import annotations

import asyncio

from kscheduler.algorithm import Algorithm
from kscheduler.cache import Cache
from kscheduler.framework import CycleState, PluginEntry, Status
from kscheduler.framework.types import NodeInfo, PodInfo
from kscheduler.queue import SchedulingQueue
from kscheduler.scheduler import Scheduler
from tests.unit.builders import node, pod
from tests.unit.fakes import FakeClient, Sort, framework


class Fit:
    """Fits pods by CPU only."""

    name = "Fit"

    def filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status | None:
        free = node_info.allocatable.milli_cpu - node_info.requested.milli_cpu
        return None if pod.requests.milli_cpu <= free else Status.unschedulable("Insufficient cpu")


class Binder:
    name = "Binder"

    def __init__(self, client: FakeClient) -> None:
        self.client = client

    async def bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status | None:
        try:
            await self.client.bind(pod, node_name)
        except Exception as exc:
            return Status.as_error(exc)
        return None


def build(cache: Cache, client: FakeClient) -> tuple[Scheduler, SchedulingQueue, object]:
    es = [
        PluginEntry("Sort", Sort, lambda a, h: Sort()),
        PluginEntry("Fit", Fit, lambda a, h: Fit()),
        PluginEntry("Binder", Binder, lambda a, h: Binder(h.client)),  # type: ignore[attr-defined]
    ]
    fwk, snap, _, rec = framework(
        es,
        {"queueSort": ["Sort"], "filter": ["Fit"], "bind": ["Binder"]},
        cache=cache,
        client=client,
        name="test-scheduler",
    )
    q = SchedulingQueue(sort_key=fwk.queue_sort_key(), pre_enqueue=lambda p: None, events={})
    s = Scheduler(
        cache=cache,
        queue=q,
        profiles={"test-scheduler": fwk},
        algorithm=Algorithm(),
        status_writer=client,
        snapshot=snap,
    )
    return s, q, rec


def ours(name: str, cpu: str) -> PodInfo:
    raw = pod(name).req(cpu=cpu).raw()
    raw["spec"]["schedulerName"] = "test-scheduler"
    from kscheduler.framework.parse import parse_pod

    return parse_pod(raw)


async def run_one(s: Scheduler, q: SchedulingQueue) -> None:
    qp = await q.pop()
    assert qp is not None
    await s.schedule_one(qp)
    await asyncio.sleep(0)
    await s.binds.drain(5)
    s.binds.accepting = True
    await s.writes.drain(5)
    s.writes.accepting = True


async def test_binds_fitting_pod_and_records_event() -> None:
    cache = Cache()
    cache.add_node(node("n1").alloc(cpu="2").record())
    client = FakeClient()
    s, q, rec = build(cache, client)
    p = ours("p", "1")
    q.add(p)
    await run_one(s, q)
    assert client.bound == [("default/p", "n1")]
    # bound but not yet seen bound by the informer: still assumed, counted on n1
    assert cache.is_assumed(p.uid)
    assert cache.nodes["n1"].requested.milli_cpu == 1000
    assert (
        "default/p",
        "Normal",
        "Scheduled",
        "Successfully assigned default/p to n1",
    ) in rec.events  # type: ignore[attr-defined]
    assert q.in_flight() == 0


async def test_unschedulable_gets_condition_event_and_parks() -> None:
    cache = Cache()
    cache.add_node(node("n1").alloc(cpu="1").record())
    client = FakeClient()
    s, q, rec = build(cache, client)
    q.add(ours("big", "4"))
    await run_one(s, q)
    msg = "0/1 nodes are available: 1 Insufficient cpu."
    assert ("default/big", "Warning", "FailedScheduling", msg) in rec.events  # type: ignore[attr-defined]
    ((key, patch),) = client.status_patches
    cond = patch["status"]["conditions"][0]
    assert key == "default/big"
    assert (cond["type"], cond["status"], cond["reason"], cond["message"]) == (
        "PodScheduled",
        "False",
        "Unschedulable",
        msg,
    )
    assert q.counts()["unschedulable"] == 1


async def test_retry_for_the_same_reason_writes_no_status() -> None:
    """kube-scheduler writes PodScheduled only when it changes; the pod the scheduler
    holds may not carry its own last write yet, which must count as written."""
    from kscheduler.framework.parse import parse_pod

    cache = Cache()
    cache.add_node(node("n1").alloc(cpu="1").record())
    client = FakeClient()
    s, q, _ = build(cache, client)
    big = ours("big", "4")
    q.add(big)
    await run_one(s, q)
    q.activate([big.uid])  # a retry before the informer brings the written condition
    await run_one(s, q)
    assert len(client.status_patches) == 1
    cache.add_node(node("n2").alloc(cpu="1").record())
    q.activate([big.uid])
    await run_one(s, q)  # the message now counts two nodes: written
    assert len(client.status_patches) == 2
    first, second = (p["status"]["conditions"][0] for _, p in client.status_patches)
    assert second["message"] == "0/2 nodes are available: 2 Insufficient cpu."
    assert second["lastTransitionTime"] == first["lastTransitionTime"]  # still False
    # the informer brings the pod as the server holds it now
    raw = dict(big.raw, metadata={**big.raw["metadata"], "resourceVersion": "7"})
    raw["status"] = {**(raw.get("status") or {}), "conditions": [second]}
    q.update(parse_pod(raw))
    q.activate([big.uid])
    await run_one(s, q)
    assert len(client.status_patches) == 2


async def test_bind_failure_forgets_and_requeues() -> None:
    cache = Cache()
    cache.add_node(node("n1").alloc(cpu="2").record())
    client = FakeClient(fail_bind=RuntimeError("conflict"))
    s, q, _ = build(cache, client)
    p = ours("p", "1")
    q.add(p)
    await run_one(s, q)
    assert not cache.is_assumed(p.uid)
    assert cache.nodes["n1"].requested.milli_cpu == 0
    assert q.counts()["backoff"] == 1


async def test_second_pod_sees_first_assumed() -> None:
    cache = Cache()
    cache.add_node(node("n1").alloc(cpu="2").record())
    cache.add_node(node("n2").alloc(cpu="2").record())
    client = FakeClient()
    s, q, _ = build(cache, client)
    for i in range(4):
        q.add(ours(f"p{i}", "1"))
    for _ in range(4):
        qp = await q.pop()
        assert qp is not None
        await s.schedule_one(qp)
    await s.binds.drain(5)
    per_node: dict[str, int] = {}
    for _, n in client.bound:
        per_node[n] = per_node.get(n, 0) + 1
    assert per_node == {"n1": 2, "n2": 2}


async def test_unparseable_pod_reported_and_others_flow() -> None:
    from kscheduler.framework.parse import parse_pod

    cache = Cache()
    cache.add_node(node("n1").alloc(cpu="2").record())
    client = FakeClient()
    s, q, rec = build(cache, client)
    raw = pod("bad").req(cpu="1").raw()
    raw["spec"]["schedulerName"] = "test-scheduler"
    raw["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "one"}}
    bad = parse_pod(raw)
    assert bad.parse_error is not None
    q.add(bad)
    q.add(ours("good", "1"))
    await run_one(s, q)
    await run_one(s, q)
    assert client.bound == [("default/good", "n1")]
    notes = [e[3] for e in rec.events if e[0] == "default/bad"]  # type: ignore[attr-defined]
    assert notes and "spec.containers[0].resources.requests.cpu" in notes[0]
