from __future__ import annotations

from typing import Any

import pytest

from kscheduler.framework import (
    ActionType,
    Code,
    CycleState,
    EventResource,
    NodeScore,
    PreFilterResult,
    QueueingHint,
)
from kscheduler.framework.args import ConfigError
from kscheduler.plugins.node_affinity import ENTRY, NodeAffinity, NodeAffinityArgs, parse_args

from ..builders import NodeBuilder, PodBuilder, expr, field_in, node, pod, term

NA = NodeAffinity(NodeAffinityArgs())
POD_REASON = "node(s) didn't match Pod's node affinity/selector"
ENFORCED_REASON = "node(s) didn't match scheduler-enforced node affinity"


def _added(raw: dict[str, Any]) -> NodeAffinity:
    return NodeAffinity(parse_args({"addedAffinity": raw}))


# ---- PreFilter -------------------------------------------------------------------------------


def test_pre_filter_skips_when_nothing_to_check() -> None:
    _, st = NA.pre_filter(CycleState(), pod("p").build(), [])
    assert st is not None and st.code == Code.SKIP


def test_pre_filter_runs_for_node_selector_or_added_affinity() -> None:
    assert NA.pre_filter(CycleState(), pod("p").node_selector(a="b").build(), []) == (None, None)
    pl = _added(
        {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [expr("a", "Exists")]
            }
        }
    )
    assert pl.pre_filter(CycleState(), pod("p").build(), []) == (None, None)


