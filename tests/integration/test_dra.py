"""DRA through the real apiserver and controller-manager: kscheduler allocates the
same devices as kube-scheduler v1.37 for a direct claim and a claim made from a
template, and rejects an oversized claim with the same message.

Both schedulers see the same node and identical ResourceSlices, each under its own
driver and DeviceClass (so neither takes the other's devices); the node without
slices makes the node choice unambiguous."""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

from kscheduler.controlplane.builders import create_nodes, make_node, make_pod
from kscheduler.controlplane.harness import ControlPlane
from kscheduler.controlplane.reference import ReferenceScheduler
from kscheduler.controlplane.rest import RestClient
from tests.integration.runner import SCHEDULER, running_kscheduler, wait_for
from tests.integration.test_scheduling import pod_scheduled_condition

API = "/apis/resource.k8s.io/v1"
REFERENCE = "reference-scheduler"


def _slice(name: str, driver: str, node: str) -> dict[str, Any]:
    devices = []
    for i in range(4):
        devices.append(
            {
                "name": f"gpu-{i}",
                "attributes": {
                    "model": {"string": "A" if i % 2 == 0 else "B"},
                    "index": {"int": i},
                    "driverVersion": {"version": f"1.{i}.0"},
                },
                "capacity": {"memory": {"value": "8Gi" if i < 2 else "16Gi"}},
            }
        )
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def _class(name: str, driver: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
    }


def _claim_spec(cls: str, driver: str, count: int) -> dict[str, Any]:
    return {
        "devices": {
            "requests": [
                {
                    "name": "gpus",
                    "exactly": {
                        "deviceClassName": cls,
                        "count": count,
                        "selectors": [
                            {
                                "cel": {
                                    "expression": f'device.capacity["{driver}"].memory'
                                    '.compareTo(quantity("10Gi")) >= 0 || '
                                    f'device.attributes["{driver}"].driverVersion'
                                    '.isLessThan(semver("1.1.0"))'
                                }
                            }
                        ],
                    },
                }
            ],
            "constraints": [{"matchAttribute": f"{driver}/model"}],
        }
    }


def claim_pod(name: str, ns: str, scheduler: str, claim: dict[str, str]) -> dict[str, Any]:
    """A pod of ``scheduler`` using one claim (``claim``: resourceClaimName or
    resourceClaimTemplateName) under the name "gpu"."""
    pod = make_pod(name, ns, cpu="100m", scheduler_name=scheduler)
    pod["spec"]["resourceClaims"] = [{"name": "gpu", **claim}]
    return pod


