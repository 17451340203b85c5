from __future__ import annotations

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
from kscheduler.plugins.inter_pod_affinity import (
    ENTRY,
    ERR_REASON_AFFINITY_RULES_NOT_MATCH,
    ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH,
    ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH,
    PRE_FILTER_KEY,
    InterPodAffinity,
    InterPodAffinityArgs,
    parse_args,
)

from ..builders import node, pod

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
    def __init__(self, nodes: list[NodeInfo]) -> None:
        self.snapshot = FakeSnapshot(nodes)
        self.objects = FakeObjects({"namespaces": NAMESPACES})


def namespace(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}}


NAMESPACES = [
    namespace("default"),
    namespace("subteam1.team1", team="team1"),
    namespace("subteam2.team1", team="team1"),
    namespace("subteam1.team2", team="team2"),
    namespace("subteam2.team2", team="team2"),
]


def plugin(nodes: list[NodeInfo], **args: Any) -> InterPodAffinity:
    return InterPodAffinity.new(parse_args(args), FakeHandle(nodes))  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- builders


def sel(**labels: str) -> dict[str, Any]:
    return {"matchLabels": labels}


def term(
    key: str,
    selector: dict[str, Any] | None,
    *,
    namespaces: list[str] | None = None,
    ns_selector: dict[str, Any] | None = None,
) -> dict[str, Any]:
    t: dict[str, Any] = {"topologyKey": key}
    if selector is not None:
        t["labelSelector"] = selector
    if namespaces is not None:
        t["namespaces"] = namespaces
    if ns_selector is not None:
        t["namespaceSelector"] = ns_selector
    return t


def weighted(weight: int, t: dict[str, Any]) -> dict[str, Any]:
    return {"weight": weight, "podAffinityTerm": t}


REQ = "requiredDuringSchedulingIgnoredDuringExecution"
PREF = "preferredDuringSchedulingIgnoredDuringExecution"


