"""A mixed cluster: kscheduler and kube-scheduler v1.37 run at once on the same
node, each scheduling its own pods, whose claims draw on the same pool of devices.

The pods come one after another, alternating between the schedulers, each created
once the previous one is bound: each scheduler must then see the devices the other
allocated (through its ResourceClaim informer) and take another. Every device ends
up allocated exactly once, and the next pod, whichever scheduler it has, finds
nothing left. (Two pods placed at the same moment by the two schedulers are not
covered: nothing in Kubernetes prevents that double allocation; see docs/dra.md.)
"""

from __future__ import annotations

import contextlib
import uuid

from kscheduler.controlplane.builders import create_nodes, make_node
from kscheduler.controlplane.harness import ControlPlane
from kscheduler.controlplane.reference import ReferenceScheduler
from kscheduler.controlplane.rest import RestClient
from tests.integration.runner import SCHEDULER, running_kscheduler, wait_for
from tests.integration.test_dra import claim_pod

API = "/apis/resource.k8s.io/v1"
REFERENCE = "reference-scheduler"
NODE = "mixed-1"
DEVICES = 6


async def test_two_schedulers_one_after_another_never_share_a_device(
    control_plane: ControlPlane, rest: RestClient, namespace: str, fresh_nodes: None
) -> None:
    driver = f"mixed-{uuid.uuid4().hex[:6]}.example.com"
    cls = f"gpu-{driver}"
    created: list[str] = []
    await create_nodes(rest, [make_node(NODE)])
    pods = f"/api/v1/namespaces/{namespace}/pods"
    claims = f"{API}/namespaces/{namespace}/resourceclaims"
    device_class = {
        "metadata": {"name": cls},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
    }
    pool = {
        "metadata": {"name": f"{NODE}-{driver}"},
        "spec": {
            "driver": driver,
            "nodeName": NODE,
            "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": f"gpu-{i}"} for i in range(DEVICES)],
        },
    }
    ref = ReferenceScheduler.for_control_plane(control_plane, scheduler_name=REFERENCE)
    try:
        for obj, path in ((device_class, f"{API}/deviceclasses"), (pool, f"{API}/resourceslices")):
            await rest.post(path, obj)
            created.append(f"{path}/{obj['metadata']['name']}")
        order = [(REFERENCE if i % 2 == 0 else SCHEDULER, f"p{i}") for i in range(DEVICES + 2)]
        for _, name in order:
            await rest.post(
                claims,
                {
                    "metadata": {"name": name},
                    "spec": {
                        "devices": {
                            "requests": [{"name": "gpu", "exactly": {"deviceClassName": cls}}]
                        }
                    },
                },
            )
        async with ref, running_kscheduler(control_plane):
            for who, name in order[:DEVICES]:
                await rest.post(pods, claim_pod(name, namespace, who, {"resourceClaimName": name}))
                await rest.wait_for(
                    f"{pods}/{name}", lambda p: p["spec"].get("nodeName"), within=60
                )
            # one more pod for each scheduler: no device is left
            for who, name in order[DEVICES:]:
                await rest.post(pods, claim_pod(name, namespace, who, {"resourceClaimName": name}))

            async def both_pending() -> list[str] | None:
                out = []
                for _, name in order[DEVICES:]:
                    pod = await rest.get(f"{pods}/{name}")
                    for c in pod.get("status", {}).get("conditions") or []:
                        if c["type"] == "PodScheduled" and c["status"] == "False":
                            out.append(c["message"])
                return out if len(out) == 2 else None

            messages = await wait_for(both_pending, timeout=60, what="the last two pods pending")
        assert all("cannot allocate all claims" in m for m in messages), messages
        by_scheduler: dict[str, list[str]] = {REFERENCE: [], SCHEDULER: []}
        for who, name in order[:DEVICES]:
            claim = await rest.get(f"{claims}/{name}")
            (result,) = claim["status"]["allocation"]["devices"]["results"]
            assert result["pool"] == NODE
            by_scheduler[who].append(result["device"])
        taken = by_scheduler[REFERENCE] + by_scheduler[SCHEDULER]
        assert sorted(taken) == [f"gpu-{i}" for i in range(DEVICES)], by_scheduler
        assert len(by_scheduler[SCHEDULER]) == len(by_scheduler[REFERENCE]) == DEVICES // 2
        for _, name in order[DEVICES:]:
            claim = await rest.get(f"{claims}/{name}")
            assert not (claim.get("status") or {}).get("allocation")
    finally:
        for path in reversed(created):
            with contextlib.suppress(Exception):
                await rest.delete(path)
