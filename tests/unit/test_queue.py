"""SchedulingQueue: ordering, backoff, unschedulable pool, events, in-flight replay."""

from __future__ import annotations

import pytest

from kscheduler.framework.interface import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    QueueingHint,
)
from kscheduler.framework.interface import Resource as R
from kscheduler.framework.status import Status
from kscheduler.framework.types import PodInfo, QueuedPodInfo
from kscheduler.queue import EVENT_ASSIGNED_POD_DELETE, SchedulingQueue
from tests.unit.builders import pod

NODE_ADD = ClusterEvent(R.NODE, ActionType.ADD, "NodeAdd")
NODE_TAINT = ClusterEvent(R.NODE, ActionType.UPDATE_NODE_TAINT, "NodeUpdate")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def sort_key(qp: QueuedPodInfo) -> tuple[int, float]:
    return (-qp.pod.priority, qp.timestamp)


def make_queue(
    clock: Clock,
    events: dict[str, list[ClusterEventWithHint]] | None = None,
    gate: bool = False,
    pop_from_backoff: bool = True,
) -> SchedulingQueue:
    def pre_enqueue(p: PodInfo) -> Status | None:
        if gate and p.scheduling_gates:
            return Status.unresolvable("gated").with_plugin("SchedulingGates")
        return None

    return SchedulingQueue(
        sort_key=sort_key,
        pre_enqueue=pre_enqueue,
        events=events or {},
        clock=clock,
        pop_from_backoff=pop_from_backoff,
    )


async def pop(q: SchedulingQueue) -> QueuedPodInfo:
    qp = await q.pop()
    assert qp is not None
    return qp


async def test_priority_then_fifo() -> None:
    clock = Clock()
    q = make_queue(clock)
    q.add(pod("low").priority(1).build())
    clock.now += 1
    q.add(pod("high").priority(10).build())
    clock.now += 1
    q.add(pod("low2").priority(1).build())
    assert [(await pop(q)).pod.name for _ in range(3)] == ["high", "low", "low2"]


@pytest.mark.parametrize(
    ("attempts", "expected"),
    [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (5, 10.0), (50, 10.0)],
)
async def test_backoff_doubles_and_caps(attempts: int, expected: float) -> None:
    q = make_queue(Clock())
    qp = QueuedPodInfo(pod("p").build(), 0)
    qp.attempts = attempts
    assert q._backoff_duration(qp) == expected


async def test_unschedulable_pod_woken_only_by_registered_event() -> None:
    clock = Clock()
    q = make_queue(clock, {"TaintToleration": [ClusterEventWithHint(NODE_TAINT)]})
    q.add(pod("p").build())
    qp = await pop(q)
    qp.unschedulable_plugins = {"TaintToleration"}
    q.add_unschedulable_if_not_present(qp)
    assert q.counts()["unschedulable"] == 1
    assert q.move_all_to_active_or_backoff(NODE_ADD) == 0
    assert q.move_all_to_active_or_backoff(NODE_TAINT) == 1
    # still backing off (1 s after the first attempt): backoffQ, then active after the
    # flush that follows the end of the backoff's 1-second window
    assert q.counts()["backoff"] == 1
    clock.now += 1.01
    assert q.flush_backoff_completed() == 0
    clock.now += 1.0
    assert q.flush_backoff_completed() == 1
    assert (await pop(q)).pod.name == "p"


async def test_queueing_hint_skip_keeps_pod_parked() -> None:
    clock = Clock()
    hint_calls = []

    def hint(p: PodInfo, old: object, new: object) -> QueueingHint:
        hint_calls.append(new)
        return QueueingHint.QUEUE if new == "good" else QueueingHint.SKIP

    q = make_queue(clock, {"X": [ClusterEventWithHint(NODE_ADD, hint)]})
    q.add(pod("p").build())
    qp = await pop(q)
    qp.unschedulable_plugins = {"X"}
    q.add_unschedulable_if_not_present(qp)
    assert q.move_all_to_active_or_backoff(NODE_ADD, None, "bad") == 0
    assert q.move_all_to_active_or_backoff(NODE_ADD, None, "good") == 1
    assert hint_calls == ["bad", "good"]


async def test_event_during_attempt_is_not_lost() -> None:
    clock = Clock()
    q = make_queue(clock, {"NodeResourcesFit": [ClusterEventWithHint(EVENT_ASSIGNED_POD_DELETE)]})
    q.add(pod("p").build())
    qp = await pop(q)
    # while the pod is in its cycle, an assigned pod goes away
    q.move_all_to_active_or_backoff(EVENT_ASSIGNED_POD_DELETE)
    qp.unschedulable_plugins = {"NodeResourcesFit"}
    q.add_unschedulable_if_not_present(qp)
    assert q.counts()["unschedulable"] == 0
    assert q.counts()["backoff"] == 1


