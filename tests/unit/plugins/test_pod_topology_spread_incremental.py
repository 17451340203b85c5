"""PodTopologySpread PreFilter from counts kept across cycles: always the full scan's result."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest

from kscheduler.cache import Cache, Snapshot
from kscheduler.framework import Code, CycleState, NodeInfo, PodInfo
from kscheduler.framework.parse import parse_pod
from kscheduler.plugins import pod_topology_spread as pts
from kscheduler.plugins.pod_topology_spread import (
    PRE_FILTER_KEY,
    DefaultConstraint,
    FilterState,
    PodTopologySpread,
    PodTopologySpreadArgs,
)

from ..builders import node, pod
from ..fakes import FakeObjects

HOST = "kubernetes.io/hostname"
ZONE = "zone"
RACK = "rack"


class Handle:
    def __init__(self, snapshot: Any, objects: FakeObjects) -> None:
        self.snapshot = snapshot
        self.objects = objects


def service(selector: dict[str, str], ns: str = "default") -> dict[str, Any]:
    return {"metadata": {"name": "svc", "namespace": ns}, "spec": {"selector": selector}}


def constraint(key: str, selector: dict[str, Any] | None, **extra: Any) -> dict[str, Any]:
    c: dict[str, Any] = {"maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule"}
    if selector is not None:
        c["labelSelector"] = selector
    c.update(extra)
    return c


def incoming(
    name: str,
    *constraints: dict[str, Any],
    ns: str = "default",
    labels: dict[str, str] | None = None,
    spec: dict[str, Any] | None = None,
) -> PodInfo:
    raw = pod(name, ns).labels(**(labels or {"app": "a"})).raw()
    if constraints:
        raw["spec"]["topologySpreadConstraints"] = list(constraints)
    raw["spec"].update(spec or {})
    p = parse_pod(raw)
    assert p.parse_error is None, p.parse_error
    return p


APP_A = {"matchLabels": {"app": "a"}}
APP_B = {"matchLabels": {"app": "b"}}
A_OR_B = {"matchExpressions": [{"key": "app", "operator": "In", "values": ["a", "b"]}]}

#: Incoming pods whose counts can be kept across cycles.
TRACKED = [
    incoming("zone", constraint(ZONE, APP_A)),
    incoming("zone-other", constraint(ZONE, APP_A), ns="other"),
    incoming("host", constraint(HOST, A_OR_B)),
    incoming("two", constraint(ZONE, APP_B), constraint(HOST, APP_B), ns="other"),
    incoming("three", constraint(ZONE, APP_A), constraint(RACK, A_OR_B), constraint(HOST, APP_A)),
    incoming("empty-selector", constraint(ZONE, {}), constraint(RACK, None)),
    incoming("min-domains", constraint(ZONE, APP_A, minDomains=4)),
    incoming(
        "ignore-affinity",
        constraint(ZONE, APP_A, nodeAffinityPolicy="Ignore"),
        spec={"nodeSelector": {RACK: "r1"}},
    ),
    # no constraints of its own: the plugin's default one, with the Service's selector
    incoming("defaulted", labels={"app": "a", "tier": "x"}),
]

#: Incoming pods whose counts depend on the pod itself: always the full scan.
SCANNED = [
    incoming("honor-affinity", constraint(ZONE, APP_A), spec={"nodeSelector": {RACK: "r1"}}),
    incoming(
        "honor-taints",
        constraint(ZONE, APP_A, nodeTaintsPolicy="Honor"),
        spec={"tolerations": [{"key": "t", "operator": "Exists"}]},
    ),
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
    "service": 1,
}


class Cluster:
    """A cache changed at random the ways the informers and the scheduler change it."""

    def __init__(self, seed: int, limit: int = 1_000_000) -> None:
        self.rng = random.Random(seed)
        self.cache = Cache(change_log_limit=limit)
        self.snapshot = Snapshot(self.cache)
        self.objects = FakeObjects({"services": [service({"app": "a"})]})
        self.bound: list[PodInfo] = []
        self.assumed: list[PodInfo] = []
        self.serial = 0

    def _node_name(self) -> str:
        return f"n{self.rng.randrange(8)}"

    def _pod(self, node_name: str) -> PodInfo:
        rng = self.rng
        self.serial += 1
        b = pod(f"p{self.serial}", rng.choice(["default", "default", "other"]))
        b = b.labels(app=rng.choice("abc"), tier=rng.choice("xy")).on(node_name)
        raw = b.raw()
        if rng.random() < 0.1:
            raw["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
        return parse_pod(raw)

    def _node(self, name: str) -> None:
        rng = self.rng
        b = node(name).label(HOST, name)
        if rng.random() < 0.85:
            b = b.label(ZONE, rng.choice(["z1", "z2", "z3"]))
        if rng.random() < 0.7:
            b = b.label(RACK, rng.choice(["r1", "r2"]))
        if rng.random() < 0.3:
            b = b.taint("t")
        self.cache.add_node(b.record())

    def step(self) -> None:
        rng, c = self.rng, self.cache
        (action,) = rng.choices(list(ACTIONS), list(ACTIONS.values()))
        if action == "node":
            self._node(self._node_name())  # new, or new labels and taints
        elif action == "remove-node":
            c.remove_node(self._node_name())  # pods may stay on a node-less entry
        elif action == "add":
            p = self._pod(self._node_name())  # the node may not exist (yet)
            c.add_pod(p)
            self.bound.append(p)
        elif action == "remove" and self.bound:
            c.remove_pod(self.bound.pop(rng.randrange(len(self.bound))).uid)
        elif action == "relabel" and self.bound:
            i = rng.randrange(len(self.bound))
            old = self.bound[i]
            new = parse_pod(pod(old.name, old.namespace).labels(app=rng.choice("abc")).raw())
            new = new.with_node(old.node_name)
            c.update_pod(new)
            self.bound[i] = new
        elif action == "assume" and self.snapshot.node_infos():
            ni = rng.choice(list(self.snapshot.node_infos()))
            p = self._pod("")
            c.assume(p.with_node(ni.name))
            self.assumed.append(p.with_node(ni.name))
        elif action in ("forget", "confirm") and self.assumed:
            p = self.assumed.pop(rng.randrange(len(self.assumed)))
            if action == "forget":
                c.forget(p.uid)
            else:  # the informer sees it bound, possibly elsewhere
                bound = p.with_node(self._node_name()) if rng.random() < 0.3 else p
                c.add_pod(bound)
                self.bound.append(bound)
        elif action == "service":
            selector = rng.choice([{"app": "a"}, {"app": "a", "tier": "x"}, {"app": "b"}])
            self.objects.objects["services"] = [service(selector)]


def new_plugin(cluster: Cluster) -> PodTopologySpread:
    args = PodTopologySpreadArgs((DefaultConstraint(1, ZONE, "DoNotSchedule"),), "List")
    return PodTopologySpread(args, Handle(cluster.snapshot, cluster.objects))  # type: ignore[arg-type]


@contextmanager
def scan_forbidden(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    def scan(*args: Any) -> Any:
        raise AssertionError("the full scan ran")

    with monkeypatch.context() as m:
        m.setattr(pts, "_domain_counts", scan)
        yield


def pre_filter(
    pl: PodTopologySpread, p: PodInfo, nodes: Sequence[NodeInfo]
) -> tuple[Code | None, FilterState | None]:
    state = CycleState()
    _, st = pl.pre_filter(state, p, nodes)
    s = state.get(PRE_FILTER_KEY)
    return (None if st is None else st.code), (s if isinstance(s, FilterState) else None)


def fields(s: FilterState | None) -> Any:
    return None if s is None else (s.constraints, s.counts, s.paths, s.self_match)


def check(
    pl: PodTopologySpread, snapshot: Snapshot, p: PodInfo, tracked: bool, mp: pytest.MonkeyPatch
) -> None:
    """PreFilter over the snapshot's node list equals the full scan over a copy of it."""
    nodes = snapshot.node_infos()
    want = pre_filter(pl, p, list(nodes))
    if tracked:
        with scan_forbidden(mp):
            got = pre_filter(pl, p, nodes)
    else:
        got = pre_filter(pl, p, nodes)
    assert got[0] == want[0]
    assert fields(got[1]) == fields(want[1]), p.name


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
        for p in TRACKED:
            check(pl, cluster.snapshot, p, not stale, monkeypatch)
        for p in SCANNED:
            check(pl, cluster.snapshot, p, False, monkeypatch)


