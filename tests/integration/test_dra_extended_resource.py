"""Extended resources backed by DRA through the real apiserver and controller-manager:
a pod asking for a DeviceClass's extendedResourceName (or its implicit
``deviceclass.resource.kubernetes.io/<class>`` name) on nodes that do not advertise
it gets devices from a ResourceClaim the scheduler creates for it. kscheduler and
kube-scheduler v1.37.2 pick the same node and devices, write the claim the same way
(generateName, pod owner, annotation, finalizer, reservedFor) and the same
``status.extendedResourceClaimStatus``; a pod asking for more than is left gets the
same FailedScheduling message from both.

Each scheduler has its own driver, DeviceClass and extended resource name over
identical ResourceSlices on dra-1; dra-2 has no devices."""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

from kscheduler.controlplane.builders import create_nodes, make_node, make_pod
from kscheduler.controlplane.harness import ControlPlane
from kscheduler.controlplane.reference import ReferenceScheduler
from kscheduler.controlplane.rest import ApiError, RestClient
from tests.integration.runner import SCHEDULER, running_kscheduler, wait_for
from tests.integration.test_dra import claim_devices
from tests.integration.test_scheduling import pod_scheduled_condition

API = "/apis/resource.k8s.io/v1"
REFERENCE = "reference-scheduler"
ANNOTATION = "resource.kubernetes.io/extended-resource-claim"


def _slice(name: str, driver: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": f"gpu-{i}"} for i in range(4)],
        },
    }


def _class(name: str, driver: str, resource: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {
            "selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}],
            "extendedResourceName": resource,
        },
    }


def _pod(name: str, ns: str, scheduler: str, requests: dict[str, str]) -> dict[str, Any]:
    # extended resources need limits equal to requests
    limits = {k: v for k, v in requests.items() if "/" in k}
    resources = {"requests": requests, "limits": limits}
    containers = [{"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": resources}]
    return make_pod(name, ns, scheduler_name=scheduler, containers=containers)


async def test_extended_resource_devices_as_kube_scheduler(
    control_plane: ControlPlane, rest: RestClient, namespace: str, fresh_nodes: None
) -> None:
    tag = uuid.uuid4().hex[:6]
    sides = {REFERENCE: f"ref-{tag}.example.com", SCHEDULER: f"ks-{tag}.example.com"}
    created: list[str] = []
    await create_nodes(rest, [make_node("dra-1"), make_node("dra-2")])
    ref = ReferenceScheduler.for_control_plane(control_plane, scheduler_name=REFERENCE)
    pods = f"/api/v1/namespaces/{namespace}/pods"
    claims_path = f"{API}/namespaces/{namespace}/resourceclaims"
    try:
        for driver in sides.values():
            for obj, path in (
                (_class(f"gpu-{driver}", driver, f"{driver}/gpu"), f"{API}/deviceclasses"),
                (_slice(f"dra-1-{driver}", driver, "dra-1"), f"{API}/resourceslices"),
            ):
                await rest.post(path, obj)
                created.append(f"{path}/{obj['metadata']['name']}")
        async with ref, running_kscheduler(control_plane):
            for who, driver in sides.items():
                await rest.post(
                    pods, _pod(f"{who}-a", namespace, who, {"cpu": "100m", f"{driver}/gpu": "3"})
                )
            got: dict[str, dict[str, Any]] = {}
            for who in sides:
                got[who] = await rest.wait_for(
                    f"{pods}/{who}-a",
                    lambda p: (
                        p["spec"].get("nodeName")
                        and (p.get("status") or {}).get("extendedResourceClaimStatus")
                    ),
                    within=60,
                )
            # the implicit name of the class: two are asked, one is left
            for who, driver in sides.items():
                implicit = f"deviceclass.resource.kubernetes.io/gpu-{driver}"
                await rest.post(pods, _pod(f"{who}-b", namespace, who, {implicit: "2"}))

            async def pending() -> list[dict[str, Any]] | None:
                conds = [
                    pod_scheduled_condition(await rest.get(f"{pods}/{who}-b")) for who in sides
                ]
                if all(c and c["status"] == "False" for c in conds):
                    return [c for c in conds if c]
                return None

            ref_cond, ks_cond = await wait_for(pending, timeout=60, what="both b pods pending")
            all_claims = (await rest.get(claims_path))["items"]

        assert ks_cond["message"] == ref_cond["message"]
        assert "cannot allocate all claims" in ks_cond["message"]
        claims: dict[str, dict[str, Any]] = {}
        for who in sides:
            pod = got[who]
            assert pod["spec"]["nodeName"] == "dra-1"
            status = pod["status"]["extendedResourceClaimStatus"]
            mine = [
                c
                for c in all_claims
                if any(r["uid"] == pod["metadata"]["uid"] for r in c["metadata"]["ownerReferences"])
            ]
            assert [c["metadata"]["name"] for c in mine] == [status["resourceClaimName"]]
            claims[who] = mine[0]
        ours, theirs = claims[SCHEDULER], claims[REFERENCE]
        assert (
            claim_devices(ours)
            == claim_devices(theirs)
            == [
                ("container-0-request-1", "dra-1", "gpu-0"),
                ("container-0-request-1", "dra-1", "gpu-1"),
                ("container-0-request-1", "dra-1", "gpu-2"),
            ]
        )
        for who, claim in claims.items():
            meta = claim["metadata"]
            assert meta["generateName"] == f"{who}-a-extended-resources-"
            assert meta["name"].startswith(meta["generateName"])
            assert meta["annotations"][ANNOTATION] == "true"
            [owner] = meta["ownerReferences"]
            assert (owner["kind"], owner["name"], owner["controller"]) == ("Pod", f"{who}-a", True)
            assert "resource.kubernetes.io/delete-protection" in meta["finalizers"]
            assert [r["uid"] for r in claim["status"]["reservedFor"]] == [
                got[who]["metadata"]["uid"]
            ]
            requests = claim["spec"]["devices"]["requests"]
            assert [r["exactly"]["count"] for r in requests] == [3]
        for field in ("nodeSelector",):
            assert ours["status"]["allocation"].get(field) == theirs["status"]["allocation"].get(
                field
            )
        mappings = {
            who: [
                {**m, "resourceName": m["resourceName"].replace(driver, "DRIVER")}
                for m in got[who]["status"]["extendedResourceClaimStatus"]["requestMappings"]
            ]
            for who, driver in sides.items()
        }
        assert (
            mappings[SCHEDULER]
            == mappings[REFERENCE]
            == [
                {
                    "containerName": "main",
                    "resourceName": "DRIVER/gpu",
                    "requestName": "container-0-request-1",
                }
            ]
        )
    finally:
        for path in reversed(created):
            with contextlib.suppress(Exception):
                await rest.delete(path)


