"""The control-plane harness itself: readiness, identities, RBAC, tokens, bulk builders."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kscheduler.controlplane.binaries import ETCD_VERSION, K8S_VERSION, KWOK_VERSION
from kscheduler.controlplane.builders import (
    create_nodes,
    create_pods,
    make_node,
    make_pod,
    taint,
)
from kscheduler.controlplane.harness import ControlPlane
from kscheduler.controlplane.rest import ApiError, RestClient

REPO = Path(__file__).resolve().parents[2]


def test_pinned_versions_match_go_mod() -> None:
    go_mod = (REPO / "hack" / "controlplane" / "go.mod").read_text()
    k8s = re.search(r"^require k8s\.io/kubernetes (\S+)", go_mod, re.MULTILINE)
    etcd = re.search(r"\sgo\.etcd\.io/etcd/server/v3 (\S+)", go_mod)
    assert k8s and etcd, "go.mod no longer pins k8s.io/kubernetes and etcd server"
    assert (k8s.group(1), etcd.group(1)) == (K8S_VERSION, ETCD_VERSION)
    script = (REPO / "hack" / "build-control-plane.sh").read_text()
    kwok = re.search(r'^kwok_version="(\S+)"', script, re.MULTILINE)
    assert kwok and kwok.group(1) == KWOK_VERSION


async def test_apiserver_ready(control_plane: ControlPlane, rest: RestClient) -> None:
    assert await rest.get_text("/readyz") == "ok"
    assert await rest.get_text("/livez") == "ok"
    version = await rest.get("/version")
    if control_plane.binaries.source == "cache":
        assert version["gitVersion"] == K8S_VERSION
    assert control_plane.startup_seconds is not None
    assert control_plane.startup_seconds < 30, "harness startup regressed"


async def test_unauthenticated_requests_are_rejected(control_plane: ControlPlane) -> None:
    async with control_plane.client("not-a-token") as client:
        with pytest.raises(ApiError) as err:
            await client.get("/api/v1/namespaces")
    assert err.value.status == 401


async def test_scheduler_identity_rbac(
    rest: RestClient, scheduler_rest: RestClient, namespace: str, fresh_nodes: None
) -> None:
    review = await scheduler_rest.post(
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
    )
    assert review["status"]["userInfo"]["username"] == "system:kube-scheduler"

    with pytest.raises(ApiError) as err:
        await scheduler_rest.get(f"/api/v1/namespaces/{namespace}/secrets")
    assert err.value.status == 403
    with pytest.raises(ApiError) as err:
        await scheduler_rest.post("/api/v1/nodes", make_node("not-allowed"))
    assert err.value.status == 403

    await create_nodes(rest, [make_node("rbac-node")])
    await create_pods(rest, [make_pod("rbac-pod", namespace, cpu="100m")])
    assert len(await scheduler_rest.list("/api/v1/nodes")) == 1
    assert len(await scheduler_rest.list(f"/api/v1/namespaces/{namespace}/pods")) == 1
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "rbac-pod", "namespace": namespace},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "rbac-node"},
    }
    await scheduler_rest.post(f"/api/v1/namespaces/{namespace}/pods/rbac-pod/binding", binding)
    pod = await rest.get(f"/api/v1/namespaces/{namespace}/pods/rbac-pod")
    assert pod["spec"]["nodeName"] == "rbac-node"


async def test_token_request_for_service_account(
    control_plane: ControlPlane, rest: RestClient, namespace: str
) -> None:
    await rest.post(
        f"/api/v1/namespaces/{namespace}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "robot"}},
    )
    request = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": 600},
    }
    issued = await rest.post(f"/api/v1/namespaces/{namespace}/serviceaccounts/robot/token", request)
    token = issued["status"]["token"]
    async with control_plane.client(token) as robot:
        api = await robot.get("/api")
        assert "v1" in api["versions"]
        review = await robot.post(
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
        assert review["status"]["userInfo"]["username"] == (
            f"system:serviceaccount:{namespace}:robot"
        )
        with pytest.raises(ApiError) as err:
            await robot.get(f"/api/v1/namespaces/{namespace}/pods")
        assert err.value.status == 403


async def test_kubeconfig_works_with_kubernetes_asyncio(control_plane: ControlPlane) -> None:
    from kubernetes_asyncio import client, config

    api_client = await config.new_client_from_config(
        config_file=str(control_plane.admin_kubeconfig)
    )
    async with api_client:
        namespaces = await client.CoreV1Api(api_client).list_namespace()
    assert "kube-system" in {ns.metadata.name for ns in namespaces.items}


async def test_bulk_create_200_nodes_and_200_pods(
    rest: RestClient, namespace: str, fresh_nodes: None
) -> None:
    nodes = [
        make_node(
            f"bulk-{i}",
            cpu="8",
            memory="64Gi",
            labels={"topology.kubernetes.io/zone": f"zone-{i % 3}"},
            taints=[taint("dedicated", "batch")] if i % 10 == 0 else None,
            images={"registry.k8s.io/pause:3.10": 300_000},
            extended={"example.com/gpu": 2} if i % 2 else None,
        )
        for i in range(200)
    ]
    pods = [
        make_pod(f"bulk-{i}", namespace, cpu="100m", memory="64Mi", scheduler_name="nobody")
        for i in range(200)
    ]
    began = time.monotonic()
    created_nodes = await create_nodes(rest, nodes)
    created_pods = await create_pods(rest, pods)
    elapsed = time.monotonic() - began
    assert len(created_nodes) == 200 and len(created_pods) == 200
    assert elapsed < 20, f"bulk creation took {elapsed:.1f}s"

    listed = {n["metadata"]["name"]: n for n in await rest.list("/api/v1/nodes", page_size=50)}
    assert len(listed) == 200
    node = listed["bulk-1"]
    assert node["status"]["allocatable"] == {
        "cpu": "8",
        "memory": "64Gi",
        "pods": "110",
        "ephemeral-storage": "100Gi",
        "example.com/gpu": "2",
    }
    assert node["status"]["conditions"][0]["type"] == "Ready"
    assert node["status"]["conditions"][0]["status"] == "True"
    assert listed["bulk-10"]["spec"]["taints"] == [
        {"key": "dedicated", "value": "batch", "effect": "NoSchedule"}
    ]
    pod_list = await rest.list(f"/api/v1/namespaces/{namespace}/pods")
    assert len(pod_list) == 200
    assert all(not p["spec"].get("nodeName") for p in pod_list)


async def test_restart_apiserver_keeps_state(
    control_plane: ControlPlane, rest: RestClient, namespace: str
) -> None:
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    await rest.post(path, {"metadata": {"name": "survivor"}, "data": {"k": "v"}})
    await control_plane.arestart_apiserver()
    # A fresh client: the pooled connections of the old process are gone.
    async with control_plane.client() as client:
        cm = await client.get(f"{path}/survivor")
    assert cm["data"] == {"k": "v"}
    assert await rest.get_text("/readyz") == "ok"


_CHILD = textwrap.dedent(
    """
    import sys, time
    from kscheduler.controlplane.harness import ControlPlane
    cp = ControlPlane().start()
    print(*(p.pid for p in cp.processes()), cp.workdir, flush=True)
    time.sleep(600)
    """
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes.
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(")")[-1].split()[0] == "Z")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_no_orphans_when_the_owner_dies(sig: signal.Signals) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), *sys.path])}
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD], stdout=subprocess.PIPE, env=env, text=True
    )
    try:
        assert child.stdout is not None
        *pids_text, workdir = child.stdout.readline().split()
        pids = [int(p) for p in pids_text]
        assert len(pids) == 4  # etcd, kube-apiserver, kube-controller-manager, kwok
        assert all(_alive(p) for p in pids)
        child.send_signal(sig)
        child.wait(30)
        deadline = time.monotonic() + 15
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(p) for p in pids), "control-plane processes outlived their owner"
        # SIGKILL runs nothing in the owner: the harness's watcher removes the directory
        while Path(workdir).exists() and time.monotonic() < deadline + 10:
            time.sleep(0.1)
        assert not Path(workdir).exists()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
