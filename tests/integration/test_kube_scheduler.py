"""The real kube-scheduler, run by ReferenceScheduler against the harness."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from kscheduler.controlplane.builders import create_nodes, create_pods, make_node, make_pod
from kscheduler.controlplane.harness import ControlPlane
from kscheduler.controlplane.reference import ReferenceScheduler
from kscheduler.controlplane.rest import RestClient

NAME = "reference-scheduler"


@pytest.fixture(scope="module")
def reference(control_plane: ControlPlane) -> Iterator[ReferenceScheduler]:
    with ReferenceScheduler.for_control_plane(control_plane, scheduler_name=NAME) as ref:
        yield ref


def _condition(pod: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for cond in pod.get("status", {}).get("conditions") or []:
        if cond["type"] == kind:
            return dict(cond)
    return None


async def test_binds_only_its_own_pods(
    reference: ReferenceScheduler, rest: RestClient, namespace: str, fresh_nodes: None
) -> None:
    await create_nodes(rest, [make_node("ref-a"), make_node("ref-b")])
    await create_pods(
        rest,
        [
            make_pod("mine", namespace, cpu="500m", scheduler_name=NAME),
            make_pod("theirs", namespace, cpu="500m", scheduler_name="someone-else"),
        ],
    )
    pods = f"/api/v1/namespaces/{namespace}/pods"
    bound = await rest.wait_for(f"{pods}/mine", lambda p: p["spec"].get("nodeName"), within=30)
    assert bound["spec"]["nodeName"] in {"ref-a", "ref-b"}
    scheduled = await rest.wait_for(
        f"{pods}/mine", lambda p: _condition(p, "PodScheduled"), within=10
    )
    assert _condition(scheduled, "PodScheduled") == {
        **(_condition(scheduled, "PodScheduled") or {}),
        "status": "True",
    }

    await asyncio.sleep(2)
    theirs = await rest.get(f"{pods}/theirs")
    assert not theirs["spec"].get("nodeName")
    assert _condition(theirs, "PodScheduled") is None
    assert reference.is_running()


async def test_unschedulable_pod_gets_condition(
    control_plane: ControlPlane,
    reference: ReferenceScheduler,
    rest: RestClient,
    namespace: str,
    fresh_nodes: None,
) -> None:
    await create_nodes(rest, [make_node("small", cpu="1")])
    await create_pods(rest, [make_pod("huge", namespace, cpu="4", scheduler_name=NAME)])
    pod = await rest.wait_for(
        f"/api/v1/namespaces/{namespace}/pods/huge",
        lambda p: _condition(p, "PodScheduled"),
        within=30,
    )
    cond = _condition(pod, "PodScheduled")
    assert cond is not None
    assert (cond["status"], cond["reason"]) == ("False", "Unschedulable")
    assert "Insufficient cpu" in cond["message"]

    metrics = await asyncio.to_thread(reference.metrics, control_plane.admin_token)
    assert f'scheduler_schedule_attempts_total{{profile="{NAME}",result="unschedulable"}}' in (
        metrics
    )