async def test_event_irrelevant_during_attempt_parks_pod() -> None:
    clock = Clock()
    q = make_queue(clock, {"NodeResourcesFit": [ClusterEventWithHint(EVENT_ASSIGNED_POD_DELETE)]})
    q.add(pod("p").build())
    qp = await pop(q)
    q.move_all_to_active_or_backoff(NODE_ADD)
    qp.unschedulable_plugins = {"NodeResourcesFit"}
    q.add_unschedulable_if_not_present(qp)
    assert q.counts()["unschedulable"] == 1


async def test_deleted_while_in_flight_is_dropped() -> None:
    q = make_queue(Clock())
    q.add(pod("p").build())
    qp = await pop(q)
    q.delete(qp.pod.uid)
    q.add_unschedulable_if_not_present(qp, error=True)
    assert len(q) == 0


async def test_error_goes_to_backoff() -> None:
    clock = Clock()
    q = make_queue(clock)
    q.add(pod("p").build())
    qp = await pop(q)
    q.add_unschedulable_if_not_present(qp, error=True)
    assert q.counts()["backoff"] == 1
    assert q.flush_backoff_completed() == 0
    clock.now += 1.0  # the backoff ends in the window [1001, 1002): not over before 1002
    assert q.flush_backoff_completed() == 0
    clock.now += 1.0
    assert q.flush_backoff_completed() == 1


async def test_unschedulable_timeout_flush() -> None:
    clock = Clock()
    q = make_queue(clock)
    q.add(pod("p").build())
    qp = await pop(q)
    qp.unschedulable_plugins = {"Nope"}
    q.add_unschedulable_if_not_present(qp)
    clock.now += 299
    assert q.flush_unschedulable_left_over() == 0
    clock.now += 2
    assert q.flush_unschedulable_left_over() == 1
    assert q.counts()["active"] == 1


async def test_gated_pod_waits_until_gates_removed() -> None:
    clock = Clock()
    q = make_queue(clock, gate=True)
    gated = pod("g").gates("example.com/wait").build()
    q.add(gated)
    assert q.counts() == {"active": 0, "backoff": 0, "unschedulable": 0, "gated": 1}
    # a cluster event does not free a gated pod
    q.move_all_to_active_or_backoff(NODE_ADD)
    assert q.counts()["gated"] == 1
    ungated = pod("g").uid(gated.uid).build()
    q.update(ungated)
    assert q.counts()["active"] == 1


async def test_gated_pod_is_tried_again_on_its_gating_plugins_events() -> None:
    """As upstream: an event the gating plugin registered for (and its hint lets
    through) runs PreEnqueue again; other events pass the gated pod by."""
    claim_add = ClusterEvent(R.RESOURCE_CLAIM, ActionType.ADD, "ResourceClaimAdd")
    present: set[str] = set()

    def pre_enqueue(p: PodInfo) -> Status | None:
        if p.name not in present:
            return Status.unresolvable("claim missing").with_plugin("DynamicResources")
        return None

    def hint(p: PodInfo, old: object, new: object) -> QueueingHint:
        return QueueingHint.QUEUE if new == p.name else QueueingHint.SKIP

    q = SchedulingQueue(
        sort_key=sort_key,
        pre_enqueue=pre_enqueue,
        events={"DynamicResources": [ClusterEventWithHint(claim_add, hint)]},
        clock=Clock(),
    )
    q.add(pod("a").build())
    q.add(pod("b").build())
    assert q.counts()["gated"] == 2
    present.add("a")
    q.move_all_to_active_or_backoff(NODE_ADD)  # not the gating plugin's event
    assert q.counts()["gated"] == 2
    q.move_all_to_active_or_backoff(claim_add, None, "b")  # the hint skips a
    assert q.counts()["gated"] == 2  # b: hint queues it, PreEnqueue still gates it
    q.move_all_to_active_or_backoff(claim_add, None, "a")
    assert q.counts() == {"active": 1, "backoff": 0, "unschedulable": 0, "gated": 1}
    assert (await pop(q)).pod.name == "a"


async def test_pod_update_reactivates_unschedulable_pod() -> None:
    clock = Clock()
    q = make_queue(clock)
    p = pod("p").build()
    q.add(p)
    qp = await pop(q)
    qp.unschedulable_plugins = {"X"}
    q.add_unschedulable_if_not_present(qp)
    clock.now += 5
    q.update(pod("p").uid(p.uid).labels(a="b").build())
    assert q.counts()["active"] == 1


async def test_pop_waits_and_close_releases() -> None:
    import asyncio

    q = make_queue(Clock())
    waiter = asyncio.create_task(q.pop())
    await asyncio.sleep(0)
    assert not waiter.done()
    q.add(pod("p").build())
    got = await asyncio.wait_for(waiter, 1)
    assert got is not None and got.pod.name == "p"
    waiter = asyncio.create_task(q.pop())
    await asyncio.sleep(0)
    q.close()
    assert await asyncio.wait_for(waiter, 1) is None


