"""Every plugin's filter_nodes fast path rejects exactly what filter() rejects, node by node."""

from __future__ import annotations

import random

import pytest

from kscheduler.framework import CycleState
from kscheduler.framework.parse import parse_pod
from kscheduler.framework.types import NodeInfo, PodInfo
from kscheduler.plugins import in_tree_registry
from tests.unit.builders import node, pod
from tests.unit.plugins.test_batch_scores import Handle

BATCH_PLUGINS = ["NodeName", "NodeUnschedulable", "TaintToleration", "NodeResourcesFit"]


def random_cluster(rng: random.Random) -> tuple[list[NodeInfo], list[PodInfo]]:
    nodes = []
    for i in range(40):
        b = node(f"n{i}").alloc(
            cpu=str(rng.choice([0, 1, 2, 4])),
            memory=f"{rng.choice([0, 1, 4])}Gi",
            pods=rng.choice([1, 2, 110]),
            **({"example.com/gpu": str(rng.choice([0, 1, 2]))} if rng.random() < 0.3 else {}),
        )
        if rng.random() < 0.3:
            b = b.taint(
                "dedicated", "x", rng.choice(["NoSchedule", "NoExecute", "PreferNoSchedule"])
            )
        if rng.random() < 0.2:
            b = b.unschedulable()
        existing = [
            pod(f"e{i}-{j}")
            .req(cpu=f"{rng.choice([0, 100, 700, 3000])}m", memory=f"{rng.choice([0, 64, 2048])}Mi")
            .on(f"n{i}")
            .build()
            for j in range(rng.randrange(3))
        ]
        nodes.append(b.with_pods(*existing).build())
    pods = []
    for k in range(20):
        p = pod(f"p{k}")
        if rng.random() < 0.8:
            p = p.req(
                cpu=f"{rng.choice([0, 50, 500, 2000])}m",
                memory=f"{rng.choice([0, 128, 4096])}Mi",
                **({"example.com/gpu": "1"} if rng.random() < 0.2 else {}),
            )
        if rng.random() < 0.3:
            p = p.toleration("dedicated", "x", rng.choice(["NoSchedule", "NoExecute", ""]))
        if rng.random() < 0.2:
            p = p.toleration("node.kubernetes.io/unschedulable", "", "NoSchedule")
        raw = p.raw()
        if rng.random() < 0.2:
            raw["spec"]["nodeName"] = f"n{rng.randrange(45)}"
        pods.append(parse_pod(raw))
    return nodes, pods


@pytest.mark.parametrize("name", BATCH_PLUGINS)
@pytest.mark.parametrize("seed", range(5))
def test_filter_nodes_equals_filter(name: str, seed: int) -> None:
    rng = random.Random(seed)
    nodes, pods = random_cluster(rng)
    entry = in_tree_registry()[name]
    args = entry.parse_args({}) if entry.parse_args is not None else None
    plugin = entry.factory(args, Handle(nodes))  # type: ignore[arg-type]
    rejected_some = False
    for p in pods:
        state = CycleState()
        pre = getattr(plugin, "pre_filter", None)
        if pre is not None:
            _, st = pre(state, p, nodes)
            if st is not None:
                continue  # Skip or a rejection: Filter does not run for this pod
        batch = plugin.filter_nodes(state, p, nodes)  # type: ignore[attr-defined]
        one = {
            i: st
            for i, ni in enumerate(nodes)
            if (st := plugin.filter(state, p, ni)) is not None  # type: ignore[attr-defined]
        }
        assert {i: (s.code, s.reasons) for i, s in batch.items()} == {
            i: (s.code, s.reasons) for i, s in one.items()
        }, f"{name} differs for {p.name}"
        rejected_some |= bool(one)
    assert rejected_some, "the random cluster should exercise rejections"
