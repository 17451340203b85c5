"""The benchmark's ceiling, bench-binder (Go, client-go over protobuf), against the harness."""

from __future__ import annotations

from collections import Counter
from typing import Any

from bench.run import CEILING, SCHEDULER_NAMES, BinderProcess
from kscheduler.controlplane.builders import create_nodes, make_node, make_pod
from kscheduler.controlplane.harness import ControlPlane
from kscheduler.controlplane.rest import RestClient
from tests.integration.runner import wait_for


async def test_bench_binder_binds_round_robin_and_writes_the_scheduled_events(
    control_plane: ControlPlane, rest: RestClient, namespace: str, fresh_nodes: None
) -> None:
    nodes = [f"bb-{i}" for i in range(3)]
    await create_nodes(rest, [make_node(n, cpu="4") for n in nodes])
    name = SCHEDULER_NAMES[CEILING]
    pods_path = f"/api/v1/namespaces/{namespace}/pods"
    # one pod there before the binder starts (its list), the rest while it watches
    await rest.post(pods_path, make_pod("early", namespace, cpu="10m", scheduler_name=name))
    # a pod of another scheduler is left alone
    await rest.post(pods_path, make_pod("other", namespace, cpu="10m", scheduler_name="nobody"))
    binder = BinderProcess(
        control_plane, namespace, workdir=control_plane.workdir / "bench-binder", cpus=None
    )
    await binder.start()
    try:
        for i in range(11):
            await rest.post(pods_path, make_pod(f"p{i}", namespace, cpu="10m", scheduler_name=name))

        async def all_bound() -> list[dict[str, Any]] | None:
            pods = [p for p in await rest.list(pods_path) if p["metadata"]["name"] != "other"]
            return pods if all(p["spec"].get("nodeName") for p in pods) else None

        pods = await wait_for(all_bound, timeout=60, what="12 pods bound by bench-binder")

        async def events() -> list[dict[str, Any]] | None:
            found = await rest.list(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")
            mine = [e for e in found if e.get("reportingController") == name]
            return mine if len(mine) >= 12 else None

        written = await wait_for(events, timeout=30, what="12 Scheduled events")
    finally:
        await binder.stop()
    assert len(pods) == 12
    # round robin over the sorted node names
    assert Counter(p["spec"]["nodeName"] for p in pods) == {n: 4 for n in nodes}
    by_uid = {p["metadata"]["uid"]: p for p in pods}
    assert len(written) == 12
    for e in written:
        pod = by_uid[e["regarding"]["uid"]]
        assert (e["reason"], e["action"], e["type"]) == ("Scheduled", "Binding", "Normal")
        assert e["note"] == (
            f"Successfully assigned {namespace}/{pod['metadata']['name']} "
            f"to {pod['spec']['nodeName']}"
        )
    other = await rest.get(f"{pods_path}/other")
    assert not other["spec"].get("nodeName")
