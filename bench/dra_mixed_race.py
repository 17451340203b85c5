"""Double allocation in a mixed cluster (kubernetes#128980), measured.

    python -m bench.dra_mixed_race [--trials 20]

A fresh harness control plane, one node with a pool of ``2 * trials`` devices,
kube-scheduler v1.37.2 and kscheduler running at once. Each trial creates two
claims for one device each, then two pods at the same instant, one per
scheduler, and waits until both are bound. Both schedulers search the pool in
the same order, so when neither has seen the other's allocation they pick the
same device. Prints each trial's two devices and how many trials ended with one
device in both claims (the apiserver accepts both writes). See docs/dra.md,
"Mixed clusters".
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from kscheduler.controlplane.builders import (
    create_namespace,
    create_nodes,
    make_node,
    make_pod,
)
from kscheduler.controlplane.harness import ControlPlane
from kscheduler.controlplane.reference import ReferenceScheduler
from kscheduler.difftest import running_kscheduler

API = "/apis/resource.k8s.io/v1"
DRIVER = "race.example.com"
NS = "race"
REFERENCE = "reference-scheduler"
OURS = "kscheduler"


def _claim(name: str) -> dict[str, Any]:
    request = {"name": "d", "exactly": {"deviceClassName": "race"}}
    return {"metadata": {"name": name}, "spec": {"devices": {"requests": [request]}}}


async def _trial(rest: Any, t: int) -> tuple[str, str]:
    names = {REFERENCE: f"r{t}", OURS: f"k{t}"}
    for name in names.values():
        await rest.post(f"{API}/namespaces/{NS}/resourceclaims", _claim(name))
    await asyncio.sleep(0.5)  # both informers have the claims
    pods = []
    for who, name in names.items():
        pod = make_pod(name, NS, cpu="10m", scheduler_name=who)
        pod["spec"]["resourceClaims"] = [{"name": "d", "resourceClaimName": name}]
        pods.append(pod)
    await asyncio.gather(*(rest.post(f"/api/v1/namespaces/{NS}/pods", p) for p in pods))
    devices = []
    for name in names.values():
        await rest.wait_for(
            f"/api/v1/namespaces/{NS}/pods/{name}", lambda p: p["spec"].get("nodeName"), within=60
        )
        claim = await rest.get(f"{API}/namespaces/{NS}/resourceclaims/{name}")
        devices.append(claim["status"]["allocation"]["devices"]["results"][0]["device"])
    return devices[0], devices[1]


async def main(trials: int) -> None:
    cp = ControlPlane()
    await cp.astart()
    try:
        async with cp.client() as rest:
            await create_namespace(rest, NS)
            await create_nodes(rest, [make_node("race-1")])
            selector = f'device.driver == "{DRIVER}"'
            await rest.post(
                f"{API}/deviceclasses",
                {
                    "metadata": {"name": "race"},
                    "spec": {"selectors": [{"cel": {"expression": selector}}]},
                },
            )
            await rest.post(
                f"{API}/resourceslices",
                {
                    "metadata": {"name": "race-1"},
                    "spec": {
                        "driver": DRIVER,
                        "nodeName": "race-1",
                        "pool": {"name": "race-1", "generation": 1, "resourceSliceCount": 1},
                        "devices": [{"name": f"d{i:02d}"} for i in range(2 * trials)],
                    },
                },
            )
            doubles = 0
            ref = ReferenceScheduler.for_control_plane(cp, scheduler_name=REFERENCE)
            async with ref, running_kscheduler(cp):
                for t in range(trials):
                    theirs, ours = await _trial(rest, t)
                    doubles += theirs == ours
                    same = "  SAME DEVICE" if theirs == ours else ""
                    print(
                        f"trial {t}: kube-scheduler {theirs}, kscheduler {ours}{same}", flush=True
                    )
            print(f"double allocations: {doubles} of {trials} trials", flush=True)
    finally:
        cp.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    asyncio.run(main(parser.parse_args().trials))
