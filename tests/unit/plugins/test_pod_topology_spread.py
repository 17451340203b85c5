from __future__ import annotations

import math
from typing import Any

import pytest

from kscheduler.framework import (
    ActionType,
    Code,
    CycleState,
    EventResource,
    NodeInfo,
    NodeScore,
    PodInfo,
    QueueingHint,
)
from kscheduler.framework.args import ConfigError
from kscheduler.framework.parse import parse_pod
from kscheduler.plugins.pod_topology_spread import (
    ENTRY,
    ERR_REASON_CONSTRAINTS_NOT_MATCH,
    ERR_REASON_NODE_LABEL_NOT_MATCH,
    PRE_FILTER_KEY,
    DefaultConstraint,
    FilterState,
    PodTopologySpread,
    PodTopologySpreadArgs,
    parse_args,
)

from ..builders import node, pod

HOST = "kubernetes.io/hostname"
ZONE = "zone"
FOO = {"matchLabels": {"foo": ""}}
BAR = {"matchLabels": {"bar": ""}}


# ---------------------------------------------------------------------------- fakes


class FakeSnapshot:
    def __init__(self, nodes: list[NodeInfo]) -> None:
        self._nodes = nodes

    def node_infos(self) -> list[NodeInfo]:
        return self._nodes

    def get(self, name: str) -> NodeInfo | None:
        return next((n for n in self._nodes if n.name == name), None)

    def have_pods_with_affinity(self) -> list[NodeInfo]:
        return [n for n in self._nodes if n.pods_with_affinity]

    def have_pods_with_required_anti_affinity(self) -> list[NodeInfo]:
        return [n for n in self._nodes if n.pods_with_required_anti_affinity]

    def is_pvc_used_by_pods(self, key: str) -> bool:
        return False


