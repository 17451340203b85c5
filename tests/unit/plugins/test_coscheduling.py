"""Coscheduling: the plugin's verdicts, and gangs through the scheduler with in-memory fakes."""

from __future__ import annotations

import asyncio

import pytest

from kscheduler.algorithm import Algorithm
from kscheduler.cache import Cache
from kscheduler.config import load_config
from kscheduler.framework import Code, CycleState, PluginEntry, Status
from kscheduler.framework.args import ConfigError
from kscheduler.framework.parse import parse_pod
from kscheduler.framework.runtime import Framework
from kscheduler.framework.types import NodeInfo, PodInfo
from kscheduler.plugins import in_tree_registry
from kscheduler.plugins.coscheduling import (
    ENTRY,
    LABEL_MIN_AVAILABLE,
    LABEL_POD_GROUP,
    NAME,
    PODS_TO_ACTIVATE_KEY,
    STALE_MEMBER_SECONDS,
    Coscheduling,
    CoschedulingArgs,
    parse_args,
)
from kscheduler.queue import SchedulingQueue
from kscheduler.scheduler import PODS_TO_ACTIVATE_KEY as SCHEDULER_KEY
from kscheduler.scheduler import Scheduler
from tests.unit.fakes import Sort

from ..builders import node, pod
from ..fakes import FakeClient, framework

SCHED = "test-scheduler"


def member(name: str, group: str = "g", need: int | str = 3, cpu: str = "1") -> PodInfo:
    raw = pod(name).uid(f"uid-{name}").req(cpu=cpu).raw()
    raw["metadata"]["labels"] = {LABEL_POD_GROUP: group, LABEL_MIN_AVAILABLE: str(need)}
    raw["spec"]["schedulerName"] = SCHED
    return parse_pod(raw)


class FitCPU:
    name = "FitCPU"

    def filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status | None:
        free = node_info.allocatable.milli_cpu - node_info.requested.milli_cpu
        return None if pod.requests.milli_cpu <= free else Status.unschedulable("Insufficient cpu")


class Binder:
    name = "Binder"

    def __init__(self, client: FakeClient) -> None:
        self.client = client

    async def bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status | None:
        await self.client.bind(pod, node_name)
        return None


def setup(
    cpus: list[str], wait: int = 60
) -> tuple[Scheduler, SchedulingQueue, Framework, Cache, FakeClient]:
    cache = Cache()
    for i, cpu in enumerate(cpus):
        cache.add_node(node(f"n{i}").alloc(cpu=cpu, pods=10).record())
    client = FakeClient()
    es = [
        PluginEntry("Sort", Sort, lambda a, h: Sort()),
        PluginEntry("FitCPU", FitCPU, lambda a, h: FitCPU()),
        PluginEntry("Binder", Binder, lambda a, h: Binder(client)),
        ENTRY,
    ]
    points = {
        "queueSort": ["Sort"],
        "preEnqueue": [NAME],
        "preFilter": [NAME],
        "filter": ["FitCPU"],
        "reserve": [NAME],
        "permit": [NAME],
        "bind": ["Binder"],
        "postBind": [NAME],
    }
    fwk, snap, _, _ = framework(
        es,
        points,
        cache=cache,
        client=client,
        name=SCHED,
        args={NAME: CoschedulingArgs(permit_waiting_time_seconds=wait)},
    )
    events = {n: list(e) for n, e in fwk.events_to_register().items()}
    q = SchedulingQueue(
        sort_key=fwk.queue_sort_key(), pre_enqueue=fwk.run_pre_enqueue, events=events
    )
    fwk.set_nominator(q)
    s = Scheduler(
        cache=cache,
        queue=q,
        profiles={SCHED: fwk},
        algorithm=Algorithm(),
        status_writer=client,
        snapshot=snap,
    )
    return s, q, fwk, cache, client


async def step(s: Scheduler, q: SchedulingQueue) -> str:
    qp = await asyncio.wait_for(q.pop(), 1)
    assert qp is not None
    await s.schedule_one(qp)
    await asyncio.sleep(0)
    return qp.pod.name