def affinity(
    required: list[dict[str, Any]] | None = None,
    preferred: list[dict[str, Any]] | None = None,
    anti_required: list[dict[str, Any]] | None = None,
    anti_preferred: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if required or preferred:
        pa = out["podAffinity"] = {}
        if required:
            pa[REQ] = required
        if preferred:
            pa[PREF] = preferred
    if anti_required or anti_preferred:
        paa = out["podAntiAffinity"] = {}
        if anti_required:
            paa[REQ] = anti_required
        if anti_preferred:
            paa[PREF] = anti_preferred
    return out


def mkpod(
    name: str,
    aff: dict[str, Any] | None = None,
    *,
    ns: str = "default",
    on: str = "",
    **labels: str,
) -> PodInfo:
    b = pod(name, ns).labels(**labels)
    if on:
        b = b.on(on)
    raw = b.raw()
    if aff:
        raw["spec"]["affinity"] = aff
    p = parse_pod(raw)
    assert p.parse_error is None, p.parse_error
    return p


def mknode(name: str, *pods: PodInfo, **labels: str) -> NodeInfo:
    return node(name).labels(**labels).with_pods(*pods).build()


def run_filter(pl: InterPodAffinity, p: PodInfo, nodes: list[NodeInfo]) -> dict[str, Any]:
    state = CycleState()
    _, st = pl.pre_filter(state, p, nodes)
    assert st is None, st
    out: dict[str, Any] = {}
    for n in nodes:
        f = pl.filter(state, p, n)
        out[n.name] = None if f is None else (f.code, f.message)
    return out


def run_score(pl: InterPodAffinity, p: PodInfo, nodes: list[NodeInfo]) -> dict[str, int]:
    state = CycleState()
    st = pl.pre_score(state, p, nodes)
    assert st is None, st
    scores = []
    for n in nodes:
        s, err = pl.score(state, p, n)
        assert err is None
        scores.append(NodeScore(n.name, s))
    assert pl.normalize_score(state, p, scores) is None
    return {s.name: s.score for s in scores}


AFF = (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ERR_REASON_AFFINITY_RULES_NOT_MATCH)
ANTI = (Code.UNSCHEDULABLE, ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH)
EXISTING = (Code.UNSCHEDULABLE, ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH)

S1 = sel(security="S1")
S2 = sel(security="S2")


def regions(*pods_on_node1: PodInfo) -> list[NodeInfo]:
    """node1, node2 in region r1; node3 in r2; node4 without a region."""
    return [
        mknode("node1", *pods_on_node1, region="r1", zone="z1"),
        mknode("node2", region="r1", zone="z2"),
        mknode("node3", region="r2", zone="z3"),
        mknode("node4", zone="z4"),
    ]


# ---------------------------------------------------------------------------- filter


def test_required_affinity() -> None:
    nodes = regions(mkpod("s1", security="S1"))
    p = mkpod("p", affinity(required=[term("region", S1)]))
    got = run_filter(plugin(nodes), p, nodes)
    assert got == {"node1": None, "node2": None, "node3": AFF, "node4": AFF}


def test_required_affinity_all_terms_must_match_one_pod() -> None:
    # Two terms: one pod must match both; s1 and web match one each.
    nodes = regions(mkpod("s1", security="S1"), mkpod("web", app="web"))
    p = mkpod("p", affinity(required=[term("region", S1), term("zone", sel(app="web"))]))
    assert set(run_filter(plugin(nodes), p, nodes).values()) == {AFF}
    nodes = regions(mkpod("both", security="S1", app="web"))
    got = run_filter(plugin(nodes), p, nodes)
    # region r1 holds it, but the zone term needs zone z1 too.
    assert got == {"node1": None, "node2": AFF, "node3": AFF, "node4": AFF}


def test_affinity_first_pod_of_a_group_matches_itself() -> None:
    # No pod matches anywhere, the pod matches its own term: any node with the keys.
    nodes = regions(mkpod("other", security="S2"))
    p = mkpod("p", affinity(required=[term("region", S1)]), security="S1")
    got = run_filter(plugin(nodes), p, nodes)
    assert got == {"node1": None, "node2": None, "node3": None, "node4": AFF}
    # A pod that does not match its own term gets nowhere.
    p = mkpod("p", affinity(required=[term("region", S1)]), security="S3")
    assert set(run_filter(plugin(nodes), p, nodes).values()) == {AFF}
    # Once a matching pod exists somewhere, only its domain qualifies.
    nodes = [*regions(), mknode("node5", mkpod("s1", security="S1"), region="r3")]
    p = mkpod("p", affinity(required=[term("region", S1)]), security="S1")
    got = run_filter(plugin(nodes), p, nodes)
    assert got == {"node1": AFF, "node2": AFF, "node3": AFF, "node4": AFF, "node5": None}


def test_affinity_matching_pod_in_another_namespace_does_not_count() -> None:
    nodes = regions(mkpod("s1", ns="subteam1.team1", security="S1"))
    p = mkpod("p", affinity(required=[term("region", S1)]), security="S1")
    # Nothing matches in "default": the self-match rule applies.
    assert run_filter(plugin(nodes), p, nodes)["node3"] is None


@pytest.mark.parametrize(
    ("t", "want_node3"),
    [
        # namespaceSelector team=team1 resolves to both team1 namespaces: node1's pod counts.
        (term("region", S1, ns_selector=sel(team="team1")), AFF),
        # An empty namespaceSelector means every namespace.
        (term("region", S1, ns_selector={}), AFF),
        # Explicit namespaces.
        (term("region", S1, namespaces=["subteam1.team1"]), AFF),
        # team2 namespaces hold no S1 pod, and "default" is not among them: no self-match.
        (term("region", S1, ns_selector=sel(team="team2")), AFF),
    ],
)
def test_affinity_namespace_selector(t: dict[str, Any], want_node3: Any) -> None:
    nodes = regions(mkpod("s1", ns="subteam1.team1", security="S1"))
    p = mkpod("p", affinity(required=[t]), security="S1")
    got = run_filter(plugin(nodes), p, nodes)
    assert got["node3"] == want_node3
    matches = "team2" not in str(t)
    assert (got["node1"] is None) == matches


def test_required_anti_affinity() -> None:
    nodes = regions(mkpod("s1", security="S1"))
    p = mkpod("p", affinity(anti_required=[term("region", S1)]))
    got = run_filter(plugin(nodes), p, nodes)
    assert got == {"node1": ANTI, "node2": ANTI, "node3": None, "node4": None}


def test_existing_pods_anti_affinity() -> None:
    guard = mkpod("guard", affinity(anti_required=[term("zone", sel(app="web"))]), app="db")
    nodes = regions(guard)
    got = run_filter(plugin(nodes), mkpod("p", app="web"), nodes)
    assert got == {"node1": EXISTING, "node2": None, "node3": None, "node4": None}
    # Pods it does not select are welcome.
    _, st = plugin(nodes).pre_filter(CycleState(), mkpod("p", app="cache"), nodes)
    assert st is not None and st.code == Code.SKIP


def test_existing_pods_anti_affinity_with_namespace_selector() -> None:
    guard = mkpod(
        "guard",
        affinity(anti_required=[term("region", sel(app="web"), ns_selector=sel(team="team1"))]),
        ns="subteam1.team2",
        app="db",
    )
    nodes = regions(guard)
    web_team1 = mkpod("p", ns="subteam2.team1", app="web")
    got = run_filter(plugin(nodes), web_team1, nodes)
    assert got == {"node1": EXISTING, "node2": EXISTING, "node3": None, "node4": None}
    web_team2 = mkpod("p", ns="subteam2.team2", app="web")
    _, st = plugin(nodes).pre_filter(CycleState(), web_team2, nodes)
    assert st is not None and st.code == Code.SKIP


def test_affinity_checked_before_anti_affinity() -> None:
    nodes = regions(mkpod("s1", security="S1"))
    p = mkpod(
        "p",
        affinity(required=[term("region", S1)], anti_required=[term("region", S1)]),
    )
    got = run_filter(plugin(nodes), p, nodes)
    assert got == {"node1": ANTI, "node2": ANTI, "node3": AFF, "node4": AFF}


def test_pre_filter_skips_without_required_terms() -> None:
    nodes = regions(mkpod("s1", security="S1"))
    p = mkpod("p", affinity(preferred=[weighted(5, term("region", S1))]))
    _, st = plugin(nodes).pre_filter(CycleState(), p, nodes)
    assert st is not None and st.code == Code.SKIP


# ---------------------------------------------------------------- add/remove pod


def test_remove_existing_anti_affinity_pod() -> None:
    guard = mkpod("guard", affinity(anti_required=[term("zone", sel(app="web"))]), on="node1")
    nodes = regions(guard)
    pl = plugin(nodes)
    p = mkpod("p", app="web")
    state = CycleState()
    pl.pre_filter(state, p, nodes)
    sim = state.clone()
    assert pl.pre_filter_extensions().remove_pod(sim, p, guard, nodes[0]) is None
    assert pl.filter(sim, p, nodes[0]) is None
    assert pl.filter(state, p, nodes[0]) is not None  # the original state is untouched
    assert pl.add_pod(sim, p, guard, nodes[0]) is None
    assert pl.filter(sim, p, nodes[0]) is not None


def test_add_pod_satisfies_affinity_and_triggers_anti_affinity() -> None:
    nodes = regions(mkpod("s1", security="S1"))
    pl = plugin(nodes)
    p = mkpod(
        "p",
        affinity(required=[term("region", S1)], anti_required=[term("zone", sel(app="web"))]),
    )
    state = CycleState()
    pl.pre_filter(state, p, nodes)
    node3 = nodes[2]
    assert pl.filter(state, p, node3) is not None
    nominated = state.clone()
    pl.add_pod(nominated, p, mkpod("n1", security="S1", on="node3"), node3)
    assert pl.filter(nominated, p, node3) is None
    pl.add_pod(nominated, p, mkpod("n2", app="web", on="node3"), node3)
    f = pl.filter(nominated, p, node3)
    assert f is not None and (f.code, f.message) == ANTI
    pl.remove_pod(nominated, p, mkpod("n2", app="web", on="node3"), node3)
    assert pl.filter(nominated, p, node3) is None
    s = nominated.read(PRE_FILTER_KEY)
    assert s.anti_affinity_counts == {}
    assert s.affinity_counts == {"region": {"r1": 1, "r2": 1}}


def test_removing_the_only_match_restores_the_self_match_rule() -> None:
    s1 = mkpod("s1", security="S1", on="node1")
    nodes = regions(s1)
    pl = plugin(nodes)
    p = mkpod("p", affinity(required=[term("region", S1)]), security="S1")
    state = CycleState()
    pl.pre_filter(state, p, nodes)
    assert pl.filter(state, p, nodes[2]) is not None
    pl.remove_pod(state, p, s1, nodes[0])
    assert state.read(PRE_FILTER_KEY).affinity_counts == {}
    assert pl.filter(state, p, nodes[2]) is None


# ---------------------------------------------------------------------------- score

CHINA = {"region": "China"}
INDIA = {"region": "India"}
AZ1 = {"az": "az1"}
AZ2 = {"az": "az2"}

STAY_S1_REGION = affinity(preferred=[weighted(5, term("region", S1))])
STAY_S2_REGION = affinity(preferred=[weighted(6, term("region", S2))])
AWAY_S1_AZ = affinity(anti_preferred=[weighted(5, term("az", S1))])
AWAY_S2_AZ = affinity(anti_preferred=[weighted(5, term("az", S2))])
STAY_S1_AWAY_S2 = affinity(
    preferred=[weighted(8, term("region", S1))], anti_preferred=[weighted(5, term("az", S2))]
)
HARD = affinity(
    required=[
        term(
            "region",
            {"matchExpressions": [{"key": "security", "operator": "In", "values": ["S1", "v2"]}]},
        ),
        term(
            "region",
            {
                "matchExpressions": [
                    {"key": "security", "operator": "Exists"},
                    {"key": "wrongkey", "operator": "DoesNotExist"},
                ]
            },
        ),
    ]
)
MIXED = affinity(
    preferred=[
        weighted(
            8,
            term(
                "region",
                {
                    "matchExpressions": [
                        {"key": "security", "operator": "NotIn", "values": ["S1"]},
                        {"key": "security", "operator": "In", "values": ["S2"]},
                    ]
                },
            ),
        ),
        weighted(
            2,
            term(
                "region",
                {
                    "matchExpressions": [
                        {"key": "security", "operator": "Exists"},
                        {"key": "wrongkey", "operator": "DoesNotExist"},
                    ]
                },
            ),
        ),
    ]
)


def n(name: str, labels: dict[str, str], *pods: PodInfo) -> NodeInfo:
    return mknode(name, *pods, **labels)


def test_score_preferred_affinity() -> None:
    nodes = [
        n("node1", CHINA, mkpod("a", security="S1")),
        n("node2", INDIA, mkpod("b", security="S2")),
        n("node3", AZ1, mkpod("c", security="S1")),
    ]
    p = mkpod("p", STAY_S1_REGION, security="S1")
    assert run_score(plugin(nodes), p, nodes) == {"node1": 100, "node2": 0, "node3": 0}


def test_score_same_topology_value_shares_the_score() -> None:
    nodes = [
        n("node1", CHINA, mkpod("a", security="S1")),
        n("node2", {**CHINA, **AZ1}),
        n("node3", INDIA),
    ]
    p = mkpod("p", STAY_S1_REGION)
    assert run_score(plugin(nodes), p, nodes) == {"node1": 100, "node2": 100, "node3": 0}


def test_score_label_operators() -> None:
    # weight 8 term matches the S2 pod (India +8); weight 2 term matches all three:
    # China +2, India +2, az1 has no region. Raw 2, 10, 0 -> 20, 100, 0.
    nodes = [
        n("node1", CHINA, mkpod("a", security="S1")),
        n("node2", INDIA, mkpod("b", security="S2")),
        n("node3", AZ1, mkpod("c", security="S1")),
    ]
    p = mkpod("p", MIXED, security="S1")
    assert run_score(plugin(nodes), p, nodes) == {"node1": 20, "node2": 100, "node3": 0}


def test_score_symmetry_preferred() -> None:
    nodes = [
        n("node1", CHINA, mkpod("a", STAY_S1_REGION, security="S1")),
        n("node2", INDIA, mkpod("b", STAY_S2_REGION, security="S2")),
        n("node3", AZ1),
    ]
    p = mkpod("p", security="S2")
    assert run_score(plugin(nodes), p, nodes) == {"node1": 0, "node2": 100, "node3": 0}


def test_score_symmetry_with_namespace_selector() -> None:
    # The existing pod's term selects namespace subteam2.team2 and namespaces labelled
    # team1: the incoming pod's namespace subteam1.team1 matches through its labels.
    ns_term = term("region", S1, namespaces=["subteam2.team2"], ns_selector=sel(team="team1"))
    nodes = [
        n("node1", CHINA, mkpod("a", affinity(preferred=[weighted(5, ns_term)]), security="S1")),
        n("node2", INDIA, mkpod("b", STAY_S2_REGION, security="S2")),
        n("node3", AZ1),
    ]
    p = mkpod("p", ns="subteam1.team1", security="S1")
    assert run_score(plugin(nodes), p, nodes) == {"node1": 100, "node2": 0, "node3": 0}
    anti = affinity(anti_preferred=[weighted(5, ns_term)])
    nodes[0] = n("node1", CHINA, mkpod("a", anti, security="S1"))
    assert run_score(plugin(nodes), p, nodes) == {"node1": 0, "node2": 100, "node3": 100}


def test_score_existing_required_affinity_uses_hard_weight() -> None:
    nodes = [
        n("node1", CHINA, mkpod("a", HARD, security="S1")),
        n("node2", INDIA, mkpod("b", HARD, security="S2")),
        n("node3", AZ1),
    ]
    p = mkpod("p", security="S1")
    assert run_score(plugin(nodes), p, nodes) == {"node1": 100, "node2": 100, "node3": 0}
    # Weight 0 disables it: nothing left to score.
    st = plugin(nodes, hardPodAffinityWeight=0).pre_score(CycleState(), p, nodes)
    assert st is not None and st.code == Code.SKIP


def test_score_preferred_anti_affinity() -> None:
    nodes = [
        n("node1", AZ1, mkpod("a", security="S1"), mkpod("b", security="S1")),
        n("node2", INDIA, mkpod("c", security="S2")),
    ]
    p = mkpod("p", AWAY_S1_AZ, security="S1")
    assert run_score(plugin(nodes), p, nodes) == {"node1": 0, "node2": 100}
    # symmetry: the existing pods' anti-affinity against the incoming pod
    nodes = [
        n("node1", AZ1, mkpod("a", AWAY_S2_AZ, security="S1")),
        n("node2", AZ2, mkpod("b", AWAY_S1_AZ, security="S2")),
    ]
    assert run_score(plugin(nodes), mkpod("p", security="S2"), nodes) == {
        "node1": 0,
        "node2": 100,
    }


def test_score_affinity_anti_affinity_and_symmetry() -> None:
    # incoming: +8 China (S1 pod), -5 az1 (S2 pod); existing: +8 India, -5 az2.
    nodes = [
        n("node1", CHINA, mkpod("a", security="S1")),
        n("node2", AZ1, mkpod("b", security="S2")),
        n("node3", INDIA, mkpod("c", STAY_S1_AWAY_S2)),
        n("node4", AZ2, mkpod("d", AWAY_S1_AZ)),
    ]
    p = mkpod("p", STAY_S1_AWAY_S2, security="S1")
    got = run_score(plugin(nodes), p, nodes)
    assert got == {"node1": 100, "node2": 0, "node3": 100, "node4": 0}


def test_score_truncates() -> None:
    # raw 1, 2, 4 -> (s-1)*100/3 truncated: 0, 33, 100
    nodes = [
        n("node1", {"az": "a"}, mkpod("a", security="S1")),
        n("node2", {"az": "b"}, mkpod("b", security="S1"), mkpod("c", security="S1")),
        n("node3", {"az": "c"}, *(mkpod(f"d{i}", security="S1") for i in range(4))),
    ]
    p = mkpod("p", affinity(preferred=[weighted(1, term("az", S1))]))
    assert run_score(plugin(nodes), p, nodes) == {"node1": 0, "node2": 33, "node3": 100}


def test_score_preferred_namespace_selector_of_incoming_pod() -> None:
    ns_term = term("region", S1, namespaces=["subteam2.team2"], ns_selector=sel(team="team1"))
    nodes = [
        n("node1", CHINA, mkpod("a", ns="subteam1.team1", security="S1")),
        n("node2", INDIA, mkpod("b", ns="subteam2.team2", security="S1")),
        n("node3", {"region": "Japan"}, mkpod("c", ns="subteam1.team2", security="S1")),
    ]
    p = mkpod("p", affinity(preferred=[weighted(5, ns_term)]), ns="subteam1.team1")
    assert run_score(plugin(nodes), p, nodes) == {"node1": 100, "node2": 100, "node3": 0}


def test_pre_score_skips() -> None:
    nodes = [n("node1", CHINA, mkpod("a", security="S1")), n("node2", INDIA)]
    # Neither side has terms.
    st = plugin(nodes).pre_score(CycleState(), mkpod("p", security="S1"), nodes)
    assert st is not None and st.code == Code.SKIP
    # Existing preferred terms ignored on request when the incoming pod has none.
    nodes = [n("node1", CHINA, mkpod("a", STAY_S1_REGION)), n("node2", INDIA)]
    pl = plugin(nodes, ignorePreferredTermsOfExistingPods=True)
    st = pl.pre_score(CycleState(), mkpod("p", security="S1"), nodes)
    assert st is not None and st.code == Code.SKIP
    assert run_score(plugin(nodes), mkpod("p", security="S1"), nodes) == {
        "node1": 100,
        "node2": 0,
    }


# ---------------------------------------------------------------------------- args


def test_parse_args() -> None:
    assert parse_args({}) == InterPodAffinityArgs(1, False)
    assert parse_args(
        {"hardPodAffinityWeight": 100, "ignorePreferredTermsOfExistingPods": True}
    ) == InterPodAffinityArgs(100, True)
    for raw, path in (
        ({"hardPodAffinityWeight": 101}, "hardPodAffinityWeight"),
        ({"hardPodAffinityWeight": -1}, "hardPodAffinityWeight"),
        ({"hardPodAffinityWeight": "1"}, "hardPodAffinityWeight"),
        ({"ignorePreferredTermsOfExistingPods": 1}, "ignorePreferredTermsOfExistingPods"),
        ({"other": 1}, "other"),
    ):
        with pytest.raises(ConfigError) as err:
            parse_args(raw)
        assert err.value.path == path


def test_entry() -> None:
    assert ENTRY.name == "InterPodAffinity"
    assert {"preFilter", "filter", "preScore", "score"} <= ENTRY.extension_points


# ---------------------------------------------------------------------------- events


def test_events_to_register() -> None:
    evs = plugin([]).events_to_register()
    assert [e.event.resource for e in evs] == [EventResource.POD, EventResource.NODE]
    assert evs[0].event.action == ActionType.ADD | ActionType.UPDATE_POD_LABEL | ActionType.DELETE
    assert evs[1].event.action & ActionType.UPDATE_NODE_TAINT


def test_pod_change_hint() -> None:
    hint = plugin([]).is_schedulable_after_pod_change
    Q, S = QueueingHint.QUEUE, QueueingHint.SKIP
    p = mkpod("p", affinity(required=[term("region", S1)], anti_required=[term("zone", S2)]))
    assert hint(p, None, mkpod("a", on="n1", security="S1")) == Q
    assert hint(p, None, mkpod("a", on="n1", security="S2")) == S
    assert hint(p, None, mkpod("a", security="S1")) == S  # not scheduled
    assert hint(p, mkpod("a", on="n1", security="S2"), None) == Q
    assert hint(p, mkpod("a", on="n1", security="S1"), None) == S
    assert hint(p, mkpod("a", on="n1"), mkpod("a", on="n1", security="S1")) == Q
    assert hint(p, mkpod("a", on="n1", security="S2"), mkpod("a", on="n1")) == Q
    assert hint(p, mkpod("a", on="n1"), mkpod("a", on="n1", app="x")) == S


def test_node_change_hint() -> None:
    hint = plugin([]).is_schedulable_after_node_change
    p = mkpod("p", affinity(required=[term("region", S1)]))
    assert hint(p, None, node("n").labels(region="r").record()) == QueueingHint.QUEUE
    assert hint(p, None, node("n").labels(zone="z").record()) == QueueingHint.SKIP
