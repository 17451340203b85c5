"""Every plugin's score_nodes fast path gives exactly what score() gives, node by node."""

from __future__ import annotations

import random

import pytest

from kscheduler.framework import CycleState
from kscheduler.framework.helpers import NodeScoreMemo
from kscheduler.framework.types import NodeInfo, PodInfo
from kscheduler.plugins import in_tree_registry
from tests.unit.builders import node, pod
from tests.unit.fakes import FakeObjects

BATCH_PLUGINS = [
    "NodeResourcesFit",
    "NodeResourcesBalancedAllocation",
    "ImageLocality",
    "TaintToleration",
]


class Handle:
    def __init__(self, nodes: list[NodeInfo]) -> None:
        self._nodes = nodes
        self.objects = FakeObjects()

    @property
    def snapshot(self) -> Handle:
        return self

    def node_infos(self) -> list[NodeInfo]:
        return self._nodes


def random_cluster(rng: random.Random) -> tuple[list[NodeInfo], list[PodInfo]]:
    nodes = []
    for i in range(40):
        b = node(f"n{i}").alloc(
            cpu=str(rng.choice([0, 1, 2, 4, 8])) if rng.random() > 0.05 else "0",
            memory=f"{rng.choice([0, 1, 4, 16])}Gi",
            pods=110,
        )
        if rng.random() < 0.3:
            b = b.taint("soft", "x", "PreferNoSchedule")
        if rng.random() < 0.4:
            b = b.image("registry.k8s.io/app:1", rng.choice([30, 300, 900]) * 1024 * 1024)
        existing = [
            pod(f"e{i}-{j}")
            .req(cpu=f"{rng.choice([0, 100, 700, 3000])}m", memory=f"{rng.choice([0, 64, 2048])}Mi")
            .on(f"n{i}")
            .build()
            for j in range(rng.randrange(4))
        ]
        nodes.append(b.with_pods(*existing).build())
    pods = []
    for k in range(15):
        p = pod(f"p{k}").container(image="registry.k8s.io/app:1")
        if rng.random() < 0.8:
            p = p.req(
                cpu=f"{rng.choice([0, 50, 500, 2000])}m", memory=f"{rng.choice([0, 128, 4096])}Mi"
            )
        if rng.random() < 0.3:
            p = p.toleration("soft", "x", "PreferNoSchedule")
        pods.append(p.build())
    return nodes, pods


@pytest.mark.parametrize("name", BATCH_PLUGINS)
@pytest.mark.parametrize("seed", range(5))
def test_score_nodes_equals_score(name: str, seed: int) -> None:
    rng = random.Random(seed)
    nodes, pods = random_cluster(rng)
    entry = in_tree_registry()[name]
    args = entry.parse_args({}) if entry.parse_args is not None else None
    plugin = entry.factory(args, Handle(nodes))  # type: ignore[arg-type]
    for p in pods:
        state = CycleState()
        pre = getattr(plugin, "pre_score", None)
        if pre is not None:
            st = pre(state, p, nodes)
            if st is not None:
                continue  # Skip: Score does not run for this pod
        batch, bst = plugin.score_nodes(state, p, nodes)  # type: ignore[attr-defined]
        one = [plugin.score(state, p, ni) for ni in nodes]  # type: ignore[attr-defined]
        assert bst is None
        assert batch == [s for s, _ in one], f"{name} differs for {p.name}"


@pytest.mark.parametrize("name", ["TaintToleration", "NodeAffinity"])
@pytest.mark.parametrize("seed", range(5))
def test_normalize_scores_equals_normalize_score(name: str, seed: int) -> None:
    from kscheduler.framework.interface import NodeScore

    rng = random.Random(seed)
    entry = in_tree_registry()[name]
    args = entry.parse_args({}) if entry.parse_args is not None else None
    plugin = entry.factory(args, Handle([]))  # type: ignore[arg-type]
    p = pod("p").build()
    for _ in range(20):
        ints = [rng.choice([0, 0, 1, 3, 7, 100]) for _ in range(rng.randrange(6))]
        objects = [NodeScore(f"n{i}", v) for i, v in enumerate(ints)]
        assert plugin.normalize_score(CycleState(), p, objects) is None  # type: ignore[attr-defined]
        fast, st = plugin.normalize_scores(CycleState(), p, list(ints))  # type: ignore[attr-defined]
        assert st is None
        assert fast == [s.score for s in objects], f"{name} differs on {ints}"


@pytest.mark.parametrize("name", ["NodeResourcesFit", "NodeResourcesBalancedAllocation"])
@pytest.mark.parametrize("seed", range(5))
def test_score_nodes_memo_follows_node_changes(name: str, seed: int) -> None:
    """score_nodes keeps scores by node between cycles (NodeScoreMemo): after pods
    are placed and removed, on the nodes and on clones of them, every call still
    gives what score() gives."""
    rng = random.Random(seed)
    nodes, pods = random_cluster(rng)
    entry = in_tree_registry()[name]
    args = entry.parse_args({}) if entry.parse_args is not None else None
    plugin = entry.factory(args, Handle(nodes))  # type: ignore[arg-type]
    placed: list[tuple[NodeInfo, str]] = []
    for round_ in range(12):
        view = list(nodes)
        if round_ % 3 == 2:
            # clones of some nodes, one with a pod more: keys of their own
            view = [ni.clone() if rng.random() < 0.5 else ni for ni in nodes]
            view[0].add_pod(pod(f"c{round_}").req(cpu="300m").on(view[0].name).build())
        for p in rng.sample(pods, 5):
            state = CycleState()
            pre = getattr(plugin, "pre_score", None)
            if pre is not None and pre(state, p, view) is not None:
                continue
            batch, bst = plugin.score_nodes(state, p, view)  # type: ignore[attr-defined]
            one = [plugin.score(state, p, ni)[0] for ni in view]  # type: ignore[attr-defined]
            assert bst is None
            assert batch == one, f"{name} differs for {p.name} in round {round_}"
        # the cluster changes between rounds: a pod placed, now and then one removed
        ni = rng.choice(nodes)
        q = pod(f"r{round_}").req(cpu=f"{rng.choice([100, 900])}m", memory="256Mi")
        q = q.on(ni.name).build()
        ni.add_pod(q)
        placed.append((ni, q.uid))
        if rng.random() < 0.4:
            gone, uid = placed.pop(rng.randrange(len(placed)))
            gone.remove_pod(uid)


def test_score_memo_lets_removed_nodes_go() -> None:
    """Nodes replaced one after another: the memo keeps no more than the cluster's
    nodes and a small margin of removed (node-less) NodeInfos, and never an entry
    for a node that is still there but changed."""
    memo = NodeScoreMemo()
    cluster = [node(f"n{i}").alloc(cpu="4", memory="8Gi").build() for i in range(10)]
    for i in range(200):
        table = memo.table("request", len(cluster))
        for ni in cluster:
            table[ni] = (ni.generation, 1)
        # the margin, and the node added since the table was last looked at
        assert len(table) <= len(cluster) + 16 + 1
        gone = cluster.pop(0)
        gone.node = None  # as Cache.remove_node leaves a NodeInfo
        cluster.append(node(f"m{i}").alloc(cpu="4", memory="8Gi").build())
    assert all(ni in table for ni in cluster[:-1])
