"""SchedulerPopFromBackoffQ: popping from backoffQ when activeQ is empty, backoff
windows of one second ordered as activeQ, PreEnqueue on the way into backoffQ."""

from __future__ import annotations

import asyncio

import pytest

from kscheduler.framework.status import Status
from kscheduler.framework.types import PodInfo, QueuedPodInfo
from kscheduler.queue import EVENT_UNSCHEDULABLE_TIMEOUT, QueueObserver, SchedulingQueue

from .builders import pod


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Seen(QueueObserver):
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def incoming(self, queue: str, event: str) -> None:
        self.events.append((queue, event))


def sort_key(qp: QueuedPodInfo) -> tuple[int, float]:
    return (-qp.pod.priority, qp.timestamp)


def make_queue(
    clock: Clock, *, pop_from_backoff: bool = True, gated: set[str] | None = None
) -> tuple[SchedulingQueue, list[str], Seen]:
    calls: list[str] = []

    def pre_enqueue(p: PodInfo) -> Status | None:
        calls.append(p.name)
        if gated and p.name in gated:
            return Status.unresolvable("waiting").with_plugin("Gate")
        return None

    seen = Seen()
    q = SchedulingQueue(
        sort_key=sort_key,
        pre_enqueue=pre_enqueue,
        events={},
        clock=clock,
        observer=seen,
        pop_from_backoff=pop_from_backoff,
    )
    return q, calls, seen


async def pop(q: SchedulingQueue) -> QueuedPodInfo:
    qp = await asyncio.wait_for(q.pop(), 0.5)
    assert qp is not None
    return qp


async def pops_nothing(q: SchedulingQueue) -> bool:
    try:
        await asyncio.wait_for(q.pop(), 0.05)
    except TimeoutError:
        return True
    return False


async def fail(
    q: SchedulingQueue, name: str, *, priority: int = 0, attempts: int = 1, error: bool = False
) -> QueuedPodInfo:
    """Add a pod, pop it, and requeue it to backoffQ as rejected (or failed with an error)."""
    q.add(pod(name).priority(priority).build())
    qp = await pop(q)
    qp.attempts = attempts
    if not error:
        qp.unschedulable_plugins = {"NodeResourcesFit"}
    q.add_unschedulable_if_not_present(qp, error=error)
    if not error:
        # a rejection goes to the unschedulable pool; an event moves it to backoffQ
        q.move_all_to_active_or_backoff(EVENT_UNSCHEDULABLE_TIMEOUT)
    assert q.where(qp.pod.uid) == "backoff"
    return qp


async def test_pops_backoff_head_when_active_is_empty() -> None:
    q, _, seen = make_queue(Clock())
    await fail(q, "a")
    qp = await pop(q)
    assert qp.pod.name == "a"
    assert qp.attempts == 2
    assert q.is_in_flight(qp.pod.uid)
    assert ("active", "PopFromBackoffQ") in seen.events


async def test_active_pods_come_first() -> None:
    q, _, _ = make_queue(Clock())
    await fail(q, "backing-off", priority=100)
    q.add(pod("fresh").build())
    assert (await pop(q)).pod.name == "fresh"
    assert (await pop(q)).pod.name == "backing-off"


async def test_error_backoff_is_not_popped() -> None:
    q, _, _ = make_queue(Clock())
    await fail(q, "broken", error=True)
    assert await pops_nothing(q)
    assert q.where("uid-default-broken") == "backoff"


async def test_gate_off_waits_for_the_backoff() -> None:
    clock = Clock()
    q, _, _ = make_queue(clock, pop_from_backoff=False)
    await fail(q, "a")
    assert await pops_nothing(q)
    clock.now += 1.0  # exact expiry without windows
    assert q.flush_backoff_completed() == 1
    assert (await pop(q)).pod.name == "a"


@pytest.mark.parametrize(
    ("pods", "order"),
    [
        # same window (1 s backoffs from 1000.2 and 1000.7 both end in [1001, 1002)):
        # priority decides
        ([("low", 0, 1, 0.2), ("high", 10, 1, 0.7)], ["high", "low"]),
        # different windows: the earlier window first, whatever the priority
        ([("low", 0, 1, 0.2), ("high", 10, 2, 0.2)], ["low", "high"]),
        # equal priority in one window: the earlier failure first
        ([("second", 0, 1, 0.6), ("first", 0, 1, 0.1)], ["first", "second"]),
    ],
)
async def test_backoff_order(pods: list[tuple[str, int, int, float]], order: list[str]) -> None:
    clock = Clock()
    q, _, _ = make_queue(clock)
    for name, priority, attempts, at in sorted(pods, key=lambda p: p[3]):
        clock.now = 1000.0 + at
        await fail(q, name, priority=priority, attempts=attempts)
    assert [(await pop(q)).pod.name for _ in order] == order


@pytest.mark.parametrize(
    ("failed_at", "flush_at", "moved"),
    [
        (1000.0, 1000.99, 0),
        # the backoff (1 s) ends in the window [1001, 1002): over once that window is past
        (1000.0, 1001.0, 0),
        (1000.0, 1001.99, 0),
        (1000.0, 1002.0, 1),
        (1000.5, 1001.6, 0),
        (1000.5, 1002.0, 1),
    ],
)
async def test_backoff_windows(failed_at: float, flush_at: float, moved: int) -> None:
    clock = Clock(failed_at)
    q, _, _ = make_queue(clock)
    await fail(q, "a")
    clock.now = flush_at
    assert q.flush_backoff_completed() == moved


async def test_pre_enqueue_runs_entering_backoff_not_leaving() -> None:
    clock = Clock()
    q, calls, _ = make_queue(clock)
    await fail(q, "a")
    assert calls == ["a", "a"]  # added, then entering backoffQ
    clock.now += 5
    assert q.flush_backoff_completed() == 1
    assert calls == ["a", "a"]
    assert q.where("uid-default-a") == "active"


async def test_pre_enqueue_rejection_keeps_pod_out_of_backoff() -> None:
    clock = Clock()
    q, _, _ = make_queue(clock)
    q.add(pod("a").build())
    qp = await pop(q)
    qp.attempts = 1
    q._pre_enqueue = lambda p: Status.unresolvable("waiting").with_plugin("Gate")  # type: ignore[method-assign]
    q.add_unschedulable_if_not_present(qp, error=True)
    assert q.where(qp.pod.uid) == "gated"
    assert await pops_nothing(q)


@pytest.mark.parametrize(
    ("now", "pop_from_backoff", "interval"),
    [(1000.25, True, 0.75), (1000.0, True, 1.0), (1000.25, False, 1.0)],
)
def test_flush_interval(now: float, pop_from_backoff: bool, interval: float) -> None:
    q, _, _ = make_queue(Clock(now), pop_from_backoff=pop_from_backoff)
    assert q.flush_interval() == pytest.approx(interval)
