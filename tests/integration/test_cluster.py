"""The harness is a cluster: controllers act on workloads and kwok plays every kubelet."""

from __future__ import annotations

import uuid
from typing import Any

from kscheduler.controlplane.builders import create_namespace, create_nodes, make_node, make_pod
from kscheduler.controlplane.harness import ControlPlane
from kscheduler.controlplane.rest import ApiError, RestClient
from tests.integration.runner import SCHEDULER, running_kscheduler, wait_for


def deployment(name: str, namespace: str, replicas: int, cpu: str = "100m") -> dict[str, Any]:
    pod = make_pod("x", namespace, cpu=cpu, scheduler_name=SCHEDULER)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": pod["spec"]},
        },
    }


async def test_deployment_rolls_out_with_kscheduler(
    control_plane: ControlPlane, rest: RestClient, namespace: str, fresh_nodes: None
) -> None:
    await create_nodes(rest, [make_node(f"cl-{i}", cpu="2") for i in range(3)])
    path = f"/apis/apps/v1/namespaces/{namespace}/deployments"
    async with running_kscheduler(control_plane):
        await rest.post(path, deployment("web", namespace, 3))

        async def available() -> dict[str, Any] | None:
            d: dict[str, Any] = await rest.get(f"{path}/web")
            ok = (d.get("status") or {}).get("availableReplicas") == 3
            return d if ok else None

        d = await wait_for(available, timeout=60, what="deployment web Available")
    conditions = {c["type"]: c["status"] for c in d["status"]["conditions"]}
    assert conditions["Available"] == "True"
    pods = await rest.list(f"/api/v1/namespaces/{namespace}/pods")
    assert len(pods) == 3
    for p in pods:
        # the ReplicaSet controller made it, kscheduler bound it, kwok runs it
        assert p["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet"
        assert p["spec"]["nodeName"].startswith("cl-")
        assert p["status"]["phase"] == "Running"
        assert p["status"]["podIP"]
        # the ServiceAccount admission plugin is on
        assert p["spec"]["serviceAccountName"] == "default"


async def test_nodes_are_kept_ready_with_leases(rest: RestClient, fresh_nodes: None) -> None:
    await create_nodes(rest, [make_node("leased")])

    async def lease() -> dict[str, Any] | None:
        try:
            got: dict[str, Any] = await rest.get(
                "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/leased"
            )
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise
        return got

    got = await wait_for(lease, what="the node's Lease")
    assert got["spec"]["holderIdentity"] and got["spec"]["renewTime"]
    node = await rest.get("/api/v1/nodes/leased")
    ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
    assert ready and ready[0]["status"] == "True"
    assert not node["spec"].get("taints"), "the node lifecycle controller tainted the node"


async def test_deleted_namespace_is_finished_by_its_controller(rest: RestClient) -> None:
    name = f"gone-{uuid.uuid4().hex[:8]}"
    await create_namespace(rest, name)
    await rest.post(
        f"/api/v1/namespaces/{name}/configmaps", {"metadata": {"name": "c"}, "data": {"k": "v"}}
    )
    await rest.delete(f"/api/v1/namespaces/{name}")

    async def gone() -> bool:
        try:
            await rest.get(f"/api/v1/namespaces/{name}")
        except ApiError as exc:
            return exc.status == 404
        return False

    await wait_for(gone, timeout=60, what="the namespace to be deleted")
