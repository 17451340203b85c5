"""Gang scheduling with the Coscheduling plugin on a real kube-apiserver: a pod group
binds all its members together, or none of them."""

from __future__ import annotations

import asyncio
from typing import Any

from kscheduler.controlplane.builders import create_nodes, create_pods, make_node, make_pod
from kscheduler.controlplane.harness import ControlPlane
from kscheduler.controlplane.rest import JSON, RestClient
from kscheduler.plugins.coscheduling import LABEL_MIN_AVAILABLE, LABEL_POD_GROUP
from tests.integration.runner import SCHEDULER, running_kscheduler, wait_for

WAIT_SECONDS = 3

CONFIG = f"""
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: {SCHEDULER}
  plugins:
    multiPoint:
      enabled: [{{name: Coscheduling}}]
  pluginConfig:
  - name: Coscheduling
    args:
      permitWaitingTimeSeconds: {WAIT_SECONDS}
"""


def member(name: str, ns: str, group: str, need: int) -> JSON:
    return make_pod(
        name,
        ns,
        cpu="1",
        memory="128Mi",
        scheduler_name=SCHEDULER,
        labels={LABEL_POD_GROUP: group, LABEL_MIN_AVAILABLE: str(need)},
    )


async def pods_of(rest: RestClient, ns: str) -> dict[str, dict[str, Any]]:
    items = (await rest.get(f"/api/v1/namespaces/{ns}/pods"))["items"]
    return {p["metadata"]["name"]: p for p in items}


def scheduled_condition(p: dict[str, Any]) -> dict[str, Any]:
    for c in (p.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled":
            return dict(c)
    return {}


async def stays_unbound(rest: RestClient, ns: str, seconds: float) -> dict[str, dict[str, Any]]:
    """Poll for ``seconds``: fail as soon as any pod of ``ns`` is bound."""
    deadline = asyncio.get_running_loop().time() + seconds
    got: dict[str, dict[str, Any]] = {}
    while asyncio.get_running_loop().time() < deadline:
        got = await pods_of(rest, ns)
        bound = {n: p["spec"]["nodeName"] for n, p in got.items() if p["spec"].get("nodeName")}
        assert not bound, f"gang members bound on their own: {bound}"
        await asyncio.sleep(0.2)
    return got


async def test_gang_binds_only_once_complete(
    control_plane: ControlPlane, rest: RestClient, namespace: str, fresh_nodes: None
) -> None:
    await create_nodes(rest, [make_node(f"gang-{i}", cpu="4", memory="8Gi") for i in range(2)])
    async with running_kscheduler(control_plane, CONFIG):
        # three of the four members: nothing is placed, each says why
        await create_pods(rest, [member(f"w{i}", namespace, "workers", 4) for i in range(3)])

        async def all_reported() -> dict[str, dict[str, Any]] | None:
            got = await pods_of(rest, namespace)
            ok = len(got) == 3 and all(
                scheduled_condition(p).get("status") == "False" for p in got.values()
            )
            return got if ok else None

        await wait_for(all_reported, what="incomplete gang reported unschedulable")
        got = await stays_unbound(rest, namespace, 2.0)
        for p in got.values():
            assert f'pod group "{namespace}/workers" has' in scheduled_condition(p)["message"]
            assert "of the 4 members it needs" in scheduled_condition(p)["message"]

        # the fourth arrives: all four bind
        await create_pods(rest, [member("w3", namespace, "workers", 4)])

        async def all_bound() -> dict[str, str] | None:
            got = await pods_of(rest, namespace)
            placed = {n: p["spec"].get("nodeName", "") for n, p in got.items()}
            return placed if len(placed) == 4 and all(placed.values()) else None

        placed = await wait_for(all_bound, what="complete gang bound")
    assert sorted(placed) == ["w0", "w1", "w2", "w3"]


async def test_gang_without_room_for_all_binds_none_until_room_appears(
    control_plane: ControlPlane, rest: RestClient, namespace: str, fresh_nodes: None
) -> None:
    # room for three of the four members
    await create_nodes(rest, [make_node("gang-small", cpu="3", memory="8Gi")])
    async with running_kscheduler(control_plane, CONFIG) as app:
        await create_pods(rest, [member(f"m{i}", namespace, "job", 4) for i in range(4)])
        # longer than a Permit timeout: the members that fit wait, time out, are released
        got = await stays_unbound(rest, namespace, WAIT_SECONDS * 2 + 1.0)
        assert len(got) == 4
        messages = [scheduled_condition(p).get("message", "") for p in got.values()]
        assert any(
            f"rejected due to timeout after waiting {WAIT_SECONDS}s at plugin Coscheduling" in m
            or "failed to be scheduled" in m
            for m in messages
        ), messages
        # the member that found no room said why (the latest condition may instead
        # carry the group's rejection, which comes after it)
        evs = (await rest.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events"))["items"]
        notes = [e["note"] for e in evs if e.get("reason") == "FailedScheduling"]
        assert any("Insufficient cpu" in n for n in notes), notes
        # no member holds room for long: whatever is assumed belongs to the current round
        fwk = app.frameworks[SCHEDULER]
        assert len(fwk.waiting_pods) <= 3

        # room for the fourth: the group completes and binds as a whole
        await create_nodes(rest, [make_node("gang-extra", cpu="2", memory="8Gi")])

        async def all_bound() -> dict[str, str] | None:
            got = await pods_of(rest, namespace)
            placed = {n: p["spec"].get("nodeName", "") for n, p in got.items()}
            return placed if all(placed.values()) else None

        placed = await wait_for(all_bound, timeout=WAIT_SECONDS * 4 + 30, what="gang bound")
    assert sorted(placed) == ["m0", "m1", "m2", "m3"]
    assert sorted(placed.values()).count("gang-small") <= 3
