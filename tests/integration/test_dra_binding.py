"""DRA binding conditions (DRADeviceBindingConditions) through the real apiserver:
the test plays the driver, writing the conditions into the claims'
``status.devices``, and kscheduler's PreBind waits for them.

Three pods on one node, each with a claim for its own device (every device has the
binding condition ``attached`` and the failure condition ``failed``):

- ``ok``: the pod stays unbound while the claim is allocated and the device not
  attached; once the driver sets ``attached``, it is bound.
- ``fail``: the driver sets ``failed``; PreBind fails with upstream's message, the
  next attempt deallocates the claim (PostFilter), the claim is allocated again,
  and once the driver sets ``attached`` the pod is bound.
- ``slow``: the driver never answers; past ``bindingTimeout`` (set to 10s) PreBind
  fails with a timeout, the claim is deallocated in the next attempt and allocated
  again (the scheduler does not give up on the device by itself).

A deallocation is seen as a new ``allocationTimestamp``: the claim is allocated
again within milliseconds, too fast to catch it unallocated by polling.
"""

from __future__ import annotations

import contextlib
import uuid
from datetime import UTC, datetime
from typing import Any

from kscheduler.controlplane.builders import create_nodes, make_node, make_pod
from kscheduler.controlplane.harness import ControlPlane
from kscheduler.controlplane.rest import RestClient
from tests.integration.runner import SCHEDULER, running_kscheduler, wait_for

API = "/apis/resource.k8s.io/v1"
NODE = "bc-1"
TIMEOUT = 10
CONFIG = f"""
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: {SCHEDULER}
  pluginConfig:
  - name: DynamicResources
    args: {{bindingTimeout: {TIMEOUT}s}}
"""
ROLES = ("ok", "fail", "slow")


def _slice(driver: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{NODE}-{driver}"},
        "spec": {
            "driver": driver,
            "nodeName": NODE,
            "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": f"dev-{role}",
                    "attributes": {"role": {"string": role}},
                    "bindingConditions": ["attached"],
                    "bindingFailureConditions": ["failed"],
                }
                for role in ROLES
            ],
        },
    }


def _claim(name: str, cls: str, driver: str, role: str) -> dict[str, Any]:
    selector = f'device.attributes["{driver}"].role == "{role}"'
    return {
        "metadata": {"name": name},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "dev",
                        "exactly": {
                            "deviceClassName": cls,
                            "selectors": [{"cel": {"expression": selector}}],
                        },
                    }
                ]
            }
        },
    }


async def _events(rest: RestClient, ns: str, name: str, reason: str) -> list[dict[str, Any]]:
    evs = (await rest.get(f"/apis/events.k8s.io/v1/namespaces/{ns}/events"))["items"]
    return [e for e in evs if e.get("reason") == reason and e["regarding"]["name"] == name]


async def _set_condition(rest: RestClient, path: str, type_: str, reason: str) -> None:
    """As the driver: the allocated device's condition ``type_`` True."""
    claim = await rest.get(path)
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    claim["status"]["devices"] = [
        {
            "driver": result["driver"],
            "pool": result["pool"],
            "device": result["device"],
            "conditions": [
                {
                    "type": type_,
                    "status": "True",
                    "reason": reason,
                    "message": f"{type_} by the test",
                    "lastTransitionTime": now,
                }
            ],
        }
    ]
    await rest.put(f"{path}/status", claim)