def test_counts_depending_on_the_pod_are_not_kept() -> None:
    cluster = Cluster(5)
    for _ in range(30):
        cluster.step()
    cluster.snapshot.update()
    pl = new_plugin(cluster)
    for p in SCANNED:
        pre_filter(pl, p, cluster.snapshot.node_infos())
    assert len(pl._aggregates) == 0
    for p in TRACKED[:3]:
        pre_filter(pl, p, cluster.snapshot.node_infos())
    assert len(pl._aggregates) == 3


def test_a_lister_without_change_log_gets_the_full_scan() -> None:
    cluster = Cluster(6)
    for _ in range(30):
        cluster.step()
    cluster.snapshot.update()

    class Plain:
        def __init__(self, snapshot: Snapshot) -> None:
            self.node_infos = snapshot.node_infos
            self.get = snapshot.get

    pl = PodTopologySpread(
        PodTopologySpreadArgs(),
        Handle(Plain(cluster.snapshot), cluster.objects),  # type: ignore[arg-type]
    )
    reference = new_plugin(cluster)
    nodes = cluster.snapshot.node_infos()
    for p in TRACKED[:6]:
        assert fields(pre_filter(pl, p, nodes)[1]) == fields(pre_filter(reference, p, nodes)[1])
    assert all(not agg.per_node for agg in pl._aggregates._by_key.values())