class FakeObjects:
    def __init__(self, objects: dict[str, list[dict[str, Any]]]) -> None:
        self._objects = objects

    def list(self, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        return [
            o
            for o in self._objects.get(kind, [])
            if namespace is None or o["metadata"].get("namespace", "") == namespace
        ]

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        for o in self.list(kind, namespace):
            if o["metadata"]["name"] == name:
                return o
        return None


class FakeHandle:
    def __init__(
        self, nodes: list[NodeInfo], objects: dict[str, list[dict[str, Any]]] | None = None
    ) -> None:
        self.snapshot = FakeSnapshot(nodes)
        self.objects = FakeObjects(objects or {})


def plugin(
    nodes: list[NodeInfo],
    objects: dict[str, list[dict[str, Any]]] | None = None,
    args: PodTopologySpreadArgs | None = None,
) -> PodTopologySpread:
    return PodTopologySpread.new(args or parse_args({}), FakeHandle(nodes, objects))  # type: ignore[arg-type]


LIST = PodTopologySpreadArgs((), "List")


# ---------------------------------------------------------------------------- builders


def constraint(
    max_skew: int,
    key: str,
    when: str = "DoNotSchedule",
    selector: dict[str, Any] | None = FOO,
    **extra: Any,
) -> dict[str, Any]:
    c: dict[str, Any] = {"maxSkew": max_skew, "topologyKey": key, "whenUnsatisfiable": when}
    if selector is not None:
        c["labelSelector"] = selector
    c.update(extra)
    return c


def mkpod(
    name: str,
    *constraints: dict[str, Any],
    labels: dict[str, str] | None = None,
    ns: str = "default",
    on: str = "",
    spec: dict[str, Any] | None = None,
    meta: dict[str, Any] | None = None,
) -> PodInfo:
    b = pod(name, ns).labels(**(labels if labels is not None else {"foo": ""}))
    if on:
        b = b.on(on)
    raw = b.raw()
    if constraints:
        raw["spec"]["topologySpreadConstraints"] = list(constraints)
    raw["spec"].update(spec or {})
    raw["metadata"].update(meta or {})
    p = parse_pod(raw)
    assert p.parse_error is None, p.parse_error
    return p


def mknode(name: str, *pods: PodInfo, **labels: str) -> NodeInfo:
    b = node(name)
    for k, v in labels.items():
        b = b.label(HOST if k == "host" else k, v)
    return b.with_pods(*pods).build()


def hosts(*counts: int, prefix: str = "node-") -> list[NodeInfo]:
    """Nodes node-a, node-b ... with a hostname label and ``counts[i]`` pods labelled foo."""
    out = []
    for i, n in enumerate(counts):
        name = prefix + "abcdefgh"[i]
        pods = [mkpod(f"p-{name}-{j}") for j in range(n)]
        out.append(mknode(name, *pods, host=name))
    return out


def run_filter(pl: PodTopologySpread, p: PodInfo, nodes: list[NodeInfo]) -> dict[str, Any]:
    state = CycleState()
    _, st = pl.pre_filter(state, p, nodes)
    assert st is None, st
    out: dict[str, Any] = {}
    for n in nodes:
        f = pl.filter(state, p, n)
        out[n.name] = None if f is None else (f.code, f.message)
    return out


def run_score(pl: PodTopologySpread, p: PodInfo, filtered: list[NodeInfo]) -> dict[str, int]:
    state = CycleState()
    st = pl.pre_score(state, p, filtered)
    assert st is None, st
    scores = []
    for n in filtered:
        s, err = pl.score(state, p, n)
        assert err is None
        scores.append(NodeScore(n.name, s))
    assert pl.normalize_score(state, p, scores) is None
    return {s.name: s.score for s in scores}


REJECT = (Code.UNSCHEDULABLE, ERR_REASON_CONSTRAINTS_NOT_MATCH)
NO_LABEL = (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ERR_REASON_NODE_LABEL_NOT_MATCH)


def zones(a: int, b: int, x: int, y: int, key: str = ZONE) -> list[NodeInfo]:
    """node-a, node-b in zone1 and node-x, node-y in zone2, with foo pods as given."""
    spec = {"node-a": (a, "zone1"), "node-b": (b, "zone1"), "node-x": (x, "zone2")}
    spec["node-y"] = (y, "zone2")
    out = []
    for name, (n, z) in spec.items():
        pods = [mkpod(f"p-{name}-{j}") for j in range(n)]
        out.append(node(name).label(key, z).label(HOST, name).with_pods(*pods).build())
    return out


# ---------------------------------------------------------------------------- filter


def test_filter_zone_skew() -> None:
    # zone1 holds 2 matching pods, zone2 1: adding to zone1 gives skew 3-1 = 2 > 1.
    nodes = zones(1, 1, 1, 0)
    got = run_filter(plugin(nodes), mkpod("p", constraint(1, ZONE)), nodes)
    assert got == {"node-a": REJECT, "node-b": REJECT, "node-x": None, "node-y": None}


def test_filter_max_skew_two_allows_both_zones() -> None:
    nodes = zones(1, 1, 1, 0)
    got = run_filter(plugin(nodes), mkpod("p", constraint(2, ZONE)), nodes)
    assert set(got.values()) == {None}


def test_filter_missing_topology_label_is_unresolvable() -> None:
    nodes = [*zones(0, 0, 1, 0), mknode("node-z", host="node-z")]
    got = run_filter(plugin(nodes), mkpod("p", constraint(1, ZONE)), nodes)
    assert got["node-z"] == NO_LABEL
    # zone1 is empty (min 0); zone2 has one: 1+1-0 = 2 > 1
    assert got["node-a"] is None and got["node-x"] == REJECT


def test_filter_every_constraint_must_hold() -> None:
    # zone (maxSkew 2): zone2 1+1-0 = 2 passes; hostname (maxSkew 1): node-x 1+1-0 = 2 fails.
    nodes = zones(0, 0, 1, 0)
    p = mkpod("p", constraint(2, ZONE), constraint(1, HOST))
    got = run_filter(plugin(nodes), p, nodes)
    assert got == {"node-a": None, "node-b": None, "node-x": REJECT, "node-y": None}


def test_filter_pod_not_matching_own_selector() -> None:
    # selfMatch 0: zone1 2 - min 1 = 1 <= 1.
    nodes = zones(1, 1, 1, 0)
    p = mkpod("p", constraint(1, ZONE), labels={"other": "x"})
    assert set(run_filter(plugin(nodes), p, nodes).values()) == {None}


def test_filter_min_domains_forces_global_minimum_zero() -> None:
    # 2 domains < minDomains 3: the global minimum is 0, so a domain with 1 pod is full.
    nodes = zones(1, 0, 1, 0)
    p = mkpod("p", constraint(1, ZONE, minDomains=3))
    assert set(run_filter(plugin(nodes), p, nodes).values()) == {REJECT}
    p = mkpod("p", constraint(1, ZONE, minDomains=2))
    assert set(run_filter(plugin(nodes), p, nodes).values()) == {None}


def test_filter_other_namespace_and_terminating_pods_do_not_count() -> None:
    others = [
        mkpod("o1", ns="other"),
        mkpod("t1", meta={"deletionTimestamp": "2024-01-01T00:00:00Z"}),
    ]
    nodes = [mknode("node-a", *others, zone="zone1"), mknode("node-x", zone="zone2")]
    assert set(run_filter(plugin(nodes), mkpod("p", constraint(1, ZONE)), nodes).values()) == {None}


def test_filter_node_affinity_policy() -> None:
    # The pod may only go to zone1 (nodeSelector); zone2 holds no pod.
    nodes = [
        mknode("node-a", mkpod("a1"), zone="zone1", pool="x"),
        mknode("node-x", zone="zone2", pool="y"),
    ]
    honor = mkpod("p", constraint(1, ZONE), spec={"nodeSelector": {"pool": "x"}})
    # Honor: zone2 is not a domain, min = 1: 1+1-1 = 1 passes.
    assert run_filter(plugin(nodes), honor, nodes)["node-a"] is None
    ignore = mkpod(
        "p", constraint(1, ZONE, nodeAffinityPolicy="Ignore"), spec={"nodeSelector": {"pool": "x"}}
    )
    # Ignore: zone2 counts with 0 pods: 1+1-0 = 2 > 1.
    assert run_filter(plugin(nodes), ignore, nodes)["node-a"] == REJECT


def test_filter_node_taints_policy() -> None:
    nodes = [
        mknode("node-a", mkpod("a1"), zone="zone1"),
        node("node-x").label(ZONE, "zone2").taint("dedicated", "gpu").build(),
    ]
    # Ignore (default): zone2 counts, min 0 -> node-a rejected.
    assert run_filter(plugin(nodes), mkpod("p", constraint(1, ZONE)), nodes)["node-a"] == REJECT
    honor = mkpod("p", constraint(1, ZONE, nodeTaintsPolicy="Honor"))
    assert run_filter(plugin(nodes), honor, nodes)["node-a"] is None
    tolerating = mkpod(
        "p",
        constraint(1, ZONE, nodeTaintsPolicy="Honor"),
        spec={"tolerations": [{"key": "dedicated", "operator": "Exists"}]},
    )
    assert run_filter(plugin(nodes), tolerating, nodes)["node-a"] == REJECT


def test_filter_empty_selector_counts_nothing_but_matches_self() -> None:
    # An empty labelSelector counts no existing pod but the pod itself matches: skew 1.
    nodes = zones(3, 0, 0, 0)
    assert set(
        run_filter(plugin(nodes), mkpod("p", constraint(1, ZONE, selector={})), nodes).values()
    ) == {None}
    # A nil selector matches nothing, not even the pod: every skew is 0.
    state = CycleState()
    pl = plugin(nodes)
    pl.pre_filter(state, mkpod("p", constraint(1, ZONE, selector=None)), nodes)
    s = state.read(PRE_FILTER_KEY)
    assert isinstance(s, FilterState)
    assert s.self_match == (0,) and s.counts == [{"zone1": 0, "zone2": 0}]


def test_filter_match_label_keys() -> None:
    def rev(name: str, r: str) -> PodInfo:
        return mkpod(name, labels={"app": "a", "rev": r})

    nodes = [
        mknode("node-a", rev("o1", "1"), rev("o2", "1"), zone="zone1"),
        mknode("node-x", rev("n1", "2"), zone="zone2"),
    ]
    c = constraint(1, ZONE, selector={"matchLabels": {"app": "a"}})
    # Without matchLabelKeys all revisions count: zone1 2, zone2 1.
    assert run_filter(plugin(nodes), mkpod("p", c, labels={"app": "a", "rev": "2"}), nodes) == {
        "node-a": REJECT,
        "node-x": None,
    }
    # With matchLabelKeys [rev] only rev=2 counts: zone1 0, zone2 1.
    c = constraint(1, ZONE, selector={"matchLabels": {"app": "a"}}, matchLabelKeys=["rev"])
    assert run_filter(plugin(nodes), mkpod("p", c, labels={"app": "a", "rev": "2"}), nodes) == {
        "node-a": None,
        "node-x": REJECT,
    }


def test_pre_filter_skips_without_hard_constraints() -> None:
    nodes = zones(0, 0, 0, 0)
    pl = plugin(nodes)
    for p in (mkpod("p"), mkpod("p", constraint(1, ZONE, "ScheduleAnyway"))):
        _, st = pl.pre_filter(CycleState(), p, nodes)
        assert st is not None and st.code == Code.SKIP


def test_pre_filter_bad_selector_is_an_error() -> None:
    nodes = zones(0, 0, 0, 0)
    bad = constraint(1, ZONE, selector={"matchExpressions": [{"key": "foo", "operator": "Bogus"}]})
    _, st = plugin(nodes).pre_filter(CycleState(), mkpod("p", bad), nodes)
    assert st is not None and st.code == Code.ERROR


# ---------------------------------------------------------------- add/remove pod


def test_add_and_remove_pod_update_counts_on_clones() -> None:
    nodes = zones(1, 1, 1, 0)
    pl = plugin(nodes)
    p = mkpod("p", constraint(1, ZONE))
    state = CycleState()
    pl.pre_filter(state, p, nodes)
    ext = pl.pre_filter_extensions()
    a, x = nodes[0], nodes[2]
    assert pl.filter(state, p, a) is not None

    # Preemption simulates removing the pod of node-a: zone1 drops to 1.
    sim = state.clone()
    victim = next(iter(a.pods.values()))
    assert ext.remove_pod(sim, p, victim, a) is None
    assert pl.filter(sim, p, a) is None
    assert pl.filter(state, p, a) == pl.filter(state, p, nodes[1])  # original untouched
    assert state.read(PRE_FILTER_KEY).counts == [{"zone1": 2, "zone2": 1}]
    assert sim.read(PRE_FILTER_KEY).counts == [{"zone1": 1, "zone2": 1}]

    # A nominated pod on node-x makes zone2 2: min 2, both zones pass (2+1-2 = 1).
    nom = state.clone()
    assert ext.add_pod(nom, p, mkpod("nominated", on="node-x"), x) is None
    assert nom.read(PRE_FILTER_KEY).counts == [{"zone1": 2, "zone2": 2}]
    assert pl.filter(nom, p, a) is None and pl.filter(nom, p, x) is None

    # Pods of another namespace or not matching the selector change nothing.
    other = state.clone()
    ext.add_pod(other, p, mkpod("o", ns="other", on="node-x"), x)
    ext.add_pod(other, p, mkpod("q", labels={"x": "y"}, on="node-x"), x)
    assert other.read(PRE_FILTER_KEY).counts == [{"zone1": 2, "zone2": 1}]


def test_critical_paths_track_minimum_after_updates() -> None:
    nodes = zones(2, 0, 1, 0)
    pl = plugin(nodes)
    p = mkpod("p", constraint(1, ZONE))
    state = CycleState()
    pl.pre_filter(state, p, nodes)
    s = state.read(PRE_FILTER_KEY)
    assert s.min_match(0) == 1
    pl.remove_pod(state, p, mkpod("gone", on="node-x"), nodes[2])
    assert s.min_match(0) == 0
    pl.add_pod(state, p, mkpod("n1", on="node-x"), nodes[2])
    pl.add_pod(state, p, mkpod("n2", on="node-x"), nodes[2])
    assert s.counts == [{"zone1": 2, "zone2": 2}] and s.min_match(0) == 2


# ---------------------------------------------------------------------------- score


def by_name(nodes: list[NodeInfo], *names: str) -> list[NodeInfo]:
    return [n for n in nodes if n.name in names]


def test_topology_weight() -> None:
    assert math.log(6) == pytest.approx(1.7918, abs=1e-4)


@pytest.mark.parametrize(
    ("max_skew", "counts", "want"),
    [
        # 2/1/0/3 matching pods, weight ln(4+2): raw 4, 2, 0, 5 -> 100*(5+0-s)/5
        (1, (2, 1, 0, 3), [20, 60, 100, 0]),
        # +1 each (maxSkew-1): raw 5, 3, 1, 6 -> 100*(6+1-s)/6
        (2, (2, 1, 0, 3), [33, 66, 100, 16]),
        # 4/3/2/1, +2: raw 9, 7, 6, 4 -> 100*(9+4-s)/9
        (3, (4, 3, 2, 1), [44, 66, 77, 100]),
        # all equal
        (1, (1, 1), [100, 100]),
        # no pods at all: every raw score 0 -> 100
        (1, (0, 0, 0), [100, 100, 100]),
    ],
)
def test_score_hostname(max_skew: int, counts: tuple[int, ...], want: list[int]) -> None:
    nodes = hosts(*counts)
    p = mkpod("p", constraint(max_skew, HOST, "ScheduleAnyway"))
    assert list(run_score(plugin(nodes), p, nodes).values()) == want


def test_score_only_candidates_set_the_weight() -> None:
    # 4/2/1/~3~: node-d failed Filter; weight ln(3+2): raw 6, 3, 2 -> 100*(6+2-s)/6
    nodes = hosts(4, 2, 1, 3)
    p = mkpod("p", constraint(1, HOST, "ScheduleAnyway"))
    got = run_score(plugin(nodes), p, nodes[:3])
    assert got == {"node-a": 33, "node-b": 83, "node-c": 100}


def test_score_node_without_topology_key_scores_zero() -> None:
    # 4/?2?/1/~3~: node-b lacks the hostname label and is ignored; weight ln(2+2).
    # raw node-a round(4*1.386) = 6, node-c round(1.386) = 1 -> 100*(6+1-s)/6
    nodes = hosts(4, 2, 1, 3)
    b = nodes[1]
    nodes[1] = node("node-b").label("n", "node-b").with_pods(*b.pods.values()).build()
    p = mkpod("p", constraint(1, HOST, "ScheduleAnyway"))
    got = run_score(plugin(nodes), p, nodes[:3])
    assert got == {"node-a": 16, "node-b": 0, "node-c": 100}


def test_score_zone_counts_pods_of_all_nodes() -> None:
    # zone1 = 4+2, zone2 = 1 + 3 (node-y failed Filter but its pods count); 2 zones: ln 4.
    # raw 8, 8, 6 -> 100*(8+6-s)/8
    nodes = zones(4, 2, 1, 3)
    p = mkpod("p", constraint(1, ZONE, "ScheduleAnyway"))
    got = run_score(plugin(nodes), p, nodes[:3])
    assert got == {"node-a": 75, "node-b": 75, "node-x": 100}


def test_score_two_constraints_with_different_selectors() -> None:
    # zone (foo): zone1 2, zone2 1, weight ln 4; hostname (bar): 0/1/0/1, weight ln 6.
    # raw: a 3, b 5, x 1, y 3 -> 100*(5+1-s)/5
    def lab(name: str, *keys: str) -> PodInfo:
        return mkpod(name, labels=dict.fromkeys(keys, ""))

    nodes = [
        mknode("node-a", lab("a1", "foo"), zone="zone1", host="node-a"),
        mknode("node-b", lab("b1", "foo", "bar"), zone="zone1", host="node-b"),
        mknode("node-x", zone="zone2", host="node-x"),
        mknode("node-y", lab("y1", "foo"), lab("y2", "bar"), zone="zone2", host="node-y"),
    ]
    p = mkpod(
        "p",
        constraint(1, ZONE, "ScheduleAnyway", FOO),
        constraint(1, HOST, "ScheduleAnyway", BAR),
        labels={"foo": "", "bar": ""},
    )
    got = run_score(plugin(nodes), p, nodes)
    assert got == {"node-a": 60, "node-b": 20, "node-x": 100, "node-y": 60}


def test_score_ignores_other_namespaces_and_terminating_pods() -> None:
    nodes = [
        mknode("node-a", mkpod("a1", ns="other"), mkpod("a2"), host="node-a"),
        mknode("node-b", mkpod("b1"), mkpod("b2"), host="node-b"),
        mknode(
            "node-c",
            mkpod("c1", meta={"deletionTimestamp": "2024-01-01T00:00:00Z"}),
            mkpod("c2"),
            mkpod("c3"),
            host="node-c",
        ),
    ]
    # counted: 1, 2, 2; weight ln 5 = 1.609: raw 2, 3, 3 -> 100*(3+2-s)/3
    p = mkpod("p", constraint(1, HOST, "ScheduleAnyway"))
    assert run_score(plugin(nodes), p, nodes) == {"node-a": 100, "node-b": 66, "node-c": 66}


def test_pre_score_skips_without_soft_constraints() -> None:
    nodes = hosts(1, 1)
    pl = plugin(nodes)
    st = pl.pre_score(CycleState(), mkpod("p", constraint(1, HOST)), nodes)
    assert st is not None and st.code == Code.SKIP
    # No own constraints and no Service/controller selecting the pod: no defaults either.
    st = pl.pre_score(CycleState(), mkpod("p"), nodes)
    assert st is not None and st.code == Code.SKIP


# ------------------------------------------------------------ system defaults


def service(name: str, selector: dict[str, str] | None, ns: str = "default") -> dict[str, Any]:
    spec: dict[str, Any] = {} if selector is None else {"selector": selector}
    return {"metadata": {"name": name, "namespace": ns}, "spec": spec}


def test_system_defaults_from_service_without_zones() -> None:
    # Nodes have no zone label: with system defaults they are not ignored; only the
    # hostname constraint (maxSkew 3) scores: 4/3/2/1 -> raw 9, 7, 6, 4 -> 44/66/77/100.
    nodes = hosts(4, 3, 2, 1)
    objects = {"services": [service("svc", {"foo": ""})]}
    got = run_score(plugin(nodes, objects), mkpod("p"), nodes)
    assert got == {"node-a": 44, "node-b": 66, "node-c": 77, "node-d": 100}


def test_system_defaults_with_zones() -> None:
    # hostname (maxSkew 3, 4 candidates: ln 6) and zone (maxSkew 5, 2 zones: ln 4).
    # zone1 = 3, zone2 = 1. raw: a 2*1.792+2 + 3*1.386+4 = 13.74 -> 14,
    # b 1.792+2+8.16 = 11.95 -> 12, x 0+2+1.386+4 = 7.39 -> 7, y 1.792+2+5.386 = 9.18 -> 9
    # -> 100*(14+7-s)/14
    nodes = zones(2, 1, 0, 1, key="topology.kubernetes.io/zone")
    objects = {"services": [service("svc", {"foo": ""})]}
    got = run_score(plugin(nodes, objects), mkpod("p"), nodes)
    assert got == {"node-a": 50, "node-b": 64, "node-x": 100, "node-y": 85}


def test_system_defaults_need_a_selecting_object() -> None:
    nodes = hosts(2, 0)
    for objects in (
        {"services": [service("svc", {"foo": "other"})]},
        {"services": [service("svc", None)]},
        {"services": [service("svc", {"foo": ""}, ns="other")]},
    ):
        st = plugin(nodes, objects).pre_score(CycleState(), mkpod("p"), nodes)
        assert st is not None and st.code == Code.SKIP, objects


def test_system_defaults_do_not_apply_to_pods_with_constraints() -> None:
    nodes = hosts(2, 0)
    objects = {"services": [service("svc", {"foo": ""})]}
    st = plugin(nodes, objects).pre_score(CycleState(), mkpod("p", constraint(1, HOST)), nodes)
    assert st is not None and st.code == Code.SKIP


def test_system_defaults_never_filter() -> None:
    nodes = hosts(5, 0)
    objects = {"services": [service("svc", {"foo": ""})]}
    _, st = plugin(nodes, objects).pre_filter(CycleState(), mkpod("p"), nodes)
    assert st is not None and st.code == Code.SKIP


@pytest.mark.parametrize(
    ("owner", "obj_kind", "obj"),
    [
        (
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "controller": True},
            "replicasets",
            {
                "spec": {
                    "selector": {
                        "matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]
                    }
                }
            },
        ),
        (
            {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "rs", "controller": True},
            "statefulsets",
            {"spec": {"selector": {"matchLabels": {"app": "web"}}}},
        ),
        (
            {"apiVersion": "v1", "kind": "ReplicationController", "name": "rs", "controller": True},
            "replicationcontrollers",
            {"spec": {"selector": {"app": "web"}}},
        ),
    ],
)
def test_system_defaults_from_controllers(
    owner: dict[str, Any], obj_kind: str, obj: dict[str, Any]
) -> None:
    web = {"app": "web"}
    nodes = [
        mknode("node-a", mkpod("a1", labels=web), mkpod("a2", labels=web), host="node-a"),
        mknode("node-b", mkpod("b1", labels={"app": "db"}), host="node-b"),
    ]
    obj = {"metadata": {"name": "rs", "namespace": "default"}, **obj}
    p = mkpod("p", labels=web, meta={"ownerReferences": [owner]})
    pl = plugin(nodes, {obj_kind: [obj]})
    # hostname only (no zones): ln 4 = 1.386, +2: raw a 2.77+2 = 4.77 -> 5, b 2 -> 100*(5+2-s)/5
    assert run_score(pl, p, nodes) == {"node-a": 40, "node-b": 100}
    # Not the controller: no default selector.
    p = mkpod("p", labels=web, meta={"ownerReferences": [{**owner, "controller": False}]})
    st = pl.pre_score(CycleState(), p, nodes)
    assert st is not None and st.code == Code.SKIP


