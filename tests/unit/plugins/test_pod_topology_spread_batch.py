"""PodTopologySpread's batch filter and critical paths against their plain definitions."""

from __future__ import annotations

import heapq
import random
from typing import Any

import pytest

from kscheduler.framework import CycleState, NodeInfo, PodInfo, Status
from kscheduler.plugins.pod_topology_spread import (
    PRE_FILTER_KEY,
    PRE_SCORE_KEY,
    DefaultConstraint,
    PodTopologySpread,
    PodTopologySpreadArgs,
    ScoreState,
    _critical_paths,
)

from .test_pod_topology_spread_incremental import (
    A_OR_B,
    APP_A,
    APP_B,
    HOST,
    RACK,
    SCANNED,
    TRACKED,
    ZONE,
    Cluster,
    Handle,
    constraint,
    incoming,
    new_plugin,
)


def verdict(st: Status | None) -> Any:
    return None if st is None else (st.code, st.reasons)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_filter_nodes_gives_filter_node_by_node(seed: int) -> None:
    cluster = Cluster(seed)
    pl = new_plugin(cluster)
    checked = rejected = 0
    for _ in range(150):
        for _ in range(cluster.rng.randrange(4)):
            cluster.step()
        cluster.snapshot.update()
        nodes = list(cluster.snapshot.node_infos())
        for p in (*TRACKED, *SCANNED):
            state = CycleState()
            _, st = pl.pre_filter(state, p, nodes)
            if st is not None:
                continue
            got = pl.filter_nodes(state, p, nodes)
            want = {j: pl.filter(state, p, ni) for j, ni in enumerate(nodes)}
            assert {j: verdict(s) for j, s in got.items()} == {
                j: verdict(s) for j, s in want.items() if s is not None
            }
            checked += len(nodes)
            rejected += len(got)
    assert checked > 1000 and 0 < rejected < checked


def test_filter_nodes_without_pre_filter_state_is_the_filter_error() -> None:
    cluster = Cluster(5)
    for _ in range(30):
        cluster.step()
    cluster.snapshot.update()
    pl = new_plugin(cluster)
    nodes = list(cluster.snapshot.node_infos())
    assert nodes
    state = CycleState()
    got = pl.filter_nodes(state, TRACKED[0], nodes)
    assert {j: verdict(s) for j, s in got.items()} == {
        j: verdict(pl.filter(state, TRACKED[0], ni)) for j, ni in enumerate(nodes)
    }
    assert state.get(PRE_FILTER_KEY) is None


def reference_paths(per_domain: dict[str, int]) -> list[Any]:
    paths: list[Any] = ["", 2**31 - 1, "", 2**31 - 1]
    fewest = heapq.nsmallest(2, per_domain.items(), key=lambda item: (item[1], item[0]))
    for i, (value, num) in enumerate(fewest):
        paths[2 * i], paths[2 * i + 1] = value, num
    return paths


def test_critical_paths_are_the_two_fewest_ties_to_the_smaller_value() -> None:
    rng = random.Random(7)
    for _ in range(3000):
        n = rng.choice([0, 1, 2, 3, 5, 20])
        values = rng.sample([f"d{i}" for i in range(40)], n)
        per_domain = {v: rng.randrange(rng.choice([1, 2, 4, 50])) for v in values}
        assert _critical_paths(per_domain) == reference_paths(per_domain), per_domain


class NoChangeLog:
    """The snapshot without changes_since: PreScore counts every node itself."""

    def __init__(self, snapshot: Any) -> None:
        self._snapshot = snapshot

    def __getattr__(self, name: str) -> Any:
        if name == "changes_since":
            raise AttributeError(name)
        return getattr(self._snapshot, name)


def anyway(c: dict[str, Any]) -> dict[str, Any]:
    return {**c, "whenUnsatisfiable": "ScheduleAnyway"}


#: Incoming pods with ScheduleAnyway constraints (own, or the plugin's defaults).
SCORED = [
    incoming("zone", anyway(constraint(ZONE, APP_A))),
    incoming("two", anyway(constraint(ZONE, APP_B)), anyway(constraint(RACK, A_OR_B))),
    incoming("host-and-zone", anyway(constraint(HOST, APP_A)), anyway(constraint(ZONE, APP_A))),
    incoming("other-ns", anyway(constraint(RACK, APP_A)), ns="other"),
    incoming("selector", anyway(constraint(ZONE, APP_A)), spec={"nodeSelector": {RACK: "r1"}}),
    incoming(
        "taints",
        anyway(constraint(ZONE, APP_A, nodeTaintsPolicy="Honor")),
        spec={"tolerations": [{"key": "t", "operator": "Exists"}]},
    ),
    incoming("defaulted", labels={"app": "a", "tier": "x"}),
]


def score_state(pl: PodTopologySpread, p: PodInfo, nodes: list[NodeInfo]) -> Any:
    state = CycleState()
    st = pl.pre_score(state, p, nodes)
    s = state.get(PRE_SCORE_KEY)
    if not isinstance(s, ScoreState):
        return st
    return (s.constraints, s.counts, s.ignored, s.weights)


@pytest.mark.parametrize(("seed", "limit"), [(1, 1_000_000), (2, 1_000_000), (3, 7)])
def test_pre_score_counts_kept_across_cycles_equal_counting_every_node(
    seed: int, limit: int
) -> None:
    cluster = Cluster(seed, limit)
    defaults = (
        DefaultConstraint(3, HOST, "ScheduleAnyway"),
        DefaultConstraint(5, ZONE, "ScheduleAnyway"),
    )
    args = PodTopologySpreadArgs(defaults, "List")
    tracked = PodTopologySpread(args, Handle(cluster.snapshot, cluster.objects))  # type: ignore[arg-type]
    scanned = PodTopologySpread(
        args,
        Handle(NoChangeLog(cluster.snapshot), cluster.objects),  # type: ignore[arg-type]
    )
    counted = 0
    for _ in range(200):
        for _ in range(cluster.rng.randrange(5)):
            cluster.step()
        cluster.snapshot.update()
        nodes = list(cluster.snapshot.node_infos())
        feasible = [ni for ni in nodes if cluster.rng.random() < 0.7]
        for p in SCORED:
            want = score_state(scanned, p, feasible)
            assert score_state(tracked, p, feasible) == want, p.name
            if isinstance(want, tuple) and any(any(c.values()) for c in want[1]):
                counted += 1
    assert counted > 100
    # the tracked plugin kept per-node counts; the other could not (no change log)
    assert any(a.totals for a in tracked._aggregates._by_key.values())
    assert not any(a.totals for a in scanned._aggregates._by_key.values())