async def test_pre_bind_waits_for_binding_conditions(
    control_plane: ControlPlane, rest: RestClient, namespace: str, fresh_nodes: None
) -> None:
    driver = f"bc-{uuid.uuid4().hex[:6]}.example.com"
    cls = f"bc-{driver}"
    created: list[str] = []
    await create_nodes(rest, [make_node(NODE)])
    pods = f"/api/v1/namespaces/{namespace}/pods"
    claims = f"{API}/namespaces/{namespace}/resourceclaims"
    try:
        for obj, path in (
            (
                {
                    "metadata": {"name": cls},
                    "spec": {
                        "selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]
                    },
                },
                f"{API}/deviceclasses",
            ),
            (_slice(driver), f"{API}/resourceslices"),
        ):
            await rest.post(path, obj)
            created.append(f"{path}/{obj['metadata']['name']}")
        for role in ROLES:
            await rest.post(claims, _claim(role, cls, driver, role))
        async with running_kscheduler(control_plane, CONFIG):
            for role in ROLES:
                pod = make_pod(role, namespace, cpu="100m", scheduler_name=SCHEDULER)
                pod["spec"]["resourceClaims"] = [{"name": "dev", "resourceClaimName": role}]
                await rest.post(pods, pod)

            async def allocated(role: str) -> dict[str, Any] | None:
                claim: dict[str, Any] = await rest.get(f"{claims}/{role}")
                alloc = (claim.get("status") or {}).get("allocation")
                if alloc and not claim["status"].get("devices"):
                    return claim
                return None

            first: dict[str, dict[str, Any]] = {}
            for role in ROLES:
                first[role] = await wait_for(
                    lambda r=role: allocated(r), timeout=30, what=f"{role} allocated"
                )
                (result,) = first[role]["status"]["allocation"]["devices"]["results"]
                assert result["device"] == f"dev-{role}"
                assert result["bindingConditions"] == ["attached"]
                assert result["bindingFailureConditions"] == ["failed"]
                assert first[role]["status"]["allocation"]["allocationTimestamp"]
            # allocated, reserved, waiting: not bound
            for role in ROLES:
                pending = await wait_for(
                    lambda r=role: _events(rest, namespace, r, "BindingConditionsPending"),
                    timeout=10,
                    what=f"BindingConditionsPending for {role}",
                )
                assert (
                    pending[0]["note"]
                    == f"waiting for binding conditions for device on node {NODE}"
                )
                assert not (await rest.get(f"{pods}/{role}"))["spec"].get("nodeName")

            # the driver attaches "ok" and fails "fail"
            await _set_condition(rest, f"{claims}/ok", "attached", "Attached")
            await _set_condition(rest, f"{claims}/fail", "failed", "DeviceBroken")
            await rest.wait_for(f"{pods}/ok", lambda p: p["spec"].get("nodeName"), within=15)

            async def failed_with(name: str, text: str) -> list[str]:
                evs = await _events(rest, namespace, name, "FailedScheduling")
                return [e["note"] for e in evs if text in e["note"]]

            notes = await wait_for(
                lambda: failed_with("fail", "device binding failed"),
                timeout=15,
                what="FailedScheduling for fail",
            )
            assert (
                'running PreBind plugin "DynamicResources": device binding failed: '
                'claim=fail, reason=DeviceBroken, message="failed by the test"'
            ) in notes[0]

            def stamp(claim: dict[str, Any]) -> str:
                return str(claim["status"]["allocation"]["allocationTimestamp"])

            async def reallocated(role: str) -> dict[str, Any] | None:
                """Deallocated (PostFilter) and allocated again: a new allocation, written
                at a later second, without the driver's device status."""
                claim = await allocated(role)
                if claim and stamp(claim) != stamp(first[role]):
                    return claim
                return None

            await wait_for(lambda: reallocated("fail"), timeout=20, what="fail allocated again")
            await _set_condition(rest, f"{claims}/fail", "attached", "Attached")
            await rest.wait_for(f"{pods}/fail", lambda p: p["spec"].get("nodeName"), within=15)

            # "slow": nothing from the driver; bindingTimeout (10s) ends the wait
            notes = await wait_for(
                lambda: failed_with("slow", "device binding timeout"),
                timeout=TIMEOUT + 15,
                what="FailedScheduling for slow",
            )
            assert 'running PreBind plugin "DynamicResources": device binding timeout: ' in notes[0]
            await wait_for(lambda: reallocated("slow"), timeout=20, what="slow allocated again")
            assert not (await rest.get(f"{pods}/slow"))["spec"].get("nodeName")
        ok = await rest.get(f"{claims}/ok")
        assert [r["name"] for r in ok["status"]["reservedFor"]] == ["ok"]
    finally:
        for role in ROLES:
            with contextlib.suppress(Exception):
                await rest.delete(f"{pods}/{role}", {"gracePeriodSeconds": 0})
        for path in reversed(created):
            with contextlib.suppress(Exception):
                await rest.delete(path)
