"""Cache: aggregation, the assumed-pod state machine, node order, snapshot."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import pytest

from kscheduler import cache as cache_module
from kscheduler.cache import Cache, Snapshot
from kscheduler.framework.parse import parse_pod
from kscheduler.framework.types import NodeInfo, PodInfo
from tests.unit.builders import node, pod

ZONE = "topology.kubernetes.io/zone"


def test_assume_then_confirm_then_remove() -> None:
    c = Cache()
    c.add_node(node("n1").alloc(cpu="4", memory="8Gi").record())
    p = pod("p").req(cpu="1", memory="1Gi").build()
    c.assume(p.with_node("n1"))
    ni = c.nodes["n1"]
    assert ni.requested.milli_cpu == 1000 and c.is_assumed(p.uid)
    c.finish_binding(p.uid)
    # the informer sees the bound pod: confirmed, counted once
    c.add_pod(p.with_node("n1"))
    assert not c.is_assumed(p.uid)
    assert ni.requested.milli_cpu == 1000 and len(ni.pods) == 1
    c.remove_pod(p.uid)
    assert ni.requested.milli_cpu == 0 and not ni.pods


def test_forget_undoes_assume() -> None:
    c = Cache()
    c.add_node(node("n1").alloc(cpu="4").record())
    p = pod("p").req(cpu="1").host_port(80).build()
    c.assume(p.with_node("n1"))
    assert c.nodes["n1"].used_ports
    c.forget(p.uid)
    ni = c.nodes["n1"]
    assert ni.requested.milli_cpu == 0 and not ni.used_ports and not ni.pods
    assert not c.is_assumed(p.uid)


def test_confirm_on_another_node_moves_the_pod() -> None:
    c = Cache()
    c.add_node(node("n1").alloc(cpu="4").record())
    c.add_node(node("n2").alloc(cpu="4").record())
    p = pod("p").req(cpu="1").build()
    c.assume(p.with_node("n1"))
    c.add_pod(p.with_node("n2"))
    assert c.nodes["n1"].requested.milli_cpu == 0
    assert c.nodes["n2"].requested.milli_cpu == 1000


def test_assumed_expiry_only_after_binding_finished() -> None:
    now = [0.0]
    c = Cache(assumed_ttl=30, clock=lambda: now[0])
    c.add_node(node("n1").alloc(cpu="4").record())
    p = pod("p").req(cpu="1").build()
    c.assume(p.with_node("n1"))
    now[0] = 100
    assert c.expire_assumed() == []  # bind still in flight: never expires
    c.finish_binding(p.uid)
    now[0] = 120
    assert c.expire_assumed() == []
    now[0] = 131
    assert [x.uid for x in c.expire_assumed()] == [p.uid]
    assert c.nodes["n1"].requested.milli_cpu == 0


def test_pod_seen_before_its_node() -> None:
    c = Cache()
    p = pod("p").req(cpu="1").on("n1").build()
    c.add_pod(p)
    s = Snapshot(c)
    s.update()
    assert s.node_infos() == []  # no Node object yet: not schedulable
    c.add_node(node("n1").alloc(cpu="4").record())
    s.update()
    assert [n.name for n in s.node_infos()] == ["n1"]
    assert s.node_infos()[0].requested.milli_cpu == 1000


def test_node_delete_with_pods_keeps_accounting() -> None:
    c = Cache()
    c.add_node(node("n1").alloc(cpu="4").record())
    p = pod("p").req(cpu="1").on("n1").build()
    c.add_pod(p)
    c.remove_node("n1")
    s = Snapshot(c)
    s.update()
    assert s.node_infos() == [] and "n1" in c.nodes
    c.remove_pod(p.uid)
    assert "n1" not in c.nodes


def test_removed_node_info_is_left_node_less() -> None:
    """Whoever still holds the NodeInfo of a removed node (a score memo) sees it
    without a Node object, and with a new generation."""
    c = Cache()
    ni = c.add_node(node("n1").alloc(cpu="4").record())
    gen = ni.generation
    c.remove_node("n1")
    assert "n1" not in c.nodes
    assert ni.node is None and ni.generation > gen


def test_nodes_interleaved_across_zones() -> None:
    c = Cache()
    for name, zone in [
        ("a1", "a"),
        ("a2", "a"),
        ("a3", "a"),
        ("b1", "b"),
        ("c1", "c"),
        ("b2", "b"),
    ]:
        c.add_node(node(name).label(ZONE, zone).record())
    assert c.ordered_node_names() == ["a1", "b1", "c1", "a2", "b2", "a3"]


def test_snapshot_affinity_lists_follow_pods() -> None:
    c = Cache()
    c.add_node(node("n1").record())
    c.add_node(node("n2").record())
    s = Snapshot(c)
    s.update()
    assert s.have_pods_with_affinity() == []
    anti = pod("p").on("n2").raw()
    anti["spec"]["affinity"] = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {"a": "b"}},
                    "topologyKey": "kubernetes.io/hostname",
                }
            ]
        }
    }
    from kscheduler.framework.parse import parse_pod

    pi = parse_pod(anti)
    assert pi.parse_error is None
    c.add_pod(pi)
    s.update()
    assert [n.name for n in s.have_pods_with_required_anti_affinity()] == ["n2"]
    c.remove_pod(pi.uid)
    s.update()
    assert s.have_pods_with_affinity() == []


def _with_terms(name: str, on: str, *, anti: bool, preferred: bool) -> PodInfo:
    raw = pod(name).on(on).raw()
    term = {"labelSelector": {"matchLabels": {"a": "b"}}, "topologyKey": "kubernetes.io/hostname"}
    affinity: dict[str, Any] = {}
    if anti:
        affinity["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
    if preferred:
        affinity["podAffinity"] = {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "podAffinityTerm": term}
            ]
        }
    if affinity:
        raw["spec"]["affinity"] = affinity
    pi = parse_pod(raw)
    assert pi.parse_error is None
    return pi


@pytest.mark.parametrize("seed", range(4))
def test_snapshot_affinity_lists_updated_in_place_equal_a_rebuild(seed: int) -> None:
    """Pods with and without affinity come and go (assumed, confirmed, moved, forgotten)
    while nodes are added and removed: the lists the snapshot keeps up to date node by
    node equal the ones built from its whole node list, in the same order, and the
    lists handed out before stay as they were."""
    rng = random.Random(seed)
    c = Cache()
    s = Snapshot(c)
    zones = ["a", "b", "c"]
    names = [f"n{i}" for i in range(30)]
    for name in names[:20]:
        c.add_node(node(name).label(ZONE, rng.choice(zones)).record())
    pods: dict[str, PodInfo] = {}
    # the lists handed out earlier, and what they held then
    held: list[tuple[Sequence[NodeInfo], list[NodeInfo]]] = []
    for step in range(400):
        r = rng.random()
        if r < 0.45 or not pods:
            p = _with_terms(
                f"p{step}",
                rng.choice(names),
                anti=rng.random() < 0.5,
                preferred=rng.random() < 0.3,
            )
            if rng.random() < 0.5:
                c.assume(p)
            else:
                c.add_pod(p)
            pods[p.uid] = p
        elif r < 0.75:
            uid = rng.choice(list(pods))
            gone = pods.pop(uid)
            if c.is_assumed(uid) and rng.random() < 0.5:
                c.forget(uid)
            else:
                c.remove_pod(gone.uid)
        elif r < 0.85:
            uid = rng.choice(list(pods))
            c.add_pod(pods[uid])  # the informer confirms (or replays) it
        elif r < 0.93:
            name = rng.choice(names)
            c.add_node(node(name).label(ZONE, rng.choice(zones)).record())
        else:
            c.remove_node(rng.choice(names))
        s.update()
        held.append((s.have_pods_with_affinity(), list(s.have_pods_with_affinity())))
        held.append(
            (
                s.have_pods_with_required_anti_affinity(),
                list(s.have_pods_with_required_anti_affinity()),
            )
        )
        nodes = s.node_infos()
        assert [n.name for n in s.have_pods_with_affinity()] == [
            n.name for n in nodes if n.pods_with_affinity
        ]
        assert [n.name for n in s.have_pods_with_required_anti_affinity()] == [
            n.name for n in nodes if n.pods_with_required_anti_affinity
        ]
    assert all(list(given) == then for given, then in held)


def test_affinity_changes_unread_by_a_snapshot_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cache whose snapshot is not updated (a standby replica) notes at most the
    limit of nodes for the affinity lists, then has them rebuilt on the next update."""
    monkeypatch.setattr(cache_module, "AFFINITY_TOUCHED_LIMIT", 5)
    c = Cache()
    s = Snapshot(c)
    for i in range(4):
        c.add_node(node(f"n{i}").label(ZONE, "a").record())
    s.update()
    assert s.have_pods_with_affinity() == []
    for i in range(20):
        c.add_pod(_with_terms(f"p{i}", f"n{i % 4}", anti=i % 2 == 0, preferred=i % 2 == 1))
        assert len(c._affinity_touched) <= 5
    s.update()
    assert [n.name for n in s.have_pods_with_affinity()] == ["n0", "n1", "n2", "n3"]
    assert [n.name for n in s.have_pods_with_required_anti_affinity()] == ["n0", "n2"]
    assert c._affinity_touched == []