def test_bad_constraints_are_an_error_either_way() -> None:
    cluster = Cluster(7)
    cluster.step()
    cluster.snapshot.update()
    pl = new_plugin(cluster)
    bad = incoming("bad", constraint(ZONE, {"matchExpressions": [{"key": "app"}]}))
    assert pre_filter(pl, bad, cluster.snapshot.node_infos()) == (Code.ERROR, None)


def test_aggregates_are_bounded() -> None:
    cluster = Cluster(8)
    for _ in range(20):
        cluster.step()
    cluster.snapshot.update()
    pl = new_plugin(cluster)
    pl._aggregates.limit = 5
    for i in range(12):
        p = incoming(f"p{i}", constraint(ZONE, {"matchLabels": {"app": f"a{i}"}}))
        pre_filter(pl, p, cluster.snapshot.node_infos())
    assert len(pl._aggregates) == 5


def test_critical_paths_do_not_depend_on_node_order() -> None:
    cache = Cache()
    for name, zone in (("n1", "z3"), ("n2", "z1"), ("n3", "z2"), ("n4", "z4")):
        cache.add_node(node(name).label(ZONE, zone).label(HOST, name).record())
    cache.add_pod(pod("x").labels(app="a").on("n4").build())
    snapshot = Snapshot(cache)
    snapshot.update()
    pl = PodTopologySpread(PodTopologySpreadArgs(), Handle(snapshot, FakeObjects()))  # type: ignore[arg-type]
    p = incoming("zone", constraint(ZONE, APP_A))
    nodes = list(snapshot.node_infos())
    for order in (nodes, nodes[::-1]):
        _, s = pre_filter(pl, p, order)
        assert s is not None and s.paths == [["z1", 0, "z2", 0]]