async def settle(s: Scheduler) -> None:
    await s.binds.drain(5)
    s.binds.accepting = True


def plugin(fwk: Framework) -> Coscheduling:
    p = fwk.plugins[NAME]
    assert isinstance(p, Coscheduling)
    return p


# ---- args and registration -------------------------------------------------------------------


def test_args() -> None:
    assert parse_args({}) == CoschedulingArgs(60)
    assert parse_args({"permitWaitingTimeSeconds": 5}).permit_waiting_time_seconds == 5
    with pytest.raises(ConfigError, match="permitWaitingTimeSeconds: must be greater than 0"):
        parse_args({"permitWaitingTimeSeconds": 0})
    with pytest.raises(ConfigError, match="unknown field"):
        parse_args({"permitWaitingTime": 5})
    assert PODS_TO_ACTIVATE_KEY == SCHEDULER_KEY


def test_registered_but_not_in_the_default_profile() -> None:
    reg = in_tree_registry()
    assert NAME in reg
    assert reg[NAME].extension_points == frozenset(
        {"preEnqueue", "preFilter", "reserve", "permit", "postBind"}
    )
    (default,) = load_config("", registry=reg).profiles
    for point in ("preEnqueue", "preFilter", "reserve", "permit", "postBind"):
        assert NAME not in default.plugins.names(point)
    cfg = load_config(
        """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: gangs
  plugins:
    multiPoint:
      enabled: [{name: Coscheduling}]
  pluginConfig:
  - name: Coscheduling
    args: {permitWaitingTimeSeconds: 7}
""",
        registry=reg,
    )
    (gangs,) = cfg.profiles
    assert NAME in gangs.plugins.permit and NAME in gangs.plugins.pre_filter
    assert gangs.plugin_args[NAME] == CoschedulingArgs(7)


# ---- verdicts ---------------------------------------------------------------------------------


def test_pre_filter_counts_known_members() -> None:
    s, _, fwk, cache, _ = setup(["4"])
    s.snapshot.update()
    cs = plugin(fwk)
    a, b, c = member("a"), member("b"), member("c")
    _, st = cs.pre_filter(CycleState(), a, [])
    assert st is not None and st.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert st.message == 'pod group "default/g" has 1 of the 3 members it needs'
    cs.pre_enqueue(a)
    cs.pre_enqueue(b)
    _, st = cs.pre_filter(CycleState(), a, [])
    assert st is not None and "has 2 of the 3" in st.message
    cache.add_pod(c.with_node("n0"))  # a placed member counts too
    assert cs.pre_filter(CycleState(), a, []) == (None, None)
    # another group, another namespace, or no group: not counted / not concerned
    assert cs.pre_filter(CycleState(), pod("plain").build(), []) == (None, None)
    _, st = cs.pre_filter(CycleState(), member("x", group="other"), [])
    assert st is not None and "has 1 of the 3" in st.message
    _, st = cs.pre_filter(CycleState(), member("bad", need="three"), [])
    assert st is not None and st.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert LABEL_MIN_AVAILABLE in st.message
    assert cs.pre_filter(CycleState(), member("solo", need=1), []) == (None, None)


def test_stale_pending_members_are_forgotten() -> None:
    _, _, fwk, _, _ = setup(["4"])
    now = [1000.0]
    cs = Coscheduling(CoschedulingArgs(), fwk, clock=lambda: now[0])
    cs.pre_enqueue(member("a"))
    cs.pre_enqueue(member("b"))
    assert cs.pre_filter(CycleState(), member("c"), []) == (None, None)
    now[0] += STALE_MEMBER_SECONDS + 1
    cs.pre_enqueue(member("c"))  # a and b were not seen again (deleted): forgotten
    _, st = cs.pre_filter(CycleState(), member("c"), [])
    assert st is not None and "has 1 of the 3" in st.message