async def test_claim_left_from_an_earlier_attempt_is_deleted_then_the_pod_scheduled(
    control_plane: ControlPlane, rest: RestClient, namespace: str, fresh_nodes: None
) -> None:
    """A pod's allocated extended-resource claim from an earlier attempt (as a failed
    binding leaves it): each scheduler deletes it (its finalizer removed first), which
    frees its device and queues the pod, then makes a new claim."""
    tag = uuid.uuid4().hex[:6]
    sides = {REFERENCE: f"ref-{tag}.example.com", SCHEDULER: f"ks-{tag}.example.com"}
    created: list[str] = []
    await create_nodes(rest, [make_node("dra-1")])
    ref = ReferenceScheduler.for_control_plane(control_plane, scheduler_name=REFERENCE)
    pods = f"/api/v1/namespaces/{namespace}/pods"
    claims_path = f"{API}/namespaces/{namespace}/resourceclaims"
    try:
        stale: dict[str, str] = {}
        for who, driver in sides.items():
            for obj, path in (
                (_class(f"gpu-{driver}", driver, f"{driver}/gpu"), f"{API}/deviceclasses"),
                (_slice(f"dra-1-{driver}", driver, "dra-1"), f"{API}/resourceslices"),
            ):
                await rest.post(path, obj)
                created.append(f"{path}/{obj['metadata']['name']}")
            pod = _pod(f"{who}-s", namespace, who, {f"{driver}/gpu": "4"})
            pod["spec"]["schedulingGates"] = [{"name": "example.com/hold"}]
            pod = await rest.post(pods, pod)
            claim = await rest.post(
                claims_path,
                {
                    "metadata": {
                        "generateName": f"{who}-s-extended-resources-",
                        "annotations": {ANNOTATION: "true"},
                        "finalizers": ["resource.kubernetes.io/delete-protection"],
                        "ownerReferences": [
                            {
                                "apiVersion": "v1",
                                "kind": "Pod",
                                "name": pod["metadata"]["name"],
                                "uid": pod["metadata"]["uid"],
                                "controller": True,
                            }
                        ],
                    },
                    "spec": {
                        "devices": {
                            "requests": [
                                {
                                    "name": "container-0-request-0",
                                    "exactly": {"deviceClassName": f"gpu-{driver}", "count": 1},
                                }
                            ]
                        }
                    },
                },
            )
            claim["status"] = {
                "allocation": {
                    "devices": {
                        "results": [
                            {
                                "request": "container-0-request-0",
                                "driver": driver,
                                "pool": "dra-1",
                                "device": "gpu-3",
                            }
                        ]
                    }
                }
            }
            claim = await rest.put(f"{claims_path}/{claim['metadata']['name']}/status", claim)
            stale[who] = claim["metadata"]["name"]
        async with ref, running_kscheduler(control_plane):
            for who in sides:
                await rest.patch(f"{pods}/{who}-s", {"spec": {"schedulingGates": None}})
            got = {
                who: await rest.wait_for(
                    f"{pods}/{who}-s",
                    lambda p: (
                        p["spec"].get("nodeName")
                        and (p.get("status") or {}).get("extendedResourceClaimStatus")
                    ),
                    within=60,
                )
                for who in sides
            }
        for who, name in stale.items():
            try:
                await rest.get(f"{claims_path}/{name}")
            except ApiError as exc:
                assert exc.status == 404
            else:
                raise AssertionError(f"{who}: the claim {name} of the earlier attempt is left")
        devices = {}
        for who, pod in got.items():
            name = pod["status"]["extendedResourceClaimStatus"]["resourceClaimName"]
            assert name != stale[who]
            devices[who] = claim_devices(await rest.get(f"{claims_path}/{name}"))
        # all four devices: only possible once the earlier claim's gpu-3 is freed
        assert devices[SCHEDULER] == devices[REFERENCE]
        assert [d for _, _, d in devices[SCHEDULER]] == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    finally:
        for path in reversed(created):
            with contextlib.suppress(Exception):
                await rest.delete(path)
