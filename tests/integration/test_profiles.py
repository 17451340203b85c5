"""Several profiles in one kscheduler: each schedulerName gets its own plugin set.

One profile spreads pods (NodeResourcesFit LeastAllocated), the other packs them
(MostAllocated); the same pods, addressed to one or the other, land differently.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from kscheduler.controlplane.builders import create_nodes, create_pods, make_node, make_pod
from kscheduler.controlplane.harness import ControlPlane
from kscheduler.controlplane.rest import RestClient
from tests.integration.runner import running_kscheduler, wait_for

CONFIG = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: spread
  plugins:
    score:
      enabled: [{name: NodeResourcesFit, weight: 5}]
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: LeastAllocated
- schedulerName: pack
  plugins:
    score:
      enabled: [{name: NodeResourcesFit, weight: 5}]
      disabled: [{name: NodeResourcesBalancedAllocation}]
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: MostAllocated
"""


async def placements(rest: RestClient, ns: str) -> dict[str, dict[str, Any]]:
    items = (await rest.get(f"/api/v1/namespaces/{ns}/pods"))["items"]
    return {p["metadata"]["name"]: p for p in items}


async def test_two_profiles_place_the_same_pods_differently(
    control_plane: ControlPlane, rest: RestClient, namespace: str, fresh_nodes: None
) -> None:
    await create_nodes(
        rest,
        [
            make_node(f"{pool}-{i}", cpu="4", memory="4Gi", labels={"pool": pool})
            for pool in ("spread", "pack")
            for i in range(3)
        ],
    )
    pods = [
        make_pod(
            f"{profile}-{i}",
            namespace,
            cpu="1",
            memory="1Gi",
            scheduler_name=profile,
            node_selector={"pool": profile},
        )
        for profile in ("spread", "pack")
        for i in range(3)
    ]
    pods.append(make_pod("nobodys", namespace, cpu="1", scheduler_name="no-such-profile"))
    async with running_kscheduler(control_plane, CONFIG) as app:
        assert sorted(app.frameworks) == ["pack", "spread"]
        await create_pods(rest, pods)

        async def ours_bound() -> dict[str, dict[str, Any]] | None:
            got = await placements(rest, namespace)
            done = all(p["spec"].get("nodeName") for n, p in got.items() if n != "nobodys")
            return got if done and len(got) == len(pods) else None

        got = await wait_for(ours_bound, what="both profiles' pods bound")
    spread = Counter(got[f"spread-{i}"]["spec"]["nodeName"] for i in range(3))
    pack = Counter(got[f"pack-{i}"]["spec"]["nodeName"] for i in range(3))
    assert sorted(spread) == ["spread-0", "spread-1", "spread-2"], spread  # one per node
    assert len(pack) == 1 and next(iter(pack)).startswith("pack-"), pack  # all on one node
    assert "nodeName" not in got["nobodys"]["spec"]  # no profile of ours: left alone
