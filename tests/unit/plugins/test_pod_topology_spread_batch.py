"""PodTopologySpread's batch filter and critical paths against their plain definitions."""

from __future__ import annotations

import heapq
import random
from typing import Any

import pytest

from kscheduler.framework import CycleState, Status
from kscheduler.plugins.pod_topology_spread import PRE_FILTER_KEY, _critical_paths

from .test_pod_topology_spread_incremental import SCANNED, TRACKED, Cluster, new_plugin


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