async def test_permit_waits_then_allows_all_and_unreserve_rejects_the_group() -> None:
    s, _, fwk, cache, _ = setup(["4"])
    s.snapshot.update()
    cs = plugin(fwk)
    pods = [member(n) for n in ("a", "b", "c")]
    for p in pods:
        cs.pre_enqueue(p)
    states = []
    for p in pods[:2]:
        cache.assume(p.with_node("n0"))
        state = CycleState()
        st = fwk.run_permit(state, p.with_node("n0"), "n0")
        assert st is not None and st.code == Code.WAIT
        states.append(state)
    # the first waiter asks for its pending siblings to be activated
    assert states[0].get(PODS_TO_ACTIVATE_KEY) == {"uid-b", "uid-c"}
    assert states[1].get(PODS_TO_ACTIVATE_KEY) == {"uid-c"}
    waits = [asyncio.ensure_future(fwk.wait_on_permit(p)) for p in pods[:2]]
    cache.assume(pods[2].with_node("n0"))
    assert fwk.run_permit(CycleState(), pods[2].with_node("n0"), "n0") is None
    assert await asyncio.gather(*waits) == [None, None]

    # a new round: one member fails after Reserve, its waiting sibling is rejected
    d, e = member("d", group="h", need=2), member("e", group="h", need=2)
    cache.assume(d.with_node("n0"))
    st = fwk.run_permit(CycleState(), d.with_node("n0"), "n0")
    assert st is not None and st.code == Code.WAIT
    w = asyncio.ensure_future(fwk.wait_on_permit(d))
    cs.unreserve(CycleState(), e, "n0")
    rejected = await w
    assert rejected is not None and rejected.code == Code.UNSCHEDULABLE and rejected.plugin == NAME
    assert "default/e failed" in rejected.message


# ---- gangs through the scheduler ---------------------------------------------------------------


async def test_gang_binds_together_when_members_arrive_one_by_one() -> None:
    s, q, fwk, _, client = setup(["2", "2"])
    for name in ("g0", "g1"):
        q.add(member(name))
        await step(s, q)  # too few members yet: parked
    assert q.counts()["unschedulable"] == 2 and not client.bound
    q.add(member("g2"))
    await step(s, q)  # the last one waits and wakes its siblings
    assert q.counts()["active"] == 2 and len(fwk.waiting_pods) == 1
    await step(s, q)
    assert not client.bound and len(fwk.waiting_pods) == 2
    await step(s, q)  # completes the group: everyone is allowed
    await settle(s)
    assert sorted(k for k, _ in client.bound) == ["default/g0", "default/g1", "default/g2"]
    assert not fwk.waiting_pods and len(q) == 0 and q.in_flight() == 0


async def test_gang_without_room_for_all_binds_nobody() -> None:
    s, q, fwk, cache, client = setup(["1", "1"], wait=1)
    for name in ("g0", "g1", "g2"):
        q.add(member(name))
    outcomes = [await step(s, q) for _ in range(3)]
    assert sorted(outcomes) == ["g0", "g1", "g2"]
    assert len(fwk.waiting_pods) == 2  # the third did not fit
    await asyncio.sleep(1.3)  # the wait times out: the group is rejected as a whole
    await settle(s)
    assert client.bound == []
    assert not fwk.waiting_pods and not cache.assumed_pods()
    assert sum(n.requested.milli_cpu for n in cache.nodes.values()) == 0
    assert len(q) == 3 and q.in_flight() == 0


async def test_incomplete_gang_is_never_assumed() -> None:
    s, q, fwk, cache, client = setup(["4"])
    for name in ("g0", "g1"):
        q.add(member(name))
    for _ in range(2):
        await step(s, q)
    assert not fwk.waiting_pods and not cache.assumed_pods() and client.bound == []
    assert q.counts()["unschedulable"] == 2
    rec = s.last_attempts["default/g1"]
    assert rec.message == (
        '0/1 nodes are available: pod group "default/g" has 2 of the 3 members it needs.'
    )


async def test_non_gang_pods_are_untouched() -> None:
    s, q, _, _, client = setup(["4"])
    raw = pod("plain").req(cpu="1").raw()
    raw["spec"]["schedulerName"] = SCHED
    q.add(parse_pod(raw))
    await step(s, q)
    await settle(s)
    assert client.bound == [("default/plain", "n0")]
