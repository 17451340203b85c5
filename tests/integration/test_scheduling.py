"""The core scheduler against a real kube-apiserver: bind, report, requeue, no overcommit."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from kscheduler.controlplane.builders import (
    create_nodes,
    create_pods,
    make_node,
    make_pod,
    taint,
    toleration,
)
from kscheduler.controlplane.harness import ControlPlane
from kscheduler.controlplane.reference import ReferenceScheduler
from kscheduler.controlplane.rest import RestClient
from kscheduler.framework.quantity import parse_quantity
from tests.integration.runner import SCHEDULER, running_kscheduler, wait_for


async def list_pods(rest: RestClient, ns: str) -> dict[str, dict[str, Any]]:
    items = (await rest.get(f"/api/v1/namespaces/{ns}/pods"))["items"]
    return {p["metadata"]["name"]: p for p in items}


def pod_scheduled_condition(p: dict[str, Any]) -> dict[str, Any] | None:
    for c in (p.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled":
            return dict(c)
    return None


def requests_of(p: dict[str, Any]) -> tuple[int, int]:
    cpu = mem = 0
    for c in p["spec"]["containers"]:
        req = (c.get("resources") or {}).get("requests") or {}
        cpu += parse_quantity(req.get("cpu", "0"), milli=True)
        mem += parse_quantity(req.get("memory", "0"))
    return cpu, mem


async def test_binds_our_pods_to_feasible_nodes_and_ignores_others(
    control_plane: ControlPlane, rest: RestClient, namespace: str, fresh_nodes: None
) -> None:
    await create_nodes(
        rest,
        [
            make_node("plain-1", cpu="2", memory="4Gi", labels={"disk": "hdd"}),
            make_node("plain-2", cpu="2", memory="4Gi", labels={"disk": "ssd"}),
            make_node(
                "tainted",
                cpu="8",
                memory="16Gi",
                labels={"disk": "ssd"},
                taints=[taint("dedicated", "gpu")],
            ),
        ],
    )
    pods = [
        make_pod(f"web-{i}", namespace, cpu="500m", memory="256Mi", scheduler_name=SCHEDULER)
        for i in range(4)
    ]
    pods += [
        make_pod(
            "ssd", namespace, cpu="100m", scheduler_name=SCHEDULER, node_selector={"disk": "ssd"}
        ),
        make_pod(
            "gpu",
            namespace,
            cpu="4",
            scheduler_name=SCHEDULER,
            tolerations=[toleration("dedicated", "gpu")],
        ),
        make_pod("theirs", namespace, cpu="100m", scheduler_name="someone-else"),
    ]
    async with running_kscheduler(control_plane):
        await create_pods(rest, pods)

        async def ours_bound() -> dict[str, dict[str, Any]] | None:
            got = await list_pods(rest, namespace)
            ok = all(p["spec"].get("nodeName") for n, p in got.items() if n != "theirs")
            return got if ok and len(got) == len(pods) else None

        got = await wait_for(ours_bound, what="our pods bound")
        await asyncio.sleep(1.0)
        got = await list_pods(rest, namespace)
    assert "nodeName" not in got["theirs"]["spec"], "another scheduler's pod was touched"
    assert pod_scheduled_condition(got["theirs"]) is None
    assert got["ssd"]["spec"]["nodeName"] in ("plain-2", "tainted")
    assert got["ssd"]["spec"]["nodeName"] != "tainted"  # untolerated taint
    assert got["gpu"]["spec"]["nodeName"] == "tainted"  # only node with 4 free CPUs
    for name in ("web-0", "web-1", "web-2", "web-3"):
        assert got[name]["spec"]["nodeName"] in ("plain-1", "plain-2")
    cond = pod_scheduled_condition(got["web-0"])
    assert cond is None or cond["status"] == "True"


async def test_pending_pod_reported_then_bound_when_a_node_fits(
    control_plane: ControlPlane, rest: RestClient, namespace: str, fresh_nodes: None
) -> None:
    await create_nodes(
        rest,
        [
            make_node("small-1", cpu="1", memory="2Gi"),
            make_node("small-2", cpu="1", memory="2Gi", taints=[taint("maintenance", None)]),
        ],
    )
    ref = ReferenceScheduler.for_control_plane(control_plane, scheduler_name="reference-scheduler")
    async with ref, running_kscheduler(control_plane):
        await create_pods(
            rest,
            [
                make_pod("big", namespace, cpu="4", memory="1Gi", scheduler_name=SCHEDULER),
                make_pod(
                    "big-ref",
                    namespace,
                    cpu="4",
                    memory="1Gi",
                    scheduler_name="reference-scheduler",
                ),
            ],
        )

        async def conditions() -> tuple[dict[str, Any], dict[str, Any]] | None:
            got = await list_pods(rest, namespace)
            ours, theirs = (pod_scheduled_condition(got[n]) for n in ("big", "big-ref"))
            if ours and theirs and ours["status"] == theirs["status"] == "False":
                return ours, theirs
            return None

        cond, ref_cond = await wait_for(conditions, what="PodScheduled=False on both pending pods")
        # the same condition, word for word, as the real kube-scheduler writes
        assert (cond["reason"], cond["message"]) == (ref_cond["reason"], ref_cond["message"])
        expected = cond["message"]
        assert expected.startswith("0/2 nodes are available: 1 Insufficient cpu, 1 node(s) had ")

        async def failed_event() -> list[dict[str, Any]]:
            evs = (await rest.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events"))["items"]
            return [
                e
                for e in evs
                if e.get("reason") == "FailedScheduling" and e["regarding"]["name"] == "big"
            ]

        (ev, *_) = await wait_for(failed_event, what="FailedScheduling event")
        assert ev["type"] == "Warning"
        assert ev["reportingController"] == SCHEDULER
        assert ev["note"] == expected

        await create_nodes(rest, [make_node("large", cpu="8", memory="16Gi")])

        async def bound() -> str | None:
            return (await list_pods(rest, namespace))["big"]["spec"].get("nodeName")

        node = await wait_for(
            bound, timeout=15, interval=0.05, what="the pod bound to the new node"
        )
        assert node == "large"

        async def scheduled_event() -> list[dict[str, Any]]:
            evs = (await rest.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events"))["items"]
            return [
                e for e in evs if e.get("reason") == "Scheduled" and e["regarding"]["name"] == "big"
            ]

        # events are sent in the background, after the bind
        (sched_ev, *_) = await wait_for(scheduled_event, what="the Scheduled event")
        assert sched_ev["note"] == f"Successfully assigned {namespace}/big to large"


async def test_burst_of_1000_pods_over_50_nodes_never_overcommits(
    control_plane: ControlPlane, rest: RestClient, namespace: str, fresh_nodes: None
) -> None:
    rng = random.Random(42)
    nodes = [make_node(f"burst-{i:02d}", cpu="4", memory="8Gi", pods=30) for i in range(50)]
    await create_nodes(rest, nodes)
    pods = [
        make_pod(
            f"p-{i:04d}",
            namespace,
            cpu=f"{rng.choice([100, 200, 300, 500])}m",
            memory=f"{rng.choice([64, 128, 256, 512])}Mi",
            scheduler_name=SCHEDULER,
        )
        for i in range(1000)
    ]
    async with running_kscheduler(control_plane) as app:
        await create_pods(rest, pods)

        async def settled() -> bool:
            got = await list_pods(rest, namespace)
            pending = [p for p in got.values() if not p["spec"].get("nodeName")]
            reported = all(pod_scheduled_condition(p) for p in pending)
            return (
                len(got) == 1000
                and reported
                and app.queue.in_flight() == 0
                and len(app.scheduler.binds) == 0
            )

        await wait_for(settled, timeout=240, interval=1.0, what="all pods bound or reported")
        got = await list_pods(rest, namespace)
    used: dict[str, list[int]] = {}
    for p in got.values():
        n = p["spec"].get("nodeName")
        if n:
            cpu, mem = requests_of(p)
            u = used.setdefault(n, [0, 0, 0])
            u[0] += cpu
            u[1] += mem
            u[2] += 1
    assert used, "nothing was bound"
    for n, (cpu, mem, count) in used.items():
        assert cpu <= 4000, f"{n} over cpu: {cpu}m"
        assert mem <= 8 * 1024**3, f"{n} over memory: {mem}"
        assert count <= 30, f"{n} over pod count: {count}"
    bound = sum(u[2] for u in used.values())
    pending = [p for p in got.values() if not p["spec"].get("nodeName")]
    # every pending pod must really not fit on any node now
    for p in pending:
        cpu, mem = requests_of(p)
        for n, (c, m, k) in used.items():
            assert c + cpu > 4000 or m + mem > 8 * 1024**3 or k + 1 > 30, (
                f"{p['metadata']['name']} would fit on {n}"
            )
    assert bound + len(pending) == 1000
