"""InterPodAffinity PreFilter from counts kept across cycles: always the full scan's result."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import pytest

from kscheduler.cache import Cache, Snapshot
from kscheduler.framework import Code, CycleState, NodeInfo, PodInfo
from kscheduler.framework.parse import parse_pod
from kscheduler.plugins.inter_pod_affinity import (
    PRE_FILTER_KEY,
    PRE_SCORE_KEY,
    FilterState,
    InterPodAffinity,
    InterPodAffinityArgs,
)

from ..builders import node, pod
from ..fakes import FakeObjects

HOST = "kubernetes.io/hostname"
ZONE = "zone"
RACK = "rack"
REQ = "requiredDuringSchedulingIgnoredDuringExecution"
PREF = "preferredDuringSchedulingIgnoredDuringExecution"
NAMESPACES = ("default", "other", "third")


class Handle:
    def __init__(self, snapshot: Any, objects: FakeObjects) -> None:
        self.snapshot = snapshot
        self.objects = objects


def namespace(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}}


def term(key: str, selector: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"topologyKey": key, "labelSelector": selector, **extra}


def with_affinity(
    raw: dict[str, Any],
    affinity: Sequence[dict[str, Any]] = (),
    anti: Sequence[dict[str, Any]] = (),
    preferred: Sequence[dict[str, Any]] = (),
    preferred_anti: Sequence[dict[str, Any]] = (),
) -> PodInfo:
    aff: dict[str, Any] = {}
    for kind, required, soft in (
        ("podAffinity", affinity, preferred),
        ("podAntiAffinity", anti, preferred_anti),
    ):
        if required:
            aff.setdefault(kind, {})[REQ] = list(required)
        if soft:
            aff.setdefault(kind, {})[PREF] = list(soft)
    if aff:
        raw["spec"]["affinity"] = aff
    p = parse_pod(raw)
    assert p.parse_error is None, p.parse_error
    return p


def incoming(
    name: str,
    affinity: Sequence[dict[str, Any]] = (),
    anti: Sequence[dict[str, Any]] = (),
    *,
    ns: str = "default",
    app: str = "a",
    preferred: Sequence[dict[str, Any]] = (),
    preferred_anti: Sequence[dict[str, Any]] = (),
) -> PodInfo:
    raw = pod(name, ns).labels(app=app).raw()
    return with_affinity(raw, affinity, anti, preferred, preferred_anti)


def weighted(weight: int, key: str, selector: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"weight": weight, "podAffinityTerm": term(key, selector, **extra)}


APP_A = {"matchLabels": {"app": "a"}}
APP_B = {"matchLabels": {"app": "b"}}
A_OR_B = {"matchExpressions": [{"key": "app", "operator": "In", "values": ["a", "b"]}]}
TEAM = {"matchLabels": {"team": "t1"}}

INCOMING = [
    incoming("affinity", [term(ZONE, APP_A)]),
    incoming("anti", anti=[term(HOST, APP_B)]),
    # the same terms as the affinity of "several": counted differently
    incoming("anti-like-affinity", anti=[term(ZONE, A_OR_B), term(RACK, APP_A)]),
    incoming(
        "selected-namespaces",
        [term(ZONE, APP_A, namespaceSelector=TEAM)],
        [term(RACK, {"matchLabels": {"app": "c"}}, namespaces=["other"])],
    ),
    incoming("no-terms"),
    incoming("no-terms-other", ns="other", app="b"),
    incoming(
        "several",
        [term(ZONE, A_OR_B), term(RACK, APP_A)],
        [term(HOST, APP_B), term(HOST, A_OR_B, namespaceSelector={})],
        app="b",
    ),
    incoming("all-namespaces", [term(RACK, APP_B, namespaceSelector={})], ns="third"),
    incoming(
        "preferred",
        preferred=[weighted(5, ZONE, APP_A), weighted(2, RACK, A_OR_B, namespaceSelector=TEAM)],
        preferred_anti=[weighted(3, HOST, APP_B), weighted(5, ZONE, APP_A)],
    ),
    incoming("preferred-anti", ns="other", app="b", preferred_anti=[weighted(7, RACK, APP_A)]),
]

#: Preferred terms existing pods may carry (affinity or anti-affinity).
EXISTING_PREFERRED = [
    weighted(4, ZONE, APP_A),
    weighted(1, HOST, A_OR_B, namespaceSelector=TEAM),
    weighted(4, ZONE, APP_A, namespaces=["other"]),
]

#: Required anti-affinity terms existing pods may carry.
EXISTING_TERMS = [
    term(ZONE, APP_A),
    term(HOST, APP_B, namespaceSelector=TEAM),
    term(RACK, {}, namespaces=["other"]),
    term(ZONE, A_OR_B, namespaces=["default", "third"]),
]


#: What Cluster.step does, with its odds.
ACTIONS = {
    "node": 2,
    "remove-node": 1,
    "add": 3,
    "remove": 1,
    "relabel": 1,
    "assume": 2,
    "forget": 1,
    "confirm": 1,
    "namespace": 1,
}


class Cluster:
    """A cache and namespaces changed at random, as informers and the scheduler do."""

    def __init__(self, seed: int, limit: int = 1_000_000) -> None:
        self.rng = random.Random(seed)
        self.cache = Cache(change_log_limit=limit)
        self.snapshot = Snapshot(self.cache)
        self.objects = FakeObjects({"namespaces": [namespace(n) for n in NAMESPACES]})
        self.bound: list[PodInfo] = []
        self.assumed: list[PodInfo] = []
        self.serial = 0

    def _node_name(self) -> str:
        return f"n{self.rng.randrange(8)}"

    def _pod(self, node_name: str) -> PodInfo:
        rng = self.rng
        self.serial += 1
        raw = pod(f"p{self.serial}", rng.choice(NAMESPACES)).labels(app=rng.choice("abc")).raw()
        raw["spec"]["nodeName"] = node_name
        anti = rng.sample(EXISTING_TERMS, rng.choice([0, 0, 0, 1, 2]))
        affinity = [term(ZONE, APP_B)] if rng.random() < 0.1 else []
        preferred = rng.sample(EXISTING_PREFERRED, rng.choice([0, 0, 1, 2]))
        preferred_anti = rng.sample(EXISTING_PREFERRED, rng.choice([0, 0, 1]))
        return with_affinity(raw, affinity, anti, preferred, preferred_anti)

    def step(self) -> None:
        rng, c = self.rng, self.cache
        (action,) = rng.choices(list(ACTIONS), list(ACTIONS.values()))
        if action == "node":
            name = self._node_name()
            b = node(name).label(HOST, name)
            if rng.random() < 0.85:
                b = b.label(ZONE, rng.choice(["z1", "z2", "z3"]))
            if rng.random() < 0.7:
                b = b.label(RACK, rng.choice(["r1", "r2"]))
            c.add_node(b.record())
        elif action == "remove-node":
            c.remove_node(self._node_name())
        elif action == "add":
            p = self._pod(self._node_name())
            c.add_pod(p)
            self.bound.append(p)
        elif action == "remove" and self.bound:
            c.remove_pod(self.bound.pop(rng.randrange(len(self.bound))).uid)
        elif action == "relabel" and self.bound:
            i = rng.randrange(len(self.bound))
            old = self.bound[i]
            raw = pod(old.name, old.namespace).labels(app=rng.choice("abc")).on(old.node_name)
            new = with_affinity(raw.raw(), anti=rng.sample(EXISTING_TERMS, rng.randrange(2)))
            c.update_pod(new)
            self.bound[i] = new
        elif action == "assume" and self.snapshot.node_infos():
            ni = rng.choice(list(self.snapshot.node_infos()))
            p = self._pod(ni.name)
            c.assume(p)
            self.assumed.append(p)
        elif action in ("forget", "confirm") and self.assumed:
            p = self.assumed.pop(rng.randrange(len(self.assumed)))
            if action == "forget":
                c.forget(p.uid)
            else:
                bound = p.with_node(self._node_name()) if rng.random() < 0.3 else p
                c.add_pod(bound)
                self.bound.append(bound)
        elif action == "namespace":
            # namespace labels change without any cache change
            self.objects.objects["namespaces"] = [
                namespace(n, **({"team": "t1"} if rng.random() < 0.5 else {})) for n in NAMESPACES
            ]


def new_plugin(cluster: Cluster) -> InterPodAffinity:
    handle = Handle(cluster.snapshot, cluster.objects)
    return InterPodAffinity(InterPodAffinityArgs(), handle)  # type: ignore[arg-type]


def pre_filter(
    pl: InterPodAffinity, p: PodInfo, nodes: Sequence[NodeInfo]
) -> tuple[Code | None, Any]:
    state = CycleState()
    _, st = pl.pre_filter(state, p, nodes)
    s = state.get(PRE_FILTER_KEY)
    if not isinstance(s, FilterState):
        return (None if st is None else st.code), None
    return (None if st is None else st.code), (
        s.affinity,
        s.anti_affinity,
        s.namespace_labels,
        s.existing_anti_affinity_counts,
        s.affinity_counts,
        s.anti_affinity_counts,
        s.self_match,
    )


def pre_score(pl: InterPodAffinity, p: PodInfo, nodes: Sequence[NodeInfo]) -> tuple[Any, Any]:
    state = CycleState()
    st = pl.pre_score(state, p, nodes)
    s = state.get(PRE_SCORE_KEY)
    return (None if st is None else st.code), (None if s is None else s.topology_score)


def check(
    pl: InterPodAffinity, snapshot: Snapshot, p: PodInfo, tracked: bool, mp: pytest.MonkeyPatch
) -> None:
    """PreFilter over the snapshot's node list equals the full scan over a copy of it,
    and PreScore from kept counts equals PreScore from every pod."""
    nodes = snapshot.node_infos()
    want = pre_filter(pl, p, list(nodes))
    with mp.context() as m:
        m.setattr(pl, "_tracked_scores", lambda *args: None)
        want_scores = pre_score(pl, p, nodes)

    def scan(*args: Any) -> Any:
        raise AssertionError("the full scan ran")

    with mp.context() as m:
        if tracked:
            m.setattr(pl, "_scanned_counts", scan)
            m.setattr(pl, "_scanned_scores", scan)
        got = pre_filter(pl, p, nodes)
        got_scores = pre_score(pl, p, nodes)
    assert got == want, p.name
    assert got_scores == want_scores, p.name


@pytest.mark.parametrize(("seed", "limit"), [(1, 1_000_000), (2, 1_000_000), (3, 9), (4, 2)])
def test_random_changes_give_the_full_scan_result(
    seed: int, limit: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = Cluster(seed, limit)
    pl = new_plugin(cluster)
    for _ in range(250):
        for _ in range(cluster.rng.randrange(5)):
            cluster.step()
        stale = cluster.rng.random() < 0.1
        if not stale:
            cluster.snapshot.update()
        for p in INCOMING:
            check(pl, cluster.snapshot, p, not stale, monkeypatch)


def test_namespace_labels_are_part_of_the_key() -> None:
    cluster = Cluster(5)
    cluster.cache.add_node(node("n1").label(ZONE, "z1").record())
    cluster.cache.add_node(node("n2").label(ZONE, "z2").record())
    cluster.cache.add_pod(pod("x", "other").labels(app="a").on("n1").build())
    cluster.snapshot.update()
    pl = new_plugin(cluster)
    p = incoming("p", [term(ZONE, APP_A, namespaceSelector=TEAM)])
    nodes = cluster.snapshot.node_infos()
    assert pre_filter(pl, p, nodes)[1][4] == {}
    cluster.objects.objects["namespaces"] = [namespace("other", team="t1")]
    assert pre_filter(pl, p, nodes)[1][4] == {ZONE: {"z1": 1}}
    assert len(pl._matching) == 2


def test_add_pod_leaves_the_kept_totals_as_they_were() -> None:
    cluster = Cluster(7)
    for _ in range(60):
        cluster.step()
    cluster.snapshot.update()
    pl = new_plugin(cluster)
    nodes = cluster.snapshot.node_infos()
    changed = 0
    for p in INCOMING:
        want = pre_filter(pl, p, list(nodes))
        state = CycleState()
        pl.pre_filter(state, p, nodes)
        s = state.get(PRE_FILTER_KEY)
        if not isinstance(s, FilterState):
            continue  # nothing to count
        labelled = [ni for ni in nodes if ni.node is not None and ni.labels]
        for ni in labelled[:3]:
            for other in list(ni.pods.values())[:2]:
                pl.remove_pod(state, p, other, ni)
            pl.add_pod(state, p, p, ni)
        counts = (s.existing_anti_affinity_counts, s.affinity_counts, s.anti_affinity_counts)
        changed += counts != want[1][3:6]
        assert pre_filter(pl, p, nodes) == want, p.name
    assert changed


def test_a_lister_without_change_log_gets_the_full_scan() -> None:
    cluster = Cluster(6)
    for _ in range(40):
        cluster.step()
    cluster.snapshot.update()

    class Plain:
        def __init__(self, snapshot: Snapshot) -> None:
            self.node_infos = snapshot.node_infos
            self.get = snapshot.get
            self.have_pods_with_required_anti_affinity = (
                snapshot.have_pods_with_required_anti_affinity
            )

    handle = Handle(Plain(cluster.snapshot), cluster.objects)
    pl = InterPodAffinity(InterPodAffinityArgs(), handle)  # type: ignore[arg-type]
    reference = new_plugin(cluster)
    nodes = cluster.snapshot.node_infos()
    for p in INCOMING:
        assert pre_filter(pl, p, nodes) == pre_filter(reference, p, nodes)
    assert not pl._existing.per_node and not pl._existing.totals


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_filter_nodes_equals_filter(seed: int) -> None:
    """The batch filter rejects exactly the nodes filter() rejects, with the same code
    and reason, after random changes, and with a nominated pod added."""
    cluster = Cluster(seed)
    pl = new_plugin(cluster)
    rejected = 0
    for _ in range(60):
        for _ in range(cluster.rng.randrange(4)):
            cluster.step()
        cluster.snapshot.update()
        nodes = cluster.snapshot.node_infos()
        for p in INCOMING:
            state = CycleState()
            pl.pre_filter(state, p, nodes)
            states = [state]
            if nodes and nodes[0].pods:
                nominated = state.clone()
                pl.add_pod(nominated, p, next(iter(nodes[0].pods.values())), nodes[0])
                states.append(nominated)
            for s in states:
                got = {j: (st.code, st.reasons) for j, st in pl.filter_nodes(s, p, nodes).items()}
                want = {}
                for j, ni in enumerate(nodes):
                    st = pl.filter(s, p, ni)
                    if st is not None:
                        want[j] = (st.code, st.reasons)
                assert got == want, p.name
                rejected += len(want)
    assert rejected
