"""explain --max placing copies cycle by cycle: skipping the nodes ruled out for good
(whatif._RuledOut) leaves every placement, the start index's rotation included,
as it was."""

from __future__ import annotations

import random
from collections.abc import Set as AbstractSet
from typing import Any

import pytest

from kscheduler import whatif
from kscheduler.framework import CycleState, NodeInfo
from kscheduler.framework.runtime import BatchFilterFn, FilterFn
from tests.unit.builders import node, pod
from tests.unit.test_whatif import HOST, ZONE, app_with, deployment, docs_of, run, statefulset

RACK = "example.com/rack"
WEB = {"matchLabels": {"app": "web"}}


def cluster(rng: random.Random) -> tuple[list[Any], list[Any]]:
    """Zones of racks of uneven nodes: some tainted, cordoned or missing a label,
    with load, some of it selected by the constraints below."""
    n = rng.choice([6, 30, 130])  # over 100: percentageOfNodesToScore samples
    zones = [f"z{i}" for i in range(rng.randint(1, 4))]
    nodes, pods = [], []
    for i in range(n):
        name = f"n{i:03d}"
        b = node(name).alloc(cpu=str(rng.choice([1, 2, 3, 4])), memory="16Gi", pods="12")
        zone = rng.choice(zones)
        if rng.random() < 0.95:
            b.label(ZONE, zone)
        if rng.random() < 0.97:
            b.label(HOST, name)
        b.label(RACK, f"{zone}-r{rng.randrange(3)}")
        if rng.random() < 0.12:
            b.taint("dedicated", "batch")
        if rng.random() < 0.03:
            b.unschedulable()
        nodes.append(b.record())
        for j in range(rng.randint(0, 2)):
            label = rng.choice(["web", "db", "db"])
            p = pod(f"load-{i}-{j}", "default").req(cpu=rng.choice(["500m", "1"]))
            pods.append(p.labels(app=label).build().with_node(name))
    return nodes, pods


def spread(key: str, rng: random.Random) -> dict[str, Any]:
    c: dict[str, Any] = {
        "maxSkew": rng.choice([1, 1, 2]),
        "topologyKey": key,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": rng.choice([WEB, WEB, WEB, {"matchLabels": {"app": "db"}}]),
    }
    if rng.random() < 0.25:
        c["minDomains"] = rng.randint(2, 6)
    if rng.random() < 0.25:
        c["nodeTaintsPolicy"] = "Honor"
    return c


def terms(keys: list[str]) -> list[dict[str, Any]]:
    return [{"labelSelector": WEB, "topologyKey": k} for k in keys]


def template(rng: random.Random) -> dict[str, Any]:
    """The shapes --max still places cycle by cycle, and a few it need not."""
    spec: dict[str, Any] = {}
    kind = rng.choice(["two spreads", "two anti keys", "spread and affinity", "mixed", "one"])
    if kind == "two spreads":
        spec["topologySpreadConstraints"] = [spread(ZONE, rng), spread(HOST, rng)]
    elif kind == "two anti keys":
        anti = terms([HOST, RACK])
        spec["affinity"] = {
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": anti}
        }
    elif kind == "spread and affinity":
        spec["topologySpreadConstraints"] = [spread(HOST, rng)]
        spec["affinity"] = {
            "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": terms([ZONE])}
        }
    elif kind == "mixed":
        spec["topologySpreadConstraints"] = [spread(ZONE, rng), spread(RACK, rng)]
        anti = terms([HOST])
        spec["affinity"] = {
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": anti}
        }
    else:
        spec["topologySpreadConstraints"] = [spread(rng.choice([ZONE, HOST]), rng)]
    if rng.random() < 0.2:
        spec["nodeSelector"] = {ZONE: "z0"}
    return spec


class NothingRuledOut(whatif._RuledOut):
    def skip(self, state: CycleState) -> AbstractSet[str]:
        return frozenset()

    def wrap(
        self, name: str, single: FilterFn, batch: BatchFilterFn | None
    ) -> tuple[FilterFn, BatchFilterFn | None]:
        return single, batch