@pytest.mark.parametrize(
    ("terms", "names"),
    [
        ([field_in("n1", "n2")], {"n1", "n2"}),
        ([field_in("n1"), field_in("n3")], {"n1", "n3"}),
        # A term without metadata.name fields can match any node.
        ([field_in("n1"), expr("a", "Exists")], None),
        ([expr("a", "Exists")], None),
        # metadata.name In sets of one term are intersected.
        (
            [
                term(
                    fields=[
                        {"key": "metadata.name", "operator": "In", "values": ["n1", "n2"]},
                        {"key": "metadata.name", "operator": "In", "values": ["n2", "n3"]},
                    ]
                )
            ],
            {"n2"},
        ),
        # NotIn does not narrow.
        ([term(fields=[{"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}])], None),
    ],
)
def test_pre_filter_result(terms: list[dict[str, Any]], names: set[str] | None) -> None:
    res, st = NA.pre_filter(CycleState(), pod("p").required_terms(*terms).build(), [])
    assert st is None
    if names is None:
        assert res is None
    else:
        assert res == PreFilterResult(names)


def test_pre_filter_conflicting_names() -> None:
    t = term(
        fields=[
            {"key": "metadata.name", "operator": "In", "values": ["n1"]},
            {"key": "metadata.name", "operator": "In", "values": ["n2"]},
        ]
    )
    res, st = NA.pre_filter(CycleState(), pod("p").required_terms(t).build(), [])
    assert res is None
    assert st is not None
    assert st.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert st.message == "pod affinity terms conflict"


# ---- Filter ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("p", "n", "ok"),
    [
        (pod("p").node_selector(zone="a"), node("n").labels(zone="a"), True),
        (pod("p").node_selector(zone="a"), node("n").labels(zone="b"), False),
        (pod("p").node_selector(zone="a"), node("n"), False),
        (pod("p").node_selector(zone="a", disk="ssd"), node("n").labels(zone="a"), False),
        (pod("p").required_terms(expr("zone", "In", "a", "b")), node("n").labels(zone="b"), True),
        (pod("p").required_terms(expr("zone", "NotIn", "a")), node("n"), True),
        (pod("p").required_terms(expr("zone", "DoesNotExist")), node("n").labels(zone="a"), False),
        (pod("p").required_terms(expr("cores", "Gt", "4")), node("n").labels(cores="8"), True),
        (pod("p").required_terms(expr("cores", "Lt", "4")), node("n").labels(cores="8"), False),
        # terms are ORed
        (
            pod("p").required_terms(expr("zone", "In", "x"), expr("disk", "Exists")),
            node("n").labels(disk="ssd"),
            True,
        ),
        # nodeSelector AND required affinity
        (
            pod("p").node_selector(zone="a").required_terms(expr("disk", "Exists")),
            node("n").labels(disk="ssd"),
            False,
        ),
        (pod("p").required_terms(field_in("n")), node("n"), True),
        (pod("p").required_terms(field_in("other")), node("n"), False),
    ],
)
def test_filter(p: PodBuilder, n: NodeBuilder, ok: bool) -> None:
    st = NA.filter(CycleState(), p.build(), n.build())
    if ok:
        assert st is None
        return
    assert st is not None
    assert st.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert st.message == POD_REASON


def test_filter_added_affinity_first() -> None:
    pl = _added(
        {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [expr("pool", "In", "batch")]
            }
        }
    )
    p = pod("p").node_selector(zone="a").build()
    st = pl.filter(CycleState(), p, node("n").labels(zone="a").build())
    assert st is not None
    assert st.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert st.message == ENFORCED_REASON
    st = pl.filter(CycleState(), p, node("n").labels(pool="batch").build())
    assert st is not None and st.message == POD_REASON
    assert pl.filter(CycleState(), p, node("n").labels(pool="batch", zone="a").build()) is None


# ---- Score -----------------------------------------------------------------------------------


def _scores(pl: NodeAffinity, p: PodBuilder, *nodes: NodeBuilder) -> tuple[list[int], list[int]]:
    state = CycleState()
    infos = [n.build() for n in nodes]
    built = p.build()
    assert pl.pre_score(state, built, infos) is None
    scores = []
    for ni in infos:
        s, st = pl.score(state, built, ni)
        assert st is None
        scores.append(NodeScore(ni.name, s))
    raw = [s.score for s in scores]
    assert pl.normalize_score(state, built, scores) is None
    return raw, [s.score for s in scores]


def test_pre_score_skips_without_preferred_terms() -> None:
    st = NA.pre_score(CycleState(), pod("p").node_selector(a="b").build(), [])
    assert st is not None and st.code == Code.SKIP


def test_score_sums_matching_weights() -> None:
    p = pod("p").preferred(5, expr("zone", "In", "a")).preferred(3, expr("disk", "In", "ssd"))
    raw, norm = _scores(
        NA,
        p,
        node("n1").labels(zone="a", disk="ssd"),
        node("n2").labels(zone="a"),
        node("n3").labels(disk="hdd"),
    )
    assert raw == [8, 5, 0]
    assert norm == [100, 62, 0]  # 100 * 5 // 8 = 62


def test_score_all_zero_stays_zero() -> None:
    p = pod("p").preferred(5, expr("zone", "In", "a"))
    assert _scores(NA, p, node("n1"), node("n2")) == ([0, 0], [0, 0])


def test_score_with_added_preferred_terms() -> None:
    pl = _added(
        {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 10, "preference": expr("pool", "In", "batch")},
                {"weight": 0, "preference": expr("zone", "In", "a")},
            ]
        }
    )
    # runs even when the pod has no preferred terms; weight 0 terms count for nothing
    raw, norm = _scores(pl, pod("p"), node("n1").labels(pool="batch"), node("n2").labels(zone="a"))
    assert raw == [10, 0]
    assert norm == [100, 0]
    raw, _ = _scores(
        pl,
        pod("p").preferred(30, expr("zone", "In", "a")),
        node("n1").labels(pool="batch"),
        node("n2").labels(zone="a", pool="batch"),
    )
    assert raw == [10, 40]


# ---- args ------------------------------------------------------------------------------------


def test_parse_args_defaults() -> None:
    assert parse_args({}) == NodeAffinityArgs()
    assert parse_args({"addedAffinity": None}) == NodeAffinityArgs()


def test_parse_args_added_affinity() -> None:
    args = parse_args(
        {
            "addedAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [expr("zone", "In", "a")]
                },
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 2, "preference": expr("disk", "Exists")}
                ],
            }
        }
    )
    assert args.added_required is not None
    assert args.added_required.matches({"zone": "a"}, "n")
    assert [t.weight for t in args.added_preferred] == [2]


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        ({"bogus": 1}, "bogus"),
        ({"addedAffinity": {"bogus": 1}}, "addedAffinity.bogus"),
        ({"addedAffinity": []}, "addedAffinity"),
        (
            {
                "addedAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [expr("zone", "Near", "a")]
                    }
                }
            },
            "addedAffinity.requiredDuringSchedulingIgnoredDuringExecution"
            ".nodeSelectorTerms[0].matchExpressions[0]",
        ),
        (
            {
                "addedAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 1, "preference": expr("zone", "In")}
                    ]
                }
            },
            "addedAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]"
            ".preference.matchExpressions[0]",
        ),
    ],
)
def test_parse_args_errors(raw: dict[str, Any], path: str) -> None:
    with pytest.raises(ConfigError) as ei:
        parse_args(raw)
    assert ei.value.path == path


# ---- events ----------------------------------------------------------------------------------


def test_node_hint() -> None:
    (reg,) = NA.events_to_register()
    assert reg.event.resource is EventResource.NODE
    assert reg.event.action == ActionType.ADD | ActionType.UPDATE_NODE_LABEL
    hint = reg.hint
    assert hint is not None
    p = pod("p").node_selector(zone="a").build()
    match = node("n").labels(zone="a").record()
    miss = node("n").labels(zone="b").record()
    assert hint(p, None, match) is QueueingHint.QUEUE
    assert hint(p, None, miss) is QueueingHint.SKIP
    assert hint(p, miss, match) is QueueingHint.QUEUE
    assert hint(p, match, match) is QueueingHint.SKIP
    assert hint(p, match, miss) is QueueingHint.SKIP

    pl = _added(
        {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [expr("pool", "Exists")]
            }
        }
    )
    (reg,) = pl.events_to_register()
    assert reg.hint is not None
    assert reg.hint(p, None, match) is QueueingHint.SKIP
    assert reg.hint(p, None, node("n").labels(zone="a", pool="x").record()) is QueueingHint.QUEUE


def test_entry() -> None:
    assert ENTRY.name == "NodeAffinity"
    assert ENTRY.parse_args is parse_args
    assert ENTRY.extension_points == {"preFilter", "filter", "preScore", "score"}
