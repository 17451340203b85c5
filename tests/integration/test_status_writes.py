"""pods/status writes for a pod that stays unschedulable: kscheduler against kube-scheduler.

Both schedulers run at once on one cluster, each with its own copy of a pod too large
for any node (9 CPUs, high priority, so preemption is tried and fails too), and both
see the same cluster changes over several retries: pods bound and deleted, a node
added, a node relabelled, kwok's heartbeats. A watch on the namespace counts every
MODIFIED event of each large pod; nothing but its scheduler writes an unbound pod,
so each one is a pods/status write (the apiserver does not store a write that
changes nothing). The counts, the final PodScheduled condition (reason, message)
and the FailedScheduling events must be the same for both schedulers.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from kscheduler.controlplane.builders import (
    create_nodes,
    create_pods,
    make_node,
    make_pod,
    make_priority_class,
    pods_path,
)
from kscheduler.controlplane.harness import ControlPlane
from kscheduler.controlplane.reference import ReferenceScheduler
from kscheduler.controlplane.rest import ApiError, RestClient
from tests.integration.runner import SCHEDULER, running_kscheduler, wait_for

pytestmark = pytest.mark.integration

REFERENCE = "reference-status"
HIGH = "status-writes-high"
#: the large pod of each scheduler, by schedulerName
BIG = {REFERENCE: "big-reference", SCHEDULER: "big-kscheduler"}


@contextlib.asynccontextmanager
async def counting_writes(rest: RestClient, ns: str) -> AsyncIterator[Counter[str]]:
    """Counts MODIFIED events per pod name in ns while the block runs."""
    listed = await rest.get(pods_path(ns))
    rv = listed["metadata"]["resourceVersion"]
    counts: Counter[str] = Counter()
    started = asyncio.Event()

    async def watch() -> None:
        params = {"watch": "true", "resourceVersion": rv, "allowWatchBookmarks": "false"}
        async with rest.session.get(
            rest.base_url + pods_path(ns), params=params, timeout=None
        ) as resp:
            assert resp.status == 200, await resp.text()
            started.set()
            async for line in resp.content:
                if not line.strip():
                    continue
                event = orjson.loads(line)
                if event["type"] == "MODIFIED":
                    counts[event["object"]["metadata"]["name"]] += 1

    task = asyncio.create_task(watch())
    await asyncio.wait_for(started.wait(), 10)
    try:
        yield counts
    finally:
        await asyncio.sleep(1.0)  # the last writes' events
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def condition(pod: dict[str, Any]) -> dict[str, Any] | None:
    for c in pod.get("status", {}).get("conditions") or []:
        if c["type"] == "PodScheduled":
            return dict(c)
    return None


async def both_reported(rest: RestClient, ns: str) -> bool:
    for name in BIG.values():
        pod = await rest.get(f"{pods_path(ns)}/{name}")
        if condition(pod) is None:
            return False
    return True


async def small_pods(rest: RestClient, ns: str, prefix: str, count: int) -> list[str]:
    names = [f"{prefix}-{sched[:3]}-{i}" for sched in BIG for i in range(count)]
    await create_pods(
        rest,
        [
            make_pod(name, ns, cpu="100m", scheduler_name=sched)
            for sched in BIG
            for name in names
            if name.startswith(f"{prefix}-{sched[:3]}-")
        ],
    )

    async def bound() -> bool:
        pods = {p["metadata"]["name"]: p for p in await rest.list(pods_path(ns))}
        return all(pods[n]["spec"].get("nodeName") for n in names)

    await wait_for(bound, timeout=60, what=f"{prefix} pods bound")
    return names


async def test_unschedulable_pod_status_writes_match_kube_scheduler(
    control_plane: ControlPlane, rest: RestClient, namespace: str, fresh_nodes: None
) -> None:
    ns = namespace
    with contextlib.suppress(ApiError):
        await rest.post(
            "/apis/scheduling.k8s.io/v1/priorityclasses", make_priority_class(HIGH, 1000)
        )
    await create_nodes(rest, [make_node(f"sw-n{i}", cpu="4") for i in range(3)])
    with ReferenceScheduler.for_control_plane(control_plane, scheduler_name=REFERENCE):
        async with running_kscheduler(control_plane), counting_writes(rest, ns) as writes:
            await create_pods(
                rest,
                [
                    make_pod(name, ns, cpu="9", scheduler_name=sched, priority_class_name=HIGH)
                    for sched, name in BIG.items()
                ],
            )
            await wait_for(lambda: both_reported(rest, ns), timeout=60, what="both reported")
            # retries: pods bound next to them (no room is made by that), a node too
            # small for them added, a node relabelled, pods deleted (not enough room)
            first = await small_pods(rest, ns, "a", 8)
            await asyncio.sleep(3)
            await create_nodes(rest, [make_node("sw-n3", cpu="4")])
            await asyncio.sleep(3)
            await rest.patch(
                "/api/v1/nodes/sw-n0",
                {"metadata": {"labels": {"example.com/relabelled": "yes"}}},
            )
            await asyncio.sleep(3)
            # what the node lifecycle controller does to a node that stops answering
            not_ready = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
            await rest.patch("/api/v1/nodes/sw-n1", {"spec": {"taints": [not_ready]}})
            await asyncio.sleep(3)
            await rest.patch("/api/v1/nodes/sw-n1", {"spec": {"taints": None}})
            await asyncio.sleep(3)
            # each delete may make room: retries in quick succession (activeQ is empty,
            # so backoffQ is popped at once), the message now counting four nodes
            await asyncio.gather(
                *(
                    rest.delete(f"{pods_path(ns)}/{name}", {"gracePeriodSeconds": 0})
                    for name in first
                )
            )
            await small_pods(rest, ns, "b", 2)
            await asyncio.sleep(12)  # backoffs run out; kwok heartbeats go on
        pods = {p["metadata"]["name"]: p for p in await rest.list(pods_path(ns))}
        events = await rest.list(f"/apis/events.k8s.io/v1/namespaces/{ns}/events")

    def failed(name: str) -> int:
        return sum(
            e.get("deprecatedCount") or 1
            for e in events
            if e["regarding"]["name"] == name and e["reason"] == "FailedScheduling"
        )

    ref, ours = BIG[REFERENCE], BIG[SCHEDULER]
    figures = {
        "status writes": (writes[ref], writes[ours]),
        "FailedScheduling": (failed(ref), failed(ours)),
    }
    assert writes[ref] >= 1, figures
    assert not pods[ref]["spec"].get("nodeName") and not pods[ours]["spec"].get("nodeName")
    assert writes[ours] == writes[ref], figures
    got = {n: condition(pods[n]) or {} for n in (ref, ours)}
    assert {k: got[ours].get(k) for k in ("status", "reason", "message")} == {
        k: got[ref].get(k) for k in ("status", "reason", "message")
    }, got