def claim_devices(claim: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(request, pool, device) of each result of the claim's allocation."""
    alloc = claim["status"]["allocation"]
    return [(r["request"], r["pool"], r["device"]) for r in alloc["devices"]["results"]]


async def test_same_devices_as_kube_scheduler(
    control_plane: ControlPlane, rest: RestClient, namespace: str, fresh_nodes: None
) -> None:
    tag = uuid.uuid4().hex[:6]
    sides = {REFERENCE: f"ref-{tag}.example.com", SCHEDULER: f"ks-{tag}.example.com"}
    created: list[str] = []
    await create_nodes(rest, [make_node("dra-1"), make_node("dra-2")])
    ref = ReferenceScheduler.for_control_plane(control_plane, scheduler_name=REFERENCE)
    try:
        for who, driver in sides.items():
            for obj, path in (
                (_class(f"gpu-{driver}", driver), f"{API}/deviceclasses"),
                (_slice(f"dra-1-{driver}", driver, "dra-1"), f"{API}/resourceslices"),
            ):
                await rest.post(path, obj)
                created.append(f"{path}/{obj['metadata']['name']}")
            cls = f"gpu-{driver}"
            await rest.post(
                f"{API}/namespaces/{namespace}/resourceclaims",
                {"metadata": {"name": f"{who}-direct"}, "spec": _claim_spec(cls, driver, 2)},
            )
            await rest.post(
                f"{API}/namespaces/{namespace}/resourceclaimtemplates",
                {
                    "metadata": {"name": f"{who}-tmpl"},
                    "spec": {"spec": _claim_spec(cls, driver, 1)},
                },
            )
            await rest.post(
                f"{API}/namespaces/{namespace}/resourceclaims",
                {"metadata": {"name": f"{who}-huge"}, "spec": _claim_spec(cls, driver, 5)},
            )
        pods = f"/api/v1/namespaces/{namespace}/pods"
        async with ref, running_kscheduler(control_plane):
            # the direct claim first, then the template's: the order decides devices
            for who in sides:
                await rest.post(
                    pods,
                    claim_pod(f"{who}-a", namespace, who, {"resourceClaimName": f"{who}-direct"}),
                )
            for who in sides:
                await rest.wait_for(
                    f"{pods}/{who}-a", lambda p: p["spec"].get("nodeName"), within=60
                )
            for who in sides:
                await rest.post(
                    pods,
                    claim_pod(
                        f"{who}-b", namespace, who, {"resourceClaimTemplateName": f"{who}-tmpl"}
                    ),
                )
                await rest.post(
                    pods,
                    claim_pod(f"{who}-c", namespace, who, {"resourceClaimName": f"{who}-huge"}),
                )
            got: dict[str, dict[str, Any]] = {}
            for who in sides:
                for p in ("a", "b"):
                    got[f"{who}-{p}"] = await rest.wait_for(
                        f"{pods}/{who}-{p}", lambda p: p["spec"].get("nodeName"), within=60
                    )

            async def pending() -> list[dict[str, Any]] | None:
                conds = [
                    pod_scheduled_condition(await rest.get(f"{pods}/{who}-c")) for who in sides
                ]
                if all(c and c["status"] == "False" for c in conds):
                    return [c for c in conds if c]
                return None

            ref_cond, ks_cond = await wait_for(pending, timeout=60, what="both huge pods pending")

        assert ref_cond["message"] == ks_cond["message"]
        assert "cannot allocate all claims" in ks_cond["message"]
        for p in ("a", "b"):
            assert got[f"{REFERENCE}-{p}"]["spec"]["nodeName"] == "dra-1"
            assert got[f"{SCHEDULER}-{p}"]["spec"]["nodeName"] == "dra-1"
        claims: dict[str, dict[str, Any]] = {}
        for who in sides:
            claims[f"{who}-a"] = await rest.get(
                f"{API}/namespaces/{namespace}/resourceclaims/{who}-direct"
            )
            status = got[f"{who}-b"]["status"].get("resourceClaimStatuses") or []
            assert status, "the controller-manager records the claim it made"
            claims[f"{who}-b"] = await rest.get(
                f"{API}/namespaces/{namespace}/resourceclaims/{status[0]['resourceClaimName']}"
            )
        for p in ("a", "b"):
            ours, theirs = claims[f"{SCHEDULER}-{p}"], claims[f"{REFERENCE}-{p}"]
            assert claim_devices(ours) == claim_devices(theirs)
            assert ours["status"]["allocation"].get("nodeSelector") == theirs["status"][
                "allocation"
            ].get("nodeSelector")
            assert "resource.kubernetes.io/delete-protection" in ours["metadata"]["finalizers"]
            assert [r["uid"] for r in ours["status"]["reservedFor"]] == [
                got[f"{SCHEDULER}-{p}"]["metadata"]["uid"]
            ]
            assert ours["status"]["allocation"].get("allocationTimestamp")
        # matchAttribute over the 16Gi devices or the one older than 1.1.0: A, A
        assert claim_devices(claims[f"{SCHEDULER}-a"]) == [
            ("gpus", "dra-1", "gpu-0"),
            ("gpus", "dra-1", "gpu-2"),
        ]
    finally:
        for path in reversed(created):
            with contextlib.suppress(Exception):
                await rest.delete(path)