def test_list_defaulting_with_do_not_schedule_filters() -> None:
    args = parse_args(
        {
            "defaultingType": "List",
            "defaultConstraints": [
                {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule"}
            ],
        }
    )
    nodes = zones(1, 0, 0, 0)
    objects = {"services": [service("svc", {"foo": ""})]}
    got = run_filter(plugin(nodes, objects, args), mkpod("p"), nodes)
    assert got == {"node-a": REJECT, "node-b": REJECT, "node-x": None, "node-y": None}
    # List defaulting ignores nodes without the key when scoring.
    st = plugin(nodes, objects, LIST).pre_score(CycleState(), mkpod("p"), nodes)
    assert st is not None and st.code == Code.SKIP


# ---------------------------------------------------------------------------- args


def test_parse_args_defaults() -> None:
    args = parse_args({})
    assert args == PodTopologySpreadArgs((), "System")
    pl = plugin([], args=args)
    assert pl.system_defaulted
    assert [(c.topology_key, c.max_skew) for c in pl.default_constraints] == [
        (HOST, 3),
        ("topology.kubernetes.io/zone", 5),
    ]


def test_parse_args_list() -> None:
    args = parse_args(
        {
            "defaultingType": "List",
            "defaultConstraints": [
                {
                    "maxSkew": 2,
                    "topologyKey": "example.com/rack",
                    "whenUnsatisfiable": "ScheduleAnyway",
                    "nodeTaintsPolicy": "Honor",
                }
            ],
        }
    )
    assert args.default_constraints == (
        DefaultConstraint(2, "example.com/rack", "ScheduleAnyway", 1, "Honor", "Honor"),
    )


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        ({"defaultingType": "Other"}, "defaultingType"),
        (
            {
                "defaultConstraints": [
                    {"maxSkew": 1, "topologyKey": "a", "whenUnsatisfiable": "DoNotSchedule"}
                ]
            },
            "defaultingType",
        ),
        (
            {
                "defaultingType": "List",
                "defaultConstraints": [
                    {"maxSkew": 0, "topologyKey": "a", "whenUnsatisfiable": "DoNotSchedule"}
                ],
            },
            "defaultConstraints[0].maxSkew",
        ),
        (
            {
                "defaultingType": "List",
                "defaultConstraints": [{"maxSkew": 1, "whenUnsatisfiable": "DoNotSchedule"}],
            },
            "defaultConstraints[0].topologyKey",
        ),
        (
            {
                "defaultingType": "List",
                "defaultConstraints": [
                    {"maxSkew": 1, "topologyKey": "a/b/c", "whenUnsatisfiable": "X"}
                ],
            },
            "defaultConstraints[0].topologyKey",
        ),
        (
            {
                "defaultingType": "List",
                "defaultConstraints": [
                    {"maxSkew": 1, "topologyKey": "a", "whenUnsatisfiable": "X"}
                ],
            },
            "defaultConstraints[0].whenUnsatisfiable",
        ),
        (
            {
                "defaultingType": "List",
                "defaultConstraints": [
                    {
                        "maxSkew": 1,
                        "topologyKey": "a",
                        "whenUnsatisfiable": "DoNotSchedule",
                        "labelSelector": {},
                    }
                ],
            },
            "defaultConstraints[0].labelSelector",
        ),
        (
            {
                "defaultingType": "List",
                "defaultConstraints": [
                    {"maxSkew": 1, "topologyKey": "a", "whenUnsatisfiable": "DoNotSchedule"},
                    {"maxSkew": 2, "topologyKey": "a", "whenUnsatisfiable": "DoNotSchedule"},
                ],
            },
            "defaultConstraints[1]",
        ),
        ({"bogus": 1}, "bogus"),
    ],
)
def test_parse_args_errors(raw: dict[str, Any], path: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_args(raw)
    assert err.value.path == path


def test_entry() -> None:
    assert ENTRY.name == "PodTopologySpread"
    assert ENTRY.parse_args is parse_args
    assert {"preFilter", "filter", "preScore", "score"} <= ENTRY.extension_points


# ---------------------------------------------------------------------------- events


def test_events_to_register() -> None:
    evs = plugin([]).events_to_register()
    assert [e.event.resource for e in evs] == [EventResource.POD, EventResource.NODE]
    assert evs[0].event.action & ActionType.UPDATE_POD_TOLERATION
    assert evs[1].event.action & ActionType.UPDATE_NODE_TAINT
    assert all(e.hint is not None for e in evs)


def test_pod_change_hint() -> None:
    pl = plugin([])
    p = mkpod("p", constraint(1, ZONE))
    hint = pl.is_schedulable_after_pod_change
    Q, S = QueueingHint.QUEUE, QueueingHint.SKIP
    assert hint(p, None, mkpod("a", on="n1")) == Q  # matching pod added
    assert hint(p, None, mkpod("a", labels={"x": "y"}, on="n1")) == S
    assert hint(p, None, mkpod("a")) == S  # unscheduled
    assert hint(p, None, mkpod("a", ns="other", on="n1")) == S
    assert hint(p, mkpod("a", on="n1"), None) == Q  # matching pod deleted
    old, new = mkpod("a", on="n1"), mkpod("a", labels={"x": "y"}, on="n1")
    assert hint(p, old, new) == Q  # no longer matching
    assert hint(p, old, mkpod("a", labels={"foo": "", "x": "y"}, on="n1")) == S
    # The pod's own toleration change matters only with nodeTaintsPolicy Honor.
    tol = {"tolerations": [{"key": "k", "operator": "Exists"}]}
    honor = mkpod("p", constraint(1, ZONE, nodeTaintsPolicy="Honor"))
    assert hint(honor, honor, mkpod("p", constraint(1, ZONE), spec=tol)) == Q
    assert hint(p, p, mkpod("p", constraint(1, ZONE), spec=tol)) == S


def test_node_change_hint() -> None:
    pl = plugin([])
    p = mkpod("p", constraint(1, ZONE))
    hint = pl.is_schedulable_after_node_change
    Q, S = QueueingHint.QUEUE, QueueingHint.SKIP
    z1 = node("n").label(ZONE, "z1").record()
    z2 = node("n").label(ZONE, "z2").record()
    bare = node("n").record()
    tainted = node("n").label(ZONE, "z1").taint("k").record()
    assert hint(p, None, z1) == Q
    assert hint(p, None, bare) == S
    assert hint(p, z1, None) == Q
    assert hint(p, bare, None) == S
    assert hint(p, bare, z1) == Q
    assert hint(p, z1, z2) == Q
    assert hint(p, z1, tainted) == Q
    assert hint(p, z1, node("n").label(ZONE, "z1").label("other", "x").record()) == S