async def test_nominated_pods_tracked_per_node() -> None:
    q = make_queue(Clock())
    p = pod("p").nominated("n1").build()
    q.add(p)
    assert [x.name for x in q.nominated_pods_for_node("n1")] == ["p"]
    q.nominate(p, "n2")
    assert q.nominated_pods_for_node("n1") == []
    assert [x.name for x in q.nominated_pods_for_node("n2")] == ["p"]
    q.delete(p.uid)
    assert q.nominated_pods_for_node("n2") == []


async def test_status_only_update_does_not_wake_unschedulable_pod() -> None:
    clock = Clock()
    q = make_queue(clock)
    p = pod("p").build()
    q.add(p)
    qp = await pop(q)
    qp.unschedulable_plugins = {"X"}
    q.add_unschedulable_if_not_present(qp)
    raw = pod("p").uid(p.uid).raw()
    raw["metadata"]["resourceVersion"] = "999"
    raw["status"] = {"conditions": [{"type": "PodScheduled", "status": "False"}]}
    from kscheduler.framework.parse import parse_pod

    q.update(parse_pod(raw))
    assert q.counts()["unschedulable"] == 1


async def test_activation_during_the_attempt_requeues_the_pod_after_it() -> None:
    clock = Clock()
    q = make_queue(clock)
    q.add(pod("p").build())
    qp = await pop(q)
    q.activate([qp.pod.uid])  # in flight: remembered, not lost
    qp.unschedulable_plugins = {"NodeResourcesFit"}
    q.add_unschedulable_if_not_present(qp)
    assert q.counts()["unschedulable"] == 0
    assert q.counts()["backoff"] == 1


async def test_release_gated_reruns_pre_enqueue_for_gated_pods_only() -> None:
    clock = Clock()
    holding: set[str] = set()

    def pre_enqueue(p: PodInfo) -> Status | None:
        if p.uid in holding:
            return Status.unresolvable("waiting").with_plugin("DefaultPreemption")
        return None

    q = SchedulingQueue(sort_key=sort_key, pre_enqueue=pre_enqueue, events={}, clock=clock)
    parked = pod("parked").build()
    q.add(parked)
    qp = await pop(q)
    qp.unschedulable_plugins = {"NodeResourcesFit"}
    q.add_unschedulable_if_not_present(qp)
    held = pod("held").build()
    holding.add(held.uid)
    q.add(held)
    assert q.counts() == {"active": 0, "backoff": 0, "unschedulable": 1, "gated": 1}
    q.release_gated([held.uid, parked.uid])
    assert q.counts()["gated"] == 1  # PreEnqueue still holds it
    holding.clear()
    q.release_gated([held.uid, parked.uid])
    # the gated pod goes to activeQ; the parked one waits for an event, as before
    assert q.counts() == {"active": 1, "backoff": 0, "unschedulable": 1, "gated": 0}


async def test_event_looks_only_at_pods_its_plugins_rejected_in_the_order_they_came() -> None:
    clock = Clock()
    calls: list[tuple[str, str]] = []

    def hint(plugin: str) -> object:
        def fn(p: PodInfo, old: object, new: object) -> QueueingHint:
            calls.append((plugin, p.name))
            return QueueingHint.SKIP

        return fn

    q = make_queue(
        clock,
        {
            "Fit": [ClusterEventWithHint(NODE_ADD, hint("Fit"))],  # type: ignore[arg-type]
            "Taint": [ClusterEventWithHint(NODE_TAINT, hint("Taint"))],  # type: ignore[arg-type]
            "Spread": [ClusterEventWithHint(NODE_TAINT, hint("Spread"))],  # type: ignore[arg-type]
        },
    )
    rejected_by = {"a": {"Fit"}, "b": {"Taint"}, "c": {"Spread"}, "d": {"Fit"}, "e": {"Taint"}}
    for name, plugins in rejected_by.items():
        q.add(pod(name).build())
        qp = await pop(q)
        qp.unschedulable_plugins = plugins
        q.add_unschedulable_if_not_present(qp)
        clock.now += 1
    # the taint event asks its two plugins about their own pods, in the pool's order,
    # and never looks at the pods only Fit rejected
    seen: list[str] = []

    def precheck(p: PodInfo) -> bool:
        seen.append(p.name)
        return True

    assert q.move_all_to_active_or_backoff(NODE_TAINT, precheck=precheck) == 0
    assert calls == [("Taint", "b"), ("Spread", "c"), ("Taint", "e")]
    assert seen == ["b", "c", "e"]
    calls.clear()
    assert q.move_all_to_active_or_backoff(NODE_ADD) == 0
    assert calls == [("Fit", "a"), ("Fit", "d")]
    # a pod that names no plugin is woken by any event, a wildcard event wakes all
    q.add(pod("g").build())
    q.add_unschedulable_if_not_present(await pop(q))
    calls.clear()
    assert q.move_all_to_active_or_backoff(NODE_ADD) == 1
    assert calls == [("Fit", "a"), ("Fit", "d")]
    wildcard = ClusterEvent(R.WILDCARD, ActionType.ALL, "UnschedulableTimeout")
    assert q.move_all_to_active_or_backoff(wildcard) == 5
    assert q.counts()["unschedulable"] == 0
