"""explain --max placing copies cycle by cycle: reusing the node-local filters'
verdicts on unchanged nodes leaves every placement as it was."""

from __future__ import annotations

import random
from typing import Any

import pytest

from kscheduler import whatif
from kscheduler.framework import CycleState, NodeInfo, PodInfo, Status
from tests.unit.builders import node, pod
from tests.unit.test_whatif import HOST, ZONE, app_with, deployment, docs_of, run


def zoned_cluster(n: int, seed: int) -> tuple[list[Any], list[Any]]:
    rng = random.Random(seed)
    nodes, pods = [], []
    for i in range(n):
        name = f"node-{i:04d}"
        b = node(name).alloc(cpu=str(rng.choice([1, 2, 4])), memory="8Gi", pods="6")
        b.label(HOST, name).label(ZONE, f"z{i % 3}")
        if i % 7 == 3:
            b.taint("dedicated", "batch")
        nodes.append(b.record())
        used = rng.randrange(0, 2)
        if used:
            load = pod(f"load-{i}", "other").req(cpu=str(used)).labels(app="load")
            pods.append(load.build().with_node(name))
    return nodes, pods


SPREAD_TWICE = {
    "topologySpreadConstraints": [
        {
            "maxSkew": 1,
            "topologyKey": ZONE,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "web"}},
        },
        {
            "maxSkew": 2,
            "topologyKey": HOST,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "web"}},
        },
    ]
}


class Counting(whatif._KeptVerdicts):
    """Counts the nodes NodeResourcesFit was asked about and those it computed."""

    last: Counting | None = None

    def __init__(self) -> None:
        super().__init__()
        self.asked = self.computed = 0
        Counting.last = self

    def wrap(self, name: str, single: Any, batch: Any) -> Any:
        if name != "NodeResourcesFit" or batch is None:
            return super().wrap(name, single, batch)
        inner = batch

        def computing(state: CycleState, p: PodInfo, nodes: list[NodeInfo]) -> dict[int, Status]:
            self.computed += len(nodes)
            return dict(inner(state, p, nodes))

        kept_single, kept_batch = super().wrap(name, single, computing)
        assert kept_batch is not None

        def asking(state: CycleState, p: PodInfo, nodes: list[NodeInfo]) -> dict[int, Status]:
            self.asked += len(nodes)
            return kept_batch(state, p, nodes)

        return kept_single, asking


def placements(
    keep: bool, monkeypatch: pytest.MonkeyPatch, nodes: list[Any], pods: list[Any]
) -> tuple[list[str], Any]:
    app, kube = app_with(nodes, pods)
    app.algorithm.rng = random.Random(11)  # the same random ties both ways
    chosen: list[str] = []
    cycle = whatif._cycle

    def recorded(*args: Any) -> str:
        got = cycle(*args)
        chosen.append(got)
        return got

    with monkeypatch.context() as m:
        m.setattr(whatif, "_cycle", recorded)
        m.setattr(whatif, "_KeptVerdicts", Counting)
        if not keep:
            m.setattr(whatif, "_keeps_verdicts", lambda pod: False)
        Counting.last = None
        dep = deployment("web", 1, req={"cpu": "700m", "memory": "256Mi"}, **SPREAD_TWICE)
        result = run(app, kube, docs_of(dep), max_mode=True)
    assert result.max is not None
    assert result.max.method == "cycle-by-cycle"
    assert (Counting.last is not None) == keep
    return chosen, result.max


@pytest.mark.parametrize("seed", [1, 2])
def test_kept_verdicts_leave_the_cycle_by_cycle_placements_unchanged(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 240 nodes: more than 100, so percentageOfNodesToScore samples and the cycles
    # rotate their start node as the daemon's do
    nodes, pods = zoned_cluster(240, seed)
    plain, plain_max = placements(False, monkeypatch, nodes, pods)
    kept, kept_max = placements(True, monkeypatch, nodes, pods)
    assert len(plain) > 150 and plain[-1] == ""  # the last copy fits nowhere
    assert kept == plain
    assert kept_max.count == plain_max.count == len(plain) - 1
    assert kept_max.per_node == plain_max.per_node
    assert kept_max.next is not None and plain_max.next is not None
    assert kept_max.next.fit_error == plain_max.next.fit_error
    counted = Counting.last
    assert counted is not None
    # the verdicts were reused: most nodes asked about were not filtered again
    assert 0 < counted.computed < counted.asked / 4, (counted.computed, counted.asked)


def test_pods_with_extended_resources_or_claims_filter_every_node_again() -> None:
    def spec_pod(**spec: Any) -> PodInfo:
        raw = pod("p", "default").req(cpu="1").raw()
        raw["spec"].update(spec)
        from kscheduler.framework.parse import parse_pod

        return parse_pod(raw)

    assert whatif._keeps_verdicts(spec_pod())
    gpu = spec_pod()
    gpu.raw["spec"]["containers"][0]["resources"]["limits"] = {"example.com/gpu": "1"}
    assert not whatif._keeps_verdicts(gpu)
    claims = spec_pod(resourceClaims=[{"name": "c", "resourceClaimName": "c"}])
    assert not whatif._keeps_verdicts(claims)
    overhead = spec_pod(overhead={"cpu": "100m", "example.com/thing": "1"})
    assert not whatif._keeps_verdicts(overhead)