def placements(
    skip: bool, monkeypatch: pytest.MonkeyPatch, nodes: list[Any], pods: list[Any], doc: Any
) -> tuple[list[str], Any, int]:
    app, kube = app_with(nodes, pods)
    app.algorithm.rng = random.Random(5)  # the same random ties both ways
    chosen: list[str] = []
    ruled_out: list[whatif._RuledOut] = []
    cycle, ruled = whatif._cycle, whatif._RuledOut if skip else NothingRuledOut

    def recorded(*args: Any) -> str:
        got = cycle(*args)
        chosen.append(got)
        return got

    def made(all_nodes: list[NodeInfo], topology: bool) -> whatif._RuledOut:
        ruled_out.append(ruled(all_nodes, topology))
        return ruled_out[-1]

    with monkeypatch.context() as m:
        m.setattr(whatif, "_cycle", recorded)
        m.setattr(whatif, "_RuledOut", made)
        result = run(app, kube, docs_of(doc), max_mode=True, max_method="cycles")
    assert result.max is not None and result.max.method == "cycle-by-cycle"
    return chosen, result.max, sum(len(r.for_good) for r in ruled_out)


def test_skipping_the_ruled_out_nodes_changes_no_placement(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    skipped_somewhere = 0
    for seed in range(40):
        rng = random.Random(seed)
        nodes, pods = cluster(rng)
        spec = template(rng)
        req = {"cpu": rng.choice(["300m", "500m", "1"]), "memory": "256Mi"}
        if rng.random() < 0.2:
            # the copies' pod-name labels differ; a selector on it is not ruled on
            doc = statefulset("web", 1, req=req, **spec)
        else:
            doc = deployment("web", 1, req=req, **spec)
        plain, plain_max, none = placements(False, monkeypatch, nodes, pods, doc)
        fast, fast_max, ruled = placements(True, monkeypatch, nodes, pods, doc)
        assert none == 0
        assert fast == plain, (seed, spec)
        assert fast_max.count == plain_max.count
        assert fast_max.per_node == plain_max.per_node
        assert fast_max.next is not None and plain_max.next is not None
        assert fast_max.next.fit_error == plain_max.next.fit_error
        skipped_somewhere += ruled > 0
    assert skipped_somewhere > 25  # the skipping is exercised, not idle


def test_a_domain_ruled_out_whole_caps_the_smallest_count() -> None:
    """Spread over hostname (maxSkew 1) and zone: the tainted node keeps the
    smallest hostname count at 0, so a node holding a copy is ruled out for good,
    and so is every tainted or full node; nothing else is."""
    nodes = [
        node(f"n{i}")
        .alloc(cpu="4", memory="16Gi", pods="20")
        .labels(**{ZONE: f"z{i % 2}", HOST: f"n{i}"})
        for i in range(6)
    ]
    nodes[5] = nodes[5].taint("dedicated", "batch")
    nodes[4] = (
        node("n4").alloc(cpu="100m", memory="16Gi", pods="20").labels(**{ZONE: "z0", HOST: "n4"})
    )
    spec = {"topologySpreadConstraints": [spread_of(ZONE), spread_of(HOST)]}
    app, kube = app_with([n.record() for n in nodes])
    seen: list[whatif._RuledOut] = []
    real = whatif._RuledOut

    def made(all_nodes: list[NodeInfo], topology: bool) -> whatif._RuledOut:
        seen.append(real(all_nodes, topology))
        return seen[-1]

    with pytest.MonkeyPatch.context() as m:
        m.setattr(whatif, "_RuledOut", made)
        dep = deployment("web", 1, req={"cpu": "500m", "memory": "256Mi"}, **spec)
        result = run(app, kube, docs_of(dep), max_mode=True, max_method="cycles")
    assert result.max is not None
    assert result.max.count == 4  # n0-n3 one each: n4 is full, n5 tainted
    (ruled,) = seen
    assert ruled.for_good == {"n0", "n1", "n2", "n3", "n4", "n5"}


def spread_of(key: str) -> dict[str, Any]:
    return {
        "maxSkew": 1,
        "topologyKey": key,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": WEB,
    }
